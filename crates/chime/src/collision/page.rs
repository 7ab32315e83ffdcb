//! A directory's pages: a large collision group's keys, a key range a page, each record written
//! once in place and whole cache lines at a time, so an insert writes one record and no copy.
//!
//! # Layout
//!
//! ```text
//! page (64-B aligned; LINE + records × lines × LINE bytes)
//! line 0: | magic "CGPG" u32 | lines a record u32 | records u32 | zero ... |
//! then `records` records of `lines` lines each, in the order they were appended:
//!
//! record, one line (keys up to 48 bytes)
//! +0               +4              +8                        +56
//! | key length u32 | lines u32 (1) | key, zero-padded (48 B)  | value slot u64 LE |
//!
//! record, L lines (keys up to 56 L − 8 bytes)
//! line 0:      | key length u32 | lines u32 (L) | key bytes 0..56 |
//! line l < L-1:| marker u64 (l)                 | next 56 key bytes |
//! line L-1:    | marker u64 (L-1)               | next 48 key bytes | value slot u64 LE |
//! ```
//!
//! An empty record is zero. A written record has no zero line: line 0 holds its line count,
//! every other line its marker, and the value slot (a key-value block's address) is never zero.
//!
//! # Why a record can be read while it is written
//!
//! A record is appended by one WRITE of its lines (at most 5 lines, 320 bytes), under the
//! leaf's lock, and its insert returns only after the unlock that follows it. A READ that
//! overlaps the WRITE sees each 64-byte line old (zero) or new: all zero is a record not yet
//! there, all written is the record, and a mix is the append in flight, which
//! [`Page::gather`] skips as not there yet. That is a state the page had within the reader's
//! operation: the insert has not returned, so the reader may be ordered before it, and no
//! operation that ended before the reader began saw the record (once a line is new it stays
//! new, so a record seen whole is never seen torn after). A writer that dies cuts the WRITE
//! short only below a one-packet MTU (under 320 bytes): its insert never returned, and the
//! record stays skipped. A line that is neither zero nor what a writer writes is corrupt.
//! After an append, only the value slot changes, an aligned 8-byte word written whole.
//!
//! Records are not kept in key order (a page sorts what it read, at most 32 records); a page
//! is never changed but by an append or a value slot, so a key leaving it, or a page full,
//! makes a new page ([`crate::collision`]).

use std::ops::Range;

use dmindex_fabric::GlobalAddr;
use dmindex_index::{IndexError, IndexResult};
use smallvec::SmallVec;

/// A remote cache line: the unit a READ sees whole, old or new.
pub const LINE: usize = 64;
/// Bytes of a page's records (its header line besides): 32 one-line records.
pub const RECORD_BYTES: usize = 2048;
/// Most records a page holds (one-line records).
pub const MOST_RECORDS: usize = RECORD_BYTES / LINE;
const MAGIC: u32 = u32::from_le_bytes(*b"CGPG");
/// Bytes of a record line besides its key bytes: the first line's length and line count, or
/// a later line's marker.
const LINE_WORD: usize = 8;

/// The shape of a tree's pages: lines a record and records a page, from its longest key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageShape {
    pub lines: usize,
    pub records: usize,
    /// The tree's longest key: a record's key past it is corrupt (the directory's copies
    /// could not hold it).
    pub max_key: usize,
}

impl PageShape {
    /// Pages for keys of up to `max_key` bytes (at most 255: 5 lines, 6 records a page).
    pub const fn for_keys(max_key: usize) -> PageShape {
        let lines = (max_key + 8).div_ceil(LINE - LINE_WORD);
        let lines = if lines == 0 { 1 } else { lines };
        PageShape { lines, records: RECORD_BYTES / (lines * LINE), max_key }
    }

    /// Bytes of a page.
    pub const fn bytes(self) -> usize {
        LINE + self.records * self.record_len()
    }

    /// Bytes of a record.
    pub const fn record_len(self) -> usize {
        self.lines * LINE
    }

    /// The longest key a record holds.
    pub const fn key_room(self) -> usize {
        self.lines * (LINE - LINE_WORD) - 8
    }

    /// Where record `r` starts in its page.
    pub const fn record_at(self, r: usize) -> usize {
        LINE + r * self.record_len()
    }

    /// Where record `r`'s value slot is in its page.
    pub const fn slot_at(self, r: usize) -> usize {
        self.record_at(r) + self.record_len() - 8
    }

    /// The key bytes' places in a record, in key order.
    fn chunks(self) -> impl Iterator<Item = Range<usize>> {
        let last = self.lines - 1;
        (0..self.lines).map(move |l| {
            let end = LINE * (l + 1) - if l == last { 8 } else { 0 };
            LINE * l + LINE_WORD..end
        })
    }
}

/// Encodes record `key` (at most [`PageShape::key_room`] bytes) with value slot `slot` into
/// `out` ([`PageShape::record_len`] bytes, zero).
pub fn encode_record(shape: PageShape, key: &[u8], slot: [u8; 8], out: &mut [u8]) {
    debug_assert!(key.len() <= shape.key_room() && out.len() == shape.record_len());
    debug_assert!(slot != [0; 8], "a record's slot names a block");
    out[0..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
    out[4..8].copy_from_slice(&(shape.lines as u32).to_le_bytes());
    for l in 1..shape.lines {
        out[LINE * l..LINE * l + 8].copy_from_slice(&(l as u64).to_le_bytes());
    }
    let mut rest = key;
    for chunk in shape.chunks() {
        let n = rest.len().min(chunk.len());
        out[chunk.start..chunk.start + n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    let len = out.len();
    out[len - 8..].copy_from_slice(&slot);
}

/// Encodes a page holding `records` (at most [`PageShape::records`]) into `out` (cleared
/// first), the rest of its records empty.
pub fn encode<'k>(
    shape: PageShape,
    records: impl IntoIterator<Item = (&'k [u8], [u8; 8])>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.resize(shape.bytes(), 0);
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..8].copy_from_slice(&(shape.lines as u32).to_le_bytes());
    out[8..12].copy_from_slice(&(shape.records as u32).to_le_bytes());
    for (r, (key, slot)) in records.into_iter().enumerate() {
        assert!(r < shape.records, "a page holds {} records", shape.records);
        let at = shape.record_at(r);
        encode_record(shape, key, slot, &mut out[at..at + shape.record_len()]);
    }
}

/// One record a page holds: its key (a range of the gathered keys), value slot, and the slot's
/// offset in the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub key: Range<usize>,
    pub slot: [u8; 8],
    pub slot_at: usize,
}

/// A directory's page as its lowest key and address.
pub type Named<'k> = (&'k [u8], GlobalAddr);

/// The records of a page read whole, where its first empty record is, and how many records
/// were seen torn (appends in flight: skipped).
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    pub held: SmallVec<[Held; MOST_RECORDS]>,
    pub first_empty: Option<usize>,
    pub torn: usize,
}

/// A page READ whole, its header checked.
#[derive(Clone, Copy, Debug)]
pub struct Page<'b> {
    bytes: &'b [u8],
    shape: PageShape,
}

impl<'b> Page<'b> {
    /// The page at `a` in `b` (at least [`PageShape::bytes`] bytes), of this tree's `shape`.
    pub fn parse(a: GlobalAddr, b: &'b [u8], shape: PageShape) -> IndexResult<Page<'b>> {
        let Some(bytes) = b.get(..shape.bytes()) else {
            return Err(IndexError::Corrupt(format!("page at {a} runs past what was read")));
        };
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let (magic, lines, records) = (word(0), word(4) as usize, word(8) as usize);
        if magic != MAGIC || lines != shape.lines || records != shape.records {
            return Err(IndexError::Corrupt(format!(
                "page at {a}: not a page of {} records of {} lines",
                shape.records, shape.lines
            )));
        }
        Ok(Page { bytes, shape })
    }

    /// Every record's key gathered into `keys` (cleared first) and its slot, records seen torn
    /// across an append skipped (module docs); a line no writer writes is corrupt.
    pub fn gather(&self, a: GlobalAddr, keys: &mut Vec<u8>) -> IndexResult<Gathered> {
        keys.clear();
        let mut out = Gathered::default();
        let shape = self.shape;
        for r in 0..shape.records {
            let at = shape.record_at(r);
            let rec = &self.bytes[at..at + shape.record_len()];
            let line_is_zero = |l: usize| rec[LINE * l..LINE * (l + 1)].iter().all(|&x| x == 0);
            let zero = (0..shape.lines).filter(|&l| line_is_zero(l)).count();
            if zero == shape.lines {
                out.first_empty.get_or_insert(r);
                continue;
            }
            if zero > 0 {
                out.torn += 1;
                continue;
            }
            let len = u32::from_le_bytes(rec[0..4].try_into().unwrap()) as usize;
            let lines = u32::from_le_bytes(rec[4..8].try_into().unwrap()) as usize;
            let marked =
                (1..shape.lines).all(|l| rec[LINE * l..LINE * l + 8] == (l as u64).to_le_bytes());
            let slot: [u8; 8] = rec[rec.len() - 8..].try_into().unwrap();
            if lines != shape.lines || len > shape.max_key || !marked || slot == [0; 8] {
                return Err(IndexError::Corrupt(format!("page at {a}: record {r} is garbage")));
            }
            let start = keys.len();
            let mut left = len;
            for chunk in shape.chunks() {
                let n = left.min(chunk.len());
                keys.extend_from_slice(&rec[chunk.start..chunk.start + n]);
                left -= n;
            }
            out.held.push(Held { key: start..keys.len(), slot, slot_at: shape.slot_at(r) });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_pinned() {
        let shape = |max_key| {
            let s = PageShape::for_keys(max_key);
            (s.lines, s.records, s.max_key)
        };
        assert_eq!(shape(24), (1, 32, 24));
        assert_eq!(shape(48), (1, 32, 48));
        assert_eq!(shape(49), (2, 16, 49));
        assert_eq!(shape(255), (5, 6, 255));
        for max_key in 8..=255 {
            let s = PageShape::for_keys(max_key);
            assert!(s.key_room() >= max_key, "{max_key}");
            assert!(s.record_len() <= 1024, "one packet of a 1024-B MTU");
            assert!(s.records >= 6 && s.bytes() <= LINE + RECORD_BYTES);
        }
        assert_eq!(PageShape::for_keys(24).bytes(), 64 + 2048);
        assert_eq!(PageShape::for_keys(24).slot_at(1), 64 + 64 + 56);
    }

    #[test]
    fn layout_is_pinned() {
        let shape = PageShape { lines: 2, records: 2, max_key: 104 };
        let mut b = Vec::new();
        let key: Vec<u8> = (1..=60).collect();
        encode(shape, [(&key[..], [9; 8])], &mut b);
        assert_eq!(b.len(), 64 + 2 * 128);
        assert_eq!(&b[0..12], b"CGPG\x02\0\0\0\x02\0\0\0");
        assert!(b[12..64].iter().all(|&x| x == 0));
        let rec = &b[64..192];
        assert_eq!(&rec[0..8], &[60, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&rec[8..64], &key[..56]);
        assert_eq!(&rec[64..72], &1u64.to_le_bytes());
        assert_eq!(&rec[72..76], &key[56..]);
        assert!(rec[76..120].iter().all(|&x| x == 0));
        assert_eq!(&rec[120..128], &[9; 8]);
        assert!(b[192..].iter().all(|&x| x == 0), "record 1 empty");
        let a = GlobalAddr::new(1, 4096);
        let mut keys = Vec::new();
        let g = Page::parse(a, &b, shape).unwrap().gather(a, &mut keys).unwrap();
        assert_eq!((g.first_empty, g.torn), (Some(1), 0));
        assert_eq!(g.held.len(), 1);
        assert_eq!(&keys[g.held[0].key.clone()], &key[..]);
        assert_eq!((g.held[0].slot, g.held[0].slot_at), ([9; 8], 64 + 120));
    }

    #[test]
    fn a_read_torn_across_an_append_is_told_from_garbage() {
        let shape = PageShape { lines: 2, records: 2, max_key: 104 };
        let a = GlobalAddr::new(0, 0);
        let mut keys = Vec::new();
        let mut b = Vec::new();
        encode(shape, [(&b"k"[..], [1; 8]), (&b"longer"[..], [2; 8])], &mut b);
        // Record 1 seen with its line 0 new and line 1 old, then the other way round: an
        // append in flight, not there yet, and no empty record.
        for old in [256..320, 192..256] {
            let mut torn = b.clone();
            torn[old].fill(0);
            let g = Page::parse(a, &torn, shape).unwrap().gather(a, &mut keys).unwrap();
            assert_eq!((g.held.len(), g.torn, g.first_empty), (1, 1, None));
            assert_eq!(&keys[g.held[0].key.clone()], b"k");
        }
        let mut bad = b.clone();
        bad[256] = 7; // record 1's marker
        assert!(Page::parse(a, &bad, shape).unwrap().gather(a, &mut keys).is_err());
        let mut bad = b.clone();
        bad[196] = 3; // record 1's line count
        assert!(Page::parse(a, &bad, shape).unwrap().gather(a, &mut keys).is_err());
        let short = PageShape { max_key: 5, ..shape };
        assert!(Page::parse(a, &b, short).unwrap().gather(a, &mut keys).is_err(), "past max_key");
        let mut bad = b.clone();
        bad[0] = b'X';
        assert!(Page::parse(a, &bad, shape).is_err(), "magic");
        assert!(Page::parse(a, &b[..100], shape).is_err(), "short");
        let g = Page::parse(a, &b, shape).unwrap().gather(a, &mut keys).unwrap();
        assert_eq!((g.held.len(), g.first_empty, g.torn), (2, None, 0));
        assert_eq!(&keys[g.held[1].key.clone()], b"longer");
    }
}
