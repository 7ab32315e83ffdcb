//! Charts drawn again from an experiment's JSON, without running it (`dmindex experiment …
//! --replot`).
//!
//! An experiment's body is deterministic given its scale and the reports its runs return: it
//! asks for the same runs in the same order and builds its charts from their reports. So its
//! recorded runs, handed back in order by a runner that runs nothing, give the charts of the
//! recorded run under today's chart code. Each run the body asks for is matched to a recorded
//! one (index, workload, compute nodes, clients) and must land on the line and x it was
//! recorded at; a body that asks for other runs, or fewer, or more, or in another order among
//! runs alike, was changed since the JSON was written, and the experiment must be run again. Values measured outside runs (the testbed's microbenchmark points) are measured
//! afresh: they take seconds.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::experiment::{play, write_charts, Outcome, Paper, Run, Scale};
use crate::{BenchConfig, BenchReport};

/// The parts of an experiment's JSON a replot needs.
#[derive(Deserialize)]
struct Recorded {
    scale: Scale,
    runs: Vec<Run>,
}

/// Whether `report` can be what `cfg` measured: the same index on as many compute nodes,
/// clients and coroutines, the same seed, loaded the same way, measured over a window or not,
/// and the same workload and items (a report names the workload as the run resolved it,
/// `c+uniform` for a `c` made uniform, `trace` for a replayed trace, whose items come from the
/// trace). Options are not in a report: runs alike but for them are told apart by the line
/// and x they land on (see [`replot_experiment`]).
fn matches(cfg: &BenchConfig, report: &BenchReport) -> bool {
    let w = &cfg.workload;
    let workload = match w.trace {
        Some(_) => report.workload == "trace",
        None => {
            report.workload.split('+').next() == Some(w.name.as_str()) && report.items == w.items
        }
    };
    workload
        && cfg.index.name == report.index
        && (cfg.cluster.cns, cfg.cluster.clients, cfg.cluster.coroutines)
            == (report.cns, report.clients, report.coroutines)
        && w.seed == report.seed
        && w.fast_load == report.load_fast_forward
        && w.bulk_load == report.load_bulk
        && w.window.is_some() == report.window.is_some()
}

/// Draws the charts of experiment `name` of `paper` again from `dir/<name>.json`, into `dir`.
pub fn replot_experiment(
    paper: &Paper,
    name: &str,
    dir: &Path,
    log: impl FnMut(&str),
) -> anyhow::Result<Outcome> {
    let json = dir.join(format!("{name}.json"));
    let text = std::fs::read_to_string(&json)
        .with_context(|| format!("--replot reads {}: run the experiment first", json.display()))?;
    let recorded: Recorded = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an experiment's JSON", json.display()))?;
    // The recorded runs answered so far, in the order they were asked for. Each call takes the
    // first recorded run not yet answered that matches it.
    let answered = RefCell::new(Vec::with_capacity(recorded.runs.len()));
    let runner = |cfg: &BenchConfig| -> anyhow::Result<BenchReport> {
        let free = (0..recorded.runs.len())
            .find(|k| !answered.borrow().contains(k) && matches(cfg, &recorded.runs[*k].report));
        let Some(k) = free else {
            bail!(
                "{} holds no run of {} {} on {} CNs × {} clients left: the experiment changed since, run it \
                 again",
                json.display(),
                cfg.index.name,
                cfg.workload.name,
                cfg.cluster.cns,
                cfg.cluster.clients
            );
        };
        answered.borrow_mut().push(k);
        let run = &recorded.runs[k];
        Ok(run.report.clone())
    };
    // An experiment that starts memnode processes names the executable in its runs; nothing
    // is started here, so any name does.
    let not_run = PathBuf::from("(a replot runs nothing)");
    let scale = Scale { memnode_exe: Some(not_run), ..recorded.scale.clone() };
    let (mut outcome, charts) = play(paper, name, &scale, &runner, log)?;
    let left = recorded.runs.len() - answered.borrow().len();
    if left > 0 {
        bail!(
            "{} holds {left} runs the experiment no longer asks for: run it again",
            json.display()
        );
    }
    // Runs alike but for their options (a span sweep) match in recorded order; a body that
    // now asks for them in another order would draw each at the other's place, so each run
    // must sit on the line and at the x it was recorded at.
    for (run, &k) in outcome.runs.iter().zip(answered.borrow().iter()) {
        let was = &recorded.runs[k];
        if (run.series.as_str(), run.x) != (was.series.as_str(), was.x) {
            bail!(
                "{}: run {} was recorded as {} at {} and is now asked for as {} at {}: run it again",
                json.display(),
                k + 1,
                was.series,
                was.x,
                run.series,
                run.x
            );
        }
    }
    outcome.files = write_charts(&charts, dir)?;
    Ok(outcome)
}
