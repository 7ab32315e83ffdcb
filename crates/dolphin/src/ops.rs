//! Search, insert, update and delete: pathfinding to the key's leaf, the leaf protocol
//! ([`crate::sync`]) there, backtracking when the leaf no longer covers the key, and the split
//! of a full leaf.
//!
//! # Pathfinding
//!
//! 1. Walk the CN cache's copies from the root, by exact partial keys above depth 7 and by floor
//!    at depth 7. A copy of the key's special node names a leaf: go there (one READ in all).
//! 2. Otherwise descend afresh from the deepest copy ([`dmindex_prim::radix::Tree::locate`]):
//!    the special node read afresh names the leaf by floor; no special node for the key's prefix
//!    (an empty slot, or a prefix the key leaves) means the key is absent, or, for an insert,
//!    that the prefix is new ([`crate::special`]).
//! 3. Judge the leaf image: `lo ≤ key ≤ hi` decides. `key > hi` means the leaf split after the
//!    special node's image was taken: **backtrack** — drop the cached copy and go to 2, which
//!    reads the special node afresh (writers first leave the leaf they entered). `key < lo` and
//!    another prefix cannot come out of a floor in the key's own special node: corrupt.
//!
//! # Split (the insert found the leaf full)
//!
//! [`crate::smo::compact_or_split`] claims and drains the leaf; with too many live pairs to
//! compact, `Dolphin::split` writes the new leaf (born claimed) with a fresh READ of the
//! special node in one doorbell, CASes it into the node (`Dolphin::publish`), then rewrites the
//! old leaf (the next epoch, `hi` lowered), turns the inserted key live if it moved, and releases
//! both leaves, all in one doorbell: the new leaf is on the old one's memory node. The new leaf's
//! born record names the splitter until that doorbell clears it, after the release
//! (`crate::recovery` rolls a split forward whose splitter died).

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::radix::node::Lookup;
use dmindex_prim::radix::slot::Child;
use dmindex_prim::radix::{At, Kind, NodeImage, Pos};
use dmindex_prim::spear::{self, Born, Claimed, Held, Panel};

use crate::leaf::{Judge, BORN, SPEAR};
use crate::smo::{self, Frame, Pairs, Smo, SplitImages};
use crate::sync::{self, search_image_reported, Write};
use crate::{bump, smo_redo, Dolphin, ROOT_KIND, SPECIAL_DEPTH};

/// Where a key's leaf is.
#[derive(Debug)]
pub(crate) enum Route {
    /// The leaf a special node names for the key by floor; the node and its kind.
    Leaf { leaf: GlobalAddr, special: GlobalAddr, kind: Kind },
    /// No special node for the key's prefix: where the descent (all nodes read afresh) ended.
    NoPrefix(Pos),
}

fn corrupt(what: &str, key: u64) -> IndexError {
    IndexError::Corrupt(format!("dolphin: {what} for key {key:#018x}"))
}

impl Dolphin {
    /// The key's leaf: from the cache's copy of its special node if there is one, else by a
    /// descent reading afresh what is not cached.
    pub(crate) async fn route<T: Transport>(&self, c: &Client<T>, key: u64) -> IndexResult<Route> {
        let kb = key.to_be_bytes();
        let w = self.cache.walk_with(self.root, ROOT_KIND, &kb, Some(SPECIAL_DEPTH));
        c.compute(Work::RadixStep, w.probes);
        if let (Some(copy), Some((_, s))) = (&w.copy, w.slot) {
            if let (SPECIAL_DEPTH, Some(Child::Leaf { addr, .. })) =
                (copy.header.depth as usize, s.child())
            {
                self.counters.cache_hits.bump(c.ordinal());
                return Ok(Route::Leaf { leaf: addr, special: w.node, kind: w.kind });
            }
        }
        let pos = self.tree().locate(c, &kb, true).await?;
        match pos.at {
            At::Slot(Lookup::Found(_, s)) if pos.depth() == SPECIAL_DEPTH => match s.child() {
                Some(Child::Leaf { addr, .. }) => {
                    Ok(Route::Leaf { leaf: addr, special: pos.node, kind: pos.img.header.kind })
                }
                _ => Err(corrupt("a special node names no leaf", key)),
            },
            At::Slot(Lookup::Found(..)) => Err(corrupt("a leaf above depth 7", key)),
            At::Slot(_) if pos.depth() == SPECIAL_DEPTH => {
                Err(corrupt("a special node with no leaf at or below the key", key))
            }
            _ => Ok(Route::NoPrefix(pos)),
        }
    }

    /// The leaf a route led to has split since: forget the special node's copy.
    fn backtrack(&self, special: GlobalAddr) {
        bump(&self.counters.backtracks);
        self.cache.invalidate(special);
    }

    pub(crate) async fn search_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        self.counters.searches.bump(c.ordinal());
        let mut buf = self.leaf_buf(c);
        // Multi-line cells caught mid-write, and backtracks.
        let (mut attempts, mut torn_reads) = (Attempts::new(), 0);
        loop {
            let (leaf, special) = match self.route(c, key).await? {
                Route::NoPrefix(_) => return Ok(false),
                Route::Leaf { leaf, special, .. } => (leaf, special),
            };
            let sc = &self.counters.sync;
            let img = sync::read_checked(c, &self.shape, leaf, &mut buf, sc, self).await?;
            match img.judge(key) {
                Judge::Here => match search_image_reported(c, &img, key, out) {
                    Some(found) => return Ok(found),
                    None => {
                        let torn = sync::torn_lock(&img, Some(key));
                        attempts.failed(leaf, "leaf's multi-line cell")?;
                        bump(&self.counters.sync.torn_reads);
                        torn_reads += 1;
                        if let Some((j, head)) = torn.filter(|_| torn_reads >= sync::SETTLE_AFTER) {
                            let sc = &self.counters.sync;
                            sync::settle(c, &self.shape, leaf, j, head, &mut buf, sc, self).await?;
                        }
                    }
                },
                Judge::Right => {
                    attempts.failed(leaf, "leaf fences")?;
                    self.backtrack(special)
                }
                Judge::Left | Judge::OtherPrefix => return Err(corrupt("a floor overshot", key)),
            }
        }
    }

    /// Leaves a leaf entered for a key it does not cover; whether to go on (backtrack).
    async fn left<T: Transport>(
        &self,
        c: &Client<T>,
        held: Held,
        judge: Judge,
        special: GlobalAddr,
        key: u64,
    ) -> IndexResult<()> {
        held.leave_now(c).await?;
        match judge {
            Judge::Right => {
                self.backtrack(special);
                Ok(())
            }
            _ => Err(corrupt("a floor overshot", key)),
        }
    }

    pub(crate) async fn insert_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        value: &[u8],
    ) -> IndexResult<()> {
        let (shape, sc) = (&self.shape, &self.counters.sync);
        let mut buf = self.leaf_buf(c);
        // Backtracks (not an SMO's claim, which is waited out).
        let mut backtracks = Attempts::new();
        // Judges counts that never leave a full leaf, across this insert's splits.
        let mut panel = Panel::new();
        loop {
            let (leaf, special, kind) = match self.route(c, key).await? {
                Route::NoPrefix(pos) => {
                    if self.add_prefix(c, &pos, key, value).await? {
                        return Ok(());
                    }
                    bump(&self.counters.retries);
                    continue;
                }
                Route::Leaf { leaf, special, kind } => (leaf, special, kind),
            };
            sync::adopt(c, shape, leaf.node(), &mut buf, sc, self).await?;
            match sync::upsert(c, shape, leaf, key, value, &mut buf, sc, self).await? {
                Write::Done(()) => return Ok(()),
                Write::Elsewhere(held, j) => {
                    self.left(c, held, j, special, key).await?;
                    backtracks.failed(leaf, "leaf fences")?;
                }
                Write::Again => bump(&self.counters.retries),
                Write::Full(held) => {
                    let (polls, p) = (self.polls, &mut panel);
                    let smo = smo::compact_or_split(
                        c, shape, leaf, held, key, value, &mut buf, polls, p, self,
                    );
                    match smo.await? {
                        Smo::Compacted => {
                            bump(&self.counters.compactions);
                            return Ok(());
                        }
                        Smo::Split { claimed, pairs, at, frame } => {
                            let to = Split { leaf, special, kind, frame };
                            return self.split(c, to, claimed, &pairs, at, key).await;
                        }
                        Smo::Again => bump(&self.counters.smo_retries),
                        Smo::GaveUp => {
                            bump(&self.counters.smo_retries);
                            // Unclaimed, so the leaf's other writers go on: a split retried at
                            // once would keep the leaf claimed nearly all the time while a
                            // count stays in it. Dead counts are dropped here once judged.
                            let word = leaf.add(SPEAR as u64);
                            spear::wait_drain(c, word, leaf, polls, &mut panel, self).await?;
                        }
                    }
                }
            }
        }
    }

    /// Splits the claimed leaf `to.leaf` (pairs `..at` stay, `at..` move), `key` being the
    /// insert that found it full.
    async fn split<T: Transport>(
        &self,
        c: &Client<T>,
        to: Split,
        claimed: Claimed,
        pairs: &Pairs,
        at: usize,
        key: u64,
    ) -> IndexResult<()> {
        let Published { mut plan, new, slot } = self.split_publish(c, &to, pairs, at, key).await?;
        // The old leaf's rewrite, out of place first when longer than a packet (`smo_redo`).
        let area = match &self.smo_scratch {
            Some(s) => Some(s.area(c, &self.shape, to.leaf.node()).await?),
            None => None,
        };
        let named = area.map(|a| smo_redo::name(&mut plan.old, a));
        // The old leaf's rewrite (never its first 16 bytes: the rev hint and the Spear word),
        // the new leaf's rev hint, the moved key's cell turned live, then both releases (each
        // FAA followed by the WRITE that says it is done: the intent, the born record).
        let rev = slot.raw().to_le_bytes();
        let cell = plan.new_cell.map(|(at, line)| (new.add(at as u64), line));
        let release = claimed.release(c);
        let [old_faa, old_done] = release.ops();
        let [new_faa, new_done] = Born::new(new.add(SPEAR as u64), new.add(BORN as u64)).release();
        let mut ops = Vec::with_capacity(10);
        ops.extend(smo_redo::rewrite(to.leaf, &plan.old, area.zip(named.as_ref())));
        ops.push(BatchOp::Write { addr: new, data: &rev });
        if let Some((addr, bytes)) = &cell {
            ops.push(BatchOp::Write { addr: *addr, data: bytes });
        }
        ops.extend([old_faa, old_done, new_faa, new_done]);
        c.batch(&mut ops).await?;
        bump(&self.counters.splits);
        Ok(())
    }

    /// The first part of a split: the new leaf written (born claimed, its born record naming
    /// this client) with a fresh READ of the special node, then published in it.
    pub(crate) async fn split_publish<T: Transport>(
        &self,
        c: &Client<T>,
        to: &Split,
        pairs: &Pairs,
        at: usize,
        key: u64,
    ) -> IndexResult<Published> {
        let shape = &self.shape;
        let plan = SplitImages::plan(shape, &to.frame, pairs, at, key, Born::record(c));
        let new = c.alloc_on(to.leaf.node(), shape.bytes as u64, 64).await?;
        let mut nb = [0u8; Kind::N256.bytes()];
        let nb = &mut nb[..to.kind.bytes()];
        if to.special.node() == new.node() {
            let mut ops = [
                BatchOp::Write { addr: new, data: &plan.new },
                BatchOp::Read { addr: to.special, buf: &mut *nb },
            ];
            c.batch(&mut ops).await?;
        } else {
            c.write(new, &plan.new).await?;
            c.read(to.special, &mut *nb).await?;
        }
        let img = NodeImage::decode(nb, to.kind)
            .ok_or_else(|| corrupt("no special node where the route named one", key))?;
        let slot = self.publish(c, to.special, img, plan.at_key, new).await?;
        Ok(Published { plan, new, slot })
    }

    pub(crate) async fn update_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        value: &[u8],
    ) -> IndexResult<bool> {
        let (shape, sc) = (&self.shape, &self.counters.sync);
        self.on_present(c, key, async |leaf, buf: &mut [u8]| {
            sync::update(c, shape, leaf, key, value, buf, sc, self).await
        })
        .await
    }

    pub(crate) async fn delete_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
    ) -> IndexResult<bool> {
        let (shape, sc) = (&self.shape, &self.counters.sync);
        self.on_present(c, key, async |leaf, buf: &mut [u8]| {
            sync::delete(c, shape, leaf, key, buf, sc, self).await
        })
        .await
    }

    /// Runs `op`, a write of a key that must be present (an update or a delete), on the key's
    /// leaf until it is done, backtracking while the leaf a route names no longer covers the
    /// key; `false` when the key's prefix has no leaf.
    async fn on_present<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
        op: impl AsyncFn(GlobalAddr, &mut [u8]) -> IndexResult<Write<bool>>,
    ) -> IndexResult<bool> {
        let mut buf = self.leaf_buf(c);
        // Backtracks (not an SMO's claim, which is waited out).
        let mut backtracks = Attempts::new();
        loop {
            let (leaf, special) = match self.route(c, key).await? {
                Route::NoPrefix(_) => return Ok(false),
                Route::Leaf { leaf, special, .. } => (leaf, special),
            };
            let sc = &self.counters.sync;
            sync::adopt(c, &self.shape, leaf.node(), &mut buf, sc, self).await?;
            match op(leaf, &mut buf).await? {
                Write::Done(found) => return Ok(found),
                Write::Elsewhere(held, j) => {
                    self.left(c, held, j, special, key).await?;
                    backtracks.failed(leaf, "leaf fences")?;
                }
                Write::Again => bump(&self.counters.retries),
                Write::Full(held) => {
                    held.leave_now(c).await?;
                    return Err(corrupt("an update or a delete asked for room", key));
                }
            }
        }
    }
}

/// The leaf a split works on, and the special node that named it.
pub(crate) struct Split {
    pub(crate) leaf: GlobalAddr,
    pub(crate) special: GlobalAddr,
    pub(crate) kind: Kind,
    pub(crate) frame: Frame,
}

/// A split's new leaf, published: its images, its address and the slot that names it.
pub(crate) struct Published {
    plan: SplitImages,
    pub(crate) new: GlobalAddr,
    slot: GlobalAddr,
}
