//! Structure changes of a full leaf: claimed through Spear, planned from the drained image,
//! written in place with the next epoch and released in the same doorbell; a split publishes
//! its new right sibling B-link style.
//!
//! # Plan
//!
//! An insert that found no free entry still holds its `+1` on the leaf. It posts its item, claims
//! the leaf (`[FAA +2³², READ leaf]`, then polls until it is the only operation in flight), so
//! the image it holds is final. From it, the keys with a value, plus the new one (replacing the
//! key's entry if a concurrent insert took one meanwhile), sorted by key:
//!
//! * at most three quarters of the entries: **compaction** — the leaf is rewritten with just
//!   them (deleted keys, and keys whose inserter crashed before publishing a pointer, go);
//! * more: a **split** at the middle key `s`.
//!
//! # Split
//!
//! 1. The new leaf R gets the keys `≥ s`, fences `[s, high]` and the old sibling; it is WRITTEN
//!    whole (Spear word 0) before anything points to it.
//! 2. `[WRITE L[8..] (keys < s, high = s − 1, sibling = R, next epoch), FAA −(2³²+1)]` — one
//!    doorbell (with R's WRITE in front when R is on L's memory node). From here a key `≥ s`
//!    reaches R by L's sibling (the B-link half split), and L's writers are released.
//! 3. The separator `s → R` goes into the parent ([`dmindex_prim::blink::Blink::insert_internal`]).
//!
//! The insert is done at step 2 (its key is in one of the images). A crash after step 2 leaves
//! the separator missing, which readers cross by the sibling pointer. One before it leaves the
//! leaf claimed and whole — its rewrite is one WRITE (at most 4 KiB with up to 252 entries)
//! posted before the release, so it landed whole or not at all, and `R` is unreachable until it
//! lands — so the first writer that waits a lease on the leaf judges the SMO dead, fences it,
//! takes its claim over and releases it ([`dmindex_prim::spear::recover`], with nothing to roll
//! forward: [`dmindex_prim::spear::WholeRewrites`]). A count a dead client left in a full leaf is
//! dropped by the next SMO, which judges it while it waits unclaimed between its attempts.
//!
//! Round trips after the insert's first doorbell: claim 1 (+1 per poll), R's WRITE 1 (0 on one
//! memory node), L's WRITE with the release 1, separator 3 (lock, READ, WRITE) — one more per
//! internal split above.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::counter::bump;
use dmindex_prim::spear::{self, Claim, Held, Panel, WholeRewrites};

use crate::leaf::{encode, next_epoch, LeafImage, META, SPEAR};
use crate::write::Write;
use crate::Marlin;

impl Marlin {
    /// Claims the full leaf at `leaf` (the insert's `held`) and compacts or splits it with
    /// `(key, value)` in: [`Write::Done`], or [`Write::Again`] when another SMO held the leaf or
    /// operations stayed in flight (then it waits, unclaimed, for them to leave). `parent` is
    /// the leaf's parent as the descent saw it; `buf` holds a leaf; `panel` judges counts that
    /// never leave, across the insert's attempts.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn smo<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        parent: Option<GlobalAddr>,
        held: Held,
        key: u64,
        value: &[u8],
        buf: &mut [u8],
        panel: &mut Panel,
    ) -> IndexResult<Write<()>> {
        let (shape, polls, rec) = (&self.shape, self.polls, &WholeRewrites);
        let b = &mut buf[..shape.bytes];
        let claimed = match spear::claim(c, held, leaf, b, polls, panel, rec).await? {
            Claim::Held(claimed) => claimed,
            Claim::Lost => {
                bump(&self.counters.smo_retries);
                return Ok(Write::Again);
            }
            Claim::GaveUp => {
                bump(&self.counters.smo_retries);
                // Unclaimed, so the leaf's other writers go on; dead counts are dropped here
                // once judged.
                let word = leaf.add(SPEAR as u64);
                spear::wait_drain(c, word, leaf, polls, panel, rec).await?;
                return Ok(Write::Again);
            }
        };
        let Ok(img) = LeafImage::check(shape, buf) else {
            // Drained and claimed, the leaf cannot be torn.
            c.batch(&mut claimed.release(c).ops()).await?;
            return Err(crate::write::not_a_leaf(leaf));
        };
        let item = self.items.post_on(c, leaf.node(), &key.to_be_bytes(), value).await?;
        let mut pairs: Vec<(u64, GlobalAddr)> = img.live().filter(|&(k, _)| k != key).collect();
        pairs.push((key, item));
        pairs.sort_unstable_by_key(|&(k, _)| k);
        let (low, high, sibling, nv) = (img.low(), img.high(), img.sibling(), next_epoch(img.nv()));
        let mut left = Vec::with_capacity(shape.bytes);
        if pairs.len() <= shape.compact_limit() {
            encode(shape, nv, low, high, sibling, pairs, &mut left);
            let release = claimed.release(c);
            let [faa, done] = release.ops();
            let write = BatchOp::Write { addr: leaf.add(META as u64), data: &left[META..] };
            c.batch(&mut [write, faa, done]).await?;
            bump(&self.counters.compactions);
            return Ok(Write::Done(()));
        }
        let m = pairs.len() / 2;
        let s = pairs[m].0;
        let right_addr = match c.alloc(shape.bytes as u64, 64).await {
            Ok(a) => a,
            Err(e) => {
                c.batch(&mut claimed.release(c).ops()).await?;
                return Err(IndexError::from(e));
            }
        };
        let mut right = Vec::with_capacity(shape.bytes);
        encode(shape, 1, s, high, sibling, pairs[m..].iter().copied(), &mut right);
        encode(shape, nv, low, s - 1, right_addr, pairs[..m].iter().copied(), &mut left);
        let write_left = BatchOp::Write { addr: leaf.add(META as u64), data: &left[META..] };
        let release = claimed.release(c);
        let [faa, done] = release.ops();
        if right_addr.node() == leaf.node() {
            let write_right = BatchOp::Write { addr: right_addr, data: &right };
            c.batch(&mut [write_right, write_left, faa, done]).await?;
        } else {
            c.write(right_addr, &right).await?;
            c.batch(&mut [write_left, faa, done]).await?;
        }
        bump(&self.counters.splits);
        self.blink.insert_internal(c, 1, s, right_addr, parent).await?;
        Ok(Write::Done(()))
    }
}

#[cfg(test)]
mod tests;
