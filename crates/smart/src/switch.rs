//! The type switch: a full node grows into the next kind.
//!
//! 1. **Freeze** every slot (CAS to itself with the frozen bit; a slot that changed meanwhile is
//!    frozen with its new value). From then on no CAS on the node can succeed, so nothing done
//!    to it is lost by the copy.
//! 2. **Copy** the live children (tombstones dropped) into a new node of the next kind with the
//!    same header, and WRITE it (awaited: the parent may be on another memory node).
//! 3. **Publish**: CAS the parent's slot from the old node to the new one. Whoever wins, the
//!    others' copies are garbage; every copy holds the same children, the frozen ones.
//! 4. Point the children's reverse pointers at their new slots (a hint only).
//!
//! Anyone who meets a frozen node runs the same steps, so a switcher that crashed after step 1
//! blocks no one. Round trips: one CAS per unfrozen slot, the WRITE, the parent CAS.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::radix::node::slot_addr;
use dmindex_prim::radix::{Header, NodeImage, Slot};

use crate::locate::Link;
use crate::{bump, SmartIndex, Variant};

impl<V: Variant> SmartIndex<V> {
    /// Grows (or helps grow) the node at `node`, reached through `link`; whether this call
    /// published the new node.
    pub(crate) async fn switch<T: Transport>(
        &self,
        c: &Client<T>,
        link: &Link,
        node: GlobalAddr,
        img: &NodeImage,
    ) -> IndexResult<bool> {
        let kind = img.header.kind;
        let next = kind.grow().ok_or_else(|| {
            IndexError::Corrupt(format!("a smart node of the largest kind at {node:?} is full"))
        })?;
        let mut slots = img.slots.clone();
        for (i, s) in slots.iter_mut().enumerate() {
            while !s.is_frozen() {
                let old = c.cas(slot_addr(node, i), s.0, s.frozen().0).await?;
                *s = if old == s.0 { s.frozen() } else { Slot(old) };
            }
        }
        let live: Vec<Slot> = slots
            .iter()
            .map(|s| s.thawed())
            .filter(|s| !s.is_empty() && !s.is_tombstone())
            .collect();
        let header = Header { kind: next, ..img.header };
        let at = c.alloc_on(node.node(), next.alloc_bytes(), 64).await?;
        let mut buf = Vec::with_capacity(next.bytes());
        NodeImage::encode_new(link.slot, &header, &live, &mut buf);
        c.write(at, &buf).await?;
        let old = Slot::inner(link.word.partial(), node, kind);
        let new = Slot::inner(link.word.partial(), at, next);
        if c.cas(link.slot, old.0, new.0).await? != old.0 {
            return Ok(false);
        }
        bump(&self.counters.switches);
        self.cache.invalidate(node);
        for (k, s) in live.iter().enumerate() {
            if let Some(child) = s.addr() {
                c.write_zero_wait(child, &slot_addr(at, k).raw().to_le_bytes())?;
            }
        }
        Ok(true)
    }
}
