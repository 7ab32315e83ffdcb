//! Leaf I/O: READs of a leaf's neighbourhoods (or of the whole leaf) into a [`LeafBuf`],
//! repeated until cache-line and node-level versions agree; the leaf lock, one masked CAS on
//! the lock word that also returns the vacancy bitmap and argmax, queued behind the CN-local
//! lock table ([`dmindex_prim::lock`]); and the WRITEs that put entries back and unlock the leaf
//! in the same doorbell.

use arrayvec::ArrayVec;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::cacheline::{self, phys_range};
use dmindex_prim::doorbell;
use dmindex_prim::lock::{unlocked, Held};
use dmindex_prim::pool::Pooled;

use super::Tree;
use crate::layout::LockWord;
use crate::leaf::LeafBuf;

/// A leaf under this client's lock: its address, the lock word the locking CAS returned
/// (vacancy bitmap and argmax), and the held lock with its slot of the CN-local lock table.
/// Consumed by the WRITE that unlocks the leaf, which releases the slot right after.
#[must_use = "a locked leaf is released by the WRITE that unlocks it"]
pub(crate) struct LockedLeaf<'t> {
    pub addr: GlobalAddr,
    pub lw: LockWord,
    pub held: Held<'t>,
}

impl Tree {
    /// The address of a leaf's lock word.
    fn lock_addr(&self, leaf: GlobalAddr) -> GlobalAddr {
        leaf.add(self.leaf.lock_offset() as u64)
    }

    /// Acquires a leaf's lock with one masked CAS that also returns the vacancy bitmap and argmax,
    /// after queueing on the CN-local lock table. Never hold the returned [`LockedLeaf`] while
    /// taking another lock (table slots are shared by hashing).
    pub(crate) async fn lock_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<LockedLeaf<'_>> {
        let held = self.local_locks.acquire(c, self.lock_addr(leaf), || self.retry()).await?;
        let lw = LockWord::decode(&self.leaf, held.word());
        Ok(LockedLeaf { addr: leaf, lw, held })
    }

    /// Locks a hopscotch leaf ([`Tree::lock_leaf`]) and gets its vacancy bitmap: from the lock
    /// CAS, or without vacancy-bitmap piggybacking from a READ of its own right after it.
    pub(super) async fn lock_hopscotch_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<LockedLeaf<'_>> {
        let mut locked = self.lock_leaf(c, leaf).await?;
        if !self.vacancy {
            // Without piggybacking the lock CAS is used as a plain lock and the vacancy
            // bitmap costs its own READ (it shares the word here; the cost is the same).
            let w = unlocked(c.read_word(self.lock_addr(leaf)).await?);
            locked.lw = LockWord::decode(&self.leaf, w);
        }
        Ok(locked)
    }

    /// Releases a leaf's remote lock: one WRITE of its lock word `leaf.lw` (vacancy bitmap and
    /// argmax) with the lock bit clear; then its local slot.
    pub(crate) async fn unlock_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
    ) -> IndexResult<()> {
        leaf.held.unlock_with(c, leaf.lw.encode(&self.leaf)).await
    }

    /// A leaf buffer from this compute node's pool, as [`LeafBuf::new`] makes it; it goes back
    /// to the pool when dropped, so steady-state reads allocate nothing.
    pub(crate) fn leaf_buf<T: Transport>(&self, c: &Client<T>) -> PooledLeaf<'_> {
        let mut buf = self.bufs.get(c, || LeafBuf::new(self.leaf));
        buf.reset();
        buf
    }

    /// READs decoded `ranges` of a leaf (one doorbell) into `buf`; `Ok(false)` if what came back
    /// is torn or mid-write.
    async fn read_into<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        buf: &mut LeafBuf,
        ranges: &[(usize, usize)],
    ) -> IndexResult<bool> {
        // One scratch buffer split into the ranges' physical pieces.
        let mut raw = std::mem::take(&mut buf.raw);
        let lens = ranges.iter().map(|&(d0, d1)| {
            let (p0, p1) = phys_range(d0, d1);
            (p0, p1 - p0)
        });
        raw.resize(lens.clone().map(|(_, n)| n).sum(), 0);
        let mut reads = ArrayVec::<BatchOp<'_>, 3>::new();
        let mut rest = raw.as_mut_slice();
        for (p0, n) in lens {
            let (piece, tail) = rest.split_at_mut(n);
            reads.push(BatchOp::Read { addr: leaf.add(p0 as u64), buf: piece });
            rest = tail;
        }
        let posted = doorbell::post(c, &mut reads).await;
        drop(reads);
        let mut ok = posted.is_ok();
        let mut at = 0;
        for &(d0, d1) in ranges {
            let (p0, p1) = phys_range(d0, d1);
            ok = ok && buf.absorb(d0, d1, &raw[at..at + p1 - p0]).is_ok();
            at += p1 - p0;
        }
        buf.raw = raw;
        posted?;
        Ok(ok && buf.validate().is_ok())
    }

    /// READs slots `lo .. lo + n` of a leaf until the READ validates.
    pub(crate) async fn read_slots<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        lo: usize,
        n: usize,
    ) -> IndexResult<PooledLeaf<'_>> {
        loop {
            let mut buf = self.leaf_buf(c);
            let ranges = buf.ranges(lo, n);
            if self.read_into(c, leaf, &mut buf, &ranges).await? {
                return Ok(buf);
            }
            self.retry();
        }
    }

    /// READs a leaf's inclusive upper bound (big-endian, at the rear).
    pub(super) async fn read_bound<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<u64> {
        let b = c.read_vec(leaf.add(self.leaf.bound_offset() as u64), 8).await?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    /// Encodes slots `lo .. lo + n` (circular) of `buf` into its scratch, with the unlocking lock
    /// word `lw` last: what [`Tree::write_pieces`] WRITEs. Allocates nothing once the scratch has
    /// grown to a leaf's size.
    pub(super) fn write_plan(
        &self,
        buf: &mut LeafBuf,
        lo: usize,
        n: usize,
        lw: LockWord,
    ) -> WritePlan {
        let mut raw = std::mem::take(&mut buf.raw);
        raw.clear();
        let mut pieces = WritePlan::new();
        for (d0, d1) in buf.write_ranges(lo, n) {
            let start = raw.len();
            cacheline::encode(&self.leaf, &buf.bytes, d0, d1, &mut raw);
            pieces.push((phys_range(d0, d1).0, start..raw.len()));
        }
        let word = unlocked(lw.encode(&self.leaf)).to_le_bytes();
        let lock_at = self.leaf.lock_offset();
        let (at, range) = pieces.last().cloned().expect("at least one range");
        if at + range.len() == self.leaf.physical() {
            // The last range ends where the pad before the lock word begins: one WRITE.
            raw.resize(range.start + lock_at - at, 0);
            raw.extend_from_slice(&word);
            pieces.last_mut().expect("at least one range").1 = range.start..raw.len();
        } else {
            let start = raw.len();
            raw.extend_from_slice(&word);
            pieces.push((lock_at, start..raw.len()));
        }
        buf.raw = raw;
        pieces
    }

    /// WRITEs a [`Tree::write_plan`] of `buf` (the last piece carries the unlocking lock word) to
    /// locked leaf `leaf` in order, as one doorbell batch, releasing the leaf.
    pub(super) async fn write_pieces<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &LeafBuf,
        plan: &WritePlan,
    ) -> IndexResult<()> {
        let mut writes = ArrayVec::<BatchOp<'_>, 3>::new();
        for (at, r) in plan {
            writes.push(BatchOp::Write {
                addr: leaf.addr.add(*at as u64),
                data: &buf.raw[r.clone()],
            });
        }
        leaf.held.unlock_by(doorbell::post(c, &mut writes)).await
    }

    /// Rewrites entry `i` of locked leaf `leaf` (READ into `buf`) as (k, v) with its
    /// entry-level version bumped, unlocking the leaf in the same WRITE.
    pub(crate) async fn update_in_place<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        i: usize,
        k: u64,
        v: [u8; 8],
    ) -> IndexResult<()> {
        buf.set_entry(i, k, v);
        buf.bump_ev(i);
        let plan = self.write_plan(buf, i, 1, leaf.lw);
        self.write_pieces(c, leaf, buf, &plan).await
    }

    /// The physical image of a whole leaf: versioned bytes, pad, lock word, upper bound.
    pub(crate) fn leaf_image(&self, buf: &LeafBuf, lw: LockWord, bound: u64) -> Vec<u8> {
        let mut out = Vec::new();
        cacheline::encode(&self.leaf, &buf.bytes, 0, self.leaf.decoded(), &mut out);
        out.resize(self.leaf.lock_offset(), 0);
        out.extend_from_slice(&unlocked(lw.encode(&self.leaf)).to_le_bytes());
        out.extend_from_slice(&bound.to_be_bytes());
        out
    }
}

/// Pieces of a leaf to WRITE in order: (physical offset, bytes in the buffer's scratch). At most
/// two entry ranges (one wraps) and the lock word.
pub(crate) type WritePlan = ArrayVec<(usize, std::ops::Range<usize>), 3>;

/// A leaf buffer borrowed from a compute node's pool (see [`Tree::leaf_buf`]).
pub(crate) type PooledLeaf<'t> = Pooled<'t, LeafBuf>;
