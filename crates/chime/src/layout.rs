//! Byte layouts of CHIME's remote nodes. Every offset here is pinned by the tests below.
//!
//! # Version byte
//!
//! Every object (replica, entry, internal header, internal entry) starts with one byte:
//! low nibble = node-level version (NV), high nibble = entry-level version (EV), both wrapping at 16
//! ([`dmindex_prim::version`]).
//!
//! # Leaf (span S, neighbourhood H, S a multiple of H; decoded form)
//!
//! ```text
//! group g (g = 0 .. S/H), 10 + 19·H bytes:
//! +---------------------------- metadata replica, 10 B ----------------------------+
//! | version u8 | valid u8 | sibling: GlobalAddr u64 LE (null = rightmost leaf)     |
//! +---------------------------------------------------------------------------------+
//! | entry g·H + 0, 19 B: version u8 | hop bitmap u16 LE | key [8] | value [8]       |
//! | ...                                                                             |
//! | entry g·H + H-1                                                                 |
//! +---------------------------------------------------------------------------------+
//! ```
//!
//! Key bytes are the user key (8 bytes, big-endian integers sort numerically); all-zero marks an
//! empty entry. The value slot holds the value inline, or a pointer to a block (indirect values).
//! Hop bitmap bit `H-1-d` (MSB of the H used bits first) says "a key homed here sits at
//! distance d". Physically the decoded bytes carry cache-line versions
//! ([`dmindex_prim::cacheline`]); then, 8-byte aligned:
//!
//! ```text
//! +------------------------------+-----------------------------------------------+
//! | lock word u64 LE             | upper bound: key [8] (inclusive; ff.. = none) |
//! +------------------------------+-----------------------------------------------+
//! lock word bits: 0 .. B-1 vacancy buckets (1 = every slot of the bucket is full)
//!                 B .. B+A-1 argmax (slot of a key of the leaf, ideally the largest)
//!                 63 lock ([`dmindex_prim::lock`])
//! ```
//!
//! With S = 64, H = 8: 1296 decoded bytes, 1316 physical, lock at 1320, upper bound at 1328,
//! 1344 bytes allocated (64-aligned, so physical lines are cache lines).
//!
//! # Ablated leaves (paper §5.3; [`LeafKind`])
//!
//! * **Fence keys** (sibling-based validation off): every replica grows to 26 B,
//!   `version u8 | valid u8 | sibling u64 | low key [8] | high key [8]` (inclusive fences).
//! * **No metadata replication**: one replica (header) at offset 0, then all S entries
//!   back to back; a neighbourhood READ adds a dedicated READ of the header (same doorbell).
//! * **Sorted leaf** (hopscotch off, Sherman): one 26-B fenced header, then S sorted 17-B
//!   entries `version u8 | key [8] | value [8]` packed from slot 0 (no hop bitmap). S = 64:
//!   1114 decoded, 1131 physical, lock at 1136, upper bound at 1144, 1152 allocated.
//!
//! Lock word and upper bound follow the versioned part as above in every kind.
//!
//! # Internal node
//!
//! The B-link internal node every B+ tree design shares: see `dmindex_prim::blink::layout`.

use arrayvec::ArrayVec;
use dmindex_prim::cacheline::{phys_len, Objects};
use dmindex_prim::divisor::Divisor;

use crate::view::wrap;

pub use dmindex_prim::blink::layout::{addr_at, key_at, put_addr, put_key, word};

/// Bytes per metadata replica (sibling-based validation).
pub const REPLICA: usize = 10;
/// Bytes per metadata replica carrying fence keys (sibling-based validation off).
pub const REPLICA_FENCED: usize = REPLICA + 2 * KEY;
/// Bytes per hopscotch leaf entry.
pub const ENTRY: usize = 19;
/// Offset of a hopscotch entry's hop bitmap (u16 LE), after its version byte.
pub const HOP_BITMAP: usize = 1;
/// Bytes per sorted (Sherman) leaf entry: no hop bitmap.
pub const SORTED_ENTRY: usize = 17;
/// Bytes per key.
pub const KEY: usize = 8;
/// Largest neighbourhood.
pub const MAX_H: usize = 16;

/// Which remote leaf structure the ablation flags ask for (paper §5.3, Fig. 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafKind {
    /// Hopscotch leaf; off = a sorted leaf read whole (Sherman), which implies one metadata
    /// header with fence keys.
    pub hopscotch: bool,
    /// A metadata replica before every H entries; off = one header at the front.
    pub replicated: bool,
    /// Metadata carries fence keys (sibling-based validation off).
    pub fenced: bool,
}

impl LeafKind {
    /// CHIME's leaf.
    pub const CHIME: LeafKind = LeafKind { hopscotch: true, replicated: true, fenced: false };
    /// The enhanced Sherman leaf.
    pub const SHERMAN: LeafKind = LeafKind { hopscotch: false, replicated: false, fenced: true };
    /// Hopscotch leaves with and without metadata replication and fences, for tests that must
    /// hold over each.
    #[cfg(test)]
    pub const HOPSCOTCH_KINDS: [LeafKind; 3] = [
        LeafKind::CHIME,
        LeafKind { hopscotch: true, replicated: false, fenced: true },
        LeafKind { hopscotch: true, replicated: true, fenced: true },
    ];
}

/// Geometry of a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafLayout {
    pub span: usize,
    pub h: usize,
    pub kind: LeafKind,
    /// Entries per metadata replica: H, or the whole span with one header.
    pub rg: usize,
    /// Bytes per entry and per metadata replica.
    pub entry_len: usize,
    pub meta_len: usize,
    /// Vacancy-bitmap buckets.
    pub buckets: usize,
    /// Bits of the argmax field.
    pub argmax_bits: u32,
    /// Division by `buckets`, `span`, `rg`, the group and the entry length, precomputed (bucket,
    /// slot and object arithmetic is on every operation and every line encoded or decoded).
    per_bucket: Divisor,
    per_rg: Divisor,
    per_span: Divisor,
    per_group: Divisor,
    per_entry: Divisor,
    /// Metadata replicas, bytes per group, decoded and physical bytes, computed once: an
    /// insert asks for the lock word's offset and the physical size several times, each a
    /// division and the cache-line mapping.
    groups: usize,
    group: usize,
    decoded: usize,
    physical: usize,
}

impl LeafLayout {
    /// Checks and builds CHIME's geometry.
    pub fn new(span: usize, h: usize) -> Result<LeafLayout, String> {
        LeafLayout::with_kind(span, h, LeafKind::CHIME)
    }

    /// Checks and builds the geometry of a leaf of `kind`.
    pub fn with_kind(span: usize, h: usize, kind: LeafKind) -> Result<LeafLayout, String> {
        if !(2..=MAX_H).contains(&h) {
            return Err(format!("neighbourhood H = {h} must be in 2..={MAX_H}"));
        }
        if span < h || span % h != 0 || span > 1024 {
            return Err(format!("leaf span {span} must be a multiple of H = {h}, at most 1024"));
        }
        if !kind.hopscotch && (kind.replicated || !kind.fenced) {
            return Err("a sorted leaf has one header with fence keys".into());
        }
        let argmax_bits = usize::BITS - (span - 1).leading_zeros();
        let buckets = (63 - argmax_bits as usize).min(span);
        let rg = if kind.replicated { h } else { span };
        let entry_len = if kind.hopscotch { ENTRY } else { SORTED_ENTRY };
        let meta_len = if kind.fenced { REPLICA_FENCED } else { REPLICA };
        let (groups, group) = (span / rg, meta_len + entry_len * rg);
        Ok(LeafLayout {
            span,
            h,
            kind,
            rg,
            entry_len,
            meta_len,
            buckets,
            argmax_bits,
            per_bucket: Divisor::new(buckets),
            per_rg: Divisor::new(rg),
            per_span: Divisor::new(span),
            per_group: Divisor::new(group),
            per_entry: Divisor::new(entry_len),
            groups,
            group,
            decoded: groups * group,
            physical: phys_len(groups * group),
        })
    }

    /// Metadata replicas per leaf.
    #[inline]
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Bytes per group (replica + its entries).
    #[inline]
    pub fn group(&self) -> usize {
        self.group
    }

    /// Offset of the key within an entry (after the version byte and any hop bitmap).
    pub fn key_off(&self) -> usize {
        self.entry_len - 2 * KEY
    }

    /// Decoded size.
    #[inline]
    pub fn decoded(&self) -> usize {
        self.decoded
    }

    /// Physical size of the versioned part.
    #[inline]
    pub fn physical(&self) -> usize {
        self.physical
    }

    /// Offset of the lock word.
    pub fn lock_offset(&self) -> usize {
        self.physical().div_ceil(8) * 8
    }

    /// Offset of the upper bound.
    pub fn bound_offset(&self) -> usize {
        self.lock_offset() + 8
    }

    /// Bytes to allocate.
    pub fn alloc(&self) -> usize {
        (self.bound_offset() + KEY).div_ceil(64) * 64
    }

    /// Decoded offset of replica `g`.
    pub fn replica(&self, g: usize) -> usize {
        g * self.group()
    }

    /// The group of decoded offset `d`, and `d`'s offset within it.
    #[inline]
    pub fn group_of(&self, d: usize) -> (usize, usize) {
        let g = self.per_group.quotient(d);
        (g, d - g * self.group())
    }

    /// Whole entries in `r` bytes of entries.
    #[inline]
    pub fn entries_in(&self, r: usize) -> usize {
        self.per_entry.quotient(r)
    }

    /// The group of slot `i`, and `i`'s place among the group's entries.
    #[inline]
    pub fn slot_group(&self, i: usize) -> (usize, usize) {
        let g = self.per_rg.quotient(i);
        (g, i - g * self.rg)
    }

    /// Decoded offset of entry `i`.
    #[inline]
    pub fn entry(&self, i: usize) -> usize {
        let (g, r) = self.slot_group(i);
        g * self.group() + self.meta_len + self.entry_len * r
    }

    /// Decoded offset of every entry, slot by slot: [`LeafLayout::entry`] of `0..span` at the
    /// layout's fixed strides, without a division a slot (for passes over a whole leaf).
    #[inline]
    pub fn entry_offsets(self) -> impl Iterator<Item = usize> {
        let (group, at, len) = (self.group(), self.meta_len, self.entry_len);
        (0..self.groups()).flat_map(move |g| (0..self.rg).map(move |r| g * group + at + len * r))
    }

    /// Bucket of slot `i`.
    #[inline]
    pub fn bucket(&self, i: usize) -> usize {
        self.per_span.quotient(i * self.buckets)
    }

    /// Slots from `a` forward to `b`, circularly.
    #[inline]
    pub fn dist(&self, a: usize, b: usize) -> usize {
        wrap(b + self.span - a, self.span)
    }

    /// The first slot from `from` on (circularly) whose bucket the vacancy bitmap `full` shows
    /// with a free slot.
    pub fn first_vacant_bucket_slot(&self, full: u64, from: usize) -> Option<usize> {
        let nb = self.buckets;
        let mask = if nb == 64 { u64::MAX } else { (1 << nb) - 1 };
        let vacant = !full & mask;
        if vacant == 0 {
            return None;
        }
        // The first vacant bucket at or after `from`'s, circularly over the `nb` buckets.
        let bf = self.bucket(from);
        let rotated = (vacant >> bf | vacant << wrap(nb - bf, nb)) & mask;
        let d = rotated.trailing_zeros() as usize;
        if d == 0 {
            return Some(from);
        }
        Some(self.bucket_slots(wrap(bf + d, nb)).0)
    }

    /// The slots an insert of a key homed at `h` READs under the lock, given the vacancy
    /// bitmap `full` the lock returned, as (first, count): whole buckets from `h`'s bucket to
    /// the first with a free slot, and at least `h`'s neighbourhood; the whole leaf (count =
    /// span) if every bucket is full.
    #[inline]
    pub fn insert_read(&self, h: usize, full: u64) -> (usize, usize) {
        let lo = self.bucket_slots(self.bucket(h)).0;
        match self.first_vacant_bucket_slot(full, h) {
            None => (lo, self.span),
            Some(e) => {
                let last = self.bucket_last(self.bucket(e));
                (lo, self.dist(lo, h) + (self.dist(h, last) + 1).max(self.h))
            }
        }
    }

    /// Slots of bucket `b`: `[first, last]`.
    #[inline]
    pub fn bucket_slots(&self, b: usize) -> (usize, usize) {
        let first = self.per_bucket.quotient_ceil(b * self.span);
        (first, self.bucket_last(b))
    }

    /// The last slot of bucket `b`.
    #[inline]
    pub fn bucket_last(&self, b: usize) -> usize {
        self.per_bucket.quotient_ceil((b + 1) * self.span) - 1
    }
}

/// Decoded ranges one READ doorbell covers: at most a header and two wrapped pieces.
pub type Ranges = ArrayVec<(usize, usize), 3>;

impl LeafLayout {
    /// Decoded ranges covering slots `lo .. lo + n` (circular), each with a replica when it
    /// starts at a group boundary; `n >= span` is the whole leaf. Without metadata replication
    /// a range that misses the header is preceded by a dedicated READ of it (same doorbell).
    pub fn read_ranges(&self, lo: usize, n: usize) -> Ranges {
        let s = self.span;
        let mut out = Ranges::new();
        if n >= s {
            out.push((0, self.decoded()));
            return out;
        }
        let start = |i: usize| match self.slot_group(i) {
            (g, 0) => self.replica(g),
            _ => self.entry(i),
        };
        let end = |i: usize| self.entry(i) + self.entry_len;
        if !self.kind.replicated && start(lo) != 0 && (lo + n <= s || start(0) != 0) {
            out.push((0, self.meta_len));
        }
        if lo + n <= s {
            out.push((start(lo), end(lo + n - 1)));
        } else {
            out.push((start(lo), end(s - 1)));
            out.push((start(0), end(lo + n - 1 - s)));
        }
        out
    }

    /// Entry-only ranges covering slots `lo .. lo + n` (circular), for writes, in the order
    /// they are posted: a run that wraps around goes from slot 0 first, then from `lo` to the
    /// leaf's end. A hop moves keys forward along the run (away from their homes), so a writer
    /// that dies after its first WRITE of the two landed leaves a moved key in its new slot and
    /// still in its old one, never in neither ([`crate::leaf::LeafBuf::settle`] keeps one);
    /// and the second ends where the lock word's pad begins, so the unlock rides in it.
    pub fn write_ranges(&self, lo: usize, n: usize) -> ArrayVec<(usize, usize), 2> {
        let s = self.span;
        let len = self.entry_len;
        let (e0, e1) = (|i: usize| self.entry(i), |i: usize| self.entry(i) + len);
        let mut out = ArrayVec::new();
        if lo + n <= s {
            out.push((e0(lo), e1(lo + n - 1)));
        } else {
            out.push((e0(0), e1(lo + n - 1 - s)));
            out.push((e0(lo), e1(s - 1)));
        }
        out
    }
}

impl Objects for LeafLayout {
    #[inline]
    fn object_start(&self, d: usize) -> usize {
        let (g, r) = self.group_of(d);
        let base = g * self.group();
        if r < self.meta_len {
            base
        } else {
            base + self.meta_len + self.entries_in(r - self.meta_len) * self.entry_len
        }
    }
}

/// A leaf's lock word's metadata, decoded: what the locking CAS returns and the unlocking WRITE
/// puts back (the lock bit is the lock's own, [`dmindex_prim::lock`]; `encode` leaves it clear
/// and `decode` ignores it). No flag rides along: a `bool` here was the niche in which the
/// results carrying a locked leaf kept their tags, and loads at odd stack offsets near them were
/// among the insert's hottest instructions in perf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockWord {
    /// Bit b set: bucket b has no empty slot.
    pub full: u64,
    pub argmax: usize,
}

impl LockWord {
    /// The metadata of lock word `w` (its lock bit ignored).
    pub fn decode(l: &LeafLayout, w: u64) -> LockWord {
        let mask = if l.buckets == 64 { u64::MAX } else { (1u64 << l.buckets) - 1 };
        LockWord {
            full: w & mask,
            argmax: ((w >> l.buckets) & ((1u64 << l.argmax_bits) - 1)) as usize,
        }
    }

    /// The lock word carrying this metadata, lock bit clear.
    pub fn encode(&self, l: &LeafLayout) -> u64 {
        self.full | (self.argmax as u64) << l.buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_layout_is_pinned() {
        let l = LeafLayout::new(64, 8).unwrap();
        assert_eq!((l.group(), l.decoded(), l.physical()), (162, 1296, 1316));
        assert_eq!((l.lock_offset(), l.bound_offset(), l.alloc()), (1320, 1328, 1344));
        assert_eq!((l.buckets, l.argmax_bits), (57, 6));
        assert_eq!(l.entry(0), 10);
        assert_eq!(l.entry(7), 10 + 7 * 19);
        assert_eq!(l.entry(8), 162 + 10);
        assert_eq!(l.replica(3), 486);
        assert_eq!(l.object_start(l.entry(9) + 5), l.entry(9));
        assert_eq!(l.object_start(l.replica(2) + 9), l.replica(2));
        // An entry: version, hop bitmap, key, value.
        assert_eq!((HOP_BITMAP, l.key_off(), l.key_off() + KEY, l.entry_len), (1, 3, 11, 19));
        // Buckets partition the slots in order, 1 or 2 slots each.
        let mut next = 0;
        for b in 0..l.buckets {
            let (f, t) = l.bucket_slots(b);
            assert_eq!(f, next);
            assert!(t >= f && t - f <= 1);
            for i in f..=t {
                assert_eq!(l.bucket(i), b);
            }
            next = t + 1;
        }
        assert_eq!(next, 64);
        // Other geometries from the reference facts.
        assert_eq!(LeafLayout::new(64, 4).unwrap().decoded(), 16 * (10 + 4 * 19));
        let l16 = LeafLayout::new(64, 16).unwrap();
        assert_eq!(l16.decoded(), 4 * (10 + 16 * 19));
        let big = LeafLayout::new(512, 8).unwrap();
        assert_eq!((big.buckets, big.argmax_bits), (54, 9));
        assert!(LeafLayout::new(60, 8).unwrap_err().contains("multiple"));
        assert!(LeafLayout::new(64, 17).unwrap_err().contains("2..=16"));
    }

    #[test]
    fn ablation_layouts_are_pinned() {
        // Sherman: one 26-byte header (version, valid, sibling, low, high), 17-byte entries.
        let sh = LeafLayout::with_kind(64, 8, LeafKind::SHERMAN).unwrap();
        assert_eq!((sh.rg, sh.entry_len, sh.meta_len, sh.key_off()), (64, 17, 26, 1));
        assert_eq!(
            (sh.decoded(), sh.physical(), sh.lock_offset(), sh.alloc()),
            (1114, 1131, 1136, 1152)
        );
        assert_eq!((sh.entry(0), sh.entry(63)), (26, 26 + 63 * 17));
        assert_eq!(sh.object_start(sh.entry(5) + 16), sh.entry(5));
        // Hopscotch leaf, no replication, fence keys: one 26-byte header then 19-byte entries.
        let k = LeafKind { hopscotch: true, replicated: false, fenced: true };
        let one = LeafLayout::with_kind(64, 8, k).unwrap();
        assert_eq!((one.groups(), one.decoded(), one.entry(8)), (1, 26 + 64 * 19, 26 + 8 * 19));
        // Replicas with fence keys: 26 + 19·H per group.
        let k = LeafKind { hopscotch: true, replicated: true, fenced: true };
        let fenced = LeafLayout::with_kind(64, 8, k).unwrap();
        assert_eq!((fenced.group(), fenced.decoded(), fenced.entry(9)), (178, 1424, 178 + 26 + 19));
        let bad = LeafKind { hopscotch: false, replicated: true, fenced: true };
        assert!(LeafLayout::with_kind(64, 8, bad).is_err());
    }

    /// The strided walk over entries names every slot's offset, in slot order, in every kind.
    #[test]
    fn entry_offsets_are_the_entries_in_order() {
        let kinds = LeafKind::HOPSCOTCH_KINDS.into_iter().chain([LeafKind::SHERMAN]);
        for kind in kinds {
            for (span, h) in [(64, 8), (16, 4), (24, 4), (128, 16), (1024, 2)] {
                let l = LeafLayout::with_kind(span, h, kind).unwrap();
                let walk: Vec<usize> = l.entry_offsets().collect();
                assert_eq!(walk, (0..span).map(|i| l.entry(i)).collect::<Vec<_>>());
            }
        }
    }

    /// The bit-rotation search for the first vacant bucket agrees with walking the slots.
    #[test]
    fn first_vacant_bucket_slot_matches_the_slot_walk() {
        let naive = |l: &LeafLayout, full: u64, from: usize| {
            let s = l.span;
            (0..s).map(|d| (from + d) % s).find(|&i| full & (1 << l.bucket(i)) == 0)
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (span, h) in [(64, 8), (64, 4), (64, 16), (512, 8), (16, 2), (1024, 16)] {
            let l = LeafLayout::new(span, h).unwrap();
            let all = if l.buckets == 64 { u64::MAX } else { (1 << l.buckets) - 1 };
            for round in 0..2000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly-full masks, some entirely full, some empty.
                let full = match round % 5 {
                    0 => all,
                    1 => 0,
                    _ => (x | x.rotate_left(7) | x.rotate_left(19)) & all,
                };
                let from = (x >> 40) as usize % span;
                assert_eq!(
                    l.first_vacant_bucket_slot(full, from),
                    naive(&l, full, from),
                    "span {span} full {full:#x} from {from}"
                );
            }
        }
    }

    #[test]
    fn lock_word_bits_are_pinned() {
        use dmindex_prim::lock::LOCK_BIT;
        let l = LeafLayout::new(64, 8).unwrap();
        let w = LockWord { full: 0b101, argmax: 63 };
        assert_eq!(w.encode(&l), 0b101 | (63 << 57));
        assert_eq!(
            LockWord::decode(&l, w.encode(&l) | LOCK_BIT),
            w,
            "the lock bit is not metadata"
        );
    }
}
