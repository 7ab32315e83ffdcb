//! # dmindex-dolphin: Dolphin, a hybrid index of radix inner nodes over B+ leaves
//!
//! Dolphin (MSST '24) keeps the upper levels of an adaptive radix tree over key bytes 0–6
//! (the shared [`dmindex_prim::radix`] machinery) and stores keys in B+ leaves that each cover a
//! range `[lo, hi]` inside one 7-byte prefix. A prefix's leaves hang from a *special* radix node
//! at depth 7 whose slots name each leaf by the last byte of its `lo` and are searched by floor
//! ([`dmindex_prim::radix::NodeImage::floor`]). Writers share a leaf through Spear
//! ([`dmindex_prim::spear`]), the FAA-only lock whose FAA rides in the same doorbell as the leaf
//! READ; structure changes claim the leaf exclusively.
//!
//! # Structure
//!
//! ```text
//! depth 0        root N256 (never grows), picks by key[0]
//! depth 1..6     radix nodes: exact partial keys, compressed prefixes, path splits
//! depth 7        special nodes, one per 7-byte prefix P: slots name leaves by lo[7], floor lookup
//! leaves         [lo, hi] inside [P00, PFF]; the leftmost has lo = P00, so a floor always exists
//! ```
//!
//! Keys are exactly 8 bytes, compared as big-endian integers; key 0 is reserved (a free key
//! word). Values are exactly the configured `max_value` bytes (1 to 4096). Up to 56 bytes a value
//! shares one cache line with the line head that holds its state and writes are lock-free; longer values take
//! multi-line cells whose writers serialise on a per-cell lock, one round trip more per write,
//! each leaving a redo record first ([`leaf`], [`sync`], [`redo`]).
//!
//! # Pathfinding ([`ops`])
//!
//! The CN cache ([`dmindex_prim::radix::RadixCache`]) keeps copies of inner and special nodes; a
//! walk over them with a floor at depth 7 names the key's leaf, so a warm search is **one READ**.
//! A leaf image is authoritative for a key iff it checks (one epoch in every line) and
//! `lo ≤ key ≤ hi`: leaves are never removed, `lo` never changes and `hi` only shrinks, so a key
//! above `hi` means the leaf split after the copy of its special node was taken. The client then
//! **backtracks**: it drops that copy and reads the special node afresh (one more READ), whose
//! floor names the leaf that now covers the key. Everything else is decided on nodes read afresh
//! by the shared descent ([`dmindex_prim::radix::descend`]).
//!
//! # Round trips (warm cache, 8-byte values)
//!
//! | operation | paper | here |
//! |---|---|---|
//! | search | 1 | 1: READ leaf |
//! | update | 2 | 2: `[FAA +1, READ leaf]`, `[WRITE value, FAA −1]` |
//! | insert, new key | 3 | 3: `[FAA +1, READ leaf]`, masked CAS key field, `[WRITE value, masked CAS line head, FAA −1]` |
//! | insert, present key | — | 2 |
//! | delete | 2 | 2: `[FAA +1, READ leaf]`, `[masked CAS line head, FAA −1]` |
//! | insert that splits | — | 5: `[FAA +1, READ leaf]` (no free slot), claim `[FAA, READ]`, `[WRITE new leaf, READ special node]`, slot CAS, `[WRITE old leaf, WRITE new cell, FAA, FAA]` |
//! | insert of a new 7-byte prefix | — | 1 CAS after the descent (+1 WRITE when the new special node is on another memory node) |
//! | scan of 100 items | 2–3 READ rounds | 1 doorbell of leaf READs per prefix with its special node cached, +1 READ of it when not ([`scan`]) |
//!
//! # Races the paper leaves open, and how they are closed
//!
//! * **Two inserts of one key take two slots.** Key fields are written once per leaf epoch, by
//!   a masked CAS of a free field, and an insert takes the *first* free slot of its image; a
//!   failed CAS returns the word, which the inserter treats as a read. So a key holds at most one
//!   slot that is not DELETED per epoch, and only an SMO (which Spear keeps away from every
//!   insert) rewrites keys.
//!   No extra round trip.
//! * **An update writes after a delete and a re-insert reused the slot.** A delete keeps the key
//!   and turns the cell's state bits in its line head to DELETED by masked CAS; DELETED is final
//!   for the epoch (a re-insert takes a free slot), an update never writes a state, and a slot
//!   goes to another key only through an SMO's compaction, which Spear excludes. No extra round
//!   trip.
//! * **A reader sees a key whose value is not written yet.** A cell's state, in its line's head
//!   word (the value's cache line), is EMPTY until the insert's masked CAS, posted after its
//!   value WRITE in one doorbell, turns it LIVE: a key in an EMPTY cell is a pending insert and
//!   invisible. One head word per 7 cells (8-byte values), no round trip.
//! * **A READ torn across an SMO's in-place rewrite.** Every line carries the leaf epoch; an
//!   image is accepted only if all agree ([`leaf::LeafImage::check`]). One more READ when a
//!   search overlaps a split.
//! * **Moved keys in two leaves.** A split publishes the new leaf before it shrinks the old one
//!   (so no key is ever unreachable), and the new leaf is *born claimed*: both copies of the moved
//!   keys stay frozen until the last doorbell, whose WRITEs precede both releases. The inserted
//!   key, if it moves, is pending in the new leaf until that doorbell. No extra round trip.
//! * **A special node that fills** grows N4 → N16 → N48 → N256 by the shared, helped type
//!   switch (the public code asserts at 16 leaves).
//!
//! # Where we differ from the paper and its public code
//!
//! * **Every prefix has a special node**, even one with a single leaf; the public code hangs a
//!   prefix's first leaf directly from the deepest inner node (a *hidden prefix*) and makes the
//!   special node at the first split. At the paper's density (512 M keys in a 2³⁰ key space,
//!   ~128 keys a prefix, 84 a leaf) every prefix splits anyway; a single-leaf prefix costs one
//!   N4 (64 B remote, 17 B of cache) and no round trip, and the push-down of a hidden leaf under
//!   concurrent inserts (a race the public code does not handle) does not exist.
//! * Leaves hold 84 slots in 1 KB with 8-byte values (the public code: 65 in 1088 B), and as
//!   many as fit in 1 KB with longer ones (the paper's leaves are 1 KB at every size): a key is
//!   stored as its last
//!   byte and a used bit (a leaf's keys share a 7-byte prefix), every key line and every value
//!   line head carries the epoch, and each line head the states of its cells, which is what
//!   makes torn reads and the races above detectable ([`leaf`]).
//! * The public code's defects (values detached from their keys by a split, versions never
//!   incremented, exact match in uncached special-node lookups, no delete, no scan, FAA and READ
//!   as two round trips) are not carried over.
//!
//! # Crashes
//!
//! Nothing acknowledged is lost: every write is in place before the operation returns. A client
//! that dies inside Spear is judged dead by the lease rules and fenced by the first client that
//! waits on its leaf for a lease ([`dmindex_prim::spear`]'s intent table names who may hold a
//! share of a leaf's count): a count it left is dropped by the next split, and a claim it left is
//! taken over, its half-done split rolled forward (the old leaf shrunk before the new one opens)
//! and released (`recovery`). A writer that dies holding a multi-line cell's lock (values over
//! 56 bytes), with or without part of its last doorbell landed, is named by the lock word and
//! has left the cell it meant to write in a redo record ([`redo`]): whoever waits on the cell
//! finishes that write once the writer is fenced, and an SMO that finds the cell in its drained
//! image takes the value from the record. An SMO whose in-place rewrite is longer than a packet
//! (long values) writes it out of place first and names the copy in the leaf, so the taker of
//! its claim can finish a rewrite it left part landed ([`smo_redo`]). So Dolphin recovers from
//! client crashes at every value size ([`PointIndex::recovers_client_crashes`]).

pub mod leaf;
pub mod ops;
mod recovery;
pub mod redo;
pub mod scan;
pub mod smo;
pub mod smo_redo;
pub mod special;
pub mod sync;

use std::sync::atomic::AtomicU64;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, IndexStats, PointIndex, RangeIndex, ScanBuf,
};
use dmindex_prim::counter::{bump, get, LeafFill, Striped};
use dmindex_prim::key;
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::pool::{Pool, Pooled};
use dmindex_prim::radix::slot::MAX_NODES;
use dmindex_prim::radix::{DescentCounters, Header, Kind, NodeImage, RadixCache, Tree};
use dmindex_prim::root::{Magic, RootSlot};

use crate::leaf::Shape;
use crate::redo::Redo;
use crate::sync::{Cells, SyncCounters};

/// The descriptor's magic ("DL").
pub const MAGIC: Magic = Magic { name: "dolphin", value: 0x444C, bits: 16 };

/// Dolphin's options: slots per leaf, and how long a split waits for operations in flight.
pub const OPTIONS: Options = Options {
    what: "dolphin",
    known: &[
        Opt::number("slots", &["leaf_slots"], 2..=leaf::MAX_SLOTS),
        Opt::number("drain_polls", &[], 1..=1_000_000),
    ],
};

/// Bytes of a leaf by default, the paper's (§5 sets the leaf nodes to 1 KB for all its
/// experiments): the slots are the most that fit ([`leaf::Shape::fitting`]), 84 with 8-byte
/// values.
pub const LEAF_BYTES: usize = 1024;
/// Polls a split makes for operations in flight on its leaf before it gives up and retries.
pub const DEFAULT_DRAIN_POLLS: usize = 256;
/// Keys are this long.
pub const KEY_BYTES: usize = key::BYTES;
/// The depth of the special nodes (the index of the key byte their slots are named by).
pub const SPECIAL_DEPTH: usize = 7;

/// The root is the largest kind: it never grows, so the root word never changes.
const ROOT_KIND: Kind = Kind::N256;

#[derive(Debug, Default)]
struct Counters {
    sync: SyncCounters,
    descent: DescentCounters,
    /// Bumped by every search: striped ([`Striped`]).
    searches: Striped,
    cache_hits: Striped,
    backtracks: AtomicU64,
    retries: AtomicU64,
    compactions: AtomicU64,
    splits: AtomicU64,
    smo_retries: AtomicU64,
    new_prefixes: AtomicU64,
    path_splits: AtomicU64,
    scan_rounds: AtomicU64,
    scan_refreshes: AtomicU64,
    /// Live pairs per leaf scans saw: sizes a round.
    leaf_fill: LeafFill,
}

/// [`Dolphin`] behind read delegation and write combining ([`dmindex_prim::rdwc::Rdwc`]), as
/// `dmindex bench --index dolphin` runs it: created and opened like [`Dolphin`], with the same
/// configuration; option `rdwc=0` turns the layer off.
pub type DolphinRdwc = dmindex_prim::rdwc::Rdwc<Dolphin>;

/// A compute node's handle on a Dolphin index.
pub struct Dolphin {
    root: GlobalAddr,
    shape: Shape,
    polls: u32,
    cache: RadixCache,
    bufs: Pool<Vec<u8>>,
    /// Scans' working vectors ([`scan::ScanScratch`]).
    scans: Pool<scan::ScanScratch>,
    counters: Counters,
    /// Multi-line cells' redo records ([`redo`]); `None` for one-line cells.
    redo: Option<Redo>,
    /// Each client's scratch area for SMO rewrites longer than a packet ([`smo_redo`]);
    /// `None` for leaves that fit one.
    smo_scratch: Option<smo_redo::Scratch>,
}

/// The shape and options `config` asks for, checked.
fn configure<T: Transport>(c: &Client<T>, config: &IndexConfig) -> IndexResult<(Shape, u32)> {
    let opts = OPTIONS.parse(&config.extra)?;
    if config.max_key != KEY_BYTES {
        return Err(IndexError::Config(format!(
            "dolphin keys are exactly {KEY_BYTES} bytes (7-byte prefixes and a last byte), not \
             max_key={}",
            config.max_key
        )));
    }
    if c.info().nodes() > MAX_NODES {
        return Err(IndexError::Config(format!(
            "dolphin addresses at most {MAX_NODES} memory nodes, not {}",
            c.info().nodes()
        )));
    }
    let shape = match opts.number("slots") {
        Some(slots) => Shape::new(slots, config.max_value)?,
        None => Shape::fitting(LEAF_BYTES, config.max_value)?,
    };
    let polls = opts.number("drain_polls").unwrap_or(DEFAULT_DRAIN_POLLS) as u32;
    Ok((shape, polls))
}

/// The redo directory: right after the root node, which never moves.
fn redo_directory(root: GlobalAddr) -> GlobalAddr {
    root.add(ROOT_KIND.alloc_bytes())
}

impl<T: Transport> Cells<T> for Dolphin {
    fn redo(&self) -> Option<&Redo> {
        self.redo.as_ref()
    }

    fn smo_scratch(&self) -> Option<&smo_redo::Scratch> {
        self.smo_scratch.as_ref()
    }
}

fn shape_bits(shape: &Shape) -> u64 {
    (shape.slots as u64) << 16 | shape.value as u64
}

impl Dolphin {
    fn new(
        root: GlobalAddr,
        shape: Shape,
        polls: u32,
        config: &IndexConfig,
        redo: Option<Redo>,
        nodes: usize,
    ) -> Dolphin {
        Dolphin {
            redo,
            smo_scratch: smo_redo::needed(&shape).then(|| smo_redo::Scratch::new(nodes)),
            root,
            shape,
            polls,
            cache: RadixCache::new(config.cache_bytes),
            bufs: Pool::new(256),
            scans: Pool::new(64),
            counters: Counters::default(),
        }
    }

    /// The tree as the shared radix descent sees it (floor lookups at the special depth).
    fn tree(&self) -> Tree<'_> {
        Tree {
            root: self.root,
            root_kind: ROOT_KIND,
            cache: &self.cache,
            floor_depth: Some(SPECIAL_DEPTH),
            counters: &self.counters.descent,
        }
    }

    /// A leaf-sized buffer from this compute node's pool.
    fn leaf_buf<T: Transport>(&self, c: &Client<T>) -> Pooled<'_, Vec<u8>> {
        self.bufs.get(c, || vec![0u8; self.shape.bytes])
    }

    fn check_value(&self, value: &[u8]) -> IndexResult<()> {
        if value.len() != self.shape.value {
            return Err(IndexError::Config(format!(
                "this dolphin index stores values of exactly {} bytes, got {}",
                self.shape.value,
                value.len()
            )));
        }
        Ok(())
    }
}

impl<T: Transport> PointIndex<T> for Dolphin {
    // A dead client's Spear shares and claims are recovered (`crate::recovery`), and a
    // multi-line cell's lock from its redo record (`crate::redo`).
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let (shape, _) = configure(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        // The root node, then the redo directory (one word per memory node; zero for one-line
        // cells, which keep no records).
        let root = c.alloc(ROOT_KIND.alloc_bytes() + Redo::directory_bytes(c), 64).await?;
        let mut buf = Vec::new();
        NodeImage::encode_new(GlobalAddr::NULL, &Header::new(ROOT_KIND, 0, b"", 0), &[], &mut buf);
        c.write(root, &buf).await?;
        if shape.multi_line() {
            Redo::create(c, &shape, redo_directory(root)).await?;
        }
        slot.claim(c, root.raw()).await?;
        slot.publish(c, &MAGIC, shape_bits(&shape)).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let (shape, polls) = configure(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        slot.check(c, &MAGIC, shape_bits(&shape)).await?;
        let root = GlobalAddr::from_raw(slot.load(c).await?);
        let redo = match shape.multi_line() {
            true => Some(Redo::open(c, &shape, redo_directory(root)).await?),
            false => None,
        };
        Ok(Dolphin::new(root, shape, polls, config, redo, c.info().nodes() as usize))
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        out.clear();
        self.search_key(c, key::word(key, "dolphin")?, out).await
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let k = key::word(key, "dolphin")?;
        self.check_value(value)?;
        self.insert_key(c, k, value).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let k = key::word(key, "dolphin")?;
        self.check_value(value)?;
        self.update_key(c, k, value).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.delete_key(c, key::word(key, "dolphin")?).await
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
                ("backtracks", get(&n.backtracks)),
                ("torn_leaf_reads", get(&n.sync.torn_reads)),
                ("lost_key_cas", get(&n.sync.lost_key_cas)),
                ("turned_away_by_smo", get(&n.sync.claimed)),
                ("compactions", get(&n.compactions)),
                ("splits", get(&n.splits)),
                ("smo_retries", get(&n.smo_retries)),
                ("new_prefixes", get(&n.new_prefixes)),
                ("path_splits", get(&n.path_splits)),
                ("scan_rounds", get(&n.scan_rounds)),
                ("scan_refreshes", get(&n.scan_refreshes)),
                ("cached_nodes", self.cache.len() as u64),
            ]
            .into_iter()
            .chain(n.descent.rows())
            .collect(),
        }
    }
}

impl<T: Transport> RangeIndex<T> for Dolphin {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        match key::scan_from(from)? {
            Some(lo) => self.scan_keys(c, lo, u64::MAX, count, out).await,
            None => Ok(()),
        }
    }

    async fn scan_range_into(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        let Some((lo, end)) = key::range(lo, hi) else { return Ok(()) };
        self.scan_keys(c, lo, end, usize::MAX, out).await
    }
}
