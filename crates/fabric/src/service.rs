//! Two-sided services run by a memory node's (few, weak) CPU cores.
//!
//! Most of dmindex is one-sided, but some things need the memory node's CPU: handing out chunks of
//! memory (every design), and the log apply and replication of HiStore. A [`Service`] answers a
//! request with a reply; a memory node runs the services registered in its [`Services`] table on
//! a modelled handful of cores ([`Services::cores`]), so a design that leans on MN CPU pays for it.
//!
//! # Built-in services
//!
//! | id | name | request | reply |
//! |----|------|---------|-------|
//! | 0 | [`ALLOC_CHUNK`] | `len: u64, align: u64` (LE) | `offset: u64` (LE) of a fresh, zeroed range |
//! | 1 | [`NODE_INFO`] | empty | the 64-byte superblock ([`crate::layout::Superblock`]) |
//!
//! Ids below [`FIRST_USER_SERVICE`] are reserved for the fabric.
//!
//! # Server to server
//!
//! A service may call services on other memory nodes through [`MnContext::peers`] (HiStore's
//! primary ships its log to its backups). [`Peers::call_all`] sends requests to several nodes at
//! once and waits for every answer: one round trip on the wire, whatever the number of nodes.
//! The in-process transports answer such calls by running the peer's service on the calling
//! thread ([`InProcessPeers`]); the simulator also charges the wire and the peer's core.
//! A service that needs more CPU than a plain request says so with [`MnContext::charge`], which
//! the simulator adds to the core's busy time and to the reply's delay (others ignore it); work
//! charged inside [`MnContext::after_reply`] keeps the core busy without delaying the reply.
//! A request's waits on its peers hold its core (a blocking handler's thread), unless the
//! service says it waits as a continuation ([`MnContext::continue_after_calls`]: eRPC's nested
//! requests, whose handler returns and resumes when the answer comes).
//!
//! # Batches
//!
//! A service may take several of its requests at once ([`Service::batch_limit`],
//! [`Service::handle_batch`]): the simulator's core, when it frees up, takes every queued
//! request of that service up to the limit, so that requests that arrived together share work
//! (HiStore's group commit ships a batch of writes in one message per backup); it takes only
//! requests of the same [`Service::batch_key`]. The in-process
//! transport and the UCX memnode server serve one request at a time, each a batch of one; the
//! default `handle_batch` answers a batch one request after the other.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use crate::addr::{align_up, NodeId};
use crate::error::FabricError;
use crate::layout::{self, HEAP_TOP_OFFSET};
use crate::verbs::AtomicOp;

// Defined in modules below this one (the error type and the verbs name services too), and
// re-exported here, where services are.
pub use crate::ids::{ServiceId, ALLOC_CHUNK, FIRST_USER_SERVICE, NODE_INFO};
pub use crate::memory::MnMemory;

/// Largest alignment an allocation may ask for (1 GiB).
pub const MAX_ALIGN: u64 = 1 << 30;

/// What a service sees of the node it runs on.
pub struct MnContext<'a> {
    /// The node's id.
    pub node: NodeId,
    /// The node's memory.
    pub memory: &'a dyn MnMemory,
    /// The other memory nodes' services.
    pub peers: &'a dyn Peers,
    cpu_ns: Cell<u64>,
    /// CPU charged for work after the reply (see [`MnContext::after_reply`]).
    after_ns: Cell<u64>,
    in_after: Cell<bool>,
    /// Whether the request's waits on peers leave its core free ([`MnContext::continue_after_calls`]).
    continues: Cell<bool>,
}

impl<'a> MnContext<'a> {
    /// A context on `node` with no peer links.
    pub fn new(node: NodeId, memory: &'a dyn MnMemory) -> MnContext<'a> {
        MnContext {
            node,
            memory,
            peers: &NoPeers,
            cpu_ns: Cell::new(0),
            after_ns: Cell::new(0),
            in_after: Cell::new(false),
            continues: Cell::new(false),
        }
    }

    /// The same context reaching other nodes through `peers`.
    pub fn with_peers(self, peers: &'a dyn Peers) -> MnContext<'a> {
        MnContext { peers, ..self }
    }

    /// Adds `ns` of CPU time to the request being served (beyond a plain request's).
    pub fn charge(&self, ns: u64) {
        let c = if self.in_after.get() { &self.after_ns } else { &self.cpu_ns };
        c.set(c.get().saturating_add(ns));
    }

    /// Runs `f` as work the node does after it answers (a backup applying its log
    /// asynchronously): what `f` charges keeps a core busy but does not delay the reply.
    pub fn after_reply<R>(&self, f: impl FnOnce() -> R) -> R {
        let was = self.in_after.replace(true);
        let r = f();
        self.in_after.set(was);
        r
    }

    /// Marks the request's calls to peers as a continuation's: the core serves other requests
    /// while their answers are out, and resumes this one when they are in (an eRPC handler
    /// that sends a nested request and returns). Without it the core is held through every
    /// wait, as a thread blocked on its calls is. Only the simulator's timing depends on it.
    pub fn continue_after_calls(&self) {
        self.continues.set(true);
    }

    /// Whether the request's waits on peers hold its core (see
    /// [`MnContext::continue_after_calls`]).
    pub fn waits_hold_core(&self) -> bool {
        !self.continues.get()
    }

    /// CPU time charged so far before the reply.
    pub fn charged_ns(&self) -> u64 {
        self.cpu_ns.get()
    }

    /// CPU time charged so far for work after the reply.
    pub fn charged_after_reply_ns(&self) -> u64 {
        self.after_ns.get()
    }
}

/// How a service reaches the services of other memory nodes.
pub trait Peers {
    /// Sends each (node, request) of `calls` to `service` on its node, all at once, and waits
    /// for every answer (in the order of `calls`). A node that cannot be reached answers with an
    /// error.
    fn call_all(
        &self,
        service: ServiceId,
        calls: &[(NodeId, &[u8])],
    ) -> Vec<Result<Vec<u8>, FabricError>>;

    /// [`Peers::call_all`] to one node.
    fn call(
        &self,
        node: NodeId,
        service: ServiceId,
        request: &[u8],
    ) -> Result<Vec<u8>, FabricError> {
        self.call_all(service, &[(node, request)]).pop().expect("one answer per call")
    }
}

/// A node with no links to its peers: every call fails.
pub struct NoPeers;

impl Peers for NoPeers {
    fn call_all(
        &self,
        service: ServiceId,
        calls: &[(NodeId, &[u8])],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        let refuse = |node| FabricError::Service {
            node,
            service,
            message: "this memory node has no links to other memory nodes".into(),
        };
        calls.iter().map(|&(n, _)| Err(refuse(n))).collect()
    }
}

/// Peers in this process: a call runs the peer's service on the calling thread, at once.
pub struct InProcessPeers<'a> {
    services: &'a Services,
    memory: &'a dyn Fn(NodeId) -> Option<&'a dyn MnMemory>,
    nodes: u16,
}

impl<'a> InProcessPeers<'a> {
    /// Peers among `nodes` nodes whose memory `memory` gives, all running `services`.
    pub fn new(
        services: &'a Services,
        nodes: u16,
        memory: &'a dyn Fn(NodeId) -> Option<&'a dyn MnMemory>,
    ) -> InProcessPeers<'a> {
        InProcessPeers { services, memory, nodes }
    }

    /// Runs one request on `node` now; also returns the CPU time its service charged.
    pub fn run(
        &self,
        node: NodeId,
        service: ServiceId,
        request: &[u8],
    ) -> (Result<Vec<u8>, FabricError>, u64) {
        let Some(memory) = (self.memory)(node) else {
            return (Err(FabricError::UnknownNode { node, nodes: self.nodes }), 0);
        };
        let ctx = MnContext::new(node, memory).with_peers(self);
        let reply = self.services.dispatch(&ctx, service, request);
        (reply, ctx.charged_ns())
    }
}

impl Peers for InProcessPeers<'_> {
    fn call_all(
        &self,
        service: ServiceId,
        calls: &[(NodeId, &[u8])],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        calls.iter().map(|&(n, request)| self.run(n, service, request).0).collect()
    }
}

/// Why a service refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceError {
    /// Not enough memory left.
    OutOfMemory { requested: u64, available: u64 },
    /// The request was malformed.
    BadRequest(String),
    /// Anything else.
    Failed(String),
}

impl ServiceError {
    /// The fabric error a client sees.
    pub fn into_fabric(self, node: NodeId, service: ServiceId) -> FabricError {
        match self {
            ServiceError::OutOfMemory { requested, available } => {
                FabricError::OutOfMemory { node, requested, available }
            }
            ServiceError::BadRequest(m) => {
                FabricError::Service { node, service, message: format!("bad request: {m}") }
            }
            ServiceError::Failed(message) => FabricError::Service { node, service, message },
        }
    }
}

/// A request handler run by a memory node's CPU.
pub trait Service: Send + Sync {
    /// Short name for logs.
    fn name(&self) -> &str;
    /// Answer one request.
    fn handle(&self, ctx: &MnContext<'_>, request: &[u8]) -> Result<Vec<u8>, ServiceError>;
    /// Memory node `node` came back after a crash with empty memory: forget whatever this
    /// service kept for it (a restarted server process starts with nothing).
    fn restarted(&self, _node: NodeId) {}
    /// Most requests of this service that a core takes from its node's queue at once
    /// ([`Service::handle_batch`]); 1 (the default): one at a time.
    fn batch_limit(&self) -> usize {
        1
    }
    /// Which batch `request` may join: a core takes together only queued requests of the same
    /// key (HiStore's: the log a write goes to, so that each core ships one log's entries as
    /// the paper's worker threads do). `None` (the default): served alone.
    fn batch_key(&self, _request: &[u8]) -> Option<u64> {
        None
    }
    /// Answers requests that waited together for a core, one reply each, in order. Their
    /// replies leave together, when the whole batch is done. The default answers them one
    /// after the other; a service overrides it to share work among them (HiStore's primary
    /// ships the log entries of a batch of writes in one message per backup).
    fn handle_batch(
        &self,
        ctx: &MnContext<'_>,
        requests: &[&[u8]],
    ) -> Vec<Result<Vec<u8>, ServiceError>> {
        requests.iter().map(|r| self.handle(ctx, r)).collect()
    }
}

/// The services a memory node runs and the cores it runs them on.
#[derive(Clone)]
pub struct Services {
    table: Vec<Option<Arc<dyn Service>>>,
    cores: usize,
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self
            .table
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| format!("{i}:{}", s.name())))
            .collect();
        f.debug_struct("Services").field("cores", &self.cores).field("table", &names).finish()
    }
}

impl Services {
    /// The built-in services on `cores` MN cores (at least one).
    pub fn new(cores: usize) -> Services {
        let mut s = Services { table: Vec::new(), cores: cores.max(1) };
        s.install(ALLOC_CHUNK, Arc::new(ChunkAllocator));
        s.install(NODE_INFO, Arc::new(NodeInfo));
        s
    }

    /// Number of MN cores that run requests.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Adds an index-specific service. Ids below [`FIRST_USER_SERVICE`] and taken ids are refused.
    pub fn register(&mut self, id: ServiceId, service: Arc<dyn Service>) -> Result<(), String> {
        if id.0 < FIRST_USER_SERVICE {
            return Err(format!("service id {id} is reserved for the fabric"));
        }
        if self.get(id).is_some() {
            return Err(format!("service id {id} is already registered"));
        }
        self.install(id, service);
        Ok(())
    }

    fn install(&mut self, id: ServiceId, service: Arc<dyn Service>) {
        let i = id.0 as usize;
        if self.table.len() <= i {
            self.table.resize(i + 1, None);
        }
        self.table[i] = Some(service);
    }

    /// The service with this id.
    pub fn get(&self, id: ServiceId) -> Option<&Arc<dyn Service>> {
        self.table.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// Tells every service that memory node `node` restarted empty ([`Service::restarted`]).
    pub fn restarted(&self, node: NodeId) {
        for s in self.table.iter().flatten() {
            s.restarted(node);
        }
    }

    /// Most queued requests of service `id` one core takes at once ([`Service::batch_limit`]);
    /// 1 for an unknown service.
    pub fn batch_limit(&self, id: ServiceId) -> usize {
        self.get(id).map_or(1, |s| s.batch_limit().max(1))
    }

    /// Which batch `request` to service `id` may join ([`Service::batch_key`]); `None`: alone.
    pub fn batch_key(&self, id: ServiceId, request: &[u8]) -> Option<u64> {
        self.get(id).and_then(|s| s.batch_key(request))
    }

    /// Runs requests that waited together on the calling thread ([`Service::handle_batch`]);
    /// one answer each, in order (the caller accounts for MN cores).
    pub fn dispatch_batch(
        &self,
        ctx: &MnContext<'_>,
        id: ServiceId,
        requests: &[&[u8]],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        let Some(service) = self.get(id) else {
            let err = FabricError::UnknownService { node: ctx.node, service: id };
            return requests.iter().map(|_| Err(err.clone())).collect();
        };
        let replies = service.handle_batch(ctx, requests);
        assert_eq!(replies.len(), requests.len(), "service {id} answered a batch short");
        replies.into_iter().map(|r| r.map_err(|e| e.into_fabric(ctx.node, id))).collect()
    }

    /// Runs one request on the calling thread (the caller accounts for MN cores).
    pub fn dispatch(
        &self,
        ctx: &MnContext<'_>,
        id: ServiceId,
        request: &[u8],
    ) -> Result<Vec<u8>, FabricError> {
        let service =
            self.get(id).ok_or(FabricError::UnknownService { node: ctx.node, service: id })?;
        service.handle(ctx, request).map_err(|e| e.into_fabric(ctx.node, id))
    }
}

/// Encodes an [`ALLOC_CHUNK`] request.
pub fn alloc_request(len: u64, align: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&len.to_le_bytes());
    b[8..].copy_from_slice(&align.to_le_bytes());
    b
}

/// Decodes a reply that is one little-endian word.
pub fn decode_word(reply: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(reply.try_into().ok()?))
}

/// [`ALLOC_CHUNK`]: bumps the heap top in the superblock with CAS (the MN's cores may race).
struct ChunkAllocator;

impl Service for ChunkAllocator {
    fn name(&self) -> &str {
        "alloc-chunk"
    }

    fn handle(&self, ctx: &MnContext<'_>, request: &[u8]) -> Result<Vec<u8>, ServiceError> {
        if request.len() != 16 {
            return Err(ServiceError::BadRequest(format!(
                "alloc request is 16 bytes, got {}",
                request.len()
            )));
        }
        let len = decode_word(&request[..8]).expect("8 bytes");
        let align = decode_word(&request[8..]).expect("8 bytes");
        Ok(alloc_local(ctx.memory, len, align)?.to_le_bytes().to_vec())
    }
}

/// Takes `len` fresh, zeroed bytes aligned to `align` from the heap of the node whose memory is
/// `memory`: what [`ALLOC_CHUNK`] does, for a service allocating on its own node.
pub fn alloc_local(memory: &dyn MnMemory, len: u64, align: u64) -> Result<u64, ServiceError> {
    if len == 0 {
        return Err(ServiceError::BadRequest("zero-length allocation".into()));
    }
    if !align.is_power_of_two() || !(8..=MAX_ALIGN).contains(&align) {
        return Err(ServiceError::BadRequest(format!(
            "alignment {align} is not a power of two in 8..={MAX_ALIGN}"
        )));
    }
    let size = memory.size();
    let mut top = memory.atomic(HEAP_TOP_OFFSET, AtomicOp::Faa { delta: 0 });
    loop {
        let start = align_up(top, align);
        let end =
            start.checked_add(len).filter(|&e| e <= size).ok_or(ServiceError::OutOfMemory {
                requested: len,
                available: size.saturating_sub(top),
            })?;
        let old = memory.atomic(HEAP_TOP_OFFSET, AtomicOp::Cas { expected: top, new: end });
        if old == top {
            return Ok(start);
        }
        top = old;
    }
}

/// [`NODE_INFO`]: the superblock bytes.
struct NodeInfo;

impl Service for NodeInfo {
    fn name(&self) -> &str {
        "node-info"
    }

    fn handle(&self, ctx: &MnContext<'_>, _request: &[u8]) -> Result<Vec<u8>, ServiceError> {
        let mut b = vec![0u8; layout::SUPERBLOCK_LEN as usize];
        ctx.memory.read(0, &mut b);
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Region;

    fn node(len: u64) -> Region {
        let r = Region::new(len);
        layout::format(&r, 0);
        r
    }

    #[test]
    fn allocator_bumps_aligned_and_refuses_overflow() {
        let r = node(layout::MIN_REGION);
        let s = Services::new(2);
        let ctx = MnContext::new(0, &r);
        let a = decode_word(&s.dispatch(&ctx, ALLOC_CHUNK, &alloc_request(100, 8)).unwrap());
        assert_eq!(a, Some(layout::HEAP_START));
        let b = decode_word(&s.dispatch(&ctx, ALLOC_CHUNK, &alloc_request(8, 4096)).unwrap());
        assert_eq!(b, Some(layout::HEAP_START + 4096));
        let err = s.dispatch(&ctx, ALLOC_CHUNK, &alloc_request(1 << 20, 8)).unwrap_err();
        assert!(matches!(err, FabricError::OutOfMemory { node: 0, requested: 1048576, .. }));
        let err = s.dispatch(&ctx, ALLOC_CHUNK, &alloc_request(8, 3)).unwrap_err();
        assert!(err.to_string().contains("alignment 3"), "{err}");
        let err = s.dispatch(&ctx, ALLOC_CHUNK, &[1, 2]).unwrap_err();
        assert!(err.to_string().contains("16 bytes"), "{err}");
        let err = s.dispatch(&ctx, ServiceId(99), &[]).unwrap_err();
        assert_eq!(err, FabricError::UnknownService { node: 0, service: ServiceId(99) });
    }

    #[test]
    fn registration_rules() {
        struct Echo;
        impl Service for Echo {
            fn name(&self) -> &str {
                "echo"
            }
            fn handle(&self, _: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
                Ok(r.to_vec())
            }
        }
        let mut s = Services::new(0);
        assert_eq!(s.cores(), 1);
        assert!(s.register(ServiceId(3), Arc::new(Echo)).unwrap_err().contains("reserved"));
        s.register(ServiceId(16), Arc::new(Echo)).unwrap();
        assert!(s.register(ServiceId(16), Arc::new(Echo)).unwrap_err().contains("already"));
        let r = node(layout::MIN_REGION);
        let ctx = MnContext::new(0, &r);
        assert_eq!(s.dispatch(&ctx, ServiceId(16), b"hi").unwrap(), b"hi");
        assert!(format!("{s:?}").contains("16:echo"));
    }

    /// A batch is answered request by request by default, in order, one reply each; an unknown
    /// service refuses every request of a batch.
    #[test]
    fn a_batch_is_answered_in_order_one_reply_each() {
        struct Echo;
        impl Service for Echo {
            fn name(&self) -> &str {
                "echo"
            }
            fn handle(&self, ctx: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
                ctx.charge(5);
                match r {
                    [] => Err(ServiceError::Failed("empty".into())),
                    _ => Ok(vec![r[0], r.len() as u8]),
                }
            }
        }
        let mut s = Services::new(1);
        s.register(ServiceId(16), Arc::new(Echo)).unwrap();
        assert_eq!((s.batch_limit(ServiceId(16)), s.batch_limit(ServiceId(99))), (1, 1));
        assert_eq!(s.batch_key(ServiceId(16), b"x"), None, "alone by default");
        let r = node(layout::MIN_REGION);
        let ctx = MnContext::new(0, &r);
        let out = s.dispatch_batch(&ctx, ServiceId(16), &[b"ab", b"", b"c"]);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], Ok(b"a\x02".to_vec()));
        assert!(out[1].as_ref().unwrap_err().to_string().contains("empty"), "{out:?}");
        assert_eq!(out[2], Ok(b"c\x01".to_vec()));
        assert_eq!(ctx.charged_ns(), 15, "each request charged its own work");
        let out = s.dispatch_batch(&ctx, ServiceId(99), &[b"x", b"y"]);
        let unknown = FabricError::UnknownService { node: 0, service: ServiceId(99) };
        assert_eq!(out, vec![Err(unknown.clone()), Err(unknown)]);
    }

    /// A service reaching another node through in-process peers sees that node's memory; with
    /// no peer links the call is refused, naming the node.
    #[test]
    fn in_process_peers_run_the_peer_service_on_its_memory() {
        struct AskPeer;
        impl Service for AskPeer {
            fn name(&self) -> &str {
                "ask-peer"
            }
            fn handle(&self, ctx: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
                ctx.charge(7);
                match r.first() {
                    Some(&n) => ctx
                        .peers
                        .call(n as NodeId, NODE_INFO, &[])
                        .map_err(|e| ServiceError::Failed(e.to_string())),
                    None => Ok(vec![ctx.node as u8]),
                }
            }
        }
        let mut s = Services::new(1);
        s.register(ServiceId(16), Arc::new(AskPeer)).unwrap();
        let (a, b) = (node(layout::MIN_REGION), Region::new(layout::MIN_REGION));
        layout::format(&b, 1);
        let memory = |n: NodeId| match n {
            0 => Some(&a as &dyn MnMemory),
            1 => Some(&b as &dyn MnMemory),
            _ => None,
        };
        let peers = InProcessPeers::new(&s, 2, &memory);
        let (info, charged) = peers.run(0, ServiceId(16), &[1]);
        let mut want = vec![0u8; layout::SUPERBLOCK_LEN as usize];
        b.read(0, &mut want);
        assert_eq!((info.unwrap(), charged), (want, 7));
        let (err, _) = peers.run(0, ServiceId(16), &[5]);
        assert!(err.unwrap_err().to_string().contains("unknown memory node 5"));
        let ctx = MnContext::new(0, &a);
        let err = s.dispatch(&ctx, ServiceId(16), &[1]).unwrap_err();
        assert!(err.to_string().contains("no links to other memory nodes"), "{err}");
    }
}
