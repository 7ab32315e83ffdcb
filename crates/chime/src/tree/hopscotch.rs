//! Point operations on a hopscotch leaf. A key lives within H slots of its home, its
//! neighbourhood, so a search READs one neighbourhood (after a speculative READ of one hot entry,
//! when enabled) and, not finding the key, checks the home's hop bitmap against the keys read.
//! An insert locks the leaf, READs from the home's bucket to the first bucket the vacancy bitmap
//! shows with a free slot, and hops that slot into the neighbourhood; when no hop can, the leaf
//! splits (`smo`). When that bucket lies within the neighbourhood (most inserts), the READ is
//! a neighbourhood's window and the key goes in without a hop, as a hop that moves nothing
//! would put it. An update rewrites one entry; a delete clears it with its hop bit and its
//! vacancy bit.

use super::leaf_io::{await_neighbourhood, await_window, PooledLeaf};
use super::{Attempt, Change, InLeaf, Insert, LockedLeaf, Probe, Resolved, Tree, Where};
use crate::collision;
use crate::hotspot::Hotspots;
use crate::layout::{LockWord, MAX_H};
use crate::leaf::{home, Hop};
use crate::neighbourhood::Neighbourhood;
use crate::view::{wrap, LeafView, SlotValue};
use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use smallvec::SmallVec;

/// Validates the READ of locked leaf `$leaf` into `$view` (a `&mut impl LeafView`) for insert
/// `$ins` and rewrites the key's entry in place if it is there (an upsert; a long key's, or
/// its group, as [`Tree::long_upsert`] does). Evaluates to an
/// `IndexResult` of a [`Validated`], which the caller matches and returns by itself: the macro
/// never leaves the caller. A macro, so that the window's and the whole-leaf buffer's paths
/// share it without a future of its own between them and the verbs: as an async fn returning
/// the same it cost 47 instructions an insert (7157 → 7204, callgrind; `docs/perf.md`,
/// thirteenth round).
macro_rules! validate_or_update {
    ($tree:expr, $c:expr, $ins:expr, $leaf:expr, $view:expr) => {{
        let (tree, c, ins, view) = ($tree, $c, $ins, $view);
        match tree.validate_insert(c, ins, $leaf, &*view).await {
            Err(e) => Err(e),
            Ok(Err(next)) => Ok(Validated::Ended(next)),
            Ok(Ok(leaf)) => {
                let (k, h) = (ins.k, tree.home_of(c, ins.k));
                match ins.probe {
                    Probe::Exact => match tree.find_near(c, &*view, h, k) {
                        Some(i) => {
                            let written = tree.update_in_place(c, leaf, view, i, k, ins.v).await;
                            written.map(|()| Validated::Ended(Attempt::Done))
                        }
                        None => Ok(Validated::Insert(leaf, None)),
                    },
                    Probe::Full(full) => tree.long_upsert(c, leaf, view, h, (k, full), ins.v).await,
                }
            }
        }
    }};
}

/// What [`validate_or_update!`] found: the leaf, still locked, for the key to go in (with the
/// value slot to insert instead of the key's own when the key forms its prefix's collision
/// group: the group's), or what ended the attempt (the key written in place, or where to go
/// on; the leaf unlocked).
enum Validated<'t> {
    Insert(LockedLeaf<'t>, Option<[u8; 8]>),
    Ended(Attempt),
}

impl Tree {
    /// Where long key `full` (leaf key `k`) is in home `h`'s neighbourhood of hopscotch leaf
    /// `buf` (loaded): [`Tree::resolve_long`]. An exact key is looked up with `find` by the
    /// caller, without making this future.
    async fn resolve<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &impl LeafView,
        h: usize,
        (k, full): (u64, &[u8]),
        scratch: &mut Vec<u8>,
        value: bool,
    ) -> IndexResult<Resolved> {
        c.compute(Work::KeyCompare, self.leaf.h as u64);
        self.resolve_long(c, buf, self.near(h), (k, full), scratch, value).await
    }

    /// The slots of home `h`'s neighbourhood.
    fn near(&self, h: usize) -> impl Iterator<Item = usize> + Clone {
        let span = self.leaf.span;
        (0..self.leaf.h).map(move |d| wrap(h + d, span))
    }

    /// A long key's upsert in locked leaf `leaf` (READ into `view`, validated): its entry or
    /// its group record rewritten if it is there, else the key added to its prefix's group.
    /// Else the leaf is returned for a plain insert, or, when [`collision::plain_limit`]
    /// entries share the prefix already, for the insert of an entry naming the group they and
    /// the key form (written first): that entry goes in as any key does (hops, a split), and
    /// the plain entries it shadows are cleared later, under another lock
    /// ([`Tree::tidy_group`]), since a READ torn across one WRITE that named the group and
    /// cleared them could see neither.
    async fn long_upsert<'t, T: Transport>(
        &'t self,
        c: &Client<T>,
        leaf: LockedLeaf<'t>,
        view: &mut impl LeafView,
        h: usize,
        (k, full): (u64, &[u8]),
        v: [u8; 8],
    ) -> IndexResult<Validated<'t>> {
        let mut scratch = self.group_bufs.get(c, Vec::new);
        let found = self.resolve(c, &*view, h, (k, full), &mut scratch, false).await;
        let (found, leaf) = self.or_unlock(c, leaf, found).await?;
        let (entry, record) = match found {
            Resolved::Entry(i) => {
                self.update_in_place(c, leaf, view, i, k, v).await?;
                return Ok(Validated::Ended(Attempt::Done));
            }
            Resolved::InGroup { entry, slot_at, .. } => (entry, Some(slot_at)),
            Resolved::Absent { group: Some(entry), .. } => (entry, None),
            Resolved::Absent { group: None, plain }
                if plain >= collision::plain_limit(&self.leaf) =>
            {
                let slots: SmallVec<[usize; MAX_H]> =
                    self.near(h).filter(|&i| view.key(i) == k).collect();
                let group = self.post_new_group(c, leaf.addr.node(), &*view, &slots, full, v);
                let (group, leaf) = self.or_unlock(c, leaf, group.await).await?;
                return Ok(Validated::Insert(leaf, Some(group)));
            }
            Resolved::Absent { .. } => return Ok(Validated::Insert(leaf, None)),
        };
        let group = (entry, view.value(entry), &scratch[..]);
        let change = self.write_in_group(c, leaf.addr, group, (full, record), Some(v)).await;
        let (change, leaf) = self.or_unlock(c, leaf, change).await?;
        self.finish_in_group(c, leaf, view, h, k, change).await?;
        Ok(Validated::Ended(Attempt::Done))
    }

    /// Ends a write in prefix `k`'s collision group (home `h`) in locked leaf `leaf`, READ
    /// into `view`: the change [`Tree::write_in_group`] left, and the plain entries of the
    /// prefix the group shadows cleared with their hop bits and vacancy bits, in one WRITE that
    /// unlocks the leaf (just the unlock when nothing changed). The cleared entries' keys are
    /// in the group, which wins over them; their bits leave only in this WRITE, so a reader
    /// torn across it and the one that put the group's entry in finds a hop bit over an empty
    /// slot and retries.
    async fn finish_in_group<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        view: &mut impl LeafView,
        h: usize,
        k: u64,
        change: InLeaf,
    ) -> IndexResult<()> {
        let mut lw = leaf.lw;
        let mut modified = SmallVec::<[usize; MAX_H + 1]>::new();
        let shadowed: SmallVec<[usize; MAX_H]> = self
            .near(h)
            .filter(|&i| view.key(i) == k && collision::group_of(view.value(i)).is_none())
            .collect();
        let silent = self.keep_shadowed_silent(c, leaf, change, !shadowed.is_empty());
        let (change, leaf) = silent.await?;
        let dropped = match change {
            InLeaf::Name(e, slot) => {
                view.set_entry(e, k, slot);
                view.bump_ev(e);
                modified.push(e);
                None
            }
            InLeaf::Drop(e) => Some(e),
            InLeaf::Nothing => None,
        };
        for i in shadowed.iter().copied().chain(dropped) {
            modified.extend(view.remove(h, i));
            lw.full &= !(1 << self.leaf.bucket(i));
        }
        if modified.is_empty() {
            return self.unlock_leaf(c, leaf).await;
        }
        modified.sort_unstable();
        modified.dedup();
        let span = self.span_of(h, &modified);
        self.write_back(c, leaf, view, span, lw).await
    }

    /// Hotness-aware speculative read through hotspot buffer `hs`: READ only the hottest
    /// buffered slot of exact key k's neighbourhood whose fingerprint matches; a whole entry
    /// holding k is k's value at that instant (see [`crate::hotspot`]). Long keys are not
    /// speculated on (their blocks would need reading).
    async fn speculate<'t, T: Transport>(
        &'t self,
        c: &Client<T>,
        hs: &Hotspots,
        leaf: GlobalAddr,
        h: usize,
        k: u64,
        nb: &mut Neighbourhood<'t>,
    ) -> IndexResult<Option<SlotValue>> {
        // Each probe of the hotspot buffer (the lookup, then the hit's touch or the miss's
        // forget) is one table probe; the entry READ is one key compared.
        c.compute(Work::TableProbe, 1);
        let Some(slot) = hs.best(leaf, h, k) else {
            return Ok(None);
        };
        hs.attempts.bump(c.ordinal());
        let read = self.read_entry(c, leaf, slot, nb).await?;
        c.compute(Work::TableProbe, 1);
        if read && {
            c.compute(Work::KeyCompare, 1);
            nb.key(slot) == k
        } {
            hs.hits.bump(c.ordinal());
            hs.touch(leaf, h, slot, k);
            return Ok(Some(SlotValue(nb.value(slot))));
        }
        hs.forget(leaf, h, slot);
        Ok(None)
    }

    /// Search: neighbourhood READ, three-level validation, sibling-based validation.
    pub(super) async fn hopscotch_search<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        probe: Probe<'_>,
        value: &mut Vec<u8>,
    ) -> IndexResult<Option<(SlotValue, bool)>> {
        let h = self.home_of(c, k);
        let mut buf = self.neighbourhood(h);
        // Restarts, and READs that caught a hop in flight (the first at `hop_since`).
        let mut attempts = Attempts::new();
        let mut hop_since = None;
        'outer: loop {
            let loc = match self.blink.cached(c, k) {
                Some(loc) => loc,
                None => self.blink.descend(c, k).await?,
            };
            let (mut cur, mut moves) = (loc.leaf, Attempts::new());
            // Speculation needs a hotspot buffer and an exact key: checked here, so that no
            // future is made without them. Likewise an exact key is looked up without
            // `resolve`'s future.
            if let (Some(hs), Probe::Exact) = (&self.hotspots, probe) {
                if let Some(v) = self.speculate(c, hs, cur, h, k, &mut buf).await? {
                    return Ok(Some((v, false)));
                }
            }
            loop {
                await_neighbourhood!(self, c, cur, h, buf)?;
                let found = match probe {
                    Probe::Exact => self.find_near(c, &buf, h, k),
                    Probe::Full(full) => {
                        match self.resolve(c, &buf, h, (k, full), value, true).await? {
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
                    if let Some(hs) = &self.hotspots {
                        c.compute(Work::TableProbe, 1);
                        hs.touch(cur, h, i, k);
                    }
                    return Ok(Some((SlotValue(buf.value(i)), matches!(probe, Probe::Full(_)))));
                }
                // The hop bitmap is rebuilt by hashing every key of the neighbourhood.
                c.compute(Work::KeyHash, self.leaf.h as u64);
                if buf.status(h) != buf.bitmap(h) {
                    // A hop is in flight: what we read is an intermediate state.
                    attempts.failed(cur, "leaf hop bitmap")?;
                    self.retry();
                    // Boxed: the rare lock future stays out of every search's state.
                    if Tree::overdue(c, &mut hop_since) {
                        Box::pin(self.unstick(c, cur)).await?;
                    }
                    continue;
                }
                match self.judge(&loc, &buf, k) {
                    Where::Absent => return Ok(None),
                    Where::Stale => {
                        attempts.failed(cur, "leaf sibling or fences")?;
                        self.blink.invalidate(&loc);
                        continue 'outer;
                    }
                    // Half split: the key may have moved right.
                    Where::Right(sib) if self.walk_on(c, &loc, sib, &mut moves).await? => cur = sib,
                    Where::Right(_) => {
                        attempts.failed(cur, "leaf chain")?;
                        continue 'outer;
                    }
                }
            }
        }
    }

    /// One insert attempt on hopscotch leaf `cur`: lock, READ from k's home bucket to the first
    /// bucket with a vacancy, validate, then update in place, hop the key in, or split. When
    /// the vacancy bitmap shows a free slot within the neighbourhood (most inserts), the READ
    /// lands in a neighbourhood's window, as a search's does, and the key goes in without a hop.
    pub(super) async fn hopscotch_insert_at<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        cur: GlobalAddr,
    ) -> IndexResult<Attempt> {
        let s = self.leaf.span;
        let Insert { k, v, .. } = *ins;
        let h = self.home_of(c, k);
        let leaf = self.lock_hopscotch_leaf(c, cur).await?;
        let lw = leaf.lw;
        let (lo, n) = self.leaf.insert_read(h, lw.full);
        if let Some(plan) = self.insert_plans[h].as_ref().filter(|p| p.count == n) {
            let mut nb = Neighbourhood::new(self.leaf, plan);
            await_window!(self, c, cur, plan, nb)?;
            let (leaf, group) = match validate_or_update!(self, c, ins, leaf, &mut nb)? {
                Validated::Insert(leaf, group) => (leaf, group),
                Validated::Ended(a) => return Ok(a),
            };
            let v = group.unwrap_or(v);
            let am_key = self.argmax_key(&nb, lw);
            if let Some(e) = nb.insert_near(h, k, v) {
                // The slots changed are h and e: both their buckets' bits are brought up to date
                // (h's may have been left stale by an insert whose window ended inside it).
                let argmax = self.argmax_after(&nb, lw.argmax, am_key, k, || e);
                let new = LockWord { full: nb.vacancy_after(lw.full, &[h, e]), argmax };
                self.write_back(c, leaf, &nb, (h, self.leaf.dist(h, e) + 1), new).await?;
                return Ok(done(group));
            }
            // The free slot the bitmap shows is before the home (the window ends with the
            // neighbourhood): the whole leaf.
            let buf = self.read_slots(c, cur, 0, s).await?;
            let ins = Insert { v, ..*ins };
            return Ok(grouped(group, self.hop_in(c, &ins, cur, leaf, buf, am_key).await?));
        }
        let mut buf = self.read_slots(c, cur, lo, n).await?;
        let (leaf, group) = match validate_or_update!(self, c, ins, leaf, &mut *buf)? {
            Validated::Insert(leaf, group) => (leaf, group),
            Validated::Ended(a) => return Ok(a),
        };
        let am_key = self.argmax_key(&*buf, lw);
        let ins = Insert { v: group.unwrap_or(v), ..*ins };
        Ok(grouped(group, self.hop_in(c, &ins, cur, leaf, buf, am_key).await?))
    }

    /// Inserts absent key `ins.k` into locked leaf `leaf` (at `cur`), READ into `buf`, by
    /// hopping; READs the whole leaf first if `buf` holds no empty slot from the home on, and
    /// splits it if no hop places the key. `am_key` is the key the lock word's argmax named
    /// before (if read).
    async fn hop_in<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        cur: GlobalAddr,
        leaf: LockedLeaf<'_>,
        mut buf: PooledLeaf<'_>,
        am_key: Option<u64>,
    ) -> IndexResult<Attempt> {
        let (s, k, v) = (self.leaf.span, ins.k, ins.v);
        let mut outcome = buf.hop_insert(k, v);
        if outcome == Hop::NoEmpty && !buf.all_loaded() {
            buf = self.read_slots(c, cur, 0, s).await?;
            outcome = buf.hop_insert(k, v);
        }
        match outcome {
            Hop::Done(modified) => {
                let (lw, h) = (leaf.lw, home(k, s));
                let at = || buf.find(h, k).expect("just inserted");
                let argmax = self.argmax_after(&*buf, lw.argmax, am_key, k, at);
                let full = buf.vacancy_after(lw.full, &modified);
                let new = LockWord { full, argmax };
                let span = self.span_of(h, &modified);
                self.write_back_buf(c, leaf, &mut buf, span, new).await?;
                Ok(Attempt::Done)
            }
            Hop::NoEmpty | Hop::NoHop => {
                if !buf.all_loaded() {
                    buf = self.read_slots(c, cur, 0, s).await?;
                }
                let placed = self.split_leaf(c, ins, leaf, &mut buf).await?;
                Ok(if placed { Attempt::Done } else { Attempt::Restart })
            }
        }
    }

    /// The argmax after key `k` went into `buf` (at the slot `at` gives), kept lazily: `k`'s
    /// slot if `k` is larger than the old argmax's key `am_key` (or that slot was empty), else
    /// the old key's slot, followed if a hop moved it.
    fn argmax_after(
        &self,
        buf: &impl LeafView,
        argmax: usize,
        am_key: Option<u64>,
        k: u64,
        at: impl FnOnce() -> usize,
    ) -> usize {
        match am_key {
            Some(m) if m == 0 || k > m => at(),
            // Only a hop moves a key, and a hop's slots were all read.
            Some(m) if buf.key(argmax) != m => {
                buf.find(home(m, self.leaf.span), m).unwrap_or(argmax)
            }
            _ => argmax,
        }
    }

    /// Under the leaf's lock, [`Change::Update`] (the entry rewritten in place) or
    /// [`Change::Delete`] (the entry, its home's hop bit and its vacancy bit cleared); a long
    /// key in its prefix's collision group is changed there ([`Tree::write_in_group`]) and the
    /// plain entries the group shadows are cleared in the same WRITE. Returns whether the key
    /// existed. [`Change::Tidy`] only clears the shadowed entries of long key `probe`'s group
    /// (and says whether it found the group).
    pub(super) async fn hopscotch_modify<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        change: Change,
        probe: Probe<'_>,
    ) -> IndexResult<bool> {
        let h = self.home_of(c, k);
        let mut buf = self.neighbourhood(h);
        let mut restarts = Attempts::new();
        'outer: loop {
            let loc = match self.blink.cached(c, k) {
                Some(loc) => loc,
                None => self.blink.descend(c, k).await?,
            };
            let (mut cur, mut moves) = (loc.leaf, Attempts::new());
            loop {
                let mut leaf = self.lock_hopscotch_leaf(c, cur).await?;
                await_neighbourhood!(self, c, cur, h, buf)?;
                let found = match probe {
                    Probe::Exact => self.find_near(c, &buf, h, k),
                    Probe::Full(full) => {
                        let mut scratch = self.group_bufs.get(c, Vec::new);
                        let found = self.resolve(c, &buf, h, (k, full), &mut scratch, false).await;
                        let (found, locked) = self.or_unlock(c, leaf, found).await?;
                        leaf = locked;
                        if let Some((e, record)) = found.group() {
                            // The prefix's group is here, so its keys are (a prefix lives in
                            // one leaf): a key absent from it is absent.
                            let existed = record.is_some();
                            let v = match change {
                                Change::Update(v) => Some(v),
                                Change::Delete | Change::Tidy => None,
                            };
                            let at = (e, buf.value(e), &scratch[..]);
                            let in_leaf = match (change, record) {
                                (Change::Tidy, _) | (_, None) => Ok(InLeaf::Nothing),
                                _ => self.write_in_group(c, leaf.addr, at, (full, record), v).await,
                            };
                            let (in_leaf, leaf) = self.or_unlock(c, leaf, in_leaf).await?;
                            self.finish_in_group(c, leaf, &mut buf, h, k, in_leaf).await?;
                            return Ok(existed || change == Change::Tidy);
                        }
                        // A tidy finds no entry to change: its prefix's group was met above.
                        match found {
                            Resolved::Entry(i) if change != Change::Tidy => Some(i),
                            _ => None,
                        }
                    }
                };
                let v = match change {
                    Change::Update(v) => Some(v),
                    Change::Delete | Change::Tidy => None,
                };
                if let Some(i) = found {
                    if let (Some(hs), Some(_)) = (&self.hotspots, v) {
                        c.compute(Work::TableProbe, 1);
                        hs.touch(cur, h, i, k);
                    }
                    match v {
                        Some(v) => self.update_in_place(c, leaf, &mut buf, i, k, v).await?,
                        None => {
                            let modified = buf.remove(h, i);
                            let full = leaf.lw.full & !(1 << self.leaf.bucket(i));
                            let lw = LockWord { full, ..leaf.lw };
                            let span = self.span_of(h, &modified);
                            self.write_back(c, leaf, &buf, span, lw).await?;
                        }
                    }
                    return Ok(true);
                }
                self.unlock_leaf(c, leaf).await?;
                match self.judge(&loc, &buf, k) {
                    Where::Absent => return Ok(false),
                    Where::Stale => {
                        restarts.failed(cur, "leaf sibling or fences")?;
                        self.blink.invalidate(&loc);
                        continue 'outer;
                    }
                    Where::Right(sib) if self.walk_on(c, &loc, sib, &mut moves).await? => {
                        self.retry();
                        cur = sib;
                    }
                    Where::Right(_) => {
                        restarts.failed(cur, "leaf chain")?;
                        continue 'outer;
                    }
                }
            }
        }
    }

    /// The slots `modified` (all within `h ..` circularly) as (lo, n).
    fn span_of(&self, h: usize, modified: &[usize]) -> (usize, usize) {
        let l = &self.leaf;
        let first = modified.iter().map(|&i| l.dist(h, i)).min().expect("non-empty");
        let last = modified.iter().map(|&i| l.dist(h, i)).max().expect("non-empty");
        (wrap(h + first, l.span), last - first + 1)
    }
}

/// An insert done: [`Attempt::Grouped`] when it put in the entry of a group it formed.
fn done(group: Option<[u8; 8]>) -> Attempt {
    grouped(group, Attempt::Done)
}

/// `a`, or [`Attempt::Grouped`] for [`Attempt::Done`] when the insert formed a group.
fn grouped(group: Option<[u8; 8]>, a: Attempt) -> Attempt {
    match (group, a) {
        (Some(_), Attempt::Done) => Attempt::Grouped,
        (_, a) => a,
    }
}
