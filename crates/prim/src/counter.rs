//! Index counters: relaxed atomics a compute node's clients bump on their slow paths and
//! `stats` reads. Relaxed is enough: a counter orders nothing, it is only summed at the end.

use std::sync::atomic::{AtomicU64, Ordering};

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
