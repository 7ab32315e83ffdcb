//! Garbage over what an operation READs (top buckets, descriptors, runs, blocks): every
//! operation reports a corrupt index instead of spinning (the conformance kit's garbage test).

use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, PointOnly};
use dmindex_plush::Plush;

#[test]
fn plush_reports_garbage_as_corrupt() {
    // Small top buckets and groups, so the keys the test loads reach levels below the top.
    let extra = [("groups", "1"), ("slots", "2"), ("runs", "2")];
    let index = IndexConfig::with_options(&extra);
    let cfg = GarbageConfig::new(index, IndexKind::Point);
    garbage_test::<Plush, PointOnly>(&cfg);
}
