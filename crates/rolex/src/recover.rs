//! Recovery from a client that died holding a base leaf's lock: a writer's, or a retrainer's
//! freeze. The lock word names its holder below the retirement bits ([`crate::layout`],
//! [`dmindex_prim::lock::kept_held_word`]); a waiter judges the holder by its lease, fences it,
//! takes the lock over by CAS from the exact word it left (keeping its RETIRING and RETIRED
//! bits, so readers go on seeing them) and asks [`LeafRepair`] for the free word.
//!
//! What the dead holder can have left, by the held word's retirement bits:
//!
//! * **Neither: a writer.** Its doorbells under the lock are `[WRITE leaf, WRITE unlock]` and
//!   `[WRITE new synonym, WRITE tail, WRITE unlock]`, all on the base's memory node (synonyms
//!   are allocated there), so they land in order and a crash lands a prefix. Each WRITE of a
//!   leaf is at most [`MAX_LEAF_WRITE`] bytes, one packet, so it lands whole or not at all. Every
//!   prefix short of the unlock leaves a whole chain: the old one; the changed leaf in place of
//!   the old; a new synonym nobody links (leaked); or the new synonym linked from a whole tail.
//!   Nothing to mend: the free word is 0.
//! * **RETIRED: a writer that found its leaf retired**, about to unlock: the free word is the
//!   retired word, RETIRING | RETIRED.
//! * **RETIRING only: a retrainer's freeze.** Fenced, it can publish nothing more, so the root
//!   word says what it did: if the current directory still holds the model, it never published
//!   and never will — the model's leaves are current, and the freeze is rolled back leaf by leaf
//!   (free word 0; the claim stays taken, so that model is not retrained again). Otherwise it
//!   published: the leaf is retired (RETIRING | RETIRED), as its retire step would have done;
//!   synonym leaves of a retired base need no bit of their own, since readers reach them only
//!   with the base's word, which says RETIRED or RETIRING.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lock::Repair;

use crate::layout::{LeafLayout, MAX_SPAN, RETIRED, RETIRING};
use crate::Rolex;

/// The largest leaf WRITE, a leaf of [`MAX_SPAN`] slots: within one 4096-byte packet.
pub const MAX_LEAF_WRITE: usize = LeafLayout::new(MAX_SPAN).data;
const _: () = assert!(MAX_LEAF_WRITE <= 4096, "a leaf WRITE lands whole or not at all");

/// The repair of a base leaf's lock word of the model whose leaf table is `table`.
pub(crate) struct LeafRepair<'a> {
    pub rolex: &'a Rolex,
    pub table: GlobalAddr,
}

impl<T: Transport> Repair<T> for LeafRepair<'_> {
    async fn free_word(&self, c: &Client<T>, _: GlobalAddr, held: u64) -> IndexResult<u64> {
        crate::bump(&self.rolex.counters.lock_repairs);
        if held & RETIRED != 0 {
            return Ok(RETIRING | RETIRED);
        }
        if held & RETIRING == 0 {
            return Ok(0);
        }
        let dir = self.rolex.cache.refresh(c).await?;
        let published = !dir.models.iter().any(|m| m.e.table == self.table);
        Ok(if published { RETIRING | RETIRED } else { 0 })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::BTreeMap;

    use dmindex_index::{PointIndex, RangeIndex};
    use dmindex_sim::{NetParams, Sim, SimConfig, Task};

    use super::*;
    use crate::retrain::Until;
    use crate::testkit::{cfg, k};

    /// A leaf of the largest span is written in one packet (the failure model's unit).
    #[test]
    fn the_largest_leaf_write_is_one_packet() {
        assert_eq!(MAX_LEAF_WRITE, 2104);
    }

    /// A retrainer that dies with its model frozen (before its publish) or published but not
    /// retired: another compute node's writer of every leaf waits on the dead retrainer's
    /// words, judges it, and rolls the freeze back or retires the leaf; a handle opened
    /// afterwards finds every write. Without the repair's publish check, the writes after a
    /// publish would land in retired leaves and be lost to the new directory.
    #[test]
    fn a_dead_retrainers_freeze_is_rolled_back_or_its_retire_finished() {
        for until in [Until::Frozen, Until::Published] {
            let net = NetParams::preset("stress").unwrap();
            let s = Sim::new(SimConfig { node_size: 64 << 20, ..SimConfig::new(7, net) }).unwrap();
            let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
            let a = s.block_on(async { Rolex::create(&dead, &cfg(), 0).await.unwrap() });
            let b = s.block_on(async { Rolex::open(&live, &cfg(), 1).await.unwrap() });
            let mut m: BTreeMap<u64, u8> = BTreeMap::new();
            for x in 1..=40 {
                s.block_on(async { a.insert(&dead, &k(x), &[1; 8]).await.unwrap() });
                m.insert(x, 1);
            }
            let root = s.block_on(async { a.root.load(&dead).await.unwrap() });
            let dir = a.cache.current();
            // The retrainer stops after the step and never renews its lease again.
            s.block_on(async {
                assert!(a.retrain_with(&dead, &dir, 0, &[], until).await.unwrap());
            });
            let moved = s.block_on(async { a.root.load(&dead).await.unwrap() }) != root;
            assert_eq!(moved, until == Until::Published, "{until:?}");
            let done = Cell::new(false);
            let w = async {
                for x in (1..=44).step_by(2) {
                    b.insert(&live, &k(x), &[2; 8]).await.unwrap();
                    m.insert(x, 2);
                }
                for x in (4..=40).step_by(4) {
                    assert!(b.delete(&live, &k(x)).await.unwrap(), "{until:?}: key {x}");
                    m.remove(&x);
                }
                done.set(true);
            };
            let out = s.run_until([Box::pin(w) as Task], s.now_ns() + 400_000_000);
            assert!(out.all_finished() && done.get(), "{until:?}: the writer is stuck: {out:?}");
            let repairs = b.counters.lock_repairs.load(std::sync::atomic::Ordering::Relaxed);
            assert!(repairs > 0, "{until:?}: the dead retrainer's locks were repaired");
            s.block_on(async {
                let fresh = Rolex::open(&live, &cfg(), 2).await.unwrap();
                for x in 1..=45 {
                    let want = m.get(&x).map(|v| vec![*v; 8]);
                    assert_eq!(fresh.search(&live, &k(x)).await.unwrap(), want, "{until:?}: {x}");
                }
                let mut out = Vec::new();
                fresh.scan(&live, &k(1), 100, &mut out).await.unwrap();
                let got: Vec<u8> = out.iter().map(|p| p.1[0]).collect();
                assert_eq!(got, m.values().copied().collect::<Vec<_>>(), "{until:?}: scan");
            });
        }
    }
}
