//! SepHash against a `HashMap` model, on shapes small enough that every case merges and splits,
//! and at the paper's default shape.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_index::{IndexConfig, IndexStats, PointOnly};
use dmindex_sephash::SepHash;

fn opts(o: &[(&str, &str)]) -> Vec<(String, String)> {
    o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn cfg(extra: &[(&str, &str)], keys: u64, cases: u32) -> ModelConfig {
    let index =
        IndexConfig { max_key: 16, max_value: 32, extra: opts(extra), ..IndexConfig::default() };
    let mut m = ModelConfig::new(index, keys, cases);
    m.max_steps = 600;
    m.node_size = 64 << 20;
    m.chunk_size = 1 << 20;
    m
}

fn merged_and_split(s: &IndexStats, steps: usize) {
    let get = |k: &str| s.extra.iter().find(|(n, _)| *n == k).map_or(0, |(_, v)| *v);
    if steps >= 500 {
        assert!(get("merges") > 0, "no merge in {steps} steps: {s:?}");
        assert!(get("splits") > 0, "no split in {steps} steps: {s:?}");
    }
}

/// 8-slot CurSegments, MainSegments of 16 entries, depth 1 to 8: merges every few writes,
/// splits (and new split rounds, which read keys) every few merges.
#[test]
fn tiny_segments_merge_and_split() {
    let mut m = cfg(
        &[("cur", "80"), ("main_ratio", "2"), ("depth", "1"), ("max_depth", "8"), ("window", "3")],
        200,
        48,
    );
    m.after = Some(merged_and_split);
    model_test::<SepHash, PointOnly>(&m);
}

/// No filter (every search reads the CurSegment) and no FPTable (whole MainSegments).
#[test]
fn without_filter_or_fptable() {
    let m = cfg(
        &[("cur", "128"), ("main_ratio", "3"), ("depth", "0"), ("filter", "0"), ("fptable", "0")],
        150,
        24,
    );
    model_test::<SepHash, PointOnly>(&m);
}

/// The ablations of Fig. 19a: no depth bits (splits read keys) and awaited WRITEs.
#[test]
fn ablations_stay_correct() {
    let m = cfg(
        &[
            ("cur", "80"),
            ("main_ratio", "2"),
            ("depth", "1"),
            ("entry_layout", "0"),
            ("zero_wait", "0"),
        ],
        150,
        16,
    );
    model_test::<SepHash, PointOnly>(&m);
}

/// A depth ceiling: MainSegments grow past their limit instead of splitting.
#[test]
fn max_depth_reached() {
    let m = cfg(
        &[("cur", "64"), ("main_ratio", "1"), ("depth", "0"), ("max_depth", "1"), ("filter", "4")],
        120,
        24,
    );
    model_test::<SepHash, PointOnly>(&m);
}

#[test]
fn paper_shape() {
    model_test::<SepHash, PointOnly>(&cfg(&[], 400, 16));
}

/// Filters of two lines and of one partial line (positions in both, the tag at each line's
/// start).
#[test]
fn small_filters() {
    for extra in [
        &[("cur", "80"), ("main_ratio", "2"), ("depth", "1"), ("filter", "64")][..],
        &[("cur", "200"), ("main_ratio", "2"), ("depth", "1"), ("filter", "32")],
    ] {
        let mut m = cfg(extra, 150, 16);
        m.after = Some(merged_and_split);
        model_test::<SepHash, PointOnly>(&m);
    }
}

/// The paper's blind updates (`update=upsert`): an update of an absent key inserts it, a
/// delete appends a tombstone whether or not the key is there; merges and splits keep the newest
/// version of each key and drop tombstones.
#[test]
fn blind_updates_merge_and_split() {
    let mut m = cfg(
        &[
            ("cur", "80"),
            ("main_ratio", "2"),
            ("depth", "1"),
            ("max_depth", "8"),
            ("window", "3"),
            ("update", "upsert"),
        ],
        200,
        48,
    );
    m.after = Some(merged_and_split);
    model_test::<SepHash, PointOnly>(&m);
}
