//! CLevel against a `HashMap`, on shapes small enough that tables grow and drain their bottom
//! level many times a case.

use dmindex_clevel::CLevel;
use dmindex_conformance::{model_test, ModelConfig};
use dmindex_index::{IndexConfig, IndexStats, PointIndex, PointOnly};

fn opts(kv: &[(&str, usize)]) -> Vec<(String, String)> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A bottom level of two buckets (16 slots) and a top of four: a few dozen keys grow the
/// table and drain it.
fn tiny() -> Vec<(String, String)> {
    opts(&[("log2_buckets", 1)])
}

fn get(s: &IndexStats, n: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v).unwrap()
}

fn grew(s: &IndexStats, items: usize) {
    // Two levels of 2 and 4 buckets hold at most 48 entries.
    if items > 48 {
        assert!(get(s, "resizes") > 0, "{items} keys and no resize: {s:?}");
    }
}

#[test]
fn tiny_shape_against_a_hashmap() {
    let index = IndexConfig { extra: tiny(), ..IndexConfig::default() };
    let mut cfg = ModelConfig::new(index, 400, 200);
    cfg.after = Some(grew);
    cfg.search_again = true;
    model_test::<CLevel, PointOnly>(&cfg);
}

/// `grew`, and the one client's searches of keys it wrote answered from its KV cache.
fn grew_and_hit(s: &IndexStats, items: usize) {
    grew(s, items);
    if items > 0 {
        assert!(get(s, "kv_cache_hits") > 0, "{items} keys written, no search hit a copy: {s:?}");
    }
}

/// The same with the port's reads (`reads=levels`) and its client KV cache.
#[test]
fn port_reads_against_a_hashmap() {
    let mut extra = tiny();
    extra.push(("reads".into(), "levels".into()));
    extra.push(("kv_cache".into(), "1".into()));
    let mut cfg = ModelConfig::new(IndexConfig { extra, ..IndexConfig::default() }, 400, 200);
    cfg.after = Some(grew_and_hit);
    cfg.search_again = true;
    model_test::<CLevel, PointOnly>(&cfg);
}

#[test]
fn long_keys_and_values_on_three_nodes() {
    let index = IndexConfig {
        max_key: 12,
        max_value: 100,
        extra: opts(&[("log2_buckets", 2), ("max_levels", 3)]),
        ..IndexConfig::default()
    };
    let mut cfg = ModelConfig::new(index, 300, 40);
    cfg.key = |x| format!("key-{x}").into_bytes();
    cfg.value = |v, max| vec![v; 1 + v as usize % max];
    cfg.memory_nodes = 3;
    model_test::<CLevel, PointOnly>(&cfg);
}

#[test]
fn default_shape() {
    model_test::<CLevel, PointOnly>(&ModelConfig::new(IndexConfig::default(), 500, 8));
}

/// Loads 2 000 distinct keys into the tiny shape in one order, each grower draining
/// (`rehash=inline`): the table grows from 2 + 4 buckets to at least 256 on top, drains each
/// bottom level it leaves, and every key is found.
#[test]
fn tiny_shape_grows_and_drains() {
    grows_and_drains(&[("log2_buckets", "1"), ("rehash", "inline")], |s| {
        assert!(get(s, "resizes") >= 6, "{s:?}");
        assert_eq!(get(s, "rehashes"), get(s, "resizes"), "every grown table drained: {s:?}");
    });
}

/// The same load with no background client and at most four levels: the table keeps its
/// levels until it has four, and then the inserts that find no room drain it themselves.
#[test]
fn without_a_rehasher_inserts_drain_at_the_most_levels() {
    grows_and_drains(&[("log2_buckets", "1"), ("max_levels", "4")], |s| {
        assert!(get(s, "resizes") >= 6, "{s:?}");
        assert!(get(s, "rehashes") >= get(s, "resizes") - 2, "{s:?}");
    });
}

fn grows_and_drains(options: &[(&str, &str)], check: fn(&IndexStats)) {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::local::LocalTransport;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let config = IndexConfig::with_options(options);
    run_tasks([async {
        let index = CLevel::create(&c, &config, 0).await.unwrap();
        for k in 1..=2000u64 {
            index.insert(&c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
        let s = PointIndex::<LocalTransport>::stats(&index);
        check(&s);
        assert!(get(&s, "moved_entries") > 0, "{s:?}");
        for k in 1..=2000u64 {
            let v = index.search(&c, &k.to_be_bytes()).await.unwrap();
            assert_eq!(v.as_deref(), Some(&k.to_le_bytes()[..]), "key {k}");
        }
        let lf = index.load_factor(&c).await.unwrap().unwrap();
        assert!(lf > 0.1 && lf <= 1.0, "{lf}");
    }]);
}

#[test]
fn options_are_checked() {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::IndexError;

    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let with = |kv: &[(&str, usize)]| IndexConfig { extra: opts(kv), ..IndexConfig::default() };
    run_tasks([async {
        for bad in [&[("log2_buckets", 0)][..], &[("log2_buckets", 31)], &[("max_levels", 2)]] {
            let e = CLevel::create(&c, &with(bad), 0).await.unwrap_err();
            assert!(matches!(e, IndexError::Config(_)), "{bad:?}: {e}");
        }
        for choice in [("rehash", "eager"), ("reads", "level")] {
            let e = CLevel::create(&c, &IndexConfig::with_options(&[choice]), 0).await.unwrap_err();
            assert!(matches!(e, IndexError::Config(ref m) if m.contains(choice.0)), "{e}");
        }
        let big = IndexConfig { max_value: 9000, ..IndexConfig::default() };
        assert!(matches!(CLevel::create(&c, &big, 0).await, Err(IndexError::Config(_))));
        CLevel::create(&c, &with(&[("log2_buckets", 3)]), 0).await.unwrap();
        let other = CLevel::open(&c, &with(&[("log2_buckets", 4)]), 0).await.unwrap_err();
        assert!(
            matches!(other, IndexError::Config(ref m) if m.contains("another shape")),
            "{other}"
        );
        let longer = IndexConfig { max_key: 16, ..with(&[("log2_buckets", 3)]) };
        let e = CLevel::open(&c, &longer, 0).await.unwrap_err();
        assert!(
            matches!(e, IndexError::Config(ref m) if m.contains("16-byte") || m.contains("8-byte")),
            "{e}"
        );
    }]);
}
