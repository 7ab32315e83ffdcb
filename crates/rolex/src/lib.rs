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
//!   retrain puts `fill` keys (¾ of the span by default) in each leaf, so position `p` is in leaf
//!   `p / fill`, and each leaf's **fence** is its first key. Fences never change.
//! * **Synonym leaves**: a base leaf that is full grows a chain of synonym leaves on the same
//!   memory node. A key lives in the chain of the last base leaf whose fence is at most the key,
//!   for the model's whole life (ROLEX's data-movement constraint), so inserts never invalidate a
//!   prediction.
//! * **Directory**: the models' entries (low, prediction, leaf table), immutable, named by the
//!   root word. A compute node caches it and, per model, the leaf table (8 bytes a leaf) and the
//!   first synonym leaf of each base as last seen (8 bytes a leaf) — [`cache`].
//!
//! ## Prediction and the leaves read
//!
//! A key maps to its model by bisection over the cached `low`s. The model predicts position
//! `p = intercept + slope · (key − anchor)`, monotone in the key. Every trained key is within
//! `ε + ½` of its position (the PLA's bound plus the check of its `f64` line), and a key that was
//! not trained lies between two trained keys `a` (position `i`) and `b` (position `i + 1`) of its
//! model (or before the first, or after the last), and belongs to leaf `i / fill`, `a`'s leaf.
//! By monotonicity `p(a) ≤ p(key) ≤ p(b)`, so `p(key) + ε + 1 ≥ i` and `p(key) − ε − 1 < i + 1`:
//! leaves `[(p − ε − 1) / fill, (p + ε + 1) / fill]`, clamped to the model's, always include
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
//! ## Retraining
//!
//! Not yet: models are trained once, by [`Rolex::bulk_load`], and an index created empty and
//! loaded by inserts keeps its one model, whose chains grow. Retraining is the next step.
//!
//! ## Operations and round trips (models and leaf table cached, no synonym to follow)
//!
//! | operation | round trips | verbs |
//! |---|---|---|
//! | search | 1 | doorbell: READ the predicted leaves (+ hinted synonyms) |
//! | insert, update, delete | 4 | READ predicted leaves; masked CAS lock; READ chain; `[WRITE leaf, WRITE unlock]` |
//! | absent update/delete | 4 | the same, the last WRITE only the unlock |
//! | insert growing a chain | 4 | the last doorbell `[WRITE new synonym, WRITE tail, WRITE unlock]` |
//! | scan | 1 per 4 base leaves | doorbell of base leaves + hinted synonyms |
//!
//! A synonym not yet hinted costs a READ each.
//!
//! ## Where we differ from the paper and its codes
//!
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
mod scan;
pub mod shape;

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
    pub torn_reads: AtomicU64,
    pub lock_retries: AtomicU64,
    pub retiring_checks: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Idle scratch buffers kept per compute node.
const SCRATCH: usize = 256;

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
}

impl Rolex {
    fn new(shape: Shape, root: RootSlot, dir: Dir) -> Rolex {
        Rolex {
            shape,
            layout: shape.layout(),
            root,
            cache: Cache::new(root, dir),
            locks: LocalLocks::default(),
            blocks: Blocks::new(0, shape.value_len),
            scratch: Pool::new(SCRATCH),
            counters: Counters::default(),
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
        let mut s = self.scratch.get(c, Scratch::default);
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
    async fn create(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = Shape::from_config(cfg)?;
        let root = RootSlot::with_descriptor(cfg.root_slot)?;
        let entries = build::build(c, &shape, 0, &[]).await?;
        let w = build::write_dir(c, &entries).await?;
        root.claim(c, w).await?;
        root.publish(c, &MAGIC, shape.descriptor()).await?;
        let dir = read_dir(c, w, None).await?;
        Ok(Rolex::new(shape, root, dir))
    }

    async fn open(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = Shape::from_config(cfg)?;
        let root = RootSlot::with_descriptor(cfg.root_slot)?;
        root.check(c, &MAGIC, shape.descriptor()).await?;
        let w = root.load(c).await?;
        let dir = read_dir(c, w, None).await?;
        Ok(Rolex::new(shape, root, dir))
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        let k = Self::key_of(key)?;
        out.clear();
        let mut s = self.scratch.get(c, Scratch::default);
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
                ("directory_refreshes", get(&self.cache.refreshes)),
                ("retiring_checks", get(&n.retiring_checks)),
                ("torn_reads", get(&n.torn_reads)),
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
