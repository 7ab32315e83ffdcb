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
use smallvec::SmallVec;

use crate::collision;
use crate::leaf::LeafBuf;
use crate::tree::sorted_write::Moves;
use crate::tree::{Attempt, InLeaf, Insert, LockedLeaf, Probe, Resolved, Tree, Where};
use crate::view::{LeafView, SlotValue};

impl Tree {
    /// Where long key `full` (leaf key `k`) is in sorted leaf `buf` (whole): every entry
    /// sharing the prefix, [`Tree::resolve_long`]. An exact key is binary-searched by the
    /// caller, without making this future.
    async fn sorted_resolve<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &LeafBuf,
        (k, full): (u64, &[u8]),
        scratch: &mut Vec<u8>,
        value: bool,
    ) -> IndexResult<Resolved> {
        let n = buf.sorted_len();
        c.compute(Work::KeyCompare, n as u64);
        self.resolve_long(c, buf, 0..n, (k, full), scratch, value).await
    }

    /// Forms the group of prefix `k` in locked leaf `leaf` (READ whole into `buf`) from its
    /// plain entries of the prefix and key `full` (value slot `v`): the group posted, then the
    /// first entry names it, the others leave (a shift left), and the leaf is rewritten under
    /// a new node version, as a delete's shift is ([`crate::collision`]).
    async fn sorted_form_group<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        (k, full): (u64, &[u8]),
        v: [u8; 8],
    ) -> IndexResult<()> {
        let n = buf.sorted_len();
        let slots: Vec<usize> = (0..n).filter(|&i| buf.key(i) == k).collect();
        let group = self.post_new_group(c, leaf.addr.node(), &*buf, &slots, full, v).await;
        let (group, leaf) = self.or_unlock(c, leaf, group).await?;
        buf.set_entry(slots[0], k, group);
        for &i in slots[1..].iter().rev() {
            buf.sorted_remove(i);
        }
        self.rewrite_sorted_leaf(c, leaf, buf, Moves::Left).await?;
        self.groups_formed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Ends a write in prefix `k`'s collision group in locked sorted leaf `leaf` (READ whole
    /// into `buf`): the change [`Tree::write_in_group`] left, and any plain entries of the
    /// prefix the group shadows removed (only a rewrite cut short by a dying writer leaves
    /// them). A copy named by its entry alone is one entry's WRITE; an entry leaving is a shift
    /// left under a new node version; nothing to change is the unlock.
    async fn sorted_finish_in_group<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        k: u64,
        change: InLeaf,
    ) -> IndexResult<()> {
        let n = buf.sorted_len();
        let shadowed = |buf: &LeafBuf, i: usize| {
            buf.key(i) == k && collision::group_of(buf.value(i)).is_none()
        };
        let mut leaving: SmallVec<[usize; 16]> = (0..n).filter(|&i| shadowed(buf, i)).collect();
        let silent = self.keep_shadowed_silent(c, leaf, change, !leaving.is_empty());
        let (change, leaf) = silent.await?;
        match change {
            InLeaf::Name(e, slot) if leaving.is_empty() => {
                return self.update_in_place(c, leaf, buf, e, k, slot).await
            }
            InLeaf::Nothing if leaving.is_empty() => return self.unlock_leaf(c, leaf).await,
            InLeaf::Name(e, slot) => buf.set_entry(e, k, slot),
            InLeaf::Drop(e) => leaving.push(e),
            InLeaf::Nothing => {}
        }
        leaving.sort_unstable();
        for &i in leaving.iter().rev() {
            buf.sorted_remove(i);
        }
        self.rewrite_sorted_leaf(c, leaf, buf, Moves::Left).await
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
                    Probe::Full(full) => {
                        match self.sorted_resolve(c, &buf, (k, full), value, true).await? {
                            Resolved::Entry(i) => Some(i),
                            // The key's block, which holds its value, is READ by the caller.
                            Resolved::InGroup { slot, .. } => {
                                return Ok(Some((SlotValue(slot), false)))
                            }
                            Resolved::Absent { .. } => None,
                        }
                    }
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
        let leaf = match probe {
            Probe::Exact => match self.sorted_find(c, &buf, k) {
                Some(i) => {
                    self.update_in_place(c, leaf, &mut *buf, i, k, v).await?;
                    return Ok(Attempt::Done);
                }
                None => leaf,
            },
            Probe::Full(full) => {
                let mut scratch = self.group_bufs.get(c, Vec::new);
                let found = self.sorted_resolve(c, &buf, (k, full), &mut scratch, false).await;
                let (found, leaf) = self.or_unlock(c, leaf, found).await?;
                let in_group = match found {
                    Resolved::Entry(i) => {
                        self.update_in_place(c, leaf, &mut *buf, i, k, v).await?;
                        return Ok(Attempt::Done);
                    }
                    Resolved::InGroup { entry, slot_at, .. } => Some((entry, Some(slot_at))),
                    Resolved::Absent { group: Some(entry), .. } => Some((entry, None)),
                    Resolved::Absent { group: None, plain }
                        if plain >= collision::plain_limit(&self.leaf) =>
                    {
                        self.sorted_form_group(c, leaf, &mut buf, (k, full), v).await?;
                        return Ok(Attempt::Done);
                    }
                    Resolved::Absent { .. } => None,
                };
                match in_group {
                    None => leaf,
                    Some((entry, record)) => {
                        let at = (entry, buf.value(entry), &scratch[..]);
                        let change =
                            self.write_in_group(c, leaf.addr, at, (full, record), Some(v)).await;
                        let (change, leaf) = self.or_unlock(c, leaf, change).await?;
                        self.sorted_finish_in_group(c, leaf, &mut buf, k, change).await?;
                        return Ok(Attempt::Done);
                    }
                }
            }
        };
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
            // A leaf keeps at most half its span of entries of one prefix (past that, a
            // collision group), so this is a leaf that breaks that rule.
            let n = all.len();
            self.unlock_leaf(c, leaf).await?;
            return Err(IndexError::Corrupt(format!(
                "all {n} entries of a leaf share the 8-byte prefix {:016x}",
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
                let mut leaf = self.lock_leaf(c, cur).await?;
                let mut buf = self.read_slots(c, cur, 0, self.leaf.span).await?;
                let found = match probe {
                    Probe::Exact => self.sorted_find(c, &buf, k),
                    Probe::Full(full) => {
                        let mut scratch = self.group_bufs.get(c, Vec::new);
                        let found = self.sorted_resolve(c, &buf, (k, full), &mut scratch, false);
                        let (found, locked) = self.or_unlock(c, leaf, found.await).await?;
                        leaf = locked;
                        if let Some((e, record)) = found.group() {
                            // The prefix's group is here, so its keys are: a key absent from
                            // it is absent.
                            let in_leaf = match record {
                                None => Ok(InLeaf::Nothing),
                                Some(_) => {
                                    let at = (e, buf.value(e), &scratch[..]);
                                    self.write_in_group(c, leaf.addr, at, (full, record), v).await
                                }
                            };
                            let (in_leaf, leaf) = self.or_unlock(c, leaf, in_leaf).await?;
                            self.sorted_finish_in_group(c, leaf, &mut buf, k, in_leaf).await?;
                            return Ok(record.is_some());
                        }
                        match found {
                            Resolved::Entry(i) => Some(i),
                            _ => None,
                        }
                    }
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
