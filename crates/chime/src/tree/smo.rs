//! Structure modifications: splits. A leaf whose hop fails splits at the median of its critical
//! keys ([`crate::split`] divides the client's buffers); the new right sibling is written before
//! the old leaf points to it (one doorbell when both live on one memory node), so until the
//! separator reaches the parent the tree is in a half split, which readers cross by sibling
//! pointers. Separators go up through [`dmindex_prim::blink`].

use std::sync::atomic::Ordering;

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
            // (long keys) can be crowding the neighbourhood, and splits cannot separate them.
            self.unlock_leaf(c, leaf).await?;
            return Err(IndexError::Full(format!(
                "more than {} keys of one leaf share the 8-byte prefix {k:016x}; CHIME cannot \
                 separate them (paper §4.5)",
                self.leaf.h
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
