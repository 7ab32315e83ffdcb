//! Charts drawn again from an experiment's JSON are the charts of the run that wrote it, and a
//! JSON the experiment no longer matches is refused, not half-drawn.

use std::path::PathBuf;

use dmindex_bench::experiment::{
    chart, lines, mops, run_experiment, Experiment, Paper, Scale, Session,
};
use dmindex_bench::replot::replot_experiment;
use dmindex_bench::{run, BenchConfig, BenchReport};
use dmindex_index::Ordered;
use dmindex_reference::LockedShards;

fn tiny() -> Scale {
    Scale {
        items: 300,
        ops: 300,
        cns: 1,
        clients: vec![1, 2],
        peak_clients: 1,
        coroutines: 1,
        ..Scale::default()
    }
}

/// The reference index at each client count of the scale, YCSB C then A.
fn sweep(s: &mut Session<'_>) -> anyhow::Result<()> {
    for w in ["c", "a"] {
        for &clients in &s.scale.clients.clone() {
            let mut c = s.base("ref", w);
            c.cluster.clients = clients;
            s.go(w, clients as f64, c)?;
        }
    }
    s.chart("sweep", chart("throughput", "clients", "Mops/s", lines(&s.runs, mops)));
    Ok(())
}

/// The same experiment changed since: it asks for a client count the JSON does not hold.
fn sweep_changed(s: &mut Session<'_>) -> anyhow::Result<()> {
    let mut c = s.base("ref", "c");
    c.cluster.clients = 3;
    s.go("c", 3.0, c)?;
    Ok(())
}

static PAPER: Paper = Paper {
    name: "toy",
    title: "a toy paper",
    testbed: "chime-testbed",
    scale: tiny,
    clients_mean: "clients per CN",
    items: 300,
    lines: &[],
    experiments: &[Experiment { name: "sweep", figure: "a sweep", body: sweep, took_s: None }],
};

/// The same runs asked for in another order, each put on the other's line.
fn sweep_reordered(s: &mut Session<'_>) -> anyhow::Result<()> {
    for w in ["c", "a"] {
        for &clients in s.scale.clients.clone().iter().rev() {
            let mut c = s.base("ref", w);
            c.cluster.clients = clients;
            s.go(w, 1.0, c)?;
        }
    }
    Ok(())
}

static REORDERED: Paper = Paper {
    experiments: &[Experiment {
        name: "sweep",
        figure: "a sweep",
        body: sweep_reordered,
        took_s: None,
    }],
    ..PAPER
};

static CHANGED: Paper = Paper {
    experiments: &[Experiment {
        name: "sweep",
        figure: "a sweep",
        body: sweep_changed,
        took_s: None,
    }],
    ..PAPER
};

fn runner(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    run::<LockedShards, Ordered>(cfg)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmindex-replot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_replot_draws_the_recorded_run_s_charts_and_refuses_a_changed_experiment() {
    let dir = scratch("same");
    let scale = tiny();
    let ran = run_experiment(&PAPER, "sweep", &scale, &dir, &runner, |_| {}).expect("ran");
    assert_eq!(ran.runs.len(), 4);
    let svg = dir.join("sweep.svg");
    let drawn = std::fs::read_to_string(&svg).expect("chart written");
    std::fs::remove_file(&svg).expect("removed");

    let again = replot_experiment(&PAPER, "sweep", &dir, |_| {}).expect("replotted");
    assert_eq!(again.files, vec![svg.clone()]);
    assert_eq!(std::fs::read_to_string(&svg).expect("drawn again"), drawn, "the same chart");
    let throughputs = |o: &dmindex_bench::experiment::Outcome| -> Vec<f64> {
        o.runs.iter().map(|r| r.report.throughput_ops).collect()
    };
    assert_eq!(throughputs(&again), throughputs(&ran), "the recorded reports, in order");

    let err = replot_experiment(&CHANGED, "sweep", &dir, |_| {}).expect_err("changed since");
    assert!(format!("{err:#}").contains("run it again"), "{err:#}");
    let err = replot_experiment(&REORDERED, "sweep", &dir, |_| {}).expect_err("put elsewhere");
    assert!(format!("{err:#}").contains("recorded as"), "{err:#}");
    let missing =
        replot_experiment(&PAPER, "sweep", &scratch("none"), |_| {}).expect_err("no JSON");
    assert!(format!("{missing:#}").contains("run the experiment first"), "{missing:#}");
    let _ = std::fs::remove_dir_all(&dir);
}
