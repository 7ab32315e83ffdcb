//! # CHIME: a hopscotch-leaf B+ tree on disaggregated memory
//!
//! The flagship index of dmindex, after *CHIME: A Cache-Efficient and High-Performance Hybrid
//! Index on Disaggregated Memory* (SOSP '24). Internal nodes are B+ tree nodes, cached on every
//! compute node; leaves are hopscotch hash tables, so a point lookup reads one neighbourhood of
//! H entries instead of a whole leaf. Byte layouts: [`layout`].
//!
//! ## Three-level optimistic synchronization
//!
//! Writers lock a node; readers take no lock and validate what they read:
//! 1. **Cache-line versions / NV** — every object and every 64-byte line after the first carries a
//!    version byte; a node write bumps the node-level version (NV) of every object. A read whose
//!    lines disagree, or whose objects carry different NVs, saw a write in flight and is retried.
//! 2. **EV** — an entry write bumps the entry-level version (EV) of that entry only, so an update
//!    writes one entry, and a reader still sees a half-written entry through its line versions.
//! 3. **Hopscotch bitmaps** — a reader that did not find its key rebuilds the home entry's bitmap
//!    from the keys it read; a mismatch means a hop was in flight and the read is retried.
//!
//! ## Access-aggregated metadata
//!
//! * The lock word holds the lock bit, the **vacancy bitmap** and **argmax**; one masked CAS both
//!   locks the leaf and returns them, and the unlocking WRITE carries their new values.
//! * A **metadata replica** (version, valid, sibling) precedes every H entries, so any
//!   neighbourhood READ carries one.
//! * **Sibling-based validation**: a leaf reached through a cached parent must have the sibling
//!   the parent expects (the next child); otherwise the cached parent is dropped. Reached through
//!   a remote parent, a mismatch means a half split: the reader follows sibling pointers until it
//!   finds the key or a leaf whose sibling is the expected one.
//!
//! ## Where we differ from the reference code, and why
//!
//! * **Deletes** exist (the reference has none): the entry is cleared, its home's bitmap bit and
//!   its vacancy bucket cleared, under the leaf lock. Freed slots are reused. Leaves never merge.
//! * **Upper bound**: with deletes, a leaf's largest key can shrink below the separator its parent
//!   holds, so "key > key[argmax] ⇒ go right" would misplace keys. Each leaf keeps one copy of its
//!   inclusive upper bound at the rear (written only by splits). An insert that meets a half split
//!   first tries argmax (any key the leaf holds is below the bound), and only then READs the bound.
//!   argmax is maintained lazily: it always names a slot, ideally the largest key's.
//! * **Indirect values** (longer than 8 bytes, paper §4.5): an insert or update first writes a
//!   fresh 64-B-aligned block `[length u64 LE][value]`, then publishes its address in the entry's
//!   value slot; a search reads the block after the leaf (one more round trip; values up to 56
//!   bytes come in that one READ). Blocks are immutable once published, so they need no
//!   versions; replaced blocks are not reclaimed (as in the reference). Keys longer than 8 bytes
//!   are not supported yet.
//! * **Duplicate check** covers the key's whole neighbourhood, and a failed hop after a split
//!   splits again instead of asserting.
//!
//! ## Operations and round trips (internal nodes cached)
//!
//! search 1 (a wrap-around neighbourhood is two READs in one doorbell); insert 3 (masked CAS, READ of
//! the hop range, WRITE of the range + unlock in one doorbell); update/delete 3; scan 1 per batch
//! of up to 4 leaves. A split adds the whole-leaf READ, one doorbell writing the new sibling then
//! the old leaf (which unlocks it), and the separator's insertion into the parent.

pub mod internal;
pub mod layout;
pub mod leaf;
mod tree;

use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::{layout as mn, Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, IndexStats, Pair, RangeIndex};

use crate::internal::NodeCache;
use crate::layout::{InternalLayout, LeafLayout};
use crate::tree::Tree;

/// CHIME's shape, from [`IndexConfig::extra`]: `span` (leaf entries, default 64), `h`
/// (neighbourhood, default 8), `internal_span` (default 64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChimeShape {
    pub span: usize,
    pub h: usize,
    pub internal_span: usize,
    /// Inline value length (1..=8).
    pub value_len: usize,
}

impl ChimeShape {
    /// Reads and checks the options.
    pub fn from_config(cfg: &IndexConfig) -> IndexResult<ChimeShape> {
        let mut shape = ChimeShape { span: 64, h: 8, internal_span: 64, value_len: cfg.max_value };
        for (k, v) in &cfg.extra {
            let n: usize = v
                .parse()
                .map_err(|_| IndexError::Config(format!("option {k}={v}: not a number")))?;
            match k.as_str() {
                "span" => shape.span = n,
                "h" | "neighbourhood" => shape.h = n,
                "internal_span" => shape.internal_span = n,
                other => {
                    return Err(IndexError::Config(format!(
                        "unknown CHIME option '{other}' (known: span, h, internal_span)"
                    )))
                }
            }
        }
        if cfg.max_key != 8 {
            return Err(IndexError::Config(format!(
                "CHIME keys are 8 bytes (got --key-size {})",
                cfg.max_key
            )));
        }
        if !(1..=MAX_INDIRECT).contains(&cfg.max_value) {
            return Err(IndexError::Config(format!(
                "CHIME values are 1..={MAX_INDIRECT} bytes (got {})",
                cfg.max_value
            )));
        }
        LeafLayout::new(shape.span, shape.h).map_err(IndexError::Config)?;
        if !(4..=1024).contains(&shape.internal_span) {
            return Err(IndexError::Config(format!(
                "internal_span {} must be in 4..=1024",
                shape.internal_span
            )));
        }
        Ok(shape)
    }

    /// Whether values live in blocks behind pointers (values longer than 8 bytes).
    pub fn indirect(&self) -> bool {
        self.value_len > 8
    }

    /// The descriptor word kept in the root slot after the root word.
    fn descriptor(&self) -> u64 {
        0xC41E_u64 << 48
            | (self.span as u64) << 32
            | (self.h as u64) << 24
            | (self.internal_span as u64) << 8
            | self.value_len as u64
    }
}

/// Largest indirect value.
pub const MAX_INDIRECT: usize = 1 << 16;
/// Bytes before the value in a value block: its length, u64 LE.
pub const BLOCK_HEADER: usize = 8;

/// A compute node's handle on a CHIME tree.
pub struct Chime {
    tree: Tree,
    shape: ChimeShape,
}

fn key_of(key: &[u8]) -> IndexResult<u64> {
    let k: [u8; 8] =
        key.try_into().map_err(|_| IndexError::KeyTooLong { len: key.len(), max: 8 })?;
    match u64::from_be_bytes(k) {
        0 => Err(IndexError::InvalidKey("key 0 is reserved (it marks empty entries)".into())),
        k => Ok(k),
    }
}

impl Chime {
    fn new(cfg: &IndexConfig, shape: ChimeShape) -> Chime {
        Chime {
            tree: Tree {
                leaf: LeafLayout::new(shape.span, shape.h).expect("checked"),
                inner: InternalLayout { span: shape.internal_span },
                root_slot: mn::root_slot(cfg.root_slot),
                cache: NodeCache::new(cfg.cache_bytes),
                retries: AtomicU64::new(0),
                splits: AtomicU64::new(0),
                keys_at_split: AtomicU64::new(0),
            },
            shape,
        }
    }

    /// The 8-byte slot for a value: the value itself, or a pointer to a fresh block holding it.
    async fn slot_of<T: Transport>(&self, c: &Client<T>, v: &[u8]) -> IndexResult<[u8; 8]> {
        if !self.shape.indirect() {
            return self.value_of(v);
        }
        if v.len() > self.shape.value_len {
            return Err(IndexError::ValueTooLong { len: v.len(), max: self.shape.value_len });
        }
        let mut block = Vec::with_capacity(BLOCK_HEADER + v.len());
        block.extend_from_slice(&(v.len() as u64).to_le_bytes());
        block.extend_from_slice(v);
        let a = c.alloc(block.len() as u64, 64).await?;
        c.write(a, &block).await?;
        Ok(a.raw().to_le_bytes())
    }

    /// The value a slot stands for.
    async fn value_from<T: Transport>(&self, c: &Client<T>, slot: [u8; 8]) -> IndexResult<Vec<u8>> {
        if !self.shape.indirect() {
            return Ok(slot[..self.shape.value_len].to_vec());
        }
        let a = GlobalAddr::from_raw(u64::from_le_bytes(slot));
        let head = c.read_vec(a, BLOCK_HEADER + self.shape.value_len.min(56)).await?;
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize;
        if len > self.shape.value_len {
            return Err(IndexError::Corrupt(format!("value block at {a} claims {len} bytes")));
        }
        if BLOCK_HEADER + len <= head.len() {
            return Ok(head[BLOCK_HEADER..BLOCK_HEADER + len].to_vec());
        }
        Ok(c.read_vec(a.add(BLOCK_HEADER as u64), len).await?)
    }

    fn value_of(&self, v: &[u8]) -> IndexResult<[u8; 8]> {
        if v.len() != self.shape.value_len {
            return Err(IndexError::Config(format!(
                "this CHIME tree stores inline values of exactly {} bytes, got {}",
                self.shape.value_len,
                v.len()
            )));
        }
        let mut out = [0u8; 8];
        out[..v.len()].copy_from_slice(v);
        Ok(out)
    }

    /// Bytes of the CN-side cache in use.
    pub fn cache_bytes(&self) -> u64 {
        self.tree.cache.bytes()
    }

    /// The tree's shape.
    pub fn shape(&self) -> ChimeShape {
        self.shape
    }
}

impl<T: Transport> RangeIndex<T> for Chime {
    const NAME: &'static str = "chime";

    async fn create(c: &Client<T>, cfg: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let shape = ChimeShape::from_config(cfg)?;
        if c.info().nodes() > 256 {
            return Err(IndexError::Config(
                "CHIME root words address at most 256 memory nodes".into(),
            ));
        }
        if cfg.root_slot + 1 >= mn::ROOT_SLOTS {
            return Err(IndexError::Config(format!(
                "root slot {} has no room for the descriptor",
                cfg.root_slot
            )));
        }
        let me = Chime::new(cfg, shape);
        me.tree.create_root(c).await?;
        c.write(mn::root_slot(cfg.root_slot + 1), &shape.descriptor().to_le_bytes()).await?;
        let _ = cn;
        Ok(me)
    }

    async fn open(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = ChimeShape::from_config(cfg)?;
        let d = c.read_word(mn::root_slot(cfg.root_slot + 1)).await?;
        if d >> 48 != 0xC41E {
            return Err(IndexError::Corrupt(format!(
                "no CHIME tree at root slot {}",
                cfg.root_slot
            )));
        }
        if d != shape.descriptor() {
            return Err(IndexError::Config(format!(
                "the tree was created with another shape (descriptor {d:#x})"
            )));
        }
        Ok(Chime::new(cfg, shape))
    }

    async fn search(&self, c: &Client<T>, key: &[u8]) -> IndexResult<Option<Vec<u8>>> {
        let k = key_of(key)?;
        match self.tree.search(c, k).await? {
            Some(slot) => Ok(Some(self.value_from(c, slot).await?)),
            None => Ok(None),
        }
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let k = key_of(key)?;
        let v = self.slot_of(c, value).await?;
        self.tree.insert(c, k, v).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let k = key_of(key)?;
        let v = self.slot_of(c, value).await?;
        self.tree.modify(c, k, Some(v)).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        let k = key_of(key)?;
        self.tree.modify(c, k, None).await
    }

    async fn scan(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let from: [u8; 8] =
            from.try_into().map_err(|_| IndexError::KeyTooLong { len: from.len(), max: 8 })?;
        let mut pairs = Vec::new();
        self.tree.scan(c, u64::from_be_bytes(from).max(1), count, &mut pairs).await?;
        for (k, slot) in pairs {
            out.push((k.to_be_bytes().to_vec(), self.value_from(c, slot).await?));
        }
        Ok(())
    }

    fn stats(&self) -> IndexStats {
        let t = &self.tree;
        let splits = t.splits.load(Ordering::Relaxed);
        IndexStats {
            cache_bytes: t.cache.bytes(),
            retries: t.retries.load(Ordering::Relaxed),
            extra: vec![
                ("leaf_splits", splits),
                ("leaf_keys_at_split", t.keys_at_split.load(Ordering::Relaxed)),
                ("leaf_slots_at_split", splits * t.leaf.span as u64),
            ],
        }
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        Ok(Some(self.tree.load_factor(c).await?))
    }
}
