//! Dolphin under the simulator (torn reads, delays, crashes, every history checked, scans
//! included) and on real threads, through the conformance kit.

use dmindex_conformance::{check_seed, on_local_threads, suite, CheckConfig, Crashes};
use dmindex_dolphin::Dolphin;
use dmindex_fabric::local::LocalTransport;
use dmindex_index::{IndexConfig, Ordered, PointIndex};

fn slots(n: &str) -> Vec<(String, String)> {
    vec![("slots".into(), n.into())]
}

/// 48 dense keys in 4-slot leaves: splits every few inserts, racing searches, updates,
/// deletes and scans; crashes on one seed in four.
#[test]
fn hot_prefix_small_leaves() {
    let cfg = CheckConfig { index_options: slots("4"), ..CheckConfig::default() };
    suite::<Dolphin, Ordered>("dolphin_hot_prefix", &cfg, 0..200);
}

/// 256 dense keys, 16 clients: a special node grows to N256 while leaves split under it.
#[test]
fn special_node_growth() {
    let cfg = CheckConfig {
        keys: 256,
        clients: 16,
        ops_per_client: 60,
        index_options: slots("4"),
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<Dolphin, Ordered>("dolphin_special_growth", &cfg, 0..40);
}

/// Keys in 12 prefixes of 4 keys each, parting at bytes 1 to 6: new prefixes and path splits
/// racing splits and type switches, every client crashing sometimes.
#[test]
fn many_prefixes_with_crashes() {
    let key_list = (0..48u64)
        .map(|x| {
            let group = (x / 4).wrapping_mul(0x0001_0203_0405_0607) & 0x00FF_FFFF_FFFF_FF00;
            0x0100_0000_0000_0000 | group | ((x % 4) * 60 + 1)
        })
        .collect();
    let cfg = CheckConfig {
        key_list,
        keys: 48,
        index_options: slots("2"),
        crashes: Crashes::EverySeed,
        ..CheckConfig::default()
    };
    suite::<Dolphin, Ordered>("dolphin_many_prefixes", &cfg, 0..150);
}

/// Values filling a whole cache line with their meta word.
#[test]
fn line_wide_values() {
    let cfg = CheckConfig { value_size: 56, index_options: slots("6"), ..CheckConfig::default() };
    suite::<Dolphin, Ordered>("dolphin_wide_values", &cfg, 0..80);
}

/// Two-line cells (100-byte values): writers lock a cell and land its lines one by one while
/// readers READ them, under torn reads, delays and crashes.
#[test]
fn multi_line_values() {
    let cfg = CheckConfig { value_size: 100, index_options: slots("6"), ..CheckConfig::default() };
    suite::<Dolphin, Ordered>("dolphin_multi_line_values", &cfg, 0..80);
}

/// 24 clients × 150 operations on 256 keys with 32-byte values in 84-slot leaves (5.6 KB, as
/// the default leaf was at every value size), no crashes: run phases of 210–225 ms of virtual
/// time, past the fixed 200 ms deadline that once failed them as deadlocks. The clients
/// complete operations throughout, so every seed passes with every operation checked.
#[test]
fn long_runs_are_slow_not_stuck() {
    let cfg = CheckConfig {
        clients: 24,
        ops_per_client: 150,
        keys: 256,
        value_size: 32,
        index_options: slots("84"),
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    let mut longest = 0;
    for seed in 1..9 {
        let r = check_seed::<Dolphin, Ordered>(&cfg, seed).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((r.completed, r.stuck), (r.requested, 0), "{r}");
        longest = longest.max(r.run_ns);
    }
    assert!(longest > 200_000_000, "no run phase outlasted 200 ms: {longest} ns");
}

#[test]
fn real_threads() {
    on_local_threads::<Dolphin, Ordered>(&IndexConfig::default(), 10);
    let small = IndexConfig { extra: slots("4"), ..IndexConfig::default() };
    on_local_threads::<Dolphin, Ordered>(&small, 5);
}

/// Leaves longer than a packet (1000-byte values, 8 slots: 8.3 KB, three 4 KB packets): an SMO
/// that dies inside its in-place rewrite leaves the leaf torn, which the claim's taker
/// finishes from the rewrite's copy; readers that keep finding it torn wait on the claim.
#[test]
fn leaves_longer_than_a_packet_survive_client_crashes() {
    let cfg = CheckConfig {
        value_size: 1000,
        index_options: slots("8"),
        crashes: Crashes::EverySeed,
        ..CheckConfig::default()
    };
    suite::<Dolphin, Ordered>("dolphin_long_leaf_crashes", &cfg, 0..120);
}

/// Dolphin claims client-crash recovery at every value size: a multi-line cell's lock names its
/// holder, whose redo record finishes its write, so the seeds above fail on a client stuck
/// behind a crash for multi-line values too.
#[test]
fn recovers_from_client_crashes_at_every_value_size() {
    type D = Dolphin;
    let with = |max_value| IndexConfig { max_value, ..CheckConfig::default().index_config() };
    let recovers = <D as PointIndex<LocalTransport>>::recovers_client_crashes;
    const _: () = assert!(<D as PointIndex<LocalTransport>>::RECOVERS_CLIENT_CRASHES);
    assert!([8, 56, 57, 100, 4096].into_iter().all(|v| recovers(&with(v))));
}

/// Two-line cells with a crash in every seed: writers that die holding a cell's lock, or with
/// part of its lines landed, are finished from their redo records by whoever waits on them.
#[test]
fn multi_line_values_survive_client_crashes() {
    let cfg = CheckConfig {
        value_size: 100,
        index_options: slots("6"),
        crashes: Crashes::EverySeed,
        ..CheckConfig::default()
    };
    suite::<Dolphin, Ordered>("dolphin_multi_line_crashes", &cfg, 0..100);
}
