//! CHIME against a `BTreeMap`, single client, across shapes small enough to split often.

use std::collections::BTreeMap;

use dmindex_chime::{Chime, Sherman};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, IndexError, RangeIndex};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Search(u64),
    Insert(u64, u8),
    Update(u64, u8),
    Delete(u64),
    Scan(u64, u8),
    ScanRange(u64, u64),
}

fn ops(keys: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (1..=keys).prop_map(Op::Search),
        5 => (1..=keys, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (1..=keys, any::<u8>()).prop_map(|(k, v)| Op::Update(k, v)),
        2 => (1..=keys).prop_map(Op::Delete),
        1 => (1..=keys, 0..30u8).prop_map(|(k, n)| Op::Scan(k, n)),
        1 => (1..=keys, 1..=keys).prop_map(|(a, b)| Op::ScanRange(a, b)),
    ];
    prop::collection::vec(op, 1..600)
}

/// An in-process cluster of one memory node.
fn fabric(node_size: u64, chunk_size: u64) -> LocalFabric {
    LocalFabric::new(LocalConfig { node_size, chunk_size, ..Default::default() }).unwrap()
}

fn cfg(span: usize, h: usize, internal: usize) -> IndexConfig {
    IndexConfig {
        extra: vec![
            ("span".into(), span.to_string()),
            ("h".into(), h.to_string()),
            ("internal_span".into(), internal.to_string()),
        ],
        cache_bytes: 1 << 20,
        ..IndexConfig::default()
    }
}

fn k(x: u64) -> Vec<u8> {
    // Runs of 4 consecutive integers spread over the key space: separators (a leaf's largest
    // key + 1) are then often real keys, which exercises every boundary.
    ((x >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 4).wrapping_add(x & 3).to_be_bytes().to_vec()
}

fn run_model(shape: (usize, usize, usize), ops: Vec<Op>) {
    run_model_values(shape, ops, 8)
}

fn run_model_values(shape: (usize, usize, usize), ops: Vec<Op>, vlen: usize) {
    run_model_with(shape, ops, vlen, 8, k)
}

/// Long keys: groups of 4 keys share their first 8 bytes (one of them is exactly those 8
/// bytes, one is shorter than 8 and so zero-padded), so every lookup must tell same-prefix
/// entries apart through their blocks.
fn long_key(x: u64) -> Vec<u8> {
    let g = (x >> 2).wrapping_mul(2_654_435_761) % 100_000_000;
    let mut key = format!("{g:08}").into_bytes();
    match x & 3 {
        0 => {}
        1 => key.extend_from_slice(b"-a"),
        2 => key.extend_from_slice(b"-bbb"),
        _ => key.truncate(5),
    }
    key
}

/// Values of `len` bytes derived from `v`, varying in length when indirect (> 8).
fn val(v: u8, len: usize) -> Vec<u8> {
    if len <= 8 {
        vec![v; len]
    } else {
        vec![v; 1 + (v as usize * 7) % len]
    }
}

fn run_model_with(
    shape: (usize, usize, usize),
    ops: Vec<Op>,
    vlen: usize,
    key_len: usize,
    k: fn(u64) -> Vec<u8>,
) {
    run_model_full::<Chime>(shape, ops, vlen, key_len, k, &[])
}

/// Index `I` with `options` (ablation factors). With `speculative=1`, every operation's key is
/// searched twice more (the second READ is speculative when the key is present).
fn run_model_full<I: RangeIndex<LocalTransport>>(
    shape: (usize, usize, usize),
    ops: Vec<Op>,
    vlen: usize,
    key_len: usize,
    k: fn(u64) -> Vec<u8>,
    options: &[(&str, &str)],
) {
    let f = fabric(64 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let mut cfg =
        IndexConfig { max_value: vlen, max_key: key_len, ..cfg(shape.0, shape.1, shape.2) };
    cfg.extra.extend(options.iter().map(|(a, b)| (a.to_string(), b.to_string())));
    let speculative = options.contains(&("speculative", "1"));
    run_tasks([async {
        let t = I::create(&c, &cfg, 0).await.unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for op in ops {
            let touched = match op {
                Op::Search(x) | Op::Insert(x, _) | Op::Update(x, _) | Op::Delete(x) => x,
                Op::Scan(x, _) | Op::ScanRange(x, _) => x,
            };
            match op {
                Op::Search(x) => assert_eq!(
                    t.search(&c, &k(x)).await.unwrap(),
                    model.get(&k(x)).cloned(),
                    "search {x}"
                ),
                Op::Insert(x, v) => {
                    t.insert(&c, &k(x), &val(v, vlen)).await.unwrap();
                    model.insert(k(x), val(v, vlen));
                }
                Op::Update(x, v) => {
                    let had = model.contains_key(&k(x));
                    assert_eq!(
                        t.update(&c, &k(x), &val(v, vlen)).await.unwrap(),
                        had,
                        "update {x}"
                    );
                    if had {
                        model.insert(k(x), val(v, vlen));
                    }
                }
                Op::Delete(x) => assert_eq!(
                    t.delete(&c, &k(x)).await.unwrap(),
                    model.remove(&k(x)).is_some(),
                    "delete {x}"
                ),
                Op::Scan(x, n) => {
                    let mut out = Vec::new();
                    t.scan(&c, &k(x), n as usize, &mut out).await.unwrap();
                    let want: Vec<_> = model
                        .range(k(x)..)
                        .take(n as usize)
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .collect();
                    assert_eq!(out, want, "scan from {x} × {n}");
                }
                Op::ScanRange(a, b) => {
                    let (lo, hi) = (k(a), k(b));
                    let mut out = Vec::new();
                    t.scan_range(&c, &lo, &hi, &mut out).await.unwrap();
                    let want: Vec<_> = if lo < hi {
                        model
                            .range(lo.clone()..hi.clone())
                            .map(|(a, b)| (a.clone(), b.clone()))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    assert_eq!(out, want, "scan [{a}, {b})");
                }
            }
            if speculative {
                for _ in 0..2 {
                    let got = t.search(&c, &k(touched)).await.unwrap();
                    assert_eq!(got, model.get(&k(touched)).cloned(), "search {touched} after op");
                }
            }
        }
        // (Long keys are never speculated on: their blocks would need reading.)
        if speculative && key_len == 8 && !model.is_empty() {
            let stats = t.stats();
            let hits = stats.extra.iter().find(|(n, _)| *n == "speculative_hits").map(|(_, v)| *v);
            assert!(hits.unwrap_or(0) > 0, "no speculative hit: {stats:?}");
        }
        // Everything is still there, through a fresh handle with a cold cache.
        let other = I::open(&c, &cfg, 1).await.unwrap();
        let mut all = Vec::new();
        let first: &[u8] = if key_len == 8 { &[0, 0, 0, 0, 0, 0, 0, 1] } else { &[1] };
        other.scan(&c, first, usize::MAX, &mut all).await.unwrap();
        assert_eq!(all, model.clone().into_iter().collect::<Vec<_>>());
        for (key, v) in &model {
            assert_eq!(other.search(&c, key).await.unwrap().as_ref(), Some(v));
        }
    }]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn default_shape(ops in ops(3000)) { run_model((64, 8, 64), ops) }

    #[test]
    fn tiny_nodes_split_everywhere(ops in ops(400)) { run_model((8, 4, 4), ops) }

    #[test]
    fn h2(ops in ops(300)) { run_model((16, 2, 4), ops) }

    #[test]
    fn h16(ops in ops(500)) { run_model((32, 16, 4), ops) }

    #[test]
    fn wide_h_equals_span(ops in ops(300)) { run_model((8, 8, 4), ops) }

    #[test]
    fn indirect_values(ops in ops(400)) { run_model_values((8, 4, 4), ops, 100) }

    #[test]
    fn speculative_reads(ops in ops(300)) {
        run_model_full::<Chime>((8, 4, 4), ops, 8, 8, k, &[("speculative", "1")])
    }

    #[test]
    fn short_inline_values(ops in ops(400)) { run_model_values((16, 4, 4), ops, 3) }

    #[test]
    fn long_keys_sharing_prefixes(ops in ops(400)) { run_model_with((8, 4, 4), ops, 8, 12, long_key) }

    #[test]
    fn long_keys_default_shape(ops in ops(2000)) { run_model_with((64, 8, 64), ops, 24, 12, long_key) }
}

/// The factor staircase of the paper's Fig. 15, from Sherman (all off) towards CHIME: each prefix
/// of factors on, and one mix with replication off but sibling validation and speculation on.
const STAIRCASE: [&[(&str, &str)]; 5] = [
    &[("hopscotch", "1")],
    &[("hopscotch", "1"), ("vacancy_piggyback", "1")],
    &[("hopscotch", "1"), ("vacancy_piggyback", "1"), ("metadata_replication", "1")],
    &[
        ("hopscotch", "1"),
        ("vacancy_piggyback", "1"),
        ("metadata_replication", "1"),
        ("sibling_validation", "1"),
    ],
    &[
        ("hopscotch", "1"),
        ("metadata_replication", "0"),
        ("sibling_validation", "1"),
        ("speculative", "1"),
    ],
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn sherman_default_shape(ops in ops(3000)) {
        run_model_full::<Sherman>((64, 8, 64), ops, 8, 8, k, &[])
    }

    #[test]
    fn sherman_tiny_nodes(ops in ops(400)) { run_model_full::<Sherman>((8, 4, 4), ops, 8, 8, k, &[]) }

    #[test]
    fn sherman_indirect_and_long_keys(ops in ops(400)) {
        run_model_full::<Sherman>((8, 4, 4), ops, 24, 12, long_key, &[])
    }

    #[test]
    fn factor_staircase(ops in ops(400), step in 0..STAIRCASE.len()) {
        run_model_full::<Sherman>((16, 4, 4), ops, 8, 8, k, STAIRCASE[step])
    }

    #[test]
    fn factors_with_long_keys(ops in ops(400), step in 0..STAIRCASE.len()) {
        run_model_full::<Sherman>((8, 4, 4), ops, 24, 12, long_key, STAIRCASE[step])
    }
}

#[test]
fn bulk_load_grows_the_tree_and_reuses_deleted_slots() {
    let f = fabric(256 << 20, 4 << 20);
    let c = f.client(0).unwrap();
    let cfg = cfg(16, 4, 4);
    run_tasks([async {
        let t = Chime::create(&c, &cfg, 0).await.unwrap();
        for x in 1..=5000u64 {
            t.insert(&c, &k(x), &x.to_le_bytes()).await.unwrap();
        }
        for x in 1..=5000u64 {
            assert_eq!(t.search(&c, &k(x)).await.unwrap(), Some(x.to_le_bytes().to_vec()));
        }
        let root_word = c.read_word(dmindex_fabric::layout::root_slot(0)).await.unwrap();
        assert!(
            root_word >> 56 >= 4,
            "5000 keys in 16-slot leaves under 4-way nodes need height ≥ 4"
        );
        let before = f.allocated_bytes();
        for x in 1..=2500u64 {
            assert!(t.delete(&c, &k(x)).await.unwrap());
        }
        for x in 10_001..=12_500u64 {
            t.insert(&c, &k(x), &x.to_le_bytes()).await.unwrap();
        }
        let lf = t.load_factor(&c).await.unwrap().unwrap();
        assert!(lf > 0.3, "load factor {lf}");
        let grown = f.allocated_bytes() - before;
        assert!(
            grown < (before / 2),
            "re-inserting after deletes should mostly reuse slots ({grown} new bytes vs {before})"
        );
    }]);
}

#[test]
fn more_than_h_keys_with_one_prefix_is_a_clear_error() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let cfg = IndexConfig { max_key: 12, ..cfg(8, 4, 4) };
    run_tasks([async {
        let t = Chime::create(&c, &cfg, 0).await.unwrap();
        for i in 0..4u8 {
            t.insert(&c, &[b'p', b'r', b'e', b'f', b'i', b'x', b'!', b'!', i], &[i; 8])
                .await
                .unwrap();
        }
        let err = t.insert(&c, b"prefix!!zz", &[9; 8]).await.unwrap_err();
        assert!(
            matches!(&err, IndexError::Full(m) if m.contains("share the 8-byte prefix")),
            "{err}"
        );
        // The tree is intact and unlocked afterwards.
        for i in 0..4u8 {
            let key = [b'p', b'r', b'e', b'f', b'i', b'x', b'!', b'!', i];
            assert_eq!(t.search(&c, &key).await.unwrap(), Some(vec![i; 8]));
            assert!(t.update(&c, &key, &[7; 8]).await.unwrap());
        }
        assert!(matches!(t.insert(&c, &[0; 9], &[1; 8]).await, Err(IndexError::InvalidKey(_))));
        assert!(matches!(
            t.insert(&c, &[1; 13], &[1; 8]).await,
            Err(IndexError::KeyTooLong { .. })
        ));
    }]);
}

#[test]
fn bad_input_is_refused() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    run_tasks([async {
        let t = Chime::create(&c, &IndexConfig::default(), 0).await.unwrap();
        assert!(matches!(t.insert(&c, &[0; 8], &[1; 8]).await, Err(IndexError::InvalidKey(_))));
        assert!(matches!(t.insert(&c, &[1; 9], &[1; 8]).await, Err(IndexError::KeyTooLong { .. })));
        assert!(matches!(t.insert(&c, &[1; 8], &[1; 3]).await, Err(IndexError::Config(_))));
        let bad =
            IndexConfig { extra: vec![("span".into(), "60".into())], ..IndexConfig::default() };
        assert!(
            matches!(Chime::create(&c, &bad, 0).await, Err(IndexError::Config(m)) if m.contains("multiple"))
        );
        let other = IndexConfig { extra: vec![("h".into(), "4".into())], ..IndexConfig::default() };
        assert!(
            matches!(Chime::open(&c, &other, 0).await, Err(IndexError::Config(m)) if m.contains("another shape"))
        );
        assert!(
            matches!(Chime::create(&c, &IndexConfig::default(), 0).await, Err(IndexError::Config(m)) if m.contains("in use"))
        );
    }]);
}

/// Running out of remote memory mid-split is an error, and leaves every node unlocked: the
/// keys inserted so far stay readable and writable.
#[test]
fn out_of_memory_releases_locks() {
    let f = fabric(dmindex_fabric::layout::MIN_REGION * 4, 64 << 10);
    let c = f.client(0).unwrap();
    let cfg = cfg(8, 4, 4);
    run_tasks([async {
        let t = Chime::create(&c, &cfg, 0).await.unwrap();
        let mut inserted = Vec::new();
        let err = loop {
            let x = inserted.len() as u64 + 1;
            match t.insert(&c, &k(x), &[1; 8]).await {
                Ok(()) => inserted.push(x),
                Err(e) => break e,
            }
            assert!(inserted.len() < 100_000, "never ran out of memory");
        };
        assert!(err.to_string().contains("out of memory"), "{err}");
        for &x in &inserted {
            assert_eq!(t.search(&c, &k(x)).await.unwrap(), Some(vec![1; 8]));
            assert!(t.update(&c, &k(x), &[2; 8]).await.unwrap(), "leaf of {x} left locked?");
        }
    }]);
}
