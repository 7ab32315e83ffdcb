//! Round trips per operation, one client, warm cache, pinned against Marlin's published write
//! path (three doorbells) and the costs the Dolphin paper measures: a search is 2 (leaf, item),
//! an insert or update 3, a delete 2, an insert that splits 6, and a 100-item scan one round of leaf READs plus one round
//! of item READs (16 to a doorbell, every doorbell rung before any is awaited).

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex, RangeIndex};
use dmindex_marlin::Marlin;

fn key(n: u64) -> [u8; 8] {
    (0x0100_0000_0000_0000 + n).to_be_bytes()
}

fn counter(ix: &Marlin, name: &str) -> u64 {
    let s = PointIndex::<dmindex_fabric::local::LocalTransport>::stats(ix);
    s.extra.iter().find(|(k, _)| *k == name).unwrap().1
}

#[test]
fn each_operation_costs_the_published_round_trips() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    let cfg = IndexConfig::default();
    run_tasks([async {
        let ix = <Marlin as PointIndex<_>>::create(&c, &cfg, 0).await.unwrap();
        // Every other key: several leaves under a cached root, room in each.
        for n in (2..=600).step_by(2) {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        assert!(counter(&ix, "leaf_splits") >= 4);
        ix.search(&c, &key(2)).await.unwrap();
        let cost = |before: u64| c.counts().round_trips - before;
        let rt = c.counts().round_trips;
        assert_eq!(ix.search(&c, &key(100)).await.unwrap(), Some(100u64.to_le_bytes().to_vec()));
        assert_eq!(cost(rt), 2, "search: READ leaf, READ item");
        let rt = c.counts().round_trips;
        assert!(ix.update(&c, &key(100), &[7; 8]).await.unwrap());
        assert_eq!(cost(rt), 3, "update: [FAA, READ], [WRITE item, CAS ptr], FAA");
        let rt = c.counts().round_trips;
        ix.insert(&c, &key(101), &[1; 8]).await.unwrap();
        assert_eq!(
            cost(rt),
            3,
            "insert of a new key: [FAA, READ], [WRITE item, CAS key], [CAS, FAA]"
        );
        let rt = c.counts().round_trips;
        ix.insert(&c, &key(101), &[2; 8]).await.unwrap();
        assert_eq!(cost(rt), 3, "insert of a present key");
        let rt = c.counts().round_trips;
        assert!(ix.delete(&c, &key(101)).await.unwrap());
        assert_eq!(cost(rt), 2, "delete: [FAA, READ], [CAS, FAA]");
        let rt = c.counts().round_trips;
        assert!(!ix.update(&c, &key(101), &[3; 8]).await.unwrap());
        assert_eq!(cost(rt), 2, "update of a deleted key enters and leaves");
        assert_eq!(ix.search(&c, &key(101)).await.unwrap(), None);
        // A scan of 100 items: the cached root names the leaves, all on one memory node.
        let mut out = Vec::new();
        let rt = c.counts().round_trips;
        let reads = c.counts().reads;
        ix.scan(&c, &key(2), 100, &mut out).await.unwrap();
        assert_eq!(out.len(), 100);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(out[99], (key(200).to_vec(), 200u64.to_le_bytes().to_vec()));
        assert!(c.counts().reads - reads >= 100, "an item READ per pair");
        assert_eq!(
            cost(rt),
            1 + 1,
            "one doorbell of leaves, then 100 items 16 to a doorbell, all rung together"
        );
        // Fill keys 1, 3, 5, … until an insert splits a leaf.
        let mut split_cost = None;
        for n in (1..=599).step_by(2) {
            let (rt, before) = (c.counts().round_trips, counter(&ix, "leaf_splits"));
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
            if counter(&ix, "leaf_splits") > before {
                split_cost = Some(cost(rt));
                break;
            }
        }
        assert_eq!(
            split_cost,
            Some(6),
            "enter, claim, [WRITE new leaf, WRITE old leaf, FAA], separator: lock, READ, WRITE"
        );
    }]);
}
