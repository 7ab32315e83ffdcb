//! Sherman's sorted leaf (`hopscotch=0`, the all-off variant of the paper's factor analysis).
//!
//! # Layout
//!
//! One 26-byte header (version | valid | sibling | low fence | high fence), then `span` sorted
//! 17-byte entries (version | key | value) packed from slot 0, then the lock word and the upper
//! bound as in CHIME's leaf ([`crate::layout`]). Cache-line versions cover the header and
//! entries exactly as in a hopscotch leaf.
//!
//! # Protocol
//!
//! Every operation READs the whole leaf (the read amplification CHIME removes). Readers check
//! cache-line versions, one node-level version over all objects, and that the key lies within
//! the fences (else the cached parent was stale, or a split moved the key right). Writers lock
//! the leaf. An update rewrites one entry with its entry-level version bumped; an insert or a
//! delete shifts entries, so it bumps the node-level version of every object and rewrites the
//! whole leaf (unlocking it in the same WRITE): a reader that sees some old and some new lines
//! sees two node-level versions and retries. A full leaf splits at its median; the new sibling
//! is written before the old leaf points to it.

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;

use crate::leaf::LeafBuf;
use crate::tree::sorted_write::Moves;
use crate::tree::{Attempt, Insert, LockedLeaf, Probe, Tree, Where};
use crate::view::{LeafView, SlotValue};

impl Tree {
    /// The slot of long key `full` (leaf key `k`) in sorted leaf `buf` (whole): every entry
    /// sharing the prefix, told apart by its block. An exact key is binary-searched by the
    /// caller, without making this future.
    async fn sorted_resolve<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &LeafBuf,
        k: u64,
        full: &[u8],
        value: Option<&mut Vec<u8>>,
    ) -> IndexResult<Option<usize>> {
        let n = buf.sorted_len();
        c.compute(Work::KeyCompare, n as u64);
        self.resolve_long(c, buf, 0..n, k, full, value).await
    }

    /// Search: READ the whole leaf, validate, binary search.
    pub(crate) async fn sorted_search<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        probe: Probe<'_>,
        value: &mut Vec<u8>,
    ) -> IndexResult<Option<(SlotValue, bool)>> {
        let mut restarts = Attempts::new();
        'outer: loop {
            let loc = match self.blink.cached(c, k) {
                Some(loc) => loc,
                None => self.blink.descend(c, k).await?,
            };
            let (mut cur, mut moves) = (loc.leaf, Attempts::new());
            loop {
                let buf = self.read_whole_unlocked(c, cur).await?;
                let found = match probe {
                    Probe::Exact => self.sorted_find(c, &buf, k),
                    Probe::Full(full) => self.sorted_resolve(c, &buf, k, full, Some(value)).await?,
                };
                if let Some(i) = found {
                    return Ok(Some((SlotValue(buf.value(i)), matches!(probe, Probe::Full(_)))));
                }
                match self.judge(&loc, &*buf, k) {
                    Where::Absent => return Ok(None),
                    Where::Right(sib) if self.walk_on(c, &loc, sib, &mut moves).await? => cur = sib,
                    Where::Right(_) => {
                        restarts.failed(cur, "leaf chain")?;
                        continue 'outer;
                    }
                    Where::Stale => {
                        restarts.failed(cur, "leaf fences")?;
                        self.blink.invalidate(&loc);
                        continue 'outer;
                    }
                }
            }
        }
    }

    /// One insert attempt on leaf `cur`: lock, READ it whole, update in place, shift-insert, or
    /// split.
    pub(crate) async fn sorted_insert_at<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        cur: GlobalAddr,
    ) -> IndexResult<Attempt> {
        let s = self.leaf.span;
        let Insert { k, v, probe, .. } = *ins;
        let leaf = self.lock_leaf(c, cur).await?;
        let mut buf = self.read_slots(c, cur, 0, s).await?;
        let leaf = match self.validate_insert(c, ins, leaf, &*buf).await? {
            Ok(leaf) => leaf,
            Err(next) => return Ok(next),
        };
        let found = match probe {
            Probe::Exact => self.sorted_find(c, &buf, k),
            Probe::Full(full) => self.sorted_resolve(c, &buf, k, full, None).await?,
        };
        if let Some(i) = found {
            self.update_in_place(c, leaf, &mut *buf, i, k, v).await?;
            return Ok(Attempt::Done);
        }
        let (at, compared) = buf.sorted_search_compares(k);
        let at = at.unwrap_or_else(|i| i);
        c.compute(Work::KeyCompare, compared);
        if buf.sorted_len() < s {
            buf.sorted_insert(at, k, v);
            self.rewrite_sorted_leaf(c, leaf, &mut buf, Moves::Right).await?;
            return Ok(Attempt::Done);
        }
        self.sorted_split(c, ins, leaf, &mut buf, at).await
    }

    /// Writes locked leaf `leaf` whole after a shift (an insert's entries move right, a
    /// delete's left) under a new node-level version, unlocking it with the last of its pieces
    /// ([`crate::tree::sorted_write`]).
    async fn rewrite_sorted_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        moves: Moves,
    ) -> IndexResult<()> {
        buf.bump_node_version();
        let high = buf.fences().expect("whole leaf").1;
        let lw = leaf.lw;
        self.write_sorted_image(c, leaf, buf, (lw, high), moves).await
    }

    /// Splits full, locked leaf `leaf` at the median of its keys and inserts `ins`'s pair
    /// (placed at `at`); keys sharing an 8-byte prefix stay together. A left half that takes
    /// the pair (shifting its entries) and would not fit the first piece of the leaf's rewrite
    /// splits without it, and the insert starts over ([`crate::tree::sorted_write`]: only then does no prefix of the
    /// rewrite lose a key).
    async fn sorted_split<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        at: usize,
    ) -> IndexResult<Attempt> {
        let kv = (ins.k, ins.v);
        let s = self.leaf.span;
        let mut all: Vec<(u64, [u8; 8])> = (0..s).map(|i| (buf.key(i), buf.value(i))).collect();
        all.insert(at, kv);
        let mut placed = true;
        let mut cut = median_cut(&all);
        // Only a new pair that lands in the left half shifts its entries.
        if matches!(cut, Some(m) if at < m && !self.left_half_fits(m)) {
            all.remove(at);
            match median_cut(&all) {
                Some(m) => (cut, placed) = (Some(m), false),
                // Every old key shares one prefix, so the cut with the new pair is at 1 or at
                // the end: no old entry of the left half moves, and that split is safe.
                None => all.insert(at, kv),
            }
        }
        let Some(cut) = cut else {
            let n = all.len();
            self.unlock_leaf(c, leaf).await?;
            return Err(IndexError::Full(format!(
                "all {n} keys of a leaf share the 8-byte prefix {:016x}",
                kv.0
            )));
        };
        let (leaf, right_addr) = self.alloc_split_leaf(c, leaf).await?;
        self.splits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.keys_at_split.fetch_add(s as u64, std::sync::atomic::Ordering::Relaxed);
        let (sib, _) = buf.meta().expect("whole leaf");
        let (low, high) = buf.fences().expect("whole leaf");
        let left_max = all[cut - 1].0;
        let mut right = self.empty_leaf_buf(c);
        for (i, &(x, y)) in all[cut..].iter().enumerate() {
            right.set_entry(i, x, y);
        }
        right.set_sibling(sib);
        right.set_fences(left_max + 1, high);
        let left = all[..cut].iter().copied().chain(std::iter::repeat((0, [0; 8])));
        for (i, (x, y)) in left.take(s).enumerate() {
            buf.set_entry(i, x, y);
        }
        buf.set_sibling(right_addr);
        buf.set_fences(low, left_max);
        buf.bump_node_version();
        self.write_sorted_halves(c, leaf, (right_addr, &mut right, high), (buf, left_max)).await?;
        self.blink.insert_internal(c, 1, left_max + 1, right_addr, ins.loc.parent).await?;
        Ok(if placed { Attempt::Done } else { Attempt::Restart })
    }

    /// Update (`Some(v)`: one entry rewritten) or delete (`None`: shift left, whole leaf
    /// rewritten); returns whether the key existed.
    pub(crate) async fn sorted_modify<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        v: Option<[u8; 8]>,
        probe: Probe<'_>,
    ) -> IndexResult<bool> {
        let mut restarts = Attempts::new();
        'outer: loop {
            let loc = match self.blink.cached(c, k) {
                Some(loc) => loc,
                None => self.blink.descend(c, k).await?,
            };
            let (mut cur, mut moves) = (loc.leaf, Attempts::new());
            loop {
                let leaf = self.lock_leaf(c, cur).await?;
                let mut buf = self.read_slots(c, cur, 0, self.leaf.span).await?;
                let found = match probe {
                    Probe::Exact => self.sorted_find(c, &buf, k),
                    Probe::Full(full) => self.sorted_resolve(c, &buf, k, full, None).await?,
                };
                if let Some(i) = found {
                    match v {
                        Some(v) => self.update_in_place(c, leaf, &mut *buf, i, k, v).await?,
                        None => {
                            buf.sorted_remove(i);
                            self.rewrite_sorted_leaf(c, leaf, &mut buf, Moves::Left).await?;
                        }
                    }
                    return Ok(true);
                }
                self.unlock_leaf(c, leaf).await?;
                match self.judge(&loc, &*buf, k) {
                    Where::Absent => return Ok(false),
                    Where::Right(sib) if self.walk_on(c, &loc, sib, &mut moves).await? => cur = sib,
                    Where::Right(_) => {
                        restarts.failed(cur, "leaf chain")?;
                        continue 'outer;
                    }
                    Where::Stale => {
                        restarts.failed(cur, "leaf fences")?;
                        self.blink.invalidate(&loc);
                        continue 'outer;
                    }
                }
            }
        }
    }
}

/// Where a full sorted leaf's pairs `all` (with the new one) divide: the left half's length,
/// nearest the median without parting keys that share an 8-byte prefix; `None` if they all do.
fn median_cut(all: &[(u64, [u8; 8])]) -> Option<usize> {
    let n = all.len();
    (n / 2..n).chain((1..n / 2).rev()).find(|&m| all[m - 1].0 != all[m].0)
}
