//! `dmindex bench` and `dmindex check`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use dmindex_bench::check::{check_seeds, CheckConfig};
use dmindex_bench::{BenchConfig, TransportKind, INDEXES};

fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}' is not name=value"))
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Index to run (chime, sherman, ref).
    #[arg(long, default_value = "chime")]
    index: String,
    /// Transport: local (in-process, real time), sim (simulated cluster, virtual time) or ucx
    /// (memnodes over OpenUCX; needs a build with `--features ucx`).
    #[arg(long, default_value = "local", value_parser = ["local", "sim", "ucx"])]
    transport: String,
    /// Memnodes for --transport ucx, HOST:PORT in memory-node id order (comma-separated or
    /// repeated).
    #[arg(long = "memnode", value_name = "HOST:PORT", value_delimiter = ',')]
    memnodes: Vec<String>,
    /// File holding the memnodes' token (--transport ucx).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Open the index another `bench` process created and loaded on the same memnodes (no
    /// create, no load phase; --transport ucx).
    #[arg(long)]
    attach: bool,
    /// Simulator fabric preset (with --transport sim).
    #[arg(long, default_value = "chime-testbed")]
    preset: String,
    /// Override a simulator fabric parameter, e.g. --set link_gbps=25 (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    overrides: Vec<String>,
    /// Memory nodes.
    #[arg(long, default_value_t = 1)]
    mns: u16,
    /// Bytes of memory per memory node, in GiB (committed lazily).
    #[arg(long, default_value_t = 4)]
    mn_gb: u64,
    /// Compute nodes.
    #[arg(long, default_value_t = 1)]
    cns: u16,
    /// Client threads per compute node.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Coroutines (client tasks) per client thread.
    #[arg(long, default_value_t = 1)]
    coroutines: usize,
    /// Items loaded before the run phase.
    #[arg(long, default_value_t = 100_000)]
    items: u64,
    /// Operations in the run phase (default: --items, or the trace length).
    #[arg(long)]
    ops: Option<u64>,
    /// YCSB workload: load, a, b, c, d, e, f.
    #[arg(long, default_value = "c")]
    workload: String,
    /// Override the workload's proportions, e.g. read=0.5,delete=0.5 (read, update, insert,
    /// scan, rmw, delete).
    #[arg(long)]
    mix: Option<String>,
    /// Replay this trace in the run phase instead of generating operations.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Key size in bytes (8: integer keys; more: `user…` strings).
    #[arg(long, default_value_t = 8)]
    key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 8)]
    value_size: usize,
    /// YCSB insertorder=ordered (keys 1, 2, 3, …) instead of hashed.
    #[arg(long)]
    ordered: bool,
    /// CN-side cache budget per compute node, MB.
    #[arg(long, default_value_t = 100)]
    cache_mb: u64,
    /// Index-specific option, e.g. --option span=64 (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Seed for workload generation and the simulator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn bench(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let cfg = BenchConfig {
        index: a.index.clone(),
        transport: match a.transport.as_str() {
            "sim" => TransportKind::Sim,
            "ucx" => TransportKind::Ucx,
            _ => TransportKind::Local,
        },
        preset: a.preset.clone(),
        overrides: a.overrides.clone(),
        memory_nodes: a.mns,
        mn_bytes: a
            .mn_gb
            .checked_mul(1 << 30)
            .filter(|&b| b > 0)
            .ok_or_else(|| anyhow::anyhow!("--mn-gb must be positive"))?,
        cns: a.cns,
        clients: a.clients,
        coroutines: a.coroutines,
        items: a.items,
        ops: a.ops,
        workload: a.workload.clone(),
        mix: a.mix.clone(),
        trace: a.trace.clone(),
        key_size: a.key_size,
        value_size: a.value_size,
        ordered_keys: a.ordered,
        cache_mb: a.cache_mb,
        seed: a.seed,
        index_options: a.options.clone(),
        progress: std::io::stderr().is_terminal(),
        memnodes: a.memnodes.clone(),
        token: match &a.token_file {
            Some(f) => dmindex_ucx::proto::read_token_file(f).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        },
        attach: a.attach,
    };
    if a.transport != "ucx" && (!a.memnodes.is_empty() || a.token_file.is_some() || a.attach) {
        bail!("--memnode, --token-file and --attach go with --transport ucx");
    }
    let report = dmindex_bench::run(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Index to check (chime, sherman, ref).
    #[arg(long, default_value = "chime")]
    index: String,
    /// Number of seeds to run, from --first-seed.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Run exactly this seed (replay).
    #[arg(long)]
    seed: Option<u64>,
    /// Client tasks per run.
    #[arg(long, default_value_t = 12)]
    clients: usize,
    /// Operations per client.
    #[arg(long, default_value_t = 60)]
    ops: u64,
    /// Distinct keys (few keys = many collisions).
    #[arg(long, default_value_t = 48)]
    keys: u64,
    /// Simulator fabric preset.
    #[arg(long, default_value = "stress")]
    preset: String,
    /// Value size in bytes.
    #[arg(long, default_value_t = 8)]
    value_size: usize,
    /// String keys of 8 to 11 bytes, three sharing each 8-byte prefix.
    #[arg(long)]
    long_keys: bool,
    /// No client crashes.
    #[arg(long)]
    no_crashes: bool,
    /// No injected delays.
    #[arg(long)]
    no_delays: bool,
    /// Index-specific option (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
    options: Vec<(String, String)>,
}

pub fn check(a: &CheckArgs) -> anyhow::Result<ExitCode> {
    if !INDEXES.contains(&a.index.as_str()) {
        bail!("unknown index '{}' (known: {})", a.index, INDEXES.join(", "));
    }
    let cfg = CheckConfig {
        index: a.index.clone(),
        clients: a.clients,
        ops_per_client: a.ops,
        keys: a.keys,
        crashes: !a.no_crashes,
        delays: !a.no_delays,
        preset: a.preset.clone(),
        index_options: a.options.clone(),
        value_size: a.value_size,
        long_keys: a.long_keys,
        ..CheckConfig::default()
    };
    let seeds = match a.seed {
        Some(s) => s..s + 1,
        None => a.first_seed..a.first_seed + a.seeds,
    };
    let (mut ops, mut crashed, mut pending) = (0, 0, 0);
    let result = check_seeds(&cfg, seeds.clone(), |r| {
        ops += r.stats.ops;
        crashed += r.crashed;
        pending += r.stats.pending;
        if a.seed.is_some() {
            println!("seed {}: {} ops on {} keys, {} pending, {} clients crashed, {} stuck, trace {:016x}", r.seed, r.stats.ops, r.stats.keys, r.stats.pending, r.crashed, r.stuck, r.trace_hash);
        }
    });
    match result {
        Ok(reports) => {
            println!(
                "{} seeds linearizable ({}..{}): {} operations, {} pending, {} clients crashed",
                reports.len(),
                seeds.start,
                seeds.end,
                ops,
                pending,
                crashed
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e:#}");
            Ok(ExitCode::from(1))
        }
    }
}
