//! Round trips per operation, one client, warm cache, pinned against the paper's counts: a
//! search is 1, an update 2, an insert 3 (2 for a present key), a delete 2, an insert that
//! splits its leaf 5, and a scan of 100 dense items one doorbell once the special node is
//! cached.

use dmindex_dolphin::Dolphin;
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex, RangeIndex};

/// Dense keys of one 7-byte prefix.
fn key(n: u64) -> [u8; 8] {
    (0x0102_0304_0506_0700 + n).to_be_bytes()
}

#[test]
fn each_operation_costs_the_papers_round_trips() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    let cfg = IndexConfig::default();
    run_tasks([async {
        let ix = <Dolphin as PointIndex<_>>::create(&c, &cfg, 0).await.unwrap();
        // Every other key of the prefix: two leaves under one special node (an N4), room in
        // each, so the split below adds a third without growing the node (a type switch costs
        // its own round trips).
        for n in (2..=200).step_by(2) {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        ix.search(&c, &key(2)).await.unwrap();
        let cost = |before: u64| c.counts().round_trips - before;
        let rt = c.counts().round_trips;
        assert_eq!(ix.search(&c, &key(100)).await.unwrap(), Some(100u64.to_le_bytes().to_vec()));
        assert_eq!(cost(rt), 1, "search: the leaf, through the cached special node");
        let rt = c.counts().round_trips;
        assert!(ix.update(&c, &key(100), &[7; 8]).await.unwrap());
        assert_eq!(cost(rt), 2, "update: [FAA, READ], [WRITE, FAA]");
        let rt = c.counts().round_trips;
        ix.insert(&c, &key(101), &[1; 8]).await.unwrap();
        assert_eq!(cost(rt), 3, "insert of a new key: [FAA, READ], key CAS, [WRITE, FAA]");
        let rt = c.counts().round_trips;
        ix.insert(&c, &key(101), &[2; 8]).await.unwrap();
        assert_eq!(cost(rt), 2, "insert of a present key");
        let rt = c.counts().round_trips;
        assert!(ix.delete(&c, &key(101)).await.unwrap());
        assert_eq!(cost(rt), 2, "delete: [FAA, READ], [CAS, FAA]");
        let rt = c.counts().round_trips;
        assert!(!ix.update(&c, &key(101), &[3; 8]).await.unwrap());
        assert_eq!(cost(rt), 2, "update of an absent key enters and leaves");
        // Fill keys 1, 3, 5, … until an insert splits a leaf.
        let splits = |ix: &Dolphin| {
            let s = PointIndex::<dmindex_fabric::local::LocalTransport>::stats(ix);
            s.extra.iter().find(|(k, _)| *k == "splits").unwrap().1
        };
        let mut split_cost = None;
        for n in (1..=199).step_by(2) {
            let (rt, before) = (c.counts().round_trips, splits(&ix));
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
            if splits(&ix) > before {
                split_cost = Some(cost(rt));
                break;
            }
        }
        assert_eq!(
            split_cost,
            Some(5),
            "enter, claim, [WRITE new leaf, READ special], CAS, last doorbell"
        );
        // A scan of 100 dense items: the special node's copy names every leaf, one doorbell.
        let mut out = Vec::new();
        ix.scan(&c, &key(1), 100, &mut out).await.unwrap();
        out.clear();
        let rt = c.counts().round_trips;
        ix.scan(&c, &key(1), 100, &mut out).await.unwrap();
        assert_eq!(out.len(), 100);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(cost(rt), 1, "a prefix's leaves in one doorbell");
    }]);
}
