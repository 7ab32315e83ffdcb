//! Writes inside one leaf: inserts, updates and deletes share the leaf through Spear and change
//! one entry each by CAS; searches take no lock.
//!
//! # Verbs (one doorbell = one round trip; the item WRITE is posted without waiting and rides
//! ahead of the next doorbell to the leaf's memory node)
//!
//! | operation | round trips | doorbells |
//! |---|---|---|
//! | insert of a new key | 3 | `[FAA +1, READ leaf]`; `[WRITE item, CAS key 0 → k]`; `[CAS ptr null → item, FAA −1]` |
//! | insert of a present key | 3 | `[FAA +1, READ leaf]`; `[WRITE item, CAS ptr old → item]`; `FAA −1` |
//! | update | 3 | as insert of a present key; `false` (2 round trips) if the pointer is null |
//! | delete | 2 | `[FAA +1, READ leaf]`; `[CAS ptr item → null, FAA −1]` |
//! | absent key (update, delete) | 2 | `[FAA +1, READ leaf]`; `FAA −1` |
//!
//! Every `FAA +1` is preceded in its doorbell by the WRITE of the client's intent word, and every
//! `FAA −1` followed by the WRITE that marks it done ([`dmindex_prim::spear::intent`]): 8 bytes
//! each, no round trip.
//!
//! The update's `FAA −1` waits for the pointer CAS as Marlin's three-doorbell write path does
//! (READ + FAA, item + CAS, FAA); posting it with the CAS would save the round trip, but this is
//! the baseline as published.
//!
//! # Linearization points
//!
//! * insert or update whose pointer CAS succeeds: that CAS;
//! * one whose CAS fails: just before the first change of the pointer after its READ (another
//!   insert, update or delete of the key, all inside its interval — Spear keeps SMOs out, so only
//!   they change it), which overwrites its value at once, so no read can tell ("lost update", as
//!   Marlin's CAS and the MS-RNIC writers of the Dolphin paper): no retry;
//! * delete → true: its CAS (a failed one starts over: two deletes must not both succeed);
//! * update or delete → false, and a search: the READ that saw the pointer null or the key absent.
//!
//! A key holds at most one entry per leaf epoch: key words are written once, by a CAS from 0,
//! and every insert of a key walks its image's free entries in the key's own probe order
//! ([`crate::leaf::Shape::probe`]), treating a failed CAS's returned word as a read of it. Two
//! inserts of `k` that ended at different entries `i` before `j` (in `k`'s order) contradict
//! this: the one that ended at `j` passed `i` having seen (in its image or from its CAS) a key
//! other than `k` there, which never changes within the epoch, so the other's CAS at `i` could
//! not have returned 0 or `k`. (The Dolphin paper's argument, with the order rotated by the
//! key's hash so that inserts of different keys into one leaf rarely collide; the public Marlin
//! code publishes the pointer first and never rechecks, so two inserts of a key can take two
//! entries.)

use std::sync::atomic::AtomicU64;

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::counter::bump;
use dmindex_prim::kv_block::Blocks;
use dmindex_prim::spear::{self, Held, WholeRewrites};

use crate::leaf::{Judge, LeafImage, Ptr, Refused, Shape, SPEAR};

/// Counters of the leaf protocol's slow paths.
#[derive(Debug, Default)]
pub struct WriteCounters {
    /// Leaf READs refused as torn by an SMO and read again.
    pub torn_reads: AtomicU64,
    /// Key CASes that lost to another key.
    pub lost_key_cas: AtomicU64,
    /// Pointer CASes that lost to another write of the key (counted as done, see above).
    pub lost_ptr_cas: AtomicU64,
    /// Operations turned away by an SMO's claim and started over.
    pub claimed: AtomicU64,
}

/// How a write on a leaf ended.
#[derive(Debug)]
pub enum Write<T> {
    /// Done, with its result; the operation has left the leaf.
    Done(T),
    /// The key is not this leaf's (by its fences): still in flight on the leaf.
    Elsewhere(Held, Judge),
    /// An insert found no free entry: still in flight, for the caller's SMO to claim the leaf.
    Full(Held),
    /// An SMO held the leaf (now gone): locate the key again and start over.
    Again,
}

/// The error for a READ at `leaf` that is no Marlin leaf.
pub fn not_a_leaf(leaf: GlobalAddr) -> IndexError {
    IndexError::Corrupt(format!("no marlin leaf at {leaf:?}"))
}

/// READs the leaf at `leaf` into `buf` until it checks.
pub async fn read<'b, T: Transport>(
    c: &Client<T>,
    shape: &'b Shape,
    leaf: GlobalAddr,
    buf: &'b mut [u8],
    counters: &WriteCounters,
) -> IndexResult<LeafImage<'b>> {
    let mut attempts = Attempts::new();
    loop {
        c.read(leaf, &mut buf[..shape.bytes]).await?;
        // Every entry's epoch is checked against the leaf's.
        c.compute(Work::BytesScanned, shape.bytes as u64);
        match LeafImage::verify(shape, buf) {
            Ok(()) => return Ok(LeafImage::verified(shape, buf)),
            Err(Refused::Torn) => bump(&counters.torn_reads),
            Err(Refused::NotALeaf) => return Err(not_a_leaf(leaf)),
        }
        attempts.failed(leaf, "leaf versions")?;
    }
}

/// Enters the leaf for `key` (Spear `+1` with the leaf READ in one doorbell) and judges it.
async fn enter<'b, T: Transport, R>(
    c: &Client<T>,
    shape: &'b Shape,
    leaf: GlobalAddr,
    key: u64,
    buf: &'b mut [u8],
    counters: &WriteCounters,
) -> IndexResult<Result<(Held, LeafImage<'b>), Write<R>>> {
    let check = |b| LeafImage::check(shape, b).ok();
    let word = leaf.add(SPEAR as u64);
    // A dead SMO leaves nothing to roll forward: its one leaf WRITE landed whole or not at all.
    let (b, rec) = (&mut buf[..shape.bytes], &WholeRewrites);
    let entered = spear::enter_checked(c, word, leaf, b, rec, check, || not_a_leaf(leaf));
    let entered = entered.await?;
    c.compute(Work::BytesScanned, shape.bytes as u64);
    let Some((held, img)) = entered else {
        bump(&counters.claimed);
        return Ok(Err(Write::Again));
    };
    Ok(match img.judge(key) {
        Judge::Here => Ok((held, img)),
        j => Err(Write::Elsewhere(held, j)),
    })
}

/// One leaf's writes: its geometry, where items go, the counters.
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    pub shape: &'a Shape,
    pub items: &'a Blocks,
    pub counters: &'a WriteCounters,
}

impl Writer<'_> {
    /// Posts an item holding `key` and `value` on `leaf`'s memory node (zero-wait: the next
    /// doorbell to that node executes after it).
    async fn post_item<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        key: u64,
        value: &[u8],
    ) -> IndexResult<GlobalAddr> {
        self.items.post_on(c, leaf.node(), &key.to_be_bytes(), value).await
    }

    /// Inserts or overwrites `key` in the leaf at `leaf` (an upsert). `buf` holds a leaf.
    pub async fn upsert<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        key: u64,
        value: &[u8],
        buf: &mut [u8],
    ) -> IndexResult<Write<()>> {
        let (held, img) = match enter(c, self.shape, leaf, key, buf, self.counters).await? {
            Ok(entered) => entered,
            Err(w) => return Ok(w),
        };
        let nv = img.nv();
        if let Some(j) = img.find_reported(c, key) {
            self.replace(c, leaf, &img, j, key, value).await?;
            held.leave_now(c).await?;
            return Ok(Write::Done(()));
        }
        // The key's probe order starts at its hash.
        c.compute(Work::KeyHash, 1);
        let mut free = img.free_for(key);
        let Some(mut j) = free.next() else { return Ok(Write::Full(held)) };
        let item = self.post_item(c, leaf, key, value).await?;
        loop {
            let old = c.cas(leaf.add(self.shape.key_at(j) as u64), 0, key).await?;
            if old == 0 || old == key {
                break;
            }
            // Taken by another key since the READ: the word is as good as a read of it.
            bump(&self.counters.lost_key_cas);
            match free.next() {
                Some(next) => j = next,
                None => return Ok(Write::Full(held)),
            }
        }
        let leave = held.leave(c);
        let [faa, done] = leave.ops();
        let mut ops = [
            BatchOp::atomic(
                leaf.add(self.shape.ptr_at(j) as u64),
                AtomicOp::Cas { expected: Ptr::null(nv).0, new: Ptr::to(nv, item).0 },
            ),
            faa,
            done,
        ];
        c.batch(&mut ops).await?;
        if ops[0].old() != Some(Ptr::null(nv).0) {
            bump(&self.counters.lost_ptr_cas);
        }
        Ok(Write::Done(()))
    }

    /// Sets `key`'s value if it has one in the leaf; whether it had.
    pub async fn update<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        key: u64,
        value: &[u8],
        buf: &mut [u8],
    ) -> IndexResult<Write<bool>> {
        let (held, img) = match enter(c, self.shape, leaf, key, buf, self.counters).await? {
            Ok(entered) => entered,
            Err(w) => return Ok(w),
        };
        let found = img.find_reported(c, key).filter(|&j| img.ptr(j).item().is_some());
        if let Some(j) = found {
            self.replace(c, leaf, &img, j, key, value).await?;
        }
        held.leave_now(c).await?;
        Ok(Write::Done(found.is_some()))
    }

    /// Points entry `j` of `img` (the key's) at a new item holding `value`: the item is posted,
    /// then the pointer CASed from what the image holds (a lost CAS counts as done, see above).
    async fn replace<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        img: &LeafImage<'_>,
        j: usize,
        key: u64,
        value: &[u8],
    ) -> IndexResult<()> {
        let item = self.post_item(c, leaf, key, value).await?;
        let (old, new) = (img.ptr(j), Ptr::to(img.nv(), item));
        if c.cas(leaf.add(self.shape.ptr_at(j) as u64), old.0, new.0).await? != old.0 {
            bump(&self.counters.lost_ptr_cas);
        }
        Ok(())
    }

    /// Deletes `key` if it has a value in the leaf; whether it had.
    pub async fn delete<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        key: u64,
        buf: &mut [u8],
    ) -> IndexResult<Write<bool>> {
        loop {
            let (held, img) =
                match enter(c, self.shape, leaf, key, &mut *buf, self.counters).await? {
                    Ok(entered) => entered,
                    Err(w) => return Ok(w),
                };
            let Some(j) = img.find_reported(c, key).filter(|&j| img.ptr(j).item().is_some()) else {
                held.leave_now(c).await?;
                return Ok(Write::Done(false));
            };
            let old = img.ptr(j);
            let leave = held.leave(c);
            let [faa, done] = leave.ops();
            let mut ops = [
                BatchOp::atomic(
                    leaf.add(self.shape.ptr_at(j) as u64),
                    AtomicOp::Cas { expected: old.0, new: Ptr::null(old.nv()).0 },
                ),
                faa,
                done,
            ];
            c.batch(&mut ops).await?;
            if ops[0].old() == Some(old.0) {
                return Ok(Write::Done(true));
            }
            // Another write of the key came between: look again.
            bump(&self.counters.lost_ptr_cas);
        }
    }
}
