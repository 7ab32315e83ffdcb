use dmindex_catalog::papers::sephash::*;

use super::{runs_nothing, session};

/// Threads are placed as the paper places them: ≤ 16 on one CN, then 16 per CN.
#[test]
fn threads_are_placed_as_the_paper() {
    let scale = (PAPER.scale)();
    let s = session(&scale, &PAPER, &runs_nothing);
    let at = |t| {
        let c = base(&s, "sephash", "c", t);
        (c.cluster.cns, c.cluster.clients, c.keys.size, c.keys.value_size)
    };
    assert_eq!(at(1), (1, 1, 16, 32));
    assert_eq!(at(16), (1, 16, 16, 32));
    assert_eq!(at(32), (2, 16, 16, 32));
    assert_eq!(at(128), (8, 16, 16, 32));
    assert_eq!(searches(&s, "race", 4).workload.distribution.as_deref(), Some("uniform"));
}

/// Every series' index accepts the options the figures give it (the paper's line and the
/// variant's): one short seed of `check` on each.
#[test]
fn every_series_options_are_known_to_its_index() {
    use dmindex_conformance::{CheckConfig, Crashes};
    let scale = (PAPER.scale)();
    let s = session(&scale, &PAPER, &runs_nothing);
    for v in INDEXES {
        let options = variant(&s, v, 1, searches).index.options;
        let cfg = CheckConfig {
            clients: 2,
            ops_per_client: 4,
            keys: 8,
            crashes: Crashes::Never,
            index_options: options.clone(),
            ..CheckConfig::default()
        };
        let entry = dmindex_catalog::find(v.index).unwrap();
        if let Err(e) = (entry.check)(&cfg, 0) {
            panic!("{} with {options:?}: {e:#}", v.series);
        }
    }
}

/// An insert run grows the index through four doublings, from items / 16 to items.
#[test]
fn inserts_span_four_doublings() {
    let scale = (PAPER.scale)();
    let s = session(&scale, &PAPER, &runs_nothing);
    let c = inserts(&s, "sephash", 128);
    let (fill, ops) = (c.workload.items, c.workload.ops.unwrap());
    assert_eq!(fill + ops, scale.items);
    assert_eq!((fill + ops) / fill, 1 << DOUBLINGS);
    assert_eq!(c.workload.name, "load");
}
