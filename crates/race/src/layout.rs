//! Every remote byte layout of RACE, drawn; all words are little-endian.
//!
//! # Slot (8 B, aligned; changed only by CAS, except the splitter's clearing WRITE of a slot it
//! froze)
//!
//! The slot word CLevel uses too, drawn and pinned in [`dmindex_prim::kv_slot`]: fingerprint,
//! frozen bit, block length in 64-B units, tentative bit, block address. Here:
//!
//! * `fp`: 8 bits of the key's second hash ([`Hashes::fp`]).
//! * `F` (frozen): set by a splitter on an entry it is moving to the new segment. No CAS expects a
//!   frozen word, so a frozen entry can no longer be updated or deleted in the old segment; it
//!   still holds the key's current value until the split switches the bucket's header.
//! * `T` (tentative): set on an entry an insert of an absent key has placed but not yet
//!   committed. A tentative entry is no value: readers skip it, and another insert of the same
//!   key may abort it (CAS to 0). Its inserter commits it by CAS'ing `T` off (see `ops`).
//!
//! # Bucket (64 B = one cache line, 64-B aligned): header + 7 slots
//!
//! ```text
//! +0        +1 .. +3   +4              +8      +16            +56      +64
//! | depth u8| zero     | suffix u32 LE | slot 0 | slot 1 | ... | slot 6 |
//! ```
//!
//! The header is `depth | suffix << 32`: the segment's local depth and the suffix (the low
//! `depth` bits of the first hash) every key in the bucket has. A key belongs to a bucket iff
//! `h1 mod 2^depth == suffix`. Only a splitter holding the segment's lock WRITEs headers.
//!
//! Why 7 slots and not RACE's 8: a bucket of header + 7 slots is exactly one cache line, and a
//! cache line is the unit a READ samples atomically. Every bucket image a reader gets is
//! therefore one instant's header *and* slots together, which is what makes the header check
//! sound under torn reads: an entry seen next to a matching header was in the bucket while the
//! bucket still belonged to the key's segment. With 8 slots (72 B) the header and the last slot
//! would straddle two lines and a reader could pair an old header with a new slot.
//!
//! # Segment (64 + 192 × groups bytes, 64-B aligned)
//!
//! ```text
//! +0     meta line (64 B):
//!          +0   split lock u64: 0 free; held: bit 63 | holder's member word << 32 | its
//!               acquisition number ([`dmindex_prim::lock::held_word`])
//!          +8   split record u64: 0, or N | (L + 1) from the first header switch of a split on
//!               (N the new segment, 64-B aligned; L + 1 the depth both halves get); cleared by
//!               the WRITE that frees the lock
//!          +16  zero
//! +64    group 0: bucket 0 (main, side 0) | bucket 1 (overflow) | bucket 2 (main, side 1)
//! +256   group 1: bucket 3 | bucket 4 | bucket 5
//! ...
//! ```
//!
//! The split record lets another client finish or undo the split of a holder that died: the
//! record is WRITTEN (zero-wait) before the first header switch, which comes after it on the
//! same connection to the segment's node, so any switched header implies it; and it is
//! written only after N holds every entry frozen so far.
//!
//! Main bucket `m` (0..2 × groups) is bucket `3(m/2)` (side 0) or `3(m/2) + 2` (side 1); its
//! combined bucket is it and the group's overflow bucket `3(m/2) + 1`, adjacent, so one 128-B
//! READ. Two main buckets of one group share their overflow bucket; a key whose two choices are
//! in one group reads the group whole (192 B, one READ).
//!
//! # Directory (64-B aligned; its address is the root word)
//!
//! ```text
//! +0     header word: global depth (bits 0..7); while locked also bit 63 | the holder's
//!        member word << 32 | its acquisition number's low 24 bits << 8 ([`dir_lock_word`])
//! +8     publish record (3 words, zero when none): S | (L + 1), N, s: the split whose entries
//!        the lock holder is rewriting, WRITTEN (zero-wait) before its first change to the
//!        directory, which comes after it on the same connection
//! +32    zero (rest of the line)
//! +64    entry 0, entry 1, ... entry 2^max_depth - 1    (8 B each)
//!
//! entry:  63                                    6 5        0
//!        +---------------------------------------+----------+
//!        | segment GlobalAddr (64-B aligned)     | depth (6)|
//!        +---------------------------------------+----------+
//! ```
//!
//! Entries are allocated for the largest directory up front (zeroed memory costs nothing until
//! used); entries `0..2^global depth` are valid. Entry `i` names the segment whose suffix is
//! `i mod 2^depth`. The split lock lives in the segment, not in the entry, so that doubling the
//! directory copies entries without caring which are locked; entries and the global depth are
//! written only under the directory lock.
//!
//! # `race-sephash`: the directory of the SepHash authors' RACE (64-B aligned)
//!
//! ```text
//! +0     lock word u64: 0 free; held: the holder's held word ([`dmindex_prim::lock::held_word`])
//!        (the one split lock of the whole table)
//! +8     global depth u64
//! +16    table record u64: 0, or S | 1 while the holder publishes S's split, S | 2 while it
//!        clears S's split flags; WRITTEN before the holder's first change to the directory
//!        and cleared in the doorbell that frees the lock
//! +24    zero (rest of the line)
//! +64    entry 0, entry 1, ... entry 2^max_depth - 1    (24 B each, 8-B aligned)
//!
//! entry (24 B):
//! +0     split flag u64: 1 while the segment it names is moving entries (set and cleared under
//!        the lock word)
//! +8     segment GlobalAddr u64 (64-B aligned)
//! +16    local depth u64
//! ```
//!
//! 24-B entries straddle cache lines (entries 2 and 5 of every 8), so a READ outside the lock
//! may pair one entry's words from different instants; each word is 8-B aligned, so each is some
//! value it held. The cache built from such a READ is a hint like any other: bucket headers
//! decide. Under the lock word no one else writes entries, so the splitter's READs are whole.
//!
//! A segment of this variant uses its meta line as a *moving* mark while a split moves entries
//! out of it (the old segment S) or into it (the new segment N):
//!
//! ```text
//! +0     mark u64: 0, or the mover's held word (bit 63 | member << 32 | acquisition)
//! +8     the other segment of the split (N in S's line, S in N's)
//! +16    split info: L + 1 (bits 0..5) | NEW (bit 6, in N's line) | s << 8
//! ```
//!
//! N's line is part of N's image; S's is WRITTEN (24 B) by the splitter while it holds the lock
//! word, before it changes any entry. Both are cleared (one doorbell, N's first: S and N share
//! a memory node) only after the split's flags are cleared, so a flagged entry, a closed
//! bucket and an orphan all lead to a mark that names the mover. The new segment's buckets are
//! born *closed*: header `depth | (suffix | 2^31) << 32`, which no key matches (suffixes are
//! below `2^max_depth` ≤ `2^24`), until the mover opens each one.
//!
//! # Root slot and descriptor (root table on memory node 0)
//!
//! ```text
//! slot N      the directory's GlobalAddr
//! slot N + 1  descriptor: magic 0x5243 ("RC"; 0x5253, "RS", for race-sephash) in bits 48..63 | shape:
//!             groups (bits 0..10) | max depth (11..15) | max key (16..28) | max value (29..41)
//! ```

use dmindex_fabric::GlobalAddr;
use dmindex_prim::hash::{hash_bytes, mix64};
use dmindex_prim::root::Magic;

pub use dmindex_prim::kv_slot::{
    entry, is_frozen, is_tentative, slot, slot_block, slot_fp, slot_units, units, FROZEN,
    MAX_BLOCK, MAX_NODES, MAX_NODE_BYTES, TENTATIVE,
};

/// Slots per bucket: header + 7 slots = one 64-B cache line.
pub const SLOTS: usize = 7;
/// Bytes per bucket.
pub const BUCKET: u64 = 64;
/// Bytes of a segment's meta line (the split lock).
pub const SEG_META: u64 = 64;
/// Bytes of the directory's header line.
pub const DIR_HEADER: u64 = 64;
/// The lock bit of a segment's lock word and of the directory header word.
pub const LOCK: u64 = 1 << 63;
/// Largest maximum depth (a 2^24-entry directory is 128 MiB).
pub const MAX_DEPTH: usize = 24;
/// Most groups in a segment (the descriptor has 11 bits for them).
pub const MAX_GROUPS: usize = 1024;

/// The descriptor's magic.
pub const MAGIC: Magic = Magic { name: "RACE hash table", value: 0x5243, bits: 16 };

/// The descriptor's magic of `race-sephash` (its directory differs).
pub const SEPHASH_MAGIC: Magic =
    Magic { name: "RACE hash table (SepHash authors' resize)", value: 0x5253, bits: 16 };

/// Bytes of a `race-sephash` directory entry (split flag, segment, local depth).
pub const GLOBAL_ENTRY: u64 = 24;
/// Offset of the global depth word in a `race-sephash` directory (the lock word is at 0).
pub const GLOBAL_DEPTH_WORD: u64 = 8;
/// The suffix bit of a closed bucket header: no key matches it.
pub const CLOSED: u64 = 1 << 31;
/// Offset of a `race-sephash` directory's table record (the lock word is at 0).
pub const TABLE_RECORD: u64 = 16;
/// Table record phases: the holder publishes the split, or clears its flags.
pub const PUBLISHING: u64 = 1;
pub const CLEARING: u64 = 2;
/// The split info bit of the new segment's meta line.
pub const NEW_HALF: u64 = 1 << 6;

/// The split record in a `race` segment's meta line (+8): the new segment and the depth both
/// halves get.
pub fn split_record(new: GlobalAddr, depth: u32) -> u64 {
    dir_entry(new, depth)
}

/// The directory header word of a `race` directory locked by held word `held` (lock bit, member,
/// acquisition) at global depth `depth`: the acquisition's low 24 bits move up to make room for
/// the depth, so a reader of the header still finds the depth in bits 0..7.
pub const fn dir_lock_word(held: u64, depth: u32) -> u64 {
    held & !0xFFFF_FFFF | (held & 0xFF_FFFF) << 8 | depth as u64
}

/// A `race-sephash` segment's split info word (+16 of its meta line).
pub const fn split_info(depth: u32, suffix: u64, new: bool) -> u64 {
    depth as u64 | if new { NEW_HALF } else { 0 } | suffix << 8
}

/// (depth both halves get, old segment's suffix, whether this is the new segment) of a split
/// info word.
pub const fn split_info_parts(w: u64) -> (u32, u64, bool) {
    ((w & 0x3F) as u32, w >> 8, w & NEW_HALF != 0)
}

/// Address of `race-sephash` directory entry `i`.
pub const fn global_entry_addr(dir: GlobalAddr, i: u64) -> GlobalAddr {
    dir.add(DIR_HEADER + GLOBAL_ENTRY * i)
}

/// A `race-sephash` directory entry's bytes.
pub fn global_entry(split: bool, seg: GlobalAddr, depth: u32) -> [u8; GLOBAL_ENTRY as usize] {
    let mut e = [0u8; GLOBAL_ENTRY as usize];
    e[..8].copy_from_slice(&u64::from(split).to_le_bytes());
    e[8..16].copy_from_slice(&seg.raw().to_le_bytes());
    e[16..].copy_from_slice(&u64::from(depth).to_le_bytes());
    e
}

/// (split flag word, segment word, local depth word) of a `race-sephash` directory entry.
pub fn global_entry_parts(e: &[u8]) -> (u64, u64, u64) {
    let w = |i: usize| u64::from_le_bytes(e[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    (w(0), w(1), w(2))
}

/// A closed bucket header: the new segment's buckets before the splitter opens them.
pub const fn closed_header(depth: u32, suffix: u64) -> u64 {
    header(depth, suffix | CLOSED)
}

/// Whether a bucket header is closed (only `race-sephash` writes such headers).
pub const fn is_closed(header: u64) -> bool {
    header_parts(header).1 & CLOSED != 0
}

/// A segment's byte size.
pub const fn segment_bytes(groups: usize) -> u64 {
    SEG_META + 3 * BUCKET * groups as u64
}

/// The two hashes of a key and what they decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hashes {
    /// First hash: its low bits index the directory (the suffix).
    pub h1: u64,
    /// Second hash: the second bucket choice and the fingerprint.
    pub h2: u64,
}

impl Hashes {
    pub fn of(key: &[u8]) -> Hashes {
        let h1 = hash_bytes(key);
        Hashes { h1, h2: mix64(h1 ^ 0x5241_4345_5241_4345) }
    }

    /// The slot fingerprint.
    pub fn fp(&self) -> u8 {
        (self.h2 >> 24) as u8
    }

    /// The two main buckets (distinct) of a segment of `groups` groups.
    pub fn mains(&self, groups: usize) -> [usize; 2] {
        let n = 2 * groups as u64;
        let a = ((self.h1 >> 32) % n) as usize;
        let mut b = ((self.h2 >> 32) % n) as usize;
        if b == a {
            b = a ^ 1;
        }
        [a, b]
    }

    /// Bit `depth` of the first hash: which half of a splitting segment the key goes to.
    pub fn bit(&self, depth: u32) -> bool {
        self.h1 >> depth & 1 == 1
    }

    /// Whether bucket header `header` says the bucket holds keys with this hash.
    pub fn matches(&self, header: u64) -> bool {
        let (depth, suffix) = header_parts(header);
        self.h1 & low_mask(depth) == suffix
    }
}

/// `2^bits - 1`.
pub const fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

/// Bucket header word.
pub const fn header(depth: u32, suffix: u64) -> u64 {
    depth as u64 | suffix << 32
}

/// (depth, suffix) of a header word.
pub const fn header_parts(h: u64) -> (u32, u64) {
    ((h & 0xFF) as u32, h >> 32)
}

/// The main bucket's index in its segment.
pub const fn main_bucket(m: usize) -> usize {
    3 * (m / 2) + 2 * (m % 2)
}

/// The overflow bucket of main bucket `m`.
pub const fn overflow_bucket(m: usize) -> usize {
    3 * (m / 2) + 1
}

/// Byte offset of bucket `b` in a segment.
pub const fn bucket_offset(b: usize) -> u64 {
    SEG_META + b as u64 * BUCKET
}

/// Directory entry word.
pub fn dir_entry(seg: GlobalAddr, depth: u32) -> u64 {
    debug_assert!(seg.is_aligned(64) && depth < 64);
    seg.raw() | depth as u64
}

/// (segment, depth) of a directory entry word.
pub const fn dir_entry_parts(e: u64) -> (GlobalAddr, u32) {
    (GlobalAddr::from_raw(e & !0x3F), (e & 0x3F) as u32)
}

/// Address of directory entry `i`.
pub const fn dir_entry_addr(dir: GlobalAddr, i: u64) -> GlobalAddr {
    dir.add(DIR_HEADER + 8 * i)
}

/// The shape the descriptor records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub groups: usize,
    pub max_depth: usize,
    pub max_key: usize,
    pub max_value: usize,
}

impl Shape {
    /// The descriptor's shape bits.
    pub fn bits(&self) -> u64 {
        self.groups as u64 & 0x7FF
            | (self.max_depth as u64 & 0x1F) << 11
            | (self.max_key as u64 & 0x1FFF) << 16
            | (self.max_value as u64 & 0x1FFF) << 29
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_and_segment_bytes_are_pinned() {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(&header(5, 0b10110).to_le_bytes());
        b[8..16].copy_from_slice(&slot(0x11, 1, GlobalAddr::new(0, 64)).to_le_bytes());
        assert_eq!(b[..16], [5, 0, 0, 0, 0x16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0x01, 0x11]);
        assert_eq!(header_parts(header(5, 0b10110)), (5, 0b10110));
        assert_eq!(segment_bytes(1), 256);
        assert_eq!(segment_bytes(64), 64 + 64 * 192);
        // Group g: main (side 0), overflow, main (side 1).
        assert_eq!([main_bucket(0), overflow_bucket(0), main_bucket(1)], [0, 1, 2]);
        assert_eq!([main_bucket(6), overflow_bucket(7), main_bucket(7)], [9, 10, 11]);
        assert_eq!([bucket_offset(0), bucket_offset(1), bucket_offset(3)], [64, 128, 256]);
    }

    #[test]
    fn directory_and_descriptor_bytes_are_pinned() {
        let seg = GlobalAddr::new(2, 0x4000);
        let e = dir_entry(seg, 9);
        assert_eq!(e.to_le_bytes(), [0x09, 0x40, 0, 0, 0, 0, 0x02, 0x00]);
        assert_eq!(dir_entry_parts(e), (seg, 9));
        let dir = GlobalAddr::new(0, 0x10000);
        assert_eq!(dir_entry_addr(dir, 3), GlobalAddr::new(0, 0x10000 + 64 + 24));
        let shape = Shape { groups: 64, max_depth: 20, max_key: 16, max_value: 32 };
        assert_eq!(shape.bits(), 64 | 20 << 11 | 16 << 16 | 32 << 29);
        assert_eq!(MAGIC.word(shape.bits()) >> 48, 0x5243);
    }

    #[test]
    fn sephash_directory_bytes_are_pinned() {
        let seg = GlobalAddr::new(2, 0x4000);
        let e = global_entry(true, seg, 9);
        assert_eq!(
            e,
            [
                1, 0, 0, 0, 0, 0, 0, 0, // split flag
                0x00, 0x40, 0, 0, 0, 0, 0x02, 0x00, // segment: offset 0x4000 on node 2
                9, 0, 0, 0, 0, 0, 0, 0, // local depth
            ]
        );
        assert_eq!(global_entry_parts(&e), (1, seg.raw(), 9));
        assert_eq!(global_entry_parts(&global_entry(false, seg, 3)).0, 0);
        let dir = GlobalAddr::new(0, 0x10000);
        assert_eq!(global_entry_addr(dir, 0), GlobalAddr::new(0, 0x10000 + 64));
        assert_eq!(global_entry_addr(dir, 5), GlobalAddr::new(0, 0x10000 + 64 + 120));
        assert_eq!(dir.add(GLOBAL_DEPTH_WORD), GlobalAddr::new(0, 0x10008));
        assert_eq!(SEPHASH_MAGIC.word(0) >> 48, 0x5253);
        // A closed header matches no key, at any depth a table can have.
        let closed = closed_header(6, 0b10_1101);
        assert_eq!(closed.to_le_bytes(), [6, 0, 0, 0, 0x2D, 0, 0, 0x80]);
        assert!(is_closed(closed) && !is_closed(header(6, 0b10_1101)));
        for k in 0..2000u64 {
            let h = Hashes::of(&k.to_be_bytes());
            for depth in [0, 1, 6, MAX_DEPTH as u32] {
                let suffix = h.h1 & low_mask(depth);
                assert!(h.matches(header(depth, suffix)));
                assert!(!h.matches(closed_header(depth, suffix)));
            }
        }
    }

    #[test]
    fn recovery_words_are_pinned() {
        // A segment's split record: N and the depth both halves get.
        let n = GlobalAddr::new(1, 0x8_0000);
        let r = split_record(n, 5);
        assert_eq!(r.to_le_bytes(), [0x05, 0, 0x08, 0, 0, 0, 0x01, 0]);
        assert_eq!(dir_entry_parts(r), (n, 5));
        // The directory header while held: lock bit, member, acquisition's low 24 bits, depth.
        let member = 1 << 30 | 3;
        let held = dmindex_prim::lock::held_word(member, 0x0123_4567);
        assert_eq!(held, 0xC000_0003_0123_4567);
        let w = dir_lock_word(held, 9);
        assert_eq!(w, 0xC000_0003_2345_6709);
        assert_eq!(w & 0xFF, 9, "the depth stays in bits 0..7");
        assert_eq!(dmindex_prim::lock::holder(w), Some(member));
        // race-sephash: split info (depth, new-half bit, suffix) and the table record phases.
        assert_eq!(split_info(4, 0b101, true), 4 | 1 << 6 | 0b101 << 8);
        assert_eq!(split_info_parts(split_info(4, 0b101, true)), (4, 0b101, true));
        assert_eq!(
            split_info_parts(split_info(24, (1 << 23) + 1, false)),
            (24, (1 << 23) + 1, false)
        );
        assert_eq!((TABLE_RECORD, PUBLISHING, CLEARING), (16, 1, 2));
    }

    #[test]
    fn hashes_are_pinned_and_choices_distinct() {
        let h = Hashes::of(&1u64.to_be_bytes());
        assert_eq!(h.h1, hash_bytes(&1u64.to_be_bytes()));
        assert_eq!(h.h2, mix64(h.h1 ^ 0x5241_4345_5241_4345));
        assert_eq!(h.fp(), (h.h2 >> 24) as u8);
        for k in 0..2000u64 {
            let h = Hashes::of(&k.to_be_bytes());
            for groups in [1, 2, 5, 64] {
                let [a, b] = h.mains(groups);
                assert!(a != b && a < 2 * groups && b < 2 * groups);
            }
            assert!(h.matches(header(0, 0)));
            assert_eq!(h.matches(header(1, 1)), h.bit(0));
        }
    }
}
