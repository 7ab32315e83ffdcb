//! # dmindex-sim: a deterministic disaggregated-memory fabric
//!
//! The simulator is both the correctness tool (every index is tested under it) and the
//! performance model (it predicts what an RDMA cluster would do). It is a transport behind the
//! same verb API as `local`: index code cannot tell them apart.
//!
//! ## Determinism
//!
//! One seed drives a portable RNG (ChaCha8); time is virtual; tasks run on one thread in the
//! order their verbs complete; events at one instant run in the order they were scheduled. No
//! wall clock, OS thread or hash-map iteration order is involved, so a seed replays exactly.
//! [`Sim::trace_hash`] folds every event (time, kind, op, line) and every value read into one
//! number; two runs with the same seed and workload give the same hash.
//!
//! ## Memory semantics (RDMA's, not stronger)
//!
//! * A READ samples each 64-byte line at its own random instant inside the READ's service
//!   interval, so a READ that overlaps a WRITE can return any mix of old and new lines.
//! * A WRITE's lines land one by one in increasing address order across its service interval.
//! * CAS, masked CAS and FAA apply at one instant; only aligned 8-byte words are atomic.
//! * Verbs from one client to one memory node arrive and start in issue order.
//!
//! ## The fabric model
//!
//! See [`world`] for a verb's path and [`config`] for the parameters and the `chime-testbed`
//! preset with the source of every number.
//!
//! ## Faults
//!
//! [`Faults`]: random extra delays on the way to the memory node and in the data phase
//! (stretching service intervals, so torn reads become common), and client crashes at verb
//! boundaries: the task is dropped mid-operation, and the verb or doorbell it was posting went
//! out or not (then a prefix of it lands; see [`Faults::crash_prob`]).
//!
//! Memory-node crashes ([`Sim::crash_memory_node`]): from its crash instant a node serves
//! nothing and everything that reaches it fails after a timeout (the `peers` module has the
//! details).
//!
//! ## Fast-forward
//!
//! [`Sim::set_direct`] makes verbs take effect at once, in no virtual time, with no faults and
//! no NIC accounting: how a paper-scale run fills memory (tens of millions of inserts through
//! the index's own code) before the phase it measures. Tasks then run one after another, each
//! to its end, so nothing waits on anything; the measured phase runs with the model on again.
//!
//! ## Replaying a failure
//!
//! [`seeds::check_seeds`] runs a property over many seeds and panics naming the first failing
//! seed; setting `DMINDEX_SEED=<seed>` re-runs just that one.

pub mod config;
mod cores;
mod executor;
mod link;
pub mod microbench;
mod pause;
mod peers;
pub mod phases;
pub mod presets;
pub mod report;
pub mod seeds;
mod transport;
pub mod world;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use dmindex_fabric::memory::Region;
use dmindex_fabric::{layout, Client, ClusterInfo, Fabric, GlobalAddr, Result, Services};

pub use config::{Faults, NetParams, SimConfig, DEFAULT_PRESET, PRESETS};
pub use executor::Task;
pub use report::SimReport;
pub use transport::SimTransport;
pub use world::crash::Crash;

use executor::Executor;
use world::{World, PS_PER_NS};

pub(crate) struct Shared {
    pub(crate) world: RefCell<World>,
    pub(crate) regions: Vec<Region>,
    pub(crate) services: Services,
    info: Arc<ClusterInfo>,
    config: SimConfig,
    /// Fast-forward: verbs act at once, outside the model ([`Sim::set_direct`]).
    pub(crate) direct: Cell<bool>,
}

/// A simulated cluster: memory nodes, NICs, and the clock. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Sim {
    shared: Rc<Shared>,
}

/// How a run ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOutcome {
    /// Tasks (by index in the run) that completed.
    pub finished: Vec<usize>,
    /// Tasks dropped because their client crashed.
    pub crashed: Vec<usize>,
    /// Tasks dropped when the deadline passed or nothing could ever wake them.
    pub stuck: Vec<usize>,
    /// Whether the run ended because virtual time passed the deadline (rather than because
    /// every task finished or crashed, or nothing left could ever be woken).
    pub deadline_passed: bool,
    /// Virtual time at the end of the run, in ns.
    pub end_ns: u64,
}

/// A word that a crashed client's last changing atomic set and that still holds that value —
/// typically a lock it took and never released — with the live clients whose latest atomic verb
/// targeted it (those spinning on it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldWord {
    /// The crashed client (its [`SimTransport::id`]).
    pub holder: u32,
    pub addr: GlobalAddr,
    pub waiters: Vec<u32>,
}

impl RunOutcome {
    /// Whether every task finished.
    pub fn all_finished(&self) -> bool {
        self.crashed.is_empty() && self.stuck.is_empty()
    }
}

impl Sim {
    /// A simulated cluster with the built-in memory-node services.
    pub fn new(config: SimConfig) -> Result<Sim, String> {
        let services = Services::new(config.net.mn_cores);
        Sim::with_services(config, services)
    }

    /// A simulated cluster running `services` on every memory node.
    pub fn with_services(config: SimConfig, services: Services) -> Result<Sim, String> {
        config.validate()?;
        let regions: Vec<Region> = (0..config.memory_nodes)
            .map(|id| {
                // Small pages: a simulated cluster's many clients each touch a little of their
                // chunk, and a huge page per chunk would dwarf the index (`Pages`).
                let r = Region::try_new(config.node_size)?;
                layout::format(&r, id);
                Ok(r)
            })
            .collect::<Result<_, String>>()?;
        let info = Arc::new(ClusterInfo { node_sizes: regions.iter().map(Region::len).collect() });
        let world =
            World::new(config.seed, config.net.clone(), config.faults.clone(), config.memory_nodes);
        Ok(Sim {
            shared: Rc::new(Shared {
                world: RefCell::new(world),
                regions,
                services,
                info,
                config,
                direct: Cell::new(false),
            }),
        })
    }

    /// The configuration of this run.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// A client on compute node `cn` running on a client thread of its own.
    pub fn client_on_own_thread(&self, cn: u16) -> Client<SimTransport> {
        self.make_client(cn, None)
    }

    /// A client on compute node `cn` sharing client thread `thread` (its CPU time for posting
    /// verbs) with the other clients given the same thread number, like coroutines of one thread.
    pub fn client_on(&self, cn: u16, thread: usize) -> Client<SimTransport> {
        self.make_client(cn, Some(thread))
    }

    fn make_client(&self, cn: u16, thread: Option<usize>) -> Client<SimTransport> {
        let id = self.shared.world.borrow_mut().add_client(cn, thread);
        let t = SimTransport { shared: Rc::clone(&self.shared), client: id };
        Client::new(t, Arc::clone(&self.shared.info), cn, self.shared.config.chunk_size)
    }

    /// Virtual time now, in ns.
    pub fn now_ns(&self) -> u64 {
        self.shared.world.borrow().now / PS_PER_NS
    }

    /// The trace hash so far: equal for equal runs.
    pub fn trace_hash(&self) -> u64 {
        self.shared.world.borrow().trace_hash
    }

    /// A memory node's memory, for inspection in tests.
    pub fn region(&self, node: u16) -> Option<&Region> {
        self.shared.regions.get(node as usize)
    }

    /// Replaces the fault settings from now on (e.g. after a fault-free setup phase).
    pub fn set_faults(&self, faults: Faults) {
        self.shared.world.borrow_mut().faults = faults;
    }

    /// Crashes memory node `node` at virtual instant `at_ns` (from now on if it has passed): it
    /// then serves nothing, and every verb, request or peer call that reaches it fails after
    /// [`world::MN_TIMEOUT_NS`] with [`dmindex_fabric::FabricError::Unavailable`]. Its memory
    /// and its services' state are lost to the cluster (never read again).
    pub fn crash_memory_node(&self, node: u16, at_ns: u64) -> Result<(), String> {
        let mut w = self.shared.world.borrow_mut();
        let nodes = w.dead_at.len();
        let at = at_ns.saturating_mul(PS_PER_NS).max(w.now);
        let slot = w
            .dead_at
            .get_mut(node as usize)
            .ok_or_else(|| format!("no memory node {node} (the cluster has {nodes})"))?;
        *slot = (*slot).min(at);
        Ok(())
    }

    /// Brings crashed memory node `node` back at virtual instant `at_ns` (from now on if it has
    /// passed) as a new server: its memory zeroed and formatted afresh, its services told to
    /// forget it ([`dmindex_fabric::service::Service::restarted`]). Clients connected before
    /// reach it again only after [`dmindex_fabric::Client::reconnect`]: until then their verbs
    /// to it fail as if it were down (an RDMA queue pair dies with its peer). Peer calls between
    /// memory nodes reach the new incarnation at once. The node must have been set to crash
    /// at or before `at_ns`.
    pub fn restart_memory_node(&self, node: u16, at_ns: u64) -> Result<(), String> {
        let mut w = self.shared.world.borrow_mut();
        let at = at_ns.saturating_mul(PS_PER_NS).max(w.now);
        match w.dead_at.get(node as usize) {
            None => Err(format!("no memory node {node} (the cluster has {})", w.dead_at.len())),
            Some(&dead) if dead > at => {
                Err(format!("memory node {node} is not set to crash before it restarts"))
            }
            Some(_) => {
                w.schedule_restart(node, at);
                Ok(())
            }
        }
    }

    /// Fast-forward on or off (see the crate docs): while on, every verb and request takes
    /// effect when posted, in no virtual time, with no faults, and is not seen by the NIC model,
    /// the trace hash or the simulation report (clients still count it).
    pub fn set_direct(&self, on: bool) {
        self.shared.direct.set(on);
    }

    /// Bytes handed out by the allocation service on all nodes (heap top minus heap start).
    pub fn allocated_bytes(&self) -> u64 {
        self.shared.regions.iter().map(layout::heap_used).sum()
    }

    /// A number from the simulation's RNG (for workload choices that must replay with the seed).
    pub fn random_u64(&self) -> u64 {
        self.shared.world.borrow_mut().uniform(u64::MAX)
    }

    /// Runs `tasks` until all finish, crash or can never be woken again.
    pub fn run<'a>(&self, tasks: impl IntoIterator<Item = Task<'a>>) -> RunOutcome {
        self.run_until(tasks, u64::MAX)
    }

    /// Runs `tasks` until all finish or crash, or virtual time passes `deadline_ns`; tasks left
    /// then are dropped and reported as stuck. Verbs already on the wire still land afterwards.
    pub fn run_until<'a>(
        &self,
        tasks: impl IntoIterator<Item = Task<'a>>,
        deadline_ns: u64,
    ) -> RunOutcome {
        self.run_until_with(tasks, |_| deadline_ns)
    }

    /// Runs `tasks` until all finish or crash, or virtual time passes a deadline that
    /// `deadline` may move: it is asked for the first one at the start and again each time
    /// virtual time passes the last one it gave (with the time then, in ns), so a caller can
    /// extend the run while it still makes progress. A deadline that virtual time has already
    /// passed ends the run; tasks left then are dropped and reported as stuck. `deadline` must
    /// not run anything on this `Sim` (it is asked from inside the run).
    pub fn run_until_with<'a>(
        &self,
        tasks: impl IntoIterator<Item = Task<'a>>,
        mut deadline: impl FnMut(u64) -> u64,
    ) -> RunOutcome {
        let first = deadline(self.now_ns());
        let mut deadline_ps = first.saturating_mul(PS_PER_NS);
        let mut exec = Executor::new(tasks.into_iter().collect());
        let mut out = RunOutcome::default();
        loop {
            while let Some(i) = exec.next_ready() {
                let finished = exec.poll(i);
                let mut w = self.shared.world.borrow_mut();
                if std::mem::take(&mut w.crash_current) {
                    drop(w);
                    exec.drop_task(i);
                    out.crashed.push(i);
                } else if finished {
                    out.finished.push(i);
                }
            }
            if exec.live() == 0 {
                break;
            }
            let mut w = self.shared.world.borrow_mut();
            if w.now > deadline_ps {
                // Asked with the world released: the caller may look at anything but the sim.
                let now_ns = w.now / PS_PER_NS;
                drop(w);
                deadline_ps = deadline(now_ns).saturating_mul(PS_PER_NS);
                w = self.shared.world.borrow_mut();
            }
            out.deadline_passed = w.now > deadline_ps;
            if out.deadline_passed || !w.step(&self.shared.regions, &self.shared.services) {
                drop(w);
                out.stuck = exec.drop_all();
                break;
            }
        }
        drop(exec);
        // Let verbs already on the wire land (zero-wait writes, crashed clients' verbs).
        let mut w = self.shared.world.borrow_mut();
        while w.has_events() && w.now <= deadline_ps {
            w.step(&self.shared.regions, &self.shared.services);
        }
        out.end_ns = w.now / PS_PER_NS;
        out
    }

    /// Runs one future to completion and returns its output.
    ///
    /// # Panics
    /// If the future's client crashed or it could never finish (a bug in the caller's setup).
    pub fn block_on<'a, R: 'a>(&self, fut: impl Future<Output = R> + 'a) -> R {
        let slot = Rc::new(RefCell::new(None));
        let s = Rc::clone(&slot);
        let outcome = self.run([Box::pin(async move {
            *s.borrow_mut() = Some(fut.await);
        }) as Task<'a>]);
        assert!(outcome.all_finished(), "block_on: the task did not finish: {outcome:?}");
        let r = slot.borrow_mut().take().expect("finished task left its result");
        r
    }

    /// For each client in `ids` (its [`SimTransport::id`]): the word its latest atomic verb
    /// targeted and the value there now — what a stuck client is most likely waiting on.
    pub fn latest_atomic_words(&self, ids: &[u32]) -> Vec<(u32, Option<(GlobalAddr, u64)>)> {
        let w = self.shared.world.borrow();
        ids.iter()
            .map(|&i| {
                let at = w.clients.get(i as usize).and_then(|c| c.last_atomic).map(|addr| {
                    let mut now = [0u8; 8];
                    self.shared.regions[addr.node() as usize].read(addr.offset(), &mut now);
                    (addr, u64::from_le_bytes(now))
                });
                (i, at)
            })
            .collect()
    }

    /// Words crashed clients set and left set, with the live clients spinning on each (see
    /// [`HeldWord`]): how a run explains clients stuck behind a crash.
    pub fn words_held_by_crashed(&self) -> Vec<HeldWord> {
        let w = self.shared.world.borrow();
        let mut out = Vec::new();
        for (holder, c) in w.clients.iter().enumerate() {
            let (true, Some((addr, set))) = (c.crashed, c.last_set) else { continue };
            let mut now = [0u8; 8];
            self.shared.regions[addr.node() as usize].read(addr.offset(), &mut now);
            if u64::from_le_bytes(now) != set {
                continue;
            }
            let waiters = (0..w.clients.len())
                .filter(|&i| !w.clients[i].crashed && w.clients[i].last_atomic == Some(addr))
                .map(|i| i as u32)
                .collect();
            out.push(HeldWord { holder: holder as u32, addr, waiters });
        }
        out
    }

    /// Every client crash so far, in order, each with the survivor that fenced its member and
    /// when, if one did ([`Crash`]): how `check` measures the time to recover from a crash.
    pub fn crashes(&self) -> Vec<Crash> {
        self.shared.world.borrow().crash_log.clone()
    }

    /// Where clients' time went per memory node since the last call (or the start), and a
    /// fresh start ([`phases::NodePhases`]).
    pub fn take_phases(&self) -> Vec<phases::NodePhases> {
        self.shared.world.borrow_mut().phases.take(world::PS_PER_NS)
    }

    /// Throughput, latency and NIC utilisation so far.
    pub fn report(&self) -> SimReport {
        SimReport::from_world(&self.shared.world.borrow())
    }
}

impl Fabric for Sim {
    type Transport = SimTransport;

    fn info(&self) -> &ClusterInfo {
        &self.shared.info
    }

    fn client(&self, cn: u16) -> Result<Client<SimTransport>> {
        Ok(self.client_on_own_thread(cn))
    }
}
