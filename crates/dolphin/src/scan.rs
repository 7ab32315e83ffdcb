//! Scans: a prefix's leaves read together, by one doorbell to its special node's memory node.
//!
//! # Rounds
//!
//! For each 7-byte prefix from the start key's on: take its special node's image (the CN
//! cache's copy if there is one, else read afresh), list its leaves by low key from the floor of
//! the current key, and READ as many as the scan still needs (from the mean number of live pairs
//! the compute node's scans found per leaf; at most one doorbell's worth) in **one doorbell**: a prefix's leaves all live on its special node's memory node. A scan of 100 items over 1 KB leaves is one doorbell when the copy is
//! cached, two when it is not.
//!
//! # Coverage: why a stale copy cannot hide a key
//!
//! A prefix's leaves partition `[P00, PFF]`; `lo` never changes and `hi` only shrinks, so the
//! leaves an image names, read in order, must cover the scanned interval **contiguously**: each
//! leaf's `lo` at most the first key not yet covered, its `hi` at least that key. A gap means a
//! leaf split after the image was taken (the keys it moved are in a leaf the image does not
//! name): the scan drops the copy, reads the special node afresh and goes on from the first key
//! not covered. Each pair returned was its key's value at the READ of a checked image whose range
//! held it; each key skipped was absent from such an image: the per-key linearizability the
//! checker asks of scans. When a split's window makes two leaves cover one key (the old image and
//! the new leaf, both claimed, with equal pairs), the key is taken from the first leaf only.
//!
//! # Between prefixes
//!
//! The next prefix's special node comes from the cache or a descent (which finds it, or proves
//! the prefix absent on nodes read afresh); an absent prefix sends the scan to the next prefix
//! that exists, found by an in-order walk over nodes read afresh (`Dolphin::next_special`),
//! rare in the dense key spaces Dolphin is built for.

use std::cmp::Ordering;
use std::sync::Arc;

use arrayvec::ArrayVec;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult, ScanBuf};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::doorbell;
use dmindex_prim::pool::Pooled;
use dmindex_prim::radix::node::slot_addr;
use dmindex_prim::radix::node::Lookup;
use dmindex_prim::radix::slot::Child;
use dmindex_prim::radix::{At, Link, NodeImage, Partial, Slot};

use crate::leaf::{prefix, LeafImage, Refused};
use crate::{bump, sync, Dolphin, ROOT_KIND, SPECIAL_DEPTH};

/// A scan's working vectors, kept in a per-compute-node pool (`Dolphin::scans`) so that a warm
/// scan allocates nothing.
#[derive(Default)]
pub(crate) struct ScanScratch {
    /// A special node's leaves: (partial key byte, address), by byte.
    leaves: Vec<(u8, GlobalAddr)>,
    /// A leaf's live pairs in the scan's range: (key, slot), by key.
    live: Vec<(u64, usize)>,
}

/// A special node as a scan uses it.
struct Special {
    node: GlobalAddr,
    /// Shared with the CN cache, or read just now.
    img: Arc<NodeImage>,
    /// The 7-byte prefix it names leaves of.
    prefix: u64,
}

/// Compares a position (a key prefix of up to 7 bytes) with the 7-byte prefix `p`.
fn cmp_position(pos: &[u8], p: u64) -> Ordering {
    let pb = &p.to_be_bytes()[1..];
    pos.cmp(&pb[..pos.len()])
}

/// How one special node's leaves went.
enum Leaves {
    /// The scan is done (count reached, or past its end).
    Done,
    /// The prefix is covered through `PFF`.
    Next,
    /// Keys from this one on are not covered by the image's leaves: read the node afresh.
    Gap(u64),
}

impl Dolphin {
    pub(crate) async fn scan_keys<T: Transport>(
        &self,
        c: &Client<T>,
        from: u64,
        end: u64,
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        let mut scratch = self.scans.get(c, ScanScratch::default);
        let mut left = count;
        let mut cur = from;
        while left > 0 && cur <= end {
            let Some(mut sp) = self.special_for(c, cur).await? else { return Ok(()) };
            if sp.prefix > prefix(cur) {
                cur = sp.prefix << 8;
                if cur > end {
                    return Ok(());
                }
            }
            // The special node's image read again: its leaves did not cover the scan.
            let mut refreshes = Attempts::new();
            loop {
                let at = (&mut cur, end, &mut left);
                match self.scan_special(c, &sp, at, &mut scratch, out).await? {
                    Leaves::Done => return Ok(()),
                    Leaves::Next => break,
                    Leaves::Gap(at) => {
                        refreshes.failed(sp.node, "special node's leaves")?;
                        bump(&self.counters.scan_refreshes);
                        self.cache.invalidate(sp.node);
                        cur = at;
                        match self.special_for(c, cur).await? {
                            Some(fresh) if fresh.prefix == sp.prefix => sp = fresh,
                            _ => {
                                return Err(IndexError::Corrupt("a dolphin prefix vanished".into()))
                            }
                        }
                    }
                }
            }
            match sp.prefix.checked_add(1) {
                Some(p) if p < 1 << 56 => cur = p << 8,
                _ => return Ok(()),
            }
        }
        Ok(())
    }

    /// The special node of `key`'s prefix, or of the next prefix that has one.
    async fn special_for<T: Transport>(
        &self,
        c: &Client<T>,
        key: u64,
    ) -> IndexResult<Option<Special>> {
        let kb = key.to_be_bytes();
        let w = self.cache.walk_with(self.root, ROOT_KIND, &kb, Some(SPECIAL_DEPTH));
        c.compute(Work::RadixStep, w.probes);
        if let Some(copy) = &w.copy {
            if copy.header.depth as usize == SPECIAL_DEPTH {
                let img = Arc::clone(copy);
                return Ok(Some(Special { node: w.node, img, prefix: prefix(key) }));
            }
        }
        let pos = self.tree().locate(c, &kb, true).await?;
        if pos.depth() == SPECIAL_DEPTH && matches!(pos.at, At::Slot(Lookup::Found(..))) {
            return Ok(Some(Special { node: pos.node, img: pos.img, prefix: prefix(key) }));
        }
        self.next_special(c, prefix(key)).await
    }

    /// The special node of the smallest prefix above `p` that has one: an in-order walk over
    /// nodes read afresh, skipping subtrees wholly below `p` (a frozen node is helped and the
    /// walk restarted).
    async fn next_special<T: Transport>(
        &self,
        c: &Client<T>,
        p: u64,
    ) -> IndexResult<Option<Special>> {
        let tree = self.tree();
        let mut restarts = Attempts::new();
        'restart: loop {
            let root = Slot::inner(Partial::Byte(0), self.root, ROOT_KIND);
            let mut stack: Vec<(Slot, Option<Link>, Vec<u8>)> = vec![(root, None, Vec::new())];
            while let Some((slot, link, pos)) = stack.pop() {
                let Some(Child::Inner { addr, kind }) = slot.child() else { continue };
                let img = tree.read_node(c, addr, kind).await?;
                if img.any_frozen() {
                    if let Some(l) = link {
                        tree.switch(c, &l, addr, &img).await?;
                    }
                    restarts.failed(addr, "radix node frozen for a type switch")?;
                    continue 'restart;
                }
                let h = img.header;
                let depth = h.depth as usize;
                // A path split leaves the split node's prefix repeating bytes above it.
                if depth < pos.len() || depth - h.len as usize > pos.len() || depth > SPECIAL_DEPTH
                {
                    return Err(IndexError::Corrupt(format!(
                        "a dolphin node at {addr:?} is misplaced"
                    )));
                }
                let mut pos = pos;
                for i in pos.len()..depth {
                    pos.push(h.byte_at(i));
                }
                match cmp_position(&pos, p) {
                    Ordering::Less => continue,
                    Ordering::Greater if depth == SPECIAL_DEPTH => {
                        let mut b = [0u8; 8];
                        b[1..].copy_from_slice(&pos);
                        return Ok(Some(Special {
                            node: addr,
                            img: Arc::new(img),
                            prefix: u64::from_be_bytes(b),
                        }));
                    }
                    _ if depth == SPECIAL_DEPTH => continue,
                    _ => {}
                }
                for s in img.live_sorted().into_iter().rev() {
                    let Partial::Byte(b) = s.partial() else { continue };
                    let mut child = pos.clone();
                    child.push(b);
                    if cmp_position(&child, p) == Ordering::Less {
                        continue;
                    }
                    let i = img.slots().iter().position(|x| x.thawed() == s).unwrap_or(0);
                    let l = Link { slot: slot_addr(addr, i), word: s, depth };
                    stack.push((s, Some(l), child));
                }
            }
            return Ok(None);
        }
    }

    /// Scans the leaves `sp` names from `*cur` on (advancing it), appending pairs up to `*left`
    /// and `end` (`at` is `(cur, end, left)`).
    async fn scan_special<T: Transport>(
        &self,
        c: &Client<T>,
        sp: &Special,
        at: (&mut u64, u64, &mut usize),
        scratch: &mut ScanScratch,
        out: &mut ScanBuf,
    ) -> IndexResult<Leaves> {
        let (cur, end, left) = at;
        let ScanScratch { leaves, live } = scratch;
        leaves.clear();
        leaves.extend(sp.img.slots().iter().map(|s| s.thawed()).filter_map(|s| {
            match (s.is_empty() || s.is_tombstone(), s.partial(), s.child()) {
                (false, Partial::Byte(b), Some(Child::Leaf { addr, .. })) => Some((b, addr)),
                _ => None,
            }
        }));
        leaves.sort_unstable_by_key(|l| l.0);
        let Some(mut first) = leaves.iter().rposition(|l| l.0 <= *cur as u8) else {
            return Ok(Leaves::Gap(*cur));
        };
        let shape = &self.shape;
        while first < leaves.len() {
            let want = self.counters.leaf_fill.leaves_for(*left, shape.slots / 2, MAX_BATCH);
            let batch = &leaves[first..(first + want.clamp(1, MAX_BATCH)).min(leaves.len())];
            let mut bufs: ArrayVec<_, MAX_BATCH> = batch.iter().map(|_| self.leaf_buf(c)).collect();
            self.read_leaves(c, batch, &mut bufs).await?;
            bump(&self.counters.scan_rounds);
            c.compute(Work::BytesScanned, (batch.len() * shape.bytes) as u64);
            for (&(_, addr), buf) in batch.iter().zip(bufs.iter_mut()) {
                match LeafImage::verify(shape, buf) {
                    Ok(()) if LeafImage::verified(shape, buf).live_whole() => {}
                    // Torn by a split's rewrite, or a multi-line cell mid-write: this leaf
                    // again, alone, until it checks.
                    Ok(()) | Err(Refused::Torn) => {
                        sync::read_whole(c, shape, addr, buf, &self.counters.sync, self).await?;
                    }
                    Err(Refused::NotALeaf) => {
                        return Err(IndexError::Corrupt(format!("no dolphin leaf at {addr:?}")))
                    }
                }
                let img = LeafImage::verified(shape, buf);
                if img.hi() < *cur {
                    // Covered already (the old image of a leaf in a split's window), or split
                    // away: the next leaf's `lo` tells.
                    continue;
                }
                if img.lo() > *cur || prefix(img.lo()) != sp.prefix {
                    return Ok(Leaves::Gap(*cur));
                }
                let top = img.hi().min(end);
                live.clear();
                live.extend(img.live().filter(|&(k, _)| k >= *cur && k <= top));
                live.sort_unstable_by_key(|&(k, _)| k);
                // One READ can see a key LIVE twice: its old slot before a delete landed and the
                // re-insert's slot after (different lines, read at different instants). Each was
                // the key's value at an instant of the READ; one of them is returned.
                live.dedup_by_key(|&mut (k, _)| k);
                self.counters.leaf_fill.saw(img.live().count());
                for &(k, j) in live.iter() {
                    if *left == 0 {
                        return Ok(Leaves::Done);
                    }
                    out.push_with(&k.to_be_bytes(), |v| img.value_into(j, v));
                    *left -= 1;
                }
                if *left == 0 || top == end {
                    return Ok(Leaves::Done);
                }
                if img.hi() as u8 == 0xFF {
                    return Ok(Leaves::Next);
                }
                *cur = img.hi() + 1;
            }
            first += batch.len();
        }
        // The image's last leaf ends before PFF: a leaf it does not name covers the rest.
        Ok(Leaves::Gap(*cur))
    }

    /// READs the leaves `batch` names into `bufs`: one doorbell when they share a memory node
    /// (as splits place them: their special node's), else one READ after another.
    async fn read_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        batch: &[(u8, GlobalAddr)],
        bufs: &mut [Pooled<'_, Vec<u8>>],
    ) -> IndexResult<()> {
        let bytes = self.shape.bytes;
        let reads = batch
            .iter()
            .zip(bufs.iter_mut())
            .map(|(l, b)| BatchOp::Read { addr: l.1, buf: &mut b[..bytes] });
        doorbell::post_iter(c, reads).await
    }
}
