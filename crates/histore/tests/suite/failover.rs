//! Failover on the simulator, step by step: the primary's node crashes, a backup becomes the
//! temporary primary (GETs then go to it by request), every acknowledged write survives, writes go
//! on with one acknowledgement, and a second crash leaves the last replica serving alone.

use dmindex_fabric::NodeId;
use dmindex_histore::HiStore;
use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex};
use dmindex_sim::{NetParams, Sim, SimConfig};

use crate::common;

use common::{key, stat, stats};

#[test]
fn primary_then_backup_crash_loses_no_acknowledged_write() {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, dmindex_histore::SERVICES).unwrap();
    let sim = Sim::with_services(
        SimConfig { memory_nodes: 4, node_size: 64 << 20, ..SimConfig::new(5, net) },
        services,
    )
    .unwrap();
    let c = sim.client_on_own_thread(0);
    let cfg = IndexConfig { expected_items: 1000, ..IndexConfig::default() };
    let ix = sim.block_on(<HiStore as PointIndex<_>>::create(&c, &cfg, 0)).unwrap();
    let crash = |node: NodeId| sim.crash_memory_node(node, sim.now_ns()).unwrap();
    sim.block_on(async {
        for n in 1..=200 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        let before = stats(&ix);
        crash(1); // the primary: replica 0, the hash table
        for n in 1..=200 {
            let got = ix.search(&c, &key(n)).await.unwrap();
            assert_eq!(got, Some(n.to_le_bytes().to_vec()), "key {n} after the primary crashed");
        }
        let after = stats(&ix);
        assert_eq!(stat(&after, "failovers") - stat(&before, "failovers"), 1, "one view change");
        assert!(
            stat(&after, "lookup_requests") - stat(&before, "lookup_requests") >= 200,
            "GETs go to the temporary primary by request"
        );
        // Writes go on (one backup left to acknowledge); deletes and updates answer truly.
        for n in 201..=300 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
        assert!(ix.update(&c, &key(5), b"five").await.unwrap());
        assert!(ix.delete(&c, &key(6)).await.unwrap());
        assert!(!ix.delete(&c, &key(6)).await.unwrap());
        crash(2); // the temporary primary
        let mut out = Vec::new();
        ix.scan(&c, &key(1), 1000, &mut out).await.unwrap();
        assert_eq!(out.len(), 299, "every acknowledged insert but the deleted key");
        assert_eq!(out[4], (key(5).to_vec(), b"five".to_vec()));
        assert_eq!(ix.search(&c, &key(300)).await.unwrap(), Some(300u64.to_le_bytes().to_vec()));
        assert_eq!(stat(&stats(&ix), "failovers") - stat(&before, "failovers"), 2);
        crash(3); // the last replica: the group is gone, and says so
        let e = ix.search(&c, &key(7)).await.unwrap_err().to_string();
        assert!(e.contains("every replica of group 0 is down"), "{e}");
    });
}
