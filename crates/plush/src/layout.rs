//! Every remote byte layout of Plush, drawn; all words are little-endian.
//!
//! # Entry (8 B, aligned): a top bucket's slot, or one element of a run
//!
//! ```text
//!  63      56 55 54     48 47          42 41                                       0
//! +----------+--+---------+--------------+------------------------------------------+
//! | fp (8)   |D | units(7)|block node (6)| block offset / 64 (42)                   |
//! +----------+--+---------+--------------+------------------------------------------+
//! ```
//!
//! * `0` is an empty slot; a used one never is (`units` ≥ 1).
//! * `fp`: 8 bits of a second hash of the key ([`Hashes::fp`]): a reader READs a block only
//!   when the fingerprint matches, and the key in the block decides.
//! * `D` (deleted): the entry is a tombstone. Its block holds the key and no value; it hides
//!   the key's older entries below it until a migration drops it (crate docs).
//! * `units`: the block's length in 64-B units (1..=127): blocks are at most 8 128 B.
//! * The block address: the memory node in 6 bits (at most 64) and the offset over 64 (blocks
//!   are 64-B aligned) in 42 bits.
//!
//! # Top group (192 + 128 × slots B, 64-B aligned, on memory node `g mod nodes`)
//!
//! ```text
//! +0     lock word u64 ([`dmindex_prim::lock`]: 0 free, else the holder's held word); the rest
//!        of the line zero
//! +64    children[16]: u64 each, 0 or the address of the level-1 group of that digit
//! +192   bucket 0: `slots` entries | bucket 1 | ... | bucket 15
//! ```
//!
//! A top bucket is mutable: an upsert WRITEs one entry (into the key's slot, or an empty one),
//! a migration clears all sixteen with one WRITE. It holds at most one entry per key.
//!
//! # Inner group (640 B, 64-B aligned, on the top group's node)
//!
//! ```text
//! +0     descriptor, 8 lines of 64 B; line i:
//!          +0   epoch u64: the epoch its records were written in (line 0's is the group's)
//!          +8   run record 2i     (24 B)
//!          +32  run record 2i + 1 (24 B)
//!          +56  zero
//! +512   children[16]: u64 each, 0 or the address of the next level's group of that digit
//!
//! run record: +0 filter (128 bits, two u64) | +16 run word u64 = entries << 48 | address48
//! ```
//!
//! * The descriptor lists the group's runs, oldest first: a record is valid if its run word is
//!   not 0 and its line carries the group's epoch (line 0's). A writer (holding the top
//!   group's lock) changes it one line at a time, and a line is written whole even by a WRITE
//!   a crash cuts short: an append WRITEs the line of the new record (with the current epoch,
//!   the line's other record kept if valid, else zeroed); a reset or a compaction WRITEs line
//!   0 alone with the next epoch (and the compacted run as record 0), which invalidates every
//!   other line at once. Epochs only grow, so a line of an earlier epoch never passes for a
//!   current one.
//! * A reader takes the valid records of whatever mix of lines its READ sampled: each was
//!   listed in the group when its line was read, and a record it missed was appended after
//!   the reader had read the level above, where the entries it holds then were (crate docs).
//! * A run is an array of `entries` entries, 64-B aligned, written once before the descriptor
//!   that lists it and never written again: a READ of a run is never torn.
//! * The filter is a Bloom filter of the run's keys ([`Hashes::filter`]): three bits of 128.
//! * Children words are written once, 0 → address, by the migration that creates the child;
//!   a group is never freed, so an address once read stays good.
//!
//! # Directory (64 + 8 × groups B, on node 0; the root word names it)
//!
//! ```text
//! +0   magic u64 "DMPLUSH1" | +8 max_key u32 | +12 max_value u32 | +16 groups u32 | zero
//! +64  tops[groups]: the address of each top group
//! ```

use dmindex_fabric::GlobalAddr;
use dmindex_prim::hash::{hash_bytes, mix64};
use dmindex_prim::root::Magic;

/// The root descriptor's magic ("PL").
pub const MAGIC: Magic = Magic { name: "plush", value: 0x504C, bits: 16 };

/// The directory's first word.
pub const DIR_MAGIC: u64 = u64::from_le_bytes(*b"DMPLUSH1");
/// Bytes of the directory's header line.
pub const DIR_HEADER: u64 = 64;

/// Children of a group, and buckets of a top group: one per 4-bit digit.
pub const FANOUT: usize = 16;
/// Bytes of one entry.
pub const ENTRY: u64 = 8;

/// Offset of a top group's children array.
pub const TOP_CHILDREN: u64 = 64;
/// Offset of a top group's first bucket.
pub const TOP_BUCKETS: u64 = TOP_CHILDREN + 8 * FANOUT as u64;

/// Bytes of a top group with `slots` entries a bucket.
pub const fn top_bytes(slots: usize) -> u64 {
    TOP_BUCKETS + FANOUT as u64 * slots as u64 * ENTRY
}

/// Lines of an inner group's descriptor.
pub const DESC_LINES: usize = 8;
/// Bytes of a descriptor.
pub const DESC: u64 = 64 * DESC_LINES as u64;
/// Most runs a group lists (two records a line).
pub const MAX_RUNS: usize = 2 * DESC_LINES;
/// Bytes of a run record.
pub const RECORD: usize = 24;
/// Offset of an inner group's children array.
pub const GROUP_CHILDREN: u64 = DESC;
/// Bytes of an inner group.
pub const GROUP: u64 = DESC + 8 * FANOUT as u64;

/// Levels below the top (the 64-bit hash has digits for no more; the deepest level compacts
/// in place instead of migrating down).
pub const MAX_LEVELS: usize = 9;

/// Most memory nodes an entry names (6 bits).
pub const MAX_NODES: u16 = 64;
/// Largest block in bytes (127 units of 64).
pub const MAX_BLOCK: usize = 127 * 64;
/// Most entries in one run (16 bits of the run word).
pub const MAX_RUN: usize = u16::MAX as usize;

const DELETED: u64 = 1 << 55;
const ADDR48: u64 = (1 << 48) - 1;

/// The entry of block `block` of `len` bytes for a key with fingerprint `fp`.
pub fn entry(fp: u8, deleted: bool, len: usize, block: GlobalAddr) -> u64 {
    debug_assert!(block.is_aligned(64) && block.node() < MAX_NODES && len <= MAX_BLOCK);
    (fp as u64) << 56 | (deleted as u64) << 55 | (len.div_ceil(64) as u64) << 48 | addr48(block)
}

/// An entry's fingerprint.
pub const fn entry_fp(e: u64) -> u8 {
    (e >> 56) as u8
}

/// Whether an entry is a tombstone.
pub const fn is_deleted(e: u64) -> bool {
    e & DELETED != 0
}

/// An entry's block length in bytes (a multiple of 64).
pub const fn entry_len(e: u64) -> usize {
    (((e >> 48) & 0x7F) * 64) as usize
}

/// An entry's block address.
pub const fn entry_block(e: u64) -> GlobalAddr {
    from_addr48(e & ADDR48)
}

const fn addr48(a: GlobalAddr) -> u64 {
    (a.node() as u64) << 42 | a.offset() >> 6
}

const fn from_addr48(w: u64) -> GlobalAddr {
    GlobalAddr::new(((w >> 42) & 0x3F) as u16, (w & ((1 << 42) - 1)) << 6)
}

/// A run word: `entries` entries at `run` (64-B aligned).
pub fn run_word(entries: usize, run: GlobalAddr) -> u64 {
    debug_assert!(run.is_aligned(64) && entries <= MAX_RUN && run.node() < MAX_NODES);
    (entries as u64) << 48 | addr48(run)
}

/// A run word's entries and address.
pub const fn run_parts(w: u64) -> (usize, GlobalAddr) {
    ((w >> 48) as usize, from_addr48(w & ADDR48))
}

/// One run a descriptor lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub filter: [u64; 2],
    pub run: u64,
}

/// A descriptor as read: the group's epoch and the records valid in it (bit `i` of `valid`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    pub epoch: u64,
    pub records: [Record; MAX_RUNS],
    pub valid: u16,
}

impl Desc {
    /// The descriptor in `b` (512 bytes), as a reader takes it (layout docs).
    pub fn decode(b: &[u8]) -> Desc {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let mut d = Desc { epoch: word(0), ..Desc::default() };
        for i in 0..DESC_LINES {
            if word(64 * i) != d.epoch {
                continue;
            }
            for half in 0..2 {
                let at = 64 * i + 8 + half * RECORD;
                let r = Record { filter: [word(at), word(at + 8)], run: word(at + 16) };
                if r.run != 0 {
                    d.records[2 * i + half] = r;
                    d.valid |= 1 << (2 * i + half);
                }
            }
        }
        d
    }

    /// How many runs a writer's image lists: its valid records must be `0 .. n` (a writer
    /// holds the lock, so nothing is torn); `None` otherwise (garbage).
    pub fn size(&self) -> Option<usize> {
        let n = self.valid.count_ones() as usize;
        (u32::from(self.valid) == (1u32 << n) - 1).then_some(n)
    }

    /// Line `i` of this descriptor (64 bytes): its epoch and its two records, zero where not
    /// valid.
    pub fn line(&self, i: usize) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&self.epoch.to_le_bytes());
        for half in 0..2 {
            let j = 2 * i + half;
            if self.valid & (1 << j) == 0 {
                continue;
            }
            let r = &self.records[j];
            let at = 8 + half * RECORD;
            b[at..at + 8].copy_from_slice(&r.filter[0].to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&r.filter[1].to_le_bytes());
            b[at + 16..at + 24].copy_from_slice(&r.run.to_le_bytes());
        }
        b
    }

    /// The next epoch's empty descriptor (a reset), or with `first` as its one run (a
    /// compaction): written as line 0 alone.
    pub fn next_epoch(&self, first: Option<Record>) -> Desc {
        let mut d = Desc { epoch: self.epoch + 1, ..Desc::default() };
        if let Some(r) = first {
            d.records[0] = r;
            d.valid = 1;
        }
        d
    }
}

/// The hashes of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hashes(pub u64);

impl Hashes {
    /// The hashes of `key`.
    pub fn of(key: &[u8]) -> Hashes {
        Hashes(hash_bytes(key))
    }

    /// The key's top group of `groups`: from bits 40..64 of the hash, which no digit uses.
    pub fn top_group(self, groups: usize) -> usize {
        ((self.0 >> 40) % groups as u64) as usize
    }

    /// The key's bucket in its top group: the hash's low 4 bits.
    pub fn top_bucket(self) -> usize {
        (self.0 & 0xF) as usize
    }

    /// The key's child at level `level` (1 ..= [`MAX_LEVELS`]) of a group whose children are
    /// `1 << fanout_bits`: the next `fanout_bits` bits above the top bucket's four, so a level's
    /// groups split the keys of their parent.
    pub fn digit(self, level: usize, fanout_bits: u32) -> usize {
        debug_assert!((1..=MAX_LEVELS).contains(&level) && (1..=4).contains(&fanout_bits));
        let shift = 4 + (level as u32 - 1) * fanout_bits;
        ((self.0 >> shift) & ((1 << fanout_bits) - 1)) as usize
    }

    /// The fingerprint in a key's entries.
    pub fn fp(self) -> u8 {
        (mix64(self.0 ^ 0x0F0F_0F0F) >> 56) as u8
    }

    /// The key's three bits in a 128-bit run filter.
    pub fn filter(self) -> [u64; 2] {
        let m = mix64(self.0 ^ 0x5A5A_5A5A_5A5A);
        let mut f = [0u64; 2];
        for i in 0..3 {
            let bit = (m >> (7 * i)) & 127;
            f[(bit >> 6) as usize] |= 1 << (bit & 63);
        }
        f
    }
}

/// Whether `filter` may hold the key whose own bits ([`Hashes::filter`]) are `mine`.
pub fn in_filter(mine: [u64; 2], filter: [u64; 2]) -> bool {
    mine[0] & filter[0] == mine[0] && mine[1] & filter[1] == mine[1]
}

/// The shape an index was created with (the root descriptor's bits; key and value lengths are
/// in the directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Top groups.
    pub groups: usize,
    /// Entries in a top bucket.
    pub slots: usize,
    /// Runs a group holds before it migrates (or, at the deepest level, compacts).
    pub runs: usize,
    /// Bits of a level's digit: a group has `1 << fanout_bits` children.
    pub fanout_bits: u32,
    /// Levels below the top.
    pub levels: usize,
}

impl Shape {
    /// The root descriptor's shape bits.
    pub fn bits(&self) -> u64 {
        self.groups as u64 & 0xFFFF
            | (self.slots as u64 & 0x1F) << 16
            | (self.runs as u64 & 0x1F) << 21
            | (self.fanout_bits as u64 & 0x7) << 26
            | (self.levels as u64 & 0xF) << 29
    }

    /// Children a group uses.
    pub fn fanout(&self) -> usize {
        1 << self.fanout_bits
    }

    /// A top bucket's bytes.
    pub fn bucket_bytes(&self) -> usize {
        self.slots * ENTRY as usize
    }

    /// The address of bucket `b` of the top group at `top`.
    pub fn bucket_addr(&self, top: GlobalAddr, b: usize) -> GlobalAddr {
        top.add(TOP_BUCKETS + (b * self.bucket_bytes()) as u64)
    }
}

/// The words in `b`, little-endian.
pub fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_bytes_are_pinned() {
        let block = GlobalAddr::new(3, 0x1234_5640);
        let e = entry(0xAB, false, 100, block);
        assert_eq!(e, 0xAB02_0C00_0048_D159, "fp, units 2, node 3 << 42, offset / 64");
        assert_eq!(
            (entry_fp(e), is_deleted(e), entry_len(e), entry_block(e)),
            (0xAB, false, 128, block)
        );
        let d = entry(0, true, 64, block);
        assert_eq!(d, 0x0081_0C00_0048_D159);
        assert!(is_deleted(d) && d != 0, "a tombstone with fingerprint 0 is still no empty slot");
        let last = GlobalAddr::new(63, ((1 << 42) - 1) << 6);
        assert_eq!(entry_block(entry(0xFF, true, MAX_BLOCK, last)), last);
    }

    #[test]
    fn run_words_and_descriptors_are_pinned() {
        let run = GlobalAddr::new(1, 0x40);
        let w = run_word(37, run);
        assert_eq!(w, 0x0025_0400_0000_0001);
        assert_eq!(run_parts(w), (37, run));
        let mut d = Desc { epoch: 5, valid: 0b111, ..Desc::default() };
        d.records[0] = Record { filter: [1, 2], run: w };
        d.records[1] = Record { filter: [3, 4], run: 9 };
        d.records[2] = Record { filter: [7, 8], run: 10 };
        let mut b = [0u8; DESC as usize];
        b[0..64].copy_from_slice(&d.line(0));
        b[64..128].copy_from_slice(&d.line(1));
        assert_eq!(&b[0..8], &5u64.to_le_bytes(), "the epoch at the head of line 0");
        assert_eq!(&b[8..16], &1u64.to_le_bytes(), "record 0's filter");
        assert_eq!(&b[24..32], &w.to_le_bytes(), "record 0's run word");
        assert_eq!(&b[32..40], &3u64.to_le_bytes(), "record 1 at +32");
        assert_eq!(&b[64..72], &5u64.to_le_bytes(), "line 1's epoch");
        assert_eq!(&b[64 + 24..64 + 32], &10u64.to_le_bytes(), "record 2's run word");
        assert_eq!(&b[64 + 32 + 16..64 + 56], &[0; 8], "record 3 is not valid: zero");
        assert_eq!(Desc::decode(&b), d);
        assert_eq!(d.size(), Some(3));
        // A line of an earlier epoch lists nothing, whatever it holds.
        let mut stale = b;
        stale[64..72].copy_from_slice(&4u64.to_le_bytes());
        assert_eq!(Desc::decode(&stale).valid, 0b11);
        // A reset is line 0 alone with the next epoch: every other line drops out.
        let reset = d.next_epoch(None);
        b[0..64].copy_from_slice(&reset.line(0));
        assert_eq!(Desc::decode(&b), Desc { epoch: 6, ..Desc::default() });
        assert_eq!(Desc::decode(&b).size(), Some(0));
        // Valid records with a gap are no writer's image.
        assert_eq!(Desc { valid: 0b101, ..d }.size(), None);
    }

    #[test]
    fn group_bytes_are_pinned() {
        assert_eq!((TOP_CHILDREN, TOP_BUCKETS, top_bytes(16)), (64, 192, 2240));
        assert_eq!((DESC, GROUP_CHILDREN, GROUP), (512, 512, 640));
        let shape = Shape { groups: 128, slots: 16, runs: 16, fanout_bits: 4, levels: 9 };
        assert_eq!(shape.bucket_addr(GlobalAddr::new(2, 4096), 3), GlobalAddr::new(2, 4096 + 576));
        assert_eq!(shape.bits(), 128 | 16 << 16 | 16 << 21 | 4 << 26 | 9 << 29);
    }

    #[test]
    fn hashes_are_pinned_and_digits_disjoint() {
        // Key 42's hash (prim's, pinned there) and what Plush derives from it, stored in every
        // entry and filter.
        let h = Hashes::of(&42u64.to_be_bytes());
        assert_eq!(h.0, 0xBD40_0FDD_996C_B43D);
        assert_eq!((h.fp(), h.filter()), (0xDB, [0x10, 0x2_1000_0000_0000]));
        assert_eq!((h.top_bucket(), h.top_group(128)), (13, 15));
        assert_eq!(Hashes(0x0123_4567_89AB_CDEF).top_bucket(), 0xF);
        let d: Vec<usize> =
            (1..=MAX_LEVELS).map(|l| Hashes(0x0123_4567_89AB_CDEF).digit(l, 4)).collect();
        assert_eq!(d, [0xE, 0xD, 0xC, 0xB, 0xA, 0x9, 0x8, 0x7, 0x6], "bits 4..40, low digit first");
        assert_eq!(Hashes(0x0123_4567_89AB_CDEF).top_group(1 << 24), 0x01_2345);
        // A run's filter admits each of its 16 keys and rules most other keys out.
        let run: Vec<Hashes> = (1..=16u64).map(|k| Hashes::of(&k.to_be_bytes())).collect();
        let f = run.iter().fold([0, 0], |f, h| [f[0] | h.filter()[0], f[1] | h.filter()[1]]);
        assert!(run.iter().all(|h| in_filter(h.filter(), f)));
        let admitted =
            (1000..2000u64).filter(|k| in_filter(Hashes::of(&k.to_be_bytes()).filter(), f));
        assert!(admitted.count() < 100, "a 16-key filter admits under 10 % of other keys");
    }
}
