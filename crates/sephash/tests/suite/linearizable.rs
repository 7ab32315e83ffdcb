//! SepHash under the simulator (torn reads, delays, crashes, many seeds, every history
//! checked) and on real threads, through the conformance kit.

use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, PointOnly};
use dmindex_sephash::SepHash;

fn opts(o: &[(&str, &str)]) -> Vec<(String, String)> {
    o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

const TINY: &[(&str, &str)] =
    &[("cur", "80"), ("main_ratio", "2"), ("depth", "1"), ("max_depth", "10"), ("window", "3")];

/// Merges and splits all the time while readers read and clients crash.
#[test]
fn tiny_segments_with_crashes() {
    let cfg = CheckConfig { index_options: opts(TINY), keys: 120, ..CheckConfig::default() };
    suite::<SepHash, PointOnly>("tiny_segments_with_crashes", &cfg, 0..120);
}

/// A hot key space: many clients append the same keys, so update and delete race appends
/// and merges on every slot.
#[test]
fn hot_keys_no_crashes() {
    let cfg = CheckConfig {
        index_options: opts(TINY),
        keys: 12,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<SepHash, PointOnly>("hot_keys_no_crashes", &cfg, 0..60);
}

#[test]
fn paper_shape_with_crashes() {
    let cfg = CheckConfig { keys: 400, clients: 16, ops_per_client: 60, ..CheckConfig::default() };
    suite::<SepHash, PointOnly>("paper_shape_with_crashes", &cfg, 0..30);
}

#[test]
fn real_threads() {
    let cfg = IndexConfig { extra: opts(TINY), ..IndexConfig::default() };
    on_local_threads::<SepHash, PointOnly>(&cfg, 30);
}

/// Blind updates and deletes (`update=upsert`, checked as upserts and unconditional deletes)
/// while merges and splits run and clients crash.
#[test]
fn blind_updates_with_crashes() {
    let mut extra = TINY.to_vec();
    extra.push(("update", "upsert"));
    let cfg = CheckConfig { index_options: opts(&extra), keys: 120, ..CheckConfig::default() };
    suite::<SepHash, PointOnly>("blind_updates_with_crashes", &cfg, 0..80);
}

/// Blind updates on a hot key space: every search must see the newest append of its key.
#[test]
fn blind_updates_hot_keys() {
    let mut extra = TINY.to_vec();
    extra.push(("update", "upsert"));
    let cfg = CheckConfig {
        index_options: opts(&extra),
        keys: 12,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<SepHash, PointOnly>("blind_updates_hot_keys", &cfg, 0..60);
}

/// Blind updates on real threads.
#[test]
fn blind_updates_on_real_threads() {
    let mut extra = TINY.to_vec();
    extra.push(("update", "upsert"));
    let cfg = IndexConfig { extra: opts(&extra), ..IndexConfig::default() };
    on_local_threads::<SepHash, PointOnly>(&cfg, 20);
}
