//! CHIME's fine-grained scans ([`dmindex_chime::FINE_GRAINED_SCAN`]): against a `BTreeMap` over
//! dense integer keys (where scans trim their READs) through splits, deletes and parents cached
//! before other compute nodes split their leaves; and the bytes a short scan READs.

use std::collections::BTreeMap;

use dmindex_chime::{factors_on, Chime, FINE_GRAINED_SCAN, GREEDY_SCAN};
use dmindex_conformance::{model_test, ModelConfig};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, Ordered, PointIndex, RangeIndex, ScanBuf};

fn cfg(span: usize, h: usize, internal: usize, extra: &[(&str, &str)]) -> IndexConfig {
    let mut e = vec![
        ("span".to_string(), span.to_string()),
        ("h".to_string(), h.to_string()),
        ("internal_span".to_string(), internal.to_string()),
    ];
    e.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
    IndexConfig { extra: e, cache_bytes: 1 << 20, ..IndexConfig::default() }
}

/// The conformance kit's model test over dense keys `1..=keys` (its default key: 8-byte
/// big-endian integers), where scans by count and by range trim their READs.
fn dense(c: IndexConfig, keys: u64, cases: u32) {
    model_test::<Chime, Ordered>(&ModelConfig::new(c, keys, cases))
}

#[test]
fn dense_keys_default_shape() {
    dense(cfg(64, 8, 64, &[]), 3000, 16)
}

#[test]
fn dense_keys_tiny_nodes() {
    dense(cfg(8, 4, 4, &[]), 300, 24)
}

#[test]
fn dense_keys_h2_and_h16() {
    dense(cfg(16, 2, 4, &[]), 300, 16);
    dense(cfg(32, 16, 4, &[]), 500, 16);
}

#[test]
fn dense_keys_without_greedy_merging() {
    dense(cfg(64, 8, 8, &[(GREEDY_SCAN, "0")]), 1000, 16)
}

/// Without metadata replication (a header READ joins the runs) and with fence keys instead of
/// sibling-based validation.
#[test]
fn dense_keys_on_other_factor_steps() {
    for step in 1..=4 {
        let mut o = factors_on(step, &[(FINE_GRAINED_SCAN, "1")]);
        o.extend([("span".into(), "16".into()), ("h".into(), "4".into())]);
        let c = IndexConfig { extra: o, cache_bytes: 1 << 20, ..IndexConfig::default() };
        let mut m = ModelConfig::new(c, 400, 6);
        m.max_steps = 400;
        model_test::<dmindex_chime::Sherman, Ordered>(&m);
    }
}

/// With no cache, no round can be planned: every scan goes by whole leaves.
#[test]
fn dense_keys_with_no_cache() {
    dense(IndexConfig { cache_bytes: 0, ..cfg(16, 4, 4, &[]) }, 300, 8)
}

#[test]
fn dense_keys_indirect_values() {
    dense(IndexConfig { max_value: 40, ..cfg(16, 4, 4, &[]) }, 300, 8)
}

fn key(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

/// The pairs of `m` a scan of `n` from `x` returns.
fn want(m: &BTreeMap<u64, u64>, x: u64, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.range(x..).take(n).map(|(k, v)| (key(*k).to_vec(), v.to_le_bytes().to_vec())).collect()
}

/// Scans by count and by range from every `step`-th key against `m`.
async fn scans_agree(t: &Chime, c: &Client<LocalTransport>, m: &BTreeMap<u64, u64>, top: u64) {
    let mut buf = ScanBuf::new();
    for x in (1..top).step_by(7) {
        for n in [1usize, 3, 17, 60, 150] {
            t.scan_into(c, &key(x), n, &mut buf).await.unwrap();
            assert_eq!(buf.to_pairs(), want(m, x, n), "scan from {x} × {n}");
            let hi = x + n as u64;
            t.scan_range_into(c, &key(x), &key(hi), &mut buf).await.unwrap();
            let r: Vec<_> = want(m, x, usize::MAX)
                .into_iter()
                .take_while(|(k, _)| k.as_slice() < key(hi).as_slice())
                .collect();
            assert_eq!(buf.to_pairs(), r, "scan [{x}, {hi})");
        }
    }
}

/// A compute node's cached parents go stale while another splits the leaves under them (and
/// deletes and re-inserts keys): its scans notice (sibling-based validation), drop the parents
/// and still agree with the model.
#[test]
fn scans_through_parents_cached_before_other_nodes_split() {
    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let (ca, cb) = (f.client(0).unwrap(), f.client(1).unwrap());
    let c = cfg(16, 4, 8, &[]);
    run_tasks([async {
        let a = Chime::create(&ca, &c, 0).await.unwrap();
        let b = Chime::open(&cb, &c, 1).await.unwrap();
        let mut m = BTreeMap::new();
        // Every other key, so that the other half later splits the leaves.
        for x in (2..=2000u64).step_by(2) {
            a.insert(&ca, &key(x), &x.to_le_bytes()).await.unwrap();
            m.insert(x, x);
        }
        scans_agree(&a, &ca, &m, 2000).await;
        let before = PointIndex::<LocalTransport>::stats(&a).retries;
        for x in (1..=2000u64).step_by(2) {
            b.insert(&cb, &key(x), &x.to_le_bytes()).await.unwrap();
            m.insert(x, x);
        }
        for x in (3..=2000u64).step_by(5) {
            assert!(b.delete(&cb, &key(x)).await.unwrap());
            m.remove(&x);
        }
        scans_agree(&a, &ca, &m, 2000).await;
        assert!(
            PointIndex::<LocalTransport>::stats(&a).retries > before,
            "no scan met a leaf split under a cached parent"
        );
    }]);
}

/// Bytes and round trips of one scan of `n` from `x` by `t`, warm, and what it returned.
async fn cost(t: &Chime, c: &Client<LocalTransport>, x: u64, n: usize) -> (u64, u64, usize) {
    let mut buf = ScanBuf::new();
    t.scan_into(c, &key(x), n, &mut buf).await.unwrap();
    let before = c.counts();
    t.scan_into(c, &key(x), n, &mut buf).await.unwrap();
    let after = c.counts();
    (after.bytes_read - before.bytes_read, after.round_trips - before.round_trips, buf.len())
}

/// A short scan inside one leaf READs a few neighbourhoods, not the leaf: fewer bytes in the
/// same single round trip; a longer one READs the leaves it covers whole and trims its ends.
#[test]
fn a_short_scan_reads_less_than_a_leaf() {
    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let (fine, whole) = (IndexConfig::default(), {
        let mut w = IndexConfig::default();
        w.extra.push((FINE_GRAINED_SCAN.into(), "0".into()));
        w
    });
    run_tasks([async {
        let t = Chime::create(&c, &fine, 0).await.unwrap();
        for x in 1..=20_000u64 {
            t.insert(&c, &key(x), &x.to_le_bytes()).await.unwrap();
        }
        let u = Chime::open(&c, &whole, 1).await.unwrap();
        let leaf = 1316; // CHIME's default leaf on the wire (64 entries, H = 8, replicas)
        let (mut short_fine, mut short_whole) = (0, 0);
        for x in (1000..19_000).step_by(997) {
            let (bf, rf, nf) = cost(&t, &c, x, 2).await;
            let (bw, rw, nw) = cost(&u, &c, x, 2).await;
            assert_eq!((nf, nw), (2, 2), "scan from {x}");
            assert_eq!(rf, 1, "a short fine-grained scan from {x} is one round trip");
            assert!(rw >= 1);
            // Two neighbourhoods, or one greedy READ of at most half a leaf's entries.
            assert!(bf < leaf as u64 * 2 / 3, "a 2-key scan from {x} READ {bf} bytes");
            assert!(bw >= leaf as u64, "an untrimmed scan reads at least a leaf ({bw})");
            (short_fine, short_whole) = (short_fine + bf, short_whole + bw);
            // 100 keys: whole leaves in the middle, trimmed ends, as many round trips.
            let (bf, rf, nf) = cost(&t, &c, x, 100).await;
            let (bw, rw, nw) = cost(&u, &c, x, 100).await;
            assert_eq!((nf, nw), (100, 100));
            assert!(rf <= rw, "a 100-key scan from {x}: {rf} round trips, whole leaves {rw}");
            assert!(bf < bw, "100 keys from {x}: fine {bf} bytes, whole leaves {bw}");
        }
        assert!(short_fine * 3 < short_whole, "{short_fine} vs {short_whole} bytes");
    }]);
}
