//! # A run, described once
//!
//! [`BenchConfig`] is what `dmindex bench` takes, in typed groups: the [`Cluster`] it runs on,
//! the [`IndexChoice`], the [`Workload`], the [`Keys`], the [`Faults`] injected and the
//! [`Output`] asked for. Each group is a `clap::Args`: the command line flattens them, so a
//! flag is declared once, here, with its default and its help; the experiments and the tests
//! build the same structs (from [`BenchConfig::default`], which is the command line's defaults)
//! and change the fields they need. [`BenchConfig::validate`] refuses, once and before anything
//! runs, every combination a run would ignore or could not hold; [`crate::run`] calls it.
//!
//! Fields keep the units of their flags (µs, ms, GiB, MB); the methods that the harness reads
//! convert them ([`Cluster::mn_bytes`], [`Faults::mn_fault`], …).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use crate::limits;

/// GiB of each memory node when `--mn-gb` is not given.
pub const DEFAULT_MN_GB: u64 = 4;

/// The index a run takes when none is named (the catalog checks that it names one of its own).
pub const DEFAULT_INDEX: &str = "chime";

/// Which transport to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// In-process, real time.
    Local,
    /// A simulated cluster, virtual time.
    Sim,
    /// Memnodes over OpenUCX (needs a build with `--features ucx`).
    Ucx,
}

/// How a replayed trace's operations are dealt to the run's client tasks (`--deal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Deal {
    /// Every operation of a key to one client (a stable hash of the key), in trace order.
    ByKey,
    /// Line `i` to client `i mod tasks`: no order kept between clients.
    RoundRobin,
}

/// Everything `dmindex bench` takes.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchConfig {
    #[command(flatten)]
    pub index: IndexChoice,
    #[command(flatten, next_help_heading = "Cluster")]
    pub cluster: Cluster,
    #[command(flatten, next_help_heading = "Workload")]
    pub workload: Workload,
    #[command(flatten, next_help_heading = "Keys and values")]
    pub keys: Keys,
    #[command(flatten, next_help_heading = "Faults")]
    pub faults: Faults,
    #[command(flatten, next_help_heading = "Output")]
    pub output: Output,
}

/// The index and its options.
#[derive(clap::Args, Clone, Debug)]
pub struct IndexChoice {
    /// The index to run (`dmindex indexes` lists them).
    #[arg(id = "index", long = "index", value_name = "INDEX", default_value = DEFAULT_INDEX)]
    pub name: String,
    /// Index-specific option, e.g. --option span=64 (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
    pub options: Vec<(String, String)>,
    /// The name the index is created under (default: the index's own, e.g. chime), so that
    /// several indexes live on one set of memory nodes; --attach opens the one of this name.
    #[arg(long = "name", value_name = "NAME")]
    pub root_name: Option<String>,
}

impl IndexChoice {
    /// The name the index is created and found under.
    pub fn root_name(&self) -> &str {
        self.root_name.as_deref().unwrap_or(&self.name)
    }
}

/// The machines a run uses: transport, memory nodes, compute nodes and their clients.
#[derive(clap::Args, Clone, Debug)]
pub struct Cluster {
    /// Transport: local (in-process, real time), sim (simulated cluster, virtual time) or ucx
    /// (memnodes over OpenUCX; needs a build with `--features ucx`).
    #[arg(long, value_enum, default_value_t = TransportKind::Local)]
    pub transport: TransportKind,
    #[arg(long, help = format!("Simulator fabric preset (--transport sim): {} (default {})",
          dmindex_sim::PRESETS.join(", "), dmindex_sim::DEFAULT_PRESET))]
    pub preset: Option<String>,
    /// Override a simulator fabric parameter, e.g. --set link_gbps=25 (repeatable; --transport
    /// sim).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub overrides: Vec<String>,
    /// Memory nodes (default 1; local, sim, or ucx with --spawn-memnodes).
    #[arg(long = "mns", value_name = "MNS")]
    pub memory_nodes: Option<u16>,
    /// Bytes of memory per memory node, in GiB, committed lazily (default 4; local, sim, or ucx
    /// with --spawn-memnodes).
    #[arg(long)]
    pub mn_gb: Option<u64>,
    /// Compute nodes.
    #[arg(long, default_value_t = 1)]
    pub cns: u16,
    /// Client threads per compute node.
    #[arg(long, default_value_t = 2)]
    pub clients: usize,
    /// Coroutines (client tasks) per client thread.
    #[arg(long, default_value_t = 1)]
    pub coroutines: usize,
    /// CN-side cache budget per compute node, MB (fractions allowed: 0.5 = 512 KiB).
    #[arg(long, default_value_t = 100.0, value_parser = parse_cache_mb)]
    pub cache_mb: f64,
    /// Memnodes for --transport ucx, HOST:PORT in memory-node id order (comma-separated or
    /// repeated).
    #[arg(long = "memnode", value_name = "HOST:PORT", value_delimiter = ',')]
    pub memnodes: Vec<String>,
    /// File holding the memnodes' token (--transport ucx).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Open the index another `bench` process created and loaded on the same memnodes (no
    /// create, no load phase; --transport ucx).
    #[arg(long)]
    pub attach: bool,
    /// Start --mns memnodes of --mn-gb each as processes of this machine, on loopback, for
    /// this run (--transport ucx; instead of --memnode and --token-file).
    #[arg(long)]
    pub spawn_memnodes: bool,
    /// The `dmindex` executable that --spawn-memnodes starts (default: the running one).
    #[arg(skip)]
    pub memnode_exe: Option<PathBuf>,
    /// How long a UCX call or verb may wait for its memnode before the memnode counts as down
    /// (ms; a HiStore rebuild's copy of a partition is one call).
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub ucx_timeout_ms: u64,
}

/// What the clients do: the load phase and the run phase's operations.
#[derive(clap::Args, Clone, Debug)]
pub struct Workload {
    /// YCSB workload: load, a, b, c, d, e, f.
    #[arg(id = "workload", long = "workload", value_name = "WORKLOAD", default_value = "c")]
    pub name: String,
    /// Items loaded before the run phase.
    #[arg(long, default_value_t = 100_000)]
    pub items: u64,
    /// Operations in the run phase (default: --items, or the trace length).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Override the workload's proportions, e.g. read=0.5,delete=0.5 (read, update, insert,
    /// scan, rmw, delete).
    #[arg(long)]
    pub mix: Option<String>,
    /// Request distribution overriding the workload's: zipfian, uniform, latest.
    #[arg(long)]
    pub distribution: Option<String>,
    /// Skew θ of the zipfian and latest distributions, in (0, 1) (YCSB: 0.99).
    #[arg(long)]
    pub zipf_theta: Option<f64>,
    /// Ranks the zipfian draws from before scattering them over the keys (YCSB: 10^10): the
    /// requests past the keys loaded, which land like uniform ones, are 1 − ζ(items)/ζ(ranks)
    /// of all, so a run on fewer keys than a paper's keeps the paper's share with fewer ranks.
    #[arg(long)]
    pub zipf_ranks: Option<u64>,
    /// Every scan asks for exactly this many pairs (default: YCSB's uniform 1 to 100).
    #[arg(long)]
    pub scan_len: Option<u64>,
    /// Seed for workload generation and the simulator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Replay this trace in the run phase instead of generating operations.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// How --trace's operations are dealt to the client tasks: by-key (every operation of a
    /// key to one client, in trace order, so a read never overtakes the insert of its key; a
    /// scan goes with its start key and may still overtake inserts of other keys in its range)
    /// or round-robin (line i to client i mod tasks: operations of one key race on different
    /// clients, and reads can miss keys inserted just before; warns).
    #[arg(long, value_enum, value_name = "HOW", default_value_t = Deal::ByKey)]
    pub deal: Deal,
    /// Load the keys of this YCSB load trace (`INSERT usertable user… [ … ]` lines, or `INSERT
    /// key`) in file order instead of generating --items keys.
    #[arg(long)]
    pub load_trace: Option<PathBuf>,
    /// Load the distinct keys of --trace, in order of first appearance, instead of --items
    /// generated keys (a cache trace such as Twitter's has no load phase of its own). With
    /// --folded, the trace's keys are numbered by first appearance and folded like generated ones.
    #[arg(long)]
    pub trace_warm: bool,
    /// Draw this many run-phase operations ahead (each client its share) and replay them
    /// cyclically for --ops, as the reference harnesses replay a fixed trace for a fixed time
    /// (YCSB workloads without inserts or "latest"; 16 B per operation drawn).
    #[arg(long)]
    pub stream_ops: Option<u64>,
    /// Measure only a middle part of the run phase, as fractions of its operations, e.g.
    /// 0.4:0.8 for the papers' seconds 4 to 8 of 10: it opens when the run's completed
    /// operations reach FROM × --ops and closes at TO × --ops, and every run-phase figure
    /// (throughput, latencies, round trips and bytes, the index's counters) is of what it
    /// holds. With --stream-ops, the window sees a warm cache.
    #[arg(long, value_name = "FROM:TO", value_parser = parse_window)]
    pub window: Option<Window>,
    /// Fill memory by fast-forward (--transport sim): the load phase inserts through the index
    /// with verbs acting at once, outside the fabric model, and is not timed. For paper-scale
    /// runs of a workload; the load throughput is then not measured.
    #[arg(long)]
    pub fast_load: bool,
    /// Load by the index's bulk load instead of by inserts (an index that has one: rolex):
    /// every load key's pair, sorted, loaded in one pass before the compute nodes open the
    /// index, untimed, as the CHIME paper's harness trains its ROLEX once on every loaded key.
    #[arg(long)]
    pub bulk_load: bool,
}

/// The part of the run phase a report measures (`--window`): from the moment the run's
/// completed operations reach `from` × its operations until they reach `to` × them.
///
/// The marks count operations, not seconds, so that one definition holds on virtual and real
/// time alike and costs one shared counter: the client whose completion reaches a mark notes
/// the time and reads the indexes' counters there. Each client's operations that start while
/// the window is open are measured (with their verbs, split between two operations); the
/// throughput is the completions between the marks over the time between them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Window {
    from: f64,
    to: f64,
}

impl Window {
    /// The window from `from` to `to`, fractions of the run phase with `0 ≤ from < to ≤ 1`.
    pub fn new(from: f64, to: f64) -> Result<Window, String> {
        let fraction = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if !fraction(from) || !fraction(to) {
            return Err(format!(
                "{from:?}:{to:?} is not a window of the run phase (fractions from 0 to 1)"
            ));
        }
        if from >= to {
            return Err(format!("{from:?}:{to:?} is empty: FROM must be below TO"));
        }
        Ok(Window { from, to })
    }

    pub fn from(&self) -> f64 {
        self.from
    }

    pub fn to(&self) -> f64 {
        self.to
    }

    /// The completed-operation counts at which the window opens and closes, in a run phase of
    /// `ops` operations.
    pub fn marks(&self, ops: u64) -> (u64, u64) {
        let at = |x: f64| ((x * ops as f64).round() as u64).min(ops);
        (at(self.from), at(self.to))
    }
}

/// `FROM:TO`, fractions of the run phase.
fn parse_window(s: &str) -> Result<Window, String> {
    let (from, to) = s.split_once(':').ok_or_else(|| format!("'{s}' is not FROM:TO"))?;
    let number = |x: &str| {
        x.trim().parse::<f64>().map_err(|_| format!("'{s}' is not FROM:TO (fractions from 0 to 1)"))
    };
    Window::new(number(from)?, number(to)?)
}

/// The keys and values the workload generates.
#[derive(clap::Args, Clone, Debug)]
pub struct Keys {
    /// Key size in bytes (8: integer keys; more: `user…` strings padded to this size).
    #[arg(id = "key_size", long = "key-size", default_value_t = 8)]
    pub size: usize,
    /// Keys exactly as YCSB forms them ("user" + the decimal key hash, no padding, up to 24
    /// bytes), so generated keys match a real YCSB trace's; overrides --key-size.
    #[arg(long)]
    pub ycsb_keys: bool,
    /// YCSB insertorder=ordered (keys 1, 2, 3, …) instead of hashed.
    #[arg(long)]
    pub ordered: bool,
    /// 8-byte keys folded into a space of twice the keys the run reaches (items + ops, rounded
    /// up to a power of two), loaded in pseudo-random order: the Dolphin paper's key format.
    #[arg(long, conflicts_with_all = ["ordered", "ycsb_keys"])]
    pub folded: bool,
    /// Value size in bytes.
    #[arg(long, default_value_t = 8)]
    pub value_size: usize,
}

/// Memory-node crashes and restarts during the run phase.
#[derive(clap::Args, Clone, Debug)]
pub struct Faults {
    /// Crash a memory node this many µs into the run phase (an index that replicates across
    /// memory nodes; --transport sim, or ucx with --spawn-memnodes: a kill -9 of its process).
    #[arg(long, value_name = "US",
          value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    pub mn_crash_us: Option<u64>,
    /// The memory node --mn-crash-us crashes (not node 0, which holds the root table).
    #[arg(long, value_name = "NODE", default_value_t = 1)]
    pub mn_crash_node: u16,
    /// Restart the crashed node empty this many µs after its crash; a monitor client then
    /// rebuilds it while the workload goes on, and the report gives the rebuild's times.
    #[arg(long, value_name = "US",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub mn_restart_us: Option<u64>,
    /// A monitor client rebuilds this memory node after it goes down and comes back during the
    /// run (--transport ucx with memnodes started elsewhere, killed and restarted by hand).
    #[arg(long, value_name = "NODE")]
    pub watch_node: Option<u16>,
}

/// What the run reports besides its figures, and how.
#[derive(clap::Args, Clone, Debug)]
pub struct Output {
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Count the run phase's completions per interval of this many µs (in the JSON report's
    /// `timeline`).
    #[arg(long, value_name = "US",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub timeline_us: Option<u64>,
    /// Record every operation and check the history for linearizability at the end, after
    /// reading every key once more (exit 1 if it is not linearizable; --transport local or ucx,
    /// small runs). With --attach each key starts from a value the check does not know (the
    /// loading process wrote it): some one starting value must explain what the run saw, which
    /// holds only if no other process writes meanwhile.
    #[arg(long)]
    pub check: bool,
    /// Also report the share of reads whose key their compute node read before in the run (for
    /// YCSB C, the hit-ratio ceiling of a per-node cache such as CHIME's hotspot buffer), from
    /// the run's streams drawn again: a few seconds per 10 M operations (workloads without
    /// inserts or "latest"; not with --trace). With --window, of the reads inside it.
    #[arg(long)]
    pub key_reuse: bool,
    /// How progress shows on standard error: the command line draws bars on a terminal and
    /// prints a line every few seconds otherwise.
    #[arg(skip)]
    pub progress: crate::Progress,
}

/// The command line's defaults, parsed from no flags: the one place a default is written.
#[derive(clap::Parser)]
struct NoFlags {
    #[command(flatten)]
    cfg: BenchConfig,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        let parsed = <NoFlags as clap::Parser>::try_parse_from(["bench"]);
        parsed.expect("every flag of a run has a default or is optional").cfg
    }
}

impl BenchConfig {
    /// The command line's defaults with `index` and `workload` named.
    pub fn of(index: &str, workload: &str) -> BenchConfig {
        let mut c = BenchConfig::default();
        (c.index.name, c.workload.name) = (index.into(), workload.into());
        c
    }

    /// Refuses what this run would ignore or could not hold, naming the flags. The workload,
    /// keys and traces are checked when the run is planned ([`crate::check_config`]).
    pub fn validate(&self) -> anyhow::Result<()> {
        self.cluster.validate()?;
        self.faults.validate(&self.cluster)?;
        if self.workload.fast_load && self.cluster.transport != TransportKind::Sim {
            bail!("--fast-load goes with --transport sim");
        }
        if self.workload.bulk_load && self.cluster.attach {
            bail!("--bulk-load loads a new index; --attach runs on one already loaded");
        }
        if self.workload.bulk_load && self.output.check {
            bail!(
                "--bulk-load with --check: a bulk load is not an operation the history can \
                 check; check the index loaded by inserts (drop --bulk-load)"
            );
        }
        if self.output.check && self.cluster.transport == TransportKind::Sim {
            bail!(
                "--check goes with --transport local or ucx (on the simulator, `dmindex check` \
                 checks many seeds)"
            );
        }
        Ok(())
    }

    /// Client tasks in all: compute nodes × clients × coroutines.
    pub fn tasks(&self) -> u64 {
        let c = &self.cluster;
        c.cns as u64 * c.clients as u64 * c.coroutines as u64
    }
}

impl Cluster {
    fn validate(&self) -> anyhow::Result<()> {
        let ucx = self.transport == TransportKind::Ucx;
        let sim = self.transport == TransportKind::Sim;
        if !sim && (self.preset.is_some() || !self.overrides.is_empty()) {
            bail!("--preset and --set describe the simulated fabric: they go with --transport sim");
        }
        if self.spawn_memnodes && (!ucx || !self.memnodes.is_empty() || self.token_file.is_some()) {
            bail!(
                "--spawn-memnodes goes with --transport ucx, instead of --memnode and --token-file"
            );
        }
        if !ucx && (!self.memnodes.is_empty() || self.token_file.is_some() || self.attach) {
            bail!("--memnode, --token-file and --attach go with --transport ucx");
        }
        if ucx && !self.spawn_memnodes && (self.memory_nodes.is_some() || self.mn_gb.is_some()) {
            bail!(
                "--mns and --mn-gb size the memory nodes of local, sim or --spawn-memnodes runs; \
                 with --transport ucx the memnodes are those --memnode lists, with their own sizes"
            );
        }
        limits::count("--mns", self.memory_nodes() as usize, limits::MAX_MNS as usize)?;
        limits::count("--cns", self.cns as usize, limits::MAX_CNS as usize)?;
        let threads = (self.cns as usize).saturating_mul(self.clients);
        if sim {
            // Simulated clients are tasks, not threads.
            let tasks = threads.saturating_mul(self.coroutines);
            let what = "client tasks (--cns × --clients × --coroutines)";
            limits::count(what, tasks, limits::MAX_TASKS)?;
        } else {
            limits::threads_and_tasks(threads, self.coroutines)?;
        }
        limits::node_gib("--mn-gb", self.mn_gb())?;
        Ok(())
    }

    /// Memory nodes of a `local`, `sim` or spawned cluster.
    pub fn memory_nodes(&self) -> u16 {
        self.memory_nodes.unwrap_or(1)
    }

    /// GiB of each memory node of a `local`, `sim` or spawned cluster.
    fn mn_gb(&self) -> u64 {
        self.mn_gb.unwrap_or(DEFAULT_MN_GB)
    }

    /// Bytes of each memory node of a `local`, `sim` or spawned cluster.
    pub fn mn_bytes(&self) -> u64 {
        self.mn_gb().saturating_mul(1 << 30)
    }

    /// The simulator preset of a `sim` run.
    pub fn preset(&self) -> &str {
        self.preset.as_deref().unwrap_or(dmindex_sim::DEFAULT_PRESET)
    }

    /// The CN cache budget in bytes.
    pub fn cache_bytes(&self) -> u64 {
        (self.cache_mb * (1u64 << 20) as f64) as u64
    }

    pub fn ucx_timeout(&self) -> Duration {
        Duration::from_millis(self.ucx_timeout_ms)
    }

    /// The memnodes' token, read from `--token-file` (empty without one).
    pub fn token(&self) -> anyhow::Result<Vec<u8>> {
        match &self.token_file {
            Some(f) => dmindex_ucx::proto::read_token_file(f).map_err(anyhow::Error::msg),
            None => Ok(Vec::new()),
        }
    }
}

impl Faults {
    fn validate(&self, cluster: &Cluster) -> anyhow::Result<()> {
        let (ucx, spawned) = (cluster.transport == TransportKind::Ucx, cluster.spawn_memnodes);
        let killable = cluster.transport == TransportKind::Sim || spawned;
        if (self.mn_crash_us.is_some() || self.mn_restart_us.is_some()) && !killable {
            bail!(
                "--mn-crash-us and --mn-restart-us go with --transport sim, or ucx with \
                 --spawn-memnodes"
            );
        }
        if self.mn_restart_us.is_some() && self.mn_crash_us.is_none() {
            bail!("--mn-restart-us needs --mn-crash-us (only a crashed node restarts)");
        }
        if self.mn_crash_us.is_some() {
            let mns = cluster.memory_nodes();
            if self.mn_crash_node == 0 || self.mn_crash_node >= mns {
                bail!(
                    "--mn-crash-node {}: pick a memory node from 1 to {} (node 0 holds the root \
                     table; --mns is {mns})",
                    self.mn_crash_node,
                    mns.saturating_sub(1),
                );
            }
        }
        if let Some(n) = self.watch_node {
            if !ucx || spawned || self.mn_crash_us.is_some() {
                bail!(
                    "--watch-node goes with --transport ucx and memnodes started elsewhere \
                     (spawned ones are watched when --mn-crash-us crashes one)"
                );
            }
            if n == 0 || n as usize >= cluster.memnodes.len() {
                bail!(
                    "--watch-node {n}: pick a memory node from 1 to {} (node 0 holds the root \
                     table)",
                    cluster.memnodes.len().saturating_sub(1)
                );
            }
        }
        Ok(())
    }

    /// Memory node `node` crashes `crash_us` µs into the run phase, and restarts `restart_us`
    /// µs after that if given.
    pub fn crash(&mut self, node: u16, crash_us: u64, restart_us: Option<u64>) {
        (self.mn_crash_node, self.mn_crash_us, self.mn_restart_us) =
            (node, Some(crash_us), restart_us);
    }

    /// The memory-node crash (and restart) of the run phase, in ns.
    pub fn mn_fault(&self) -> Option<crate::MnFault> {
        self.mn_crash_us.map(|us| crate::MnFault {
            node: self.mn_crash_node,
            crash_ns: us * 1000,
            restart_ns: self.mn_restart_us.map(|r| r * 1000),
        })
    }

    /// Whether a memory node goes down during the run (crashed, or watched for).
    pub fn any(&self) -> bool {
        self.mn_crash_us.is_some() || self.watch_node.is_some()
    }
}

impl Output {
    /// The timeline's interval in ns (0: no timeline).
    pub fn timeline_ns(&self) -> u64 {
        self.timeline_us.unwrap_or(0) * 1000
    }
}

fn parse_cache_mb(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(mb) if mb.is_finite() && (0.0..=(1u64 << 24) as f64).contains(&mb) => Ok(mb),
        _ => Err(format!("'{s}' is not a cache size in MB (0 to {})", 1u64 << 24)),
    }
}

/// `name=value`, trimmed.
pub fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}' is not name=value"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<BenchConfig, clap::Error> {
        let argv = std::iter::once("bench").chain(args.iter().copied());
        <NoFlags as clap::Parser>::try_parse_from(argv).map(|n| n.cfg)
    }

    /// The defaults are the command line's, so a run built in code and one typed with no flags
    /// are the same run.
    #[test]
    fn defaults_are_the_command_lines() {
        let c = BenchConfig::default();
        assert_eq!((c.index.name.as_str(), c.workload.name.as_str()), (DEFAULT_INDEX, "c"));
        assert_eq!(c.cluster.transport, TransportKind::Local);
        assert_eq!((c.cluster.cns, c.cluster.clients, c.cluster.coroutines), (1, 2, 1));
        assert_eq!((c.cluster.memory_nodes(), c.cluster.mn_bytes()), (1, 4 << 30));
        assert_eq!(c.cluster.preset(), dmindex_sim::DEFAULT_PRESET);
        assert_eq!(c.cluster.cache_bytes(), 100 << 20);
        assert_eq!((c.workload.items, c.workload.ops, c.workload.seed), (100_000, None, 1));
        assert_eq!((c.keys.size, c.keys.value_size), (8, 8));
        assert!(c.faults.mn_fault().is_none() && !c.faults.any());
        assert_eq!(c.output.timeline_ns(), 0);
        assert!(c.validate().is_ok());
    }

    /// Every flag lands in its group, in the units the harness reads.
    #[test]
    fn flags_land_in_their_groups() {
        let c = parse(&[
            "--index",
            "sephash",
            "--option",
            "cur=4",
            "--transport",
            "sim",
            "--mns",
            "3",
            "--mn-gb",
            "2",
            "--cns",
            "4",
            "--clients",
            "5",
            "--coroutines",
            "6",
            "--cache-mb",
            "0.5",
            "--workload",
            "a",
            "--items",
            "7",
            "--ops",
            "8",
            "--seed",
            "9",
            "--key-size",
            "16",
            "--value-size",
            "32",
            "--mn-crash-us",
            "10",
            "--mn-crash-node",
            "2",
            "--mn-restart-us",
            "11",
            "--timeline-us",
            "12",
            "--json",
        ])
        .expect("parses");
        assert_eq!(c.index.name, "sephash");
        assert_eq!(c.index.options, vec![("cur".to_string(), "4".to_string())]);
        assert_eq!((c.cluster.memory_nodes(), c.cluster.mn_bytes()), (3, 2 << 30));
        assert_eq!((c.cluster.cns, c.cluster.clients, c.cluster.coroutines), (4, 5, 6));
        assert_eq!(c.tasks(), 120);
        assert_eq!(c.cluster.cache_bytes(), 512 << 10);
        assert_eq!((c.workload.name.as_str(), c.workload.items, c.workload.ops), ("a", 7, Some(8)));
        assert_eq!((c.keys.size, c.keys.value_size, c.workload.seed), (16, 32, 9));
        let f = c.faults.mn_fault().expect("a crash");
        assert_eq!((f.node, f.crash_ns, f.restart_ns), (2, 10_000, Some(11_000)));
        assert_eq!(c.output.timeline_ns(), 12_000);
        assert!(c.output.json);
        assert!(c.validate().is_ok(), "{:?}", c.validate());
    }

    /// What a run would ignore or could not hold is refused by [`BenchConfig::validate`],
    /// naming the flag.
    #[test]
    fn combinations_a_run_would_ignore_are_refused() {
        for (args, msg) in [
            (&["--preset", "stress"][..], "go with --transport sim"),
            (&["--token-file", "t"][..], "go with --transport ucx"),
            (&["--attach"][..], "go with --transport ucx"),
            (&["--spawn-memnodes"][..], "--spawn-memnodes goes with --transport ucx"),
            (&["--transport", "ucx", "--mns", "2"][..], "--mns and --mn-gb size"),
            (&["--mn-crash-us", "5", "--mns", "2"][..], "go with --transport sim"),
            (&["--transport", "sim", "--mn-restart-us", "5"][..], "needs --mn-crash-us"),
            (&["--transport", "sim", "--mn-crash-us", "5"][..], "--mn-crash-node 1: pick"),
            (
                &["--transport", "sim", "--mns", "3", "--mn-crash-node", "0", "--mn-crash-us", "1"]
                    [..],
                "pick a memory node from 1 to 2",
            ),
            (&["--watch-node", "1"][..], "--watch-node goes with --transport ucx"),
            (
                &["--transport", "ucx", "--memnode", "a:1,b:2", "--watch-node", "2"][..],
                "--watch-node 2: pick a memory node from 1 to 1",
            ),
            (&["--fast-load"][..], "--fast-load goes with --transport sim"),
            (&["--transport", "sim", "--check"][..], "--check goes with --transport local"),
            (&["--cns", "0"][..], "--cns 0 is not in"),
            (&["--coroutines", "0"][..], "tasks"),
            (&["--mn-gb", "0"][..], "not a positive size"),
        ] {
            let c = parse(args).expect("parses");
            let e = c.validate().expect_err("refused").to_string();
            assert!(e.contains(msg), "{args:?}: {e}");
        }
        assert!(parse(&["--transport", "tcp"]).is_err());
        assert!(parse(&["--folded", "--ordered"]).is_err());
    }

    /// `--window FROM:TO` takes fractions of the run phase, FROM below TO; its marks are the
    /// completed operations at those fractions.
    #[test]
    fn a_window_is_two_fractions_in_order() {
        let c = parse(&["--window", "0.4:0.8"]).expect("parses");
        let w = c.workload.window.expect("a window");
        assert_eq!((w.from(), w.to()), (0.4, 0.8));
        assert_eq!(w.marks(1000), (400, 800));
        assert_eq!(w.marks(3), (1, 2));
        assert_eq!(Window::new(0.0, 1.0).expect("all of it").marks(7), (0, 7));
        assert!(parse(&[]).expect("parses").workload.window.is_none());
        for (arg, msg) in [
            ("0.8:0.4", "0.8:0.4 is empty: FROM must be below TO"),
            ("0.5:0.5", "FROM must be below TO"),
            ("0.5:1.5", "0.5:1.5 is not a window of the run phase (fractions from 0 to 1)"),
            ("-0.1:0.5", "not a window"),
            ("NaN:0.5", "not a window"),
            ("1e308:2e308", "1e308:inf is not a window"),
            ("0.4", "'0.4' is not FROM:TO"),
            ("a:b", "'a:b' is not FROM:TO"),
        ] {
            let e = parse(&[&format!("--window={arg}")]).expect_err(arg).to_string();
            assert!(e.contains(msg), "{arg}: {e}");
        }
    }
}
