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

/// Long keys crowded on few prefixes: groups of 24 keys share their first 8 bytes, past what
/// any leaf keeps as plain entries, so they live in collision groups.
fn crowded_key(x: u64) -> Vec<u8> {
    let g = (x / 24).wrapping_mul(2_654_435_761) % 100_000_000;
    let mut key = format!("{g:08}").into_bytes();
    match x % 24 {
        0 => {}
        23 => key.truncate(6),
        i => key.extend_from_slice(format!("-{}", i * 7).as_bytes()),
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

    /// Keys of up to 12 bytes, 24 per 8-byte prefix: collision groups.
    fn crowded_keys(mut self) -> Model {
        self.cfg.index.max_key = 12;
        self.cfg.key = crowded_key;
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
fn crowded_prefixes() {
    Model::new((8, 4, 4), 400, 24).crowded_keys().chime()
}

#[test]
fn crowded_prefixes_default_shape() {
    Model::new((64, 8, 64), 2000, 12).crowded_keys().values(24).chime()
}

#[test]
fn sherman_crowded_prefixes() {
    Model::new((8, 4, 4), 400, 12).crowded_keys().values(24).sherman()
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

/// Keys past what a leaf keeps of one 8-byte prefix go to the prefix's collision group (where
/// the tree refused the fifth of H = 4 before): hundreds of keys of one prefix, beside keys of
/// other prefixes, are inserted, found, updated, deleted down to none and inserted again, and
/// scans return them in key order, against a `BTreeMap`; in CHIME and in Sherman.
#[test]
fn keys_past_a_leafs_share_of_one_prefix_go_to_its_group() {
    let f = fabric(64 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let chime = IndexConfig { max_key: 12, ..cfg(8, 4, 4) };
    let sherman = IndexConfig { root_slot: 2, ..chime.clone() };
    run_tasks([async {
        let chime = Chime::create(&c, &chime, 0).await.unwrap();
        let sherman = Sherman::create(&c, &sherman, 0).await.unwrap();
        for t in [&chime as &dyn Probe, &sherman] {
            let mut model = std::collections::BTreeMap::new();
            // 300 keys of "prefix!!", and a few keys on either side of it.
            let crowd = |i: u32| format!("prefix!!{i}").into_bytes();
            let mut keys: Vec<Vec<u8>> = (0..300).map(crowd).collect();
            keys.extend(
                ["prefix!", "prefix!!", "prefix!\x7f", "prefiy", "a", "zzzzzzzzzzzz"]
                    .map(|k| k.as_bytes().to_vec()),
            );
            for (i, k) in keys.iter().enumerate() {
                t.put(&c, k, i as u8).await;
                model.insert(k.clone(), i as u8);
            }
            for (k, &v) in &model {
                assert_eq!(t.get(&c, k).await, Some(v), "{}", String::from_utf8_lossy(k));
            }
            assert_eq!(t.get(&c, b"prefix!!300").await, None);
            assert_eq!(t.get(&c, b"prefix!!-").await, None);
            for i in (0..300).step_by(3) {
                t.put(&c, &crowd(i), 250).await;
                model.insert(crowd(i), 250);
            }
            for i in (0..300).step_by(2) {
                assert!(t.del(&c, &crowd(i)).await);
                model.remove(&crowd(i));
            }
            assert!(!t.del(&c, &crowd(0)).await);
            let scan = t.scan(&c, b"prefix!!1", 40).await;
            let want: Vec<_> = model
                .range(b"prefix!!1".to_vec()..)
                .take(40)
                .map(|(k, &v)| (k.clone(), v))
                .collect();
            assert_eq!(scan, want);
            // Down to no key of the prefix, then back.
            for i in (1..300).step_by(2) {
                assert!(t.del(&c, &crowd(i)).await);
                model.remove(&crowd(i));
            }
            assert!(!t.del(&c, b"prefix!!299").await);
            for i in 0..20 {
                t.put(&c, &crowd(i), i as u8).await;
                model.insert(crowd(i), i as u8);
            }
            let scan = t.scan(&c, b"\x01", 1000).await;
            let want: Vec<_> = model.iter().map(|(k, &v)| (k.clone(), v)).collect();
            assert_eq!(scan, want);
        }
    }]);
}

/// A prefix shared by 1 500 keys at 255-byte keys (pages of 6 records, directory nodes of 14):
/// the directory grows three levels as keys come in a scattered order, and shrinks back as
/// they leave; reads and scans agree with a model throughout.
#[test]
fn a_directory_grows_levels_and_shrinks_back() {
    let f = fabric(256 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let chime = IndexConfig { max_key: 255, ..IndexConfig::default() };
    let sherman = IndexConfig { root_slot: 2, ..chime.clone() };
    const N: u32 = 1500;
    run_tasks([async {
        let chime = Chime::create(&c, &chime, 0).await.unwrap();
        let sherman = Sherman::create(&c, &sherman, 0).await.unwrap();
        for t in [&chime as &dyn Probe, &sherman] {
            let mut model = std::collections::BTreeMap::new();
            let crowd = |i: u32| format!("prefix!!{:05}", i * 7919 % N).into_bytes();
            for k in ["prefix!", "prefix!\x7f", "prefiy", "a"] {
                t.put(&c, k.as_bytes(), 1).await;
                model.insert(k.as_bytes().to_vec(), 1);
            }
            let before = c.counts().round_trips;
            assert_eq!(t.get(&c, b"prefiy").await, Some(1));
            let plain = c.counts().round_trips - before;
            for i in 0..N {
                t.put(&c, &crowd(i), i as u8).await;
                model.insert(crowd(i), i as u8);
            }
            let before = c.counts().round_trips;
            assert_eq!(t.get(&c, &crowd(7)).await, Some(7));
            let levels = c.counts().round_trips - before - plain - 1;
            assert!(levels >= 2, "{levels} directory levels");
            let cr = &c;
            let check = |model: &std::collections::BTreeMap<Vec<u8>, u8>, round: u32| {
                let model = model.clone();
                async move {
                    let c = cr;
                    for (k, &v) in model.iter().step_by(7) {
                        assert_eq!(t.get(c, k).await, Some(v), "{}", String::from_utf8_lossy(k));
                    }
                    for s in 0..12u32 {
                        let from = format!("prefix!!{:05}", (s * 131 + round) % (N + 5));
                        let count = (s * 13 % 70 + 1) as usize;
                        let got = t.scan(c, from.as_bytes(), count).await;
                        let want: Vec<_> = model
                            .range(from.clone().into_bytes()..)
                            .take(count)
                            .map(|(k, &v)| (k.clone(), v))
                            .collect();
                        assert_eq!(got, want, "scan of {count} from {from}");
                    }
                }
            };
            check(&model, 0).await;
            for i in (0..N).rev() {
                assert!(t.del(&c, &crowd(i)).await);
                model.remove(&crowd(i));
                if i % 250 == 0 {
                    check(&model, i).await;
                }
            }
            assert!(!t.del(&c, &crowd(3)).await);
            for i in 0..40 {
                t.put(&c, &crowd(i), 9).await;
                model.insert(crowd(i), 9);
            }
            let scan = t.scan(&c, b"\x01", 1000).await;
            let want: Vec<_> = model.iter().map(|(k, &v)| (k.clone(), v)).collect();
            assert_eq!(scan, want);
        }
    }]);
}

/// A directory whose nodes lost their first children (pages emptied, then keys below the
/// next child's lowest key appended to it, then split): range scans ending anywhere, and
/// searches, against a model. A node's first record then does not bound its child's keys.
#[test]
fn range_scans_over_a_directory_whose_first_children_left() {
    async fn run<I: PointIndex<LocalTransport> + RangeIndex<LocalTransport>>(
        t: &I,
        c: &Client<LocalTransport>,
    ) {
        let key = |i: u32| format!("prefix!!{i:05}").into_bytes();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..1500 {
            t.insert(c, &key(i), &[i as u8; 8]).await.unwrap();
            model.insert(key(i), vec![i as u8; 8]);
        }
        for i in (0..1500).filter(|i| i % 97 < 40) {
            assert!(t.delete(c, &key(i)).await.unwrap());
            model.remove(&key(i));
        }
        for i in (0..1500).filter(|i| i % 97 < 40) {
            t.insert(c, &key(i), &[i as u8 ^ 0xff; 8]).await.unwrap();
            model.insert(key(i), vec![i as u8 ^ 0xff; 8]);
        }
        for (k, v) in model.iter().step_by(11) {
            assert_eq!(t.search(c, k).await.unwrap().as_ref(), Some(v));
        }
        for lo in (0..1500).step_by(37) {
            for len in [1, 6, 40, 150] {
                let (lo, hi) = (key(lo), key(lo + len));
                let mut got = Vec::new();
                t.scan_range(c, &lo, &hi, &mut got).await.unwrap();
                let want: Vec<_> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(
                    got,
                    want,
                    "[{}, {})",
                    String::from_utf8_lossy(&lo),
                    String::from_utf8_lossy(&hi)
                );
            }
        }
    }
    let f = fabric(256 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let chime = IndexConfig { max_key: 255, ..IndexConfig::default() };
    let sherman = IndexConfig { root_slot: 2, ..chime.clone() };
    run_tasks([async {
        run(&Chime::create(&c, &chime, 0).await.unwrap(), &c).await;
        run(&Sherman::create(&c, &sherman, 0).await.unwrap(), &c).await;
    }]);
}

#[test]
fn bad_long_keys_are_refused() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let cfg = IndexConfig { max_key: 12, ..cfg(8, 4, 4) };
    run_tasks([async {
        let t = Chime::create(&c, &cfg, 0).await.unwrap();
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
        // CHIME keeps H / 2 (4) keys of one prefix as plain entries, Sherman half a leaf (32);
        // past that they form a group (the next test).
        let chime = Chime::create(&c, &long, 0).await.unwrap();
        let long_sherman = IndexConfig { root_slot: 2, ..long.clone() };
        let sherman = Sherman::create(&c, &long_sherman, 0).await.unwrap();
        let (chime8, sherman8) = (
            Chime::create(&c, &short(4), 0).await.unwrap(),
            Sherman::create(&c, &short(6), 0).await.unwrap(),
        );
        let rt = |before: u64| c.counts().round_trips - before;
        for (n, t, t8) in
            [(4, &chime as &dyn Probe, &chime8 as &dyn Probe), (30, &sherman, &sherman8)]
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

/// A group, once formed, is the one entry its prefix has in the leaf: the plain entries it
/// shadows are cleared (CHIME: by the forming insert's second write; Sherman: in the same
/// shift), so keys of one prefix take one slot however many they are.
#[test]
fn a_formed_group_is_its_prefixs_one_entry() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let long = |slot| IndexConfig { max_key: 16, root_slot: slot, ..IndexConfig::default() };
    run_tasks([async {
        let chime = Chime::create(&c, &long(0), 0).await.unwrap();
        let sherman = Sherman::create(&c, &long(2), 0).await.unwrap();
        for (t, limit) in [(&chime as &dyn Probe, 4), (&sherman, 32)] {
            let slots = |lf: f64| (lf * 64.0).round() as u64;
            for i in 0..limit {
                t.put(&c, format!("crowded!{i}").as_bytes(), 1).await;
            }
            assert_eq!(slots(t.fill(&c).await), limit, "{limit} plain entries");
            t.put(&c, b"crowded!x", 2).await;
            assert_eq!(slots(t.fill(&c).await), 1, "a group of {}", limit + 1);
            for i in 0..100 {
                t.put(&c, format!("crowded!y{i}").as_bytes(), 3).await;
            }
            assert_eq!(slots(t.fill(&c).await), 1);
            assert_eq!(t.get(&c, b"crowded!0").await, Some(1));
            assert_eq!(t.get(&c, b"crowded!x").await, Some(2));
        }
    }]);
}

/// A key in its prefix's group costs one round trip more than a plain long key's search (the
/// group, then the key's block), wherever it sits in the group, and one more when the group
/// passes the 3968 bytes its value slot can name; an update of it costs what a
/// plain long key's does (the group READ where the key's block was; the slot word written in
/// place with the unlock).
#[test]
fn a_key_in_a_group_costs_one_round_trip_more() {
    let f = fabric(16 << 20, 1 << 20);
    let c = f.client(0).unwrap();
    let long = |slot| IndexConfig { max_key: 16, root_slot: slot, ..IndexConfig::default() };
    run_tasks([async {
        let chime = Chime::create(&c, &long(0), 0).await.unwrap();
        let sherman = Sherman::create(&c, &long(2), 0).await.unwrap();
        let rt = |before: u64| c.counts().round_trips - before;
        for (n, t) in [(5, &chime as &dyn Probe), (33, &sherman), (200, &chime), (200, &sherman)] {
            t.put(&c, b"lone-key", 200).await;
            let (before, bytes) = (c.counts().round_trips, c.counts().bytes_read);
            assert_eq!(t.get(&c, b"lone-key").await, Some(200));
            let (plain, plain_bytes) = (rt(before), c.counts().bytes_read - bytes);
            let before = c.counts().round_trips;
            t.put(&c, b"lone-key", 201).await;
            let plain_update = rt(before);
            let keys: Vec<_> = (0..n).map(|i| format!("grouped{n}-{i}").into_bytes()).collect();
            for (i, k) in keys.iter().enumerate() {
                t.put(&c, k, i as u8).await;
            }
            // Past a page's records (32 at 16-byte keys) a group is a directory of pages: the
            // key's page is one READ more, and a search READs the page, not the whole group.
            let long_group = u64::from(n > 33);
            let page = dmindex_chime::collision::PageShape::for_keys(16).bytes() as u64;
            for (i, k) in keys.iter().enumerate() {
                let (before, bytes) = (c.counts().round_trips, c.counts().bytes_read);
                assert_eq!(t.get(&c, k).await, Some(i as u8));
                let want = plain + 1 + long_group;
                assert_eq!(rt(before), want, "{n}: {}", String::from_utf8_lossy(k));
                if n > 33 {
                    // The leaf and block as a plain key's, a page, and a directory of at
                    // most 200 / 11 pages of 32 B each (the whole group: 6 408 B).
                    let read = c.counts().bytes_read - bytes;
                    assert!(read <= plain_bytes + page + 768, "{n}: {read} B a search");
                }
            }
            let before = c.counts().round_trips;
            t.put(&c, &keys[n / 2], 99).await;
            assert_eq!(rt(before), plain_update + long_group, "{n}: an update in a group");
            assert_eq!(t.get(&c, &keys[n / 2]).await, Some(99));
            let before = c.counts().round_trips;
            assert_eq!(t.get(&c, format!("grouped{n}-x").as_bytes()).await, None);
            assert_eq!(rt(before), plain + long_group, "{n}: an absent key of a grouped prefix");
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
    fn del<'a>(&'a self, c: &'a Client<LocalTransport>, k: &'a [u8]) -> LocalBoxFuture<'a, bool>;
    /// Keys per slot over the leaves.
    fn fill<'a>(&'a self, c: &'a Client<LocalTransport>) -> LocalBoxFuture<'a, f64>;
    /// `count` pairs from `from`, each value's first byte.
    fn scan<'a>(
        &'a self,
        c: &'a Client<LocalTransport>,
        from: &'a [u8],
        count: usize,
    ) -> LocalBoxFuture<'a, Vec<(Vec<u8>, u8)>>;
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

    fn del<'a>(&'a self, c: &'a Client<LocalTransport>, k: &'a [u8]) -> LocalBoxFuture<'a, bool> {
        Box::pin(async move { self.delete(c, k).await.unwrap() })
    }

    fn fill<'a>(&'a self, c: &'a Client<LocalTransport>) -> LocalBoxFuture<'a, f64> {
        Box::pin(async move { self.load_factor(c).await.unwrap().unwrap() })
    }

    fn scan<'a>(
        &'a self,
        c: &'a Client<LocalTransport>,
        from: &'a [u8],
        count: usize,
    ) -> LocalBoxFuture<'a, Vec<(Vec<u8>, u8)>> {
        Box::pin(async move {
            let mut got = Vec::new();
            RangeIndex::scan(self, c, from, count, &mut got).await.unwrap();
            got.into_iter().map(|(k, v)| (k, v[0])).collect()
        })
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
