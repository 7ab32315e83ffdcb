//! Multi-line cells: the writer lock that names its holder, the redo record each writer
//! leaves before it locks ([`crate::redo`]), and how a waiter gets past a holder that died.
//!
//! # Waiting on a locked cell
//!
//! A writer (or a reader that found the cell torn) waits *inside* the leaf, holding a Spear
//! share: that keeps SMOs off the leaf, so the repair's WRITEs cannot land on a rewritten leaf,
//! and costs nothing the holder does not already impose (its own share keeps the leaf from
//! draining too). Each look is one doorbell, `[READ the cell's head, READ the holder's record
//! header]`, after the backoff's pause. Once the same locked word has been seen for a lease the
//! member the record names is judged ([`Watch`]); fenced, its write is finished from the
//! record ([`take_over`]). The wait ends when the head moves off the word, whoever moved it.

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::backoff::{Backoff, FREE};
use dmindex_prim::lease::{self, Verdict, Watch};
use dmindex_prim::spear::{self, Held, Recover, WholeRewrites};

use super::{refused, SyncCounters};
use crate::bump;
use crate::leaf::{encode_cell, LeafImage, LineHead, Shape, State, LINE, MAX_CELL, SPEAR};
use crate::redo::{Header, Redo, HEADER};

/// What the leaf protocol needs from its index besides Spear's recovery.
pub trait Cells<T: Transport>: Recover<T> {
    /// The index's redo records; `None` keeps none (a dead holder of a multi-line cell is then
    /// waited on until the backoff gives up).
    fn redo(&self) -> Option<&Redo>;

    /// Each client's scratch area for SMO rewrites longer than a packet
    /// ([`crate::smo_redo`]); `None` writes them in place only.
    fn smo_scratch(&self) -> Option<&crate::smo_redo::Scratch>;
}

impl<T: Transport> Cells<T> for WholeRewrites {
    fn redo(&self) -> Option<&Redo> {
        None
    }

    fn smo_scratch(&self) -> Option<&crate::smo_redo::Scratch> {
        None
    }
}

/// A multi-line write's record: its header, then the cell image its last doorbell WRITEs.
pub(super) struct Pending {
    rec: [u8; HEADER + MAX_CELL],
}

impl Pending {
    pub(super) fn new() -> Pending {
        Pending { rec: [0; HEADER + MAX_CELL] }
    }
}

/// How taking a multi-line cell's lock ended.
pub(super) enum Locked {
    /// Held: `pending` holds what to write.
    Held,
    /// Another writer holds it, with this word.
    Busy(LineHead),
    /// Its state stopped matching what the writer needs (an update found it not LIVE, an
    /// upsert found it DELETED).
    Gone,
}

/// Takes multi-line cell `j`'s lock (its head describes it alone) to write `value`, starting
/// from the word `seen` the entry READ; `live` asks the cell to be LIVE, else not DELETED.
/// Each CAS rides in one doorbell after the WRITE of this client's redo record for it. A failed
/// CAS returns the word, as good as a READ of it. The loop ends: a failure means another writer
/// changed the word, and it ends at once when that writer still holds the lock or the cell
/// turned away.
#[allow(clippy::too_many_arguments)]
pub(super) async fn lock_cell<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    j: usize,
    mut seen: LineHead,
    live: bool,
    value: &[u8],
    redo: Option<&Redo>,
    pending: &mut Pending,
) -> IndexResult<Locked> {
    let at = leaf.add(shape.head_at(j) as u64);
    let member = lease::renew_if_due(c).await?;
    let (slot, _) = lease::parse_member(member);
    loop {
        if seen.locked() {
            return Ok(Locked::Busy(seen));
        }
        let state = seen.state(0);
        if state == Some(State::Deleted) || live && state != Some(State::Live) {
            return Ok(Locked::Gone);
        }
        let locked = seen.locked_by(slot);
        let head = LineHead::versioned(State::Live, seen.nv(), seen.cv().wrapping_add(1));
        encode_cell(shape, head, value, &mut pending.rec[HEADER..]);
        Header { member, leaf, j, locked }.encode(&mut pending.rec);
        let cas = BatchOp::atomic(at, AtomicOp::Cas { expected: seen.0, new: locked.0 });
        let old = match redo {
            Some(redo) => {
                let data = &pending.rec[..redo.record()];
                let mut ops = [BatchOp::Write { addr: redo.at(leaf.node(), slot), data }, cas];
                c.batch(&mut ops).await?;
                ops[1].old().expect("a CAS")
            }
            None => c.cas(at, seen.0, locked.0).await?,
        };
        if old == seen.0 {
            return Ok(Locked::Held);
        }
        seen = LineHead(old);
    }
}

/// Writes the cell `pending` holds into locked cell `j`, other lines first and line 0 (which
/// unlocks it) last, and leaves the leaf, in one doorbell.
pub(super) async fn write_locked<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    j: usize,
    pending: &Pending,
    held: Held,
) -> IndexResult<()> {
    let cell = &pending.rec[HEADER..HEADER + shape.cell];
    let at = leaf.add(shape.head_at(j) as u64);
    let leave = held.leave(c);
    let [faa, done] = leave.ops();
    let mut ops = [
        BatchOp::Write { addr: at.add(LINE as u64), data: &cell[LINE..] },
        BatchOp::Write { addr: at, data: &cell[..LINE] },
        faa,
        done,
    ];
    Ok(c.batch(&mut ops).await?)
}

/// Finishes the write that lock `seen` on cell `j` stands for, its holder fenced, from the
/// record in `rec` (read whole): takes the lock over (`[WRITE own record, CAS seen → seen
/// taken over]`), then `[WRITE lines 1.., WRITE line 0]`. Under a Spear share of the leaf.
/// `false` when the word moved first (another repairer won).
async fn take_over<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    j: usize,
    seen: LineHead,
    redo: &Redo,
    rec: &mut [u8],
) -> IndexResult<bool> {
    let member = lease::renew_if_due(c).await?;
    let (slot, _) = lease::parse_member(member);
    let mine = seen.taken_over_by(slot);
    Header { member, leaf, j, locked: mine }.encode(rec);
    let at = leaf.add(shape.head_at(j) as u64);
    let record = &rec[..redo.record()];
    let cas = BatchOp::atomic(at, AtomicOp::Cas { expected: seen.0, new: mine.0 });
    let mut ops = [BatchOp::Write { addr: redo.at(leaf.node(), slot), data: record }, cas];
    c.batch(&mut ops).await?;
    if ops[1].old() != Some(seen.0) {
        return Ok(false);
    }
    let cell = &rec[HEADER..HEADER + shape.cell];
    let mut ops = [
        BatchOp::Write { addr: at.add(LINE as u64), data: &cell[LINE..] },
        BatchOp::Write { addr: at, data: &cell[..LINE] },
    ];
    c.batch(&mut ops).await?;
    Ok(true)
}

/// Waits, inside the leaf (the caller holds a Spear share), until cell `j`'s head moves off
/// the locked word `seen`, judging the holder its record names and finishing its write once it
/// is fenced. Ends when the word moves (its holder, or a repair, let go), or on the backoff's
/// bound for a lock never let go.
pub(super) async fn await_cell<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    j: usize,
    seen: LineHead,
    redo: Option<&Redo>,
) -> IndexResult<()> {
    let at = leaf.add(shape.head_at(j) as u64);
    let (mut backoff, mut watch) = (Backoff::new(), Watch::new());
    let mut head = [0u8; 8];
    let mut header = [0u8; HEADER];
    loop {
        backoff.failed(c, at, "a multi-line cell's lock").await?;
        // This waiter holds a share of the leaf: it keeps its own lease, or it would be judged
        // dead by a waiter on that share.
        lease::renew_if_due(c).await?;
        let (Some(redo), Some(slot)) = (redo.filter(|_| backoff.looks() > FREE), seen.holder())
        else {
            c.read(at, &mut head).await?;
            if LineHead(u64::from_le_bytes(head)) != seen {
                return Ok(());
            }
            continue;
        };
        let mut ops = [
            BatchOp::Read { addr: at, buf: &mut head },
            BatchOp::Read { addr: redo.at(leaf.node(), slot), buf: &mut header },
        ];
        c.batch(&mut ops).await?;
        if LineHead(u64::from_le_bytes(head)) != seen {
            return Ok(());
        }
        let h = Header::decode(&header);
        if !h.describes(leaf, j, seen) {
            // Never while the word holds (see `crate::redo`): look again.
            continue;
        }
        if watch.look(c, seen.0, h.member).await? == Verdict::Fenced {
            let mut rec = vec![0u8; redo.record()];
            let h = redo.read(c, leaf.node(), slot, &mut rec).await?;
            if h.describes(leaf, j, seen) {
                take_over(c, shape, leaf, j, seen, redo, &mut rec).await?;
            }
            return Ok(());
        }
    }
}

/// Before this client first writes a redo record on `node`: finishes the write its slot's
/// previous incarnation left there under a lock that still holds (that incarnation is fenced:
/// a slot is joined only FREE, left holding nothing, or FENCED), so that no record a lock
/// stands for is overwritten. Not under any share (it enters the record's leaf itself).
pub async fn adopt<T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    node: u16,
    buf: &mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<()> {
    let Some(redo) = rec.redo() else { return Ok(()) };
    let member = lease::renew_if_due(c).await?;
    if redo.adopted(node, member) {
        return Ok(());
    }
    let (slot, _) = lease::parse_member(member);
    let mut record = vec![0u8; redo.record()];
    let h = redo.read(c, node, slot, &mut record).await?;
    let theirs = h.member != 0 && h.member != member;
    if theirs && h.leaf.node() == node && h.locked.holder() == Some(slot) && h.j < shape.slots {
        let (leaf, word) = (h.leaf, h.leaf.add(SPEAR as u64));
        // Ends when the leaf is entered (an SMO's claim is waited out, and its rewrite took
        // the value from this record), bounded by the claims a leaf can see in a row.
        let mut attempts = dmindex_prim::attempts::Attempts::new();
        loop {
            let b = &mut buf[..shape.bytes];
            let check = |b| LeafImage::check(shape, b).ok();
            let entered = spear::enter_checked(c, word, leaf, b, rec, check, || refused(leaf));
            let Some((held, img)) = entered.await? else {
                bump(&counters.claimed);
                attempts.failed(leaf, "a predecessor's redo record")?;
                continue;
            };
            if img.head(h.j) == h.locked {
                take_over(c, shape, leaf, h.j, h.locked, redo, &mut record).await?;
            }
            held.leave_now(c).await?;
            break;
        }
    }
    redo.mark_adopted(node, member);
    Ok(())
}

/// A reader found cell `j` of `leaf` torn under the locked word `seen`: enters the leaf as a
/// writer would and waits there for that lock to go (`await_cell`), then leaves. The reader
/// then reads again.
#[allow(clippy::too_many_arguments)]
pub async fn settle<T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    j: usize,
    seen: LineHead,
    buf: &mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<()> {
    adopt(c, shape, leaf.node(), buf, counters, rec).await?;
    let check = |b| LeafImage::check(shape, b).ok();
    let word = leaf.add(SPEAR as u64);
    let b = &mut buf[..shape.bytes];
    let entered = spear::enter_checked(c, word, leaf, b, rec, check, || refused(leaf)).await?;
    let Some((held, img)) = entered else {
        // An SMO held the leaf and rewrote it: the lock is gone.
        return Ok(());
    };
    if img.head(j) == seen {
        await_cell(c, shape, leaf, j, seen, rec.redo()).await?;
    }
    held.leave_now(c).await
}

#[cfg(test)]
mod tests;
