//! What HiStore keeps in memory-node memory: hash-table buckets and slots, and the descriptor
//! that places every replica.
//!
//! # Slot (8 bytes, one atomic word)
//!
//! ```text
//! byte  0               5   6            7
//!       +---------------+---+------------+-----------+
//!       | item address (48 bits)         | length    | signature |
//!       |  bits 40..48: data node        | (64-B     | (1 byte of|
//!       |  bits  0..40: offset / 64      |  lines)   | key hash) |
//!       +--------------------------------+-----------+-----------+
//! ```
//!
//! The paper's slot: {1-B signature, 1-B item length, 6-B item address}. Items are 64-byte
//! aligned, so the address keeps the offset in lines (40 bits: 64 TiB per node) and the node in
//! 8 bits. An empty slot is the zero word; an occupied one never is (its address is not null).
//! The primary's CPU changes a slot with one 8-byte CAS, so a one-sided READ sees it whole.
//!
//! # Bucket (64 bytes, one cache line)
//!
//! ```text
//! +0      +8      +16     +24     +32     +40     +48     +56
//! | slot0 | slot1 | slot2 | slot3 | slot4 | slot5 | slot6 | next bucket (GlobalAddr, 0 = none) |
//! ```
//!
//! A group's table is an array of `buckets` buckets, over-provisioned so that chains stay one
//! bucket long; a full bucket is chained to a fresh one by the primary's CPU (next written last,
//! after the new bucket holds its slot).
//!
//! # Descriptor (on memory node 0, behind the root word)
//!
//! ```text
//! +0  buckets per group u64 LE
//! +8  memory nodes at create u16 LE | groups u16 LE | pad u32
//! +16 writer instances u64 LE: each handle takes one number with a FAA when it opens
//! +24 per group, 40 bytes:
//!     +0  node of replica 0, 1, 2 (u16 LE each) | pad u16
//!     +8  hash-table offset on that node, per replica (u64 LE each; 0 = no table)
//!     +32 the group's view word (`dmindex_prim::view`: members are replica numbers)
//! ```
//!
//! The root table's descriptor word carries the magic and the shape (mode, replicas,
//! partitions, groups), so a handle with another configuration is refused at open.

use dmindex_fabric::{GlobalAddr, NodeId};

/// Slots per bucket.
pub const SLOTS: usize = 7;
/// Bytes per bucket.
pub const BUCKET: u64 = 64;
/// Items are aligned to (and their lengths counted in) this many bytes.
pub const ITEM_LINE: u64 = 64;
/// Longest item a slot can describe.
pub const MAX_ITEM: u64 = 255 * ITEM_LINE;
/// Memory nodes an item address can name.
pub const MAX_NODES: u16 = 256;
/// Replicas per group, the most any mode has.
pub const MAX_REPLICAS: usize = 3;
/// Descriptor bytes before the groups.
pub const DESCRIPTOR_HEAD: usize = 24;
/// Descriptor bytes per group.
pub const DESCRIPTOR_GROUP: usize = 40;
/// Offset of the writer-instance counter in the descriptor.
pub const INSTANCES: u64 = 16;

/// One hash-table slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub signature: u8,
    /// Item length in 64-byte lines.
    pub lines: u8,
    pub item: GlobalAddr,
}

impl Slot {
    /// The slot of an item of `bytes` bytes at `item` (64-byte aligned, on a node below
    /// [`MAX_NODES`], at most [`MAX_ITEM`] bytes).
    pub fn new(signature: u8, item: GlobalAddr, bytes: u64) -> Slot {
        debug_assert!(item.offset() % ITEM_LINE == 0 && item.node() < MAX_NODES);
        debug_assert!(bytes <= MAX_ITEM);
        Slot { signature, lines: bytes.div_ceil(ITEM_LINE).max(1) as u8, item }
    }

    /// The slot's word.
    pub fn word(&self) -> u64 {
        let addr = ((self.item.node() as u64) << 40) | (self.item.offset() / ITEM_LINE);
        ((self.signature as u64) << 56) | ((self.lines as u64) << 48) | addr
    }

    /// The slot a word holds; `None` for an empty slot.
    pub fn decode(word: u64) -> Option<Slot> {
        if word == 0 {
            return None;
        }
        let node = (word >> 40 & 0xFF) as NodeId;
        let offset = (word & ((1 << 40) - 1)) * ITEM_LINE;
        Some(Slot {
            signature: (word >> 56) as u8,
            lines: (word >> 48) as u8,
            item: GlobalAddr::new(node, offset),
        })
    }

    /// Bytes of the item (whole lines).
    pub fn bytes(&self) -> usize {
        self.lines as usize * ITEM_LINE as usize
    }
}

/// The slot words and next pointer of a bucket's 64 bytes.
pub fn bucket(b: &[u8; BUCKET as usize]) -> ([u64; SLOTS], u64) {
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (std::array::from_fn(word), word(SLOTS))
}

/// Byte offset of slot `i` in a bucket.
pub const fn slot_offset(i: usize) -> u64 {
    (i * 8) as u64
}

/// Byte offset of the next pointer in a bucket.
pub const NEXT: u64 = (SLOTS * 8) as u64;

/// Where a key goes: its group, partition (log and skiplist), bucket and signature, all from
/// one 64-bit hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub group: usize,
    pub partition: usize,
    pub bucket: u64,
    pub signature: u8,
}

impl Place {
    /// The place of a key hashing to `h` among `groups` groups of `partitions` partitions and
    /// `buckets` buckets each.
    pub fn of(h: u64, groups: usize, partitions: usize, buckets: u64) -> Place {
        Place {
            group: ((h >> 48) as usize & 0xFF) % groups,
            partition: ((h >> 40) as usize & 0xFF) % partitions,
            bucket: (h & 0xFF_FFFF_FFFF) % buckets,
            signature: (h >> 56) as u8,
        }
    }
}

/// One group's replicas: their nodes and hash-table offsets (0: the replica keeps no table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GroupPlace {
    pub nodes: [NodeId; MAX_REPLICAS],
    pub tables: [u64; MAX_REPLICAS],
    /// The view word as encoded (changed in place by CAS afterwards).
    pub view: u64,
}

/// The descriptor block's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub buckets: u64,
    pub memory_nodes: u16,
    pub groups: Vec<GroupPlace>,
}

impl Descriptor {
    /// Bytes of a descriptor with `groups` groups.
    pub fn bytes(groups: usize) -> usize {
        DESCRIPTOR_HEAD + groups * DESCRIPTOR_GROUP
    }

    /// Offset of group `g`'s hash-table offsets (3 words) in the descriptor.
    pub fn tables_offset(g: usize) -> u64 {
        (DESCRIPTOR_HEAD + g * DESCRIPTOR_GROUP + 8) as u64
    }

    /// Offset of group `g`'s view word in the descriptor.
    pub fn view_offset(g: usize) -> u64 {
        (DESCRIPTOR_HEAD + g * DESCRIPTOR_GROUP + 32) as u64
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::bytes(self.groups.len()));
        b.extend_from_slice(&self.buckets.to_le_bytes());
        b.extend_from_slice(&self.memory_nodes.to_le_bytes());
        b.extend_from_slice(&(self.groups.len() as u16).to_le_bytes());
        b.extend_from_slice(&[0; 12]);
        for g in &self.groups {
            for n in g.nodes {
                b.extend_from_slice(&n.to_le_bytes());
            }
            b.extend_from_slice(&[0; 2]);
            for t in g.tables {
                b.extend_from_slice(&t.to_le_bytes());
            }
            b.extend_from_slice(&g.view.to_le_bytes());
        }
        b
    }

    /// The descriptor `b` holds, or what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Descriptor, String> {
        if b.len() < DESCRIPTOR_HEAD {
            return Err(format!("descriptor of {} bytes", b.len()));
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let groups = u16_at(10) as usize;
        if b.len() < Self::bytes(groups) {
            return Err(format!("descriptor of {} bytes for {groups} groups", b.len()));
        }
        let groups = (0..groups)
            .map(|g| {
                let at = DESCRIPTOR_HEAD + g * DESCRIPTOR_GROUP;
                GroupPlace {
                    nodes: std::array::from_fn(|r| u16_at(at + 2 * r)),
                    tables: std::array::from_fn(|r| u64_at(at + 8 + 8 * r)),
                    view: u64_at(at + 32),
                }
            })
            .collect();
        Ok(Descriptor { buckets: u64_at(0), memory_nodes: u16_at(8), groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_word_is_pinned() {
        let s = Slot::new(0xAB, GlobalAddr::new(3, 0x1234_5640), 100);
        assert_eq!(s.lines, 2);
        assert_eq!(s.word(), 0xAB02_0300_0048_D159);
        assert_eq!(s.word().to_le_bytes()[6..], [0x02, 0xAB], "length then signature");
        assert_eq!(Slot::decode(s.word()), Some(s));
        assert_eq!(s.bytes(), 128);
        assert_eq!(Slot::decode(0), None);
        // The largest node and offset round-trip.
        let far = Slot::new(0, GlobalAddr::new(255, ((1 << 40) - 1) * 64), MAX_ITEM);
        assert_eq!(Slot::decode(far.word()), Some(far));
        assert_ne!(Slot::new(0, GlobalAddr::new(0, 64), 1).word(), 0);
    }

    #[test]
    fn bucket_layout_is_pinned() {
        let mut b = [0u8; 64];
        for i in 0..8 {
            b[i * 8..i * 8 + 8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        }
        let (slots, next) = bucket(&b);
        assert_eq!(slots, [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!((next, NEXT, slot_offset(6)), (8, 56, 48));
    }

    #[test]
    fn descriptor_layout_is_pinned() {
        let d = Descriptor {
            buckets: 1000,
            memory_nodes: 4,
            groups: vec![GroupPlace {
                nodes: [1, 2, 3],
                tables: [4096, 0, 0],
                view: 0x1_0000_0007,
            }],
        };
        let b = d.encode();
        assert_eq!(b.len(), 64);
        assert_eq!(&b[..12], &[0xE8, 3, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0]);
        assert_eq!(&b[16..24], &[0; 8], "no writer instance taken yet");
        assert_eq!(&b[24..32], &[1, 0, 2, 0, 3, 0, 0, 0]);
        assert_eq!(&b[32..40], &4096u64.to_le_bytes());
        assert_eq!(&b[56..64], &0x1_0000_0007u64.to_le_bytes());
        assert_eq!(Descriptor::view_offset(0), 56);
        assert_eq!(Descriptor::decode(&b), Ok(d));
        assert!(Descriptor::decode(&b[..60]).unwrap_err().contains("1 groups"));
    }

    #[test]
    fn places_use_separate_hash_bits() {
        let p = Place::of(0xAB12_3400_0000_0007, 2, 4, 5);
        assert_eq!(p, Place { group: 0x12 % 2, partition: 0x34 % 4, bucket: 2, signature: 0xAB });
    }
}
