//! The hotspot buffer of hotness-aware speculative reads (paper §4.3).
//!
//! Each compute node remembers where hot keys were last seen: (leaf address, slot) with a 2-byte
//! fingerprint of the key and an access counter — 16 bytes an entry, as in the paper. Before a
//! neighbourhood READ, a search looks for buffered slots of its neighbourhood whose fingerprint
//! matches and READs only the hottest one; if that entry holds the key, the search is done.
//!
//! # Why a speculative hit is correct
//!
//! Keys are unique in the tree at every instant but for moments when one key sits in two places
//! with the same value (a hop moving it, a split copying it to a new sibling before clearing the
//! old leaf), and remote memory is never reused. So an entry that, read whole (its cache-line
//! versions agree), holds the key holds the key's value at the instant of the READ, whichever
//! leaf it is in. Anything else — another key, an empty slot, a torn entry — is a miss and the
//! search falls back to the neighbourhood READ with full validation. So the buffer only gives
//! hints, and a wrong hint costs one READ, never a wrong value.
//!
//! # Structure
//!
//! A set-associative table, 8 ways a set, least-frequently-used replacement inside a set. An
//! entry is filed under its key's home slot: in the set of (leaf address, home), two adjacent
//! cache lines (an aligned 128-B block, which CPUs fetch as a pair). A search for a key looks for
//! hotspots of its neighbourhood in that one set, so it reads one set of the buffer, not one per
//! slot of the neighbourhood:
//!
//! ```text
//! set (128 B) = 8 ways × [ leaf address (8 B) | slot (2 B) | fingerprint (2 B) | count (4 B) ]
//!               word 0:    leaf.raw()           word 1: slot << 48 | fp << 32 | count
//! ```
//!
//! Why 8 ways: the paper evicts the least frequently used entry of the whole buffer. YCSB C at
//! 6 M keys with a 3 MB buffer (the paper's 60 M and 30 MB scaled down tenfold) and a 600 k
//! operation stream replayed five times, as the reference harness replays its trace: 61.7 % of
//! searches hit with 4 ways, 64.7 % with 8, 66.3 % with 16, against 67.4 % for a buffer that
//! always held the most frequent keys of the stream. 8 ways cost 61 more instructions a search
//! than 4 (2802 → 2863 counted, 2.2 %), 16 ways 259 (`docs/perf.md`).
//!
//! The paper's lookup finds every hotspot of the neighbourhood whose fingerprint matches; those
//! filed under another home hold the fingerprint of a key with another home, so only a
//! fingerprint collision, a wrong speculation, can be lost by looking in one set. Filing does
//! change which entries compete for a set's ways: the hot keys of one (leaf, home) share one set.
//! A slot that later holds a key of another home gets a second entry (under the new home); the
//! old one is forgotten when its next speculation fails, or is evicted while its count is the
//! lowest of its set (counts never decay, so a stale entry that grew hot can hold its way until
//! a search for its key speculates on it).
//!
//! The table is lock-free: every word is an atomic read and written relaxed. A reader racing a
//! writer may pair a way's two words from different entries, and two writers may lose a count or
//! an insertion; all of that only makes a hint wrong or missing, which the paragraph "Why a
//! speculative hit is correct" makes harmless. Counts saturate at [`COUNT_CAP`], so a hot entry
//! stops writing its line and the compute node's threads share it read-only. Deterministic (no
//! hash-map iteration, no thread identity), so simulator runs replay.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use dmindex_fabric::GlobalAddr;
use dmindex_prim::counter::Striped;
use dmindex_prim::hash::{fingerprint, mix64};

use crate::layout::LeafLayout;

/// Bytes an entry costs, as the paper counts them (8-B leaf address, 2-B slot, 2-B fingerprint,
/// 4-B counter).
pub const ENTRY_BYTES: u64 = 16;
const WAYS: usize = 8;
/// Counts stop here: enough to tell hot from cold within a set.
pub const COUNT_CAP: u32 = 1 << 10;

/// One set: per way, the leaf address and the packed slot, fingerprint and count.
#[derive(Default)]
#[repr(C, align(128))]
struct Set([[AtomicU64; 2]; WAYS]);

/// A way as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Way {
    leaf: u64,
    slot: u16,
    fp: u16,
    count: u32,
}

impl Way {
    fn load(w: &[AtomicU64; 2]) -> Way {
        let (leaf, meta) = (w[0].load(Relaxed), w[1].load(Relaxed));
        Way { leaf, slot: (meta >> 48) as u16, fp: (meta >> 32) as u16, count: meta as u32 }
    }

    fn meta(slot: usize, fp: u16, count: u32) -> u64 {
        (slot as u64) << 48 | u64::from(fp) << 32 | u64::from(count)
    }

    fn holds(&self, leaf: GlobalAddr, slot: usize) -> bool {
        self.count > 0 && self.leaf == leaf.raw() && self.slot as usize == slot
    }
}

/// A CN's hotspot buffer.
pub struct Hotspots {
    sets: Box<[Set]>,
    /// The tree's leaves: their span and neighbourhood size H.
    leaf: LeafLayout,
    /// Speculative READs issued, and those that found their key.
    pub attempts: Striped,
    pub hits: Striped,
}

impl Hotspots {
    /// A buffer of about `budget` bytes (at least one set) for leaves of layout `leaf`.
    pub fn new(budget: u64, leaf: LeafLayout) -> Hotspots {
        let sets = ((budget / ENTRY_BYTES) as usize / WAYS).max(1);
        Hotspots {
            sets: (0..sets).map(|_| Set::default()).collect(),
            leaf,
            attempts: Striped::default(),
            hits: Striped::default(),
        }
    }

    /// Bytes the buffer holds room for.
    pub fn bytes(&self) -> u64 {
        (self.sets.len() * WAYS) as u64 * ENTRY_BYTES
    }

    /// The set of home `home` of `leaf` (reduced by a multiply, not a division).
    fn set(&self, leaf: GlobalAddr, home: usize) -> &Set {
        let h = mix64(leaf.raw() ^ (home as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        &self.sets[((u128::from(h) * self.sets.len() as u128) >> 64) as usize]
    }

    /// Records an access to `key`, of home `home`, at (`leaf`, `slot`).
    pub fn touch(&self, leaf: GlobalAddr, home: usize, slot: usize, key: u64) {
        let set = self.set(leaf, home);
        let fp = fingerprint(key);
        let mut victim = (u32::MAX, 0);
        for (i, w) in set.0.iter().enumerate() {
            let way = Way::load(w);
            if way.holds(leaf, slot) {
                let count =
                    if way.fp == fp { way.count.saturating_add(1).min(COUNT_CAP) } else { 1 };
                if (way.fp, way.count) != (fp, count) {
                    w[1].store(Way::meta(slot, fp, count), Relaxed);
                }
                return;
            }
            victim = victim.min((way.count, i));
        }
        let w = &set.0[victim.1];
        w[1].store(Way::meta(slot, fp, 1), Relaxed);
        w[0].store(leaf.raw(), Relaxed);
    }

    /// The hottest buffered slot of the neighbourhood of home `home` in `leaf` whose fingerprint
    /// matches `key` (of that home).
    pub fn best(&self, leaf: GlobalAddr, home: usize, key: u64) -> Option<usize> {
        let fp = fingerprint(key);
        let mut best: Option<(u32, usize)> = None;
        for w in &self.set(leaf, home).0 {
            let way = Way::load(w);
            let slot = way.slot as usize;
            let inside = slot < self.leaf.span && self.leaf.dist(home, slot) < self.leaf.h;
            if way.count > 0
                && way.leaf == leaf.raw()
                && way.fp == fp
                && inside
                && best.is_none_or(|(c, _)| way.count > c)
            {
                best = Some((way.count, slot));
            }
        }
        best.map(|(_, s)| s)
    }

    /// Forgets (`leaf`, `slot`), filed under `home`, after a wrong speculation.
    pub fn forget(&self, leaf: GlobalAddr, home: usize, slot: usize) {
        for w in &self.set(leaf, home).0 {
            if Way::load(w).holds(leaf, slot) {
                w[1].store(0, Relaxed);
                w[0].store(0, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaves of 64 slots, neighbourhoods of 8.
    fn layout() -> LeafLayout {
        LeafLayout::new(64, 8).expect("a layout")
    }

    #[test]
    fn lfu_within_a_set_and_fingerprint_reset() {
        let h = Hotspots::new(0, layout()); // one set
        let leaf = GlobalAddr::new(0, 0x1000);
        h.touch(leaf, 0, 3, 42);
        h.touch(leaf, 0, 3, 42);
        assert_eq!(h.best(leaf, 0, 42), Some(3));
        assert_eq!(h.best(leaf, 0, 43), None, "fingerprint must match");
        assert_eq!(h.best(leaf, 4, 42), None, "slot 3 is outside 4 .. 12");
        assert_eq!(h.best(GlobalAddr::new(0, 0x2000), 0, 42), None, "another leaf");
        // Another key seen in the same slot resets the counter and the fingerprint.
        h.touch(leaf, 0, 3, 77);
        assert_eq!(h.best(leaf, 0, 42), None);
        assert_eq!(h.best(leaf, 0, 77), Some(3));
        // The hotter of two candidates wins.
        h.touch(leaf, 0, 5, 77);
        h.touch(leaf, 0, 5, 77);
        assert_eq!(h.best(leaf, 0, 77), Some(5));
        h.forget(leaf, 0, 5);
        assert_eq!(h.best(leaf, 0, 77), Some(3));
        assert_eq!(h.bytes(), WAYS as u64 * 16);
        assert_eq!(Hotspots::new(30 << 20, layout()).bytes(), 30 << 20);
    }

    #[test]
    fn a_neighbourhood_wraps_and_entries_are_filed_by_home() {
        let h = Hotspots::new(1 << 20, layout());
        let leaf = GlobalAddr::new(1, 0x40_0000);
        // Home 60, H = 8: slots 60 .. 64 and 0 .. 4.
        h.touch(leaf, 60, 62, 1000);
        h.touch(leaf, 60, 1, 1001);
        assert_eq!(h.best(leaf, 60, 1000), Some(62));
        assert_eq!(h.best(leaf, 60, 1001), Some(1));
        // Filed under home 60, found from home 60 only.
        assert_eq!(h.best(leaf, 61, 1001), None);
        h.forget(leaf, 60, 1);
        assert_eq!(h.best(leaf, 60, 1001), None);
        assert_eq!(h.best(leaf, 60, 1000), Some(62));
    }

    #[test]
    fn only_slots_inside_the_neighbourhood_are_offered() {
        let h = Hotspots::new(0, layout()); // one set: every entry competes with every other
        let leaf = GlobalAddr::new(0, 0x1000);
        // Home 60, H = 8: slots 60 ..= 63 and 0 ..= 3; slot 4 is one past the end.
        h.touch(leaf, 60, 3, 7);
        assert_eq!(h.best(leaf, 60, 7), Some(3));
        h.forget(leaf, 60, 3);
        h.touch(leaf, 60, 4, 7);
        assert_eq!(h.best(leaf, 60, 7), None, "slot 4 is outside 60 .. 68 (mod 64)");
        // A torn way naming slot 64, or any slot past the span, is never offered.
        let fp = fingerprint(7);
        for (w, slot) in h.sets[0].0.iter().zip([64usize, 0xFFFF, 100, 65, 66, 127, 0x8000, 200]) {
            w[1].store(Way::meta(slot, fp, 5), Relaxed);
            w[0].store(leaf.raw(), Relaxed);
        }
        assert_eq!(h.best(leaf, 60, 7), None);
        assert_eq!(h.best(leaf, 0, 7), None);
    }

    /// Threads touch, consult and forget entries of one buffer at once, over a few leaves and
    /// homes: whatever ways they tear or overwrite, `best` offers only a slot of the
    /// neighbourhood asked about.
    #[test]
    fn racing_threads_get_only_slots_of_the_neighbourhood() {
        let h = Hotspots::new(WAYS as u64 * ENTRY_BYTES * 2, layout()); // two sets: conflicts
        assert_eq!(h.sets.len(), 2);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    let mut x = t + 1;
                    for _ in 0..20_000 {
                        x = mix64(x);
                        let leaf = GlobalAddr::new(0, 0x1000 * (1 + x % 3));
                        let home = (x >> 8) as usize % 64;
                        let slot = (home + (x >> 16) as usize % 8) % 64;
                        let key = (x >> 24) % 16;
                        match x % 3 {
                            0 => h.touch(leaf, home, slot, key),
                            1 => h.forget(leaf, home, slot),
                            _ => {
                                if let Some(s) = h.best(leaf, home, key) {
                                    assert!(s < 64 && (s + 64 - home) % 64 < 8, "{s} from {home}");
                                }
                            }
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn counts_saturate_and_eviction_keeps_hot_entries() {
        let h = Hotspots::new(0, layout());
        let leaf = GlobalAddr::new(0, 0x40);
        for _ in 0..2 * COUNT_CAP {
            h.touch(leaf, 0, 1, 9);
        }
        assert_eq!(Way::load(&h.sets[0].0[0]).count, COUNT_CAP);
        // Many cold entries pass through; the hot one survives wherever it lives.
        for s in 0..10_000u64 {
            h.touch(GlobalAddr::new(0, 0x100000 + 64 * s), 0, 2, s + 100);
        }
        assert_eq!(h.best(leaf, 0, 9), Some(1));
    }

    #[test]
    fn a_set_is_two_aligned_cache_lines_of_eight_sixteen_byte_entries() {
        assert_eq!((std::mem::size_of::<Set>(), std::mem::align_of::<Set>()), (128, 128));
        assert_eq!(Way::meta(0x1234, 0xABCD, 7), 0x1234_ABCD_0000_0007);
        let w = [AtomicU64::new(0x40), AtomicU64::new(Way::meta(5, 0xBEEF, 3))];
        assert_eq!(Way::load(&w), Way { leaf: 0x40, slot: 5, fp: 0xBEEF, count: 3 });
    }
}
