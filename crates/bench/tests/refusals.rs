//! The harness refuses what an index cannot do before anything runs.

use dmindex_bench::{run, BenchConfig, TransportKind};
use dmindex_index::{Ordered, PointOnly};
use dmindex_reference::LockedShards;

#[test]
fn scans_on_a_point_index_are_refused_naming_the_index() {
    for (workload, mix) in [("e", None), ("c", Some("read=0.5,scan=0.5"))] {
        let cfg = BenchConfig {
            index: "ref".into(),
            transport: TransportKind::Sim,
            workload: workload.into(),
            mix: mix.map(String::from),
            items: 100,
            ..BenchConfig::default()
        };
        let e = run::<LockedShards, PointOnly>(&cfg).expect_err("scans on a point index");
        let msg = e.to_string();
        assert!(msg.contains("'ref' is a point index") && msg.contains("scans"), "{msg}");
        // The same index with scan access runs it.
        let r = run::<LockedShards, Ordered>(&cfg).expect("ordered index runs scans");
        assert!(r.per_op.iter().any(|o| o.op == "scan" && o.count > 0));
    }
}
