//! Collision groups: long keys of one leaf that share their 8-byte prefix beyond what the leaf
//! keeps as plain entries.
//!
//! # Why
//!
//! A long key's leaf entry holds its first 8 bytes; keys sharing them share a home, and no split
//! can part them (ordering, homes and separators use the prefix). A hopscotch leaf keeps a
//! key within H slots of its home, so without more the tree held at most H keys of a prefix and
//! refused the next; a sorted leaf, at most a leaf's span. Real keys share prefixes by the
//! thousand (YCSB's `user…`, URLs, paths). So past [`plain_limit`] keys of one prefix in a leaf,
//! the leaf keeps **one** entry for the prefix, whose value slot names a group block holding
//! every key of the prefix, sorted, each with its value slot (a key-value block). Past a page's
//! records (32 keys of up to 48 bytes; [`page`]) the group becomes a **directory**: a tree of
//! nodes in the same block format, whose records name pages (or nodes a level down) by their
//! lowest keys, each page holding a key range, so a search reads a node a level and one page,
//! and an insert writes one record in place.
//!
//! # Layout
//!
//! ```text
//! group block (64-B aligned; allocated on its leaf's memory node)
//! +0             +4                +8
//! | count u32 LE | stride u32 LE   | record 0 | record 1 | ... (count records, key order)
//!
//! record (stride bytes: 16 + the tree's longest key rounded up to 8)
//! +0                +4            +8                         +stride-8
//! | key length u32  | zero u32    | key, zero-padded         | value slot u64 LE |
//!
//! directory node: a group block with bit 31 of its stride word set and its level (1 ..= 32)
//! in bits 24–30, at most [`fanout`] records (64 at keys up to 232 bytes, one READ). Record j
//! is a key and, at level 1, the address of a page; above, the value slot ([`slot_of`]) of a
//! node a level down. Records are in key order, and child j holds the keys from record j's
//! key to record j + 1's; child 0 also holds every key below record 0's (once a first child
//! leaves, its successor's key bounds nothing below it), so record 0's key never ends a
//! scan. A split keeps the order: the first new child takes the lower of its place's key and
//! its own first key. Pages: [`page`].
//! ```
//!
//! The leaf entry's value slot is the block's address with bit 0 set (a group; a key-value
//! block is 64-B aligned, so its bit 0 is clear) and bits 1–5 giving the block's length in
//! [`UNIT`]-byte units, capped at 31: a reader READs exactly the block in one READ up to
//! 3968 bytes (about a hundred 24-byte keys), and the rest in a second.
//!
//! # Protocol (all under the leaf's lock)
//!
//! * **Keys in and out of a group** (an insert of a new key of the prefix, a delete): copy on
//!   write, up to a page's records; the insert past that writes pages of half a page's records
//!   each and their directory instead, posted as a copy is. A new
//!   block with the key added or removed is posted on the leaf's memory node, then the leaf
//!   entry is rewritten to name it (an entry update: its entry version bumped, the leaf
//!   unlocked in the same WRITE); RC order on the one connection puts the block before the
//!   entry. The old block is left as it was (never freed, as replaced key-value blocks are not).
//!   A delete of the group's last key removes its entry, unless plain entries it shadows are
//!   still there (below): the entry then names an empty group and they leave in the same
//!   WRITE, for an entry removed in a WRITE cut short would let them speak again.
//! * **A value changed** (an update of a key in the group): the record's value slot, an aligned
//!   8-byte word, is written in place, then the leaf unlocked (same connection when the group
//!   lives on the leaf's node; awaited first when a split moved the leaf elsewhere).
//! * **Readers** READ the leaf, then the block the entry names. A block is never changed but
//!   in its value slots, each written whole, so any READ of it is a state it had. A block
//!   replaced by a copy stops changing when the entry stops naming it, after the reader read
//!   that entry: the reader sees the group as it was at that instant, within its operation.
//! * **Keys in and out of a directory**: an insert appends its record to its page in place
//!   (one WRITE; [`page`] says why a reader torn across it is right), unawaited when the page
//!   lives on the leaf's node (RC order puts it before the unlock), else awaited. Any other
//!   change copies: a full page is split into two new pages; a delete writes a copy of its page
//!   without the key, or drops the page it was alone in. Then every directory node on the
//!   key's path is copied with the change, bottom up (a node past [`fanout`] records splits in
//!   two, one left empty leaves its parent, a root that splits gets a root above it), all
//!   posted on the leaf's node, and the leaf entry names the new root, as a group's copy is.
//!   Directory nodes are immutable: a reader of an old path reads old pages, each of which
//!   stopped changing when the entry stopped naming a path to it, after the reader read that
//!   entry. Every page and node a directory ever names holds a key, so a directory's slot
//!   vouches, for a scan, for as many keys as its root has records.
//! * **Forming a group** (the key past [`plain_limit`]): under the lock, the plain entries'
//!   blocks give their keys and the group is written (awaited). A group wins over plain
//!   entries of its prefix in the same leaf (it holds their keys, with the slots they had), so
//!   the leaf is correct once the group's entry is in, whether or not they are still there.
//!   - *Hopscotch leaf*: the group's entry goes in as any key's does (a hop, a split), and the
//!     plain entries it shadows are cleared by a later write under the lock (the forming
//!     insert's own, right after; else the next write of the prefix in that leaf), with their
//!     hop bits. Not both in one WRITE: a READ torn across it could see the group's entry old
//!     and the others cleared, and the hop bitmap, which has a bit for the group's entry as
//!     it had for the first plain one, would not tell. Apart, a bit leaves with its entry only
//!     after the group's entry (and its bit) landed under an earlier lock, so a READ that
//!     misses both finds a bit over an empty slot and retries, as for a hop in flight.
//!   - *Sorted leaf*: the first entry names the group and the others leave in one shift,
//!     rewritten under a new node version as any shift is: a READ torn across it sees two node
//!     versions. A rewrite a dying writer cut short can leave shadowed entries; the next write
//!     of the prefix there removes them.
//! # Cost
//!
//! A search of a key in a group: the leaf, the group, the key's block (three round trips
//! where a key with fewer sharers takes two). An update: as a plain long key's (the block, the
//! lock, the leaf READ, the group READ, the slot WRITE with the unlock). Forming a group: the
//! plain blocks' keys READ, the group written, and on a hopscotch leaf the clearing write (a
//! lock, a READ, a WRITE) after the insert. An insert or a delete copies the group (at most a
//! page's records, 32 × 40 B at 24-byte keys).
//!
//! A key in a directory of L levels: L round trips more than in a group (the leaf, a node a
//! level, the page, the block: four at one level, which serves up to 64 pages, 1 000–2 000
//! keys at 24-byte keys), reading up to 64 × 40 B a node and one page (2 112 B). An insert
//! appends one record (a 64-byte WRITE at keys up to 48 bytes); one in about half a page's
//! records splits a page, writing two pages and a copy of each node on the path. A delete
//! writes a page and the path. A scan READs the pages it needs in one doorbell, and the nodes
//! on its way as it reaches them.
//!
//! Replaced blocks, pages and directory nodes are not reclaimed (no remote memory is, in
//! CHIME): an insert into a directory leaves about a page and a path's bytes behind per page
//! split, a delete the same. Measured (`dmindex bench --index chime` on `local`, `--workload
//! c`): YCSB's keys (`--ycsb-keys`: `user` and the key's hash, about 9 000 prefixes) at 10 M
//! records, about 1 100 keys a prefix: 4.00 round trips and 4.5 KB a search, 3.3 GB of remote
//! memory, where whole groups would read about 44 KB a search (computed) and ran out of a
//! 4 GB memory node during the load. One prefix shared by 1 M keys (`--key-size 24 --ordered`: every key
//! `user0000…`): 7.00 round trips and 6.5 KB a search, 386 MB; with one directory node and no
//! levels the load ran out of 4 GB there, copying a node of some 20 000 pages (810 KB, the
//! failed allocation) at each page split.

pub mod page;

use std::cmp::Ordering;

use dmindex_fabric::GlobalAddr;
use dmindex_index::{IndexError, IndexResult};

pub use page::PageShape;

/// Bytes before the first record: count u32 LE, stride u32 LE.
pub const HEADER: usize = 8;
/// Bytes of a record besides its key: key length, padding, value slot.
pub const RECORD_EXTRA: usize = 16;
/// The length unit of a group's value slot.
pub const UNIT: usize = 128;
/// Most units a value slot names (5 bits); a longer block is READ in two.
pub const MAX_UNITS: u64 = 31;
/// Bit 0 of a value slot: a group, not a key-value block.
const TAG: u64 = 1;
/// Bit 31 of a group's stride word: a directory, whose records name pages (level 1) or
/// directories a level down by their lowest keys; bits 24–30 give its level.
const DIRECTORY: u32 = 1 << 31;
const LEVEL_SHIFT: u32 = 24;
/// The most levels a directory has (2^31 keys at 2-record nodes are far fewer).
pub const MOST_LEVELS: u8 = 32;
/// The most records of a directory node: 64, and fewer where 64 would not fit one READ.
pub const fn fanout(stride: usize) -> usize {
    let fit = (MAX_UNITS as usize * UNIT - HEADER) / stride;
    if fit < 64 {
        fit
    } else {
        64
    }
}

/// The record stride for keys of up to `max_key` bytes.
pub const fn stride(max_key: usize) -> usize {
    RECORD_EXTRA + max_key.next_multiple_of(8)
}

/// Bytes of a group of `count` records of `stride` bytes.
pub const fn group_len(count: usize, stride: usize) -> usize {
    HEADER + count * stride
}

/// The most plain entries of one prefix a leaf keeps before they become a group: half a
/// neighbourhood (hopscotch: the other half stays for keys homed nearby) or half a sorted leaf
/// (so a split can always part other keys from the group's entry).
pub fn plain_limit(leaf: &crate::layout::LeafLayout) -> usize {
    match leaf.kind.hopscotch {
        true => (leaf.h / 2).max(1),
        false => (leaf.span / 2).max(1),
    }
}

/// The value slot naming the group block at `a` (64-B aligned) of `len` bytes.
pub fn slot_of(a: GlobalAddr, len: usize) -> [u8; 8] {
    debug_assert!(a.is_aligned(64), "group blocks are 64-B aligned");
    let units = (len.div_ceil(UNIT) as u64).clamp(1, MAX_UNITS);
    (a.raw() | units << 1 | TAG).to_le_bytes()
}

/// The group a value slot names, with the bytes its first READ takes; `None` for a key-value
/// block's slot.
pub fn group_of(slot: [u8; 8]) -> Option<(GlobalAddr, usize)> {
    let raw = u64::from_le_bytes(slot);
    (raw & TAG != 0).then(|| (GlobalAddr::from_raw(raw & !63), ((raw >> 1) & 31) as usize * UNIT))
}

/// The fewest records a group whose value slot names a first READ of `first` bytes can hold,
/// at `stride` bytes a record: its length is above the units before the last. One unit vouches
/// for none: an empty group (the last key gone, shadowed entries beside it) is one unit long.
/// A directory's records are its pages, each holding a key at least.
pub fn records_at_least(first: usize, stride: usize) -> usize {
    match first.checked_sub(UNIT) {
        Some(below) if below > 0 => (below + 1 - HEADER).div_ceil(stride).max(1),
        _ => 0,
    }
}

/// The length a group's first bytes `b` (at least [`HEADER`]) give for the whole block.
pub fn len_of(a: GlobalAddr, b: &[u8]) -> IndexResult<usize> {
    let (count, stride) = header(a, b)?;
    Ok(group_len(count, stride))
}

fn header(a: GlobalAddr, b: &[u8]) -> IndexResult<(usize, usize)> {
    let word = |at: usize| b.get(at..at + 4).map(|w| u32::from_le_bytes(w.try_into().unwrap()));
    let (Some(count), Some(stride)) = (word(0), word(4)) else {
        return Err(IndexError::Corrupt(format!("group at {a} ends its node's region")));
    };
    let (count, stride) = (count as usize, (stride & ((1 << LEVEL_SHIFT) - 1)) as usize);
    if stride < RECORD_EXTRA + 8 || stride % 8 != 0 || count > 1 << 24 {
        return Err(IndexError::Corrupt(format!("group at {a}: {count} records of {stride} B")));
    }
    Ok((count, stride))
}

/// One record of a group: its key, its value slot and the slot's offset in the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'b> {
    pub key: &'b [u8],
    pub slot: [u8; 8],
    pub slot_at: usize,
}

/// A group block read whole, its header and records checked.
#[derive(Clone, Copy, Debug)]
pub struct Group<'b> {
    bytes: &'b [u8],
    count: usize,
    stride: usize,
    level: u8,
}

impl<'b> Group<'b> {
    /// The group at `a` whose bytes `b` hold at least the whole block; a header, length or key
    /// length that does not fit is [`IndexError::Corrupt`].
    pub fn parse(a: GlobalAddr, b: &'b [u8]) -> IndexResult<Group<'b>> {
        let (count, stride) = header(a, b)?;
        let len = group_len(count, stride);
        let Some(bytes) = b.get(..len) else {
            return Err(IndexError::Corrupt(format!("group at {a} runs past what was read")));
        };
        let word = u32::from_le_bytes(b[4..8].try_into().unwrap());
        let level = ((word & !DIRECTORY) >> LEVEL_SHIFT) as u8;
        let level = match (word & DIRECTORY != 0, level) {
            (false, 0) => 0,
            (true, l @ 1..=MOST_LEVELS) if count > 0 => l,
            _ => {
                return Err(IndexError::Corrupt(format!(
                    "group at {a}: level {level} of {count} records"
                )))
            }
        };
        let g = Group { bytes, count, stride, level };
        if (0..count).any(|j| g.key_len(j) > stride - RECORD_EXTRA) {
            return Err(IndexError::Corrupt(format!("group at {a}: a key longer than a record")));
        }
        Ok(g)
    }

    /// Records in the group (at least one).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes of a record.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Whether the group is a directory: its records name pages ([`page`]) or directories
    /// a level down by their lowest keys, each holding the keys from its own lowest to the
    /// next's (the first: from the directory's own lowest).
    pub fn is_directory(&self) -> bool {
        self.level > 0
    }

    /// A directory's level: 1 when its records name pages (0: a group).
    pub fn level(&self) -> u8 {
        self.level
    }

    /// A directory's record for `key`: the last whose lowest key is at most `key`, or the
    /// first when `key` is below them all.
    pub fn page_for(&self, key: &[u8]) -> usize {
        match self.search(key).0 {
            Ok(j) => j,
            Err(j) => j.saturating_sub(1),
        }
    }

    fn key_len(&self, j: usize) -> usize {
        let at = HEADER + j * self.stride;
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap()) as usize
    }

    /// Record `j` (below [`Group::count`]).
    pub fn record(&self, j: usize) -> Record<'b> {
        let at = HEADER + j * self.stride;
        let slot_at = at + self.stride - 8;
        Record {
            key: &self.bytes[at + 8..at + 8 + self.key_len(j)],
            slot: self.bytes[slot_at..slot_at + 8].try_into().unwrap(),
            slot_at,
        }
    }

    /// The records in key order.
    pub fn records(&self) -> impl Iterator<Item = Record<'b>> + '_ {
        (0..self.count).map(|j| self.record(j))
    }

    /// Binary search for `key`: `Ok(j)` its record, `Err(j)` where it would go; and the keys
    /// compared.
    pub fn search(&self, key: &[u8]) -> (Result<usize, usize>, u64) {
        let (mut lo, mut hi, mut compared) = (0, self.count, 0);
        while lo < hi {
            let mid = (lo + hi) / 2;
            compared += 1;
            match self.record(mid).key.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return (Ok(mid), compared),
            }
        }
        (Err(lo), compared)
    }
}

/// Encodes a group of `records` (in key order, no key twice, each key at most `stride` − 16
/// bytes) into `out` (cleared first).
pub fn encode<'k>(
    stride: usize,
    records: impl IntoIterator<Item = (&'k [u8], [u8; 8])>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&[0; HEADER]);
    let mut count = 0u32;
    for (key, slot) in records {
        debug_assert!(key.len() <= stride - RECORD_EXTRA);
        let at = out.len();
        out.resize(at + stride, 0);
        out[at..at + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        out[at + 8..at + 8 + key.len()].copy_from_slice(key);
        out[at + stride - 8..at + stride].copy_from_slice(&slot);
        count += 1;
    }
    out[0..4].copy_from_slice(&count.to_le_bytes());
    out[4..8].copy_from_slice(&(stride as u32).to_le_bytes());
}

/// Encodes a directory node of `level` (1 ..= [`MOST_LEVELS`]) whose records are `children`
/// (each child's lowest key, in key order, and its word: a page's address at level 1, a
/// directory's value slot ([`slot_of`]) above) into `out` (cleared first).
pub fn encode_directory<'k>(
    stride: usize,
    level: u8,
    children: impl IntoIterator<Item = (&'k [u8], [u8; 8])>,
    out: &mut Vec<u8>,
) {
    debug_assert!((1..=MOST_LEVELS).contains(&level));
    encode(stride, children, out);
    let word = stride as u32 | u32::from(level) << LEVEL_SHIFT | DIRECTORY;
    out[4..8].copy_from_slice(&word.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_pinned() {
        assert_eq!(stride(11), 32);
        assert_eq!(stride(24), 40);
        let mut b = Vec::new();
        encode(32, [(&b"ab"[..], [1; 8]), (&b"abcdefghijk"[..], [2; 8])], &mut b);
        let mut want = vec![2, 0, 0, 0, 32, 0, 0, 0];
        want.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']);
        want.extend_from_slice(&[0; 14]);
        want.extend_from_slice(&[1; 8]);
        want.extend_from_slice(&[11, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(b"abcdefghijk");
        want.extend_from_slice(&[0; 5]);
        want.extend_from_slice(&[2; 8]);
        assert_eq!(b, want);
        let a = GlobalAddr::new(1, 4096);
        let g = Group::parse(a, &b).unwrap();
        assert_eq!(g.count(), 2);
        assert_eq!(g.record(1), Record { key: b"abcdefghijk", slot: [2; 8], slot_at: 64 });
        assert_eq!(g.search(b"ab").0, Ok(0));
        assert_eq!(g.search(b"abc").0, Err(1));
        assert_eq!(g.search(b"b").0, Err(2));
        assert_eq!(g.search(b"a").0, Err(0));
        assert_eq!(len_of(a, &b).unwrap(), 72);
    }

    #[test]
    fn a_directory_and_an_empty_group_are_pinned() {
        let (a, p0, p1) =
            (GlobalAddr::new(1, 4096), GlobalAddr::new(1, 64), GlobalAddr::new(2, 128));
        let mut b = Vec::new();
        let children = [(&b""[..], p0.raw().to_le_bytes()), (&b"m"[..], p1.raw().to_le_bytes())];
        encode_directory(24, 1, children, &mut b);
        let mut want = vec![2, 0, 0, 0, 24, 0, 0, 0x81];
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&p0.raw().to_le_bytes());
        want.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, b'm', 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&p1.raw().to_le_bytes());
        assert_eq!(b, want);
        let d = Group::parse(a, &b).unwrap();
        assert!(d.is_directory() && d.level() == 1 && d.stride() == 24 && d.count() == 2);
        assert_eq!(
            (d.page_for(b""), d.page_for(b"a"), d.page_for(b"m"), d.page_for(b"z")),
            (0, 0, 1, 1)
        );
        encode_directory(24, 3, children, &mut b);
        assert_eq!(&b[4..8], &[24, 0, 0, 0x83]);
        assert_eq!(Group::parse(a, &b).unwrap().level(), 3);
        b[7] = 0xa1; // level 33
        assert!(Group::parse(a, &b).is_err());
        b[7] = 0x01; // a level without the directory bit
        assert!(Group::parse(a, &b).is_err());
        assert_eq!((fanout(40), fanout(64), fanout(272)), (64, 61, 14));
        // An empty group (its last key gone while shadowed entries remain) parses, empty.
        encode(24, [], &mut b);
        let g = Group::parse(a, &b).unwrap();
        assert!(!g.is_directory() && g.count() == 0 && g.search(b"k").0 == Err(0));
        assert_eq!(records_at_least(group_of(slot_of(a, b.len())).unwrap().1, 24), 0);
    }

    #[test]
    fn the_slot_names_the_block_and_its_length() {
        let a = GlobalAddr::new(3, 64 * 1000);
        assert_eq!(u64::from_le_bytes(slot_of(a, 72)), a.raw() | 0b11);
        assert_eq!(group_of(slot_of(a, 72)), Some((a, 128)));
        assert_eq!(group_of(slot_of(a, 129)), Some((a, 256)));
        assert_eq!(group_of(slot_of(a, 100_000)), Some((a, 31 * 128)));
        // The records a slot's length vouches for, at 40 B a record: a group of 4 is 168 B.
        assert_eq!(records_at_least(128, 40), 0);
        assert_eq!(records_at_least(256, 40), 4);
        for count in 0..200 {
            let len = group_len(count, 40);
            let (_, first) = group_of(slot_of(a, len)).unwrap();
            assert!(records_at_least(first, 40) <= count, "{count}");
        }
        // A key-value block's slot (64-B aligned) is no group.
        assert_eq!(group_of(a.raw().to_le_bytes()), None);
    }

    #[test]
    fn nonsense_is_refused() {
        let a = GlobalAddr::new(0, 0);
        assert!(Group::parse(a, &[1, 0, 0]).is_err());
        assert!(Group::parse(a, &[1, 0, 0, 0, 32, 0, 0, 0]).is_err(), "runs past the READ");
        assert!(Group::parse(a, &[1, 0, 0, 0, 12, 0, 0, 0]).is_err(), "stride");
        assert!(Group::parse(a, &[0, 0, 0, 0, 40, 0, 0, 0x81]).is_err(), "an empty directory");
        let mut b = Vec::new();
        encode(24, [(&b"k"[..], [1; 8])], &mut b);
        b[8] = 9; // record 0's key length: 9 > 24 - 16
        assert!(Group::parse(a, &b).is_err(), "key longer than its record");
    }
}
