//! What a client reads of a hopscotch or sorted leaf, whatever holds it: a whole decoded leaf
//! ([`crate::leaf::LeafBuf`], for inserts that hop, splits and scans) or the window of one
//! neighbourhood READ ([`crate::neighbourhood::Neighbourhood`], on the stack, for searches,
//! updates, deletes and inserts with a free slot near). Both give the bytes of an entry and of
//! a metadata replica they read; everything an operation asks of entries — keys, values, hop
//! bitmaps, versions, the rebuilt bitmap of a home, removal, an insert without a hop, the
//! vacancy bitmap after a write — is written once here on top of that.

use dmindex_fabric::GlobalAddr;
use dmindex_prim::version;
use smallvec::SmallVec;

use crate::layout::{self, LeafLayout, HOP_BITMAP, KEY, REPLICA};

/// Slots an operation changed (inline: a hop sequence touches few).
pub type Modified = SmallVec<[usize; 16]>;

/// A slot's 8-byte value as a search returns it, aligned to 8: inside an `Option` a `[u8; 8]`
/// sits at an odd offset, and moving the result up through the nest of futures then loads it
/// across the narrower stores that wrote it, which stalls (perf put about a quarter of the
/// search future's own time on such moves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(align(8))]
pub struct SlotValue(pub [u8; 8]);

/// The home slot of `key` in a leaf of `span` slots.
#[inline]
pub fn home(key: u64, span: usize) -> usize {
    let (h, s) = (dmindex_prim::hash::hash_u64(key), span as u64);
    (if s.is_power_of_two() { h & (s - 1) } else { h % s }) as usize
}

/// Entries and metadata of a leaf as read. Entry accessors take a slot that was read.
pub trait LeafView {
    /// The leaf's geometry.
    fn layout(&self) -> &LeafLayout;
    /// Whether slot `i` was read.
    fn is_loaded(&self, i: usize) -> bool;
    /// The decoded bytes of entry `i` (`entry_len` of them).
    fn entry_bytes(&self, i: usize) -> &[u8];
    /// The same, to change.
    fn entry_bytes_mut(&mut self, i: usize) -> &mut [u8];
    /// The decoded bytes of a metadata replica that was read, if any.
    fn replica_bytes(&self) -> Option<&[u8]>;
    /// Encodes decoded bytes `[d0, d1)` of the leaf (whole objects, read, and held
    /// contiguously) into `out` as the physical bytes a WRITE of them puts in place, cache-line
    /// versions included ([`dmindex_prim::cacheline::encode_window`]); returns how many.
    fn encode(&self, d0: usize, d1: usize, out: &mut [u8]) -> usize;

    /// The key of slot `i` (0: empty).
    #[inline]
    fn key(&self, i: usize) -> u64 {
        let off = self.layout().key_off();
        layout::key_at(self.entry_bytes(i), off)
    }

    /// The value slot of entry `i`.
    #[inline]
    fn value(&self, i: usize) -> [u8; 8] {
        let at = self.layout().key_off() + KEY;
        self.entry_bytes(i)[at..at + 8].try_into().expect("8 bytes")
    }

    /// Entry `i`'s version byte.
    #[inline]
    fn version(&self, i: usize) -> u8 {
        self.entry_bytes(i)[0]
    }

    /// Home `i`'s hop bitmap (hopscotch leaves).
    #[inline]
    fn bitmap(&self, i: usize) -> u16 {
        let e = self.entry_bytes(i);
        u16::from_le_bytes([e[HOP_BITMAP], e[HOP_BITMAP + 1]])
    }

    /// Sets home `i`'s hop bitmap.
    #[inline]
    fn set_bitmap(&mut self, i: usize, b: u16) {
        self.entry_bytes_mut(i)[HOP_BITMAP..HOP_BITMAP + 2].copy_from_slice(&b.to_le_bytes());
    }

    /// Bit of distance `d` in a hop bitmap (MSB of the H used bits = distance 0).
    #[inline]
    fn hop_bit(&self, d: usize) -> u16 {
        distance_bit(self.layout(), d)
    }

    /// Puts (`key`, `value`) in entry `i` (versions and bitmap unchanged).
    #[inline]
    fn set_entry(&mut self, i: usize, key: u64, value: [u8; 8]) {
        let off = self.layout().key_off();
        let e = self.entry_bytes_mut(i);
        layout::put_key(e, off, key);
        e[off + KEY..off + 2 * KEY].copy_from_slice(&value);
    }

    /// Bumps entry `i`'s entry-level version (an entry write).
    #[inline]
    fn bump_ev(&mut self, i: usize) {
        let e = self.entry_bytes_mut(i);
        e[0] = version::bump_ev(e[0]);
    }

    /// The slot of `key` within home `h`'s neighbourhood, if present.
    #[inline]
    fn find(&self, h: usize, key: u64) -> Option<usize> {
        let l = self.layout();
        (0..l.h).map(|d| wrap(h + d, l.span)).find(|&i| self.key(i) == key)
    }

    /// Home `h`'s hop bitmap rebuilt from the keys of its neighbourhood (all read): a
    /// difference from the stored one means a hop was in flight.
    fn status(&self, h: usize) -> u16 {
        let l = self.layout();
        let mut b = 0;
        for d in 0..l.h {
            let k = self.key(wrap(h + d, l.span));
            if k != 0 && home(k, l.span) == h {
                b |= self.hop_bit(d);
            }
        }
        b
    }

    /// Removes the key at slot `i` (home `h`): clears the entry and its home bit; returns the
    /// slots changed.
    fn remove(&mut self, h: usize, i: usize) -> Modified {
        let d = self.layout().dist(h, i);
        let bm = self.bitmap(h) & !self.hop_bit(d);
        self.set_bitmap(h, bm);
        self.set_entry(i, 0, [0; 8]);
        self.bump_ev(i);
        if h != i {
            self.bump_ev(h);
        }
        let mut m: Modified = [h.min(i), h.max(i)].into_iter().collect();
        m.dedup();
        m
    }

    /// Inserts `key` (absent) at the first empty slot of home `h`'s neighbourhood (read), if
    /// there is one, without hopping: the entry, the home's hop bit, both versions bumped.
    /// Returns the slot taken (`h` and it changed); `None` leaves the view as it was. What
    /// [`crate::leaf::LeafBuf::hop_insert`] does when its first empty slot is near.
    fn insert_near(&mut self, h: usize, key: u64, value: [u8; 8]) -> Option<usize> {
        // An empty entry's key is 0.
        let e = self.find(h, 0)?;
        let d = self.layout().dist(h, e);
        self.set_entry(e, key, value);
        let bm = self.bitmap(h) | self.hop_bit(d);
        self.set_bitmap(h, bm);
        self.bump_ev(e);
        if e != h {
            self.bump_ev(h);
        }
        Some(e)
    }

    /// The vacancy bitmap `prev` with the buckets of the `changed` slots brought up to date
    /// where wholly read: what a write under the leaf lock changes (only the few buckets it
    /// touched are looked at; a split's halves get theirs from [`crate::split`]).
    fn vacancy_after(&self, prev: u64, changed: &[usize]) -> u64 {
        let l = *self.layout();
        changed.iter().fold(prev, |full, &i| {
            let b = l.bucket(i);
            let (f, t) = l.bucket_slots(b);
            if !(f..=t).all(|j| self.is_loaded(j)) {
                full
            } else if (f..=t).all(|j| self.key(j) != 0) {
                full | 1 << b
            } else {
                full & !(1 << b)
            }
        })
    }

    /// The sibling pointer and valid flag from a replica read.
    fn meta(&self) -> Option<(GlobalAddr, bool)> {
        let r = self.replica_bytes()?;
        Some((layout::addr_at(r, 2), r[1] != 0))
    }

    /// The fence keys `[low, high]` (inclusive) from a replica read; `None` for leaves without
    /// fences.
    fn fences(&self) -> Option<(u64, u64)> {
        if !self.layout().kind.fenced {
            return None;
        }
        let r = self.replica_bytes()?;
        Some((layout::key_at(r, REPLICA), layout::key_at(r, REPLICA + KEY)))
    }
}

/// Key `key`, held at slot `i`, as its home's hop bitmap records it: the home, and the bit of
/// its distance (none if `i` lies outside the home's neighbourhood). What a bitmap rebuilt
/// from keys is made of.
#[inline]
pub fn hop_of(l: &LeafLayout, key: u64, i: usize) -> (usize, u16) {
    let h = home(key, l.span);
    let d = l.dist(h, i);
    (h, if d < l.h { distance_bit(l, d) } else { 0 })
}

/// The hop-bitmap bit of distance `d` (MSB of the H used bits = distance 0).
#[inline]
fn distance_bit(l: &LeafLayout, d: usize) -> u16 {
    1 << (l.h - 1 - d)
}

/// `i` modulo `span`, for `i < 2 · span`.
#[inline]
pub fn wrap(i: usize, span: usize) -> usize {
    if i >= span {
        i - span
    } else {
        i
    }
}
