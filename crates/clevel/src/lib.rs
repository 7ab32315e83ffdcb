//! # dmindex-clevel: CLevel (USENIX ATC '20) on one-sided verbs, as the SepHash paper ported it
//!
//! One of the SepHash paper's two leveling baselines: lock-free concurrent level hashing, built
//! for persistent memory and ported to disaggregated memory by the SepHash authors (loads,
//! stores and CAS become READs, WRITEs and CAS verbs). Layouts are drawn in [`layout`].
//!
//! ## Structure
//!
//! A table is a stack of **levels**, each an array of 64-B buckets of 8 slots, each level twice
//! the size of the one below it. A **context** lists the levels, bottom first; the table's
//! context word names the current one and changes by CAS only. A key has two buckets in every
//! level (two hashes), and its entry — fingerprint, block length, KV block address — can be in
//! any of them. At rest there are two levels (the port's first: 2 048 and 4 096 buckets).
//!
//! ## Operations (two levels, no rehash, blocks of one READ)
//!
//! | op | round trips |
//! |---|---|
//! | search, key present | the key's 4 buckets (one doorbell), block of a fingerprint match = 2 |
//! | search, key absent | the buckets, the context word (after them) = 2 |
//! | insert, key present | block WRITE, buckets, block READ, slot CAS = 4 |
//! | insert, key absent | block WRITE, buckets, tentative CAS, re-read (buckets and context word), commit CAS = 5 |
//! | update | buckets, block READ, block WRITE, slot CAS = 4 (absent: buckets, context word) |
//! | delete | buckets, block READ, slot CAS = 3 (absent: as update) |
//!
//! While a rehash runs (more than two levels) a key's bottom buckets are READ one round trip
//! before the others (below: why): one round trip more for every READ of a key's buckets (two
//! for a new key's insert, whose re-read is one too).
//!
//! ## One committed entry per key
//!
//! CLevel's inserts are lock-free: a new key's entry goes into any empty slot of its buckets
//! by CAS. Two inserts of one absent key would both succeed, so an insert of an absent key
//! places its entry *tentative* (no value; readers skip it), re-reads the key's buckets, and
//! commits by CAS only if no other entry of the key is committed and no lower-addressed
//! tentative one is pending (higher ones it aborts). So a key has at most one committed entry at
//! any instant, apart from a move's copy (below), which holds the same word. Updates, deletes
//! and upserts of a present key CAS that entry. This is RACE's rule as built here (the RACE
//! crate's `ops` has the argument); the port has none and keeps duplicates.
//!
//! ## Resizing: a new top level, then a rehash of the bottom
//!
//! An insert that finds no empty slot in its buckets of any level it may use **grows** the
//! table: holding the resize lock, it allocates a level twice the top one's size and CASes the
//! context word to a context with that level on top. The bottom level is then **drained** by
//! the one client holding the rehash lock: for each entry of the bottom level it freezes the
//! slot (CAS), READs the key, CASes a copy of the same word into an empty slot of the key's
//! buckets above, and clears the bottom slot (CAS). Tentative entries it finds in the bottom it
//! aborts. Once every slot is empty it CASes the context word to a context without the bottom
//! level, and goes on while more than two levels remain. Inserts place no entry in a level being
//! drained (one under a stale context may, and withdraws it at its re-read: it never commits
//! there), so a drain ends.
//!
//! Who drains (option `rehash`): `background` (the default) is the paper's — "CLevel uses a
//! client as a background thread for resizing": a client of its own, which a harness runs
//! beside the workload ([`PointIndex::background`]), polls the context word and drains; levels
//! pile up while it lags, as the paper's Table 1 shows (8.28 levels at 128 threads). `inline`:
//! the client that grew the table drains, if the rehash lock is free. Either way an insert that
//! finds no room at `max_levels` levels (default [`DEFAULT_MAX_LEVELS`]) waits for the rehash
//! lock and drains itself (taking the lock over if its holder died), so the table stays live
//! with no background client at all. `max_levels` is at most 12, two below the 14 a context can
//! list: a drain whose copy finds no room adds a level, and must be able to.
//!
//! ## Why searches are right while entries move
//!
//! * A frozen entry and its copy hold the same word: either is the key's value.
//! * During a rehash a reader READs the key's bottom buckets one round trip before the others.
//!   An entry leaves the bottom only after its copy is above, so a reader that misses it in
//!   the bottom (cleared) finds the copy above, READ later.
//! * A reader that finds no committed entry READs the context word after its bucket READs: if
//!   it still names the context the reader used, that context was current throughout (context
//!   words never repeat), so the reader READ every bucket where the key's committed entry could
//!   be, and by the one-committed-entry argument the key was absent at some instant. If it
//!   changed, the reader starts again under the new context.
//! * A reader that finds a committed entry needs no check: an entry is committed in a slot only
//!   while it is the key's value (a rehash clears every committed entry of the bottom before the
//!   level leaves the context).
//!
//! ## Inserts racing a resize
//!
//! An insert commits only after a re-read whose context word still names the context it placed
//! its entry under; if the word changed it withdraws the entry (CAS to 0) and starts again. So
//! an entry committed in a level that then becomes the bottom of a rehash was placed before the
//! rehash began, and the rehasher sees it (tentative: aborted, and the insert's commit CAS
//! fails; committed: moved). No entry is committed in a level the rehasher has passed.
//!
//! ## A client that crashes
//!
//! The grower's steps are an allocation, a WRITE of a new context and one CAS: a crash leaves
//! garbage or the new context, never half of one, so a dead grower's resize lock is taken over
//! with nothing to repair. The rehasher's steps are idempotent: a waiter that judges it dead by
//! its lease ([`dmindex_prim::lease`]), fenced, takes the rehash lock over and drains again from
//! the first bucket; a frozen entry whose copy is already above (the same word, found in the
//! key's buckets) is only cleared. Writers that meet a frozen entry wait for the move and judge
//! the rehasher the same way. A tentative entry a crashed insert left is aborted by the next
//! insert of its key that has waited on it for [`ops::PATIENCE`] re-reads, or by a rehash.
//!
//! ## Where this differs from the SepHash port
//!
//! * The port's insert deletes duplicates on its way and keeps the last free slot; two racing
//!   inserts of a key both succeed, and an upsert's delete can race the rehasher's copy and
//!   bring back an old value. Here: tentative placement and commit (one more round trip for a
//!   new key), and a freeze mark on each moving slot.
//! * The port READs each level's header and buckets one level after another and re-READs the
//!   directory after every operation; here the key's buckets in all levels are one doorbell,
//!   and the context word is READ only to confirm an absence (and with an insert's re-read).
//!   Option `reads=levels` reads as the port does, to measure what that costs: an operation
//!   first READs the context word, then for each level from the bottom its word in the context
//!   (the port's level header) and its buckets, a round trip each. A search then READs the
//!   blocks of fingerprint matches and the context word again, starting over if it changed:
//!   2 × levels + 3 round trips for a present key (7 at rest), 2 × levels + 2 for an absent
//!   one. Inserts, updates and deletes go on as the default does after their first read (an
//!   insert's re-read is one doorbell). Correct for the default's reasons: the levels are READ
//!   bottom first, so a moving entry missed in the bottom is READ above later, and an absence
//!   is confirmed by the context word.
//! * The port keeps the resize lock in NIC device memory; here it is a lock word with a lease.
//! * The port's client KV cache is option `kv_cache` (`src/kv_cache.rs`), off by default.

use std::sync::atomic::AtomicU64;
use std::sync::RwLock;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, IndexStats, PointIndex};
use dmindex_prim::counter::{bump, get};
use dmindex_prim::kv_block::{self, Blocks};
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::root::RootSlot;

pub mod layout;

mod image;
mod kv_cache;
pub mod ops;
mod resize;

use layout::{Context, Level, MAX_LEVELS, MAX_LOG2};

/// The options CLevel reads from [`IndexConfig::extra`].
pub const OPTIONS: Options = Options {
    what: "clevel",
    known: &[
        Opt::number("log2_buckets", &[], 1..=30),
        Opt::number("max_levels", &[], 3..=DEFAULT_MAX_LEVELS),
        Opt::choice("rehash", &[], &["background", "inline"]),
        Opt::choice("reads", &[], &["doorbell", "levels"]),
        Opt::number("kv_cache", &[], 0..=4096),
    ],
};

/// Log2 of the first bottom level's buckets: the port's 16 × 128 buckets.
pub const DEFAULT_LOG2_BUCKETS: u32 = 11;

/// Levels at which inserts stop and drain (and the most the option allows): two below
/// [`MAX_LEVELS`], the room a rehasher may need above them to finish a drain.
pub const DEFAULT_MAX_LEVELS: usize = MAX_LEVELS - 2;

/// Counters of one compute node's handle.
#[derive(Debug, Default)]
struct Counters {
    retries: AtomicU64,
    searches: AtomicU64,
    /// Searches answered from the client's KV cache instead of a block READ.
    kv_cache_hits: AtomicU64,
    /// Buckets READ by searches (SepHash's Table 1 "buckets read per search").
    search_buckets: AtomicU64,
    /// Levels searches READ buckets of.
    search_levels: AtomicU64,
    /// Levels inserts READ buckets of, first READ of each attempt (SepHash's Table 1
    /// "level_cnt" for CLevel).
    insert_levels: AtomicU64,
    /// Levels added on top.
    resizes: AtomicU64,
    /// Bottom levels drained and dropped.
    rehashes: AtomicU64,
    moved_entries: AtomicU64,
    /// Tentative entries of other inserts aborted (by an insert or the rehasher).
    tentative_aborts: AtomicU64,
    /// Inserts that placed an entry, found the key present or the context changed, and took
    /// it back.
    insert_withdrawals: AtomicU64,
    /// Contexts READ after the context word changed.
    context_refreshes: AtomicU64,
    /// Rehashes taken over from a holder found dead.
    rehash_takeovers: AtomicU64,
}

/// The context a handle last saw, and where it is.
#[derive(Clone, Copy, Debug)]
struct Cached {
    addr: GlobalAddr,
    ctx: Context,
}

/// A compute node's handle on a CLevel table.
pub struct CLevel {
    header: GlobalAddr,
    cached: RwLock<Cached>,
    blocks: Blocks,
    config: IndexConfig,
    max_levels: usize,
    /// Who drains: a background client (`rehash=background`, the default, as the paper runs
    /// CLevel) or the client that grew the table (`rehash=inline`).
    inline_rehash: bool,
    /// How an operation first READs a key's buckets (`reads`): in one doorbell under the cached
    /// context (`doorbell`, the default), or as the SepHash port does (`levels`): the context
    /// word, then level after level.
    port_reads: bool,
    /// The port's client KV cache (`kv_cache`, MiB a client), if any.
    kv_cache: Option<kv_cache::KvCache>,
    counters: Counters,
}

impl std::fmt::Debug for CLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CLevel")
            .field("header", &self.header)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

struct Parsed {
    log2: u32,
    max_levels: usize,
    inline_rehash: bool,
    port_reads: bool,
    kv_cache_mib: usize,
}

fn parse(config: &IndexConfig) -> IndexResult<Parsed> {
    let p = OPTIONS.parse(&config.extra)?;
    let block = kv_block::HEADER + config.max_key + config.max_value;
    if config.max_key == 0 || block > layout::MAX_BLOCK {
        return Err(IndexError::Config(format!(
            "clevel keys must be 1 byte or more and blocks at most {} bytes (key {} + value {} + \
             header {})",
            layout::MAX_BLOCK,
            config.max_key,
            config.max_value,
            kv_block::HEADER
        )));
    }
    Ok(Parsed {
        log2: p.number("log2_buckets").map_or(DEFAULT_LOG2_BUCKETS, |n| n as u32),
        max_levels: p.number("max_levels").unwrap_or(DEFAULT_MAX_LEVELS),
        inline_rehash: p.number("rehash") == Some(1),
        port_reads: p.number("reads") == Some(1),
        kv_cache_mib: p.number("kv_cache").unwrap_or(0),
    })
}

fn check_nodes<T: Transport>(c: &Client<T>) -> IndexResult<()> {
    let nodes = c.info().nodes();
    if nodes > layout::MAX_NODES {
        return Err(IndexError::Config(format!(
            "clevel addresses at most {} memory nodes (6-bit node numbers), not {nodes}",
            layout::MAX_NODES
        )));
    }
    Ok(())
}

impl CLevel {
    /// Whether `a` is a 64-B aligned range of `len` bytes on a memory node.
    fn fits<T: Transport>(c: &Client<T>, a: GlobalAddr, len: u64) -> bool {
        let size = c.info().node_size(a.node());
        !a.is_null()
            && a.is_aligned(64)
            && a.offset() < layout::MAX_NODE_BYTES
            && size.is_some_and(|s| a.offset().checked_add(len).is_some_and(|end| end <= s))
    }

    /// The context at `addr`, checked: every level in range and each twice the one below.
    async fn read_context<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<Context> {
        if !Self::fits(c, addr, layout::CONTEXT) {
            return Err(IndexError::Corrupt(format!("clevel context at {addr} is out of range")));
        }
        let mut b = [0u8; layout::CONTEXT as usize];
        c.read(addr, &mut b).await?;
        let bad = || IndexError::Corrupt(format!("no clevel context at {addr}"));
        let ctx = Context::from_bytes(&b).ok_or_else(bad)?;
        for (i, l) in ctx.levels().iter().enumerate() {
            let doubles = i == 0 || l.log2 == ctx.levels[i - 1].log2 + 1;
            if l.log2 == 0 || l.log2 > MAX_LOG2 || !doubles || !Self::fits(c, l.addr, l.bytes()) {
                return Err(bad());
            }
        }
        Ok(ctx)
    }

    /// The context this handle last saw.
    fn cached(&self) -> Cached {
        *self.cached.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the context the context word `word` names and caches it (unless the cache already
    /// holds a newer one).
    async fn refresh<T: Transport>(&self, c: &Client<T>, word: u64) -> IndexResult<Cached> {
        let cached = self.cached();
        let addr = GlobalAddr::from_raw(word);
        if addr == cached.addr {
            return Ok(cached);
        }
        bump(&self.counters.context_refreshes);
        let ctx = self.read_context(c, addr).await?;
        self.remember(Cached { addr, ctx });
        Ok(Cached { addr, ctx })
    }

    /// Caches `seen` unless the cache already holds a newer context.
    fn remember(&self, seen: Cached) {
        let mut slot = self.cached.write().unwrap_or_else(|e| e.into_inner());
        if seen.ctx.generation > slot.ctx.generation {
            *slot = seen;
        }
    }

    /// READs the context word and refreshes the cache from it.
    async fn reload<T: Transport>(&self, c: &Client<T>) -> IndexResult<Cached> {
        let word = c.read_word(self.header.add(layout::CONTEXT_WORD)).await?;
        self.refresh(c, word).await
    }

    fn header_bytes(config: &IndexConfig, ctx: GlobalAddr) -> [u8; layout::HEADER as usize] {
        let mut h = [0u8; layout::HEADER as usize];
        h[0..8].copy_from_slice(&layout::HEADER_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&(config.max_key as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(config.max_value as u32).to_le_bytes());
        h[16..24].copy_from_slice(&ctx.raw().to_le_bytes());
        h
    }

    /// Allocates a zeroed level of `2^log2` buckets for context generation `generation`
    /// (levels go round the memory nodes).
    async fn new_level<T: Transport>(
        c: &Client<T>,
        log2: u32,
        generation: u64,
    ) -> IndexResult<Level> {
        if log2 > MAX_LOG2 {
            return Err(IndexError::Full(format!("clevel level of 2^{log2} buckets")));
        }
        let node = (generation % c.info().nodes() as u64) as u16;
        let addr = c.alloc_on(node, layout::BUCKET << log2, 64).await?;
        Ok(Level { addr, log2 })
    }

    /// WRITEs `ctx` to fresh memory on node 0 and returns its address.
    async fn write_context<T: Transport>(c: &Client<T>, ctx: &Context) -> IndexResult<GlobalAddr> {
        let at = c.alloc_on(0, layout::CONTEXT, 64).await?;
        c.write(at, &ctx.to_bytes()).await?;
        Ok(at)
    }
}

impl<T: Transport> PointIndex<T> for CLevel {
    /// Every step of a grower and of the rehasher leaves a state the others accept or finish
    /// (crate docs), and dead holders of either lock are taken over.
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let Parsed { log2, .. } = parse(config)?;
        check_nodes(c)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        let bottom = Self::new_level(c, log2, 0).await?;
        let top = Self::new_level(c, log2 + 1, 1).await?;
        let mut ctx = Context { generation: 1, count: 2, ..Context::default() };
        (ctx.levels[0], ctx.levels[1]) = (bottom, top);
        let at = Self::write_context(c, &ctx).await?;
        let header = c.alloc_on(0, layout::HEADER, 64).await?;
        c.write(header, &Self::header_bytes(config, at)).await?;
        root.claim(c, header.raw()).await?;
        root.publish(c, &layout::MAGIC, u64::from(log2)).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let Parsed { log2, max_levels, inline_rehash, port_reads, kv_cache_mib } = parse(config)?;
        check_nodes(c)?;
        let root = RootSlot::with_descriptor(config.root_slot)?;
        root.check(c, &layout::MAGIC, u64::from(log2)).await?;
        let header = GlobalAddr::from_raw(root.load(c).await?);
        if !Self::fits(c, header, layout::HEADER) {
            return Err(IndexError::Corrupt(format!("clevel header at {header} is out of range")));
        }
        let mut h = [0u8; layout::HEADER as usize];
        c.read(header, &mut h).await?;
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        if h[0..8] != layout::HEADER_MAGIC.to_le_bytes() {
            return Err(IndexError::Corrupt(format!("no clevel header at {header}")));
        }
        if (word(8) as usize, word(12) as usize) != (config.max_key, config.max_value) {
            return Err(IndexError::Config(format!(
                "the clevel table was created for {}-byte keys and {}-byte values",
                word(8),
                word(12)
            )));
        }
        let index = CLevel {
            header,
            cached: RwLock::new(Cached { addr: GlobalAddr::new(0, 0), ctx: Context::default() }),
            blocks: Blocks::new(config.max_key, config.max_value),
            config: config.clone(),
            max_levels,
            inline_rehash,
            port_reads,
            kv_cache: (kv_cache_mib > 0).then(|| kv_cache::KvCache::new(kv_cache_mib)),
            counters: Counters::default(),
        };
        let ctx_word = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        index.refresh(c, ctx_word).await?;
        Ok(index)
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
        self.change_key(c, key, Some(value)).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        self.change_key(c, key, None).await
    }

    /// The paper's background rehashing thread.
    const BACKGROUND: bool = true;

    async fn background(&self, c: &Client<T>, stop: &dyn Fn() -> bool) -> IndexResult<()> {
        self.rehasher(c, stop).await
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        let (used, slots) = self.count_entries(c).await?;
        Ok(Some(if slots == 0 { 0.0 } else { used as f64 / slots as f64 }))
    }

    fn stats(&self) -> IndexStats {
        let n = &self.counters;
        IndexStats {
            // The cached context, and the clients' KV caches if any.
            cache_bytes: layout::CONTEXT + 8 + self.kv_cache.as_ref().map_or(0, |k| k.bytes()),
            retries: get(&n.retries),
            extra: vec![
                ("searches", get(&n.searches)),
                ("kv_cache_hits", get(&n.kv_cache_hits)),
                ("search_buckets_read", get(&n.search_buckets)),
                ("search_levels_read", get(&n.search_levels)),
                ("insert_levels_read", get(&n.insert_levels)),
                ("resizes", get(&n.resizes)),
                ("rehashes", get(&n.rehashes)),
                ("moved_entries", get(&n.moved_entries)),
                ("tentative_aborts", get(&n.tentative_aborts)),
                ("insert_withdrawals", get(&n.insert_withdrawals)),
                ("context_refreshes", get(&n.context_refreshes)),
                ("rehash_takeovers", get(&n.rehash_takeovers)),
            ],
        }
    }
}

#[cfg(test)]
mod torn;
