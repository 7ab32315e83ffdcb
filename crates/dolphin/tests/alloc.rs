//! Heap allocations of a scan, counted by a global allocator: a scan of 100 pairs into a reused
//! buffer allocates nothing once warm (its vectors come from a per-CN pool, a doorbell's verbs
//! and leaf buffers sit on the stack, a pair's value is copied from the leaf straight into the
//! buffer, and the special nodes come from the cache).

use dmindex_conformance::allocs::per_scan;
use dmindex_dolphin::Dolphin;
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::IndexConfig;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const N: u64 = 20_000;

/// Dense increasing keys (as Dolphin's paper's folded keys are): 256 to a 7-byte prefix.
fn key(x: u64) -> Vec<u8> {
    (0x0100_0000_0000_0000 + x).to_be_bytes().to_vec()
}

fn value(x: u64) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

#[test]
fn a_scan_into_a_reused_buffer_allocates_nothing() {
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (N - 100)).collect();
    let a = per_scan::<Dolphin>(&IndexConfig::default(), N, key, value, 100, &starts);
    eprintln!("dolphin: {a:?}");
    assert_eq!(a.into, 0.0, "allocations per 100-pair scan into a reused buffer");
    assert!(a.owned >= 200.0, "owned pairs are two allocations each ({a:?})");
}
