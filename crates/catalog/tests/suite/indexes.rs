//! The catalog's list of indexes: names, lookups, the README's table, stalled clients.

use dmindex_catalog::{find, names, table, RdwcPolicy, DEFAULT_INDEX, INDEXES};
use dmindex_conformance::CheckConfig;
use dmindex_index::IndexKind;

/// Every name finds its own entry, and an unknown one's error names every index in catalog
/// order. The expected list is read from `INDEXES` itself, so adding an index anywhere in it
/// needs no edit here.
#[test]
fn names_are_unique_and_lookups_name_the_known_ones() {
    let mut n = names();
    n.sort_unstable();
    n.dedup();
    assert_eq!(n.len(), INDEXES.len());
    assert!(find(DEFAULT_INDEX).is_ok());
    for e in INDEXES {
        assert!(find(e.name).is_ok_and(|f| std::ptr::eq(f, e)), "{} finds another", e.name);
    }
    let err = find("nope").err().expect("unknown").to_string();
    assert!(err.starts_with("unknown index 'nope'"), "{err}");
    for e in INDEXES {
        assert!(err.contains(e.name), "{err} does not name {}", e.name);
    }
    let known = INDEXES.iter().map(|e| e.name).collect::<Vec<_>>().join(", ");
    assert!(err.ends_with(&format!("(known: {known})")), "{err}");
}

/// The README's "Indexes built so far" table names exactly the catalog's indexes, with their
/// kinds, in catalog order.
#[test]
fn the_readme_lists_exactly_the_catalog() {
    let readme = include_str!("../../../../README.md");
    let section = readme
        .split("## Indexes built so far")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an 'Indexes built so far' section");
    let rows: Vec<(String, String)> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| {
            let mut cells = l.split('|').map(str::trim);
            let name = cells.next().unwrap_or_default().trim_end_matches('`').to_string();
            (name, cells.next().unwrap_or_default().to_string())
        })
        .collect();
    let catalog: Vec<(String, String)> =
        INDEXES.iter().map(|e| (e.name.to_string(), e.kind.name().to_string())).collect();
    assert_eq!(rows, catalog, "README's list of indexes differs from the catalog");
}

/// Every index stays linearizable when clients stall for milliseconds before a verb and then
/// go on, resuming in a structure the others changed many times over (hot keys, no
/// crashes: every stalled client finishes). Longer sweeps: `dmindex check --stall-us`.
#[test]
fn every_index_survives_stalled_clients() {
    let cfg = CheckConfig {
        keys: 12,
        stall_max_ns: 5_000_000,
        crashes: dmindex_conformance::Crashes::Never,
        ..CheckConfig::default()
    };
    for e in INDEXES {
        for seed in 0..20 {
            if let Err(err) = (e.check)(&cfg, seed) {
                panic!(
                    "{}: seed {seed}: {err:#} (replay with: dmindex check --index {} --seed \
                     {seed} --keys 12 --no-crashes --stall-us 5000)",
                    e.name, e.name
                );
            }
        }
    }
}

#[test]
fn the_table_lists_every_index_with_its_kind() {
    let t = table();
    for e in INDEXES {
        assert!(t.contains(e.name) && t.contains(e.about), "{t}");
    }
    assert_eq!(find("chime").unwrap().rdwc, RdwcPolicy::On);
    assert_eq!(find("ref").unwrap().kind, IndexKind::Ordered);
}
