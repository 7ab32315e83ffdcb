//! Index operations that record themselves into a history when one is given.
//!
//! The benchmark harness and the conformance kit (`dmindex-conformance`) drive indexes through
//! these, so a checked run and a measured run execute exactly the same calls; without a history
//! they cost one branch.

use std::future::Future;

use dmindex_check::{History, Invocation, OpId, Outcome};
use dmindex_fabric::{Client, Transport};
use futures::future::Either;

use crate::{IndexResult, PointIndex, ScanBuf, Scans};

/// Who is calling and where the calls are recorded.
pub struct Recorder<'a> {
    /// Current time in ns (virtual on the simulator).
    pub now: &'a dyn Fn() -> u64,
    /// History to record into, when checking.
    pub history: Option<&'a History>,
    /// Client number (unique in the run), stamped into values.
    pub client: u32,
    /// Bytes per value.
    pub value_size: usize,
}

impl Recorder<'_> {
    /// A value unique to this client and write: the client and `seq` in its first 8 bytes.
    pub fn value(&self, seq: u64) -> Vec<u8> {
        let mut v = Vec::new();
        self.value_into(seq, &mut v);
        v
    }

    /// [`Recorder::value`] made in `buf` (reused: no allocation once it has the value's size).
    pub fn value_into<'b>(&self, seq: u64, buf: &'b mut Vec<u8>) -> &'b [u8] {
        buf.clear();
        buf.resize(self.value_size, 0x5A);
        let tag = ((self.client as u64) << 40 | (seq & 0xFF_FFFF_FFFF)).to_le_bytes();
        let n = buf.len().min(8);
        buf[..n].copy_from_slice(&tag[..n]);
        buf
    }

    fn invoke(&self, call: impl FnOnce() -> Invocation) -> Option<OpId> {
        self.history.map(|h| h.invoke(self.client, call(), (self.now)()))
    }

    fn complete(&self, id: Option<OpId>, outcome: impl FnOnce() -> Outcome) {
        if let (Some(h), Some(id)) = (self.history, id) {
            h.complete(id, outcome(), (self.now)());
        }
    }

    /// Recorded search.
    pub async fn search<T: Transport, I: PointIndex<T>>(
        &self,
        idx: &I,
        c: &Client<T>,
        key: &[u8],
    ) -> IndexResult<Option<Vec<u8>>> {
        let id = self.invoke(|| Invocation::Search { key: key.to_vec() });
        let r = idx.search(c, key).await?;
        self.complete(id, || Outcome::Found(r.clone()));
        Ok(r)
    }

    /// Recorded search into `out` ([`PointIndex::search_into`]); whether the key was found.
    /// Without a history this is the index's own future, not a layer around it: the harness's
    /// hottest call, where a layer's entry, exit and result copy showed.
    pub fn search_into<'s, T: Transport, I: PointIndex<T>>(
        &'s self,
        idx: &'s I,
        c: &'s Client<T>,
        key: &'s [u8],
        out: &'s mut Vec<u8>,
    ) -> impl Future<Output = IndexResult<bool>> + 's {
        match self.history {
            None => Either::Left(idx.search_into(c, key, out)),
            Some(_) => Either::Right(self.search_into_recorded(idx, c, key, out)),
        }
    }

    async fn search_into_recorded<T: Transport, I: PointIndex<T>>(
        &self,
        idx: &I,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        let id = self.invoke(|| Invocation::Search { key: key.to_vec() });
        let found = idx.search_into(c, key, out).await?;
        self.complete(id, || Outcome::Found(found.then(|| out.clone())));
        Ok(found)
    }

    /// Recorded insert; without a history the index's own future (as [`Recorder::search_into`]).
    pub fn insert<'s, T: Transport, I: PointIndex<T>>(
        &'s self,
        idx: &'s I,
        c: &'s Client<T>,
        key: &'s [u8],
        value: &'s [u8],
    ) -> impl Future<Output = IndexResult<()>> + 's {
        let invocation = || Invocation::Insert { key: key.to_vec(), value: value.to_vec() };
        self.around(|| idx.insert(c, key, value), invocation, |_| Outcome::Done)
    }

    /// Recorded update; without a history the index's own future. A blind update
    /// ([`PointIndex::blind_writes`]) is recorded as what it is, an insert (so also when it
    /// never returns).
    pub fn update<'s, T: Transport, I: PointIndex<T>>(
        &'s self,
        idx: &'s I,
        c: &'s Client<T>,
        key: &'s [u8],
        value: &'s [u8],
    ) -> impl Future<Output = IndexResult<bool>> + 's {
        let blind = idx.blind_writes();
        let invocation = move || match blind {
            true => Invocation::Insert { key: key.to_vec(), value: value.to_vec() },
            false => Invocation::Update { key: key.to_vec(), value: value.to_vec() },
        };
        let outcome = move |&r: &bool| if blind { Outcome::Done } else { Outcome::Existed(r) };
        self.around(|| idx.update(c, key, value), invocation, outcome)
    }

    /// Recorded delete; without a history the index's own future. A blind delete is recorded
    /// as done: the key is absent after it, whether or not it was there.
    pub fn delete<'s, T: Transport, I: PointIndex<T>>(
        &'s self,
        idx: &'s I,
        c: &'s Client<T>,
        key: &'s [u8],
    ) -> impl Future<Output = IndexResult<bool>> + 's {
        let invocation = || Invocation::Delete { key: key.to_vec() };
        let blind = idx.blind_writes();
        let outcome = move |&r: &bool| if blind { Outcome::Done } else { Outcome::Existed(r) };
        self.around(|| idx.delete(c, key), invocation, outcome)
    }

    /// The future `op` makes, recorded as `invocation` and completed with `outcome` of its
    /// result when a history is kept; without one, that future itself.
    fn around<'s, R: 's, F: Future<Output = IndexResult<R>> + 's>(
        &'s self,
        op: impl FnOnce() -> F + 's,
        invocation: impl FnOnce() -> Invocation + 's,
        outcome: impl FnOnce(&R) -> Outcome + 's,
    ) -> impl Future<Output = IndexResult<R>> + 's {
        match self.history {
            None => Either::Left(op()),
            Some(_) => Either::Right(async move {
                let id = self.invoke(invocation);
                let r = op().await?;
                self.complete(id, || outcome(&r));
                Ok(r)
            }),
        }
    }

    /// Recorded scan of up to `count` pairs from `from` into `out` ([`Scans::scan_into`]);
    /// returns how many came back. The harness's scan: with `out` reused, nothing is allocated
    /// here unless a history is kept (which takes owned pairs).
    pub async fn scan_into<T: Transport, I: PointIndex<T>, S: Scans<T, I>>(
        &self,
        idx: &I,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<usize> {
        let id = self.invoke(|| Invocation::Scan { from: from.to_vec(), count });
        S::scan_into(idx, c, from, count, out).await?;
        self.complete(id, || Outcome::Scanned(out.to_pairs()));
        Ok(out.len())
    }

    /// Recorded range scan of [lo, hi) into `out` ([`Scans::scan_range_into`]); returns how
    /// many pairs came back.
    pub async fn scan_range_into<T: Transport, I: PointIndex<T>, S: Scans<T, I>>(
        &self,
        idx: &I,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<usize> {
        let id = self.invoke(|| Invocation::ScanRange { lo: lo.to_vec(), hi: hi.to_vec() });
        S::scan_range_into(idx, c, lo, hi, out).await?;
        self.complete(id, || Outcome::Scanned(out.to_pairs()));
        Ok(out.len())
    }

    /// Recorded scan of up to `count` pairs from `from`, as owned pairs ([`Scans::scan`]);
    /// returns how many came back.
    pub async fn scan<T: Transport, I: PointIndex<T>, S: Scans<T, I>>(
        &self,
        idx: &I,
        c: &Client<T>,
        from: &[u8],
        count: usize,
    ) -> IndexResult<usize> {
        let id = self.invoke(|| Invocation::Scan { from: from.to_vec(), count });
        // Room for a typical scan; a huge count grows the vector only as pairs come.
        let mut out = Vec::with_capacity(count.min(128));
        S::scan(idx, c, from, count, &mut out).await?;
        let n = out.len();
        self.complete(id, || Outcome::Scanned(out));
        Ok(n)
    }

    /// Recorded range scan of [lo, hi), as owned pairs; returns how many pairs came back.
    pub async fn scan_range<T: Transport, I: PointIndex<T>, S: Scans<T, I>>(
        &self,
        idx: &I,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
    ) -> IndexResult<usize> {
        let id = self.invoke(|| Invocation::ScanRange { lo: lo.to_vec(), hi: hi.to_vec() });
        let mut out = Vec::new();
        S::scan_range(idx, c, lo, hi, &mut out).await?;
        let n = out.len();
        self.complete(id, || Outcome::Scanned(out));
        Ok(n)
    }
}
