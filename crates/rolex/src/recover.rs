//! Recovery from a client that died holding a base leaf's lock: a writer's, or a retrainer's
//! freeze. The lock word names its holder below the retirement bits ([`crate::layout`],
//! [`dmindex_prim::lock::kept_held_word`]); a waiter judges the holder by its lease, fences it,
//! takes the lock over by CAS from the exact word it left (keeping its RETIRING and RETIRED
//! bits, so readers go on seeing them) and asks `LeafRepair` for the free word.
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
//!   (free word 0). Otherwise it
//!   published: the leaf is retired (RETIRING | RETIRED), as its retire step would have done;
//!   synonym leaves of a retired base need no bit of their own, since readers reach them only
//!   with the base's word, which says RETIRED or RETIRING.
//!
//! # A dead retrainer's claim
//!
//! The claim word names the claimer's member word. A client whose insert asks for a retrain
//! of a model another member claimed looks at that claim at most once a half lease
//! (`Claims`): while the current directory still holds the model, the claimer is judged by
//! the lease rules across those looks ([`Sighting`]: three leases without a heartbeat; a live
//! retrainer renews as it goes). Fenced, it can publish nothing more, so a directory read after
//! the fence that still holds the model means it never will: the client takes the claim over
//! by CAS from exactly the dead word (one winner) and retrains the model itself, taking each
//! leaf the dead freeze left over at once (rolled back: free word 0). A model that left the
//! directory was published: its claim stays, done.

use std::sync::{Arc, Mutex};

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lease::{self, Sighting, Verdict};
use dmindex_prim::lock::Repair;

use crate::cache::Dir;
use crate::layout::{LeafLayout, MAX_SPAN, RETIRED, RETIRING};
use crate::Rolex;

/// Claims a handle found another member holding on models still in the directory: the leaf
/// table, the claim word, the sighting of its member, and when it was last looked at (this
/// client's clock). A few entries: a claim outlives its retrain only when its claimer died.
#[derive(Debug)]
pub(crate) struct Claims {
    seen: Mutex<Vec<(GlobalAddr, u64, Sighting, u64)>>,
}

/// Claims a handle watches at once (the oldest is forgotten first).
const WATCHED: usize = 8;

impl Claims {
    pub(crate) fn new() -> Claims {
        Claims { seen: Mutex::new(Vec::with_capacity(WATCHED)) }
    }

    /// The sighting of claim `word` on `table`, if this look is due (none within half a lease
    /// of the last one); a new one for a claim not watched yet.
    fn due(&self, table: GlobalAddr, word: u64, now: u64, lease: u64) -> Option<Sighting> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.iter_mut().find(|e| e.0 == table && e.1 == word) {
            Some(e) if now.saturating_sub(e.3) < lease / 2 => None,
            Some(e) => {
                e.3 = now;
                Some(e.2)
            }
            None => {
                if seen.len() == WATCHED {
                    seen.remove(0);
                }
                seen.push((table, word, Sighting::new(), now));
                Some(Sighting::new())
            }
        }
    }

    /// Keeps `sighting` for claim `word` on `table`, or forgets the claim (`None`).
    fn keep(&self, table: GlobalAddr, word: u64, sighting: Option<Sighting>) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = seen.iter().position(|e| e.0 == table && e.1 == word) {
            match sighting {
                Some(s) => seen[i].2 = s,
                None => {
                    seen.swap_remove(i);
                }
            }
        }
    }
}

impl Rolex {
    /// Model `table`'s claim is `word`, another member's: the current directory, when that
    /// member is fenced and the directory read after the fence still holds the model (the
    /// caller may take the claim over); `None` to leave the claim alone (the claimer may be
    /// alive, or it published, or this look is not due).
    pub(crate) async fn dead_claim<T: Transport>(
        &self,
        c: &Client<T>,
        table: GlobalAddr,
        word: u64,
    ) -> IndexResult<Option<Arc<Dir>>> {
        let (now, lease) = (c.now_ns(), c.transport().lease_ns());
        let holds = |d: &Dir| d.models.iter().any(|m| m.e.table == table);
        let Some(mut sighting) = self.claims.due(table, word, now, lease) else { return Ok(None) };
        if !holds(&*self.cache.refresh(c).await?) {
            // Published: the claim is done for good.
            self.claims.keep(table, word, None);
            return Ok(None);
        }
        let (slot, _) = lease::parse_member(word);
        let mut b = [0u8; 16];
        c.read(lease::slot_addr(slot), &mut b).await?;
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if sighting.look(c, word, word, w(0), w(8)).await? == Verdict::Wait {
            self.claims.keep(table, word, Some(sighting));
            return Ok(None);
        }
        self.claims.keep(table, word, None);
        // Fenced: the directory can no longer change for this model but by another retrain.
        let dir = self.cache.refresh(c).await?;
        Ok(holds(&dir).then_some(dir))
    }
}

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

    use dmindex_index::{IndexConfig, PointIndex, RangeIndex};
    use dmindex_sim::{NetParams, Sim, SimConfig, Task};

    use super::*;
    use crate::retrain::Until;
    use crate::testkit::{cfg, k};

    /// A retrainer that dies holding its claim, its model frozen: a writer whose inserts grow
    /// that model's synonyms (so ask for its retrain) judges the claimer, takes the claim over
    /// once it is fenced and retrains the model itself; every key then reads as written
    /// through a fresh handle. Without the takeover the model is never retrained again.
    #[test]
    fn a_dead_retrainers_claim_is_taken_over_and_its_model_retrained() {
        let net = NetParams::preset("stress").unwrap();
        let s = Sim::new(SimConfig { node_size: 64 << 20, ..SimConfig::new(7, net) }).unwrap();
        let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let a = s.block_on(async { Rolex::create(&dead, &cfg(), 0).await.unwrap() });
        // The same index, retraining once a model grows a synonym leaf.
        let retraining = IndexConfig::with_options(&[
            ("span", "4"),
            ("epsilon", "2"),
            ("fill", "3"),
            ("retrain", "1"),
        ]);
        let b = s.block_on(async { Rolex::open(&live, &retraining, 1).await.unwrap() });
        let mut m: BTreeMap<u64, u8> = BTreeMap::new();
        for x in 1..=40 {
            s.block_on(async { a.insert(&dead, &k(x), &[1; 8]).await.unwrap() });
            m.insert(x * 1000, 1);
        }
        let root = s.block_on(async { a.root.load(&dead).await.unwrap() });
        let dir = a.cache.current();
        s.block_on(async {
            assert!(a.retrain_with(&dead, &dir, 0, &[], Until::Frozen).await.unwrap());
        });
        let lease = live.transport().lease_ns();
        let w = async {
            // Keys between the loaded ones, so the model's leaves overflow into synonyms; a
            // pause between them, so the claim is looked at more than three leases apart.
            for x in 1..=40u64 {
                b.insert(&live, &(x * 1000 + 500).to_be_bytes(), &[3; 8]).await.unwrap();
                m.insert(x * 1000 + 500, 3);
                live.pause(lease / 2).await;
            }
        };
        let out = s.run_until([Box::pin(w) as Task], s.now_ns() + 4_000_000_000);
        assert!(out.all_finished(), "the writer is stuck: {out:?}");
        let taken = b.counters.claims_taken_over.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(taken, 1, "the dead claim was taken over once");
        s.block_on(async {
            assert_ne!(a.root.load(&live).await.unwrap(), root, "the model was retrained");
            let fresh = Rolex::open(&live, &cfg(), 2).await.unwrap();
            for (&x, v) in &m {
                let got = fresh.search(&live, &x.to_be_bytes()).await.unwrap();
                assert_eq!(got, Some(vec![*v; 8]), "key {x}");
            }
        });
    }

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
