//! Heap allocations per operation on RACE's hot paths, counted by a global allocator (the
//! conformance kit's [`per_op`]): a search into a reused buffer allocates nothing, and writes
//! stay within the bounds below on average (structure changes amortized over the operations
//! that cause them).

use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::conformance::allocs::per_op;
use dmindex_index::IndexConfig;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn allocations_per_operation() {
    let cfg = IndexConfig { max_key: 16, max_value: 32, ..IndexConfig::default() };
    let key = |x: u64| format!("k{:015}", x.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10u64.pow(15));
    let value = |x: u64| vec![x as u8; 32];
    let a = per_op::<dmindex_race::Race>(&cfg, 20_000, |x| key(x).into_bytes(), value);
    eprintln!("race: {a:?}");
    assert_eq!(a.search_into, 0.0, "a search into a reused buffer allocates nothing");
    assert!(a.search <= 2.0, "{:.2} allocations per search", a.search);
    assert!(a.insert <= 1.0, "{:.2} allocations per insert", a.insert);
    assert!(a.update <= 0.0, "{:.2} allocations per update", a.update);
    assert!(a.delete <= 0.0, "{:.2} allocations per delete", a.delete);
}
