//! `race-sephash` (RACE with the SepHash authors' resize): the conformance kit on shapes that
//! split all the time, a model against a `HashMap`, and a storm of inserts racing one-by-one
//! moves under the simulator, checked in remote memory afterwards.

use crate::common;

use common::{opts, sim};
use dmindex_conformance::{
    garbage_test, model_test, on_local_threads, suite, CheckConfig, Crashes, GarbageConfig,
    ModelConfig,
};
use dmindex_fabric::Client;
use dmindex_index::{IndexConfig, IndexKind, IndexStats, PointIndex, PointOnly};
use dmindex_race::RaceSepHash;
use dmindex_sim::{Faults, SimTransport};

fn get(s: &IndexStats, name: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == name).map(|&(_, v)| v).unwrap()
}

#[test]
fn model_one_group_segments_from_depth_zero() {
    let index = IndexConfig {
        extra: vec![
            ("groups".into(), "1".into()),
            ("depth".into(), "0".into()),
            ("max_depth".into(), "12".into()),
        ],
        ..IndexConfig::default()
    };
    let mut cfg = ModelConfig::new(index, 200, 150);
    cfg.after = Some(|s: &IndexStats, items| {
        if items > 21 {
            assert!(get(s, "splits") > 0 && get(s, "split_moved_entries") > 0, "{s:?}");
            assert!(get(s, "split_attempts") >= get(s, "splits"), "{s:?}");
            assert!(get(s, "directory_refresh_bytes") > 0, "{s:?}");
        }
    });
    cfg.search_again = true;
    model_test::<RaceSepHash, PointOnly>(&cfg);
}

#[test]
fn model_default_shape() {
    model_test::<RaceSepHash, PointOnly>(&ModelConfig::new(IndexConfig::default(), 500, 8));
}

/// One-group segments from a one-segment directory: splits, doublings and one-by-one moves race
/// every operation, with crashes (clients behind a crashed splitter are reported stuck).
#[test]
fn splits_race_every_operation_with_crashes() {
    common::splits_with_crashes::<RaceSepHash>("race_sephash_splits_with_crashes", 0..300);
}

/// More keys and clients, no crashes: every client must finish.
#[test]
fn many_keys_many_clients() {
    common::many_keys_many_clients::<RaceSepHash>("race_sephash_many_keys", 0..100);
}

/// Hundreds of keys with crashes: dozens of splits per seed, crashes inside them.
#[test]
fn many_splits_with_crashes() {
    common::many_splits_with_crashes::<RaceSepHash>(
        "race_sephash_many_splits_with_crashes",
        0..150,
    );
}

/// Longer keys and values in blocks of two cache lines.
#[test]
fn long_keys_and_values() {
    common::long_keys_and_values::<RaceSepHash>("race_sephash_long_keys", 0..100);
}

/// Clients stall for up to 5 ms before a verb and then go on in a table whose splits moved on
/// meanwhile: an insert stalled between its bucket READ and its CAS lands in a bucket the
/// splitter has switched (an orphan, or a write the emptying CAS must carry over).
#[test]
fn stalled_clients_during_moves() {
    let cfg = CheckConfig {
        index_options: opts(1, 0),
        keys: 60,
        stall_max_ns: 5_000_000,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<RaceSepHash, PointOnly>("race_sephash_stalls", &cfg, 0..100);
}

/// Garbage over the nodes an operation READs (directory entries included): every operation
/// reports a corrupt index instead of spinning.
#[test]
fn reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Point);
    garbage_test::<RaceSepHash, PointOnly>(&cfg);
}

#[test]
fn real_threads() {
    let cfg = IndexConfig { extra: opts(1, 0), ..IndexConfig::default() };
    on_local_threads::<RaceSepHash, PointOnly>(&cfg, 10);
}

/// Sixteen clients on three compute nodes insert 50 distinct keys each into one-group segments
/// from a one-segment directory, each reading back another's key: hundreds of splits whose
/// moves race inserts, failed lock attempts and whole-directory re-reads. Afterwards every key
/// is found with its value in exactly one slot through a cold handle, and attempts outnumber
/// splits.
#[test]
fn one_by_one_moves_under_concurrent_inserts_lose_nothing() {
    let config = IndexConfig { extra: opts(1, 0), ..IndexConfig::default() };
    for seed in 0..8 {
        let sim = sim(seed);
        let setup = sim.client_on_own_thread(0);
        sim.block_on(<RaceSepHash as PointIndex<SimTransport>>::create(&setup, &config, 0))
            .unwrap();
        let handles: Vec<RaceSepHash> = (0..3)
            .map(|cn| {
                let c = sim.client_on_own_thread(cn);
                sim.block_on(RaceSepHash::open(&c, &config, cn)).unwrap()
            })
            .collect();
        let clients: Vec<Client<SimTransport>> =
            (0..16).map(|i| sim.client_on_own_thread((i % 3) as u16)).collect();
        sim.set_faults(Faults::delays());
        common::insert_storm(&sim, &clients, &handles, seed, 20_000_000_000);
        let total = |name| {
            handles
                .iter()
                .map(|h| get(&<RaceSepHash as PointIndex<SimTransport>>::stats(h), name))
                .sum::<u64>()
        };
        let (splits, attempts) = (total("splits"), total("split_attempts"));
        assert!(splits >= 16, "seed {seed}: only {splits} splits for 800 keys");
        assert!(attempts > splits, "seed {seed}: {attempts} attempts, {splits} splits");
        sim.set_faults(Faults::default());
        let c = sim.client_on_own_thread(2);
        let fresh = sim.block_on(RaceSepHash::open(&c, &config, 2)).unwrap();
        sim.block_on(async {
            for k in 1..=800u64 {
                let k = k.to_be_bytes();
                assert_eq!(fresh.search(&c, &k).await.unwrap(), Some(k.to_vec()), "seed {seed}");
                assert_eq!(fresh.table().slots_holding(&c, &k).await.unwrap(), 1, "seed {seed}");
            }
        });
    }
}
