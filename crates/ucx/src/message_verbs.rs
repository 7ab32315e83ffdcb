//! Memnode-executed verbs: READ, WRITE and the atomics sent as UCX active messages and carried
//! out by the memnode's progress thread on its pool.
//!
//! # Why
//!
//! Where a transport cannot reach the pool one-sidedly (TCP), UCX 1.13.1 emulates RMA and atomics
//! in software: the memnode's worker executes each `ucp_put_nbx`/`ucp_get_nbx`/atomic and sends
//! an acknowledgement or the data back (`rma_sw.c`, `amo_sw.c`). If that reply cannot be sent
//! because the client has died, `ucp_request_try_send` aborts the whole memnode ("Fatal:
//! unexpected error: Endpoint timeout"), and the pool is lost with it. Active messages complete a
//! failed send with an error instead. So on such endpoints (no atomic lane: see
//! `Endpoint::one_sided`) the transport sends its verbs as messages and the memnode executes
//! them itself: the same work UCX's emulation does, but a dead client only loses its replies.
//! Transports that reach the pool one-sidedly (shared memory, RDMA) keep using UCX RMA.
//!
//! # Wire format
//!
//! All integers little-endian. A request is one active message [`REQUEST_AM`] whose header is:
//!
//! ```text
//!  0        1      4          8           16          24          32          40          48          56                       72
//!  +--------+------+----------+-----------+-----------+-----------+-----------+-----------+-----------+-----------------------+
//!  | verb   | zero | session  | tag       | offset    | a         | b         | c         | d         | key (16 bytes)        |
//!  +--------+------+----------+-----------+-----------+-----------+-----------+-----------+-----------+-----------------------+
//!  verb 1 READ      a = length
//!       2 WRITE     the bytes are the message's payload
//!       3 CAS       a = expected, b = new
//!       4 FAA       a = delta
//!       5 MASKED    a = compare, b = compare mask, c = swap, d = swap mask
//!       6 FLUSH     (nothing: answered once every earlier verb has been executed)
//!       7 BATCH     a = count (1 to MAX_BATCH): the payload holds that many verbs, below
//!       8 REGISTER  a = member word (non-zero), b = 1 if the session's verbs reach the pool
//!                   one-sidedly, else 0; session 0 and the memnode's verb key. Reply: value =
//!                   the session's slot, payload = its key (16 bytes); status ok, or fenced (the
//!                   member was fenced here: the session is fenced from its start)
//!       9 FENCE     a = member word. Reply once no verb of the member's executes here: status
//!                   ok (value = the sessions marked), unfenceable (one of them is one-sided),
//!                   or full
//!      10 END       the session ends (tag 0: no reply)
//!  session the slot of the session the message speaks for (crate::sessions); 0 = none
//!  tag     the client's request number, echoed in the reply; 0 = no reply (a posted WRITE)
//!  offset  byte offset in the pool
//!  key     session 0: the memnode's verb key, which only clients that proved they hold the
//!          cluster's token learn (crate::auth); else the session's key, which only the client
//!          that registered it learns. A request with another key is refused and logged, and
//!          touches nothing; one of a fenced session is refused (status fenced)
//! ```
//!
//! The reply is one active message [`REPLY_AM`] with a 24-byte header and, for a READ that
//! succeeded, the bytes read as payload (for a REGISTER, the session's key):
//!
//! ```text
//!  0           8           16          24
//!  +-----------+-----------+-----------+
//!  | tag       | status    | value     |     status 0 ok, 1 out of bounds, 2 misaligned,
//!  +-----------+-----------+-----------+     3 refused (a wrong key), 4 fenced,
//!                                            5 unfenceable, 6 full; value = the old word
//!                                            (atomics), a slot (REGISTER), a count (FENCE)
//! ```
//!
//! # Batches
//!
//! Verbs posted together (a doorbell batch) travel as one BATCH request and one reply, so that
//! a batch costs the memnode and the client one message each way, not one per verb. Each verb in
//! the payload is a request header as above whose session and key fields are zero (the BATCH's
//! cover them all) and whose `a` is a WRITE's length, followed by a WRITE's bytes:
//!
//! ```text
//!  payload:  | header 1 (72) | bytes 1 (WRITE) | header 2 (72) | ... | header n (72) | bytes n |
//!  reply:    header (tag, status of the batch, value = n), payload:
//!            | reply 1 (24) | bytes read 1 (READ, if ok) | ... | reply n (24) | bytes read n |
//! ```
//!
//! The memnode executes them in order, as a NIC executes a doorbell batch's WQEs in order: a
//! verb never overtakes an earlier WRITE or atomic of its batch. A batch with a wrong key is
//! refused whole and touches nothing; one whose payload does not parse is dropped whole before
//! any of its verbs runs.
//!
//! # Envelopes
//!
//! The messages a client thread's tasks post while they run travel in one active message, with
//! one reply message for those that ask: [`crate::envelope`], told from a lone request by its
//! header's length.
//!
//! # Ordering and atomicity
//!
//! An endpoint's messages travel in order on its one eager lane (`Worker::new` pins
//! `MAX_EAGER_RAILS` to 1), and the memnode executes each
//! as it arrives, so a verb never overtakes an earlier one from the same worker ("data, then
//! unlock" holds without a fence). Atomics are 8-byte CPU atomics on the pool, so they are atomic
//! with each other, with the memnode's services, and with one-sided atomics of shared-memory
//! clients on the same pool. A WRITE's reply means the bytes are in the pool; a READ may see a
//! concurrent WRITE's bytes partly (as any READ racing a WRITE may).

use dmindex_fabric::service::MnMemory;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::AtomicOp;

use crate::auth::VERB_KEY;
use crate::sessions::Sessions;

/// Active-message id of requests (client → memnode).
pub const REQUEST_AM: u32 = 0xd1;
/// Active-message id of replies (memnode → client).
pub const REPLY_AM: u32 = 0xd2;
/// Request header length.
pub const REQUEST_LEN: usize = 72;
/// Reply header length.
pub const REPLY_LEN: usize = 24;
/// Longest READ a memnode answers.
pub const MAX_READ: u64 = 64 << 20;
/// Longest reply a batch may ask for (its READs in all).
pub const MAX_BATCH_READ: u64 = 64 << 20;

/// What a request asks the memnode to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Read {
        len: u64,
    },
    Write,
    Atomic(AtomicOp),
    Flush,
    /// `count` verbs in the payload, executed in order ([module docs](self)).
    Batch {
        count: u64,
    },
    /// Opens a session for cluster member `member` ([`crate::sessions`]).
    Register {
        member: u64,
        one_sided: bool,
    },
    /// Fences cluster member `member` ([`crate::sessions`]).
    Fence {
        member: u64,
    },
    /// Ends the request's session.
    End,
}

/// A decoded request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The session the request speaks for; 0: none ([`crate::sessions`]).
    pub session: u32,
    pub tag: u64,
    pub offset: u64,
    pub verb: Verb,
    /// The memnode's verb key as the client holds it (session 0), or the session's key.
    pub key: [u8; VERB_KEY],
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Status {
    Ok = 0,
    OutOfBounds = 1,
    Misaligned = 2,
    /// The request's key is not the memnode's verb key (session 0) or its session's: nothing
    /// was done.
    Refused = 3,
    /// The request's session was fenced: nothing was done.
    Fenced = 4,
    /// A FENCE marked a session whose verbs reach the pool one-sidedly: it cannot hold.
    Unfenceable = 5,
    /// A REGISTER or FENCE found the memnode's table full ([`crate::sessions::MAX_SESSIONS`],
    /// [`crate::sessions::MAX_FENCED`]).
    Full = 6,
}

/// A decoded reply header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub tag: u64,
    pub status: Status,
    /// The word before an atomic; 0 otherwise.
    pub value: u64,
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Request {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let (code, ops) = match self.verb {
            Verb::Read { len } => (1u8, [len, 0, 0, 0]),
            Verb::Write => (2, [0; 4]),
            Verb::Atomic(AtomicOp::Cas { expected, new }) => (3, [expected, new, 0, 0]),
            Verb::Atomic(AtomicOp::Faa { delta }) => (4, [delta, 0, 0, 0]),
            Verb::Atomic(AtomicOp::MaskedCas { compare, compare_mask, swap, swap_mask }) => {
                (5, [compare, compare_mask, swap, swap_mask])
            }
            Verb::Flush => (6, [0; 4]),
            Verb::Batch { count } => (7, [count, 0, 0, 0]),
            Verb::Register { member, one_sided } => (8, [member, one_sided as u64, 0, 0]),
            Verb::Fence { member } => (9, [member, 0, 0, 0]),
            Verb::End => (10, [0; 4]),
        };
        let mut h = [0u8; REQUEST_LEN];
        h[0] = code;
        h[4..8].copy_from_slice(&self.session.to_le_bytes());
        h[8..16].copy_from_slice(&self.tag.to_le_bytes());
        h[16..24].copy_from_slice(&self.offset.to_le_bytes());
        for (i, v) in ops.iter().enumerate() {
            h[24 + 8 * i..32 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        h[56..72].copy_from_slice(&self.key);
        h
    }

    /// `None` for a header of the wrong length or an unknown verb.
    pub fn decode(h: &[u8]) -> Option<Request> {
        if h.len() != REQUEST_LEN {
            return None;
        }
        let (a, b, c, d) = (word(h, 24), word(h, 32), word(h, 40), word(h, 48));
        let verb = match h[0] {
            1 => Verb::Read { len: a },
            2 => Verb::Write,
            3 => Verb::Atomic(AtomicOp::Cas { expected: a, new: b }),
            4 => Verb::Atomic(AtomicOp::Faa { delta: a }),
            5 => Verb::Atomic(AtomicOp::MaskedCas {
                compare: a,
                compare_mask: b,
                swap: c,
                swap_mask: d,
            }),
            6 => Verb::Flush,
            7 => Verb::Batch { count: a },
            8 if b <= 1 => Verb::Register { member: a, one_sided: b == 1 },
            9 => Verb::Fence { member: a },
            10 => Verb::End,
            _ => return None,
        };
        let key = h[56..72].try_into().expect("16 bytes");
        let session = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        Some(Request { session, tag: word(h, 8), offset: word(h, 16), verb, key })
    }
}

impl Reply {
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut h = [0u8; REPLY_LEN];
        h[0..8].copy_from_slice(&self.tag.to_le_bytes());
        h[8..16].copy_from_slice(&(self.status as u64).to_le_bytes());
        h[16..24].copy_from_slice(&self.value.to_le_bytes());
        h
    }

    /// `None` for a header of the wrong length or an unknown status.
    pub fn decode(h: &[u8]) -> Option<Reply> {
        if h.len() != REPLY_LEN {
            return None;
        }
        let status = match word(h, 8) {
            0 => Status::Ok,
            1 => Status::OutOfBounds,
            2 => Status::Misaligned,
            3 => Status::Refused,
            4 => Status::Fenced,
            5 => Status::Unfenceable,
            6 => Status::Full,
            _ => return None,
        };
        Some(Reply { tag: word(h, 0), status, value: word(h, 16) })
    }
}

/// Carries out `req` (`payload`: a WRITE's bytes, or a BATCH's verbs) on `mem`, or on
/// `sessions` (REGISTER, FENCE, END), if its session may act ([`Sessions::admit`]: the key, then
/// the fence), appending a READ's bytes (a REGISTER's key; a BATCH's replies) to `out`, the reply
/// message being built, so they are copied once. Returns the reply header, or `None` for a BATCH
/// whose payload is not exactly its verbs, well formed (then nothing was done). Nothing a client
/// sends can make it panic: the key, bounds and alignment are checked here, before `mem` (whose
/// own checks assert).
pub fn execute(
    mem: &dyn MnMemory,
    sessions: &mut Sessions,
    req: &Request,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Option<Reply> {
    let reply = |status, value| Reply { tag: req.tag, status, value };
    match sessions.admit(req.session, &req.key) {
        Ok(()) => {}
        // A fenced session may still end (its client is going away or registering anew).
        Err(Status::Fenced) if req.verb == Verb::End => {}
        Err(status) => return Some(reply(status, 0)),
    }
    Some(match req.verb {
        Verb::Batch { count } => return execute_batch(mem, req.tag, count, payload, out),
        // A session opens others only as the memnode's client: it registers anew with the
        // memnode's key, so a fenced client may join again as another member.
        Verb::Register { .. } if req.session != 0 => reply(Status::Refused, 0),
        Verb::Register { member, one_sided } => match sessions.register(member, one_sided) {
            Ok(r) => {
                out.extend_from_slice(&r.key);
                let status = if r.fenced { Status::Fenced } else { Status::Ok };
                reply(status, r.slot as u64)
            }
            Err(status) => reply(status, 0),
        },
        Verb::Fence { member } => match sessions.fence(member) {
            Ok(f) if f.one_sided => reply(Status::Unfenceable, f.sessions),
            Ok(f) => reply(Status::Ok, f.sessions),
            Err(status) => reply(status, 0),
        },
        Verb::End => {
            sessions.end(req.session);
            reply(Status::Ok, 0)
        }
        _ => perform(mem, req, payload, out),
    })
}

/// A data verb, once its session was admitted (a batch is admitted once for all its verbs).
fn perform(mem: &dyn MnMemory, req: &Request, payload: &[u8], out: &mut Vec<u8>) -> Reply {
    let reply = |status, value| Reply { tag: req.tag, status, value };
    let fits = |len: u64| req.offset.checked_add(len).is_some_and(|end| end <= mem.size());
    match req.verb {
        Verb::Read { len } if len > MAX_READ || !fits(len) => reply(Status::OutOfBounds, 0),
        Verb::Read { len } => {
            let at = out.len();
            out.resize(at + len as usize, 0);
            mem.read(req.offset, &mut out[at..]);
            reply(Status::Ok, 0)
        }
        Verb::Write if !fits(payload.len() as u64) => reply(Status::OutOfBounds, 0),
        Verb::Write => {
            mem.write(req.offset, payload);
            reply(Status::Ok, 0)
        }
        Verb::Atomic(_) if !fits(8) => reply(Status::OutOfBounds, 0),
        Verb::Atomic(_) if req.offset % 8 != 0 => reply(Status::Misaligned, 0),
        Verb::Atomic(op) => reply(Status::Ok, mem.atomic(req.offset, op)),
        Verb::Flush => reply(Status::Ok, 0),
        // Not data verbs: [`execute`] answers them, and a batch carries none.
        Verb::Batch { .. } | Verb::Register { .. } | Verb::Fence { .. } | Verb::End => {
            reply(Status::OutOfBounds, 0)
        }
    }
}

/// Appends one verb of a batch to `out` (the BATCH payload being built): its header without a
/// key, `a` = a WRITE's length, then a WRITE's bytes.
pub fn push_batched(out: &mut Vec<u8>, offset: u64, verb: Verb, payload: &[u8]) {
    let mut h = Request { session: 0, tag: 0, offset, verb, key: [0; VERB_KEY] }.encode();
    if verb == Verb::Write {
        h[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    }
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// The verbs of a BATCH payload, in order: each request and its WRITE bytes. Yields an `Err`
/// where the payload stops parsing.
struct Batched<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Batched<'a> {
    type Item = Result<(Request, &'a [u8]), ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let Some(h) = self.rest.get(..REQUEST_LEN) else { return Some(Err(())) };
        let Some(req) = Request::decode(h) else { return Some(Err(())) };
        let len = match req.verb {
            Verb::Write => word(h, 24),
            Verb::Read { .. } | Verb::Atomic(_) => 0,
            Verb::Flush
            | Verb::Batch { .. }
            | Verb::Register { .. }
            | Verb::Fence { .. }
            | Verb::End => return Some(Err(())),
        };
        let after = &self.rest[REQUEST_LEN..];
        let Some(bytes) = usize::try_from(len).ok().and_then(|l| after.get(..l)) else {
            return Some(Err(()));
        };
        self.rest = &after[bytes.len()..];
        Some(Ok((req, bytes)))
    }
}

/// The bytes a request asks the memnode to send back: a READ's length, a BATCH's READs in all
/// (`payload`: its verbs; a payload that does not parse asks for nothing, as it runs nothing);
/// 0 for the rest.
pub fn reply_bytes(req: &Request, payload: &[u8]) -> u64 {
    match req.verb {
        Verb::Read { len } => len,
        Verb::Batch { .. } => batch_shape(payload).map_or(0, |(_, read)| read),
        _ => 0,
    }
}

/// A BATCH payload's number of verbs and the bytes its READs ask for, or `None` if it does not
/// parse.
fn batch_shape(payload: &[u8]) -> Option<(u64, u64)> {
    let (mut n, mut read) = (0u64, 0u64);
    for verb in (Batched { rest: payload }) {
        let Ok((r, _)) = verb else { return None };
        n += 1;
        if let Verb::Read { len } = r.verb {
            read = read.saturating_add(len);
        }
    }
    Some((n, read))
}

/// Carries out a BATCH of `count` verbs (in `payload`) on `mem`, its session admitted, appending
/// each verb's reply header and READ bytes to `out`; returns the batch's reply header (`tag`), or
/// `None` if the payload is not exactly `count` well-formed verbs (then nothing was done).
fn execute_batch(
    mem: &dyn MnMemory,
    tag: u64,
    count: u64,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Option<Reply> {
    // Checked whole before any verb runs, so that a malformed batch does nothing.
    let (n, read) = batch_shape(payload)?;
    if n != count || n == 0 || n > MAX_BATCH as u64 || read > MAX_BATCH_READ {
        return None;
    }
    for (i, verb) in (Batched { rest: payload }).enumerate() {
        let Ok((r, bytes)) = verb else { return None };
        let at = out.len();
        out.resize(at + REPLY_LEN, 0);
        let mut reply = perform(mem, &r, bytes, out);
        reply.tag = i as u64;
        out[at..at + REPLY_LEN].copy_from_slice(&reply.encode());
    }
    Some(Reply { tag, status: Status::Ok, value: count })
}

/// The replies of a batch's verbs, in order, from its reply's payload: each reply header and
/// its READ bytes (`reads[i]`: how many bytes verb `i` read, 0 if not a READ). `None` if the
/// payload does not match.
pub fn batch_replies(
    mut payload: &[u8],
    reads: impl Iterator<Item = usize>,
) -> Option<impl Iterator<Item = (Reply, &[u8])>> {
    let mut all = [(Reply { tag: 0, status: Status::Ok, value: 0 }, &[][..]); MAX_BATCH];
    let mut n = 0;
    for (i, len) in reads.enumerate() {
        let reply = Reply::decode(payload.get(..REPLY_LEN)?)?;
        if reply.tag != i as u64 {
            return None;
        }
        payload = &payload[REPLY_LEN..];
        let len = if reply.status == Status::Ok { len } else { 0 };
        let data = payload.get(..len)?;
        payload = &payload[len..];
        *all.get_mut(i)? = (reply, data);
        n = i + 1;
    }
    payload.is_empty().then(|| all.into_iter().take(n))
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::memory::Region;

    use super::*;

    const KEY: [u8; VERB_KEY] = [7; VERB_KEY];

    /// `super::execute` on a memnode of key [`KEY`] with no session yet, the READ bytes apart.
    fn execute(mem: &dyn MnMemory, req: &Request, payload: &[u8]) -> (Reply, Vec<u8>) {
        let mut data = Vec::new();
        (run(mem, req, payload, &mut data).expect("well formed"), data)
    }

    /// `super::execute` on a memnode of key [`KEY`] with no session yet.
    fn run(mem: &dyn MnMemory, req: &Request, payload: &[u8], out: &mut Vec<u8>) -> Option<Reply> {
        super::execute(mem, &mut Sessions::new(KEY), req, payload, out)
    }

    #[test]
    fn request_layout_is_pinned() {
        let r = Request {
            session: 0x0A0B_0C0D,
            tag: 0x1122,
            offset: 0x40,
            verb: Verb::Atomic(AtomicOp::MaskedCas {
                compare: 1,
                compare_mask: 2,
                swap: 3,
                swap_mask: 4,
            }),
            key: [0xEE; VERB_KEY],
        };
        let h = r.encode();
        let mut want = [0u8; REQUEST_LEN];
        want[56..72].fill(0xEE);
        want[0] = 5;
        want[4..8].copy_from_slice(&[0x0D, 0x0C, 0x0B, 0x0A]);
        want[8] = 0x22;
        want[9] = 0x11;
        want[16] = 0x40;
        want[24] = 1;
        want[32] = 2;
        want[40] = 3;
        want[48] = 4;
        assert_eq!(h, want);
        assert_eq!(Request::decode(&h), Some(r));
        let read =
            Request { session: 0, tag: 9, offset: 16, verb: Verb::Read { len: 300 }, key: KEY };
        let read = read.encode();
        assert_eq!((read[0], word(&read, 24)), (1, 300));
        for v in [
            Verb::Write,
            Verb::Flush,
            Verb::Atomic(AtomicOp::Cas { expected: 7, new: 8 }),
            Verb::Atomic(AtomicOp::Faa { delta: u64::MAX }),
            Verb::Register { member: 0xABC, one_sided: true },
            Verb::Fence { member: 0xABC },
            Verb::End,
        ] {
            let r = Request { session: 2, tag: 3, offset: 8, verb: v, key: KEY };
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        let register = Request { verb: Verb::Register { member: 0xABC, one_sided: true }, ..r };
        let h = register.encode();
        assert_eq!((h[0], word(&h, 24), word(&h, 32)), (8, 0xABC, 1));
        let fence = Request { verb: Verb::Fence { member: 0xABC }, ..r }.encode();
        assert_eq!((fence[0], word(&fence, 24)), (9, 0xABC));
        assert_eq!(Request { verb: Verb::End, ..r }.encode()[0], 10);
        let mut bad = h;
        bad[32] = 2;
        assert_eq!(Request::decode(&bad), None, "one-sided is 0 or 1");
        bad[0] = 11;
        assert_eq!(Request::decode(&bad), None);
        assert_eq!(Request::decode(&h[..REQUEST_LEN - 1]), None);
    }

    #[test]
    fn reply_layout_is_pinned() {
        let r = Reply { tag: 5, status: Status::Misaligned, value: 0xabcd };
        let h = r.encode();
        assert_eq!(h[0], 5);
        assert_eq!(h[8], 2);
        assert_eq!((h[16], h[17]), (0xcd, 0xab));
        assert_eq!(Reply::decode(&h), Some(r));
        for (status, code) in [(Status::Fenced, 4), (Status::Unfenceable, 5), (Status::Full, 6)] {
            let h = Reply { status, ..r }.encode();
            assert_eq!(h[8], code);
            assert_eq!(Reply::decode(&h).map(|r| r.status), Some(status));
        }
        let mut bad = h;
        bad[8] = 9;
        assert_eq!(Reply::decode(&bad), None);
    }

    #[test]
    fn execute_matches_the_verbs_and_refuses_bad_requests() {
        let mem = Region::new(4096);
        let req = |offset, verb| Request { session: 0, tag: 1, offset, verb, key: KEY };
        let (r, _) = execute(&mem, &req(64, Verb::Write), &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(r, Reply { tag: 1, status: Status::Ok, value: 0 });
        let (r, data) = execute(&mem, &req(64, Verb::Read { len: 9 }), &[]);
        assert_eq!((r.status, data), (Status::Ok, vec![1, 2, 3, 4, 5, 6, 7, 8, 9]));
        let cas = Verb::Atomic(AtomicOp::Cas { expected: 0x0807060504030201, new: 5 });
        assert_eq!(execute(&mem, &req(64, cas), &[]).0.value, 0x0807060504030201);
        assert_eq!(execute(&mem, &req(64, cas), &[]).0.value, 5, "a failed CAS returns the word");
        let faa = Verb::Atomic(AtomicOp::Faa { delta: 10 });
        assert_eq!(execute(&mem, &req(64, faa), &[]).0.value, 5);
        let lock = Verb::Atomic(AtomicOp::MaskedCas {
            compare: 0,
            compare_mask: 1,
            swap: 1,
            swap_mask: 1,
        });
        assert_eq!(execute(&mem, &req(80, lock), &[]).0.value, 0);
        assert_eq!(execute(&mem, &req(80, lock), &[]).0.value, 1, "a held lock stays held");
        let (_, data) = execute(&mem, &req(64, Verb::Read { len: 24 }), &[]);
        assert_eq!([word(&data, 0), word(&data, 8), word(&data, 16)], [15, 9, 1]);
        // Refusals, never panics.
        for (offset, verb, payload, status) in [
            (4090, Verb::Write, &[0u8; 8][..], Status::OutOfBounds),
            (4000, Verb::Read { len: 97 }, &[], Status::OutOfBounds),
            (u64::MAX - 2, Verb::Read { len: 8 }, &[], Status::OutOfBounds),
            (0, Verb::Read { len: MAX_READ + 1 }, &[], Status::OutOfBounds),
            (4096, faa, &[], Status::OutOfBounds),
            (12, faa, &[], Status::Misaligned),
        ] {
            assert_eq!(execute(&mem, &req(offset, verb), payload).0.status, status, "{verb:?}");
        }
        assert_eq!(execute(&mem, &req(4088, faa), &[]).0.status, Status::Ok);
        assert_eq!(execute(&mem, &req(0, Verb::Flush), &[]).0.status, Status::Ok);
    }

    /// A request without the memnode's verb key reads and writes nothing.
    #[test]
    fn a_wrong_key_touches_nothing() {
        let mem = Region::new(4096);
        mem.write(64, &[9; 8]);
        let forged = |verb| Request { session: 0, tag: 4, offset: 64, verb, key: [0; VERB_KEY] };
        let (r, data) = execute(&mem, &forged(Verb::Read { len: 8 }), &[]);
        assert_eq!((r.status, data.len()), (Status::Refused, 0));
        assert_eq!(execute(&mem, &forged(Verb::Write), &[1; 8]).0.status, Status::Refused);
        let faa = Verb::Atomic(AtomicOp::Faa { delta: 1 });
        assert_eq!(
            execute(&mem, &forged(faa), &[]).0,
            Reply { tag: 4, status: Status::Refused, value: 0 }
        );
        let mut b = [0u8; 8];
        mem.read(64, &mut b);
        assert_eq!(b, [9; 8]);
    }

    /// A batch: a WRITE, a CAS and a READ of what they did, executed in order.
    fn batch(key: [u8; VERB_KEY]) -> (Request, Vec<u8>) {
        let mut payload = Vec::new();
        push_batched(&mut payload, 64, Verb::Write, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let cas = Verb::Atomic(AtomicOp::Cas { expected: 0x0807060504030201, new: 9 });
        push_batched(&mut payload, 64, cas, &[]);
        push_batched(&mut payload, 64, Verb::Read { len: 16 }, &[]);
        (Request { session: 0, tag: 3, offset: 0, verb: Verb::Batch { count: 3 }, key }, payload)
    }

    #[test]
    fn batch_layout_is_pinned() {
        let (req, payload) = batch(KEY);
        let h = req.encode();
        assert_eq!((h[0], word(&h, 8), word(&h, 24)), (7, 3, 3));
        assert_eq!(Request::decode(&h), Some(req));
        // WRITE header (a = its length, no key), its bytes, CAS header, READ header.
        assert_eq!(payload.len(), 3 * REQUEST_LEN + 8);
        assert_eq!((payload[0], word(&payload, 16), word(&payload, 24)), (2, 64, 8));
        assert_eq!(&payload[56..72], &[0; VERB_KEY]);
        assert_eq!(&payload[72..80], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((payload[80], word(&payload, 80 + 24)), (3, 0x0807060504030201));
        assert_eq!((payload[152], word(&payload, 152 + 24)), (1, 16));
    }

    #[test]
    fn a_batch_runs_its_verbs_in_order_and_answers_each() {
        let mem = Region::new(4096);
        let (req, payload) = batch(KEY);
        let mut out = Vec::new();
        let r = run(&mem, &req, &payload, &mut out).expect("well formed");
        assert_eq!(r, Reply { tag: 3, status: Status::Ok, value: 3 });
        let replies: Vec<_> = batch_replies(&out, [0, 0, 16].into_iter()).unwrap().collect();
        assert_eq!(replies.len(), 3);
        assert_eq!(replies[0].0, Reply { tag: 0, status: Status::Ok, value: 0 });
        assert_eq!(replies[1].0.value, 0x0807060504030201, "the CAS saw the WRITE");
        assert_eq!(word(replies[2].1, 0), 9, "the READ saw the CAS");
        // A reply that does not match its batch is refused, not misread.
        assert!(batch_replies(&out, [0, 0, 8].into_iter()).is_none());
        assert!(batch_replies(&out[..out.len() - 1], [0, 0, 16].into_iter()).is_none());
        // A verb that fails is answered as such; the others still run.
        let mut bad = Vec::new();
        push_batched(&mut bad, 4090, Verb::Write, &[0; 8]);
        push_batched(&mut bad, 8, Verb::Atomic(AtomicOp::Faa { delta: 1 }), &[]);
        let req =
            Request { session: 0, tag: 4, offset: 0, verb: Verb::Batch { count: 2 }, key: KEY };
        let mut out = Vec::new();
        run(&mem, &req, &bad, &mut out).unwrap();
        let replies: Vec<_> = batch_replies(&out, [0, 0].into_iter()).unwrap().collect();
        assert_eq!((replies[0].0.status, replies[1].0.status), (Status::OutOfBounds, Status::Ok));
    }

    /// A batch with a wrong key, or one that does not parse whole, touches nothing.
    #[test]
    fn a_forged_or_malformed_batch_touches_nothing() {
        let mem = Region::new(4096);
        let (req, payload) = batch([0; VERB_KEY]);
        let mut out = Vec::new();
        let r = run(&mem, &req, &payload, &mut out).unwrap();
        assert_eq!((r.status, out.len()), (Status::Refused, 0));
        let (req, payload) = batch(KEY);
        let count = |count| Request {
            session: 0,
            tag: 3,
            offset: 0,
            verb: Verb::Batch { count },
            key: KEY,
        };
        let mut nested = payload.clone();
        nested.extend_from_slice(&count(1).encode());
        let mut flush = payload.clone();
        push_batched(&mut flush, 0, Verb::Flush, &[]);
        let mut fence = payload.clone();
        push_batched(&mut fence, 0, Verb::Fence { member: 1 }, &[]);
        let mut huge = Vec::new();
        push_batched(&mut huge, 0, Verb::Read { len: MAX_BATCH_READ + 1 }, &[]);
        for (req, payload) in [
            (count(2), &payload[..]),
            (count(4), &payload[..]),
            (count(0), &[][..]),
            (req, &payload[..payload.len() - 1]),
            (req, &payload[..REQUEST_LEN + 4]),
            (count(4), &nested[..]),
            (count(4), &flush[..]),
            (count(4), &fence[..]),
            (count(1), &huge[..]),
        ] {
            assert!(run(&mem, &req, payload, &mut out).is_none(), "{req:?}");
        }
        let mut b = [0u8; 16];
        mem.read(64, &mut b);
        assert_eq!(b, [0; 16], "nothing ran");
    }
}
