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
use super::{Attempt, Insert, LockedLeaf, Probe, Tree, Where};
use crate::hotspot::Hotspots;
use crate::layout::LockWord;
use crate::leaf::{home, Hop};
use crate::neighbourhood::Neighbourhood;
use crate::view::{wrap, LeafView, SlotValue};
use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;

/// Validates the READ of locked leaf `$leaf` into `$view` (a `&mut impl LeafView`) for insert
/// `$ins` and rewrites the key's entry in place if it is there (an upsert). Evaluates to an
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
                let found = match ins.probe {
                    Probe::Exact => Ok(tree.find_near(c, &*view, h, k)),
                    Probe::Full(full) => tree.resolve(c, &*view, h, k, full, None).await,
                };
                match found {
                    Err(e) => Err(e),
                    Ok(Some(i)) => {
                        let written = tree.update_in_place(c, leaf, view, i, k, ins.v).await;
                        written.map(|()| Validated::Ended(Attempt::Done))
                    }
                    Ok(None) => Ok(Validated::Insert(leaf)),
                }
            }
        }
    }};
}

/// What [`validate_or_update!`] found: the leaf, still locked, for the key to go in, or what
/// ended the attempt (the key written in place, or where to go on; the leaf unlocked).
enum Validated<'t> {
    Insert(LockedLeaf<'t>),
    Ended(Attempt),
}

impl Tree {
    /// The slot of long key `full` (leaf key `k`) in home `h`'s neighbourhood of hopscotch leaf
    /// `buf` (loaded), told apart by its block. An exact key is looked up with `find` by the
    /// caller, without making this future.
    async fn resolve<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &impl LeafView,
        h: usize,
        k: u64,
        full: &[u8],
        value: Option<&mut Vec<u8>>,
    ) -> IndexResult<Option<usize>> {
        let span = self.leaf.span;
        c.compute(Work::KeyCompare, self.leaf.h as u64);
        let slots = (0..self.leaf.h).map(|d| wrap(h + d, span));
        self.resolve_long(c, buf, slots, k, full, value).await
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
                    Probe::Full(full) => self.resolve(c, &buf, h, k, full, Some(value)).await?,
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
            let leaf = match validate_or_update!(self, c, ins, leaf, &mut nb)? {
                Validated::Insert(leaf) => leaf,
                Validated::Ended(a) => return Ok(a),
            };
            let am_key = self.argmax_key(&nb, lw);
            if let Some(e) = nb.insert_near(h, k, v) {
                // The slots changed are h and e: both their buckets' bits are brought up to date
                // (h's may have been left stale by an insert whose window ended inside it).
                let argmax = self.argmax_after(&nb, lw.argmax, am_key, k, || e);
                let new = LockWord { full: nb.vacancy_after(lw.full, &[h, e]), argmax };
                self.write_back(c, leaf, &nb, (h, self.leaf.dist(h, e) + 1), new).await?;
                return Ok(Attempt::Done);
            }
            // The free slot the bitmap shows is before the home (the window ends with the
            // neighbourhood): the whole leaf.
            let buf = self.read_slots(c, cur, 0, s).await?;
            return self.hop_in(c, ins, cur, leaf, buf, am_key).await;
        }
        let mut buf = self.read_slots(c, cur, lo, n).await?;
        let leaf = match validate_or_update!(self, c, ins, leaf, &mut *buf)? {
            Validated::Insert(leaf) => leaf,
            Validated::Ended(a) => return Ok(a),
        };
        let am_key = self.argmax_key(&*buf, lw);
        self.hop_in(c, ins, cur, leaf, buf, am_key).await
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

    /// Update (`Some(v)`: the entry rewritten in place) or delete (`None`: the entry, its home's
    /// hop bit and its vacancy bit cleared) under the leaf's lock; returns whether the key
    /// existed.
    pub(super) async fn hopscotch_modify<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        v: Option<[u8; 8]>,
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
                let leaf = self.lock_hopscotch_leaf(c, cur).await?;
                await_neighbourhood!(self, c, cur, h, buf)?;
                let found = match probe {
                    Probe::Exact => self.find_near(c, &buf, h, k),
                    Probe::Full(full) => self.resolve(c, &buf, h, k, full, None).await?,
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
