//! The leaf end of a descent ([`dmindex_prim::blink`] finds the leaf): the validation of the
//! leaf reached. CHIME validates by sibling: a leaf
//! reached through a cached parent must have the sibling that parent expects, else the cached
//! parent is stale and dropped; reached through a remote parent, a mismatch is a half split and
//! the key may have moved right along the sibling chain. With fence keys (sibling-based
//! validation off) the key must lie within the leaf's fences instead. Long keys sharing an
//! 8-byte prefix are told apart in `groups`.

use std::sync::atomic::Ordering;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Located;

use super::{Attempt, Insert, LockedLeaf, Tree};
use crate::layout::LockWord;
use crate::view::LeafView;

/// Where a validated READ of a leaf that lacks the key says the key lives.
pub(crate) enum Where {
    /// Nowhere: the leaf covers the key.
    Absent,
    /// Further right (half split).
    Right(GlobalAddr),
    /// The path was stale: drop the cached parent and start over.
    Stale,
}

impl Tree {
    /// Whether a walk right along the leaf chain should go on ([`dmindex_prim::blink::Blink::walk_on`]), counted.
    /// The walk's first move, from the leaf a parent read afresh named to `next`, crosses a
    /// half split, which is noted (and finished if it has lasted a lease: `smo`).
    pub(crate) async fn walk_on<T: Transport>(
        &self,
        c: &Client<T>,
        loc: &Located,
        next: GlobalAddr,
        moves: &mut Attempts,
    ) -> IndexResult<bool> {
        self.moves_right.fetch_add(1, Ordering::Relaxed);
        if let (0, None, Some(parent)) = (moves.count(), loc.cached, loc.parent) {
            self.crossed_half_split(c, loc.leaf, next, parent).await?;
        }
        self.blink.walk_on(c, loc, moves).await
    }

    /// Where `k`, absent from validated READ `buf` of a leaf reached through `loc`, lives:
    /// sibling-based validation compares the sibling with the one the parent expects; with
    /// fence keys (sibling-based validation off) the key must lie within them.
    pub(crate) fn judge(&self, loc: &Located, buf: &impl LeafView, k: u64) -> Where {
        let (sib, _) = buf.meta().expect("validated read has a replica");
        if self.leaf.kind.fenced {
            let (low, high) = buf.fences().expect("validated read has a replica");
            return if (low..=high).contains(&k) {
                Where::Absent
            } else if loc.cached.is_none() && k > high && !sib.is_null() {
                Where::Right(sib)
            } else {
                Where::Stale
            };
        }
        if sib == loc.expected {
            Where::Absent
        } else if loc.cached.is_some() {
            Where::Stale
        } else if sib.is_null() {
            Where::Absent
        } else {
            Where::Right(sib)
        }
    }

    /// Validates leaf `leaf`, locked and READ into `buf` for insert `ins`: `Ok(leaf)`, still
    /// locked, if the key belongs there, else what the attempt does next (the leaf unlocked).
    /// With fence keys the key must lie within them. Otherwise a sibling other than the one the
    /// parent expects means a stale cached parent (start over) or, reached through a remote
    /// parent, a half split: the key moves right unless the leaf still covers it.
    pub(crate) async fn validate_insert<'t, T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: LockedLeaf<'t>,
        buf: &impl LeafView,
    ) -> IndexResult<Result<LockedLeaf<'t>, Attempt>> {
        if self.leaf.kind.fenced {
            return self.outside_fences(c, ins, leaf, buf).await;
        }
        let (sib, _) = buf.meta().expect("validated read has a replica");
        if sib == ins.loc.expected {
            return Ok(Ok(leaf));
        }
        if ins.loc.cached.is_some() {
            self.unlock_leaf(c, leaf).await?;
            self.blink.invalidate(&ins.loc);
            return Ok(Err(Attempt::Restart));
        }
        if !sib.is_null() && !self.belongs(c, &leaf, buf, ins.k).await? {
            self.unlock_leaf(c, leaf).await?;
            self.retry();
            return Ok(Err(Attempt::Right(sib)));
        }
        Ok(Ok(leaf))
    }

    /// With fence keys: `Ok(leaf)`, still locked, if insert `ins`'s key lies within the fences
    /// of `leaf` (READ into `buf`), else what to do next (the leaf unlocked).
    async fn outside_fences<'t, T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: LockedLeaf<'t>,
        buf: &impl LeafView,
    ) -> IndexResult<Result<LockedLeaf<'t>, Attempt>> {
        let next = match self.judge(&ins.loc, buf, ins.k) {
            Where::Absent => return Ok(Ok(leaf)),
            Where::Right(sib) => {
                self.retry();
                Attempt::Right(sib)
            }
            Where::Stale => {
                self.blink.invalidate(&ins.loc);
                Attempt::Restart
            }
        };
        self.unlock_leaf(c, leaf).await?;
        Ok(Err(next))
    }

    /// Whether `k` belongs to locked leaf `leaf` (READ into `buf`) although its sibling is not
    /// the expected one: yes if it is at most a key the leaf holds (argmax, when read) or at
    /// most its upper bound.
    async fn belongs<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: &LockedLeaf<'_>,
        buf: &impl LeafView,
        k: u64,
    ) -> IndexResult<bool> {
        if let Some(m) = self.argmax_key(buf, leaf.lw) {
            if m != 0 && k <= m {
                return Ok(true);
            }
        }
        Ok(k <= self.read_bound(c, leaf.addr).await?)
    }

    /// The key at the lock word `lw`'s argmax, if that slot was read into `buf`.
    pub(super) fn argmax_key(&self, buf: &impl LeafView, lw: LockWord) -> Option<u64> {
        (lw.argmax < self.leaf.span && buf.is_loaded(lw.argmax)).then(|| buf.key(lw.argmax))
    }
}
