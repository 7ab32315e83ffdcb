//! Point operations: find the key's leaf through the B-link levels ([`dmindex_prim::blink`]),
//! then search it, or write it through [`crate::write`].
//!
//! # Finding the leaf
//!
//! A cached level-1 parent names the leaf at once; otherwise the descent READs internal nodes.
//! The leaf's fences decide ([`crate::leaf::LeafImage::judge`]): a key above `high` came through
//! a cached parent that predates a split (drop it, descend again) or, through a parent just
//! read, is in a half split (move right along the sibling). A key below `low` means a wrong path:
//! descend again.

use std::cell::Cell;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Located;
use dmindex_prim::counter::bump;
use dmindex_prim::spear::Panel;

use crate::leaf::Judge;
use crate::write::{self, Write};
use crate::Marlin;

/// Where a route goes after a leaf turned the key away.
enum Next {
    Leaf(GlobalAddr),
    Descend,
}

impl Marlin {
    /// After `judge` turned the key away from a leaf reached through `loc`: the next leaf, or a
    /// fresh descent (with the stale cached parent dropped).
    async fn next<T: Transport>(
        &self,
        c: &Client<T>,
        loc: &Located,
        judge: Judge,
        moves: &mut Attempts,
    ) -> IndexResult<Next> {
        match judge {
            Judge::Right(sib) if loc.cached.is_none() => {
                bump(&self.counters.moves_right);
                if self.blink.walk_on(c, loc, moves).await? {
                    return Ok(Next::Leaf(sib));
                }
                Ok(Next::Descend)
            }
            Judge::Here => unreachable!("the leaf holds the key"),
            _ => {
                self.blink.invalidate(loc);
                Ok(Next::Descend)
            }
        }
    }

    /// The value of `key` into `out`, if present: READ leaf, READ item (2 round trips warm).
    pub(crate) async fn search_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        let mut buf = self.leaf_buf(c);
        // Descents again: leaves whose fences turned the key away.
        let mut restarts = Attempts::new();
        'descend: loop {
            let loc = self.blink.locate(c, key).await?;
            let (mut cur, mut moves) = (loc.leaf, Attempts::new());
            loop {
                let img = write::read(c, &self.shape, cur, &mut buf, &self.counters.write).await?;
                let item = match img.judge(key) {
                    Judge::Here => img.find_reported(c, key).and_then(|j| img.ptr(j).item()),
                    j => match self.next(c, &loc, j, &mut moves).await? {
                        Next::Leaf(a) => {
                            cur = a;
                            continue;
                        }
                        Next::Descend => {
                            restarts.failed(cur, "leaf fences")?;
                            continue 'descend;
                        }
                    },
                };
                let Some(item) = item else { return Ok(false) };
                // Items are immutable: the one the image names holds the key's value then.
                if !self.items.value_into(c, item, Some(&key.to_be_bytes()), out).await? {
                    return Err(IndexError::Corrupt(format!(
                        "item {item} in the leaf at {cur} does not hold its key {key:#x}"
                    )));
                }
                return Ok(true);
            }
        }
    }

    /// Runs a leaf write `op(leaf, parent, buf)` on the key's leaf until it is done: moving
    /// right or descending again when the leaf turns the key away or an SMO held it.
    async fn write_loop<T: Transport, R>(
        &self,
        c: &Client<T>,
        key: u64,
        op: impl AsyncFn(GlobalAddr, Option<GlobalAddr>, &mut [u8]) -> IndexResult<Write<R>>,
    ) -> IndexResult<R> {
        let mut buf = self.leaf_buf(c);
        // Descents again: leaves whose fences turned the key away (not an SMO's claim, which
        // is waited out).
        let mut restarts = Attempts::new();
        'descend: loop {
            let loc = self.blink.locate(c, key).await?;
            let (mut cur, mut moves) = (loc.leaf, Attempts::new());
            loop {
                match op(cur, loc.parent, &mut buf).await? {
                    Write::Done(r) => return Ok(r),
                    Write::Elsewhere(held, judge) => {
                        held.leave_now(c).await?;
                        match self.next(c, &loc, judge, &mut moves).await? {
                            Next::Leaf(a) => cur = a,
                            Next::Descend => {
                                restarts.failed(cur, "leaf fences")?;
                                continue 'descend;
                            }
                        }
                    }
                    Write::Full(held) => {
                        held.leave_now(c).await?;
                        return Err(IndexError::Corrupt("a full leaf outside an insert".into()));
                    }
                    Write::Again => {
                        self.blink.retry();
                        continue 'descend;
                    }
                }
            }
        }
    }

    /// Insert (upsert): three round trips warm; a full leaf is compacted or split.
    pub(crate) async fn insert_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        value: &[u8],
    ) -> IndexResult<()> {
        let w = self.writer();
        // Judges counts that never leave a full leaf, across this insert's SMOs (taken out of
        // the cell for each SMO and put back after).
        let panel = Cell::new(Panel::new());
        self.write_loop(c, key, async |leaf, parent, buf: &mut [u8]| {
            match w.upsert(c, leaf, key, value, buf).await? {
                Write::Full(held) => {
                    let mut p = panel.take();
                    let smo = self.smo(c, leaf, parent, held, key, value, buf, &mut p).await;
                    panel.set(p);
                    smo
                }
                other => Ok(other),
            }
        })
        .await
    }

    /// Update: whether the key had a value.
    pub(crate) async fn update_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        value: &[u8],
    ) -> IndexResult<bool> {
        let w = self.writer();
        self.write_loop(c, key, async |leaf, _, buf: &mut [u8]| {
            w.update(c, leaf, key, value, buf).await
        })
        .await
    }

    /// Delete: whether the key had a value.
    pub(crate) async fn delete_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
    ) -> IndexResult<bool> {
        let w = self.writer();
        self.write_loop(c, key, async |leaf, _, buf: &mut [u8]| w.delete(c, leaf, key, buf).await)
            .await
    }
}
