//! What a top-group migration costs in round trips: the children's descriptors READ together
//! and their runs published together, against the SepHash port's one child after another.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, IndexStats, PointIndex};
use dmindex_plush::Plush;

fn get(s: &IndexStats, n: &str) -> u64 {
    s.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v).unwrap()
}

/// Inserts keys 1.. into one top group of 16 buckets of 16 slots, fanout 16, with `extra`
/// options, until a group below would migrate; returns the round trips of the inserts that
/// migrated nothing (fewest, most), and for each top migration the round trips of the insert
/// that made it and the entries it moved.
fn migrations(extra: &[(&str, &str)]) -> ((u64, u64), Vec<(u64, u64)>) {
    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let mut options = vec![("groups", "1"), ("slots", "16"), ("fanout_bits", "4"), ("levels", "2")];
    options.extend_from_slice(extra);
    let config = IndexConfig::with_options(&options);
    let mut out = Vec::new();
    let mut plain = (u64::MAX, 0);
    run_tasks([async {
        let index = Plush::create(&c, &config, 0).await.unwrap();
        let stats = || PointIndex::<LocalTransport>::stats(&index);
        for k in 1..=2000u64 {
            let (before, moved) = (c.counts().round_trips, get(&stats(), "migrated_entries"));
            index.insert(&c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
            let (rt, s) = (c.counts().round_trips - before, stats());
            if get(&s, "group_migrations") > 0 {
                break;
            }
            match get(&s, "migrated_entries") - moved {
                0 => plain = (plain.0.min(rt), plain.1.max(rt)),
                n => out.push((rt, n)),
            }
        }
    }]);
    (plain, out)
}

#[test]
fn a_top_migration_reads_and_writes_its_children_together() {
    let ((low, high), ours) = migrations(&[]);
    assert!(ours.len() >= 8, "{ours:?}");
    for (i, &(rt, n)) in ours.iter().enumerate() {
        // Over an insert's own (`low` to `high`: which lower levels it looks at, a lease
        // renewal when one is due): the top group READ, its entries' keys (rounds of up to 128
        // READs), the children's descriptors (none before the first migration made them),
        // every run with its line and new child pointer, the top buckets' clear.
        let keys = n.div_ceil(128);
        let most = high + 1 + keys + u64::from(i > 0) + 1 + 1;
        assert!(
            (low + 3 + keys..=most).contains(&rt),
            "migration {i}: {rt} round trips, {n} entries"
        );
    }
    // The port: each key, then each of the 16 children's descriptor (or new pointer) and run,
    // one round trip at a time.
    let ((low, _), port) = migrations(&[("key_reads", "each")]);
    assert_eq!(port.len(), ours.len(), "the same keys migrate at the same inserts");
    for (i, &(rt, n)) in port.iter().enumerate() {
        assert!(rt > low + n + 2 * 16, "port migration {i}: {rt} round trips, {n} entries");
    }
}
