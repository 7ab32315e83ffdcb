//! The `ucx` transport: verbs as UCX RMA and atomics on memnode pools.
//!
//! # Connections
//!
//! [`UcxFabric::connect`] opens one TCP control connection per memnode (bootstrap: token, then
//! the pool's base, length, packed rkey and the memnode's worker address; afterwards the
//! fabric's two-sided calls). Each OS thread that makes clients gets one UCX worker with an
//! endpoint and an unpacked rkey per memnode, shared by every client (task) on that thread.
//!
//! # Verbs and what they cost
//!
//! | verb | UCX | round trips |
//! |---|---|---|
//! | READ / WRITE | `ucp_get_nbx` / `ucp_put_nbx` | 1 |
//! | CAS | `ucp_atomic_op_nbx(CSWAP)` (`buffer` = compare, `reply_buffer` = new in, old out) | 1 |
//! | FAA | `ucp_atomic_op_nbx(ADD)` | 1 |
//! | masked CAS, lock pattern (compare bits 0, swap = compare mask = swap mask) | fetch-OR | 1 |
//! | masked CAS, otherwise | READ of the word, then CSWAP until it holds or fails | 2 (+1 per lost race) |
//! | doorbell batch | every READ/WRITE posted, then all awaited | 1 |
//! | zero-wait WRITE | posted, reaped by `flush` or later verbs | 0 |
//! | call | request/reply on the TCP control connection (blocks the thread) | 1 |
//!
//! # Ordering
//!
//! UCX completes a put when its buffer may be reused, not when it is remote, and does not order
//! later operations after it. Whenever a WRITE was posted since the last fence, the next verb is
//! preceded by `ucp_worker_fence`, so "data, then unlock" and read-your-writes hold as on RDMA;
//! writes inside a batch are fenced from the operations after them.

use std::cell::{Cell, RefCell};
use std::io::{BufReader, BufWriter};
use std::net::{TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dmindex_fabric::exec::yield_now;
use dmindex_fabric::{
    AtomicOp, BatchOp, Client, ClusterInfo, FabricError, GlobalAddr, NodeId, Result, ServiceId,
    Transport,
};

use crate::proto::{self, Reply, Welcome};
use crate::sys::{UCP_ATOMIC_OP_ADD, UCP_ATOMIC_OP_CSWAP, UCP_ATOMIC_OP_OR};
use crate::ucp::{Endpoint, Posted, RemoteKey, Request, UcxError, Worker};

/// How long to wait for a memnode to accept and answer the bootstrap.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A memnode's control connection.
struct Control {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

struct Memnode {
    addr: String,
    welcome: Welcome,
    control: Mutex<Control>,
}

/// A cluster of memnodes reached over UCX.
pub struct UcxFabric {
    id: u64,
    nodes: Arc<Vec<Memnode>>,
    info: Arc<ClusterInfo>,
    chunk_size: u64,
}

static NEXT_FABRIC: AtomicU64 = AtomicU64::new(1);

fn unavailable(node: NodeId, reason: impl Into<String>) -> FabricError {
    FabricError::Unavailable { node, reason: reason.into() }
}

impl UcxFabric {
    /// Connects to memnodes `addrs` (HOST:PORT; memnode ids must be 0, 1, … in this order)
    /// presenting `token`. Unreachable memnodes and refusals are errors naming the memnode.
    pub fn connect(
        addrs: &[String],
        token: &[u8],
        chunk_size: u64,
    ) -> std::result::Result<UcxFabric, String> {
        if addrs.is_empty() {
            return Err("no memnode given (--memnode HOST:PORT)".into());
        }
        let mut nodes = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let sock = a
                .to_socket_addrs()
                .map_err(|e| format!("memnode {a}: bad address: {e}"))?
                .next()
                .ok_or_else(|| format!("memnode {a}: address resolves to nothing"))?;
            let stream = TcpStream::connect_timeout(&sock, CONNECT_TIMEOUT)
                .map_err(|e| format!("cannot reach memnode at {a}: {e}"))?;
            let io = |e: std::io::Error| format!("memnode {a}: {e}");
            stream.set_nodelay(true).map_err(io)?;
            stream.set_read_timeout(Some(CONNECT_TIMEOUT)).map_err(io)?;
            let mut writer = BufWriter::new(stream.try_clone().map_err(io)?);
            let mut reader = BufReader::new(stream);
            proto::write_hello(&mut writer, token).map_err(io)?;
            let welcome = proto::read_welcome(&mut reader)
                .map_err(|e| format!("memnode {a} did not complete the bootstrap: {e}"))?
                .map_err(|m| format!("memnode {a} refused the connection: {m}"))?;
            if welcome.mn_id as usize != i {
                return Err(format!(
                    "memnode {a} is memory node {}, but it is listed at position {i} (list memnodes in id order)",
                    welcome.mn_id
                ));
            }
            reader.get_ref().set_read_timeout(None).map_err(io)?;
            nodes.push(Memnode {
                addr: a.clone(),
                welcome,
                control: Mutex::new(Control { reader, writer }),
            });
        }
        let info =
            Arc::new(ClusterInfo { node_sizes: nodes.iter().map(|n| n.welcome.length).collect() });
        Ok(UcxFabric {
            id: NEXT_FABRIC.fetch_add(1, Ordering::Relaxed),
            nodes: Arc::new(nodes),
            info,
            chunk_size,
        })
    }

    /// This thread's worker and endpoints for this fabric, made on first use.
    fn thread_conn(&self) -> std::result::Result<Rc<ThreadConn>, UcxError> {
        THREAD_CONNS.with(|t| {
            let mut t = t.borrow_mut();
            if let Some((_, c)) = t.iter().find(|(id, _)| *id == self.id) {
                return Ok(Rc::clone(c));
            }
            let worker = Worker::new()?;
            let mut eps = Vec::new();
            let mut keys = Vec::new();
            for n in self.nodes.iter() {
                let ep = worker.connect(&n.welcome.worker_address)?;
                keys.push(ep.unpack(&n.welcome.rkey)?);
                eps.push(ep);
            }
            // Finish the endpoints' wireup now, before any verb: a client that dies while its
            // wireup is still in flight can trip an assertion in UCX 1.13.1's TCP transport on the
            // memnode (see docs/ucx.md).
            let p = worker.flush()?;
            worker.wait(p)?;
            let c = Rc::new(ThreadConn {
                keys,
                eps,
                pending: RefCell::new(Vec::new()),
                fence: Cell::new(false),
                worker,
            });
            t.push((self.id, Rc::clone(&c)));
            Ok(c)
        })
    }
}

impl dmindex_fabric::Fabric for UcxFabric {
    type Transport = UcxTransport;

    fn info(&self) -> &ClusterInfo {
        &self.info
    }

    fn client(&self, cn: u16) -> Result<Client<UcxTransport>> {
        let conn = self.thread_conn().map_err(|e| unavailable(0, e.to_string()))?;
        let t = UcxTransport {
            conn,
            bases: self.nodes.iter().map(|n| n.welcome.base).collect(),
            nodes: Arc::clone(&self.nodes),
        };
        Ok(Client::new(t, Arc::clone(&self.info), cn, self.chunk_size))
    }
}

/// One thread's UCX state. Field order is drop order: keys and endpoints before the worker.
struct ThreadConn {
    keys: Vec<RemoteKey>,
    eps: Vec<Endpoint>,
    /// Zero-wait WRITEs in flight, with the bytes they read from.
    pending: RefCell<Vec<(Request, Vec<u8>)>>,
    /// A WRITE was posted since the last fence.
    fence: Cell<bool>,
    worker: Worker,
}

impl Drop for ThreadConn {
    fn drop(&mut self) {
        for (r, _data) in self.pending.get_mut().drain(..) {
            let _ = self.worker.wait(Posted::Pending(r));
        }
        if let Ok(p) = self.worker.flush() {
            let _ = self.worker.wait(p);
        }
    }
}

thread_local! {
    static THREAD_CONNS: RefCell<Vec<(u64, Rc<ThreadConn>)>> = const { RefCell::new(Vec::new()) };
}

/// A client's handle on the cluster (shares its thread's worker).
pub struct UcxTransport {
    conn: Rc<ThreadConn>,
    bases: Vec<u64>,
    nodes: Arc<Vec<Memnode>>,
}

/// Waits for an operation; if dropped first (the client stopped mid-verb), blocks until UCX is
/// done with the buffers the operation uses.
struct InFlight<'a> {
    conn: &'a ThreadConn,
    req: Option<Request>,
}

impl InFlight<'_> {
    async fn done(mut self, node: NodeId) -> Result<()> {
        loop {
            let Some(r) = &self.req else { return Ok(()) };
            self.conn.worker.progress();
            match self.conn.worker.check(r) {
                Ok(false) => yield_now().await,
                res => {
                    self.conn.worker.free(self.req.take().expect("checked above"));
                    return res.map(drop).map_err(|e| unavailable(node, e.to_string()));
                }
            }
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.req.take() {
            let _ = self.conn.worker.wait(Posted::Pending(r));
        }
    }
}

impl UcxTransport {
    fn remote(&self, addr: GlobalAddr) -> u64 {
        self.bases[addr.node() as usize] + addr.offset()
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

    async fn word_atomic(
        &self,
        addr: GlobalAddr,
        op: i32,
        operand: u64,
        reply: u64,
    ) -> Result<u64> {
        let node = addr.node();
        self.before(node)?;
        let mut reply = reply;
        let (ep, key) = (&self.conn.eps[node as usize], &self.conn.keys[node as usize]);
        // SAFETY: operand and reply live in this future, which is pinned while polled, and are
        // dropped after the flight: `done` (or InFlight's drop) waits for completion first.
        let p = unsafe { ep.atomic(op, &operand, &mut reply, self.remote(addr), key) };
        self.flight(node, p)?.done(node).await?;
        Ok(reply)
    }
}

impl Transport for UcxTransport {
    async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<()> {
        let node = addr.node();
        self.before(node)?;
        let (ep, key) = (&self.conn.eps[node as usize], &self.conn.keys[node as usize]);
        // SAFETY: buf is borrowed for this whole future; `done` (or the guard's drop) waits for
        // completion before the borrow ends.
        let p = unsafe { ep.get(buf, self.remote(addr), key) };
        self.flight(node, p)?.done(node).await
    }

    async fn write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        let node = addr.node();
        self.before(node)?;
        let (ep, key) = (&self.conn.eps[node as usize], &self.conn.keys[node as usize]);
        // SAFETY: as in read.
        let p = unsafe { ep.put(data, self.remote(addr), key) };
        self.conn.fence.set(true);
        self.flight(node, p)?.done(node).await
    }

    fn post_write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        let node = addr.node();
        self.before(node)?;
        let owned = data.to_vec();
        let (ep, key) = (&self.conn.eps[node as usize], &self.conn.keys[node as usize]);
        // SAFETY: `owned` moves into the pending list (its heap buffer does not move) and is
        // dropped only after the request completes (quiesce, reaping, or the thread's drop).
        let p = unsafe { ep.put(&owned, self.remote(addr), key) };
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
        Ok(())
    }

    async fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> Result<u64> {
        match op {
            AtomicOp::Cas { expected, new } => {
                self.word_atomic(addr, UCP_ATOMIC_OP_CSWAP, expected, new).await
            }
            AtomicOp::Faa { delta } => self.word_atomic(addr, UCP_ATOMIC_OP_ADD, delta, 0).await,
            AtomicOp::MaskedCas { compare, compare_mask, swap, swap_mask }
                if compare & compare_mask == 0
                    && swap_mask == compare_mask
                    && swap & swap_mask == swap_mask =>
            {
                // "Set these bits if they are clear": fetch-OR leaves a word whose bits are
                // already set unchanged, exactly like the failed masked CAS.
                self.word_atomic(addr, UCP_ATOMIC_OP_OR, swap_mask, 0).await
            }
            AtomicOp::MaskedCas { .. } => {
                let mut b = [0u8; 8];
                self.read(addr, &mut b).await?;
                let mut old = u64::from_le_bytes(b);
                loop {
                    let Some(new) = op.apply(old) else { return Ok(old) };
                    let got = self.word_atomic(addr, UCP_ATOMIC_OP_CSWAP, old, new).await?;
                    if got == old {
                        return Ok(old);
                    }
                    old = got;
                }
            }
        }
    }

    async fn batch(&self, node: NodeId, ops: &mut [BatchOp<'_>]) -> Result<()> {
        self.before(node)?;
        let (ep, key) = (&self.conn.eps[node as usize], &self.conn.keys[node as usize]);
        let mut flights = Vec::with_capacity(ops.len());
        let mut wrote = false;
        for op in ops.iter_mut() {
            if wrote {
                // Nothing overtakes an earlier WRITE, as in a doorbell batch.
                self.conn.worker.fence().map_err(|e| unavailable(node, e.to_string()))?;
            }
            let p = match op {
                // SAFETY: the batch's buffers are borrowed for this whole future; every flight is
                // awaited (or waited for on drop) before the borrows end.
                BatchOp::Read { addr, buf } => unsafe { ep.get(buf, self.remote(*addr), key) },
                // SAFETY: as above.
                BatchOp::Write { addr, data } => unsafe { ep.put(data, self.remote(*addr), key) },
            };
            wrote |= matches!(op, BatchOp::Write { .. });
            flights.push(self.flight(node, p)?);
        }
        if wrote {
            self.conn.fence.set(true);
        }
        for f in flights {
            f.done(node).await?;
        }
        Ok(())
    }

    async fn call(&self, node: NodeId, service: ServiceId, request: &[u8]) -> Result<Vec<u8>> {
        let mn = self
            .nodes
            .get(node as usize)
            .ok_or(FabricError::UnknownNode { node, nodes: self.nodes.len() as u16 })?;
        let mut ctl = mn.control.lock().unwrap_or_else(|e| e.into_inner());
        let Control { reader, writer } = &mut *ctl;
        let lost = |e: std::io::Error| {
            unavailable(node, format!("memnode {} control connection: {e}", mn.addr))
        };
        proto::write_call(writer, service.0, request).map_err(lost)?;
        match proto::read_reply(reader).map_err(lost)? {
            Reply::Ok(b) => Ok(b),
            Reply::OutOfMemory { requested, available } => {
                Err(FabricError::OutOfMemory { node, requested, available })
            }
            Reply::Refused(message) => Err(FabricError::Service { node, service, message }),
            Reply::UnknownService => Err(FabricError::UnknownService { node, service }),
        }
    }
}
