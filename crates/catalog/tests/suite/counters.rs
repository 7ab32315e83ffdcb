//! Every counter an index reports is labelled in `bench`'s table (what it counts, in words).

use dmindex_bench::{counter_label, BenchConfig, TransportKind};

#[test]
fn every_index_counter_has_a_label() {
    for e in dmindex_catalog::INDEXES {
        let mut c = BenchConfig::of(e.name, "a");
        c.cluster.transport = TransportKind::Sim;
        (c.workload.items, c.workload.ops) = (500, Some(200));
        let report = dmindex_catalog::bench(&c).unwrap_or_else(|err| panic!("{}: {err:#}", e.name));
        for name in report.index_stats.keys() {
            assert!(counter_label(name).is_some(), "{}: counter '{name}' has no label", e.name);
        }
        let table = report.table();
        assert!(!table.contains("not described"), "{}: an unlabelled counter\n{table}", e.name);
    }
}
