//! Garbage over the nodes an operation READs: every operation reports a corrupt index instead of
//! spinning (the conformance kit's garbage test).

use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, PointOnly};
use dmindex_sephash::SepHash;

#[test]
fn sephash_reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Point);
    garbage_test::<SepHash, PointOnly>(&cfg);
}
