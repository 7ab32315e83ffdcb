//! `dmindex experiment`: the papers' figures on their simulated testbeds.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use dmindex_bench::experiment::{run_experiment, NeedsTraces, NeedsUcx, Outcome, Paper, Scale};
use dmindex_bench::limits;
use dmindex_bench::replot::replot_experiment;
use dmindex_catalog::papers::{resolve, PAPERS};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment to run: PAPER/NAME, PAPER/all, a name only one paper has,
    /// or `all`; `--list` names them and the figures they reproduce.
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// The paper whose experiments a bare NAME (or `all`) means.
    #[arg(long)]
    paper: Option<String>,
    /// List the papers' experiments, the time each took here at its default scale, and the
    /// figures they reproduce.
    #[arg(long)]
    list: bool,
    /// Directory for the JSON reports and SVG charts.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Items loaded before each run phase (default: the paper's scale, see --list).
    #[arg(long)]
    items: Option<u64>,
    /// Operations per run phase.
    #[arg(long)]
    ops: Option<u64>,
    /// Compute nodes (at most, for papers that place clients by count).
    #[arg(long)]
    cns: Option<u16>,
    /// Clients along throughput–latency curves (comma-separated; per CN or in total, as
    /// --list says for each paper).
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<usize>>,
    /// Clients for single-point comparisons (factor and sensitivity analyses).
    #[arg(long)]
    peak_clients: Option<usize>,
    /// Coroutines per client.
    #[arg(long)]
    coroutines: Option<usize>,
    /// Simulator seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Fill memory by fast-forward before each run phase (for paper-scale --items): the
    /// inserts go through each index untimed, and figures of load throughput are skipped.
    #[arg(long)]
    fast_load: bool,
    /// Only these YCSB workloads (comma-separated: load, a, b, c, d, e) in experiments that
    /// sweep workloads.
    #[arg(long, value_delimiter = ',', value_parser = ["load", "a", "b", "c", "d", "e"])]
    workloads: Vec<String>,
    /// Override a parameter of the paper's simulated testbed, e.g. --set nic_mops=80
    /// (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    overrides: Vec<String>,
    /// Directory of real-world traces for the experiments that replay them (Dolphin's Fig. 9:
    /// Twitter's cluster8 and cluster9, decompressed; see docs/reproduce-dolphin.md). Without
    /// it those experiments are skipped by `all` and refused by name.
    #[arg(long, value_name = "DIR")]
    traces: Option<PathBuf>,
    /// Memory per memory node in GiB for every run (as `bench --mn-gb`; default 4): the paper's
    /// item counts need more for some indexes (SMART at 60 M items).
    #[arg(long)]
    mn_gb: Option<u64>,
    /// Draw the charts again from the JSON in --out (and its subdirectories, for `all`),
    /// running nothing: each run the experiment asks for is answered with the recorded one
    /// (a JSON the experiment no longer matches is an error). The scale is the JSON's.
    #[arg(long, conflicts_with_all = [
        "items", "ops", "cns", "clients", "peak_clients", "coroutines", "seed", "fast_load",
        "workloads", "overrides", "traces", "mn_gb",
    ])]
    replot: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.list {
        for p in PAPERS {
            if args.paper.as_deref().is_some_and(|only| only != p.name) {
                continue;
            }
            let d = (p.scale)();
            println!("{} — {} (testbed preset {})", p.name, p.title, p.testbed);
            println!(
                "  scale: {} items, {} ops, clients {:?} ({}), peak {}, {} coroutines{}",
                d.items,
                d.ops,
                d.clients,
                p.clients_mean,
                d.peak_clients,
                d.coroutines,
                if d.fast_load { ", fast-forward load" } else { "" }
            );
            for e in p.experiments {
                let name = format!("{}/{}", p.name, e.name);
                println!("  {name:<26} {:>9}  {}", e.expected_time(), e.figure);
            }
            if !p.lines.is_empty() {
                println!("  the systems as the paper ran them:");
                for row in p.lines_table().lines() {
                    println!("  {row}");
                }
            }
        }
        return Ok(());
    }
    if args.replot {
        return replot(args);
    }
    let (chosen, scales) = plan(args)?;
    let several = chosen.len() > 1;
    // Each run shows its progress as `bench` does: bars on a terminal, lines otherwise.
    let progress = crate::bench_cmd::progress();
    let runner = |cfg: &dmindex_bench::BenchConfig| {
        let mut cfg = cfg.clone();
        cfg.output.progress = progress;
        dmindex_catalog::bench(&cfg)
    };
    for ((paper, e), scale) in chosen.into_iter().zip(scales) {
        let t = Instant::now();
        let out =
            run_experiment(paper, e.name, &scale, &args.out, &runner, |line| eprintln!("{line}"));
        let out = match out {
            Err(err)
                if several
                    && (err.downcast_ref::<NeedsTraces>().is_some()
                        || err.downcast_ref::<NeedsUcx>().is_some()) =>
            {
                println!("{}/{}: skipped ({err})", paper.name, e.name);
                continue;
            }
            out => out?,
        };
        let n = format!("{}/{}", paper.name, e.name);
        let points = match out.points.len() {
            0 => String::new(),
            n => format!(", {n} microbenchmark points"),
        };
        println!("{n}: {} runs{points} in {:.1} s", out.runs.len(), t.elapsed().as_secs_f64());
        for f in &out.files {
            println!("  wrote {}", f.display());
        }
    }
    Ok(())
}

/// `--replot`: the charts of the experiments named (`all`: every one, `PAPER/all` or
/// `--paper`: a paper's) drawn again from their JSON under `--out`, each JSON taken by the
/// paper and experiment it names. One experiment named: its JSON must be in `--out` and redraw.
/// Several: every JSON of theirs in `--out` and below is redrawn where it can be, every file
/// left is listed with why, and the command fails if one was not drawn.
fn replot(args: &Args) -> anyhow::Result<()> {
    let name = args.name.as_deref().unwrap_or_default();
    let chosen = resolve(name, args.paper.as_deref())?;
    if let [(paper, e)] = chosen[..] {
        let out = replot_experiment(paper, e.name, &args.out, |_| {})?;
        print_replot(paper, e, &out);
        return Ok(());
    }
    let mut files = Vec::new();
    json_under(&args.out, &mut files)
        .with_context(|| format!("--replot reads --out {}", args.out.display()))?;
    files.sort();
    let (mut drawn, mut left) = (0, 0);
    for file in files {
        let dir = file.parent().unwrap_or(&args.out);
        let (paper, e) = match recorded_experiment(&file) {
            Ok(found) => found,
            Err(why) => {
                println!("{}: skipped ({why})", file.display());
                continue;
            }
        };
        if !chosen.iter().any(|(p, x)| p.name == paper.name && x.name == e.name) {
            continue;
        }
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if stem != e.name {
            println!(
                "{}: not drawn ({}/{} reads {}.json; this file is named otherwise)",
                file.display(),
                paper.name,
                e.name,
                e.name
            );
            left += 1;
            continue;
        }
        match replot_experiment(paper, e.name, dir, |_| {}) {
            Ok(out) => {
                drawn += 1;
                print_replot(paper, e, &out);
            }
            Err(err) => {
                left += 1;
                println!("{}: not drawn ({err:#})", file.display());
            }
        }
    }
    if left > 0 || drawn == 0 {
        bail!("--replot: {drawn} experiments drawn again, {left} not (listed above)");
    }
    Ok(())
}

fn print_replot(paper: &Paper, e: &dmindex_bench::experiment::Experiment, out: &Outcome) {
    println!("{}/{}: charts of {} runs drawn again", paper.name, e.name, out.runs.len());
    for f in &out.files {
        println!("  wrote {}", f.display());
    }
}

/// Every `.json` file in `dir` and its subdirectories.
fn json_under(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            json_under(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// The paper and experiment an experiment's JSON names, or why it names none.
fn recorded_experiment(
    file: &std::path::Path,
) -> Result<(&'static Paper, &'static dmindex_bench::experiment::Experiment), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let (Some(p), Some(x)) = (v["paper"].as_str(), v["experiment"].as_str()) else {
        return Err("not an experiment's JSON: no paper and experiment named".into());
    };
    let paper = PAPERS.iter().find(|q| q.name == p).ok_or(format!("no paper named {p}"))?;
    let e = paper
        .experiments
        .iter()
        .find(|e| e.name == x)
        .ok_or(format!("{p} has no experiment {x}"))?;
    Ok((paper, e))
}

/// The experiments `args` name and the scale of each, every flag checked against every paper
/// chosen before anything runs.
#[allow(clippy::type_complexity)]
pub fn plan(
    args: &Args,
) -> anyhow::Result<(
    Vec<(&'static Paper, &'static dmindex_bench::experiment::Experiment)>,
    Vec<Scale>,
)> {
    let name = args.name.as_deref().unwrap_or_default();
    if args.fast_load && !args.workloads.is_empty() && args.workloads.iter().all(|w| w == "load") {
        bail!("--workloads load with --fast-load leaves nothing to run (a fast-forward load is untimed)");
    }
    let chosen = resolve(name, args.paper.as_deref())?;
    let mut scales = Vec::with_capacity(chosen.len());
    for (paper, _) in &chosen {
        let scale = scale_of(paper, args)?;
        let mut net = dmindex_sim::NetParams::preset(paper.testbed).map_err(anyhow::Error::msg)?;
        for o in &scale.overrides {
            net.set(o).map_err(anyhow::Error::msg)?;
        }
        scales.push(scale);
    }
    Ok((chosen, scales))
}

/// `paper`'s own scale with what the command line sets.
fn scale_of(paper: &Paper, args: &Args) -> anyhow::Result<Scale> {
    let mut s = (paper.scale)();
    s.items = args.items.unwrap_or(s.items);
    s.ops = args.ops.unwrap_or(s.ops);
    s.cns = args.cns.unwrap_or(s.cns);
    s.clients = args.clients.clone().unwrap_or(s.clients);
    s.peak_clients = args.peak_clients.unwrap_or(s.peak_clients);
    s.coroutines = args.coroutines.unwrap_or(s.coroutines);
    s.seed = args.seed.unwrap_or(s.seed);
    s.fast_load |= args.fast_load;
    if !args.workloads.is_empty() {
        s.workloads = args.workloads.clone();
    }
    s.overrides.extend(args.overrides.iter().cloned());
    s.traces = args.traces.clone();
    s.mn_gb = args.mn_gb;
    if let Some(gb) = s.mn_gb {
        limits::node_gib("--mn-gb", gb)?;
    }
    if cfg!(feature = "ucx") {
        s.memnode_exe = Some(std::env::current_exe()?);
    }
    if s.items == 0 || s.ops == 0 || s.cns == 0 || s.coroutines == 0 {
        bail!("--items, --ops, --cns and --coroutines must be positive");
    }
    if s.clients.is_empty() || s.clients.contains(&0) || s.peak_clients == 0 {
        bail!("client counts must be positive");
    }
    // `bench`'s bounds, before any run starts (each run checks its own again): the counts
    // whatever the paper's placement, since some papers give clients per CN, others in all.
    limits::at_most("--items", s.items, limits::MAX_OPS)?;
    limits::at_most("--ops", s.ops, limits::MAX_OPS)?;
    limits::count("--cns", s.cns as usize, limits::MAX_CNS as usize)?;
    limits::count("--coroutines", s.coroutines, limits::MAX_TASKS)?;
    for &clients in s.clients.iter().chain([&s.peak_clients]) {
        let what = "client tasks (--clients or --peak-clients × --coroutines)";
        limits::count(what, clients.saturating_mul(s.coroutines), limits::MAX_TASKS)?;
    }
    Ok(s)
}
