//! Root slots: how an index is found in remote memory, and refused when it is not the one a
//! handle expects.
//!
//! # Layout
//!
//! The root table is [`ROOT_SLOTS`] aligned 8-byte words on memory node 0
//! ([`dmindex_fabric::layout`]). An index created with `root_slot = N` owns:
//!
//! ```text
//! slot N      root word: the index's own (an address, a height and an address, ...); 0 = free
//! slot N + 1  descriptor, when the index keeps one here:
//!             +--------------------+-----------------------------------------+
//!             | magic (top `bits`) | shape (the remaining 64 - `bits` bits)  |
//!             +--------------------+-----------------------------------------+
//! ```
//!
//! # Create
//!
//! 1. Build the index, its root node included, in freshly allocated memory.
//! 2. [`RootSlot::claim`] the slot: a CAS from 0 to the root word. A slot in use is refused
//!    (`root slot N is already in use`, [`IndexError::Config`]) and nothing else is written.
//! 3. [`RootSlot::publish`] the descriptor: a WRITE of slot N + 1, after the claim, so that a
//!    refused create never overwrites another index's descriptor.
//!
//! # Open
//!
//! [`RootSlot::check`] READs the descriptor and refuses an empty slot (`root slot N is empty:
//! no index was created there`, [`IndexError::Config`]: a fresh memory node is not a corrupt
//! index), a foreign magic (`no <index> at root slot N`, [`IndexError::Corrupt`]) or the same
//! magic with another shape (`the <index> was created with another shape`,
//! [`IndexError::Config`]). An index that keeps its descriptor elsewhere (behind the root word)
//! READs the root word with [`RootSlot::load`] instead, which refuses an empty slot alike.

use dmindex_fabric::layout::{self, ROOT_SLOTS};
use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

/// The magic number that marks one kind of index's descriptor word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Magic {
    /// What the index is called in errors (`no <name> at root slot N`).
    pub name: &'static str,
    pub value: u64,
    /// Bits the magic takes at the top of the word (1..=63).
    pub bits: u32,
}

impl Magic {
    /// The descriptor word of an index of this kind with `shape` (which fits below the magic).
    pub const fn word(&self, shape: u64) -> u64 {
        debug_assert!(shape >> (64 - self.bits) == 0, "the shape overlaps the magic");
        self.value << (64 - self.bits) | shape
    }

    /// Whether descriptor word `d` carries this magic.
    pub const fn marks(&self, d: u64) -> bool {
        d >> (64 - self.bits) == self.value
    }
}

/// Root-table slot N of an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RootSlot {
    slot: u32,
}

impl RootSlot {
    /// Slot `slot`, for an index that keeps no descriptor in the root table.
    pub fn new(slot: u32) -> IndexResult<RootSlot> {
        if slot >= ROOT_SLOTS {
            return Err(IndexError::Config(format!(
                "root slot {slot} is out of range (0..{ROOT_SLOTS})"
            )));
        }
        Ok(RootSlot { slot })
    }

    /// Slot `slot` with its descriptor in `slot + 1`.
    pub fn with_descriptor(slot: u32) -> IndexResult<RootSlot> {
        if slot.saturating_add(1) >= ROOT_SLOTS {
            return Err(IndexError::Config(format!(
                "root slot {slot} has no room for the descriptor"
            )));
        }
        Ok(RootSlot { slot })
    }

    /// The root word's address.
    pub fn addr(&self) -> GlobalAddr {
        layout::root_slot(self.slot)
    }

    /// The descriptor's address.
    ///
    /// # Panics
    /// If the slot, made by [`RootSlot::new`], is the last one.
    fn descriptor_addr(&self) -> GlobalAddr {
        layout::root_slot(self.slot + 1)
    }

    /// Claims the slot for root word `root` (not 0): a CAS from 0, refused if the slot is in use.
    pub async fn claim<T: Transport>(&self, c: &Client<T>, root: u64) -> IndexResult<()> {
        if c.cas(self.addr(), 0, root).await? != 0 {
            return Err(IndexError::Config(format!("root slot {} is already in use", self.slot)));
        }
        Ok(())
    }

    /// READs the root word; an empty slot is refused (`RootSlot::empty`).
    pub async fn load<T: Transport>(&self, c: &Client<T>) -> IndexResult<u64> {
        match c.read_word(self.addr()).await? {
            0 => Err(self.empty()),
            w => Ok(w),
        }
    }

    /// What opening an empty slot says: nothing was created there (a fresh memory node, or
    /// another root slot than the index's), which is not a corrupt index.
    fn empty(&self) -> IndexError {
        IndexError::Config(format!(
            "root slot {} is empty: no index was created there (create and load one first, or \
             name the root slot it was created at)",
            self.slot
        ))
    }

    /// WRITEs the descriptor of a `magic` index with `shape` (after [`RootSlot::claim`]).
    pub async fn publish<T: Transport>(
        &self,
        c: &Client<T>,
        magic: &Magic,
        shape: u64,
    ) -> IndexResult<()> {
        c.write(self.descriptor_addr(), &magic.word(shape).to_le_bytes()).await?;
        Ok(())
    }

    /// READs the descriptor and refuses another kind of index, or another shape.
    pub async fn check<T: Transport>(
        &self,
        c: &Client<T>,
        magic: &Magic,
        shape: u64,
    ) -> IndexResult<()> {
        let d = c.read_word(self.descriptor_addr()).await?;
        if d == 0 && c.read_word(self.addr()).await? == 0 {
            return Err(self.empty());
        }
        if !magic.marks(d) {
            return Err(IndexError::Corrupt(format!(
                "no {} at root slot {}",
                magic.name, self.slot
            )));
        }
        if d != magic.word(shape) {
            return Err(IndexError::Config(format!(
                "the {} was created with another shape (descriptor {d:#x})",
                magic.name
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;

    const TREE: Magic = Magic { name: "test tree", value: 0x62, bits: 7 };
    const OTHER: Magic = Magic { name: "other", value: 0x5, bits: 4 };

    fn config_err(r: IndexResult<()>) -> String {
        match r {
            Err(IndexError::Config(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn descriptor_bits_are_pinned() {
        assert_eq!(TREE.word(0x1234), 0x62 << 57 | 0x1234);
        assert_eq!(TREE.word(0), 0xC400_0000_0000_0000);
        assert!(TREE.marks(TREE.word((1 << 57) - 1)) && !TREE.marks(OTHER.word(1)));
        assert_eq!(RootSlot::new(3).unwrap().addr(), GlobalAddr::new(0, 0x1000 + 3 * 8));
    }

    #[test]
    fn create_claims_open_checks() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let s = RootSlot::with_descriptor(4).unwrap();
            s.claim(&c, 0xABC).await.unwrap();
            s.publish(&c, &TREE, 7).await.unwrap();
            assert_eq!(c.read_word(layout::root_slot(5)).await.unwrap(), TREE.word(7));
            assert_eq!(s.load(&c).await.unwrap(), 0xABC);
            s.check(&c, &TREE, 7).await.unwrap();
            // A second create is refused and leaves the first one's words alone.
            assert_eq!(config_err(s.claim(&c, 0xDEF).await), "root slot 4 is already in use");
            assert_eq!(s.load(&c).await.unwrap(), 0xABC);
            let e = config_err(s.check(&c, &TREE, 8).await);
            assert!(e.starts_with("the test tree was created with another shape"), "{e}");
            let e = s.check(&c, &OTHER, 7).await;
            assert!(matches!(e, Err(IndexError::Corrupt(m)) if m == "no other at root slot 4"));
            // An empty slot is not a corrupt index: nothing was created there.
            let empty = RootSlot::with_descriptor(9).unwrap();
            let e = config_err(empty.load(&c).await.map(drop));
            assert!(e.starts_with("root slot 9 is empty: no index was created there"), "{e}");
            let e = config_err(empty.check(&c, &TREE, 7).await);
            assert!(e.starts_with("root slot 9 is empty: no index was created there"), "{e}");
        }]);
        let e = RootSlot::with_descriptor(ROOT_SLOTS - 1).unwrap_err();
        assert_eq!(e, IndexError::Config("root slot 511 has no room for the descriptor".into()));
        assert!(RootSlot::new(ROOT_SLOTS - 1).is_ok() && RootSlot::new(ROOT_SLOTS).is_err());
    }
}
