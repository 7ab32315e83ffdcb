//! Verbs as messages the memnode executes (transports with no one-sided lane: TCP): one
//! request and one reply per verb, one of each per doorbell batch ([`crate::message_verbs`]).

use std::rc::Rc;

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, GlobalAddr, NodeId, Result};

use super::wait::{verb_result, Awaited, ReplySlot};
use super::{unavailable, NodeConn, UcxTransport};
use crate::auth::VERB_KEY;
use crate::message_verbs::{self as msg, Request, Verb, REQUEST_AM, REQUEST_LEN};
use crate::ucp::Posted;

impl UcxTransport {
    /// Sends `verb` on `addr` (a WRITE's bytes in `payload`) as a message over `to`; returns
    /// the reply to await, or nothing when `reply` is false (a zero-wait WRITE).
    pub(super) fn post_message(
        &self,
        to: &Rc<NodeConn>,
        addr: GlobalAddr,
        verb: Verb,
        payload: &[u8],
        reply: bool,
    ) -> Result<Option<Awaited<'_>>> {
        let mut message = Vec::with_capacity(REQUEST_LEN + payload.len());
        message.resize(REQUEST_LEN, 0);
        message.extend_from_slice(payload);
        self.post_request(to, addr, verb, message, reply)
    }

    /// Sends `message` (room for the request header, then the payload) as the request `verb`
    /// on `addr`, as [`Self::post_message`] does, speaking for this client's session there.
    pub(super) fn post_request(
        &self,
        to: &Rc<NodeConn>,
        addr: GlobalAddr,
        verb: Verb,
        message: Vec<u8>,
        reply: bool,
    ) -> Result<Option<Awaited<'_>>> {
        let credentials = self.credentials(addr.node(), to, verb)?;
        self.send_request(to, addr, verb, message, reply, credentials)
    }

    /// [`Self::post_request`] speaking for `session` with `key`.
    pub(super) fn send_request(
        &self,
        to: &Rc<NodeConn>,
        addr: GlobalAddr,
        verb: Verb,
        mut message: Vec<u8>,
        reply: bool,
        (session, key): (u32, [u8; VERB_KEY]),
    ) -> Result<Option<Awaited<'_>>> {
        let (c, node) = (&*self.conn, addr.node());
        self.before(node)?;
        let awaited = reply.then(|| {
            let tag = c.replies.last_tag.get() + 1;
            c.replies.last_tag.set(tag);
            c.replies.slots.borrow_mut().insert(tag, ReplySlot::default());
            Awaited { conn: c, to: Rc::clone(to), node, tag }
        });
        let tag = awaited.as_ref().map_or(0, |a| a.tag);
        message[..REQUEST_LEN]
            .copy_from_slice(&Request { session, tag, offset: addr.offset(), verb, key }.encode());
        // SAFETY: if the send is still in flight, `message` moves into the pending list (its heap
        // buffer does not move) and is dropped only after the send completes.
        let p = unsafe {
            to.ep.send_message(REQUEST_AM, &message[..REQUEST_LEN], &message[REQUEST_LEN..])
        };
        match p.map_err(|e| unavailable(node, e.to_string()))? {
            Posted::Done => {}
            Posted::Pending(r) => c.pending.borrow_mut().push((r, message)),
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
        let writes: usize = ops
            .iter()
            .map(|op| match op {
                BatchOp::Write { data, .. } => data.len(),
                _ => 0,
            })
            .sum();
        let mut message = Vec::with_capacity(REQUEST_LEN * (ops.len() + 1) + writes);
        message.resize(REQUEST_LEN, 0);
        for op in ops.iter() {
            let (addr, verb, payload) = match op {
                BatchOp::Read { addr, buf } => {
                    (*addr, Verb::Read { len: buf.len() as u64 }, &[][..])
                }
                BatchOp::Write { addr, data } => (*addr, Verb::Write, &data[..]),
                BatchOp::Atomic { addr, op, .. } => (*addr, Verb::Atomic(*op), &[][..]),
            };
            msg::push_batched(&mut message, addr.offset(), verb, payload);
        }
        let at = GlobalAddr::new(node, 0);
        let verb = Verb::Batch { count: ops.len() as u64 };
        let a = self.post_request(to, at, verb, message, true)?.expect("a reply was asked for");
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
