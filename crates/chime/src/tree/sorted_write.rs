//! Sherman's sorted leaf written in pieces that a dying writer cannot tear into a lost key, and
//! the repair of what such a writer left.
//!
//! # Why
//!
//! A shift (an insert or a delete) and a split rewrite a sorted leaf whole: 1152 bytes at span
//! 64, over RoCE's 1024-byte path MTU. A WRITE longer than the path MTU lands packet by packet,
//! so a writer that dies after posting it may land only its first packet. A shift moves
//! entries, and the entry across the cut is then in neither image: a key lost. A torn leaf also
//! fails every READ's node-version check for good, so readers and the repairer that took the
//! dead writer's lock over could never read it whole again.
//!
//! # Pieces
//!
//! ```text
//! | header | e0 | e1 | ... | e56 ‖ e57 | ... | e63 | pad | lock word | upper bound |
//! |<------ piece 0 (≤ 1024 B) ----->|<- piece 1 ---->|<-------- rear ----------->|
//! ```
//!
//! The versioned part is cut at object boundaries into pieces of at most [`ONE_PACKET`]
//! physical bytes ([`pieces`]); each lands whole or not at all, and the WRITEs of one doorbell
//! land in order, a prefix of them. Objects are whole in each piece, so each carries its own
//! cache-line copies of versions. A leaf whose image fits one packet keeps its one WRITE.
//!
//! # Order ([`Moves`])
//!
//! * **Entries move right** (an insert): the pieces from the last to the first, then the rear,
//!   which unlocks. A prefix leaves the front old and the back new: the entry across the cut
//!   is in both (once shifted, once not), never in neither.
//! * **Entries move left or leave** (a delete; a split's left half): the pieces from the first
//!   to the last, the rear in the last WRITE when it fits. A prefix leaves the front new and the
//!   back old: again the entry across the cut is in both. A split's first piece carries the new
//!   header (fences, sibling: the right half, WRITten before it) and the whole left half, so
//!   once the header landed, every key of the left half is in the leaf and every key above its
//!   new high fence is in the right half. A split whose left half would not fit the first
//!   piece (keys sharing 8-byte prefixes can push the cut up) goes without the new key, which
//!   is then inserted as any other ([`crate::sorted`]).
//!
//! # Repair ([`Tree::repair_sorted`])
//!
//! Holding the lock taken over from the fenced writer: one READ of the whole leaf, decoded
//! whatever the versions say; the keys outside the fences dropped, the entries sorted (stable)
//! and a repeated (key, value) kept once; if anything changed, the objects' node versions
//! disagreed, or the upper bound is not the high fence, the leaf is rewritten under a node
//! version none of its objects carried (left to right: the repair only removes entries), then
//! the upper bound, the lock still held. Every key the leaf held before the dead write is there
//! once, and the dead insert's key is there or not (never acknowledged). A repairer that dies
//! inside its own rewrite leaves a prefix of a left-moving write: the next one settles it the
//! same way.
//!
//! # Cost
//!
//! Round trips unchanged (a split across memory nodes awaits the right half, then posts the
//! left's pieces as one doorbell, as it awaited its two WRITEs before). At span 64 (1131
//! physical bytes), an insert's whole-leaf WRITE becomes three (pieces of 1010 and 121 bytes,
//! then the 21-byte rear), a delete's and a split's left half two; the same bytes. Leaves that
//! fit a packet: nothing. At spans above about 115 a split's left half never fits the first
//! piece, so a split whose new key falls in the left half splits without it and the insert
//! descends again.

use arrayvec::ArrayVec;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::cacheline::phys_range;
use dmindex_prim::doorbell;
use dmindex_prim::version;
use smallvec::SmallVec;

use super::leaf_io::at_least;
use super::{LockedLeaf, Tree};
use crate::layout::{LeafLayout, LockWord};
use crate::leaf::LeafBuf;
use crate::view::LeafView;

/// The largest WRITE assumed to land whole: a RoCE path MTU of 1024 bytes, the smaller of the
/// two fabrics' (InfiniBand's is 4096; `dmindex_sim::presets`). A fabric configured below it
/// (the simulator accepts a smaller `mtu_bytes`) is outside what this module covers.
pub const ONE_PACKET: usize = 1024;

/// Most pieces a leaf's versioned part is cut into: a split's doorbell holds the right half, the
/// pieces and the rear.
pub const MOST_PIECES: usize = MAX_BATCH - 2;

/// Which way a whole-leaf rewrite moves entries; it decides the order of the pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moves {
    /// An insert's shift.
    Right,
    /// A delete's shift, a split's left half, a repair.
    Left,
}

/// The physical ranges of the pieces of a sorted leaf's versioned part (module docs), or none
/// for a leaf whose whole image fits one packet (or a hopscotch leaf). An error for a leaf of
/// more than [`MOST_PIECES`] pieces.
pub(crate) fn pieces(l: &LeafLayout) -> Result<Box<[(usize, usize)]>, String> {
    if l.kind.hopscotch || l.bound_offset() + 8 <= ONE_PACKET {
        return Ok(Box::new([]));
    }
    let mut starts: Vec<usize> = crate::leaf::object_offsets(*l).collect();
    starts.sort_unstable();
    starts.push(l.decoded());
    let n = starts.len() - 1;
    let mut out = Vec::new();
    // The current piece is objects `from .. j`; object `j` joins it unless that outgrows a packet.
    let mut from = 0;
    for j in 1..n {
        let (p0, p1) = phys_range(starts[from], starts[j + 1]);
        if p1 - p0 > ONE_PACKET {
            out.push(phys_range(starts[from], starts[j]));
            from = j;
        }
    }
    out.push(phys_range(starts[from], starts[n]));
    if out.iter().any(|&(p0, p1)| p1 - p0 > ONE_PACKET) {
        return Err(format!("a leaf object is over {ONE_PACKET} bytes"));
    }
    if out.len() > MOST_PIECES {
        return Err(format!(
            "a sorted leaf of {} bytes is {} pieces of {ONE_PACKET} bytes, over {MOST_PIECES}",
            l.physical(),
            out.len()
        ));
    }
    Ok(out.into_boxed_slice())
}

/// The physical ranges of a whole sorted-leaf image `[0, end)` (versioned part `[0, physical)`
/// cut into `pieces`, then the rear: pad, lock word, upper bound) in the order its WRITEs are
/// posted when entries move as `moves` says (module docs). The last range holds the lock word.
pub(crate) fn write_order(
    pieces: &[(usize, usize)],
    physical: usize,
    end: usize,
    moves: Moves,
) -> ArrayVec<(usize, usize), MAX_BATCH> {
    let mut out = ArrayVec::new();
    match (pieces.split_last(), moves) {
        (None, _) => out.push((0, end)),
        (Some(_), Moves::Right) => {
            out.extend(pieces.iter().rev().copied());
            out.push((physical, end));
        }
        (Some((&(last0, last1), front)), Moves::Left) => {
            out.extend(front.iter().copied());
            if end - last0 <= ONE_PACKET {
                out.push((last0, end));
            } else {
                out.push((last0, last1));
                out.push((physical, end));
            }
        }
    }
    out
}

/// Whether the header and the first `keep` entries of a sorted leaf cut into `pieces` lie in
/// its first piece (always, for a leaf of one piece).
pub(crate) fn fits_first_piece(l: &LeafLayout, pieces: &[(usize, usize)], keep: usize) -> bool {
    match pieces.first() {
        None => true,
        Some(&(_, p1)) => keep == 0 || phys_range(0, l.entry(keep - 1) + l.entry_len).1 <= p1,
    }
}

impl Tree {
    /// Pushes the WRITEs of whole image `img` (versioned part, pad, lock word, upper bound) of
    /// the sorted leaf at `leaf` onto `ops`, in the order `moves` needs ([`write_order`]).
    fn push_image<'a>(
        &self,
        ops: &mut ArrayVec<BatchOp<'a>, MAX_BATCH>,
        leaf: GlobalAddr,
        img: &'a [u8],
        moves: Moves,
    ) {
        let order = write_order(&self.sorted_pieces, self.leaf.physical(), img.len(), moves);
        ops.extend(
            order
                .into_iter()
                .map(|(p0, p1)| BatchOp::Write { addr: leaf.add(p0 as u64), data: &img[p0..p1] }),
        );
    }

    /// WRITEs locked sorted leaf `leaf` whole from `buf` (lock word `lw`, upper bound `high`),
    /// unlocking it, in pieces ordered by `moves`; the image is encoded into `buf`'s scratch.
    pub(crate) async fn write_sorted_image<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        (lw, high): (LockWord, u64),
        moves: Moves,
    ) -> IndexResult<()> {
        let mut image = std::mem::take(&mut buf.raw);
        self.leaf_image_into(buf, lw, high, &mut image);
        let mut ops = ArrayVec::new();
        self.push_image(&mut ops, leaf.addr, &image, moves);
        let written = doorbell::post(c, &mut ops).await;
        drop(ops);
        buf.raw = image;
        leaf.held.released_by(written)
    }

    /// WRITEs a sorted leaf's split: the new right half `right` (whole, out of place) at
    /// `right_addr`, then the left half `left` over locked leaf `leaf` left to right, whose rear
    /// unlocks it; one doorbell when both live on one memory node, else the right half first,
    /// awaited, then the left's pieces in one doorbell.
    pub(crate) async fn write_sorted_halves<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        (right_addr, right, right_high): (GlobalAddr, &mut LeafBuf, u64),
        (left, left_high): (&mut LeafBuf, u64),
    ) -> IndexResult<()> {
        // A sorted leaf's lock word carries no metadata.
        let lw = LockWord { full: 0, argmax: 0 };
        let (mut right_img, mut left_img) =
            (std::mem::take(&mut right.raw), std::mem::take(&mut left.raw));
        self.leaf_image_into(right, lw, right_high, &mut right_img);
        self.leaf_image_into(left, lw, left_high, &mut left_img);
        let mut ops = ArrayVec::new();
        // On another memory node the right half is awaited alone, and the left's pieces still go
        // as one doorbell: two round trips, as one WRITE of each half took.
        let elsewhere = right_addr.node() != leaf.addr.node();
        let right_first = match elsewhere {
            true => c.write(right_addr, &right_img).await.map_err(Into::into),
            false => {
                ops.push(BatchOp::Write { addr: right_addr, data: &right_img });
                Ok(())
            }
        };
        let written = match right_first {
            Ok(()) => {
                self.push_image(&mut ops, leaf.addr, &left_img, Moves::Left);
                doorbell::post(c, &mut ops).await
            }
            Err(e) => Err(e),
        };
        drop(ops);
        (right.raw, left.raw) = (right_img, left_img);
        leaf.held.released_by(written)
    }

    /// Whether a split that keeps `keep` entries in the left half writes all of them, and the
    /// header, in its first piece ([`fits_first_piece`]).
    pub(crate) fn left_half_fits(&self, keep: usize) -> bool {
        fits_first_piece(&self.leaf, &self.sorted_pieces, keep)
    }

    /// Settles the sorted leaf at `leaf`, whose lock this client holds (taken over from a
    /// fenced writer): see the module docs.
    pub(crate) async fn repair_sorted<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<()> {
        let l = self.leaf;
        let mut buf = self.leaf_buf(c);
        let mut raw = std::mem::take(&mut buf.raw);
        let end = l.bound_offset() + 8;
        at_least(&mut raw, end);
        let read = c.read(leaf, &mut raw[..end]).await;
        if let Err(e) = read {
            buf.raw = raw;
            return Err(e.into());
        }
        let present = buf.absorb_whole_unchecked(&raw[..l.physical()]);
        let bound = u64::from_be_bytes(raw[l.bound_offset()..end].try_into().expect("8 bytes"));
        let Some((low, high)) = buf.fences() else {
            buf.raw = raw;
            return Err(IndexError::Corrupt(format!("sorted leaf {leaf} has no fence keys")));
        };
        let changed = settle(&mut buf, low, high);
        if !changed && present.count_ones() == 1 && bound == high {
            buf.raw = raw;
            return Ok(());
        }
        // A node version none of the objects carries: a reader that meets this rewrite half
        // landed over the dead writer's objects sees two versions, never one.
        let mut nv = version::nv(buf.bytes[0]);
        for _ in 0..16 {
            nv = (nv + 1) & 0x0F;
            if present & 1 << nv == 0 {
                break;
            }
        }
        buf.set_node_version(nv);
        // The image's lock word is never written: the lock stays this client's.
        self.leaf_image_into(&buf, LockWord { full: 0, argmax: 0 }, high, &mut raw);
        let mut ops: ArrayVec<BatchOp<'_>, MAX_BATCH> = ArrayVec::new();
        let write = |(p0, p1): (usize, usize)| BatchOp::Write {
            addr: leaf.add(p0 as u64),
            data: &raw[p0..p1],
        };
        match self.sorted_pieces.is_empty() {
            true => ops.push(write((0, l.physical()))),
            false => ops.extend(self.sorted_pieces.iter().map(|&r| write(r))),
        }
        ops.push(write((l.bound_offset(), end)));
        let written = doorbell::post(c, &mut ops).await;
        drop(ops);
        buf.raw = raw;
        written
    }
}

/// The entries of sorted leaf `buf` (decoded whole) settled: keys outside `[low, high]` and
/// empty slots dropped, the rest sorted by key (stable: entries sharing an 8-byte prefix keep
/// their order) with a repeated (key, value) kept once, packed from slot 0. Whether any slot
/// changed.
pub(crate) fn settle(buf: &mut LeafBuf, low: u64, high: u64) -> bool {
    let s = buf.span();
    let before: SmallVec<[(u64, [u8; 8]); 64]> =
        (0..s).map(|i| (buf.key(i), buf.value(i))).collect();
    let mut kept: SmallVec<[(u64, [u8; 8]); 64]> =
        before.iter().copied().filter(|&(k, _)| k != 0 && low <= k && k <= high).collect();
    kept.sort_by_key(|&(k, _)| k);
    kept.dedup();
    let mut changed = false;
    for (i, &was) in before.iter().enumerate() {
        let now = kept.get(i).copied().unwrap_or((0, [0; 8]));
        if now != was {
            buf.set_entry(i, now.0, now.1);
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests;
