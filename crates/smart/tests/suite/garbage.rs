//! Garbage over the nodes an operation READs: every operation reports a corrupt index instead of
//! spinning (the conformance kit's garbage test), for SMART and SMART-Opt.

use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, Ordered};
use dmindex_smart::{Smart, SmartOpt};

#[test]
fn smart_reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered);
    garbage_test::<Smart, Ordered>(&cfg);
}

#[test]
fn smart_opt_reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered);
    garbage_test::<SmartOpt, Ordered>(&cfg);
}
