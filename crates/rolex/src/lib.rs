//! # ROLEX: a learned index over fixed-size leaves on disaggregated memory
//!
//! After *ROLEX: A Scalable RDMA-oriented Learned Key-Value Store for Disaggregated Memory
//! Systems* (FAST '23), the learned baseline of CHIME's Fig. 12. Keys are 8-byte integers;
//! values of up to 8 bytes are stored inline in the leaves, longer ones in value blocks
//! ([`dmindex_prim::kv_block`]) named by the leaf. Byte layouts: [`layout`].
//!
//! ## Structure
//!
//! * **Leaves**: sorted arrays of `span` slots (16 by default), one lock word each, written whole
//!   with cache-line versions so a READ that overlaps a write is refused as torn.
//! * **Models**: piecewise-linear, built by the optimal streaming PLA with error `epsilon`
//!   (16 by default; [`pla`]). Each model covers a key range `[low, next model's low)` and
//!   has its own **leaf table** in memory-node memory, the addresses of its base leaves; a
//!   model trained on a given key set (the bulk load) puts `fill` keys (¾ of the span by
//!   default) in each leaf, a retrain after inserts at most ¾ of the span, so position `p` is in
//!   leaf `p / fill` (each model records its own), and each leaf's **fence** is its first key.
//!   Fences never change.
//! * **Synonym leaves**: a base leaf that is full grows a chain of synonym leaves on the same
//!   memory node. A key lives in the chain of the last base leaf whose fence is at most the key,
//!   for the model's whole life (ROLEX's data-movement constraint), so inserts never invalidate a
//!   prediction.
//! * **Directory**: the models' entries (low, prediction, leaf table) in immutable pages of up
//!   to 64 models, under an immutable top array the root word names; a retrain rewrites its
//!   model's page and the top array. A compute node caches the models and, per model, the leaf
//!   table (8 bytes a leaf) and, once it has seen a synonym of one of the table's leaves, the
//!   first synonym leaf of each base as last seen (8 bytes a leaf more) — [`cache`], which
//!   keeps to the configured budget by evicting leaf tables.
//!
//! ## Prediction and the leaves read
//!
//! A key maps to its model by bisection over the cached `low`s. The model predicts position
//! `p = intercept + slope · (key − anchor)`, monotone in the key. Every trained key is within
//! `ε + ½` of its position (the PLA's bound plus the check of its `f64` line), and a key that was
//! not trained lies between two trained keys `a` (position `i`) and `b` (position `i + 1`) of its
//! model (or before the first, or after the last), and belongs to leaf `i / f`, `a`'s leaf, where
//! `f` is the keys a leaf the model was built with (its directory entry's `per_leaf`).
//! By monotonicity `p(a) ≤ p(key) ≤ p(b)`, so `p(key) + ε + 1 ≥ i` and `p(key) − ε − 1 < i + 1`:
//! leaves `[(p − ε − 1) / f, (p + ε + 1) / f]`, clamped to the model's, always include
//! the key's leaf. One doorbell READs them (two or three with the defaults), each with its
//! hinted synonym.
//!
//! ## Synchronisation
//!
//! * **Searches** take no lock: they READ the predicted leaves, pick the key's base leaf by the
//!   fences, follow its chain and look in each leaf. A key is in at most one leaf of its chain
//!   and never moves inside it; chains only grow at the tail (a new synonym leaf is written
//!   before the pointer to it, in one doorbell). So a value found in a leaf was the key's value
//!   at that leaf's READ, and a key found nowhere was absent at some instant among the READs
//!   of its chain: were it present throughout, it would have been in one leaf throughout (a move
//!   is a delete then an insert, with an instant of absence between), and that leaf's READ saw it.
//! * **Writes** lock the key's base leaf (masked CAS; the CN-local lock table first), READ its
//!   chain again, change one leaf and WRITE it followed by the unlocking word in one doorbell. An
//!   insert goes to the first leaf of the chain with room; a full chain gets a new synonym leaf;
//!   a delete leaves an empty synonym leaf linked (its room is reused).
//!
//! ## Retraining, and why it is linearizable
//!
//! The harness creates the index empty and loads it by inserts, so models must be retrained.
//! An insert that adds a synonym leaf counts it in the model's leaf table (one FAA); when a model
//! has as many synonym leaves as `retrain`% of its base leaves (25 % by default), or the chain
//! it grew has [`ops::MAX_CHAIN_SYNONYMS`] synonym leaves, that client retrains the model,
//! one-sided ([`retrain`]): claim the model; **freeze** its base leaves
//! (lock word LOCK | RETIRING); read every chain; train new models and write their leaves and
//! leaf tables out of place; **publish** by CASing the root word to a directory with the model
//! replaced; **retire** the old leaves (RETIRING | RETIRED, for good).
//!
//! * From the freeze of a base leaf to the publish, nobody writes that leaf's keys: old writers
//!   wait on the lock, new ones cannot reach the new leaves yet. The new leaves hold exactly what
//!   the frozen chains hold.
//! * After the publish, writes of the model's keys go to the new leaves, so an old leaf may be
//!   out of date. A reader of an old leaf detects that in the same doorbell as the leaf, by its
//!   lock word: RETIRED means a stale model (refresh the directory, start over); RETIRING means
//!   frozen, and one READ of the root word tells whether the publish happened — if not, what the
//!   reader saw is the key's current state at its READ; if so, start over. A leaf READ with
//!   neither bit was not frozen at that READ: what it holds was current then. Synonym leaves are
//!   reached through their base, READ before them in the same or an earlier doorbell, so a
//!   synonym READ after the freeze holds the frozen (current at the freeze) state, and the freeze
//!   fell inside the reader's READs.
//! * A writer that gets a base lock and finds RETIRED starts over; holding the lock of a leaf
//!   that is not retired, the model is current and stays so until the unlock.
//! * Two retrains of different models publish by CAS on the same root word; the loser rebuilds
//!   its directory from the winner's. Retrains of one model are excluded by the claim.
//!
//! A client that dies holding a base leaf's lock, as a writer or as a retrainer that froze it,
//! is judged dead by its lease by the next writer of that leaf, fenced, and the lock taken over
//! and repaired ([`recover`]): a writer leaves a whole chain whatever prefix of its doorbell
//! landed; a retrainer's freeze is rolled back if it never published (the model stays claimed
//! and is not retrained again), and the leaf retired if it did. Searches and scans never wait:
//! a frozen leaf of a model never published is current, one of a published model sends them
//! to the new directory by its RETIRING bit and the root word.
//!
//! ## Operations and round trips (models and leaf table cached, no synonym to follow)
//!
//! | operation | round trips | verbs |
//! |---|---|---|
//! | search | 1 | doorbell: READ the predicted leaves (+ hinted synonyms) |
//! | insert, update, delete | 4 | READ predicted leaves; masked CAS lock; READ chain; `[WRITE leaf, WRITE unlock]` |
//! | absent update/delete | 4 | the same, the last WRITE only the unlock |
//! | insert growing a chain | 5 | `[WRITE new synonym, WRITE tail, WRITE unlock]`; FAA the model's count |
//! | scan | 1 per 4 base leaves | doorbell of base leaves + hinted synonyms |
//!
//! A synonym not yet hinted costs a READ each; a RETIRING leaf, a READ of the root word; a
//! stale model, a READ of the root word, one of the top array and one of each page not seen
//! before (and the leaf tables of new models, one READ each on first use).
//! `tests/suite/round_trips.rs` pins this table.
//!
//! ## Where we differ from the paper and its codes
//!
//! * Retraining is **one-sided, by the client** that pushes a model past the bound; the paper
//!   retrains on the memory nodes' CPUs (its protocol is not published; the original code has
//!   none, CHIME's re-implementation pre-trains on all keys and never retrains).
//! * The leaf table holds base leaves only; chains are linked from the leaves' headers, and the
//!   compute node keeps each base's first synonym as a hint (ROLEX's entries carry a synonym
//!   index into a per-model synonym table of 128 leaves, which then fills up).
//! * Keys never move between the leaves of a chain (the original code moves the upper half of a
//!   full leaf into its synonym); empty synonym leaves stay linked.

pub mod build;
pub mod cache;
pub mod layout;
pub mod ops;
pub mod pla;
pub mod recover;
pub mod retrain;
mod scan;
pub mod shape;
#[cfg(test)]
mod testkit;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, IndexStats, PointIndex, RangeIndex, ScanBuf,
};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::key;
use dmindex_prim::kv_block::Blocks;
use dmindex_prim::lock::LocalLocks;
use dmindex_prim::pool::Pool;
use dmindex_prim::root::RootSlot;

use crate::cache::{read_dir, Cache, Dir};
use crate::layout::{LeafLayout, MAGIC};
use crate::ops::{Op, Pass, Scratch};
pub use crate::shape::{Shape, OPTIONS};

/// A compute node's counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub synonyms: AtomicU64,
    pub retrains: AtomicU64,
    pub retrained_keys: AtomicU64,
    pub publish_retries: AtomicU64,
    pub torn_reads: AtomicU64,
    pub lock_retries: AtomicU64,
    pub retiring_checks: AtomicU64,
    /// Leaf locks taken over from a dead holder and repaired.
    pub lock_repairs: AtomicU64,
    /// Claims of models taken over from a retrainer fenced before it published.
    pub claims_taken_over: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    add(c, 1);
}

pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Idle scratch buffers kept per compute node.
const SCRATCH: usize = 256;

/// [`Rolex`] behind read delegation and write combining ([`dmindex_prim::rdwc::Rdwc`]), as
/// `dmindex bench --index rolex` runs it: created and opened like [`Rolex`], with the same
/// configuration; option `rdwc=0` turns the layer off.
pub type RolexRdwc = dmindex_prim::rdwc::Rdwc<Rolex>;

/// A compute node's handle on a ROLEX index.
pub struct Rolex {
    shape: Shape,
    layout: LeafLayout,
    root: RootSlot,
    cache: Cache,
    locks: LocalLocks,
    blocks: Blocks,
    scratch: Pool<Scratch>,
    counters: Counters,
    /// Claims of unpublished models this handle found another member holding.
    claims: recover::Claims,
}

impl Rolex {
    fn new(shape: Shape, root: RootSlot, dir: Dir, cache_bytes: u64) -> Rolex {
        Rolex {
            shape,
            layout: shape.layout(),
            root,
            cache: Cache::new(root, dir, cache_bytes),
            locks: LocalLocks::default(),
            blocks: Blocks::new(0, shape.value_len),
            scratch: Pool::new(SCRATCH),
            counters: Counters::default(),
            claims: recover::Claims::new(),
        }
    }

    /// The index's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The counters of this handle.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Models in the cached directory.
    pub fn models(&self) -> usize {
        self.cache.current().models.len()
    }

    /// Bytes of the compute-node cache in use.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    fn key_of(key: &[u8]) -> IndexResult<u64> {
        key::word(key, "rolex")
    }

    /// The 8-byte slot of value `v`: the value, zero-padded, or a fresh block's address.
    async fn slot_of<T: Transport>(&self, c: &Client<T>, v: &[u8]) -> IndexResult<[u8; 8]> {
        if v.len() != self.shape.value_len {
            return Err(IndexError::Config(format!(
                "this rolex index stores values of exactly {} bytes, got {}",
                self.shape.value_len,
                v.len()
            )));
        }
        if self.shape.indirect() {
            return Ok(self.blocks.write(c, &[], v).await?.raw().to_le_bytes());
        }
        let mut out = [0u8; 8];
        out[..v.len()].copy_from_slice(v);
        Ok(out)
    }

    /// The value slot `v` holds, into `out` (cleared first).
    async fn value_into<T: Transport>(
        &self,
        c: &Client<T>,
        v: [u8; 8],
        out: &mut Vec<u8>,
    ) -> IndexResult<()> {
        out.clear();
        if self.shape.indirect() {
            let block = GlobalAddr::from_raw(u64::from_le_bytes(v));
            if !self.blocks.value_into(c, block, None, out).await? {
                return Err(IndexError::Corrupt(format!("no value block at {block}")));
            }
        } else {
            out.extend_from_slice(&v[..self.shape.value_len]);
        }
        Ok(())
    }

    /// Appends pair `(k, v)` to a scan's output.
    async fn push_pair<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        v: [u8; 8],
        tmp: &mut Vec<u8>,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        if self.shape.indirect() {
            self.value_into(c, v, tmp).await?;
            out.push(&k.to_be_bytes(), tmp);
        } else {
            out.push(&k.to_be_bytes(), &v[..self.shape.value_len]);
        }
        Ok(())
    }

    /// The directory to use after `dir` proved stale: refreshed. Unchanged, it is a leaf
    /// retired under the directory that replaced its model, which only garbage can show.
    async fn restale<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Arc<Dir>,
        attempts: &mut Attempts,
    ) -> IndexResult<Arc<Dir>> {
        let new = self.cache.refresh(c).await?;
        if new.root == dir.root {
            attempts.failed(self.root.addr(), "retired leaves under the current directory")?;
        }
        Ok(new)
    }

    async fn write<T: Transport>(&self, c: &Client<T>, k: u64, op: Op) -> IndexResult<bool> {
        let mut s = self.scratch.get(c, || Scratch::new(&self.layout));
        let mut attempts = Attempts::new();
        let mut dir = self.cache.current();
        // Ends when a pass completes; a stale pass means a retrain published (progress).
        loop {
            match self.write_pass(c, &dir, k, op, &mut s, &mut attempts).await? {
                Pass::Done(existed) => return Ok(existed),
                Pass::Stale => dir = self.restale(c, &dir, &mut attempts).await?,
            }
        }
    }
}

impl<T: Transport> PointIndex<T> for Rolex {
    /// Every base leaf lock names its holder, a writer or a retrainer's freeze, and a waiter
    /// that finds it dead repairs it ([`recover`]).
    const RECOVERS_CLIENT_CRASHES: bool = true;
    /// The CHIME paper trains its ROLEX once on every loaded key ([`Rolex::pretrain`]).
    const BULK_LOAD: bool = true;

    async fn bulk_load(&self, c: &Client<T>, pairs: &[(Vec<u8>, Vec<u8>)]) -> IndexResult<()> {
        let mut words = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            words.push((Self::key_of(k)?, v.as_slice()));
        }
        self.pretrain(c, &words).await
    }

    async fn create(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = Shape::from_config(cfg)?;
        let root = RootSlot::with_descriptor(cfg.root_slot)?;
        let entries = build::build(c, &shape, shape.fill, 0, &[]).await?;
        let w = build::write_dir(c, &entries).await?;
        root.claim(c, w).await?;
        root.publish(c, &MAGIC, shape.descriptor()).await?;
        let dir = read_dir(c, w, None).await?;
        Ok(Rolex::new(shape, root, dir, cfg.cache_bytes))
    }

    async fn open(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = Shape::from_config(cfg)?;
        let root = RootSlot::with_descriptor(cfg.root_slot)?;
        root.check(c, &MAGIC, shape.descriptor()).await?;
        let w = root.load(c).await?;
        let dir = read_dir(c, w, None).await?;
        Ok(Rolex::new(shape, root, dir, cfg.cache_bytes))
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        let k = Self::key_of(key)?;
        out.clear();
        let mut s = self.scratch.get(c, || Scratch::new(&self.layout));
        let mut attempts = Attempts::new();
        let mut dir = self.cache.current();
        // Ends when a pass completes; a stale pass means a retrain published (progress).
        let found = loop {
            match self.look(c, &dir, k, &mut s, &mut attempts).await? {
                Pass::Done(found) => break found,
                Pass::Stale => dir = self.restale(c, &dir, &mut attempts).await?,
            }
        };
        drop(s);
        match found {
            Some(v) => {
                self.value_into(c, v, out).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let k = Self::key_of(key)?;
        let v = self.slot_of(c, value).await?;
        self.write(c, k, Op::Insert(v)).await.map(drop)
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let k = Self::key_of(key)?;
        let v = self.slot_of(c, value).await?;
        self.write(c, k, Op::Update(v)).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        let k = Self::key_of(key)?;
        self.write(c, k, Op::Delete).await
    }

    const LEVELS: &'static [&'static str] = &["models"];

    fn stats(&self) -> IndexStats {
        let n = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IndexStats {
            cache_bytes: self.cache.bytes(),
            retries: get(&n.torn_reads) + get(&n.lock_retries),
            extra: vec![
                ("synonym_leaves", get(&n.synonyms)),
                ("retrains", get(&n.retrains)),
                ("retrained_keys", get(&n.retrained_keys)),
                ("publish_retries", get(&n.publish_retries)),
                ("directory_refreshes", get(&self.cache.refreshes)),
                ("leaf_table_evictions", get(&self.cache.evictions)),
                ("retiring_checks", get(&n.retiring_checks)),
                ("torn_reads", get(&n.torn_reads)),
                ("lock_repairs", get(&n.lock_repairs)),
                ("claims_taken_over", get(&n.claims_taken_over)),
                ("models", self.models() as u64),
            ],
        }
    }
}

impl<T: Transport> RangeIndex<T> for Rolex {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        self.scan_chains(c, from, count, out).await
    }
}
