//! Marlin against a `BTreeMap` (the conformance kit's model test): small leaves (splits,
//! compactions, internal splits and a taller root), default leaves, no cache and an unlimited
//! one, keys spread over the key space, and values of several lengths.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_index::{IndexConfig, IndexStats, Ordered};
use dmindex_marlin::Marlin;

fn with(options: &[(&str, &str)], index: IndexConfig) -> IndexConfig {
    let extra = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    IndexConfig { extra, ..index }
}

fn get(s: &IndexStats, name: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == name).map(|&(_, v)| v).expect("a counter")
}

#[test]
fn small_leaves_and_internal_nodes_split() {
    for cache in [0, u64::MAX] {
        let index = with(
            &[("span", "4"), ("internal_span", "4")],
            IndexConfig { cache_bytes: cache, ..IndexConfig::default() },
        );
        let mut cfg = ModelConfig::new(index, 300, 24);
        cfg.after = Some(|s, items| {
            if items > 40 {
                assert!(get(s, "leaf_splits") > 0, "{s:?}");
            }
        });
        model_test::<Marlin, Ordered>(&cfg);
    }
}

#[test]
fn default_leaves_compact_after_deletes() {
    let mut cfg = ModelConfig::new(with(&[("span", "8")], IndexConfig::default()), 40, 32);
    cfg.search_again = true;
    cfg.after = Some(|s, items| {
        if items > 30 {
            assert!(get(s, "compactions") + get(s, "leaf_splits") > 0, "{s:?}");
        }
    });
    model_test::<Marlin, Ordered>(&cfg);
    model_test::<Marlin, Ordered>(&ModelConfig::new(IndexConfig::default(), 600, 16));
}

#[test]
fn spread_keys() {
    let mut cfg = ModelConfig::new(with(&[("span", "6")], IndexConfig::default()), 400, 24);
    cfg.key = |x| (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes().to_vec();
    model_test::<Marlin, Ordered>(&cfg);
}

#[test]
fn values_of_any_length_up_to_the_maximum() {
    let index = with(&[("span", "6")], IndexConfig { max_value: 300, ..Default::default() });
    let mut cfg = ModelConfig::new(index, 200, 12);
    cfg.value =
        |v, max| (0..(v as usize * 7) % (max + 1)).map(|i| v.wrapping_add(i as u8)).collect();
    model_test::<Marlin, Ordered>(&cfg);
}

#[test]
fn a_page_charged_cache_counts_whole_internal_pages() {
    // The Dolphin paper counts Marlin's (Sherman's) cache in whole internal pages.
    let index = with(
        &[("span", "4"), ("internal_span", "4"), ("cache_charge", "page")],
        IndexConfig { cache_bytes: u64::MAX, ..IndexConfig::default() },
    );
    let mut cfg = ModelConfig::new(index, 300, 24);
    cfg.after = Some(|s, items| {
        let page = dmindex_prim::blink::InternalLayout { span: 4 }.alloc() as u64;
        assert_eq!(s.cache_bytes % page, 0, "{} bytes in {page}-byte pages", s.cache_bytes);
        if items > 40 {
            assert!(s.cache_bytes >= page, "{s:?}");
        }
    });
    model_test::<Marlin, Ordered>(&cfg);
}
