//! The `local` transport: memory nodes in this process, shared by any number of threads.
//!
//! This is the embedded default and the floor under every index's speed, so a verb is a direct
//! call on the node's [`Region`]: no lock, no allocation, no channel. Atomic verbs are real 64-bit
//! atomics; READ and WRITE promise only what RDMA does (see [`crate::memory`]): each cache line
//! is a unit, multi-line accesses may interleave with other clients' verbs line by line.
//!
//! A READ of several lines, and a doorbell batch of READs only, is redone when 16 or more WRITEs
//! landed on its lines while the thread copied them (`dma_window`): only a thread descheduled
//! mid-copy sees that many, a NIC samples a READ's lines within a microsecond, and designs'
//! wrapping torn-read counters rely on that.
//!
//! With [`LocalConfig::yield_per_verb`] every verb first yields to the thread's other tasks, the
//! way a coroutine yields while its verb is on the wire; tests use it to interleave tasks of one
//! thread. Two-sided requests run on the calling thread while holding one of the node's modelled
//! cores; when all are busy the caller yields until one frees up. A service's calls to other
//! nodes ([`crate::service::Peers`]) run on the same thread without taking the peer's cores
//! (those stand for the threads that serve clients; server-to-server traffic has its own).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::addr::{GlobalAddr, NodeId};
use crate::client::{Client, Fabric, DEFAULT_CHUNK};
use crate::dma_window;
use crate::error::{FabricError, Result};
use crate::exec::yield_now;
use crate::layout;
use crate::memory::{Pages, Region};
use crate::service::{InProcessPeers, MnContext, MnMemory, ServiceId, Services};
use crate::verbs::{AtomicOp, BatchOp, ClusterInfo, Transport};

/// Shape of an in-process cluster.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Number of memory nodes.
    pub memory_nodes: u16,
    /// Bytes per memory node (memory is committed lazily, as pages are touched).
    pub node_size: u64,
    /// Modelled CPU cores per memory node for two-sided requests.
    pub mn_cores: usize,
    /// Size of the chunks clients carve their allocations from.
    pub chunk_size: u64,
    /// Whether each verb yields to the thread's other tasks first.
    pub yield_per_verb: bool,
    /// The pages memory nodes live on: huge by default, so that a READ's lines are not each a
    /// TLB miss (see [`Pages`]).
    pub pages: Pages,
}

impl Default for LocalConfig {
    fn default() -> LocalConfig {
        LocalConfig {
            memory_nodes: 1,
            node_size: 1 << 30,
            mn_cores: 2,
            chunk_size: DEFAULT_CHUNK,
            yield_per_verb: false,
            pages: Pages::Huge,
        }
    }
}

impl LocalConfig {
    /// Checks the configuration, naming the first problem.
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_nodes == 0 {
            return Err("memory_nodes must be at least 1".into());
        }
        if self.node_size < layout::MIN_REGION {
            return Err(format!(
                "node_size {} is below the minimum of {} bytes",
                self.node_size,
                layout::MIN_REGION
            ));
        }
        if self.node_size > crate::addr::OFFSET_LIMIT {
            return Err(format!("node_size {} exceeds the 48-bit offset range", self.node_size));
        }
        if self.chunk_size == 0 || self.chunk_size > self.node_size - layout::HEAP_START {
            return Err(format!(
                "chunk_size {} must be positive and fit in a node's heap of {} bytes",
                self.chunk_size,
                self.node_size - layout::HEAP_START
            ));
        }
        Ok(())
    }
}

struct LocalNode {
    region: Region,
    free_cores: AtomicUsize,
}

struct Shared {
    nodes: Vec<LocalNode>,
    info: Arc<ClusterInfo>,
    services: Services,
    config: LocalConfig,
    /// Connections registered as cluster members, for [`Transport::fence`] to find.
    members: Mutex<Vec<Weak<Conn>>>,
}

/// What a fence needs of one connection. A registered connection brackets each verb with
/// `busy` (a store and a load, sequentially consistent, on its own line): a fence sets the
/// node's flag and then waits for `busy` to clear, so once it returns no verb of the fenced
/// connection executes on that node — Dekker's handshake, with the verb's thread and the
/// fencer's. An unregistered connection never checks (nothing can fence it).
#[derive(Default)]
struct Conn {
    member: AtomicU64,
    busy: AtomicU32,
    fenced: Box<[AtomicBool]>,
}

/// A registered connection's verb in progress; clears `busy` when dropped.
struct InVerb<'a>(Option<&'a Conn>);

impl Drop for InVerb<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.0 {
            conn.busy.store(0, Ordering::Release);
        }
    }
}

/// An in-process cluster of memory nodes. Cheap to clone; clones share the memory.
#[derive(Clone)]
pub struct LocalFabric {
    shared: Arc<Shared>,
}

impl LocalFabric {
    /// A cluster with the built-in services.
    pub fn new(config: LocalConfig) -> Result<LocalFabric, String> {
        let services = Services::new(config.mn_cores);
        LocalFabric::with_services(config, services)
    }

    /// A cluster running `services` on every memory node.
    pub fn with_services(config: LocalConfig, services: Services) -> Result<LocalFabric, String> {
        config.validate()?;
        let nodes: Vec<LocalNode> = (0..config.memory_nodes)
            .map(|id| {
                let region = Region::try_with_pages(config.node_size, config.pages)?;
                layout::format(&region, id);
                Ok(LocalNode { region, free_cores: AtomicUsize::new(services.cores()) })
            })
            .collect::<Result<_, String>>()?;
        let info =
            Arc::new(ClusterInfo { node_sizes: nodes.iter().map(|n| n.region.len()).collect() });
        let members = Mutex::new(Vec::new());
        Ok(LocalFabric { shared: Arc::new(Shared { nodes, info, services, config, members }) })
    }

    /// The configuration this cluster was built with.
    pub fn config(&self) -> &LocalConfig {
        &self.shared.config
    }

    /// Direct access to a node's memory, as its CPU sees it (for services and tests).
    pub fn region(&self, node: NodeId) -> Option<&Region> {
        self.shared.nodes.get(node as usize).map(|n| &n.region)
    }

    /// Bytes handed out by the allocation service on all nodes (heap top minus heap start).
    pub fn allocated_bytes(&self) -> u64 {
        self.shared.nodes.iter().map(|n| layout::heap_used(&n.region)).sum()
    }
}

impl Fabric for LocalFabric {
    type Transport = LocalTransport;

    fn info(&self) -> &ClusterInfo {
        &self.shared.info
    }

    fn client(&self, cn: u16) -> Result<Client<LocalTransport>> {
        let nodes = self.shared.nodes.len();
        let t = LocalTransport {
            shared: Arc::clone(&self.shared),
            yield_per_verb: self.shared.config.yield_per_verb,
            conn: Arc::new(Conn {
                fenced: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
                ..Conn::default()
            }),
        };
        Ok(Client::new(t, Arc::clone(&self.shared.info), cn, self.shared.config.chunk_size))
    }
}

/// One client's connection to an in-process cluster.
pub struct LocalTransport {
    shared: Arc<Shared>,
    yield_per_verb: bool,
    conn: Arc<Conn>,
}

impl LocalTransport {
    /// Enters a verb on `node`: refused once this connection is fenced there.
    #[inline]
    fn enter(&self, node: NodeId) -> Result<InVerb<'_>> {
        let conn = &*self.conn;
        // Written only by this connection's own task (register_member): a relaxed load sees it.
        if conn.member.load(Ordering::Relaxed) == 0 {
            return Ok(InVerb(None));
        }
        conn.busy.store(1, Ordering::SeqCst);
        if conn.fenced[node as usize].load(Ordering::SeqCst) {
            conn.busy.store(0, Ordering::Release);
            return Err(FabricError::Fenced { node });
        }
        Ok(InVerb(Some(conn)))
    }

    #[inline]
    fn region(&self, node: NodeId) -> &Region {
        // Client validated the node id.
        &self.shared.nodes[node as usize].region
    }

    /// With coroutines, asks the CPU for the lines of `len` bytes at `addr` before the verb
    /// yields, so the memory fetch overlaps the thread's other tasks as a NIC's DMA overlaps a
    /// waiting coroutine (bytes outside the region are left to the verb to refuse).
    #[inline]
    fn fetch_ahead(&self, addr: GlobalAddr, len: usize) {
        if self.yield_per_verb {
            let region = self.region(addr.node());
            if region.contains(addr.offset(), len as u64) {
                region.prefetch(addr.offset() as usize, len);
            }
        }
    }

    #[inline]
    async fn issue(&self) {
        if self.yield_per_verb {
            yield_now().await;
        }
    }
}

impl Transport for LocalTransport {
    async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<()> {
        self.fetch_ahead(addr, buf.len());
        self.issue().await;
        let _in = self.enter(addr.node())?;
        dma_window::read(self.region(addr.node()), addr.offset(), buf);
        Ok(())
    }

    async fn write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        self.issue().await;
        let _in = self.enter(addr.node())?;
        self.region(addr.node()).write(addr.offset(), data);
        Ok(())
    }

    fn post_write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        // Executed at once, so it precedes every later verb and needs no completion tracking.
        let _in = self.enter(addr.node())?;
        self.region(addr.node()).write(addr.offset(), data);
        Ok(())
    }

    async fn quiesce(&self) -> Result<()> {
        Ok(())
    }

    /// In-process memory nodes never restart: the connection is always current.
    async fn reconnect(&self, _node: NodeId) -> Result<()> {
        Ok(())
    }

    async fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> Result<u64> {
        self.fetch_ahead(addr, 8);
        self.issue().await;
        let _in = self.enter(addr.node())?;
        Ok(self.region(addr.node()).atomic(addr.offset(), op))
    }

    async fn batch(&self, node: NodeId, ops: &mut [BatchOp<'_>]) -> Result<()> {
        if self.yield_per_verb {
            for op in ops.iter() {
                if let BatchOp::Read { addr, buf } = op {
                    self.fetch_ahead(*addr, buf.len());
                }
            }
        }
        self.issue().await;
        let _in = self.enter(node)?;
        dma_window::apply(self.region(node), ops);
        Ok(())
    }

    fn now_ns(&self) -> u64 {
        crate::exec::monotonic_ns()
    }

    async fn register_member(&self, member: u64) -> Result<()> {
        self.conn.member.store(member, Ordering::Relaxed);
        let mut members = self.shared.members.lock().unwrap_or_else(|p| p.into_inner());
        members.retain(|c| c.strong_count() > 0);
        members.push(Arc::downgrade(&self.conn));
        Ok(())
    }

    async fn fence(&self, node: NodeId, member: u64) -> Result<()> {
        let victims: Vec<Arc<Conn>> = {
            let members = self.shared.members.lock().unwrap_or_else(|p| p.into_inner());
            members
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|c| c.member.load(Ordering::SeqCst) == member)
                .collect()
        };
        for conn in victims {
            conn.fenced[node as usize].store(true, Ordering::SeqCst);
            // Ends when the victim's verb in progress, if any, returns: a verb is a bounded
            // copy or atomic on this process's memory.
            while conn.busy.load(Ordering::SeqCst) != 0 {
                yield_now().await;
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    async fn call(&self, node: NodeId, service: ServiceId, request: &[u8]) -> Result<Vec<u8>> {
        let mn = self
            .shared
            .nodes
            .get(node as usize)
            .ok_or(FabricError::UnknownNode { node, nodes: self.shared.nodes.len() as u16 })?;
        self.issue().await;
        // A fenced client's requests are refused too (allocation is all they could do).
        drop(self.enter(node)?);
        // Take one of the node's cores; while all are busy, let other tasks run.
        while mn
            .free_cores
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |c| c.checked_sub(1))
            .is_err()
        {
            yield_now().await;
            std::thread::yield_now();
        }
        let nodes = &self.shared.nodes;
        let memory = |n: NodeId| nodes.get(n as usize).map(|m| &m.region as &dyn MnMemory);
        let peers = InProcessPeers::new(&self.shared.services, nodes.len() as u16, &memory);
        let ctx = MnContext::new(node, &mn.region).with_peers(&peers);
        let reply = self.shared.services.dispatch(&ctx, service, request);
        mn.free_cores.fetch_add(1, Ordering::Release);
        reply
    }
}
