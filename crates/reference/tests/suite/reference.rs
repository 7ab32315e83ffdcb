//! The reference index against a `BTreeMap` model.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, IndexError, Ordered, PointIndex, PointOnly};
use dmindex_reference::LockedShards;

fn key(k: u64) -> Vec<u8> {
    // Spread keys over shards: first byte varies, and lengths vary from 1 to 3 bytes.
    let mut v = vec![(k.wrapping_mul(97) >> 8) as u8, k as u8, 7];
    v.truncate(1 + (k % 3) as usize);
    v
}

fn model_cfg() -> ModelConfig {
    let index =
        IndexConfig { max_key: 3, max_value: 2, expected_items: 4096, ..Default::default() };
    let mut cfg = ModelConfig::new(index, 300, 64);
    cfg.key = key;
    // Values of 1 or 2 bytes.
    cfg.value = |v, _| if v % 2 == 0 { vec![v, 1] } else { vec![v] };
    cfg.max_steps = 400;
    cfg.node_size = 16 << 20;
    cfg
}

#[test]
fn matches_btreemap() {
    model_test::<LockedShards, Ordered>(&model_cfg());
}

/// The kit's point-only variant (against a `HashMap`, no scans) on the same index.
#[test]
fn matches_hashmap_as_a_point_index() {
    model_test::<LockedShards, PointOnly>(&ModelConfig { cases: 16, ..model_cfg() });
}

#[test]
fn bad_input_is_refused() {
    let f = LocalFabric::new(LocalConfig {
        node_size: 16 << 20,
        chunk_size: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    let c = f.client(0).unwrap();
    let cfg = IndexConfig::default();
    run_tasks([async {
        let idx = LockedShards::create(&c, &cfg, 0).await.unwrap();
        assert_eq!(
            idx.insert(&c, &[1; 9], &[0]).await,
            Err(IndexError::KeyTooLong { len: 9, max: 8 })
        );
        assert_eq!(
            idx.insert(&c, &[1], &[0; 9]).await,
            Err(IndexError::ValueTooLong { len: 9, max: 8 })
        );
        assert!(matches!(idx.search(&c, &[]).await, Err(IndexError::InvalidKey(_))));
        assert!(
            matches!(LockedShards::create(&c, &cfg, 0).await, Err(IndexError::Config(m)) if m.contains("in use"))
        );
        let other = IndexConfig { root_slot: 3, ..cfg.clone() };
        assert!(
            matches!(LockedShards::open(&c, &other, 0).await, Err(IndexError::Config(m)) if m.starts_with("root slot 3 is empty"))
        );
        // Another kind of index at the slot (a root word that is no address of ours, and its
        // descriptor): refused by name, not read as an address ("unknown memory node 768").
        let root = dmindex_fabric::layout::root_slot(5);
        c.write(root, &0x0300_0000_0000_0040u64.to_le_bytes()).await.unwrap();
        c.write(root.add(8), &(0x62u64 << 57 | 5).to_le_bytes()).await.unwrap();
        let foreign = IndexConfig { root_slot: 5, ..cfg.clone() };
        let e = LockedShards::open(&c, &foreign, 0).await.err().unwrap();
        assert_eq!(e, IndexError::Corrupt("no ref index at root slot 5".into()));
        let wrong = IndexConfig { max_value: 16, ..cfg.clone() };
        assert!(matches!(LockedShards::open(&c, &wrong, 0).await, Err(IndexError::Config(_))));
    }]);
}
