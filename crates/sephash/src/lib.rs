//! # SepHash: a write-optimised hash index on disaggregated memory (VLDB '24)
//!
//! Point operations only (`--index sephash`). Every byte SepHash keeps remotely is drawn in
//! [`layout`]; `docs/sephash.md` walks through the algorithm, what we changed from the paper and
//! the public code, and why.
//!
//! ## Separate segments (§4.2)
//!
//! An extendible-hash directory names, per hash suffix, a small unsorted **CurSegment** that
//! takes every write as an append, and through the CurSegment's meta word a large
//! **MainSegment** sorted by fingerprint. When a CurSegment fills up, the client that took its
//! last slot **merges** it into a fresh MainSegment (the newest entry of a key wins, tombstones
//! and superseded entries are dropped); when that MainSegment would exceed `main_ratio` ×
//! slots entries, the merge **splits** it by the next hash bit, which each entry carries in its
//! 4 depth bits, so the keys' blocks are read only when a round of 4 bits is used up.
//!
//! ## Appends (§4.3)
//!
//! A write is one doorbell READ of the meta and a window of slots (from this node's sliding
//! offset), then a CAS of the first free slot: 2 round trips, with the KV block and the filter
//! position posted before the CAS as zero-wait WRITEs on the same memory node, so they land
//! first. A slot is free when its sign differs from the meta's; CASes go to the first free
//! slot only, so taken slots are always a prefix and a key's newest entry is its last one.
//! Update and delete append too (a tombstone for delete), but they must say whether the key
//! existed: they read the whole prefix and the MainSegment range with the meta, and the CAS of
//! the next slot succeeds only if nothing was appended since — 3 round trips. With
//! `update=upsert` they are the paper's blind appends instead, as cheap as an insert: an update
//! of an absent key inserts it, and neither says whether the key existed (both return `true`;
//! [`PointIndex::blind_writes`]).
//!
//! ## Search (§4.4)
//!
//! One doorbell READs a window of the MainSegment, about one average run wide, centred where the
//! cached FPTable predicts the key's (fp, fp2) ([`fptable::window`]), then the key's filter line: its position and, in the same 64-B
//! line, a tag naming the generation it belongs to ([`layout`]). Then the candidates' blocks:
//! 2 round trips and 3 verbs in the common case. The slots are READ only when the position is
//! set, and the rest of the fingerprint's range only when the key's entries may spill over the
//! window, in one more doorbell with the meta.
//!
//! ## Correctness
//!
//! A segment's meta word does not repeat within 2^20 of its merges (each merge bumps its
//! edition), so reading the meta before and after a READ proves nothing merged in between. The
//! arguments for each operation, the races in the paper and in the public code and how each is
//! closed, and what a crashed client leaves behind are in `docs/sephash.md`.

pub mod cache;
pub mod fptable;
pub mod layout;
pub mod shape;

mod append;
mod dir;
mod merge;
mod recover;
mod search;

use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, IndexStats, PointIndex};
use dmindex_prim::kv_block::Blocks;
use dmindex_prim::root::RootSlot;

use crate::cache::Cache;
use crate::layout::{Meta, MAX_NODES, MAX_NODE_BYTES};
pub use crate::shape::Shape;

/// Counters of one compute node's handle.
#[derive(Debug, Default)]
struct Counters {
    merges: AtomicU64,
    splits: AtomicU64,
    resize_bytes: AtomicU64,
    /// Retries by reason ([`Retry`]), in its order; the handle's retries are their sum.
    retry_reasons: [AtomicU64; Retry::ALL.len()],
    /// Bumped by every search: striped ([`Striped`]).
    searches: Striped,
    search_segment_reads: Striped,
    cur_reads: Striped,
    /// Searches whose window missed part of the key's run (a re-read).
    search_spills: Striped,
    dir_refreshes: AtomicU64,
    fptable_refreshes: AtomicU64,
    /// Waits for a closed segment to reopen, and the READs of its meta they made.
    closed_waits: AtomicU64,
    closed_wait_reads: AtomicU64,
    merge_key_reads: AtomicU64,
    mains_reused: AtomicU64,
    /// Merges and splits a dead client left, taken over and finished.
    repairs: AtomicU64,
}

use dmindex_prim::counter::{add as bump, Striped};

/// Why an operation starts over (counted by reason; the handle's retries are the sum).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Retry {
    /// The segment's meta changed around the READ of its slots or MainSegment (an append, a
    /// merge or a split since).
    MetaMoved = 0,
    /// The cached directory entry led to a segment that no longer holds the key (a split).
    ForeignSegment,
    /// The cached MainSegment was replaced by a merge.
    StaleMain,
    /// The cached append offset was past the first free slot (the segment was merged since).
    OffsetPastFree,
    /// An append's CAS of a free slot lost to another append.
    CasLost,
}

impl Retry {
    const ALL: [Retry; 5] = [
        Retry::MetaMoved,
        Retry::ForeignSegment,
        Retry::StaleMain,
        Retry::OffsetPastFree,
        Retry::CasLost,
    ];
}

impl Counters {
    /// Counts one retry for `why`.
    fn retry(&self, why: Retry) {
        bump(&self.retry_reasons[why as usize], 1);
    }
}

/// A compute node's handle on a SepHash index.
pub struct SepHash {
    shape: Shape,
    /// The directory on memory node 0.
    dir: GlobalAddr,
    blocks: Blocks,
    cache: Cache,
    counters: Counters,
    /// Replaced MainSegments this node's merges may reuse, by (memory node, size class).
    free_mains: std::sync::Mutex<std::collections::HashMap<(u16, u32), Vec<GlobalAddr>>>,
}

impl SepHash {
    fn new(shape: Shape, dir: GlobalAddr) -> SepHash {
        SepHash {
            shape,
            dir,
            blocks: Blocks::new(shape.max_key, shape.max_value),
            cache: Cache::default(),
            counters: Counters::default(),
            free_mains: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The shape this handle was opened with.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Address of directory entry `i`.
    fn dir_entry(&self, i: u64) -> GlobalAddr {
        self.dir.add(8 + 8 * i)
    }
}

impl<T: Transport> PointIndex<T> for SepHash {
    /// A closed CurSegment's merge record names its merger; a dead merger's merge (or split)
    /// is done by a waiter (`recover`).
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = Shape::from_config(config)?;
        let info = c.info();
        if info.nodes() > MAX_NODES {
            return Err(IndexError::Config(format!(
                "SepHash entries address blocks on at most {MAX_NODES} memory nodes (got {})",
                info.nodes()
            )));
        }
        if let Some(big) = (0..info.nodes()).find(|&n| info.node_size(n) > Some(MAX_NODE_BYTES)) {
            return Err(IndexError::Config(format!(
                "memory node {big} is larger than the {MAX_NODE_BYTES} bytes SepHash entries address"
            )));
        }
        let root = RootSlot::with_descriptor(config.root_slot)?;
        let dir = c.alloc_on(0, 8 + (8 << shape.max_depth), 64).await?;
        let segments = 1u64 << shape.depth;
        let mut entries = Vec::with_capacity(8 * (segments as usize + 1));
        entries.extend_from_slice(&(shape.depth as u64).to_le_bytes());
        let idx = SepHash::new(shape, dir);
        let open = Meta::new(true, false, shape.depth, 0, 0);
        for i in 0..segments {
            let node = (i % info.nodes() as u64) as u16;
            let seg = c.alloc_on(node, shape.cur.bytes(), 64).await?;
            idx.write_head(c, seg, open, open, layout::fresh_record(0)).await?;
            entries.extend_from_slice(&seg.raw().to_le_bytes());
        }
        c.write(dir, &entries).await?;
        root.claim(c, dir.raw()).await?;
        root.publish(c, &shape::MAGIC, shape.word()).await?;
        Ok(idx)
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let shape = Shape::from_config(config)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        root.check(c, &shape::MAGIC, shape.word()).await?;
        let dir = GlobalAddr::from_raw(root.load(c).await?);
        Ok(SepHash::new(shape, dir))
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.check_key(key, None)?;
        self.search_key(c, key, out).await
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.check_key(key, Some(value))?;
        self.append(c, key, value, append::Kind::Upsert).await.map(|_| ())
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.check_key(key, Some(value))?;
        let kind = if self.shape.upsert { append::Kind::Upsert } else { append::Kind::Update };
        self.append(c, key, value, kind).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.check_key(key, None)?;
        let kind = if self.shape.upsert { append::Kind::Tombstone } else { append::Kind::Delete };
        self.append(c, key, &[], kind).await
    }

    /// With `update=upsert`, updates and deletes are the paper's blind appends.
    fn blind_writes(&self) -> bool {
        self.shape.upsert
    }

    fn stats(&self) -> IndexStats {
        let k = &self.counters;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IndexStats {
            cache_bytes: self.cache.bytes(),
            retries: k.retry_reasons.iter().map(g).sum(),
            extra: vec![
                ("merges", g(&k.merges)),
                ("splits", g(&k.splits)),
                ("resize_bytes", g(&k.resize_bytes)),
                ("searches", k.searches.get()),
                ("search_segment_reads", k.search_segment_reads.get()),
                ("search_cur_reads", k.cur_reads.get()),
                ("search_spills", k.search_spills.get()),
                ("dir_refreshes", g(&k.dir_refreshes)),
                ("fptable_refreshes", g(&k.fptable_refreshes)),
                ("closed_waits", g(&k.closed_waits)),
                ("closed_wait_reads", g(&k.closed_wait_reads)),
                ("merge_key_reads", g(&k.merge_key_reads)),
                ("mains_reused", g(&k.mains_reused)),
                ("crash_repairs", g(&k.repairs)),
                ("retry_meta_moved", g(&k.retry_reasons[Retry::MetaMoved as usize])),
                ("retry_foreign_segment", g(&k.retry_reasons[Retry::ForeignSegment as usize])),
                ("retry_stale_main", g(&k.retry_reasons[Retry::StaleMain as usize])),
                ("retry_offset_past_free", g(&k.retry_reasons[Retry::OffsetPastFree as usize])),
                ("retry_cas_lost", g(&k.retry_reasons[Retry::CasLost as usize])),
            ],
        }
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        self.utilisation(c).await.map(|u| Some(u.entries_used as f64 / u.entries.max(1) as f64))
    }
}

impl SepHash {
    fn check_key(&self, key: &[u8], value: Option<&[u8]>) -> IndexResult<()> {
        let cfg = IndexConfig {
            max_key: self.shape.max_key,
            max_value: self.shape.max_value,
            ..IndexConfig::default()
        };
        cfg.check_kv(key, value)
    }
}
