//! What each paper's experiments configure and report, run against the catalog's public
//! paper tables at tiny scales.

mod chime;
mod chime_sensitivity;
mod chime_techniques;
mod dolphin;
mod histore;
mod sephash;
mod testbed;

use dmindex_bench::experiment::{Paper, Runner, Scale, Session};
use dmindex_bench::{BenchConfig, BenchReport};
use dmindex_catalog::papers::{paper, resolve};

/// The body of experiment `name` of paper `of`, as `dmindex experiment of/name` runs it.
fn body(of: &str, name: &str) -> fn(&mut Session<'_>) -> anyhow::Result<()> {
    paper(of).and_then(|p| p.experiment(name)).expect("a catalogued experiment").body
}

/// A session of `paper` at `scale` whose runs `runner` answers, its log dropped.
fn session<'a>(scale: &'a Scale, paper: &'a Paper, runner: Runner<'a>) -> Session<'a> {
    // The log closure has no size, so its leaked box allocates nothing.
    Session::for_test(scale, paper, runner, Box::leak(Box::new(|_: &str| {})))
}

/// The runner of a test of what a body configures, which asks for no run.
fn runs_nothing(c: &BenchConfig) -> anyhow::Result<BenchReport> {
    unreachable!("a configuration test ran {} on {}", c.index.name, c.workload.name)
}

/// Each paper's docs page shows its lines (which variant of each system its figures ran,
/// with what options) exactly as the catalog's table has them.
#[test]
fn each_docs_page_names_the_variants_its_figures_ran() {
    let pages = [
        ("chime", include_str!("../../../../../docs/reproduce.md")),
        ("sephash", include_str!("../../../../../docs/reproduce-sephash.md")),
        ("dolphin", include_str!("../../../../../docs/reproduce-dolphin.md")),
        ("histore", include_str!("../../../../../docs/reproduce-histore.md")),
    ];
    for (name, page) in pages {
        let p = paper(name).unwrap();
        assert!(!p.lines.is_empty(), "{name} has no lines");
        let table = p.lines_table();
        assert!(
            page.contains(&table),
            "the {name} docs page lacks its lines table (`dmindex experiment --list \
             --paper {name}` prints it):\n{table}"
        );
    }
}

#[test]
fn specs_resolve_or_name_what_is_wrong() {
    assert_eq!(resolve("chime/ycsb", None).unwrap().len(), 1);
    assert_eq!(resolve("factors", None).unwrap()[0].1.name, "factors");
    let e = resolve("ycsb", None).err().expect("ambiguous").to_string();
    assert!(e.contains("several papers"), "{e}");
    assert_eq!(resolve("sephash/ycsb", None).unwrap()[0].0.name, "sephash");
    assert_eq!(
        resolve("all", Some("chime")).unwrap().len(),
        paper("chime").unwrap().experiments.len()
    );
    assert_eq!(
        resolve("chime/all", None).unwrap().len(),
        paper("chime").unwrap().experiments.len()
    );
    let e = resolve("chime/nope", None).err().expect("unknown").to_string();
    assert!(e.contains("unknown experiment 'nope'") && e.contains("ycsb"), "{e}");
    let e = resolve("nope/ycsb", None).err().expect("unknown").to_string();
    assert!(e.contains("unknown paper 'nope'"), "{e}");
    assert!(resolve("chime/ycsb", Some("other")).is_err());
}
