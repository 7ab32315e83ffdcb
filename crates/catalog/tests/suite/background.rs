//! The harness runs a design's background client (CLevel's rehasher) beside the workload, on
//! the simulator and on real threads: with the default `max_levels` (14), a table that grows
//! from a two-bucket bottom level through 3 000 keys reaches nine levels and never makes
//! an insert drain, so every bottom level dropped was drained by the background client.

use dmindex_bench::{BenchConfig, TransportKind};

fn run(transport: TransportKind) {
    let mut c = BenchConfig::of("clevel", "load");
    c.cluster.transport = transport;
    c.index.options = vec![("log2_buckets".into(), "1".into())];
    (c.workload.items, c.workload.ops) = (1000, Some(2000));
    let report = dmindex_catalog::bench(&c).unwrap_or_else(|err| panic!("{transport:?}: {err:#}"));
    let stat = |n: &str| report.index_stats.get(n).copied().unwrap_or(0);
    assert!(stat("resizes") >= 6, "{transport:?}: {:?}", report.index_stats);
    assert!(stat("rehashes") >= 1, "{transport:?}: no drain: {:?}", report.index_stats);
    assert!(stat("moved_entries") > 0, "{transport:?}: {:?}", report.index_stats);
}

#[test]
fn the_background_client_drains_on_the_simulator() {
    run(TransportKind::Sim);
}

#[test]
fn the_background_client_drains_on_threads() {
    run(TransportKind::Local);
}
