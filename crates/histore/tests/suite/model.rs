//! HiStore and its baselines against `BTreeMap` / `HashMap` (the conformance kit's model test),
//! on one memory node and on a cluster where every replica and the data have nodes of their own.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_histore::{AllHashtable, AllSkiplist, HiStore, SingleHashtable, SingleSkiplist};
use dmindex_index::{IndexConfig, IndexStats, Ordered, PointOnly};

fn config(nodes: u16, options: &[(&str, &str)], max_value: usize) -> ModelConfig {
    let extra = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let index = IndexConfig { max_value, expected_items: 64, extra, ..IndexConfig::default() };
    ModelConfig { memory_nodes: nodes, ..ModelConfig::new(index, 200, 12) }
}

fn get(s: &IndexStats, name: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == name).map(|&(_, v)| v).expect("a counter")
}

#[test]
fn histore_on_one_node_and_on_its_own_cluster() {
    model_test::<HiStore, Ordered>(&config(1, &[], 8));
    let mut cfg = config(4, &[], 40);
    cfg.after = Some(|s, items| {
        if items > 20 {
            assert!(get(s, "bucket_reads") > 0 && get(s, "scan_requests") > 0, "{s:?}");
        }
    });
    model_test::<HiStore, Ordered>(&cfg);
}

/// Tiny tables: most keys share buckets, chains grow, signatures collide.
#[test]
fn histore_with_long_chains_and_several_groups() {
    model_test::<HiStore, Ordered>(&config(7, &[("groups", "2"), ("table_fill", "100")], 8));
    let mut cfg = config(4, &[("partitions", "1"), ("table_fill", "100")], 8);
    cfg.index.expected_items = 1;
    cfg.after = Some(|s, items| {
        // One bucket for the whole table: GETs walk chains.
        if items > 30 {
            assert!(get(s, "chain_hops") > 0, "{s:?}");
        }
    });
    model_test::<HiStore, Ordered>(&cfg);
}

#[test]
fn long_keys_and_values() {
    let mut cfg = config(5, &[], 300);
    cfg.index.max_key = 24;
    cfg.key = |x| format!("user{:020}", x * 7919).into_bytes();
    model_test::<HiStore, Ordered>(&cfg);
}

/// The paper's SCAN client, items on three data servers.
#[test]
fn histore_reading_scan_items_in_turn() {
    model_test::<HiStore, Ordered>(&config(6, &[("scan_reads", "each")], 8));
    model_test::<AllSkiplist, Ordered>(&config(6, &[("scan_reads", "each")], 8));
}

#[test]
fn baselines() {
    model_test::<AllHashtable, PointOnly>(&config(4, &[], 8));
    model_test::<AllSkiplist, Ordered>(&config(4, &[], 8));
    model_test::<SingleHashtable, PointOnly>(&config(2, &[], 8));
    model_test::<SingleSkiplist, Ordered>(&config(1, &[], 8));
}
