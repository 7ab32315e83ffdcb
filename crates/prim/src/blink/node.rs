//! Decoded internal nodes (B+ tree style, B-link siblings, fence keys), cached on every compute
//! node; their bytes are drawn in [`super::layout`].

use dmindex_fabric::GlobalAddr;

use super::layout::{self, InternalLayout, INTERNAL_ENTRY, INTERNAL_HEADER};
use crate::cacheline::{self, Torn};
use crate::node_cache::{self, CachedNode};
use crate::version;

/// A decoded internal node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Internal {
    pub version: u8,
    pub level: u8,
    pub valid: bool,
    pub sibling: GlobalAddr,
    pub leftmost: GlobalAddr,
    pub sibling_leftmost: GlobalAddr,
    /// Inclusive fences.
    pub low: u64,
    pub high: u64,
    /// Pivot keys and children: child `i` covers `[pivot i, pivot i + 1)`.
    pub routes: Routes,
}

/// An internal node's entries in one allocation, pivots first and then the children, so that
/// routing searches 8 bytes an entry and finds the child a few lines on (not in a second
/// allocation elsewhere: a cached node's lines are often out of the CPU's cache).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    /// `[pivot 0 .. pivot n-1, child 0 .. child n-1]` (children as raw addresses).
    words: Vec<u64>,
}

impl Routes {
    /// Entries from parallel lists.
    pub fn new(pivots: &[u64], children: &[GlobalAddr]) -> Routes {
        assert_eq!(pivots.len(), children.len(), "a child per pivot");
        let mut words = Vec::with_capacity(2 * pivots.len());
        words.extend_from_slice(pivots);
        words.extend(children.iter().map(|c| c.raw()));
        Routes { words }
    }

    /// Entries in use.
    #[inline]
    pub fn len(&self) -> usize {
        self.words.len() / 2
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The pivots, ascending.
    #[inline]
    pub fn pivots(&self) -> &[u64] {
        &self.words[..self.len()]
    }

    /// Child `i`.
    #[inline]
    pub fn child(&self, i: usize) -> GlobalAddr {
        GlobalAddr::from_raw(self.words[self.len() + i])
    }

    /// The children as raw address words, in order.
    #[inline]
    fn child_words(&self) -> &[u64] {
        &self.words[self.len()..]
    }

    /// Children from `i` on.
    pub fn children_from(&self, i: usize) -> impl Iterator<Item = GlobalAddr> + '_ {
        self.words[self.len() + i..].iter().map(|&w| GlobalAddr::from_raw(w))
    }

    /// Inserts `pivot` → `child` in order.
    pub fn insert(&mut self, pivot: u64, child: GlobalAddr) {
        let n = self.len();
        let at = self.pivots().partition_point(|&p| p < pivot);
        self.words.insert(n + at, child.raw());
        self.words.insert(at, pivot);
    }

    /// Keeps entries `..m` and returns entries `m + 1 ..` with entry `m` (the separator that
    /// goes up and the child that becomes the right node's leftmost).
    pub fn split_at(&mut self, m: usize) -> (u64, GlobalAddr, Routes) {
        let n = self.len();
        let (p, c) = self.words.split_at(n);
        let right = Routes::new(
            &p[m + 1..],
            &c[m + 1..].iter().map(|&w| GlobalAddr::from_raw(w)).collect::<Vec<_>>(),
        );
        let (sep, mid) = (p[m], GlobalAddr::from_raw(c[m]));
        let mut left = Vec::with_capacity(2 * m);
        left.extend_from_slice(&p[..m]);
        left.extend_from_slice(&c[..m]);
        self.words = left;
        (sep, mid, right)
    }
}

impl Internal {
    /// Encodes the whole decoded node, every object at `self.version`.
    pub fn encode(&self, l: &InternalLayout) -> Vec<u8> {
        let mut b = vec![0u8; l.decoded()];
        b[0] = self.version;
        b[1] = self.level;
        b[2] = self.valid as u8;
        layout::put_addr(&mut b, 3, self.sibling);
        layout::put_addr(&mut b, 11, self.leftmost);
        layout::put_addr(&mut b, 19, self.sibling_leftmost);
        layout::put_key(&mut b, 27, self.low);
        layout::put_key(&mut b, 35, self.high);
        let r = &self.routes;
        let mut entries = b[INTERNAL_HEADER..].chunks_exact_mut(INTERNAL_ENTRY);
        // Routes first in the zip: it stops at their end without taking an entry more.
        for ((&pivot, &child), e) in r.pivots().iter().zip(r.child_words()).zip(entries.by_ref()) {
            e[0] = self.version;
            layout::put_key(e, 1, pivot);
            e[9..].copy_from_slice(&child.to_le_bytes());
        }
        for e in entries {
            e[0] = self.version;
        }
        b
    }

    /// The physical bytes of the node followed by an unlocked lock word.
    pub fn physical_with_lock(&self, l: &InternalLayout) -> Vec<u8> {
        let mut out = Vec::new();
        cacheline::encode(l, &self.encode(l), 0, l.decoded(), &mut out);
        out.resize(l.lock_offset() + 8, 0);
        out
    }

    /// Decodes a READ of the node's physical bytes; `Err` if torn or mid-write.
    pub fn decode(l: &InternalLayout, phys: &[u8]) -> Result<Internal, Torn> {
        let mut b = vec![0u8; l.decoded()];
        cacheline::decode(l, &phys[..l.physical()], 0, l.decoded(), &mut b)?;
        let v = b[0];
        // Entries at their fixed stride: every version must be the header's, and the used
        // ones (a child) come first.
        let entries = || b[INTERNAL_HEADER..].chunks_exact(INTERNAL_ENTRY);
        if entries().any(|e| e[0] != v) {
            return Err(Torn);
        }
        let child = |e: &[u8]| layout::word(e, 9);
        let n = entries().take_while(|e| child(e) != 0).count();
        let mut words = Vec::with_capacity(2 * n);
        words.extend(entries().take(n).map(|e| layout::key_at(e, 1)));
        words.extend(entries().take(n).map(child));
        Ok(Internal {
            version: v,
            level: b[1],
            valid: b[2] != 0,
            sibling: layout::addr_at(&b, 3),
            leftmost: layout::addr_at(&b, 11),
            sibling_leftmost: layout::addr_at(&b, 19),
            low: layout::key_at(&b, 27),
            high: layout::key_at(&b, 35),
            routes: Routes { words },
        })
    }

    /// The child for `k` and the child's expected sibling (the next child, or the leftmost
    /// child of this node's right sibling for the last child).
    pub fn child_for(&self, k: u64) -> (GlobalAddr, GlobalAddr) {
        let r = &self.routes;
        let idx = self.rank(k);
        let child = if idx == 0 { self.leftmost } else { r.child(idx - 1) };
        let next = if idx < r.len() { r.child(idx) } else { self.sibling_leftmost };
        (child, next)
    }

    /// How many pivots are at most `k`. The pivots' lines are asked for at once first: a
    /// cached node is often out of the CPU's cache, and the bisection's steps depend on each
    /// other.
    #[inline]
    pub fn rank(&self, k: u64) -> usize {
        let pivots = self.routes.pivots();
        dmindex_fabric::memory::prefetch(pivots);
        pivots.partition_point(|&p| p <= k)
    }

    /// Children in key order with their expected siblings, from the one covering `k`.
    pub fn children_from(&self, k: u64) -> Vec<GlobalAddr> {
        self.children_from_iter(k).collect()
    }

    /// [`Internal::children_from`] without collecting them (a scan copies them into a vector
    /// it reuses).
    pub fn children_from_iter(&self, k: u64) -> impl Iterator<Item = GlobalAddr> + '_ {
        let idx = self.rank(k);
        (idx == 0)
            .then_some(self.leftmost)
            .into_iter()
            .chain(self.routes.children_from(idx.saturating_sub(1)))
    }

    /// The node with its version bumped (a node write).
    pub fn bumped(mut self) -> Internal {
        self.version = version::bump_nv(self.version);
        self
    }
}

/// Internal nodes are cached by level and low fence.
impl CachedNode for Internal {
    type Key = u64;

    fn level(&self) -> u8 {
        self.level
    }

    fn low(&self) -> &u64 {
        &self.low
    }

    /// Whether `k` lies within the fences.
    fn covers(&self, k: &u64) -> bool {
        self.low <= *k && *k <= self.high
    }

    /// Bytes this node costs in a CN cache (its decoded remote bytes plus its address), as the
    /// reference implementation charges them.
    fn cache_cost(&self) -> u64 {
        (8 + INTERNAL_HEADER + INTERNAL_ENTRY * self.routes.len()) as u64
    }

    fn radix(k: &u64) -> u64 {
        *k
    }
}

/// The CN-wide cache of internal nodes ([`crate::node_cache`]).
pub type NodeCache = node_cache::NodeCache<Internal>;

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Internal {
        Internal {
            version: 3,
            level: 1,
            valid: true,
            sibling: GlobalAddr::new(0, 0x9000),
            leftmost: GlobalAddr::new(0, 0x1000),
            sibling_leftmost: GlobalAddr::new(0, 0x8000),
            low: 10,
            high: 99,
            routes: Routes::new(
                &[20, 50],
                &[GlobalAddr::new(0, 0x2000), GlobalAddr::new(1, 0x3000)],
            ),
        }
    }

    #[test]
    fn roundtrip_and_routing() {
        let l = InternalLayout { span: 64 };
        let n = node();
        let phys = n.physical_with_lock(&l);
        assert_eq!(phys.len(), 1160);
        assert_eq!(Internal::decode(&l, &phys).unwrap(), n);
        assert_eq!(n.child_for(10), (n.leftmost, GlobalAddr::new(0, 0x2000)));
        assert_eq!(n.child_for(20), (GlobalAddr::new(0, 0x2000), GlobalAddr::new(1, 0x3000)));
        assert_eq!(n.child_for(99), (GlobalAddr::new(1, 0x3000), n.sibling_leftmost));
        assert_eq!(
            n.children_from(25),
            vec![GlobalAddr::new(0, 0x2000), GlobalAddr::new(1, 0x3000)]
        );
        // A version mismatch anywhere is a torn node.
        let mut bad = phys.clone();
        bad[cacheline::phys(l.entry(5))] ^= 1;
        assert!(Internal::decode(&l, &bad).is_err());
        // No routes, and every entry used: the entry walk's two ends.
        for used in [0, 1, 63, 64] {
            let mut m = n.clone();
            let pivots: Vec<u64> = (0..used as u64).map(|i| 20 + i).collect();
            let children: Vec<GlobalAddr> =
                (0..used as u64).map(|i| GlobalAddr::new(1, 0x4000 + 64 * i)).collect();
            m.routes = Routes::new(&pivots, &children);
            let phys = m.physical_with_lock(&l);
            assert_eq!(Internal::decode(&l, &phys).unwrap(), m, "{used} routes");
            let last = cacheline::phys(l.entry(63));
            let mut bad = phys.clone();
            bad[last] ^= 1;
            assert!(Internal::decode(&l, &bad).is_err(), "{used} routes: last entry's version");
        }
    }

    #[test]
    fn cache_budget_and_lookup() {
        let c = NodeCache::new(300);
        let n = node();
        let cost = n.cache_cost();
        assert_eq!(cost, 8 + 43 + 34);
        c.insert(GlobalAddr::new(0, 1), n.clone());
        assert_eq!(c.bytes(), cost);
        let cached = |k| c.with(1, &k, |_| ()).is_some();
        assert!(cached(50));
        assert!(!cached(100));
        assert!(!cached(5));
        // Over budget: the oldest goes.
        for i in 0..5 {
            let mut m = n.clone();
            m.low = 1000 * (i + 1);
            m.high = m.low + 10;
            c.insert(GlobalAddr::new(0, 2 + i), m);
        }
        assert!(c.bytes() <= 300);
        assert!(!cached(50));
        c.invalidate(1, &5000, GlobalAddr::new(0, 6));
        assert!(!cached(5005));
    }
}
