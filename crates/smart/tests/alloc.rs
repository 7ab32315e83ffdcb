//! Heap allocations per operation on SMART's hot paths, counted by a global allocator (the
//! conformance kit's `assert_within`): a search into a reused buffer allocates nothing, and writes
//! stay within the bounds below on average (structure changes amortized over the operations
//! that cause them). A scan into a reused buffer allocates only the images of the inner nodes it
//! finds changed since its CN cached them (it reads every node it lists afresh; one unchanged is
//! the cached copy).

use std::sync::Mutex;

use dmindex_conformance::allocs::{assert_within, per_scan, Bounds};
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::IndexConfig;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// The count is process-wide: the tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn allocations_per_operation() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_within::<dmindex_smart::Smart>(
        "smart",
        20_000,
        Bounds { search: 2.0, insert: 3.0, update: 0.1, delete: 0.1 },
    );
}

#[test]
fn a_scan_into_a_reused_buffer_allocates_only_changed_inner_node_images() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Dense keys: a 100-pair scan reads two or three inner nodes over 100 leaves (it made 1255
    // allocations as owned pairs built per leaf, with a position vector per child; 4 with a
    // decoded image per inner node). About one: a node first met, cached.
    let n = 20_000;
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (n - 100)).collect();
    let key = |x: u64| (0x0100_0000_0000_0000 + x).to_be_bytes().to_vec();
    let value = |x: u64| x.to_le_bytes().to_vec();
    let a = per_scan::<dmindex_smart::Smart>(&IndexConfig::default(), n, key, value, 100, &starts);
    eprintln!("smart: {a:?}");
    assert!(a.into <= 2.0, "{:.2} allocations per 100-pair scan into a buffer", a.into);
}
