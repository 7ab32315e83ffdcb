//! Memory-node cores and the requests they serve, client-to-server and server-to-server.
//!
//! # The core model
//!
//! Each memory node has `mn_cores` cores and one FIFO of requests waiting for a core. A request
//! that reaches the node takes a free core at once or waits in the FIFO; a core that frees up
//! takes the FIFO's head. A request's service runs at the instant it starts (its memory effects
//! and the state its service keeps happen then) and keeps the core busy for `rpc_ns` plus
//! whatever CPU the service charged ([`MnContext::charge`]); its reply leaves when that CPU
//! time (and any wait on peers) is over. CPU charged for work after the reply
//! ([`MnContext::after_reply`]) goes to the node's `mn_workers` worker cores, the one that frees
//! up first (its backlog delays no request: the paper's asynchronous worker threads), or, with
//! no workers, keeps the request's own core busy longer; either way it does not delay the reply.
//!
//! # Crashes
//!
//! A crashed node ([`crate::Sim::crash_memory_node`]) serves nothing from its crash on: verbs
//! and requests that reach it, requests queued on it, and peer calls to it fail after
//! [`crate::world::MN_TIMEOUT_NS`]. A request it was serving when it crashed keeps the effects
//! that happened before (including the peer calls that completed) and loses its reply; a peer
//! call whose caller crashes while it waits returns an error to the caller, so the caller's
//! service does nothing after the crash instant. A crash within a timeout of a `call_all` also
//! cuts its sending short: each of its calls reaches its peer or not, by a coin drawn from the
//! crash instant, so that a primary's crash between its SHIPs leaves backups with different logs.
//! A crashed node may restart ([`crate::Sim::restart_memory_node`]) as a new, empty server: peer
//! calls reach it at once (server-to-server sessions reconnect on their own), clients only
//! after they reconnect, and effects of verbs that reached the old incarnation are dropped.
//!
//! # Server to server
//!
//! A service's calls to other nodes ([`Peers::call_all`]) run the peer's service at once, on the
//! peer core that frees up first (so a call waits behind the peer's busy cores but not behind its
//! FIFO: server-to-server traffic is served by the node's worker threads, which the paper
//! counts apart from its request threads). The call costs one way there, the peer's queueing and
//! CPU, and one way back; calls in one `call_all` run in parallel, successive ones in sequence.
//! The reply to the client leaves when the service's own CPU time and its waits on peers are
//! both over. Running the peer's service at the caller's instant rather than at its arrival is
//! the model's one shortcut: effects land up to one one-way delay early, which no client can
//! observe (it learns of them only through the caller's reply, which comes later).

use std::cell::{Cell, RefCell};

use dmindex_fabric::memory::Region;
use dmindex_fabric::service::{MnContext, Peers, ServiceId, Services};
use dmindex_fabric::{FabricError, NodeId};

use crate::world::PS_PER_NS;

/// What a verb, request or peer call that reached crashed node `node` fails with.
pub(crate) fn crashed(node: NodeId) -> FabricError {
    FabricError::Unavailable { node, reason: "memory node crashed (timed out)".into() }
}

/// The cores of every memory node: when each is busy until.
#[derive(Debug)]
pub(crate) struct Cores {
    busy_until: Vec<Vec<u64>>,
    /// Per node, when each worker core (work after replies only) is busy until.
    workers: Vec<Vec<u64>>,
}

impl Cores {
    pub(crate) fn new(nodes: u16, cores: usize, workers: usize) -> Cores {
        Cores {
            busy_until: vec![vec![0; cores.max(1)]; nodes as usize],
            workers: vec![vec![0; workers]; nodes as usize],
        }
    }

    /// Work of `ps` that a request left for after its reply at `from`: on the worker core of
    /// `node` that frees up first, else (no workers) on the request's own `core`.
    fn after_reply(&mut self, node: usize, core: usize, from: u64, ps: u64) -> u64 {
        let pool = match self.workers[node].is_empty() {
            true => &mut self.busy_until[node][core..=core],
            false => &mut self.workers[node][..],
        };
        let t = pool.iter_mut().min_by_key(|t| **t).expect("a core");
        *t = (*t).max(from).saturating_add(ps);
        *t
    }

    /// A core of `node` free at `now`, if any.
    pub(crate) fn free_at(&self, node: usize, now: u64) -> Option<usize> {
        self.busy_until[node].iter().position(|&t| t <= now)
    }

    /// The core of `node` that frees up first, and when.
    fn earliest(&self, node: usize) -> (usize, u64) {
        let (core, &t) = self.busy_until[node]
            .iter()
            .enumerate()
            .min_by_key(|&(_, t)| *t)
            .expect("at least one core");
        (core, t)
    }

    /// Every core of `node` free from `now` (the node restarted; what ran there is gone).
    pub(crate) fn reset(&mut self, node: usize, now: u64) {
        for t in self.busy_until[node].iter_mut().chain(&mut self.workers[node]) {
            *t = now;
        }
    }

    fn occupy(&mut self, node: usize, core: usize, until: u64) {
        let t = &mut self.busy_until[node][core];
        *t = (*t).max(until);
    }
}

/// What serving one request cost, in picoseconds from its start.
pub(crate) struct Served {
    pub(crate) reply: Result<Vec<u8>, FabricError>,
    /// When, after its start, the reply leaves (CPU and waits on peers).
    pub(crate) done_ps: u64,
    /// The CPU time before the reply (the rest of `done_ps` is waits on peers).
    pub(crate) cpu_ps: u64,
}

/// The memory nodes' services, memory and cores, and the times a request and a peer call take.
pub(crate) struct Servers<'a> {
    pub(crate) services: &'a Services,
    pub(crate) regions: &'a [Region],
    pub(crate) cores: &'a RefCell<Cores>,
    /// Collects every (instant, node, core) at which a core a request occupied frees up.
    pub(crate) frees: &'a RefCell<Vec<(u64, u16, u32)>>,
    pub(crate) rpc_ps: u64,
    pub(crate) one_way_ps: u64,
    /// Per node, the instant it crashes.
    pub(crate) dead_at: &'a [u64],
    /// How long a call to a crashed node waits before it fails.
    pub(crate) timeout_ps: u64,
}

impl Servers<'_> {
    /// Runs one request on `node` at `now`, on core `core`, which it marks busy.
    pub(crate) fn serve(
        &self,
        now: u64,
        node: NodeId,
        core: usize,
        service: ServiceId,
        request: &[u8],
    ) -> Served {
        let peers = SimPeers { servers: self, node, clock: Cell::new(now) };
        let ctx = MnContext::new(node, &self.regions[node as usize]).with_peers(&peers);
        let reply = self.services.dispatch(&ctx, service, request);
        let cpu_ps = self.rpc_ps.saturating_add(ctx.charged_ns().saturating_mul(PS_PER_NS));
        let after_ps = ctx.charged_after_reply_ns().saturating_mul(PS_PER_NS);
        let mut cores = self.cores.borrow_mut();
        cores.occupy(node as usize, core, now.saturating_add(cpu_ps));
        if after_ps > 0 {
            cores.after_reply(node as usize, core, now.saturating_add(cpu_ps), after_ps);
        }
        // The request core frees up when its own work (and any left on it) is done.
        let free = cores.busy_until[node as usize][core];
        drop(cores);
        self.frees.borrow_mut().push((free, node, core as u32));
        let waited = peers.clock.get() - now;
        Served { reply, done_ps: cpu_ps + waited, cpu_ps }
    }
}

/// The peers one request's service sees: each call advances the request's own clock.
struct SimPeers<'a> {
    servers: &'a Servers<'a>,
    /// The node whose service makes the calls.
    node: NodeId,
    /// When the calling service's latest peer answer arrived.
    clock: Cell<u64>,
}

impl Peers for SimPeers<'_> {
    fn call_all(
        &self,
        service: ServiceId,
        calls: &[(NodeId, &[u8])],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        let sent = self.clock.get();
        let mut back = sent;
        let s = self.servers;
        let caller_dead = s.dead_at[self.node as usize];
        if caller_dead <= sent {
            return calls.iter().map(|_| Err(crashed(self.node))).collect();
        }
        // A crash while the calls are out may have cut the sending short: each call then
        // reaches its peer or not, by a coin from the crash instant (BUGGIFY-style: far more
        // often than a real NIC's few-nanosecond window, so that peers' states diverge).
        let cut_short = caller_dead <= sent.saturating_add(s.timeout_ps);
        let replies = calls
            .iter()
            .enumerate()
            .map(|(i, &(node, request))| {
                if node as usize >= s.regions.len() {
                    return Err(FabricError::UnknownNode { node, nodes: s.regions.len() as u16 });
                }
                let coin = caller_dead.wrapping_add(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                if cut_short && coin >> 63 == 1 {
                    return Err(crashed(self.node));
                }
                if sent + s.one_way_ps >= s.dead_at[node as usize] {
                    back = back.max(sent + s.timeout_ps);
                    return Err(crashed(node));
                }
                let (core, free) = s.cores.borrow().earliest(node as usize);
                let start = (sent + s.one_way_ps).max(free);
                let served = s.serve(start, node, core, service, request);
                if start + served.done_ps >= s.dead_at[node as usize] {
                    back = back.max(sent + s.timeout_ps);
                    return Err(crashed(node));
                }
                back = back.max(start + served.done_ps + s.one_way_ps);
                served.reply
            })
            .collect();
        self.clock.set(back);
        if back >= self.servers.dead_at[self.node as usize] {
            // The caller crashed while it waited: nothing after this call happens.
            return calls.iter().map(|_| Err(crashed(self.node))).collect();
        }
        replies
    }
}
