//! # dmindex-index: what every index offers
//!
//! An index lives in remote memory and is reached through a [`dmindex_fabric::Client`]. Each
//! compute node opens one handle ([`PointIndex::open`]) shared by all of its clients — that is
//! where CN-side caches live — and every operation names the client (task) doing it.
//!
//! # Example
//!
//! Code written once against [`RangeIndex`] runs on every ordered index and transport; here on
//! the reference index over in-process memory (`examples/` in the workspace does the same with
//! CHIME from several threads, with SepHash, and over UCX):
//!
//! ```
//! use dmindex_fabric::exec::block_on;
//! use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric, Transport};
//! use dmindex_index::{IndexConfig, IndexResult, PointIndex, RangeIndex};
//! use dmindex_reference::LockedShards;
//!
//! /// Keys 1..=n with values 10 × key, then the three smallest keys at or above 5.
//! async fn fill_and_scan<T: Transport, I: RangeIndex<T>>(
//!     index: &I,
//!     c: &Client<T>,
//!     n: u64,
//! ) -> IndexResult<Vec<u64>> {
//!     for k in 1..=n {
//!         // Integer keys are 8-byte big-endian (byte order = numeric order); the all-zero key
//!         // is reserved by most indexes. Values are exactly `max_value` bytes for some.
//!         index.insert(c, &k.to_be_bytes(), &(10 * k).to_le_bytes()).await?;
//!     }
//!     let mut pairs = Vec::new();
//!     index.scan(c, &5u64.to_be_bytes(), 3, &mut pairs).await?;
//!     Ok(pairs.iter().map(|(k, _)| u64::from_be_bytes(k[..].try_into().unwrap())).collect())
//! }
//!
//! let fabric = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..LocalConfig::default() })?;
//! let c = fabric.client(0)?; // compute node 0
//! let cfg = IndexConfig::default(); // 8-byte keys and values, root slot 0
//! block_on(LockedShards::create(&c, &cfg, 0))?; // builds it in remote memory
//! let index = block_on(LockedShards::open(&c, &cfg, 0))?; // this compute node's handle
//! assert_eq!(block_on(fill_and_scan(&index, &c, 100))?, [5, 6, 7]);
//! assert_eq!(block_on(index.search(&c, &7u64.to_be_bytes()))?, Some(70u64.to_le_bytes().to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Semantics every index must have (checked by `dmindex-check`)
//!
//! Keys are byte strings ordered lexicographically (integer keys are 8-byte big-endian, so byte
//! order is numeric order); values are byte strings. Each operation is linearizable:
//!
//! | operation | effect | returns |
//! |---|---|---|
//! | `search(k)` | — | the value, or `None` |
//! | `insert(k, v)` | k ↦ v (an existing key is updated: no duplicates, ever) | — |
//! | `update(k, v)` | k ↦ v if k exists | whether k existed |
//! | `delete(k)` | removes k if it exists | whether k existed |
//! | `scan(from, n)` | — | up to n pairs with key ≥ from, ascending |
//! | `scan_range(lo, hi)` | — | every pair with lo ≤ key < hi, ascending |
//!
//! Scans come in two forms: into a caller's [`ScanBuf`] (`scan_into`, `scan_range_into`: the
//! hot path, which every ordered index implements and which allocates nothing per pair once the
//! buffer has grown), and as owned pairs (`scan`, `scan_range`: a convenience on top).
//!
//! An index may offer **blind writes** as an option ([`PointIndex::blind_writes`]: SepHash's
//! `update=upsert`, the paper's own updates): then `update(k, v)` sets k ↦ v whether or not k
//! existed (an upsert) and `delete(k)` removes k if it exists, and neither can tell whether k
//! existed; both return `true`, and the checker and the conformance kit hold them to exactly
//! that instead of the rows above.
//!
//! A scan is linearizable per key: each returned pair was the key's value at some instant during
//! the scan, and each key in the scanned range it did not return was absent at some such instant.
//!
//! ## Where the rest lives
//!
//! This crate is the contract only: the traits, configuration and errors above, memory-node
//! services and recorded operations ([`recorded`]); it depends on the fabric and the history
//! types of `dmindex-check`, never on the simulator. The conformance kit every index passes is
//! `dmindex-conformance`, a dev-dependency of each index crate. The primitives designs share
//! (locks, versions, blocks, root slots, caches, RDWC) are in `dmindex-prim`; each design is a
//! crate of its own, the deliberately simple reference index (`dmindex-reference`, the
//! harness's and checker's test subject) included.

use std::sync::Arc;

use dmindex_fabric::service::Service;
use dmindex_fabric::{Client, FabricError, NodeId, ServiceId, Services, Transport};

pub mod recorded;
pub mod scan_buf;

pub use scan_buf::ScanBuf;

/// What can go wrong in an index operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The fabric refused or failed a verb.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// The key is longer than the index was configured for.
    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLong { len: usize, max: usize },
    /// The value is longer than the index was configured for.
    #[error("value of {len} bytes exceeds the maximum of {max}")]
    ValueTooLong { len: usize, max: usize },
    /// The key is not one the index accepts (e.g. empty).
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// Remote memory does not hold what the index expects (wrong root, foreign data).
    #[error("corrupt index: {0}")]
    Corrupt(String),
    /// The configuration is unusable.
    #[error("bad index configuration: {0}")]
    Config(String),
    /// The index cannot hold this item (a structural limit, not a lack of memory).
    #[error("index full: {0}")]
    Full(String),
    /// The index does not offer this operation (e.g. a scan on a hash index).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// Result of an index operation.
pub type IndexResult<T> = Result<T, IndexError>;

/// A key-value pair returned by a scan.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Options every index understands; each index documents what else it reads from `extra`.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexConfig {
    /// Longest key accepted, in bytes.
    pub max_key: usize,
    /// Longest value accepted, in bytes.
    pub max_value: usize,
    /// CN-side cache budget in bytes, per compute node.
    pub cache_bytes: u64,
    /// Expected number of items (a sizing hint).
    pub expected_items: u64,
    /// Root-table slot holding the index's root.
    pub root_slot: u32,
    /// Index-specific `name=value` options.
    pub extra: Vec<(String, String)>,
}

impl Default for IndexConfig {
    fn default() -> IndexConfig {
        IndexConfig {
            max_key: 8,
            max_value: 8,
            cache_bytes: 100 << 20,
            expected_items: 1 << 20,
            root_slot: 0,
            extra: Vec::new(),
        }
    }
}

impl IndexConfig {
    /// The default configuration with index-specific options `name=value` in `extra`.
    pub fn with_options(options: &[(&str, &str)]) -> IndexConfig {
        let extra = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        IndexConfig { extra, ..IndexConfig::default() }
    }

    /// Checks key and value lengths against the configuration.
    pub fn check_kv(&self, key: &[u8], value: Option<&[u8]>) -> IndexResult<()> {
        if key.is_empty() {
            return Err(IndexError::InvalidKey("empty key".into()));
        }
        if key.len() > self.max_key {
            return Err(IndexError::KeyTooLong { len: key.len(), max: self.max_key });
        }
        if let Some(v) = value {
            if v.len() > self.max_value {
                return Err(IndexError::ValueTooLong { len: v.len(), max: self.max_value });
            }
        }
        Ok(())
    }
}

/// Counters an index keeps on its compute node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IndexStats {
    /// Bytes of CN-side cache in use.
    pub cache_bytes: u64,
    /// Operation retries (validation failures, lock failures, re-reads).
    pub retries: u64,
    /// Index-specific counters, summed over compute nodes by the harness.
    pub extra: Vec<(&'static str, u64)>,
}

/// Whether an index keeps its keys in order (and so offers scans).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// Point operations only (hash indexes): search, insert, update, delete.
    Point,
    /// Point operations and ordered scans.
    Ordered,
}

impl IndexKind {
    /// `point` or `ordered`.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Point => "point",
            IndexKind::Ordered => "ordered",
        }
    }
}

/// A memory-node service an index installs on every memory node (e.g. HiStore's server-side
/// skiplists): its id (at least [`dmindex_fabric::service::FIRST_USER_SERVICE`]), a short name
/// and a constructor.
#[derive(Clone, Copy)]
pub struct MnService {
    pub id: ServiceId,
    pub name: &'static str,
    pub make: fn() -> Arc<dyn Service>,
}

impl std::fmt::Debug for MnService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.id, self.name)
    }
}

/// The built-in memory-node services on `cores` MN cores plus `services` (an index's); an id
/// clash is an error naming the service.
pub fn mn_services(cores: usize, services: &[MnService]) -> IndexResult<Services> {
    let mut table = Services::new(cores);
    for s in services {
        table
            .register(s.id, (s.make)())
            .map_err(|e| IndexError::Config(format!("memory-node service {}: {e}", s.name)))?;
    }
    Ok(table)
}

/// An index on disaggregated memory, over transport `T`: the point operations every design has.
///
/// Futures are not `Send`: clients run on single-threaded executors. A handle may be shared by
/// the clients of one compute node; handles that are `Sync` may be shared across threads.
///
/// A wrapper that is an index around another (`dmindex_prim::rdwc::Rdwc`) must forward every
/// item with a default here and in [`RangeIndex`], or the wrapped index's own answer is lost
/// for the trait's default (a replicated index would claim to survive a memory-node crash and
/// then refuse to rebuild the node). `search` is the exception: its default goes through the
/// wrapper's own `search_into`. RDWC's tests read this trait's source to check that it does.
#[allow(async_fn_in_trait)]
pub trait PointIndex<T: Transport>: Sized {
    /// Services this index needs on every memory node, installed before it is created.
    const SERVICES: &'static [MnService] = &[];
    /// Whether the index survives the crash of a memory node other than node 0 (it replicates
    /// what it keeps there): `dmindex check --mn-crash-us` is refused for the others.
    const SURVIVES_MN_CRASH: bool = false;
    /// Whether every lock and claim the index takes is freed, and what a dead holder left is
    /// repaired, when a client crashes holding it (judged by leases, fenced, repaired by a
    /// waiter), in its default configuration; [`PointIndex::recovers_client_crashes`] says it
    /// for a given one.
    const RECOVERS_CLIENT_CRASHES: bool = false;

    /// Whether an index built with `config` recovers from client crashes as
    /// [`PointIndex::RECOVERS_CLIENT_CRASHES`] describes: `dmindex check` then fails a seed in
    /// which a client is stuck behind a crash. The constant unless some configuration takes a
    /// lock the index cannot repair.
    fn recovers_client_crashes(config: &IndexConfig) -> bool {
        let _ = config;
        Self::RECOVERS_CLIENT_CRASHES
    }

    /// Builds an empty index in remote memory and publishes its root in `config.root_slot`.
    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self>;

    /// Opens a handle on compute node `cn` to the index published in `config.root_slot`.
    async fn open(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self>;

    /// The value of `key`, if present (through [`PointIndex::search_into`]).
    async fn search(&self, c: &Client<T>, key: &[u8]) -> IndexResult<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.search_into(c, key, &mut out).await?.then_some(out))
    }

    /// The value of `key` into `out` (cleared first, then the value): whether the key is
    /// present. The hot path: a caller that reuses `out` allocates nothing. An implementation
    /// may do part of its work when the future is made (checking the key, entering RDWC's
    /// table), so callers await it promptly.
    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool>;

    /// Sets `key` to `value`, inserting it if absent (an upsert: never a duplicate).
    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()>;

    /// Sets `key` to `value` if present; returns whether it was.
    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool>;

    /// Removes `key`; returns whether it was present.
    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool>;

    /// Of the names in [`IndexStats::extra`], those that are levels (how much of something there
    /// is now, such as cached nodes) rather than counts of events: a report measured over part
    /// of a run gives a level's value at the part's end, and the others' increase over it.
    const LEVELS: &'static [&'static str] = &[];

    /// Whether `update` and `delete` are blind (an option of the index): an update sets the key
    /// whether or not it existed, a delete removes it if present, and both return `true`
    /// without knowing whether it existed. Recorded histories and the model test then check
    /// them as exactly that (see the crate's semantics table).
    fn blind_writes(&self) -> bool {
        false
    }

    /// CN-side counters.
    fn stats(&self) -> IndexStats {
        IndexStats::default()
    }

    /// Fraction of slots holding items, where the index has such a notion.
    async fn load_factor(&self, _c: &Client<T>) -> IndexResult<Option<f64>> {
        Ok(None)
    }

    /// Whether the index runs work of its own beside the workload ([`PointIndex::background`]):
    /// a harness that drives the index gives it a client of its own for the whole of each
    /// phase.
    const BACKGROUND: bool = false;

    /// Work the design runs on a client of its own, beside the clients that run operations
    /// (CLevel's rehashing thread): runs until `stop()` turns true (the harness's foreground
    /// clients are done), checking it between steps and pausing ([`Client::pause`]) when there
    /// is nothing to do. The index stays correct and live without it (its clients then do that
    /// work themselves when they must), and a crash of this client is one more client crash.
    async fn background(&self, c: &Client<T>, stop: &dyn Fn() -> bool) -> IndexResult<()> {
        let _ = (c, stop);
        Ok(())
    }

    /// Whether the design loads a sorted key set in one pass ([`PointIndex::bulk_load`]).
    const BULK_LOAD: bool = false;

    /// Loads `pairs` (sorted by key, distinct) into an index fresh from `create`, in one pass
    /// rather than by inserts: what a paper's harness does when it pre-trains or bulk-loads a
    /// design before measuring it (CHIME's ROLEX is trained once on every loaded key). One
    /// client calls it, before any other operation on the index; handles opened before it see
    /// its result. Designs without such a load refuse it.
    async fn bulk_load(&self, c: &Client<T>, pairs: &[(Vec<u8>, Vec<u8>)]) -> IndexResult<()> {
        let _ = (c, pairs);
        Err(IndexError::Unsupported("this index has no bulk load: it loads by inserts".into()))
    }

    /// Memory node `node` came back empty after a crash (restarted in its place): rebuild what
    /// the index kept there and return once it is whole again, while other clients go on.
    /// Only indexes that survive memory-node crashes can; fails if the node does not answer.
    async fn recover_memory_node(&self, _c: &Client<T>, node: NodeId) -> IndexResult<()> {
        Err(IndexError::Unsupported(format!(
            "this index keeps no replicas to rebuild memory node {node} from"
        )))
    }
}

/// An ordered index: point operations and scans.
///
/// An index implements the buffer forms ([`RangeIndex::scan_into`], and
/// [`RangeIndex::scan_range_into`] when it can stop at the range's end directly); the owned
/// forms are defaults on top of them.
#[allow(async_fn_in_trait)]
pub trait RangeIndex<T: Transport>: PointIndex<T> {
    /// Up to `count` pairs with key ≥ `from`, in ascending key order, into `out` (cleared
    /// first). The hot path: a caller that reuses `out` allocates nothing per pair; an index
    /// keeps its other working memory per client (a pool), not per call, so that a warm scan
    /// allocates nothing at all where the design allows.
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()>;

    /// Every pair with `lo` ≤ key < `hi`, in ascending key order, into `out` (cleared first).
    ///
    /// The default walks [`RangeIndex::scan_into`] in chunks from successive keys (a chunk
    /// buffer per call); indexes override it when they can stop at the range's end directly.
    async fn scan_range_into(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        const CHUNK: usize = 64;
        out.clear();
        if lo >= hi {
            return Ok(());
        }
        // Each chunk starts at the last key returned (a key the index accepts, unlike a made-up
        // successor, which may be longer than its longest key) and skips it.
        let mut chunk = ScanBuf::new();
        self.scan_into(c, lo, CHUNK, &mut chunk).await?;
        loop {
            let done = chunk.len() < CHUNK;
            for (k, v) in chunk.iter() {
                if out.last_key().is_some_and(|l| k <= l) {
                    continue;
                }
                if k >= hi {
                    return Ok(());
                }
                out.push(k, v);
            }
            match out.last_key() {
                Some(l) if !done => self.scan_into(c, l, CHUNK, &mut chunk).await?,
                _ => return Ok(()),
            }
        }
    }

    /// Appends to `out` up to `count` pairs with key ≥ `from`, in ascending key order: owned
    /// pairs made from [`RangeIndex::scan_into`]'s (two allocations a pair).
    async fn scan(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        // Room for a typical scan's 8-byte keys and values: fewer regrowths on the way.
        let mut buf = ScanBuf::with_capacity(count.min(128), 8, 8);
        self.scan_into(c, from, count, &mut buf).await?;
        buf.extend_pairs(out);
        Ok(())
    }

    /// Appends to `out` every pair with `lo` ≤ key < `hi`, in ascending key order: owned pairs
    /// made from [`RangeIndex::scan_range_into`]'s.
    async fn scan_range(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let mut buf = ScanBuf::new();
        self.scan_range_into(c, lo, hi, &mut buf).await?;
        buf.extend_pairs(out);
        Ok(())
    }
}

/// How a harness reaches an index's scans without knowing its kind: [`Ordered`] through
/// [`RangeIndex`], [`PointOnly`] not at all ([`IndexError::Unsupported`]). The catalog picks one
/// per index, so generic code is written once for both kinds.
#[allow(async_fn_in_trait)]
pub trait Scans<T: Transport, I: PointIndex<T>> {
    /// The kind this access stands for.
    const KIND: IndexKind;

    /// [`RangeIndex::scan_into`], or `Unsupported`.
    async fn scan_into(
        idx: &I,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()>;

    /// [`RangeIndex::scan_range_into`], or `Unsupported`.
    async fn scan_range_into(
        idx: &I,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()>;

    /// [`RangeIndex::scan`], or `Unsupported`.
    async fn scan(
        idx: &I,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()>;

    /// [`RangeIndex::scan_range`], or `Unsupported`.
    async fn scan_range(
        idx: &I,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<Pair>,
    ) -> IndexResult<()>;
}

/// Scans of an ordered index.
pub struct Ordered;

/// No scans: a point index.
pub struct PointOnly;

impl<T: Transport, I: RangeIndex<T>> Scans<T, I> for Ordered {
    const KIND: IndexKind = IndexKind::Ordered;

    async fn scan_into(
        idx: &I,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        idx.scan_into(c, from, count, out).await
    }

    async fn scan_range_into(
        idx: &I,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        idx.scan_range_into(c, lo, hi, out).await
    }

    async fn scan(
        idx: &I,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        idx.scan(c, from, count, out).await
    }

    async fn scan_range(
        idx: &I,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        idx.scan_range(c, lo, hi, out).await
    }
}

impl<T: Transport, I: PointIndex<T>> Scans<T, I> for PointOnly {
    const KIND: IndexKind = IndexKind::Point;

    async fn scan_into(
        _: &I,
        _: &Client<T>,
        _: &[u8],
        _: usize,
        _: &mut ScanBuf,
    ) -> IndexResult<()> {
        Err(IndexError::Unsupported("scan on a point index".into()))
    }

    async fn scan_range_into(
        _: &I,
        _: &Client<T>,
        _: &[u8],
        _: &[u8],
        _: &mut ScanBuf,
    ) -> IndexResult<()> {
        Err(IndexError::Unsupported("range scan on a point index".into()))
    }

    async fn scan(_: &I, _: &Client<T>, _: &[u8], _: usize, _: &mut Vec<Pair>) -> IndexResult<()> {
        Err(IndexError::Unsupported("scan on a point index".into()))
    }

    async fn scan_range(
        _: &I,
        _: &Client<T>,
        _: &[u8],
        _: &[u8],
        _: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        Err(IndexError::Unsupported("range scan on a point index".into()))
    }
}
