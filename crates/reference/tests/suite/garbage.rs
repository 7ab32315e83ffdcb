//! Garbage over what an operation READs (a shard's header and array; not its lock word): every
//! operation reports a corrupt index (the conformance kit's garbage test).

use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, Ordered};
use dmindex_reference::LockedShards;

#[test]
fn ref_reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered);
    garbage_test::<LockedShards, Ordered>(&cfg);
}
