//! Garbage over what an operation READs (buckets, contexts, blocks): every operation reports a
//! corrupt index instead of spinning (the conformance kit's garbage test).

use dmindex_clevel::CLevel;
use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, PointOnly};

#[test]
fn clevel_reports_garbage_as_corrupt() {
    // A small first level, so the keys the test loads grow the table.
    let index = IndexConfig::with_options(&[("log2_buckets", "2")]);
    let cfg = GarbageConfig::new(index, IndexKind::Point);
    garbage_test::<CLevel, PointOnly>(&cfg);
}
