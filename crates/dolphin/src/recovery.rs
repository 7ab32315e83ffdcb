//! What Dolphin rolls forward when a client dies inside an SMO ([`dmindex_prim::spear::recover`]
//! finds the dead, fences them and hands a dead claim over; this module makes the leaves whole).
//!
//! # What a dead SMO can leave
//!
//! A compaction is one WRITE of the leaf posted before its release: it landed whole or not at
//! all, and either image is a leaf. A split of `L` into `L` and a new leaf `N` goes: claim `L`;
//! `[WRITE N (born claimed, its born record naming the splitter), READ special node]`; CAS `N`
//! into the special node; `[WRITE L shrunk, …, FAA L, intent done, FAA N, born record 0]`. Dead
//! anywhere in it, it leaves one of:
//!
//! | state | `L` | `N` | repair |
//! |---|---|---|---|
//! | before the CAS | claimed, whole | unreachable | release `L` (`N` is garbage) |
//! | after the CAS | claimed, not shrunk | published, claimed | shrink `L`, release it; then release `N` |
//! | part of the last doorbell | claimed, shrunk | claimed | release `L`; release `N` |
//! | the rest of it | released | claimed, or its record not cleared | release `N` |
//!
//! The keys `≥ N.lo` are in both leaves until `L` shrinks, frozen by the two claims, so `N` may
//! only be opened once `L` has shrunk; `L` never waits for `N`.
//!
//! * Taking over `L` ([`Recover::finish`]): the special node, read afresh, names by floor of
//!   `L.hi` a leaf other than `L` exactly when a split of `L` published it and has not shrunk
//!   `L` (a split shrinks `L` before it releases anything, and no other leaf's low key can fall
//!   inside a claimed leaf's range). Then `L` is rewritten from its own frozen image: its live
//!   pairs below `N.lo`, `hi = N.lo − 1`, the next epoch, as the split would have (the insert
//!   that split it is dropped: it never completed).
//! * Before taking over `N` ([`Recover::prepare`]): a leaf whose born record is set may be a
//!   split's new leaf whose old leaf is not shrunk; the floor of `N.lo − 1` is that old leaf.
//!   While it covers `N.lo` it is claimed by the same dead splitter, and the repairer repairs it
//!   first, as any waiter on it would. Taking `N` over then clears its born record.
//!
//! The inserted key, if it moved to `N`, stays pending there (its cell EMPTY): invisible, and
//! adopted by the next insert of that key, as a crashed insert's slot is. A multi-line cell a
//! dead writer left locked (its share dropped before the split claimed the leaf) is finished
//! from its redo record in the frozen image first ([`crate::redo::patch`]). A leaf longer than
//! a packet, whose in-place rewrite a dead SMO may have left part landed, is first rewritten
//! from the copy its redo word names ([`crate::smo_redo`]).

use std::future::Future;
use std::pin::Pin;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::spear::{self, Recover, Word};

use crate::leaf::LeafImage;
use crate::leaf::{encode, State, BORN, LO, SPEAR};
use crate::ops::Route;
use crate::smo::next_epoch;
use crate::{redo, smo_redo, sync, Dolphin};

fn corrupt(what: &str, leaf: GlobalAddr) -> IndexError {
    IndexError::Corrupt(format!("dolphin: {what} (leaf at {leaf:?})"))
}

impl Dolphin {
    /// The leaf the special node names for `key`, read afresh (not from the cache's copy).
    async fn fresh_leaf<T: Transport>(&self, c: &Client<T>, key: u64) -> IndexResult<GlobalAddr> {
        if let Route::Leaf { special, .. } = self.route(c, key).await? {
            self.cache.invalidate(special);
        }
        match self.route(c, key).await? {
            Route::Leaf { leaf, .. } => Ok(leaf),
            Route::NoPrefix(_) => {
                Err(IndexError::Corrupt(format!("dolphin: no leaf for key {key:#x} to repair")))
            }
        }
    }
}

impl<T: Transport> Recover<T> for Dolphin {
    fn born_record(&self, node: GlobalAddr) -> Option<GlobalAddr> {
        Some(node.add(BORN as u64))
    }

    async fn prepare(&self, c: &Client<T>, node: GlobalAddr, born: u64) -> IndexResult<()> {
        if born == 0 {
            return Ok(());
        }
        let (shape, sc) = (&self.shape, &self.counters.sync);
        let mut buf = self.leaf_buf(c);
        let lo = sync::read(c, shape, node, &mut buf, sc).await?.lo();
        if lo & 0xFF == 0 {
            // A prefix's first leaf: no split made it.
            return Ok(());
        }
        let left = self.fresh_leaf(c, lo - 1).await?;
        // Ends after two looks: the wait between them releases the old leaf's claim, which a
        // split (or the repair of one) only does once the leaf ends below `lo`.
        for _ in 0..2 {
            // One READ: a leaf longer than a packet may be torn by its dead splitter's rewrite,
            // which only the wait below (its repair) finishes.
            c.read(left, &mut buf[..shape.bytes]).await?;
            if let Ok(img) = LeafImage::check(shape, &buf) {
                if img.hi() < lo {
                    return Ok(());
                }
                if !Word(img.spear()).is_claimed() {
                    break;
                }
            }
            // The old leaf's repair is this same kind of wait: boxed, as it may come back here
            // for the leaf that one split from.
            let wait: Pin<Box<dyn Future<Output = IndexResult<()>> + '_>> =
                Box::pin(spear::wait_unclaimed(c, left.add(SPEAR as u64), left, self));
            wait.await?;
        }
        Err(corrupt("a split's old leaf still covers its new leaf unclaimed", left))
    }

    async fn finish(&self, c: &Client<T>, _: GlobalAddr, node: GlobalAddr) -> IndexResult<()> {
        let (shape, sc) = (&self.shape, &self.counters.sync);
        let mut buf = self.leaf_buf(c);
        // Claimed by this client: the image is final once a rewrite the dead SMO left under
        // way is finished from its copy (leaves longer than a packet), but for multi-line cells
        // a dead writer left locked, which their records finish.
        smo_redo::finish(c, shape, node).await?;
        sync::read(c, shape, node, &mut buf, sc).await?;
        redo::patch(c, self.redo.as_ref(), shape, node, &mut buf).await?;
        let img = LeafImage::check(shape, &buf)
            .map_err(|_| corrupt("a claimed leaf does not check", node))?;
        let (lo, hi) = (img.lo(), img.hi());
        let right = self.fresh_leaf(c, hi).await?;
        if right == node {
            if img.born() != 0 {
                c.write(node.add(BORN as u64), &[0; 8]).await?;
            }
            return Ok(());
        }
        let mut rbuf = self.leaf_buf(c);
        let at = sync::read(c, shape, right, &mut rbuf, sc).await?.lo();
        if !(lo < at && at <= hi) {
            return Err(corrupt("the special node names a leaf inside a claimed one", node));
        }
        // The split's rewrite of the old leaf, from its frozen image.
        let w = shape.value;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (k, j) in img.live().filter(|&(k, _)| k < at) {
            if !img.cell_whole(j) {
                return Err(corrupt("a claimed leaf with a torn cell", node));
            }
            keys.push((k, values.len()));
            img.value_into(j, &mut values);
        }
        keys.sort_unstable();
        let pairs = keys.iter().map(|&(k, v)| (k, &values[v..v + w], State::Live));
        let mut out = Vec::with_capacity(shape.bytes);
        let (rev, nv, cvs) = (img.rev(), next_epoch(img.nv()), img.cvs());
        encode(shape, rev, 0, lo, at - 1, nv, &cvs, pairs, &mut out);
        c.write(node.add(LO as u64), &out[LO..]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
