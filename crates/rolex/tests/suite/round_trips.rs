//! The crate docs' table of round trips per operation, measured on a bulk-trained index of the
//! default shape (span 16, epsilon 16, 12 keys a leaf) with its models and leaf tables cached.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric, VerbCounts};
use dmindex_index::{IndexConfig, PointIndex, RangeIndex};
use dmindex_rolex::Rolex;

fn cfg() -> IndexConfig {
    IndexConfig { extra: vec![("retrain".into(), "0".into())], ..IndexConfig::default() }
}

fn k(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

/// Round trips, verbs and bytes read of `f`'s operation.
async fn cost<F: std::future::Future>(c: &Client<LocalTransport>, f: F) -> (u64, u64, u64) {
    let before: VerbCounts = c.counts();
    f.await;
    let n = c.counts();
    let verbs = |v: &VerbCounts| v.reads + v.writes + v.cas + v.masked_cas + v.faa;
    (
        n.round_trips - before.round_trips,
        verbs(&n) - verbs(&before),
        n.bytes_read - before.bytes_read,
    )
}

#[test]
fn each_operation_costs_its_round_trips() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let idx = Rolex::create(&c, &cfg(), 0).await.unwrap();
        let pairs: Vec<(u64, Vec<u8>)> = (1..=3000u64).map(|i| (i * 1000, vec![1; 8])).collect();
        idx.pretrain(&c, &pairs).await.unwrap();
        assert_eq!(idx.models(), 1, "evenly spaced keys: one line");
        // Warm the leaf table.
        idx.search(&c, &k(500_000)).await.unwrap();
        let leaf = 296;
        // Search: one doorbell of the predicted leaves (2 to 4 of them).
        let (rt, verbs, bytes) = cost(&c, async {
            assert_eq!(idx.search(&c, &k(500_000)).await.unwrap(), Some(vec![1; 8]));
        })
        .await;
        assert_eq!(rt, 1);
        assert!((2..=4).contains(&verbs) && bytes == verbs * leaf, "{verbs} READs, {bytes} B");
        // Update, insert into room, delete, absent update: READ, lock, READ chain, WRITE+unlock.
        for (what, op) in [("update", 0), ("insert", 1), ("delete", 2), ("absent update", 3)] {
            let (rt, verbs, _) = cost(&c, async {
                match op {
                    0 => assert!(idx.update(&c, &k(7000), &[2; 8]).await.unwrap()),
                    1 => idx.insert(&c, &k(7001), &[3; 8]).await.unwrap(),
                    2 => assert!(idx.delete(&c, &k(7001)).await.unwrap()),
                    _ => assert!(!idx.update(&c, &k(7002), &[3; 8]).await.unwrap()),
                }
            })
            .await;
            assert_eq!(rt, 4, "{what}");
            let writes = if op == 3 { 1 } else { 2 };
            assert!(verbs >= 4 + writes, "{what}: {verbs} verbs");
        }
        // Leaf 0 holds keys 1000..=12000 (12 of 16 slots): four more fill it, the fifth grows a
        // synonym leaf (three WRITEs in the doorbell, then the FAA of the model's count).
        for x in 1..=4 {
            idx.insert(&c, &k(5000 + x), &[4; 8]).await.unwrap();
        }
        let (writes, faa) = (c.counts().writes, c.counts().faa);
        let (rt, _, _) = cost(&c, idx.insert(&c, &k(5005), &[5; 8])).await;
        let n = c.counts();
        assert_eq!((rt, n.writes - writes, n.faa - faa), (5, 3, 1), "insert growing a chain");
        // The writer learned the synonym: a search READs it in the same doorbell.
        let (rt, _, _) = cost(&c, async {
            assert_eq!(idx.search(&c, &k(5005)).await.unwrap(), Some(vec![5; 8]));
        })
        .await;
        assert_eq!(rt, 1, "hinted synonym");
        // A handle that has not seen it follows the pointer once, then has the hint.
        let other = Rolex::open(&c, &cfg(), 1).await.unwrap();
        other.search(&c, &k(900_000)).await.unwrap();
        let (rt, _, _) = cost(&c, other.search(&c, &k(5005))).await;
        assert_eq!(rt, 2, "an unhinted synonym: one more READ");
        let (rt, _, _) = cost(&c, other.search(&c, &k(5005))).await;
        assert_eq!(rt, 1);
        // A scan of 10 from the middle: one doorbell of 4 base leaves.
        let mut out = Vec::new();
        let (rt, verbs, _) = cost(&c, idx.scan(&c, &k(1_500_000), 10, &mut out)).await;
        assert_eq!((rt, verbs, out.len()), (1, 4, 10));
    }]);
}
