//! # dmindex-smart: SMART, an adaptive radix tree on disaggregated memory (OSDI '23)
//!
//! CHIME's radix-tree baseline. Inner nodes are the shared adaptive nodes of
//! [`dmindex_prim::radix`] (kinds 4, 16, 48, 256 + end of key; child slots changed by CAS, so
//! no inner node is ever locked); each item is a leaf of its own ([`leaf`]), updated in place
//! under its lock word. Compute nodes cache inner-node copies ([`dmindex_prim::radix::cache`]);
//! [`SmartOpt`] is SMART with an unlimited cache, the paper's upper bound.
//!
//! ## Operations and round trips (warm cache)
//!
//! | op | round trips |
//! |---|---|
//! | search | 1: the leaf, through the cached parent's slot (+1 per hop of a moved leaf) |
//! | insert (new key) | READ of the leaf's parent + one doorbell: leaf WRITE then slot CAS = 2 (+1 leaf READ if the slot holds another key: a push-down) |
//! | update | leaf READ + lock CAS + one doorbell rewriting the item and unlocking = 3 |
//! | delete | leaf READ + status CAS + tombstone CAS = 3 |
//! | scan | 1 READ per inner node on the range's paths and per leaf (SMART reads items one by one) |
//!
//! A cold path adds one READ per inner level. A type switch adds one CAS per slot (freezing),
//! the new node's WRITE and the parent's CAS.
//!
//! ## Why answers are exact though copies are stale
//!
//! * A leaf that is **live and holds the key** is the key's item, wherever it was reached from:
//!   leaves are never reused, a delete or move is final in the leaf's status word, and a live
//!   leaf stays reachable (a push-down keeps it under the new node; a type switch copies its
//!   slot). So the cached fast path returns it at once.
//! * **Absence** is decided only on a node read afresh and not frozen: its slot for the key was
//!   empty (or a tombstone, or another key's leaf) at the instant it was read, while the node
//!   was reachable (unfrozen ⇒ not yet replaced) and, a node's position being permanent, the
//!   only place the key could be. A prefix mismatch is trusted only if the link into the node
//!   was itself read afresh (a cached link may skip a node a path split put above it); else the
//!   search starts again from the root without the cache.
//! * The reverse pointer of a node reached through a cached link names the slot that published
//!   it; a different one means the cached parent is stale, and its copy is dropped.
//!
//! ## Where we differ from the paper and the public code
//!
//! * **Delete** exists: the leaf's status turns deleted (the linearization point), then its
//!   slot becomes a tombstone keeping its partial key. Slots are never emptied, which keeps
//!   partial keys unique without locking inner nodes ([`dmindex_prim::radix::node`]).
//! * **Type switches are helped**: every slot is frozen before the copy, so no concurrent CAS
//!   is lost in the switch (an unfrozen copy loses them), and anyone meeting a frozen node
//!   finishes the switch, so a crashed switcher blocks no one.
//! * **The lock is a word**: the leaf's lock bit sits in its status word (RDMA atomics are 8-B;
//!   SMART's rear lock byte cannot be CASed alone), which names the holder while held, so a
//!   waiter can judge a holder that stopped and free the leaf (the `lock` module).
//! * **Variable-length keys**: a key that ends at a node's depth is its end-of-key child, so
//!   no key needs a terminator; a path longer than 6 bytes is a chain of one-child nodes.
//! * **No reclamation**: replaced nodes and leaves are never reused (as in SMART), which is
//!   what makes stale pointers safe.

pub mod leaf;

mod lock;
mod ops;
mod scan;

use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, IndexStats, PointIndex, RangeIndex, ScanBuf,
};
use dmindex_prim::counter::{bump, get, Striped};
use dmindex_prim::options::Options;
use dmindex_prim::pool::Pool;
use dmindex_prim::radix::header::MAX_DEPTH;
use dmindex_prim::radix::slot::MAX_NODES;
use dmindex_prim::radix::{DescentCounters, Header, Kind, NodeImage, RadixCache, Tree};
use dmindex_prim::root::{Magic, RootSlot};

/// The descriptor's magic ("SM").
pub const MAGIC: Magic = Magic { name: "smart", value: 0x534D, bits: 16 };

/// SMART reads no options of its own.
pub const OPTIONS: Options = Options { what: "smart", known: &[] };

/// Which SMART: the cache budget it runs with.
pub trait Variant: 'static {
    const NAME: &'static str;
    /// Ignore `cache_bytes` and cache every inner node (SMART-Opt).
    const UNLIMITED_CACHE: bool;
}

/// SMART with the configured cache budget.
pub struct Budgeted;
/// SMART-Opt: an unlimited cache.
pub struct Unlimited;

impl Variant for Budgeted {
    const NAME: &'static str = "smart";
    const UNLIMITED_CACHE: bool = false;
}

impl Variant for Unlimited {
    const NAME: &'static str = "smart-opt";
    const UNLIMITED_CACHE: bool = true;
}

#[derive(Debug, Default)]
struct Counters {
    retries: AtomicU64,
    /// Bumped by every search: striped ([`Striped`]).
    searches: Striped,
    cache_hits: Striped,
    torn_leaves: AtomicU64,
    path_splits: AtomicU64,
    push_downs: AtomicU64,
    moves: AtomicU64,
    /// Failed looks at a leaf another client held locked.
    lock_waits: AtomicU64,
    /// Leaves freed after their holder was judged dead and fenced.
    repairs: AtomicU64,
    descent: DescentCounters,
}

/// A compute node's handle on a SMART tree.
pub struct SmartIndex<V> {
    root: GlobalAddr,
    cache: RadixCache,
    config: IndexConfig,
    counters: Counters,
    /// Scans' working vectors ([`scan::ScanScratch`]).
    scans: Pool<scan::ScanScratch>,
    variant: PhantomData<fn() -> V>,
}

/// SMART.
pub type Smart = SmartIndex<Budgeted>;
/// SMART-Opt.
pub type SmartOpt = SmartIndex<Unlimited>;
/// [`Smart`] behind read delegation and write combining ([`dmindex_prim::rdwc::Rdwc`]), as
/// the CHIME paper measures it and `dmindex bench --index smart` runs it; option `rdwc=0`
/// turns the layer off.
pub type SmartRdwc = dmindex_prim::rdwc::Rdwc<Smart>;
/// [`SmartOpt`] behind [`dmindex_prim::rdwc::Rdwc`], as `dmindex bench --index smart-opt` runs it.
pub type SmartOptRdwc = dmindex_prim::rdwc::Rdwc<SmartOpt>;

/// The root is the largest kind: it never grows, so the root word never changes.
const ROOT_KIND: Kind = Kind::N256;

fn check_config<T: Transport>(c: &Client<T>, config: &IndexConfig) -> IndexResult<()> {
    OPTIONS.parse(&config.extra)?;
    if config.max_key == 0 || config.max_key > MAX_DEPTH {
        return Err(IndexError::Config(format!(
            "smart keys must be 1 to {MAX_DEPTH} bytes, not {}",
            config.max_key
        )));
    }
    if config.max_key + config.max_value > leaf::MAX_ITEM {
        return Err(IndexError::Config(format!(
            "smart leaves hold at most {} bytes of key and value (key {} + value {})",
            leaf::MAX_ITEM,
            config.max_key,
            config.max_value
        )));
    }
    if c.info().nodes() > MAX_NODES {
        return Err(IndexError::Config(format!(
            "smart addresses at most {MAX_NODES} memory nodes, not {}",
            c.info().nodes()
        )));
    }
    Ok(())
}

fn shape_bits(config: &IndexConfig) -> u64 {
    (config.max_key as u64) << 16 | config.max_value as u64
}

impl<V: Variant> SmartIndex<V> {
    fn new(root: GlobalAddr, config: &IndexConfig) -> Self {
        let budget = if V::UNLIMITED_CACHE { u64::MAX } else { config.cache_bytes };
        SmartIndex {
            root,
            cache: RadixCache::new(budget),
            config: config.clone(),
            counters: Counters::default(),
            scans: Pool::new(64),
            variant: PhantomData,
        }
    }

    /// The tree as the shared radix descent sees it.
    pub(crate) fn tree(&self) -> Tree<'_> {
        Tree {
            root: self.root,
            root_kind: ROOT_KIND,
            cache: &self.cache,
            floor_depth: None,
            counters: &self.counters.descent,
        }
    }
}

impl<T: Transport, V: Variant> PointIndex<T> for SmartIndex<V> {
    /// The leaf lock names its holder and a dead holder's leaf is freed (`crate::lock`).
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        check_config(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        let root = c.alloc(ROOT_KIND.alloc_bytes(), 64).await?;
        let mut buf = Vec::new();
        NodeImage::encode_new(GlobalAddr::NULL, &Header::new(ROOT_KIND, 0, b"", 0), &[], &mut buf);
        c.write(root, &buf).await?;
        slot.claim(c, root.raw()).await?;
        slot.publish(c, &MAGIC, shape_bits(config)).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        check_config(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        slot.check(c, &MAGIC, shape_bits(config)).await?;
        let root = GlobalAddr::from_raw(slot.load(c).await?);
        Ok(Self::new(root, config))
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        self.search_key(c, key, out).await
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.config.check_kv(key, Some(value))?;
        self.insert_key(c, key, value).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, Some(value))?;
        self.update_key(c, key, value).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        self.delete_key(c, key).await
    }

    const LEVELS: &'static [&'static str] = &["cached_nodes"];

    fn stats(&self) -> IndexStats {
        let n = &self.counters;
        IndexStats {
            cache_bytes: self.cache.bytes(),
            retries: get(&n.retries),
            extra: vec![
                ("searches", n.searches.get()),
                ("search_cache_hits", n.cache_hits.get()),
                ("torn_leaf_reads", get(&n.torn_leaves)),
                ("path_splits", get(&n.path_splits)),
                ("push_downs", get(&n.push_downs)),
                ("leaf_moves", get(&n.moves)),
                ("leaf_lock_waits", get(&n.lock_waits)),
                ("dead_holders_repaired", get(&n.repairs)),
                ("cached_nodes", self.cache.len() as u64),
            ]
            .into_iter()
            .chain(n.descent.rows())
            .collect(),
        }
    }
}

impl<T: Transport, V: Variant> RangeIndex<T> for SmartIndex<V> {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        if from.len() > self.config.max_key {
            out.clear();
            return Err(IndexError::KeyTooLong { len: from.len(), max: self.config.max_key });
        }
        self.scan_keys(c, from, None, count, out).await
    }

    async fn scan_range_into(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        self.scan_keys(c, lo, Some(hi), usize::MAX, out).await
    }
}
