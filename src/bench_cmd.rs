//! `dmindex bench` and `dmindex check`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::bail;

use dmindex_bench::{limits, BenchConfig, Deal, IndexChoice, Progress};
use dmindex_conformance::{CheckConfig, CrashClock, Crashes, Summary};

/// An index name the catalog knows; the error lists the known ones.
pub fn parse_index(s: &str) -> Result<String, String> {
    dmindex_catalog::find(s).map(|e| e.name.to_string()).map_err(|e| e.to_string())
}

/// `--index` of `bench` and `check`, declared with the rest of a run in `dmindex_bench`, gets
/// the catalog's names for its help and its parser here (the harness knows no index by name).
pub fn catalog_index_arg(a: clap::Arg) -> clap::Arg {
    a.help(dmindex_catalog::index_help()).value_parser(parse_index)
}

/// Progress bars on a terminal, lines every few seconds into a log or a pipe.
pub fn progress() -> Progress {
    match std::io::stderr().is_terminal() {
        true => Progress::Bars,
        false => Progress::Lines,
    }
}

pub fn bench(mut cfg: BenchConfig) -> anyhow::Result<ExitCode> {
    cfg.output.progress = progress();
    if cfg.workload.trace.is_some() && cfg.workload.deal == Deal::RoundRobin && cfg.tasks() > 1 {
        eprintln!(
            "warning: --deal round-robin: the trace's lines go to {} client tasks in turn, so \
             the order between operations on different clients is not kept (a read can run \
             before the insert of its key and miss it); --deal by-key keeps each key's order",
            cfg.tasks()
        );
    }
    let report = dmindex_catalog::bench(&cfg)?;
    if cfg.output.json {
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
    #[command(flatten)]
    index: IndexChoice,
    /// Number of seeds to run, from --first-seed.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Run exactly this seed (replay; not with --seeds or --first-seed, which name a range).
    #[arg(long, conflicts_with_all = ["seeds", "first_seed"])]
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
    /// With --long-keys: this many keys share each 8-byte prefix (CHIME and Sherman keep more
    /// than a few in collision groups).
    #[arg(long, value_name = "N", requires = "long_keys", value_parser = clap::value_parser!(u64).range(1..=100))]
    keys_per_prefix: Option<u64>,
    /// With --long-keys: every key padded to this many bytes (CHIME's collision pages then
    /// hold records of several cache lines).
    #[arg(long, value_name = "N", requires = "long_keys", value_parser = clap::value_parser!(u64).range(11..=255))]
    long_key_bytes: Option<u64>,
    /// No client crashes.
    #[arg(long)]
    no_crashes: bool,
    /// Crash clients in one seed of every N (the others run without crashes; 1: every seed).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    crash_every: u64,
    /// What crashes are drawn against: post (each awaited post, 1 in 500: operations of more
    /// posts are more exposed) or operation (each operation arms one, 6 in 1000, at one of its
    /// client's next 1-8 posts: the share of operations checked then compares indexes).
    #[arg(long, value_enum, default_value_t = ClockArg::Post)]
    crash_clock: ClockArg,
    /// No injected delays.
    #[arg(long)]
    no_delays: bool,
    /// Clients stall, rarely (one awaited post in 500), for up to this many µs before a post,
    /// as descheduled or slow clients do, and then go on.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    stall_us: Option<u64>,
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
    /// Print the summary as JSON (with each repaired crash's time to recover).
    #[arg(long)]
    json: bool,
}

/// `--crash-clock`'s choices ([`CrashClock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockArg {
    Post,
    Operation,
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
    let entry = dmindex_catalog::find(&a.index.name)?;
    if a.mn_crash_us.is_some() && !entry.survives_mn_crash {
        bail!(
            "--mn-crash-us: {} does not replicate across memory nodes, so a memory-node crash \
             loses data by design (indexes that survive one: {})",
            a.index.name,
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
    limits::count("--clients", a.clients, limits::MAX_CHECK_CLIENTS)?;
    limits::count_u64("--ops", a.ops, limits::MAX_CHECK_OPS)?;
    limits::total("--ops", a.ops, a.clients as u64, limits::MAX_CHECK_HISTORY)?;
    limits::count("--value-size", a.value_size, limits::MAX_VALUE_SIZE)?;
    let key_bytes = a.long_key_bytes.unwrap_or(11);
    let pair = (if a.long_keys { key_bytes } else { 8 }) + a.value_size as u64;
    let memory = a.mns as u64 * dmindex_conformance::linearizable::NODE_BYTES;
    let node_mib = dmindex_conformance::linearizable::NODE_BYTES >> 20;
    let memory_is = format!("a check runs on (--mns × {node_mib} MiB)");
    limits::pairs_fit("--keys", a.keys, pair, memory, &memory_is)?;
    limits::count_u64("--keys", a.keys, memory / pair)?;
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
        crash_clock: match a.crash_clock {
            ClockArg::Post => CrashClock::Post,
            ClockArg::Operation => CrashClock::Operation,
        },
        delays: !a.no_delays,
        stall_max_ns: a.stall_us.unwrap_or(0) * 1000,
        preset: a.preset.clone(),
        index_options: a.index.options.clone(),
        value_size: a.value_size,
        long_keys: a.long_keys,
        keys_per_prefix: a.keys_per_prefix.unwrap_or(CheckConfig::default().keys_per_prefix),
        long_key_bytes: key_bytes as usize,
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
                if a.seed.is_some() && !a.json {
                    println!("{r}");
                }
                sum.add(&r);
            }
            Err(e) if dmindex_conformance::not_runnable(&e) => {
                eprintln!("error: {} cannot run this check: {e:#}", a.index.name);
                return Ok(ExitCode::from(2));
            }
            Err(e) => {
                eprintln!(
                    "{}: seed {seed} failed (replay with: dmindex check --index {} --seed {seed}{}): {e:#}",
                    a.index.name,
                    a.index.name,
                    replay_flags(a)
                );
                println!("{}: {sum} before seed {seed}", a.index.name);
                return Ok(ExitCode::from(1));
            }
        }
    }
    let recovers = (entry.recovers_client_crashes)(&cfg.index_config());
    if a.json {
        let report = summary_json(&a.index.name, recovers, &seeds, &sum);
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let recovery = match (recovers, sum.stuck) {
        (false, 1..) => "; this index does not recover from client crashes yet",
        _ => "",
    };
    println!("{} ({}..={}): {sum}{recovery}", a.index.name, seeds.start(), seeds.end());
    Ok(ExitCode::SUCCESS)
}

/// `check --json`: the summary, and the time to recover from the crashes survivors repaired in
/// virtual ms and in leases (min, median, p99 and max by nearest rank; null when none was).
fn summary_json(
    index: &str,
    recovers: bool,
    seeds: &std::ops::RangeInclusive<u64>,
    s: &Summary,
) -> serde_json::Value {
    let lease = s.lease_ns.max(1) as f64;
    let spread = |q: &dyn Fn(f64) -> Option<u64>| {
        let at = |x: f64| q(x).map(|ns| ns as f64 / 1e6);
        let leases = |x: f64| q(x).map(|ns| ns as f64 / lease);
        serde_json::json!({
            "min_ms": at(0.0), "median_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0),
            "min_leases": leases(0.0), "median_leases": leases(0.5),
            "p99_leases": leases(0.99), "max_leases": leases(1.0),
        })
    };
    serde_json::json!({
        "index": index,
        "first_seed": seeds.start(),
        "last_seed": seeds.end(),
        "seeds": s.seeds,
        "requested": s.requested,
        "completed": s.completed,
        "coverage": s.coverage(),
        "crashed": s.crashed,
        "crashed_clients": s.crashed_clients,
        "survivors_completed": s.survivors_completed,
        "survivors_requested": s.survivors_requested,
        "round_trips": s.round_trips,
        "crashed_round_trips": s.crashed_round_trips,
        "seeds_with_crashes": s.seeds_with_crashes,
        "stuck": s.stuck,
        "seeds_with_stuck": s.seeds_with_stuck,
        "stuck_on_held_lock": s.stuck_on_held_lock,
        "memory_node_crashes": s.memory_node_crashes,
        "rebuilds": s.rebuilds,
        "rebuilds_crashed": s.rebuilds_crashed,
        "recovery": {
            "recovers_client_crashes": recovers,
            "lease_ms": s.lease_ns as f64 / 1e6,
            "crashes": s.crashed,
            "repaired": s.repaired,
            "recovered": s.recovered_ns.len(),
            "repairs_unfinished": s.repairs_unfinished,
            "time_to_recover": spread(&|q| s.recovered_quantile_ns(q)),
            "time_to_fence": spread(&|q| s.fenced_quantile_ns(q)),
        },
    })
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
    if let Some(n) = a.keys_per_prefix {
        flag(true, format!("--keys-per-prefix {n}"));
    }
    if let Some(n) = a.long_key_bytes {
        flag(true, format!("--long-key-bytes {n}"));
    }
    flag(a.no_crashes, "--no-crashes".into());
    flag(a.crash_every != 4, format!("--crash-every {}", a.crash_every));
    flag(a.crash_clock == ClockArg::Operation, "--crash-clock operation".into());
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
    for (k, v) in &a.index.options {
        flag(true, format!("--option {k}={v}"));
    }
    s
}
