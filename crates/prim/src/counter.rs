//! Index counters: relaxed atomics a compute node's clients bump on their slow paths and
//! `stats` reads. Relaxed is enough: a counter orders nothing, it is only summed at the end.
//!
//! A counter bumped on a fast path (every search) is a [`Striped`] one: one shared word would
//! bounce between the cores of a compute node's client threads on every bump.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// Adds one.
pub fn bump(c: &AtomicU64) {
    add(c, 1);
}

/// Adds `n`.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The count so far.
pub fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Stripes of a [`Striped`] counter: more than the client threads a compute node runs on a
/// small machine; clients beyond share stripes, which stays correct.
const STRIPES: usize = 16;

/// A counter for fast paths: each client bumps the stripe of its ordinal
/// ([`dmindex_fabric::Client::ordinal`], as the RDWC table shards by), so clients on different
/// threads write different cache lines; reading sums the stripes. The stripes (2 KB) live behind
/// a pointer, so that a handle holding a few counters keeps its other fields on few lines.
#[derive(Debug, Default)]
pub struct Striped {
    stripes: Box<[CachePadded<AtomicU64>; STRIPES]>,
}

impl Striped {
    /// Adds one for the client of ordinal `ordinal`.
    #[inline]
    pub fn bump(&self, ordinal: u32) {
        self.add(ordinal, 1);
    }

    /// Adds `n` for the client of ordinal `ordinal`.
    #[inline]
    pub fn add(&self, ordinal: u32, n: u64) {
        add(&self.stripes[ordinal as usize % STRIPES], n);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.stripes.iter().map(|s| get(s)).sum()
    }
}

/// Live pairs per leaf as a compute node's scans saw them, which sizes a scan's next batch of
/// leaf READs.
#[derive(Debug, Default)]
pub struct LeafFill {
    leaves: AtomicU64,
    pairs: AtomicU64,
}

impl LeafFill {
    /// Counts one leaf a scan used, holding `pairs` live pairs.
    pub fn saw(&self, pairs: usize) {
        bump(&self.leaves);
        add(&self.pairs, pairs as u64);
    }

    /// Leaves to READ for `left` more pairs: by the mean live pairs per leaf so far (`guess`
    /// before any), counting the first leaf as half (a scan starts anywhere in it), at least one
    /// and at most `max`.
    pub fn leaves_for(&self, left: usize, guess: usize, max: usize) -> usize {
        let per_leaf = get(&self.pairs).checked_div(get(&self.leaves)).unwrap_or(guess as u64);
        let per_leaf = per_leaf.max(1);
        let need = (left as u64).saturating_add(per_leaf / 2);
        need.div_ceil(per_leaf).clamp(1, max.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_counts_every_clients_bumps() {
        let c = Striped::default();
        std::thread::scope(|s| {
            for ordinal in 0..20 {
                let c = &c;
                s.spawn(move || (0..1000).for_each(|_| c.bump(ordinal)));
            }
        });
        c.bump(u32::MAX);
        assert_eq!(c.get(), 20_001);
        assert_eq!(get(&c.stripes[3]), 2000, "ordinals 3 and 19 share a stripe");
        assert_eq!(get(&c.stripes[4]), 1000);
    }

    #[test]
    fn leaf_fill_sizes_a_scan_round() {
        let f = LeafFill::default();
        assert_eq!(f.leaves_for(100, 20, 16), 6, "(100 + 10) / 20, rounded up, before any leaf");
        f.saw(40);
        f.saw(60);
        assert_eq!(f.leaves_for(100, 20, 16), 3, "(100 + 25) / 50, rounded up");
        assert_eq!(f.leaves_for(0, 20, 16), 1);
        assert_eq!(f.leaves_for(10_000, 20, 16), 16);
    }
}
