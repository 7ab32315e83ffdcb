//! ROLEX under the simulator (torn reads, delays, crashes, every history checked for
//! linearizability) and on real threads, through the conformance kit; small leaves and a low
//! retrain bound so that retrains race searches, writes and scans in most seeds.

use dmindex_conformance::{on_local_threads, suite, CheckConfig, Crashes};
use dmindex_index::{IndexConfig, Ordered};
use dmindex_prim::rdwc::Rdwc;
use dmindex_rolex::Rolex;

fn opts(span: usize, eps: usize, fill: usize, retrain: usize) -> Vec<(String, String)> {
    vec![
        ("span".into(), span.to_string()),
        ("epsilon".into(), eps.to_string()),
        ("fill".into(), fill.to_string()),
        ("retrain".into(), retrain.to_string()),
    ]
}

#[test]
fn linearizable_small_leaves_with_retrains_and_crashes() {
    let cfg = CheckConfig { index_options: opts(4, 2, 3, 25), ..CheckConfig::default() };
    suite::<Rolex, Ordered>("linearizable_small_leaves_with_retrains_and_crashes", &cfg, 0..100);
}

/// Leaves of four and a bound of one synonym leaf: a retrain leaves one free slot a leaf, so a
/// model is retrained every few inserts of new keys, and freezes, publishes and retirements
/// overlap most operations.
#[test]
fn linearizable_constant_retraining() {
    let cfg = CheckConfig { index_options: opts(4, 2, 4, 1), ..CheckConfig::default() };
    suite::<Rolex, Ordered>("linearizable_constant_retraining", &cfg, 0..100);
}

#[test]
fn linearizable_default_shape_many_keys() {
    let cfg = CheckConfig { keys: 400, clients: 16, ..CheckConfig::default() };
    suite::<Rolex, Ordered>("linearizable_default_shape_many_keys", &cfg, 0..30);
}

/// A cache with room for the models only: each handle keeps one leaf table at a time, so
/// operations fetch tables that others of the node evict while they use them, as retrains
/// replace the models.
#[test]
fn linearizable_with_leaf_tables_evicted() {
    let cfg = CheckConfig {
        index_options: opts(4, 2, 3, 25),
        keys: 200,
        cache_bytes: 0,
        ..CheckConfig::default()
    };
    suite::<Rolex, Ordered>("linearizable_with_leaf_tables_evicted", &cfg, 0..100);
}

/// No retraining: chains only grow, every write races readers of long chains.
#[test]
fn linearizable_long_chains() {
    let cfg = CheckConfig {
        index_options: opts(4, 2, 4, 0),
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<Rolex, Ordered>("linearizable_long_chains", &cfg, 0..40);
}

/// As the harness runs it: behind RDWC.
#[test]
fn linearizable_behind_rdwc() {
    let cfg = CheckConfig { index_options: opts(4, 2, 3, 25), ..CheckConfig::default() };
    suite::<Rdwc<Rolex>, Ordered>("linearizable_behind_rdwc", &cfg, 0..40);
}

#[test]
fn real_threads() {
    let extra = opts(4, 2, 3, 25);
    on_local_threads::<Rolex, Ordered>(&IndexConfig { extra, ..IndexConfig::default() }, 30);
}
