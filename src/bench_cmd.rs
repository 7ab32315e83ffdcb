//! `dmindex bench` and `dmindex check`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;

use crate::limits;
use dmindex_bench::{BenchConfig, TransportKind};
use dmindex_catalog::DEFAULT_INDEX;
use dmindex_index::conformance::{CheckConfig, Crashes, Summary};

/// An index name the catalog knows; the error lists the known ones.
pub fn parse_index(s: &str) -> Result<String, String> {
    dmindex_catalog::find(s).map(|e| e.name.to_string()).map_err(|e| e.to_string())
}

fn parse_cache_mb(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(mb) if mb.is_finite() && (0.0..=(1u64 << 24) as f64).contains(&mb) => Ok(mb),
        _ => Err(format!("'{s}' is not a cache size in MB (0 to {})", 1u64 << 24)),
    }
}

fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}' is not name=value"))
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value = DEFAULT_INDEX, help = dmindex_catalog::index_help(),
          value_parser = parse_index)]
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
    /// Fill memory by fast-forward (--transport sim): the load phase inserts through the index
    /// with verbs acting at once, outside the fabric model, and is not timed. For paper-scale
    /// runs of a workload; the load throughput is then not measured.
    #[arg(long)]
    fast_load: bool,
    #[arg(long, help = format!("Simulator fabric preset (--transport sim): {} (default {})",
          dmindex_sim::PRESETS.join(", "), dmindex_sim::DEFAULT_PRESET))]
    preset: Option<String>,
    /// Override a simulator fabric parameter, e.g. --set link_gbps=25 (repeatable; --transport
    /// sim).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    overrides: Vec<String>,
    /// Memory nodes (default 1; local, sim, or ucx with --spawn-memnodes).
    #[arg(long)]
    mns: Option<u16>,
    /// Bytes of memory per memory node, in GiB, committed lazily (default 4; local, sim, or ucx
    /// with --spawn-memnodes).
    #[arg(long)]
    mn_gb: Option<u64>,
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
    /// Request distribution overriding the workload's: zipfian, uniform, latest.
    #[arg(long)]
    distribution: Option<String>,
    /// Skew θ of the zipfian and latest distributions, in (0, 1) (YCSB: 0.99).
    #[arg(long)]
    zipf_theta: Option<f64>,
    /// Every scan asks for exactly this many pairs (default: YCSB's uniform 1 to 100).
    #[arg(long)]
    scan_len: Option<u64>,
    /// Replay this trace in the run phase instead of generating operations.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Load the keys of this YCSB load trace (`INSERT usertable user… [ … ]` lines, or `INSERT
    /// key`) in file order instead of generating --items keys.
    #[arg(long)]
    load_trace: Option<PathBuf>,
    /// Load the distinct keys of --trace, in order of first appearance, instead of --items
    /// generated keys (a cache trace such as Twitter's has no load phase of its own). With
    /// --folded, the trace's keys are numbered by first appearance and folded like generated ones.
    #[arg(long)]
    trace_warm: bool,
    /// Key size in bytes (8: integer keys; more: `user…` strings padded to this size).
    #[arg(long, default_value_t = 8)]
    key_size: usize,
    /// Keys exactly as YCSB forms them ("user" + the decimal key hash, no padding, up to 24
    /// bytes), so generated keys match a real YCSB trace's; overrides --key-size.
    #[arg(long)]
    ycsb_keys: bool,
    /// Value size in bytes.
    #[arg(long, default_value_t = 8)]
    value_size: usize,
    /// YCSB insertorder=ordered (keys 1, 2, 3, …) instead of hashed.
    #[arg(long)]
    ordered: bool,
    /// 8-byte keys folded into a space of twice the keys the run reaches (items + ops, rounded
    /// up to a power of two), loaded in pseudo-random order: the Dolphin paper's key format.
    #[arg(long, conflicts_with_all = ["ordered", "ycsb_keys"])]
    folded: bool,
    /// CN-side cache budget per compute node, MB (fractions allowed: 0.5 = 512 KiB).
    #[arg(long, default_value_t = 100.0, value_parser = parse_cache_mb)]
    cache_mb: f64,
    /// Index-specific option, e.g. --option span=64 (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Seed for workload generation and the simulator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Crash a memory node this many µs into the run phase (an index that replicates across
    /// memory nodes; --transport sim, or ucx with --spawn-memnodes: a kill -9 of its process).
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    mn_crash_us: Option<u64>,
    /// The memory node --mn-crash-us crashes (not node 0, which holds the root table).
    #[arg(long, value_name = "NODE", default_value_t = 1)]
    mn_crash_node: u16,
    /// Restart the crashed node empty this many µs after its crash; a monitor client then
    /// rebuilds it while the workload goes on, and the report gives the rebuild's times.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    mn_restart_us: Option<u64>,
    /// Count the run phase's completions per interval of this many µs (in the JSON report's
    /// `timeline`).
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    timeline_us: Option<u64>,
    /// Start --mns memnodes of --mn-gb each as processes of this machine, on loopback, for
    /// this run (--transport ucx; instead of --memnode and --token-file).
    #[arg(long)]
    spawn_memnodes: bool,
    /// A monitor client rebuilds this memory node after it goes down and comes back during the
    /// run (--transport ucx with memnodes started elsewhere, killed and restarted by hand).
    #[arg(long, value_name = "NODE")]
    watch_node: Option<u16>,
    /// How long a UCX call or verb may wait for its memnode before the memnode counts as down
    /// (ms; a HiStore rebuild's copy of a partition is one call).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    ucx_timeout_ms: u64,
    /// Record every operation and check the history for linearizability at the end, after
    /// reading every key once more (exit 1 if it is not linearizable; --transport local or ucx,
    /// small runs).
    #[arg(long)]
    check: bool,
    /// Also report the share of reads whose key their compute node read before in the run (for
    /// YCSB C, the hit-ratio ceiling of a per-node cache such as CHIME's hotspot buffer), from
    /// the run's streams drawn again: a few seconds per 10 M operations (workloads without
    /// inserts or "latest"; not with --trace).
    #[arg(long)]
    key_reuse: bool,
    /// Draw this many run-phase operations ahead (each client its share) and replay them
    /// cyclically for --ops, as the reference harnesses replay a fixed trace for a fixed time
    /// (YCSB workloads without inserts or "latest"; 16 B per operation drawn).
    #[arg(long)]
    stream_ops: Option<u64>,
}

/// Refuses what this run would ignore or could not hold.
fn check_bench_args(a: &BenchArgs) -> anyhow::Result<()> {
    let sim = a.transport == "sim";
    if !sim && (a.preset.is_some() || !a.overrides.is_empty()) {
        bail!("--preset and --set describe the simulated fabric: they go with --transport sim");
    }
    let external = a.transport == "ucx" && !a.spawn_memnodes;
    if external && (a.mns.is_some() || a.mn_gb.is_some()) {
        bail!(
            "--mns and --mn-gb size the memory nodes of local, sim or --spawn-memnodes runs; with \
             --transport ucx the memnodes are those --memnode lists, with their own sizes"
        );
    }
    limits::count("--mns", a.mns.unwrap_or(1) as usize, limits::MAX_MNS as usize)?;
    limits::count("--cns", a.cns as usize, limits::MAX_CNS as usize)?;
    let threads = (a.cns as usize).saturating_mul(a.clients);
    if sim {
        // Simulated clients are tasks, not threads.
        let tasks = threads.saturating_mul(a.coroutines);
        limits::count("client tasks (--cns × --clients × --coroutines)", tasks, limits::MAX_TASKS)?;
    } else {
        limits::threads_and_tasks(threads, a.coroutines)?;
    }
    Ok(())
}

/// Everything `bench` checks before it runs: the configuration, or what is wrong with the
/// flags.
pub fn bench_config(a: &BenchArgs) -> anyhow::Result<BenchConfig> {
    check_bench_args(a)?;
    let cfg = BenchConfig {
        index: a.index.clone(),
        transport: match a.transport.as_str() {
            "sim" => TransportKind::Sim,
            "ucx" => TransportKind::Ucx,
            _ => TransportKind::Local,
        },
        preset: a.preset.clone().unwrap_or_else(|| dmindex_sim::DEFAULT_PRESET.into()),
        overrides: a.overrides.clone(),
        memory_nodes: a.mns.unwrap_or(1),
        mn_bytes: limits::node_gib("--mn-gb", a.mn_gb.unwrap_or(4))?,
        cns: a.cns,
        clients: a.clients,
        coroutines: a.coroutines,
        items: a.items,
        ops: a.ops,
        workload: a.workload.clone(),
        mix: a.mix.clone(),
        distribution: a.distribution.clone(),
        zipf_theta: a.zipf_theta,
        scan_len: a.scan_len,
        trace: a.trace.clone(),
        load_trace: a.load_trace.clone(),
        trace_warm: a.trace_warm,
        key_size: a.key_size,
        ycsb_keys: a.ycsb_keys,
        value_size: a.value_size,
        ordered_keys: a.ordered,
        folded_keys: a.folded,
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
        fast_load: a.fast_load,
        mn_fault: a.mn_crash_us.map(|us| dmindex_bench::MnFault {
            node: a.mn_crash_node,
            crash_ns: us * 1000,
            restart_ns: a.mn_restart_us.map(|r| r * 1000),
        }),
        timeline_ns: a.timeline_us.unwrap_or(0) * 1000,
        spawn: match a.spawn_memnodes {
            true => Some(std::env::current_exe()?),
            false => None,
        },
        watch_node: a.watch_node,
        ucx_timeout: std::time::Duration::from_millis(a.ucx_timeout_ms),
        check: a.check,
        key_reuse: a.key_reuse,
        stream_ops: a.stream_ops,
    };
    if a.spawn_memnodes
        && (a.transport != "ucx" || !a.memnodes.is_empty() || a.token_file.is_some())
    {
        bail!("--spawn-memnodes goes with --transport ucx, instead of --memnode and --token-file");
    }
    let killable = a.transport == "sim" || a.spawn_memnodes;
    if (a.mn_crash_us.is_some() || a.mn_restart_us.is_some()) && !killable {
        bail!("--mn-crash-us and --mn-restart-us go with --transport sim, or ucx with --spawn-memnodes");
    }
    if let Some(n) = a.watch_node {
        if a.transport != "ucx" || a.spawn_memnodes || a.mn_crash_us.is_some() {
            bail!("--watch-node goes with --transport ucx and memnodes started elsewhere (spawned ones are watched when --mn-crash-us crashes one)");
        }
        if n == 0 || n as usize >= a.memnodes.len() {
            bail!(
                "--watch-node {n}: pick a memory node from 1 to {} (node 0 holds the root table)",
                a.memnodes.len().saturating_sub(1)
            );
        }
        if !dmindex_catalog::find(&a.index)?.survives_mn_crash {
            bail!("--watch-node: {} does not replicate across memory nodes", a.index);
        }
    }
    if a.check && a.transport == "sim" {
        bail!("--check goes with --transport local or ucx (on the simulator, `dmindex check` checks many seeds)");
    }
    if a.mn_restart_us.is_some() && a.mn_crash_us.is_none() {
        bail!("--mn-restart-us needs --mn-crash-us (only a crashed node restarts)");
    }
    if a.mn_crash_us.is_some() {
        let mns = a.mns.unwrap_or(1);
        if a.mn_crash_node == 0 || a.mn_crash_node >= mns {
            bail!(
                "--mn-crash-node {}: pick a memory node from 1 to {} (node 0 holds the root table; \
                 --mns is {mns})",
                a.mn_crash_node,
                mns.saturating_sub(1),
            );
        }
        if !dmindex_catalog::find(&a.index)?.survives_mn_crash {
            bail!("--mn-crash-us: {} does not replicate across memory nodes", a.index);
        }
    }
    if a.fast_load && a.transport != "sim" {
        bail!("--fast-load goes with --transport sim");
    }
    if a.transport != "ucx"
        && (!a.memnodes.is_empty() || a.token_file.is_some() || a.attach || a.watch_node.is_some())
    {
        bail!("--memnode, --token-file and --attach go with --transport ucx");
    }
    Ok(cfg)
}

pub fn bench(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let cfg = bench_config(a)?;
    let report = dmindex_catalog::bench(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if report.check.as_ref().is_some_and(|c| c.violation.is_some()) {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[arg(long, default_value = DEFAULT_INDEX, help = dmindex_catalog::index_help(),
          value_parser = parse_index)]
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
    /// Crash clients in one seed of every N (the others run without crashes; 1: every seed).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    crash_every: u64,
    /// No injected delays.
    #[arg(long)]
    no_delays: bool,
    /// Clients stall, rarely (one awaited post in 500), for up to this many µs before a post,
    /// as descheduled or slow clients do, and then go on.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    stall_us: Option<u64>,
    /// Index-specific option (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Memory nodes of the simulated cluster.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    mns: u16,
    /// Crash one memory node other than node 0 in every seed, at a random instant within this
    /// many µs of the run phase's start (needs --mns 2 or more and an index that replicates).
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    mn_crash_us: Option<u64>,
    /// With --mn-crash-us: the crashed node restarts empty this many µs after its crash, and one
    /// more client rebuilds it while the others go on; every key is read once more at the end.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    mn_restart_us: Option<u64>,
}

/// Everything `check` checks before it runs: the index, the configuration and the seeds, or
/// what is wrong with the flags.
pub fn check_plan(
    a: &CheckArgs,
) -> anyhow::Result<(
    &'static dmindex_catalog::IndexEntry,
    CheckConfig,
    std::ops::RangeInclusive<u64>,
)> {
    let entry = dmindex_catalog::find(&a.index)?;
    if a.mn_crash_us.is_some() && !entry.survives_mn_crash {
        bail!(
            "--mn-crash-us: {} does not replicate across memory nodes, so a memory-node crash \
             loses data by design (indexes that survive one: {})",
            a.index,
            dmindex_catalog::INDEXES
                .iter()
                .filter(|e| e.survives_mn_crash)
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if a.mn_restart_us.is_some() && a.mn_crash_us.is_none() {
        bail!("--mn-restart-us needs --mn-crash-us (only a crashed node restarts)");
    }
    if a.mn_crash_us.is_some() && a.mns < 2 {
        bail!(
            "--mn-crash-us needs --mns 2 or more (node 0 holds the root table and never crashes)"
        );
    }
    limits::count("--clients", a.clients, 4096)?;
    limits::count("--ops", a.ops.min(usize::MAX as u64) as usize, 1 << 20)?;
    limits::count("--keys", a.keys.min(usize::MAX as u64) as usize, 1 << 32)?;
    limits::count("--value-size", a.value_size, 4096)?;
    dmindex_sim::NetParams::preset(&a.preset).map_err(anyhow::Error::msg)?;
    let cfg = CheckConfig {
        clients: a.clients,
        ops_per_client: a.ops,
        keys: a.keys,
        crashes: match (a.no_crashes, a.crash_every) {
            (true, _) => Crashes::Never,
            (false, 1) => Crashes::EverySeed,
            (false, n) => Crashes::OneSeedIn(n),
        },
        delays: !a.no_delays,
        stall_max_ns: a.stall_us.unwrap_or(0) * 1000,
        preset: a.preset.clone(),
        index_options: a.options.clone(),
        value_size: a.value_size,
        long_keys: a.long_keys,
        memory_nodes: a.mns,
        memory_node_crash_ns: a.mn_crash_us.unwrap_or(0) * 1000,
        memory_node_restart_ns: a.mn_restart_us.unwrap_or(0) * 1000,
        ..CheckConfig::default()
    };
    let seeds = match a.seed {
        Some(s) => s..=s,
        None => match a.first_seed.checked_add(a.seeds.saturating_sub(1)) {
            Some(last) if a.seeds > 0 => a.first_seed..=last,
            _ => bail!(
                "--first-seed {} and --seeds {} run past the last seed, 2^64 - 1 (or ask for none)",
                a.first_seed,
                a.seeds
            ),
        },
    };
    Ok((entry, cfg, seeds))
}

pub fn check(a: &CheckArgs) -> anyhow::Result<ExitCode> {
    let (entry, cfg, seeds) = check_plan(a)?;
    let mut sum = Summary::default();
    for seed in seeds.clone() {
        match (entry.check)(&cfg, seed) {
            Ok(r) => {
                if a.seed.is_some() {
                    println!("{r}");
                }
                sum.add(&r);
            }
            Err(e) if dmindex_index::conformance::not_runnable(&e) => {
                eprintln!("error: {} cannot run this check: {e:#}", a.index);
                return Ok(ExitCode::from(2));
            }
            Err(e) => {
                eprintln!(
                    "{}: seed {seed} failed (replay with: dmindex check --index {} --seed {seed}{}): {e:#}",
                    a.index,
                    a.index,
                    replay_flags(a)
                );
                println!("{}: {sum} before seed {seed}", a.index);
                return Ok(ExitCode::from(1));
            }
        }
    }
    println!("{} ({}..={}): {sum}", a.index, seeds.start(), seeds.end());
    Ok(ExitCode::SUCCESS)
}

/// The flags besides the seed that a replay needs.
fn replay_flags(a: &CheckArgs) -> String {
    let d = CheckConfig::default();
    let mut s = String::new();
    let mut flag = |on: bool, f: String| {
        if on {
            s.push(' ');
            s.push_str(&f);
        }
    };
    flag(a.clients != d.clients, format!("--clients {}", a.clients));
    flag(a.ops != d.ops_per_client, format!("--ops {}", a.ops));
    flag(a.keys != d.keys, format!("--keys {}", a.keys));
    flag(a.preset != d.preset, format!("--preset {}", a.preset));
    flag(a.value_size != d.value_size, format!("--value-size {}", a.value_size));
    flag(a.long_keys, "--long-keys".into());
    flag(a.no_crashes, "--no-crashes".into());
    flag(a.crash_every != 4, format!("--crash-every {}", a.crash_every));
    flag(a.no_delays, "--no-delays".into());
    if let Some(us) = a.stall_us {
        flag(true, format!("--stall-us {us}"));
    }
    flag(a.mns != 1, format!("--mns {}", a.mns));
    if let Some(us) = a.mn_crash_us {
        flag(true, format!("--mn-crash-us {us}"));
    }
    if let Some(us) = a.mn_restart_us {
        flag(true, format!("--mn-restart-us {us}"));
    }
    for (k, v) in &a.options {
        flag(true, format!("--option {k}={v}"));
    }
    s
}
