//! Round trips per operation, one client, pinned against the paper's operations (§4.2): a GET is
//! two one-sided READs (bucket, item), a PUT or UPDATE one WRITE of the item and one request, a
//! DELETE one request, a SCAN one request plus the item READs, 16 to a doorbell (or one after
//! another, as the paper's client reads them); the baselines' GETs are a request and an item
//! READ.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_histore::{AllSkiplist, HiStore};
use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex};

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn cluster() -> LocalFabric {
    cluster_of(4)
}

/// One data server (node 0), three index servers (1–3), and data servers past them.
fn cluster_of(memory_nodes: u16) -> LocalFabric {
    let services = mn_services(2, dmindex_histore::SERVICES).unwrap();
    LocalFabric::with_services(LocalConfig { memory_nodes, ..LocalConfig::default() }, services)
        .unwrap()
}

#[test]
fn each_operation_costs_the_papers_round_trips() {
    let f = cluster();
    let c = f.client(0).unwrap();
    let cfg = IndexConfig { expected_items: 1000, ..IndexConfig::default() };
    run_tasks([async {
        let ix = <HiStore as PointIndex<LocalTransport>>::create(&c, &cfg, 0).await.unwrap();
        for n in 1..=300 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        let cost = |before: u64| c.counts().round_trips - before;
        let rt = c.counts().round_trips;
        assert_eq!(ix.search(&c, &key(100)).await.unwrap(), Some(100u64.to_le_bytes().to_vec()));
        assert_eq!(cost(rt), 2, "GET: READ bucket, READ item and view word in one doorbell");
        let rt = c.counts().round_trips;
        assert_eq!(ix.search(&c, &key(1000)).await.unwrap(), None);
        assert_eq!(cost(rt), 2, "GET of an absent key: the bucket, then the view word");
        let rt = c.counts().round_trips;
        assert!(ix.update(&c, &key(100), &[7; 8]).await.unwrap());
        assert_eq!(cost(rt), 2, "UPDATE: WRITE item, request to the primary");
        let rt = c.counts().round_trips;
        ix.insert(&c, &key(301), &[1; 8]).await.unwrap();
        assert_eq!(cost(rt), 2, "PUT");
        let rt = c.counts().round_trips;
        assert!(ix.delete(&c, &key(301)).await.unwrap());
        assert_eq!(cost(rt), 1, "DELETE: the request alone");
        let (rt, reads) = (c.counts().round_trips, c.counts().reads);
        let mut out = Vec::new();
        ix.scan(&c, &key(1), 100, &mut out).await.unwrap();
        assert_eq!(out.len(), 100);
        assert_eq!(out[99].0, key(100));
        assert_eq!(out[99].1, [7; 8], "the updated value");
        // Items on one data node (node 0), with the view word: 101 READs in ⌈101 / 16⌉
        // doorbells, all rung before any is awaited.
        assert_eq!((cost(rt), c.counts().reads - reads), (1 + 1, 101));
    }]);
}

#[test]
fn all_skiplist_gets_are_requests() {
    let f = cluster();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let ix =
            <AllSkiplist as PointIndex<LocalTransport>>::create(&c, &IndexConfig::default(), 0)
                .await
                .unwrap();
        ix.insert(&c, &key(5), &[5; 8]).await.unwrap();
        let rt = c.counts().round_trips;
        assert_eq!(ix.search(&c, &key(5)).await.unwrap(), Some(vec![5; 8]));
        assert_eq!(ix.search(&c, &key(6)).await.unwrap(), None);
        assert_eq!(
            c.counts().round_trips - rt,
            2 + 2,
            "LOOKUP, then item and view word; LOOKUP, then the view word"
        );
    }]);
}

/// With `scan_reads=each` a SCAN is the paper's client's: the request, then each item READ in
/// turn, the last with the view word.
#[test]
fn a_scan_reading_each_item_in_turn_takes_a_round_trip_per_item() {
    let f = cluster();
    let c = f.client(0).unwrap();
    let extra = vec![("scan_reads".to_string(), "each".to_string())];
    let cfg = IndexConfig { expected_items: 1000, extra, ..IndexConfig::default() };
    run_tasks([async {
        let ix = <HiStore as PointIndex<LocalTransport>>::create(&c, &cfg, 0).await.unwrap();
        for n in 1..=300 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        let (rt, reads) = (c.counts().round_trips, c.counts().reads);
        let mut out = Vec::new();
        ix.scan(&c, &key(11), 100, &mut out).await.unwrap();
        let want: Vec<_> =
            (11..111u64).map(|n| (key(n).to_vec(), n.to_le_bytes().to_vec())).collect();
        assert_eq!(out, want);
        assert_eq!((c.counts().round_trips - rt, c.counts().reads - reads), (1 + 100, 101));
        let rt = c.counts().round_trips;
        let mut none = Vec::new();
        ix.scan(&c, &key(1000), 100, &mut none).await.unwrap();
        assert!(none.is_empty(), "{none:?}");
        assert_eq!(c.counts().round_trips - rt, 1 + 1, "the request, then the view word");
    }]);
}

/// An item on another data server than the view word's (node 0): the item and the view word
/// are two doorbells rung together, one round trip, so every GET is two.
#[test]
fn a_get_of_an_item_on_another_node_than_the_view_word_is_still_two_round_trips() {
    let f = cluster_of(6);
    let c = f.client(0).unwrap();
    let cfg = IndexConfig { expected_items: 1000, ..IndexConfig::default() };
    run_tasks([async {
        let ix = <HiStore as PointIndex<LocalTransport>>::create(&c, &cfg, 0).await.unwrap();
        for n in 1..=200 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        let (rt, reads) = (c.counts().round_trips, c.counts().reads);
        for n in 1..=200 {
            assert_eq!(ix.search(&c, &key(n)).await.unwrap(), Some(n.to_le_bytes().to_vec()));
        }
        // Nodes 0, 4 and 5 are data servers and items go to one by hash: about two in three
        // GETs read an item off node 0 here.
        assert_eq!((c.counts().round_trips - rt, c.counts().reads - reads), (400, 600));
    }]);
}
