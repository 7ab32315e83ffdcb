//! Global addresses: which memory node, and where in its region.
//!
//! # Bit layout
//!
//! ```text
//!  63            48 47                                             0
//! +----------------+------------------------------------------------+
//! |  node id (16)  |                byte offset (48)                |
//! +----------------+------------------------------------------------+
//! ```
//!
//! The node id sits in the high bits so that addresses on one memory node order by offset and
//! `addr + n` is plain addition while the offset stays below 2^48 (256 TiB per node).
//! [`GlobalAddr::NULL`] is the all-zero word: node 0, offset 0 is the memory node's superblock
//! (see [`crate::layout`]) and is never handed out, so the null address never names index data.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifier of a memory node (MN), dense from 0.
pub type NodeId = u16;

/// Number of offset bits in a [`GlobalAddr`].
pub const OFFSET_BITS: u32 = 48;
/// Largest representable offset plus one.
pub const OFFSET_LIMIT: u64 = 1 << OFFSET_BITS;
const OFFSET_MASK: u64 = OFFSET_LIMIT - 1;

/// A byte address in the memory of one memory node, packed in 64 bits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GlobalAddr(u64);

impl GlobalAddr {
    /// The null address (node 0, offset 0).
    pub const NULL: GlobalAddr = GlobalAddr(0);

    /// Address of `offset` on `node`.
    ///
    /// # Panics
    /// If `offset` does not fit in 48 bits; offsets come from the fabric's own allocators, so an
    /// oversized one is a programming error, not user input.
    #[inline]
    pub const fn new(node: NodeId, offset: u64) -> GlobalAddr {
        assert!(offset < OFFSET_LIMIT, "GlobalAddr offset exceeds 48 bits");
        GlobalAddr(((node as u64) << OFFSET_BITS) | offset)
    }

    /// Decodes a packed word, as stored in remote memory. Every 64-bit value is a valid address.
    #[inline]
    pub const fn from_raw(raw: u64) -> GlobalAddr {
        GlobalAddr(raw)
    }

    /// The packed word, as stored in remote memory.
    #[inline]
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The memory node this address lives on.
    #[inline]
    pub const fn node(self) -> NodeId {
        (self.0 >> OFFSET_BITS) as NodeId
    }

    /// Byte offset within the node's region.
    #[inline]
    pub const fn offset(self) -> u64 {
        self.0 & OFFSET_MASK
    }

    /// Whether this is [`GlobalAddr::NULL`].
    #[inline]
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The address `bytes` further on the same node, or `None` if the offset would leave 48 bits.
    #[inline]
    pub const fn checked_add(self, bytes: u64) -> Option<GlobalAddr> {
        match self.offset().checked_add(bytes) {
            Some(off) if off < OFFSET_LIMIT => Some(GlobalAddr::new(self.node(), off)),
            _ => None,
        }
    }

    /// The address `bytes` further on the same node.
    ///
    /// # Panics
    /// If the offset would leave 48 bits (callers stay inside objects they allocated).
    #[inline]
    pub const fn add(self, bytes: u64) -> GlobalAddr {
        match self.checked_add(bytes) {
            Some(a) => a,
            None => panic!("GlobalAddr offset overflow"),
        }
    }

    /// Whether the offset is a multiple of `align` (a power of two).
    #[inline]
    pub const fn is_aligned(self, align: u64) -> bool {
        debug_assert!(align.is_power_of_two());
        self.offset() & (align - 1) == 0
    }

    /// The smallest address at or above `self` aligned to `align` (a power of two), on the same node.
    #[inline]
    pub const fn align_up(self, align: u64) -> GlobalAddr {
        GlobalAddr::new(self.node(), align_up(self.offset(), align))
    }
}

/// Rounds `n` up to a multiple of `align` (a power of two).
#[inline]
pub const fn align_up(n: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    (n + align - 1) & !(align - 1)
}

/// Rounds `n` down to a multiple of `align` (a power of two).
#[inline]
pub const fn align_down(n: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    n & !(align - 1)
}

impl fmt::Debug for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "GlobalAddr(null)")
        } else {
            write!(f, "GlobalAddr({}:{:#x})", self.node(), self.offset())
        }
    }
}

impl fmt::Display for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{:#x}", self.node(), self.offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_layout_is_pinned() {
        let a = GlobalAddr::new(0x1234, 0x0000_ABCD_EF01_2345);
        assert_eq!(a.raw(), 0x1234_ABCD_EF01_2345);
        assert_eq!(a.node(), 0x1234);
        assert_eq!(a.offset(), 0xABCD_EF01_2345);
        assert_eq!(GlobalAddr::from_raw(0xFFFF_0000_0000_0001).node(), 0xFFFF);
        assert_eq!(GlobalAddr::from_raw(0xFFFF_0000_0000_0001).offset(), 1);
        assert_eq!(GlobalAddr::NULL.raw(), 0);
        assert!(GlobalAddr::new(0, 0).is_null());
        assert!(!GlobalAddr::new(1, 0).is_null());
        assert_eq!(GlobalAddr::new(3, 0x40).to_string(), "3:0x40");
    }

    #[test]
    fn arithmetic_and_alignment() {
        let a = GlobalAddr::new(7, 100);
        assert_eq!(a.add(28), GlobalAddr::new(7, 128));
        assert!(a.add(28).is_aligned(64));
        assert!(!a.is_aligned(8));
        assert_eq!(a.align_up(64), GlobalAddr::new(7, 128));
        assert_eq!(GlobalAddr::new(7, 128).align_up(64), GlobalAddr::new(7, 128));
        assert_eq!(GlobalAddr::new(2, OFFSET_LIMIT - 1).checked_add(1), None);
        assert_eq!(align_down(127, 64), 64);
        assert_eq!(align_up(0, 8), 0);
        // Addresses on one node order by offset.
        assert!(GlobalAddr::new(1, 5) < GlobalAddr::new(1, 6));
        assert!(GlobalAddr::new(1, OFFSET_LIMIT - 1) < GlobalAddr::new(2, 0));
    }

    #[test]
    #[should_panic(expected = "exceeds 48 bits")]
    fn oversized_offset_panics() {
        let _ = GlobalAddr::new(0, OFFSET_LIMIT);
    }
}
