//! The byte layout of a B-link internal node, and the key and address fields every B+ tree
//! node (internal or leaf) encodes the same way. Pinned by the test below.
//!
//! # Internal node (span S)
//!
//! ```text
//! header, 43 B: version u8 | level u8 | valid u8 | sibling u64 | leftmost u64 |
//!               sibling_leftmost u64 | low fence [8] | high fence [8]
//! entries, S × 17 B: version u8 | pivot key [8] | child u64   (sorted; unused: child = 0)
//! ```
//!
//! Fences: keys k with low ≤ k ≤ high (inclusive) belong here. `leftmost` covers
//! [low, pivot 0); entry i covers [pivot i, pivot i+1). `sibling_leftmost` is the leftmost child
//! of the right sibling: the expected sibling of this node's last child. Every object (header,
//! entry) starts with its version byte ([`crate::version`]); physically the decoded bytes carry
//! cache-line versions ([`crate::cacheline`]), then the lock word follows 8-byte aligned (bit 63,
//! [`crate::lock`]). For S = 64: 1131 decoded, 1148 physical, lock word at 1152, 1216 allocated
//! (64-aligned, so physical lines are cache lines).
//!
//! Keys are stored big-endian (8-byte integers sort numerically), addresses little-endian
//! ([`GlobalAddr::raw`]).

use dmindex_fabric::GlobalAddr;

use crate::cacheline::{phys_len, Objects};

/// Bytes of an internal node's header.
pub const INTERNAL_HEADER: usize = 43;
/// Bytes per internal entry.
pub const INTERNAL_ENTRY: usize = 17;

/// Geometry of an internal node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InternalLayout {
    pub span: usize,
}

impl InternalLayout {
    /// Bytes of the decoded node (no cache-line versions).
    pub fn decoded(&self) -> usize {
        INTERNAL_HEADER + INTERNAL_ENTRY * self.span
    }
    /// Bytes of the node with cache-line versions.
    pub fn physical(&self) -> usize {
        phys_len(self.decoded())
    }
    /// Offset of the lock word.
    pub fn lock_offset(&self) -> usize {
        self.physical().div_ceil(8) * 8
    }
    /// Bytes to allocate (64-aligned).
    pub fn alloc(&self) -> usize {
        (self.lock_offset() + 8).div_ceil(64) * 64
    }
    /// Decoded offset of entry `i`.
    pub fn entry(&self, i: usize) -> usize {
        INTERNAL_HEADER + INTERNAL_ENTRY * i
    }
}

impl Objects for InternalLayout {
    fn object_start(&self, d: usize) -> usize {
        if d < INTERNAL_HEADER {
            0
        } else {
            INTERNAL_HEADER + (d - INTERNAL_HEADER) / INTERNAL_ENTRY * INTERNAL_ENTRY
        }
    }
}

/// Reads a little-endian word at `at`.
pub fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads a key (big-endian integer) at `at`.
pub fn key_at(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Writes a key at `at`.
pub fn put_key(b: &mut [u8], at: usize, k: u64) {
    b[at..at + 8].copy_from_slice(&k.to_be_bytes());
}

/// Writes an address at `at`.
pub fn put_addr(b: &mut [u8], at: usize, a: GlobalAddr) {
    b[at..at + 8].copy_from_slice(&a.raw().to_le_bytes());
}

/// Reads an address at `at`.
pub fn addr_at(b: &[u8], at: usize) -> GlobalAddr {
    GlobalAddr::from_raw(word(b, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_layout_is_pinned() {
        let l = InternalLayout { span: 64 };
        assert_eq!(
            (l.decoded(), l.physical(), l.lock_offset(), l.alloc()),
            (1131, 1148, 1152, 1216)
        );
        assert_eq!(l.object_start(42), 0);
        assert_eq!(l.object_start(43 + 17 + 3), 60);
        let mut b = [0u8; 16];
        put_key(&mut b, 0, 0x0102_0304_0506_0708);
        put_addr(&mut b, 8, GlobalAddr::new(3, 0x40));
        assert_eq!(b[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[8..], GlobalAddr::new(3, 0x40).raw().to_le_bytes());
        assert_eq!(
            (key_at(&b, 0), addr_at(&b, 8)),
            (0x0102_0304_0506_0708, GlobalAddr::new(3, 0x40))
        );
    }
}
