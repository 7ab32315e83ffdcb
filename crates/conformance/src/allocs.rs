//! Heap allocations per operation on an index's hot paths.
//!
//! A test binary installs the counting allocator
//! (`#[global_allocator] static A: dmindex_fabric::alloc_count::CountingAlloc = CountingAlloc;`),
//! and either calls [`assert_within`] with the bounds its design promises, or [`per_op`] to
//! assert its own. Each kind of operation runs
//! over the same keys on a loaded index, one client on the in-process fabric; the counts are
//! averages (splits and other structure changes are amortized over the operations that cause
//! them). [`per_scan`] counts a scan's, into a reused [`ScanBuf`] and as owned pairs.

use dmindex_fabric::alloc_count::allocations;
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex, ScanBuf};

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

/// Allocations per scan of `len` pairs, averaged over scans from each key number of `starts`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScanAllocs {
    /// [`RangeIndex::scan_into`] one buffer, reused (after one warm-up scan into it).
    pub into: f64,
    /// [`RangeIndex::scan`] into a fresh vector of owned pairs.
    pub owned: f64,
}

/// Loads keys `key(0..n)` (values `value(i)`) into a fresh index `I`, scans `len` pairs once
/// into a [`ScanBuf`] to warm it (and the index's per-client state) up, then counts the
/// allocations of a scan of `len` pairs from each key number of `starts`: into that buffer,
/// then as owned pairs. Every scan must return `len` pairs (`key` must be increasing and the
/// starts at least `len` keys from the end); the buffer's must be the owned ones.
pub fn per_scan<I: RangeIndex<LocalTransport>>(
    cfg: &IndexConfig,
    n: u64,
    key: impl Fn(u64) -> Vec<u8>,
    value: impl Fn(u64) -> Vec<u8>,
    len: usize,
    starts: &[u64],
) -> ScanAllocs {
    let services = mn_services(4, I::SERVICES).expect("index services");
    let f = LocalFabric::with_services(
        LocalConfig { node_size: 1 << 30, ..Default::default() },
        services,
    )
    .expect("a local fabric");
    let c = f.client(0).expect("a client");
    let keys: Vec<Vec<u8>> = (0..n).map(&key).collect();
    let froms: Vec<Vec<u8>> = starts.iter().map(|&x| key(x)).collect();
    run_tasks([async {
        let t = I::create(&c, cfg, 0).await.expect("create");
        for (i, k) in keys.iter().enumerate() {
            t.insert(&c, k, &value(i as u64)).await.expect("load");
        }
        let mut buf = ScanBuf::new();
        t.scan_into(&c, &keys[0], len, &mut buf).await.expect("warm-up scan");
        assert_eq!(buf.len(), len, "the warm-up scan returns {len} pairs");
        let per = |before: u64| (allocations() - before) as f64 / froms.len().max(1) as f64;
        let b = allocations();
        for from in &froms {
            t.scan_into(&c, from, len, &mut buf).await.expect("scan_into");
            assert_eq!(buf.len(), len, "a scan into the buffer returns {len} pairs");
        }
        let into = per(b);
        let mut owned = Vec::new();
        let mut total = 0;
        let b = allocations();
        for from in &froms {
            owned = Vec::new();
            t.scan(&c, from, len, &mut owned).await.expect("scan");
            total += owned.len();
        }
        let owned_per = per(b);
        assert_eq!(total, len * froms.len(), "an owned scan returns {len} pairs");
        assert_eq!(owned, buf.to_pairs(), "the buffer holds the owned scan's pairs");
        ScanAllocs { into, owned: owned_per }
    }])
    .remove(0)
}
