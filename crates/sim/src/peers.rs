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
//! peer core with the first free instant from the call's arrival on (so a call waits behind the
//! peer's busy cores but not behind its FIFO: server-to-server traffic is served by the node's
//! worker threads, which the paper counts apart from its request threads). Cores keep their
//! busy intervals ([`crate::cores`]), so a call served ahead of the clock does not hold a core
//! before it starts. The call costs one way there, the peer's queueing and
//! CPU, and one way back; calls in one `call_all` run in parallel, successive ones in sequence.
//! The reply to the client leaves when the service's own CPU time and its waits on peers are
//! both over. Running the peer's service at the caller's instant rather than at its arrival is
//! the model's one shortcut: effects land up to one one-way delay early, which no client can
//! observe (it learns of them only through the caller's reply, which comes later).

use std::cell::{Cell, RefCell};

use dmindex_fabric::memory::Region;
use dmindex_fabric::service::{MnContext, Peers, ServiceId, Services};
use dmindex_fabric::{FabricError, NodeId};

use crate::cores::Cores;
use crate::world::PS_PER_NS;

/// What a verb, request or peer call that reached crashed node `node` fails with.
pub(crate) fn crashed(node: NodeId) -> FabricError {
    FabricError::Unavailable { node, reason: "memory node crashed (timed out)".into() }
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
        let mut free = now.saturating_add(cpu_ps);
        cores.occupy(node as usize, core, now, free);
        if after_ps > 0 {
            // The request core frees up when its own work (and any left on it) is done.
            free = cores.after_reply(node as usize, core, free, after_ps).unwrap_or(free);
        }
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
                let (core, start) = s.cores.borrow().earliest(node as usize, sent + s.one_way_ps);
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
