//! Marlin under the simulator (torn reads, delays, crashes, every history checked, scans
//! included) and on real threads, through the conformance kit.

use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, Ordered};
use dmindex_marlin::Marlin;

fn spans(leaf: &str, internal: &str) -> Vec<(String, String)> {
    vec![("span".into(), leaf.into()), ("internal_span".into(), internal.into())]
}

/// 48 keys in 4-entry leaves under 4-entry internal nodes: leaf and internal splits, root
/// growth and compactions racing searches, writes and scans; crashes on one seed in four.
#[test]
fn small_nodes() {
    let cfg = CheckConfig { index_options: spans("4", "4"), ..CheckConfig::default() };
    suite::<Marlin, Ordered>("marlin_small_nodes", &cfg, 0..200);
}

/// Many clients on few keys in one leaf: duplicate inserts, lost pointer CASes, deletes.
#[test]
fn hot_keys() {
    let cfg = CheckConfig {
        keys: 6,
        clients: 16,
        index_options: spans("8", "4"),
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<Marlin, Ordered>("marlin_hot_keys", &cfg, 0..100);
}

/// Every client crashing sometimes, values longer than the first item READ.
#[test]
fn crashes_and_long_values() {
    let cfg = CheckConfig {
        value_size: 200,
        index_options: spans("4", "4"),
        crashes: Crashes::EverySeed,
        ..CheckConfig::default()
    };
    suite::<Marlin, Ordered>("marlin_crashes", &cfg, 0..100);
}

#[test]
fn real_threads() {
    on_local_threads::<Marlin, Ordered>(&IndexConfig::default(), 10);
    let small = IndexConfig { extra: spans("4", "4"), ..IndexConfig::default() };
    on_local_threads::<Marlin, Ordered>(&small, 5);
}
