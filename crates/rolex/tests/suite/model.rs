//! ROLEX against a `BTreeMap` (the conformance kit's model test): small leaves and models, so
//! that synonym chains grow, retrains replace models and deletes empty leaves in every case.

use dmindex_conformance::{model_test, ModelConfig};
use dmindex_index::{IndexConfig, IndexStats, Ordered};
use dmindex_rolex::Rolex;

fn cfg(span: usize, eps: usize, fill: usize, retrain: usize, keys: u64) -> ModelConfig {
    let extra = vec![
        ("span".into(), span.to_string()),
        ("epsilon".into(), eps.to_string()),
        ("fill".into(), fill.to_string()),
        ("retrain".into(), retrain.to_string()),
    ];
    let index = IndexConfig { expected_items: keys, extra, ..IndexConfig::default() };
    ModelConfig::new(index, keys, 24)
}

/// Keys spread over the whole key space in runs of three, so that models are many and their
/// fences fall between real keys.
fn spread(x: u64) -> Vec<u8> {
    ((x / 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).wrapping_add(x % 3).to_be_bytes().to_vec()
}

#[test]
fn model_small_leaves_with_retrains() {
    let mut c = cfg(4, 2, 3, 25, 300);
    // Five keys held at the end did not fit the first model's one leaf of 4: it was retrained.
    c.after = Some(|s: &IndexStats, held| {
        let retrains = s.extra.iter().find(|e| e.0 == "retrains").map_or(0, |e| e.1);
        assert!(held < 5 || retrains > 0, "{held} keys and no retrain: {s:?}")
    });
    model_test::<Rolex, Ordered>(&c);
}

#[test]
fn model_spread_keys() {
    let mut c = cfg(8, 4, 6, 50, 400);
    c.key = spread;
    model_test::<Rolex, Ordered>(&c);
}

#[test]
fn model_without_retraining_grows_chains() {
    model_test::<Rolex, Ordered>(&cfg(4, 2, 4, 0, 120));
}

#[test]
fn model_default_shape_and_indirect_values() {
    let mut c = cfg(16, 16, 12, 25, 2000);
    c.index.max_value = 24;
    c.value = |v, len| vec![v; len];
    model_test::<Rolex, Ordered>(&c);
}
