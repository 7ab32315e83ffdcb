//! Heap allocations per operation on Plush's hot paths, counted by a global allocator (the
//! conformance kit's `assert_within`): a search into a reused buffer allocates nothing (the
//! owned `search` allocates the value it returns), and writes stay within the bounds below on
//! average: an update or delete also puts a new entry in its top bucket, so each kind of write
//! pays its share of the migrations, which build their key lists and runs on the heap (measured
//! here: 0.45 an insert, 0.46 an update, 0.14 a delete).

use dmindex_conformance::allocs::{assert_within, Bounds};
use dmindex_fabric::alloc_count::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn allocations_per_operation() {
    assert_within::<dmindex_plush::Plush>(
        "plush",
        20_000,
        Bounds { search: 1.0, insert: 1.0, update: 1.0, delete: 1.0 },
    );
}
