//! Structure modifications: splits. A leaf whose hop fails splits at the median of its critical
//! keys; the new right sibling is written before the old leaf points to it (one doorbell when
//! both live on one memory node), so until the separator reaches the parent the tree is in a
//! half split, which readers cross by sibling pointers. Separators go up Sherman-style: lock the internal node, move right past a
//! concurrent split, insert, split in turn when full, grow the root by CAS on the root word.

use std::sync::atomic::Ordering;

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::doorbell;
use dmindex_prim::lock::Held;

use super::{root_word, Insert, LockedLeaf, Tree};
use crate::internal::{Internal, Routes};
use crate::layout::LockWord;
use crate::leaf::{home, Hop, LeafBuf};
use crate::view::LeafView;

impl Tree {
    /// Splits locked leaf `leaf` (wholly read in `buf`) and tries to place `k` on the proper side.
    /// The split key is the median of the critical keys — the run of keys from k's home to the
    /// first empty slot, which the hop could not get past — together with k. Keys above the left
    /// half's maximum move to a new right sibling at the same slots. Returns whether k was placed.
    pub(super) async fn split_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: LockedLeaf<'_>,
        mut buf: LeafBuf,
    ) -> IndexResult<bool> {
        let Insert { k, v, .. } = *ins;
        let cur = leaf.addr;
        let s = self.leaf.span;
        let h = home(k, s);
        let mut crit: Vec<u64> =
            (0..s).map(|d| buf.key((h + d) % s)).take_while(|&x| x != 0).collect();
        let all: Vec<u64> = (0..s).map(|i| buf.key(i)).filter(|&x| x != 0).collect();
        if crit.len() < 2 {
            crit = all.clone();
        }
        crit.push(k);
        crit.sort_unstable();
        let mut split = crit[crit.len() / 2];
        if !all.iter().any(|&x| x < split) {
            let mut sorted = all.clone();
            sorted.sort_unstable();
            split = sorted[sorted.len() / 2].max(sorted[0] + 1);
        }
        let left_max =
            all.iter().copied().filter(|&x| x < split).max().expect("left half is not empty");
        if k <= left_max && all.iter().all(|&x| x <= left_max) {
            // Nothing can move: every key shares k's side, so only duplicate 8-byte prefixes
            // (long keys) can be crowding the neighbourhood, and splits cannot separate them.
            self.unlock_leaf(c, leaf).await?;
            return Err(IndexError::Full(format!(
                "more than {} keys of one leaf share the 8-byte prefix {k:016x}; CHIME cannot \
                 separate them (paper §4.5)",
                self.leaf.h
            )));
        }
        self.splits.fetch_add(1, Ordering::Relaxed);
        self.keys_at_split.fetch_add(all.len() as u64, Ordering::Relaxed);
        let (old_sib, _) = buf.meta().expect("whole leaf");
        let (low, old_bound) = match buf.fences() {
            Some(f) => f,
            None => (0, self.read_bound(c, cur).await?),
        };
        let (leaf, right_addr) = self.alloc_split_leaf(c, leaf).await?;
        let mut right = LeafBuf::empty(self.leaf);
        for i in 0..s {
            let x = buf.key(i);
            if x > left_max {
                right.set_entry(i, x, buf.value(i));
                buf.set_entry(i, 0, [0; 8]);
            }
        }
        buf.rebuild_bitmaps();
        right.rebuild_bitmaps();
        right.set_sibling(old_sib);
        buf.set_sibling(right_addr);
        if self.leaf.kind.fenced {
            right.set_fences(left_max + 1, old_bound);
            buf.set_fences(low, left_max);
        }
        buf.bump_node_version();
        let placed = if k <= left_max { buf.hop_insert(k, v) } else { right.hop_insert(k, v) };
        let lock_of = |b: &LeafBuf| LockWord {
            locked: false,
            full: b.vacancy(0),
            argmax: b.argmax().unwrap_or(0),
        };
        let right_img = self.leaf_image(&right, lock_of(&right), old_bound);
        let left_img = self.leaf_image(&buf, lock_of(&buf), left_max);
        // The left image unlocks the leaf; its local slot goes before the parent's is taken.
        let written = self.write_split(c, (right_addr, &right_img), (cur, &left_img));
        leaf.held.unlock_by(written).await?;
        self.insert_internal(c, 1, left_max + 1, right_addr, ins.loc.parent).await?;
        Ok(matches!(placed, Hop::Done(_)))
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

    /// Writes a split's new right node, then the split node that points to it (and whose
    /// image unlocks it): one doorbell when both live on one memory node.
    pub(crate) async fn write_split<T: Transport>(
        &self,
        c: &Client<T>,
        (right, right_img): (GlobalAddr, &[u8]),
        (left, left_img): (GlobalAddr, &[u8]),
    ) -> IndexResult<()> {
        let mut writes = [
            BatchOp::Write { addr: right, data: right_img },
            BatchOp::Write { addr: left, data: left_img },
        ];
        doorbell::post(c, &mut writes).await
    }

    /// Inserts separator `pivot` → `child` at `level` (Sherman-style up-propagation: lock, read,
    /// move right past a concurrent split, insert, split in turn if full, grow the root by CAS).
    pub(crate) async fn insert_internal<T: Transport>(
        &self,
        c: &Client<T>,
        mut level: u8,
        mut pivot: u64,
        mut child: GlobalAddr,
        mut hint: Option<GlobalAddr>,
    ) -> IndexResult<()> {
        loop {
            let addr = match hint.take() {
                Some(a) => a,
                None => match self.find_level(c, level, pivot).await? {
                    Ok(a) => a,
                    Err((height, root)) => {
                        let new_root = Internal {
                            version: 0,
                            level,
                            valid: true,
                            sibling: GlobalAddr::NULL,
                            leftmost: root,
                            sibling_leftmost: GlobalAddr::NULL,
                            low: 0,
                            high: u64::MAX,
                            routes: Routes::new(&[pivot], &[child]),
                        };
                        let a = c.alloc(self.inner.alloc() as u64, 64).await?;
                        c.write(a, &new_root.physical_with_lock(&self.inner)).await?;
                        let old = root_word(height, root);
                        if c.cas(self.root.addr(), old, root_word(height + 1, a)).await? == old {
                            self.cache.insert(a, new_root);
                            return Ok(());
                        }
                        self.retry();
                        continue;
                    }
                },
            };
            let held = self.lock_internal(c, addr).await?;
            let node = self.read_internal(c, addr).await?;
            if node.level != level || pivot < node.low {
                held.unlock_with(c, 0).await?;
                self.retry();
                continue;
            }
            if pivot > node.high {
                held.unlock_with(c, 0).await?;
                hint = (!node.sibling.is_null()).then_some(node.sibling);
                continue;
            }
            if node.routes.pivots().contains(&pivot) {
                held.unlock_with(c, 0).await?;
                return Ok(());
            }
            let mut node = node.bumped();
            node.routes.insert(pivot, child);
            if node.routes.len() <= self.inner.span {
                // The image ends with the lock word, unlocked.
                held.unlock_by(c.write(addr, &node.physical_with_lock(&self.inner))).await?;
                self.cache.insert(addr, node);
                return Ok(());
            }
            let m = node.routes.len() / 2;
            let (sep, mid, routes) = node.routes.split_at(m);
            let right = Internal {
                version: 0,
                level,
                valid: true,
                sibling: node.sibling,
                leftmost: mid,
                sibling_leftmost: node.sibling_leftmost,
                low: sep,
                high: node.high,
                routes,
            };
            let right_addr = match c.alloc(self.inner.alloc() as u64, 64).await {
                Ok(a) => a,
                Err(e) => {
                    held.unlock_with(c, 0).await?;
                    return Err(e.into());
                }
            };
            node.high = sep - 1;
            node.sibling = right_addr;
            node.sibling_leftmost = mid;
            let (ri, li) =
                (right.physical_with_lock(&self.inner), node.physical_with_lock(&self.inner));
            held.unlock_by(self.write_split(c, (right_addr, &ri), (addr, &li))).await?;
            self.cache.insert(right_addr, right);
            self.cache.insert(addr, node);
            level += 1;
            pivot = sep;
            child = right_addr;
        }
    }

    /// The node at `level` whose range holds `key`, or the root word if the tree is not that tall.
    async fn find_level<T: Transport>(
        &self,
        c: &Client<T>,
        level: u8,
        key: u64,
    ) -> IndexResult<Result<GlobalAddr, (u8, GlobalAddr)>> {
        let (height, root) = self.root(c).await?;
        if height <= level {
            return Ok(Err((height, root)));
        }
        let mut addr = root;
        loop {
            let n = self.read_internal(c, addr).await?;
            if key > n.high && !n.sibling.is_null() {
                addr = n.sibling;
            } else if n.level == level {
                return Ok(Ok(addr));
            } else {
                addr = n.child_for(key).0;
            }
        }
    }

    /// Locks the internal node at `addr` (its lock word holds only the lock bit) after queueing
    /// on the CN-local lock table; released by a WRITE of 0 or of the node's image.
    async fn lock_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<Held<'_>> {
        let lock = addr.add(self.inner.lock_offset() as u64);
        self.local_locks.acquire(c, lock, || self.retry()).await
    }
}
