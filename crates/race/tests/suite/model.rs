//! RACE against a `HashMap`, on shapes small enough that every case splits segments and doubles
//! the directory.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_index::{IndexConfig, IndexStats, PointOnly};
use dmindex_race::Race;

fn opts(kv: &[(&str, usize)]) -> Vec<(String, String)> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn split_happened(s: &IndexStats, items: usize) {
    let get = |n| s.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v).unwrap();
    // One group per segment holds at most 21 keys: more keys than that forced splits.
    if items > 21 {
        assert!(get("splits") > 0, "{items} keys and no split: {s:?}");
        assert!(get("split_moved_entries") > 0, "{s:?}");
    }
}

#[test]
fn one_group_segments_from_depth_zero() {
    let index = IndexConfig {
        extra: opts(&[("groups", 1), ("depth", 0), ("max_depth", 12)]),
        ..IndexConfig::default()
    };
    let mut cfg = ModelConfig::new(index, 200, 150);
    cfg.after = Some(split_happened);
    cfg.search_again = true;
    model_test::<Race, PointOnly>(&cfg);
}

#[test]
fn long_keys_and_values_two_groups() {
    let index = IndexConfig {
        max_key: 12,
        max_value: 100,
        extra: opts(&[("groups", 2), ("depth", 1)]),
        ..IndexConfig::default()
    };
    let mut cfg = ModelConfig::new(index, 300, 16);
    cfg.key = |x| format!("key-{x}").into_bytes();
    cfg.value = |v, max| vec![v; 1 + v as usize % max];
    model_test::<Race, PointOnly>(&cfg);
}

#[test]
fn default_shape() {
    model_test::<Race, PointOnly>(&ModelConfig::new(IndexConfig::default(), 500, 8));
}

#[test]
fn options_are_checked() {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::{IndexError, PointIndex};

    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let with = |kv: &[(&str, usize)]| IndexConfig { extra: opts(kv), ..IndexConfig::default() };
    let err = |cfg: IndexConfig| match run_tasks([Race::create(&c, &cfg, 0)]).remove(0) {
        Err(IndexError::Config(m)) => m,
        other => panic!("{other:?}"),
    };
    let unknown = with(&[]);
    let unknown = IndexConfig { extra: vec![("span".into(), "3".into())], ..unknown };
    assert_eq!(err(unknown), "unknown race option 'span' (known: depth, max_depth, groups)");
    assert_eq!(err(with(&[("groups", 0)])), "option groups=0: must be in 1..=1024");
    assert_eq!(err(with(&[("depth", 9), ("max_depth", 8)])), "option depth=9 exceeds max_depth=8");
    let big = IndexConfig { max_value: 9000, ..IndexConfig::default() };
    assert!(err(big).contains("blocks at most 8128 bytes"));
    // Created with one shape, opened with another: refused.
    run_tasks([async {
        let cfg = with(&[("groups", 2)]);
        Race::create(&c, &cfg, 0).await.unwrap();
        let other = with(&[("groups", 4)]);
        let e = Race::open(&c, &other, 1).await.unwrap_err();
        assert!(matches!(e, IndexError::Config(m) if m.contains("another shape")));
        let e = Race::create(&c, &cfg, 0).await.unwrap_err();
        assert!(matches!(e, IndexError::Config(m) if m.contains("in use")));
    }]);
}
