//! HiStore under the simulator (torn reads, delays, client crashes, every history checked, scans
//! included) and on real threads, through the conformance kit.

use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_histore::{AllHashtable, AllSkiplist, HiStore, SingleSkiplist};
use dmindex_index::{IndexConfig, Ordered, PointOnly};

fn on(nodes: u16) -> CheckConfig {
    CheckConfig { memory_nodes: nodes, ..CheckConfig::default() }
}

/// Each replica on its own node: group commit racing one-sided GETs and backup SCANs.
#[test]
fn histore_cluster() {
    suite::<HiStore, Ordered>("histore_cluster", &on(4), 0..100);
}

/// A tiny table (long chains) and one partition (every write in one log), hot keys.
#[test]
fn histore_hot_keys_long_chains() {
    let cfg = CheckConfig {
        keys: 8,
        clients: 16,
        index_options: vec![("table_fill".into(), "100".into()), ("partitions".into(), "1".into())],
        crashes: Crashes::EverySeed,
        ..on(4)
    };
    suite::<HiStore, Ordered>("histore_hot_keys", &cfg, 0..60);
}

/// The paper's SCAN client (each item READ in turn, the view words after the last): items on
/// three data servers, written while the READs go on.
#[test]
fn histore_scans_reading_each_item_in_turn() {
    let cfg = CheckConfig {
        keys: 16,
        index_options: vec![("scan_reads".into(), "each".into())],
        ..on(6)
    };
    suite::<HiStore, Ordered>("histore_scan_each", &cfg, 0..40);
}

#[test]
fn baselines() {
    suite::<AllSkiplist, Ordered>("all_skiplist", &on(4), 0..40);
    suite::<AllHashtable, PointOnly>("all_hashtable", &on(4), 0..30);
    suite::<SingleSkiplist, Ordered>("single_skiplist", &on(2), 0..30);
}

#[test]
fn real_threads() {
    on_local_threads::<HiStore, Ordered>(&IndexConfig::default(), 10);
}

/// A memory node crashes mid-run (the primary, a backup, or a data server past node 0): clients
/// fail over, retry their writes without applying them twice, and every history is linearizable.
#[test]
fn memory_node_crashes() {
    let cfg = CheckConfig { memory_node_crash_ns: 1_500_000, ..on(4) };
    suite::<HiStore, Ordered>("histore_mn_crash", &cfg, 0..60);
}

/// The crashed node restarts empty 200 µs later and is rebuilt while clients go on (the hash
/// table from the temporary primary's skiplist, or a skiplist from the table), then hands the
/// primary role back; every key is read once more at the end, from the rebuilt group.
#[test]
fn memory_node_restarts_and_is_rebuilt() {
    let cfg =
        CheckConfig { memory_node_crash_ns: 800_000, memory_node_restart_ns: 200_000, ..on(4) };
    let sum = suite::<HiStore, Ordered>("histore_mn_rebuild", &cfg, 0..60);
    assert_eq!(
        sum.rebuilds + sum.rebuilds_crashed,
        sum.seeds,
        "every seed rebuilt its crashed node unless the rebuilding client crashed"
    );
    assert!(sum.rebuilds >= sum.seeds * 9 / 10, "{sum}");
}
