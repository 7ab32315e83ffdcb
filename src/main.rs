//! `dmindex`: indexes for disaggregated memory, from the command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod fabric_bench;
mod sim_bench;

/// Indexes for disaggregated memory (CHIME, SepHash, Dolphin, HiStore and baselines).
#[derive(Parser, Debug)]
#[command(name = "dmindex", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure the cost of each verb on the in-process (local) transport.
    FabricBench(fabric_bench::Args),
    /// Run a mixed READ/WRITE/CAS load on the deterministic simulator and report virtual-time
    /// throughput, latency, NIC utilisation and the simulator's own speed.
    SimBench(sim_bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::FabricBench(args) => fabric_bench::run(&args),
        Command::SimBench(args) => sim_bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
