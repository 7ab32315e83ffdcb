//! The descent every radix design shares: from the deepest cached copy (or the root) to the node
//! where a key's slot lives, reading every node on the way afresh and helping any type switch it
//! meets; and the path split that puts a new node above one whose prefix a key leaves.
//!
//! # Trust
//!
//! A node read afresh and not frozen is the key's only place at the instant it was read (a
//! node's position is permanent). A prefix mismatch is trusted only if the link into the node
//! was itself read afresh: a cached link may skip a node a path split put above it, so the
//! descent then starts again from the root without the cache. A node reached through a cached
//! link whose reverse pointer names another slot was re-parented since the copy was taken: the
//! parent's copy is dropped.
//!
//! # Floor lookups
//!
//! A design may name children at one depth by the *floor* of the key's byte rather than by an
//! exact match (Dolphin's special nodes, whose slots name leaves by their low key's last byte):
//! [`Tree::floor_depth`].

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use super::node::{slot_addr, Lookup};
use super::slot::Child;
use super::{switch, Header, Kind, NodeImage, Partial, RadixCache, Slot};
use crate::attempts::Attempts;
use crate::counter::{bump, get};
use crate::work::Work;

/// The parent slot through which a node was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub slot: GlobalAddr,
    pub word: Slot,
    /// The parent's depth.
    pub depth: usize,
}

/// What the node says about the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// The key leaves the node's prefix at this position (trusted: the link was read afresh).
    Mismatch(usize),
    /// The node's slot for the key's partial key, or where a new one goes. At the floor depth,
    /// `Found` is the floor and `Absent(None)` means no slot is at most the key's byte.
    Slot(Lookup),
}

/// A node read afresh, unfrozen, and what it says about a key.
#[derive(Clone, Debug)]
pub struct Pos {
    pub node: GlobalAddr,
    /// Shared with the CN cache, which keeps the same copy.
    pub img: Arc<NodeImage>,
    pub link: Option<Link>,
    pub at: At,
}

impl Pos {
    pub fn depth(&self) -> usize {
        self.img.header.depth as usize
    }
}

/// Counters of the descent's slow paths.
#[derive(Debug, Default)]
pub struct DescentCounters {
    /// Descents started again from the root without the cache.
    pub fresh_restarts: AtomicU64,
    /// Cached parents found stale by a child's reverse pointer.
    pub stale_parents: AtomicU64,
    /// Type switches this compute node published.
    pub switches: AtomicU64,
}

impl DescentCounters {
    /// The counters as an index's `stats` rows.
    pub fn rows(&self) -> [(&'static str, u64); 3] {
        [
            ("fresh_restarts", get(&self.fresh_restarts)),
            ("stale_cached_parents", get(&self.stale_parents)),
            ("type_switches", get(&self.switches)),
        ]
    }
}

/// A compute node's view of one radix tree: its root, its cache, how it looks children up.
#[derive(Clone, Copy)]
pub struct Tree<'a> {
    pub root: GlobalAddr,
    /// The root's kind (the largest: a root never grows, so the root word never changes).
    pub root_kind: Kind,
    pub cache: &'a RadixCache,
    /// The depth whose children are looked up by floor, if any.
    pub floor_depth: Option<usize>,
    pub counters: &'a DescentCounters,
}

impl Tree<'_> {
    /// READs the node of `kind` at `addr`.
    pub async fn read_node<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        kind: Kind,
    ) -> IndexResult<NodeImage> {
        let mut buf = [0u8; Kind::N256.bytes()];
        let buf = &mut buf[..kind.bytes()];
        c.read(addr, buf).await?;
        // Decoding copies every slot word out of the READ.
        c.compute(Work::BytesScanned, buf.len() as u64);
        NodeImage::decode(buf, kind)
            .ok_or_else(|| IndexError::Corrupt(format!("no radix node of {kind:?} at {addr:?}")))
    }

    /// Grows (or helps grow) the full or frozen node at `node` ([`switch::grow`]).
    pub async fn switch<T: Transport>(
        &self,
        c: &Client<T>,
        link: &Link,
        node: GlobalAddr,
        img: &NodeImage,
    ) -> IndexResult<()> {
        let grown = switch::grow(c, link.slot, link.word.partial(), node, img).await?;
        if grown.is_some() {
            bump(&self.counters.switches);
        }
        self.cache.invalidate(node);
        Ok(())
    }

    /// The slot `img` has for `key`: the floor of its byte at the floor depth, else exact.
    pub fn slot_for(&self, img: &NodeImage, key: &[u8]) -> Lookup {
        let depth = img.header.depth as usize;
        let p = Partial::of(key, depth);
        if self.floor_depth == Some(depth) {
            return img.floor(p).map_or(Lookup::Absent(None), |(i, s)| Lookup::Found(i, s));
        }
        img.lookup(p)
    }

    /// Descends to `key`'s node. With `use_cache`, starts from the deepest cached copy on the
    /// key's path; a decision a stale link could falsify restarts without it. Restarts are
    /// bounded ([`crate::attempts`]): a node that stays frozen ends in a corrupt index.
    pub async fn locate<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        mut use_cache: bool,
    ) -> IndexResult<Pos> {
        let mut restarts = Attempts::new();
        'restart: loop {
            let (mut node, mut kind, mut link, mut trusted, mut parent) = if use_cache {
                let w = self.cache.walk_with(self.root, self.root_kind, key, self.floor_depth);
                c.compute(Work::RadixStep, w.probes);
                let link = w.link.map(|l| Link { slot: l.slot, word: l.word, depth: l.depth });
                (w.node, w.kind, link, w.link.is_none(), w.link.map(|l| l.parent))
            } else {
                (self.root, self.root_kind, None, true, None)
            };
            loop {
                let img = Arc::new(self.read_node(c, node, kind).await?);
                if let (false, Some(l), Some(p)) = (trusted, link, parent) {
                    if img.rev != l.slot {
                        // Re-parented since the parent's copy was taken.
                        bump(&self.counters.stale_parents);
                        self.cache.invalidate(p);
                    }
                }
                if self.cache.get(node).is_none_or(|old| *old != *img) {
                    self.cache.insert_shared(node, Arc::clone(&img));
                }
                if img.any_frozen() {
                    let Some(l) = link else {
                        return Err(IndexError::Corrupt("a radix root is frozen".into()));
                    };
                    self.cache.invalidate(node);
                    self.switch(c, &l, node, &img).await?;
                    restarts.failed(node, "radix node frozen for a type switch")?;
                    bump(&self.counters.fresh_restarts);
                    use_cache = false;
                    continue 'restart;
                }
                let from = match (trusted, link) {
                    (true, Some(l)) => l.depth + 1,
                    _ => 0,
                };
                if let Some(j) = img.header.mismatch(key, from) {
                    if !trusted {
                        restarts.failed(node, "radix node prefix through a cached link")?;
                        bump(&self.counters.fresh_restarts);
                        use_cache = false;
                        continue 'restart;
                    }
                    return Ok(Pos { node, img, link, at: At::Mismatch(j) });
                }
                let depth = img.header.depth as usize;
                let look = self.slot_for(&img, key);
                let hit = match look {
                    Lookup::Found(i, _) => Some(i),
                    Lookup::Absent(_) => None,
                };
                let floor = self.floor_depth == Some(depth);
                c.compute(Work::KeyCompare, img.slots_compared(hit, floor));
                if let Lookup::Found(i, s) = look {
                    if let (Some(Child::Inner { addr, kind: k }), false) =
                        (s.child(), s.is_tombstone())
                    {
                        link = Some(Link { slot: slot_addr(node, i), word: s, depth });
                        parent = Some(node);
                        node = addr;
                        kind = k;
                        trusted = true;
                        continue;
                    }
                }
                return Ok(Pos { node, img, link, at: At::Slot(look) });
            }
        }
    }

    /// `key` leaves `pos.node`'s prefix at `j` (`pos.at` is that mismatch): a new N4 at `m`, at
    /// depth `j`, holding the node and `child` (named by `key[j]`; its reverse pointer should be
    /// `slot_addr(m, 1)`), replaces the node in its parent's slot. `m` (and whatever `child`
    /// needs in place first) must be on the parent slot's memory node: posted there before the
    /// CAS, they are in place before it. Whether the CAS won.
    pub async fn path_split<T: Transport>(
        &self,
        c: &Client<T>,
        pos: &Pos,
        j: usize,
        key: &[u8],
        m: GlobalAddr,
        child: Slot,
    ) -> IndexResult<bool> {
        let link = pos
            .link
            .ok_or_else(|| IndexError::Corrupt("a key leaves the radix root's prefix".into()))?;
        let h = pos.img.header;
        let len = j - (link.depth + 1);
        debug_assert!(j < h.depth as usize && m.node() == link.slot.node());
        let children = [Slot::inner(Partial::Byte(h.byte_at(j)), pos.node, h.kind), child];
        let mut enc = Vec::with_capacity(Kind::N4.bytes());
        NodeImage::encode_new(link.slot, &Header::new(Kind::N4, j, key, len), &children, &mut enc);
        c.write_zero_wait(m, &enc)?;
        let new = Slot::inner(link.word.partial(), m, Kind::N4);
        if c.cas(link.slot, link.word.0, new.0).await? != link.word.0 {
            return Ok(false);
        }
        c.write_zero_wait(pos.node, &slot_addr(m, 0).raw().to_le_bytes())?;
        Ok(true)
    }
}
