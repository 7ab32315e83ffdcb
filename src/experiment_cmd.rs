//! `dmindex experiment`: the papers' figures on their simulated testbeds.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use dmindex_bench::experiment::{run_experiment, Scale};
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
    /// List the papers' experiments and the figures they reproduce.
    #[arg(long)]
    list: bool,
    /// Directory for the JSON reports and SVG charts.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Items loaded before each run phase.
    #[arg(long, default_value_t = Scale::default().items)]
    items: u64,
    /// Operations per run phase.
    #[arg(long, default_value_t = Scale::default().ops)]
    ops: u64,
    /// Compute nodes.
    #[arg(long, default_value_t = Scale::default().cns)]
    cns: u16,
    /// Clients per CN along throughput–latency curves (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = Scale::default().clients)]
    clients: Vec<usize>,
    /// Clients per CN for single-point comparisons (factor and sensitivity analyses).
    #[arg(long, default_value_t = Scale::default().peak_clients)]
    peak_clients: usize,
    /// Coroutines per client.
    #[arg(long, default_value_t = Scale::default().coroutines)]
    coroutines: usize,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
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
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.list {
        for p in PAPERS {
            if args.paper.as_deref().is_some_and(|only| only != p.name) {
                continue;
            }
            println!("{} — {} (testbed preset {})", p.name, p.title, p.testbed);
            for e in p.experiments {
                println!("  {:<22} {}", format!("{}/{}", p.name, e.name), e.figure);
            }
        }
        return Ok(());
    }
    let name = args.name.as_deref().unwrap_or_default();
    if args.items == 0 || args.ops == 0 || args.cns == 0 || args.coroutines == 0 {
        bail!("--items, --ops, --cns and --coroutines must be positive");
    }
    if args.clients.is_empty() || args.clients.contains(&0) || args.peak_clients == 0 {
        bail!("client counts must be positive");
    }
    let scale = Scale {
        items: args.items,
        ops: args.ops,
        cns: args.cns,
        clients: args.clients.clone(),
        peak_clients: args.peak_clients,
        coroutines: args.coroutines,
        seed: args.seed,
        fast_load: args.fast_load,
        workloads: args.workloads.clone(),
        overrides: args.overrides.clone(),
    };
    if args.fast_load && !args.workloads.is_empty() && args.workloads.iter().all(|w| w == "load") {
        bail!("--workloads load with --fast-load leaves nothing to run (a fast-forward load is untimed)");
    }
    let chosen = resolve(name, args.paper.as_deref())?;
    // Every override must apply to the testbed of every paper chosen, before anything runs.
    for (paper, _) in &chosen {
        let mut net = dmindex_sim::NetParams::preset(paper.testbed).map_err(anyhow::Error::msg)?;
        for o in &scale.overrides {
            net.set(o).map_err(anyhow::Error::msg)?;
        }
    }
    for (paper, e) in chosen {
        let t = Instant::now();
        let out =
            run_experiment(paper, e.name, &scale, &args.out, &dmindex_catalog::bench, |line| {
                eprintln!("{line}")
            })?;
        let n = format!("{}/{}", paper.name, e.name);
        println!("{n}: {} runs in {:.1} s", out.runs.len(), t.elapsed().as_secs_f64());
        for f in &out.files {
            println!("  wrote {}", f.display());
        }
    }
    Ok(())
}
