//! Heap allocations per operation on CLevel's hot paths, counted by a global allocator (the
//! conformance kit's `assert_within`): a search into a reused buffer allocates nothing (the
//! owned `search` allocates the value it returns), updates and deletes nothing, and an insert
//! only its share of the drains, whose bucket buffer is their one allocation (measured here:
//! 0.00005 an insert).

use dmindex_conformance::allocs::{assert_within, Bounds};
use dmindex_fabric::alloc_count::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn allocations_per_operation() {
    assert_within::<dmindex_clevel::CLevel>(
        "clevel",
        20_000,
        Bounds { search: 1.0, insert: 0.01, update: 0.0, delete: 0.0 },
    );
}
