//! # dmindex-plush: Plush (PVLDB '22) on one-sided verbs, as the SepHash paper ported it
//!
//! One of the SepHash paper's two leveling baselines: a log-structured hash table (the LSM-tree
//! idea applied to a leveled hash) ported from persistent memory to disaggregated memory by
//! replacing loads and stores with READs and WRITEs, persistence removed. Layouts are drawn in
//! [`layout`].
//!
//! ## Structure
//!
//! A key's 64-bit hash picks one of `groups` **top groups** (128, the SepHash port's number),
//! and within it one of 16 **top buckets** of 16 entries. Below each top group hangs a 16-ary
//! tree of **inner groups**, one level per 4-bit digit of the hash: the level-1 group of digit
//! `d` holds the group's keys whose first digit is `d`, and so on (the fanout of 16 is the
//! port's; the Plush paper's is 2). An inner group is a log of up to 16 **runs**: each run an
//! immutable array of entries written by one migration, listed with a 128-bit Bloom filter in
//! the group's descriptor, newest last. An entry is 8 bytes — fingerprint, block length, block
//! address (and a tombstone bit) — and the key and value live in a KV block.
//!
//! The top group, the whole tree below it, and its runs live on one memory node
//! (`g mod nodes`); one lock word in the top group guards every write to all of it. That is
//! the port's lock granularity (the top group's), and it makes a migration, which touches
//! only the tree below one top group, a writer alone in its tree.
//!
//! ## Operations (no migration, blocks of one READ)
//!
//! | op | round trips |
//! |---|---|
//! | search, key in the top bucket | top bucket + child word (one doorbell), block |
//! | search, key at level `l` | that, then per level 1..=l: descriptor + next child word (one doorbell), runs whose filters match (one doorbell), block of a fingerprint match |
//! | insert | block WRITE, lock CAS, top bucket READ (+ a block READ per fingerprint match), entry WRITE + unlock (one doorbell) = 4 |
//! | update, delete | lock CAS, the search's READs, block WRITE (a tombstone's for a delete), entry WRITE + unlock (the search's READ of the top bucket tells where the entry goes) |
//!
//! An insert is an upsert: it puts the key's newest entry in its top bucket, in the slot that
//! holds the key if one does (so a bucket holds at most one entry per key), else in an empty
//! one. Older entries of the key further down stay until a migration meets them: a search
//! returns the first entry it finds from the top down, which is the newest. An update or
//! delete must say whether the key existed, so it searches under the lock first. A delete
//! writes a tombstone entry.
//!
//! ## Migration (the resize)
//!
//! An insert that finds its top bucket full **migrates the top group** (`migrate_top`), holding
//! its lock: READ the 16 buckets and every entry's key (Plush reads each block: the next digit
//! is in the key's hash), split the entries by their level-1 digit, append each share to its
//! level-1 group as a new run (run WRITE, then the WRITE of the descriptor line that lists it,
//! adjacent in one doorbell; the groups' descriptors READ in one round trip and every group's
//! run and line WRITTEN in one more), then clear the 16 buckets with one WRITE. A level-1
//! group that already lists 16 runs migrates first, the same way one level down: its runs merged (newest entry of each
//! key kept), split by the next digit, appended to its children, then its descriptor reset to
//! no runs. The deepest level (`levels` below the top, 9 by default) compacts its runs into
//! one instead, so a group there holds at most 65 535 keys (a run's most entries; more is
//! `Full`, which no default shape reaches). A group created by a migration has nothing below
//! it, so tombstones bound for it are dropped. A long migration renews its holder's lease as
//! it goes, so that waiters do not judge it dead.
//!
//! ## Why searches need no lock
//!
//! * Entries only move down, and always **copy before clear**: a migration publishes the
//!   runs below before it clears or resets the group above. A search reads each level after
//!   the one above it (later round trips, or later in one doorbell, whose verbs run in
//!   order), so an entry that leaves a level it has not read yet is found below, and the first
//!   entry found is the newest one at some instant of the search.
//! * A top bucket holds at most one entry per key, changed by one aligned 8-byte WRITE, so any
//!   mix of old and new lines a READ of it samples gives each key one entry that was current
//!   when its line was read.
//! * Runs are immutable and never freed. A descriptor changes one cache line at a time (an
//!   append WRITEs the line of the new record, a reset or a compaction line 0 with the next
//!   epoch), and a record counts only in a line of the group's epoch: whatever mix of lines a
//!   READ samples, each record it takes was listed when its line was read, and a record it
//!   missed was appended after it had read the level above ([`layout`]). A filter lists every
//!   key of its run, so a run it rules out cannot hold the key.
//!
//! ## A client that crashes
//!
//! Every step leaves a state the rules above accept, and every write that publishes is one
//! aligned word or one cache line, whole even when a crash cuts its WRITE short. A crash after
//! some runs were appended below but before the group above was cleared leaves a key's entry
//! in both places, the lower one a copy of the upper; a later migration of the upper group
//! appends it again, which changes nothing a search can see. A run written but never listed,
//! a group created but never given a run, a clear cut short: copies or unreachable memory,
//! never a gap. So the lock needs no repair: a waiter that finds its holder dead (leases,
//! [`dmindex_prim::lock`]) takes it over and goes on.
//!
//! ## Where this differs from the SepHash port
//!
//! * The port appends an update as a new top entry; here a top bucket keeps one entry per key
//!   (a torn READ of a bucket being cleared and refilled could otherwise pair a key's older
//!   entry with the clear of its newer one). An upsert pays a block READ when a fingerprint
//!   in its bucket matches.
//! * The port migrates a group's entries one level down into fixed buckets; here each
//!   migration appends one immutable run per child group, which is what lets searches run
//!   without locks and validation rounds.

use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, IndexStats, PointIndex};
use dmindex_prim::kv_block::{self, Blocks};
use dmindex_prim::lock::LocalLocks;
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::pool::Pool;
use dmindex_prim::root::RootSlot;

pub mod layout;

mod audit;
mod migrate;
mod search;
mod write;

use layout::{Shape, MAX_LEVELS, MAX_RUNS};

/// The options Plush reads from [`IndexConfig::extra`].
pub const OPTIONS: Options = Options {
    what: "plush",
    known: &[
        Opt::number("groups", &[], 1..=0xFFFF),
        Opt::number("slots", &[], 1..=16),
        Opt::number("runs", &[], 1..=MAX_RUNS),
        Opt::number("fanout_bits", &[], 1..=4),
        Opt::number("levels", &[], 1..=MAX_LEVELS),
        Opt::flag("filters", &[]),
        Opt::choice("key_reads", &[], &["together", "each"]),
    ],
};

/// Top groups (the SepHash port's 128).
pub const DEFAULT_GROUPS: usize = 128;
/// Entries in a top bucket (the port's 16).
pub const DEFAULT_SLOTS: usize = 16;
/// Runs a group lists before it migrates (the port's 16 buckets a group).
pub const DEFAULT_RUNS: usize = 16;

/// Counters of one compute node's handle.
#[derive(Debug, Default)]
struct Counters {
    retries: AtomicU64,
    /// Searches of the table: a search's, and an update's or delete's under the lock.
    searches: AtomicU64,
    /// Top buckets and runs READ by searches (SepHash's Table 1 "buckets read per search").
    search_buckets: AtomicU64,
    /// Levels below the top a search READ a descriptor of.
    search_levels: AtomicU64,
    top_migrations: AtomicU64,
    group_migrations: AtomicU64,
    compactions: AtomicU64,
    migrated_entries: AtomicU64,
    tombstones_dropped: AtomicU64,
}

/// A compute node's handle on a Plush table: its shape and the top groups' addresses.
pub struct Plush {
    shape: Shape,
    tops: Vec<GlobalAddr>,
    blocks: Blocks,
    config: IndexConfig,
    locks: LocalLocks,
    counters: Counters,
    /// Whether searches skip the runs whose filters rule the key out (`filters=1`, the
    /// default); `filters=0` reads every run of each group on the key's path, newest first.
    filters: bool,
    /// How a migration READs its entries' keys and appends to its children: all rung together
    /// per memory node (`key_reads=together`, the default), or one READ awaited after another
    /// and one child after another (`key_reads=each`, the SepHash port's).
    keys_each: bool,
    /// Value buffers of the searches updates and deletes make under the lock, one per pool
    /// shard (no allocation per operation once grown).
    values: Pool<Vec<u8>>,
}

impl std::fmt::Debug for Plush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plush")
            .field("shape", &self.shape)
            .field("tops", &self.tops.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// A table's shape and its search and migration choices.
struct Parsed {
    shape: Shape,
    filters: bool,
    keys_each: bool,
}

fn parse(config: &IndexConfig) -> IndexResult<Parsed> {
    let p = OPTIONS.parse(&config.extra)?;
    let shape = Shape {
        groups: p.number("groups").unwrap_or(DEFAULT_GROUPS),
        slots: p.number("slots").unwrap_or(DEFAULT_SLOTS),
        runs: p.number("runs").unwrap_or(DEFAULT_RUNS),
        fanout_bits: p.number("fanout_bits").unwrap_or(4) as u32,
        levels: p.number("levels").unwrap_or(MAX_LEVELS),
    };
    let block = kv_block::HEADER + config.max_key + config.max_value;
    if config.max_key == 0 || block > layout::MAX_BLOCK {
        return Err(IndexError::Config(format!(
            "plush keys must be 1 byte or more and blocks at most {} bytes (key {} + value {} + \
             header {})",
            layout::MAX_BLOCK,
            config.max_key,
            config.max_value,
            kv_block::HEADER
        )));
    }
    let filters = p.flag("filters").unwrap_or(true);
    Ok(Parsed { shape, filters, keys_each: p.number("key_reads") == Some(1) })
}

fn check_nodes<T: Transport>(c: &Client<T>) -> IndexResult<()> {
    if c.info().nodes() > layout::MAX_NODES {
        return Err(IndexError::Config(format!(
            "plush addresses at most {} memory nodes (6-bit node numbers), not {}",
            layout::MAX_NODES,
            c.info().nodes()
        )));
    }
    Ok(())
}

impl Plush {
    /// The shape this handle's table was built with.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    fn header(config: &IndexConfig, groups: usize) -> [u8; layout::DIR_HEADER as usize] {
        let mut h = [0u8; layout::DIR_HEADER as usize];
        h[0..8].copy_from_slice(&layout::DIR_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&(config.max_key as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(config.max_value as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(groups as u32).to_le_bytes());
        h
    }

    /// Whether `a` is a 64-B aligned range of `len` bytes on a memory node (of `node` if given).
    fn fits<T: Transport>(c: &Client<T>, a: GlobalAddr, len: u64, node: Option<u16>) -> bool {
        let size = c.info().node_size(a.node());
        !a.is_null()
            && a.is_aligned(64)
            && node.is_none_or(|n| n == a.node())
            && size.is_some_and(|s| a.offset().checked_add(len).is_some_and(|end| end <= s))
    }
}

impl<T: Transport> PointIndex<T> for Plush {
    /// Every state a crashed writer leaves is one searches and writers accept (crate docs), so
    /// a dead holder's lock is taken over with nothing to repair.
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let shape = parse(config)?.shape;
        check_nodes(c)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        let nodes = c.info().nodes();
        let dir = c.alloc_on(0, layout::DIR_HEADER + 8 * shape.groups as u64, 64).await?;
        let mut tops = Vec::with_capacity(shape.groups * 8);
        for g in 0..shape.groups {
            let node = (g % nodes as usize) as u16;
            let top = c.alloc_on(node, layout::top_bytes(shape.slots), 64).await?;
            tops.extend_from_slice(&top.raw().to_le_bytes());
        }
        c.write(dir.add(layout::DIR_HEADER), &tops).await?;
        c.write(dir, &Self::header(config, shape.groups)).await?;
        root.claim(c, dir.raw()).await?;
        root.publish(c, &layout::MAGIC, shape.bits()).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let Parsed { shape, filters, keys_each } = parse(config)?;
        check_nodes(c)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        root.check(c, &layout::MAGIC, shape.bits()).await?;
        let dir = GlobalAddr::from_raw(root.load(c).await?);
        if !Self::fits(c, dir, layout::DIR_HEADER + 8 * shape.groups as u64, None) {
            return Err(IndexError::Corrupt(format!("plush directory at {dir} is out of range")));
        }
        let head = c.read_vec(dir, layout::DIR_HEADER as usize).await?;
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        if head[0..8] != layout::DIR_MAGIC.to_le_bytes() || word(16) as usize != shape.groups {
            return Err(IndexError::Corrupt(format!("no plush directory at {dir}")));
        }
        if (word(8) as usize, word(12) as usize) != (config.max_key, config.max_value) {
            return Err(IndexError::Config(format!(
                "the plush table was created for {}-byte keys and {}-byte values",
                word(8),
                word(12)
            )));
        }
        let raw = c.read_vec(dir.add(layout::DIR_HEADER), 8 * shape.groups).await?;
        let mut tops = Vec::with_capacity(shape.groups);
        for w in layout::words(&raw) {
            let top = GlobalAddr::from_raw(w);
            if !Self::fits(c, top, layout::top_bytes(shape.slots), None) {
                return Err(IndexError::Corrupt(format!("plush top group at {top}")));
            }
            tops.push(top);
        }
        Ok(Plush {
            shape,
            tops,
            blocks: Blocks::new(config.max_key, config.max_value),
            config: config.clone(),
            locks: LocalLocks::default(),
            counters: Counters::default(),
            filters,
            keys_each,
            values: Pool::new(dmindex_prim::pool::SHARDS),
        })
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        Ok(self.lookup(c, key, out).await? == search::Found::Live)
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.config.check_kv(key, Some(value))?;
        self.upsert(c, key, value).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, Some(value))?;
        self.change(c, key, Some(value)).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        self.change(c, key, None).await
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        let (used, slots) = self.count_entries(c).await?;
        Ok(Some(if slots == 0 { 0.0 } else { used as f64 / slots as f64 }))
    }

    fn stats(&self) -> IndexStats {
        let n = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IndexStats {
            // The top groups' addresses: all a handle keeps.
            cache_bytes: 8 * self.tops.len() as u64,
            retries: get(&n.retries),
            extra: vec![
                ("searches", get(&n.searches)),
                // Top buckets and runs READ by searches: the second over the first is
                // SepHash's Table 1 "buckets read per search".
                ("search_buckets_read", get(&n.search_buckets)),
                ("search_levels_read", get(&n.search_levels)),
                ("top_migrations", get(&n.top_migrations)),
                ("group_migrations", get(&n.group_migrations)),
                ("level_compactions", get(&n.compactions)),
                ("migrated_entries", get(&n.migrated_entries)),
                ("tombstones_dropped", get(&n.tombstones_dropped)),
            ],
        }
    }
}
