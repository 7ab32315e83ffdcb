//! The Marlin leaf: an unsorted array of {key, pointer to an out-of-place item}, covering the
//! keys `[low, high]` of a B-link level, rewritten in place only by SMOs.
//!
//! # Layout (64-B aligned; every word little-endian)
//!
//! ```text
//! line 0: header
//!  off  0  spear   u64  the Spear word (prim::spear): FAA only, no WRITE ever covers 0..8
//!  off  8  meta    u64  bits 0..8 nv, the leaf epoch (>= 1) | bits 8..16 tag 0x4D ('M') | 0
//!  off 16  low     u64  lowest key covered (inclusive; never changes)
//!  off 24  high    u64  highest key covered (inclusive; all ones = rightmost; only shrinks)
//!  off 32  sibling u64  GlobalAddr raw of the right sibling (B-link), 0 = rightmost
//!  off 40..64           zero
//! entry i (i < S), at 64 + 16 i, four to a line
//!  +0  key u64  0 = free; set once per epoch by CAS 0 -> key (or by an SMO's rewrite)
//!  +8  ptr u64  bits 56..64 nv | bits 48..56 memory node | bits 0..48 offset of the item;
//!               offset 0 = null (no value: deleted, or an insert not yet published)
//! ```
//!
//! Default shape: S = 64 entries, 64 + 16 · 64 = **1088 bytes** (the reference's leaf size).
//! Items are [`dmindex_prim::kv_block`] blocks, 8-byte aligned and immutable:
//! `[key length u32 = 8][value length u32][key][value]`, 24 bytes for an 8-byte value.
//!
//! # Why each word is where it is
//!
//! * Each entry changes by CAS on one aligned word: the key once (claiming the entry), then the
//!   pointer for every insert, update and delete of that key.
//! * Every pointer carries the leaf epoch, and so every entry line does; line 0 carries it in
//!   `meta`. An SMO rewrites the leaf with the next epoch in all of them, and an image is
//!   accepted only if all agree ([`LeafImage::check`]), so a READ torn across an SMO is detected
//!   whatever mix of lines it returned (8 bits: a reader would have to overlap 256 SMOs of one
//!   leaf to be fooled).
//! * The Spear word is outside every WRITE (an SMO writes `[8, end)`), so a rewrite never erases
//!   a concurrent FAA.
//! * Zeroed memory never checks: the tag and `nv >= 1` are required.

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::hash::hash_u64;

/// Offset of the Spear word.
pub const SPEAR: usize = 0;
/// Offset of the meta word (the first byte an SMO's WRITE covers).
pub const META: usize = 8;
/// Offset of `low`.
pub const LOW: usize = 16;
/// Offset of `high`.
pub const HIGH: usize = 24;
/// Offset of `sibling`.
pub const SIBLING: usize = 32;
/// Offset of entry 0.
pub const ENTRIES: usize = 64;
/// Bytes per entry.
pub const ENTRY: usize = 16;
/// The tag in bits 8..16 of the meta word.
const TAG: u64 = 0x4D;
/// Entries per leaf by default.
pub const DEFAULT_SPAN: usize = 64;
/// Most entries per leaf.
pub const MAX_SPAN: usize = 1024;

/// A leaf's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Entries.
    pub span: usize,
    /// Bytes of a leaf (64-aligned).
    pub bytes: usize,
}

impl Shape {
    /// Leaves of `span` entries (4 to [`MAX_SPAN`]).
    pub fn new(span: usize) -> IndexResult<Shape> {
        if !(4..=MAX_SPAN).contains(&span) {
            return Err(IndexError::Config(format!(
                "marlin leaves hold 4 to {MAX_SPAN} entries, not {span}"
            )));
        }
        Ok(Shape { span, bytes: (ENTRIES + ENTRY * span).div_ceil(64) * 64 })
    }

    /// Offset of entry `i`'s key word.
    pub fn key_at(&self, i: usize) -> usize {
        ENTRIES + ENTRY * i
    }

    /// Offset of entry `i`'s pointer word.
    pub fn ptr_at(&self, i: usize) -> usize {
        ENTRIES + ENTRY * i + 8
    }

    /// The order in which inserts of `key` try entries: every entry once, cyclically from one
    /// picked by the key's hash. Inserts of one key share the order (which is all that keeps a
    /// key in one entry, [`crate::write`]); inserts of different keys mostly start apart, so
    /// concurrent inserts into one leaf rarely CAS the same free entry.
    pub fn probe(&self, key: u64) -> impl Iterator<Item = usize> {
        let (span, start) = (self.span, (hash_u64(key) % self.span as u64) as usize);
        (0..span).map(move |d| (start + d) % span)
    }

    /// Most live entries an SMO compacts into a leaf in place; more split it.
    pub fn compact_limit(&self) -> usize {
        self.span * 3 / 4
    }
}

/// An entry's pointer word: the leaf epoch and the item's address (or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ptr(pub u64);

impl Ptr {
    /// A pointer to `item` in epoch `nv`.
    pub fn to(nv: u8, item: GlobalAddr) -> Ptr {
        debug_assert!(item.node() < 256 && item.offset() >> 48 == 0);
        Ptr((nv as u64) << 56 | (item.node() as u64) << 48 | item.offset())
    }

    /// No value, in epoch `nv`.
    pub fn null(nv: u8) -> Ptr {
        Ptr((nv as u64) << 56)
    }

    /// The epoch.
    pub fn nv(self) -> u8 {
        (self.0 >> 56) as u8
    }

    /// The item, if any.
    pub fn item(self) -> Option<GlobalAddr> {
        let offset = self.0 & ((1 << 48) - 1);
        (offset != 0).then(|| GlobalAddr::new(((self.0 >> 48) & 0xFF) as u16, offset))
    }
}

/// The epoch after `nv` (never 0, which no leaf has).
pub fn next_epoch(nv: u8) -> u8 {
    nv.wrapping_add(1).max(1)
}

/// Why an image was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Lines of different epochs: READ again.
    Torn,
    /// No leaf there (tag or epoch missing, fences reversed).
    NotALeaf,
}

/// Where a leaf image says a key lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judge {
    /// Here: `low <= key <= high`.
    Here,
    /// Beyond `high`: in the right sibling or further right (a split the parent may not know).
    Right(GlobalAddr),
    /// Below `low`: the path that led here was wrong; descend again.
    Stale,
}

/// A checked leaf image: one epoch in every line.
#[derive(Clone, Copy, Debug)]
pub struct LeafImage<'b> {
    shape: &'b Shape,
    b: &'b [u8],
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl<'b> LeafImage<'b> {
    /// Checks a READ of a leaf (at least `shape.bytes` long).
    pub fn check(shape: &'b Shape, b: &'b [u8]) -> Result<LeafImage<'b>, Refused> {
        Self::verify(shape, b)?;
        Ok(LeafImage { shape, b: &b[..shape.bytes] })
    }

    /// [`LeafImage::check`] without keeping the image (for a READ loop that goes on reading
    /// into the same buffer until it checks).
    pub fn verify(shape: &Shape, b: &[u8]) -> Result<(), Refused> {
        let b = &b[..shape.bytes];
        let meta = word(b, META);
        let nv = meta as u8;
        if (meta >> 8) & 0xFF != TAG || nv == 0 {
            return Err(Refused::NotALeaf);
        }
        if (0..shape.span).any(|i| (word(b, shape.ptr_at(i)) >> 56) as u8 != nv) {
            return Err(Refused::Torn);
        }
        if word(b, LOW) > word(b, HIGH) {
            return Err(Refused::NotALeaf);
        }
        Ok(())
    }

    /// The image of a buffer that [`LeafImage::verify`] accepted and nothing wrote since.
    pub(crate) fn verified(shape: &'b Shape, b: &'b [u8]) -> LeafImage<'b> {
        debug_assert_eq!(Self::verify(shape, b), Ok(()));
        LeafImage { shape, b: &b[..shape.bytes] }
    }

    pub fn nv(&self) -> u8 {
        word(self.b, META) as u8
    }

    pub fn low(&self) -> u64 {
        word(self.b, LOW)
    }

    pub fn high(&self) -> u64 {
        word(self.b, HIGH)
    }

    pub fn sibling(&self) -> GlobalAddr {
        GlobalAddr::from_raw(word(self.b, SIBLING))
    }

    /// Entry `i`'s key word (0: free).
    pub fn key(&self, i: usize) -> u64 {
        word(self.b, self.shape.key_at(i))
    }

    /// Entry `i`'s pointer word.
    pub fn ptr(&self, i: usize) -> Ptr {
        Ptr(word(self.b, self.shape.ptr_at(i)))
    }

    /// Where `key` lives, by the fences.
    pub fn judge(&self, key: u64) -> Judge {
        if key < self.low() {
            Judge::Stale
        } else if key <= self.high() {
            Judge::Here
        } else if self.sibling().is_null() {
            // The rightmost leaf's high is all ones; a bounded leaf without a sibling is not one.
            Judge::Stale
        } else {
            Judge::Right(self.sibling())
        }
    }

    /// The entry holding `key` (at most one per epoch).
    pub fn find(&self, key: u64) -> Option<usize> {
        (0..self.shape.span).find(|&i| self.key(i) == key)
    }

    /// [`LeafImage::find`], the keys it compared reported to `c` (entries are unsorted: every
    /// one up to the key's, or all of them).
    pub fn find_reported<T: Transport>(&self, c: &Client<T>, key: u64) -> Option<usize> {
        let found = self.find(key);
        c.compute(Work::KeyCompare, found.map_or(self.shape.span, |j| j + 1) as u64);
        found
    }

    /// The free entries in `key`'s probe order ([`Shape::probe`]).
    pub fn free_for(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        self.shape.probe(key).filter(|&i| self.key(i) == 0)
    }

    /// The keys with a value and their items, in entry order.
    pub fn live(&self) -> impl Iterator<Item = (u64, GlobalAddr)> + '_ {
        (0..self.shape.span).filter_map(|i| match self.key(i) {
            0 => None,
            k => self.ptr(i).item().map(|a| (k, a)),
        })
    }
}

/// Encodes a whole leaf (Spear word 0) holding `entries` (at most `shape.span`, distinct keys)
/// into `out`, each at the first entry of its probe order not taken by an earlier one, so the
/// free entries an SMO leaves are spread as the keys' hashes are (packed from entry 0, every
/// insert whose probe starts among them would race for the first free entry after them).
pub fn encode(
    shape: &Shape,
    nv: u8,
    low: u64,
    high: u64,
    sibling: GlobalAddr,
    entries: impl IntoIterator<Item = (u64, GlobalAddr)>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.resize(shape.bytes, 0);
    let put =
        |out: &mut Vec<u8>, at: usize, w: u64| out[at..at + 8].copy_from_slice(&w.to_le_bytes());
    put(out, META, TAG << 8 | nv as u64);
    put(out, LOW, low);
    put(out, HIGH, high);
    put(out, SIBLING, sibling.raw());
    for i in 0..shape.span {
        put(out, shape.ptr_at(i), Ptr::null(nv).0);
    }
    for (k, item) in entries {
        let at = shape.probe(k).find(|&i| word(out, shape.key_at(i)) == 0);
        let i = at.expect("more entries than the leaf holds");
        put(out, shape.key_at(i), k);
        put(out, shape.ptr_at(i), Ptr::to(nv, item).0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_pinned() {
        let s = Shape::new(DEFAULT_SPAN).unwrap();
        assert_eq!(s.bytes, 1088);
        assert_eq!((s.key_at(0), s.ptr_at(0), s.key_at(63), s.ptr_at(63)), (64, 72, 1072, 1080));
        assert_eq!(Shape::new(6).unwrap().bytes, 192);
        assert!(Shape::new(3).is_err() && Shape::new(MAX_SPAN + 1).is_err());
        let item = GlobalAddr::new(3, 0x1234_5678);
        let p = Ptr::to(0xA5, item);
        assert_eq!(p.0, 0xA503_0000_1234_5678);
        assert_eq!((p.nv(), p.item()), (0xA5, Some(item)));
        assert_eq!(Ptr::null(7).item(), None);

        let mut b = Vec::new();
        let sib = GlobalAddr::new(1, 0x40);
        encode(&s, 9, 100, 200, sib, [(150, item), (120, item)], &mut b);
        assert_eq!(b.len(), 1088);
        assert_eq!(b[..8], [0; 8], "the Spear word is never written by an encode");
        assert_eq!(b[8..16], [9, 0x4D, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[16..24], 100u64.to_le_bytes());
        assert_eq!(b[24..32], 200u64.to_le_bytes());
        assert_eq!(b[32..40], sib.raw().to_le_bytes());
        let (i150, i120) = (s.probe(150).next().unwrap(), s.probe(120).next().unwrap());
        assert_ne!(i150, i120, "these two keys start their probes apart");
        assert_eq!(b[s.key_at(i150)..s.key_at(i150) + 8], 150u64.to_le_bytes());
        assert_eq!(b[s.ptr_at(i150)..s.ptr_at(i150) + 8], Ptr::to(9, item).0.to_le_bytes());
        let other = (0..64).find(|&i| i != i150 && i != i120).unwrap();
        assert_eq!(b[s.ptr_at(other)..s.ptr_at(other) + 8], Ptr::null(9).0.to_le_bytes());
        let img = LeafImage::check(&s, &b).unwrap();
        assert_eq!((img.nv(), img.low(), img.high(), img.sibling()), (9, 100, 200, sib));
        let mut live: Vec<_> = img.live().collect();
        live.sort_unstable();
        assert_eq!(live, [(120, item), (150, item)]);
        assert_eq!(img.find(120), Some(i120));
        let order: Vec<usize> = s.probe(7).collect();
        assert_eq!(order.len(), 64);
        assert!(order.windows(2).all(|w| w[1] == (w[0] + 1) % 64), "cyclic");
        let free: Vec<usize> = img.free_for(7).collect();
        assert_eq!(free.len(), 62);
        assert!(!free.contains(&i150) && !free.contains(&i120));
        assert_eq!(img.judge(99), Judge::Stale);
        assert_eq!(img.judge(200), Judge::Here);
        assert_eq!(img.judge(201), Judge::Right(sib));
        // A full leaf: every key finds an entry, the last ones further along their probes.
        let all: Vec<(u64, GlobalAddr)> = (1..=64).map(|k| (k, item)).collect();
        encode(&s, 1, 1, u64::MAX, GlobalAddr::NULL, all, &mut b);
        let img = LeafImage::check(&s, &b).unwrap();
        assert_eq!(img.live().count(), 64);
        assert_eq!(img.free_for(99).next(), None);
    }

    #[test]
    fn torn_and_foreign_images_are_refused() {
        let s = Shape::new(8).unwrap();
        let mut b = Vec::new();
        encode(&s, 1, 1, u64::MAX, GlobalAddr::NULL, [], &mut b);
        assert!(LeafImage::check(&s, &b).is_ok());
        // A line of the next epoch's rewrite mixed in.
        let mut newer = Vec::new();
        encode(&s, 2, 1, 50, GlobalAddr::new(0, 64), [], &mut newer);
        let mut mixed = b.clone();
        mixed[128..192].copy_from_slice(&newer[128..192]);
        assert_eq!(LeafImage::check(&s, &mixed).err(), Some(Refused::Torn));
        mixed[..64].copy_from_slice(&newer[..64]);
        assert_eq!(LeafImage::check(&s, &mixed).err(), Some(Refused::Torn));
        assert_eq!(LeafImage::check(&s, &vec![0; s.bytes]).err(), Some(Refused::NotALeaf));
        assert_eq!(next_epoch(255), 1);
    }
}
