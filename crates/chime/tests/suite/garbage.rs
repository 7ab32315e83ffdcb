//! Garbage over the nodes an operation READs: every operation reports a corrupt index instead of
//! spinning (the conformance kit's garbage test), with CHIME's hopscotch leaves and with
//! Sherman's sorted ones.

use dmindex_chime::{Chime, Sherman};
use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, Ordered};

#[test]
fn chime_reports_garbage_as_corrupt() {
    garbage_test::<Chime, Ordered>(&GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered));
}

#[test]
fn sherman_reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered);
    garbage_test::<Sherman, Ordered>(&cfg);
}
