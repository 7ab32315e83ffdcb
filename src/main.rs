//! `dmindex`: indexes for disaggregated memory, from the command line.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use dmindex_bench::limits;

mod bench_cmd;
mod cpu_costs;
mod experiment_cmd;
mod fabric_bench;
#[cfg(test)]
mod fuzz;
mod memnode_cmd;
mod perf_cmd;
mod sim_bench;

/// Indexes for disaggregated memory, reached through one-sided verbs (`dmindex indexes` lists
/// them).
#[derive(clap::Parser, Debug)]
#[command(name = "dmindex", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load an index and run a YCSB workload or trace on it; report throughput, latency,
    /// round trips, bytes, cache and remote memory.
    Bench(Box<dmindex_bench::BenchConfig>),
    /// Run mixed workloads on the simulator with torn reads, delays and crashes, and check every
    /// history for linearizability.
    Check(bench_cmd::CheckArgs),
    /// Reproduce a paper's figures on its simulated testbed: JSON reports and SVG charts.
    Experiment(experiment_cmd::Args),
    /// List the indexes: name, kind (point or ordered), RDWC, memory-node services.
    Indexes,
    /// Serve a memory node over OpenUCX: a UCX-allocated pool, a progress loop, and a TCP port
    /// for bootstrap and two-sided requests (needs a build with `--features ucx`).
    Memnode(memnode_cmd::Args),
    /// Measure the cost of each verb on the in-process (local) transport.
    FabricBench(fabric_bench::Args),
    /// Nanoseconds per unit of each compute-side primitive an index reports (cache lookup, key
    /// compare, key hash, byte scanned), measured with the indexes' own code on this machine.
    CpuCosts(cpu_costs::Args),
    /// Nanoseconds per operation per thread of every index's operations on the in-process
    /// fabric, next to the verb floor.
    Perf(perf_cmd::Args),
    /// Run a mixed READ/WRITE/CAS load on the deterministic simulator and report virtual-time
    /// throughput, latency, NIC utilisation and the simulator's own speed.
    SimBench(sim_bench::Args),
}

/// The command line: the derived one, with the catalog's index names on `--index`.
fn command() -> clap::Command {
    let index = bench_cmd::catalog_index_arg;
    Cli::command()
        .mut_subcommand("bench", |c| c.mut_arg("index", index))
        .mut_subcommand("check", |c| c.mut_arg("index", index))
}

fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Bench(cfg) => bench_cmd::bench(*cfg),
        Command::Check(args) => bench_cmd::check(&args),
        Command::Experiment(args) => experiment_cmd::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Indexes => {
            print!("{}", dmindex_catalog::table());
            Ok(ExitCode::SUCCESS)
        }
        Command::Memnode(args) => memnode_cmd::run(&args).map(|()| ExitCode::SUCCESS),
        Command::FabricBench(args) => fabric_bench::run(&args).map(|()| ExitCode::SUCCESS),
        Command::CpuCosts(args) => cpu_costs::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Perf(args) => perf_cmd::run(&args).map(|()| ExitCode::SUCCESS),
        Command::SimBench(args) => sim_bench::run(&args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
