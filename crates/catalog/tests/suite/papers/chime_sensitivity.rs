use dmindex_bench::experiment::{cache_mb, Point, Run, Scale, Session};
use dmindex_bench::{BenchConfig, BenchReport};
use dmindex_catalog::papers::chime::sensitivity::*;
use dmindex_catalog::papers::chime::PAPER;
use std::cell::RefCell;

use super::{body, runs_nothing, session};

/// The report of the run of `series` at `x`.
fn at(runs: &[Run], series: &str, x: f64) -> BenchReport {
    runs.iter().find(|r| r.series == series && r.x == x).expect("run").report.clone()
}

fn tiny() -> Scale {
    Scale {
        items: 2000,
        ops: 1000,
        cns: 2,
        clients: vec![2],
        peak_clients: 2,
        coroutines: 1,
        ..Scale::default()
    }
}

/// Runs `body` at a tiny scale for real, handing back every configuration and the runs.
fn configs(body: fn(&mut Session<'_>) -> anyhow::Result<()>) -> (Vec<BenchConfig>, Vec<Run>) {
    let scale = tiny();
    let seen = RefCell::new(Vec::new());
    let runner = |c: &BenchConfig| -> anyhow::Result<BenchReport> {
        seen.borrow_mut().push(c.clone());
        dmindex_catalog::bench(c)
    };
    let mut s = session(&scale, &PAPER, &runner);
    body(&mut s).unwrap();
    let runs = s.runs;
    (seen.into_inner(), runs)
}

/// Fig. 18a: the four systems as the paper ran them at twice the factor analysis'
/// clients, over every θ, on YCSB A's 50/50 mix.
#[test]
fn skew_sweeps_theta_over_the_paper_s_systems() {
    let (cs, runs) = configs(body("chime", "skew"));
    assert_eq!(cs.len(), 4 * THETAS.len());
    for (i, c) in cs.iter().enumerate() {
        assert_eq!(c.workload.zipf_theta, Some(THETAS[i % THETAS.len()]));
        assert_eq!((c.workload.name.as_str(), c.cluster.clients), ("a", 4));
    }
    assert_eq!(cs[0].index.options, PAPER.lines[0].options_at(2000, PAPER.items));
    let names = [6, 12, 18].map(|i| cs[i].index.name.as_str());
    assert_eq!(names, ["sherman", "rolex", "smart"]);
    assert!(cs[12].workload.bulk_load, "ROLEX trained once on every key");
    assert!(cs[18].cluster.cache_mb < 1.0, "SMART's budget scaled by items");
    let updates = |r: &BenchReport| r.per_op.iter().any(|o| o.op == "update" && o.count > 0);
    assert!(runs.iter().all(|r| updates(&r.report)));
}

/// Fig. 18c/d: longer values put CHIME's values in blocks (one more READ per search)
/// and make SMART's leaves longer; every search still finds its key.
#[test]
fn value_size_reads_more_bytes_for_longer_values() {
    let (cs, runs) = configs(body("chime", "value-size"));
    assert_eq!(cs.len(), 4 * VALUE_SIZES.len());
    assert!(cs.iter().all(|c| c.workload.name == "c"));
    assert_eq!(cs.iter().map(|c| c.keys.value_size).take(4).collect::<Vec<_>>(), VALUE_SIZES);
    for series in ["CHIME", "Sherman", "ROLEX", "SMART"] {
        let (short, long) = (at(&runs, series, 8.0), at(&runs, series, 512.0));
        assert!(
            long.bytes_read_per_op > short.bytes_read_per_op + 400.0,
            "{series}: {} then {} bytes",
            short.bytes_read_per_op,
            long.bytes_read_per_op
        );
    }
    let (inline, indirect) = (at(&runs, "CHIME", 8.0), at(&runs, "CHIME", 32.0));
    assert!(indirect.round_trips_per_op > inline.round_trips_per_op + 0.5);
}

/// Fig. 13: CHIME-Indirect, ROLEX-Indirect, Marlin and SMART on A–E, values behind
/// pointers.
#[test]
fn variable_runs_four_systems_on_a_to_e() {
    let (cs, runs) = configs(body("chime", "variable"));
    assert_eq!(cs.len(), 4 * 5);
    assert!(cs.iter().all(|c| c.keys.value_size == VARIABLE_VALUE && c.cluster.clients == 2));
    let names: Vec<&str> = cs[..4].iter().map(|c| c.index.name.as_str()).collect();
    assert_eq!(names, ["chime", "rolex", "marlin", "smart"]);
    assert_eq!(cs[19].workload.name, "e");
    assert!(cs[19].keys.ordered, "YCSB E scans dense keys");
    assert_eq!(
        (runs[0].series.as_str(), runs[1].series.as_str()),
        ("CHIME-Indirect", "ROLEX-Indirect")
    );
    assert!(runs.iter().all(|r| r
        .report
        .per_op
        .iter()
        .all(|o| o.op != "read" || o.not_found == Some(0))));
}

/// Fig. 3a: Sherman's and ROLEX's caches fall as their spans (read amplification) grow;
/// SMART, reading one item, needs more cache than any of them.
#[test]
fn amplification_trades_cache_for_span() {
    let (cs, runs) = configs(body("chime", "amplification"));
    assert_eq!(cs.len(), 10);
    assert!(cs.iter().all(|c| c.cluster.cache_mb == 4096.0));
    assert_eq!(cs[9].index.name, "smart-opt");
    assert!(cs[5..9].iter().all(|c| c.index.name == "rolex" && c.workload.bulk_load));
    let xs: Vec<f64> = runs[5..9].iter().map(|r| r.x).collect();
    assert_eq!(xs, [32.0, 64.0, 128.0, 256.0], "ROLEX reads two leaves a search");
    let cache: Vec<f64> = runs.iter().map(|r| cache_mb(&r.report)).collect();
    assert!(cache[0] > cache[4], "Sherman span 16 against 256: {cache:?}");
    assert!(cache[5] > cache[8], "ROLEX span 16 against 128: {cache:?}");
    assert!(cache[9] > cache[0], "SMART against Sherman at span 16: {cache:?}");
}

/// Fig. 4a/b: the extra access never helps, the vacancy bitmap READ (in turn) costs
/// most at few clients, and both have the published value beside their worst slowdown.
#[test]
fn an_extra_metadata_read_slows_reads_down() {
    let scale = Scale { cns: 2, ..tiny() };
    let mut s = session(&scale, &PAPER, &runs_nothing);
    body("chime", "metadata-reads")(&mut s).unwrap();
    let get = |series: &str, x: f64| {
        s.points.iter().find(|p| p.series == series && p.x == x).expect(series).model
    };
    let (alone, with) =
        (get("Fig. 4a hop range", 4.0), get("Fig. 4a vacancy bitmap + hop range", 4.0));
    assert!(alone / with > 1.6, "{alone} against {with}");
    let worst: Vec<&Point> = s.points.iter().filter(|p| p.published.is_some()).collect();
    assert_eq!(worst.len(), 2);
    assert!(worst.iter().all(|p| p.model >= 1.0), "{worst:?}");
}

/// Fig. 16: at 8-byte keys the sizes are the layouts' (26- against 10-byte replicas,
/// 8 of them); the saving grows with the key.
#[test]
fn sibling_validation_saves_more_as_keys_grow() {
    assert_eq!(replica_bytes(8).unwrap(), (8 * 26, 8 * 10));
    assert_eq!(replica_bytes(256).unwrap(), (8 * (10 + 512), 8 * 10));
    let scale = tiny();
    let mut s = session(&scale, &PAPER, &runs_nothing);
    body("chime", "sibling")(&mut s).unwrap();
    let saving: Vec<f64> = s.points.iter().filter(|p| p.unit == "×").map(|p| p.model).collect();
    assert_eq!(saving.len(), KEY_SIZES.len());
    assert!(saving.windows(2).all(|w| w[1] > w[0]), "{saving:?}");
}
