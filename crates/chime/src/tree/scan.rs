//! Scans: whole leaves READ along the sibling chain, several per doorbell when the cached
//! parent names the next ones and they share a memory node ([`dmindex_prim::doorbell`]). A
//! leaf counts once its versions agree and no hop is in flight in it (every home's hop bitmap
//! matches its neighbourhood). The first leaf, when a cached parent named it, must still hold
//! the scan's start (its sibling or fences, as a search checks): else the parent is dropped
//! and the scan descends again, so a stale parent costs one scan one extra descent rather than
//! every later scan from its range a walk along the chain. The load factor walks the same
//! chain.

use arrayvec::ArrayVec;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Internal;
use dmindex_prim::doorbell;
use dmindex_prim::node_cache::Cached;
use dmindex_prim::work::bisect_compares;

use super::fine_scan::Trim;
use super::leaf_io::{at_least, PooledLeaf};
use super::{Tree, Where};
use crate::collision;
use crate::leaf::SLACK;
use crate::view::LeafView;

/// Most leaves a scan READs in one doorbell.
const BATCH: usize = 4;

/// Most pairs a scan makes room for before it starts.
pub(crate) const MOST_RESERVED: usize = 4096;

/// A scan's working vectors, kept in a per-compute-node pool ([`Tree::scans`]) so that a warm
/// scan allocates nothing.
#[derive(Default)]
pub(crate) struct ScanScratch {
    /// (8-byte key, value slot) pairs the leaves gave, in key order.
    pub pairs: Vec<(u64, [u8; 8])>,
    /// The leaves the cached parent names after the first, not yet read (from `next_ahead`).
    ahead: Vec<GlobalAddr>,
    next_ahead: usize,
    /// One block's bytes (indirect values), or every pair's first READ of its block, end to
    /// end (long keys).
    pub block: Vec<u8>,
    /// Long keys: each pair's block and the bytes of its first READ.
    pub reads: Vec<(GlobalAddr, usize)>,
    /// Long keys: a block longer than its first READ, READ whole.
    pub rest: Vec<u8>,
    /// Long keys: the (unused key, value slot) of each record the scan's groups hold in range.
    pub grouped: Vec<(u64, [u8; 8])>,
    /// A fine-grained scan's round ([`super::fine_scan`]): its leaves, their runs of slots to
    /// READ, the home of each key they want, and the slots a leaf's neighbourhoods cover.
    pub(super) trims: Vec<Trim>,
    pub(super) runs: Vec<(usize, usize)>,
    pub(super) homes: Vec<u16>,
    pub(super) marks: Vec<bool>,
}

impl Tree {
    /// READs whole leaves (one doorbell when they share a memory node, else one READ each) into
    /// pooled buffers, re-reading each until it validates and no hop is in flight in it.
    async fn read_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        leaves: &[GlobalAddr],
    ) -> IndexResult<ArrayVec<PooledLeaf<'_>, BATCH>> {
        let plan = &self.whole_plan;
        let mut bufs: ArrayVec<PooledLeaf<'_>, BATCH> = leaves
            .iter()
            .map(|_| {
                let mut b = self.leaf_buf(c);
                at_least(&mut b.raw, plan.raw_len + SLACK);
                b
            })
            .collect();
        let reads = leaves
            .iter()
            .zip(bufs.iter_mut())
            .map(|(a, b)| BatchOp::Read { addr: *a, buf: &mut b.raw[..plan.raw_len] });
        doorbell::post_iter(c, reads).await?;
        c.compute(Work::BytesScanned, (plan.raw_len * leaves.len()) as u64);
        for (a, b) in leaves.iter().zip(bufs.iter_mut()) {
            let raw = std::mem::take(&mut b.raw);
            let whole = &raw[..plan.raw_len + SLACK];
            let ok =
                b.absorb_whole(whole, plan).is_ok() && b.validate().is_ok() && b.hops_settled();
            b.raw = raw;
            if ok {
                continue;
            }
            self.retry();
            let (mut hops, mut hop_since) = (Attempts::new(), None);
            loop {
                let fresh = self.read_whole_unlocked(c, *a).await?;
                if fresh.hops_settled() {
                    *b = fresh;
                    break;
                }
                hops.failed(*a, "leaf hop bitmaps")?;
                self.retry();
                if Tree::overdue(c, &mut hop_since) {
                    Box::pin(self.unstick(c, *a)).await?;
                }
            }
        }
        Ok(bufs)
    }

    /// Up to `count` pairs with key ≥ `from`, ascending, into `s.pairs` (cleared first): whole
    /// leaves along the sibling chain, several per doorbell when the parent names the next
    /// ones. With `whole_groups` (long keys), a run of equal 8-byte keys is never cut, and
    /// `count` counts keys, not entries: a collision group's entry counts the keys its value
    /// slot vouches for, plain entries beside it none, and `from`'s own run none (its keys may
    /// sort before the scan's start). With `until`, the scan ends at the first leaf holding a
    /// key beyond it.
    pub(crate) async fn scan<T: Transport>(
        &self,
        c: &Client<T>,
        from: u64,
        count: usize,
        whole_groups: bool,
        until: Option<u64>,
        s: &mut ScanScratch,
    ) -> IndexResult<()> {
        s.pairs.clear();
        self.scan_on(c, from, count, whole_groups, until, s).await
    }

    /// [`Tree::scan`] after the pairs already in `s.pairs` (all below `from`), up to `count`
    /// pairs in all (without `whole_groups`).
    pub(crate) async fn scan_on<T: Transport>(
        &self,
        c: &Client<T>,
        from: u64,
        count: usize,
        whole_groups: bool,
        until: Option<u64>,
        s: &mut ScanScratch,
    ) -> IndexResult<()> {
        // Emptied before the reservation below, which counts from the length.
        s.ahead.clear();
        if count <= s.pairs.len() {
            return Ok(());
        }
        // Room for the most a scan of `count` holds at once (a whole last leaf before it is
        // cut) and for a parent's children, so that the vectors' first scan of a size grows
        // them for every later one (capped for a huge count: those grow as pairs come).
        s.pairs.reserve(count.min(MOST_RESERVED) + self.leaf.span);
        s.ahead.reserve(self.blink.inner.span + 1);
        // Descents again after a stale cached parent: each drops the parent it came from.
        let mut restarts = Attempts::new();
        'locate: loop {
            s.ahead.clear();
            s.next_ahead = 0;
            let loc = self.blink.locate(c, from).await?;
            if let Some(p) = loc.parent {
                let ahead = &mut s.ahead;
                let children = |n: &Cached<Internal>| {
                    if n.addr == p {
                        ahead.extend(n.node.children_from_iter(from).skip(1));
                    }
                };
                c.compute(Work::CacheLookup, 1);
                self.blink.cache.with(1, &from, children);
            }
            // The first leaf, if its parent came from the cache, is validated as a point
            // search's is (sibling or fences). A stale parent names a leaf that has split
            // since: the chain from it reaches `from` too, but only past every leaf split off
            // it, and the parent would stay cached for every later scan from here to walk.
            let mut check = loc.cached.is_some();
            let mut cur = loc.leaf;
            loop {
                let mut batch = ArrayVec::<GlobalAddr, BATCH>::new();
                batch.push(cur);
                let need = count
                    .saturating_sub(s.pairs.len())
                    .div_ceil(self.leaf.span / 2)
                    .clamp(1, BATCH);
                while batch.len() < need {
                    match s.ahead.get(s.next_ahead) {
                        Some(&a) if a.node() == cur.node() => {
                            batch.push(a);
                            s.next_ahead += 1;
                        }
                        _ => break,
                    }
                }
                let leaves = self.read_leaves(c, &batch).await?;
                if check {
                    check = false;
                    if matches!(self.judge(&loc, &*leaves[0], from), Where::Stale) {
                        self.blink.invalidate(&loc);
                        restarts.failed(loc.leaf, "scan's first leaf under a cached parent")?;
                        continue 'locate;
                    }
                }
                let mut next = GlobalAddr::NULL;
                for (i, leaf) in leaves.iter().enumerate() {
                    if self.take_leaf(c, leaf, from, count, whole_groups, until, &mut s.pairs) {
                        return Ok(());
                    }
                    let (sib, _) = leaf.meta().expect("whole leaf");
                    next = sib;
                    if batch.get(i + 1) != Some(&sib) {
                        s.ahead.clear();
                        s.next_ahead = 0;
                        break;
                    }
                }
                if next.is_null() {
                    return Ok(());
                }
                cur = next;
            }
        }
    }

    /// Appends a leaf's pairs with key ≥ `from` to `out` in key order, as far as the scan
    /// takes them (see [`Tree::scan`]); whether the scan is done.
    #[allow(clippy::too_many_arguments)]
    fn take_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: &PooledLeaf<'_>,
        from: u64,
        count: usize,
        whole_groups: bool,
        until: Option<u64>,
        out: &mut Vec<(u64, [u8; 8])>,
    ) -> bool {
        let start = out.len();
        out.extend(
            (0..self.leaf.span)
                .map(|j| (leaf.key(j), leaf.value(j)))
                .filter(|&(x, _)| x != 0 && x >= from),
        );
        out[start..].sort_unstable_by_key(|p| p.0);
        // Every slot's key against the start, then the sort's comparisons (about n·log₂ n of
        // the n kept: the count a comparison sort needs, the standard one's exact count is not
        // observable without a counting comparator on the hot path).
        let n = out.len() - start;
        let sorted = n as u64 * bisect_compares(n).saturating_sub(1);
        c.compute(Work::KeyCompare, self.leaf.span as u64 + sorted);
        match until {
            // A range scan ends at the first leaf holding a key beyond the range: every later
            // leaf holds only larger keys.
            Some(u) => {
                let keep = start + out[start..].partition_point(|p| p.0 <= u);
                let beyond = keep < out.len();
                out.truncate(keep);
                beyond
            }
            None if whole_groups => self.take_runs(out, from, count),
            None => {
                if let Some(i) = (start.max(count)..out.len()).next() {
                    out.truncate(i);
                    return true;
                }
                out.len() >= count
            }
        }
    }

    /// [`Tree::take_leaf`]'s end for long keys (`whole_groups`): never cut a run of equal
    /// prefixes (the caller orders it by full key), and count keys, not entries: a collision
    /// group's entry counts the keys its value slot vouches for, and the start's own prefix
    /// counts nothing (its keys may sort before the scan's start). Whether the scan is done.
    /// Kept out of line: 8-byte keys never come here.
    #[inline(never)]
    fn take_runs(&self, out: &mut Vec<(u64, [u8; 8])>, from: u64, count: usize) -> bool {
        // A run with a group counts the group only: plain entries beside it are shadowed
        // (their keys are in it).
        let stride = self.stride();
        let group = |slot: [u8; 8]| collision::group_of(slot).map(|g| g.1);
        let keys = |run: &[(u64, [u8; 8])]| match run.iter().any(|p| group(p.1).is_some()) {
            _ if run[0].0 == from => 0,
            true => run
                .iter()
                .filter_map(|p| group(p.1))
                .map(|first| collision::records_at_least(first, stride))
                .sum(),
            false => run.len(),
        };
        let (mut taken, mut i) = (0, 0);
        while i < out.len() {
            if i > 0 && taken >= count {
                out.truncate(i);
                return true;
            }
            let k = out[i].0;
            let end = i + out[i..].iter().take_while(|p| p.0 == k).count();
            taken += keys(&out[i..end]);
            i = end;
        }
        taken >= count
    }

    /// Entries per slot over all leaves, walking the leaf chain from the leftmost leaf (a
    /// collision group's entry is one).
    pub(crate) async fn load_factor<T: Transport>(&self, c: &Client<T>) -> IndexResult<f64> {
        let (height, mut addr) = self.blink.root(c).await?;
        for _ in 1..height {
            addr = self.blink.read_internal(c, addr).await?.leftmost;
        }
        let (mut keys, mut leaves) = (0usize, 0usize);
        while !addr.is_null() {
            let leaf = self.read_leaves(c, &[addr]).await?.remove(0);
            keys += leaf.count();
            leaves += 1;
            addr = leaf.meta().expect("whole leaf").0;
        }
        Ok(keys as f64 / (leaves * self.leaf.span) as f64)
    }
}
