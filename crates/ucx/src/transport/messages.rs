//! Verbs as messages the memnode executes (transports with no one-sided lane: TCP): one
//! request and one reply per verb, one of each per doorbell batch ([`crate::message_verbs`]);
//! the requests a thread's tasks post while they run travel together ([`crate::envelope`]).

use std::rc::Rc;

use dmindex_fabric::exec::block;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, FabricError, GlobalAddr, NodeId, Result};

use super::wait::{verb_result, Awaited, ReplySlot};
use super::{unavailable, NodeConn, ThreadConn, UcxTransport};
use crate::auth::VERB_KEY;
use crate::envelope;
use crate::message_verbs::{self as msg, Request, Verb, REQUEST_AM, REQUEST_LEN};
use crate::ucp::Posted;

impl UcxTransport {
    /// Posts `verb` on `addr` (a WRITE's bytes in `payload`) as a message over `to`; returns
    /// the reply to await, or nothing when `reply` is false (a zero-wait WRITE).
    pub(super) fn post_message(
        &self,
        to: &Rc<NodeConn>,
        addr: GlobalAddr,
        verb: Verb,
        payload: &[u8],
        reply: bool,
    ) -> Result<Option<Awaited<'_>>> {
        let credentials = self.credentials(addr.node(), to, verb)?;
        self.post_request(to, addr, verb, reply, credentials, (payload.len(), 0), |b| {
            b.extend_from_slice(payload)
        })
    }

    /// Posts the request `verb` on `addr`, speaking for `session` with `key`, its payload (of
    /// `len` bytes, a BATCH asking for `reads` bytes back) appended by `write`: into `to`'s
    /// outbox, sent when this thread's tasks all wait, with whatever else they posted to that
    /// memnode ([`crate::envelope`]), or at once under an executor that does not say when that
    /// is. Returns the reply to await, or nothing when `reply` is false.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post_request(
        &self,
        to: &Rc<NodeConn>,
        addr: GlobalAddr,
        verb: Verb,
        reply: bool,
        (session, key): (u32, [u8; VERB_KEY]),
        (len, reads): (usize, u64),
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Option<Awaited<'_>>> {
        let (c, node) = (&*self.conn, addr.node());
        self.before(node)?;
        if REQUEST_LEN.checked_add(len).is_none_or(|l| l > envelope::MAX_FRAME) {
            return Err(FabricError::Unsupported("a verb message of 4 GiB or more"));
        }
        let reads = match verb {
            Verb::Read { len } => len,
            _ => reads,
        };
        // Listed in `unsent` while its outbox holds anything.
        let listed = !to.outbox.borrow().is_empty();
        if listed && to.outbox.borrow().full_for(len, reads) {
            c.send(to);
        }
        // After a failed send nothing more goes out on this endpoint: a verb after a lost one
        // (an unlock after its data) must not land.
        if let Some(e) = to.unsent_failure() {
            return Err(unavailable(node, e));
        }
        let awaited = reply.then(|| {
            let tag = c.replies.last_tag.get() + 1;
            c.replies.last_tag.set(tag);
            c.replies.slots.borrow_mut().insert(tag, ReplySlot::default());
            Awaited { conn: c, to: Rc::clone(to), node, tag }
        });
        let tag = awaited.as_ref().map_or(0, |a| a.tag);
        let header = Request { session, tag, offset: addr.offset(), verb, key }.encode();
        to.outbox.borrow_mut().push(&header, reads, write);
        if !listed {
            c.unsent.borrow_mut().push(Rc::clone(to));
        }
        if !block::can_sleep() {
            c.send_all();
        }
        if let Some(e) = to.unsent_failure() {
            return Err(unavailable(node, e));
        }
        Ok(awaited)
    }

    /// One verb as a message, awaited: (old word, READ bytes).
    pub(super) async fn message(
        &self,
        to: &Rc<NodeConn>,
        addr: GlobalAddr,
        verb: Verb,
        payload: &[u8],
    ) -> Result<(u64, Vec<u8>)> {
        let len = match verb {
            Verb::Read { len } => len,
            Verb::Write => payload.len() as u64,
            _ => 8,
        };
        let a = self.post_message(to, addr, verb, payload, true)?.expect("a reply was asked for");
        a.reply(&self.info, addr, len, self.shared.timeout).await
    }

    /// A batch as one BATCH message and one reply: one round trip, one message each way (the
    /// memnode executes its verbs in order: [`msg`]'s "Batches").
    pub(super) async fn batch_message(
        &self,
        to: &Rc<NodeConn>,
        node: NodeId,
        ops: &mut [BatchOp<'_>],
    ) -> Result<()> {
        let (mut writes, mut reads) = (0, 0);
        for op in ops.iter() {
            match op {
                BatchOp::Write { data, .. } => writes += data.len(),
                BatchOp::Read { buf, .. } => reads += buf.len() as u64,
                BatchOp::Atomic { .. } => {}
            }
        }
        let at = GlobalAddr::new(node, 0);
        let verb = Verb::Batch { count: ops.len() as u64 };
        let credentials = self.credentials(node, to, verb)?;
        let len = REQUEST_LEN * ops.len() + writes;
        let a = self.post_request(to, at, verb, true, credentials, (len, reads), |message| {
            for op in ops.iter() {
                let (addr, verb, payload) = match op {
                    BatchOp::Read { addr, buf } => {
                        (*addr, Verb::Read { len: buf.len() as u64 }, &[][..])
                    }
                    BatchOp::Write { addr, data } => (*addr, Verb::Write, &data[..]),
                    BatchOp::Atomic { addr, op, .. } => (*addr, Verb::Atomic(*op), &[][..]),
                };
                msg::push_batched(message, addr.offset(), verb, payload);
            }
        })?;
        let a = a.expect("a reply was asked for");
        let (_, data) = a.reply(&self.info, at, 0, self.shared.timeout).await?;
        let mut reads = [0usize; MAX_BATCH];
        for (len, op) in reads.iter_mut().zip(ops.iter()) {
            if let BatchOp::Read { buf, .. } = op {
                *len = buf.len();
            }
        }
        let reads = reads[..ops.len()].iter().copied();
        let replies = msg::batch_replies(&data, reads).ok_or_else(|| {
            unavailable(node, "the memnode answered a batch with replies that do not match it")
        })?;
        for (op, (reply, bytes)) in ops.iter_mut().zip(replies) {
            match op {
                BatchOp::Read { addr, buf } => {
                    verb_result(&reply, &self.info, *addr, buf.len() as u64)?;
                    copy_read(node, buf, bytes)?;
                }
                BatchOp::Write { addr, data } => {
                    verb_result(&reply, &self.info, *addr, data.len() as u64)?
                }
                BatchOp::Atomic { addr, old, .. } => {
                    verb_result(&reply, &self.info, *addr, 8)?;
                    *old = reply.value;
                }
            }
        }
        Ok(())
    }
}

impl ThreadConn {
    /// Sends what waits in every outbox of this thread ([`crate::envelope`]): when its tasks
    /// all wait, before a call, and before the thread goes.
    pub(super) fn send_all(&self) {
        // Taken out while the sends run, then put back empty with its room kept.
        let mut unsent = self.unsent.take();
        for to in unsent.drain(..) {
            self.send(&to);
        }
        self.unsent.replace(unsent);
    }

    /// Sends what waits in `to`'s outbox: one lone message, or one envelope of several. A
    /// send that fails marks `to` failed ([`NodeConn::unsent_failure`]): nothing more is sent
    /// on it (a reconnect replaces it), later verbs fail, and the tasks waiting for replies are
    /// woken to learn it.
    pub(super) fn send(&self, to: &NodeConn) {
        let mut outbox = to.outbox.borrow_mut();
        if to.unsent_failure().is_some() {
            outbox.clear();
            return;
        }
        let Some((header, payload)) = outbox.message() else { return };
        // SAFETY: if the send is still in flight, the outbox's buffer moves into the pending
        // list (its heap buffer does not move) and is dropped only after the send completes;
        // otherwise UCX copied the bytes in the call.
        let posted = unsafe { to.ep.send_message(REQUEST_AM, header, payload) };
        let frames = outbox.frames();
        match posted {
            Ok(Posted::Done) => outbox.clear(),
            Ok(Posted::Pending(r)) => self.pending.borrow_mut().push((r, outbox.take())),
            Err(e) => {
                outbox.clear();
                to.failed.replace(Some(e.to_string()));
                self.replies.wake_all();
                return;
            }
        }
        self.sent_messages.set(self.sent_messages.get() + 1);
        self.sent_requests.set(self.sent_requests.get() + frames);
    }
}

impl NodeConn {
    /// Why the last send on this endpoint failed, if it did: the verbs after it fail too.
    pub(super) fn unsent_failure(&self) -> Option<String> {
        self.failed.borrow().clone()
    }
}

/// Copies a READ message's reply into the caller's buffer.
pub(super) fn copy_read(node: NodeId, buf: &mut [u8], data: &[u8]) -> Result<()> {
    if data.len() != buf.len() {
        return Err(unavailable(
            node,
            format!("the memnode answered a READ of {} bytes with {}", buf.len(), data.len()),
        ));
    }
    buf.copy_from_slice(data);
    Ok(())
}
