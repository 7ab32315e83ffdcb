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
use smallvec::SmallVec;

use super::node::{slot_addr, NodeImage};
use super::{Header, Partial, Slot};

/// Grows (or helps grow) the node at `node`, of which `img` is a READ, whose parent slot at
/// `parent_slot` names it with partial key `partial`. Returns the new node if this call
/// published it, `None` if someone else did (or the parent slot moved: a fresh descent finds
/// the node's current parent and finishes the switch).
pub async fn grow<T: Transport>(
    c: &Client<T>,
    parent_slot: GlobalAddr,
    partial: Partial,
    node: GlobalAddr,
    img: &NodeImage,
) -> IndexResult<Option<GlobalAddr>> {
    let kind = img.header.kind;
    let next = kind.grow().ok_or_else(|| {
        IndexError::Corrupt(format!("a radix node of the largest kind at {node:?} is full"))
    })?;
    let mut slots: SmallVec<[Slot; 16]> = img.slots().into();
    for (i, s) in slots.iter_mut().enumerate() {
        while !s.is_frozen() {
            let old = c.cas(slot_addr(node, i), s.0, s.frozen().0).await?;
            *s = if old == s.0 { s.frozen() } else { Slot(old) };
        }
    }
    let live: Vec<Slot> =
        slots.iter().map(|s| s.thawed()).filter(|s| !s.is_empty() && !s.is_tombstone()).collect();
    let header = Header { kind: next, ..img.header };
    let at = c.alloc_on(node.node(), next.alloc_bytes(), 64).await?;
    let mut buf = Vec::with_capacity(next.bytes());
    NodeImage::encode_new(parent_slot, &header, &live, &mut buf);
    c.write(at, &buf).await?;
    let old = Slot::inner(partial, node, kind);
    let new = Slot::inner(partial, at, next);
    if c.cas(parent_slot, old.0, new.0).await? != old.0 {
        return Ok(None);
    }
    for (k, s) in live.iter().enumerate() {
        if let Some(child) = s.addr() {
            c.write_zero_wait(child, &slot_addr(at, k).raw().to_le_bytes())?;
        }
    }
    Ok(Some(at))
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;
    use crate::radix::node::Lookup;
    use crate::radix::Kind;

    #[test]
    fn grow_freezes_copies_publishes_once_and_drops_tombstones() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let parent = c.alloc(Kind::N4.alloc_bytes(), 64).await.unwrap();
            let node = c.alloc(Kind::N4.alloc_bytes(), 64).await.unwrap();
            let leaf =
                |b: u8| Slot::leaf(Partial::Byte(b), GlobalAddr::new(0, 4096 * b as u64), 64);
            let children = [leaf(1), leaf(2).tombstone(), leaf(3), leaf(4)];
            let header = Header::new(Kind::N4, 3, b"abc", 2);
            let mut buf = Vec::new();
            NodeImage::encode_new(slot_addr(parent, 0), &header, &children, &mut buf);
            c.write(node, &buf).await.unwrap();
            let link = Slot::inner(Partial::Byte(b'a'), node, Kind::N4);
            c.write(slot_addr(parent, 0), &link.0.to_le_bytes()).await.unwrap();
            let img = NodeImage::decode(&buf, Kind::N4).unwrap();
            // A CAS that lands before the switch (slot 3 replaced) is carried into the copy.
            let moved = Slot::leaf(Partial::Byte(4), GlobalAddr::new(0, 4096 * 5), 64);
            c.cas(slot_addr(node, 3), leaf(4).0, moved.0).await.unwrap();
            let at = grow(&c, slot_addr(parent, 0), Partial::Byte(b'a'), node, &img)
                .await
                .unwrap()
                .expect("published");
            let word = Slot(c.read_word(slot_addr(parent, 0)).await.unwrap());
            assert_eq!(word, Slot::inner(Partial::Byte(b'a'), at, Kind::N16));
            let mut nb = vec![0; Kind::N16.bytes()];
            c.read(at, &mut nb).await.unwrap();
            let grown = NodeImage::decode(&nb, Kind::N16).unwrap();
            assert_eq!(grown.header, Header { kind: Kind::N16, ..header });
            assert_eq!(grown.rev, slot_addr(parent, 0));
            assert_eq!(grown.live_sorted().len(), 3, "the tombstone is dropped");
            assert!(
                matches!(grown.lookup(Partial::Byte(4)), Lookup::Found(_, s) if s.addr() == moved.addr())
            );
            // Every old slot is frozen: a late CAS fails; a helper publishes nothing.
            let mut ob = vec![0; Kind::N4.bytes()];
            c.read(node, &mut ob).await.unwrap();
            let old = NodeImage::decode(&ob, Kind::N4).unwrap();
            assert!(old.slots().iter().all(|s| s.is_frozen()));
            assert_ne!(c.cas(slot_addr(node, 0), leaf(1).0, 0).await.unwrap(), leaf(1).0);
            let again = grow(&c, slot_addr(parent, 0), Partial::Byte(b'a'), node, &old).await;
            assert_eq!(again.unwrap(), None);
        }]);
    }
}
