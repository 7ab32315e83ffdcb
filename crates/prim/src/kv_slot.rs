//! The 8-byte slot word of the one-sided hash tables that keep KV blocks out of place and
//! commit a new key's entry in two steps (RACE, CLevel): a fingerprint, the block's length and
//! address, and two marks, *frozen* (a mover's) and *tentative* (an insert's, not yet
//! committed). All words are little-endian and change only by CAS.
//!
//! ```text
//!  63      56 55 54     48 47 46          41 40                                  0
//! +----------+--+---------+--+--------------+-------------------------------------+
//! | fp (8)   |F | units(7)|T |block node (6)| block offset / 64 (41)              |
//! +----------+--+---------+--+--------------+-------------------------------------+
//! byte 7 = fp, byte 6 = F << 7 | units, bytes 0..6 = T << 47 | the 47-bit block address
//! ```
//!
//! * `0` is an empty slot; a used slot never is (its block address is not null).
//! * `fp`: 8 bits of a hash of the key: a reader READs a block only when the fingerprint
//!   matches, and the key in the block decides.
//! * `units`: the block's length in 64-B units (1..=127): blocks are at most 8 128 B.
//! * `F` (frozen): set on an entry that is being moved (a split's, a rehash's). No writer's CAS
//!   expects a frozen word, so the entry can no longer change; it stays the key's value.
//! * `T` (tentative): an insert of an absent key placed the entry and has not committed it. It
//!   is no value: readers skip it; the table's rule decides who may abort it.
//! * The block address: the memory node in 6 bits (at most 64 memory nodes) and the offset over
//!   64 in 41 bits (128 TiB a node; blocks are 64-B aligned).

use dmindex_fabric::GlobalAddr;

/// The frozen bit.
pub const FROZEN: u64 = 1 << 55;
/// The tentative bit.
pub const TENTATIVE: u64 = 1 << 47;
/// Memory nodes a slot's 6 node bits can name.
pub const MAX_NODES: u16 = 64;
/// Bytes of a memory node a 41-bit block offset / 64 can reach (128 TiB).
pub const MAX_NODE_BYTES: u64 = 64 << 41;
/// The longest block a slot can name (127 units of 64 B).
pub const MAX_BLOCK: usize = 127 * 64;

/// The slot word of a committed entry (neither frozen nor tentative).
pub fn slot(fp: u8, units: u8, block: GlobalAddr) -> u64 {
    debug_assert!((1..=127).contains(&units) && block.is_aligned(64));
    debug_assert!(block.node() < MAX_NODES && block.offset() < MAX_NODE_BYTES);
    (fp as u64) << 56 | (units as u64) << 48 | (block.node() as u64) << 41 | block.offset() >> 6
}

/// The committed slot word of a KV block of a `key`-byte key and a `value`-byte value at
/// `block`, its length counted as at least a header and the table's longest key (`max_key`),
/// the most a reader that knows only the key READs to check it.
pub fn for_block(fp: u8, key: usize, value: usize, max_key: usize, block: GlobalAddr) -> u64 {
    let len = (crate::kv_block::HEADER + key + value).max(crate::kv_block::HEADER + max_key);
    slot(fp, units(len), block)
}

/// The block a used slot names.
pub fn slot_block(w: u64) -> GlobalAddr {
    GlobalAddr::new(((w >> 41) & 0x3F) as u16, (w & ((1 << 41) - 1)) << 6)
}

/// A slot's fingerprint.
pub const fn slot_fp(w: u64) -> u8 {
    (w >> 56) as u8
}

/// A slot's block length in 64-B units.
pub const fn slot_units(w: u64) -> u8 {
    ((w >> 48) & 0x7F) as u8
}

/// Whether a slot word is frozen by a mover.
pub const fn is_frozen(w: u64) -> bool {
    w & FROZEN != 0
}

/// Whether a slot word is an insert's uncommitted entry.
pub const fn is_tentative(w: u64) -> bool {
    w & TENTATIVE != 0
}

/// A used slot word without its frozen and tentative bits: the committed entry it stands for.
pub const fn entry(w: u64) -> u64 {
    w & !(FROZEN | TENTATIVE)
}

/// 64-B units a block of `len` bytes takes.
pub const fn units(len: usize) -> u8 {
    len.div_ceil(64) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_bytes_are_pinned() {
        let block = GlobalAddr::new(3, 0x1234_5640);
        let w = slot(0xAB, 2, block);
        assert_eq!(
            w.to_le_bytes(),
            [0x59, 0xD1, 0x48, 0x00, 0x00, 0x06, 0x02, 0xAB],
            "offset / 64 = 0x48D159 in bits 0..41, node 3 in bits 41..47, units, fp"
        );
        assert_eq!(slot_block(w), block);
        assert_eq!(
            (slot_fp(w), slot_units(w), is_frozen(w), is_tentative(w)),
            (0xAB, 2, false, false)
        );
        let f = w | FROZEN;
        assert_eq!(f.to_le_bytes()[6], 0x82, "the frozen bit is the top bit of byte 6");
        assert_eq!((slot_block(f), slot_units(f), is_frozen(f)), (block, 2, true));
        let t = w | TENTATIVE;
        assert_eq!(t.to_le_bytes()[5], 0x86, "the tentative bit is the top bit of byte 5");
        assert_eq!(
            (slot_block(t), slot_units(t), is_tentative(t), entry(t | FROZEN)),
            (block, 2, true, w)
        );
        assert_eq!(slot(0xAB, 3, GlobalAddr::new(5, 0x1_0000_0040)), 0xAB03_0A00_0400_0001);
        let far = GlobalAddr::new(63, MAX_NODE_BYTES - 64);
        assert_eq!(slot_block(slot(0, 127, far)), far);
        assert!(!is_tentative(slot(0xFF, 127, far)) && !is_frozen(slot(0xFF, 127, far)));
        assert_eq!((units(1), units(64), units(65), units(MAX_BLOCK)), (1, 1, 2, 127));
        // An 8-byte header, key and value: 24 bytes, one unit; counted with a longest key of
        // 100 bytes: 108, two units.
        assert_eq!(slot_units(for_block(1, 8, 8, 8, block)), 1);
        assert_eq!(slot_units(for_block(1, 8, 8, 100, block)), 2);
    }
}
