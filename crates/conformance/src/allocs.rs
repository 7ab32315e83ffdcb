//! Heap allocations per operation on an index's hot paths.
//!
//! A test binary installs the counting allocator
//! (`#[global_allocator] static A: dmindex_fabric::alloc_count::CountingAlloc = CountingAlloc;`),
//! and either calls [`assert_within`] with the bounds its design promises, or [`per_op`] to
//! assert its own. Each kind of operation runs
//! over the same keys on a loaded index, one client on the in-process fabric; the counts are
//! averages (splits and other structure changes are amortized over the operations that cause
//! them).

use dmindex_fabric::alloc_count::allocations;
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

use dmindex_index::{IndexConfig, PointIndex};

/// Allocations per operation of each kind, averaged.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Allocs {
    /// `search` (which returns its value in a new vector).
    pub search: f64,
    /// `search_into` a buffer reused across searches.
    pub search_into: f64,
    /// `insert` of new keys (splits included).
    pub insert: f64,
    pub update: f64,
    pub delete: f64,
}

/// Most allocations per operation a design promises (on average).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub search: f64,
    pub insert: f64,
    pub update: f64,
    pub delete: f64,
}

/// Counts `I`'s allocations per operation over `n` distinct 16-byte keys with 32-byte values
/// ([`per_op`]) and asserts `bounds`, and that a search into a reused buffer allocates nothing.
pub fn assert_within<I: PointIndex<LocalTransport>>(name: &str, n: u64, bounds: Bounds) {
    let cfg = IndexConfig { max_key: 16, max_value: 32, ..IndexConfig::default() };
    let key = |x: u64| {
        format!("k{:015}", x.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10u64.pow(15)).into_bytes()
    };
    let a = per_op::<I>(&cfg, n, key, |x| vec![x as u8; 32]);
    eprintln!("{name}: {a:?}");
    assert_eq!(a.search_into, 0.0, "a search into a reused buffer allocates nothing");
    assert!(a.search <= bounds.search, "{:.2} allocations per search", a.search);
    assert!(a.insert <= bounds.insert, "{:.2} allocations per insert", a.insert);
    assert!(a.update <= bounds.update, "{:.2} allocations per update", a.update);
    assert!(a.delete <= bounds.delete, "{:.2} allocations per delete", a.delete);
}

/// Loads `n` keys made by `key` (values `value(i)`) into a fresh index `I`, then counts the
/// allocations of `n` operations of each kind: searches, searches into one buffer, inserts of
/// `n` new keys, updates and deletes of the first `n`.
pub fn per_op<I: PointIndex<LocalTransport>>(
    cfg: &IndexConfig,
    n: u64,
    key: impl Fn(u64) -> Vec<u8>,
    value: impl Fn(u64) -> Vec<u8>,
) -> Allocs {
    let f = LocalFabric::new(LocalConfig { node_size: 1 << 30, ..Default::default() })
        .expect("a local fabric");
    let c = f.client(0).expect("a client");
    let keys: Vec<Vec<u8>> = (0..2 * n).map(&key).collect();
    let values: Vec<Vec<u8>> = (0..2 * n).map(&value).collect();
    run_tasks([async {
        let t = I::create(&c, cfg, 0).await.expect("create");
        for i in 0..n as usize {
            t.insert(&c, &keys[i], &values[i]).await.expect("load");
        }
        let per = |before: u64| (allocations() - before) as f64 / n as f64;
        let mut a = Allocs::default();
        let b = allocations();
        for k in &keys[..n as usize] {
            assert!(t.search(&c, k).await.expect("search").is_some(), "a loaded key is found");
        }
        a.search = per(b);
        let mut out = Vec::with_capacity(values.iter().map(Vec::len).max().unwrap_or(0));
        let b = allocations();
        for k in &keys[..n as usize] {
            assert!(t.search_into(&c, k, &mut out).await.expect("search_into"));
        }
        a.search_into = per(b);
        let b = allocations();
        for i in n as usize..2 * n as usize {
            t.insert(&c, &keys[i], &values[i]).await.expect("insert");
        }
        a.insert = per(b);
        let b = allocations();
        for i in 0..n as usize {
            assert!(t.update(&c, &keys[i], &values[i + n as usize]).await.expect("update"));
        }
        a.update = per(b);
        let b = allocations();
        for k in &keys[..n as usize] {
            assert!(t.delete(&c, k).await.expect("delete"));
        }
        a.delete = per(b);
        a
    }])
    .remove(0)
}
