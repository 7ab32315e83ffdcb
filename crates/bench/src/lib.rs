//! # dmindex-bench: load, run, measure
//!
//! [`run`] builds a cluster on the chosen transport (`local`, `sim` or `ucx`), creates the index,
//! opens one handle per compute node, loads `items` keys with every client in parallel, then runs
//! `ops` operations of a YCSB workload (or a replayed trace) on `cns × clients × coroutines`
//! client tasks, and reports a [`BenchReport`].
//!
//! The harness knows no index by name: it is generic over the index type and its scan access
//! ([`dmindex_index::Scans`]), and the catalog instantiates it once per index.

pub mod experiment;
pub mod plot;
pub mod runner;

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use dmindex_fabric::exec::{run_on_threads, run_tasks};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric, Services, Transport, VerbCounts};
use dmindex_index::recorded::Recorder;
use dmindex_index::{install_services, IndexConfig, IndexKind, PointIndex, Scans};
use dmindex_sim::{NetParams, Sim, SimConfig, SimTransport, Task};
use dmindex_ycsb::workload::load_keys;
use dmindex_ycsb::{ClientStream, KeyFormat, Op, OpKind, Shared, WorkloadSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use runner::{ClientMetrics, OpSource, TaskEnv};

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
    pub trace: Option<PathBuf>,
    /// Load the keys of this YCSB load trace (in file order) instead of generating `items`.
    pub load_trace: Option<PathBuf>,
    pub key_size: usize,
    /// Keys exactly as YCSB forms them: "user" + the decimal key hash, no padding (so generated
    /// keys and a real trace's keys are the same bytes); `key_size` is then ignored.
    pub ycsb_keys: bool,
    pub value_size: usize,
    pub ordered_keys: bool,
    pub cache_mb: u64,
    pub seed: u64,
    pub index_options: Vec<(String, String)>,
    pub progress: bool,
    /// Memnodes to connect to (`ucx`), in memory-node id order.
    pub memnodes: Vec<String>,
    /// The memnodes' token (`ucx`).
    pub token: Vec<u8>,
    /// Open the index another process created and loaded (`ucx`): no create, no load phase.
    pub attach: bool,
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
            trace: None,
            load_trace: None,
            key_size: 8,
            ycsb_keys: false,
            value_size: 8,
            ordered_keys: false,
            cache_mb: 100,
            seed: 1,
            index_options: Vec::new(),
            progress: false,
            memnodes: Vec::new(),
            token: Vec::new(),
            attach: false,
        }
    }
}

/// Latency percentiles in µs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

/// Per-operation-kind figures of the run phase.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OpBreakdown {
    pub op: String,
    pub count: u64,
    /// Of `count`, operations that found their key: searches that hit, updates and deletes of
    /// present keys, read-modify-writes of present keys, scans that returned pairs (`null` for
    /// inserts, which are upserts).
    pub found: Option<u64>,
    /// Of `count`, operations that did not.
    pub not_found: Option<u64>,
    pub latency_us: Latency,
    pub round_trips_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
}

/// What one `bench` run measured. Field names are stable: scripts depend on them.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BenchReport {
    pub index: String,
    pub transport: TransportKind,
    pub preset: Option<String>,
    pub workload: String,
    pub items: u64,
    pub ops: u64,
    pub cns: u16,
    pub clients: usize,
    pub coroutines: usize,
    pub seed: u64,
    /// Load phase inserts per second (real time on local, virtual on sim).
    pub load_throughput_ops: f64,
    /// Run phase operations per second (real time on local, virtual on sim).
    pub throughput_ops: f64,
    pub latency_us: Latency,
    pub round_trips_per_op: f64,
    pub verbs_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
    pub cas_failures_per_op: f64,
    pub retries: u64,
    /// CN-side cache bytes in use, averaged over compute nodes.
    pub cache_bytes: u64,
    /// Bytes allocated on memory nodes.
    pub remote_bytes: u64,
    pub load_factor: Option<f64>,
    /// Index-specific counters summed over compute nodes (e.g. leaf splits).
    pub index_stats: std::collections::BTreeMap<String, u64>,
    pub per_op: Vec<OpBreakdown>,
    /// Seconds of real time the run phase took.
    pub run_seconds: f64,
}

impl BenchReport {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "index {} on {}{} | workload {} | {} items, {} ops | {} CN × {} clients × {} coroutines\n",
            self.index,
            serde_json::to_value(self.transport).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            self.preset.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(),
            self.workload,
            self.items,
            self.ops,
            self.cns,
            self.clients,
            self.coroutines
        );
        s += &format!(
            "load {:.3} Mops/s | run {:.3} Mops/s | latency p50 {:.2} us p99 {:.2} us p999 {:.2} us\n",
            self.load_throughput_ops / 1e6,
            self.throughput_ops / 1e6,
            self.latency_us.p50,
            self.latency_us.p99,
            self.latency_us.p999
        );
        s += &format!(
            "per op: {:.2} round trips, {:.2} verbs, {:.1} B read, {:.1} B written, {:.3} CAS failures | retries {}\n",
            self.round_trips_per_op,
            self.verbs_per_op,
            self.bytes_read_per_op,
            self.bytes_written_per_op,
            self.cas_failures_per_op,
            self.retries
        );
        s += &format!(
            "cache {:.2} MB per CN | remote {:.2} MB{}\n",
            self.cache_bytes as f64 / 1e6,
            self.remote_bytes as f64 / 1e6,
            self.load_factor.map(|l| format!(" | load factor {:.3}", l)).unwrap_or_default()
        );
        if !self.index_stats.is_empty() {
            let parts: Vec<String> =
                self.index_stats.iter().map(|(k, v)| format!("{k} {v}")).collect();
            s += &format!("index: {}\n", parts.join(", "));
        }
        if let Some(r) = self.per_op.iter().find(|o| o.op == "read" && o.not_found == Some(o.count))
        {
            s += &format!(
                "warning: all {} reads found no key: do the loaded keys match the workload's or \
                 trace's (key size, --ordered, --ycsb-keys, --load-trace)?\n",
                r.count
            );
        }
        s += &format!(
            "{:<8} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10} {:>10}\n",
            "op", "count", "not found", "p50 us", "p99 us", "RT/op", "B read", "B written"
        );
        for o in &self.per_op {
            s += &format!(
                "{:<8} {:>10} {:>10} {:>9.2} {:>9.2} {:>8.2} {:>10.1} {:>10.1}\n",
                o.op,
                o.count,
                o.not_found.map_or("-".to_string(), |n| n.to_string()),
                o.latency_us.p50,
                o.latency_us.p99,
                o.round_trips_per_op,
                o.bytes_read_per_op,
                o.bytes_written_per_op
            );
        }
        s
    }
}

fn latency(h: &hdrhistogram::Histogram<u64>) -> Latency {
    let q = |p| if h.is_empty() { 0.0 } else { h.value_at_quantile(p) as f64 / 1e3 };
    Latency { p50: q(0.5), p99: q(0.99), p999: q(0.999) }
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
        TransportKind::Local => run_local::<I, S>(cfg, &plan),
        TransportKind::Sim => run_sim::<I, S>(cfg, &plan),
        #[cfg(feature = "ucx")]
        TransportKind::Ucx => ucx::run::<I, S>(cfg, &plan),
        #[cfg(not(feature = "ucx"))]
        TransportKind::Ucx => bail!(dmindex_ucx::NOT_BUILT),
    }
}

/// Checks what does not depend on the index and decides what to run.
fn plan(cfg: &BenchConfig) -> anyhow::Result<Plan> {
    if cfg.cns == 0 || cfg.clients == 0 || cfg.coroutines == 0 {
        bail!("--cns, --clients and --coroutines must be positive");
    }
    if cfg.memory_nodes == 0 {
        bail!("--mns must be positive");
    }
    if cfg.value_size == 0 || cfg.value_size > 4096 {
        bail!("--value-size must be in 1..=4096, got {}", cfg.value_size);
    }
    let format = if cfg.ycsb_keys {
        KeyFormat::ycsb(cfg.ordered_keys)
    } else {
        KeyFormat::new(cfg.key_size, cfg.ordered_keys)
            .map_err(anyhow::Error::msg)
            .context("--key-size")?
    };
    let mut spec = WorkloadSpec::named(&cfg.workload).map_err(anyhow::Error::msg)?;
    if let Some(m) = &cfg.mix {
        spec = spec.with_mix(m).map_err(anyhow::Error::msg).context("--mix")?;
    }
    let trace = match &cfg.trace {
        Some(p) => {
            let ops = dmindex_ycsb::trace::read(p, format)?;
            if ops.is_empty() {
                bail!("trace {} holds no operations", p.display());
            }
            Some(Arc::new(ops))
        }
        None => None,
    };
    let load = match &cfg.load_trace {
        Some(p) => Some(Arc::new(dmindex_ycsb::trace::read_load(p, format)?)),
        None => None,
    };
    let items = load.as_ref().map_or(cfg.items, |l| l.len() as u64);
    let ops = cfg.ops.unwrap_or_else(|| trace.as_ref().map_or(items, |t| t.len() as u64));
    Ok(Plan { format, spec, trace, load, items, ops })
}

/// The built-in memory-node services plus index `I`'s, on `cores` MN cores.
fn services<T: Transport, I: PointIndex<T>>(cores: usize) -> anyhow::Result<Services> {
    let mut s = Services::new(cores);
    install_services(&mut s, I::SERVICES)?;
    Ok(s)
}

/// What to run, decided once.
struct Plan {
    format: KeyFormat,
    spec: WorkloadSpec,
    trace: Option<Arc<Vec<Op>>>,
    /// The keys of a load trace, when one is given.
    load: Option<Arc<Vec<Vec<u8>>>>,
    /// Items loaded: the load trace's length, or `--items`.
    items: u64,
    ops: u64,
}

fn index_config(cfg: &BenchConfig, plan: &Plan) -> IndexConfig {
    IndexConfig {
        max_key: plan.format.max_key_len(),
        max_value: cfg.value_size,
        cache_bytes: cfg.cache_mb << 20,
        expected_items: plan.items + plan.ops,
        root_slot: 0,
        extra: cfg.index_options.clone(),
    }
}

fn progress_bar(cfg: &BenchConfig, len: u64, phase: &str) -> ProgressBar {
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

fn op_source(
    plan: &Plan,
    shared: &Arc<Shared>,
    seed: u64,
    client: usize,
    clients: usize,
) -> OpSource {
    match &plan.trace {
        Some(t) => OpSource::Trace {
            ops: Arc::clone(t),
            index: client % t.len().max(1),
            clients: clients.min(t.len()),
            next: 0,
        },
        None => OpSource::Generated(Box::new(ClientStream::new(
            Arc::clone(shared),
            seed,
            client as u64,
        ))),
    }
}

/// Client `i` of `n` in the load phase (its share of the keys) or the run phase (its share of
/// the operations).
#[allow(clippy::too_many_arguments)]
async fn client_phase<T: Transport, I: PointIndex<T>, S: Scans<T, I>>(
    cfg: &BenchConfig,
    plan: &Plan,
    shared: &Arc<Shared>,
    idx: &I,
    c: &Client<T>,
    env: &TaskEnv<'_>,
    (i, n): (usize, usize),
    load: bool,
) -> ClientMetrics {
    if load {
        match &plan.load {
            Some(keys) => {
                let mine = keys.iter().skip(i).step_by(n).cloned();
                runner::load_client(idx, c, env, mine).await
            }
            None => {
                let keys = load_keys(plan.format, plan.items, i as u64, n as u64);
                runner::load_client(idx, c, env, keys).await
            }
        }
    } else {
        let src = op_source(plan, shared, cfg.seed, i, n);
        runner::run_client::<T, I, S>(idx, c, env, src, share(plan.ops, n, i)).await
    }
}

/// Chunk size for clients: 16 MiB (as the reference designs take), shrunk so that every client taking a chunk from
/// every memory node uses at most a quarter of the memory (many clients, small nodes).
fn chunk_size(cfg: &BenchConfig) -> u64 {
    let clients = (cfg.cns as u64 * cfg.clients as u64 * cfg.coroutines as u64).max(1);
    let fair = cfg.mn_bytes / 4 / clients;
    (16u64 << 20).min(fair.next_power_of_two() / 2).max(64 << 10)
}

/// Splits `total` into `n` nearly equal shares.
fn share(total: u64, n: usize, i: usize) -> u64 {
    total / n as u64 + u64::from((i as u64) < total % n as u64)
}

struct Phase {
    metrics: ClientMetrics,
    ns: u64,
    counts: VerbCounts,
}

/// What a finished run hands to [`summarise`].
struct Finished {
    load: Phase,
    run: Phase,
    run_seconds: f64,
    remote_bytes: u64,
    load_factor: Option<f64>,
    preset: Option<String>,
}

fn summarise<T: Transport, I: PointIndex<T>>(
    cfg: &BenchConfig,
    plan: &Plan,
    handles: &[I],
    f: Finished,
) -> anyhow::Result<BenchReport> {
    let Finished { load, run, run_seconds, remote_bytes, load_factor, preset } = f;
    if let Some(e) = load.metrics.first_error.as_ref().or(run.metrics.first_error.as_ref()) {
        bail!("an operation failed: {e}");
    }
    let m = &run.metrics;
    let ops: u64 = m.counts.iter().sum();
    let mut all = runner::new_histogram();
    for h in &m.latency {
        all.add(h).expect("same bounds");
    }
    let per = |x: u64| if ops == 0 { 0.0 } else { x as f64 / ops as f64 };
    let c = run.counts;
    let per_op = OpKind::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| m.counts[*i] > 0)
        .map(|(i, k)| {
            let n = m.counts[i] as f64;
            let missed = (*k != OpKind::Insert).then_some(m.not_found[i]);
            OpBreakdown {
                op: k.name().into(),
                count: m.counts[i],
                found: missed.map(|x| m.counts[i] - x),
                not_found: missed,
                latency_us: latency(&m.latency[i]),
                round_trips_per_op: m.verbs[i].round_trips as f64 / n,
                bytes_read_per_op: m.verbs[i].bytes_read as f64 / n,
                bytes_written_per_op: m.verbs[i].bytes_written as f64 / n,
            }
        })
        .collect();
    let load_ops: u64 = load.metrics.counts.iter().sum();
    let stats: Vec<_> = handles.iter().map(|h| h.stats()).collect();
    Ok(BenchReport {
        index: cfg.index.clone(),
        transport: cfg.transport,
        preset,
        workload: if cfg.trace.is_some() { "trace".into() } else { plan.spec.name.clone() },
        items: plan.items,
        ops,
        cns: cfg.cns,
        clients: cfg.clients,
        coroutines: cfg.coroutines,
        seed: cfg.seed,
        load_throughput_ops: if load.ns == 0 {
            0.0
        } else {
            load_ops as f64 * 1e9 / load.ns as f64
        },
        throughput_ops: if run.ns == 0 { 0.0 } else { ops as f64 * 1e9 / run.ns as f64 },
        latency_us: latency(&all),
        round_trips_per_op: per(c.round_trips),
        verbs_per_op: per(c.verbs()),
        bytes_read_per_op: per(c.bytes_read),
        bytes_written_per_op: per(c.bytes_written),
        cas_failures_per_op: per(c.cas_failures),
        retries: stats.iter().map(|s| s.retries).sum(),
        cache_bytes: stats.iter().map(|s| s.cache_bytes).sum::<u64>() / handles.len().max(1) as u64,
        remote_bytes,
        load_factor,
        index_stats: stats.iter().flat_map(|s| s.extra.iter()).fold(
            std::collections::BTreeMap::new(),
            |mut m, (k, v)| {
                *m.entry(k.to_string()).or_insert(0) += v;
                m
            },
        ),
        per_op,
        run_seconds,
    })
}

fn run_sim<I: Runnable, S: RunnableScans<I>>(
    cfg: &BenchConfig,
    plan: &Plan,
) -> anyhow::Result<BenchReport> {
    let mut net = NetParams::preset(&cfg.preset).map_err(anyhow::Error::msg)?;
    for o in &cfg.overrides {
        net.set(o).map_err(anyhow::Error::msg)?;
    }
    let services = services::<SimTransport, I>(net.mn_cores)?;
    let sim = Sim::with_services(
        SimConfig {
            memory_nodes: cfg.memory_nodes,
            node_size: cfg.mn_bytes,
            chunk_size: chunk_size(cfg),
            ..SimConfig::new(cfg.seed, net)
        },
        services,
    )
    .map_err(anyhow::Error::msg)?;
    let icfg = index_config(cfg, plan);
    let setup = sim.client_on_own_thread(0);
    sim.block_on(<I as PointIndex<SimTransport>>::create(&setup, &icfg, 0))?;
    let mut handles: Vec<I> = Vec::new();
    for cn in 0..cfg.cns {
        let c = sim.client_on_own_thread(cn);
        handles.push(sim.block_on(<I as PointIndex<SimTransport>>::open(&c, &icfg, cn))?);
    }
    let per_cn = cfg.clients * cfg.coroutines;
    let clients: Vec<(u16, Client<SimTransport>)> = (0..cfg.cns)
        .flat_map(|cn| (0..per_cn).map(move |i| (cn, i)))
        .map(|(cn, i)| (cn, sim.client_on(cn, cn as usize * cfg.clients + i / cfg.coroutines)))
        .collect();
    let n = clients.len();
    let now = || sim.now_ns();
    let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);

    let phase = |name: &str, total: u64, load: bool| -> anyhow::Result<Phase> {
        let bar = progress_bar(cfg, total, name);
        let results = RefCell::new(Vec::new());
        let (t0, v0) = (sim.now_ns(), clients.iter().map(|(_, c)| c.counts()).sum::<VerbCounts>());
        let tasks = clients.iter().enumerate().map(|(i, (cn, c))| {
            let (idx, bar, results, now, shared) =
                (&handles[*cn as usize], &bar, &results, &now, &shared);
            Box::pin(async move {
                let rec =
                    Recorder { now, history: None, client: i as u32, value_size: cfg.value_size };
                let env = TaskEnv { rec, progress: bar };
                let m =
                    client_phase::<_, _, S>(cfg, plan, shared, idx, c, &env, (i, n), load).await;
                results.borrow_mut().push(m);
            }) as Task
        });
        let out = sim.run(tasks);
        bar.finish_and_clear();
        if !out.all_finished() {
            bail!("{name} phase did not finish: {out:?}");
        }
        let mut metrics = ClientMetrics::default();
        for m in results.into_inner() {
            metrics.merge(m);
        }
        let counts = clients.iter().map(|(_, c)| c.counts()).sum::<VerbCounts>() - v0;
        Ok(Phase { metrics, ns: sim.now_ns() - t0, counts })
    };
    let load = phase("load", plan.items, true)?;
    let wall = Instant::now();
    let run = phase("run", plan.ops, false)?;
    let run_seconds = wall.elapsed().as_secs_f64();
    let lf = sim.block_on(PointIndex::<SimTransport>::load_factor(&handles[0], &setup))?;
    let remote_bytes = sim.allocated_bytes();
    let preset = Some(cfg.preset.clone());
    summarise::<SimTransport, I>(
        cfg,
        plan,
        &handles,
        Finished { load, run, run_seconds, remote_bytes, load_factor: lf, preset },
    )
}

fn run_local<I: Runnable, S: RunnableScans<I>>(
    cfg: &BenchConfig,
    plan: &Plan,
) -> anyhow::Result<BenchReport> {
    let local = LocalConfig {
        memory_nodes: cfg.memory_nodes,
        node_size: cfg.mn_bytes,
        mn_cores: 4,
        chunk_size: chunk_size(cfg),
        yield_per_verb: cfg.coroutines > 1,
    };
    let services = services::<LocalTransport, I>(local.mn_cores)?;
    let fabric = LocalFabric::with_services(local, services).map_err(anyhow::Error::msg)?;
    run_threads::<I, S, _>(cfg, plan, &fabric, || fabric.allocated_bytes())
}

/// Loads (unless attaching) and runs on real threads over any fabric whose clients are made on
/// the thread that uses them.
fn run_threads<I, S, F>(
    cfg: &BenchConfig,
    plan: &Plan,
    fabric: &F,
    remote_bytes: impl Fn() -> u64,
) -> anyhow::Result<BenchReport>
where
    F: Fabric + Sync,
    I: PointIndex<F::Transport> + Sync,
    S: Scans<F::Transport, I>,
{
    let icfg = index_config(cfg, plan);
    let setup = fabric.client(0)?;
    if !cfg.attach {
        run_tasks([I::create(&setup, &icfg, 0)]).remove(0)?;
    }
    let mut handles = Vec::new();
    for cn in 0..cfg.cns {
        let c = fabric.client(cn)?;
        handles.push(run_tasks([I::open(&c, &icfg, cn)]).remove(0)?);
    }
    let threads = cfg.cns as usize * cfg.clients;
    let n = threads * cfg.coroutines;
    let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);
    let start = Instant::now();
    let now = move || start.elapsed().as_nanos() as u64;

    let phase = |name: &str, total: u64, load: bool| -> anyhow::Result<Phase> {
        let bar = progress_bar(cfg, total, name);
        let t0 = now();
        let results = run_on_threads(threads, cfg.coroutines, |t, co| {
            let cn = (t / cfg.clients) as u16;
            let i = t * cfg.coroutines + co;
            let (idx, bar, shared) = (&handles[cn as usize], &bar, &shared);
            async move {
                let c = match fabric.client(cn) {
                    Ok(c) => c,
                    Err(e) => {
                        let m = ClientMetrics { first_error: Some(e.into()), ..Default::default() };
                        return (m, VerbCounts::default());
                    }
                };
                let rec = Recorder {
                    now: &now,
                    history: None,
                    client: i as u32,
                    value_size: cfg.value_size,
                };
                let env = TaskEnv { rec, progress: bar };
                let m =
                    client_phase::<_, _, S>(cfg, plan, shared, idx, &c, &env, (i, n), load).await;
                (m, c.counts())
            }
        });
        let ns = now() - t0;
        bar.finish_and_clear();
        let mut metrics = ClientMetrics::default();
        let mut counts = VerbCounts::default();
        for (m, c) in results {
            metrics.merge(m);
            counts += c;
        }
        Ok(Phase { metrics, ns, counts })
    };
    let load = if cfg.attach { phase("load", 0, true)? } else { phase("load", plan.items, true)? };
    let wall = Instant::now();
    let run = phase("run", plan.ops, false)?;
    let run_seconds = wall.elapsed().as_secs_f64();
    let lf = run_tasks([handles[0].load_factor(&setup)]).remove(0)?;
    let remote_bytes = remote_bytes();
    summarise(
        cfg,
        plan,
        &handles,
        Finished { load, run, run_seconds, remote_bytes, load_factor: lf, preset: None },
    )
}

/// Runs on memnodes over OpenUCX.
#[cfg(feature = "ucx")]
mod ucx {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::layout::{HEAP_START, HEAP_TOP_OFFSET};
    use dmindex_fabric::{Fabric, GlobalAddr};
    use dmindex_ucx::transport::UcxFabric;

    use super::{chunk_size, run_threads, BenchConfig, BenchReport, Plan, Runnable, RunnableScans};

    pub(crate) fn run<I: Runnable, S: RunnableScans<I>>(
        cfg: &BenchConfig,
        plan: &Plan,
    ) -> anyhow::Result<BenchReport> {
        if cfg.token.is_empty() {
            anyhow::bail!("--transport ucx needs --token-file (the memnodes' token)");
        }
        let fabric = UcxFabric::connect(&cfg.memnodes, &cfg.token, chunk_size(cfg))
            .map_err(anyhow::Error::msg)?;
        let probe = fabric.client(0)?;
        let nodes = fabric.info().nodes();
        let remote = || {
            (0..nodes)
                .map(|n| {
                    let top = GlobalAddr::new(n, HEAP_TOP_OFFSET);
                    run_tasks([probe.read_word(top)]).remove(0).unwrap_or(HEAP_START) - HEAP_START
                })
                .sum()
        };
        run_threads::<I, S, _>(cfg, plan, &fabric, remote)
    }
}
