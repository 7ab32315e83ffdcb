//! The messages of HiStore's one service: client to index server, and index server to index
//! server.
//!
//! Every request starts with the same 10 bytes, then its body (integers little-endian, keys as a
//! u16 length and the bytes):
//!
//! ```text
//! +0 op u8 | +1 replica u8 | +2 group u16 | +4 store u16 (root slot) | +6 epoch u32 (the view)
//! ```
//!
//! Every reply but SETUP's starts with a status byte: 0 done (the body follows), 1 stale (the
//! replica holds another view, or is not yet serving it), 2 down (then a u16: a node the replica
//! could not reach).
//!
//! | op | from → to | body | reply body |
//! |----|-----------|------|------------|
//! | 1 WRITE | client → primary | entry | `existed u8` |
//! | 2 SHIP | primary → backup | `partition u16, n u16, first u64, committed u64`, n entries | `next u64` |
//! | 3 SCAN | client → replica | `count u32, lo key, has_hi u8, hi key` | `n u32`, n × (key, slot word u64) |
//! | 4 WATERMARK | backup → primary | — | `n u16`, n × applied sequence u64 |
//! | 5 LOOKUP | client → replica | key | slot word u64 (0: absent) |
//! | 6 SETUP | client → replica | `mode u8, groups u16, partitions u8, nodes 3 × u16, buckets u64` | table offset u64 (no status) |
//! | 7 ADOPT | client → replica | view word u64 | — |
//! | 8 ACTIVATE | client → new primary | — | — |
//! | 9 TAIL | new primary → replica | `n u16`, n × first sequence u64 | per partition `appended u64, m u32`, m entries |
//! | 10 JOIN | client → replacement | SETUP's body, then the view word u64 it learns | table offset u64 |
//! | 11 COPY | client → replacement | `partition u16` | — |
//! | 12 SNAPSHOT | replacement → primary | `partition u16, learner u8, from u64` | the first: `applied u64, total u64, w u32`, w × (`writer u64, seq u32, pos u64, existed u8`); then `n u32`, n × (key, slot word u64) |
//! | 13 PING | client → replica | — | — |
//!
//! An entry is `kind u8` (0 upsert, 1 update, 2 delete), the writer `u64` and its sequence
//! number `u32` (a retried write carries the same pair, so it is applied once), the key, and the
//! new slot word u64 (0 for a delete): the log record the paper describes ({key, address}; its
//! `applied` mark is each log's applied sequence number here).

use dmindex_fabric::service::ServiceError;

pub const WRITE: u8 = 1;
pub const SHIP: u8 = 2;
pub const SCAN: u8 = 3;
pub const WATERMARK: u8 = 4;
pub const LOOKUP: u8 = 5;
pub const SETUP: u8 = 6;
pub const ADOPT: u8 = 7;
pub const ACTIVATE: u8 = 8;
pub const TAIL: u8 = 9;
pub const JOIN: u8 = 10;
pub const COPY: u8 = 11;
pub const SNAPSHOT: u8 = 12;
pub const PING: u8 = 13;

/// Bytes of the common header.
pub const HEAD: usize = 10;

/// Reply status: done.
pub const DONE: u8 = 0;
/// Reply status: the replica holds another view.
pub const STALE: u8 = 1;
/// Reply status: the replica could not reach a node (a u16 follows).
pub const DOWN: u8 = 2;
/// Reply status: a member of the view cannot serve in it (its log lacks entries the others
/// applied and dropped) and must leave it, although it answers (a u16 node follows).
pub const UNFIT: u8 = 3;

/// A reply's status, decoded.
pub enum Status<'a> {
    /// Done: the body follows.
    Done(Reader<'a>),
    /// The replica holds another view.
    Stale,
    /// The replica could not reach this node.
    Down(u16),
    /// The replica on this node cannot serve in the view.
    Unfit(u16),
}

/// The status a reply starts with.
pub fn status(reply: &[u8]) -> Result<Status<'_>, ServiceError> {
    let mut r = Reader::new(reply);
    match r.u8()? {
        DONE => Ok(Status::Done(r)),
        STALE => Ok(Status::Stale),
        DOWN => Ok(Status::Down(r.u16()?)),
        UNFIT => Ok(Status::Unfit(r.u16()?)),
        s => Err(bad(format!("reply status {s}"))),
    }
}

/// What a write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Insert or overwrite.
    Upsert = 0,
    /// Overwrite if present.
    Update = 1,
    Delete = 2,
}

impl Kind {
    fn decode(b: u8) -> Result<Kind, ServiceError> {
        match b {
            0 => Ok(Kind::Upsert),
            1 => Ok(Kind::Update),
            2 => Ok(Kind::Delete),
            _ => Err(bad(format!("write kind {b}"))),
        }
    }
}

/// One log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// Who wrote it: a write retried across a failure carries the same pair.
    pub writer: u64,
    pub seq: u32,
    pub key: Box<[u8]>,
    /// The new slot word (0 for a delete).
    pub word: u64,
}

/// The common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub op: u8,
    pub replica: u8,
    pub group: u16,
    /// The store's root slot: several stores may share the memory nodes.
    pub store: u16,
    /// The view the sender acts in.
    pub epoch: u32,
}

fn bad(m: String) -> ServiceError {
    ServiceError::BadRequest(m)
}

/// Appends little-endian fields to a message.
pub trait Put {
    fn put(&mut self, b: &[u8]);
    fn head(&mut self, h: Head) {
        self.put(&[h.op, h.replica]);
        self.put(&h.group.to_le_bytes());
        self.put(&h.store.to_le_bytes());
        self.put(&h.epoch.to_le_bytes());
    }
    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.put(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
    fn key(&mut self, k: &[u8]) {
        self.u16(k.len() as u16);
        self.put(k);
    }
    fn entry(&mut self, e: &Entry) {
        self.entry_of(e.kind, e.writer, e.seq, &e.key, e.word);
    }
    /// An entry from its fields (no [`Entry`] built).
    fn entry_of(&mut self, kind: Kind, writer: u64, seq: u32, key: &[u8], word: u64) {
        self.u8(kind as u8);
        self.u64(writer);
        self.u32(seq);
        self.key(key);
        self.u64(word);
    }
}

impl Put for Vec<u8> {
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

impl<A: smallvec::Array<Item = u8>> Put for smallvec::SmallVec<A> {
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// Reads fields off a message, refusing a short one.
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ServiceError> {
        if self.b.len() < n {
            return Err(bad(format!("message ends {} bytes early", n - self.b.len())));
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, ServiceError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, ServiceError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self) -> Result<u32, ServiceError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self) -> Result<u64, ServiceError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub fn key(&mut self) -> Result<&'a [u8], ServiceError> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    pub fn head(&mut self) -> Result<Head, ServiceError> {
        Ok(Head {
            op: self.u8()?,
            replica: self.u8()?,
            group: self.u16()?,
            store: self.u16()?,
            epoch: self.u32()?,
        })
    }
    pub fn entry(&mut self) -> Result<Entry, ServiceError> {
        let kind = Kind::decode(self.u8()?)?;
        let (writer, seq) = (self.u64()?, self.u32()?);
        let key = self.key()?.into();
        Ok(Entry { kind, writer, seq, key, word: self.u64()? })
    }
    /// Refuses trailing bytes.
    pub fn end(&self) -> Result<(), ServiceError> {
        match self.b.len() {
            0 => Ok(()),
            n => Err(bad(format!("{n} bytes after the message"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_request_is_pinned() {
        let mut m = Vec::new();
        let head = Head { op: WRITE, replica: 0, group: 2, store: 5, epoch: 7 };
        m.head(head);
        let e = Entry { kind: Kind::Update, writer: 3, seq: 4, key: (*b"ab").into(), word: 0x0102 };
        m.entry(&e);
        #[rustfmt::skip]
        assert_eq!(m, [
            1, 0, 2, 0, 5, 0, 7, 0, 0, 0, // head
            1, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, // kind, writer, seq
            2, 0, b'a', b'b', 2, 1, 0, 0, 0, 0, 0, 0, // key, word
        ]);
        let mut r = Reader::new(&m);
        assert_eq!(r.head().unwrap(), head);
        assert_eq!(r.entry().unwrap(), e);
        r.end().unwrap();
    }

    /// Replies start with a status byte; down and unfit name a node.
    #[test]
    fn reply_statuses_are_pinned() {
        let Ok(Status::Done(mut r)) = status(&[DONE, 9]) else { panic!("done") };
        assert_eq!(r.u8().unwrap(), 9);
        assert!(matches!(status(&[STALE]), Ok(Status::Stale)));
        assert!(matches!(status(&[2, 3, 1]), Ok(Status::Down(0x103))));
        assert!(matches!(status(&[3, 3, 1]), Ok(Status::Unfit(0x103))));
        assert!(status(&[4]).is_err());
    }

    #[test]
    fn short_and_long_messages_are_refused() {
        let mut r = Reader::new(&[1, 0, 2, 0, 1, 0, 0, 0, 0]);
        assert!(
            matches!(r.head(), Err(ServiceError::BadRequest(m)) if m.contains("1 bytes early"))
        );
        let mut r = Reader::new(&[9, 0, 0]);
        assert!(r.entry().is_err(), "kind 9");
        let mut r = Reader::new(&[0, 0]);
        r.u8().unwrap();
        assert!(r.end().is_err());
    }
}
