//! The `ucx` transport: verbs as UCX RMA and atomics on memnode pools.
//!
//! # Connections
//!
//! [`UcxFabric::connect`] bootstraps with every memnode over TCP ([`crate::control`]: token,
//! then the memnode's incarnation, the pool's base, length, packed rkey and worker address).
//! Each client makes its two-sided calls on control connections of its own (taken from the
//! fabric's idle ones, or bootstrapped, and given back when the client goes), so clients' calls
//! run at once. Each OS thread that makes clients gets one UCX worker with an endpoint and an
//! unpacked rkey per memnode (made on first use), shared by every client (task) on that thread.
//!
//! # One-sided verbs and message verbs
//!
//! After wireup each endpoint is classified ([`Endpoint::one_sided`]). Where some lane carries
//! atomics (shared memory; RDMA), verbs are UCX RMA and atomics that never involve the memnode's
//! CPU. Where none does (TCP), UCX would emulate them on the memnode's CPU, and UCX 1.13.1 aborts
//! the memnode when such an emulated verb's reply meets a dead client; there verbs travel as
//! active messages that the memnode executes itself ([`crate::message_verbs`]), and a dead client
//! only loses its replies.
//!
//! # Verbs and what they cost
//!
//! | verb | one-sided (UCX) | message | round trips |
//! |---|---|---|---|
//! | READ / WRITE | `ucp_get_nbx` / `ucp_put_nbx` | READ / WRITE message, reply (data / ack) | 1 |
//! | CAS | `ucp_atomic_op_nbx(CSWAP)` (`buffer` = compare, `reply_buffer` = new in, old out) | CAS message | 1 |
//! | FAA | `ucp_atomic_op_nbx(ADD)` | FAA message | 1 |
//! | masked CAS, lock pattern (compare bits 0, swap = compare mask = swap mask) | fetch-OR | MASKED message | 1 |
//! | masked CAS, otherwise | READ of the word, then CSWAP until it holds or fails: 2 (+1 per lost race) | MASKED message: 1 | 1–2+ |
//! | doorbell batch | every READ/WRITE posted, then all awaited | one BATCH message, one reply | 1 |
//! | what a thread's clients post before they all wait | each on its own | one message (an envelope of them, [`crate::envelope`]), one reply | 1 each |
//! | zero-wait WRITE | posted, reaped by `flush` or later verbs | WRITE message without reply | 0 |
//! | call | request/reply on the client's own TCP control connection (yields while it waits) | same | 1 |
//! | register as a member, fence a member | REGISTER / FENCE message and reply (a fence answers `Unsupported`) | same | 1 per memnode |
//!
//! # Ordering
//!
//! UCX completes a put when its buffer may be reused, not when it is remote, and does not order
//! later operations after it. Whenever a one-sided WRITE was posted since the last fence, the next
//! verb is preceded by `ucp_worker_fence`, so "data, then unlock" and read-your-writes hold as on
//! RDMA; writes inside a batch are fenced from the operations after them. Messages need no fence:
//! an endpoint's messages arrive in order and the memnode executes them as they arrive; a WRITE
//! message completes when the memnode acknowledges it.
//!
//! # Restarts and reconnecting
//!
//! A memnode restarted on the same address is a new process with an empty pool; its welcome
//! carries a new incarnation. A client is bound to one incarnation of each memnode: its verbs
//! and calls fail ([`FabricError::Unavailable`]) once its thread's endpoint or its control
//! connection reaches another, as an RDMA queue pair dies with the process that made it, until
//! the client calls [`Transport::reconnect`], which bootstraps afresh (one round trip), binds
//! the client to the incarnation that answers, and replaces the thread's endpoint if it reaches
//! an older one or has failed. Clients of the same thread that did not reconnect stay bound to
//! the old incarnation and keep failing, so none of them reads a new, empty pool as if it were
//! the old one.
//!
//! # Members and fencing
//!
//! A client registered as a cluster member ([`Transport::register_member`]: a REGISTER message
//! to every memnode) holds a session with each memnode, and its verb messages speak for it; a
//! fence of the member ([`Transport::fence`]: a FENCE message) makes that memnode refuse them
//! ([`FabricError::Fenced`]) and is answered once none executes there. One-sided verbs are out
//! of a fence's reach: a fence of a member whose verbs are one-sided there fails `Unsupported`.
//! See [`members`] and [`crate::sessions`].
//!
//! # Waiting
//!
//! A verb message is not sent when it is posted: it waits in its endpoint's outbox until every
//! task of the thread waits ([`WaitSource::flush`]), and then goes with the others posted
//! meanwhile, in one message ([`crate::envelope`]); so do the replies. Under an executor that
//! does not say when its tasks all wait, a message is sent when it is posted.
//!
//! A task waiting for a reply or a UCX request leaves its waker where the completion finds it
//! (the reply handler, or the thread's list woken by progress) and returns `Pending`; the
//! thread's UCX state is a [`WaitSource`], so once every task of the thread waits, the
//! executor progresses the worker for a few µs and then blocks on its event descriptor
//! (`ucp_worker_arm`) instead of spinning ([`dmindex_fabric::exec::block`]). Calls wait for
//! their control connection to be readable the same way.
//!
//! # Deadlines
//!
//! Calls, message verbs and endpoint wireups must finish within the fabric's timeout
//! ([`UcxOptions::timeout`]); one that does not fails with `Unavailable`, naming the memnode and
//! what it did not answer (a memnode cut off by a partition sends no reset). One-sided verbs
//! (shared memory, RDMA) rely on UCX's own endpoint error handling instead: their buffers stay
//! in UCX's hands until it completes them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use dmindex_fabric::exec::block::{self, WaitSource};
use dmindex_fabric::service::MnMemory;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::words::SharedWords;
use dmindex_fabric::{
    AtomicOp, BatchOp, Client, ClusterInfo, FabricError, GlobalAddr, NodeId, Result, ServiceId,
    Transport,
};

use crate::auth::VERB_KEY;
use crate::control::{reply_result, unanswered, ConnPool, ControlConn};
use crate::envelope::{self, Outbox};
use crate::message_verbs::{Verb, REPLY_AM};
use crate::proto::Welcome;
use crate::sys::{UCP_ATOMIC_OP_ADD, UCP_ATOMIC_OP_CSWAP, UCP_ATOMIC_OP_OR};
use crate::ucp::{Endpoint, Posted, RemoteKey, Request as UcxRequest, UcxError, Worker};

mod members;
mod messages;
mod wait;

use members::Session;
use messages::copy_read;
use wait::{InFlight, Replies};

/// How long to wait for a memnode to accept and answer the bootstrap.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Control connections a fabric keeps per memnode that no client holds.
const IDLE_CONTROL: usize = 64;

/// How a fabric reaches its memnodes.
#[derive(Clone, Debug)]
pub struct UcxOptions {
    /// Bytes a client takes from a memnode at a time for its allocations.
    pub chunk_size: u64,
    /// How long a call, a message verb or an endpoint's wireup may take before its memnode
    /// counts as unavailable. A call that does much work (a HiStore rebuild's copy) must fit.
    pub timeout: Duration,
    /// Where UCX maps a memnode's pool into this process (shared memory), verbs are this
    /// process's own loads, stores and atomics on the mapping instead of UCX calls. Off, every
    /// verb goes through `ucp_get_nbx`, `ucp_put_nbx` and `ucp_atomic_op_nbx` (tests use it to
    /// run those over shared memory).
    pub map_shared: bool,
}

impl Default for UcxOptions {
    fn default() -> UcxOptions {
        UcxOptions { chunk_size: 1 << 20, timeout: Duration::from_secs(10), map_shared: true }
    }
}

/// One incarnation of a memnode: what its welcome said, numbered in the order this fabric met
/// them.
struct Incarnation {
    generation: u64,
    welcome: Welcome,
}

struct Memnode {
    addr: String,
    /// The pool's length in the first welcome: what clients check verbs against, for good.
    size: u64,
    /// The incarnation new clients bind to.
    current: Mutex<Arc<Incarnation>>,
    /// Control connections no client holds.
    idle: ConnPool,
}

/// What every client of a fabric shares.
struct Shared {
    nodes: Vec<Memnode>,
    token: Vec<u8>,
    timeout: Duration,
    map_shared: bool,
}

/// A cluster of memnodes reached over UCX.
pub struct UcxFabric {
    id: u64,
    shared: Arc<Shared>,
    info: Arc<ClusterInfo>,
    chunk_size: u64,
}

static NEXT_FABRIC: AtomicU64 = AtomicU64::new(1);

fn unavailable(node: NodeId, reason: impl Into<String>) -> FabricError {
    FabricError::Unavailable { node, reason: reason.into() }
}

fn restarted(node: NodeId) -> FabricError {
    unavailable(
        node,
        "this client's connection reaches an earlier incarnation of the memnode (it restarted, \
         or another client reconnected): reconnect",
    )
}

impl UcxFabric {
    /// Connects to memnodes `addrs` (HOST:PORT; memnode ids must be 0, 1, … in this order)
    /// presenting `token`, with clients taking `chunk_size`-byte chunks. Unreachable memnodes
    /// and refusals are errors naming the memnode.
    pub fn connect(
        addrs: &[String],
        token: &[u8],
        chunk_size: u64,
    ) -> std::result::Result<UcxFabric, String> {
        Self::connect_with(addrs, token, &UcxOptions { chunk_size, ..UcxOptions::default() })
    }

    /// [`UcxFabric::connect`] with every option.
    pub fn connect_with(
        addrs: &[String],
        token: &[u8],
        options: &UcxOptions,
    ) -> std::result::Result<UcxFabric, String> {
        if addrs.is_empty() {
            return Err("no memnode given (--memnode HOST:PORT)".into());
        }
        if options.timeout.is_zero() {
            return Err("the UCX timeout must be positive".into());
        }
        let mut nodes = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let (control, welcome) = ControlConn::connect(a, token, CONNECT_TIMEOUT)?;
            if welcome.mn_id as usize != i {
                return Err(format!(
                    "memnode {a} is memory node {}, but it is listed at position {i} (list memnodes in id order)",
                    welcome.mn_id
                ));
            }
            nodes.push(Memnode {
                addr: a.clone(),
                size: welcome.length,
                current: Mutex::new(Arc::new(Incarnation { generation: 0, welcome })),
                idle: {
                    let pool = ConnPool::new(IDLE_CONTROL);
                    pool.give_back(control);
                    pool
                },
            });
        }
        let info = Arc::new(ClusterInfo {
            node_sizes: nodes.iter().map(|n| n.current().welcome.length).collect(),
        });
        Ok(UcxFabric {
            id: NEXT_FABRIC.fetch_add(1, Ordering::Relaxed),
            shared: Arc::new(Shared {
                nodes,
                token: token.to_vec(),
                timeout: options.timeout,
                map_shared: options.map_shared,
            }),
            info,
            chunk_size: options.chunk_size,
        })
    }

    /// Per memnode, whether this thread's verbs are loads, stores and atomics on a mapping of
    /// its pool ([`UcxOptions::map_shared`]).
    pub fn mapped(&self) -> std::result::Result<Vec<bool>, String> {
        self.per_node(|c| c.mapped().is_some())
    }

    /// Per memnode, whether this thread's verbs reach its pool one-sidedly (UCX RMA) rather
    /// than as messages the memnode executes (see the module docs).
    pub fn one_sided(&self) -> std::result::Result<Vec<bool>, String> {
        self.per_node(|c| c.one_sided)
    }

    /// The verb messages this thread sent over UCX, and the requests they carried: more
    /// requests than messages where its clients' verbs travelled together
    /// ([`crate::envelope`]).
    pub fn messages_sent(&self) -> std::result::Result<(u64, u64), String> {
        let c = self.thread_conn().map_err(|e| e.to_string())?;
        Ok((c.sent_messages.get(), c.sent_requests.get()))
    }

    /// `f` of this thread's endpoint to each memnode (made if need be).
    fn per_node<R>(&self, f: impl Fn(&NodeConn) -> R) -> std::result::Result<Vec<R>, String> {
        let t = dmindex_fabric::Fabric::client(self, 0).map_err(|e| e.to_string())?;
        let t = t.transport();
        (0..self.shared.nodes.len() as NodeId)
            .map(|n| t.node(n).map(|c| f(&c)).map_err(|e| e.to_string()))
            .collect()
    }

    /// This thread's worker for this fabric, made on first use.
    fn thread_conn(&self) -> std::result::Result<Rc<ThreadConn>, UcxError> {
        THREAD_CONNS.with(|t| {
            let mut t = t.borrow_mut();
            if let Some((_, c)) = t.iter().find(|(id, _)| *id == self.id) {
                return Ok(Rc::clone(c));
            }
            let mut worker = Worker::new()?;
            let replies = Rc::new(Replies::default());
            let r = Rc::clone(&replies);
            worker.on_message(
                REPLY_AM,
                Box::new(move |header, payload, _| match header.len() {
                    envelope::ENVELOPE_LEN => {
                        // A reply envelope that does not parse is dropped whole: its verbs
                        // fail at their deadline.
                        for (header, payload) in
                            envelope::reply_frames(header, payload).into_iter().flatten()
                        {
                            r.deliver(header, payload);
                        }
                    }
                    _ => r.deliver(header, payload),
                }),
            )?;
            let c = Rc::new(ThreadConn {
                nodes: RefCell::new(vec![None; self.shared.nodes.len()]),
                pending: RefCell::new(Vec::new()),
                unsent: RefCell::new(Vec::new()),
                sent_messages: Cell::new(0),
                sent_requests: Cell::new(0),
                fence: Cell::new(false),
                replies,
                waiting: RefCell::new(Vec::new()),
                worker,
            });
            let source: Rc<dyn WaitSource> = c.clone();
            block::register(Rc::downgrade(&source));
            t.push((self.id, Rc::clone(&c)));
            Ok(c)
        })
    }
}

impl Memnode {
    fn current(&self) -> Arc<Incarnation> {
        Arc::clone(&self.current.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Shared {
    /// A control connection to `node`'s incarnation `generation`: an idle one, or a new one.
    fn control(&self, node: NodeId, generation: u64) -> Result<ControlConn> {
        let m = &self.nodes[node as usize];
        let inc = m.current();
        if inc.generation != generation {
            return Err(restarted(node));
        }
        if let Some(c) = m.idle.take(|c| c.incarnation == inc.welcome.incarnation) {
            return Ok(c);
        }
        let (c, _) = ControlConn::connect(&m.addr, &self.token, self.timeout)
            .map_err(|reason| unavailable(node, reason))?;
        if c.incarnation != inc.welcome.incarnation {
            return Err(restarted(node));
        }
        Ok(c)
    }

    /// A new endpoint of `conn`'s worker to incarnation `inc` of `node`, wired up.
    fn endpoint(&self, conn: &ThreadConn, node: NodeId, inc: &Incarnation) -> Result<Rc<NodeConn>> {
        let fail = |e: UcxError| unavailable(node, e.to_string());
        let ep = conn.worker.connect(&inc.welcome.worker_address).map_err(fail)?;
        let key = ep.unpack(&inc.welcome.rkey).map_err(fail)?;
        // Finish the wireup now, before any verb: a client that dies while its wireup is still
        // in flight can trip an assertion in UCX 1.13.1's TCP transport on the memnode (see
        // docs/ucx.md).
        let p = ep.flush().map_err(fail)?;
        if !conn.worker.wait_until(p, Instant::now() + self.timeout).map_err(fail)? {
            return Err(unavailable(
                node,
                format!(
                    "memnode {}: no wireup within {:?}",
                    self.nodes[node as usize].addr, self.timeout
                ),
            ));
        }
        let one_sided = ep.one_sided();
        let mapped = match one_sided && self.map_shared {
            true => key.local_ptr(inc.welcome.base).map(|p| (p, inc.welcome.length as usize)),
            false => None,
        };
        Ok(Rc::new(NodeConn {
            generation: inc.generation,
            base: inc.welcome.base,
            one_sided,
            mapped,
            verb_key: inc.welcome.verb_key,
            outbox: RefCell::default(),
            failed: RefCell::default(),
            key,
            ep,
        }))
    }
}

impl dmindex_fabric::Fabric for UcxFabric {
    type Transport = UcxTransport;

    fn info(&self) -> &ClusterInfo {
        &self.info
    }

    fn client(&self, cn: u16) -> Result<Client<UcxTransport>> {
        let conn = self.thread_conn().map_err(|e| unavailable(0, e.to_string()))?;
        let nodes = &self.shared.nodes;
        let t = UcxTransport {
            conn,
            bound: nodes.iter().map(|n| Cell::new(n.current().generation)).collect(),
            control: nodes.iter().map(|_| Cell::new(None)).collect(),
            member: Cell::new(0),
            sessions: nodes.iter().map(|_| Cell::new(None)).collect(),
            shared: Arc::clone(&self.shared),
            info: Arc::clone(&self.info),
        };
        Ok(Client::new(t, Arc::clone(&self.info), cn, self.chunk_size))
    }
}

/// One thread's endpoint to one incarnation of a memnode. Field order is drop order: the key
/// before its endpoint.
struct NodeConn {
    generation: u64,
    /// The pool's address in the memnode's address space.
    base: u64,
    /// UCX RMA reaches the pool without the memnode's CPU (else verbs go as messages).
    one_sided: bool,
    /// The pool as UCX mapped it into this process (shared memory), and its length: verbs are
    /// then loads, stores and atomics on it, with no UCX call and no fence (each completes in
    /// the call, in program order).
    mapped: Option<(*mut u8, usize)>,
    /// What verb messages carry to be executed.
    verb_key: [u8; VERB_KEY],
    /// Messages posted to this memnode since this thread's tasks last all waited ([`envelope`]).
    outbox: RefCell<Outbox>,
    /// Why a send on this endpoint failed, if one did.
    failed: RefCell<Option<String>>,
    key: RemoteKey,
    ep: Endpoint,
}

impl NodeConn {
    /// The mapped pool, if any (and aligned).
    fn mapped(&self) -> Option<SharedWords<'_>> {
        let (base, len) = self.mapped?;
        // SAFETY: UCX keeps the mapping for as long as `self.key` lives, which outlives the
        // borrow of self; the pool is `len` bytes by the memnode's welcome (UCX checks no length
        // here: the authenticated memnode is trusted for it, as for the pool's base); from_raw
        // checks alignment; this process reaches it only atomically (SharedWords) or through
        // UCX.
        unsafe { SharedWords::from_raw(base, len) }
    }
}

/// One thread's UCX state. Field order is drop order: endpoints before the worker.
struct ThreadConn {
    /// Per memnode, the endpoint of the newest incarnation a client of this thread reached
    /// (made on first use). Verbs in flight hold their own reference, so an endpoint replaced
    /// meanwhile lives until they finish.
    nodes: RefCell<Vec<Option<Rc<NodeConn>>>>,
    /// Sends in flight that nobody awaits (zero-wait WRITEs, messages), with their bytes.
    pending: RefCell<Vec<(UcxRequest, Vec<u8>)>>,
    /// Endpoints whose outbox holds messages not sent yet ([`envelope`]).
    unsent: RefCell<Vec<Rc<NodeConn>>>,
    /// Verb messages sent, and the requests they carried.
    sent_messages: Cell<u64>,
    sent_requests: Cell<u64>,
    /// A one-sided WRITE was posted since the last fence.
    fence: Cell<bool>,
    replies: Rc<Replies>,
    /// Tasks waiting for a UCX request (one-sided verbs, flushes): woken whenever progress
    /// did something.
    waiting: RefCell<Vec<Waker>>,
    worker: Worker,
}

impl Drop for ThreadConn {
    fn drop(&mut self) {
        self.send_all();
        for (r, _data) in self.pending.get_mut().drain(..) {
            let _ = self.worker.wait(Posted::Pending(r));
        }
        if let Ok(p) = self.worker.flush() {
            let _ = self.worker.wait_until(p, Instant::now() + CONNECT_TIMEOUT);
        }
    }
}

thread_local! {
    static THREAD_CONNS: RefCell<Vec<(u64, Rc<ThreadConn>)>> = const { RefCell::new(Vec::new()) };
}

/// A client's handle on the cluster (shares its thread's worker).
pub struct UcxTransport {
    conn: Rc<ThreadConn>,
    /// Per memnode, the generation of the incarnation this client is bound to.
    bound: Vec<Cell<u64>>,
    /// Per memnode, this client's control connection (taken out while a call uses it).
    control: Vec<Cell<Option<ControlConn>>>,
    /// The cluster member this client registered as (0: none), and per memnode its session
    /// there ([`members`]).
    member: Cell<u64>,
    sessions: Vec<Cell<Option<Session>>>,
    shared: Arc<Shared>,
    info: Arc<ClusterInfo>,
}

impl Drop for UcxTransport {
    fn drop(&mut self) {
        for node in 0..self.sessions.len() as NodeId {
            self.end_session(node);
        }
        for (n, c) in self.control.iter().enumerate() {
            if let Some(c) = c.take() {
                self.shared.nodes[n].idle.give_back(c);
            }
        }
    }
}

impl UcxTransport {
    /// This thread's endpoint to the incarnation of `node` this client is bound to (made on
    /// first use); an error if the thread has moved on to a later one, or the fabric has.
    fn node(&self, node: NodeId) -> Result<Rc<NodeConn>> {
        let generation = self.bound[node as usize].get();
        if let Some(c) = &self.conn.nodes.borrow()[node as usize] {
            if c.generation == generation {
                return Ok(Rc::clone(c));
            }
            if c.generation > generation {
                return Err(restarted(node));
            }
        }
        let inc = self.shared.nodes[node as usize].current();
        if inc.generation != generation {
            return Err(restarted(node));
        }
        let c = self.shared.endpoint(&self.conn, node, &inc)?;
        self.conn.nodes.borrow_mut()[node as usize] = Some(Rc::clone(&c));
        Ok(c)
    }

    fn remote(to: &NodeConn, addr: GlobalAddr) -> u64 {
        to.base + addr.offset()
    }

    /// Fences if a WRITE was posted since the last fence, and reaps finished zero-wait WRITEs.
    fn before(&self, node: NodeId) -> Result<()> {
        let c = &self.conn;
        let mut pending = c.pending.borrow_mut();
        let mut i = 0;
        while i < pending.len() {
            if let Ok(false) = c.worker.check(&pending[i].0) {
                i += 1;
            } else {
                let (r, _data) = pending.swap_remove(i);
                c.worker.free(r);
            }
        }
        drop(pending);
        if c.fence.replace(false) {
            c.worker.fence().map_err(|e| unavailable(node, e.to_string()))?;
        }
        Ok(())
    }

    fn flight(
        &self,
        node: NodeId,
        p: std::result::Result<Posted, UcxError>,
    ) -> Result<InFlight<'_>> {
        match p.map_err(|e| unavailable(node, e.to_string()))? {
            Posted::Done => Ok(InFlight { conn: &self.conn, req: None }),
            Posted::Pending(r) => Ok(InFlight { conn: &self.conn, req: Some(r) }),
        }
    }

    /// Whether `op` is one UCX atomic: CAS, FAA, or a masked CAS that sets one bit if it is
    /// clear (fetch-OR leaves a word whose bit is already set unchanged, exactly like the failed
    /// masked CAS).
    fn native(op: AtomicOp) -> bool {
        match op {
            AtomicOp::Cas { .. } | AtomicOp::Faa { .. } => true,
            AtomicOp::MaskedCas { compare, compare_mask, swap, swap_mask } => {
                // One bit: with several, some set, the masked CAS fails and changes nothing
                // while fetch-OR would set the others.
                swap_mask.count_ones() == 1
                    && compare & compare_mask == 0
                    && swap_mask == compare_mask
                    && swap & swap_mask == swap_mask
            }
        }
    }

    /// The UCX opcode, operand and initial reply word of a [`Self::native`] atomic (for CSWAP the
    /// reply carries the new value in and the old one out).
    fn native_args(op: AtomicOp) -> (i32, u64, u64) {
        match op {
            AtomicOp::Cas { expected, new } => (UCP_ATOMIC_OP_CSWAP, expected, new),
            AtomicOp::Faa { delta } => (UCP_ATOMIC_OP_ADD, delta, 0),
            AtomicOp::MaskedCas { swap_mask, .. } => (UCP_ATOMIC_OP_OR, swap_mask, 0),
        }
    }

    async fn word_atomic(
        &self,
        to: &NodeConn,
        addr: GlobalAddr,
        op: i32,
        operand: u64,
        reply: u64,
    ) -> Result<u64> {
        let node = addr.node();
        self.before(node)?;
        let mut reply = reply;
        // SAFETY: operand and reply live in this future, which is pinned while polled, and are
        // dropped after the flight: `done` (or InFlight's drop) waits for completion first.
        let p = unsafe { to.ep.atomic(op, &operand, &mut reply, Self::remote(to, addr), &to.key) };
        self.flight(node, p)?.done(node).await?;
        Ok(reply)
    }
}

impl Transport for UcxTransport {
    async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<()> {
        let node = addr.node();
        let to = self.node(node)?;
        if !to.one_sided {
            let (_, data) =
                self.message(&to, addr, Verb::Read { len: buf.len() as u64 }, &[]).await?;
            return copy_read(node, buf, &data);
        }
        if let Some(m) = to.mapped() {
            m.read(addr.offset(), buf);
            return Ok(());
        }
        self.before(node)?;
        // SAFETY: buf is borrowed for this whole future; `done` (or the guard's drop) waits for
        // completion before the borrow ends.
        let p = unsafe { to.ep.get(buf, Self::remote(&to, addr), &to.key) };
        self.flight(node, p)?.done(node).await
    }

    async fn write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        let node = addr.node();
        let to = self.node(node)?;
        if !to.one_sided {
            return self.message(&to, addr, Verb::Write, data).await.map(drop);
        }
        if let Some(m) = to.mapped() {
            m.write(addr.offset(), data);
            return Ok(());
        }
        self.before(node)?;
        // SAFETY: as in read.
        let p = unsafe { to.ep.put(data, Self::remote(&to, addr), &to.key) };
        self.conn.fence.set(true);
        self.flight(node, p)?.done(node).await
    }

    fn post_write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        let node = addr.node();
        let to = self.node(node)?;
        if !to.one_sided {
            return self.post_message(&to, addr, Verb::Write, data, false).map(drop);
        }
        if let Some(m) = to.mapped() {
            m.write(addr.offset(), data);
            return Ok(());
        }
        self.before(node)?;
        // Where UCX completes the WRITE in the call, it needs no copy.
        let fail = |e: UcxError| unavailable(node, e.to_string());
        // SAFETY: a request UCX hands back is waited for below, while `data` is borrowed.
        let now = unsafe { to.ep.put_now(data, Self::remote(&to, addr), &to.key) };
        if let Some(p) = now.map_err(fail)? {
            // UCX's newer protocols ignore the request to complete at once and may hand back a
            // request; `data` is the caller's, so wait for it.
            self.conn.worker.wait(p).map_err(fail)?;
            self.conn.fence.set(true);
            return Ok(());
        }
        let owned = data.to_vec();
        // SAFETY: `owned` moves into the pending list (its heap buffer does not move) and is
        // dropped only after the request completes (quiesce, reaping, or the thread's drop).
        let p = unsafe { to.ep.put(&owned, Self::remote(&to, addr), &to.key) };
        self.conn.fence.set(true);
        match p.map_err(|e| unavailable(node, e.to_string()))? {
            Posted::Done => {}
            Posted::Pending(r) => self.conn.pending.borrow_mut().push((r, owned)),
        }
        Ok(())
    }

    async fn quiesce(&self) -> Result<()> {
        let p = self.conn.worker.flush();
        self.flight(0, p)?.done(0).await?;
        let pending: Vec<_> = self.conn.pending.borrow_mut().drain(..).collect();
        for (r, _data) in pending {
            InFlight { conn: &self.conn, req: Some(r) }.done(0).await?;
        }
        self.conn.fence.set(false);
        // Zero-wait WRITE messages are executed once a later message is answered; they went
        // out on endpoints this client has (nodes it never reached have none to wait for).
        for node in 0..self.bound.len() as NodeId {
            let generation = self.bound[node as usize].get();
            let to = self.conn.nodes.borrow()[node as usize].clone();
            if let Some(to) = to.filter(|c| c.generation == generation && !c.one_sided) {
                self.message(&to, GlobalAddr::new(node, 0), Verb::Flush, &[]).await?;
            }
        }
        Ok(())
    }

    async fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> Result<u64> {
        let to = self.node(addr.node())?;
        if !to.one_sided {
            return self.message(&to, addr, Verb::Atomic(op), &[]).await.map(|(old, _)| old);
        }
        if let Some(m) = to.mapped() {
            return Ok(m.atomic(addr.offset(), op));
        }
        if Self::native(op) {
            let (code, operand, reply) = Self::native_args(op);
            return self.word_atomic(&to, addr, code, operand, reply).await;
        }
        // Any other masked CAS: READ, then CAS until the comparison fails or a CAS lands.
        let mut b = [0u8; 8];
        self.read(addr, &mut b).await?;
        let mut old = u64::from_le_bytes(b);
        loop {
            let Some(new) = op.apply(old) else { return Ok(old) };
            let got = self.word_atomic(&to, addr, UCP_ATOMIC_OP_CSWAP, old, new).await?;
            if got == old {
                return Ok(old);
            }
            old = got;
        }
    }

    async fn batch(&self, node: NodeId, ops: &mut [BatchOp<'_>]) -> Result<()> {
        let to = self.node(node)?;
        if !to.one_sided {
            // Client::batch caps a batch at MAX_BATCH verbs; a longer one goes as several.
            for chunk in ops.chunks_mut(MAX_BATCH) {
                self.batch_message(&to, node, chunk).await?;
            }
            return Ok(());
        }
        if let Some(m) = to.mapped() {
            m.apply(ops);
            return Ok(());
        }
        if ops.iter().any(|op| matches!(op, BatchOp::Atomic { op, .. } if !Self::native(*op))) {
            // A masked CAS the NIC cannot do in one verb is a READ and CAS loop: the batch runs
            // one verb after another, in order (more latency, the same effects).
            for op in ops.iter_mut() {
                match op {
                    BatchOp::Read { addr, buf } => self.read(*addr, buf).await?,
                    BatchOp::Write { addr, data } => self.write(*addr, data).await?,
                    BatchOp::Atomic { addr, op, old } => *old = self.atomic(*addr, *op).await?,
                }
            }
            return Ok(());
        }
        self.before(node)?;
        let (ep, key) = (&to.ep, &to.key);
        // In place, not on the heap: a batch is every search's verb. Client::batch capped it.
        let mut flights: [Option<InFlight<'_>>; MAX_BATCH] = std::array::from_fn(|_| None);
        // Atomic operands live here, pinned with this future, until every flight is done.
        let mut operands = [0u64; MAX_BATCH];
        let mut ordered = false;
        for (i, op) in ops.iter_mut().enumerate() {
            if ordered {
                // Nothing overtakes an earlier WRITE or atomic, as in a doorbell batch (an RC
                // responder executes a READ after an atomic it received first).
                self.conn.worker.fence().map_err(|e| unavailable(node, e.to_string()))?;
            }
            let p = match op {
                // SAFETY: the batch's buffers are borrowed for this whole future; every flight is
                // awaited (or waited for on drop) before the borrows end.
                BatchOp::Read { addr, buf } => unsafe {
                    ep.get(buf, Self::remote(&to, *addr), key)
                },
                // SAFETY: as above.
                BatchOp::Write { addr, data } => unsafe {
                    ep.put(data, Self::remote(&to, *addr), key)
                },
                BatchOp::Atomic { addr, op, old } => {
                    let (code, operand, reply) = Self::native_args(*op);
                    operands[i] = operand;
                    *old = reply;
                    // SAFETY: the operand is in `operands` and the reply in the borrowed batch,
                    // both alive until every flight of this future has completed.
                    unsafe { ep.atomic(code, &operands[i], old, Self::remote(&to, *addr), key) }
                }
            };
            ordered |= !matches!(op, BatchOp::Read { .. });
            flights[i] = Some(self.flight(node, p)?);
        }
        if ordered {
            self.conn.fence.set(true);
        }
        for f in flights.iter_mut().filter_map(Option::take) {
            f.done(node).await?;
        }
        Ok(())
    }

    async fn call(&self, node: NodeId, service: ServiceId, request: &[u8]) -> Result<Vec<u8>> {
        // Verbs this thread posted go out before the call does, as they were posted first.
        self.conn.send_all();
        let m = self
            .shared
            .nodes
            .get(node as usize)
            .ok_or(FabricError::UnknownNode { node, nodes: self.shared.nodes.len() as u16 })?;
        let slot = &self.control[node as usize];
        let generation = self.bound[node as usize].get();
        // A call already under way on this client (index code may overlap calls) leaves the
        // slot empty: this one takes another connection.
        let mut c = match slot.take() {
            Some(c) => c,
            None => self.shared.control(node, generation)?,
        };
        let reply = c
            .call_async(service.0, request, self.shared.timeout)
            .await
            .map_err(|e| unanswered(node, &m.addr, service, e))?;
        match slot.take() {
            None => slot.set(Some(c)),
            Some(other) => {
                slot.set(Some(other));
                m.idle.give_back(c);
            }
        }
        reply_result(node, service, reply)
    }

    /// Registers with every memnode in turn (a REGISTER message and its reply each): from then
    /// on this client's verb messages speak for its session there ([`members`]). A memnode that
    /// fenced `member` already answers `Fenced`.
    async fn register_member(&self, member: u64) -> Result<()> {
        if member == 0 {
            return Err(FabricError::Unsupported("register as member 0 (members are non-zero)"));
        }
        // Set first: a memnode this fails to reach gets no unregistered verb of this client.
        self.member.set(member);
        for node in 0..self.sessions.len() as NodeId {
            self.register_with(node, member).await?;
        }
        Ok(())
    }

    /// One FENCE message to `node`, answered once no verb message of `member`'s executes there;
    /// `Unsupported` if one of its sessions there reaches the pool one-sidedly ([`members`]).
    async fn fence(&self, node: NodeId, member: u64) -> Result<()> {
        if node as usize >= self.sessions.len() {
            return Err(FabricError::UnknownNode { node, nodes: self.sessions.len() as u16 });
        }
        self.fence_at(node, member).await
    }

    /// Bootstraps with the memnode afresh (one round trip), binds this client to the
    /// incarnation that answers, and renews this thread's endpoint if it reaches an earlier
    /// incarnation or has failed.
    async fn reconnect(&self, node: NodeId) -> Result<()> {
        let m = self
            .shared
            .nodes
            .get(node as usize)
            .ok_or(FabricError::UnknownNode { node, nodes: self.shared.nodes.len() as u16 })?;
        let (c, welcome) = ControlConn::connect(&m.addr, &self.shared.token, self.shared.timeout)
            .map_err(|reason| unavailable(node, reason))?;
        if welcome.mn_id != node {
            return Err(unavailable(
                node,
                format!("{} now answers as memory node {}", m.addr, welcome.mn_id),
            ));
        }
        if welcome.length != m.size {
            // Verbs are checked against the first size; a pool of another cannot serve them.
            return Err(unavailable(
                node,
                format!(
                    "{} restarted with a pool of {} bytes, not the {} it had",
                    m.addr, welcome.length, m.size
                ),
            ));
        }
        let inc = {
            let mut current = m.current.lock().unwrap_or_else(|e| e.into_inner());
            if current.welcome.incarnation != welcome.incarnation {
                let generation = current.generation + 1;
                *current = Arc::new(Incarnation { generation, welcome });
            }
            Arc::clone(&current)
        };
        let keep = matches!(&self.conn.nodes.borrow()[node as usize],
            Some(t) if t.generation == inc.generation && t.ep.failure().is_none()
                && t.unsent_failure().is_none());
        if !keep {
            let t = self.shared.endpoint(&self.conn, node, &inc)?;
            self.conn.nodes.borrow_mut()[node as usize] = Some(t);
        }
        self.bound[node as usize].set(inc.generation);
        // The fresh connection becomes this client's (an older one is closed), if it reached
        // the incarnation now current.
        if c.incarnation == inc.welcome.incarnation {
            self.control[node as usize].set(Some(c));
        } else {
            self.control[node as usize].set(None);
        }
        // A member registers with the new incarnation (the old one's sessions went with it).
        let member = self.member.get();
        let current = matches!(self.sessions[node as usize].get(),
            Some(s) if s.generation == inc.generation);
        if member != 0 && !current {
            self.register_with(node, member).await?;
        }
        Ok(())
    }
}
