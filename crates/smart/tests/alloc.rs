//! Heap allocations per operation on SMART's hot paths, counted by a global allocator (the
//! conformance kit's `assert_within`): a search into a reused buffer allocates nothing, and writes
//! stay within the bounds below on average (structure changes amortized over the operations
//! that cause them).

use dmindex_conformance::allocs::{assert_within, Bounds};
use dmindex_fabric::alloc_count::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn allocations_per_operation() {
    assert_within::<dmindex_smart::Smart>(
        "smart",
        20_000,
        Bounds { search: 2.0, insert: 3.0, update: 0.1, delete: 0.1 },
    );
}
