//! Rebuilding on the simulator: a crashed index server restarts empty, the replicas it held are
//! rebuilt from the survivors while writes go on (the hash table from the temporary primary's
//! skiplist, a skiplist from the hash table), the hash table takes the primary role back, and
//! every acknowledged write is there afterwards.

use std::cell::Cell;

use dmindex_fabric::NodeId;
use dmindex_histore::HiStore;
use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex};
use dmindex_sim::{NetParams, Sim, SimConfig, Task};

use crate::common;

use common::{key, stat, stats};

fn cluster(seed: u64) -> Sim {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, dmindex_histore::SERVICES).unwrap();
    Sim::with_services(
        SimConfig { memory_nodes: 4, node_size: 64 << 20, ..SimConfig::new(seed, net) },
        services,
    )
    .unwrap()
}

/// Node `node` crashes now and restarts 300 µs later; one client rebuilds it (waiting out the
/// outage) while another writes keys `writes`; both finish.
fn crash_and_rebuild(sim: &Sim, ix: &HiStore, node: NodeId, writes: std::ops::Range<u64>) {
    let now = sim.now_ns();
    sim.crash_memory_node(node, now).unwrap();
    sim.restart_memory_node(node, now + 300_000).unwrap();
    let (fixer, writer) = (sim.client_on_own_thread(0), sim.client_on_own_thread(1));
    let (done, written, during) = (Cell::new(0), Cell::new(0u64), Cell::new((0, 0)));
    let total = writes.end - writes.start;
    let tasks = [
        Box::pin(async {
            fixer.await_restart(node).await;
            let start = written.get();
            ix.recover_memory_node(&fixer, node).await.unwrap();
            during.set((start, written.get()));
            done.set(done.get() + 1);
        }) as Task,
        Box::pin(async {
            for n in writes {
                ix.insert(&writer, &key(n), &n.to_le_bytes()).await.unwrap();
                written.set(written.get() + 1);
            }
            done.set(done.get() + 1);
        }) as Task,
    ];
    assert!(sim.run(tasks).all_finished());
    assert_eq!(done.get(), 2);
    let (start, end) = during.get();
    assert!(start < end && end < total, "writes went on during the rebuild: {start}..{end}");
}

#[test]
fn rebuilt_primary_and_backup_serve_every_acknowledged_write() {
    let sim = cluster(11);
    let c = sim.client_on_own_thread(0);
    let cfg = IndexConfig { expected_items: 2000, ..IndexConfig::default() };
    let ix = sim.block_on(<HiStore as PointIndex<_>>::create(&c, &cfg, 0)).unwrap();
    let other_cn = sim.client_on_own_thread(2);
    let other = sim.block_on(<HiStore as PointIndex<_>>::open(&other_cn, &cfg, 2)).unwrap();
    let present = |ix: &HiStore, c, upto: u64| {
        sim.block_on(async {
            for n in 1..=upto {
                let got = ix.search(c, &key(n)).await.unwrap();
                assert_eq!(got, Some(n.to_le_bytes().to_vec()), "key {n}");
            }
        })
    };
    sim.block_on(async {
        for n in 1..=300 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
    });
    present(&other, &other_cn, 300);

    // The primary (replica 0, the hash table, on node 1): rebuilt from the temporary primary's
    // skiplist while writes go on, then primary again.
    crash_and_rebuild(&sim, &ix, 1, 301..700);
    assert_eq!(stat(&stats(&ix), "rebuilds"), 1);
    let before = stats(&ix);
    present(&ix, &c, 699);
    let after = stats(&ix);
    assert_eq!(
        stat(&after, "lookup_requests"),
        stat(&before, "lookup_requests"),
        "GETs are one-sided again: the rebuilt hash table leads"
    );
    assert!(stat(&after, "bucket_reads") - stat(&before, "bucket_reads") >= 699);
    // A handle that last read the old primary reconnects, finds the new one serving, and goes on
    // without a view change of its own.
    present(&other, &other_cn, 699);
    assert_eq!(stat(&stats(&other), "failovers"), 0);

    // A backup (node 2): its skiplist rebuilt from the hash table. Then the other backup dies,
    // so that SCANs can only come from the rebuilt one.
    crash_and_rebuild(&sim, &ix, 2, 700..900);
    assert_eq!(stat(&stats(&ix), "rebuilds"), 2);
    sim.crash_memory_node(3, sim.now_ns()).unwrap();
    let mut out = Vec::new();
    sim.block_on(ix.scan(&c, &key(1), 2000, &mut out)).unwrap();
    assert_eq!(out.len(), 899, "the rebuilt skiplist holds every key");
    assert!(out.iter().enumerate().all(|(i, (k, v))| {
        let n = i as u64 + 1;
        k[..] == key(n) && v[..] == n.to_le_bytes()
    }));
    // And the primary again: the rebuilt backup becomes the temporary primary.
    sim.crash_memory_node(1, sim.now_ns()).unwrap();
    present(&ix, &c, 899);
    sim.block_on(async {
        assert!(ix.update(&c, &key(9), b"nine").await.unwrap());
        assert_eq!(ix.search(&c, &key(9)).await.unwrap(), Some(b"nine".to_vec()));
    });
}

/// A node restarted but not rebuilt holds nothing: the view drops its replicas (a client that
/// reaches it is answered *down*), and rebuilding a node whose replicas serve does nothing.
#[test]
fn restarted_node_is_dropped_until_rebuilt_and_rebuilding_twice_is_a_no_op() {
    let sim = cluster(12);
    let c = sim.client_on_own_thread(0);
    let cfg = IndexConfig { expected_items: 500, ..IndexConfig::default() };
    let ix = sim.block_on(<HiStore as PointIndex<_>>::create(&c, &cfg, 0)).unwrap();
    sim.block_on(async {
        for n in 1..=50 {
            ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
        }
    });
    // Crash and restart before anyone notices: the old view still names node 1's replica.
    let now = sim.now_ns();
    sim.crash_memory_node(1, now).unwrap();
    sim.restart_memory_node(1, now + 1_000).unwrap();
    sim.block_on(async {
        for n in 1..=50 {
            assert_eq!(ix.search(&c, &key(n)).await.unwrap(), Some(n.to_le_bytes().to_vec()));
        }
        assert_eq!(stat(&stats(&ix), "failovers"), 1, "the restarted node's replica dropped");
        assert_eq!(ix.rebuild_node(&c, 1).await.unwrap(), 1);
        assert_eq!(ix.rebuild_node(&c, 1).await.unwrap(), 0, "serving already");
        for n in 1..=50 {
            assert_eq!(ix.search(&c, &key(n)).await.unwrap(), Some(n.to_le_bytes().to_vec()));
        }
    });
}
