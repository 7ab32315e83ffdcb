//! The load and run phases on each transport: the simulator (virtual time, one thread), real
//! threads over the in-process fabric, and memnodes over OpenUCX.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::bail;
use dmindex_fabric::exec::{run_on_threads_with, run_tasks};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::memory::Pages;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric, VerbCounts};
use dmindex_index::recorded::Recorder;
use dmindex_index::{IndexStats, PointIndex, Scans};
use dmindex_sim::{NetParams, Sim, SimConfig, SimTransport, Task};
use dmindex_ycsb::Shared;

use crate::clock::WallClock;
use crate::fault::{inject, monitor, NodeControl, RunClock};
use crate::progress::phase_progress;
use crate::report::{summarise, Finished, Phase, PhaseWindow};
use crate::runner::{BusyWindow, ClientMetrics, MeasureWindow, OpSource, TaskEnv, Timing};
use crate::streams;
use crate::{
    chunk_size, client_phase, index_config, root_slot, services, BenchConfig, BenchReport, Checked,
    Plan, Recovery, Runnable, RunnableScans,
};
use dmindex_check::History;

pub(crate) fn run_sim<I: Runnable, S: RunnableScans<I>>(
    cfg: &BenchConfig,
    plan: &Plan,
) -> anyhow::Result<BenchReport> {
    let mut net = NetParams::preset(cfg.cluster.preset()).map_err(anyhow::Error::msg)?;
    for o in &cfg.cluster.overrides {
        net.set(o).map_err(anyhow::Error::msg)?;
    }
    let services = services::<SimTransport, I>(net.mn_cores)?;
    let sim = Sim::with_services(
        SimConfig {
            memory_nodes: cfg.cluster.memory_nodes(),
            node_size: cfg.cluster.mn_bytes(),
            chunk_size: chunk_size(cfg),
            ..SimConfig::new(cfg.workload.seed, net)
        },
        services,
    )
    .map_err(anyhow::Error::msg)?;
    let setup = sim.client_on_own_thread(0);
    let icfg = index_config(cfg, plan, sim.block_on(root_slot(&setup, cfg))?);
    let created = sim.block_on(<I as PointIndex<SimTransport>>::create(&setup, &icfg, 0))?;
    let mut bulk = VerbCounts::default();
    if plan.bulk {
        sim.set_direct(cfg.workload.fast_load);
        let loaded = sim.block_on(bulk_load(cfg, plan, &created, &setup));
        sim.set_direct(false);
        bulk = loaded?;
    }
    drop(created);
    let mut handles: Vec<I> = Vec::new();
    for cn in 0..cfg.cluster.cns {
        let c = sim.client_on_own_thread(cn);
        handles.push(sim.block_on(<I as PointIndex<SimTransport>>::open(&c, &icfg, cn))?);
    }
    let per_cn = cfg.cluster.clients * cfg.cluster.coroutines;
    let clients: Vec<(u16, Client<SimTransport>)> = (0..cfg.cluster.cns)
        .flat_map(|cn| (0..per_cn).map(move |i| (cn, i)))
        .map(|(cn, i)| {
            (cn, sim.client_on(cn, cn as usize * cfg.cluster.clients + i / cfg.cluster.coroutines))
        })
        .collect();
    let n = clients.len();
    // A design's own background client (CLevel's rehasher), on a thread of its own on CN 0.
    let background =
        <I as PointIndex<SimTransport>>::BACKGROUND.then(|| sim.client_on_own_thread(0));
    let now = || sim.now_ns();
    let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);

    let recovery = RefCell::new(None);
    let snapshot = || handles.iter().map(PointIndex::<SimTransport>::stats).collect();
    let phase = |name: &str, total: u64, load: bool| -> anyhow::Result<Phase> {
        let bar = phase_progress(cfg.output.progress, total, name);
        // The simulation runs on this one thread: one set of histograms for every task.
        let metrics = RefCell::new(ClientMetrics::default());
        let all_counts = || {
            let fg = clients.iter().map(|(_, c)| c.counts()).sum::<VerbCounts>();
            fg + background.as_ref().map(Client::counts).unwrap_or_default()
        };
        let (t0, v0) = (sim.now_ns(), all_counts());
        let measure = measure_window(cfg, plan, load, &snapshot, t0);
        if !load {
            let mut m = metrics.borrow_mut();
            (m.timeline_from, m.timeline_ns) = (t0, cfg.output.timeline_ns());
        }
        let fault = cfg.faults.mn_fault().filter(|_| !load);
        if let Some(f) = &fault {
            sim.crash_memory_node(f.node, t0 + f.crash_ns).map_err(anyhow::Error::msg)?;
            if let Some(r) = f.restart_ns {
                sim.restart_memory_node(f.node, t0 + f.crash_ns + r).map_err(anyhow::Error::msg)?;
            }
            *recovery.borrow_mut() = Some(Recovery {
                node: f.node,
                crashed_ns: f.crash_ns,
                restarted_ns: f.restart_ns.map(|r| f.crash_ns + r),
                ..Recovery::default()
            });
        }
        let rebuild = fault.filter(|f| f.restart_ns.is_some()).map(|f| {
            let (idx, recovery, node, sim) = (&handles[0], &recovery, f.node, &sim);
            let c = sim.client_on_own_thread(0);
            Box::pin(async move {
                c.await_restart(node).await;
                let (start, wall) = (sim.now_ns(), Instant::now());
                let r = PointIndex::<SimTransport>::recover_memory_node(idx, &c, node).await;
                let mut rec = recovery.borrow_mut();
                let rec = rec.as_mut().expect("set with the fault");
                rec.rebuild_start_ns = Some(start - t0);
                if r.is_ok() {
                    rec.rebuild_end_ns = Some(sim.now_ns() - t0);
                    rec.rebuild_wall_s = Some(wall.elapsed().as_secs_f64());
                }
            }) as Task
        });
        let finished = Cell::new(0usize);
        let background = background.as_ref().map(|c| {
            let (idx, metrics, finished) = (&handles[0], &metrics, &finished);
            Box::pin(async move {
                let stop = || finished.get() == n;
                if let Err(e) = PointIndex::<SimTransport>::background(idx, c, &stop).await {
                    metrics.borrow_mut().first_error.get_or_insert(e);
                }
            }) as Task
        });
        let tasks = clients.iter().enumerate().map(|(i, (cn, c))| {
            let (idx, bar, metrics, now, shared, measure) =
                (&handles[*cn as usize], &bar, &metrics, &now, &shared, measure.as_ref());
            let finished = &finished;
            Box::pin(async move {
                let rec = Recorder {
                    now,
                    history: None,
                    client: i as u32,
                    value_size: cfg.keys.value_size,
                };
                let env = TaskEnv { rec, progress: bar, metrics, timing: Timing::Every, measure };
                let phase = (i, n);
                // Generated as it goes (no virtual time), unless a shorter stream is replayed.
                let source = (!load && plan.stream < plan.ops)
                    .then(|| streams::planned_source(plan, shared, i, n));
                client_phase::<_, _, S>(plan, shared, idx, c, &env, phase, load, source, None)
                    .await;
                finished.set(finished.get() + 1);
            }) as Task
        });
        let out = sim.run(tasks.chain(rebuild).chain(background));
        bar.finish_and_clear();
        if !out.all_finished() {
            bail!("{name} phase did not finish: {out:?}");
        }
        let metrics = metrics.into_inner();
        let counts = all_counts() - v0;
        let window = finish_window(cfg, measure, (t0, sim.now_ns()));
        Ok(Phase { metrics, ns: sim.now_ns() - t0, busy_ns: 0, counts, window })
    };
    sim.set_direct(cfg.workload.fast_load);
    let load = phase("load", plan.items, true);
    sim.set_direct(false);
    let mut load = load?;
    // The bulk load's verbs and memory are the load phase's (`bulk_load`).
    load.counts += bulk;
    let wall = Instant::now();
    sim.take_phases();
    let run = phase("run", plan.ops, false)?;
    let phases = sim.take_phases();
    let run_seconds = wall.elapsed().as_secs_f64();
    let lf = sim.block_on(PointIndex::<SimTransport>::load_factor(&handles[0], &setup))?;
    let remote_bytes = sim.allocated_bytes();
    let preset = Some(cfg.cluster.preset().to_string());
    summarise::<SimTransport, I>(
        cfg,
        plan,
        &handles,
        Finished {
            load,
            run,
            run_seconds,
            remote_bytes,
            load_factor: lf,
            preset,
            recovery: recovery.into_inner(),
            phases,
            check: None,
        },
    )
}

/// `--bulk-load`: the load phase's work, on the handle `create` returned, before any compute
/// node opens its own, so that every handle starts on the trained index as the paper's compute
/// nodes do (none pays for finding its directory stale in the run). Returns the verbs it took,
/// which the load phase counts as its own; its counters (ROLEX's pre-train) are the loading
/// handle's, not the compute nodes' the report sums. The load phase that follows has nothing
/// left to do.
async fn bulk_load<T: dmindex_fabric::Transport, I: PointIndex<T>>(
    cfg: &BenchConfig,
    plan: &Plan,
    idx: &I,
    c: &Client<T>,
) -> anyhow::Result<VerbCounts> {
    let now = || 0;
    let rec = Recorder { now: &now, history: None, client: 0, value_size: cfg.keys.value_size };
    let pairs = bulk_pairs(plan, &rec);
    let v0 = c.counts();
    match idx.bulk_load(c, &pairs).await {
        Ok(()) => Ok(c.counts() - v0),
        Err(e) => bail!("the bulk load of {} pairs failed: {e}", pairs.len()),
    }
}

/// Every load key's pair for `--bulk-load`, sorted by key, each value stamped as a write of
/// `rec`'s client (its sequence the key's place in the load); of repeated keys the last, as
/// inserts in load order would leave it.
fn bulk_pairs(plan: &Plan, rec: &Recorder<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let stamp = |(seq, k): (usize, Vec<u8>)| (k, rec.value(seq as u64));
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = match &plan.load {
        Some(keys) => keys.iter().cloned().enumerate().map(stamp).collect(),
        None => dmindex_ycsb::workload::load_keys(plan.format, plan.items, 0, 1)
            .enumerate()
            .map(stamp)
            .collect(),
    };
    // A stable sort keeps repeats in load order; each later one's value replaces the kept one's.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs.dedup_by(|later, kept| {
        let repeat = later.0 == kept.0;
        if repeat {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        repeat
    });
    pairs
}

pub(crate) fn run_local<I: Runnable, S: RunnableScans<I>>(
    cfg: &BenchConfig,
    plan: &Plan,
) -> anyhow::Result<BenchReport> {
    let local = LocalConfig {
        memory_nodes: cfg.cluster.memory_nodes(),
        node_size: cfg.cluster.mn_bytes(),
        mn_cores: 4,
        chunk_size: chunk_size(cfg),
        yield_per_verb: cfg.cluster.coroutines > 1,
        pages: Pages::Huge,
    };
    let services = services::<LocalTransport, I>(local.mn_cores)?;
    let fabric = LocalFabric::with_services(local, services).map_err(anyhow::Error::msg)?;
    run_threads::<I, S, _>(cfg, plan, &fabric, || fabric.allocated_bytes(), None)
}

/// Loads (unless attaching) and runs on real threads over any fabric whose clients are made on
/// the thread that uses them; `control` crashes and restarts memory nodes for `cfg.faults`.
fn run_threads<I, S, F>(
    cfg: &BenchConfig,
    plan: &Plan,
    fabric: &F,
    remote_bytes: impl Fn() -> u64,
    control: Option<&dyn NodeControl>,
) -> anyhow::Result<BenchReport>
where
    F: Fabric + Sync,
    I: PointIndex<F::Transport> + Sync,
    S: Scans<F::Transport, I>,
{
    let fault = cfg.faults.mn_fault();
    if fault.is_some() && control.is_none() {
        bail!("a memory-node crash needs memory nodes the harness can kill (sim, or ucx with spawned memnodes)");
    }
    let setup = fabric.client(0)?;
    let icfg = index_config(cfg, plan, run_tasks([root_slot(&setup, cfg)]).remove(0)?);
    let mut bulk = VerbCounts::default();
    if !cfg.cluster.attach {
        let created = run_tasks([I::create(&setup, &icfg, 0)]).remove(0)?;
        if plan.bulk {
            bulk = run_tasks([bulk_load(cfg, plan, &created, &setup)]).remove(0)?;
        }
    }
    let mut handles = Vec::new();
    for cn in 0..cfg.cluster.cns {
        let c = fabric.client(cn)?;
        handles.push(run_tasks([I::open(&c, &icfg, cn)]).remove(0)?);
    }
    let threads = cfg.cluster.cns as usize * cfg.cluster.clients;
    let n = threads * cfg.cluster.coroutines;
    let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);
    let clock = &WallClock::new();
    let now = move || clock.now_ns();
    let history = cfg.output.check.then(History::new);
    let history = history.as_ref();
    let watched = fault.as_ref().filter(|f| f.restart_ns.is_some()).map(|f| f.node);
    let watched = watched.or(cfg.faults.watch_node);
    let recovery = Mutex::new(Recovery {
        node: fault.as_ref().map(|f| f.node).or(cfg.faults.watch_node).unwrap_or(0),
        ..Recovery::default()
    });

    let phase = |name: &str, total: u64, load: bool| -> anyhow::Result<Phase> {
        // Run-phase operations are drawn before the clock starts where they can be.
        let sources: Vec<Mutex<Option<OpSource>>> = if load {
            Vec::new()
        } else {
            streams::planned_sources(plan, &shared, n)
                .into_iter()
                .map(|s| Mutex::new(Some(s)))
                .collect()
        };
        let bar = phase_progress(cfg.output.progress, total, name);
        let t0 = now();
        let timeline = if load { 0 } else { cfg.output.timeline_ns() };
        // One set of histograms per thread, shared by its coroutines, merged at the end.
        let init = |_| {
            let mut m = ClientMetrics::default();
            (m.timeline_from, m.timeline_ns) = (t0, timeline);
            RefCell::new(m)
        };
        let snapshot = || handles.iter().map(I::stats).collect();
        let measure_owned = measure_window(cfg, plan, load, &snapshot, t0);
        let measure = measure_owned.as_ref();
        let stop = AtomicBool::new(false);
        // Real time: throughput over the part of the phase in which every client is busy.
        let window = BusyWindow::default();
        let window = Some(&window);
        let run_clock = RunClock { now: &now, t0, stop: &stop };
        let results = std::thread::scope(|scope| {
            let injector = match (&fault, control) {
                (Some(f), Some(control)) if !load => {
                    let (run_clock, recovery) = (&run_clock, &recovery);
                    Some(scope.spawn(move || inject(control, f, run_clock, recovery)))
                }
                _ => None,
            };
            if let Some(node) = watched.filter(|_| !load) {
                let (run_clock, recovery, idx) = (&run_clock, &recovery, &handles[0]);
                let injected = fault.is_some();
                scope.spawn(move || monitor(fabric, idx, node, run_clock, recovery, injected));
            }
            // A design's own background client (CLevel's rehasher), on a thread of its own.
            let background = I::BACKGROUND.then(|| {
                let (idx, stop) = (&handles[0], &stop);
                scope.spawn(move || -> anyhow::Result<VerbCounts> {
                    let c = fabric.client(0)?;
                    let halt = || stop.load(Ordering::Relaxed);
                    run_tasks([idx.background(&c, &halt)]).remove(0)?;
                    Ok(c.counts())
                })
            });
            let results = run_on_threads_with(threads, cfg.cluster.coroutines, init, |m, t, co| {
                let cn = (t / cfg.cluster.clients) as u16;
                let i = t * cfg.cluster.coroutines + co;
                let (idx, bar, shared, metrics) =
                    (&handles[cn as usize], &bar, &shared, Rc::clone(m));
                let source = sources.get(i).and_then(|s| s.lock().expect("source lock").take());
                async move {
                    let c = match fabric.client(cn) {
                        Ok(c) => c,
                        Err(e) => {
                            metrics.borrow_mut().first_error.get_or_insert(e.into());
                            return VerbCounts::default();
                        }
                    };
                    let rec = Recorder {
                        now: &now,
                        history,
                        client: i as u32,
                        value_size: cfg.keys.value_size,
                    };
                    let env = TaskEnv {
                        rec,
                        progress: bar,
                        metrics: &metrics,
                        timing: Timing::Sampled,
                        measure,
                    };
                    let phase = (i, n);
                    client_phase::<_, _, S>(
                        plan, shared, idx, &c, &env, phase, load, source, window,
                    )
                    .await;
                    c.counts()
                }
            });
            stop.store(true, Ordering::Relaxed);
            let background =
                match background.map(|h| h.join().expect("the background thread panicked")) {
                    Some(Err(e)) => return Err(e.context("the index's background client")),
                    Some(Ok(counts)) => counts,
                    None => VerbCounts::default(),
                };
            match injector.map(|h| h.join().expect("the fault thread panicked")) {
                Some(Err(e)) => Err(e.context("injecting the memory-node fault")),
                _ => Ok((results, background)),
            }
        })?;
        let ns = now() - t0;
        bar.finish_and_clear();
        let mut metrics = ClientMetrics::default();
        (metrics.timeline_from, metrics.timeline_ns) = (t0, timeline);
        let (results, mut counts) = results;
        for (m, c) in results {
            metrics.merge(m.into_inner());
            counts += c.into_iter().sum::<VerbCounts>();
        }
        let busy_ns =
            window.and_then(BusyWindow::closed_at).map_or(0, |end| end.saturating_sub(t0));
        let window = finish_window(cfg, measure_owned, (t0, t0 + ns));
        Ok(Phase { metrics, ns, busy_ns, counts, window })
    };
    // An attached process opens what another loaded: it loads nothing.
    let load = match cfg.cluster.attach {
        true => Phase {
            metrics: ClientMetrics::default(),
            ns: 0,
            busy_ns: 0,
            counts: VerbCounts::default(),
            window: None,
        },
        false => {
            let mut load = phase("load", plan.items, true)?;
            // The bulk load's verbs and memory are the load phase's (`bulk_load`).
            load.counts += bulk;
            load
        }
    };
    // A client that failed has stopped, and its error is the report: the next phase and the
    // probes after the run would only wait on what failed (a memnode gone: a timeout each).
    load.failed()?;
    let wall = Instant::now();
    let run = phase("run", plan.ops, false)?;
    let run_seconds = wall.elapsed().as_secs_f64();
    run.failed()?;
    let check = history.map(|h| final_check(h, &handles[0], &setup, &now, cfg.cluster.attach));
    let lf = run_tasks([handles[0].load_factor(&setup)]).remove(0)?;
    let remote_bytes = remote_bytes();
    let recovery =
        cfg.faults.any().then(|| recovery.into_inner().unwrap_or_else(|e| e.into_inner()));
    summarise(
        cfg,
        plan,
        &handles,
        Finished {
            load,
            run,
            run_seconds,
            remote_bytes,
            load_factor: lf,
            preset: None,
            recovery,
            phases: Vec::new(),
            check,
        },
    )
}

/// The run phase's [`MeasureWindow`] (`--window`), starting at `t0`; none in the load phase.
fn measure_window<'a>(
    cfg: &BenchConfig,
    plan: &Plan,
    load: bool,
    snapshot: &'a (dyn Fn() -> Vec<IndexStats> + Sync),
    t0: u64,
) -> Option<MeasureWindow<'a>> {
    let w = cfg.workload.window.filter(|_| !load)?;
    Some(MeasureWindow::new(w.marks(plan.ops), snapshot, t0))
}

/// What `measure` measured, at the end of its phase (`now`).
fn finish_window(
    cfg: &BenchConfig,
    measure: Option<MeasureWindow<'_>>,
    (t0, now): (u64, u64),
) -> Option<PhaseWindow> {
    let (window, measure) = (cfg.workload.window?, measure?);
    let marks = measure.marks();
    let (opened, closed) = measure.finish(now);
    Some(PhaseWindow { window, marks, t0, opened, closed })
}

/// After the run: reads every key the history names once more (recorded, so a write that was
/// acknowledged and then lost shows), then checks the history. An attached run's history lacks
/// the writes of the process that loaded the index (and of any that ran before), so each key
/// starts in a state the check does not know ([`History::check_from_unknown_start`]): what this
/// run did to a key must still be explained by some one state it began in.
fn final_check<T: dmindex_fabric::Transport, I: PointIndex<T>>(
    history: &History,
    idx: &I,
    c: &Client<T>,
    now: &dyn Fn() -> u64,
    attached: bool,
) -> Checked {
    let rec = Recorder { now, history: Some(history), client: u32::MAX, value_size: 0 };
    let mut out = Vec::new();
    for key in history.keys() {
        // A read that fails stays pending in the history; the check still runs.
        let _ = run_tasks([rec.search_into(idx, c, &key, &mut out)]);
    }
    let verdict = match attached {
        true => history.check_from_unknown_start(),
        false => history.check(),
    };
    let unknown_start = attached;
    match verdict {
        Ok(s) => {
            Checked { ops: s.ops, pending: s.pending, keys: s.keys, unknown_start, violation: None }
        }
        Err(v) => Checked {
            ops: history.len(),
            unknown_start,
            violation: Some(v.to_string()),
            ..Checked::default()
        },
    }
}

/// Runs on memnodes over OpenUCX: the ones `--memnode` names, or processes of this machine
/// started for the run (`--spawn-memnodes`), which `cfg.faults` may kill and restart.
#[cfg(feature = "ucx")]
pub(crate) mod ucx {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::layout::{HEAP_START, HEAP_TOP_OFFSET};
    use dmindex_fabric::{Fabric, GlobalAddr};
    use dmindex_ucx::transport::{UcxFabric, UcxOptions};

    use super::{chunk_size, run_threads, BenchConfig, BenchReport, Plan, Runnable, RunnableScans};
    use crate::cluster::{Cluster, SpawnSpec};
    use crate::fault::NodeControl;

    pub(crate) fn run<I: Runnable, S: RunnableScans<I>>(
        cfg: &BenchConfig,
        plan: &Plan,
    ) -> anyhow::Result<BenchReport> {
        let cluster = match cfg.cluster.spawn_memnodes {
            true => Some(Cluster::start(&SpawnSpec {
                exe: match &cfg.cluster.memnode_exe {
                    Some(exe) => exe.clone(),
                    None => std::env::current_exe()?,
                },
                nodes: cfg.cluster.memory_nodes(),
                bytes: cfg.cluster.mn_bytes(),
                index: cfg.index.name.clone(),
                cores: 4,
            })?),
            false => None,
        };
        let (addrs, token) = match &cluster {
            Some(c) => (c.addrs().to_vec(), c.token().to_vec()),
            None => (cfg.cluster.memnodes.clone(), cfg.cluster.token()?),
        };
        if token.is_empty() {
            anyhow::bail!("--transport ucx needs --token-file (the memnodes' token)");
        }
        let options = UcxOptions {
            chunk_size: chunk_size(cfg),
            timeout: cfg.cluster.ucx_timeout(),
            ..UcxOptions::default()
        };
        let fabric =
            UcxFabric::connect_with(&addrs, &token, &options).map_err(anyhow::Error::msg)?;
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
        let control = cluster.as_ref().map(|c| c as &dyn NodeControl);
        run_threads::<I, S, _>(cfg, plan, &fabric, remote, control)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dmindex_ycsb::{KeyFormat, WorkloadSpec};

    use super::*;

    /// A bulk load's pairs are in key order, and a key the load repeats keeps the value of its
    /// later write, as inserts in load order would leave it.
    #[test]
    fn bulk_pairs_are_sorted_and_keep_a_repeated_key_s_last_value() {
        let keys = [b"b", b"a", b"b"].map(|k| k.to_vec()).to_vec();
        let plan = Plan {
            format: KeyFormat::new(8, false).unwrap(),
            spec: WorkloadSpec::named("c").unwrap(),
            trace: None,
            dealt: None,
            load: Some(Arc::new(keys)),
            bulk: true,
            items: 3,
            ops: 1,
            stream: 1,
            seed: 1,
        };
        let now = || 0;
        let rec = Recorder { now: &now, history: None, client: 0, value_size: 8 };
        let pairs = bulk_pairs(&plan, &rec);
        assert_eq!(pairs, [(b"a".to_vec(), rec.value(1)), (b"b".to_vec(), rec.value(2))]);
    }
}
