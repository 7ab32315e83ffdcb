//! RACE under the simulator (torn reads, delays, crashes, every history checked) and on real
//! threads, through the conformance kit, on shapes that split all the time.

use crate::common;

use common::opts;
use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, PointOnly};
use dmindex_race::Race;

/// One-group segments (21 slots, all of them a key's) from a one-segment directory: the 48 hot
/// keys split segments and double the directory while other clients read, write and crash.
#[test]
fn splits_race_every_operation_with_crashes() {
    common::splits_with_crashes::<Race>("race_splits_with_crashes", 0..400);
}

/// More keys than one-group segments hold at depth 2, and more clients, no crashes: every
/// client must finish.
#[test]
fn many_keys_many_clients() {
    common::many_keys_many_clients::<Race>("race_many_keys", 0..100);
}

/// Longer keys and values in blocks of two cache lines.
#[test]
fn long_keys_and_values() {
    common::long_keys_and_values::<Race>("race_long_keys", 0..150);
}

/// Hundreds of keys in one-group segments with crashes: dozens of splits per seed, and crashes
/// inside them (clients behind a crashed splitter are reported stuck, not failed).
#[test]
fn many_splits_with_crashes() {
    common::many_splits_with_crashes::<Race>("race_many_splits_with_crashes", 0..200);
}

/// Two keys, twelve clients, no splits: inserts, deletes and updates of one key race all the
/// time, and a READ of a key's buckets samples its lines at different instants (stretched by
/// delays), so an image can pair an entry already deleted with one made after it. RACE's own rule
/// (keep the lowest copy, clear the others) then clears a live entry.
#[test]
fn racing_writes_of_two_keys() {
    let cfg = CheckConfig {
        index_options: opts(1, 0),
        keys: 2,
        ops_per_client: 100,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<Race, PointOnly>("race_two_keys", &cfg, 0..200);
}

/// The default shape (no split at this size): the plain paths.
#[test]
fn default_shape() {
    suite::<Race, PointOnly>("race_default_shape", &CheckConfig::default(), 0..100);
}

#[test]
fn real_threads() {
    let cfg = IndexConfig { extra: opts(1, 0), ..IndexConfig::default() };
    on_local_threads::<Race, PointOnly>(&cfg, 10);
}
