//! CHIME's scans ([`RangeIndex`]): the tree's fine-grained READs (8-byte keys, CHIME's
//! default: `tree::fine_scan`, which says why what they return is right) or its walk over
//! whole leaves (Sherman, the factor staircase, long keys; and a fine-grained scan's rest when
//! keys are not dense) give 8-byte keys and value slots in key order; here they become keys and
//! values in the caller's [`ScanBuf`], through the blocks the slots point to when values are
//! indirect or keys long. The working vectors come from a per-compute-node pool and the pairs
//! go straight into the caller's buffer, so a warm scan allocates nothing.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult, RangeIndex, ScanBuf};
use dmindex_prim::doorbell;

use crate::tree::{ScanScratch, Trimmed, MOST_RESERVED};
use crate::{prefix_of, ChimeIndex, Variant};

impl<V> ChimeIndex<V> {
    /// Refuses a bound longer than the tree's keys.
    fn check_bound(&self, key: &[u8]) -> IndexResult<()> {
        match key.len() > self.shape.key_len {
            true => Err(IndexError::KeyTooLong { len: key.len(), max: self.shape.key_len }),
            false => Ok(()),
        }
    }

    /// Appends the pairs the tree's walk left in `s.pairs` to `out` with their full keys and
    /// values, those whose key `keep` accepts (a range's ends; long keys are learnt from their
    /// blocks first).
    async fn put<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut ScanScratch,
        out: &mut ScanBuf,
        keep: impl Fn(&[u8]) -> bool,
    ) -> IndexResult<()> {
        if self.shape.long_keys() {
            return self.put_long(c, s, out, keep).await;
        }
        let ScanScratch { pairs, block, .. } = s;
        let blocks = &self.tree.blocks;
        for &(k, slot) in pairs.iter() {
            let at = GlobalAddr::from_raw(u64::from_le_bytes(slot));
            let key = k.to_be_bytes();
            if !keep(&key) {
                continue;
            }
            if self.shape.indirect() {
                blocks.value_into(c, at, None, block).await?;
                out.push(&key, block);
            } else {
                out.push(&key, &slot[..self.shape.value_len]);
            }
        }
        Ok(())
    }

    /// [`Self::put`] for long keys, whose keys are in the blocks: the pairs' blocks READ
    /// together, [`doorbell::ROUND_READS`] pairs at a time (doorbells per memory node,
    /// [`doorbell::read_per_node`]: one round trip for a round on one memory node, where one
    /// READ after another took a round trip a pair), each its first READ's bytes; a block
    /// longer than that READ has its rest READ by itself. Blocks are immutable once published,
    /// so READing them together sees what READing them in turn would. (Indirect values with
    /// 8-byte keys keep one READ per pair, as the figures that run CHIME-Indirect measured it.)
    async fn put_long<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut ScanScratch,
        out: &mut ScanBuf,
        keep: impl Fn(&[u8]) -> bool,
    ) -> IndexResult<()> {
        let ScanScratch { pairs, block, reads, rest, .. } = s;
        let blocks = &self.tree.blocks;
        // A round at a time, so the buffer holds at most one round's first READs.
        for round in pairs.chunks(doorbell::ROUND_READS) {
            reads.clear();
            reads.extend(round.iter().map(|&(_, slot)| {
                let at = GlobalAddr::from_raw(u64::from_le_bytes(slot));
                (at, blocks.first_read_at(c, at))
            }));
            block.clear();
            block.resize(reads.iter().map(|r| r.1).sum(), 0);
            doorbell::read_per_node(c, reads, block).await?;
            let mut from = 0;
            for &(at, len) in reads.iter() {
                let b = &block[from..from + len];
                from += len;
                match blocks.parse(at, b)? {
                    Some((key, value)) => {
                        if keep(key) {
                            out.push(key, value);
                        }
                    }
                    None => {
                        let (key, value) = blocks.rest_into(c, at, b, rest).await?;
                        if keep(&rest[key.clone()]) {
                            out.push(&rest[key], &rest[value]);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl<T: Transport, V: Variant> RangeIndex<T> for ChimeIndex<V> {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        self.check_bound(from)?;
        let start = prefix_of(from).max(1);
        let mut s = self.tree.scans.get(c, ScanScratch::default);
        if self.shape.fine_grained_scan && !self.shape.long_keys() && count > 0 {
            // The keys [start, start + count) if dense; whole leaves for the rest if not.
            s.pairs.clear();
            s.pairs.reserve(count.min(MOST_RESERVED));
            let end = start.saturating_add(count as u64 - 1);
            let on = match self.tree.scan_fine(c, start, end, true, &mut s).await? {
                Trimmed::Done => end.checked_add(1),
                Trimmed::From(pos) => Some(pos),
            };
            if let Some(pos) = on.filter(|_| s.pairs.len() < count) {
                self.tree.scan_on(c, pos, count, false, None, &mut s).await?;
            }
            return self.put(c, &mut s, out, |_| true).await;
        }
        if !self.shape.long_keys() {
            self.tree.scan(c, start, count, false, None, &mut s).await?;
            return self.put(c, &mut s, out, |_| true).await;
        }
        // Keys sharing a prefix stay in one leaf and come back as whole groups; up to H of
        // them may sort before `from`, so ask for that many more, then order by full key.
        let extra = self.tree.leaf.prefix_run();
        self.tree.scan(c, start, count.saturating_add(extra), true, None, &mut s).await?;
        self.put(c, &mut s, out, |k| k >= from).await?;
        out.sort_from(0);
        out.truncate(count);
        Ok(())
    }

    async fn scan_range_into(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        self.check_bound(lo)?;
        self.check_bound(hi)?;
        if lo >= hi {
            return Ok(());
        }
        // Leaves are walked up to the group of hi's prefix; full keys settle the ends.
        let (start, until) = (prefix_of(lo).max(1), prefix_of(hi));
        let long = self.shape.long_keys();
        let mut s = self.tree.scans.get(c, ScanScratch::default);
        if self.shape.fine_grained_scan && !long {
            // 8-byte keys: [lo, hi) is [start, until - 1] as integers.
            s.pairs.clear();
            let Some(end) = until.checked_sub(1).filter(|&e| e >= start) else { return Ok(()) };
            if let Trimmed::From(pos) = self.tree.scan_fine(c, start, end, false, &mut s).await? {
                self.tree.scan_on(c, pos, usize::MAX, false, Some(until), &mut s).await?;
            }
            return self.put(c, &mut s, out, |k| k >= lo && k < hi).await;
        }
        self.tree.scan(c, start, usize::MAX, long, Some(until), &mut s).await?;
        self.put(c, &mut s, out, |k| k >= lo && k < hi).await?;
        if long {
            out.sort_from(0);
        }
        Ok(())
    }
}
