//! The CN-side node cache: copies of remote nodes kept by level and key range, within a byte
//! budget, shared by every client of a compute node.
//!
//! # What is cached
//!
//! Any node type that says where it sits ([`CachedNode`]): its level above the leaves (1 = a
//! parent of leaves), the lowest key it covers (its low fence) and whether it covers a key, and
//! what it costs in bytes. B+ tree internal nodes (CHIME, Sherman), radix-tree inner nodes and
//! learned-index models fit. Each level is a sorted array from low fence to the node (a
//! node's low fence never changes, so a dropped copy leaves its place to be refilled). The
//! copies sit in the array itself, not behind a pointer each: a lookup's chain of dependent
//! loads is the low fences, the copy, and what the copy points to (an internal node's routes),
//! one fewer than with a shared pointer per copy, and a hot cached node is often out of the
//! CPU's cache. So a copy is only lent, under the cache's read lock ([`NodeCache::with`]):
//!
//! ```text
//! level 2:  [low 0 ──────────────── high 999]
//! level 1:  [0 .. 299] [300 .. 599] [600 .. 999]      lookup(1, 450): the node with the
//!                                                     largest low ≤ 450, if it covers 450
//! ```
//!
//! # Budget
//!
//! A node costs [`CachedNode::cache_cost`] bytes (its entries, as CHIME's enhanced Sherman
//! counts them), or a fixed page per node ([`Charge::Page`]: the original Sherman and Marlin
//! cache whole internal pages, the accounting of the Dolphin paper). Inserting past the budget
//! evicts the oldest insertions first (FIFO; refreshing a node keeps its place). A budget of 0
//! caches nothing.
//!
//! # Staleness
//!
//! A cached copy may be stale (the node split since). Designs validate what they reach through
//! it (CHIME: sibling-based validation, or fence keys) and drop it with
//! [`NodeCache::invalidate`], which removes the copy only if it is still the one of that
//! address (another client may have refreshed it meanwhile).

use std::collections::VecDeque;

use crossbeam_utils::sync::ShardedLock;

use dmindex_fabric::GlobalAddr;

/// A node the cache can hold.
pub trait CachedNode {
    /// The keys it is indexed by.
    type Key: Ord + Clone;
    /// Its level above the leaves (1 = a parent of leaves).
    fn level(&self) -> u8;
    /// The lowest key it covers.
    fn low(&self) -> &Self::Key;
    /// Whether it covers `k`.
    fn covers(&self, k: &Self::Key) -> bool;
    /// Bytes it costs in the cache.
    fn cache_cost(&self) -> u64;
    /// The key's leading 64 bits, in the keys' order: `a < b` implies `radix(a) <= radix(b)`.
    /// A level's radix table (`Level::find`) buckets low fences by its top bits.
    fn radix(k: &Self::Key) -> u64;
}

/// A cached copy of the node at `addr`.
#[derive(Debug)]
pub struct Cached<N> {
    pub addr: GlobalAddr,
    pub node: N,
}

/// Bits of a key's [`CachedNode::radix`] that pick its bucket in a level's radix table.
const RADIX_BITS: u32 = 12;
/// Buckets of a level's radix table (16 KB of `u32` starts per level in use).
const BUCKETS: usize = 1 << RADIX_BITS;

/// The bucket of key `k` in a level's radix table.
#[inline]
fn bucket<N: CachedNode>(k: &N::Key) -> usize {
    (N::radix(k) >> (64 - RADIX_BITS)) as usize
}

/// One level's copies, by low fence: a sorted array searched by bisection. A node's low fence
/// never changes (a split keeps the left node's and gives the right one a new one), so once a
/// low has a place it keeps it: dropping a copy (eviction, a stale copy) empties the place
/// rather than removing it, and a later copy of that node refills it. Only a node never cached
/// before shifts the array, once; lookups, refreshes and drops are logarithmic.
///
/// # The radix table
///
/// Bisecting hundreds of lows is a chain of ten dependent loads over tens of lines on every
/// lookup. `starts[b]` counts the lows whose bucket (their radix's top [`RADIX_BITS`] bits) is
/// below `b`, so the lows of bucket `b` are `lows[starts[b] .. starts[b + 1]]`, and the greatest
/// low ≤ `k` is among them or is the last one before them: lows of lower buckets are below `k`,
/// of higher ones above it. A lookup bisects one bucket (for hashed keys, none or one low); keys
/// that share their leading bits all land in one bucket, and the bisection is the whole
/// array's again. Placing a new low bumps the starts above its bucket.
///
/// ```text
/// lows:    [ 0x05.. | 0x3a.., 0x3f.. | 0xc1.. ]        buckets 0x0, 0x3, 0xc (of 16, say)
/// starts:  b = 0  1  2  3  4 .. c  d .. 16
///              0  1  1  1  3 .. 3  4 .. 4
/// find(0x3c..): bucket 3 -> bisect lows[1 .. 3] -> index 2 -> the low 0x3a..
/// ```
struct Level<N: CachedNode> {
    lows: Vec<N::Key>,
    nodes: Vec<Option<Cached<N>>>,
    /// `BUCKETS + 1` starts, made with the first low.
    starts: Box<[u32]>,
}

impl<N: CachedNode> Default for Level<N> {
    fn default() -> Level<N> {
        Level { lows: Vec::new(), nodes: Vec::new(), starts: Box::default() }
    }
}

impl<N: CachedNode> Level<N> {
    /// The node whose range covers `k`: the copy with the greatest low fence ≤ `k`.
    #[inline]
    fn find(&self, k: &N::Key) -> Option<&Cached<N>> {
        let b = bucket::<N>(k);
        let (lo, hi) = (*self.starts.get(b)? as usize, self.starts[b + 1] as usize);
        let i = lo + self.lows[lo..hi].partition_point(|l| l <= k);
        let c = self.nodes.get(i.checked_sub(1)?)?.as_ref()?;
        c.node.covers(k).then_some(c)
    }

    /// The place of low fence `low`, made if new.
    fn place(&mut self, low: &N::Key) -> usize {
        match self.lows.binary_search(low) {
            Ok(i) => i,
            Err(i) => {
                if self.starts.is_empty() {
                    self.starts = vec![0; BUCKETS + 1].into_boxed_slice();
                }
                self.lows.insert(i, low.clone());
                self.nodes.insert(i, None);
                for s in &mut self.starts[bucket::<N>(low) + 1..] {
                    *s += 1;
                }
                i
            }
        }
    }

    /// The place of low fence `low`, if it has one.
    fn at(&self, low: &N::Key) -> Option<usize> {
        self.lows.binary_search(low).ok()
    }
}

/// Per level, nodes by low fence; insertion order for eviction; bytes in use.
struct Levels<N: CachedNode> {
    levels: Vec<Level<N>>,
    fifo: VecDeque<(u8, N::Key, GlobalAddr)>,
    bytes: u64,
}

impl<N: CachedNode> Levels<N> {
    /// The node at `level` whose range covers `k`.
    #[inline]
    fn find(&self, level: u8, k: &N::Key) -> Option<&Cached<N>> {
        self.levels.get(level as usize)?.find(k)
    }
}

/// What a cached node costs against the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// [`CachedNode::cache_cost`]: the node's header and the entries it holds.
    Entries,
    /// This many bytes a node, whatever it holds: a whole internal page.
    Page(u64),
}

/// A compute node's cache of nodes of type `N`, with a byte budget and FIFO eviction.
pub struct NodeCache<N: CachedNode> {
    /// Sharded by thread: a read takes only its thread's shard, so lookups on different
    /// threads write no common cache line; inserts and invalidations take every shard.
    inner: ShardedLock<Levels<N>>,
    budget: u64,
    charge: Charge,
}

impl<N: CachedNode> NodeCache<N> {
    /// An empty cache of at most `budget` bytes, each node charged its entries.
    pub fn new(budget: u64) -> NodeCache<N> {
        NodeCache::charged(budget, Charge::Entries)
    }

    /// An empty cache of at most `budget` bytes, each node charged as `charge` says.
    pub fn charged(budget: u64, charge: Charge) -> NodeCache<N> {
        let empty = Levels { levels: Vec::new(), fifo: VecDeque::new(), bytes: 0 };
        NodeCache { inner: ShardedLock::new(empty), budget, charge }
    }

    /// What `node` costs against the budget.
    fn cost(&self, node: &N) -> u64 {
        match self.charge {
            Charge::Entries => node.cache_cost(),
            Charge::Page(bytes) => bytes,
        }
    }

    /// Bytes in use.
    pub fn bytes(&self) -> u64 {
        self.inner.read().expect("cache lock").bytes
    }

    /// `f` of the cached node at `level` covering `k`, run under the cache's read lock (which
    /// `f` must not take again: no cache call inside it).
    pub fn with<R>(&self, level: u8, k: &N::Key, f: impl FnOnce(&Cached<N>) -> R) -> Option<R> {
        self.inner.read().expect("cache lock").find(level, k).map(f)
    }

    /// `f` of the cached node covering `k` at the lowest level from `from` up that has one,
    /// under the read lock as in [`NodeCache::with`], and how many levels were probed (each a
    /// lookup of its own, for [`dmindex_fabric::Work::CacheLookup`]).
    pub fn deepest_with<R>(
        &self,
        from: u8,
        k: &N::Key,
        f: impl FnOnce(&Cached<N>) -> R,
    ) -> (Option<R>, u64) {
        let g = self.inner.read().expect("cache lock");
        let mut probes = 0;
        let hit = (from..g.levels.len() as u8).find_map(|lv| {
            probes += 1;
            g.find(lv, k)
        });
        (hit.map(f), probes)
    }

    /// Caches (or refreshes) the node at `addr`, evicting the oldest past the budget.
    pub fn insert(&self, addr: GlobalAddr, node: N) {
        if self.budget == 0 {
            return;
        }
        let mut g = self.inner.write().expect("cache lock");
        let (level, low, cost) = (node.level() as usize, node.low().clone(), self.cost(&node));
        if g.levels.len() <= level {
            g.levels.resize_with(level + 1, Level::default);
        }
        let lv = &mut g.levels[level];
        let i = lv.place(&low);
        let old = lv.nodes[i].replace(Cached { addr, node });
        match old {
            Some(o) => g.bytes -= self.cost(&o.node),
            None => g.fifo.push_back((level as u8, low, addr)),
        }
        g.bytes += cost;
        while g.bytes > self.budget {
            let Some((lv, lo, _)) = g.fifo.pop_front() else { break };
            let level = &mut g.levels[lv as usize];
            if let Some(o) = level.at(&lo).and_then(|i| level.nodes[i].take()) {
                g.bytes -= self.cost(&o.node);
            }
        }
    }

    /// Drops the cached node at `level` with low fence `low` if it is still the copy of `addr`.
    pub fn invalidate(&self, level: u8, low: &N::Key, addr: GlobalAddr) {
        let mut g = self.inner.write().expect("cache lock");
        let Some(lv) = g.levels.get_mut(level as usize) else { return };
        let Some(i) = lv.at(low) else { return };
        if lv.nodes[i].as_ref().is_some_and(|c| c.addr == addr) {
            let o = lv.nodes[i].take().expect("present");
            g.bytes -= self.cost(&o.node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node keyed by byte strings (as a radix tree's would be): covers `[low, high)`.
    struct Prefix {
        level: u8,
        low: Vec<u8>,
        high: Vec<u8>,
    }

    impl CachedNode for Prefix {
        type Key = Vec<u8>;
        fn level(&self) -> u8 {
            self.level
        }
        fn low(&self) -> &Vec<u8> {
            &self.low
        }
        fn covers(&self, k: &Vec<u8>) -> bool {
            self.low <= *k && *k < self.high
        }
        fn cache_cost(&self) -> u64 {
            100
        }
        fn radix(k: &Vec<u8>) -> u64 {
            let mut b = [0u8; 8];
            let n = k.len().min(8);
            b[..n].copy_from_slice(&k[..n]);
            u64::from_be_bytes(b)
        }
    }

    fn node(level: u8, low: &str, high: &str) -> Prefix {
        Prefix { level, low: low.into(), high: high.into() }
    }

    #[test]
    fn lookup_by_level_and_range_deepest_first() {
        let c = NodeCache::new(1000);
        c.insert(GlobalAddr::new(0, 64), node(2, "", "zzz"));
        c.insert(GlobalAddr::new(0, 128), node(1, "a", "m"));
        c.insert(GlobalAddr::new(0, 192), node(1, "m", "t"));
        assert_eq!(c.bytes(), 300);
        let at = |lv, k: &str| c.with(lv, &k.as_bytes().to_vec(), |n| n.addr.offset());
        assert_eq!(
            (at(1, "b"), at(1, "m"), at(1, "x"), at(2, "x")),
            (Some(128), Some(192), None, Some(64))
        );
        let deepest = |from, k: &str| c.deepest_with(from, &k.as_bytes().to_vec(), |n| n.addr);
        let at_deepest =
            |(hit, probes): (Option<GlobalAddr>, u64)| (hit.map(|a| a.offset()), probes);
        // Each level tried is one probe: a hit at the first, a miss below a hit, no level left.
        assert_eq!(at_deepest(deepest(1, "p")), (Some(192), 1));
        assert_eq!(at_deepest(deepest(2, "p")), (Some(64), 1));
        assert_eq!(at_deepest(deepest(1, "x")), (Some(64), 2));
        assert_eq!(at_deepest(deepest(0, "x")), (Some(64), 3));
        assert_eq!(at_deepest(deepest(3, "x")), (None, 0));
        // A refreshed node replaces the copy without counting twice.
        c.insert(GlobalAddr::new(0, 192), node(1, "m", "u"));
        assert_eq!((c.bytes(), at(1, "t")), (300, Some(192)));
    }

    #[test]
    fn a_page_charge_counts_every_node_as_a_page() {
        // Each test node holds 100 bytes of entries; charged as 120-byte pages.
        let c = NodeCache::charged(250, Charge::Page(120));
        c.insert(GlobalAddr::new(0, 64), node(1, "a", "b"));
        c.insert(GlobalAddr::new(0, 128), node(1, "b", "c"));
        assert_eq!(c.bytes(), 240);
        c.insert(GlobalAddr::new(0, 128), node(1, "b", "d"));
        assert_eq!(c.bytes(), 240, "a refresh replaces its page");
        c.insert(GlobalAddr::new(0, 192), node(1, "d", "e"));
        let cached = |k: &str| c.with(1, &k.as_bytes().to_vec(), |_| ()).is_some();
        assert_eq!((c.bytes(), cached("a"), cached("d")), (240, false, true));
        c.invalidate(1, &b"d".to_vec(), GlobalAddr::new(0, 192));
        assert_eq!(c.bytes(), 120);
    }

    #[test]
    fn budget_evicts_oldest_and_invalidate_checks_the_address() {
        let c = NodeCache::new(250);
        c.insert(GlobalAddr::new(0, 64), node(1, "a", "b"));
        c.insert(GlobalAddr::new(0, 128), node(1, "b", "c"));
        c.insert(GlobalAddr::new(0, 192), node(1, "c", "d"));
        assert_eq!(c.bytes(), 200);
        let cached = |k: &str| c.with(1, &k.as_bytes().to_vec(), |_| ()).is_some();
        assert!(!cached("a"), "the oldest went");
        // Invalidating another address's copy does nothing.
        c.invalidate(1, &b"b".to_vec(), GlobalAddr::new(0, 999));
        assert!(cached("b"));
        c.invalidate(1, &b"b".to_vec(), GlobalAddr::new(0, 128));
        assert!(!cached("b"));
        assert_eq!(c.bytes(), 100);
        let none = NodeCache::new(0);
        none.insert(GlobalAddr::new(0, 64), node(1, "a", "b"));
        assert_eq!(none.bytes(), 0);
    }

    /// A node over `[low, high]` of `u64` keys, for the radix table's model test.
    struct Span(u64, u64);

    impl CachedNode for Span {
        type Key = u64;
        fn level(&self) -> u8 {
            1
        }
        fn low(&self) -> &u64 {
            &self.0
        }
        fn covers(&self, k: &u64) -> bool {
            self.0 <= *k && *k <= self.1
        }
        fn cache_cost(&self) -> u64 {
            1
        }
        fn radix(k: &u64) -> u64 {
            *k
        }
    }

    /// Lookups through the radix table find what a bisection of all lows finds (a `BTreeMap`
    /// here), for lows spread over the key space, crowded in one bucket, and at its edges.
    #[test]
    fn radix_table_lookups_match_a_sorted_map() {
        use std::collections::BTreeMap;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for crowd in [u64::MAX, 0xFFFF, 0] {
            let c = NodeCache::new(u64::MAX);
            let mut model = BTreeMap::new();
            let mut lows: Vec<u64> = (0..600).map(|_| rand() & crowd).collect();
            lows.extend([0, 1, u64::MAX, u64::MAX - 1, 1 << 52, (1 << 52) - 1]);
            lows.sort_unstable();
            lows.dedup();
            // Adjacent spans, inserted in random order: each covers up to the next low.
            let mut order: Vec<usize> = (0..lows.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rand() as usize % (i + 1));
            }
            for &i in &order {
                let high = lows.get(i + 1).map_or(u64::MAX, |h| h - 1);
                c.insert(GlobalAddr::new(0, 64 * (i as u64 + 1)), Span(lows[i], high));
                model.insert(lows[i], 64 * (i as u64 + 1));
            }
            let probes = (0..5000).map(|_| rand() & crowd).chain(lows.iter().copied());
            for k in probes.chain([0, u64::MAX]) {
                let want = model.range(..=k).next_back().map(|(_, &a)| a);
                assert_eq!(c.with(1, &k, |n| n.addr.offset()), want, "key {k:#x}");
            }
        }
    }
}
