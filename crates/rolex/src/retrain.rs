//! Retraining one model, one-sided, by the client whose insert grew the model's synonym leaves
//! to the bound (crate docs: the protocol and why it is linearizable).
//!
//! 1. **Claim** the model: CAS its leaf table's claim word 0 → this client's member word. A
//!    model is retrained at most once (its replacements are new models); a client that loses
//!    the claim goes on, unless the claimer is judged dead with the model never published: then
//!    it takes the claim over ([`crate::recover`]) and retrains in its place.
//! 2. **Freeze**: masked-CAS every base leaf's lock word to LOCK | RETIRING and this
//!    retrainer's name, in leaf order (doorbells of up to 16 CASes; a leaf a writer holds is
//!    waited for, and taken over if the writer is judged dead, [`crate::recover`]). Writers hold
//!    one lock at a time and never wait while holding one, so this ends. From here to the
//!    retire the retrainer renews its lease as it goes, so that waiters do not judge it dead.
//! 3. **Read** every chain: nothing can change them now.
//! 4. **Train and write** the new models, leaves and leaf tables out of place ([`crate::build`]).
//! 5. **Publish**: CAS the root word from the directory holding the model to a new directory
//!    with the model replaced by the new ones (new pages for its page, a new top array, the
//!    other pages shared). A CAS lost to another model's retrain is retried on the directory
//!    that won (each loss is another retrain's progress).
//! 6. **Retire**: WRITE RETIRING | RETIRED (unlocked) to every base leaf and RETIRED to every
//!    synonym leaf of the old model, for good; writers waiting on a base lock get it, see
//!    RETIRED and start over on the new directory.

use std::sync::Arc;

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::backoff::Backoff;
use dmindex_prim::doorbell;
use dmindex_prim::lease::{self, Watch};
use dmindex_prim::lock;

use crate::build::{self, Pair};
use crate::cache::{read_dir, Dir};
use crate::layout::{self, DirEntry, LOCK, RETIRED, RETIRING};
use crate::ops::{Pass, Scratch};
use crate::recover::LeafRepair;
use crate::Rolex;

/// The masked CAS that freezes a base leaf for retrainer word `held` (a kept held word with
/// RETIRING): if the lock bit is clear, every bit but RETIRED swapped in.
fn freeze_op(held: u64) -> AtomicOp {
    AtomicOp::MaskedCas { compare: 0, compare_mask: LOCK, swap: held, swap_mask: !RETIRED }
}

/// Where a retrain stops: when done, or (tests) as a retrainer that crashed after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Until {
    Retired,
    #[cfg_attr(not(test), allow(dead_code))]
    Frozen,
    #[cfg_attr(not(test), allow(dead_code))]
    Published,
}

impl Rolex {
    /// Retrains model `j` of `dir` (see the module docs); returns at once if another client
    /// claimed it.
    pub(crate) async fn retrain<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
        j: usize,
    ) -> IndexResult<()> {
        self.retrain_with(c, dir, j, &[], Until::Retired).await.map(drop)
    }

    /// Retrains model `j` of `dir` on its pairs and `extra` (sorted, keys not in the model);
    /// whether this client claimed it.
    pub(crate) async fn retrain_with<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
        j: usize,
        extra: &[Pair],
        until: Until,
    ) -> IndexResult<bool> {
        let table = dir.models[j].e.table;
        let member = lease::renew_if_due(c).await?;
        let claimed = c.cas(table, 0, member).await?;
        let taken: Arc<Dir>;
        let (dir, j, dead) = match claimed {
            0 => (dir, j, None),
            _ => {
                // Claimed: by a live retrainer (go on), or by one fenced before it published.
                let Some(cur) = self.dead_claim(c, table, claimed).await? else {
                    return Ok(false);
                };
                if c.cas(table, claimed, member).await? != claimed {
                    return Ok(false);
                }
                crate::bump(&self.counters.claims_taken_over);
                taken = cur;
                let Some(j) = taken.models.iter().position(|m| m.e.table == table) else {
                    return Err(IndexError::Corrupt(format!("model {table} left the directory")));
                };
                (&*taken, j, Some(claimed))
            }
        };
        let m = &dir.models[j];
        crate::bump(&self.counters.retrains);
        let t = self.cache.table(c, m).await?;
        // Every leaf frozen names this retrainer (one acquisition), so that a waiter can judge
        // it dead and roll the freeze back or finish the retire ([`crate::recover`]).
        let held = lock::next_kept_word(c).await? | RETIRING;
        for chunk in t.leaves.chunks(MAX_BATCH) {
            self.freeze(c, chunk, held, m.e.table, dead).await?;
            lease::renew_if_due(c).await?;
        }
        if until == Until::Frozen {
            return Ok(true);
        }
        let (mut pairs, synonyms) = self.read_model(c, &t.leaves).await?;
        if !extra.is_empty() {
            pairs.extend_from_slice(extra);
            pairs.sort_unstable_by_key(|p| p.0);
            if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(IndexError::InvalidKey("a bulk key is already in the index".into()));
            }
        }
        crate::add(&self.counters.retrained_keys, pairs.len() as u64);
        // A pre-train (keys given) fills leaves as configured; a retrain leaves room for the
        // inserts that overflowed the model.
        let fill = if extra.is_empty() { self.shape.refill() } else { self.shape.fill };
        let entries = build::build(c, &self.shape, fill, m.e.low, &pairs).await?;
        self.publish(c, dir, &m.e, &entries).await?;
        if until == Until::Published {
            return Ok(true);
        }
        let bases = t.leaves.iter().map(|&a| (a, RETIRING | RETIRED));
        let words: Vec<(GlobalAddr, [u8; 8])> = bases
            .chain(synonyms.iter().map(|&a| (a, RETIRED)))
            .map(|(a, w)| (self.layout.lock_addr(a), w.to_le_bytes()))
            .collect();
        let mut ops: Vec<BatchOp<'_>> =
            words.iter().map(|(addr, w)| BatchOp::Write { addr: *addr, data: w }).collect();
        doorbell::post_per_node(c, &mut ops).await?;
        self.cache.refresh(c).await?;
        Ok(true)
    }

    /// Freezes base leaves `leaves` (one node) of the model whose leaf table is `table`, naming
    /// `held`: one doorbell of masked CASes, then each one a writer held, again until it is
    /// free or its writer is found dead and the lock taken over. `dead`: the claim word of a
    /// fenced retrainer whose claim this one took over; a leaf its freeze left is taken over
    /// at once (rolled back: the model was never published).
    async fn freeze<T: Transport>(
        &self,
        c: &Client<T>,
        leaves: &[GlobalAddr],
        held: u64,
        table: GlobalAddr,
        dead: Option<u64>,
    ) -> IndexResult<()> {
        let freeze = freeze_op(held);
        let mut ops: Vec<BatchOp<'_>> =
            leaves.iter().map(|&a| BatchOp::atomic(self.layout.lock_addr(a), freeze)).collect();
        doorbell::post(c, &mut ops).await?;
        let repair = LeafRepair { rolex: self, table };
        for op in &ops {
            let BatchOp::Atomic { addr, old, .. } = *op else { unreachable!("atomics only") };
            let mut old = old;
            let (mut backoff, mut watch) = (Backoff::new(), Watch::new());
            // Ends when the writer holding the leaf lets go, or is judged dead and this
            // retrainer takes its lock over (or the backoff's bound).
            while old & LOCK != 0 {
                let seen = (addr, old, held);
                let fenced = dead.is_some() && lock::kept_holder(old) == dead;
                let free = match fenced {
                    true => lock::take_over_kept(c, seen, &repair).await?,
                    false => lock::judge_kept(c, seen, &mut watch, &backoff, &repair).await?,
                };
                if let Some(free) = free {
                    old = free;
                    break;
                }
                backoff.failed(c, addr, "leaf lock").await?;
                old = c.atomic(addr, freeze).await?;
            }
            if old & (RETIRED | RETIRING) != 0 {
                return Err(IndexError::Corrupt(format!("{addr}: a claimed model was retired")));
            }
        }
        Ok(())
    }

    /// Every pair of the frozen model's chains, sorted, and its synonym leaves.
    async fn read_model<T: Transport>(
        &self,
        c: &Client<T>,
        leaves: &[GlobalAddr],
    ) -> IndexResult<(Vec<Pair>, Vec<GlobalAddr>)> {
        let d = self.layout.decoded;
        let (mut pairs, mut synonyms) = (Vec::new(), Vec::new());
        let mut s = Scratch::default();
        let mut attempts = Attempts::new();
        for chunk in leaves.chunks(MAX_BATCH) {
            s.addrs.clear();
            s.addrs.extend_from_slice(chunk);
            self.read_from(c, &mut s, 0, &mut attempts).await?;
            lease::renew_if_due(c).await?;
            for (b, &base) in chunk.iter().enumerate() {
                if let Pass::Stale = self.walk(c, &mut s, b, &mut attempts).await? {
                    return Err(IndexError::Corrupt(format!("a retired leaf in {base}")));
                }
                synonyms.extend(s.chain[1..].iter().map(|&i| s.addrs[i]));
                for &i in &s.chain {
                    let img = s.leaf(d, i);
                    pairs.extend(
                        (0..layout::count(img))
                            .map(|x| (layout::key(img, x), layout::value(img, x))),
                    );
                }
            }
        }
        pairs.sort_unstable_by_key(|p| p.0);
        if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(IndexError::Corrupt("a key in two leaves of one model".into()));
        }
        Ok((pairs, synonyms))
    }

    /// CASes the root word to a directory with model `old` replaced by `entries`, starting
    /// from `dir`: a new top array and new pages for the model's page.
    async fn publish<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
        old: &DirEntry,
        entries: &[DirEntry],
    ) -> IndexResult<()> {
        let mut root = dir.root;
        let mut fresh = None;
        // Ends when the CAS wins; each loss is another retrain's publish (progress).
        loop {
            let cur: &Dir = fresh.as_ref().unwrap_or(dir);
            let Some(pos) = cur.position(old) else {
                return Err(IndexError::Corrupt(format!("model {} left the directory", old.table)));
            };
            // The model's page is rewritten (as one page or more), the others are kept.
            let p = cur.page_of(pos);
            let page = cur.pages[p];
            let end = page.first + crate::layout::parse_root(page.word).1;
            let models: Vec<DirEntry> = cur.models[page.first..pos]
                .iter()
                .map(|m| m.e)
                .chain(entries.iter().copied())
                .chain(cur.models[pos + 1..end].iter().map(|m| m.e))
                .collect();
            let new_pages = build::write_pages(c, &models).await?;
            let top: Vec<(u64, u64)> = cur.pages[..p]
                .iter()
                .map(|pg| (pg.low, pg.word))
                .chain(new_pages)
                .chain(cur.pages[p + 1..].iter().map(|pg| (pg.low, pg.word)))
                .collect();
            let new = build::write_top(c, &top).await?;
            lease::renew_if_due(c).await?;
            let was = c.cas(self.root.addr(), root, new).await?;
            if was == root {
                return Ok(());
            }
            crate::bump(&self.counters.publish_retries);
            root = was;
            fresh = Some(read_dir(c, root, Some(cur)).await?);
        }
    }

    /// Trains the models once on `pairs` (sorted, distinct, non-zero keys; values of the
    /// index's value length), in an index that was never retrained: retrains its one model on
    /// its pairs and these (linearizable like any retrain). CHIME's harness loads its ROLEX so
    /// (`PointIndex::bulk_load` decodes the keys and calls this).
    pub async fn pretrain<T: Transport, V: AsRef<[u8]>>(
        &self,
        c: &Client<T>,
        pairs: &[(u64, V)],
    ) -> IndexResult<()> {
        let sorted = pairs.windows(2).all(|w| w[0].0 < w[1].0);
        if !sorted || pairs.first().is_some_and(|p| p.0 == 0) {
            return Err(IndexError::InvalidKey(
                "bulk keys must be sorted, distinct, non-zero".into(),
            ));
        }
        let mut slots = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            slots.push((*k, self.slot_of(c, v.as_ref()).await?));
        }
        let dir = self.cache.refresh(c).await?;
        if dir.models.len() != 1 || !self.retrain_with(c, &dir, 0, &slots, Until::Retired).await? {
            return Err(IndexError::Config("a pre-train needs an index fresh from create".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::{PointIndex, RangeIndex};

    use super::*;
    use crate::testkit::{cfg, k};

    /// A pre-train fills leaves to `fill`; a retrain after inserts overflowed a model leaves a
    /// quarter of each leaf free (6 of 8 slots), and every key stays found.
    #[test]
    fn a_retrain_leaves_room_that_a_pre_train_may_not() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let opts = [("span", "8"), ("epsilon", "4"), ("fill", "8"), ("retrain", "25")];
            let config = dmindex_index::IndexConfig::with_options(&opts);
            let a = Rolex::create(&c, &config, 0).await.unwrap();
            let evens: Vec<(u64, [u8; 8])> = (1..=400u64).map(|x| (2 * x * 1000, [1; 8])).collect();
            a.pretrain(&c, &evens).await.unwrap();
            let per_leaf = |a: &Rolex| -> Vec<u16> {
                a.cache.current().models.iter().map(|m| m.e.per_leaf).collect()
            };
            assert!(per_leaf(&a).iter().all(|&n| n == 8), "{:?}", per_leaf(&a));
            // Odd keys between the full leaves' keys: each grows a synonym leaf, until the
            // model is retrained.
            let retrains = || a.counters.retrains.load(std::sync::atomic::Ordering::Relaxed);
            let before = retrains();
            let mut x = 1u64;
            while retrains() == before && x < 800 {
                a.insert(&c, &k(x), &[2; 8]).await.unwrap();
                x += 2;
            }
            assert!(retrains() > before, "no retrain after {x} inserts");
            // The keys fit one model; its replacements hold 6 keys a leaf.
            let after = per_leaf(&a);
            assert!(after.iter().all(|&n| n == 6), "{after:?}");
            for y in (1..=400u64).map(|x| 2 * x).chain((1..x).step_by(2)) {
                assert!(a.search(&c, &k(y)).await.unwrap().is_some(), "key {y}");
            }
        }]);
    }

    /// A retrainer stopped after its freeze (crashed, or slow): the old leaves stay current
    /// for searches and scans, and the root word is unchanged.
    #[test]
    fn a_frozen_model_still_serves_searches_and_scans() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let a = Rolex::create(&c, &cfg(), 0).await.unwrap();
            for x in 1..=40 {
                a.insert(&c, &k(x), &[x as u8; 8]).await.unwrap();
            }
            let dir = a.cache.current();
            assert!(a.retrain_with(&c, &dir, 0, &[], Until::Frozen).await.unwrap());
            for x in 1..=41 {
                let want = (x <= 40).then(|| vec![x as u8; 8]);
                assert_eq!(a.search(&c, &k(x)).await.unwrap(), want, "key {x}");
            }
            let mut out = Vec::new();
            a.scan(&c, &k(5), 10, &mut out).await.unwrap();
            assert_eq!(out.iter().map(|p| p.1[0]).collect::<Vec<_>>(), (5..15).collect::<Vec<_>>());
            assert_eq!(a.root.load(&c).await.unwrap(), dir.root, "not published");
            assert!(a.counters.retiring_checks.load(std::sync::atomic::Ordering::Relaxed) > 0);
        }]);
    }

    /// A retrain published but not yet retired: a handle on the old directory READs frozen
    /// leaves that are out of date once another handle writes through the new models; the
    /// RETIRING bit and one READ of the root word send it to the new directory.
    #[test]
    fn a_frozen_leaf_after_the_publish_sends_readers_to_the_new_models() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let a = Rolex::create(&c, &cfg(), 0).await.unwrap();
            for x in 1..=40 {
                a.insert(&c, &k(x), &[1; 8]).await.unwrap();
            }
            let dir = a.cache.current();
            let b = Rolex::open(&c, &cfg(), 1).await.unwrap();
            let scanner = Rolex::open(&c, &cfg(), 1).await.unwrap();
            let old = b.cache.current();
            assert!(a.retrain_with(&c, &dir, 0, &[], Until::Published).await.unwrap());
            let fresh = Rolex::open(&c, &cfg(), 2).await.unwrap();
            assert_ne!(fresh.cache.current().root, old.root);
            assert!(fresh.update(&c, &k(7), &[2; 8]).await.unwrap());
            fresh.insert(&c, &k(77), &[3; 8]).await.unwrap();
            assert!(fresh.delete(&c, &k(8)).await.unwrap());
            assert_eq!(b.search(&c, &k(7)).await.unwrap(), Some(vec![2; 8]));
            assert_eq!(b.search(&c, &k(8)).await.unwrap(), None);
            assert_eq!(b.search(&c, &k(77)).await.unwrap(), Some(vec![3; 8]));
            assert_ne!(b.cache.current().root, old.root, "b moved to the new directory");
            let mut out = Vec::new();
            scanner.scan(&c, &k(6), 3, &mut out).await.unwrap();
            let got: Vec<_> = out.iter().map(|p| (p.0.clone(), p.1[0])).collect();
            assert_eq!(got, [(k(6).to_vec(), 1), (k(7).to_vec(), 2), (k(9).to_vec(), 1)]);
        }]);
    }
}
