//! The conformance suites `race` and `race-sephash` share: shapes that split all the time, run
//! through the kit under the simulator (torn reads, delays, crashes, every history checked).
//! Each test file names its own index and seeds; only the resize differs between the two.

use std::ops::Range;

use dmindex_conformance::{suite, CheckConfig, Crashes};
use dmindex_index::PointOnly;
use dmindex_sim::SimTransport;

/// RACE's shape options: groups per segment and the initial directory depth.
pub fn opts(groups: usize, depth: usize) -> Vec<(String, String)> {
    vec![("groups".into(), groups.to_string()), ("depth".into(), depth.to_string())]
}

/// One-group segments (21 slots) from a one-segment directory: hot keys split segments and
/// double the directory while other clients read, write and crash (clients behind a crashed
/// splitter are reported stuck, not failed).
pub fn splits_with_crashes<I: dmindex_index::PointIndex<SimTransport>>(
    name: &str,
    seeds: Range<u64>,
) {
    let cfg = CheckConfig { index_options: opts(1, 0), ..CheckConfig::default() };
    suite::<I, PointOnly>(name, &cfg, seeds);
}

/// More keys than one-group segments hold at depth 2, and more clients, no crashes: every
/// client must finish.
pub fn many_keys_many_clients<I: dmindex_index::PointIndex<SimTransport>>(
    name: &str,
    seeds: Range<u64>,
) {
    let cfg = CheckConfig {
        index_options: opts(1, 2),
        keys: 160,
        clients: 16,
        ops_per_client: 80,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<I, PointOnly>(name, &cfg, seeds);
}

/// Hundreds of keys in one-group segments with crashes: dozens of splits per seed, and crashes
/// inside them.
pub fn many_splits_with_crashes<I: dmindex_index::PointIndex<SimTransport>>(
    name: &str,
    seeds: Range<u64>,
) {
    let cfg = CheckConfig { index_options: opts(1, 0), keys: 300, ..CheckConfig::default() };
    suite::<I, PointOnly>(name, &cfg, seeds);
}

/// Longer keys and values in blocks of two cache lines.
pub fn long_keys_and_values<I: dmindex_index::PointIndex<SimTransport>>(
    name: &str,
    seeds: Range<u64>,
) {
    let cfg = CheckConfig {
        index_options: opts(2, 0),
        long_keys: true,
        value_size: 80,
        ..CheckConfig::default()
    };
    suite::<I, PointOnly>(name, &cfg, seeds);
}
