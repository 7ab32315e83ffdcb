//! Heap allocations of a SCAN, counted by a global allocator: into a reused buffer nothing is
//! allocated per pair, on either side (the client's working vectors come from a per-CN pool and
//! a pair goes from the item's bytes into the buffer; the memory node writes pairs straight into
//! its reply). What is left is per request: the RPC's messages and the memory node's partition
//! lists, 13 allocations for a 100-pair scan on `local` (437 before, 2 per pair on each side).

use dmindex_conformance::allocs::per_scan;
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_histore::HiStore;
use dmindex_index::IndexConfig;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn a_scan_allocates_per_request_not_per_pair() {
    let n = 5_000;
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (n - 100)).collect();
    let key = |x: u64| (0x0100_0000_0000_0000 + x).to_be_bytes().to_vec();
    let value = |x: u64| x.to_le_bytes().to_vec();
    let a = per_scan::<HiStore>(&IndexConfig::default(), n, key, value, 100, &starts);
    eprintln!("histore: {a:?}");
    assert!(a.into <= 16.0, "{:.1} allocations per 100-pair scan into a buffer", a.into);
}
