//! CHIME and Sherman under the simulator (torn reads, delays, crashes, many seeds, every history
//! checked, liveness and coverage stated) and on real threads, through the conformance kit.

use dmindex_chime::leaf::home;
use dmindex_chime::{factors_on, Chime, Sherman};
use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, Ordered};
use dmindex_prim::rdwc::Rdwc;

fn opts(span: usize, h: usize, internal: usize) -> Vec<(String, String)> {
    vec![
        ("span".into(), span.to_string()),
        ("h".into(), h.to_string()),
        ("internal_span".into(), internal.to_string()),
    ]
}

/// CHIME as `bench` and `check` run it: behind RDWC.
fn chime(name: &str, cfg: CheckConfig, seeds: std::ops::Range<u64>) {
    suite::<Rdwc<Chime>, Ordered>(name, &cfg, seeds);
}

fn sherman(name: &str, cfg: CheckConfig, seeds: std::ops::Range<u64>) {
    suite::<Rdwc<Sherman>, Ordered>(name, &cfg, seeds);
}

/// Mixed operations over a small hot key space on tiny nodes: leaf splits, internal splits and
/// root growth happen while readers read and other clients crash.
#[test]
fn chime_mixed_small_nodes_with_crashes() {
    let cfg = CheckConfig { index_options: opts(8, 4, 4), keys: 120, ..CheckConfig::default() };
    chime("chime_mixed_small_nodes_with_crashes", cfg, 0..120);
}

#[test]
fn chime_default_shape_with_crashes() {
    let cfg = CheckConfig { keys: 400, clients: 16, ops_per_client: 60, ..CheckConfig::default() };
    chime("chime_default_shape_with_crashes", cfg, 0..40);
}

#[test]
fn chime_h2_and_h16() {
    for (name, o) in [("chime_h2", opts(16, 2, 4)), ("chime_h16", opts(16, 16, 4))] {
        let cfg = CheckConfig { index_options: o, keys: 100, ..CheckConfig::default() };
        chime(name, cfg, 0..40);
    }
}

/// Keys that all hash to two adjacent homes of a 16-slot leaf with H = 4: every insert hops and
/// readers constantly race hop-range writes (the third level of validation), and overflowing
/// neighbourhoods force splits whose critical keys are exactly these.
#[test]
fn chime_readers_race_hop_range_writes() {
    let keys: Vec<u64> = (1..).filter(|&k| matches!(home(k, 16), 3 | 4)).take(40).collect();
    let cfg = CheckConfig {
        index_options: opts(16, 4, 4),
        key_list: keys,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    chime("chime_readers_race_hop_range_writes", cfg, 0..60);
}

/// Consecutive keys: splits put separators right next to live keys, and inserts meet half
/// splits (leaf written, parent not yet) while delays stretch every window.
#[test]
fn chime_inserts_race_half_splits() {
    let cfg = CheckConfig {
        index_options: opts(8, 2, 4),
        keys: 60,
        clients: 20,
        ops_per_client: 50,
        ..CheckConfig::default()
    };
    chime("chime_inserts_race_half_splits", cfg, 0..60);
}

#[test]
#[ignore = "long sweep: cargo test -p dmindex-chime --release -- --ignored"]
fn chime_thousands_of_seeds() {
    for (i, o) in [opts(8, 4, 4), opts(16, 2, 4), opts(64, 8, 64)].into_iter().enumerate() {
        let cfg = CheckConfig { index_options: o, keys: 150, ..CheckConfig::default() };
        chime("chime_thousands_of_seeds", cfg, (i as u64 * 10_000)..(i as u64 * 10_000 + 1000));
    }
}

/// Indirect values (40 bytes, in blocks behind pointers): a reader must never see a pointer to a
/// block that is not fully written.
#[test]
fn chime_indirect_values_with_crashes() {
    let cfg = CheckConfig {
        index_options: opts(8, 4, 4),
        keys: 80,
        value_size: 40,
        ..CheckConfig::default()
    };
    chime("chime_indirect_values_with_crashes", cfg, 0..40);
}

/// Keys longer than 8 bytes, three per 8-byte prefix: lookups resolve same-prefix entries
/// through their blocks while splits, hops and crashes go on.
#[test]
fn chime_long_keys_sharing_prefixes_with_crashes() {
    let cfg = CheckConfig {
        index_options: opts(8, 4, 4),
        keys: 90,
        long_keys: true,
        ..CheckConfig::default()
    };
    chime("chime_long_keys_sharing_prefixes_with_crashes", cfg, 0..40);
}

/// Twelve keys per 8-byte prefix, past what a leaf keeps as plain entries: collision groups
/// form, grow by copies, have slots rewritten in place and shrink, while splits, hops and
/// crashes go on; on CHIME's default leaf (H = 8) and on tiny leaves (H = 4).
#[test]
fn chime_collision_groups_with_crashes() {
    for (name, options) in [("default leaf", vec![]), ("tiny leaves", opts(8, 4, 4))] {
        let cfg = CheckConfig {
            index_options: options,
            keys: 96,
            long_keys: true,
            keys_per_prefix: 12,
            ..CheckConfig::default()
        };
        chime(&format!("chime_collision_groups_with_crashes ({name})"), cfg, 0..30);
    }
}

/// Prefixes shared by more keys than a page holds (32 one-line records; 10 of three lines at
/// 120-byte keys; 6 of five lines at 250-byte keys, whose directory nodes hold 14 pages, so
/// 100 keys make two levels): groups become directories whose pages take appends in place,
/// split, and lose keys by copies of the path, while torn reads, splits and crashes go on (a
/// READ torn across an append of several lines skips the record).
#[test]
fn chime_directories_with_crashes() {
    for (name, options, key_bytes) in [
        ("default leaf", vec![], 11),
        ("tiny leaves", opts(8, 4, 4), 11),
        ("default leaf, 120-byte keys", vec![], 120),
        ("default leaf, 250-byte keys", vec![], 250),
    ] {
        let cfg = CheckConfig {
            index_options: options,
            keys: 160,
            long_keys: true,
            keys_per_prefix: 100,
            long_key_bytes: key_bytes,
            value_size: 16,
            crashes: Crashes::EverySeed,
            ..CheckConfig::default()
        };
        chime(&format!("chime_directories_with_crashes ({name})"), cfg, 0..30);
    }
}

#[test]
fn sherman_directories_with_crashes() {
    let cfg = CheckConfig {
        index_options: opts(8, 4, 4),
        keys: 160,
        long_keys: true,
        keys_per_prefix: 100,
        long_key_bytes: 250,
        crashes: Crashes::EverySeed,
        ..CheckConfig::default()
    };
    sherman("sherman_directories_with_crashes (tiny leaves, 250-byte keys)", cfg, 0..30);
}

/// Real threads on the `local` transport: hot keys on tiny nodes, every history checked.
#[test]
fn chime_on_local_threads_is_linearizable() {
    let cfg = IndexConfig { extra: opts(8, 4, 4), expected_items: 64, ..IndexConfig::default() };
    on_local_threads::<Rdwc<Chime>, Ordered>(&cfg, 30);
}

/// Real threads with speculative reads: each compute node's tasks speculate through its hotspot
/// buffer while the other threads' hops, splits and deletes move the keys its entries point at.
/// (Threads racing on one buffer are `hotspot`'s unit test.)
#[test]
fn chime_speculative_reads_on_local_threads_is_linearizable() {
    let mut extra = opts(8, 4, 4);
    extra.push(("speculative".into(), "1".into()));
    let cfg = IndexConfig { extra, expected_items: 64, ..IndexConfig::default() };
    on_local_threads::<Rdwc<Chime>, Ordered>(&cfg, 30);
}

#[test]
fn sherman_on_local_threads_is_linearizable() {
    let cfg = IndexConfig { extra: opts(8, 4, 4), expected_items: 64, ..IndexConfig::default() };
    on_local_threads::<Rdwc<Sherman>, Ordered>(&cfg, 30);
}

/// Speculative reads on: hot keys are read one entry at a time while hops, splits, deletes and
/// crashes move them around; every history checked.
#[test]
fn chime_speculative_reads_with_crashes() {
    let mut o = opts(8, 4, 4);
    o.push(("speculative".into(), "1".into()));
    let cfg = CheckConfig { index_options: o, keys: 60, ..CheckConfig::default() };
    chime("chime_speculative_reads_with_crashes", cfg, 0..60);
}

/// Sherman (every factor off: sorted leaves read whole, fence keys) under the same races:
/// shift-inserts and shift-deletes rewrite whole leaves while readers read them.
#[test]
fn sherman_mixed_small_nodes_with_crashes() {
    for (name, o, keys) in
        [("sherman_small", opts(8, 4, 4), 120), ("sherman_default", opts(64, 8, 64), 400)]
    {
        let cfg = CheckConfig { index_options: o, keys, ..CheckConfig::default() };
        sherman(name, cfg, 0..60);
    }
}

/// Sherman's default leaf (1152 bytes) on CHIME's testbed, whose 1024-byte path MTU lets a dying
/// writer land part of a whole-leaf rewrite: the pieces' order keeps every key, and the lock's
/// taker settles the leaf. Before the pieces, 14 of 1000 such seeds failed.
#[test]
fn sherman_default_leaf_on_a_1024_byte_mtu_with_crashes() {
    let cfg = CheckConfig {
        preset: "chime-testbed".into(),
        crashes: Crashes::EverySeed,
        ..CheckConfig::default()
    };
    sherman("sherman_default_leaf_on_a_1024_byte_mtu_with_crashes", cfg, 0..150);
}

#[test]
fn sherman_long_keys_and_indirect_values_with_crashes() {
    let cfg = CheckConfig {
        index_options: opts(8, 4, 4),
        keys: 90,
        long_keys: true,
        value_size: 24,
        ..CheckConfig::default()
    };
    sherman("sherman_long_keys_and_indirect_values_with_crashes", cfg, 0..40);
}

/// Sherman's sorted leaf with keys crowded on their prefixes past half a leaf: groups form in
/// a shift's rewrite under crashes. On tiny leaves (8 slots, 12 keys a prefix), and on the
/// default leaf (64 slots, 40 keys a prefix) on CHIME's testbed, whose 1024-byte path MTU lets a
/// dying writer land part of the rewrite that forms a group: the group then wins over the
/// plain entries of its prefix the cut left.
#[test]
fn sherman_collision_groups_with_crashes() {
    for (name, options, per, preset) in [
        ("tiny leaves", opts(8, 4, 4), 12, "stress"),
        ("default leaf, 1024-byte MTU", vec![], 40, "chime-testbed"),
    ] {
        let cfg = CheckConfig {
            index_options: options,
            keys: 120,
            long_keys: true,
            keys_per_prefix: per,
            value_size: 24,
            preset: preset.into(),
            crashes: Crashes::EverySeed,
            ..CheckConfig::default()
        };
        sherman(&format!("sherman_collision_groups_with_crashes ({name})"), cfg, 0..40);
    }
}

/// Each step of the factor staircase (Fig. 15) on hot keys of small nodes: the separate vacancy
/// READ, the dedicated metadata READ and fence-key validation each race hops and splits.
#[test]
fn factor_staircase_with_crashes() {
    let mix = [("metadata_replication", "0"), ("sibling_validation", "1")];
    let steps = [factors_on(1, &[]), factors_on(2, &[]), factors_on(3, &[]), factors_on(1, &mix)];
    for (i, step) in steps.iter().enumerate() {
        let mut o = opts(16, 4, 4);
        o.extend(step.iter().cloned());
        let cfg = CheckConfig { index_options: o, keys: 80, ..CheckConfig::default() };
        sherman(&format!("factor_staircase step {i}"), cfg, 0..40);
    }
}

/// RDWC under fire: a handful of hot keys, eight clients per compute node, so searches and
/// writes of one key constantly queue behind a leader on each CN, and every history is checked.
/// (Handing a leader's result to clients that arrived mid-flight is too rare a race to show up
/// here; `rdwc::tests::a_late_reader_never_takes_an_older_read` stages it and catches it.)
#[test]
fn rdwc_hot_keys_stay_linearizable() {
    let cfg = CheckConfig {
        index_options: opts(8, 4, 4),
        keys: 6,
        clients: 24,
        ops_per_client: 40,
        ..CheckConfig::default()
    };
    chime("rdwc_hot_keys chime", cfg.clone(), 0..30);
    sherman("rdwc_hot_keys sherman", cfg, 0..30);
}

/// RDWC's slots going cold after every uncontended entry and every other operation sampled, so
/// operations that bypass the table run against batches that lead, wait and combine.
#[test]
fn chime_with_rdwc_slots_flipping() {
    let mut o = opts(8, 4, 4);
    o.push(("rdwc_cool_after".into(), "1".into()));
    o.push(("rdwc_sample_every".into(), "2".into()));
    let cfg = CheckConfig { index_options: o, keys: 24, clients: 16, ..CheckConfig::default() };
    chime("chime_with_rdwc_slots_flipping", cfg, 0..60);
}
