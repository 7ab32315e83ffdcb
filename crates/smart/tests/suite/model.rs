//! SMART and SMART-Opt against a `BTreeMap` (the conformance kit's model test): integer keys
//! spread and clustered (deep and shallow trees, every node kind and type switch), variable
//! length keys that are prefixes of each other, values that outgrow their leaves.

use dmindex_conformance::{model_test, run_model, ModelConfig, Step};
use dmindex_index::{IndexConfig, IndexStats, Ordered};
use dmindex_smart::{Smart, SmartOpt};

fn spread(x: u64) -> Vec<u8> {
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec()
}

/// Keys sharing long prefixes, some a prefix of others ("ab", "abc", "abcd…"), of 1 to 20
/// bytes: end-of-key children, chains of one-child nodes and path splits inside them.
fn nested(x: u64) -> Vec<u8> {
    let stem = b"commonprefix-0123456789";
    let mut k = stem[..(1 + x % 20) as usize].to_vec();
    if x >= 20 {
        k.push(b'A' + (x / 20 % 26) as u8);
    }
    if x >= 520 {
        k.push(b'a' + (x / 520 % 26) as u8);
    }
    k
}

fn switched(s: &IndexStats, items: usize) {
    let get = |n| s.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v).unwrap();
    // More than 64 keys of 1..=600 put more than 4 under one node.
    if items > 64 {
        assert!(get("type_switches") > 0, "{items} keys and no type switch: {s:?}");
    }
}

#[test]
fn integer_keys_spread() {
    let mut cfg = ModelConfig::new(IndexConfig::default(), 400, 48);
    cfg.key = spread;
    cfg.search_again = true;
    model_test::<Smart, Ordered>(&cfg);
}

#[test]
fn integer_keys_dense() {
    // 1..=600 big-endian: the last two bytes branch, the first six are one long shared path.
    let mut cfg = ModelConfig::new(IndexConfig::default(), 600, 32);
    cfg.after = Some(switched);
    model_test::<Smart, Ordered>(&cfg);
}

/// `cases` runs over 700 [`nested`] keys with values of 1 to 200 bytes.
fn nested_growing(cases: u32) -> ModelConfig {
    let index = IndexConfig { max_key: 32, max_value: 200, ..IndexConfig::default() };
    let mut cfg = ModelConfig::new(index, 700, cases);
    cfg.key = nested;
    cfg.value = |v, max| vec![v; 1 + (v as usize * 13) % max];
    cfg
}

#[test]
fn nested_variable_length_keys_and_growing_values() {
    model_test::<Smart, Ordered>(&nested_growing(40));
}

/// Found by the random test above: k559's value outgrows its leaf (the leaf is marked moved),
/// then k438 parts from k559 below the slot that still names the moved leaf. The insert must
/// follow the move and push both leaves down, not take the moved leaf of another key for a
/// deleted one and overwrite its slot (which lost k559).
#[test]
fn an_insert_beside_a_moved_leaf_of_another_key_keeps_it() {
    let steps = [
        Step::Insert(559, 50),
        Step::Insert(337, 126),
        Step::Update(559, 58),
        Step::Insert(438, 152),
    ];
    run_model::<Smart, Ordered>(&nested_growing(1), &steps);
}

#[test]
fn tiny_cache_and_unlimited_cache() {
    let index = IndexConfig { cache_bytes: 200, ..IndexConfig::default() };
    let mut cfg = ModelConfig::new(index, 300, 24);
    cfg.key = spread;
    model_test::<Smart, Ordered>(&cfg);
    let mut cfg =
        ModelConfig::new(IndexConfig { cache_bytes: 0, ..IndexConfig::default() }, 300, 24);
    cfg.key = spread;
    model_test::<SmartOpt, Ordered>(&cfg);
}
