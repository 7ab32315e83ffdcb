//! Several verb messages of one client thread in one active message, and their replies in one.
//!
//! # Why
//!
//! Over TCP every active message is a `sendmsg` on one side and a receive on the other, and on a
//! small host those system calls, not the bytes, are what a round trip costs (a memnode round
//! trip on a busy 2-core host: about 22 µs of one core, most of it in the kernel). A thread runs
//! many clients (coroutines), and they wait for their replies together: when every task of the
//! thread waits, the verbs they posted since the last wait are all known. So the transport keeps
//! them in an [`Outbox`] per memnode and sends them as one message when the thread's executor
//! runs out of tasks to poll; the memnode executes them in order and answers them in one message,
//! whose replies wake their tasks together, which post their next verbs together. A message
//! waits only while the thread's executor polls its other runnable tasks (a task that blocks
//! the thread or computes at length delays the verbs its siblings posted before it).
//! A lone message goes as before ([`crate::message_verbs`]); an envelope is told from it by its
//! header's length.
//!
//! # Wire format
//!
//! All integers little-endian. A request envelope is one [`REQUEST_AM`] whose header is
//! [`ENVELOPE_LEN`] bytes, the number of frames; a reply envelope is one [`REPLY_AM`] of the same
//! header. The payload is the frames, back to back, each a length and one message:
//!
//! ```text
//!  header:   | frames (8) |
//!  requests: | len (4) | request header (72) | payload (len − 72) | len (4) | ... |
//!  replies:  | len (4) | reply header (24)   | data (len − 24)    | len (4) | ... |
//! ```
//!
//! Each request frame is a whole request as [`crate::message_verbs`] draws it, with its own
//! session and key, admitted on its own: an envelope grants nothing a lone message would not. An
//! envelope whose frames do not tile its payload exactly, whose count disagrees, or whose READs
//! ask for more than [`MAX_ENVELOPE_READ`] bytes in all, is dropped whole before any frame runs. A frame whose tag is 0 (a zero-wait WRITE, an END) gets no reply
//! frame, nor does one that does not decode or a malformed BATCH (dropped, as lone messages
//! are); the reply envelope holds one frame per request frame answered, in order.
//!
//! # Ordering
//!
//! The frames are the thread's messages to that memnode in the order they were posted, and the
//! memnode executes them in that order, as it executes lone messages in the order they arrive: a
//! verb never overtakes an earlier one of its thread.
//!
//! [`REQUEST_AM`]: crate::message_verbs::REQUEST_AM
//! [`REPLY_AM`]: crate::message_verbs::REPLY_AM

use dmindex_fabric::service::MnMemory;

use crate::message_verbs::{self, Reply, Request, MAX_BATCH_READ, REPLY_LEN, REQUEST_LEN};
use crate::sessions::Sessions;

/// Length of an envelope's header: its number of frames.
pub const ENVELOPE_LEN: usize = 8;
/// Length of a frame's length field.
pub const FRAME_LEN: usize = 4;
/// An outbox is sent before a frame would take it past this many bytes (a frame bigger than
/// that goes alone): enough for a thread's coroutines' small verbs.
pub const MAX_ENVELOPE: usize = 64 << 10;
/// Longest frame (its length field is 4 bytes); a longer request cannot be posted.
pub const MAX_FRAME: usize = u32::MAX as usize;
/// Most bytes an envelope's requests may ask the memnode to send back (READs, BATCHes' READs),
/// as for one BATCH: the memnode drops an envelope that asks for more, so that no client can
/// make it build an unbounded reply; an outbox is sent before a frame would take it past this.
pub const MAX_ENVELOPE_READ: u64 = MAX_BATCH_READ;

/// The messages a client thread posted to one memnode since it last sent: one frame each,
/// after room for an envelope's header, so that one buffer holds all a send needs (a send still
/// in flight owns it whole).
#[derive(Debug, Default)]
pub struct Outbox {
    buf: Vec<u8>,
    frames: u64,
    /// The bytes its frames ask to be sent back ([`MAX_ENVELOPE_READ`]).
    reads: u64,
}

impl Outbox {
    /// Whether nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Frames waiting to be sent.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Whether a frame of `len` more bytes asking for `reads` bytes back should go in a message
    /// after what waits: send what waits first.
    pub fn full_for(&self, len: usize, reads: u64) -> bool {
        self.frames > 0
            && (self.buf.len() + FRAME_LEN + REQUEST_LEN + len > MAX_ENVELOPE
                || self.reads.saturating_add(reads) > MAX_ENVELOPE_READ)
    }

    /// Appends a frame: the request `header`, then the payload `write` appends (so that a batch
    /// is laid out in place, not built and copied); it asks for `reads` bytes back.
    pub fn push(
        &mut self,
        header: &[u8; REQUEST_LEN],
        reads: u64,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        self.reads = self.reads.saturating_add(reads);
        if self.buf.is_empty() {
            self.buf.resize(ENVELOPE_LEN, 0);
        }
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; FRAME_LEN]);
        self.buf.extend_from_slice(header);
        write(&mut self.buf);
        // The transport refuses longer requests before they get here ([`MAX_FRAME`]).
        let len = u32::try_from(self.buf.len() - at - FRAME_LEN).expect("a frame under 4 GiB");
        self.buf[at..at + FRAME_LEN].copy_from_slice(&len.to_le_bytes());
        self.frames += 1;
    }

    /// What to send: a lone message's header and payload for one frame, or an envelope's for
    /// several (both in the outbox's buffer); `None` if nothing waits.
    pub fn message(&mut self) -> Option<(&[u8], &[u8])> {
        match self.frames {
            0 => None,
            1 => {
                let frame = &self.buf[ENVELOPE_LEN + FRAME_LEN..];
                Some((&frame[..REQUEST_LEN], &frame[REQUEST_LEN..]))
            }
            n => {
                self.buf[..ENVELOPE_LEN].copy_from_slice(&n.to_le_bytes());
                Some(self.buf.split_at(ENVELOPE_LEN))
            }
        }
    }

    /// Forgets what was sent, keeping the buffer for the next messages.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.frames = 0;
        self.reads = 0;
    }

    /// Forgets what was sent and hands over the buffer holding it (a send still in flight owns
    /// its bytes until it completes).
    pub fn take(&mut self) -> Vec<u8> {
        self.frames = 0;
        self.reads = 0;
        std::mem::take(&mut self.buf)
    }
}

/// The frames of an envelope whose header is `header`: each frame's message split at
/// `head_len` (the request or reply header length) into header and payload, in order. `None`
/// if the header is not an envelope's, the frames do not tile `payload` exactly, a frame is
/// shorter than `head_len`, or their number is not the header's (then nothing may be done).
pub fn frames<'a>(
    header: &[u8],
    payload: &'a [u8],
    head_len: usize,
) -> Option<impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + 'a> {
    let count = u64::from_le_bytes(header.try_into().ok()?);
    let mut n = 0u64;
    for frame in (Frames { rest: payload, head_len }) {
        frame?;
        n += 1;
    }
    (n == count && n > 0)
        .then(|| Frames { rest: payload, head_len }.map_while(std::convert::identity))
}

/// The request frames of a request envelope ([`frames`] with a request header).
pub fn request_frames<'a>(
    header: &[u8],
    payload: &'a [u8],
) -> Option<impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + 'a> {
    frames(header, payload, REQUEST_LEN)
}

/// The reply frames of a reply envelope ([`frames`] with a reply header).
pub fn reply_frames<'a>(
    header: &[u8],
    payload: &'a [u8],
) -> Option<impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + 'a> {
    frames(header, payload, REPLY_LEN)
}

/// Builds a reply envelope: the memnode appends one frame per answered request.
#[derive(Debug)]
pub struct ReplyEnvelope {
    out: Vec<u8>,
    frames: u64,
}

impl Default for ReplyEnvelope {
    fn default() -> ReplyEnvelope {
        ReplyEnvelope::new()
    }
}

impl ReplyEnvelope {
    /// An envelope with no frame yet (room for its header).
    pub fn new() -> ReplyEnvelope {
        ReplyEnvelope { out: vec![0; ENVELOPE_LEN], frames: 0 }
    }

    /// Starts a frame: room for its length and a reply header; the caller appends the data to
    /// [`Self::out`] and then [`Self::finish`]es or [`Self::abandon`]s it.
    pub fn start(&mut self) -> usize {
        let at = self.out.len();
        self.out.resize(at + FRAME_LEN + REPLY_LEN, 0);
        at
    }

    /// Where a frame's data goes.
    pub fn out(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Ends the frame started at `at` with its reply header.
    pub fn finish(&mut self, at: usize, reply: &[u8; REPLY_LEN]) {
        let len = u32::try_from(self.out.len() - at - FRAME_LEN).unwrap_or(u32::MAX);
        self.out[at..at + FRAME_LEN].copy_from_slice(&len.to_le_bytes());
        self.out[at + FRAME_LEN..at + FRAME_LEN + REPLY_LEN].copy_from_slice(reply);
        self.frames += 1;
    }

    /// Drops the frame started at `at` (its request gets no reply).
    pub fn abandon(&mut self, at: usize) {
        self.out.truncate(at);
    }

    /// The envelope to send (header first, [`ENVELOPE_LEN`] bytes), or `None` if no frame was
    /// finished.
    pub fn into_message(mut self) -> Option<Vec<u8>> {
        if self.frames == 0 {
            return None;
        }
        self.out[..ENVELOPE_LEN].copy_from_slice(&self.frames.to_le_bytes());
        Some(self.out)
    }
}

/// Executes a request envelope (`header`, `payload`) on `mem`: each frame in order, admitted on
/// its own ([`message_verbs::execute`]); `each` hears every frame's request and reply, or
/// `None` for one that does not parse (or once for an envelope that does not: then nothing
/// runs). Returns the reply envelope to send (header first), if any frame asked for a reply.
pub fn execute(
    mem: &dyn MnMemory,
    sessions: &mut Sessions,
    header: &[u8],
    payload: &[u8],
    mut each: impl FnMut(Option<(&Request, &Reply)>),
) -> Option<Vec<u8>> {
    let frames = request_frames(header, payload).filter(|frames| {
        let asked = frames
            .clone()
            .map(|(h, p)| Request::decode(h).map_or(0, |r| message_verbs::reply_bytes(&r, p)));
        asked.fold(0, u64::saturating_add) <= MAX_ENVELOPE_READ
    });
    let Some(frames) = frames else {
        each(None);
        return None;
    };
    let mut replies = ReplyEnvelope::new();
    for (header, payload) in frames {
        let at = replies.start();
        let req = Request::decode(header);
        let answer = req.and_then(|req| {
            message_verbs::execute(mem, sessions, &req, payload, replies.out())
                .map(|answer| (req, answer))
        });
        each(answer.as_ref().map(|(req, answer)| (req, answer)));
        match answer {
            Some((req, answer)) if req.tag != 0 => replies.finish(at, &answer.encode()),
            _ => replies.abandon(at),
        }
    }
    replies.into_message()
}

/// Walks frames; yields `None` where they stop parsing.
#[derive(Clone)]
struct Frames<'a> {
    rest: &'a [u8],
    head_len: usize,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Option<(&'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let parsed = (|| {
            let len = u32::from_le_bytes(self.rest.get(..FRAME_LEN)?.try_into().ok()?) as usize;
            let frame = self.rest.get(FRAME_LEN..FRAME_LEN.checked_add(len)?)?;
            let (head, payload) = (frame.get(..self.head_len)?, &frame[self.head_len..]);
            Some((head, payload, FRAME_LEN + len))
        })();
        match parsed {
            Some((head, payload, used)) => {
                self.rest = &self.rest[used..];
                Some(Some((head, payload)))
            }
            None => {
                // Stops here: a frame that does not parse ends the walk.
                self.rest = &[];
                Some(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::memory::Region;
    use dmindex_fabric::AtomicOp;

    use super::*;
    use crate::message_verbs::{Status, Verb};

    fn request(tag: u64, verb: Verb) -> [u8; REQUEST_LEN] {
        Request { session: 0, tag, offset: 64 * tag, verb, key: [9; 16] }.encode()
    }

    #[test]
    fn one_frame_goes_as_a_lone_message() {
        let mut o = Outbox::default();
        assert!(o.message().is_none());
        let h = request(1, Verb::Write);
        o.push(&h, 0, |b| b.extend_from_slice(b"abc"));
        let (head, payload) = o.message().expect("one frame");
        assert_eq!(head, &h[..]);
        assert_eq!(payload, b"abc");
    }

    #[test]
    fn the_envelope_layout_is_pinned() {
        let mut o = Outbox::default();
        let (a, b) = (request(1, Verb::Read { len: 8 }), request(0, Verb::Write));
        o.push(&a, 8, |_| {});
        o.push(&b, 0, |buf| buf.extend_from_slice(&[0xee; 5]));
        assert_eq!(o.frames(), 2);
        let (head, payload) = o.message().expect("two frames");
        assert_eq!(head, &2u64.to_le_bytes());
        assert_eq!(payload.len(), 2 * (FRAME_LEN + REQUEST_LEN) + 5);
        assert_eq!(&payload[..4], &72u32.to_le_bytes());
        assert_eq!(&payload[4..76], &a[..]);
        assert_eq!(&payload[76..80], &77u32.to_le_bytes());
        assert_eq!(&payload[80..152], &b[..]);
        assert_eq!(&payload[152..], &[0xee; 5]);
        let head = head.to_vec();
        let payload = payload.to_vec();
        let got: Vec<_> = request_frames(&head, &payload).expect("well formed").collect();
        assert_eq!(got, vec![(&a[..], &[][..]), (&b[..], &[0xee; 5][..])]);
        o.clear();
        assert!(o.is_empty() && o.message().is_none());
    }

    #[test]
    fn a_malformed_envelope_yields_nothing() {
        let mut o = Outbox::default();
        o.push(&request(1, Verb::Flush), 0, |_| {});
        o.push(&request(2, Verb::Flush), 0, |_| {});
        let (_, payload) = o.message().expect("two frames");
        let payload = payload.to_vec();
        let two = 2u64.to_le_bytes();
        assert!(request_frames(&3u64.to_le_bytes(), &payload).is_none(), "count too high");
        assert!(request_frames(&1u64.to_le_bytes(), &payload).is_none(), "count too low");
        assert!(request_frames(&0u64.to_le_bytes(), &[]).is_none(), "no frame");
        assert!(request_frames(&[2, 0, 0], &payload).is_none(), "short header");
        assert!(request_frames(&two, &payload[..payload.len() - 1]).is_none(), "cut short");
        let mut long = payload.clone();
        long.push(0);
        assert!(request_frames(&two, &long).is_none(), "trailing byte");
        let mut lying = payload.clone();
        lying[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(request_frames(&two, &lying).is_none(), "length past the end");
        let mut short = payload.clone();
        short[..4].copy_from_slice(&10u32.to_le_bytes());
        assert!(request_frames(&two, &short).is_none(), "frame shorter than a header");
    }

    #[test]
    fn replies_frame_what_was_answered_and_drop_what_was_not() {
        let mut r = ReplyEnvelope::new();
        assert!(ReplyEnvelope::new().into_message().is_none());
        let at = r.start();
        r.out().extend_from_slice(b"data");
        let one = Reply { tag: 5, status: Status::Ok, value: 0 }.encode();
        r.finish(at, &one);
        let at = r.start();
        r.out().extend_from_slice(b"gone");
        r.abandon(at);
        let at = r.start();
        let two = Reply { tag: 6, status: Status::OutOfBounds, value: 0 }.encode();
        r.finish(at, &two);
        let m = r.into_message().expect("two frames");
        let (head, payload) = m.split_at(ENVELOPE_LEN);
        assert_eq!(head, &2u64.to_le_bytes());
        assert_eq!(&payload[..4], &28u32.to_le_bytes());
        let got: Vec<_> = reply_frames(head, payload).expect("well formed").collect();
        assert_eq!(got, vec![(&one[..], &b"data"[..]), (&two[..], &[][..])]);
    }

    /// Runs `outbox` as a memnode of key `[9; 16]` would, on `mem`: the reply envelope, and
    /// what each frame did (`None`: did not parse).
    fn run(mem: &Region, outbox: &mut Outbox) -> (Option<Vec<u8>>, Vec<Option<Status>>) {
        let mut sessions = Sessions::new([9; 16]);
        let (header, payload) = outbox.message().expect("frames");
        let (header, payload) = (header.to_vec(), payload.to_vec());
        let mut seen = Vec::new();
        let reply = execute(mem, &mut sessions, &header, &payload, |r| {
            seen.push(r.map(|(_, reply)| reply.status))
        });
        (reply, seen)
    }

    #[test]
    fn an_envelope_runs_its_frames_in_order_and_answers_those_that_ask() {
        let mem = Region::new(4096);
        let mut o = Outbox::default();
        // A zero-wait WRITE, a READ that must see it, a CAS, a READ with a wrong key, and a
        // BATCH: each frame on its own.
        o.push(&request(0, Verb::Write), 0, |b| b.extend_from_slice(&7u64.to_le_bytes()));
        let read =
            Request { session: 0, tag: 1, offset: 0, verb: Verb::Read { len: 8 }, key: [9; 16] };
        o.push(&read.encode(), 8, |_| {});
        let cas = Verb::Atomic(AtomicOp::Cas { expected: 7, new: 8 });
        o.push(&Request { tag: 2, verb: cas, ..read }.encode(), 0, |_| {});
        o.push(&Request { tag: 3, key: [1; 16], ..read }.encode(), 8, |_| {});
        let batch = Request { tag: 4, verb: Verb::Batch { count: 1 }, ..read };
        o.push(&batch.encode(), 8, |b| {
            message_verbs::push_batched(b, 0, Verb::Read { len: 8 }, &[])
        });
        let (reply, seen) = run(&mem, &mut o);
        let ok = Some(Status::Ok);
        assert_eq!(seen, vec![ok, ok, ok, Some(Status::Refused), ok]);
        let reply = reply.expect("four frames asked for replies");
        let (head, payload) = reply.split_at(ENVELOPE_LEN);
        let got: Vec<_> = reply_frames(head, payload).expect("well formed").collect();
        let tags: Vec<_> =
            got.iter().map(|(h, _)| Reply::decode(h).expect("a reply").tag).collect();
        assert_eq!(tags, vec![1, 2, 3, 4], "the zero-wait WRITE gets no reply frame");
        assert_eq!(got[0].1, &7u64.to_le_bytes(), "the READ saw the WRITE posted before it");
        assert_eq!(Reply::decode(got[1].0).expect("a reply").value, 7, "the CAS saw it too");
        assert_eq!(Reply::decode(got[2].0).expect("a reply").status, Status::Refused);
        assert!(got[2].1.is_empty(), "a refused READ returns no bytes");
        let batch = message_verbs::batch_replies(got[3].1, [8].into_iter()).expect("one reply");
        let batch: Vec<_> = batch.collect();
        assert_eq!(batch[0].1, &8u64.to_le_bytes(), "the batch saw the CAS");
    }

    #[test]
    fn a_malformed_envelope_runs_nothing() {
        let mem = Region::new(4096);
        let mut o = Outbox::default();
        o.push(&request(0, Verb::Write), 0, |b| b.extend_from_slice(&7u64.to_le_bytes()));
        o.push(&request(0, Verb::Write), 0, |b| b.extend_from_slice(&7u64.to_le_bytes()));
        let (_, payload) = o.message().expect("frames");
        let mut payload = payload.to_vec();
        payload.pop();
        let mut seen = Vec::new();
        let mut sessions = Sessions::new([9; 16]);
        let reply =
            execute(&mem, &mut sessions, &2u64.to_le_bytes(), &payload, |r| seen.push(r.is_some()));
        assert!(reply.is_none());
        assert_eq!(seen, vec![false], "one note for the whole envelope");
        let mut word = [0u8; 8];
        mem.read(0, &mut word);
        assert_eq!(word, [0; 8], "the first WRITE did not run either");
        // A frame that parses as a frame but not as a request is dropped alone.
        let mut o = Outbox::default();
        o.push(&[0xff; REQUEST_LEN], 0, |_| {});
        o.push(&request(0, Verb::Write), 0, |b| b.extend_from_slice(&7u64.to_le_bytes()));
        let (reply, seen) = run(&mem, &mut o);
        assert!(reply.is_none(), "nothing asked for a reply");
        assert_eq!(seen, vec![None, Some(Status::Ok)]);
    }

    #[test]
    fn an_envelope_that_asks_for_too_much_back_runs_nothing() {
        let mem = Region::new(4096);
        let mut o = Outbox::default();
        let half = MAX_ENVELOPE_READ / 2 + 1;
        o.push(&request(0, Verb::Write), 0, |b| b.extend_from_slice(&7u64.to_le_bytes()));
        o.push(&request(1, Verb::Read { len: half }), half, |_| {});
        let batch = request(2, Verb::Batch { count: 1 });
        o.push(&batch, half, |b| message_verbs::push_batched(b, 0, Verb::Read { len: half }, &[]));
        let (reply, seen) = run(&mem, &mut o);
        assert!(reply.is_none());
        assert_eq!(seen, vec![None], "dropped whole");
        let mut word = [0u8; 8];
        mem.read(0, &mut word);
        assert_eq!(word, [0; 8], "the WRITE before the READs did not run");
    }

    #[test]
    fn a_full_outbox_says_so_before_a_frame_would_pass_the_cap() {
        let mut o = Outbox::default();
        assert!(!o.full_for(MAX_ENVELOPE * 2, u64::MAX), "an empty outbox takes any frame");
        o.push(&request(1, Verb::Write), 0, |b| b.resize(b.len() + 1000, 0));
        assert!(!o.full_for(1000, MAX_ENVELOPE_READ));
        assert!(o.full_for(MAX_ENVELOPE, 0));
        o.push(&request(2, Verb::Read { len: 8 }), 8, |_| {});
        assert!(o.full_for(0, MAX_ENVELOPE_READ), "its READs' replies would pass the cap");
        let buf = o.take();
        assert_eq!(buf.len(), ENVELOPE_LEN + 2 * (FRAME_LEN + REQUEST_LEN) + 1000);
        assert!(o.is_empty());
        assert!(!o.full_for(0, MAX_ENVELOPE_READ), "what was taken no longer counts");
    }
}
