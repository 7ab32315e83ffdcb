//! SMART under the simulator (torn reads, delays, crashes, every history checked, scans
//! included) and on real threads, through the conformance kit.

use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, Ordered};
use dmindex_smart::{Smart, SmartOpt};

/// 48 keys under one node: push-downs, type switches up to N256 and in-place updates racing
/// reads, with crashes on one seed in four.
#[test]
fn one_hot_node_with_crashes() {
    suite::<Smart, Ordered>("smart_hot_node", &CheckConfig::default(), 0..300);
}

/// Keys spread over the key space and a cache too small for the tree: stale copies, fresh
/// restarts, every client crashing sometimes.
#[test]
fn spread_keys_tiny_cache() {
    let key_list = (1..=120u64).map(|x| x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).collect();
    let cfg =
        CheckConfig { key_list, keys: 120, crashes: Crashes::EverySeed, ..CheckConfig::default() };
    suite::<Smart, Ordered>("smart_spread_keys", &cfg, 0..150);
}

/// Variable-length keys sharing prefixes, values that outgrow their leaves (moves).
#[test]
fn long_keys_and_moving_values() {
    let cfg = CheckConfig { long_keys: true, value_size: 90, ..CheckConfig::default() };
    suite::<Smart, Ordered>("smart_long_keys", &cfg, 0..200);
}

/// Many keys and clients, no crashes: every client must finish.
#[test]
fn many_keys_many_clients() {
    let cfg = CheckConfig {
        keys: 300,
        clients: 16,
        ops_per_client: 80,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<SmartOpt, Ordered>("smart_opt_many_keys", &cfg, 0..80);
}

#[test]
fn real_threads() {
    on_local_threads::<Smart, Ordered>(&IndexConfig::default(), 10);
    on_local_threads::<SmartOpt, Ordered>(
        &IndexConfig { max_key: 16, ..IndexConfig::default() },
        5,
    );
}
