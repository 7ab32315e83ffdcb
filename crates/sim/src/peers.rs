//! Memory-node cores and the requests they serve, client-to-server and server-to-server.
//!
//! # The core model
//!
//! Each memory node has `mn_cores` cores and one FIFO of requests waiting for a core. A request
//! that reaches the node takes a free core at once or waits in the FIFO; a core that frees up
//! takes the FIFO's head. A request's service runs at the instant it starts (its memory effects
//! and the state its service keeps happen then) and keeps the core busy for `rpc_ns` plus
//! whatever CPU the service charged ([`MnContext::charge`]) plus its waits on its own calls to
//! peers; its reply leaves when all that is over. A service's code calls its peers and waits for
//! their answers, so the thread that runs it is held while it waits, as a blocking handler's
//! thread is: a design that hands the wait to another thread runs that part on another node's
//! or a worker's time, not inside the request. A request whose service waits as a continuation
//! ([`MnContext::continue_after_calls`], an eRPC handler's nested request) holds its core for
//! its CPU only, taken in one stretch from its start; its reply still leaves after its waits. CPU charged for work after the reply
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
//! both over, and the core is busy until then.
//!
//! # Batches
//!
//! A service that takes batches ([`dmindex_fabric::service::Service::batch_limit`]) is served
//! by [`Servers::serve_batch`]: requests that waited together in the node's FIFO run on one
//! core at one instant, their `rpc_ns` each plus what the batch charged and waited, and every
//! reply leaves when the batch is done. Running the peer's service at the caller's instant rather than at its arrival is
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

/// What serving a batch of requests together cost: every reply leaves at `done_ps`.
pub(crate) struct ServedBatch {
    pub(crate) replies: Vec<Result<Vec<u8>, FabricError>>,
    pub(crate) done_ps: u64,
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
        let (reply, done_ps, cpu_ps) =
            self.run(now, node, core, 1, |ctx| self.services.dispatch(ctx, service, request));
        Served { reply, done_ps, cpu_ps }
    }

    /// Runs `requests`, which waited together in `node`'s queue, at `now` on core `core`, as
    /// one batch ([`dmindex_fabric::service::Service::handle_batch`]): the core is busy for
    /// each request's `rpc_ns`, all they charged and their waits on peers, and every reply
    /// leaves when the batch is done.
    pub(crate) fn serve_batch(
        &self,
        now: u64,
        node: NodeId,
        core: usize,
        service: ServiceId,
        requests: &[&[u8]],
    ) -> ServedBatch {
        let n = requests.len() as u64;
        let (replies, done_ps, cpu_ps) = self
            .run(now, node, core, n, |ctx| self.services.dispatch_batch(ctx, service, requests));
        ServedBatch { replies, done_ps, cpu_ps }
    }

    /// Runs `dispatch` for `n` requests on `node` at `now` on `core`, which stays busy until
    /// the replies leave (the CPU and every wait on peers: the thread that waits for its
    /// peers' answers is held, as a blocking RPC handler is; a continuation's, for its CPU
    /// only) and then for the work left for after the reply, unless worker cores take that. What `dispatch` answered, when after
    /// `now` the replies leave, and the CPU part of that.
    fn run<R>(
        &self,
        now: u64,
        node: NodeId,
        core: usize,
        n: u64,
        dispatch: impl FnOnce(&MnContext<'_>) -> R,
    ) -> (R, u64, u64) {
        let peers = SimPeers { servers: self, node, clock: Cell::new(now) };
        let ctx = MnContext::new(node, &self.regions[node as usize]).with_peers(&peers);
        let reply = dispatch(&ctx);
        let rpc_ps = self.rpc_ps.saturating_mul(n);
        let cpu_ps = rpc_ps.saturating_add(ctx.charged_ns().saturating_mul(PS_PER_NS));
        let after_ps = ctx.charged_after_reply_ns().saturating_mul(PS_PER_NS);
        let waited = peers.clock.get() - now;
        let done_ps = cpu_ps.saturating_add(waited);
        // A continuation's core serves others while its calls are out: it is busy for the
        // request's CPU only, taken in one stretch from the start (the same core time as a
        // stretch before the calls and one after them; the reply's time is the same).
        let held_ps = if ctx.waits_hold_core() { done_ps } else { cpu_ps };
        let mut cores = self.cores.borrow_mut();
        let mut free = now.saturating_add(held_ps);
        cores.occupy(node as usize, core, now, free);
        if after_ps > 0 {
            // The request core frees up when its own work (and any left on it) is done.
            free = cores.after_reply(node as usize, core, free, after_ps).unwrap_or(free);
        }
        drop(cores);
        self.frees.borrow_mut().push((free, node, core as u32));
        (reply, done_ps, cpu_ps)
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use dmindex_fabric::layout;
    use dmindex_fabric::service::{Service, ServiceError};

    use super::*;

    const LOG: ServiceId = ServiceId(16);

    /// On node 0, a log that ships a batch of requests to nodes 1 and 2 in one message each
    /// and answers each request with itself; on the others, a 1 µs append that counts messages.
    #[derive(Default)]
    struct Log {
        messages: [AtomicU64; 3],
    }

    impl Service for Log {
        fn name(&self) -> &str {
            "log"
        }
        fn batch_limit(&self) -> usize {
            64
        }
        fn handle(&self, ctx: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
            self.handle_batch(ctx, &[r]).pop().expect("one answer")
        }
        fn handle_batch(
            &self,
            ctx: &MnContext<'_>,
            requests: &[&[u8]],
        ) -> Vec<Result<Vec<u8>, ServiceError>> {
            self.messages[ctx.node as usize].fetch_add(1, Ordering::Relaxed);
            if ctx.node != 0 {
                ctx.charge(1000);
                return requests.iter().map(|_| Ok(Vec::new())).collect();
            }
            let body = requests.concat();
            for r in ctx.peers.call_all(LOG, &[(1, &body), (2, &body)]) {
                r.expect("both backups answer");
            }
            requests.iter().map(|r| Ok(r.to_vec())).collect()
        }
    }

    /// A request's `rpc_ns` and a one-way trip between nodes, in the rigs below.
    const RPC: u64 = 100 * PS_PER_NS;
    const ONE_WAY: u64 = 1000 * PS_PER_NS;

    /// `nodes` memory nodes of one core each, no workers, `service` registered as [`LOG`].
    struct Rig {
        services: Services,
        regions: Vec<Region>,
        cores: RefCell<Cores>,
        frees: RefCell<Vec<(u64, u16, u32)>>,
        dead_at: Vec<u64>,
    }

    impl Rig {
        fn new(nodes: u16, service: Arc<dyn Service>) -> Rig {
            let mut services = Services::new(1);
            services.register(LOG, service).unwrap();
            let regions = (0..nodes)
                .map(|n| {
                    let r = Region::new(layout::MIN_REGION);
                    layout::format(&r, n);
                    r
                })
                .collect();
            Rig {
                services,
                regions,
                cores: RefCell::new(Cores::new(nodes, 1, 0)),
                frees: RefCell::new(Vec::new()),
                dead_at: vec![u64::MAX; nodes as usize],
            }
        }

        fn servers(&self) -> Servers<'_> {
            Servers {
                services: &self.services,
                regions: &self.regions,
                cores: &self.cores,
                frees: &self.frees,
                rpc_ps: RPC,
                one_way_ps: ONE_WAY,
                dead_at: &self.dead_at,
                timeout_ps: 100_000 * PS_PER_NS,
            }
        }
    }

    /// A batch of eight requests ships once to each backup, its replies leave together after
    /// eight requests' CPU and one round trip to the backups, and its one core is busy all
    /// that time, waits included.
    #[test]
    fn a_batch_ships_once_and_holds_its_core_through_the_wait() {
        let log = Arc::new(Log::default());
        let rig = Rig::new(3, log.clone());
        let (s, cores, frees) = (rig.servers(), &rig.cores, &rig.frees);
        let (rpc, one_way) = (RPC, ONE_WAY);
        let requests: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 3]).collect();
        let refs: Vec<&[u8]> = requests.iter().map(|r| &r[..]).collect();
        let b = s.serve_batch(0, 0, 0, LOG, &refs);
        let shipped: Vec<u64> = log.messages.iter().map(|m| m.load(Ordering::Relaxed)).collect();
        assert_eq!(shipped, [1, 1, 1], "one message to each backup for the whole batch");
        assert_eq!(b.replies.len(), 8);
        assert_eq!(b.replies[5].as_ref().unwrap(), &vec![5u8; 3]);
        let trip = 2 * one_way + rpc + 1000 * PS_PER_NS;
        assert_eq!((b.cpu_ps, b.done_ps), (8 * rpc, 8 * rpc + trip));
        let mut c = cores.borrow_mut();
        assert_eq!(c.free_at(0, 8 * rpc + 1), None, "held while it waits on the backups");
        assert_eq!(c.free_at(0, b.done_ps), Some(0));
        assert!(frees.borrow().contains(&(b.done_ps, 0, 0)));
        drop(c);
        let one = s.serve(b.done_ps, 0, 0, LOG, b"x");
        assert_eq!((one.reply.unwrap(), one.done_ps), (b"x".to_vec(), rpc + trip));
        assert_eq!(log.messages[1].load(Ordering::Relaxed), 2);
    }

    /// On node 0, asks node 1 one question as a continuation (an eRPC nested request) and
    /// answers; node 1 answers after 1 µs of CPU.
    struct Ask;

    impl Service for Ask {
        fn name(&self) -> &str {
            "ask"
        }
        fn handle(&self, ctx: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
            if ctx.node != 0 {
                ctx.charge(1000);
                return Ok(r.to_vec());
            }
            ctx.continue_after_calls();
            ctx.charge(300);
            ctx.peers.call(1, LOG, r).map_err(|e| ServiceError::Failed(e.to_string()))
        }
    }

    /// A continuation's reply leaves after its wait, as a blocking request's does, but its core
    /// is free again once its own CPU is done.
    #[test]
    fn a_continuation_frees_its_core_while_its_call_is_out() {
        let rig = Rig::new(2, Arc::new(Ask));
        let (s, cores, frees) = (rig.servers(), &rig.cores, &rig.frees);
        let (rpc, one_way) = (RPC, ONE_WAY);
        let served = s.serve(0, 0, 0, LOG, b"q");
        assert_eq!(served.reply.unwrap(), b"q".to_vec());
        let cpu = rpc + 300 * PS_PER_NS;
        let trip = 2 * one_way + rpc + 1000 * PS_PER_NS;
        assert_eq!((served.cpu_ps, served.done_ps), (cpu, cpu + trip));
        let mut c = cores.borrow_mut();
        assert_eq!(c.free_at(0, cpu), Some(0), "free while the question is out");
        assert!(frees.borrow().contains(&(cpu, 0, 0)));
    }
}
