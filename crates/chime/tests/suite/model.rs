//! CHIME and Sherman against a `BTreeMap` (the conformance kit's model test), single client,
//! across shapes small enough to split often; then CHIME-specific refusals and limits.

use dmindex_chime::{factors_on, Chime, Sherman};
use dmindex_conformance::{model_test, ModelConfig};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, IndexError, Ordered, PointIndex, RangeIndex};
use futures::future::LocalBoxFuture;

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

/// A model test of index `I` of `shape` (span, H, internal span) over `keys` keys.
struct Model {
    cfg: ModelConfig,
}

impl Model {
    fn new(shape: (usize, usize, usize), keys: u64, cases: u32) -> Model {
        let mut cfg = ModelConfig::new(cfg(shape.0, shape.1, shape.2), keys, cases);
        cfg.key = k;
        cfg.value = val;
        Model { cfg }
    }

    /// Values of up to `len` bytes (in blocks when > 8).
    fn values(mut self, len: usize) -> Model {
        self.cfg.index.max_value = len;
        self
    }

    /// Keys of up to 12 bytes, four per 8-byte prefix.
    fn long_keys(mut self) -> Model {
        self.cfg.index.max_key = 12;
        self.cfg.key = long_key;
        self
    }

    /// Index options (ablation factors). With `speculative=1`, every step's key is searched
    /// twice more (the second READ is speculative when the key is present), and some must hit.
    fn options(mut self, options: &[(String, String)]) -> Model {
        self.cfg.index.extra.extend(options.iter().cloned());
        if options.iter().any(|(k, v)| k == "speculative" && v == "1") {
            self.cfg.search_again = true;
            // (Long keys are never speculated on: their blocks would need reading.)
            if self.cfg.index.max_key == 8 {
                self.cfg.after = Some(|stats, items| {
                    let hits = stats.extra.iter().find(|(n, _)| *n == "speculative_hits");
                    assert!(
                        items == 0 || hits.is_some_and(|h| h.1 > 0),
                        "no speculative hit: {stats:?}"
                    );
                });
            }
        }
        self
    }

    fn chime(self) {
        model_test::<Chime, Ordered>(&self.cfg)
    }

    fn sherman(self) {
        model_test::<Sherman, Ordered>(&self.cfg)
    }
}

#[test]
fn default_shape() {
    Model::new((64, 8, 64), 3000, 24).chime()
}

#[test]
fn tiny_nodes_split_everywhere() {
    Model::new((8, 4, 4), 400, 24).chime()
}

#[test]
fn h2() {
    Model::new((16, 2, 4), 300, 24).chime()
}

#[test]
fn h16() {
    Model::new((32, 16, 4), 500, 24).chime()
}

#[test]
fn wide_h_equals_span() {
    Model::new((8, 8, 4), 300, 24).chime()
}

#[test]
fn indirect_values() {
    Model::new((8, 4, 4), 400, 24).values(100).chime()
}

#[test]
fn speculative_reads() {
    Model::new((8, 4, 4), 300, 24).options(&factors_on(0, &[("speculative", "1")])).chime()
}

#[test]
fn short_inline_values() {
    Model::new((16, 4, 4), 400, 24).values(3).chime()
}

#[test]
fn long_keys_sharing_prefixes() {
    Model::new((8, 4, 4), 400, 24).long_keys().chime()
}

#[test]
fn long_keys_default_shape() {
    Model::new((64, 8, 64), 2000, 24).long_keys().values(24).chime()
}

/// The factor staircase of the paper's Fig. 15, from Sherman (all off) towards CHIME: each prefix
/// of factors on, and one mix with replication off but sibling validation and speculation on.
fn staircase() -> Vec<Vec<(String, String)>> {
    let mut steps: Vec<_> = (1..=4).map(|k| factors_on(k, &[])).collect();
    let mix = [("metadata_replication", "0"), ("sibling_validation", "1"), ("speculative", "1")];
    steps.push(factors_on(1, &mix));
    steps
}

#[test]
fn sherman_default_shape() {
    Model::new((64, 8, 64), 3000, 12).sherman()
}

#[test]
fn sherman_tiny_nodes() {
    Model::new((8, 4, 4), 400, 12).sherman()
}

#[test]
fn sherman_indirect_and_long_keys() {
    Model::new((8, 4, 4), 400, 12).long_keys().values(24).sherman()
}

#[test]
fn factor_staircase() {
    for step in staircase() {
        Model::new((16, 4, 4), 400, 3).options(&step).sherman()
    }
}

#[test]
fn factors_with_long_keys() {
    for step in staircase() {
        Model::new((8, 4, 4), 400, 3).long_keys().values(24).options(&step).sherman()
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

/// Keys that share their 8-byte prefix (YCSB's `user…` keys share them by the dozen) are told
/// apart by their blocks, all READ in one round trip that also takes the value: a search of any
/// of them costs one round trip more than a search of an 8-byte key in a tree of 8-byte keys
/// (the block after the leaf, as the paper's search of a variable-length item), wherever its
/// entry sits among the others, and so does a key with a prefix of its own.
#[test]
fn keys_sharing_a_prefix_are_told_apart_in_one_round_trip() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let long = IndexConfig { max_key: 12, ..IndexConfig::default() };
    let short = |slot| IndexConfig { root_slot: slot, ..IndexConfig::default() };
    let sharing =
        |n: usize| (0..n).map(|i| format!("user6542{i:03}").into_bytes()).collect::<Vec<_>>();
    run_tasks([async {
        // CHIME keeps at most H (8) keys of one prefix; Sherman's sorted leaf any number.
        let chime = Chime::create(&c, &long, 0).await.unwrap();
        let long_sherman = IndexConfig { root_slot: 2, ..long.clone() };
        let sherman = Sherman::create(&c, &long_sherman, 0).await.unwrap();
        let (chime8, sherman8) = (
            Chime::create(&c, &short(4), 0).await.unwrap(),
            Sherman::create(&c, &short(6), 0).await.unwrap(),
        );
        let rt = |before: u64| c.counts().round_trips - before;
        for (n, t, t8) in
            [(8, &chime as &dyn Probe, &chime8 as &dyn Probe), (30, &sherman, &sherman8)]
        {
            let keys = sharing(n);
            for (i, k) in keys.iter().enumerate() {
                t.put(&c, k, i as u8).await;
                t8.put(&c, &(i as u64 + 1).to_be_bytes(), i as u8).await;
            }
            t.put(&c, b"lone-key", 200).await;
            let before = c.counts().round_trips;
            assert_eq!(t8.get(&c, &1u64.to_be_bytes()).await, Some(0));
            let base = rt(before);
            let before = c.counts().round_trips;
            assert_eq!(t.get(&c, b"lone-key").await, Some(200));
            assert_eq!(rt(before), base + 1, "{n}: a key with a prefix of its own");
            for (i, k) in keys.iter().enumerate() {
                let before = c.counts().round_trips;
                assert_eq!(t.get(&c, k).await, Some(i as u8));
                assert_eq!(rt(before), base + 1, "{n}: {}", String::from_utf8_lossy(k));
            }
            let before = c.counts().round_trips;
            assert_eq!(t.get(&c, b"user6542999").await, None);
            assert!(rt(before) <= base + 1, "{n}: an absent key of a shared prefix");
        }
    }]);
}

/// A scan over long keys READs its pairs' blocks together (they hold the keys), so a longer
/// scan costs more leaves, not a round trip more a pair; what it returns is the model's.
#[test]
fn a_long_key_scan_reads_its_blocks_together() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let cfg = IndexConfig { max_key: 12, ..IndexConfig::default() };
    run_tasks([async {
        let t = Sherman::create(&c, &cfg, 0).await.unwrap();
        let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("user{i:05}").into_bytes()).collect();
        for (i, k) in keys.iter().enumerate() {
            t.insert(&c, k, &[i as u8; 8]).await.unwrap();
        }
        let mut rts = Vec::new();
        for count in [5, 60] {
            let before = c.counts().round_trips;
            let mut got = Vec::new();
            RangeIndex::scan(&t, &c, b"user00100", count, &mut got).await.unwrap();
            rts.push(c.counts().round_trips - before);
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                (100..100 + count).map(|i| (keys[i].clone(), vec![i as u8; 8])).collect();
            assert_eq!(got, want, "scan of {count}");
        }
        assert!(rts[1] <= rts[0] + 3, "a round trip a pair? {rts:?}");
    }]);
}

/// Inserts and searches of one CHIME or Sherman tree, behind one type for the test above.
trait Probe {
    fn put<'a>(
        &'a self,
        c: &'a Client<LocalTransport>,
        k: &'a [u8],
        v: u8,
    ) -> LocalBoxFuture<'a, ()>;
    fn get<'a>(
        &'a self,
        c: &'a Client<LocalTransport>,
        k: &'a [u8],
    ) -> LocalBoxFuture<'a, Option<u8>>;
}

impl<V: dmindex_chime::Variant> Probe for dmindex_chime::ChimeIndex<V> {
    fn put<'a>(
        &'a self,
        c: &'a Client<LocalTransport>,
        k: &'a [u8],
        v: u8,
    ) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move { self.insert(c, k, &[v; 8]).await.unwrap() })
    }

    fn get<'a>(
        &'a self,
        c: &'a Client<LocalTransport>,
        k: &'a [u8],
    ) -> LocalBoxFuture<'a, Option<u8>> {
        Box::pin(async move { self.search(c, k).await.unwrap().map(|v| v[0]) })
    }
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

/// The descriptor word in the slot after the root word: magic 0x62 (7 bits) | hopscotch,
/// replicated, fenced | span (11) | H (5) | internal span (11) | key length (8) | value length (17).
#[test]
fn descriptor_words_are_pinned() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    run_tasks([async {
        let long =
            IndexConfig { max_key: 16, max_value: 100, root_slot: 4, ..IndexConfig::default() };
        let sherman = IndexConfig { root_slot: 2, ..IndexConfig::default() };
        Chime::create(&c, &IndexConfig::default(), 0).await.unwrap();
        Sherman::create(&c, &sherman, 0).await.unwrap();
        Chime::create(&c, &long, 0).await.unwrap();
        let word = |slot| c.read_word(dmindex_fabric::layout::root_slot(slot));
        assert_eq!(word(1).await.unwrap(), 0xC580_8080_8010_0008);
        assert_eq!(word(3).await.unwrap(), 0xC440_8080_8010_0008);
        assert_eq!(word(5).await.unwrap(), 0xC580_8080_8020_0064);
        // Another kind of index, or none, at the slot is refused.
        let none = IndexConfig { root_slot: 8, ..IndexConfig::default() };
        let e = Chime::open(&c, &none, 0).await.err().expect("no tree");
        assert!(
            matches!(&e, IndexError::Config(m) if m.starts_with("root slot 8 is empty")),
            "{e}"
        );
        let last = IndexConfig { root_slot: 511, ..IndexConfig::default() };
        let e = Chime::create(&c, &last, 0).await.err().expect("no room");
        assert!(matches!(&e, IndexError::Config(m) if m.contains("no room for the descriptor")));
    }]);
}

/// Options are typed and checked before anything is created; errors name the option.
#[test]
fn bad_options_are_refused_naming_them() {
    use dmindex_chime::ChimeShape;
    let refuse = |kv: &[(&str, &str)], sherman: bool| {
        let extra = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        match ChimeShape::from_config(&IndexConfig { extra, ..IndexConfig::default() }, sherman) {
            Err(IndexError::Config(m)) => m,
            other => panic!("{kv:?}: {other:?}"),
        }
    };
    let e = refuse(&[("spam", "1")], false);
    assert!(e.starts_with("unknown CHIME option 'spam' (known: span, h, internal_span"), "{e}");
    assert_eq!(refuse(&[("span", "x")], false), "option span=x: not a number");
    assert_eq!(refuse(&[("sbv", "2")], false), "option sbv=2: use 0 or 1");
    assert_eq!(
        refuse(&[("internal_span", "2")], false),
        "option internal_span=2: must be in 4..=1024"
    );
    assert!(refuse(&[("speculative", "1")], true).contains("needs hopscotch"));
    assert!(refuse(&[("h", "3")], false).contains("multiple"));
    // A budget whose byte count would wrap (it became a 0-byte buffer) is refused.
    assert_eq!(
        refuse(&[("hotspot_mb", "17592186044416")], false),
        "option hotspot_mb=17592186044416: must be in 0..=16777216"
    );
    // Aliases and order: a later option overrides an earlier one; hotspot_mb implies
    // speculative reads unless they were turned off before it.
    let shape = |kv: &[(&str, &str)]| {
        let extra = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ChimeShape::from_config(&IndexConfig { extra, ..IndexConfig::default() }, false).unwrap()
    };
    assert_eq!(shape(&[("neighbourhood", "4"), ("h", "16")]).h, 16);
    assert!(shape(&[("hotspot_mb", "1")]).speculative);
    assert!(!shape(&[("speculative", "0"), ("hotspot_mb", "1")]).speculative);
    assert!(shape(&[("hotspot_mb", "0"), ("speculative", "1")]).speculative);
    // hotspot_kb sizes it in KiB (a buffer scaled down with the items), with the same rule.
    let kb = shape(&[("hotspot_kb", "100")]);
    assert!(kb.speculative);
    assert_eq!(kb.hotspot_bytes, Some(100 << 10));
    assert_eq!(shape(&[("hotspot_mb", "3"), ("hotspot_kb", "7")]).hotspot_bytes, Some(7 << 10));
    assert!(!shape(&[("hotspot_kb", "0")]).speculative);
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
