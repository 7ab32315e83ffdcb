//! The simulator as a [`Transport`]: each verb posts an op into the world and waits for its
//! completion event.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use dmindex_fabric::{
    AtomicOp, BatchOp, FabricError, GlobalAddr, NodeId, Result, ServiceId, Transport,
};

use dmindex_fabric::service::{InProcessPeers, MnMemory};

use crate::pause::PauseWait;
use crate::world::{OpKind, World, PS_PER_NS};
use crate::Shared;

/// One client's connection to the simulated fabric.
pub struct SimTransport {
    pub(crate) shared: Rc<Shared>,
    pub(crate) client: u32,
}

impl SimTransport {
    /// This client's id in the simulation (as [`crate::HeldWord`] names clients).
    pub fn id(&self) -> u32 {
        self.client
    }

    /// Crashes this client here, as a fault at a verb boundary would (nothing more of it goes
    /// out; verbs already posted land): a test's way to kill a client at an exact point. Never
    /// returns; the run drops the task and logs the crash ([`crate::Sim::crashes`]).
    pub async fn crash(&self) -> ! {
        self.shared.world.borrow_mut().crash_client(self.client);
        crashed().await
    }

    /// Arms a crash at this client's `posts`-th awaited post from now (1: the next), as a
    /// fault there would strike ([`Faults::crash_prob`](crate::Faults::crash_prob): the
    /// doorbell may or may not have gone out): a harness's way to crash clients by operation
    /// rather than by post. Replaces a crash armed before; `posts` 0 disarms.
    pub fn crash_within(&self, posts: u32) {
        let mut w = self.shared.world.borrow_mut();
        w.clients[self.client as usize].crash_in = (posts > 0).then_some(posts);
    }

    /// Whether a crash armed by [`SimTransport::crash_within`] has yet to strike.
    pub fn crash_armed(&self) -> bool {
        self.shared.world.borrow().clients[self.client as usize].crash_in.is_some()
    }
}

/// Waits for one op's completion event; abandons the op if dropped early, unless `taken`.
struct OpWait<'a> {
    shared: &'a Shared,
    op: u32,
    /// The op is not this wait's to abandon: done and taken, or left to a guard (a doorbell's
    /// [`Unfinished`]).
    taken: bool,
}

impl Future for OpWait<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.shared.world.borrow_mut();
        let op = w.op(self.op);
        if op.done {
            drop(w);
            self.taken = true;
            Poll::Ready(())
        } else {
            op.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for OpWait<'_> {
    fn drop(&mut self) {
        if !self.taken {
            self.shared.world.borrow_mut().abandon(self.op);
        }
    }
}

/// A doorbell's ops from `from` to `to` of `ids`, not finished yet: abandoned when dropped
/// before they are (see [`World::abandon`](crate::world)).
struct Unfinished<'a> {
    shared: &'a Shared,
    ids: [u32; dmindex_fabric::verbs::MAX_BATCH],
    from: usize,
    to: usize,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.from < self.to {
            let mut w = self.shared.world.borrow_mut();
            for &op in &self.ids[self.from..self.to] {
                w.abandon(op);
            }
        }
    }
}

/// A future that never completes: what a crashed client's verb turns into.
async fn crashed() -> ! {
    std::future::pending::<()>().await;
    unreachable!("pending() never completes")
}

/// What to do with a completed op's buffer.
enum Out<'a> {
    /// Copy the bytes read into the caller's buffer.
    CopyTo(&'a mut [u8]),
    /// Nothing (writes, atomics).
    Discard,
    /// Hand the buffer over (replies).
    Take,
}

impl SimTransport {
    /// Posts one verb the client waits for (after the crash check, the post's CPU time and any
    /// stall); `None` if the client crashed there, the verb perhaps on the wire
    /// ([`crate::world`]'s crash model).
    fn post(&self, kind: OpKind, addr: GlobalAddr, buf: Vec<u8>) -> Option<u32> {
        let mut w = self.shared.world.borrow_mut();
        match w.crash_at_post(self.client, 1) {
            None => {}
            Some(0) => return None,
            Some(_) => {
                let ready = w.post_cpu(self.client, 1);
                w.post_orphan(ready, self.client, kind, addr, buf, true);
                return None;
            }
        }
        let ready = w.post_cpu(self.client, 1) + w.stall_ps();
        Some(w.post(ready, self.client, kind, addr, buf, false))
    }

    async fn run(&self, kind: OpKind, addr: GlobalAddr, buf: Vec<u8>) -> u32 {
        let Some(op) = self.post(kind, addr, buf) else { crashed().await };
        OpWait { shared: &self.shared, op, taken: false }.await;
        self.shared.world.borrow_mut().poll_cpu(self.client);
        op
    }

    /// Takes a completed op's result and frees it.
    fn finish(&self, op: u32, out: Out<'_>) -> Result<(u64, Vec<u8>)> {
        let mut w = self.shared.world.borrow_mut();
        let o = w.op(op);
        let result = std::mem::replace(&mut o.result, Ok(0));
        let reply = match out {
            Out::CopyTo(dst) => {
                dst.copy_from_slice(&o.buf);
                Vec::new()
            }
            Out::Discard => Vec::new(),
            Out::Take => std::mem::take(&mut o.buf),
        };
        w.free_op(op);
        result.map(|r| (r, reply))
    }

    fn buffer(&self, len: usize) -> Vec<u8> {
        self.shared.world.borrow_mut().buffer(len)
    }

    /// Puts on the wire the verbs of a doorbell that went out before its client crashed (a
    /// prefix of the batch; the last may be cut short), with no one to wait for them.
    fn post_crashed(&self, ops: &[BatchOp<'_>]) {
        if ops.is_empty() {
            return;
        }
        let mut w = self.shared.world.borrow_mut();
        let ready = w.post_cpu(self.client, ops.len() as u64);
        for (i, op) in ops.iter().enumerate() {
            let (kind, addr, b) = verb(&mut w, op);
            w.post_orphan(ready, self.client, kind, addr, b, i + 1 == ops.len());
        }
    }
}

/// A batch entry as the world's verb: its kind, address and request buffer (a READ's sized to
/// what it reads, a WRITE's holding its data).
fn verb(w: &mut World, op: &BatchOp<'_>) -> (OpKind, GlobalAddr, Vec<u8>) {
    match op {
        BatchOp::Read { addr, buf } => (OpKind::Read, *addr, w.buffer(buf.len())),
        BatchOp::Write { addr, data } => {
            let mut b = w.buffer(0);
            b.extend_from_slice(data);
            (OpKind::Write, *addr, b)
        }
        BatchOp::Atomic { addr, op, .. } => (OpKind::Atomic(*op), *addr, w.buffer(0)),
    }
}

/// Fast-forward ([`crate::Sim::set_direct`]): verbs on the memory at once. The client has
/// validated every address.
impl SimTransport {
    fn direct(&self) -> bool {
        self.shared.direct.get()
    }

    fn region(&self, addr: GlobalAddr) -> &dmindex_fabric::memory::Region {
        &self.shared.regions[addr.node() as usize]
    }

    fn direct_batch(&self, ops: &mut [BatchOp<'_>]) {
        for op in ops {
            match op {
                BatchOp::Read { addr, buf } => self.region(*addr).read(addr.offset(), buf),
                BatchOp::Write { addr, data } => self.region(*addr).write(addr.offset(), data),
                BatchOp::Atomic { addr, op, old } => {
                    *old = self.region(*addr).atomic(addr.offset(), *op)
                }
            }
        }
    }
}

impl Transport for SimTransport {
    async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<()> {
        if self.direct() {
            self.region(addr).read(addr.offset(), buf);
            return Ok(());
        }
        let b = self.buffer(buf.len());
        let op = self.run(OpKind::Read, addr, b).await;
        self.finish(op, Out::CopyTo(buf)).map(|_| ())
    }

    async fn write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        if self.direct() {
            self.region(addr).write(addr.offset(), data);
            return Ok(());
        }
        let mut b = self.buffer(0);
        b.extend_from_slice(data);
        let op = self.run(OpKind::Write, addr, b).await;
        self.finish(op, Out::Discard).map(|_| ())
    }

    fn post_write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        if self.direct() {
            self.region(addr).write(addr.offset(), data);
            return Ok(());
        }
        let mut b = self.buffer(0);
        b.extend_from_slice(data);
        // A zero-wait write cannot crash the client here (it is not awaited); the crash check
        // happens at the client's next awaited verb.
        let mut w = self.shared.world.borrow_mut();
        let ready = w.post_cpu(self.client, 1);
        w.post(ready, self.client, OpKind::Write, addr, b, true);
        Ok(())
    }

    async fn quiesce(&self) -> Result<()> {
        std::future::poll_fn(|cx| {
            let mut w = self.shared.world.borrow_mut();
            let c = &mut w.clients[self.client as usize];
            if c.outstanding == 0 {
                Poll::Ready(Ok(()))
            } else {
                c.quiesce_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    async fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> Result<u64> {
        if self.direct() {
            return Ok(self.region(addr).atomic(addr.offset(), op));
        }
        let b = self.buffer(0);
        let id = self.run(OpKind::Atomic(op), addr, b).await;
        self.finish(id, Out::Discard).map(|(old, _)| old)
    }

    async fn batch(&self, _node: NodeId, ops: &mut [BatchOp<'_>]) -> Result<()> {
        if self.direct() {
            self.direct_batch(ops);
            return Ok(());
        }
        // One doorbell: one post's CPU time, then every work request on the wire at once.
        let crash = self.shared.world.borrow_mut().crash_at_post(self.client, ops.len());
        if let Some(sent) = crash {
            self.post_crashed(&ops[..sent]);
            crashed().await;
        }
        let ids = {
            let mut w = self.shared.world.borrow_mut();
            let ready = w.post_cpu(self.client, ops.len() as u64) + w.stall_ps();
            let mut ids = [0u32; dmindex_fabric::verbs::MAX_BATCH];
            for (slot, op) in ids.iter_mut().zip(ops.iter()) {
                let (kind, addr, b) = verb(&mut w, op);
                *slot = w.post(ready, self.client, kind, addr, b, false);
            }
            ids
        };
        // The doorbell's ops not finished yet are abandoned if this future is dropped (its
        // client crashed at another doorbell of the same round), so that each frees its slot
        // when it completes; the waits below leave that to this guard.
        let mut unfinished = Unfinished { shared: &self.shared, ids, from: 0, to: ops.len() };
        // Completions arrive in order: the last one's wakes the task once for the whole
        // doorbell (a task ringing several doorbells together is polled once per doorbell, not
        // once per verb); any verb still out after it is waited for below.
        if let Some(&last) = ids[..ops.len()].last() {
            OpWait { shared: &self.shared, op: last, taken: true }.await;
        }
        let mut result = Ok(());
        for (i, op) in ops.iter_mut().enumerate() {
            OpWait { shared: &self.shared, op: ids[i], taken: true }.await;
            unfinished.from = i + 1;
            let r = match op {
                BatchOp::Read { buf, .. } => self.finish(ids[i], Out::CopyTo(buf)).map(drop),
                BatchOp::Write { .. } => self.finish(ids[i], Out::Discard).map(drop),
                BatchOp::Atomic { old, .. } => {
                    self.finish(ids[i], Out::Discard).map(|(word, _)| *old = word)
                }
            };
            if let Err(e) = r {
                result = Err(e);
            }
        }
        // Only the batch's last work request is signalled: one completion to poll.
        self.shared.world.borrow_mut().poll_cpu(self.client);
        result
    }

    fn compute(&self, work: dmindex_fabric::Work, count: u64) {
        if self.direct() {
            // Fast-forward: no time passes.
            return;
        }
        self.shared.world.borrow_mut().work_cpu(self.client, work, count);
    }

    async fn pause(&self, ns: u64) {
        if self.direct() {
            // Fast-forward: no time passes.
            return;
        }
        let slot = self.shared.world.borrow_mut().pause(self.client, ns * PS_PER_NS);
        PauseWait { shared: &self.shared, slot, taken: false }.await
    }

    async fn call(&self, node: NodeId, service: ServiceId, request: &[u8]) -> Result<Vec<u8>> {
        if node as usize >= self.shared.regions.len() {
            return Err(FabricError::UnknownNode { node, nodes: self.shared.regions.len() as u16 });
        }
        if self.direct() {
            let regions = &self.shared.regions;
            let memory = |n: NodeId| regions.get(n as usize).map(|r| r as &dyn MnMemory);
            let peers = InProcessPeers::new(&self.shared.services, regions.len() as u16, &memory);
            return peers.run(node, service, request).0;
        }
        let mut b = Vec::with_capacity(request.len());
        b.extend_from_slice(request);
        let op = self.run(OpKind::Rpc(service), GlobalAddr::new(node, 0), b).await;
        self.finish(op, Out::Take).map(|(_, reply)| reply)
    }

    /// 10 ms of virtual time, ShiftLock's lease with recovery built in: a simulated client is
    /// never descheduled for longer than a configured stall (at most 5 ms in the checks).
    fn lease_ns(&self) -> u64 {
        10_000_000
    }

    fn now_ns(&self) -> u64 {
        self.shared.world.borrow().now / PS_PER_NS
    }

    async fn register_member(&self, member: u64) -> Result<()> {
        self.shared.world.borrow_mut().register_member(self.client, member);
        Ok(())
    }

    async fn fence(&self, node: NodeId, member: u64) -> Result<()> {
        if self.direct() {
            self.shared.world.borrow_mut().fence_now(self.client, node, member);
            return Ok(());
        }
        let b = self.buffer(0);
        let op = self.run(OpKind::Fence(member), GlobalAddr::new(node, 0), b).await;
        self.finish(op, Out::Discard).map(drop)
    }

    async fn reconnect(&self, node: NodeId) -> Result<()> {
        if self.direct() {
            self.shared.world.borrow_mut().connect_now(self.client, node);
            return Ok(());
        }
        let b = self.buffer(0);
        let op = self.run(OpKind::Connect, GlobalAddr::new(node, 0), b).await;
        self.finish(op, Out::Discard).map(drop)
    }
}
