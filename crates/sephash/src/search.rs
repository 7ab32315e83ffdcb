//! Search: the predicted MainSegment run and the key's filter line in one doorbell; the slots,
//! and the rest of the run when it spills over the window, in a second one only when needed.
//!
//! # The common case: 2 READs, then the block
//!
//! One doorbell READs the window the cached FPTable predicts for the key's fingerprint
//! ([`crate::fptable::window`]), then the key's filter line from its tag to the key's position
//! (9 to 64 bytes; [`crate::layout`]). Doorbell verbs execute in order, and a READ of part of one
//! 64-B line is a snapshot of one instant `t_f`. The tag names the generation `G` the filter
//! line belongs to: its MainSegment `M_G`, depth, sign. Then the candidates' blocks are READ.
//!
//! # Why it is linearizable
//!
//! *The tag.* A merge writes the MainSegment `M_G` (awaited), then one doorbell rewrites every
//! filter line (tag `G`, positions clear) and then writes the meta open as `G`; a merge of `G`
//! closes the meta first (CAS) and only then rewrites the lines for `G + 1`. A split's new
//! segment is written with its lines tagged and its MainSegment in place before the directory
//! names it. So while a line shows tag `G`, the meta is closed `G − 1` with `M_G` complete, open
//! `G`, or closed `G`, and `M_G` is current or about to be.
//!
//! *The position.* An append sets its position (a byte WRITE) after the READ that saw `G` open
//! and before its CAS, on the same connection, so it lands before the entry; positions of a
//! `G` line are cleared only by rewriting the line for `G + 1`. So a clear position in a line
//! tagged `G` at `t_f` proves that no slot of generation `G` with the key's position was taken
//! by `t_f`. At `t_f` the key's value was then `M_G`'s: if the meta was open or closed `G`, the
//! slots held only `G`'s entries; if it was still closed `G − 1`, the slots held `G − 1`'s, all
//! merged into `M_G`, and nothing could be appended. The search is linearised at `t_f`.
//!
//! *The MainSegment.* Its memory is reused once it is replaced, so the READ of the window
//! (before `t_f`) must be proven to have read `M_G`. The cache learnt `M_G` from a meta or tag
//! naming it, at some `t_0` before the READ; the tag names it again at `t_f`; editions only
//! move forward and do not repeat within 2^20 merges, so `M_G` was current (or complete and
//! about to be) throughout `[t_0, t_f]`, and not yet freed. A tag that names another
//! MainSegment, or a depth and suffix that exclude the key, is refreshed and the search
//! retried.
//!
//! # The second doorbell: the slots, a spill
//!
//! When the position is set (or there is no filter) the search READs the slots, and when the
//! window may miss entries of the key's (fp, fp2) (its first entry sorts at or after the key's,
//! or its last at or before: [`crate::fptable::spill`]) it READs the rest of the range on that
//! side, all in one doorbell, and last the meta word. A meta naming `M_G` (open or closed `G`)
//! proves the generation did not end in between: throughout, taken slots of `G` were a prefix
//! growing one CAS at a time (slots of `G − 1` read as free under `G`'s sign), so the slots
//! taken as read, `[0, j)`, were exactly the taken ones at some instant of the READ, and the
//! key's newest entry among them and `M_G` was its value then; and `M_G`, immutable while
//! current, was still in its memory. The search is linearised at that instant. A meta that
//! moved on starts the search over. Without a filter, the first doorbell READs the meta and
//! suffix in place of the line and the slots are always READ.

use dmindex_fabric::{BatchOp, Client, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use smallvec::SmallVec;

use crate::fptable;
use crate::layout::{decode_entries, Entry, KeyHash, Meta, LINE, PER_LINE, TAG};
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
        // The sort key of the key's MainSegment entries.
        let fps = (kh.fp() as u16) << 8 | kh.fp2() as u16;
        self.counters.searches.bump(c.ordinal());
        let mut slots: SlotWords = SmallVec::new();
        // Tags and metas that did not own the key or moved on, MainSegments not cached.
        let mut attempts = Attempts::new();
        loop {
            let t = self.target(c, kh).await?;
            let (node, m) = (t.seg.node(), t.main);
            // The key's filter line from its tag to its position; without a filter, the meta
            // and the suffix.
            let mut line = [0u8; LINE as usize];
            let (line_at, line_len) = if positions > 0 {
                let p = kh.filter(positions);
                (t.seg.add(self.shape.cur.line(p)), TAG as usize + p % PER_LINE + 1)
            } else {
                (t.seg, 16)
            };
            let mut window: Words = SmallVec::from_elem(0, 8 * (m.whi - m.wlo) as usize);
            {
                let mut ops: SmallVec<[BatchOp<'_>; 2]> = SmallVec::new();
                if !window.is_empty() {
                    ops.push(BatchOp::Read { addr: m.entry_addr(node, m.wlo), buf: &mut window });
                }
                // Last: the tag naming the MainSegment proves the window was read from it.
                ops.push(BatchOp::Read { addr: line_at, buf: &mut line[..line_len] });
                c.batch(&mut ops).await?;
            }
            self.counters.search_segment_reads.bump(c.ordinal());
            let tag = Meta(word(&line, 0));
            if !tag.owns(t.suffix, kh.h) {
                attempts.failed(t.seg, "filter tag's depth")?;
                self.counters.retry(Retry::ForeignSegment);
                self.refresh_dir(c, kh).await?;
                continue;
            }
            if tag.main_id() != m.id {
                attempts.failed(t.seg, "filter tag's MainSegment")?;
                self.counters.retry(Retry::StaleMain);
                self.refresh_main(c, t.seg, tag).await?;
                continue;
            }
            let in_cur = positions == 0 || line[line_len - 1] != 0;
            let entry_at = |i: usize| Entry(word(&window, 8 * i)).fps();
            let n_window = window.len() / 8;
            let ends = (n_window > 0).then(|| (entry_at(0), entry_at(n_window - 1)));
            let (before, after) = fptable::spill((m.wlo, m.whi), (m.lo, m.hi), ends, fps);
            // The line READ and the window's entries decoded and compared.
            c.compute(Work::BytesScanned, (line_len + window.len()) as u64);
            c.compute(Work::KeyCompare, n_window as u64);
            let mut pre: Words = SmallVec::new();
            let mut post: Words = SmallVec::new();
            // The CurSegment's candidates, newest first.
            let mut cur: SmallVec<[Entry; 4]> = SmallVec::new();
            if in_cur || before || after {
                self.counters.search_segment_reads.bump(c.ordinal());
                if before || after {
                    self.counters.search_spills.bump(c.ordinal());
                }
                if before {
                    pre.resize(8 * (m.wlo - m.lo) as usize, 0);
                }
                if after {
                    post.resize(8 * (m.hi - m.whi) as usize, 0);
                }
                slots.clear();
                if in_cur {
                    self.counters.cur_reads.bump(c.ordinal());
                    slots.resize(8 * self.shape.cur.n, 0);
                }
                let mut fence = [0u8; 8];
                {
                    let mut ops: SmallVec<[BatchOp<'_>; 4]> = SmallVec::new();
                    if !pre.is_empty() {
                        ops.push(BatchOp::Read { addr: m.entry_addr(node, m.lo), buf: &mut pre });
                    }
                    if !post.is_empty() {
                        ops.push(BatchOp::Read { addr: m.entry_addr(node, m.whi), buf: &mut post });
                    }
                    if !slots.is_empty() {
                        let at = t.seg.add(self.shape.cur.slot(0));
                        ops.push(BatchOp::Read { addr: at, buf: &mut slots });
                    }
                    // Last: a meta still naming the tag's MainSegment proves the generation
                    // had not ended (see the module doc).
                    ops.push(BatchOp::Read { addr: t.seg, buf: &mut fence });
                    c.batch(&mut ops).await?;
                }
                if Meta(word(&fence, 0)).main_id() != tag.main_id() {
                    attempts.failed(t.seg, "segment meta after a second READ")?;
                    self.counters.retry(Retry::MetaMoved);
                    continue;
                }
                let mut taken = 0;
                let held = decode_entries(&slots).take_while(|&e| tag.holds(e));
                cur.extend(held.inspect(|_| taken += 1).filter(|&e| kh.matches(e)));
                cur.reverse();
                // The READs and the meta after them; each taken slot and re-read entry decoded
                // and compared.
                let read = pre.len() + post.len() + slots.len() + fence.len();
                c.compute(Work::BytesScanned, read as u64);
                c.compute(Work::KeyCompare, taken + ((pre.len() + post.len()) / 8) as u64);
            }
            let main = [&pre[..], &window[..], &post[..]];
            let run = main.iter().flat_map(|w| decode_entries(w)).filter(|&e| kh.matches(e));
            let run: SmallVec<[Entry; 8]> = run.collect();
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
