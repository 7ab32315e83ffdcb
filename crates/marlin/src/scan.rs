//! Scans: the leaves in range, then every item.
//!
//! # Leaves
//!
//! A cached level-1 parent names the leaves after the start key, so a round READs as many of
//! them as the scan is expected to need (from the mean number of pairs a leaf held in earlier
//! scans) — one doorbell per memory node. Without one, the leaf the descent finds is read alone
//! and the next ones follow by sibling. Images are taken in key order, and each must cover the
//! first key not yet covered (`low ≤ next ≤ high`): the pairs of `[next, high]` come from it and
//! `next` moves past `high`. An image that does not (a split since the parent was cached) ends
//! the round; the next one continues from the last image's sibling, or descends again.
//!
//! # Items
//!
//! Leaves hold pointers, so the values of the pairs kept are READ one item each, at most
//! [`MAX_BATCH`] to a doorbell per memory node, every doorbell rung before any is awaited
//! ([`doorbell::read_per_node`]): a 100-item scan costs about 100 item READs in one round trip
//! after its leaves', the READ per pair the Dolphin paper counts against Marlin.
//!
//! # Linearizability
//!
//! Each key of the range is read at the READ of the leaf image that covered it; a key's item is
//! immutable, so READing it later returns the value that image's pointer named. Every key of
//! `[lo, hi]` is covered exactly once, since consecutive images cover adjacent ranges.

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult, ScanBuf};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Internal;
use dmindex_prim::counter::{add, bump};
use dmindex_prim::doorbell;
use dmindex_prim::node_cache::Cached;

use crate::leaf::{Judge, LeafImage, Refused};
use crate::write;
use crate::Marlin;

/// Most leaves one round READs (one doorbell when they share a memory node).
const MAX_LEAVES: usize = MAX_BATCH;

/// Most pairs a scan makes room for before it starts.
const MOST_RESERVED: usize = 4096;

/// A scan's working vectors, kept in a per-compute-node pool (`Marlin::scans`) so that a warm
/// scan allocates nothing.
#[derive(Default)]
pub(crate) struct ScanScratch {
    /// The keys in range with their items, in key order.
    pairs: Vec<(u64, GlobalAddr)>,
    /// A round's leaves, or the items to READ, with their lengths.
    reads: Vec<(GlobalAddr, usize)>,
    /// What those READs return, end to end.
    bytes: Vec<u8>,
    /// A value longer than the first READ of its item.
    value: Vec<u8>,
}

impl Marlin {
    /// The children of cached parent `p` from the one covering `next`, while they may hold keys
    /// up to `hi`, at most `n`, appended to `out` as leaves of `len` bytes to READ.
    fn children(
        p: &Internal,
        next: u64,
        hi: u64,
        n: usize,
        len: usize,
        out: &mut Vec<(GlobalAddr, usize)>,
    ) {
        let idx = p.rank(next);
        if idx == 0 {
            out.push((p.leftmost, len));
        }
        let pivots = p.routes.pivots();
        for (j, child) in p.routes.children_from(idx.saturating_sub(1)).enumerate() {
            let i = idx.saturating_sub(1) + j;
            if out.len() >= n || (!out.is_empty() && pivots[i] > hi) {
                break;
            }
            out.push((child, len));
        }
    }

    /// The keys in `[lo, hi]`, at most `count`, with their values, in key order, into `out`
    /// (cleared first).
    pub(crate) async fn scan_keys<T: Transport>(
        &self,
        c: &Client<T>,
        lo: u64,
        hi: u64,
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        if count == 0 || lo > hi {
            return Ok(());
        }
        let mut scratch = self.scans.get(c, ScanScratch::default);
        let ScanScratch { pairs, reads, bytes, .. } = &mut *scratch;
        pairs.clear();
        // Room for the most a scan of `count` holds at once (a whole last leaf before it is
        // cut), so that the first scan of a size grows it for every later one (capped for a
        // huge count: those grow as pairs come).
        pairs.reserve(count.min(MOST_RESERVED) + self.shape.span);
        let mut next = lo;
        // Where the next round starts when no cached parent names the leaves: a leaf to READ.
        let mut follow: Option<GlobalAddr> = None;
        let len = self.shape.bytes;
        // Rounds started again: leaves whose fences did not take the scan on.
        let mut refreshes = Attempts::new();
        'rounds: loop {
            bump(&self.counters.scan_rounds);
            let left = count.saturating_sub(pairs.len());
            let want = self.counters.leaf_fill.leaves_for(left, self.shape.span / 2, MAX_LEAVES);
            reads.clear();
            match follow.take() {
                Some(a) => reads.push((a, len)),
                None => {
                    let named =
                        |p: &Cached<Internal>| Self::children(&p.node, next, hi, want, len, reads);
                    c.compute(Work::CacheLookup, 1);
                    if self.blink.cache.with(1, &next, named).is_none() {
                        reads.push((self.blink.locate(c, next).await?.leaf, len));
                    }
                }
            }
            bytes.clear();
            bytes.resize(reads.len() * len, 0);
            doorbell::read_per_node(c, reads, bytes).await?;
            let mut last: Option<GlobalAddr> = None;
            for (i, &(leaf, _)) in reads.iter().enumerate() {
                let buf = &mut bytes[i * len..(i + 1) * len];
                let img = match LeafImage::verify(&self.shape, buf) {
                    Ok(()) => LeafImage::verified(&self.shape, buf),
                    Err(Refused::Torn) => {
                        write::read(c, &self.shape, leaf, buf, &self.counters.write).await?
                    }
                    Err(Refused::NotALeaf) => return Err(write::not_a_leaf(leaf)),
                };
                match img.judge(next) {
                    Judge::Here => {}
                    Judge::Right(sib) if i == 0 => {
                        // A split since the leaf's parent was read: continue by the sibling.
                        refreshes.failed(leaf, "leaf fences")?;
                        bump(&self.counters.scan_refreshes);
                        follow = Some(sib);
                        continue 'rounds;
                    }
                    _ => {
                        // Not adjacent to the last image (a split since the parent was
                        // cached): continue after the last one by its sibling, or descend.
                        refreshes.failed(leaf, "leaf fences")?;
                        bump(&self.counters.scan_refreshes);
                        if i == 0 {
                            c.compute(Work::CacheLookup, 1);
                            let cached = self.blink.cache.with(1, &next, |p| (p.node.low, p.addr));
                            if let Some((low, addr)) = cached {
                                self.blink.cache.invalidate(1, &low, addr);
                            }
                        }
                        follow = last;
                        continue 'rounds;
                    }
                }
                let end = img.high().min(hi);
                let from = pairs.len();
                pairs.extend(img.live().filter(|&(k, _)| (next..=end).contains(&k)));
                pairs[from..].sort_unstable_by_key(|&(k, _)| k);
                self.counters.leaf_fill.saw(img.live().count());
                if pairs.len() >= count || end == hi || img.high() == u64::MAX {
                    pairs.truncate(count);
                    break 'rounds;
                }
                next = img.high() + 1;
                last = Some(img.sibling()).filter(|s| !s.is_null());
            }
            follow = last;
            if follow.is_none() {
                // The last image had no sibling but did not end the range: a wrong path.
                return Err(IndexError::Corrupt(format!(
                    "marlin leaf chain ends before {next:#x}"
                )));
            }
        }
        self.read_items(c, &mut scratch, out).await
    }

    /// The values of the scratch's pairs into `out`: item READs, [`MAX_BATCH`] to a doorbell
    /// per memory node.
    async fn read_items<T: Transport>(
        &self,
        c: &Client<T>,
        scratch: &mut ScanScratch,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        let ScanScratch { pairs, reads, bytes, value } = scratch;
        reads.clear();
        // Each item's first READ, cut at the end of its node's region (items are packed, so a
        // short one there has no room for the longest item's READ).
        reads.extend(pairs.iter().map(|&(_, item)| (item, self.items.first_read_at(c, item))));
        bytes.clear();
        bytes.resize(reads.iter().map(|r| r.1).sum(), 0);
        doorbell::read_per_node(c, reads, bytes).await?;
        add(&self.counters.scan_items, pairs.len() as u64);
        let mut at = 0;
        for (&(k, item), &(_, len)) in pairs.iter().zip(reads.iter()) {
            let b = &bytes[at..at + len];
            at += len;
            let key = k.to_be_bytes();
            match self.items.parse(item, b)? {
                Some((ik, v)) if ik == key => out.push(&key, v),
                Some(_) => {
                    return Err(IndexError::Corrupt(format!("item {item} holds another key")))
                }
                None => {
                    // A value longer than the first READ: the rest by itself.
                    if !self.items.value_into(c, item, Some(&key), value).await? {
                        return Err(IndexError::Corrupt(format!("item {item} holds another key")));
                    }
                    out.push(&key, value);
                }
            }
        }
        Ok(())
    }
}
