//! # dmindex-bench: load, run, measure
//!
//! [`run`] builds a cluster on the chosen transport (`local`, `sim` or `ucx`), creates the index,
//! opens one handle per compute node, loads `items` keys with every client in parallel, then runs
//! `ops` operations of a YCSB workload (or a replayed trace) on `cns × clients × coroutines`
//! client tasks, and reports a [`BenchReport`].
//!
//! The harness knows no index by name: it is generic over the index type and its scan access
//! ([`dmindex_index::Scans`]), and the catalog instantiates it once per index.

pub mod clock;
pub mod cluster;
pub mod config;
mod counters;
mod drive;
pub mod experiment;
pub mod fault;
pub mod limits;
pub mod plot;
mod progress;
pub mod replot;
mod report;
mod reuse;
pub mod runner;
mod streams;

pub use config::{
    BenchConfig, Cluster, Deal, Faults, IndexChoice, Keys, Output, TransportKind, Window, Workload,
    DEFAULT_INDEX,
};
pub use counters::counter_label;
pub use fault::{Checked, MnFault, Recovery, Timeline};
pub use progress::Progress;
pub use report::{BenchReport, Latency, MeasuredWindow, OpBreakdown};
pub use streams::machine_bytes;

use std::sync::Arc;

use anyhow::{bail, Context};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Services, Transport};
use dmindex_index::{mn_services, IndexConfig, IndexKind, PointIndex, Scans};
use dmindex_sim::SimTransport;
use dmindex_ycsb::workload::load_numbers;
use dmindex_ycsb::{Distribution, KeyFormat, Op, OpKind, Shared, WorkloadSpec};

use runner::{OpSource, TaskEnv};

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
    if cfg.faults.any() && !<I as PointIndex<LocalTransport>>::SURVIVES_MN_CRASH {
        bail!(
            "--mn-crash-us and --watch-node: {} does not replicate across memory nodes",
            cfg.index.name
        );
    }
    if cfg.workload.bulk_load && !<I as PointIndex<LocalTransport>>::BULK_LOAD {
        bail!(
            "--bulk-load: index '{}' has no bulk load (it loads by inserts); drop the flag",
            cfg.index.name
        );
    }
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
                cfg.index.name,
                if cfg.workload.trace.is_some() { "trace" } else { &plan.spec.name }
            );
        }
    }
    match cfg.cluster.transport {
        TransportKind::Local => drive::run_local::<I, S>(cfg, &plan),
        TransportKind::Sim => drive::run_sim::<I, S>(cfg, &plan),
        #[cfg(feature = "ucx")]
        TransportKind::Ucx => drive::ucx::run::<I, S>(cfg, &plan),
        #[cfg(not(feature = "ucx"))]
        TransportKind::Ucx => bail!(dmindex_ucx::NOT_BUILT),
    }
}

/// What [`run`] checks of `cfg` before it builds anything (the flags' combinations, the
/// workload, keys, traces): an error names what is wrong.
pub fn check_config(cfg: &BenchConfig) -> anyhow::Result<()> {
    plan(cfg).map(drop)
}

/// Checks what does not depend on the index and decides what to run.
fn plan(cfg: &BenchConfig) -> anyhow::Result<Plan> {
    cfg.validate()?;
    if let (Some(_), Some(flag)) = (&cfg.workload.trace, streams::draw_ahead_flag(cfg)) {
        bail!("{flag} works on the run's generated streams; a --trace run has none");
    }
    limits::count("--value-size", cfg.keys.value_size, limits::MAX_VALUE_SIZE)?;
    let mut spec = WorkloadSpec::named(&cfg.workload.name).map_err(anyhow::Error::msg)?;
    if let Some(m) = &cfg.workload.mix {
        spec = spec.with_mix(m).map_err(anyhow::Error::msg).context("--mix")?;
    }
    if let Some(d) = &cfg.workload.distribution {
        spec = spec.with_distribution(d).map_err(anyhow::Error::msg).context("--distribution")?;
    }
    if let Some(t) = cfg.workload.zipf_theta {
        if spec.distribution == Distribution::Uniform {
            bail!("--zipf-theta skews a zipfian or latest distribution; this run's is uniform");
        }
        spec = spec.with_theta(t).map_err(anyhow::Error::msg).context("--zipf-theta")?;
    }
    if let Some(n) = cfg.workload.zipf_ranks {
        spec = spec.with_zipf_ranks(n).map_err(anyhow::Error::msg).context("--zipf-ranks")?;
    }
    if let Some(n) = cfg.workload.scan_len {
        spec = spec.with_scan_len(n).map_err(anyhow::Error::msg).context("--scan-len")?;
    }
    let format = if cfg.keys.folded {
        if cfg.keys.ycsb_keys || cfg.keys.ordered || cfg.keys.size != 8 {
            bail!("--folded makes 8-byte integer keys: drop --ycsb-keys, --ordered and --key-size");
        }
        // The keys the run can reach: the loaded ones and the inserts of the run phase.
        let inserts = cfg.workload.ops.unwrap_or(cfg.workload.items) as f64 * spec.insert;
        let reach = cfg.workload.items.saturating_add(inserts.ceil() as u64);
        KeyFormat::folded(KeyFormat::fold_bits_for(reach)).map_err(anyhow::Error::msg)?
    } else if cfg.keys.ycsb_keys {
        KeyFormat::ycsb(cfg.keys.ordered)
    } else {
        KeyFormat::new(cfg.keys.size, cfg.keys.ordered)
            .map_err(anyhow::Error::msg)
            .context("--key-size")?
    };
    if cfg.keys.folded && cfg.workload.load_trace.is_some() {
        bail!("--folded numbers generated and --trace keys; a --load-trace's keys are loaded as given");
    }
    if cfg.workload.trace_warm
        && (cfg.workload.trace.is_none() || cfg.workload.load_trace.is_some())
    {
        bail!("--trace-warm loads the keys of --trace: give --trace, and no --load-trace");
    }
    let (mut format, mut items) = (format, cfg.workload.items);
    let mut load = match &cfg.workload.load_trace {
        Some(p) => Some(Arc::new(dmindex_ycsb::trace::read_load(p, format)?)),
        None => None,
    };
    let trace = match &cfg.workload.trace {
        Some(p) => {
            let mut ops = dmindex_ycsb::trace::read(p, format)?;
            if ops.is_empty() {
                bail!("trace {} holds no operations", p.display());
            }
            let (numbers, keys) = if cfg.workload.trace_warm || cfg.keys.folded {
                dmindex_ycsb::trace::first_seen(&ops)
            } else {
                (Vec::new(), Vec::new())
            };
            if cfg.workload.trace_warm {
                items = keys.len() as u64;
            }
            if cfg.keys.folded {
                // Key n of the trace (by first appearance) is generated key n, folded over a
                // space that holds the trace's keys and the generated load at density ½.
                let bits = KeyFormat::fold_bits_for(items.max(keys.len() as u64));
                format = KeyFormat::folded(bits).map_err(anyhow::Error::msg)?;
                for (op, n) in ops.iter_mut().zip(numbers) {
                    format.key_into(n, &mut op.key);
                }
            } else if cfg.workload.trace_warm {
                load = Some(Arc::new(keys));
            }
            Some(Arc::new(ops))
        }
        None => None,
    };
    let items = load.as_ref().map_or(items, |l| l.len() as u64);
    let ops = cfg.workload.ops.unwrap_or_else(|| trace.as_ref().map_or(items, |t| t.len() as u64));
    if items == 0 && trace.is_none() {
        match &cfg.workload.load_trace {
            Some(p) => bail!("--load-trace {}: the file holds no keys to load", p.display()),
            None => bail!(
                "--items 0: a run needs keys to load and operations on them (give --items 1 or \
                 more; a --trace run may start from an empty index)"
            ),
        }
    }
    if ops == 0 {
        bail!("--ops 0: the run phase needs at least one operation");
    }
    limits::at_most("--items", items, limits::MAX_OPS)?;
    limits::at_most("--ops", ops, limits::MAX_OPS)?;
    if cfg.cluster.transport != TransportKind::Ucx || cfg.cluster.spawn_memnodes {
        // Memory nodes of a size this run sets: the keys and values loaded must fit in them.
        let memory = cfg.cluster.mn_bytes().saturating_mul(cfg.cluster.memory_nodes() as u64);
        // YCSB's own keys vary in length: counted at 8 bytes, the least they take.
        let key = if cfg.keys.ycsb_keys { 8 } else { format.max_key_len() };
        let pair = (key + cfg.keys.value_size) as u64;
        limits::pairs_fit("--items", items, pair, memory, "(--mns × --mn-gb)")?;
    }
    if cfg.workload.stream_ops == Some(0) {
        bail!("--stream-ops must be positive");
    }
    let stream = cfg.workload.stream_ops.map_or(ops, |s| s.min(ops));
    let tasks = cfg.tasks();
    if stream < ops && stream < tasks {
        bail!(
            "--stream-ops {stream} is fewer than the run's {tasks} client tasks: each replays its \
             own share of the stream, so each needs at least one operation"
        );
    }
    if let Some(w) = cfg.workload.window {
        let (open, close) = w.marks(ops);
        if open >= close {
            bail!(
                "--window {}:{} holds no operation of a run phase of {ops}: widen it or run more \
                 --ops",
                w.from(),
                w.to()
            );
        }
    }
    // Dealt by key once, here, for the run's client tasks (`streams::op_source` checks).
    let dealt = match (&trace, cfg.workload.deal) {
        (Some(t), Deal::ByKey) => Some(Arc::new(streams::Dealt::by_key(t, tasks as usize))),
        _ => None,
    };
    let seed = cfg.workload.seed;
    let bulk = cfg.workload.bulk_load;
    let plan = Plan { format, spec, trace, dealt, load, bulk, items, ops, stream, seed };
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
    /// The trace's lines dealt to the client tasks by key (`--deal by-key`; none: round-robin).
    pub(crate) dealt: Option<Arc<streams::Dealt>>,
    /// The keys of a load trace, when one is given.
    pub(crate) load: Option<Arc<Vec<Vec<u8>>>>,
    /// The index is bulk-loaded before the compute nodes open it, and the load phase has
    /// nothing to do (`--bulk-load`).
    pub(crate) bulk: bool,
    /// Items loaded: the load trace's length, or `--items`.
    pub(crate) items: u64,
    pub(crate) ops: u64,
    /// Run-phase operations drawn ahead and replayed cyclically (`ops` unless `--stream-ops`).
    pub(crate) stream: u64,
    /// Seed of the generated operations.
    pub(crate) seed: u64,
}

impl Plan {
    /// Client `i` of `n`'s share of the run phase's operations: even shares, or with a trace
    /// dealt by key in proportion to the lines each client was dealt.
    pub(crate) fn run_share(&self, n: usize, i: usize) -> u64 {
        match &self.dealt {
            Some(d) => d.share(self.ops, i),
            None => share(self.ops, n, i),
        }
    }
}

/// The index's configuration, in root slot `root_slot` ([`root_slot`]).
pub(crate) fn index_config(cfg: &BenchConfig, plan: &Plan, root_slot: u32) -> IndexConfig {
    IndexConfig {
        max_key: plan.format.max_key_len(),
        max_value: cfg.keys.value_size,
        cache_bytes: cfg.cluster.cache_bytes(),
        expected_items: plan.items + plan.ops,
        root_slot,
        extra: cfg.index.options.clone(),
    }
}

/// The root slot of the index this run uses, by its name ([`dmindex_prim::names`]): claimed
/// for a new index, found for `--attach`; the errors say what to do instead.
pub(crate) async fn root_slot<T: Transport>(
    c: &Client<T>,
    cfg: &BenchConfig,
) -> anyhow::Result<u32> {
    let name = cfg.index.root_name();
    match cfg.cluster.attach {
        true => dmindex_prim::names::find(c, name).await.map_err(|e| {
            anyhow::anyhow!("{e}; create it first (the same command without --attach), or name another with --name")
        }),
        false => dmindex_prim::names::claim(c, name).await.map_err(|e| {
            anyhow::anyhow!("{e}; attach to it with --attach, create this one under another --name, or restart the memory nodes")
        }),
    }
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
    if load && plan.bulk {
        // Loaded before the compute nodes opened their handles (`drive::bulk_load`).
    } else if load {
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
        runner::run_client::<T, I, S>(idx, c, env, src, plan.run_share(n, i), window).await
    }
}

/// Chunk size for clients: 16 MiB (as the reference designs take), shrunk so that every client taking a chunk from
/// every memory node uses at most a quarter of the memory (many clients, small nodes).
pub(crate) fn chunk_size(cfg: &BenchConfig) -> u64 {
    let clients = cfg.tasks().max(1);
    let fair = cfg.cluster.mn_bytes() / 4 / clients;
    (16u64 << 20).min(fair.next_power_of_two() / 2).max(64 << 10)
}

/// Splits `total` into `n` nearly equal shares.
fn share(total: u64, n: usize, i: usize) -> u64 {
    total / n as u64 + u64::from((i as u64) < total % n as u64)
}
