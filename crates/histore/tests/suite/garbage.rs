//! Garbage over what a read hits (the primary's hash-table bucket, the item): GET and SCAN report
//! a corrupt index instead of spinning (the conformance kit's garbage test). Writes go by request
//! to the primary's CPU, which keeps each key's slot in its own memory and overwrites it: garbage
//! in the one-sided table does not reach them.

use dmindex_conformance::{garbage_test, GarbageConfig, Op};
use dmindex_histore::{AllHashtable, AllSkiplist, HiStore, SingleHashtable, SingleSkiplist};
use dmindex_index::{IndexConfig, IndexKind, Ordered, PointOnly};

fn config(kind: IndexKind, nodes: u16) -> GarbageConfig {
    let mut cfg = GarbageConfig::new(IndexConfig::default(), kind);
    cfg.ops = match kind {
        IndexKind::Ordered => vec![Op::Search, Op::Scan],
        IndexKind::Point => vec![Op::Search],
    };
    cfg.memory_nodes = nodes;
    cfg
}

#[test]
fn histore_reports_garbage_as_corrupt() {
    garbage_test::<HiStore, Ordered>(&config(IndexKind::Ordered, 1));
    garbage_test::<HiStore, Ordered>(&config(IndexKind::Ordered, 4));
}

#[test]
fn baselines_report_garbage_as_corrupt() {
    garbage_test::<AllHashtable, PointOnly>(&config(IndexKind::Point, 4));
    garbage_test::<AllSkiplist, Ordered>(&config(IndexKind::Ordered, 4));
    garbage_test::<SingleHashtable, PointOnly>(&config(IndexKind::Point, 2));
    garbage_test::<SingleSkiplist, Ordered>(&config(IndexKind::Ordered, 1));
}
