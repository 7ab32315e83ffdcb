//! The fixed layout of every memory node's region.
//!
//! ```text
//! offset   size      contents
//! 0x00000  64 B      superblock (below)
//! 0x00040  ..        reserved, zero
//! 0x01000  4 KiB     root table: 512 × 8-byte slots, updated by clients with CAS
//! 0x02000  32 KiB    member table (node 0): 2048 × 16-byte lease slots (the primitives
//!                    crate's `lease` module draws and owns them)
//! 0x0A000  16 KiB    intent table (every node): 2048 × 8-byte slots, slot i written only by
//!                    the client that joined as member slot i (the primitives crate's Spear
//!                    draws and owns them)
//! 0x0E000  8 KiB     name table (node 0): 256 × 32-byte entries naming the index in root
//!                    slots 2i and 2i + 1 (the primitives crate's `names` module draws them)
//! 0x10000  ..end     heap: chunks handed out by the allocation service, bump order
//! ```
//!
//! Superblock (little-endian words; written by the memory node when it formats the region, the
//! heap top afterwards only by the node's allocation service):
//!
//! ```text
//! byte 0        8          12      14      16           24           32          40        64
//!      +--------+----------+-------+-------+------------+------------+-----------+---------+
//!      | magic  | version  | node  | rsvd  | region len | heap start | heap top  | reserved|
//!      | u64    | u32      | u16   | u16   | u64        | u64        | u64       |         |
//!      +--------+----------+-------+-------+------------+------------+-----------+---------+
//! ```
//!
//! Root-table slots are owned by the indexes (slot `i` is conventionally tree / table `i`); they
//! start zero, i.e. [`crate::GlobalAddr::NULL`], and live on memory node 0.

use crate::addr::{GlobalAddr, NodeId};
use crate::memory::{MnMemory, Region};

/// `b"DMINDEX1"` as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"DMINDEX1");
/// Version of this layout.
pub const LAYOUT_VERSION: u32 = 1;
/// Size of the superblock.
pub const SUPERBLOCK_LEN: u64 = 64;
/// Offset of the heap-top word in the superblock.
pub const HEAP_TOP_OFFSET: u64 = 32;
/// Offset of the root table.
pub const ROOT_TABLE_OFFSET: u64 = 0x1000;
/// Number of root-table slots.
pub const ROOT_SLOTS: u32 = 512;
/// Offset of the member table (used on memory node 0 only).
pub const MEMBERS_OFFSET: u64 = 0x2000;
/// Slots in the member table: the most clients a cluster has joined at once.
pub const MEMBER_SLOTS: u32 = 2048;
/// Bytes per member-table slot.
pub const MEMBER_SLOT_BYTES: u64 = 16;
/// Offset of the intent table (on every memory node).
pub const INTENTS_OFFSET: u64 = 0xA000;
/// Bytes of the intent table: one 8-byte slot per member slot.
pub const INTENTS_BYTES: u64 = MEMBER_SLOTS as u64 * 8;
/// Offset of the name table (used on memory node 0 only).
pub const NAMES_OFFSET: u64 = 0xE000;
/// Bytes of the name table.
pub const NAMES_BYTES: u64 = 0x2000;
/// First heap byte.
pub const HEAP_START: u64 = 0x10000;
const _: () = assert!(MEMBERS_OFFSET + MEMBER_SLOTS as u64 * MEMBER_SLOT_BYTES <= INTENTS_OFFSET);
const _: () = assert!(INTENTS_OFFSET + INTENTS_BYTES <= NAMES_OFFSET);
const _: () = assert!(NAMES_OFFSET + NAMES_BYTES <= HEAP_START);
const _: () = assert!(ROOT_TABLE_OFFSET + ROOT_SLOTS as u64 * 8 <= MEMBERS_OFFSET);
/// Smallest region that holds the fixed layout and one 64 KiB chunk.
pub const MIN_REGION: u64 = HEAP_START + 0x10000;

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Layout version.
    pub version: u32,
    /// Id of the node that formatted the region.
    pub node: NodeId,
    /// Region size in bytes.
    pub region_len: u64,
    /// First heap byte.
    pub heap_start: u64,
    /// Next free heap byte.
    pub heap_top: u64,
}

impl Superblock {
    /// The 64 bytes of the superblock.
    pub fn encode(&self) -> [u8; SUPERBLOCK_LEN as usize] {
        let mut b = [0u8; SUPERBLOCK_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..14].copy_from_slice(&self.node.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.heap_start.to_le_bytes());
        b[32..40].copy_from_slice(&self.heap_top.to_le_bytes());
        b
    }

    /// Decodes a superblock, or says why the bytes are not one.
    pub fn decode(b: &[u8]) -> Result<Superblock, String> {
        if b.len() < SUPERBLOCK_LEN as usize {
            return Err(format!("superblock needs {SUPERBLOCK_LEN} bytes, got {}", b.len()));
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if word(0) != MAGIC {
            return Err(format!("bad superblock magic {:#018x}", word(0)));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version != LAYOUT_VERSION {
            return Err(format!(
                "unsupported layout version {version} (expected {LAYOUT_VERSION})"
            ));
        }
        Ok(Superblock {
            version,
            node: u16::from_le_bytes(b[12..14].try_into().expect("2 bytes")),
            region_len: word(16),
            heap_start: word(24),
            heap_top: word(32),
        })
    }
}

/// Writes a fresh superblock into `region` for node `node`. The rest of the region must be zero.
pub fn format(region: &dyn MnMemory, node: NodeId) {
    assert!(region.size() >= MIN_REGION, "region smaller than {MIN_REGION} bytes");
    let sb = Superblock {
        version: LAYOUT_VERSION,
        node,
        region_len: region.size(),
        heap_start: HEAP_START,
        heap_top: HEAP_START,
    };
    region.write(0, &sb.encode());
}

/// Formats `region` afresh for node `node` (the node restarted empty): zeroes everything the
/// superblock says was in use (the fixed area and the heap handed out), then [`format()`]s it.
pub fn reformat(region: &dyn MnMemory, node: NodeId) {
    let mut top = [0u8; 8];
    region.read(HEAP_TOP_OFFSET, &mut top);
    region.zero(0, u64::from_le_bytes(top).min(region.size()));
    format(region, node);
}

/// Heap bytes the allocation service has handed out on this node.
pub fn heap_used(region: &Region) -> u64 {
    region.load_word(HEAP_TOP_OFFSET) - HEAP_START
}

/// Address of root-table slot `slot` (on memory node 0).
///
/// # Panics
/// If `slot >= ROOT_SLOTS`.
pub fn root_slot(slot: u32) -> GlobalAddr {
    assert!(slot < ROOT_SLOTS, "root slot {slot} out of range (0..{ROOT_SLOTS})");
    GlobalAddr::new(0, ROOT_TABLE_OFFSET + 8 * slot as u64)
}

/// Address of member slot `slot`'s intent word on memory node `node`.
///
/// # Panics
/// If `slot >= MEMBER_SLOTS`.
pub fn intent_slot(node: NodeId, slot: u32) -> GlobalAddr {
    assert!(slot < MEMBER_SLOTS, "member slot {slot} out of range (0..{MEMBER_SLOTS})");
    GlobalAddr::new(node, INTENTS_OFFSET + 8 * slot as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_bytes_are_pinned() {
        let r = Region::new(MIN_REGION);
        format(&r, 3);
        let mut b = [0u8; 64];
        r.read(0, &mut b);
        let mut expect = [0u8; 64];
        expect[0..8].copy_from_slice(b"DMINDEX1");
        expect[8] = 1; // version
        expect[12] = 3; // node
        expect[16..24].copy_from_slice(&MIN_REGION.to_le_bytes());
        expect[24..32].copy_from_slice(&0x10000u64.to_le_bytes());
        expect[32..40].copy_from_slice(&0x10000u64.to_le_bytes());
        assert_eq!(b, expect);
        let sb = Superblock::decode(&b).unwrap();
        assert_eq!(sb.node, 3);
        assert_eq!(sb.heap_top, HEAP_START);
        assert_eq!(r.load_word(HEAP_TOP_OFFSET), HEAP_START);
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(Superblock::decode(&[0u8; 64]).unwrap_err().contains("magic"));
        assert!(Superblock::decode(&[0u8; 8]).unwrap_err().contains("64 bytes"));
        let mut b =
            Superblock { version: 9, node: 0, region_len: 0, heap_start: 0, heap_top: 0 }.encode();
        assert!(Superblock::decode(&b).unwrap_err().contains("version 9"));
        b[8] = 1;
        assert!(Superblock::decode(&b).is_ok());
    }

    #[test]
    fn intent_slots_are_fixed() {
        assert_eq!(intent_slot(2, 0), GlobalAddr::new(2, 0xA000));
        assert_eq!(intent_slot(0, 2047), GlobalAddr::new(0, 0xA000 + 8 * 2047));
        assert_eq!(INTENTS_OFFSET + INTENTS_BYTES, 0xE000);
    }

    #[test]
    fn root_slots_are_fixed() {
        assert_eq!(root_slot(0), GlobalAddr::new(0, 0x1000));
        assert_eq!(root_slot(511), GlobalAddr::new(0, 0x1000 + 8 * 511));
        assert!(root_slot(511).offset() + 8 <= 0x2000);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn root_slot_bounds() {
        root_slot(ROOT_SLOTS);
    }
}
