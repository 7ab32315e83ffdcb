//! A global allocator that counts allocations, for tests that pin how often a hot path allocates.
//!
//! A test binary installs it with
//! `#[global_allocator] static A: CountingAlloc = CountingAlloc;` and reads [`allocations`]
//! before and after the code it measures. Every call goes to the system allocator unchanged.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCS: AtomicU64 = AtomicU64::new(0);

/// Allocations (and reallocations) so far, process-wide.
pub fn allocations() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// The system allocator, counting.
pub struct CountingAlloc;

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}
