//! Heap allocations per operation on the hot paths, counted by a global allocator: a search into
//! a reused buffer allocates nothing (one that returns its value, that value), updates and
//! deletes nothing, inserts less than once on average (splits only: leaf buffers come from a
//! per-CN pool, neighbourhoods and write plans live on the stack, whole-leaf rewrites use the
//! buffer's scratch, cache lines encode and decode in place, hops keep an inline undo log, and
//! RDWC copies nothing when a client is alone on its key).

use dmindex_chime::{Chime, Sherman};
use dmindex_conformance::allocs::{per_op, Allocs};
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::IndexConfig;
use dmindex_prim::rdwc::Rdwc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const N: u64 = 20_000;

fn key(x: u64) -> Vec<u8> {
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes().to_vec()
}

fn value(x: u64) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

fn check(name: &str, a: Allocs) {
    eprintln!("{name}: {a:?}");
    assert_eq!(a.search, 1.0, "{name}: a search allocates only the value it returns");
    assert_eq!(a.search_into, 0.0, "{name}: a search into a reused buffer allocates nothing");
    // Splits allocate (new leaf images, the parent's entries, a cache entry); amortized over
    // the inserts that fill a leaf they stay below one per insert.
    assert!(a.insert <= 1.0, "{name}: {:.2} allocations per insert", a.insert);
    assert_eq!(a.update, 0.0, "{name}: an update allocates nothing");
    assert_eq!(a.delete, 0.0, "{name}: a delete allocates nothing");
}

#[test]
fn allocations_per_operation() {
    let cfg = IndexConfig::default();
    check("chime", per_op::<Chime>(&cfg, N, key, value));
    check("chime+rdwc", per_op::<Rdwc<Chime>>(&cfg, N, key, value));
    check("sherman", per_op::<Sherman>(&cfg, N, key, value));
    check("sherman+rdwc", per_op::<Rdwc<Sherman>>(&cfg, N, key, value));
}
