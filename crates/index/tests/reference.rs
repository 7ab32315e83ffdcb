//! The reference index against a `BTreeMap` model.

use std::collections::BTreeMap;

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::reference::LockedShards;
use dmindex_index::{IndexConfig, IndexError, RangeIndex};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Search(u16),
    Insert(u16, u8),
    Update(u16, u8),
    Delete(u16),
    Scan(u16, u8),
    ScanRange(u16, u16),
}

fn key(k: u16) -> Vec<u8> {
    // Spread keys over shards: first byte varies, and lengths vary from 1 to 3 bytes.
    let mut v = vec![(k.wrapping_mul(97) >> 8) as u8, k as u8, 7];
    v.truncate(1 + (k % 3) as usize);
    v
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..300u16).prop_map(Op::Search),
        (0..300u16, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        (0..300u16, any::<u8>()).prop_map(|(k, v)| Op::Update(k, v)),
        (0..300u16).prop_map(Op::Delete),
        (0..300u16, 0..40u8).prop_map(|(k, n)| Op::Scan(k, n)),
        (0..300u16, 0..300u16).prop_map(|(a, b)| Op::ScanRange(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn matches_btreemap(ops in prop::collection::vec(op(), 1..400)) {
        let f = LocalFabric::new(LocalConfig { node_size: 16 << 20, chunk_size: 1 << 20, ..Default::default() }).unwrap();
        let c = f.client(0).unwrap();
        let cfg = IndexConfig { max_key: 3, max_value: 2, expected_items: 4096, ..Default::default() };
        run_tasks([async {
            let idx = LockedShards::create(&c, &cfg, 0).await.unwrap();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Search(k) => assert_eq!(idx.search(&c, &key(k)).await.unwrap(), model.get(&key(k)).cloned()),
                    Op::Insert(k, v) => {
                        idx.insert(&c, &key(k), &[v, 1]).await.unwrap();
                        model.insert(key(k), vec![v, 1]);
                    }
                    Op::Update(k, v) => {
                        let had = model.contains_key(&key(k));
                        assert_eq!(idx.update(&c, &key(k), &[v]).await.unwrap(), had);
                        if had { model.insert(key(k), vec![v]); }
                    }
                    Op::Delete(k) => assert_eq!(idx.delete(&c, &key(k)).await.unwrap(), model.remove(&key(k)).is_some()),
                    Op::Scan(k, n) => {
                        let mut out = Vec::new();
                        idx.scan(&c, &key(k), n as usize, &mut out).await.unwrap();
                        let want: Vec<_> = model.range(key(k)..).take(n as usize).map(|(a, b)| (a.clone(), b.clone())).collect();
                        assert_eq!(out, want);
                    }
                    Op::ScanRange(a, b) => {
                        let (lo, hi) = (key(a), key(b));
                        let mut out = Vec::new();
                        idx.scan_range(&c, &lo, &hi, &mut out).await.unwrap();
                        let want: Vec<_> = if lo < hi {
                            model.range(lo.clone()..hi.clone()).map(|(a, b)| (a.clone(), b.clone())).collect()
                        } else {
                            Vec::new()
                        };
                        assert_eq!(out, want, "scan_range");
                    }
                }
            }
            // A second handle (another CN) sees the same contents.
            let other = LockedShards::open(&c, &cfg, 1).await.unwrap();
            let mut all = Vec::new();
            other.scan(&c, &[0], usize::MAX, &mut all).await.unwrap();
            assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        }]);
    }
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
            matches!(LockedShards::open(&c, &other, 0).await, Err(IndexError::Corrupt(m)) if m.contains("empty"))
        );
        let wrong = IndexConfig { max_value: 16, ..cfg.clone() };
        assert!(matches!(LockedShards::open(&c, &wrong, 0).await, Err(IndexError::Config(_))));
    }]);
}
