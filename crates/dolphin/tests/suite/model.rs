//! Dolphin against a `BTreeMap` (the conformance kit's model test): dense keys under one
//! prefix (splits, compactions, a special node growing to N256), keys spread over many
//! prefixes (new prefixes, path splits at every depth), tiny and unlimited caches, and values
//! of several widths.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_dolphin::Dolphin;
use dmindex_index::{IndexConfig, IndexStats, Ordered};

fn with(options: &[(&str, &str)], index: IndexConfig) -> IndexConfig {
    let extra = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    IndexConfig { extra, ..index }
}

fn get(s: &IndexStats, name: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == name).map(|&(_, v)| v).expect("a counter")
}

/// Keys in groups of 3 to 40 per 7-byte prefix, prefixes parting at bytes 2 to 6.
fn grouped(x: u64) -> Vec<u8> {
    let group = x / 24;
    let spread = group.wrapping_mul(0x0001_0203_0405_0607) & 0x00FF_FFFF_FFFF_FF00;
    (spread | 0x0100_0000_0000_0000 | ((x % 24) * 7 + 1)).to_be_bytes().to_vec()
}

fn spread(x: u64) -> Vec<u8> {
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes().to_vec()
}

#[test]
fn dense_keys_small_leaves_grow_a_special_node() {
    // 1..=300 under one prefix and the next: with 4-slot leaves, about a hundred leaves.
    let index = with(&[("slots", "4")], IndexConfig { cache_bytes: 0, ..IndexConfig::default() });
    let mut cfg = ModelConfig::new(index, 300, 24);
    cfg.after = Some(|s, items| {
        if items > 40 {
            assert!(get(s, "splits") > 0 && get(s, "type_switches") > 0, "{s:?}");
        }
    });
    model_test::<Dolphin, Ordered>(&cfg);
}

#[test]
fn dense_keys_default_leaves() {
    let mut cfg = ModelConfig::new(IndexConfig::default(), 600, 24);
    cfg.search_again = true;
    model_test::<Dolphin, Ordered>(&cfg);
}

#[test]
fn spread_keys_make_a_prefix_each() {
    let mut cfg = ModelConfig::new(IndexConfig::default(), 400, 32);
    cfg.key = spread;
    cfg.after = Some(|s, items| {
        if items > 20 {
            assert!(get(s, "new_prefixes") > 0, "{s:?}");
        }
    });
    model_test::<Dolphin, Ordered>(&cfg);
}

#[test]
fn grouped_keys_tiny_and_unlimited_caches() {
    for cache in [200, u64::MAX] {
        let index =
            with(&[("slots", "8")], IndexConfig { cache_bytes: cache, ..Default::default() });
        let mut cfg = ModelConfig::new(index, 500, 16);
        cfg.key = grouped;
        cfg.after = Some(|s, items| {
            if items > 100 {
                assert!(get(s, "path_splits") > 0, "{s:?}");
            }
        });
        model_test::<Dolphin, Ordered>(&cfg);
    }
}

#[test]
fn values_of_every_cell_width() {
    // One-line cells, and multi-line ones (57: two lines; 300: six).
    for width in [1, 24, 56, 57, 300] {
        let index = with(&[("slots", "6")], IndexConfig { max_value: width, ..Default::default() });
        let mut cfg = ModelConfig::new(index, 200, 8);
        cfg.value = |v, len| (0..len).map(|i| v.wrapping_add(i as u8)).collect();
        model_test::<Dolphin, Ordered>(&cfg);
    }
}
