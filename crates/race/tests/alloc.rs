//! Heap allocations per operation on RACE's hot paths, counted by a global allocator (the
//! conformance kit's `assert_within`): a search into a reused buffer allocates nothing, and writes
//! stay within the bounds below on average (structure changes amortized over the operations
//! that cause them).

use dmindex_conformance::allocs::{assert_within, Bounds};
use dmindex_fabric::alloc_count::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn allocations_per_operation() {
    assert_within::<dmindex_race::Race>(
        "race",
        20_000,
        Bounds { search: 2.0, insert: 1.0, update: 0.0, delete: 0.0 },
    );
    // In the same test: the counting allocator is global, so tests in parallel would count
    // each other. The global-lock resize re-reads the directory into a pooled buffer; its
    // splits allocate the new segment's image, amortized like RACE's.
    assert_within::<dmindex_race::RaceSepHash>(
        "race-sephash",
        20_000,
        Bounds { search: 2.0, insert: 1.0, update: 0.0, delete: 0.0 },
    );
}
