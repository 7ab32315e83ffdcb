//! Every remote byte layout of ROLEX: the leaf, its lock word, the leaf table, the directory and
//! the root word. Integers are little-endian unless drawn otherwise.
//!
//! # Leaf (`span` slots; 16 by default)
//!
//! The leaf's *decoded* bytes, one object with one version byte (the whole leaf is written at
//! once, so there is no entry-level version):
//!
//! ```text
//! decoded
//!  0        version u8        bumped by every write of the leaf
//!  1        kind u8           0xB1 base leaf, 0xB2 synonym leaf (anything else: not a leaf)
//!  2        count u8          entries in use, sorted by key in slots 0..count
//!  3..8     zero
//!  8..16    fence u64         the smallest key this leaf's chain may hold (a synonym leaf
//!                             copies its base's); fixed for the leaf's life
//!  16..24   next u64          the next synonym leaf of the chain (a GlobalAddr), 0 = none; set
//!                             once, never cleared
//!  24+16i   key u64           slot i (i < span): the key as an integer
//!  32+16i   value [u8; 8]     the value (inline, zero-padded), or a value block's GlobalAddr
//! ```
//!
//! In remote memory the decoded bytes are laid out with cache-line versions
//! ([`dmindex_prim::cacheline`]): every 64-byte line after the first starts with a copy of the
//! version byte, so a READ that sees lines of two different writes is refused as torn. The lock
//! word follows, 8-byte aligned, outside the versioned bytes:
//!
//! ```text
//! physical
//!  0 .. phys_len(24 + 16·span)     the versioned data   (span 16: 280 decoded → 284 bytes)
//!  lock_off = align8(phys_len)     lock word u64        (span 16: 288)
//!  read_len = lock_off + 8         what a READ of the leaf takes (span 16: 296)
//!  stride   = align64(read_len)    leaf-to-leaf distance in a model's leaf array (span 16: 320)
//! ```
//!
//! # Lock word (one per leaf; CAS'd)
//!
//! ```text
//!  63     62         61        60 .. 30                 29 .. 0
//! +------+----------+---------+------------------------+------------------------+
//! | LOCK | RETIRING | RETIRED | holder's member word   | acquisition, low bits  |
//! +------+----------+---------+------------------------+------------------------+
//! free: LOCK clear, bits 60-0 zero        held: bits 60-0 name the holder
//! ```
//!
//! A base leaf's word locks its whole chain (the base and its synonym leaves): writers set LOCK
//! and name themselves by masked CAS that leaves RETIRING and RETIRED in place, and put the free
//! word back with the WRITE after the leaf ([`dmindex_prim::lock::kept_held_word`]). A
//! retrainer sets LOCK | RETIRING and its name on every base leaf of its model. After it
//! published the new models it writes RETIRING | RETIRED (unlocked) to every base leaf and
//! RETIRED to every synonym leaf of the old model, for good. A synonym leaf's word is never
//! locked. A holder that dies is judged by its lease and its lock repaired
//! ([`crate::recover`]).
//!
//! # Leaf table (one per model, on the model's memory node, 8-byte aligned)
//!
//! ```text
//!  0        claim u64        0; a retrainer CASes it 0 → its member word (prim::lease), once:
//!                            a fenced claimer's is taken over by CAS from that word
//!                            (crate::recover) while the model was never published
//!  8        synonyms u64     synonym leaves the model's chains have grown (FAA'd by inserts)
//!  16+8i    leaf u64         base leaf i's GlobalAddr, i < leaves; never changes
//! ```
//!
//! # Directory (on memory node 0, immutable once published)
//!
//! Two levels, so that a retrain rewrites one page of models, not all of them. The **top
//! array** (64-byte aligned) has a 16-byte entry per page, sorted by `low`:
//!
//! ```text
//!  0        low u64          the page's first model's low (the first page's is 0)
//!  8        page u64         the page: an array word (below) naming its models
//! ```
//!
//! A **page** (64-byte aligned) holds up to [`PAGE_MODELS`] 48-byte model entries, sorted by
//! `low`; the first entry of the first page has `low` 0:
//!
//! ```text
//!  0        low u64          the smallest key the model covers (up to the next entry's low)
//!  8        anchor u64       the origin of the prediction (the model's first trained key)
//!  16       slope f64        position = intercept + slope · (key − anchor), key < anchor as
//!  24       intercept f64    anchor
//!  32       table u64        the model's leaf table (GlobalAddr)
//!  40       leaves u32       base leaves of the model
//!  44       per_leaf u16     trained keys per leaf (the model's positions / leaf)
//!  46       zero u16
//! ```
//!
//! # Array words: the root word (root-table slot N; CAS'd by a retrainer to publish a new
//! directory) names the top array; a top entry's page word names a page
//!
//! ```text
//!  63 .. 40        39 .. 0
//! +---------------+------------------------------------+
//! | entries (24)  | array offset on node 0 / 64        |
//! +---------------+------------------------------------+
//! ```
//!
//! Slot N + 1 holds the descriptor: [`MAGIC`] and the shape (span, epsilon, value length).

use dmindex_fabric::addr::align_up;
use dmindex_fabric::GlobalAddr;
use dmindex_prim::cacheline::{self, Objects};
use dmindex_prim::root::Magic;

/// The descriptor's magic ("RL").
pub const MAGIC: Magic = Magic { name: "rolex", value: 0x524C, bits: 16 };

/// The lock bit (shared with [`dmindex_prim::lock`]).
pub const LOCK: u64 = dmindex_prim::lock::LOCK_BIT;
/// Set with LOCK by a retrainer on each base leaf of the model it retrains.
pub const RETIRING: u64 = 1 << 62;
/// Set for good once the leaf's model was replaced.
pub const RETIRED: u64 = 1 << 61;

/// Kind byte of a base leaf.
pub const BASE: u8 = 0xB1;
/// Kind byte of a synonym leaf.
pub const SYNONYM: u8 = 0xB2;

/// Decoded header bytes before slot 0.
pub const HEADER: usize = 24;
/// Bytes of a slot: key and value word.
pub const SLOT: usize = 16;
/// Most slots a leaf may have (the count is a byte).
pub const MAX_SPAN: usize = 128;

/// Bytes of a directory entry.
pub const DIR_ENTRY: usize = 48;
/// Bytes of a top-array entry.
pub const TOP_ENTRY: usize = 16;
/// Most models in a directory page (3 KB).
pub const PAGE_MODELS: usize = 64;
/// Bytes of the leaf table's header (claim word, synonym count).
pub const TABLE_HEADER: u64 = 16;
/// Offset of the leaf table's synonym counter.
pub const TABLE_SYNONYMS: u64 = 8;

/// A leaf is one object: every line's version copies the leaf's version byte.
pub struct OneObject;

impl Objects for OneObject {
    fn object_start(&self, _d: usize) -> usize {
        0
    }
}

/// The sizes of a leaf of `span` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafLayout {
    pub span: usize,
    /// Decoded bytes.
    pub decoded: usize,
    /// Physical bytes of the versioned data.
    pub data: usize,
    /// Offset of the lock word.
    pub lock_off: usize,
    /// Bytes a READ of the leaf takes (data and lock word).
    pub read_len: usize,
    /// Distance between leaves allocated together.
    pub stride: usize,
}

impl LeafLayout {
    pub const fn new(span: usize) -> LeafLayout {
        let decoded = HEADER + SLOT * span;
        let data = cacheline::phys_len(decoded);
        let lock_off = align_up(data as u64, 8) as usize;
        let read_len = lock_off + 8;
        let stride = align_up(read_len as u64, 64) as usize;
        LeafLayout { span, decoded, data, lock_off, read_len, stride }
    }

    /// The lock word of the leaf at `leaf`.
    pub fn lock_addr(&self, leaf: GlobalAddr) -> GlobalAddr {
        leaf.add(self.lock_off as u64)
    }
}

/// Why a leaf READ is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Lines of two writes: read again.
    Torn,
    /// Not a leaf of this shape (garbage, or a wrong pointer).
    NotALeaf,
}

/// Decodes a leaf READ (`phys`, [`LeafLayout::read_len`] bytes) into `out` (`decoded` bytes);
/// returns the lock word.
pub fn decode(l: &LeafLayout, phys: &[u8], out: &mut [u8]) -> Result<u64, Refused> {
    if cacheline::decode(&OneObject, &phys[..l.data], 0, l.decoded, out).is_err() {
        return Err(Refused::Torn);
    }
    let ok_kind = matches!(out[1], BASE | SYNONYM);
    if !ok_kind || out[2] as usize > l.span || out[3..8] != [0; 5] {
        return Err(Refused::NotALeaf);
    }
    Ok(u64::from_le_bytes(phys[l.lock_off..l.read_len].try_into().expect("8 bytes")))
}

/// Encodes decoded leaf `leaf` into `out` ([`LeafLayout::data`] bytes, cleared first).
pub fn encode(l: &LeafLayout, leaf: &[u8], out: &mut Vec<u8>) {
    out.clear();
    cacheline::encode(&OneObject, leaf, 0, l.decoded, out);
}

/// A fresh decoded leaf: version 1, `kind`, no entries, `fence`, no next.
pub fn init(l: &LeafLayout, kind: u8, fence: u64, out: &mut [u8]) {
    out[..l.decoded].fill(0);
    out[0] = 1;
    out[1] = kind;
    set_fence(out, fence);
}

fn word(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"))
}

fn set_word(d: &mut [u8], at: usize, w: u64) {
    d[at..at + 8].copy_from_slice(&w.to_le_bytes());
}

pub fn kind(d: &[u8]) -> u8 {
    d[1]
}

pub fn count(d: &[u8]) -> usize {
    d[2] as usize
}

pub fn fence(d: &[u8]) -> u64 {
    word(d, 8)
}

pub fn set_fence(d: &mut [u8], fence: u64) {
    set_word(d, 8, fence)
}

/// The next synonym leaf, if any.
pub fn next(d: &[u8]) -> Option<GlobalAddr> {
    match word(d, 16) {
        0 => None,
        w => Some(GlobalAddr::from_raw(w)),
    }
}

pub fn set_next(d: &mut [u8], next: GlobalAddr) {
    set_word(d, 16, next.raw())
}

pub fn key(d: &[u8], i: usize) -> u64 {
    word(d, HEADER + SLOT * i)
}

pub fn value(d: &[u8], i: usize) -> [u8; 8] {
    let at = HEADER + SLOT * i + 8;
    d[at..at + 8].try_into().expect("8 bytes")
}

/// The slot holding `k`, or where it would go.
pub fn find(d: &[u8], k: u64) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0, count(d));
    while lo < hi {
        let mid = (lo + hi) / 2;
        match key(d, mid).cmp(&k) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// Sets slot `i`'s value.
pub fn set_value(d: &mut [u8], i: usize, v: [u8; 8]) {
    let at = HEADER + SLOT * i + 8;
    d[at..at + 8].copy_from_slice(&v);
}

/// Inserts `(k, v)` at slot `i`, shifting the slots after it right (the caller checked room).
pub fn insert_at(d: &mut [u8], i: usize, k: u64, v: [u8; 8]) {
    let n = count(d);
    let at = HEADER + SLOT * i;
    d.copy_within(at..HEADER + SLOT * n, at + SLOT);
    set_word(d, at, k);
    d[at + 8..at + 16].copy_from_slice(&v);
    d[2] = (n + 1) as u8;
}

/// Removes slot `i`, shifting the slots after it left and clearing the last.
pub fn remove_at(d: &mut [u8], i: usize) {
    let n = count(d);
    let at = HEADER + SLOT * i;
    d.copy_within(at + SLOT..HEADER + SLOT * n, at);
    d[HEADER + SLOT * (n - 1)..HEADER + SLOT * n].fill(0);
    d[2] = (n - 1) as u8;
}

/// Bumps the version byte (before the leaf is written).
pub fn bump(d: &mut [u8]) {
    d[0] = d[0].wrapping_add(1);
}

/// One model as the directory holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DirEntry {
    pub low: u64,
    pub anchor: u64,
    pub slope: f64,
    pub intercept: f64,
    pub table: GlobalAddr,
    pub leaves: u32,
    pub per_leaf: u16,
}

impl DirEntry {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.low.to_le_bytes());
        out.extend_from_slice(&self.anchor.to_le_bytes());
        out.extend_from_slice(&self.slope.to_bits().to_le_bytes());
        out.extend_from_slice(&self.intercept.to_bits().to_le_bytes());
        out.extend_from_slice(&self.table.raw().to_le_bytes());
        out.extend_from_slice(&self.leaves.to_le_bytes());
        out.extend_from_slice(&self.per_leaf.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
    }

    /// Parses one entry; `None` for bytes that cannot be one (garbage).
    pub fn decode(b: &[u8]) -> Option<DirEntry> {
        let w = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let e = DirEntry {
            low: w(0),
            anchor: w(8),
            slope: f64::from_bits(w(16)),
            intercept: f64::from_bits(w(24)),
            table: GlobalAddr::from_raw(w(32)),
            leaves: u32::from_le_bytes(b[40..44].try_into().expect("4 bytes")),
            per_leaf: u16::from_le_bytes([b[44], b[45]]),
        };
        let sane = e.slope.is_finite()
            && e.slope >= 0.0
            && e.intercept.is_finite()
            && e.leaves > 0
            && e.per_leaf > 0
            && b[46..48] == [0, 0]
            && e.table.is_aligned(8);
        sane.then_some(e)
    }
}

/// Bits of an array word holding the array's offset / 64.
const OFFSET_BITS: u32 = 40;

/// The word naming an array of `entries` entries at `at` (on node 0, 64-byte aligned): the
/// root word of a top array, or a page word.
pub fn root_word(at: GlobalAddr, entries: usize) -> u64 {
    debug_assert!(at.node() == 0 && at.is_aligned(64) && entries < 1 << 24);
    ((entries as u64) << OFFSET_BITS) | (at.offset() / 64)
}

/// The array an array word names, and its number of entries.
pub fn parse_root(w: u64) -> (GlobalAddr, usize) {
    (GlobalAddr::new(0, (w & ((1 << OFFSET_BITS) - 1)) * 64), (w >> OFFSET_BITS) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_sizes_are_pinned() {
        let l = LeafLayout::new(16);
        assert_eq!(
            (l.decoded, l.data, l.lock_off, l.read_len, l.stride),
            (280, 284, 288, 296, 320)
        );
        let l = LeafLayout::new(4);
        assert_eq!((l.decoded, l.data, l.lock_off, l.read_len, l.stride), (88, 89, 96, 104, 128));
        assert_eq!((LOCK, RETIRING, RETIRED), (1 << 63, 1 << 62, 1 << 61));
        // A held word names its holder in bits 60-0 and leaves the retirement bits to the
        // masked CAS: the kept bits are exactly RETIRING and RETIRED.
        use dmindex_prim::lock::{kept_held_word, kept_holder, KEPT_BITS};
        assert_eq!(KEPT_BITS, RETIRING | RETIRED);
        let m = dmindex_prim::lease::member_word(3, 4);
        let held = kept_held_word(m, 9) | RETIRING;
        assert_eq!(held, LOCK | RETIRING | m << 30 | 9);
        assert_eq!(kept_holder(held), Some(m));
        assert_eq!(held & RETIRED, 0);
    }

    /// A leaf of span 16 with known fields, byte by byte: header, slots, a CL version at every
    /// line start, the lock word after the data.
    #[test]
    fn leaf_bytes_are_pinned() {
        let l = LeafLayout::new(16);
        let mut d = vec![0u8; l.decoded];
        init(&l, BASE, 0x1122_3344_5566_7788, &mut d);
        set_next(&mut d, GlobalAddr::new(1, 0x4000));
        insert_at(&mut d, 0, 0x30, [3; 8]);
        insert_at(&mut d, 0, 0x10, [1; 8]);
        insert_at(&mut d, 1, 0x20, [2; 8]);
        bump(&mut d);
        assert_eq!(d[..3], [2, 0xB1, 3]);
        assert_eq!(d[8..16], 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(d[16..24], GlobalAddr::new(1, 0x4000).raw().to_le_bytes());
        assert_eq!(d[24..32], 0x10u64.to_le_bytes());
        assert_eq!(d[32..40], [1; 8]);
        assert_eq!(d[40..48], 0x20u64.to_le_bytes());
        assert_eq!(d[56..64], 0x30u64.to_le_bytes());
        assert_eq!((find(&d, 0x20), find(&d, 0x25), find(&d, 0x40)), (Ok(1), Err(2), Err(3)));
        let mut phys = Vec::new();
        encode(&l, &d, &mut phys);
        assert_eq!(phys.len(), 284);
        // Line 1 starts with the version, then decoded byte 64 (slot 2's value) at 65.
        assert_eq!((phys[64], phys[65..73].to_vec()), (2, vec![3; 8]));
        for line in [64, 128, 192, 256] {
            assert_eq!(phys[line], 2, "CL version at {line}");
        }
        phys.resize(l.read_len, 0);
        phys[288..296].copy_from_slice(&(LOCK | 5).to_le_bytes());
        let mut back = vec![0u8; l.decoded];
        assert_eq!(decode(&l, &phys, &mut back), Ok(LOCK | 5));
        assert_eq!(back, d);
        // A line of another write: torn. A wrong kind byte: not a leaf.
        phys[128] = 3;
        assert_eq!(decode(&l, &phys, &mut back), Err(Refused::Torn));
        phys[128] = 2;
        phys[1] = 0x77;
        assert_eq!(decode(&l, &phys, &mut back), Err(Refused::NotALeaf));
        remove_at(&mut d, 0);
        assert_eq!((count(&d), key(&d, 0), key(&d, 1), key(&d, 2)), (2, 0x20, 0x30, 0));
    }

    #[test]
    fn directory_entry_and_root_word_are_pinned() {
        let e = DirEntry {
            low: 5,
            anchor: 7,
            slope: 0.5,
            intercept: -1.25,
            table: GlobalAddr::new(2, 0x8000),
            leaves: 9,
            per_leaf: 12,
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(b.len(), DIR_ENTRY);
        assert_eq!(b[0..8], 5u64.to_le_bytes());
        assert_eq!(b[8..16], 7u64.to_le_bytes());
        assert_eq!(b[16..24], 0.5f64.to_bits().to_le_bytes());
        assert_eq!(b[24..32], (-1.25f64).to_bits().to_le_bytes());
        assert_eq!(b[32..40], GlobalAddr::new(2, 0x8000).raw().to_le_bytes());
        assert_eq!(b[40..48], [9, 0, 0, 0, 12, 0, 0, 0]);
        assert_eq!(DirEntry::decode(&b), Some(e));
        b[16..24].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
        assert_eq!(DirEntry::decode(&b), None);
        assert_eq!((TOP_ENTRY, PAGE_MODELS, PAGE_MODELS * DIR_ENTRY), (16, 64, 3072));
        let w = root_word(GlobalAddr::new(0, 0x12_3440), 3);
        assert_eq!(w, (3 << 40) | (0x12_3440 / 64));
        assert_eq!(parse_root(w), (GlobalAddr::new(0, 0x12_3440), 3));
    }
}
