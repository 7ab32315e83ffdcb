//! SMO rewrites of leaves longer than a packet: an out-of-place copy first, so that a rewrite
//! a dead SMO left part landed can be finished.
//!
//! # Why
//!
//! An SMO rewrites its claimed leaf in place with one WRITE of `leaf[16..]` (a compaction, or a
//! split's shrinking of the old leaf). A WRITE that fits one packet lands whole or not at all,
//! and either image is a leaf. A longer one (long values: 100-byte values make an 11 KB leaf)
//! lands packet by packet, so an SMO that stops inside it leaves lines of two epochs: the leaf
//! no longer checks, and the old image is partly gone. So for such shapes the SMO writes the
//! new image elsewhere first and names it in the leaf.
//!
//! # Protocol (one doorbell to the leaf's memory node, in order)
//!
//! ```text
//! [WRITE scratch ← image[16..],  WRITE leaf.redo ← scratch,  WRITE leaf[16..] ← image[16..],
//!  WRITE leaf.redo ← 0, …the SMO's releases]
//! ```
//!
//! `redo` is the header word at offset 48 ([`REDO`]); the image carries `redo = scratch` itself,
//! so whatever prefix of the in-place WRITE landed, the word names the copy until the WRITE
//! after it clears it. The scratch area is this client's, one per memory node, reused by its
//! next SMO (which starts only after this one's doorbell completed); a dead client's is never
//! reused (a new incarnation of its member slot gets its own).
//!
//! # Finishing
//!
//! Whoever takes a dead SMO's claim over ([`dmindex_prim::spear::recover`]) reads `redo` before
//! anything else: nonzero, the rewrite was under way and the copy is whole (it landed before
//! the word named it), so `[WRITE leaf[16..] ← copy, WRITE leaf.redo ← 0]` finishes it, as the
//! dead SMO would have. Readers that keep finding the leaf torn go and wait on its claim, which
//! is what runs that takeover ([`crate::sync::read_checked`]).
//!
//! # Cost
//!
//! Only for leaves whose rewrite is over [`ONE_PACKET`] bytes: per SMO one more WRITE of the
//! rewrite's size and two 8-byte WRITEs, in the doorbell sent anyway; memory, one leaf-sized
//! area per client and memory node, on first use. Nothing for the default 1 KB leaf.

use std::sync::atomic::{AtomicU64, Ordering};

use arrayvec::ArrayVec;
use dmindex_fabric::layout::MEMBER_SLOTS;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lease;

use crate::leaf::{Shape, LO, REDO};

/// The largest rewrite (`leaf[16..]`) assumed to land whole: a RoCE path MTU of 1024 bytes,
/// the smaller of the two fabrics' (InfiniBand's is 4096; `dmindex_sim::presets`).
pub const ONE_PACKET: usize = 1024;

/// Whether SMOs of leaves of `shape` write their rewrite out of place first.
pub const fn needed(shape: &Shape) -> bool {
    shape.bytes - LO > ONE_PACKET
}

/// Each client's scratch area per memory node, for one handle: `(member word, address)` by
/// `slot · nodes + node`.
#[derive(Debug)]
pub struct Scratch {
    nodes: usize,
    areas: Box<[(AtomicU64, AtomicU64)]>,
}

impl Scratch {
    pub fn new(nodes: usize) -> Scratch {
        let n = MEMBER_SLOTS as usize * nodes;
        Scratch { nodes, areas: (0..n).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect() }
    }

    /// This client's scratch area on `node` (allocated on first use, by member incarnation).
    pub async fn area<T: Transport>(
        &self,
        c: &Client<T>,
        shape: &Shape,
        node: u16,
    ) -> IndexResult<GlobalAddr> {
        let member = lease::renew_if_due(c).await?;
        let (slot, _) = lease::parse_member(member);
        let (m, a) = &self.areas[slot as usize * self.nodes + node as usize];
        if m.load(Ordering::Acquire) == member {
            return Ok(GlobalAddr::from_raw(a.load(Ordering::Acquire)));
        }
        let area = c.alloc_on(node, (shape.bytes - LO) as u64, 64).await?;
        a.store(area.raw(), Ordering::Release);
        m.store(member, Ordering::Release);
        Ok(area)
    }
}

/// The WRITEs that rewrite `leaf[16..]` with `image[16..]`, in order: through scratch area
/// `area` (`image`'s redo word already naming it, [`name`], and `named` those 8 bytes), or the
/// in-place WRITE alone.
pub fn rewrite<'a>(
    leaf: GlobalAddr,
    image: &'a [u8],
    area: Option<(GlobalAddr, &'a [u8; 8])>,
) -> ArrayVec<BatchOp<'a>, 4> {
    const ZERO: [u8; 8] = [0; 8];
    let redo = leaf.add(REDO as u64);
    let mut ops = ArrayVec::new();
    if let Some((a, named)) = area {
        ops.push(BatchOp::Write { addr: a, data: &image[LO..] });
        ops.push(BatchOp::Write { addr: redo, data: named });
    }
    ops.push(BatchOp::Write { addr: leaf.add(LO as u64), data: &image[LO..] });
    if area.is_some() {
        ops.push(BatchOp::Write { addr: redo, data: &ZERO });
    }
    ops
}

/// Names scratch area `area` in `image`'s redo word; the 8 bytes to WRITE to the leaf's.
pub fn name(image: &mut [u8], area: GlobalAddr) -> [u8; 8] {
    let w = area.raw().to_le_bytes();
    image[REDO..REDO + 8].copy_from_slice(&w);
    w
}

/// Finishes the rewrite of claimed leaf `leaf` that a dead SMO left under way, if its redo
/// word names one: `[WRITE leaf[16..] ← the copy, WRITE leaf.redo ← 0]`. Whether it did.
pub async fn finish<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
) -> IndexResult<bool> {
    if !needed(shape) {
        return Ok(false);
    }
    let area = GlobalAddr::from_raw(c.read_word(leaf.add(REDO as u64)).await?);
    if area.is_null() {
        return Ok(false);
    }
    let copy = c.read_vec(area, shape.bytes - LO).await?;
    let zero = [0u8; 8];
    let mut ops = [
        BatchOp::Write { addr: leaf.add(LO as u64), data: &copy },
        BatchOp::Write { addr: leaf.add(REDO as u64), data: &zero },
    ];
    c.batch(&mut ops).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use dmindex_fabric::Transport;
    use dmindex_index::{IndexConfig, PointIndex};
    use dmindex_prim::spear::{self, Claim, Panel};
    use dmindex_sim::{Sim, SimConfig, SimTransport, Task};

    use super::*;
    use crate::leaf::{encode, LeafImage, State};
    use crate::ops::Route;
    use crate::smo::{next_epoch, Pairs};
    use crate::sync::{self, Write};
    use crate::Dolphin;

    const P: u64 = 0x0102_0304_0506_0700;
    const W: usize = 1000;

    fn value(n: u64) -> Vec<u8> {
        vec![n as u8; W]
    }

    /// The compaction of `key`'s full leaf by a client that dies after the first packet of its
    /// in-place rewrite landed (its copy and the redo word before it): the leaf is torn.
    async fn compact_and_die(ix: &Dolphin, c: &Client<SimTransport>, key: u64) -> GlobalAddr {
        let Route::Leaf { leaf, .. } = ix.route(c, key).await.unwrap() else { panic!("a leaf") };
        let (shape, sc) = (&ix.shape, &ix.counters.sync);
        let mut buf = vec![0u8; shape.bytes];
        let v = value(key);
        let w = sync::upsert(c, shape, leaf, key, &v, &mut buf, sc, ix).await.unwrap();
        let Write::Full(held) = w else { panic!("a full leaf") };
        let claim = spear::claim(c, held, leaf, &mut buf, 8, &mut Panel::new(), ix).await;
        let Claim::Held(_claimed) = claim.unwrap() else { panic!("claimed") };
        let img = LeafImage::check(shape, &buf).unwrap();
        let pairs = Pairs::gather(&img, key, &v).unwrap();
        let mut out = Vec::new();
        let live = (0..pairs.len()).map(|i| {
            let (k, v) = pairs.get(i, W);
            (k, v, State::Live)
        });
        let (rev, lo, hi, nv, cvs) = (img.rev(), img.lo(), img.hi(), img.nv(), img.cvs());
        encode(shape, rev, 0, lo, hi, next_epoch(nv), &cvs, live, &mut out);
        let area = ix.smo_scratch.as_ref().unwrap().area(c, shape, leaf.node()).await.unwrap();
        let named = name(&mut out, area);
        let ops = rewrite(leaf, &out, Some((area, &named)));
        assert_eq!(ops.len(), 4, "copy, redo word, rewrite, redo word cleared");
        let mut landed: Vec<BatchOp<'_>> = ops.into_iter().take(2).collect();
        // One packet of the in-place rewrite.
        landed.push(BatchOp::Write { addr: leaf.add(LO as u64), data: &out[LO..4096] });
        c.batch(&mut landed).await.unwrap();
        leaf
    }

    #[test]
    fn a_rewrite_a_dead_smo_left_torn_is_finished_from_its_copy() {
        for seed in 0..4 {
            let s = Sim::new(SimConfig::stress_with_delays(seed)).unwrap();
            let cfg = IndexConfig {
                max_value: W,
                extra: vec![("slots".into(), "8".into())],
                ..IndexConfig::default()
            };
            let c0 = s.client_on_own_thread(0);
            let ix0 = s.block_on(<Dolphin as PointIndex<_>>::create(&c0, &cfg, 0)).unwrap();
            assert!(needed(&ix0.shape) && ix0.shape.bytes > 8192, "three packets");
            s.block_on(async {
                for n in 1..=8 {
                    ix0.insert(&c0, &(P + n).to_be_bytes(), &value(n)).await.unwrap();
                }
                for n in [2, 4, 6] {
                    assert!(ix0.delete(&c0, &(P + n).to_be_bytes()).await.unwrap());
                }
            });
            let (dead_c, reader_c, writer_c) =
                (s.client_on_own_thread(1), s.client_on_own_thread(2), s.client_on_own_thread(3));
            let open = |c, cn| s.block_on(<Dolphin as PointIndex<_>>::open(c, &cfg, cn)).unwrap();
            let (dead, reader, writer) = (open(&dead_c, 1), open(&reader_c, 2), open(&writer_c, 3));
            let leaf = s.block_on(compact_and_die(&dead, &dead_c, P + 10));
            let mut b = vec![0u8; ix0.shape.bytes];
            s.block_on(c0.read(leaf, &mut b)).unwrap();
            assert!(LeafImage::check(&ix0.shape, &b).is_err(), "seed {seed}: torn");
            let done = Cell::new(0);
            let r = async {
                for n in [1, 3, 5, 7, 8] {
                    let got = reader.search(&reader_c, &(P + n).to_be_bytes()).await.unwrap();
                    assert_eq!(got, Some(value(n)), "seed {seed}: key {n}");
                }
                done.set(done.get() + 1);
            };
            let w = async {
                writer.insert(&writer_c, &(P + 11).to_be_bytes(), &value(11)).await.unwrap();
                done.set(done.get() + 1);
            };
            let lease = c0.transport().lease_ns();
            let out = s.run_until([Box::pin(r) as Task, Box::pin(w)], s.now_ns() + 60 * lease);
            assert!(out.all_finished() && done.get() == 2, "seed {seed}: {out:?}");
            s.block_on(async {
                c0.read(leaf, &mut b).await.unwrap();
                let img = LeafImage::check(&ix0.shape, &b).expect("whole again");
                assert_eq!(c0.read_word(leaf.add(REDO as u64)).await.unwrap(), 0);
                // The dead compaction's insert was finished with it.
                assert!(img.find(P + 10).is_some(), "seed {seed}: the rolled-forward insert");
                for n in [1, 3, 5, 7, 8, 10, 11] {
                    let got = ix0.search(&c0, &(P + n).to_be_bytes()).await.unwrap();
                    assert_eq!(got, Some(value(n)), "seed {seed}: key {n} at the end");
                }
            });
        }
    }
}
