use dmindex_bench::experiment::{opts, Scale, Session};
use dmindex_bench::{BenchConfig, BenchReport};
use dmindex_catalog::papers::chime::*;

use super::{body, runs_nothing, session};

/// SMART's budget is the paper's, scaled by items / 60 M; CHIME's is the paper's.
#[test]
fn smart_budgets_scale_with_items() {
    let scale = Scale { items: 600_000, ..Scale::default() };
    let s = session(&scale, &PAPER, &runs_nothing);
    assert!((with_cache(&s, "smart", "c", 100.0).cluster.cache_mb - 1.0).abs() < 1e-9);
    assert!((with_cache(&s, "smart-opt", "c", 600.0).cluster.cache_mb - 6.0).abs() < 1e-9);
    assert_eq!(with_cache(&s, "chime", "c", 100.0).cluster.cache_mb, 100.0);
}

/// Fig. 12's CHIME is the paper's: speculative reads with its 30 MB buffer at 60 M items,
/// scaled to the same share of the keys (600 k items: 307 KiB); Sherman has no options.
#[test]
fn the_paper_s_chime_has_speculative_reads_and_a_scaled_buffer() {
    let scale = Scale { items: 600_000, ..Scale::default() };
    let s = session(&scale, &PAPER, &runs_nothing);
    let chime = with_cache(&s, "chime", "c", 100.0).index.options;
    assert_eq!(chime, opts(&[("speculative", "1"), ("hotspot_kb", "307")]));
    assert!(with_cache(&s, "sherman", "c", 100.0).index.options.is_empty());
    assert_eq!(dmindex_catalog::papers::chime::techniques::hotspot_kb(&s, 30.0), "307");
}

/// The load factor when a hop first fails comes from the load phase, so the runs that
/// measure it are cold (no window, no replayed stream) whatever the figure's other runs
/// are: a warm YCSB C window splits nothing, and Figs. 19a/b drew zeros from one.
#[test]
fn split_load_factors_are_measured_on_cold_loads() {
    let c = first_run(&Scale::default(), |s| split_load_factors(s, LOADED, "h", &[2]).map(drop));
    assert_eq!((c.workload.window, c.workload.stream_ops), (None, None), "cold");
    assert!(!c.workload.fast_load, "the load runs through the index, splits counted");
    assert_eq!(c.index.options, opts(&[("h", "2")]));
}

/// The first run `body` configures at `scale`: a runner that records it stops the body.
fn first_run(
    scale: &Scale,
    body: impl FnOnce(&mut Session<'_>) -> anyhow::Result<()>,
) -> BenchConfig {
    let seen = std::cell::RefCell::new(None);
    let runner = |c: &BenchConfig| -> anyhow::Result<BenchReport> {
        seen.borrow_mut().get_or_insert_with(|| c.clone());
        anyhow::bail!("recorded")
    };
    let mut s = session(scale, &PAPER, &runner);
    assert!(body(&mut s).is_err(), "the recording runner stops the body");
    seen.into_inner().expect("the body ran something")
}

/// The first run Fig. 12 configures for `workload` at the default scale.
fn first_ycsb_run(workload: &str) -> BenchConfig {
    first_run(
        &Scale { workloads: vec![workload.into()], ..Scale::default() },
        body("chime", "ycsb"),
    )
}

/// `--mn-gb` sizes every run's memory nodes (SMART outgrows the default 4 GiB at 60 M items);
/// without it a run keeps `bench`'s default.
#[test]
fn the_scale_s_memory_node_size_reaches_every_run() {
    let at = |mn_gb| {
        let scale = Scale { workloads: vec!["c".into()], mn_gb, ..Scale::default() };
        first_run(&scale, body("chime", "ycsb")).cluster.mn_gb
    };
    assert_eq!((at(Some(12)), at(None)), (Some(12), None));
}

/// ROLEX runs as CHIME's harness loads it: bulk-loaded with full leaves and no retraining;
/// every other line loads by inserts.
#[test]
fn rolex_is_trained_once_on_every_loaded_key() {
    let scale = Scale::default();
    let s = session(&scale, &PAPER, &runs_nothing);
    let c = s.as_paper_at("rolex", "c", YCSB_ITEMS);
    assert!(c.workload.bulk_load);
    assert_eq!(c.index.options, opts(&[("fill", "16"), ("retrain", "0")]));
    let e = with_cache_at(&s, "rolex", "e", 100.0, 1000);
    assert_eq!(e.index.options.last(), Some(&("retrain".into(), rolex_e_retrain())));
    for l in PAPER.lines.iter().filter(|l| l.index != "rolex") {
        assert!(!s.as_paper(l.index, "c").workload.bulk_load, "{}", l.label);
    }
    assert!(PAPER.lines_table().contains("bulk-loaded (`--bulk-load`)"));
}

/// Fig. 12 runs YCSB A–E on 2 M items filled by fast-forward (SMART's depth and cache need
/// per item as at scale, its budget and CHIME's buffer scaled to them), LOAD from empty.
#[test]
fn ycsb_runs_at_the_scale_that_decides_smart() {
    let c = first_ycsb_run("c");
    assert_eq!((c.index.name.as_str(), c.workload.items), ("chime", YCSB_ITEMS));
    assert!(c.workload.fast_load);
    assert!(c.index.options.contains(&("hotspot_kb".into(), "1024".into())));
    // Warm: the scale's operations replayed REPLAYS times, the middle window measured.
    let ops = Scale::default().ops;
    assert_eq!((c.workload.ops, c.workload.stream_ops), (Some(ops * REPLAYS), Some(ops)));
    assert!(c.workload.window.is_some());
    assert!(["a", "b", "c", "d", "e"].iter().all(|w| ycsb_indexes(w).contains(&"rolex")));
    assert!(!ycsb_indexes("load").contains(&"rolex"));
    for timed in ["load", "e"] {
        let c = first_ycsb_run(timed);
        assert_eq!(c.workload.items, Scale::default().items);
        assert!(!c.workload.fast_load);
        assert!(c.workload.window.is_none() && c.workload.stream_ops.is_none());
    }
}
