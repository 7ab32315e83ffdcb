//! Search: the filter position, the meta and the predicted MainSegment range in one doorbell;
//! the CurSegment only when the filter says the key may be there.
//!
//! # Why it is linearizable
//!
//! The doorbell READs the filter position (at `t_f`), then the meta (at `t_m`), then the
//! MainSegment range; doorbell verbs execute in order. Filter positions are set before the CAS
//! that takes a slot (same memory node, so they land first) and cleared only while a merge
//! holds the segment closed. Say the meta at `t_m` is open with MainSegment `M`:
//!
//! * if that open phase had begun by `t_f`, every entry taken in it had its position set
//!   before `t_f` or was taken after `t_f`; an unset position means the key had no entry in the
//!   CurSegment at `t_f`, and its value then was `M`'s (linearised at `t_f`);
//! * otherwise the phase began at some `t_o` in `(t_f, t_m]`, when the CurSegment was empty and
//!   `M` held everything: `M`'s answer is right at `t_o`.
//!
//! When the position is set (or the meta is closed: a merge holds the segment and may have
//! cleared the filter), the CurSegment's slots are READ and the meta after them; a meta does not
//! repeat within 2^20 merges of its segment, so an unchanged meta proves that the slots and `M`
//! were the segment's content together at that READ. Blocks are immutable once published.

use dmindex_fabric::{BatchOp, Client, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use smallvec::SmallVec;

use crate::layout::{decode_entries, Entry, KeyHash, Meta};
use crate::{Retry, SepHash};

/// Entries read inline without a heap buffer.
pub(crate) type Words = SmallVec<[u8; 512]>;

/// A CurSegment's slots read inline (the default CurSegment, 1 KiB, fits).
pub(crate) type SlotWords = SmallVec<[u8; 1024]>;

impl SepHash {
    /// The value of `key` into `out` (cleared first): whether the key is present.
    pub(crate) async fn search_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        out.clear();
        let kh = KeyHash::of(key);
        c.compute(Work::KeyHash, 1);
        let positions = self.shape.cur.positions;
        self.counters.searches.bump(c.ordinal());
        let mut slots: SlotWords = SmallVec::new();
        // Metas that did not own the key or changed during the READs, MainSegments not cached.
        let mut attempts = Attempts::new();
        loop {
            let t = self.target(c, kh).await?;
            let node = t.seg.node();
            let mut filter = [1u8; 1];
            let mut head = [0u8; 16];
            let mut after = [0u8; 8];
            let mut main: Words = SmallVec::from_elem(0, 8 * (t.main.hi - t.main.lo) as usize);
            {
                let mut ops: SmallVec<[BatchOp<'_>; 4]> = SmallVec::new();
                if positions > 0 {
                    let at = t.seg.add(self.shape.cur.filter(kh.filter(positions)));
                    ops.push(BatchOp::Read { addr: at, buf: &mut filter });
                }
                ops.push(BatchOp::Read { addr: t.seg, buf: &mut head });
                if !main.is_empty() {
                    ops.push(BatchOp::Read { addr: t.main.range_addr(node), buf: &mut main });
                    // A MainSegment's memory is reused once replaced: the meta after it proves
                    // it was still the current one.
                    ops.push(BatchOp::Read { addr: t.seg, buf: &mut after });
                }
                c.batch(&mut ops).await?;
            }
            self.counters.search_segment_reads.bump(c.ordinal());
            let meta = Meta(word(&head, 0));
            if !meta.owns(word(&head, 8), kh.h) {
                attempts.failed(t.seg, "segment meta's depth and suffix")?;
                self.counters.retry(Retry::ForeignSegment);
                self.refresh_dir(c, kh).await?;
                continue;
            }
            if !main.is_empty() && word(&after, 0) != meta.0 {
                attempts.failed(t.seg, "segment meta around a MainSegment READ")?;
                self.counters.retry(Retry::MetaMoved);
                continue;
            }
            if meta.main_id() != t.main.id {
                attempts.failed(t.seg, "segment meta's MainSegment")?;
                self.counters.retry(Retry::StaleMain);
                self.refresh_main(c, t.seg, meta).await?;
                continue;
            }
            // The metas and filter byte checked; every MainSegment entry of the predicted range
            // decoded and its fingerprint compared.
            let filtered = if positions > 0 { filter.len() } else { 0 };
            let fenced = if main.is_empty() { 0 } else { after.len() };
            let scanned = filtered + head.len() + main.len() + fenced;
            c.compute(Work::BytesScanned, scanned as u64);
            c.compute(Work::KeyCompare, (main.len() / 8) as u64);
            let run: SmallVec<[Entry; 8]> =
                decode_entries(&main).filter(|&e| kh.matches(e)).collect();
            // The CurSegment's candidates, newest first.
            let mut cur: SmallVec<[Entry; 4]> = SmallVec::new();
            if filter[0] != 0 || meta.closed() {
                self.counters.cur_reads.bump(c.ordinal());
                self.counters.search_segment_reads.bump(c.ordinal());
                let n = self.shape.cur.n;
                slots.clear();
                slots.resize(8 * n, 0);
                let mut after = [0u8; 8];
                c.batch(&mut [
                    BatchOp::Read { addr: t.seg.add(self.shape.cur.slot(0)), buf: &mut slots },
                    BatchOp::Read { addr: t.seg, buf: &mut after },
                ])
                .await?;
                if word(&after, 0) != meta.0 {
                    attempts.failed(t.seg, "segment meta around a CurSegment READ")?;
                    self.counters.retry(Retry::MetaMoved);
                    continue;
                }
                let mut taken = 0;
                let held = decode_entries(&slots).take_while(|&e| meta.holds(e));
                cur.extend(held.inspect(|_| taken += 1).filter(|&e| kh.matches(e)));
                // The slots READ and the meta after them; each slot taken in this phase
                // decoded, its fingerprint compared.
                c.compute(Work::BytesScanned, (slots.len() + after.len()) as u64);
                c.compute(Work::KeyCompare, taken);
                cur.reverse();
            }
            for e in cur.iter().chain(run.iter()) {
                if self.blocks.value_into(c, e.block(), Some(key), out).await? {
                    if e.tombstone() {
                        out.clear();
                        return Ok(false);
                    }
                    return Ok(true);
                }
            }
            return Ok(false);
        }
    }
}

/// The little-endian word at byte `at` of `b`.
pub(crate) fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
