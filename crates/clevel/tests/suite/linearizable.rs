//! CLevel under the simulator (torn reads, delays, crashes, every history checked) and on real
//! threads, through the conformance kit, on shapes that grow and drain all the time.

use dmindex_clevel::CLevel;
use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, PointOnly};

fn opts(kv: &[(&str, usize)]) -> Vec<(String, String)> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A bottom level of two buckets: the clients' keys grow the table every few dozen inserts,
/// and entries move up while others search, write and crash (inside drains too).
fn tiny() -> Vec<(String, String)> {
    opts(&[("log2_buckets", 1)])
}

#[test]
fn resizes_race_every_operation_with_crashes() {
    let cfg = CheckConfig { index_options: tiny(), ..CheckConfig::default() };
    suite::<CLevel, PointOnly>("clevel_resizes_with_crashes", &cfg, 0..300);
}

/// Each grower drains (`rehash=inline`) instead of the background client: drains race every
/// operation, and a crash inside one leaves it to a waiter.
#[test]
fn inline_rehash_with_crashes() {
    let mut options = tiny();
    options.push(("rehash".into(), "inline".into()));
    let cfg = CheckConfig { index_options: options, keys: 160, ..CheckConfig::default() };
    suite::<CLevel, PointOnly>("clevel_inline_rehash", &cfg, 0..200);
}

/// The SepHash port's reads (`reads=levels`: an operation's first read a level a round trip,
/// bottom first, after the context word) and its client KV cache (searches of blocks the
/// client published answered from its copies) while levels grow, drain and clients crash.
#[test]
fn port_reads_with_crashes() {
    let mut options = tiny();
    options.push(("reads".into(), "levels".into()));
    options.push(("kv_cache".into(), "1".into()));
    let cfg = CheckConfig { index_options: options, ..CheckConfig::default() };
    suite::<CLevel, PointOnly>("clevel_port_reads", &cfg, 0..200);
}

/// At most three levels: inserts that find no room wait for the rehash, and take it over
/// when its holder crashed.
#[test]
fn three_levels_at_most() {
    let cfg = CheckConfig {
        index_options: opts(&[("log2_buckets", 1), ("max_levels", 3)]),
        keys: 120,
        ..CheckConfig::default()
    };
    suite::<CLevel, PointOnly>("clevel_three_levels", &cfg, 0..200);
}

/// Two keys, twelve clients: racing inserts of an absent key (tentative entries), upserts,
/// updates and deletes, no crashes.
#[test]
fn racing_writes_of_two_keys() {
    let cfg = CheckConfig {
        index_options: tiny(),
        keys: 2,
        ops_per_client: 100,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<CLevel, PointOnly>("clevel_two_keys", &cfg, 0..150);
}

/// Longer keys and values in blocks of two cache lines, levels on three memory nodes.
#[test]
fn long_keys_and_values() {
    let cfg = CheckConfig {
        index_options: tiny(),
        long_keys: true,
        value_size: 80,
        memory_nodes: 3,
        ..CheckConfig::default()
    };
    suite::<CLevel, PointOnly>("clevel_long_keys", &cfg, 0..100);
}

/// The default shape (no resize at this size): the plain paths.
#[test]
fn default_shape() {
    suite::<CLevel, PointOnly>("clevel_default_shape", &CheckConfig::default(), 0..100);
}

#[test]
fn real_threads() {
    let cfg = IndexConfig { extra: tiny(), ..IndexConfig::default() };
    on_local_threads::<CLevel, PointOnly>(&cfg, 10);
}
