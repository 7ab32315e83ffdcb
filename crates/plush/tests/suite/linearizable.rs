//! Plush under the simulator (torn reads, delays, crashes, every history checked) and on real
//! threads, through the conformance kit, on shapes that migrate all the time.

use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, PointOnly};
use dmindex_plush::Plush;

fn opts(kv: &[(&str, usize)]) -> Vec<(String, String)> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// One top group of one-slot buckets, binary fanout, one run a group, two levels: the hot keys
/// migrate the top group every few inserts, every migration cascades, and the deepest level
/// compacts, while other clients search, write and crash (inside migrations too).
fn cascading() -> Vec<(String, String)> {
    opts(&[("groups", 1), ("slots", 1), ("runs", 1), ("fanout_bits", 1), ("levels", 2)])
}

#[test]
fn migrations_race_every_operation_with_crashes() {
    let cfg = CheckConfig { index_options: cascading(), ..CheckConfig::default() };
    suite::<Plush, PointOnly>("plush_migrations_with_crashes", &cfg, 0..300);
}

/// Groups of eight runs, whose descriptors span four cache lines: searches READ descriptors
/// that migrations reset and refill meanwhile, so an image can hold lines of two epochs (the
/// lines of an earlier epoch than line 0's list nothing).
#[test]
fn descriptors_of_many_lines() {
    let cfg = CheckConfig {
        index_options: opts(&[
            ("groups", 1),
            ("slots", 1),
            ("runs", 8),
            ("fanout_bits", 1),
            ("levels", 2),
        ]),
        keys: 24,
        ..CheckConfig::default()
    };
    suite::<Plush, PointOnly>("plush_descriptor_lines", &cfg, 0..200);
}

/// The port's reads (every run of a group, each migrated key one READ at a time) on the
/// cascading shape.
#[test]
fn the_ports_reads() {
    let mut options = cascading();
    options.extend(opts(&[("filters", 0)]));
    options.push(("key_reads".into(), "each".into()));
    let cfg = CheckConfig { index_options: options, ..CheckConfig::default() };
    suite::<Plush, PointOnly>("plush_ports_reads", &cfg, 0..100);
}

/// Two keys, twelve clients: upserts, updates and deletes of one key race searches while its
/// entry moves down and tombstones are dropped.
#[test]
fn racing_writes_of_two_keys() {
    let cfg = CheckConfig {
        index_options: cascading(),
        keys: 2,
        ops_per_client: 100,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<Plush, PointOnly>("plush_two_keys", &cfg, 0..150);
}

/// Hundreds of keys, a three-level sixteen-way tree with two-run groups, crashes on.
#[test]
fn many_keys_with_crashes() {
    let cfg = CheckConfig {
        index_options: opts(&[("groups", 2), ("slots", 2), ("runs", 2), ("levels", 3)]),
        keys: 300,
        ..CheckConfig::default()
    };
    suite::<Plush, PointOnly>("plush_many_keys_with_crashes", &cfg, 0..150);
}

/// Longer keys and values in blocks of two cache lines, on three memory nodes.
#[test]
fn long_keys_and_values() {
    let cfg = CheckConfig {
        index_options: opts(&[("groups", 3), ("slots", 1), ("runs", 2), ("fanout_bits", 2)]),
        long_keys: true,
        value_size: 80,
        memory_nodes: 3,
        ..CheckConfig::default()
    };
    suite::<Plush, PointOnly>("plush_long_keys", &cfg, 0..100);
}

/// The default shape (no migration at this size): the plain paths.
#[test]
fn default_shape() {
    suite::<Plush, PointOnly>("plush_default_shape", &CheckConfig::default(), 0..100);
}

#[test]
fn real_threads() {
    let cfg = IndexConfig { extra: cascading(), ..IndexConfig::default() };
    on_local_threads::<Plush, PointOnly>(&cfg, 10);
}
