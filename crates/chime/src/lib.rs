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
//! ## Factors, and Sherman as all of them off
//!
//! Each technique can be turned off (options `hopscotch`, `vacancy_piggyback`,
//! `metadata_replication`, `sibling_validation`, `speculative`; the paper's Fig. 15) and
//! [`Sherman`] starts with all of them off: sorted leaves read whole ([`sorted`]). Leaf layouts
//! follow [`layout::LeafKind`]; the remote ones are recorded in the descriptor, so a tree is
//! always opened with the kind it was created with.
//!
//! ## Where we differ from the reference code, and why
//!
//! * **Deletes** exist (the reference has none): the entry is cleared, its home's bitmap bit and
//!   its vacancy bucket cleared, under the leaf lock. Freed slots are reused. Leaves never merge.
//! * **Upper bound**: with deletes, a leaf's largest key can shrink below the separator its parent
//!   holds, so "key > key\[argmax\] ⇒ go right" would misplace keys. Each leaf keeps one copy of its
//!   inclusive upper bound at the rear (written only by splits). An insert that meets a half split
//!   first tries argmax (any key the leaf holds is below the bound), and only then READs the bound.
//!   argmax is maintained lazily: it always names a slot, ideally the largest key's.
//! * **Indirect values and long keys** (paper §4.5): with values longer than 8 bytes or keys
//!   longer than 8 bytes, an insert or update first writes a fresh 64-B-aligned block
//!   `[key length u32][value length u32][key][value]` (the key only for long keys;
//!   [`dmindex_prim::kv_block`]), then
//!   publishes its address in the entry's value slot. Long keys keep their first 8 bytes
//!   (zero-padded) in the leaf: ordering, homes, pivots and bounds use that prefix, and entries
//!   sharing it are told apart by reading their blocks (all of them in one round trip, which
//!   for a search takes the value too). A search reads the block after the leaf (one more
//!   round trip, however many entries share the prefix). Blocks
//!   are immutable once published, so they need no versions; replaced blocks are not reclaimed
//!   (as in the reference). Keys sharing a prefix share a home and cannot be split apart; the
//!   paper assumes such collisions are rare. Real keys share prefixes by the dozen (YCSB's
//!   `user…`) or the thousand (URLs), so past H / 2 of them in a leaf (half a sorted leaf for
//!   Sherman) the leaf keeps one entry for the prefix, naming a **collision group** that holds
//!   every key of the prefix in order ([`collision`]): a search of such a key is one round trip
//!   more (the group, then the key's block), and any number of keys may share a prefix. Past 32
//!   keys (at keys up to 48 bytes) the group is a directory: pages of keys, appended in place,
//!   under a copy-on-write tree of directory nodes; a search reads a node a level and a page.
//! * **Local lock table** (from Sherman, used by the reference through RDWC): clients of one
//!   compute node queue on a CN-local async lock (4096 slots, hashed by lock address) before
//!   spinning on the remote lock word, so at most one client per CN spins remotely. A slot is
//!   released right after the remote unlock and never held while another lock is taken.
//! * **Out of memory** during a split unlocks the node and reports the error; the tree stays
//!   usable.
//! * **Duplicate check** covers the key's whole neighbourhood, and a failed hop after a split
//!   splits again instead of asserting.
//!
//! ## Operations and round trips (internal nodes cached)
//!
//! search 1 (a wrap-around neighbourhood is two READs in one doorbell); insert 3 (masked CAS, READ of
//! the hop range, WRITE of the range + unlock in one doorbell); update/delete 3; scan 1 per batch
//! of up to 4 leaves. A split adds the whole-leaf READ, one doorbell writing the new sibling then
//! the old leaf (which unlocks it), and the separator's insertion into the parent.
//!
//! ## Scans
//!
//! CHIME's scans are **fine-grained** (§4.4; option `fine_grained_scan`, with `greedy_scan`):
//! from the cached parents they know each leaf's range, READ whole the leaves the scan covers
//! entirely and, of a leaf it covers in part, only the neighbourhoods of the integer keys it
//! wants there, merged into READs of up to half a leaf; one doorbell for up to 4 leaves
//! (`tree::fine_scan` has why the result is right). The paper's scans are integer ranges over
//! dense keys; a scan of `n` pairs from `k` here plans `[k, k + n)`, trims only leaves whose range
//! could be dense, and finds any missing pairs by whole leaves from `k + n` on. Sherman, the
//! factor staircase and long keys read whole leaves: along the sibling chain, several per
//! doorbell when the cached parent names the next ones. The reference's scans also try
//! speculative single-entry READs for hot keys; ours do not (speculative reads are off by
//! default).
//!
//! scan_range [lo, hi) walks leaves the same way as scan and stops at the first leaf holding a
//! key beyond the range (later leaves hold only larger keys); a fine-grained one plans exactly
//! [lo, hi).

pub mod collision;
pub mod hotspot;
pub mod layout;
pub mod leaf;
pub mod neighbourhood;
mod range;
pub mod read_plan;
mod settle;
mod shape;
pub mod sorted;
pub mod split;
mod tree;
pub mod view;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, IndexStats, PointIndex};
use dmindex_prim::blink::Blink;
use dmindex_prim::kv_block::Blocks;
use dmindex_prim::pool::Pool;
use dmindex_prim::root::RootSlot;

pub use dmindex_prim::rdwc::Rdwc;

use crate::layout::{key_at, LeafLayout};
use crate::read_plan::ReadPlan;
use crate::shape::MAGIC;
pub use crate::shape::{
    factors_on, ChimeShape, FACTORS, FINE_GRAINED_SCAN, GREEDY_SCAN, MAX_INDIRECT,
};
use crate::tree::{Probe, Tree};
use crate::view::SlotValue;

/// Which index a [`ChimeIndex`] is: the factors it starts from and its name.
pub trait Variant: 'static {
    /// The name `bench` knows it by.
    const NAME: &'static str;
    /// Start from every factor off (Sherman) rather than CHIME's defaults.
    const SHERMAN: bool;
}

/// CHIME's defaults: every technique on except speculative reads.
pub struct Flagship;

/// The paper's enhanced Sherman baseline (§5.1): every factor of the analysis off — sorted
/// leaves read whole, fence keys, one metadata header, cache-line versions, the embedded lock
/// and the CN-local lock table. `--option` may turn factors back on one by one
/// (`hopscotch=1`, then `vacancy_piggyback=1`, …), which is Fig. 15's staircase.
pub struct ShermanBaseline;

impl Variant for Flagship {
    const NAME: &'static str = "chime";
    const SHERMAN: bool = false;
}

impl Variant for ShermanBaseline {
    const NAME: &'static str = "sherman";
    const SHERMAN: bool = true;
}

/// A compute node's handle on a CHIME tree of variant `V`.
pub struct ChimeIndex<V> {
    tree: Tree,
    shape: ChimeShape,
    variant: PhantomData<fn() -> V>,
}

/// CHIME.
pub type Chime = ChimeIndex<Flagship>;
/// The same code with every factor off: the `sherman` baseline.
pub type Sherman = ChimeIndex<ShermanBaseline>;

/// CHIME behind read delegation and write combining ([`Rdwc`]), as the paper measures it and
/// as `dmindex bench --index chime` runs it: clients of one compute node that search or write
/// the same key at once share one remote operation. Created and opened like [`Chime`], with
/// the same configuration; option `rdwc=0` in [`IndexConfig::extra`] turns the layer off.
pub type ChimeRdwc = Rdwc<Chime>;
/// [`Sherman`] behind [`Rdwc`], as `dmindex bench --index sherman` runs it.
pub type ShermanRdwc = Rdwc<Sherman>;

/// The 8-byte leaf key of a key: its first 8 bytes, zero-padded, as a big-endian integer.
fn prefix_of(key: &[u8]) -> u64 {
    if key.len() >= 8 {
        return key_at(key, 0);
    }
    let mut p = [0u8; 8];
    let n = key.len().min(8);
    p[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(p)
}

impl<V> ChimeIndex<V> {
    /// A handle on the tree in `cfg.root_slot` (and its descriptor in the next slot).
    fn new(cfg: &IndexConfig, shape: ChimeShape) -> IndexResult<ChimeIndex<V>> {
        let hotspot = match (shape.speculative, shape.hotspot_bytes) {
            (false, _) => 0,
            (true, Some(b)) => b.min(cfg.cache_bytes),
            (true, None) => cfg.cache_bytes * 3 / 10,
        };
        let leaf = LeafLayout::with_kind(shape.span, shape.h, shape.kind).expect("checked");
        let hop = shape.kind.hopscotch;
        Ok(ChimeIndex {
            variant: PhantomData,
            tree: Tree {
                leaf,
                plans: if hop { ReadPlan::every_home(&leaf) } else { Box::new([]) },
                insert_plans: if hop { ReadPlan::every_insert(&leaf) } else { Box::new([]) },
                whole_plan: ReadPlan::whole(&leaf),
                sorted_pieces: tree::sorted_write::pieces(&leaf).map_err(IndexError::Config)?,
                // Half a leaf's bytes, in entries (the reference's greedy READ size).
                greedy_slots: match shape.greedy_scan {
                    true => leaf.physical() / 2 / leaf.entry_len,
                    false => 0,
                },
                entry_plans: if hop && shape.speculative {
                    ReadPlan::every_entry(&leaf)
                } else {
                    Box::new([])
                },
                vacancy: shape.vacancy,
                blocks: Blocks::new(shape.key_len, shape.value_len),
                // With speculative reads the hotspot buffer is carved from the cache budget and
                // the node cache gets the rest.
                blink: Blink::new(
                    shape.internal_span,
                    RootSlot::with_descriptor(cfg.root_slot)?,
                    cfg.cache_bytes.saturating_sub(hotspot),
                    shape.cache_charge,
                ),
                hotspots: shape.speculative.then(|| hotspot::Hotspots::new(hotspot, leaf)),
                bufs: Pool::new(tree::LEAF_BUFS),
                scans: Pool::new(tree::SCAN_SCRATCH),
                group_bufs: Pool::new(tree::LEAF_BUFS),
                splits: AtomicU64::new(0),
                moves_right: AtomicU64::new(0),
                half_splits: tree::smo::HalfSplits::new(),
                half_splits_finished: AtomicU64::new(0),
                groups_formed: AtomicU64::new(0),
                keys_at_split: AtomicU64::new(0),
            },
            shape,
        })
    }

    /// The 8-byte leaf key of `key` and how to recognise it among entries sharing it.
    fn key_of<'k>(&self, key: &'k [u8]) -> IndexResult<(u64, Probe<'k>)> {
        if key.is_empty() {
            return Err(IndexError::InvalidKey("empty key".into()));
        }
        if key.len() > self.shape.key_len {
            return Err(IndexError::KeyTooLong { len: key.len(), max: self.shape.key_len });
        }
        if !self.shape.long_keys() && key.len() != 8 {
            return Err(IndexError::InvalidKey(format!(
                "this CHIME tree takes 8-byte keys, got {} bytes",
                key.len()
            )));
        }
        match prefix_of(key) {
            0 => Err(IndexError::InvalidKey(
                "keys whose first 8 bytes are all zero are reserved (they mark empty entries)"
                    .into(),
            )),
            k if self.shape.long_keys() => Ok((k, Probe::Full(key))),
            k => Ok((k, Probe::Exact)),
        }
    }

    /// The 8-byte slot for a value: the value itself, or a pointer to a fresh block holding it
    /// (and the full key, with long keys).
    async fn slot_of<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        v: &[u8],
    ) -> IndexResult<[u8; 8]> {
        if !self.shape.indirect() {
            return self.value_of(v);
        }
        let key = if self.shape.long_keys() { key } else { &[] };
        Ok(self.tree.blocks.write(c, key, v).await?.raw().to_le_bytes())
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

    async fn create_shaped<T: Transport>(
        c: &Client<T>,
        cfg: &IndexConfig,
        shape: ChimeShape,
    ) -> IndexResult<Self> {
        if c.info().nodes() > 256 {
            return Err(IndexError::Config(
                "CHIME root words address at most 256 memory nodes".into(),
            ));
        }
        let me = Self::new(cfg, shape)?;
        me.tree.create_root(c).await?;
        me.tree.blink.root.publish(c, &MAGIC, shape.descriptor()).await?;
        Ok(me)
    }

    async fn open_shaped<T: Transport>(
        c: &Client<T>,
        cfg: &IndexConfig,
        shape: ChimeShape,
    ) -> IndexResult<Self> {
        let me = Self::new(cfg, shape)?;
        me.tree.blink.root.check(c, &MAGIC, shape.descriptor()).await?;
        Ok(me)
    }

    /// Bytes of the CN-side cache in use.
    pub fn cache_bytes(&self) -> u64 {
        self.tree.blink.cache.bytes()
    }

    /// The tree's shape.
    pub fn shape(&self) -> ChimeShape {
        self.shape
    }
}

impl<T: Transport, V: Variant> PointIndex<T> for ChimeIndex<V> {
    /// Leaf and internal locks name their holder; a dead holder's lock is freed with the
    /// node's metadata recomputed ([`dmindex_prim::lock`]), a hopscotch leaf settled first if
    /// its writer died with only the first WRITE of a wrapped run landed, and readers that see
    /// a hop in flight for a lease take the lock to get that done. Scans cross a split whose
    /// separator a dead splitter never inserted (`docs/recovery.md`, "CHIME").
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        Self::create_shaped(c, cfg, ChimeShape::from_config(cfg, V::SHERMAN)?).await
    }

    async fn open(c: &Client<T>, cfg: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        Self::open_shaped(c, cfg, ChimeShape::from_config(cfg, V::SHERMAN)?).await
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        let (k, probe) = self.key_of(key)?;
        out.clear();
        let Some((SlotValue(slot), read)) = self.tree.search(c, k, probe, out).await? else {
            // A long key's search may have used `out` for the blocks or the group it READ.
            out.clear();
            return Ok(false);
        };
        if read {
            return Ok(true);
        }
        if self.shape.indirect() {
            let block = GlobalAddr::from_raw(u64::from_le_bytes(slot));
            self.tree.blocks.value_into(c, block, None, out).await?;
        } else {
            out.extend_from_slice(&slot[..self.shape.value_len]);
        }
        Ok(true)
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let (k, probe) = self.key_of(key)?;
        let v = self.slot_of(c, key, value).await?;
        self.tree.insert(c, k, v, probe).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let (k, probe) = self.key_of(key)?;
        let v = self.slot_of(c, key, value).await?;
        self.tree.modify(c, k, Some(v), probe).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        let (k, probe) = self.key_of(key)?;
        self.tree.modify(c, k, None, probe).await
    }

    fn stats(&self) -> IndexStats {
        let t = &self.tree;
        let splits = t.splits.load(Ordering::Relaxed);
        IndexStats {
            cache_bytes: t.blink.cache.bytes() + t.hotspots.as_ref().map_or(0, |h| h.bytes()),
            retries: t.blink.retries.load(Ordering::Relaxed),
            extra: vec![
                ("leaf_splits", splits),
                ("leaf_moves_right", t.moves_right.load(Ordering::Relaxed)),
                ("half_splits_finished", t.half_splits_finished.load(Ordering::Relaxed)),
                ("collision_groups_formed", t.groups_formed.load(Ordering::Relaxed)),
                ("leaf_keys_at_split", t.keys_at_split.load(Ordering::Relaxed)),
                ("leaf_slots_at_split", splits * t.leaf.span as u64),
                ("speculative_reads", t.hotspots.as_ref().map_or(0, |h| h.attempts.get())),
                ("speculative_hits", t.hotspots.as_ref().map_or(0, |h| h.hits.get())),
            ],
        }
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        Ok(Some(self.tree.load_factor(c).await?))
    }
}
