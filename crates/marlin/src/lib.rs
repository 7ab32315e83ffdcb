//! # dmindex-marlin: Marlin, a write-optimised B+ tree on disaggregated memory
//!
//! Marlin (ICPP '23) is the write-optimised baseline of the Dolphin paper: a B+ tree whose
//! internal levels are the B-link nodes Sherman and CHIME use ([`dmindex_prim::blink`]) and whose
//! leaves are **unsorted** arrays of {key, pointer to an out-of-place item} ([`leaf`]). Inserts,
//! updates and deletes on one leaf run concurrently: each changes one entry by CAS on its 8-byte
//! pointer, sharing the leaf through Spear ([`dmindex_prim::spear`], the FAA-only ternary lock);
//! a structure change claims the leaf exclusively ([`smo`]). Searches take no lock.
//!
//! # Structure
//!
//! ```text
//! root word          height | root address   (prim::blink; height 1 = the root is a leaf)
//! internal levels    B-link nodes, span 64, fences, siblings; cached on every CN
//! leaves             [low, high], 64 entries {key, ptr}, unsorted; sibling pointer (B-link)
//! items              [8][value length][key][value], immutable, 8-B aligned, on the leaf's MN
//! ```
//!
//! Keys are exactly 8 bytes, compared as big-endian integers; key 0 is reserved (a free entry).
//! Values are any length up to the configured `max_value` (they live in items).
//!
//! # Round trips (warm cache: level-1 parents cached, 8-byte values)
//!
//! | operation | Marlin paper / Dolphin paper | here |
//! |---|---|---|
//! | search | 2 | 2: READ leaf, READ item |
//! | insert, new key | 3 doorbells | 3: `[FAA +1, READ leaf]`, `[WRITE item, CAS key]`, `[CAS ptr, FAA −1]` |
//! | insert, present key / update | 3 doorbells (≥ 3) | 3: `[FAA +1, READ leaf]`, `[WRITE item, CAS ptr]`, `FAA −1` |
//! | delete | — | 2: `[FAA +1, READ leaf]`, `[CAS ptr → null, FAA −1]` |
//! | scan of 100 items | ≥ 100 READs in 2 round trips | leaves in one doorbell per memory node, then ~100 item READs, 16 to a doorbell, every doorbell rung before any is awaited (`scan`) |
//! | insert that splits | — | +3, then the separator (3) ([`smo`]) |
//!
//! # Races the published protocol leaves open, and how they are closed
//!
//! * **Two inserts of one key take two entries** (the public code CASes the pointer into a free
//!   entry and WRITEs the key afterwards, never rechecking). Here the key word is claimed first,
//!   by a CAS from 0 on the first free entry of the image; a CAS that returns the key joins that
//!   entry; key words are written once per leaf epoch and only SMOs (excluded by Spear) rewrite
//!   them. So a key has at most one entry per epoch. No extra round trip (the item WRITE shares
//!   the key CAS's doorbell).
//! * **A reader sees a key whose value is not written.** A key with a null pointer is absent; the
//!   item is written (zero-wait, same memory node, so ahead of the CAS) before the pointer CAS
//!   publishes it. No round trip.
//! * **An update lands after a delete and a re-insert reused the entry.** Entries are not reused
//!   within an epoch (a delete nulls the pointer and keeps the key), and every pointer CAS
//!   compares the whole word. The epoch has 8 bits, so it is Spear that keeps it from wrapping
//!   between a writer's READ and its CAS: the writer's claim is held from before the READ until
//!   after the CAS, and no SMO runs meanwhile, however long the writer pauses. No round trip.
//! * **A delete shifts entries under concurrent pointer CASes** (the public code deletes under
//!   Sherman's exclusive lock path, unsynchronised with Spear). Here a delete is a pointer CAS
//!   under Spear, and entries move only in SMOs.
//! * **Torn leaf READs across an SMO** (the public code checks front/rear versions only): every
//!   pointer word carries the leaf epoch, so every line does ([`leaf`]).
//!
//! # Where we differ from the public code
//!
//! * The Spear word is inside the leaf (the public code can keep lock words in the NIC's on-chip
//!   memory, which our fabric does not model; it is off by default there too).
//! * Items are posted in the write's second doorbell, not WRITTEN and awaited before the leaf is
//!   read (one round trip fewer than the public code's insert).

pub mod leaf;
mod ops;
mod scan;
pub mod smo;
pub mod write;

use std::sync::atomic::AtomicU64;

use dmindex_fabric::{Client, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, IndexStats, PointIndex, RangeIndex, ScanBuf,
};
use dmindex_prim::blink::{root_word, Accounting, Blink};
use dmindex_prim::counter::{get, LeafFill};
use dmindex_prim::key;
use dmindex_prim::kv_block::Blocks;
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::pool::{Pool, Pooled};
use dmindex_prim::root::{Magic, RootSlot};

use crate::leaf::Shape;
use crate::write::{WriteCounters, Writer};

/// The descriptor's magic ("MR").
pub const MAGIC: Magic = Magic { name: "marlin", value: 0x4D52, bits: 16 };

/// Marlin's options: entries per leaf and per internal node, how long an SMO waits for
/// operations in flight, and how the CN cache charges an internal node (CN-side; per entry by
/// default, `page` as the Dolphin paper counts Marlin's cache).
pub const OPTIONS: Options = Options {
    what: "marlin",
    known: &[
        Opt::number("span", &["leaf_span"], 4..=leaf::MAX_SPAN),
        Opt::number("internal_span", &[], 4..=1024),
        Opt::number("drain_polls", &[], 1..=1_000_000),
        Opt::choice("cache_charge", &[], Accounting::WORDS),
    ],
};

/// Entries per internal node by default (Sherman's and CHIME's).
pub const DEFAULT_INTERNAL_SPAN: usize = 64;
/// Polls an SMO makes for operations in flight on its leaf before it gives up and retries.
pub const DEFAULT_DRAIN_POLLS: usize = 256;
/// Keys are this long.
pub const KEY_BYTES: usize = key::BYTES;
/// Memory nodes an item pointer can name (8 bits).
pub const MAX_NODES: u16 = 256;
/// Leaf buffers each compute node's pool keeps.
const LEAF_BUFS: usize = 256;

#[derive(Debug, Default)]
struct Counters {
    write: WriteCounters,
    moves_right: AtomicU64,
    compactions: AtomicU64,
    splits: AtomicU64,
    smo_retries: AtomicU64,
    scan_rounds: AtomicU64,
    scan_refreshes: AtomicU64,
    scan_items: AtomicU64,
    /// Live pairs per leaf scans saw: sizes a round.
    leaf_fill: LeafFill,
}

/// [`Marlin`] behind read delegation and write combining ([`dmindex_prim::rdwc::Rdwc`]), as
/// `dmindex bench --index marlin` runs it: created and opened like [`Marlin`], with the same
/// configuration; option `rdwc=0` turns the layer off.
pub type MarlinRdwc = dmindex_prim::rdwc::Rdwc<Marlin>;

/// A compute node's handle on a Marlin tree.
pub struct Marlin {
    shape: Shape,
    polls: u32,
    blink: Blink,
    items: Blocks,
    bufs: Pool<Vec<u8>>,
    /// Scans' working vectors ([`scan::ScanScratch`]).
    scans: Pool<scan::ScanScratch>,
    counters: Counters,
}

/// What `config` asks for, checked.
struct Config {
    shape: Shape,
    internal: usize,
    polls: u32,
    accounting: Accounting,
}

/// The leaf shape, internal span, drain polls and cache accounting `config` asks for, checked.
fn configure<T: Transport>(c: &Client<T>, config: &IndexConfig) -> IndexResult<Config> {
    let opts = OPTIONS.parse(&config.extra)?;
    if config.max_key != KEY_BYTES {
        return Err(IndexError::Config(format!(
            "marlin keys are exactly {KEY_BYTES} bytes, not max_key={}",
            config.max_key
        )));
    }
    if c.info().nodes() > MAX_NODES {
        return Err(IndexError::Config(format!(
            "marlin addresses at most {MAX_NODES} memory nodes, not {}",
            c.info().nodes()
        )));
    }
    let shape = Shape::new(opts.number("span").unwrap_or(leaf::DEFAULT_SPAN))?;
    let internal = opts.number("internal_span").unwrap_or(DEFAULT_INTERNAL_SPAN);
    let polls = opts.number("drain_polls").unwrap_or(DEFAULT_DRAIN_POLLS) as u32;
    let accounting =
        opts.number("cache_charge").map_or(Accounting::PerEntry, Accounting::from_choice);
    Ok(Config { shape, internal, polls, accounting })
}

/// What the descriptor pins: leaf and internal spans.
fn shape_bits(shape: &Shape, internal: usize) -> u64 {
    (shape.span as u64) << 16 | internal as u64
}

impl Marlin {
    fn new(conf: Config, config: &IndexConfig) -> IndexResult<Marlin> {
        let Config { shape, internal, polls, accounting } = conf;
        Ok(Marlin {
            shape,
            polls,
            blink: Blink::new(
                internal,
                RootSlot::with_descriptor(config.root_slot)?,
                config.cache_bytes,
                accounting,
            ),
            items: Blocks::new(KEY_BYTES, config.max_value).aligned(8),
            bufs: Pool::new(LEAF_BUFS),
            scans: Pool::new(64),
            counters: Counters::default(),
        })
    }

    /// A leaf-sized buffer from this compute node's pool.
    fn leaf_buf<T: Transport>(&self, c: &Client<T>) -> Pooled<'_, Vec<u8>> {
        self.bufs.get(c, || vec![0u8; self.shape.bytes])
    }

    /// The leaf protocol with this tree's shape, items and counters.
    fn writer(&self) -> Writer<'_> {
        Writer { shape: &self.shape, items: &self.items, counters: &self.counters.write }
    }

    fn check_value(&self, value: &[u8]) -> IndexResult<()> {
        if value.len() > self.items.max_value {
            return Err(IndexError::ValueTooLong { len: value.len(), max: self.items.max_value });
        }
        Ok(())
    }
}

impl<T: Transport> PointIndex<T> for Marlin {
    /// A dead client's share of a leaf's Spear word is dropped and its claim taken over
    /// ([`dmindex_prim::spear::recover`]); a dead holder of a B-link internal lock is repaired
    /// by [`dmindex_prim::blink`].
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let Config { shape, internal, .. } = configure(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        let root = c.alloc(shape.bytes as u64, 64).await?;
        let mut img = Vec::new();
        leaf::encode(&shape, 1, 1, u64::MAX, dmindex_fabric::GlobalAddr::NULL, [], &mut img);
        c.write(root, &img).await?;
        slot.claim(c, root_word(1, root)).await?;
        slot.publish(c, &MAGIC, shape_bits(&shape, internal)).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let conf = configure(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        slot.check(c, &MAGIC, shape_bits(&conf.shape, conf.internal)).await?;
        Marlin::new(conf, config)
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        out.clear();
        self.search_key(c, key::word(key, "marlin")?, out).await
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let k = key::word(key, "marlin")?;
        self.check_value(value)?;
        self.insert_key(c, k, value).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let k = key::word(key, "marlin")?;
        self.check_value(value)?;
        self.update_key(c, k, value).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.delete_key(c, key::word(key, "marlin")?).await
    }

    fn stats(&self) -> IndexStats {
        let n = &self.counters;
        IndexStats {
            cache_bytes: self.blink.cache.bytes(),
            retries: get(&self.blink.retries),
            extra: vec![
                ("torn_leaf_reads", get(&n.write.torn_reads)),
                ("lost_key_cas", get(&n.write.lost_key_cas)),
                ("lost_ptr_cas", get(&n.write.lost_ptr_cas)),
                ("turned_away_by_smo", get(&n.write.claimed)),
                ("leaf_moves_right", get(&n.moves_right)),
                ("compactions", get(&n.compactions)),
                ("leaf_splits", get(&n.splits)),
                ("smo_retries", get(&n.smo_retries)),
                ("scan_rounds", get(&n.scan_rounds)),
                ("scan_refreshes", get(&n.scan_refreshes)),
                ("scan_items", get(&n.scan_items)),
            ],
        }
    }
}

impl<T: Transport> RangeIndex<T> for Marlin {
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
