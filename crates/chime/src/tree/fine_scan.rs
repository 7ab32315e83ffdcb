//! Fine-grained scans (the paper's §4.4): a scan READs a leaf whole only when its keys cover the
//! leaf's whole range; of a leaf it covers in part, it READs only the neighbourhoods of the
//! integer keys it wants there (the home of each, H entries on), merged where they overlap and,
//! greedily, across gaps while a READ stays within half a leaf. The leaves and their ranges come
//! from the cached parents, and one doorbell READs them all (up to [`LEAVES`] leaves and
//! [`MAX_BATCH`] READs a round).
//!
//! # Why what it returns is right
//!
//! The scan speaks for the integer keys `[s, e]` it planned in each leaf and for nothing else:
//! * **The leaf still covers `[s, e]`**: its parent said so when cached; sibling-based
//!   validation (the leaf's sibling is the one the parent expects) or, with fence keys, its
//!   fences show it has not split since. Otherwise the cached parent is dropped and the round
//!   is planned again from `s`; a leaf that still fails under the parent read afresh is in a
//!   half split (the separator not yet, or never, in the parent: a splitter may die between
//!   its two steps), and the scan goes on from `s` by whole leaves along the sibling chain.
//! * **Each key of `[s, e]` it holds was READ**: hopscotch puts a key within H entries of its
//!   home, and every such window was READ, in one doorbell, and validated as a search's is:
//!   cache-line versions, one node-level version over everything READ of the leaf, and, for a
//!   key not found, its home's hop bitmap rebuilt from the keys READ (a hop in flight shows as
//!   a difference, and the leaf is READ again).
//!
//! So each key of `[s, e]` is returned with the value it had, or left out because it was
//! absent, at the moment its leaf was READ, within the scan — the scan's per-key guarantee
//! (as for whole leaves). The leaves of a round are READ together, not atomically; neither are
//! the whole leaves of an untrimmed scan.
//!
//! # Scans by count
//!
//! The paper's scans (and its YCSB E) are integer ranges `[k, k + n)` over dense keys. A scan of
//! `n` pairs from `k` wants the first `n` keys from `k`, which are `[k, k + n)` only where keys
//! are dense. So it plans `[k, k + n)` and trims only leaves whose range could be dense (at most
//! twice as many integers as slots); it stops trimming at the first leaf that is not, and when
//! `[k, k + n)` held fewer than `n` keys, the rest comes from whole leaves from `k + n` on
//! ([`Tree::scan_on`]). A range scan `[lo, hi)` is exactly the paper's, with no such guess.

use std::ops::Range;

use arrayvec::ArrayVec;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Internal;
use dmindex_prim::cacheline::phys_range;
use dmindex_prim::doorbell;
use dmindex_prim::node_cache::Cached;
use dmindex_prim::work::bisect_compares;
use smallvec::SmallVec;

use super::leaf_io::{at_least, PooledLeaf};
use super::scan::ScanScratch;
use super::Tree;
use crate::leaf::SLACK;
use crate::view::{home, wrap, LeafView};

/// Most leaves a round READs in one doorbell.
pub(super) const LEAVES: usize = 4;

/// Decoded ranges of one leaf a round READs.
type Ranges = ArrayVec<(usize, usize), MAX_BATCH>;

/// One leaf of a round: where it is, the range its cached parent gives it, the part of the
/// scan's keys in it, and what to READ of it.
#[derive(Clone, Debug)]
pub(crate) struct Trim {
    addr: GlobalAddr,
    /// The sibling the parent expects, and the parent (low fence, address) to drop if stale.
    expected: GlobalAddr,
    parent: (u64, GlobalAddr),
    /// The scan's keys in this leaf, inclusive.
    s: u64,
    e: u64,
    /// READ whole, or these runs of slots (`ScanScratch::runs`) with each key's home
    /// (`ScanScratch::homes`, one per key of `s ..= e` from `homes_at`).
    whole: bool,
    runs: Range<usize>,
    homes_at: usize,
}

/// How planning a round from `pos` went.
enum Planned {
    /// `s.trims` holds the round's leaves (at least one).
    Leaves,
    /// No cached parent covers `pos`.
    Uncached,
    /// The leaf of `pos` is not worth trimming (sparse keys): scan whole leaves from `pos`.
    Whole,
}

/// Where a fine-grained scan stopped.
pub(crate) enum Trimmed {
    /// Every key of the planned range is in `s.pairs`.
    Done,
    /// Keys from `pos` on (past those in `s.pairs`) are still wanted: whole leaves go on.
    From(u64),
}

impl Tree {
    /// Pairs with key in `[from, end]` (inclusive), ascending, appended to `s.pairs` by
    /// fine-grained READs (see the module docs); `dense` for a scan by count, which trims only
    /// leaves whose range could be dense. Where it stops short of `end`, the caller goes on
    /// with whole leaves ([`Tree::scan_on`]).
    pub(crate) async fn scan_fine<T: Transport>(
        &self,
        c: &Client<T>,
        from: u64,
        end: u64,
        dense: bool,
        s: &mut ScanScratch,
    ) -> IndexResult<Trimmed> {
        let mut pos = from;
        // Rounds planned again because a leaf had split since its parent was cached.
        let mut restarts = Attempts::new();
        let mut descended = false;
        // The start of the last leaf found not to cover its keys: its parent was dropped then.
        let mut stale_at = None;
        'round: loop {
            match self.plan_round(c, pos, end, dense, s) {
                Planned::Leaves => descended = false,
                Planned::Whole => return Ok(Trimmed::From(pos)),
                // Once: a remote descent caches the parent, unless the leaf is the root or
                // the cache keeps nothing.
                Planned::Uncached if descended => return Ok(Trimmed::From(pos)),
                Planned::Uncached => {
                    descended = true;
                    self.blink.descend(c, pos).await?;
                    continue;
                }
            }
            let mut leaves = self.read_round(c, s).await?;
            for i in 0..s.trims.len() {
                let t = s.trims[i].clone();
                let at = s.pairs.len();
                let (mut hops, mut hop_since) = (Attempts::new(), None);
                let fresh = loop {
                    match self.take_leaf_keys(c, &leaves[i], &t, s) {
                        Took::Keys => break true,
                        Took::Stale => break false,
                        Took::HopInFlight => {
                            s.pairs.truncate(at);
                            hops.failed(t.addr, "leaf hop bitmap in a scan")?;
                            self.retry();
                            if Tree::overdue(c, &mut hop_since) {
                                Box::pin(self.unstick(c, t.addr)).await?;
                            }
                            leaves[i] = self.read_one(c, &t, s).await?;
                        }
                    }
                };
                if !fresh {
                    s.pairs.truncate(at);
                    if stale_at == Some(t.s) {
                        // Planned again from a parent read afresh, and the leaf still does not
                        // cover the keys: a half split whose separator is not in the parent, for
                        // good if its splitter died before inserting it. Only the sibling chain
                        // reaches the keys moved right: whole leaves from here walk it.
                        return Ok(Trimmed::From(t.s));
                    }
                    // Split since its parent was cached: drop the parent, plan again from here.
                    stale_at = Some(t.s);
                    self.blink.cache.invalidate(1, &t.parent.0, t.parent.1);
                    self.retry();
                    restarts.failed(t.addr, "leaf sibling or fences in a scan")?;
                    pos = t.s;
                    continue 'round;
                }
                if t.e >= end {
                    return Ok(Trimmed::Done);
                }
                pos = t.e + 1;
            }
        }
    }

    /// Plans a round from `pos` into `s.trims`: the leaves the cached parents give from the
    /// one covering `pos`, on one memory node, until `end`, [`LEAVES`] leaves or [`MAX_BATCH`]
    /// READs, each READ whole if the scan covers its range, else by the runs of slots its keys'
    /// neighbourhoods cover.
    fn plan_round<T: Transport>(
        &self,
        c: &Client<T>,
        pos: u64,
        end: u64,
        dense: bool,
        s: &mut ScanScratch,
    ) -> Planned {
        s.trims.clear();
        s.runs.clear();
        s.homes.clear();
        // The most a round holds, so that the pooled vectors' first round grows them for all.
        s.trims.reserve(LEAVES);
        s.runs.reserve(LEAVES * MAX_BATCH);
        s.homes.reserve(LEAVES * self.leaf.span);
        let mut key = pos;
        loop {
            c.compute(Work::CacheLookup, 1);
            let next =
                self.blink.cache.with(1, &key, |p| self.plan_children(c, p, key, end, dense, s));
            match next {
                Some(Next::Parent(k)) => key = k,
                Some(Next::Stop) => return Planned::Leaves,
                Some(Next::Sparse) => return Planned::Whole,
                None if s.trims.is_empty() => return Planned::Uncached,
                None => return Planned::Leaves,
            }
        }
    }

    /// [`Tree::plan_round`] over the children of cached parent `p` from the one covering `key`.
    fn plan_children<T: Transport>(
        &self,
        c: &Client<T>,
        p: &Cached<Internal>,
        key: u64,
        end: u64,
        dense: bool,
        s: &mut ScanScratch,
    ) -> Next {
        let (n, span) = (&p.node, self.leaf.span);
        let (routes, pivots) = (&n.routes, n.routes.pivots());
        let mut i = n.rank(key);
        let mut key = key;
        loop {
            // Child i covers [pivot i - 1, pivot i) (the leftmost from the low fence, the last
            // to the high fence, both inclusive).
            let (addr, low) =
                if i == 0 { (n.leftmost, n.low) } else { (routes.child(i - 1), pivots[i - 1]) };
            let (high, expected) = match pivots.get(i) {
                Some(&p) => (p.saturating_sub(1), routes.child(i)),
                None => (n.high, n.sibling_leftmost),
            };
            let (sk, ek) = (key.max(low), end.min(high));
            if sk > ek {
                return Next::Stop;
            }
            // A scan by count trims only where keys could be dense.
            if dense && high.saturating_sub(low) >= 2 * span as u64 {
                return if s.trims.is_empty() { Next::Sparse } else { Next::Stop };
            }
            if s.trims.len() == LEAVES
                || s.trims.first().is_some_and(|f| f.addr.node() != addr.node())
            {
                return Next::Stop;
            }
            let (runs_at, homes_at) = (s.runs.len(), s.homes.len());
            let mut whole = (sk == low && ek == high) || ek - sk >= span as u64;
            if !whole {
                whole = !self.plan_runs(c, sk, ek, s);
            }
            if whole {
                s.runs.truncate(runs_at);
                s.homes.truncate(homes_at);
            }
            let reads = if whole { 1 } else { self.reads_of(&s.runs[runs_at..]) };
            let planned: usize = s
                .trims
                .iter()
                .map(|t| if t.whole { 1 } else { self.reads_of(&s.runs[t.runs.clone()]) })
                .sum();
            if !s.trims.is_empty() && planned + reads > MAX_BATCH {
                s.runs.truncate(runs_at);
                s.homes.truncate(homes_at);
                return Next::Stop;
            }
            s.trims.push(Trim {
                addr,
                expected,
                parent: (n.low, p.addr),
                s: sk,
                e: ek,
                whole,
                runs: runs_at..s.runs.len(),
                homes_at,
            });
            if ek >= end {
                return Next::Stop;
            }
            (i, key) = (i + 1, high + 1);
            if i > routes.len() {
                return Next::Parent(key);
            }
        }
    }

    /// The runs of slots the neighbourhoods of keys `sk ..= ek` cover (merged across gaps up
    /// to [`Tree::greedy_slots`]), onto `s.runs`, and each key's home onto `s.homes`; `false`
    /// if a whole READ does as well (the runs cover the leaf, or take more READs than a
    /// doorbell holds).
    fn plan_runs<T: Transport>(
        &self,
        c: &Client<T>,
        sk: u64,
        ek: u64,
        s: &mut ScanScratch,
    ) -> bool {
        let (span, h) = (self.leaf.span, self.leaf.h);
        s.marks.clear();
        s.marks.resize(span, false);
        for k in sk..=ek {
            let home = home(k, span);
            s.homes.push(home as u16);
            for d in 0..h {
                s.marks[wrap(home + d, span)] = true;
            }
        }
        c.compute(Work::KeyHash, ek - sk + 1);
        let at = s.runs.len();
        let mut j = 0;
        while j < span {
            if !s.marks[j] {
                j += 1;
                continue;
            }
            let lo = j;
            while j < span && s.marks[j] {
                j += 1;
            }
            // Greedy: one READ for this run and the previous one if together they stay
            // within the greedy size (the gap between them READ too).
            match s.runs[at..].last_mut() {
                Some(last) if j - last.0 <= self.greedy_slots => last.1 = j - last.0,
                _ => s.runs.push((lo, j - lo)),
            }
        }
        let runs = &s.runs[at..];
        !(runs.len() == 1 && runs[0].1 == span) && self.reads_of(runs) <= MAX_BATCH
    }

    /// READs the runs of slots `runs` of a leaf take: one each, and the header first without
    /// metadata replication when no run starts at slot 0.
    fn reads_of(&self, runs: &[(usize, usize)]) -> usize {
        let header = !self.leaf.kind.replicated && runs.first().is_some_and(|r| r.0 != 0);
        runs.len() + header as usize
    }

    /// The decoded ranges to READ of leaf `t` (empty: the whole leaf).
    fn ranges_of(&self, t: &Trim, s: &ScanScratch) -> Ranges {
        let mut out = Ranges::new();
        if t.whole {
            return out;
        }
        let header = (0, self.leaf.meta_len);
        for &(lo, n) in &s.runs[t.runs.clone()] {
            // Runs do not wrap: each is one range, after the header without replication.
            out.extend(self.leaf.read_ranges(lo, n).into_iter().filter(|&r| r != header));
        }
        if !self.leaf.kind.replicated && out.first().is_some_and(|r| r.0 != 0) {
            out.insert(0, header);
        }
        out
    }

    /// READs the round planned in `s.trims` in one doorbell, then again one by one those whose
    /// versions disagree (or, READ whole, with a hop in flight) until they validate.
    async fn read_round<T: Transport>(
        &self,
        c: &Client<T>,
        s: &ScanScratch,
    ) -> IndexResult<ArrayVec<PooledLeaf<'_>, LEAVES>> {
        let ranges: ArrayVec<Ranges, LEAVES> =
            s.trims.iter().map(|t| self.ranges_of(t, s)).collect();
        let mut bufs: ArrayVec<PooledLeaf<'_>, LEAVES> =
            s.trims.iter().map(|_| self.leaf_buf(c)).collect();
        let addrs: ArrayVec<GlobalAddr, LEAVES> = s.trims.iter().map(|t| t.addr).collect();
        let ok = self.post_leaves(c, &addrs, &ranges, &mut bufs).await?;
        for (i, t) in s.trims.iter().enumerate() {
            if !ok[i] {
                self.retry();
                bufs[i] = self.read_one(c, t, s).await?;
            }
        }
        Ok(bufs)
    }

    /// READs leaf `t` as planned until it validates.
    async fn read_one<T: Transport>(
        &self,
        c: &Client<T>,
        t: &Trim,
        s: &ScanScratch,
    ) -> IndexResult<PooledLeaf<'_>> {
        let ranges = [self.ranges_of(t, s)];
        let (mut attempts, mut since) = (Attempts::new(), None);
        loop {
            let mut buf = [self.leaf_buf(c)];
            if self.post_leaves(c, &[t.addr], &ranges, &mut buf).await?[0] {
                let [buf] = buf;
                return Ok(buf);
            }
            attempts.failed(t.addr, "leaf versions in a scan")?;
            self.retry();
            // A whole leaf fails here also with a hop in flight.
            if Tree::overdue(c, &mut since) {
                Box::pin(self.unstick(c, t.addr)).await?;
            }
        }
    }

    /// READs `ranges[i]` of leaf `addrs[i]` (empty: the whole leaf) into `bufs[i]`, all in one
    /// doorbell; whether each validated (versions; a whole leaf also with no hop in flight).
    async fn post_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        addrs: &[GlobalAddr],
        ranges: &[Ranges],
        bufs: &mut [PooledLeaf<'_>],
    ) -> IndexResult<ArrayVec<bool, LEAVES>> {
        let plan = &self.whole_plan;
        let phys = |r: &Ranges| -> usize {
            if r.is_empty() {
                return plan.raw_len;
            }
            r.iter().map(|&(d0, d1)| phys_range(d0, d1)).map(|(p0, p1)| p1 - p0).sum()
        };
        let mut raws: ArrayVec<Vec<u8>, LEAVES> =
            bufs.iter_mut().map(|b| std::mem::take(&mut b.raw)).collect();
        let mut bytes = 0;
        for (raw, r) in raws.iter_mut().zip(ranges) {
            at_least(raw, phys(r) + SLACK);
            bytes += phys(r);
        }
        let mut ops = SmallVec::<[BatchOp<'_>; MAX_BATCH]>::new();
        for ((raw, r), &addr) in raws.iter_mut().zip(ranges).zip(addrs) {
            if r.is_empty() {
                ops.push(BatchOp::Read { addr, buf: &mut raw[..plan.raw_len] });
                continue;
            }
            let mut rest = &mut raw[..];
            for &(d0, d1) in r {
                let (p0, p1) = phys_range(d0, d1);
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(p1 - p0);
                ops.push(BatchOp::Read { addr: addr.add(p0 as u64), buf: piece });
                rest = tail;
            }
        }
        let posted = doorbell::post(c, &mut ops).await;
        drop(ops);
        c.compute(Work::BytesScanned, bytes as u64);
        let mut ok = ArrayVec::new();
        for ((b, raw), r) in bufs.iter_mut().zip(&raws).zip(ranges) {
            let valid = if r.is_empty() {
                let whole = &raw[..plan.raw_len + SLACK];
                b.absorb_whole(whole, plan).is_ok() && b.validate().is_ok() && b.hops_settled()
            } else {
                let mut at = 0;
                let mut valid = true;
                for &(d0, d1) in r {
                    let (p0, p1) = phys_range(d0, d1);
                    valid = valid && b.absorb(d0, d1, &raw[at..at + p1 - p0]).is_ok();
                    at += p1 - p0;
                }
                valid && b.validate().is_ok()
            };
            ok.push(valid);
        }
        for (b, raw) in bufs.iter_mut().zip(raws) {
            b.raw = raw;
        }
        posted?;
        Ok(ok)
    }

    /// Appends the keys in `[t.s, t.e]` of leaf `t` (READ into `buf`) to `s.pairs`, ascending,
    /// once the leaf is shown to still cover them.
    fn take_leaf_keys<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &PooledLeaf<'_>,
        t: &Trim,
        s: &mut ScanScratch,
    ) -> Took {
        let (sib, _) = buf.meta().expect("validated read has a replica");
        let covers = match buf.fences() {
            Some((low, high)) => low <= t.s && t.e <= high,
            None => sib == t.expected,
        };
        if !covers {
            return Took::Stale;
        }
        if t.whole {
            let at = s.pairs.len();
            let keys = (0..self.leaf.span).map(|j| (buf.key(j), buf.value(j)));
            s.pairs.extend(keys.filter(|&(x, _)| x != 0 && t.s <= x && x <= t.e));
            s.pairs[at..].sort_unstable_by_key(|p| p.0);
            let n = s.pairs.len() - at;
            let sorted = n as u64 * bisect_compares(n).saturating_sub(1);
            c.compute(Work::KeyCompare, 2 * self.leaf.span as u64 + sorted);
            return Took::Keys;
        }
        for (j, k) in (t.s..=t.e).enumerate() {
            let h = s.homes[t.homes_at + j] as usize;
            if let Some(i) = self.find_near(c, &**buf, h, k) {
                s.pairs.push((k, buf.value(i)));
                continue;
            }
            // Not found: the home's hop bitmap, rebuilt by hashing its neighbourhood's keys.
            c.compute(Work::KeyHash, self.leaf.h as u64);
            if buf.status(h) != buf.bitmap(h) {
                return Took::HopInFlight;
            }
        }
        Took::Keys
    }
}

/// How planning went on after a cached parent's children.
enum Next {
    /// The round is planned.
    Stop,
    /// The first leaf is not worth trimming.
    Sparse,
    /// On with the parent covering this key.
    Parent(u64),
}
/// What a leaf READ gave the scan.
enum Took {
    /// Its keys in `[s, e]` are in `s.pairs`.
    Keys,
    /// The leaf no longer covers `[s, e]` (split since its parent was cached).
    Stale,
    /// A hop was in flight through a missing key's neighbourhood: READ it again.
    HopInFlight,
}
