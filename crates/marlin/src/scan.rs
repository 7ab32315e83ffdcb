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
//! [`MAX_BATCH`] to a doorbell per memory node ([`doorbell::post_per_node`]): a 100-item scan costs about 100 item
//! READs in 7 or more round trips, which is Marlin's scan cost as the Dolphin paper measures it.
//!
//! # Linearizability
//!
//! Each key of the range is read at the READ of the leaf image that covered it; a key's item is
//! immutable, so READing it later returns the value that image's pointer named. Every key of
//! `[lo, hi]` is covered exactly once, since consecutive images cover adjacent ranges.

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult, Pair};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Internal;
use dmindex_prim::counter::{add, bump};
use dmindex_prim::doorbell;

use crate::leaf::{Judge, LeafImage, Refused};
use crate::write;
use crate::Marlin;

/// Most leaves one round READs (one doorbell when they share a memory node).
const MAX_LEAVES: usize = MAX_BATCH;

impl Marlin {
    /// The children of cached parent `p` from the one covering `next`, while they may hold keys
    /// up to `hi`, at most `n`.
    fn children(p: &Internal, next: u64, hi: u64, n: usize) -> Vec<GlobalAddr> {
        let idx = p.rank(next);
        let mut out = Vec::with_capacity(n);
        if idx == 0 {
            out.push(p.leftmost);
        }
        let pivots = p.routes.pivots();
        for (j, child) in p.routes.children_from(idx.saturating_sub(1)).enumerate() {
            let i = idx.saturating_sub(1) + j;
            if out.len() >= n || (!out.is_empty() && pivots[i] > hi) {
                break;
            }
            out.push(child);
        }
        out
    }

    /// Appends the keys in `[lo, hi]`, at most `count`, with their values, in key order.
    pub(crate) async fn scan_keys<T: Transport>(
        &self,
        c: &Client<T>,
        lo: u64,
        hi: u64,
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        if count == 0 || lo > hi {
            return Ok(());
        }
        let mut pairs: Vec<(u64, GlobalAddr)> = Vec::new();
        let mut next = lo;
        // Where the next round starts when no cached parent names the leaves: a leaf to READ.
        let mut follow: Option<GlobalAddr> = None;
        let mut bufs: Vec<u8> = Vec::new();
        let bytes = self.shape.bytes;
        // Rounds started again: leaves whose fences did not take the scan on.
        let mut refreshes = Attempts::new();
        'rounds: loop {
            bump(&self.counters.scan_rounds);
            let left = count.saturating_sub(pairs.len());
            let want = self.counters.leaf_fill.leaves_for(left, self.shape.span / 2, MAX_LEAVES);
            let leaves = match follow.take() {
                Some(a) => vec![a],
                None => match self
                    .blink
                    .cache
                    .with(1, &next, |p| Self::children(&p.node, next, hi, want))
                {
                    Some(leaves) => leaves,
                    None => vec![self.blink.locate(c, next).await?.leaf],
                },
            };
            bufs.resize(leaves.len() * bytes, 0);
            self.read_leaves(c, &leaves, &mut bufs).await?;
            let mut last: Option<GlobalAddr> = None;
            for (i, &leaf) in leaves.iter().enumerate() {
                let buf = &mut bufs[i * bytes..(i + 1) * bytes];
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
        self.read_items(c, &pairs, out).await
    }

    /// READs `leaves` into `bufs` (a leaf each): one doorbell per memory node.
    async fn read_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        leaves: &[GlobalAddr],
        bufs: &mut [u8],
    ) -> IndexResult<()> {
        let mut ops: Vec<BatchOp<'_>> = leaves
            .iter()
            .zip(bufs.chunks_mut(self.shape.bytes))
            .map(|(&addr, buf)| BatchOp::Read { addr, buf })
            .collect();
        doorbell::post_per_node(c, &mut ops).await?;
        Ok(())
    }

    /// The values of `pairs` into `out`: item READs, [`MAX_BATCH`] to a doorbell per memory
    /// node.
    async fn read_items<T: Transport>(
        &self,
        c: &Client<T>,
        pairs: &[(u64, GlobalAddr)],
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let len = self.items.first_read();
        let mut raw = vec![0u8; pairs.len() * len];
        let mut ops: Vec<BatchOp<'_>> = pairs
            .iter()
            .zip(raw.chunks_mut(len))
            .map(|(p, buf)| BatchOp::Read { addr: p.1, buf })
            .collect();
        doorbell::post_per_node(c, &mut ops).await?;
        drop(ops);
        add(&self.counters.scan_items, pairs.len() as u64);
        for (&(k, item), b) in pairs.iter().zip(raw.chunks(len)) {
            let key = k.to_be_bytes();
            let value = match self.items.parse(item, b)? {
                Some((ik, v)) if ik == key => v.to_vec(),
                Some(_) => {
                    return Err(IndexError::Corrupt(format!("item {item} holds another key")))
                }
                None => {
                    // A value longer than the first READ: the rest by itself.
                    let mut v = Vec::new();
                    if !self.items.value_into(c, item, Some(&key), &mut v).await? {
                        return Err(IndexError::Corrupt(format!("item {item} holds another key")));
                    }
                    v
                }
            };
            out.push((key.to_vec(), value));
        }
        Ok(())
    }
}
