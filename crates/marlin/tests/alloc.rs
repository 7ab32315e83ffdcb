//! Heap allocations of a scan, counted by a global allocator: a scan of 100 pairs into a reused
//! buffer allocates nothing once warm (its key, item and READ vectors come from a per-CN pool,
//! leaves and items are READ into one buffer with a doorbell's verbs on the stack, and a value
//! is copied from its item straight into the buffer).

use dmindex_conformance::allocs::per_scan;
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::IndexConfig;
use dmindex_marlin::Marlin;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn a_scan_into_a_reused_buffer_allocates_nothing() {
    let n = 20_000;
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (n - 100)).collect();
    let key = |x: u64| (0x0100_0000_0000_0000 + x).to_be_bytes().to_vec();
    let value = |x: u64| x.to_le_bytes().to_vec();
    let a = per_scan::<Marlin>(&IndexConfig::default(), n, key, value, 100, &starts);
    eprintln!("marlin: {a:?}");
    assert_eq!(a.into, 0.0, "allocations per 100-pair scan into a reused buffer");
    assert!(a.owned >= 200.0, "owned pairs are two allocations each ({a:?})");
}
