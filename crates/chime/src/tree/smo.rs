//! Structure modifications: splits. A leaf whose hop fails splits at the median of its critical
//! keys ([`crate::split`] divides the client's buffers); the new right sibling is written before
//! the old leaf points to it (one doorbell when both live on one memory node), so until the
//! separator reaches the parent the tree is in a half split, which readers cross by sibling
//! pointers. Separators go up through [`dmindex_prim::blink`].
//!
//! # Half splits left for good
//!
//! A splitter that dies (or is fenced) after its halves and before its separator leaves a half
//! split nobody finishes, and every operation across it through a cached parent then pays a
//! dropped parent and a descent. So a compute node notes each half split it crosses under a
//! parent read from the memory node ([`HalfSplits`]); one it crosses again a lease or more
//! after it first did is finished here ([`Tree::finish_half_split`]): under the left leaf's
//! lock (which also judges and repairs a dead holder), its sibling and upper bound give the
//! separator exactly, and [`dmindex_prim::blink::Blink::insert_internal`] puts it in the parent
//! unless it is there already. A slow live splitter inserting the same separator meanwhile is
//! harmless: the second finds the pivot present and stops. A right leaf's low key never
//! changes, so the separator stays right whatever splits the left leaf later. Cost: nothing
//! until a half split outlives a lease; then a lock, a READ of the leaf and the insert, once.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use super::{Insert, LockedLeaf, Tree};
use crate::leaf::LeafBuf;
use crate::split::Cut;
use crate::view::LeafView;

impl Tree {
    /// Splits locked leaf `leaf` (wholly read in `buf`, which is left holding the left half)
    /// where [`Cut`] says, moving the larger keys to a new right sibling at the same slots, and
    /// tries to place `k` on its side. Returns whether k was placed.
    pub(super) async fn split_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
    ) -> IndexResult<bool> {
        let Insert { k, v, .. } = *ins;
        let cur = leaf.addr;
        let Some(cut) = Cut::choose(buf, k) else {
            // Nothing can move: every key shares k's side, so only duplicate 8-byte prefixes
            // could be crowding the neighbourhood, and splits cannot separate them. A leaf
            // keeps at most H / 2 plain entries of one prefix (past that, a collision group,
            // and for a moment the plain entries it shadows), so this leaf breaks that rule.
            self.unlock_leaf(c, leaf).await?;
            return Err(IndexError::Corrupt(format!(
                "a leaf's neighbourhood of prefix {k:016x} cannot be split apart: more entries \
                 share the prefix than a leaf keeps"
            )));
        };
        self.splits.fetch_add(1, Ordering::Relaxed);
        self.keys_at_split.fetch_add(cut.count as u64, Ordering::Relaxed);
        let (old_sib, _) = buf.meta().expect("whole leaf");
        let (low, old_bound) = match buf.fences() {
            Some(f) => f,
            None => (0, self.read_bound(c, cur).await?),
        };
        let (leaf, right_addr) = self.alloc_split_leaf(c, leaf).await?;
        let left_max = cut.left_max;
        let mut right = self.empty_leaf_buf(c);
        let halves = cut.divide(buf, &mut right, k, v);
        right.set_sibling(old_sib);
        buf.set_sibling(right_addr);
        if self.leaf.kind.fenced {
            right.set_fences(left_max + 1, old_bound);
            buf.set_fences(low, left_max);
        }
        buf.bump_node_version();
        let right_half = (right_addr, &mut *right, halves.right, old_bound);
        self.write_halves(c, leaf, right_half, (buf, halves.left, left_max)).await?;
        self.blink.insert_internal(c, 1, left_max + 1, right_addr, ins.loc.parent).await?;
        Ok(halves.placed)
    }

    /// A new leaf for splitting locked leaf `leaf`, returned with it; out of memory leaves
    /// `leaf` as it was, unlocked (lock word `leaf.lw`), and reports.
    pub(crate) async fn alloc_split_leaf<'t, T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'t>,
    ) -> IndexResult<(LockedLeaf<'t>, GlobalAddr)> {
        match c.alloc(self.leaf.alloc() as u64, 64).await {
            Ok(a) => Ok((leaf, a)),
            Err(e) => {
                self.unlock_leaf(c, leaf).await?;
                Err(e.into())
            }
        }
    }
}

/// Half splits a compute node crossed under a parent read from the memory node: the left
/// leaf, its sibling then, and when it was first crossed (this CN's clock). A few entries: a
/// half split lasts a few round trips unless its splitter died.
#[derive(Debug)]
pub(crate) struct HalfSplits {
    seen: Mutex<Vec<(GlobalAddr, GlobalAddr, u64)>>,
}

/// Half splits a compute node remembers at once (the oldest is forgotten first).
const REMEMBERED: usize = 8;

impl HalfSplits {
    pub(crate) fn new() -> HalfSplits {
        HalfSplits { seen: Mutex::new(Vec::with_capacity(REMEMBERED)) }
    }

    /// Notes that leaf `leaf` was found with sibling `sib` that its parent does not name, at
    /// `now`; whether that half split was first seen a lease (`lease`) or more before (it is
    /// then forgotten: the caller finishes it).
    fn crossed(&self, leaf: GlobalAddr, sib: GlobalAddr, now: u64, lease: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.iter().position(|&(l, s, _)| l == leaf && s == sib) {
            Some(i) if now.saturating_sub(seen[i].2) >= lease => {
                seen.swap_remove(i);
                true
            }
            Some(_) => false,
            None => {
                if seen.len() == REMEMBERED {
                    seen.remove(0);
                }
                seen.push((leaf, sib, now));
                false
            }
        }
    }
}

impl Tree {
    /// A walk crossed from leaf `leaf` to its sibling `sib`, which `parent` (read from the
    /// memory node) does not name: notes it, and finishes the half split if it has lasted a
    /// lease ([`HalfSplits`]).
    pub(crate) async fn crossed_half_split<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        sib: GlobalAddr,
        parent: GlobalAddr,
    ) -> IndexResult<()> {
        let lease = c.transport().lease_ns();
        if !self.half_splits.crossed(leaf, sib, c.now_ns(), lease) {
            return Ok(());
        }
        // Boxed: the rare insert's future stays out of every operation's state.
        Box::pin(self.finish_half_split(c, leaf, sib, parent)).await
    }

    /// Puts the separator of leaf `leaf`'s split into sibling `sib` into the parent level
    /// (`parent` the node believed to cover it), if `leaf` still points to `sib`: the pivot is
    /// `leaf`'s upper bound + 1, read under its lock.
    async fn finish_half_split<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        sib: GlobalAddr,
        parent: GlobalAddr,
    ) -> IndexResult<()> {
        let locked = self.lock_leaf(c, leaf).await?;
        let (now_sib, high) = {
            let buf = self.read_slots(c, leaf, 0, self.leaf.span).await?;
            let (now_sib, _) = buf.meta().expect("validated read has a replica");
            (now_sib, buf.fences().map(|(_, high)| high))
        };
        let high = match high {
            Some(h) => h,
            None => self.read_bound(c, leaf).await?,
        };
        self.unlock_leaf(c, locked).await?;
        if now_sib != sib || high == u64::MAX {
            return Ok(());
        }
        self.half_splits_finished.fetch_add(1, Ordering::Relaxed);
        self.blink.insert_internal(c, 1, high + 1, sib, Some(parent)).await
    }
}
