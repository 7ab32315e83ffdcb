//! How a client thread waits for its verbs: replies by tag, UCX requests in flight, and the
//! thread's UCX state as the executor's [`WaitSource`], so that a thread whose tasks all wait
//! blocks on its worker's event descriptor instead of spinning
//! ([`dmindex_fabric::exec::block`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::task::Waker;
use std::time::{Duration, Instant};

use dmindex_fabric::exec::block::{self, WaitSource};
use dmindex_fabric::{ClusterInfo, FabricError, GlobalAddr, NodeId, Result};

use super::{unavailable, NodeConn, ThreadConn};
use crate::message_verbs as msg;
use crate::ucp::{Posted, Request as UcxRequest};

/// A reply header and its payload (a READ's bytes).
pub(super) type Delivered = (msg::Reply, Vec<u8>);

/// A verb message's place among the replies: the reply once it came, and the task to wake
/// then.
#[derive(Default)]
pub(super) struct ReplySlot {
    pub(super) reply: Option<Delivered>,
    pub(super) waker: Option<Waker>,
}

/// Replies to this thread's verb messages, by tag, as the worker's handler delivers them.
#[derive(Default)]
pub(super) struct Replies {
    pub(super) slots: RefCell<HashMap<u64, ReplySlot>>,
    /// Tag 0 means "no reply".
    pub(super) last_tag: Cell<u64>,
}

impl Replies {
    /// Takes the reply to `tag` if it came.
    pub(super) fn take(&self, tag: u64) -> Option<Delivered> {
        self.slots.borrow_mut().get_mut(&tag).and_then(|s| s.reply.take())
    }

    /// Hands the reply `header` with its `payload` to the verb that waits for it, and wakes
    /// its task; a reply nobody waits for any more (its verb was dropped) is discarded.
    pub(super) fn deliver(&self, header: &[u8], payload: &[u8]) {
        let Some(reply) = msg::Reply::decode(header) else { return };
        if let Some(slot) = self.slots.borrow_mut().get_mut(&reply.tag) {
            slot.reply = Some((reply, payload.to_vec()));
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
    }

    /// Wakes every task waiting for a reply, to look at its endpoint again (a send failed).
    pub(super) fn wake_all(&self) {
        for s in self.slots.borrow_mut().values_mut() {
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }

    /// Waits until the reply to `tag` may have come: woken by its delivery, or by a nap
    /// ([`WaitSource::napped`]). Under another executor, yields instead.
    pub(super) async fn wait(&self, tag: u64) {
        block::park(|w| match self.slots.borrow_mut().get_mut(&tag) {
            Some(ReplySlot { reply: None, waker }) => {
                *waker = Some(w.clone());
                true
            }
            _ => false,
        })
        .await
    }
}

/// A thread whose tasks all wait blocks on its worker: progress wakes the tasks it completes
/// (replies wake their own task in the handler; UCX requests every waiting task).
impl WaitSource for ThreadConn {
    fn flush(&self) {
        self.send_all();
    }

    fn progress(&self) -> bool {
        let did = self.worker.progress();
        if did {
            for w in self.waiting.borrow_mut().drain(..) {
                w.wake();
            }
        }
        did
    }

    fn arm(&self) -> Option<std::os::fd::RawFd> {
        // A worker that cannot be armed is progressed again rather than slept on.
        self.worker.arm().ok().flatten()
    }

    fn napped(&self) {
        for w in self.waiting.borrow_mut().drain(..) {
            w.wake();
        }
        self.replies.wake_all();
    }
}

impl ThreadConn {
    /// Waits until some UCX request may have completed: woken by progress or a nap. Under
    /// another executor, yields instead.
    pub(super) async fn wait(&self) {
        block::park(|w| {
            self.waiting.borrow_mut().push(w.clone());
            true
        })
        .await
    }
}

/// Waits for an operation; if dropped first (the client stopped mid-verb), blocks until UCX is
/// done with the buffers the operation uses.
pub(super) struct InFlight<'a> {
    pub(super) conn: &'a ThreadConn,
    pub(super) req: Option<UcxRequest>,
}

impl InFlight<'_> {
    pub(super) async fn done(mut self, node: NodeId) -> Result<()> {
        loop {
            let Some(r) = &self.req else { return Ok(()) };
            self.conn.worker.progress();
            match self.conn.worker.check(r) {
                Ok(false) => self.conn.wait().await,
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

/// A verb message awaiting its reply; if dropped first, the reply is discarded when it comes.
pub(super) struct Awaited<'a> {
    pub(super) conn: &'a ThreadConn,
    pub(super) to: Rc<NodeConn>,
    pub(super) node: NodeId,
    pub(super) tag: u64,
}

impl Awaited<'_> {
    /// The memnode's reply within `timeout`: `Ok` with the READ bytes, or the error it reported
    /// for `addr` (a verb of `len` bytes), or the connection's failure.
    pub(super) async fn reply(
        self,
        info: &ClusterInfo,
        addr: GlobalAddr,
        len: u64,
        timeout: Duration,
    ) -> Result<(u64, Vec<u8>)> {
        let (reply, data) = self.delivered(timeout).await?;
        verb_result(&reply, info, addr, len).map(|()| (reply.value, data))
    }

    /// The memnode's reply within `timeout`, whatever its status, or the connection's failure.
    pub(super) async fn delivered(self, timeout: Duration) -> Result<Delivered> {
        let node = self.node;
        let deadline = Instant::now() + timeout;
        loop {
            // This thread's executor progresses the worker once every task waits, and the reply
            // handler wakes this one; progressing here too would poll the sockets once more per
            // task per wake (and before the request has even been sent: it waits in the
            // outbox until then).
            if !block::can_sleep() {
                self.conn.worker.progress();
            }
            if let Some(delivered) = self.conn.replies.take(self.tag) {
                return Ok(delivered);
            }
            if let Some(e) = self.to.ep.failure() {
                return Err(unavailable(node, format!("connection lost: {e}")));
            }
            if let Some(e) = self.to.unsent_failure() {
                return Err(unavailable(node, format!("the verb could not be sent: {e}")));
            }
            // Looked at on every wake: a waiting task is polled once per reply or nap, not in
            // a loop (reading the clock every 64 polls put a SIGSTOPped memnode's report
            // 0.3 s past the timeout: 64 naps).
            if Instant::now() >= deadline {
                return Err(unavailable(node, format!("no reply to a verb within {timeout:?}")));
            }
            self.conn.replies.wait(self.tag).await;
        }
    }
}

/// What a verb's reply says of the verb on `addr` (of `len` bytes).
pub(super) fn verb_result(
    reply: &msg::Reply,
    info: &ClusterInfo,
    addr: GlobalAddr,
    len: u64,
) -> Result<()> {
    let node = addr.node();
    match reply.status {
        msg::Status::Ok => Ok(()),
        msg::Status::OutOfBounds => {
            Err(FabricError::OutOfBounds { addr, len, size: info.node_sizes[node as usize] })
        }
        msg::Status::Misaligned => Err(FabricError::Misaligned { addr, required: 8 }),
        msg::Status::Refused => Err(unavailable(
            node,
            "the memnode refused the verb: this client's verb key is not its own (it restarted \
             since): reconnect",
        )),
        msg::Status::Fenced => Err(FabricError::Fenced { node }),
        msg::Status::Unfenceable => Err(FabricError::Unsupported(
            "fence a member whose verbs reach a memnode's pool one-sidedly (shared memory, RDMA)",
        )),
        msg::Status::Full => Err(unavailable(
            node,
            "the memnode keeps as many sessions or fenced members as it can (a restart empties \
             them, with its pool)",
        )),
    }
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        self.conn.replies.slots.borrow_mut().remove(&self.tag);
    }
}
