//! The simulator suite: mixed operations on a small, hot key space with torn reads, delays and
//! client crashes, every history checked for linearizability, liveness and coverage.
//!
//! One seed decides everything: the fabric's schedule, the faults, and each client's operations.
//! The workload is small and hot on purpose — a few dozen keys, many clients, every kind of
//! operation the index offers (scans only on ordered indexes) — so that operations collide on
//! keys, nodes and locks. Setup and a preload run fault-free; then faults switch on.
//!
//! ## Liveness and coverage
//!
//! Progress, not a fixed deadline, is judged: the run phase goes on while some client completed
//! an operation within the last window of virtual time ([`CheckConfig::window_ns`]), up to a
//! bound derived from the work asked for ([`CheckConfig::work_bound_ns`]). A client still
//! running when it ends that completed nothing in the last window (or that nothing left could
//! wake) is *stuck*; one still completing operations when the bound passes is slow, and the seed
//! fails saying the bound could not be met — not as a deadlock, and not by counting slow
//! clients as stuck behind a crash. With no crash in the run nothing can explain a stuck
//! client, so the seed fails (a deadlock or livelock is a bug). After a crash it is reported as
//! stuck behind the crash: a crashed client may have left a lock held, and in an index that
//! does not recover from client crashes ([`PointIndex::recovers_client_crashes`]) that lock
//! stays held; in one that does, a stuck client fails the seed. The simulator names such locks (a word a
//! crashed client's last changing atomic set and nobody changed since) and the clients whose
//! latest atomic targeted one are counted as spinning on a lock a crashed client holds; the
//! others wait behind those (e.g. in a compute node's local lock table). Every report counts the operations
//! requested and those that completed and were checked, so a run in which most clients stalled
//! cannot pass for a thorough one. Crashes come in a seed mix ([`Crashes::OneSeedIn`]) that keeps
//! coverage high while every crash path is still exercised.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Range;

use dmindex_check::{CheckStats, History};
use dmindex_fabric::{FabricError, Transport};
use dmindex_sim::{Faults, NetParams, Sim, SimConfig, SimTransport, Task};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use dmindex_index::recorded::Recorder;
use dmindex_index::{mn_services, IndexConfig, IndexError, IndexKind, PointIndex, ScanBuf, Scans};

/// What a client's crash is drawn against, in a seed that crashes clients (at most a quarter of
/// them a seed, either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CrashClock {
    /// Each awaited post crashes its client with probability [`POST_CRASH_PROB`]: an index
    /// whose operations take more posts (lock waits and retries are posts too) sees its clients
    /// die earlier in their lists of operations, so fewer of their operations are checked.
    #[default]
    Post,
    /// Each operation, as it starts, arms a crash with probability [`OP_CRASH_PROB`] at one of
    /// its client's next 1..=8 awaited posts: clients die as far into their lists whatever
    /// their index's posts per operation, so the share of operations checked compares indexes.
    Operation,
}

/// The post clock's chance of a crash at each awaited post.
pub const POST_CRASH_PROB: f64 = 0.002;

/// The operation clock's chance that an operation arms a crash: the post clock's over the three
/// round trips of a typical operation.
pub const OP_CRASH_PROB: f64 = 0.006;

/// Which seeds crash clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crashes {
    /// No crashes.
    Never,
    /// Every seed may crash clients.
    EverySeed,
    /// Seeds that are multiples of `n` may crash clients; the others run without crashes.
    OneSeedIn(u64),
}

impl Crashes {
    /// Whether `seed` runs with crashes.
    pub fn on(self, seed: u64) -> bool {
        match self {
            Crashes::Never => false,
            Crashes::EverySeed => true,
            Crashes::OneSeedIn(n) => seed % n.max(1) == 0,
        }
    }
}

/// Bytes of each simulated memory node a check runs on.
pub const NODE_BYTES: u64 = 64 << 20;

/// The share of awaited posts a client stalls before, when stalls are on: one in 500.
pub const STALL_PROB: f64 = 0.002;

/// Shape of one checked run.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub clients: usize,
    pub ops_per_client: u64,
    pub keys: u64,
    pub value_size: usize,
    pub crashes: Crashes,
    pub crash_clock: CrashClock,
    pub delays: bool,
    /// Rarely ([`STALL_PROB`] of awaited posts), a client stalls for up to this many ns before
    /// it posts, as a descheduled or slow client does, then goes on (0: never).
    pub stall_max_ns: u64,
    pub preset: String,
    /// Virtual time, ns, in which no client completes an operation after which the clients
    /// still running count as stuck: progress, not a fixed deadline, is what is judged.
    pub progress_window_ns: u64,
    /// Virtual-time bound of the run phase, ns, that progress cannot extend it past (`None`:
    /// [`CheckConfig::work_bound_ns`], derived from the work asked for).
    pub bound_ns: Option<u64>,
    pub index_options: Vec<(String, String)>,
    /// Use exactly these keys (8-byte big-endian integers, non-zero) instead of `1 ..= keys`.
    pub key_list: Vec<u64>,
    /// Use string keys of 8 to 11 bytes, [`CheckConfig::keys_per_prefix`] per 8-byte prefix.
    pub long_keys: bool,
    /// With long keys: keys sharing each 8-byte prefix (1 ..= 100; three unless set).
    pub keys_per_prefix: u64,
    /// With long keys: every key padded with `.` to this many bytes (11 ..= 255; 11, none,
    /// unless set), the index's longest key: CHIME's collision pages then take records of
    /// several cache lines, which a READ can see torn.
    pub long_key_bytes: usize,
    /// Compute-node cache budget of each handle, bytes.
    pub cache_bytes: u64,
    /// Memory nodes of the simulated cluster.
    pub memory_nodes: u16,
    /// Crash one memory node other than node 0 (which holds the root table) per seed, at a
    /// random instant within this many ns of the run phase's start (0: no memory-node crash).
    /// Only for indexes that replicate across memory nodes.
    pub memory_node_crash_ns: u64,
    /// With a memory-node crash: the node restarts empty this many ns after it crashed, and one
    /// more client waits for it and rebuilds it ([`PointIndex::recover_memory_node`]) while the
    /// others go on; after the run every key is read once more, recorded (0: no restart).
    pub memory_node_restart_ns: u64,
}

impl Default for CheckConfig {
    fn default() -> CheckConfig {
        CheckConfig {
            clients: 12,
            ops_per_client: 60,
            keys: 48,
            value_size: 8,
            crashes: Crashes::OneSeedIn(4),
            crash_clock: CrashClock::Post,
            delays: true,
            stall_max_ns: 0,
            preset: "stress".into(),
            progress_window_ns: 200_000_000,
            bound_ns: None,
            index_options: Vec::new(),
            key_list: Vec::new(),
            long_keys: false,
            keys_per_prefix: 3,
            long_key_bytes: 11,
            cache_bytes: 1 << 20,
            memory_nodes: 1,
            memory_node_crash_ns: 0,
            memory_node_restart_ns: 0,
        }
    }
}

/// What one seed's run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub seed: u64,
    pub stats: CheckStats,
    /// Operations the clients were asked to run (after the fault-free preload).
    pub requested: u64,
    /// Of those, operations that completed and were checked.
    pub completed: u64,
    pub crashed: usize,
    /// Of `completed`, the clients that did not crash completed these, of `survivors_requested`
    /// (all of them unless one is stuck).
    pub survivors_completed: u64,
    pub survivors_requested: u64,
    /// Of `crashed`, the run's clients (not a rebuilding client).
    pub crashed_clients: usize,
    /// Round trips every client posted in the run phase, and of them those the crashed ones
    /// posted before they crashed: with the operations each side completed, what tells how soon
    /// into their lists the crashes came (they strike per awaited post, not per operation).
    pub round_trips: u64,
    pub crashed_round_trips: u64,
    /// Clients still running at the deadline, behind a crash (with no crash the seed fails).
    pub stuck: usize,
    /// Of those, clients spinning on a word a crashed client set and left set (a lock it held).
    pub stuck_on_held_lock: usize,
    /// Virtual time the run phase lasted, ns.
    pub run_ns: u64,
    /// The memory node that crashed, and when (ns after the run phase began).
    pub memory_node_crash: Option<(u16, u64)>,
    /// Whether the crashed node was rebuilt (its rebuild finished before the deadline).
    pub rebuilt: bool,
    /// Whether the client rebuilding it crashed first (a rebuild left halfway).
    pub rebuild_crashed: bool,
    /// The crashes a survivor repaired: those whose member a survivor fenced.
    pub repairs: Vec<Recovery>,
    /// The clients' lease, ns ([`dmindex_fabric::Transport::lease_ns`]).
    pub lease_ns: u64,
    pub trace_hash: u64,
}

/// A crashed client that a survivor judged dead and fenced, and how long that took.
///
/// Measured from the crash instant: `fenced_ns` until the first fence of the crashed client's
/// member was answered on every memory node ([`dmindex_sim::Crash`]); `recovered_ns` until the
/// fencing client's first operation to complete after that — the operation that waited on what
/// the dead client held, which completes only after the survivor took it over and repaired it
/// (`None`: it never completed one before the run ended, e.g. it crashed too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    pub fenced_ns: u64,
    pub recovered_ns: Option<u64>,
}

impl fmt::Display for SeedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: {} of {} operations checked on {} keys in {} of virtual time, {} clients \
             crashed, {} stuck behind a crash ({} spinning on a lock a crashed client holds), \
             trace {:016x}",
            self.seed,
            self.completed,
            self.requested,
            self.stats.keys,
            ms(self.run_ns),
            self.crashed,
            self.stuck,
            self.stuck_on_held_lock,
            self.trace_hash
        )?;
        for r in &self.repairs {
            match r.recovered_ns {
                Some(ns) => write!(
                    f,
                    "; a crashed client fenced {} and recovered from {} after its crash",
                    ms(r.fenced_ns),
                    ms(ns)
                )?,
                None => write!(
                    f,
                    "; a crashed client fenced {} after its crash, its fencer completed nothing \
                     after",
                    ms(r.fenced_ns)
                )?,
            }
        }
        if let Some((node, at)) = self.memory_node_crash {
            write!(f, "; memory node {node} crashed {at} ns into the run")?;
        }
        match (self.rebuilt, self.rebuild_crashed) {
            (true, _) => write!(f, ", restarted and was rebuilt"),
            (false, true) => write!(f, ", restarted; the client rebuilding it crashed"),
            (false, false) => Ok(()),
        }
    }
}

/// Sums over seeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub seeds: u64,
    pub requested: u64,
    pub completed: u64,
    pub crashed: usize,
    /// [`SeedReport`]'s, summed.
    pub crashed_clients: usize,
    pub survivors_completed: u64,
    pub survivors_requested: u64,
    pub round_trips: u64,
    pub crashed_round_trips: u64,
    pub stuck: usize,
    pub stuck_on_held_lock: usize,
    /// Seeds in which a client crashed.
    pub seeds_with_crashes: u64,
    /// Seeds in which a client was stuck behind a crash.
    pub seeds_with_stuck: u64,
    /// Seeds in which a memory node crashed.
    pub memory_node_crashes: u64,
    /// Seeds in which the crashed node was rebuilt.
    pub rebuilds: u64,
    /// Seeds in which the client rebuilding it crashed before it was done.
    pub rebuilds_crashed: u64,
    /// Crashed clients a survivor fenced (and so repaired what they held).
    pub repaired: usize,
    /// Of those, the ones whose fencer completed no operation after the fence.
    pub repairs_unfinished: usize,
    /// Per repaired crash, ns from the crash until its member was fenced, in seed order.
    pub fenced_ns: Vec<u64>,
    /// Per repaired crash whose fencer went on, ns from the crash until it recovered
    /// ([`Recovery`]), in seed order.
    pub recovered_ns: Vec<u64>,
    /// The clients' lease, ns (the latest seed's).
    pub lease_ns: u64,
}

impl Summary {
    /// Adds one seed.
    pub fn add(&mut self, r: &SeedReport) {
        self.seeds += 1;
        self.requested += r.requested;
        self.completed += r.completed;
        self.crashed += r.crashed;
        self.crashed_clients += r.crashed_clients;
        self.survivors_completed += r.survivors_completed;
        self.survivors_requested += r.survivors_requested;
        self.round_trips += r.round_trips;
        self.crashed_round_trips += r.crashed_round_trips;
        self.stuck += r.stuck;
        self.stuck_on_held_lock += r.stuck_on_held_lock;
        self.seeds_with_crashes += u64::from(r.crashed > 0);
        self.seeds_with_stuck += u64::from(r.stuck > 0);
        self.memory_node_crashes += u64::from(r.memory_node_crash.is_some());
        self.rebuilds += u64::from(r.rebuilt);
        self.rebuilds_crashed += u64::from(r.rebuild_crashed);
        self.repaired += r.repairs.len();
        for x in &r.repairs {
            self.fenced_ns.push(x.fenced_ns);
            match x.recovered_ns {
                Some(ns) => self.recovered_ns.push(ns),
                None => self.repairs_unfinished += 1,
            }
        }
        self.lease_ns = r.lease_ns;
    }

    /// Time to recover (crash to recovery, [`Recovery`]) at quantile `q` in `[0, 1]`, ns, by
    /// nearest rank (`None`: no crash was repaired and recovered from).
    pub fn recovered_quantile_ns(&self, q: f64) -> Option<u64> {
        quantile(&self.recovered_ns, q)
    }

    /// Crash to fence at quantile `q`, ns, by nearest rank.
    pub fn fenced_quantile_ns(&self, q: f64) -> Option<u64> {
        quantile(&self.fenced_ns, q)
    }

    /// Completed (checked) operations per requested one.
    pub fn coverage(&self) -> f64 {
        if self.requested == 0 {
            0.0
        } else {
            self.completed as f64 / self.requested as f64
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} seeds linearizable: {} of {} operations checked ({:.1} %), {} clients crashed \
             in {} seeds, {} clients stuck behind a crash in {} seeds ({} of them spinning on \
             a lock a crashed client holds)",
            self.seeds,
            self.completed,
            self.requested,
            100.0 * self.coverage(),
            self.crashed,
            self.seeds_with_crashes,
            self.stuck,
            self.seeds_with_stuck,
            self.stuck_on_held_lock
        )?;
        if self.crashed_clients > 0 {
            let per_op = self.round_trips as f64 / self.completed.max(1) as f64;
            write!(
                f,
                "; the survivors completed {} of their {} operations, the crashed clients {} \
                 before crashing, after {:.1} round trips each ({:.2} round trips per completed \
                 operation)",
                self.survivors_completed,
                self.survivors_requested,
                self.completed - self.survivors_completed,
                self.crashed_round_trips as f64 / self.crashed_clients as f64,
                per_op
            )?;
        }
        if self.memory_node_crashes > 0 {
            write!(f, "; a memory node crashed in {} seeds", self.memory_node_crashes)?;
        }
        if self.rebuilds > 0 {
            write!(f, " and was restarted and rebuilt in {}", self.rebuilds)?;
        }
        if self.rebuilds_crashed > 0 {
            write!(f, " (in {} more its rebuilding client crashed)", self.rebuilds_crashed)?;
        }
        if self.repaired > 0 {
            write!(f, "; {} of the crashed clients were fenced by a survivor", self.repaired)?;
        }
        let q = |x: f64| self.recovered_quantile_ns(x).unwrap_or(0);
        if !self.recovered_ns.is_empty() {
            let lease = self.lease_ns.max(1) as f64;
            write!(
                f,
                ", time to recover median {} / p99 {} / max {} ({:.2} / {:.2} / {:.2} leases)",
                ms(q(0.5)),
                ms(q(0.99)),
                ms(q(1.0)),
                q(0.5) as f64 / lease,
                q(0.99) as f64 / lease,
                q(1.0) as f64 / lease
            )?;
        }
        if self.repairs_unfinished > 0 {
            write!(
                f,
                ", {} of them with no operation completed by the fencer after",
                self.repairs_unfinished
            )?;
        }
        Ok(())
    }
}

/// The value at quantile `q` of `xs` by nearest rank: the smallest value with at least `q` of
/// the values at or below it.
fn quantile(xs: &[u64], q: f64) -> Option<u64> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    v.get(rank.max(1) - 1).copied()
}

/// Virtual time the bound of a run allows each operation, ns, as if every client's operations
/// ran one after another: 1 ms, tens of times what an operation takes on the `stress` fabric
/// even when it waits behind others for a lock. A run that still has not finished by then is
/// too slow to check, whatever the reason, and says so.
pub const OP_BUDGET_NS: u64 = 1_000_000;

impl CheckConfig {
    /// The progress window, stretched to outlast the longest stall: a client stalled while it
    /// holds a lock holds up every client behind it, and it may stall again when it goes on.
    pub fn window_ns(&self) -> u64 {
        self.progress_window_ns.max(self.stall_max_ns.saturating_mul(4))
    }

    /// The run phase's bound derived from the work asked for: [`OP_BUDGET_NS`] per operation
    /// plus a tenth of the longest stall (an operation posts about ten verbs, each stalling one
    /// time in 500), as if the operations ran one after another; after the memory-node crash
    /// and restart, if any; plus one progress window.
    pub fn work_bound_ns(&self) -> u64 {
        let per_op = OP_BUDGET_NS.saturating_add(self.stall_max_ns / 10);
        let ops = (self.clients as u64).saturating_mul(self.ops_per_client);
        ops.saturating_mul(per_op)
            .saturating_add(self.memory_node_crash_ns)
            .saturating_add(self.memory_node_restart_ns)
            .saturating_add(self.window_ns())
    }

    /// The run phase's bound: [`CheckConfig::bound_ns`] if set, else
    /// [`CheckConfig::work_bound_ns`].
    pub fn run_bound_ns(&self) -> u64 {
        self.bound_ns.unwrap_or_else(|| self.work_bound_ns())
    }

    /// The configuration each seed builds the index with.
    pub fn index_config(&self) -> IndexConfig {
        IndexConfig {
            max_key: if self.long_keys { self.long_key_bytes.max(11) } else { 8 },
            max_value: self.value_size,
            cache_bytes: self.cache_bytes,
            expected_items: self.universe(),
            root_slot: 0,
            extra: self.index_options.clone(),
        }
    }

    fn universe(&self) -> u64 {
        if self.key_list.is_empty() {
            self.keys
        } else {
            self.key_list.len() as u64
        }
    }

    /// The `i`-th key of the run.
    fn key(&self, i: u64) -> Vec<u8> {
        let mut key = self.unpadded_key(i);
        if self.long_keys && key.len() < self.long_key_bytes {
            key.resize(self.long_key_bytes, b'.');
        }
        key
    }

    fn unpadded_key(&self, i: u64) -> Vec<u8> {
        if self.long_keys && self.keys_per_prefix == 3 {
            let suffix: &[u8] = [&b""[..], b"-x", b"-yy"][(i % 3) as usize];
            return [format!("k{:07}", i / 3).as_bytes(), suffix].concat();
        }
        if self.long_keys {
            // "k0000012", then "k0000012-1" … "k0000012-99": 8 to 11 bytes.
            let per = self.keys_per_prefix.clamp(1, 100);
            let key = format!("k{:07}", i / per);
            return match i % per {
                0 => key.into_bytes(),
                j => format!("{key}-{j}").into_bytes(),
            };
        }
        match self.key_list.get(i as usize) {
            Some(k) => k.to_be_bytes().to_vec(),
            None => (i + 1).to_be_bytes().to_vec(),
        }
    }
}

/// Runs one seed on index `I` (scans through `S`); `Err` describes a linearizability violation,
/// a failed operation, or clients stuck with no crash to explain it.
/// A check that cannot run as configured (bad options, an index that cannot hold the workload:
/// more keys per prefix than it separates, say) — not a violation: every seed would fail alike.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotRunnable(pub String);

/// Whether `e` says the configuration or the workload does not fit the index, rather than that
/// something went wrong while it ran.
fn configuration(e: &IndexError) -> bool {
    matches!(
        e,
        IndexError::Config(_)
            | IndexError::Full(_)
            | IndexError::Unsupported(_)
            | IndexError::KeyTooLong { .. }
            | IndexError::ValueTooLong { .. }
    )
}

/// Whether a seed's failure is a [`NotRunnable`] check or a configuration the index refused.
pub fn not_runnable(e: &anyhow::Error) -> bool {
    e.downcast_ref::<NotRunnable>().is_some()
        || e.downcast_ref::<IndexError>().is_some_and(configuration)
}

pub fn check_seed<I, S>(cfg: &CheckConfig, seed: u64) -> anyhow::Result<SeedReport>
where
    I: PointIndex<SimTransport>,
    S: Scans<SimTransport, I>,
{
    use anyhow::bail;
    let unfit = |m: String| anyhow::Error::from(NotRunnable(m));
    if cfg.clients == 0 || cfg.universe() == 0 || cfg.key_list.contains(&0) {
        return Err(unfit("clients and keys must be positive".into()));
    }
    if cfg.memory_node_crash_ns > 0 && cfg.memory_nodes < 2 {
        return Err(unfit(
            "a memory-node crash needs at least 2 memory nodes (node 0 never crashes)".into(),
        ));
    }
    if cfg.memory_node_restart_ns > 0 && cfg.memory_node_crash_ns == 0 {
        return Err(unfit("a memory-node restart needs a memory-node crash".into()));
    }
    let net = NetParams::preset(&cfg.preset).map_err(unfit)?;
    let services = mn_services(net.mn_cores, I::SERVICES)?;
    let sim = Sim::with_services(
        SimConfig {
            memory_nodes: cfg.memory_nodes,
            node_size: NODE_BYTES,
            chunk_size: 1 << 20,
            ..SimConfig::new(seed, net)
        },
        services,
    )
    .map_err(anyhow::Error::msg)?;
    let icfg = cfg.index_config();
    let history = History::new();
    let setup = sim.client_on_own_thread(0);
    sim.block_on(I::create(&setup, &icfg, 0))?;
    let cns = 3u16;
    let mut handles = Vec::new();
    for cn in 0..cns {
        let c = sim.client_on_own_thread(cn);
        handles.push(sim.block_on(I::open(&c, &icfg, cn))?);
    }
    let now = || sim.now_ns();
    // Preload every other key, recorded, fault-free.
    let loader = sim.client_on_own_thread(0);
    let rec = Recorder {
        now: &now,
        history: Some(&history),
        client: u32::MAX,
        value_size: cfg.value_size,
    };
    let preload = sim.block_on(async {
        for k in (0..cfg.universe()).step_by(2) {
            rec.insert(&handles[0], &loader, &cfg.key(k), &rec.value(k)).await?;
        }
        Ok::<(), IndexError>(())
    });
    match preload {
        // Fault-free, from one client: memory that runs out here is too little for the keys.
        Err(e @ IndexError::Fabric(FabricError::OutOfMemory { .. })) => {
            return Err(unfit(format!(
                "the index cannot hold this workload: preloading {} of {} keys: {e}",
                cfg.universe().div_ceil(2),
                cfg.universe()
            )));
        }
        r => r?,
    }

    let crashes = cfg.crashes.on(seed);
    let max_crashes = (cfg.clients as u32 / 4).max(1);
    // Crashes armed by the operation clock so far (each strikes, unless its client ends first).
    let armed = Cell::new(0u32);
    let arming = crashes && cfg.crash_clock == CrashClock::Operation;
    sim.set_faults(Faults {
        delay_prob: if cfg.delays { 0.05 } else { 0.0 },
        delay_max_ns: 20_000,
        crash_prob: match (crashes, cfg.crash_clock) {
            (true, CrashClock::Post) => POST_CRASH_PROB,
            _ => 0.0,
        },
        max_crashes: if crashes { max_crashes } else { 0 },
        stall_prob: if cfg.stall_max_ns > 0 { STALL_PROB } else { 0.0 },
        stall_max_ns: cfg.stall_max_ns,
    });
    let clients: Vec<_> =
        (0..cfg.clients).map(|i| sim.client_on_own_thread((i % cns as usize) as u16)).collect();
    let seeds: Vec<u64> = clients.iter().map(|_| sim.random_u64()).collect();
    // Each failed operation, and whether it says the index cannot run this check at all.
    let errors = RefCell::new(Vec::new());
    let completed = Cell::new(0u64);
    let done: Vec<Cell<u64>> = (0..cfg.clients).map(|_| Cell::new(0)).collect();
    let ordered = S::KIND == IndexKind::Ordered;
    let start = sim.now_ns();
    let memory_node_crash = (cfg.memory_node_crash_ns > 0).then(|| {
        let node = 1 + (sim.random_u64() % (cfg.memory_nodes as u64 - 1)) as u16;
        (node, sim.random_u64() % cfg.memory_node_crash_ns)
    });
    if let Some((node, after)) = memory_node_crash {
        sim.crash_memory_node(node, start + after).map_err(anyhow::Error::msg)?;
        if cfg.memory_node_restart_ns > 0 {
            sim.restart_memory_node(node, start + after + cfg.memory_node_restart_ns)
                .map_err(anyhow::Error::msg)?;
        }
    }
    let restart_at = memory_node_crash
        .filter(|_| cfg.memory_node_restart_ns > 0)
        .map(|(node, after)| (node, start + after + cfg.memory_node_restart_ns));
    // When each task (the clients, then the rebuilding client if any) last made progress: its
    // latest completed operation, or the instant it may start to (a rebuild waits for the
    // restart).
    let progress: Vec<Cell<u64>> = (0..cfg.clients)
        .map(|_| start)
        .chain(restart_at.map(|(_, at)| at))
        .map(Cell::new)
        .collect();
    let rebuilt = Cell::new(false);
    let repair = restart_at.map(|(node, _)| {
        let (idx, errors, rebuilt) = (&handles[0], &errors, &rebuilt);
        let (c, progress, now) = (sim.client_on_own_thread(0), &progress[cfg.clients], &now);
        Box::pin(async move {
            c.await_restart(node).await;
            match idx.recover_memory_node(&c, node).await {
                Ok(()) => rebuilt.set(true),
                Err(e) => errors.borrow_mut().push((false, format!("rebuilding node {node}: {e}"))),
            }
            progress.set(now());
        }) as Task
    });
    // Clients whose task has ended, normally or by a crash (which drops it): a design's own
    // background client (CLevel's rehasher) runs until every one has. Liveness is judged on
    // the clients, not on it.
    let ended = Cell::new(0usize);
    let background = I::BACKGROUND.then(|| {
        let (idx, errors, ended, c) = (&handles[0], &errors, &ended, sim.client_on_own_thread(0));
        Box::pin(async move {
            let stop = || ended.get() == cfg.clients;
            if let Err(e) = idx.background(&c, &stop).await {
                errors.borrow_mut().push((configuration(&e), format!("background client: {e}")));
            }
        }) as Task
    });
    let tasks = clients.iter().zip(seeds).enumerate().map(|(i, (c, s))| {
        let (idx, history, errors, now, completed, progress) =
            (&handles[i % cns as usize], &history, &errors, &now, &completed, &progress[i]);
        let (done, armed, ended) = (&done[i], &armed, &ended);
        Box::pin(async move {
            let _ends = Ends(ended);
            let rec = Recorder {
                now,
                history: Some(history),
                client: i as u32,
                value_size: cfg.value_size,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(s);
            // The operation clock's own draws, so the operations are the same on either clock.
            let mut crash_rng = ChaCha8Rng::seed_from_u64(!s);
            let op_crash = (OP_CRASH_PROB * 1e6) as u64;
            // One scan buffer per client, reused, as the harness keeps it.
            let mut buf = ScanBuf::new();
            for seq in 0..cfg.ops_per_client {
                // A crash armed by an earlier operation and not yet struck (that operation took
                // fewer posts) is left to strike: no second draw replaces it.
                if arming
                    && !c.transport().crash_armed()
                    && armed.get() < max_crashes
                    && crash_rng.next_u64() % 1_000_000 < op_crash
                {
                    armed.set(armed.get() + 1);
                    c.transport().crash_within(1 + (crash_rng.next_u64() % 8) as u32);
                }
                let r = rng.next_u64();
                let k = cfg.key((r >> 8) % cfg.universe());
                let v = rec.value(seq);
                // Point indexes get searches and updates where ordered ones get scans.
                let res = match (r % 100, ordered) {
                    (0..=29, _) | (80..=89, false) => rec.search(idx, c, &k).await.map(drop),
                    (30..=54, _) => rec.insert(idx, c, &k, &v).await,
                    (55..=69, _) | (90.., false) => rec.update(idx, c, &k, &v).await.map(drop),
                    (70..=79, _) => rec.delete(idx, c, &k).await.map(drop),
                    (80..=89, true) => {
                        let n = 1 + (r >> 40) as usize % 12;
                        rec.scan_into::<_, _, S>(idx, c, &k, n, &mut buf).await.map(drop)
                    }
                    _ => {
                        // A range over the next few keys of the universe (in its key order).
                        let hi = cfg.key((r >> 8) % cfg.universe() + 1 + (r >> 40) % 16);
                        rec.scan_range_into::<_, _, S>(idx, c, &k, &hi, &mut buf).await.map(drop)
                    }
                };
                if let Err(e) = res {
                    errors.borrow_mut().push((configuration(&e), format!("client {i}: {e}")));
                    return;
                }
                completed.set(completed.get() + 1);
                done.set(done.get() + 1);
                progress.set(now());
            }
        }) as Task
    });
    let repairing = repair.is_some();
    // The run goes on while some task made progress within the last window, up to the bound.
    let (window, bound) = (cfg.window_ns(), start.saturating_add(cfg.run_bound_ns()));
    let latest = || progress.iter().map(Cell::get).max().unwrap_or(start);
    let tasks = tasks.chain(repair).chain(background);
    let mut out = sim.run_until_with(tasks, |_| latest().saturating_add(window).min(bound));
    // The background client is left out of the stuck (it waits for the clients).
    out.stuck.retain(|&t| t < progress.len());
    let errors = errors.into_inner();
    if let Some((_, e)) = errors.iter().find(|(unrunnable, _)| *unrunnable) {
        return Err(unfit(format!("the index cannot hold this workload: {e}")));
    }
    if let Some((_, e)) = errors.into_iter().next() {
        bail!("an operation failed: {e}");
    }
    // A task left at the end is stuck if it made no progress within the last window, or if
    // the run ended before its deadline (nothing left could ever wake it); else it was still
    // going when the bound stopped it: slow, not stuck.
    let slow = out
        .stuck
        .iter()
        .filter(|&&t| out.deadline_passed && progress[t].get().saturating_add(window) >= out.end_ns)
        .count();
    if slow > 0 {
        let basis = match cfg.bound_ns {
            Some(_) => String::new(),
            None => {
                format!(" ({} per operation, as if they ran one after another)", ms(OP_BUDGET_NS))
            }
        };
        bail!(
            "the run phase reached its bound of {} of virtual time with {slow} of {} clients \
             still completing operations ({} of {} operations done): too slow to finish within \
             the bound{basis}, not a deadlock",
            ms(cfg.run_bound_ns()),
            cfg.clients,
            completed.get(),
            cfg.clients as u64 * cfg.ops_per_client,
        );
    }
    if !out.stuck.is_empty() && out.crashed.is_empty() {
        let why = match out.deadline_passed {
            true => format!("no client completed an operation in the last {}", ms(window)),
            false => "nothing left in the run could wake them".to_string(),
        };
        bail!(
            "{} of {} clients are stuck {} into the run phase: {why}, and no client crashed: a \
             deadlock or livelock",
            out.stuck.len(),
            cfg.clients,
            ms(out.end_ns.saturating_sub(start))
        );
    }
    if !out.stuck.is_empty() && I::recovers_client_crashes(&icfg) {
        let held: Vec<String> = sim
            .words_held_by_crashed()
            .iter()
            .map(|h| {
                format!(
                    "{} set by crashed client {} ({} spinning)",
                    h.addr,
                    h.holder,
                    h.waiters.len()
                )
            })
            .collect();
        let ids: Vec<u32> =
            out.stuck.iter().filter_map(|&t| clients.get(t).map(|c| c.transport().id())).collect();
        let latest: Vec<String> = sim
            .latest_atomic_words(&ids)
            .iter()
            .map(|(i, w)| match w {
                Some((a, v)) => format!("client {i}: {a} = {v:#018x}"),
                None => format!("client {i}: no atomic"),
            })
            .collect();
        bail!(
            "{} of {} clients are stuck {} into the run phase behind a crash, and this index \
             recovers from client crashes: a dead holder's lock should have been freed within \
             three leases and a repair (words crashed clients left set: {}; each stuck client's \
             latest atomic word now: {})",
            out.stuck.len(),
            cfg.clients,
            ms(out.end_ns.saturating_sub(start)),
            if held.is_empty() { "none".to_string() } else { held.join(", ") },
            latest.join(", ")
        );
    }
    if cfg.memory_node_restart_ns > 0 {
        // Every key once more, after the rebuild: what the rebuilt replicas serve is checked too.
        let reader = sim.client_on_own_thread(0);
        let rec = Recorder {
            now: &now,
            history: Some(&history),
            client: u32::MAX - 1,
            value_size: cfg.value_size,
        };
        sim.set_faults(Faults::default());
        sim.block_on(async {
            for k in 0..cfg.universe() {
                rec.search(&handles[1], &reader, &cfg.key(k)).await?;
            }
            Ok::<(), IndexError>(())
        })?;
    }
    let held = sim.words_held_by_crashed();
    let stuck_on_held_lock = out
        .stuck
        .iter()
        .filter_map(|&t| clients.get(t).map(|c| c.transport().id()))
        .filter(|id| held.iter().any(|h| h.waiters.contains(id)))
        .count();
    // What each crash a survivor fenced took to recover from: history clients are numbered as
    // the run's clients, the simulator names clients by transport id.
    let ids: Vec<u32> = clients.iter().map(|c| c.transport().id()).collect();
    let mut repairs = Vec::new();
    for crash in sim.crashes() {
        let Some((by, fenced_at)) = crash.fenced else { continue };
        let fencer = ids.iter().position(|&id| id == by);
        let done = fencer.and_then(|i| history.first_return_after(i as u32, fenced_at));
        repairs.push(Recovery {
            fenced_ns: fenced_at.saturating_sub(crash.at_ns),
            recovered_ns: done.map(|t| t.saturating_sub(crash.at_ns)),
        });
    }
    let crashed = |i: &usize| out.crashed.contains(i);
    let survivors = (0..cfg.clients).filter(|i| !crashed(i));
    let round_trips = |i: usize| clients[i].stats().cost().round_trips;
    match history.check() {
        Ok(stats) => Ok(SeedReport {
            seed,
            stats,
            requested: cfg.clients as u64 * cfg.ops_per_client,
            completed: completed.get(),
            crashed: out.crashed.len(),
            crashed_clients: (0..cfg.clients).filter(crashed).count(),
            survivors_completed: survivors.clone().map(|i| done[i].get()).sum(),
            survivors_requested: survivors.count() as u64 * cfg.ops_per_client,
            round_trips: (0..cfg.clients).map(round_trips).sum(),
            crashed_round_trips: (0..cfg.clients).filter(crashed).map(round_trips).sum(),
            stuck: out.stuck.len(),
            stuck_on_held_lock,
            run_ns: out.end_ns.saturating_sub(start),
            memory_node_crash,
            rebuilt: rebuilt.get(),
            rebuild_crashed: repairing && out.crashed.contains(&cfg.clients),
            repairs,
            lease_ns: setup.transport().lease_ns(),
            trace_hash: sim.trace_hash(),
        }),
        Err(v) => bail!("history is not linearizable: {v}"),
    }
}

/// `ns` as milliseconds, for messages.
fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// Least share of requested operations a suite must check, unless every seed crashes clients.
pub const MIN_COVERAGE: f64 = 0.8;

/// Runs `seeds` (or only `DMINDEX_SEED` when set) and returns their sum; the first failing seed
/// panics with its replay command. With crashes on, at least one client must have crashed; unless
/// every seed crashes, at least [`MIN_COVERAGE`] of the requested operations must be checked.
pub fn suite<I, S>(name: &str, cfg: &CheckConfig, seeds: Range<u64>) -> Summary
where
    I: PointIndex<SimTransport>,
    S: Scans<SimTransport, I>,
{
    let sum = RefCell::new(Summary::default());
    let crashing = seeds.clone().any(|s| cfg.crashes.on(s));
    dmindex_sim::seeds::check_seeds(name, seeds, |seed| {
        let r = check_seed::<I, S>(cfg, seed).map_err(|e| format!("{e:#}"))?;
        sum.borrow_mut().add(&r);
        Ok(())
    });
    let sum = sum.into_inner();
    eprintln!("{name}: {sum}");
    if dmindex_sim::seeds::seed_override().is_none() {
        assert!(!crashing || sum.crashed > 0, "{name}: crashes were on and no client ever crashed");
        assert!(
            cfg.crashes == Crashes::EverySeed || sum.coverage() >= MIN_COVERAGE,
            "{name}: only {:.1} % of the requested operations were checked",
            100.0 * sum.coverage()
        );
    }
    sum
}

/// Counts its task as ended when dropped: at the task's end, or when a crash drops the task.
struct Ends<'a>(&'a Cell<usize>);

impl Drop for Ends<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}
