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

use crate::collision::{self, Group};
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
    /// blocks first). Long keys: the keys of collision groups past the first `most` keys kept
    /// (in the walk's order) are left out, as their runs end.
    async fn put<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut ScanScratch,
        out: &mut ScanBuf,
        (from, keep): (&[u8], impl Fn(&[u8]) -> bool),
        most: usize,
    ) -> IndexResult<()> {
        if self.shape.long_keys() {
            return self.put_long(c, s, out, (from, keep), most).await;
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
    /// together ([`Self::put_blocks`]), then the blocks of the records their groups hold in
    /// range ([`crate::collision`]), READ together the same way. A group wins over plain entries
    /// of its prefix (only a sorted leaf's rewrite cut short by a dying writer leaves both).
    async fn put_long<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut ScanScratch,
        out: &mut ScanBuf,
        (from, keep): (&[u8], impl Fn(&[u8]) -> bool),
        most: usize,
    ) -> IndexResult<()> {
        let ScanScratch { pairs, block, reads, rest, grouped, .. } = s;
        drop_shadowed(pairs);
        grouped.clear();
        let bufs = (&mut *block, &mut *reads, &mut *rest);
        let mut taken = Taken { most, taken: 0, last: None };
        let groups = Some((from, &mut *grouped));
        self.put_blocks(c, pairs, bufs, groups, out, (&keep, &mut taken)).await?;
        if !grouped.is_empty() {
            let records = std::mem::take(grouped);
            let mut all = Taken { most: usize::MAX, taken: 0, last: None };
            let bufs = (block, reads, rest);
            let put = self.put_blocks(c, &records, bufs, None, out, (&keep, &mut all)).await;
            *grouped = records;
            put?;
        }
        Ok(())
    }

    /// The blocks the value slots of `pairs` name, READ together, [`doorbell::ROUND_READS`] at
    /// a time (doorbells per memory node, [`doorbell::read_per_node`]: one round trip for a
    /// round on one memory node, where one READ after another took a round trip a pair), each
    /// its first READ's bytes; a block longer than that READ has its rest READ by itself.
    /// Blocks are immutable once published, so READing them together sees what READing them
    /// in turn would. A key-value block's pair goes to `out` if `keep` takes its key; a
    /// group's records that `keep` takes go to `grouped` (their blocks are READ next), as
    /// many as `taken` still takes. (Indirect values with 8-byte keys keep one READ per pair,
    /// as the figures that run CHIME-Indirect measured it.)
    async fn put_blocks<T: Transport>(
        &self,
        c: &Client<T>,
        pairs: &[(u64, [u8; 8])],
        (block, reads, rest): (&mut Vec<u8>, &mut Vec<(GlobalAddr, usize)>, &mut Vec<u8>),
        mut grouped: Option<Grouped<'_>>,
        out: &mut ScanBuf,
        (keep, taken): (&impl Fn(&[u8]) -> bool, &mut Taken),
    ) -> IndexResult<()> {
        let blocks = &self.tree.blocks;
        // A round at a time, so the buffer holds at most one round's first READs.
        for round in pairs.chunks(doorbell::ROUND_READS) {
            if taken.done(round[0].0) {
                break;
            }
            reads.clear();
            reads.extend(round.iter().map(|&(_, slot)| match collision::group_of(slot) {
                Some((at, first)) => (at, c.info().within_region(at, first)),
                None => {
                    let at = GlobalAddr::from_raw(u64::from_le_bytes(slot));
                    (at, blocks.first_read_at(c, at))
                }
            }));
            block.clear();
            block.resize(reads.iter().map(|r| r.1).sum(), 0);
            doorbell::read_per_node(c, reads, block).await?;
            let mut from = 0;
            for (&(at, len), &(k, slot)) in reads.iter().zip(round) {
                let b = &block[from..from + len];
                from += len;
                if taken.done(k) {
                    return Ok(());
                }
                if collision::group_of(slot).is_some() {
                    let Some((from, grouped)) = grouped.as_mut() else {
                        return Err(IndexError::Corrupt(format!(
                            "a group's record names group {at}"
                        )));
                    };
                    let whole = self.tree.whole_group(c, at, b, rest).await?;
                    let g = Group::parse(at, whole)?;
                    if g.is_directory() {
                        let (left, grouped) = (taken.left(), &mut **grouped);
                        let n =
                            self.tree.scan_directory(c, (at, whole), (from, keep), left, grouped);
                        taken.took(k, n.await?);
                        continue;
                    }
                    // Records are in key order: the first the scan still takes are its smallest.
                    let wanted = g.records().filter(|r| keep(r.key)).take(taken.left());
                    let before = grouped.len();
                    grouped.extend(wanted.map(|r| (0, r.slot)));
                    taken.took(k, grouped.len() - before);
                    continue;
                }
                match blocks.parse(at, b)? {
                    Some((key, value)) => {
                        if keep(key) {
                            out.push(key, value);
                            taken.took(k, 1);
                        }
                    }
                    None => {
                        let (key, value) = blocks.rest_into(c, at, b, rest).await?;
                        if keep(&rest[key.clone()]) {
                            out.push(&rest[key], &rest[value]);
                            taken.took(k, 1);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// A long-key scan's start and the value slots of the group records it takes.
type Grouped<'a> = (&'a [u8], &'a mut Vec<(u64, [u8; 8])>);

/// How many keys a long-key scan has taken of the most it takes, and the prefix of the last.
/// Keys come in prefix order, a collision group's in key order, but plain entries of one
/// prefix in no order: so a prefix whose keys were being taken is taken whole, and only
/// groups are cut.
struct Taken {
    most: usize,
    taken: usize,
    last: Option<u64>,
}

impl Taken {
    /// Whether the scan has all it takes before a pair of prefix `k`.
    fn done(&self, k: u64) -> bool {
        self.taken >= self.most && self.last != Some(k)
    }

    /// Keys it may still take (a plain run's may pass it).
    fn left(&self) -> usize {
        self.most.saturating_sub(self.taken)
    }

    fn took(&mut self, k: u64, n: usize) {
        self.taken += n;
        if n > 0 {
            self.last = Some(k);
        }
    }
}

/// Drops from `pairs` (in 8-byte key order) the plain entries of a prefix that a group entry
/// also holds in the same run (a group wins: [`crate::collision`]).
fn drop_shadowed(pairs: &mut Vec<(u64, [u8; 8])>) {
    let is_group = |p: &(u64, [u8; 8])| collision::group_of(p.1).is_some();
    let (n, mut kept, mut i) = (pairs.len(), 0, 0);
    while i < n {
        let k = pairs[i].0;
        let end = i + pairs[i..].iter().take_while(|p| p.0 == k).count();
        let grouped = pairs[i..end].iter().any(is_group);
        for j in i..end {
            if !grouped || is_group(&pairs[j]) {
                pairs[kept] = pairs[j];
                kept += 1;
            }
        }
        i = end;
    }
    pairs.truncate(kept);
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
            return self.put(c, &mut s, out, (from, |_| true), usize::MAX).await;
        }
        if !self.shape.long_keys() {
            self.tree.scan(c, start, count, false, None, &mut s).await?;
            return self.put(c, &mut s, out, (from, |_| true), usize::MAX).await;
        }
        // Keys sharing a prefix stay in one leaf and come back as whole runs, counted by the
        // keys they hold past `from`'s prefix (a collision group's, at least what its value
        // slot vouches for), then are ordered by full key.
        self.tree.scan(c, start, count, true, None, &mut s).await?;
        self.put(c, &mut s, out, (from, |k| k >= from), count).await?;
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
            return self.put(c, &mut s, out, (lo, |k| k >= lo && k < hi), usize::MAX).await;
        }
        self.tree.scan(c, start, usize::MAX, long, Some(until), &mut s).await?;
        self.put(c, &mut s, out, (lo, |k| k >= lo && k < hi), usize::MAX).await?;
        if long {
            out.sort_from(0);
        }
        Ok(())
    }
}
