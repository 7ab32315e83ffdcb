//! Redo records: what a multi-line cell's writer is about to write, where a survivor finds it.
//!
//! # Why
//!
//! A value over 56 bytes spans lines, so its writer takes the cell's lock (`H.L`, by CAS) and
//! writes the other lines first and line 0, unlocking, last ([`crate::sync`]). A writer that
//! stops after the CAS leaves the lock held; one that stops inside its last doorbell leaves
//! some later lines at the new version and line 0 at the old: the old value is overwritten in
//! part, and the new one is nowhere but in the dead writer's memory. No survivor could undo or
//! finish that write. So before it locks, a writer puts the whole cell it is about to write in
//! a *redo record* of its own, on the leaf's memory node, and the lock word names the record.
//!
//! # Layout
//!
//! One table per memory node, [`MEMBER_SLOTS`] records, one per member slot
//! ([`dmindex_prim::lease`]); a client writes only its own slot's. The tables' addresses follow
//! the root node (one word per memory node, written at create). Record of slot `s` on node
//! `k`, at `tables[k] + s · (64 + cell)`:
//!
//! ```text
//!  +0   member  u64  the member word of the writer that wrote it last (0: never written)
//!  +8   leaf    u64  the leaf (a raw GlobalAddr)
//!  +16  j       u64  the cell's slot in the leaf
//!  +24  locked  u64  the locked head word that writer's CAS installs (it names slot s)
//!  +32..64           zero
//!  +64  cell    the cell image its last doorbell WRITEs: line 0 (head LIVE at cv + 1,
//!               unlocked), then the other lines, each with cl = cv + 1
//! ```
//!
//! # Why a record found through a lock describes that lock
//!
//! The writer posts `[WRITE record, CAS H → locked]` in one doorbell to one memory node, so the
//! record has landed before the CAS executes. A client runs one operation at a time, and an
//! operation that took a cell's lock ends only after its last doorbell (which moves `H` off the
//! locked word) completed; so while `H` holds the locked word, its holder's slot has written no
//! later record. Its slot's *next incarnation* could, after the holder died: so a client, before
//! it first writes a record on a node, *adopts* its slot's record there ([`Redo::adopted`]): a
//! record of another member whose lock still holds is rolled forward first.
//!
//! # Recovery
//!
//! A waiter that sees one locked word for long enough reads the record of the slot it names
//! and, when the record describes this lock, judges the member the record names by the lease
//! rules ([`dmindex_prim::lease::Watch`]). Once it is fenced, the waiter *takes the lock over*
//! — `[WRITE its own record (the same cell), CAS H: locked → locked by itself, its takeover
//! bit flipped]`, so exactly one of several repairers wins, and a repairer that dies is
//! repaired in turn — and finishes the write from the record: `[WRITE lines 1.., WRITE line 0]`.
//! Every repair happens under a Spear share of the leaf (or its claim), so no SMO rewrites the
//! leaf under the blind WRITEs. An SMO that finds a locked cell in its drained image (the holder
//! can only be a fenced one: a live holder's share keeps the leaf from draining) takes the
//! value from the record instead ([`patch`]).
//!
//! # Cost
//!
//! Per multi-line write: one WRITE of 64 bytes plus the cell, in the lock CAS's doorbell (no
//! round trip). Per client and memory node, once: one READ of a record header. Memory: a
//! table of `2048 · (64 + cell)` bytes per memory node (393 KB at 100-byte values), made only
//! for multi-line shapes.

use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::layout::MEMBER_SLOTS;
use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use crate::leaf::{LeafImage, LineHead, Shape, State};

/// Bytes of a record's header.
pub const HEADER: usize = 64;

/// A record's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub member: u64,
    pub leaf: GlobalAddr,
    pub j: usize,
    pub locked: LineHead,
}

impl Header {
    /// Writes the header into the first [`HEADER`] bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        let words = [self.member, self.leaf.raw(), self.j as u64, self.locked.0];
        for (i, w) in words.iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[32..HEADER].fill(0);
    }

    pub fn decode(b: &[u8]) -> Header {
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Header {
            member: w(0),
            leaf: GlobalAddr::from_raw(w(1)),
            j: w(2) as usize,
            locked: LineHead(w(3)),
        }
    }

    /// Whether this record describes the lock `locked` on cell `j` of `leaf`.
    pub fn describes(&self, leaf: GlobalAddr, j: usize, locked: LineHead) -> bool {
        self.member != 0 && self.leaf == leaf && self.j == j && self.locked == locked
    }
}

/// The redo tables of one index (multi-line shapes only).
#[derive(Debug)]
pub struct Redo {
    /// Each memory node's table, by node id.
    tables: Box<[GlobalAddr]>,
    /// Bytes of one record.
    record: usize,
    /// `adopted[slot · nodes + node]`: the member word that adopted its slot's record on that
    /// node through this handle (0: none yet).
    adopted: Box<[AtomicU64]>,
}

impl Redo {
    /// Bytes of one record for `shape`.
    pub const fn record_bytes(shape: &Shape) -> usize {
        HEADER + shape.cell
    }

    /// Bytes of the directory that follows the root node: one word per memory node.
    pub fn directory_bytes<T: Transport>(c: &Client<T>) -> u64 {
        8 * c.info().nodes() as u64
    }

    /// Makes a table on every memory node (zeroed: no record written) and writes their
    /// addresses to the directory at `dir`.
    pub async fn create<T: Transport>(
        c: &Client<T>,
        shape: &Shape,
        dir: GlobalAddr,
    ) -> IndexResult<Redo> {
        let bytes = (MEMBER_SLOTS as usize * Self::record_bytes(shape)) as u64;
        let mut tables = Vec::with_capacity(c.info().nodes() as usize);
        let mut words = Vec::with_capacity(8 * tables.capacity());
        for node in 0..c.info().nodes() {
            let t = c.alloc_on(node, bytes, 64).await?;
            words.extend_from_slice(&t.raw().to_le_bytes());
            tables.push(t);
        }
        c.write(dir, &words).await?;
        Ok(Redo::new(shape, tables))
    }

    /// The tables of an existing index, from the directory at `dir`.
    pub async fn open<T: Transport>(
        c: &Client<T>,
        shape: &Shape,
        dir: GlobalAddr,
    ) -> IndexResult<Redo> {
        let words = c.read_vec(dir, Self::directory_bytes(c) as usize).await?;
        let tables: Vec<GlobalAddr> = words
            .chunks_exact(8)
            .map(|w| GlobalAddr::from_raw(u64::from_le_bytes(w.try_into().expect("8 bytes"))))
            .collect();
        for (node, t) in tables.iter().enumerate() {
            if t.is_null() || t.node() as usize != node {
                return Err(IndexError::Corrupt(format!(
                    "dolphin: no redo table for memory node {node} (the directory says {t:?})"
                )));
            }
        }
        Ok(Redo::new(shape, tables))
    }

    fn new(shape: &Shape, tables: Vec<GlobalAddr>) -> Redo {
        let n = MEMBER_SLOTS as usize * tables.len();
        Redo {
            tables: tables.into_boxed_slice(),
            record: Self::record_bytes(shape),
            adopted: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Bytes of one record.
    pub const fn record(&self) -> usize {
        self.record
    }

    /// The record of member slot `slot` on memory node `node`.
    pub fn at(&self, node: u16, slot: u32) -> GlobalAddr {
        self.tables[node as usize].add(slot as u64 * self.record as u64)
    }

    /// Whether `member` has adopted its slot's record on `node` through this handle.
    pub fn adopted(&self, node: u16, member: u64) -> bool {
        self.adopted[self.cell_of(node, member)].load(Ordering::Acquire) == member
    }

    /// Notes that `member` adopted its slot's record on `node`.
    pub fn mark_adopted(&self, node: u16, member: u64) {
        self.adopted[self.cell_of(node, member)].store(member, Ordering::Release);
    }

    fn cell_of(&self, node: u16, member: u64) -> usize {
        let (slot, _) = dmindex_prim::lease::parse_member(member);
        slot as usize * self.tables.len() + node as usize
    }

    /// READs the whole record of `slot` on `node` into `buf` (at least [`Redo::record`] bytes).
    pub async fn read<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        slot: u32,
        buf: &mut [u8],
    ) -> IndexResult<Header> {
        c.read(self.at(node, slot), &mut buf[..self.record]).await?;
        Ok(Header::decode(buf))
    }
}

/// Rolls every live cell of the drained or frozen image in `buf` that a dead writer left
/// locked forward from the record its head names, in `buf` only (the SMO that calls it writes
/// the image back). A lock whose record does not describe it (never, by the argument above) is
/// left to the cell's own bytes: whole, they are the old value; torn, the image is refused.
pub async fn patch<T: Transport>(
    c: &Client<T>,
    redo: Option<&Redo>,
    shape: &Shape,
    leaf: GlobalAddr,
    buf: &mut [u8],
) -> IndexResult<()> {
    let Some(redo) = redo else { return Ok(()) };
    if !shape.multi_line() {
        return Ok(());
    }
    let Ok(img) = LeafImage::check(shape, buf) else { return Ok(()) };
    let locked: Vec<(usize, LineHead)> =
        img.live().map(|(_, j)| (j, img.head(j))).filter(|(_, h)| h.locked()).collect();
    let mut rec = vec![0u8; redo.record()];
    for (j, head) in locked {
        let slot = head.holder().expect("locked");
        let h = redo.read(c, leaf.node(), slot, &mut rec).await?;
        if !h.describes(leaf, j, head) {
            continue;
        }
        let at = shape.head_at(j);
        // The record's line 0 carries the head at cv + 1, unlocked and LIVE, with the image's
        // epoch: the image now shows the cell written, as the writer would have left it.
        debug_assert_eq!(LineHead(word(&rec[HEADER..])).state(0), Some(State::Live));
        buf[at..at + shape.cell].copy_from_slice(&rec[HEADER..HEADER + shape.cell]);
    }
    Ok(())
}

fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_pinned() {
        let h = Header {
            member: 0x4000_0005,
            leaf: GlobalAddr::new(2, 0x1000),
            j: 9,
            locked: LineHead::versioned(State::Live, 3, 4).locked_by(5),
        };
        let mut b = [0xAAu8; HEADER];
        h.encode(&mut b);
        assert_eq!(&b[..8], &0x4000_0005u64.to_le_bytes());
        assert_eq!(&b[8..16], &GlobalAddr::new(2, 0x1000).raw().to_le_bytes());
        assert_eq!(&b[16..24], &9u64.to_le_bytes());
        assert_eq!(&b[24..32], &h.locked.0.to_le_bytes());
        assert!(b[32..].iter().all(|&x| x == 0));
        assert_eq!(Header::decode(&b), h);
        assert!(h.describes(GlobalAddr::new(2, 0x1000), 9, h.locked));
        assert!(!h.describes(GlobalAddr::new(2, 0x1000), 8, h.locked));
        let other = LineHead::versioned(State::Live, 3, 5).locked_by(5);
        assert!(!h.describes(GlobalAddr::new(2, 0x1000), 9, other), "another version");
        assert!(!Header { member: 0, ..h }.describes(h.leaf, 9, h.locked), "never written");
        let shape = Shape::new(36, 100).unwrap();
        assert_eq!(Redo::record_bytes(&shape), 64 + 128);
    }
}
