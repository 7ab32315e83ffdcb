//! The descent: from the deepest cached copy (or the root) to the node where a key's slot lives,
//! reading every node on the way afresh, helping any type switch it meets.

use std::sync::Arc;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::radix::node::{slot_addr, Lookup};
use dmindex_prim::radix::slot::Child;
use dmindex_prim::radix::{self, Kind, NodeImage, Partial, Slot};

use crate::{bump, SmartIndex, Variant, ROOT_KIND};

/// The parent slot through which a node was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub slot: GlobalAddr,
    pub word: Slot,
    /// The parent's depth.
    pub depth: usize,
}

/// What the node says about the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum At {
    /// The key leaves the node's prefix at this position (trusted: the link was read afresh).
    Mismatch(usize),
    /// The node's slot for the key's partial key, or where a new one goes.
    Slot(Lookup),
}

/// A node read afresh, unfrozen, and what it says about a key.
#[derive(Clone, Debug)]
pub(crate) struct Pos {
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

impl<V: Variant> SmartIndex<V> {
    /// READs the node of `kind` at `addr`.
    pub(crate) async fn read_node<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        kind: Kind,
    ) -> IndexResult<NodeImage> {
        let mut buf = [0u8; Kind::N256.bytes()];
        let buf = &mut buf[..kind.bytes()];
        c.read(addr, buf).await?;
        NodeImage::decode(buf, kind)
            .ok_or_else(|| IndexError::Corrupt(format!("no smart node of {kind:?} at {addr:?}")))
    }

    /// Grows (or helps grow) the full or frozen node at `node` ([`radix::switch`]).
    pub(crate) async fn switch<T: Transport>(
        &self,
        c: &Client<T>,
        link: &Link,
        node: GlobalAddr,
        img: &NodeImage,
    ) -> IndexResult<()> {
        let grown = radix::switch::grow(c, link.slot, link.word.partial(), node, img).await?;
        if grown.is_some() {
            bump(&self.counters.switches);
        }
        self.cache.invalidate(node);
        Ok(())
    }

    /// Descends to `key`'s node. With `use_cache`, starts from the deepest cached copy on the
    /// key's path; a decision a stale link could falsify restarts without it.
    pub(crate) async fn locate<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        mut use_cache: bool,
    ) -> IndexResult<Pos> {
        'restart: loop {
            let (mut node, mut kind, mut link, mut trusted, mut parent) = if use_cache {
                let w = self.cache.walk(self.root, ROOT_KIND, key);
                let link = w.link.map(|l| Link { slot: l.slot, word: l.word, depth: l.depth });
                (w.node, w.kind, link, w.link.is_none(), w.link.map(|l| l.parent))
            } else {
                (self.root, ROOT_KIND, None, true, None)
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
                        return Err(IndexError::Corrupt("the smart root is frozen".into()));
                    };
                    self.cache.invalidate(node);
                    self.switch(c, &l, node, &img).await?;
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
                        bump(&self.counters.fresh_restarts);
                        use_cache = false;
                        continue 'restart;
                    }
                    return Ok(Pos { node, img, link, at: At::Mismatch(j) });
                }
                let depth = img.header.depth as usize;
                let look = img.lookup(Partial::of(key, depth));
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
}
