//! Heap allocations per operation on the hot paths, counted by a global allocator: a search into
//! a reused buffer allocates nothing (one that returns its value, that value), updates and
//! deletes nothing, inserts less than once on average (splits only: leaf buffers come from a
//! per-CN pool, neighbourhoods and write plans live on the stack, whole-leaf rewrites use the
//! buffer's scratch, cache lines encode and decode in place, hops keep an inline undo log, and
//! RDWC copies nothing when a client is alone on its key). A scan of 100 pairs into a reused
//! buffer allocates nothing either (the tree's scan vectors come from a per-CN pool, the
//! doorbell's verbs and leaf buffers sit on the stack).

use std::sync::Mutex;

use dmindex_chime::{Chime, Sherman};
use dmindex_conformance::allocs::{per_op, per_scan, Allocs};
use dmindex_fabric::alloc_count::CountingAlloc;
use dmindex_index::IndexConfig;
use dmindex_prim::rdwc::Rdwc;

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
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = IndexConfig::default();
    check("chime", per_op::<Chime>(&cfg, N, key, value));
    check("chime+rdwc", per_op::<Rdwc<Chime>>(&cfg, N, key, value));
    check("sherman", per_op::<Sherman>(&cfg, N, key, value));
    check("sherman+rdwc", per_op::<Rdwc<Sherman>>(&cfg, N, key, value));
}

/// Increasing 8-byte keys (CHIME reserves the all-zero one), so that a scan from key number `x`
/// returns the pairs of `x, x + 1, …`.
fn ordered(x: u64) -> Vec<u8> {
    (x + 1).to_be_bytes().to_vec()
}

#[test]
fn a_scan_into_a_reused_buffer_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = IndexConfig::default();
    // 100-pair scans from 200 places spread over 20 000 keys, after one warm-up scan.
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (N - 100)).collect();
    for (name, a) in [
        ("chime", per_scan::<Chime>(&cfg, N, ordered, value, 100, &starts)),
        ("chime+rdwc", per_scan::<Rdwc<Chime>>(&cfg, N, ordered, value, 100, &starts)),
        ("sherman", per_scan::<Sherman>(&cfg, N, ordered, value, 100, &starts)),
        ("sherman+rdwc", per_scan::<Rdwc<Sherman>>(&cfg, N, ordered, value, 100, &starts)),
    ] {
        eprintln!("{name}: {a:?}");
        assert_eq!(a.into, 0.0, "{name}: allocations per 100-pair scan into a reused buffer");
        assert!(a.owned >= 200.0, "{name}: owned pairs are two allocations each ({a:?})");
    }
}

/// Keys longer than 8 bytes, `share` of them on each 8-byte prefix (YCSB's own keys share them
/// by the dozen), in key order: the `x`-th is the prefix `x / share` and a suffix.
fn sharing(share: u64) -> impl Fn(u64) -> Vec<u8> {
    move |x| format!("{:08}-{:02}", x / share, x % share).into_bytes()
}

/// A long key's search READs the blocks sharing its prefix into the caller's buffer (which grows
/// once, to a round of first READs), and a long-key scan reads its pairs' blocks into the scan's
/// pooled vectors: into reused buffers, neither allocates after that.
#[test]
fn long_keys_sharing_prefixes_search_and_scan_without_allocating() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = IndexConfig { max_key: 12, ..IndexConfig::default() };
    let starts: Vec<u64> = (0..200).map(|i| i * 97 % (N - 100)).collect();
    // CHIME keeps at most H (8) keys of one prefix; Sherman's sorted leaf more.
    for (name, share) in [("chime", 8), ("sherman", 20)] {
        let a = match name {
            "chime" => per_op::<Chime>(&cfg, N, sharing(share), value),
            _ => per_op::<Sherman>(&cfg, N, sharing(share), value),
        };
        eprintln!("{name}, long keys: {a:?}");
        // Once: the buffer grows from a value's length to a round of first READs.
        let grown = a.search_into * N as f64;
        assert!(grown <= 1.0, "{name}: {grown} allocations over {N} long-key searches");
        let s = match name {
            "chime" => per_scan::<Chime>(&cfg, N, sharing(share), value, 100, &starts),
            _ => per_scan::<Sherman>(&cfg, N, sharing(share), value, 100, &starts),
        };
        eprintln!("{name}, long keys: {s:?}");
        assert_eq!(s.into, 0.0, "{name}: a long-key scan into a reused buffer");
    }
}
