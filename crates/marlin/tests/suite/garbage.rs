//! Garbage over the nodes an operation READs: every operation reports a corrupt index instead of
//! spinning (the conformance kit's garbage test).

use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, Ordered};
use dmindex_marlin::Marlin;

#[test]
fn marlin_reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered);
    garbage_test::<Marlin, Ordered>(&cfg);
}
