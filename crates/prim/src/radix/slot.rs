//! The 8-byte child slot of an inner node.
//!
//! ```text
//!  63 62 61 60 59    56 55        48 47     42 41                          0
//! +--+--+--+--+--------+------------+---------+-----------------------------+
//! |F |T |L |E |  size  |  partial   | MN (6)  |   offset / 64 (42)          |
//! +--+--+--+--+--------+------------+---------+-----------------------------+
//!  F frozen (a type switch copied it)    T tombstone (the leaf was deleted)
//!  L leaf    E end of key: the child's key ends at this node's depth (partial byte 0)
//!  size: a leaf's length in 64-B units − 1 (up to 16 units), or an inner child's kind
//! ```
//!
//! 0 is the empty slot. Everything a reader needs to fetch the child in one READ (where, how
//! long) is in the word, so a child costs no extra round trip to size.

use dmindex_fabric::GlobalAddr;

use super::node::Kind;

/// The frozen bit: set by a type switch; no CAS expecting an unfrozen word succeeds after it.
pub const FROZEN: u64 = 1 << 63;
/// A deleted leaf's slot: keeps its partial key (so it is reused only by that key byte).
pub const TOMBSTONE: u64 = 1 << 62;
const LEAF: u64 = 1 << 61;
/// The end-of-key child (partial byte 0): the key ends at the node's depth.
const END: u64 = 1 << 60;
/// Most memory nodes a slot can name.
pub const MAX_NODES: u16 = 64;
/// Longest leaf a slot can describe.
pub const MAX_LEAF: usize = 16 * 64;

/// The partial key that picks a child: a key byte, or the end of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Partial {
    /// The key ends at the node's depth (sorts first: a key is below its extensions).
    End,
    Byte(u8),
}

impl Partial {
    /// The partial key of `key` at `depth`.
    pub fn of(key: &[u8], depth: usize) -> Partial {
        key.get(depth).map_or(Partial::End, |&b| Partial::Byte(b))
    }

    /// Its place among the 257 partial keys: the byte, or 256 for the end of the key.
    #[inline]
    pub fn ordinal(self) -> usize {
        match self {
            Partial::End => 256,
            Partial::Byte(b) => b as usize,
        }
    }

    /// The bits of a used slot word that name its partial key, and their value for `self`:
    /// a used slot `s` has partial key `self` iff `s.0 & mask == want`.
    #[inline]
    pub fn slot_bits(self) -> (u64, u64) {
        match self {
            Partial::End => (END, END),
            Partial::Byte(b) => (END | 0xFF << 48, (b as u64) << 48),
        }
    }
}

/// A slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(pub u64);

/// What a slot points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    Leaf { addr: GlobalAddr, len: usize },
    Inner { addr: GlobalAddr, kind: Kind },
}

impl Slot {
    pub const EMPTY: Slot = Slot(0);

    fn pack(addr: GlobalAddr) -> u64 {
        debug_assert!(addr.is_aligned(64) && addr.node() < MAX_NODES && !addr.is_null());
        (addr.node() as u64) << 42 | addr.offset() >> 6
    }

    fn with_partial(p: Partial) -> u64 {
        match p {
            Partial::End => END,
            Partial::Byte(b) => (b as u64) << 48,
        }
    }

    /// A slot naming the leaf of `len` bytes (at most [`MAX_LEAF`]) at `addr`.
    pub fn leaf(p: Partial, addr: GlobalAddr, len: usize) -> Slot {
        let units = len.div_ceil(64).max(1);
        debug_assert!(units * 64 <= MAX_LEAF);
        Slot(Self::with_partial(p) | LEAF | ((units as u64 - 1) << 56) | Self::pack(addr))
    }

    /// A slot naming the inner node of `kind` at `addr`.
    pub fn inner(p: Partial, addr: GlobalAddr, kind: Kind) -> Slot {
        Slot(Self::with_partial(p) | (kind as u64) << 56 | Self::pack(addr))
    }

    pub fn is_empty(self) -> bool {
        self.0 & !FROZEN == 0
    }

    pub fn is_frozen(self) -> bool {
        self.0 & FROZEN != 0
    }

    pub fn is_tombstone(self) -> bool {
        self.0 & TOMBSTONE != 0
    }

    /// The word without its frozen bit: what the slot says.
    pub fn thawed(self) -> Slot {
        Slot(self.0 & !FROZEN)
    }

    /// The same child with the frozen bit.
    pub fn frozen(self) -> Slot {
        Slot(self.0 | FROZEN)
    }

    /// The tombstone a deleted leaf leaves (same partial key, same leaf).
    pub fn tombstone(self) -> Slot {
        Slot(self.0 | TOMBSTONE)
    }

    /// The partial key of a used slot.
    pub fn partial(self) -> Partial {
        if self.0 & END != 0 {
            Partial::End
        } else {
            Partial::Byte((self.0 >> 48) as u8)
        }
    }

    /// The child a used slot names (tombstones included: the deleted leaf).
    pub fn child(self) -> Option<Child> {
        if self.is_empty() {
            return None;
        }
        let w = self.0;
        let addr = GlobalAddr::new((w >> 42 & 0x3F) as u16, (w & ((1 << 42) - 1)) << 6);
        Some(if w & LEAF != 0 {
            Child::Leaf { addr, len: ((w >> 56 & 0xF) as usize + 1) * 64 }
        } else {
            Child::Inner { addr, kind: Kind::from_bits((w >> 56 & 3) as u8) }
        })
    }

    /// The address of the child a used slot names.
    pub fn addr(self) -> Option<GlobalAddr> {
        self.child().map(|c| match c {
            Child::Leaf { addr, .. } | Child::Inner { addr, .. } => addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_pinned() {
        let a = GlobalAddr::new(3, 0x1234_5640);
        let s = Slot::leaf(Partial::Byte(0xAB), a, 100);
        // offset/64 = 0x48D159, node 3 << 42, byte 0xAB << 48, 2 units - 1 << 56, leaf bit 61.
        assert_eq!(s.0, 1 << 61 | 1 << 56 | 0xAB << 48 | 3 << 42 | 0x48_D159);
        assert_eq!(s.child(), Some(Child::Leaf { addr: a, len: 128 }));
        assert_eq!(s.partial(), Partial::Byte(0xAB));
        let e = Slot::inner(Partial::End, a, Kind::N48);
        assert_eq!(e.0, 1 << 60 | 2 << 56 | 3 << 42 | 0x48_D159);
        assert_eq!(e.partial(), Partial::End);
        assert_eq!(e.child(), Some(Child::Inner { addr: a, kind: Kind::N48 }));
        let l = Slot::leaf(Partial::End, a, MAX_LEAF);
        assert_eq!(
            (l.partial(), l.child()),
            (Partial::End, Some(Child::Leaf { addr: a, len: MAX_LEAF }))
        );
    }

    #[test]
    fn frozen_and_tombstone_keep_the_child() {
        let s = Slot::leaf(Partial::Byte(7), GlobalAddr::new(1, 64), 64);
        let t = s.tombstone().frozen();
        assert!(t.is_frozen() && t.is_tombstone() && !t.is_empty());
        assert_eq!((t.partial(), t.child(), t.thawed()), (s.partial(), s.child(), s.tombstone()));
        assert!(Slot::EMPTY.frozen().is_empty() && Slot::EMPTY.is_empty());
        assert!(Partial::End < Partial::Byte(0));
    }
}
