//! Heap allocations per operation on the hot paths, counted by a global allocator: a search into
//! a reused buffer allocates nothing (one that returns its value, that value), updates and
//! deletes nothing (leaf images, encodings and the chain's indices live in a per-CN pool of
//! scratch buffers), and inserts only amortized retrains (new models and directories). The
//! first use of a model's leaf table caches a copy (three allocations), which a search or scan
//! that reaches a model first after its retrain pays: a fraction of an allocation per
//! operation, amortized over the model's life.

use std::sync::Mutex;

use dmindex_conformance::allocs::{per_op, per_scan, Allocs};
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::IndexConfig;
use dmindex_prim::rdwc::Rdwc;
use dmindex_rolex::Rolex;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// The count is process-wide: the tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const N: u64 = 20_000;

fn key(x: u64) -> Vec<u8> {
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes().to_vec()
}

fn value(x: u64) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

fn check(name: &str, a: Allocs) {
    eprintln!("{name}: {a:?}");
    assert!(a.search <= 1.001, "{name}: a search allocates the value it returns (and tables)");
    assert!(a.search_into <= 0.001, "{name}: a search into a reused buffer: tables only");
    assert!(a.insert <= 1.0, "{name}: {:.2} allocations per insert", a.insert);
    assert_eq!(a.update, 0.0, "{name}: an update allocates nothing");
    assert_eq!(a.delete, 0.0, "{name}: a delete allocates nothing");
}

#[test]
fn allocations_per_operation() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = IndexConfig::default();
    check("rolex", per_op::<Rolex>(&cfg, N, key, value));
    check("rolex+rdwc", per_op::<Rdwc<Rolex>>(&cfg, N, key, value));
}

#[test]
fn a_scan_into_a_reused_buffer_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = IndexConfig::default();
    let ordered = |x: u64| (x + 1).to_be_bytes().to_vec();
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (N - 100)).collect();
    let a = per_scan::<Rolex>(&cfg, N, ordered, value, 100, &starts);
    eprintln!("rolex: {a:?}");
    // Up to a few dozen models' first-used leaf tables over 200 scans.
    assert!(a.into <= 0.5, "allocations per 100-pair scan into a reused buffer: {a:?}");
}
