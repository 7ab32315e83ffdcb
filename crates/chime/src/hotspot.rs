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
//! search falls back to the neighbourhood READ with full validation.
//!
//! # Structure
//!
//! A set-associative table (4 ways a set) with least-frequently-used replacement inside a set:
//! bounded, lock-sharded, and deterministic (no hash-map iteration), so simulator runs replay.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use dmindex_fabric::GlobalAddr;
use dmindex_prim::hash::{fingerprint, mix64};

/// Bytes an entry costs, as the paper counts them (8-B leaf address, 2-B slot, 2-B fingerprint,
/// 4-B counter).
pub const ENTRY_BYTES: u64 = 16;
const WAYS: usize = 4;
const SHARDS: usize = 64;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Way {
    leaf: u64,
    slot: u16,
    fp: u16,
    count: u32,
}

/// A CN's hotspot buffer.
pub struct Hotspots {
    shards: Vec<Mutex<Vec<[Way; WAYS]>>>,
    sets_per_shard: usize,
    /// Speculative READs issued, and those that found their key.
    pub attempts: AtomicU64,
    pub hits: AtomicU64,
}

impl Hotspots {
    /// A buffer of about `budget` bytes (at least one set per shard).
    pub fn new(budget: u64) -> Hotspots {
        let entries = (budget / ENTRY_BYTES) as usize;
        let sets_per_shard = (entries / WAYS / SHARDS).max(1);
        Hotspots {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(vec![[Way::default(); WAYS]; sets_per_shard]))
                .collect(),
            sets_per_shard,
            attempts: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    /// Bytes the buffer holds room for.
    pub fn bytes(&self) -> u64 {
        (SHARDS * self.sets_per_shard * WAYS) as u64 * ENTRY_BYTES
    }

    fn place(&self, leaf: GlobalAddr, slot: usize) -> (usize, usize) {
        let h = mix64(leaf.raw() ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        ((h % SHARDS as u64) as usize, ((h >> 16) % self.sets_per_shard as u64) as usize)
    }

    /// Records an access to `key` at (`leaf`, `slot`).
    pub fn touch(&self, leaf: GlobalAddr, slot: usize, key: u64) {
        let (shard, set) = self.place(leaf, slot);
        let fp = fingerprint(key);
        let mut g = self.shards[shard].lock().expect("hotspot lock");
        let ways = &mut g[set];
        if let Some(w) =
            ways.iter_mut().find(|w| w.count > 0 && w.leaf == leaf.raw() && w.slot == slot as u16)
        {
            if w.fp == fp {
                w.count = w.count.saturating_add(1);
            } else {
                w.fp = fp;
                w.count = 1;
            }
            return;
        }
        let victim = ways.iter_mut().min_by_key(|w| w.count).expect("ways");
        *victim = Way { leaf: leaf.raw(), slot: slot as u16, fp, count: 1 };
    }

    /// The hottest buffered slot of `slots` in `leaf` whose fingerprint matches `key`.
    pub fn best(
        &self,
        leaf: GlobalAddr,
        slots: impl Iterator<Item = usize>,
        key: u64,
    ) -> Option<usize> {
        let fp = fingerprint(key);
        let mut best: Option<(u32, usize)> = None;
        for slot in slots {
            let (shard, set) = self.place(leaf, slot);
            let g = self.shards[shard].lock().expect("hotspot lock");
            if let Some(w) = g[set].iter().find(|w| {
                w.count > 0 && w.leaf == leaf.raw() && w.slot == slot as u16 && w.fp == fp
            }) {
                if best.is_none_or(|(c, _)| w.count > c) {
                    best = Some((w.count, slot));
                }
            }
        }
        best.map(|(_, s)| s)
    }

    /// Forgets (`leaf`, `slot`) after a wrong speculation.
    pub fn forget(&self, leaf: GlobalAddr, slot: usize) {
        let (shard, set) = self.place(leaf, slot);
        let mut g = self.shards[shard].lock().expect("hotspot lock");
        if let Some(w) = g[set].iter_mut().find(|w| w.leaf == leaf.raw() && w.slot == slot as u16) {
            *w = Way::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfu_within_a_set_and_fingerprint_reset() {
        let h = Hotspots::new(0); // one set per shard
        let leaf = GlobalAddr::new(0, 0x1000);
        h.touch(leaf, 3, 42);
        h.touch(leaf, 3, 42);
        assert_eq!(h.best(leaf, 0..8, 42), Some(3));
        assert_eq!(h.best(leaf, 0..8, 43), None, "fingerprint must match");
        // Another key seen in the same slot resets the counter and the fingerprint.
        h.touch(leaf, 3, 77);
        assert_eq!(h.best(leaf, 0..8, 42), None);
        assert_eq!(h.best(leaf, 0..8, 77), Some(3));
        // The hotter of two candidates wins.
        h.touch(leaf, 5, 77);
        h.touch(leaf, 5, 77);
        assert_eq!(h.best(leaf, 0..8, 77), Some(5));
        h.forget(leaf, 5);
        assert_eq!(h.best(leaf, 0..8, 77), Some(3));
        assert_eq!(h.bytes(), (SHARDS * WAYS) as u64 * 16);
        assert_eq!(Hotspots::new(30 << 20).bytes() / 16 * 16, Hotspots::new(30 << 20).bytes());
    }

    #[test]
    fn eviction_keeps_hot_entries() {
        let h = Hotspots::new(0);
        let leaf = GlobalAddr::new(0, 0x40);
        for _ in 0..50 {
            h.touch(leaf, 1, 9);
        }
        // Many cold entries pass through; the hot one survives wherever it lives.
        for s in 0..10_000u64 {
            h.touch(GlobalAddr::new(0, 0x100000 + 64 * s), 2, s + 100);
        }
        assert_eq!(h.best(leaf, 0..4, 9), Some(1));
    }
}
