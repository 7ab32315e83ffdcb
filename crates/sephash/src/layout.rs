//! Every remote byte of SepHash, drawn, and the words' encoders.
//!
//! All words are little-endian u64s on 8-byte boundaries. A word the design changes atomically
//! is marked *CAS'd*; everything else is written once, before it is published, and never again.
//!
//! # Directory (memory node 0, found through the root slot)
//!
//! ```text
//! +0                global depth (u64; a hint: the deepest split so far)
//! +8 + 8·i          entry i (u64): raw address of the CurSegment whose suffix is i, or 0
//!                   i < 2^max_depth; written once, when that segment is created
//! ```
//!
//! A segment is entered once, at its own suffix; its aliases at shallower depths are implicit:
//! a client looks up `h mod 2^d` for the largest `d` it knows and clears the top bit of the
//! index while the entry is 0. So a split writes one entry (and the depth word when the
//! directory deepens), never a range of aliases.
//!
//! # CurSegment (64-B aligned, on the memory node its directory entry names)
//!
//! ```text
//! +0        meta (CAS'd)
//!           63     62      61..56        55..36         35..0
//!           sign | closed | local depth | edition (20) | MainSegment offset / 64 on this node
//!                                                        (0: none)
//! +8        merge record (CAS'd): who closes (merges) which generation
//!           63  62..32                 31..20   19..0
//!           1 | closer's member word | zero   | tag: edition of the generation it closed
//!           (before a segment's first close: the tag alone, edition − 1, no member)
//! +16       slot[0..n]   (8 B each, CAS'd): entries, appended in slot order
//! +F        filter line[0..L], F = 16 + 8n rounded up to 64, L = ⌈positions / 56⌉, 64 B each:
//!             +0   tag (u64): the meta this generation opened with (never closed)
//!             +8   position[56·j .. 56·j + 56] (1 B each): 1 = an entry with this (fp, fp2)
//!                  position may be in this generation's slots
//! ```
//!
//! The segment's suffix (the low `local depth` hash bits every key here has) is not stored: it
//! is the directory index the segment is entered at, which a client found it by.
//!
//! *The merge record* names the one client that merges a generation, so that it can be judged
//! and fenced if it dies holding the segment closed ([`dmindex_prim::lease`]). A closer of
//! generation `e` posts one doorbell: a masked CAS of the record that compares only the tag
//! with `e − 1` and swaps in its own held word tagged `e`, then the CAS that closes the meta.
//! The first record CAS of a generation to land wins it (the tag is `e` afterwards; stale
//! closers compare an older tag and fail), and it lands before any CAS that closes the meta,
//! since each closer's two verbs execute in order. So a meta closed at edition `e` always
//! comes with a record naming one member at tag `e`, and that member (and no other) merges:
//! if its own meta CAS failed, another closer's closed the same generation. A segment a split
//! creates closed carries its splitter's held word tagged `e − 1`: it opens only when its
//! splitter (or the repairer of its old half) opens it, and its first generation's closers
//! still compare `e − 1`. Reopening leaves the record as it is.
//!
//! A slot is free when its sign differs from the meta's, so flipping the meta's sign empties the
//! CurSegment at once. The edition counts the segment's merges (mod 2^20): a MainSegment's
//! memory is reused once it is replaced, so its offset comes back (every other merge, when one
//! compute node merges a segment), and only the edition keeps the segment's meta words from
//! repeating within 2^20 merges (see `docs/sephash.md`, "Why it is linearizable").
//!
//! Each filter position is a whole byte so that setting one is a plain WRITE that cannot undo a
//! neighbour's (RDMA has no remote OR; the paper's bit per position would lose bits to
//! concurrent read-modify-writes). Each 64-B line of the filter starts with a copy of the meta
//! its generation opened with, written whole with the line's cleared positions: a READ of one
//! line is a snapshot of one instant (the fabric's unit), so a search gets a position and the
//! generation it belongs to in one READ of 9 to 64 bytes, and needs the meta word only when it
//! reads the slots. Positions are written by appends (byte 1) and cleared only by rewriting the
//! whole line with the next generation's tag, while the segment is closed.
//!
//! # Entry (a CurSegment slot or a MainSegment element)
//!
//! ```text
//! 63     62..59   58..51   50..43   42          41..36        35..0
//! sign | dep (4) | fp (8) | fp2 (8) | tombstone | block node  | block offset / 64
//! ```
//!
//! `dep` holds the 4 hash bits of the split round `local depth / 4` of the segment the entry
//! was written to; a split at depth `l` sends an entry by bit `l mod 4` of it and reads the key's
//! block only when a round is used up. fp2 sits in the CAS'd word (the paper writes it after the
//! CAS, where a merge or a search can read a stale one; see `docs/sephash.md`). The key and
//! value live in a KV block (`dmindex_prim::kv_block`) on any of 64 memory nodes, up to 4 TiB
//! each; its header carries the lengths, so the entry needs no length field and items have no
//! 448-B cap. A zero word is never an entry (block 0 is a node's superblock).
//!
//! # MainSegment (64-B aligned, same node as its CurSegment; immutable once published)
//!
//! ```text
//! +0                  entries E (u32) | record points P (u16) | 0 (u16)
//! +8 + 4·j            record point j: fp (u8) | delta (i24)                 (j < P)
//! +8 + 4·P, 8-aligned entries[0..E], sorted by (fp, fp2), sign 0, one per live key
//! ```

use dmindex_fabric::GlobalAddr;

/// Bytes before a CurSegment's first slot: the meta word and the merge record.
pub const CUR_HEADER: u64 = 16;
/// Bytes of a MainSegment's fixed header.
pub const MAIN_HEADER: u64 = 8;
/// Bytes of one record point.
pub const POINT_BYTES: u64 = 4;
/// Address bits of a block's memory node in an entry.
pub const BLOCK_NODE_BITS: u32 = 6;
/// Bits of a block's offset / 64 in an entry.
pub const BLOCK_UNIT_BITS: u32 = 36;
/// Largest memory node an entry can name a block on, plus one.
pub const MAX_NODES: u16 = 1 << BLOCK_NODE_BITS;
/// Largest node size whose every block an entry can name.
pub const MAX_NODE_BYTES: u64 = 64 << BLOCK_UNIT_BITS;

const SIGN: u64 = 1 << 63;
const CLOSED: u64 = 1 << 62;
/// Bits of a MainSegment's offset / 64 in the meta: every offset below [`MAX_NODE_BYTES`].
const MAIN_UNIT_BITS: u32 = 36;
const MAIN_UNITS: u64 = (1 << MAIN_UNIT_BITS) - 1;
/// Bits of the edition.
const EDITION_BITS: u32 = 20;
/// The edition bits (of a meta word, shifted; of a merge record's tag, in place).
pub const EDITIONS: u64 = (1 << EDITION_BITS) - 1;
/// Offset of a CurSegment's merge record.
pub const RECORD: u64 = 8;

/// A merge record's tag: the edition of the generation its closer closed.
pub const fn record_tag(record: u64) -> u32 {
    (record & EDITIONS) as u32
}

/// The merge record of a segment no one has closed yet, whose first generation has `edition`:
/// the tag `edition − 1`, no member.
pub const fn fresh_record(edition: u32) -> u64 {
    (edition as u64).wrapping_sub(1) & EDITIONS
}

/// A CurSegment's meta word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Meta(pub u64);

impl Meta {
    /// A meta word; `main` is the MainSegment's offset on the CurSegment's node (0: none), a
    /// multiple of 64 below [`MAX_NODE_BYTES`]; `edition` is taken mod 2^20.
    pub fn new(sign: bool, closed: bool, depth: u32, edition: u32, main: u64) -> Meta {
        debug_assert!(depth < 64 && main % 64 == 0 && main / 64 <= MAIN_UNITS);
        Meta(
            (sign as u64) << 63
                | (closed as u64) << 62
                | (depth as u64) << 56
                | ((edition as u64 & EDITIONS) << MAIN_UNIT_BITS)
                | (main / 64),
        )
    }
    pub fn sign(self) -> bool {
        self.0 & SIGN != 0
    }
    /// A merge (or split) holds the segment: no slot can be taken until it reopens.
    pub fn closed(self) -> bool {
        self.0 & CLOSED != 0
    }
    pub fn depth(self) -> u32 {
        ((self.0 >> 56) & 0x3F) as u32
    }
    /// The MainSegment's offset on this node (0: none yet).
    pub fn main(self) -> u64 {
        (self.0 & MAIN_UNITS) * 64
    }
    /// Merges of this segment so far, mod 2^20.
    pub fn edition(self) -> u32 {
        ((self.0 >> MAIN_UNIT_BITS) & EDITIONS) as u32
    }
    /// The edition the merge that replaces this meta's MainSegment publishes.
    pub fn next_edition(self) -> u32 {
        (self.edition() + 1) & EDITIONS as u32
    }
    /// The edition before this one: the merge record's tag its closers compare.
    pub fn prev_edition(self) -> u32 {
        self.edition().wrapping_sub(1) & EDITIONS as u32
    }
    /// The same word, open.
    pub fn open(self) -> Meta {
        Meta(self.0 & !CLOSED)
    }
    /// The MainSegment as caches name it: edition and offset (the meta's low 56 bits, so
    /// `Meta(id).main()` is the offset).
    pub fn main_id(self) -> u64 {
        self.0 & ((1 << 56) - 1)
    }
    /// The same word, closed.
    pub fn close(self) -> Meta {
        Meta(self.0 | CLOSED)
    }
    /// Whether `slot` is taken in this generation.
    pub fn holds(self, slot: Entry) -> bool {
        slot.sign() == self.sign()
    }
    /// Whether a key with hash `h` belongs to a segment with this depth and `suffix`.
    pub fn owns(self, suffix: u64, h: u64) -> bool {
        h & low_mask(self.depth()) == suffix
    }
}

/// The low `bits` bits.
pub fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// An entry word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry(pub u64);

impl Entry {
    /// An entry for the block at `block` (64-B aligned, node < 64, offset < 4 TiB).
    pub fn new(sign: bool, dep: u8, fp: u8, fp2: u8, tombstone: bool, block: GlobalAddr) -> Entry {
        debug_assert!(dep < 16 && block.is_aligned(64));
        debug_assert!(block.node() < MAX_NODES && block.offset() < MAX_NODE_BYTES);
        Entry(
            (sign as u64) << 63
                | (dep as u64) << 59
                | (fp as u64) << 51
                | (fp2 as u64) << 43
                | (tombstone as u64) << 42
                | (block.node() as u64) << BLOCK_UNIT_BITS
                | block.offset() >> 6,
        )
    }
    pub fn sign(self) -> bool {
        self.0 & SIGN != 0
    }
    pub fn dep(self) -> u8 {
        ((self.0 >> 59) & 0xF) as u8
    }
    pub fn fp(self) -> u8 {
        (self.0 >> 51) as u8
    }
    pub fn fp2(self) -> u8 {
        (self.0 >> 43) as u8
    }
    pub fn tombstone(self) -> bool {
        self.0 & (1 << 42) != 0
    }
    pub fn block(self) -> GlobalAddr {
        let node = ((self.0 >> BLOCK_UNIT_BITS) & (MAX_NODES as u64 - 1)) as u16;
        GlobalAddr::new(node, (self.0 & ((1 << BLOCK_UNIT_BITS) - 1)) << 6)
    }
    /// Sort key in a MainSegment.
    pub fn fps(self) -> u16 {
        (self.fp() as u16) << 8 | self.fp2() as u16
    }
    /// The same entry with sign `s` (MainSegment entries carry 0).
    pub fn with_sign(self, s: bool) -> Entry {
        Entry(self.0 & !SIGN | (s as u64) << 63)
    }
    /// The same entry with depth bits `dep` (a new split round).
    pub fn with_dep(self, dep: u8) -> Entry {
        Entry(self.0 & !(0xF << 59) | (dep as u64 & 0xF) << 59)
    }
}

/// What a key's hash says: its fingerprints, its directory suffix bits and its depth bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash {
    pub h: u64,
}

impl KeyHash {
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash { h: dmindex_prim::hash::hash_bytes(key) }
    }
    /// The fingerprint MainSegments are sorted by (hash bits 48..56).
    pub fn fp(self) -> u8 {
        (self.h >> 48) as u8
    }
    /// The second fingerprint (hash bits 56..64).
    pub fn fp2(self) -> u8 {
        (self.h >> 56) as u8
    }
    /// The depth bits of split round `depth / 4`: hash bits `4r .. 4r + 4`.
    pub fn dep(self, depth: u32) -> u8 {
        ((self.h >> (4 * (depth / 4))) & 0xF) as u8
    }
    /// The filter position among `positions` (a power of two).
    pub fn filter(self, positions: usize) -> usize {
        ((self.fp() as usize) << 8 | self.fp2() as usize) & (positions - 1)
    }
    /// Whether `e` may be this key's (both fingerprints match).
    pub fn matches(self, e: Entry) -> bool {
        e.fp() == self.fp() && e.fp2() == self.fp2()
    }
}

/// Bytes of a filter line (the fabric's snapshot unit).
pub const LINE: u64 = 64;
/// Bytes before a filter line's positions: the generation's tag.
pub const TAG: u64 = 8;
/// Filter positions per line.
pub const PER_LINE: usize = (LINE - TAG) as usize;

/// Where a CurSegment's parts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CurLayout {
    /// Slots.
    pub n: usize,
    /// Filter positions (a power of two, or 0: no filter).
    pub positions: usize,
}

impl CurLayout {
    /// Offset of slot `i` from the segment's start.
    pub fn slot(&self, i: usize) -> u64 {
        CUR_HEADER + 8 * i as u64
    }
    /// Offset of the first filter line (line-aligned: segments are 64-B aligned).
    pub fn filter_lines(&self) -> u64 {
        (CUR_HEADER + 8 * self.n as u64).next_multiple_of(LINE)
    }
    /// Filter lines.
    pub fn lines(&self) -> usize {
        self.positions.div_ceil(PER_LINE)
    }
    /// Offset of the line holding filter position `p` (its tag).
    pub fn line(&self, p: usize) -> u64 {
        self.filter_lines() + LINE * (p / PER_LINE) as u64
    }
    /// Offset of filter position `p`.
    pub fn filter(&self, p: usize) -> u64 {
        self.line(p) + TAG + (p % PER_LINE) as u64
    }
    /// Bytes of the whole segment, filter included.
    pub fn bytes(&self) -> u64 {
        if self.positions == 0 {
            return CUR_HEADER + 8 * self.n as u64;
        }
        self.filter_lines() + LINE * self.lines() as u64
    }
    /// The filter of a generation that opened with `tag`: every line tagged, every position
    /// clear.
    pub fn encode_filter(&self, tag: Meta, out: &mut Vec<u8>) {
        out.clear();
        for _ in 0..self.lines() {
            out.extend_from_slice(&tag.0.to_le_bytes());
            out.resize(out.len() + PER_LINE, 0);
        }
    }
}

/// A record point of the FPTable: from `fp` on, starts are predicted with `delta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub fp: u8,
    /// In entries; fits 24 bits signed (a MainSegment holds fewer than 2^23 entries).
    pub delta: i32,
}

/// A MainSegment's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainHeader {
    pub entries: u32,
    pub points: u16,
}

impl MainHeader {
    pub fn decode(b: &[u8]) -> MainHeader {
        MainHeader {
            entries: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            points: u16::from_le_bytes(b[4..6].try_into().expect("2 bytes")),
        }
    }
    /// Offset of the first entry from the segment's start.
    pub fn entries_at(&self) -> u64 {
        (MAIN_HEADER + POINT_BYTES * self.points as u64).next_multiple_of(8)
    }
    /// Bytes of the whole segment.
    pub fn bytes(&self) -> u64 {
        self.entries_at() + 8 * self.entries as u64
    }
}

/// The bytes of a MainSegment holding `entries` with record points `points`.
pub fn encode_main(entries: &[Entry], points: &[Point], out: &mut Vec<u8>) {
    let h = MainHeader { entries: entries.len() as u32, points: points.len() as u16 };
    out.clear();
    out.extend_from_slice(&h.entries.to_le_bytes());
    out.extend_from_slice(&h.points.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    for p in points {
        let d = p.delta.to_le_bytes();
        out.extend_from_slice(&[p.fp, d[0], d[1], d[2]]);
    }
    out.resize(h.entries_at() as usize, 0);
    for e in entries {
        out.extend_from_slice(&e.0.to_le_bytes());
    }
}

/// The record points in the bytes after a MainSegment's fixed header.
pub fn decode_points(b: &[u8], n: usize) -> impl Iterator<Item = Point> + '_ {
    b.chunks_exact(POINT_BYTES as usize).take(n).map(|p| Point {
        fp: p[0],
        // Sign-extend the 24-bit delta.
        delta: i32::from_le_bytes([0, p[1], p[2], p[3]]) >> 8,
    })
}

/// The entry words in `b`.
pub fn decode_entries(b: &[u8]) -> impl DoubleEndedIterator<Item = Entry> + '_ {
    b.chunks_exact(8).map(|w| Entry(u64::from_le_bytes(w.try_into().expect("8 bytes"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_bits_are_pinned() {
        let m = Meta::new(true, false, 5, 0xA_BCDE, 64 * 0x1234_5678);
        assert_eq!(m.0, 0x85AB_CDE0_1234_5678);
        assert_eq!((m.sign(), m.closed(), m.depth(), m.main()), (true, false, 5, 64 * 0x1234_5678));
        assert_eq!((m.edition(), m.main_id()), (0xA_BCDE, 0xAB_CDE0_1234_5678));
        assert_eq!(Meta(m.main_id()).main(), m.main());
        assert_eq!(m.close().0, 0xC5AB_CDE0_1234_5678);
        assert_eq!(Meta::new(false, true, 63, 0, MAX_NODE_BYTES - 64).0, 0x7F00_000F_FFFF_FFFF);
        let last = Meta::new(false, false, 1, (1 << 20) - 1, 64);
        assert_eq!((last.edition(), last.next_edition()), ((1 << 20) - 1, 0));
        assert_eq!(Meta::new(false, false, 1, 1 << 20, 64).edition(), 0, "mod 2^20");
        assert!(m.owns(0b10110, 0xFFFF_0000_0000_0036) && !m.owns(0b10110, 0x26));
        assert_eq!(
            (last.prev_edition(), Meta::new(true, true, 1, 0, 64).prev_edition()),
            (0xF_FFFE, 0xF_FFFF)
        );
        assert_eq!(m.close().open(), m);
    }

    #[test]
    fn merge_record_bits_are_pinned() {
        // A closer's record: its held word (lock bit, member word, acquisition = the edition).
        let member = 1 << 30 | 5 << 19 | 9;
        let r = dmindex_prim::lock::held_word(member, 0xA_BCDE);
        assert_eq!(r, 0xC028_0009_000A_BCDE);
        assert_eq!(r.to_le_bytes(), [0xDE, 0xBC, 0x0A, 0, 0x09, 0, 0x28, 0xC0]);
        assert_eq!((record_tag(r), dmindex_prim::lock::holder(r)), (0xA_BCDE, Some(member)));
        // Before the first close: the previous edition's tag, no member.
        assert_eq!((fresh_record(0), fresh_record(7)), (0xF_FFFF, 6));
        assert_eq!(dmindex_prim::lock::holder(fresh_record(0)), None);
        assert_eq!((RECORD, CUR_HEADER), (8, 16));
    }

    #[test]
    fn entry_bits_are_pinned() {
        let block = GlobalAddr::new(3, 0x40 * 0xABCDE);
        let e = Entry::new(true, 0xA, 0x5C, 0x3E, true, block);
        assert_eq!(
            e.0,
            0x8000_0000_0000_0000
                | 0xA << 59
                | 0x5C << 51
                | 0x3E << 43
                | 1 << 42
                | 3 << 36
                | 0xABCDE
        );
        assert_eq!(e.0.to_le_bytes(), [0xDE, 0xBC, 0x0A, 0, 0x30, 0xF4, 0xE1, 0xD2]);
        assert_eq!(
            (e.sign(), e.dep(), e.fp(), e.fp2(), e.tombstone()),
            (true, 0xA, 0x5C, 0x3E, true)
        );
        assert_eq!(e.block(), block);
        assert_eq!(e.with_sign(false).0, e.0 & !(1 << 63));
        assert_eq!(e.with_dep(3).dep(), 3);
        let far = GlobalAddr::new(63, MAX_NODE_BYTES - 64);
        assert_eq!(Entry::new(false, 0, 0, 0, false, far).block(), far);
        assert_eq!(e.fps(), 0x5C3E);
    }

    #[test]
    fn key_hash_bits() {
        let k = KeyHash { h: 0xABCD_0000_0000_9876 };
        assert_eq!((k.fp(), k.fp2()), (0xCD, 0xAB));
        assert_eq!((k.dep(0), k.dep(3), k.dep(4), k.dep(9), k.dep(12)), (6, 6, 7, 8, 9));
        assert_eq!(k.filter(1024), 0x1AB);
        assert_eq!(k.filter(256), 0xAB);
    }

    #[test]
    fn cur_segment_offsets_are_pinned() {
        let l = CurLayout { n: 126, positions: 1024 };
        assert_eq!((l.slot(0), l.slot(125), l.filter_lines(), l.lines()), (16, 1016, 1024, 19));
        // Position p: line p / 56, byte 8 + p % 56 of it.
        assert_eq!((l.line(0), l.filter(0), l.filter(55)), (1024, 1032, 1087));
        assert_eq!((l.line(56), l.filter(56)), (1088, 1096));
        assert_eq!((l.line(1023), l.filter(1023)), (1024 + 18 * 64, 1024 + 18 * 64 + 8 + 15));
        assert_eq!(l.bytes(), 1024 + 19 * 64);
        // Every position shares its 64-B line with its tag, and lines are line-aligned even
        // when the slots end mid-line.
        let odd = CurLayout { n: 23, positions: 64 };
        assert_eq!((odd.filter_lines(), odd.lines(), odd.bytes()), (256, 2, 384));
        for l in [l, odd] {
            for p in 0..l.positions {
                assert_eq!(l.line(p) % 64, 0);
                assert_eq!(l.filter(p) / 64, l.line(p) / 64, "position {p}");
            }
        }
        assert_eq!(CurLayout { n: 8, positions: 0 }.bytes(), 80);
    }

    #[test]
    fn filter_lines_are_pinned() {
        let l = CurLayout { n: 8, positions: 64 };
        let tag = Meta::new(true, false, 5, 3, 64 * 7);
        let mut b = vec![9; 3];
        l.encode_filter(tag, &mut b);
        assert_eq!(b.len(), 128);
        for line in b.chunks_exact(64) {
            assert_eq!(line[..8], tag.0.to_le_bytes());
            assert!(line[8..].iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn main_segment_bytes_are_pinned() {
        let e = [Entry(0x0102_0304_0506_0708), Entry(0x1112_1314_1516_1718)];
        let p = [Point { fp: 7, delta: -2 }];
        let mut b = Vec::new();
        encode_main(&e, &p, &mut b);
        assert_eq!(
            b,
            [
                2, 0, 0, 0, 1, 0, 0, 0, // entries, points, 0
                7, 0xFE, 0xFF, 0xFF, 0, 0, 0, 0, // point (fp 7, delta -2), padding to 8
                8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
            ]
        );
        let h = MainHeader::decode(&b);
        assert_eq!((h.entries, h.points, h.entries_at(), h.bytes()), (2, 1, 16, 32));
        assert_eq!(decode_points(&b[8..], 1).collect::<Vec<_>>(), p);
        assert_eq!(decode_entries(&b[16..]).collect::<Vec<_>>(), e);
    }
}
