//! Special nodes: the depth-7 radix nodes that name a 7-byte prefix's leaves, each by the last
//! byte of its low key.
//!
//! # A new prefix
//!
//! The first insert under a 7-byte prefix `P` makes its special node (an N4 at depth 7 whose
//! compressed prefix is the key bytes below the node that will hold it) with one leaf covering
//! `[P00, PFF]` that already holds the key, LIVE, and publishes the node by one CAS: into the
//! empty slot of the node the descent ended at, or, when the key left a node's prefix, into the
//! new node a path split puts above that one ([`dmindex_prim::radix::Tree::path_split`]). The
//! pair appears with the CAS: that is the insert's linearization point. A lost CAS leaves the
//! two new objects unreachable (never reused, as in SMART) and the insert starts over.
//!
//! A prefix's special node goes to the memory node its prefix hashes to (next to the parent,
//! every prefix would be on the root's memory node; with a client's allocation chunk, all the
//! prefixes one client made), and all the prefix's leaves live there too, so a split publishes
//! and a scan reads a prefix with one doorbell.
//!
//! # A split's new leaf
//!
//! `Dolphin::publish` CASes the new leaf into the first empty slot of the special node's
//! current incarnation. The split key's last byte is unique in the node: it lies strictly inside
//! the claimed leaf's range, which no other leaf's low key does, and only the claimer of that
//! leaf publishes a leaf with a low key in it. A full node is grown by the shared helped type
//! switch; a frozen one is helped; both found by a fresh descent on the split key.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::hash::hash_u64;
use dmindex_prim::radix::node::{slot_addr, Lookup};
use dmindex_prim::radix::{At, Header, Kind, NodeImage, Partial, Pos, Slot};

use crate::leaf::{encode, State};
use crate::{bump, Dolphin, SPECIAL_DEPTH};

/// Bytes a special node names a leaf with in its slot (Dolphin ignores it: the leaf size is the
/// index's).
const LEAF_UNITS: usize = 64;

/// A slot naming the leaf at `addr` whose low key is `lo`.
pub fn leaf_slot(lo: u64, addr: GlobalAddr) -> Slot {
    Slot::leaf(Partial::Byte(lo as u8), addr, LEAF_UNITS)
}

/// The memory node of `key`'s prefix.
fn home(key: u64, nodes: u16) -> u16 {
    (hash_u64(key >> 8) % u64::from(nodes.max(1))) as u16
}

impl Dolphin {
    /// Makes the special node and first leaf of `key`'s prefix, to be named by a slot of a node
    /// at depth `d` whose address is `rev`; both are in place once this returns or, if they
    /// share `near`'s memory node, once a later verb to it executes. The slot naming the node.
    async fn place_prefix<T: Transport>(
        &self,
        c: &Client<T>,
        near: GlobalAddr,
        rev: GlobalAddr,
        d: usize,
        key: u64,
        value: &[u8],
    ) -> IndexResult<Slot> {
        let kb = key.to_be_bytes();
        let node = c.alloc_on(home(key, c.info().nodes()), Kind::N4.alloc_bytes(), 64).await?;
        let leaf = c.alloc_on(node.node(), self.shape.bytes as u64, 64).await?;
        let lo = key & !0xFF;
        let mut leaf_img = Vec::with_capacity(self.shape.bytes);
        let pair = [(key, value, State::Live)];
        encode(
            &self.shape,
            slot_addr(node, 0).raw(),
            0,
            lo,
            lo | 0xFF,
            1,
            &[],
            pair,
            &mut leaf_img,
        );
        let header = Header::new(Kind::N4, SPECIAL_DEPTH, &kb, SPECIAL_DEPTH - (d + 1));
        let mut node_img = Vec::with_capacity(Kind::N4.bytes());
        NodeImage::encode_new(rev, &header, &[leaf_slot(lo, leaf)], &mut node_img);
        if node.node() == near.node() {
            c.write_zero_wait(leaf, &leaf_img)?;
            c.write_zero_wait(node, &node_img)?;
        } else {
            let mut ops = [
                BatchOp::Write { addr: leaf, data: &leaf_img },
                BatchOp::Write { addr: node, data: &node_img },
            ];
            c.batch(&mut ops).await?;
        }
        Ok(Slot::inner(Partial::Byte(kb[d]), node, Kind::N4))
    }

    /// Inserts `key` under a 7-byte prefix that has no special node where the descent ended
    /// (`pos`, read afresh). Whether it did; `false` means start over.
    pub(crate) async fn add_prefix<T: Transport>(
        &self,
        c: &Client<T>,
        pos: &Pos,
        key: u64,
        value: &[u8],
    ) -> IndexResult<bool> {
        let kb = key.to_be_bytes();
        match pos.at {
            At::Slot(Lookup::Absent(Some(i))) => {
                let at = slot_addr(pos.node, i);
                let new = self.place_prefix(c, pos.node, at, pos.depth(), key, value).await?;
                let won = c.cas(at, Slot::EMPTY.0, new.0).await? == Slot::EMPTY.0;
                if won {
                    bump(&self.counters.new_prefixes);
                }
                Ok(won)
            }
            At::Slot(Lookup::Absent(None)) => {
                let link = pos.link.ok_or_else(|| {
                    IndexError::Corrupt("the dolphin root has no free slot".into())
                })?;
                self.tree().switch(c, &link, pos.node, &pos.img).await?;
                Ok(false)
            }
            At::Mismatch(j) => {
                let link = pos.link.ok_or_else(|| {
                    IndexError::Corrupt("a key leaves the dolphin root's prefix".into())
                })?;
                let m = c.alloc_on(link.slot.node(), Kind::N4.alloc_bytes(), 64).await?;
                let child = self.place_prefix(c, m, slot_addr(m, 1), j, key, value).await?;
                let won = self.tree().path_split(c, pos, j, &kb, m, child).await?;
                if won {
                    bump(&self.counters.path_splits);
                    bump(&self.counters.new_prefixes);
                }
                Ok(won)
            }
            At::Slot(Lookup::Found(..)) => Err(IndexError::Corrupt(format!(
                "a dolphin node at depth {} names a leaf",
                pos.depth()
            ))),
        }
    }

    /// Names the new leaf `leaf`, whose low key is `lo`, in the special node of `lo`'s prefix,
    /// of which `img` is a fresh READ of the incarnation at `node`. The slot's address.
    pub(crate) async fn publish<T: Transport>(
        &self,
        c: &Client<T>,
        mut node: GlobalAddr,
        mut img: NodeImage,
        lo: u64,
        leaf: GlobalAddr,
    ) -> IndexResult<GlobalAddr> {
        let kb = lo.to_be_bytes();
        let new = leaf_slot(lo, leaf);
        loop {
            if !img.any_frozen() {
                match img.lookup(new.partial()) {
                    Lookup::Absent(Some(i)) => {
                        let at = slot_addr(node, i);
                        if c.cas(at, Slot::EMPTY.0, new.0).await? == Slot::EMPTY.0 {
                            self.cache.invalidate(node);
                            return Ok(at);
                        }
                        img = self.tree().read_node(c, node, img.header.kind).await?;
                        continue;
                    }
                    Lookup::Found(..) => {
                        return Err(IndexError::Corrupt(format!(
                            "a dolphin special node at {node:?} already names low key {lo:#x}"
                        )))
                    }
                    Lookup::Absent(None) => {}
                }
            }
            // Full or frozen: find the current incarnation afresh (the descent helps a frozen
            // one) and grow it if full.
            let pos = self.tree().locate(c, &kb, false).await?;
            if pos.depth() != SPECIAL_DEPTH {
                return Err(IndexError::Corrupt(format!(
                    "the special node of a claimed leaf's prefix {:#x} is gone",
                    lo >> 8
                )));
            }
            if matches!(pos.img.lookup(new.partial()), Lookup::Absent(None)) {
                // Grown, the image below is stale: the next round finds the new incarnation.
                let link = pos.link.ok_or_else(|| {
                    IndexError::Corrupt("a dolphin special node is the root".into())
                })?;
                self.tree().switch(c, &link, pos.node, &pos.img).await?;
            }
            (node, img) = (pos.node, (*pos.img).clone());
        }
    }
}
