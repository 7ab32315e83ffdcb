//! Plush against a `HashMap`, on shapes small enough that cases migrate top groups, migrate
//! groups down level after level and compact the deepest level.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_index::{IndexConfig, IndexStats, PointOnly};
use dmindex_plush::Plush;

fn opts(kv: &[(&str, usize)]) -> Vec<(String, String)> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// One top group of 16 two-slot buckets, binary fanout, two runs a group, two levels.
fn tiny() -> Vec<(String, String)> {
    opts(&[("groups", 1), ("slots", 2), ("runs", 2), ("fanout_bits", 1), ("levels", 2)])
}

fn get(s: &IndexStats, n: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v).unwrap()
}

fn migrated_at_every_level(s: &IndexStats, items: usize) {
    // 32 slots at the top: more live keys than that cannot all sit there.
    if items > 32 {
        assert!(get(s, "top_migrations") > 0, "{items} keys and no migration: {s:?}");
    }
    // How many keys force a group migration or a compaction depends on their digits and on
    // tombstones (one dropped into a group not yet made appends nothing), so a random case
    // pins no count; `tiny_shape_reaches_the_deepest_level` pins that every path runs.
}

/// Loads 400 distinct keys into the tiny shape, in one order, and checks that they took
/// every migration path (top, group, compaction) and are all found.
#[test]
fn tiny_shape_reaches_the_deepest_level() {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::local::LocalTransport;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::PointIndex;

    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let config = IndexConfig { extra: tiny(), ..IndexConfig::default() };
    run_tasks([async {
        let index = Plush::create(&c, &config, 0).await.unwrap();
        for k in 1..=400u64 {
            index.insert(&c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
        let s = PointIndex::<LocalTransport>::stats(&index);
        for counter in ["top_migrations", "group_migrations", "level_compactions"] {
            assert!(get(&s, counter) > 0, "400 keys and no {counter}: {s:?}");
        }
        for k in 1..=400u64 {
            let v = index.search(&c, &k.to_be_bytes()).await.unwrap();
            assert_eq!(v.as_deref(), Some(&k.to_le_bytes()[..]), "key {k}");
        }
    }]);
}

#[test]
fn tiny_shape_against_a_hashmap() {
    let index = IndexConfig { extra: tiny(), ..IndexConfig::default() };
    let mut cfg = ModelConfig::new(index, 400, 200);
    cfg.after = Some(migrated_at_every_level);
    cfg.search_again = true;
    model_test::<Plush, PointOnly>(&cfg);
}

#[test]
fn long_keys_and_values_sixteen_way() {
    let index = IndexConfig {
        max_key: 12,
        max_value: 100,
        extra: opts(&[("groups", 2), ("slots", 1), ("runs", 1), ("levels", 2)]),
        ..IndexConfig::default()
    };
    let mut cfg = ModelConfig::new(index, 300, 40);
    cfg.key = |x| format!("key-{x}").into_bytes();
    cfg.value = |v, max| vec![v; 1 + v as usize % max];
    model_test::<Plush, PointOnly>(&cfg);
}

#[test]
fn default_shape() {
    model_test::<Plush, PointOnly>(&ModelConfig::new(IndexConfig::default(), 500, 8));
}

#[test]
fn options_are_checked() {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::{IndexError, PointIndex};

    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let with = |kv: &[(&str, usize)]| IndexConfig { extra: opts(kv), ..IndexConfig::default() };
    run_tasks([async {
        for bad in [&[("slots", 17)][..], &[("runs", 0)], &[("fanout_bits", 5)], &[("levels", 10)]]
        {
            let e = Plush::create(&c, &with(bad), 0).await.unwrap_err();
            assert!(matches!(e, IndexError::Config(_)), "{bad:?}: {e}");
        }
        let big = IndexConfig { max_value: 9000, ..IndexConfig::default() };
        assert!(matches!(Plush::create(&c, &big, 0).await, Err(IndexError::Config(_))));
        Plush::create(&c, &with(&[("groups", 3)]), 0).await.unwrap();
        let other = Plush::open(&c, &with(&[("groups", 4)]), 0).await.unwrap_err();
        assert!(
            matches!(other, IndexError::Config(ref m) if m.contains("another shape")),
            "{other}"
        );
        let longer = IndexConfig { max_key: 16, ..with(&[("groups", 3)]) };
        let e = Plush::open(&c, &longer, 0).await.unwrap_err();
        assert!(
            matches!(e, IndexError::Config(ref m) if m.contains("16-byte") || m.contains("8-byte")),
            "{e}"
        );
    }]);
}
