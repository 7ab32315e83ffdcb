//! # dmindex-race: RACE, one-sided RDMA-conscious extendible hashing (USENIX ATC '21)
//!
//! The baseline of the SepHash paper: an extendible hash table whose every operation is
//! one-sided verbs from the compute node. Layouts are drawn in [`layout`]; `docs/race.md` has the
//! races closed and their round-trip costs.
//!
//! ## Structure
//!
//! A directory (global depth, one entry per suffix naming a segment and its local depth) points
//! to segments of groups {main, shared overflow, main}. Each bucket is one cache line: a header
//! (local depth and suffix) and 7 slots of {fingerprint, length, frozen and tentative bits,
//! 47-bit KV block address}. A key
//! has two main buckets in its segment (two hash choices); each with the group's overflow bucket
//! forms a combined bucket, read with one READ, and both combined buckets are read in one
//! doorbell (a segment lives on one memory node). Each compute node's handle caches the
//! directory; every bucket image carries its header, so a stale cache is noticed on the data
//! itself (suffix check) and the one entry is re-read.
//!
//! ## Operations and round trips (no split, warm cache, short blocks)
//!
//! | op | round trips |
//! |---|---|
//! | search | 1 doorbell READ of both combined buckets + 1 READ per fingerprint match (usually 1) |
//! | insert (new key) | block WRITE + bucket READ (+ block READs of fingerprint matches) + tentative slot CAS + re-read + commit CAS = 5 |
//! | insert (existing key) | block WRITE + bucket READ + block READ + slot CAS = 4 |
//! | update | bucket READ + block READ + block WRITE + slot CAS = 4 (3 when the key is absent: no WRITE) |
//! | delete | bucket READ + block READ + slot CAS = 3 |
//!
//! A KV block is written and *awaited* before its address is CAS'd into a slot: blocks and
//! segments may be on different memory nodes, and RC ordering holds only per node.
//!
//! ## Racing inserts of one absent key (insert is an upsert)
//!
//! Two clients inserting the same absent key may both CAS an empty slot. RACE keeps such
//! duplicates and makes the lowest the value, clearing the others on sight; that is unsound when
//! a READ samples its lines at different instants (an image can pair a copy already deleted with
//! a newer one, and the newer, live one gets cleared). Here an insert of an absent key places its
//! entry *tentative* (a slot bit: no value, skipped by readers), re-reads, and commits it by CAS
//! only when no other entry of the key is committed and no lower tentative one is pending (it
//! aborts higher ones). So a key has at most one committed entry at any instant, and update,
//! delete and upsert act on that one. One round trip more for a new key; see `ops`.
//!
//! ## Split (resize)
//!
//! When both combined buckets are full the inserter splits the segment: lock it (a CAS on its
//! meta word), freeze every entry whose hash bit `depth` is 1 (CAS to the frozen form: updates and
//! deletes of those keys now fail and wait), write the new segment with their copies at the same
//! positions, switch the old segment's headers to depth + 1, freeze and copy what inserters added
//! meanwhile, publish the new segment in the directory (under the directory lock, doubling it
//! when needed), clear the moved slots and unlock. Searches never wait: a frozen entry beside an
//! old header is still the key's value. See `split` for the argument.
//!
//! ## `race-sephash`: RACE as the SepHash authors ran it
//!
//! [`RaceSepHash`] is this table with another resize policy ([`Resize::GlobalLock`]): the one
//! the SepHash paper's RACE numbers were measured with. Search, insert, update and delete are
//! the code above; what differs is the split (one lock word for the whole table, entries moved
//! one by one with a CAS each) and the directory refresh (the whole directory, 24 B an entry,
//! re-read on every split-lock failure and every depth mismatch an insert sees). See
//! [`global`] for the protocol and `docs/race.md` for why it exists.
//!
//! ## A client that crashes
//!
//! A client that crashes mid-split leaves the segment locked (the lock word names it) and its
//! moving entries frozen. A crash never loses an acknowledged write: nothing is cleared from the
//! old segment before the new one is published with a copy of it. The clients that wait on the
//! split judge the splitter by its lease and, once it is fenced, one of them takes the lock over
//! and finishes the split if the new segment was published, or undoes it if not (`recover`;
//! `race-sephash`: `global_repair`). A split records what the repair needs (the new segment in
//! the old one's meta line, the split being published in the directory) in doorbells it posts
//! anyway: no round trip is added.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, IndexStats, PointIndex};
use dmindex_prim::kv_block::{self, Blocks};
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::pool::Pool;
use dmindex_prim::root::RootSlot;

pub mod layout;

mod bucket;
mod dir;
pub mod global;
mod global_repair;
mod ops;
mod recover;
mod split;

use layout::Shape;

/// The options RACE reads from [`IndexConfig::extra`].
pub const OPTIONS: Options = Options {
    what: "race",
    known: &[
        Opt::number("depth", &["initial_depth"], 0..=layout::MAX_DEPTH),
        Opt::number("max_depth", &[], 1..=layout::MAX_DEPTH),
        Opt::number("groups", &[], 1..=layout::MAX_GROUPS),
    ],
};

/// The options `race-sephash` reads (RACE's).
pub const SEPHASH_OPTIONS: Options = Options { what: "race-sephash", known: OPTIONS.known };

/// How a table grows: what `race` and `race-sephash` do differently. Everything else (bucket
/// layout, search, insert, update, delete) is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resize {
    /// `race`: a split lock per segment, entries frozen and copied in one WRITE, the directory
    /// published under its own short lock; a stale cache entry is refreshed alone (2 words).
    SegmentLock,
    /// `race-sephash`: the SepHash authors' RACE ([`global`]): one lock word for the whole
    /// table, 24-B directory entries with a split flag, entries moved one CAS at a time, and
    /// the whole directory re-read on every refresh.
    GlobalLock,
}

/// Initial global depth (the reference code's).
pub const DEFAULT_DEPTH: usize = 4;
/// Largest global depth (the reference code's).
pub const DEFAULT_MAX_DEPTH: usize = 20;
/// Groups {main, overflow, main} per segment (the reference code's 64).
pub const DEFAULT_GROUPS: usize = 64;

/// Counters of one compute node's handle.
#[derive(Debug, Default)]
struct Counters {
    /// Splits begun: every lock CAS a split tries, failed or not (SepHash's Table 1 counts
    /// these as resizes).
    split_attempts: AtomicU64,
    /// Splits done.
    splits: AtomicU64,
    moved: AtomicU64,
    retries: AtomicU64,
    /// Updates and upserts whose CAS lost to a later write of their own key, done without a
    /// retry.
    superseded: AtomicU64,
    withdrawn: AtomicU64,
    aborted: AtomicU64,
    /// Bumped by every search: striped ([`Striped`]).
    searches: Striped,
    search_buckets: Striped,
    refreshes: AtomicU64,
    /// Bytes READ by directory refreshes (the global depth and the entries).
    refresh_bytes: AtomicU64,
    /// Locks and marks taken over from a dead client and repaired.
    repairs: AtomicU64,
}

use dmindex_prim::counter::{add as bump, Striped};

/// A compute node's handle on a RACE table: its shape and its directory cache.
#[derive(Debug)]
pub struct Race {
    dir: GlobalAddr,
    shape: Shape,
    blocks: Blocks,
    config: IndexConfig,
    /// The directory cache: `2^depth` entries as last read, each in the 8-B form of
    /// [`layout::dir_entry`] whatever the remote layout.
    cache: RwLock<Vec<u64>>,
    counters: Counters,
    resize: Resize,
    /// `race-sephash`'s whole-directory READs ([`global`]): reused, one kept per pool shard
    /// (a directory at the paper's depth 18 is 6 MB).
    directory_reads: Pool<Vec<u8>>,
}

/// `race-sephash`: RACE with the SepHash authors' resize ([`Resize::GlobalLock`], [`global`]).
/// The same table code as [`Race`]; only splits and directory refreshes differ.
#[derive(Debug)]
pub struct RaceSepHash(Race);

impl RaceSepHash {
    /// The table handle (audits such as [`Race::slots_holding`]).
    pub fn table(&self) -> &Race {
        &self.0
    }
}

/// Shape and initial depth from the configuration.
fn parse(config: &IndexConfig, resize: Resize) -> IndexResult<(Shape, usize)> {
    let options = match resize {
        Resize::SegmentLock => &OPTIONS,
        Resize::GlobalLock => &SEPHASH_OPTIONS,
    };
    let p = options.parse(&config.extra)?;
    let depth = p.number("depth").unwrap_or(DEFAULT_DEPTH);
    let max_depth = p.number("max_depth").unwrap_or(DEFAULT_MAX_DEPTH.max(depth));
    let groups = p.number("groups").unwrap_or(DEFAULT_GROUPS);
    if depth > max_depth {
        return Err(IndexError::Config(format!(
            "option depth={depth} exceeds max_depth={max_depth}"
        )));
    }
    let block = kv_block::HEADER + config.max_key + config.max_value;
    if config.max_key == 0 || block > layout::MAX_BLOCK {
        return Err(IndexError::Config(format!(
            "race keys must be 1 byte or more and blocks at most {} bytes (key {} + value {} + \
             header {})",
            layout::MAX_BLOCK,
            config.max_key,
            config.max_value,
            kv_block::HEADER
        )));
    }
    let shape = Shape { groups, max_depth, max_key: config.max_key, max_value: config.max_value };
    Ok((shape, depth))
}

fn check_nodes<T: Transport>(c: &Client<T>) -> IndexResult<()> {
    if c.info().nodes() > layout::MAX_NODES {
        return Err(IndexError::Config(format!(
            "race addresses at most {} memory nodes (47-bit block addresses), not {}",
            layout::MAX_NODES,
            c.info().nodes()
        )));
    }
    if let Some(big) = c.info().node_sizes.iter().find(|&&n| n > layout::MAX_NODE_BYTES) {
        return Err(IndexError::Config(format!(
            "race addresses at most {} bytes per memory node (41-bit block offsets / 64), not {big}",
            layout::MAX_NODE_BYTES
        )));
    }
    Ok(())
}

impl Race {
    fn segment_bytes(&self) -> u64 {
        layout::segment_bytes(self.shape.groups)
    }

    /// The resize policy this handle's table was built with.
    pub fn resize(&self) -> Resize {
        self.resize
    }

    fn magic(resize: Resize) -> &'static dmindex_prim::root::Magic {
        match resize {
            Resize::SegmentLock => &layout::MAGIC,
            Resize::GlobalLock => &layout::SEPHASH_MAGIC,
        }
    }

    async fn create_with<T: Transport>(
        c: &Client<T>,
        config: &IndexConfig,
        resize: Resize,
    ) -> IndexResult<Self> {
        let (shape, depth) = parse(config, resize)?;
        check_nodes(c)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        let dir = dir::create(c, &shape, depth as u32, resize).await?;
        root.claim(c, dir.raw()).await?;
        root.publish(c, Self::magic(resize), shape.bits()).await?;
        Self::open_with(c, config, resize).await
    }

    async fn open_with<T: Transport>(
        c: &Client<T>,
        config: &IndexConfig,
        resize: Resize,
    ) -> IndexResult<Self> {
        let (shape, _) = parse(config, resize)?;
        check_nodes(c)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        root.check(c, Self::magic(resize), shape.bits()).await?;
        let dir = GlobalAddr::from_raw(root.load(c).await?);
        let entries = dir::load(c, dir, shape.max_depth, resize).await?;
        Ok(Race {
            dir,
            shape,
            blocks: Blocks::new(config.max_key, config.max_value),
            config: config.clone(),
            cache: RwLock::new(entries),
            counters: Counters::default(),
            directory_reads: Pool::new(dmindex_prim::pool::SHARDS),
            resize,
        })
    }

    fn table_stats(&self) -> IndexStats {
        let n = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let depth = self.cache.read().expect("directory cache").len().trailing_zeros() as u64;
        let entry = match self.resize {
            Resize::SegmentLock => 8,
            Resize::GlobalLock => layout::GLOBAL_ENTRY,
        };
        IndexStats {
            cache_bytes: entry << depth,
            retries: get(&n.retries),
            extra: vec![
                ("splits", get(&n.splits)),
                // Lock CASes splits tried, failed ones included (SepHash's Table 1 "resizes").
                ("split_attempts", get(&n.split_attempts)),
                ("split_moved_entries", get(&n.moved)),
                // Inserts that placed an entry, found the key present and took theirs back.
                ("insert_withdrawals", get(&n.withdrawn)),
                // Other inserts' tentative entries aborted (racing inserts of one absent key).
                ("tentative_aborts", get(&n.aborted)),
                // Updates and upserts whose CAS lost to a later write of their key: done, no retry.
                ("updates_superseded", get(&n.superseded)),
                ("directory_refreshes", get(&n.refreshes)),
                ("directory_refresh_bytes", get(&n.refresh_bytes)),
                // Splits and locks a dead client left, taken over and repaired.
                ("crash_repairs", get(&n.repairs)),
                // Combined buckets read per search = the second over the first.
                ("searches", n.searches.get()),
                ("search_combined_buckets_read", n.search_buckets.get()),
                // The global depth this handle has seen (the harness sums it over compute nodes).
                ("directory_depth", depth),
            ],
        }
    }
}

impl<T: Transport> PointIndex<T> for Race {
    /// The split lock and the directory lock name their holder; a dead splitter's split is
    /// finished or undone, a dead publisher's publish finished (`recover`).
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        Self::create_with(c, config, Resize::SegmentLock).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        Self::open_with(c, config, Resize::SegmentLock).await
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

    const LEVELS: &'static [&'static str] = &["directory_depth"];

    fn stats(&self) -> IndexStats {
        self.table_stats()
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        let (used, slots) = self.count_slots(c).await?;
        Ok(Some(if slots == 0 { 0.0 } else { used as f64 / slots as f64 }))
    }
}

/// Every item forwarded to the shared table code; only `create` and `open` name the policy.
impl<T: Transport> PointIndex<T> for RaceSepHash {
    /// The table's lock word and the moving marks name their holder; a dead mover's split is
    /// published, moved and cleared by a waiter (`global_repair`).
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        Ok(RaceSepHash(Race::create_with(c, config, Resize::GlobalLock).await?))
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        Ok(RaceSepHash(Race::open_with(c, config, Resize::GlobalLock).await?))
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.0.search_into(c, key, out).await
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.0.insert(c, key, value).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.0.update(c, key, value).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.0.delete(c, key).await
    }

    const LEVELS: &'static [&'static str] = <Race as PointIndex<T>>::LEVELS;

    fn stats(&self) -> IndexStats {
        self.0.table_stats()
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        self.0.load_factor(c).await
    }
}
