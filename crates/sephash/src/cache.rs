//! The compute node's caches: the directory and, per CurSegment, its MainSegment's FPTable and
//! the sliding-window offset its clients append from (paper §4.3, §4.4.2).
//!
//! Everything here is a hint. A client checks what it reaches (the segment's depth and suffix
//! against the key's hash, the meta's MainSegment against the cached one) and repairs the cache
//! from remote memory when they disagree, so a stale cache costs round trips, never a wrong
//! answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::sync::ShardedLock;
use dmindex_fabric::GlobalAddr;

use crate::fptable;
use crate::layout::{MainHeader, Point};

/// What a client knows of one CurSegment.
#[derive(Debug)]
struct SegView {
    /// The MainSegment the FPTable below describes ([`crate::layout::Meta::main_id`]).
    main: u64,
    header: MainHeader,
    points: Vec<Point>,
    /// Where this node's clients start looking for the first free slot.
    offset: AtomicU32,
}

/// A MainSegment as the cache knows it, and the entries of one fingerprint in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainRange {
    /// The MainSegment's edition and offset ([`crate::layout::Meta::main_id`]).
    pub id: u64,
    /// Its offset on the segment's node (0: none).
    pub main: u64,
    pub entries: u32,
    pub entries_at: u64,
    /// Entries `[lo, hi)` hold every entry of the fingerprint asked for.
    pub lo: u32,
    pub hi: u32,
    /// Entries `[wlo, whi)`, inside `[lo, hi)`, are the ones a search reads first
    /// ([`fptable::window`]).
    pub wlo: u32,
    pub whi: u32,
}

impl MainRange {
    /// Where entry `lo` lies, the MainSegment being on `node`.
    pub fn range_addr(&self, node: u16) -> GlobalAddr {
        self.entry_addr(node, self.lo)
    }

    /// Where entry `i` lies, the MainSegment being on `node`.
    pub fn entry_addr(&self, node: u16, i: u32) -> GlobalAddr {
        GlobalAddr::new(node, self.main + self.entries_at).add(8 * i as u64)
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Directory entries by suffix (raw CurSegment addresses; 0: unknown or none).
    dir: Vec<u64>,
    known: usize,
    segs: HashMap<u64, SegView>,
    points: usize,
}

/// One compute node's caches, shared by its clients.
#[derive(Debug, Default)]
pub struct Cache {
    inner: ShardedLock<Inner>,
}

impl Cache {
    /// The CurSegment a key with hash `h` belongs to, as far as this node knows, and its
    /// suffix (a segment is entered at its own suffix only, and entries never change).
    pub fn locate(&self, h: u64) -> Option<(GlobalAddr, u64)> {
        let g = self.inner.read().expect("cache lock");
        if g.dir.is_empty() {
            return None;
        }
        let mut i = (h as usize) & (g.dir.len() - 1);
        loop {
            if g.dir[i] != 0 {
                return Some((GlobalAddr::from_raw(g.dir[i]), i as u64));
            }
            if i == 0 {
                return None;
            }
            i &= !(1 << (usize::BITS - 1 - i.leading_zeros()));
        }
    }

    /// Records directory entry `i` (a segment address, never 0).
    pub fn learn_entry(&self, i: usize, raw: u64) {
        let mut g = self.inner.write().expect("cache lock");
        if g.dir.len() <= i {
            let len = (i + 1).next_power_of_two().max(g.dir.len());
            g.dir.resize(len, 0);
        }
        if g.dir[i] == 0 {
            g.known += 1;
        }
        g.dir[i] = raw;
    }

    /// The cached MainSegment of `seg`, the range of fingerprint `fp` in it and the window a
    /// search for (`fp`, `fp2`) reads first, with the offset to append from; `None` if the
    /// segment's MainSegment is not cached.
    pub fn main_range(&self, seg: GlobalAddr, fp: u8, fp2: u8) -> Option<(MainRange, u32)> {
        let g = self.inner.read().expect("cache lock");
        let v = g.segs.get(&seg.raw())?;
        let (lo, hi) = fptable::range(&v.points, v.header.entries, fp);
        let (wlo, whi) = fptable::window(&v.points, v.header.entries, fp, fp2);
        let r = MainRange {
            id: v.main,
            main: crate::layout::Meta(v.main).main(),
            entries: v.header.entries,
            entries_at: v.header.entries_at(),
            lo,
            hi,
            wlo,
            whi,
        };
        Some((r, v.offset.load(Ordering::Relaxed)))
    }

    /// Records that `seg`'s MainSegment is `main` (edition and offset) with `header` and
    /// record points `points`.
    pub fn learn_main(&self, seg: GlobalAddr, main: u64, header: MainHeader, points: &[Point]) {
        let mut g = self.inner.write().expect("cache lock");
        let old = g.segs.insert(
            seg.raw(),
            SegView { main, header, points: points.to_vec(), offset: AtomicU32::new(0) },
        );
        g.points = g.points + points.len() - old.map_or(0, |o| o.points.len());
    }

    /// Where this node's clients should look for `seg`'s first free slot next.
    pub fn set_offset(&self, seg: GlobalAddr, offset: u32) {
        if let Some(v) = self.inner.read().expect("cache lock").segs.get(&seg.raw()) {
            v.offset.store(offset, Ordering::Relaxed);
        }
    }

    /// Bytes of cache in use: 8 per known directory entry, and per cached MainSegment its
    /// pointer, counts and offset (16 B) and 4 per record point.
    pub fn bytes(&self) -> u64 {
        let g = self.inner.read().expect("cache lock");
        (8 * g.known + 16 * g.segs.len() + 4 * g.points) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_fall_back_to_shallower_suffixes() {
        let c = Cache::default();
        assert_eq!(c.locate(5), None);
        for i in 0..4 {
            c.learn_entry(i, 100 + i as u64);
        }
        c.learn_entry(4 + 2, 206); // segment with suffix 0b110 (depth 3)
        c.learn_entry(16 + 6, 322); // and its child 0b10110 (depth 5)
        let at = |h| c.locate(h).map(|(a, suffix)| (a.raw(), suffix));
        assert_eq!(at(0b0110), Some((206, 6)));
        assert_eq!(at(0b1_0110), Some((322, 22)));
        assert_eq!(at(0b0_1110), Some((206, 6)), "index 14 unknown: use 6");
        assert_eq!(at(0b1_0010), Some((102, 2)), "18 -> 2");
        assert_eq!(at(u64::MAX), Some((103, 3)));
        assert_eq!(c.bytes(), 6 * 8);
    }
}
