//! MS-RNIC write synchronisation inside one leaf: lock-free searches, and inserts, updates and
//! deletes that share the leaf through Spear.
//!
//! # Verbs (one doorbell = one round trip, 8-byte values, room in the leaf)
//!
//! | operation | round trips | verbs |
//! |---|---|---|
//! | search | 1 | READ leaf (again if torn by an SMO) |
//! | insert of a new key | 3 | `[FAA +1, READ leaf]`; masked CAS the first free key field 0 → key; `[WRITE value, masked CAS head: cell EMPTY → LIVE, FAA −1]` |
//! | insert of a present key (upsert) | 2 | `[FAA +1, READ leaf]`; `[WRITE value, FAA −1]` (`+ masked CAS EMPTY → LIVE` when pending) |
//! | update | 2 | `[FAA +1, READ leaf]`; `[WRITE value bytes, FAA −1]` (the head is never written) |
//! | delete | 2 | `[FAA +1, READ leaf]`; `[masked CAS head: cell LIVE → DELETED, FAA −1]` |
//! | absent key (update, delete) | 2 | `[FAA +1, READ leaf]`; `FAA −1` |
//!
//! Every `FAA +1` here (and below) is preceded in its doorbell by the WRITE of the client's
//! intent word, and every `FAA −1` followed by the WRITE that marks it done
//! ([`dmindex_prim::spear::intent`]): 8 bytes each, no round trip.
//!
//! # Multi-line cells (values over 56 bytes)
//!
//! Two WRITEs of one multi-line cell could interleave line by line and leave a value torn for
//! good, so writers of such a cell serialise on its lock bit `H.L` (the cell's line head, which
//! describes that cell alone), taken by CAS after the entry, and released by the writer's last
//! WRITE. The locked word names the holder's member slot, and the CAS rides after the WRITE of
//! the writer's redo record ([`crate::redo`]: the whole cell it is about to write) in one
//! doorbell:
//!
//! | operation | round trips | verbs |
//! |---|---|---|
//! | insert of a new key | 4 | enter; masked CAS key field 0 → key; `[WRITE record, CAS H → H locked by me]`; `[WRITE lines 1.., WRITE line 0 (H LIVE at cv + 1, unlocked), FAA −1]` |
//! | insert of a present key | 3 | enter; `[WRITE record, CAS H (not DELETED) → locked]`; the same doorbell |
//! | update | 3 | enter; `[WRITE record, CAS H (LIVE) → locked]`; the same doorbell |
//! | delete | 2 | enter; `[masked CAS H LIVE unlocked → DELETED, FAA −1]` |
//! | search | 1 | READ; the cell is taken when whole ([`LeafImage::cell_whole`]), else READ again |
//!
//! Line 0 goes last: until it lands the cell's lines show the old version or a mismatch, never
//! a whole new version under an old `H`. A writer or delete that finds the cell locked waits
//! inside the leaf for the word to move, and a reader that keeps finding it torn under a lock
//! goes in to wait too ([`settle`]); a holder that died (stopped anywhere: after its CAS, or
//! with some of its last doorbell's lines landed) is judged by its lease, fenced, and its write
//! finished from its record by the waiter (`cell`). The lock costs a round trip over one-line
//! cells on every write, the record `64 + cell` bytes written in a doorbell sent anyway.
//!
//! # One-line cells: value first, state after
//!
//! Up to seven cells share a line head, so no writer WRITEs a head (it would erase a neighbour's
//! state change): a cell's state moves by masked CAS on its two bits, EMPTY → LIVE → DELETED and
//! never back within an epoch, and its value is written by a WRITE posted before that CAS in one
//! doorbell, so it has landed when the state turns. A DELETED cell stays dead until an SMO:
//! re-inserting its key takes a free slot, so a value WRITE that lands on a deleted cell (an
//! update or upsert that read it LIVE) is never seen.
//!
//! # Linearization points
//!
//! * insert: the masked CAS that turns its cell LIVE (the value landed before it, in the same
//!   line); every insert of that key whose WRITE landed before that CAS linearizes there too,
//!   just before it in landing order (each is still in flight: its own CAS comes later); one
//!   whose WRITE lands on a LIVE cell, at that WRITE; on a DELETED cell, just before the delete;
//! * update → true: its value WRITE when it lands on a LIVE cell; when a delete's CAS came
//!   between its READ and its WRITE, just before that delete (the bytes it wrote are never seen:
//!   a deleted cell never turns LIVE again in its epoch);
//! * delete → true: its CAS; update or delete → false, and a search: the READ that saw the cell
//!   (for a multi-line update that found the cell DELETED when locking it, that CAS).
//! * a multi-line insert or update: the WRITE of the cell's line 0.
//!
//! A key occupies at most one slot that is not DELETED per leaf epoch (the crate docs explain
//! why), so the live cell a reader finds for a key is that key's only live cell in the leaf.

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::spear::{self, Held};

use crate::bump;
use crate::leaf::{
    field_mask, key_field, Judge, LeafImage, LineHead, Refused, Shape, State, SPEAR,
};

mod cell;

pub use cell::{adopt, settle, Cells};
use cell::{await_cell, lock_cell, write_locked, Locked, Pending};

/// Counters of the leaf protocol's slow paths.
#[derive(Debug, Default)]
pub struct SyncCounters {
    /// Leaf READs refused as torn by an SMO and read again.
    pub torn_reads: std::sync::atomic::AtomicU64,
    /// Key CASes that lost to another insert.
    pub lost_key_cas: std::sync::atomic::AtomicU64,
    /// Operations turned away by an SMO's claim and started over.
    pub claimed: std::sync::atomic::AtomicU64,
}

/// How a write on a leaf ended.
#[derive(Debug)]
pub enum Write<T> {
    /// Done, with its result; the operation has left the leaf.
    Done(T),
    /// The key is not this leaf's to decide (`judge` against the image in the caller's buffer);
    /// still in flight on the leaf, so the caller can leave in the doorbell that goes on.
    Elsewhere(Held, Judge),
    /// An insert found no free slot: still in flight, for the caller's SMO to claim the leaf.
    Full(Held),
    /// An SMO held the leaf (now gone): locate the key again and start over.
    Again,
}

fn refused(leaf: GlobalAddr) -> IndexError {
    IndexError::Corrupt(format!("no dolphin leaf at {leaf:?}"))
}

/// READs the leaf at `leaf` into `buf` until it checks.
pub async fn read<'b, T: Transport>(
    c: &Client<T>,
    shape: &'b Shape,
    leaf: GlobalAddr,
    buf: &'b mut [u8],
    counters: &SyncCounters,
) -> IndexResult<LeafImage<'b>> {
    read_until_checked(c, shape, leaf, buf, counters, async |_| Ok(())).await
}

/// [`read`], for a reader that must get past an SMO that died mid-rewrite: a leaf still torn
/// after [`WAIT_AFTER_TORN`] READs is waited on until no SMO claims it
/// ([`spear::wait_unclaimed`], which judges a dead claimer and has its rewrite finished,
/// [`crate::smo_redo`]), then READ again.
pub async fn read_checked<'b, T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &'b Shape,
    leaf: GlobalAddr,
    buf: &'b mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<LeafImage<'b>> {
    let word = leaf.add(SPEAR as u64);
    read_until_checked(c, shape, leaf, buf, counters, async |torn| {
        if torn % WAIT_AFTER_TORN == 0 {
            spear::wait_unclaimed(c, word, leaf, rec).await?;
        }
        Ok(())
    })
    .await
}

/// READs the leaf until it checks, calling `on_torn` with the count of torn READs so far
/// after each; ends when it checks, or on the attempts' bound.
async fn read_until_checked<'b, T: Transport>(
    c: &Client<T>,
    shape: &'b Shape,
    leaf: GlobalAddr,
    buf: &'b mut [u8],
    counters: &SyncCounters,
    mut on_torn: impl AsyncFnMut(u32) -> IndexResult<()>,
) -> IndexResult<LeafImage<'b>> {
    let mut attempts = Attempts::new();
    let mut torn = 0;
    loop {
        c.read(leaf, &mut buf[..shape.bytes]).await?;
        // Every key line's epoch and every line head are checked.
        c.compute(Work::BytesScanned, shape.bytes as u64);
        match LeafImage::verify(shape, buf) {
            Ok(()) => return Ok(LeafImage::verified(shape, buf)),
            Err(Refused::Torn) => bump(&counters.torn_reads),
            Err(Refused::NotALeaf) => return Err(refused(leaf)),
        }
        attempts.failed(leaf, "leaf epochs")?;
        torn += 1;
        on_torn(torn).await?;
    }
}

/// Torn READs of one leaf after which a reader waits on the leaf's claim (a live SMO's
/// rewrite lands within a round trip: a few READs see it whole).
pub const WAIT_AFTER_TORN: u32 = 8;

/// READs the leaf at `leaf` into `buf` until it checks with every live cell whole (for a scan,
/// which returns them all). A cell still torn under a lock after a few READs is waited for
/// inside the leaf ([`settle`]), where a dead writer's write is finished.
pub async fn read_whole<T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    buf: &mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<()> {
    let mut attempts = Attempts::new();
    let mut tries = 0;
    // Ends when every live cell is whole, or on the attempts' bound.
    loop {
        tries += 1;
        let img = read_checked(c, shape, leaf, buf, counters, rec).await?;
        if img.live_whole() {
            return Ok(());
        }
        let torn = torn_lock(&img, None);
        attempts.failed(leaf, "leaf's multi-line cells")?;
        bump(&counters.torn_reads);
        if let Some((j, head)) = torn.filter(|_| tries >= SETTLE_AFTER) {
            settle(c, shape, leaf, j, head, buf, counters, rec).await?;
        }
    }
}

/// Torn READs of a locked multi-line cell after which a reader goes to wait inside the leaf
/// (a live writer's last doorbell is one round trip: a few READs see it land).
pub const SETTLE_AFTER: u32 = 4;

/// A live cell of `img` (`key`'s only, if given) that is torn with its head locked: the slot
/// and the head.
pub fn torn_lock(img: &LeafImage<'_>, key: Option<u64>) -> Option<(usize, LineHead)> {
    let torn = |j: usize| !img.cell_whole(j) && img.head(j).locked();
    let j = match key {
        Some(k) => img.find(k).filter(|&j| img.state(j) == State::Live && torn(j)),
        None => img.live().map(|(_, j)| j).find(|&j| torn(j)),
    };
    j.map(|j| (j, img.head(j)))
}

/// The value of `key` in the leaf image, if live there; `None` when its multi-line cell was
/// mid-write (READ again).
pub fn search_image(img: &LeafImage<'_>, key: u64, out: &mut Vec<u8>) -> Option<bool> {
    value_at(img, img.find(key), out)
}

/// [`search_image`], the keys it compared reported to `c`.
pub fn search_image_reported<T: Transport>(
    c: &Client<T>,
    img: &LeafImage<'_>,
    key: u64,
    out: &mut Vec<u8>,
) -> Option<bool> {
    value_at(img, img.find_reported(c, key), out)
}

/// The value in slot `found` of the image into `out`, as [`search_image`] answers.
fn value_at(img: &LeafImage<'_>, found: Option<usize>, out: &mut Vec<u8>) -> Option<bool> {
    match found {
        Some(j) if img.state(j) == State::Live => {
            if !img.cell_whole(j) {
                return None;
            }
            out.clear();
            img.value_into(j, out);
            Some(true)
        }
        _ => Some(false),
    }
}

/// Enters the leaf for `key` (Spear `+1` with the leaf READ in one doorbell) and judges it:
/// in flight on the leaf, which decides the key, with its image; or how the write ends without
/// touching it ([`Write::Elsewhere`], still in flight; [`Write::Again`], an SMO held it).
async fn enter<'b, T: Transport, R, V: Cells<T>>(
    c: &Client<T>,
    shape: &'b Shape,
    leaf: GlobalAddr,
    key: u64,
    buf: &'b mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<Result<(Held, LeafImage<'b>), Write<R>>> {
    let check = |b| LeafImage::check(shape, b).ok();
    let word = leaf.add(SPEAR as u64);
    let b = &mut buf[..shape.bytes];
    let entered = spear::enter_checked(c, word, leaf, b, rec, check, || refused(leaf));
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

/// Inserts or overwrites `key` in the leaf at `leaf` (an upsert). `buf` holds at least a leaf;
/// `rec` repairs what a dead SMO left on a leaf this write waits for.
#[allow(clippy::too_many_arguments)]
pub async fn upsert<T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    key: u64,
    value: &[u8],
    buf: &mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<Write<()>> {
    let (held, img) = match enter(c, shape, leaf, key, buf, counters, rec).await? {
        Ok(entered) => entered,
        Err(w) => return Ok(w),
    };
    let mut slot = img.find_reported(c, key).map(|j| (j, img.state(j)));
    let mut from = 0;
    // Ends: each pass either claims a slot or moves `from` past one.
    while slot.is_none() {
        let Some(j) = img.free_from(from) else { return Ok(Write::Full(held)) };
        let (shift, mask) = (16 * shape.key_field_of(j), field_mask(shape.key_field_of(j)));
        let mine = key_field(key) << shift;
        let claim =
            AtomicOp::MaskedCas { compare: 0, compare_mask: mask, swap: mine, swap_mask: mask };
        let old = c.atomic(leaf.add(shape.key_at(j) as u64), claim).await? & mask;
        if old == 0 || old == mine {
            // Ours, or another insert's of this key (its state unknown: the turn to LIVE
            // below compares it).
            slot = Some((j, State::Empty));
        } else {
            // Taken by another key since the READ: the word is as good as a read of it.
            bump(&counters.lost_key_cas);
            from = j + 1;
        }
    }
    let (j, state) = slot.expect("a slot");
    if shape.multi_line() {
        return Ok(
            match write_cell(c, shape, leaf, j, img.head(j), false, value, held, rec.redo()).await?
            {
                CellWrite::Done => Write::Done(()),
                // A DELETED cell: the key takes a free slot on the next attempt.
                CellWrite::Again | CellWrite::Gone => Write::Again,
            },
        );
    }
    let write = BatchOp::Write { addr: leaf.add(shape.value_at(j) as u64), data: value };
    if state == State::Live {
        // LIVE never turns back: the value WRITE alone (on a cell deleted since the READ it is
        // never seen, and the upsert linearizes just before that delete).
        let leave = held.leave(c);
        let [faa, done] = leave.ops();
        c.batch(&mut [write, faa, done]).await?;
    } else {
        // The value lands before the state turns (one doorbell, in order). A failed turn found
        // the cell LIVE (another insert of the key turned it: this one linearizes just before
        // that turn if its WRITE landed first, else at its WRITE) or DELETED (just before the
        // delete, which came after this insert's READ saw the cell not LIVE).
        let p = shape.pos(j);
        let turn = AtomicOp::MaskedCas {
            compare: LineHead::bits(p, State::Empty),
            compare_mask: LineHead::mask(p),
            swap: LineHead::bits(p, State::Live),
            swap_mask: LineHead::mask(p),
        };
        let head = BatchOp::atomic(leaf.add(shape.head_at(j) as u64), turn);
        let leave = held.leave(c);
        let [faa, done] = leave.ops();
        c.batch(&mut [write, head, faa, done]).await?;
    }
    Ok(Write::Done(()))
}

/// How a multi-line write ended.
enum CellWrite {
    Done,
    /// Another writer held the cell, and has let go since: enter again.
    Again,
    /// The cell stopped matching what the write needs (an update found it not LIVE, an upsert
    /// found it DELETED).
    Gone,
}

/// A multi-line write of `value` to cell `j` (head `seen` as the entry READ it; `live`: an
/// update, which needs the cell LIVE): locked, then written and left, in two doorbells. A cell
/// another writer holds is waited for inside the leaf ([`await_cell`]) before the write leaves.
#[allow(clippy::too_many_arguments)]
async fn write_cell<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    j: usize,
    seen: LineHead,
    live: bool,
    value: &[u8],
    held: Held,
    redo: Option<&crate::redo::Redo>,
) -> IndexResult<CellWrite> {
    let mut pending = Pending::new();
    match lock_cell(c, shape, leaf, j, seen, live, value, redo, &mut pending).await? {
        Locked::Held => {
            write_locked(c, shape, leaf, j, &pending, held).await?;
            Ok(CellWrite::Done)
        }
        Locked::Busy(word) => {
            await_cell(c, shape, leaf, j, word, redo).await?;
            held.leave_now(c).await?;
            Ok(CellWrite::Again)
        }
        Locked::Gone => {
            held.leave_now(c).await?;
            Ok(CellWrite::Gone)
        }
    }
}

/// Sets `key`'s value if it is live in the leaf; whether it was.
#[allow(clippy::too_many_arguments)]
pub async fn update<T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    key: u64,
    value: &[u8],
    buf: &mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<Write<bool>> {
    let (held, img) = match enter(c, shape, leaf, key, buf, counters, rec).await? {
        Ok(entered) => entered,
        Err(w) => return Ok(w),
    };
    match img.find_reported(c, key) {
        Some(j) if img.state(j) == State::Live && shape.multi_line() => {
            let head = img.head(j);
            Ok(match write_cell(c, shape, leaf, j, head, true, value, held, rec.redo()).await? {
                CellWrite::Done => Write::Done(true),
                CellWrite::Again => Write::Again,
                CellWrite::Gone => Write::Done(false),
            })
        }
        Some(j) if img.state(j) == State::Live => {
            let at = leaf.add(shape.value_at(j) as u64);
            let leave = held.leave(c);
            let [faa, done] = leave.ops();
            c.batch(&mut [BatchOp::Write { addr: at, data: value }, faa, done]).await?;
            Ok(Write::Done(true))
        }
        _ => {
            held.leave_now(c).await?;
            Ok(Write::Done(false))
        }
    }
}

/// Deletes `key` if it is live in the leaf; whether it was.
pub async fn delete<T: Transport, V: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    key: u64,
    buf: &mut [u8],
    counters: &SyncCounters,
    rec: &V,
) -> IndexResult<Write<bool>> {
    // Ends when the delete finds the key not live, or wins its CAS: a failed CAS means another
    // delete won (the next look finds the key gone, or live in a later slot), and a locked
    // multi-line cell is looked at again until its writer's last doorbell unlocks it.
    loop {
        let (held, img) = match enter(c, shape, leaf, key, &mut *buf, counters, rec).await? {
            Ok(entered) => entered,
            Err(w) => return Ok(w),
        };
        let Some(j) = img.find_reported(c, key).filter(|&j| img.state(j) == State::Live) else {
            held.leave_now(c).await?;
            return Ok(Write::Done(false));
        };
        let head = img.head(j);
        if head.locked() {
            // A writer is mid-way: its write must not land on a deleted cell. Wait for it (or
            // finish it, once it is judged dead), and enter again.
            await_cell(c, shape, leaf, j, head, rec.redo()).await?;
            held.leave_now(c).await?;
            continue;
        }
        // Only this cell's state bits (and a multi-line cell's lock) are compared: the other
        // cells of the line change under it.
        let p = shape.pos(j);
        let lock = if shape.multi_line() { crate::leaf::LOCK } else { 0 };
        let kill = AtomicOp::MaskedCas {
            compare: LineHead::bits(p, State::Live),
            compare_mask: LineHead::mask(p) | lock,
            swap: LineHead::bits(p, State::Deleted),
            swap_mask: LineHead::mask(p),
        };
        let leave = held.leave(c);
        let [faa, done] = leave.ops();
        let mut ops = [BatchOp::atomic(leaf.add(shape.head_at(j) as u64), kill), faa, done];
        c.batch(&mut ops).await?;
        if ops[0].old().is_some_and(|old| !kill.failed(old)) {
            return Ok(Write::Done(true));
        }
        // Another delete won (the key may be in another slot since), or a multi-line writer
        // holds the cell: look again.
    }
}

#[cfg(test)]
mod tests;
