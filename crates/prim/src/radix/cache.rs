//! The CN-side radix cache: copies of inner nodes by address, within a byte budget, shared by a
//! compute node's clients.
//!
//! # Walk
//!
//! A lookup starts at the root's copy and follows the copies' slots by the key's partial keys,
//! checking each copy's prefix, until a child is a leaf, missing, or not cached. The result is a
//! *hint*: copies may be stale. What the design does with it (see SMART) keeps answers exact:
//! a leaf found through a copy is trusted only if it is live and holds the key; anything else is
//! settled by reading nodes afresh.
//!
//! # Budget
//!
//! A node costs 9 + 8·N bytes, N its used slots, as SMART charges it (its copies keep only the
//! used records). Past the budget the oldest
//! insertions are evicted first; a budget of `u64::MAX` is SMART-Opt's unlimited cache.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLock;
use dmindex_fabric::GlobalAddr;

use super::node::{slot_addr, Kind, NodeImage};
use super::slot::{Child, Partial, Slot};
use crate::hash::AddrHash;

/// Bytes a cached node with `children` used slots is charged.
pub const fn cost(children: usize) -> u64 {
    9 + 8 * children as u64
}

fn charge(n: &NodeImage) -> u64 {
    cost(n.slots().iter().filter(|s| !s.is_empty()).count())
}

#[derive(Default)]
struct Inner {
    nodes: HashMap<GlobalAddr, Arc<NodeImage>, AddrHash>,
    fifo: VecDeque<GlobalAddr>,
    bytes: u64,
}

/// Where a walk over cached copies stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The node the walk stopped at, and its kind.
    pub node: GlobalAddr,
    pub kind: Kind,
    /// Its copy, if the walk used it (the key matched its prefix), and the copy's slot for the
    /// key if it has one (a leaf, or a frozen child).
    pub copy: Option<Arc<NodeImage>>,
    pub slot: Option<(usize, Slot)>,
    /// How `node` was reached: its parent, the parent's slot address and word, the parent's
    /// depth (`None` at the root).
    pub link: Option<CachedLink>,
    /// Copies looked up in the map on the way, the miss that ended the walk included: each
    /// is one [`dmindex_fabric::Work::RadixStep`] (SMART pays one per level a key descends).
    pub probes: u64,
}

/// A parent-to-child link as a cached copy has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedLink {
    pub parent: GlobalAddr,
    pub slot: GlobalAddr,
    pub word: Slot,
    pub depth: usize,
}

/// A compute node's radix cache.
pub struct RadixCache {
    inner: ShardedLock<Inner>,
    budget: u64,
}

impl RadixCache {
    pub fn new(budget: u64) -> RadixCache {
        RadixCache { inner: ShardedLock::new(Inner::default()), budget }
    }

    /// Bytes charged for the copies held.
    pub fn bytes(&self) -> u64 {
        self.inner.read().expect("radix cache").bytes
    }

    /// Copies held.
    pub fn len(&self) -> usize {
        self.inner.read().expect("radix cache").nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, addr: GlobalAddr) -> Option<Arc<NodeImage>> {
        self.inner.read().expect("radix cache").nodes.get(&addr).cloned()
    }

    /// Keeps (or refreshes) the copy of the node at `addr`.
    pub fn insert(&self, addr: GlobalAddr, node: NodeImage) {
        self.insert_shared(addr, Arc::new(node));
    }

    /// [`RadixCache::insert`] of an image the caller keeps using (shared, not copied).
    pub fn insert_shared(&self, addr: GlobalAddr, node: Arc<NodeImage>) {
        let c = charge(&node);
        if c > self.budget {
            return;
        }
        node.index();
        let mut g = self.inner.write().expect("radix cache");
        match g.nodes.insert(addr, node) {
            Some(old) => g.bytes = g.bytes - charge(&old) + c,
            None => {
                g.bytes += c;
                g.fifo.push_back(addr);
            }
        }
        while g.bytes > self.budget {
            let Some(a) = g.fifo.pop_front() else { break };
            if let Some(old) = g.nodes.remove(&a) {
                g.bytes -= charge(&old);
            }
        }
    }

    /// Drops the copy of the node at `addr`.
    pub fn invalidate(&self, addr: GlobalAddr) {
        let mut g = self.inner.write().expect("radix cache");
        if let Some(old) = g.nodes.remove(&addr) {
            g.bytes -= charge(&old);
            // Its FIFO entry stays and is skipped when reached.
        }
    }

    /// Follows cached copies from `root` (of `kind`) along `key`.
    pub fn walk(&self, root: GlobalAddr, kind: Kind, key: &[u8]) -> Walk {
        self.walk_with(root, kind, key, None)
    }

    /// [`RadixCache::walk`], except that at a copy of depth `floor_depth` the child is the
    /// floor of the key's byte ([`NodeImage::floor`]), not an exact match: Dolphin's special
    /// nodes name each leaf by the last byte of its low key.
    pub fn walk_with(
        &self,
        root: GlobalAddr,
        kind: Kind,
        key: &[u8],
        floor_depth: Option<usize>,
    ) -> Walk {
        self.walk_recording(root, kind, key, floor_depth, None)
    }

    /// [`RadixCache::walk`] that also appends to `path` every node it passes, root first and
    /// the node it stops at last, with its kind: addresses a scan READs afresh in one round.
    pub fn walk_path(
        &self,
        root: GlobalAddr,
        kind: Kind,
        key: &[u8],
        path: &mut Vec<(GlobalAddr, Kind)>,
    ) -> Walk {
        self.walk_recording(root, kind, key, None, Some(path))
    }

    fn walk_recording(
        &self,
        root: GlobalAddr,
        kind: Kind,
        key: &[u8],
        floor_depth: Option<usize>,
        mut path: Option<&mut Vec<(GlobalAddr, Kind)>>,
    ) -> Walk {
        let g = self.inner.read().expect("radix cache");
        let mut w = Walk { node: root, kind, copy: None, slot: None, link: None, probes: 0 };
        // The copy is cloned out once, where the walk stops: an `Arc` clone per level would
        // write the hot upper copies' counts from every client thread.
        loop {
            if let Some(p) = path.as_deref_mut() {
                p.push((w.node, w.kind));
            }
            w.probes += 1;
            let Some(copy) = g.nodes.get(&w.node) else { return w };
            let h = copy.header;
            if h.mismatch(key, 0).is_some() {
                // The key leaves this copy's prefix: the copy may be stale, decide afresh.
                return w;
            }
            let p = Partial::of(key, h.depth as usize);
            let found =
                if floor_depth == Some(h.depth as usize) { copy.floor(p) } else { copy.find(p) };
            let Some((i, s)) = found else {
                w.copy = Some(copy.clone());
                return w;
            };
            match s.child() {
                Some(Child::Inner { addr, kind }) if !s.is_frozen() && !s.is_tombstone() => {
                    w.link = Some(CachedLink {
                        parent: w.node,
                        slot: slot_addr(w.node, i),
                        word: s,
                        depth: h.depth as usize,
                    });
                    w.node = addr;
                    w.kind = kind;
                }
                _ => {
                    (w.copy, w.slot) = (Some(copy.clone()), Some((i, s)));
                    return w;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::radix::Header;

    fn node(depth: usize, key: &[u8], children: &[Slot]) -> NodeImage {
        let header = Header::new(Kind::N4, depth, key, depth.min(1));
        let mut slots = children.to_vec();
        slots.resize(4, Slot::EMPTY);
        NodeImage::new(GlobalAddr::NULL, header, slots.into())
    }

    #[test]
    fn walk_follows_copies_and_budget_evicts_oldest() {
        let root = GlobalAddr::new(0, 64);
        let mid = GlobalAddr::new(0, 128);
        let leaf = GlobalAddr::new(0, 192);
        let c = RadixCache::new(2 * cost(1));
        c.insert(root, node(0, b"", &[Slot::inner(Partial::Byte(b'a'), mid, Kind::N4)]));
        c.insert(mid, node(2, b"ab", &[Slot::leaf(Partial::Byte(b'c'), leaf, 64)]));
        assert_eq!(c.bytes(), 2 * 17);
        let w = c.walk(root, Kind::N4, b"abc");
        assert_eq!((w.node, w.link.map(|l| l.slot)), (mid, Some(root.add(16))));
        // The root's copy and mid's: the leaf is not looked up.
        assert_eq!(w.probes, 2);
        assert_eq!(w.slot.map(|s| s.1.addr()), Some(Some(leaf)));
        let mut path = Vec::new();
        assert_eq!(c.walk_path(root, Kind::N4, b"abc", &mut path), c.walk(root, Kind::N4, b"abc"));
        assert_eq!(path, [(root, Kind::N4), (mid, Kind::N4)], "the nodes passed, root first");
        // The key leaves mid's prefix: the walk stops before trusting mid's copy.
        let w = c.walk(root, Kind::N4, b"aXc");
        assert_eq!((w.node, w.copy, w.slot), (mid, None, None));
        let w = c.walk(root, Kind::N4, b"b");
        assert_eq!((w.node, w.slot, w.probes), (root, None, 1));
        assert!(w.copy.is_some());
        // A third node evicts the root's copy (oldest first).
        c.insert(leaf, node(0, b"", &[Slot::leaf(Partial::Byte(1), leaf, 64)]));
        assert!(c.get(root).is_none() && c.get(mid).is_some());
        assert_eq!(c.walk(root, Kind::N4, b"abc").copy, None);
        c.invalidate(mid);
        assert_eq!((c.len(), c.bytes()), (1, 17));
        // A floor walk at depth 2 picks the largest partial key at most the key's byte.
        let special = GlobalAddr::new(0, 256);
        let (l0, l1) = (GlobalAddr::new(0, 320), GlobalAddr::new(0, 384));
        let c = RadixCache::new(u64::MAX);
        c.insert(root, node(0, b"", &[Slot::inner(Partial::Byte(b'a'), special, Kind::N4)]));
        c.insert(
            special,
            node(
                2,
                b"ab",
                &[Slot::leaf(Partial::Byte(0x80), l1, 64), Slot::leaf(Partial::Byte(0), l0, 64)],
            ),
        );
        let leaf_of =
            |key: &[u8], floor| c.walk_with(root, Kind::N4, key, floor).slot.map(|s| s.1.addr());
        assert_eq!(leaf_of(b"ab\x7f", Some(2)), Some(Some(l0)));
        assert_eq!(leaf_of(b"ab\x80", Some(2)), Some(Some(l1)));
        assert_eq!(leaf_of(b"ab\xff", Some(2)), Some(Some(l1)));
        assert_eq!(leaf_of(b"ab\x7f", None), None, "an exact walk misses between partial keys");
        let unlimited = RadixCache::new(u64::MAX);
        unlimited.insert(root, node(0, b"", &[]));
        assert_eq!(unlimited.len(), 1);
    }
}
