//! # dmindex-bench: load, run, measure
//!
//! [`run`] builds a cluster on the chosen transport (`local`, `sim` or `ucx`), creates the index,
//! opens one handle per compute node, loads `items` keys with every client in parallel, then runs
//! `ops` operations of a YCSB workload (or a replayed trace) on `cns × clients × coroutines`
//! client tasks, and reports a [`BenchReport`].
//!
//! The harness knows no index by name: it is generic over the index type and its scan access
//! ([`dmindex_index::Scans`]), and the catalog instantiates it once per index.

pub mod cluster;
mod drive;
pub mod experiment;
pub mod fault;
pub mod plot;
mod report;
mod reuse;
pub mod runner;
mod streams;

pub use fault::{Checked, MnFault, Recovery, Timeline};
pub use report::{BenchReport, Latency, OpBreakdown};
pub use streams::machine_bytes;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Services, Transport};
use dmindex_index::{mn_services, IndexConfig, IndexKind, PointIndex, Scans};
use dmindex_sim::SimTransport;
use dmindex_ycsb::workload::load_numbers;
use dmindex_ycsb::{Distribution, KeyFormat, Op, OpKind, Shared, WorkloadSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use runner::{OpSource, TaskEnv};

/// Which transport to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    Local,
    Sim,
    /// Memnodes over OpenUCX (needs the `ucx` feature).
    Ucx,
}

/// Everything `dmindex bench` takes.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub index: String,
    pub transport: TransportKind,
    pub preset: String,
    pub overrides: Vec<String>,
    pub memory_nodes: u16,
    pub mn_bytes: u64,
    pub cns: u16,
    pub clients: usize,
    pub coroutines: usize,
    pub items: u64,
    pub ops: Option<u64>,
    pub workload: String,
    /// Proportions overriding the workload's, e.g. `read=0.5,delete=0.5`.
    pub mix: Option<String>,
    /// Request distribution overriding the workload's (`zipfian`, `uniform`, `latest`).
    pub distribution: Option<String>,
    /// Skew θ of the zipfian and latest distributions (YCSB: 0.99).
    pub zipf_theta: Option<f64>,
    /// Every scan asks for exactly this many pairs (YCSB: uniform in 1..=100).
    pub scan_len: Option<u64>,
    pub trace: Option<PathBuf>,
    /// Load the keys of this YCSB load trace (in file order) instead of generating `items`.
    pub load_trace: Option<PathBuf>,
    /// Load the distinct keys of `trace` (in order of first appearance) instead of generating
    /// `items`, so the replay finds what it reads (a cache trace has no load phase of its own).
    pub trace_warm: bool,
    pub key_size: usize,
    /// Keys exactly as YCSB forms them: "user" + the decimal key hash, no padding (so generated
    /// keys and a real trace's keys are the same bytes); `key_size` is then ignored.
    pub ycsb_keys: bool,
    pub value_size: usize,
    pub ordered_keys: bool,
    /// Keys folded into a space twice the keys a run can reach, loaded in pseudo-random order
    /// ([`KeyFormat::folded`], the Dolphin paper's key format); 8-byte keys only.
    pub folded_keys: bool,
    /// CN cache budget, MB (fractions for scaled-down runs).
    pub cache_mb: f64,
    pub seed: u64,
    pub index_options: Vec<(String, String)>,
    pub progress: bool,
    /// Memnodes to connect to (`ucx`), in memory-node id order.
    pub memnodes: Vec<String>,
    /// The memnodes' token (`ucx`).
    pub token: Vec<u8>,
    /// Open the index another process created and loaded (`ucx`): no create, no load phase.
    pub attach: bool,
    /// Fill memory by fast-forward (`sim`): the load phase runs through the index's own inserts
    /// with verbs acting at once, outside the model, and is not timed.
    pub fast_load: bool,
    /// A memory node crashes (and may restart to be rebuilt) during the run phase (`sim`, or
    /// `ucx` with spawned memnodes: a `kill -9` of its process and a new one on its address).
    pub mn_fault: Option<MnFault>,
    /// Count the run phase's completions per interval of this many ns (0: no timeline).
    pub timeline_ns: u64,
    /// Start the memnodes as processes of this machine (`ucx`; `memory_nodes` of `mn_bytes`).
    pub spawn: Option<PathBuf>,
    /// A monitor client rebuilds this memory node once it has gone down and come back
    /// (`ucx` with memnodes started elsewhere; spawned ones are watched when they crash).
    pub watch_node: Option<u16>,
    /// How long a UCX call or verb may take before its memnode counts as down.
    pub ucx_timeout: std::time::Duration,
    /// Record every operation (load and run) and check the history for linearizability after
    /// reading every key it touched once more (`local` and `ucx`; small runs).
    pub check: bool,
    /// Also report the run's key reuse per compute node (drawn again from its streams): the
    /// ceiling of a per-node cache's hit ratio ([`reuse`]).
    pub key_reuse: bool,
    /// Draw this many run-phase operations ahead and replay them cyclically for `ops`, as the
    /// reference harnesses replay a trace ([`streams`]).
    pub stream_ops: Option<u64>,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            index: String::new(),
            transport: TransportKind::Local,
            preset: dmindex_sim::DEFAULT_PRESET.into(),
            overrides: Vec::new(),
            memory_nodes: 1,
            mn_bytes: 4 << 30,
            cns: 1,
            clients: 2,
            coroutines: 1,
            items: 100_000,
            ops: None,
            workload: "c".into(),
            mix: None,
            distribution: None,
            zipf_theta: None,
            scan_len: None,
            trace: None,
            load_trace: None,
            trace_warm: false,
            key_size: 8,
            ycsb_keys: false,
            value_size: 8,
            ordered_keys: false,
            folded_keys: false,
            cache_mb: 100.0,
            seed: 1,
            index_options: Vec::new(),
            progress: false,
            memnodes: Vec::new(),
            token: Vec::new(),
            attach: false,
            fast_load: false,
            mn_fault: None,
            timeline_ns: 0,
            spawn: None,
            watch_node: None,
            ucx_timeout: std::time::Duration::from_secs(10),
            check: false,
            key_reuse: false,
            stream_ops: None,
        }
    }
}

/// An index the harness can run on every transport this build has.
#[cfg(not(feature = "ucx"))]
pub trait Runnable: PointIndex<LocalTransport> + PointIndex<SimTransport> + Sync {}
#[cfg(not(feature = "ucx"))]
impl<I: PointIndex<LocalTransport> + PointIndex<SimTransport> + Sync> Runnable for I {}

/// An index the harness can run on every transport this build has.
#[cfg(feature = "ucx")]
pub trait Runnable:
    PointIndex<LocalTransport> + PointIndex<SimTransport> + PointIndex<UcxTransport> + Sync
{
}
#[cfg(feature = "ucx")]
impl<I> Runnable for I where
    I: PointIndex<LocalTransport> + PointIndex<SimTransport> + PointIndex<UcxTransport> + Sync
{
}

/// Scan access to `I` on every transport this build has.
#[cfg(not(feature = "ucx"))]
pub trait RunnableScans<I: Runnable>: Scans<LocalTransport, I> + Scans<SimTransport, I> {}
#[cfg(not(feature = "ucx"))]
impl<I: Runnable, S: Scans<LocalTransport, I> + Scans<SimTransport, I>> RunnableScans<I> for S {}

/// Scan access to `I` on every transport this build has.
#[cfg(feature = "ucx")]
pub trait RunnableScans<I: Runnable>:
    Scans<LocalTransport, I> + Scans<SimTransport, I> + Scans<UcxTransport, I>
{
}
#[cfg(feature = "ucx")]
impl<I: Runnable, S> RunnableScans<I> for S where
    S: Scans<LocalTransport, I> + Scans<SimTransport, I> + Scans<UcxTransport, I>
{
}

#[cfg(feature = "ucx")]
use dmindex_ucx::transport::UcxTransport;

/// The kind of index `S` gives scan access to.
fn kind_of<I: Runnable, S: RunnableScans<I>>() -> IndexKind {
    <S as Scans<LocalTransport, I>>::KIND
}

/// Validates the configuration and runs the benchmark on index `I` (scans through `S`).
pub fn run<I: Runnable, S: RunnableScans<I>>(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let plan = plan(cfg)?;
    if kind_of::<I, S>() == IndexKind::Point {
        let scans = match &plan.trace {
            Some(t) => t.iter().any(|op| op.kind == OpKind::Scan),
            None => plan.spec.scan > 0.0,
        };
        if scans {
            bail!(
                "index '{}' is a point index (no key order), so it cannot run scans: workload \
                 '{}' has them; pick a workload without scans (load, a, b, c, d, f) or an \
                 ordered index",
                cfg.index,
                if cfg.trace.is_some() { "trace" } else { &plan.spec.name }
            );
        }
    }
    match cfg.transport {
        TransportKind::Local => drive::run_local::<I, S>(cfg, &plan),
        TransportKind::Sim => drive::run_sim::<I, S>(cfg, &plan),
        #[cfg(feature = "ucx")]
        TransportKind::Ucx => drive::ucx::run::<I, S>(cfg, &plan),
        #[cfg(not(feature = "ucx"))]
        TransportKind::Ucx => bail!(dmindex_ucx::NOT_BUILT),
    }
}

/// What [`run`] checks of `cfg` before it builds anything (the workload, keys, traces): an
/// error names what is wrong.
pub fn check_config(cfg: &BenchConfig) -> anyhow::Result<()> {
    plan(cfg).map(drop)
}

/// Checks what does not depend on the index and decides what to run.
fn plan(cfg: &BenchConfig) -> anyhow::Result<Plan> {
    if cfg.cns == 0 || cfg.clients == 0 || cfg.coroutines == 0 {
        bail!("--cns, --clients and --coroutines must be positive");
    }
    if cfg.memory_nodes == 0 {
        bail!("--mns must be positive");
    }
    if let (Some(_), Some(flag)) = (&cfg.trace, streams::draw_ahead_flag(cfg)) {
        bail!("{flag} works on the run's generated streams; a --trace run has none");
    }
    if cfg.value_size == 0 || cfg.value_size > 4096 {
        bail!("--value-size must be in 1..=4096, got {}", cfg.value_size);
    }
    let mut spec = WorkloadSpec::named(&cfg.workload).map_err(anyhow::Error::msg)?;
    if let Some(m) = &cfg.mix {
        spec = spec.with_mix(m).map_err(anyhow::Error::msg).context("--mix")?;
    }
    if let Some(d) = &cfg.distribution {
        spec = spec.with_distribution(d).map_err(anyhow::Error::msg).context("--distribution")?;
    }
    if let Some(t) = cfg.zipf_theta {
        if spec.distribution == Distribution::Uniform {
            bail!("--zipf-theta skews a zipfian or latest distribution; this run's is uniform");
        }
        spec = spec.with_theta(t).map_err(anyhow::Error::msg).context("--zipf-theta")?;
    }
    if let Some(n) = cfg.scan_len {
        spec = spec.with_scan_len(n).map_err(anyhow::Error::msg).context("--scan-len")?;
    }
    let format = if cfg.folded_keys {
        if cfg.ycsb_keys || cfg.ordered_keys || cfg.key_size != 8 {
            bail!("--folded makes 8-byte integer keys: drop --ycsb-keys, --ordered and --key-size");
        }
        // The keys the run can reach: the loaded ones and the inserts of the run phase.
        let inserts = cfg.ops.unwrap_or(cfg.items) as f64 * spec.insert;
        let reach = cfg.items.saturating_add(inserts.ceil() as u64);
        KeyFormat::folded(KeyFormat::fold_bits_for(reach)).map_err(anyhow::Error::msg)?
    } else if cfg.ycsb_keys {
        KeyFormat::ycsb(cfg.ordered_keys)
    } else {
        KeyFormat::new(cfg.key_size, cfg.ordered_keys)
            .map_err(anyhow::Error::msg)
            .context("--key-size")?
    };
    if cfg.folded_keys && cfg.load_trace.is_some() {
        bail!("--folded numbers generated and --trace keys; a --load-trace's keys are loaded as given");
    }
    if cfg.trace_warm && (cfg.trace.is_none() || cfg.load_trace.is_some()) {
        bail!("--trace-warm loads the keys of --trace: give --trace, and no --load-trace");
    }
    let (mut format, mut items) = (format, cfg.items);
    let mut load = match &cfg.load_trace {
        Some(p) => Some(Arc::new(dmindex_ycsb::trace::read_load(p, format)?)),
        None => None,
    };
    let trace = match &cfg.trace {
        Some(p) => {
            let mut ops = dmindex_ycsb::trace::read(p, format)?;
            if ops.is_empty() {
                bail!("trace {} holds no operations", p.display());
            }
            let (numbers, keys) = if cfg.trace_warm || cfg.folded_keys {
                dmindex_ycsb::trace::first_seen(&ops)
            } else {
                (Vec::new(), Vec::new())
            };
            if cfg.trace_warm {
                items = keys.len() as u64;
            }
            if cfg.folded_keys {
                // Key n of the trace (by first appearance) is generated key n, folded over a
                // space that holds the trace's keys and the generated load at density ½.
                let bits = KeyFormat::fold_bits_for(items.max(keys.len() as u64));
                format = KeyFormat::folded(bits).map_err(anyhow::Error::msg)?;
                for (op, n) in ops.iter_mut().zip(numbers) {
                    format.key_into(n, &mut op.key);
                }
            } else if cfg.trace_warm {
                load = Some(Arc::new(keys));
            }
            Some(Arc::new(ops))
        }
        None => None,
    };
    let items = load.as_ref().map_or(items, |l| l.len() as u64);
    let ops = cfg.ops.unwrap_or_else(|| trace.as_ref().map_or(items, |t| t.len() as u64));
    if cfg.stream_ops == Some(0) {
        bail!("--stream-ops must be positive");
    }
    let stream = cfg.stream_ops.map_or(ops, |s| s.min(ops));
    let tasks = cfg.cns as u64 * cfg.clients as u64 * cfg.coroutines as u64;
    if stream < ops && stream < tasks {
        bail!(
            "--stream-ops {stream} is fewer than the run's {tasks} client tasks: each replays its \
             own share of the stream, so each needs at least one operation"
        );
    }
    let plan = Plan { format, spec, trace, load, items, ops, stream, seed: cfg.seed };
    streams::check_planned(cfg, &plan, machine_bytes())?;
    Ok(plan)
}

/// The built-in memory-node services plus index `I`'s, on `cores` MN cores.
pub(crate) fn services<T: Transport, I: PointIndex<T>>(cores: usize) -> anyhow::Result<Services> {
    Ok(mn_services(cores, I::SERVICES)?)
}

/// What to run, decided once.
pub(crate) struct Plan {
    pub(crate) format: KeyFormat,
    pub(crate) spec: WorkloadSpec,
    pub(crate) trace: Option<Arc<Vec<Op>>>,
    /// The keys of a load trace, when one is given.
    pub(crate) load: Option<Arc<Vec<Vec<u8>>>>,
    /// Items loaded: the load trace's length, or `--items`.
    pub(crate) items: u64,
    pub(crate) ops: u64,
    /// Run-phase operations drawn ahead and replayed cyclically (`ops` unless `--stream-ops`).
    pub(crate) stream: u64,
    /// Seed of the generated operations.
    pub(crate) seed: u64,
}

pub(crate) fn index_config(cfg: &BenchConfig, plan: &Plan) -> IndexConfig {
    IndexConfig {
        max_key: plan.format.max_key_len(),
        max_value: cfg.value_size,
        cache_bytes: (cfg.cache_mb * (1u64 << 20) as f64) as u64,
        expected_items: plan.items + plan.ops,
        root_slot: 0,
        extra: cfg.index_options.clone(),
    }
}

pub(crate) fn progress_bar(cfg: &BenchConfig, len: u64, phase: &str) -> ProgressBar {
    if !cfg.progress {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{prefix:>5} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix(phase.to_string());
    pb
}

/// Client `i` of `n` in the load phase (its share of the keys) or the run phase (its share of
/// the operations, from `source` if given, else generated as they go).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn client_phase<T: Transport, I: PointIndex<T>, S: Scans<T, I>>(
    plan: &Plan,
    shared: &Arc<Shared>,
    idx: &I,
    c: &Client<T>,
    env: &TaskEnv<'_>,
    (i, n): (usize, usize),
    load: bool,
    source: Option<OpSource>,
    window: Option<&runner::BusyWindow>,
) {
    if load {
        match &plan.load {
            Some(keys) => {
                let mut keys = keys.iter().skip(i).step_by(n);
                let next = |buf: &mut Vec<u8>| {
                    keys.next()
                        .map(|k| {
                            buf.clear();
                            buf.extend_from_slice(k);
                        })
                        .is_some()
                };
                runner::load_client(idx, c, env, next, window).await
            }
            None => {
                let mut numbers = load_numbers(plan.items, i as u64, n as u64);
                let next = |buf: &mut Vec<u8>| {
                    numbers.next().map(|k| plan.format.key_into(k, buf)).is_some()
                };
                runner::load_client(idx, c, env, next, window).await
            }
        }
    } else {
        let src = source.unwrap_or_else(|| streams::op_source(plan, shared, i, n));
        runner::run_client::<T, I, S>(idx, c, env, src, share(plan.ops, n, i), window).await
    }
}

/// Chunk size for clients: 16 MiB (as the reference designs take), shrunk so that every client taking a chunk from
/// every memory node uses at most a quarter of the memory (many clients, small nodes).
pub(crate) fn chunk_size(cfg: &BenchConfig) -> u64 {
    let clients = (cfg.cns as u64 * cfg.clients as u64 * cfg.coroutines as u64).max(1);
    let fair = cfg.mn_bytes / 4 / clients;
    (16u64 << 20).min(fair.next_power_of_two() / 2).max(64 << 10)
}

/// Splits `total` into `n` nearly equal shares.
fn share(total: u64, n: usize, i: usize) -> u64 {
    total / n as u64 + u64::from((i as u64) < total % n as u64)
}
