//! # HiStore: a replicated key-value store with a hybrid index
//!
//! HiStore (Han et al., arXiv 2208.12987) keeps, per *index group*, a hash table for point
//! lookups and skiplists for range queries, consistent through one replication log. Unlike the
//! other designs here its index servers use their CPUs: GET is one-sided, every other operation
//! is a request served by an index server's threads. In dmindex an index server is a memory
//! node running this crate's service ([`server`]); a data server is a plain memory node.
//!
//! ## Roles
//!
//! * Keys go to a group by hash. A group is three replicas on three index servers: the
//!   *primary* keeps a chained hash table in its memory-node memory ([`layout`]), read by
//!   clients one-sided; two *backups* keep skiplists in their own memory ([`structure`]). Each
//!   replica splits its keys into partitions by hash, one log and one skiplist each.
//! * Items (key and value) live on data servers in immutable KV blocks the client writes before
//!   it touches the index; the index holds their addresses.
//!
//! ## Operations
//!
//! | op | client's round trips | what happens |
//! |----|----------------------|--------------|
//! | GET | 2 (bucket, item) | READ the key's bucket (and chain), match signatures, READ the item and the view word (one doorbell), check its key (a miss: the bucket, then the view word) |
//! | PUT / UPDATE | 2 (item, request) | WRITE the item to a data server, then WRITE to the primary: log, ship to both backups, wait, CAS the slot, answer |
//! | DELETE | 1 | the same request without an item |
//! | SCAN | 2 (1 + ⌈⌈items / 16⌉ / 8⌉) | SCAN to a backup, which takes the primary's cut, applies its log to it, merges its partitions; the client READs the items, 16 to a doorbell, every doorbell rung before any is awaited (with `scan_reads=each`, as the paper's client: 1 + max(items, 1), one READ after another) |
//!
//! The write protocol, group commit, asynchronous apply and the cut that closes the paper's
//! scan race are in [`replica`]. Failures: each group has a view word (`dmindex_prim::view`);
//! clients fail over ([`route`]), replicas adopt views and a new primary brings the logs level
//! ([`failover`]), and every read validates against the view word after it read (the `read`
//! module). A restarted index server gets its replicas back by a rebuild (the `rebuild`
//! module drives it, [`join`] is the replacement's side): a snapshot of the leader, the log
//! learned meanwhile, and a view change that adds the replacement and hands the primary role
//! back to a rebuilt hash table. The baselines of the paper (§5.1) are modes of the same store
//! ([`mode`]): all-hashtable, all-skiplist, single-hashtable, single-skiplist.
//!
//! ## Placement
//!
//! With one memory node everything is on it (the roles are still separate replicas). With more,
//! node 0 is a data server (and holds the root table); replica `r` of group `g` is on node
//! `1 + (g · replicas + r) mod (nodes − 1)`; nodes past the index servers are data servers too.
//!
//! ## What is not modelled
//!
//! Items replaced or deleted are not reclaimed (the paper's data servers append). The paper's
//! bucket-overflow text has the client add a bucket by request and rewrite it one-sided, which
//! contradicts its own write path (the primary's CPU updates the table); here the primary's CPU
//! chains a fresh bucket.

pub mod cpu;
pub mod failover;
pub mod join;
pub mod layout;
pub mod mode;
pub mod proto;
mod read;
mod rebuild;
pub mod replica;
pub mod route;
pub mod server;
pub mod structure;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dmindex_fabric::service::Service;
use dmindex_fabric::{Client, GlobalAddr, NodeId, ServiceId, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, IndexStats, MnService, PointIndex, RangeIndex, ScanBuf,
};
use dmindex_prim::counter::{get, Striped};
use dmindex_prim::hash::hash_bytes;
use dmindex_prim::kv_block::{self, Blocks};
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::pool::Pool;
use dmindex_prim::root::{Magic, RootSlot};
use dmindex_prim::view::View;
use smallvec::SmallVec;

use crate::layout::{Descriptor, GroupPlace, Place, Slot, INSTANCES, MAX_ITEM, MAX_NODES, SLOTS};
use crate::mode::Mode;
use crate::proto::{Head, Kind, Put, Reader};
use crate::replica::Setup;
use crate::route::status;

/// The service's id on every memory node.
pub const SERVICE: ServiceId = ServiceId(24);
/// The descriptor's magic ("HS").
pub const MAGIC: Magic = Magic { name: "histore", value: 0x4853, bits: 16 };

/// HiStore's options.
pub const OPTIONS: Options = Options {
    what: "histore",
    known: &[
        Opt::number("groups", &[], 1..=64),
        Opt::number("partitions", &[], 1..=64),
        Opt::number("table_fill", &[], 5..=100),
        Opt::choice("scan_reads", &[], &["together", "each"]),
    ],
};

/// How a client READs the items a SCAN's replies name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanReads {
    /// All in doorbells rung together, with the view words: one round trip per
    /// [`dmindex_fabric::client::MAX_DOORBELLS`] doorbells of 16 (`scan_reads=together`, the default).
    Together,
    /// One at a time in key order, each awaited before the next, the last with the view words
    /// (`scan_reads=each`; 1 + max(items, 1) round trips): the paper's client, whose SCAN spends
    /// about 96 % of its time in data access (§5.3), which only a READ per item in turn
    /// accounts for.
    Each,
}

/// Partitions per replica by default: the paper's four worker threads.
pub const DEFAULT_PARTITIONS: usize = 4;
/// Percent of the hash table's slots the expected items fill by default (over-provisioned so
/// that chains stay one bucket long).
pub const DEFAULT_TABLE_FILL: usize = 50;

fn make_server() -> Arc<dyn Service> {
    Arc::new(server::Server::default())
}

/// HiStore's service, installed on every memory node.
pub const SERVICES: &[MnService] = &[MnService { id: SERVICE, name: "histore", make: make_server }];

#[derive(Debug, Default)]
struct Counters {
    /// Bumped by every hash-table read: striped ([`Striped`]).
    bucket_reads: Striped,
    /// Bucket READs past the first of a chain.
    chain_hops: AtomicU64,
    signature_misses: AtomicU64,
    lookups: AtomicU64,
    scans: AtomicU64,
    scan_items: AtomicU64,
    picks: AtomicU64,
    /// Attempts that missed (a stale view or a node down) and were retried.
    misses: AtomicU64,
    /// Of those, attempts a replica refused because it serves another view (a fenced old
    /// primary among them).
    stale: AtomicU64,
    /// View changes this handle started.
    failovers: AtomicU64,
    /// Replicas this handle rebuilt and joined.
    rebuilds: AtomicU64,
}

/// The writer numbers of one handle: its instance (unique among the store's handles) and a slot
/// per concurrent write, each slot with its next sequence number.
struct Writers {
    instance: u64,
    free: Mutex<Vec<(u32, u32)>>,
    slots: AtomicU32,
}

impl Writers {
    fn take(&self) -> (u32, u32) {
        let free = self.free.lock().expect("writer slots").pop();
        free.unwrap_or_else(|| (self.slots.fetch_add(1, Ordering::Relaxed), 1))
    }

    fn give(&self, (slot, seq): (u32, u32)) {
        self.free.lock().expect("writer slots").push((slot, seq.wrapping_add(1)));
    }

    fn id(&self, slot: u32) -> u64 {
        self.instance << 32 | slot as u64
    }
}

/// A compute node's handle on a store in mode `MODE` ([`Mode`] as a number).
pub struct Store<const MODE: u8> {
    mode: Mode,
    store: u16,
    partitions: u8,
    desc: Descriptor,
    desc_at: GlobalAddr,
    /// Each group's view and table offsets as last seen ([`route`]).
    groups: Vec<route::GroupCache>,
    writers: Writers,
    data_nodes: Vec<NodeId>,
    items: Blocks,
    /// Key and value limits ([`IndexConfig::check_kv`]).
    config: IndexConfig,
    counters: Counters,
    /// Scans' working vectors ([`read::ScanScratch`]).
    scans: Pool<read::ScanScratch>,
    scan_reads: ScanReads,
}

/// HiStore: hash table on the primary, skiplists on both backups.
pub type HiStore = Store<0>;
/// The paper's all-hashtable baseline.
pub type AllHashtable = Store<1>;
/// The paper's all-skiplist baseline.
pub type AllSkiplist = Store<2>;
/// The paper's single-hashtable baseline.
pub type SingleHashtable = Store<3>;
/// The paper's single-skiplist baseline.
pub type SingleSkiplist = Store<4>;

/// The configuration `config` asks for: groups, partitions and buckets per group.
struct Shape {
    groups: usize,
    partitions: usize,
    buckets: u64,
    /// A client-side choice: not in the descriptor.
    scan_reads: ScanReads,
}

impl Shape {
    fn of(config: &IndexConfig) -> IndexResult<Shape> {
        let opts = OPTIONS.parse(&config.extra)?;
        let groups = opts.number("groups").unwrap_or(1);
        let partitions = opts.number("partitions").unwrap_or(DEFAULT_PARTITIONS);
        let fill = opts.number("table_fill").unwrap_or(DEFAULT_TABLE_FILL) as u64;
        let per_group = config.expected_items.div_ceil(groups as u64);
        let buckets = (per_group * 100).div_ceil(fill * SLOTS as u64).max(1);
        let scan_reads = match opts.number("scan_reads") {
            Some(1) => ScanReads::Each,
            _ => ScanReads::Together,
        };
        Ok(Shape { groups, partitions, buckets, scan_reads })
    }

    /// What the root table's descriptor word pins.
    fn bits(&self, mode: Mode) -> u64 {
        (mode as u64) << 16 | (self.partitions as u64) << 8 | self.groups as u64
    }
}

/// Replica nodes per group and the data servers, for `nodes` memory nodes.
fn placement(mode: Mode, groups: usize, nodes: u16) -> (Vec<[NodeId; 3]>, Vec<NodeId>) {
    let r = mode.replicas();
    if nodes == 1 {
        return (vec![[0; 3]; groups], vec![0]);
    }
    let index = nodes as usize - 1;
    let place = (0..groups)
        .map(|g| {
            std::array::from_fn(|i| if i < r { 1 + ((g * r + i) % index) as NodeId } else { 0 })
        })
        .collect();
    let mut data = vec![0];
    data.extend((1 + groups * r).min(nodes as usize) as NodeId..nodes);
    (place, data)
}

impl<const MODE: u8> Store<MODE> {
    fn mode() -> IndexResult<Mode> {
        Mode::decode(MODE).ok_or_else(|| IndexError::Config(format!("histore mode {MODE}")))
    }

    fn check<T: Transport>(c: &Client<T>, config: &IndexConfig) -> IndexResult<(Mode, Shape)> {
        let mode = Self::mode()?;
        let shape = Shape::of(config)?;
        if c.info().nodes() > MAX_NODES {
            return Err(IndexError::Config(format!(
                "histore addresses at most {MAX_NODES} memory nodes, not {}",
                c.info().nodes()
            )));
        }
        if config.max_key > u16::MAX as usize
            || (kv_block::HEADER + config.max_key + config.max_value) as u64 > MAX_ITEM
        {
            return Err(IndexError::Config(format!(
                "histore items are at most {MAX_ITEM} bytes: max_key={} max_value={} do not fit",
                config.max_key, config.max_value
            )));
        }
        Ok((mode, shape))
    }

    fn head(&self, op: u8, replica: usize, group: usize, epoch: u32) -> Head {
        Head { op, replica: replica as u8, group: group as u16, store: self.store, epoch }
    }

    /// Where a key hashing to `h` goes.
    fn place(&self, h: u64) -> Place {
        Place::of(h, self.desc.groups.len(), self.partitions as usize, self.desc.buckets)
    }

    /// The request for a write of `kind` to the group's primary, retried across failovers with
    /// one writer and sequence number; whether the key existed.
    async fn write<T: Transport>(
        &self,
        c: &Client<T>,
        kind: Kind,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> IndexResult<bool> {
        let h = hash_bytes(key);
        let place = self.place(h);
        let g = place.group;
        let word = match value {
            Some(v) => {
                let node = self.data_nodes[(h % self.data_nodes.len() as u64) as usize];
                let (item, bytes) = self.items.write_on(c, node, key, v).await?;
                Slot::new(place.signature, item, bytes).word()
            }
            None => 0,
        };
        let slot = self.writers.take();
        let mut tries = 0;
        let result = loop {
            let v = self.view(g);
            let leader = v.leader as usize;
            let mut m = SmallVec::<[u8; 128]>::new();
            m.head(self.head(proto::WRITE, leader, g, v.epoch));
            m.entry_of(kind, self.writers.id(slot.0), slot.1, key, word);
            let miss = match c.call(self.desc.groups[g].nodes[leader], SERVICE, &m).await {
                Ok(reply) => match status(&reply) {
                    Ok(mut r) => match r.u8() {
                        Ok(b) => break Ok(b != 0),
                        Err(e) => break Err(IndexError::Corrupt(format!("WRITE reply: {e:?}"))),
                    },
                    Err(miss) => miss,
                },
                Err(e) => e.into(),
            };
            if let Err(e) = self.recover(c, g, v, miss, &mut tries).await {
                break Err(e);
            }
        };
        self.writers.give(slot);
        result
    }
}

impl<T: Transport, const MODE: u8> PointIndex<T> for Store<MODE> {
    const SERVICES: &'static [MnService] = SERVICES;
    /// The replicated modes fail over; the single ones lose their only replica.
    const SURVIVES_MN_CRASH: bool = MODE <= 2;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let (mode, shape) = Self::check(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        let (place, _) = placement(mode, shape.groups, c.info().nodes());
        let mut groups = Vec::with_capacity(shape.groups);
        for (g, nodes) in place.iter().enumerate() {
            let mut tables = [0; 3];
            for (r, table) in tables.iter_mut().enumerate().take(mode.replicas()) {
                let setup = Setup {
                    mode,
                    store: config.root_slot as u16,
                    group: g as u16,
                    replica: r as u8,
                    groups: shape.groups as u16,
                    partitions: shape.partitions as u8,
                    nodes: *nodes,
                    buckets: shape.buckets,
                };
                let reply = c.call(nodes[r], SERVICE, &server::setup_request(&setup)).await?;
                *table = Reader::new(&reply)
                    .u64()
                    .map_err(|e| IndexError::Corrupt(format!("SETUP reply: {e:?}")))?;
            }
            let view = View::initial(((1u16 << mode.replicas()) - 1) as u8, 0);
            groups.push(GroupPlace { nodes: *nodes, tables, view: view.word() });
        }
        let desc = Descriptor { buckets: shape.buckets, memory_nodes: c.info().nodes(), groups };
        let bytes = desc.encode();
        let at = c.alloc_on(0, bytes.len() as u64, 64).await?;
        c.write(at, &bytes).await?;
        slot.claim(c, at.raw()).await?;
        slot.publish(c, &MAGIC, shape.bits(mode)).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let (mode, shape) = Self::check(c, config)?;
        let slot = RootSlot::with_descriptor(config.root_slot)?;
        slot.check(c, &MAGIC, shape.bits(mode)).await?;
        let at = GlobalAddr::from_raw(slot.load(c).await?);
        let b = c.read_vec(at, Descriptor::bytes(shape.groups)).await?;
        let desc = Descriptor::decode(&b).map_err(IndexError::Corrupt)?;
        if desc.memory_nodes != c.info().nodes() || desc.groups.len() != shape.groups {
            return Err(IndexError::Config(format!(
                "the store was created on {} memory nodes with {} groups",
                desc.memory_nodes,
                desc.groups.len()
            )));
        }
        let (_, data_nodes) = placement(mode, shape.groups, c.info().nodes());
        let instance = c.faa(at.add(INSTANCES), 1).await?;
        // Table offsets read after the view words they go with ([`route`]).
        let again = c.read_vec(at, Descriptor::bytes(shape.groups)).await?;
        let again = Descriptor::decode(&again).map_err(IndexError::Corrupt)?;
        let groups = desc
            .groups
            .iter()
            .zip(&again.groups)
            .map(|(g, later)| route::GroupCache::new(&GroupPlace { tables: later.tables, ..*g }))
            .collect();
        Ok(Store {
            mode,
            store: config.root_slot as u16,
            partitions: shape.partitions as u8,
            desc,
            desc_at: at,
            groups,
            writers: Writers { instance, free: Mutex::new(Vec::new()), slots: AtomicU32::new(0) },
            data_nodes,
            items: Blocks::new(config.max_key, config.max_value),
            config: config.clone(),
            counters: Counters::default(),
            scans: Pool::new(64),
            scan_reads: shape.scan_reads,
        })
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        let place = self.place(hash_bytes(key));
        let mut tries = 0;
        loop {
            let v = self.view(place.group);
            match self.get_in(c, key, place, v, out).await {
                Ok(found) => return Ok(found),
                Err(miss) => self.recover(c, place.group, v, miss, &mut tries).await?,
            }
        }
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.config.check_kv(key, Some(value))?;
        self.write(c, Kind::Upsert, key, Some(value)).await.map(drop)
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, Some(value))?;
        self.write(c, Kind::Update, key, Some(value)).await
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        self.write(c, Kind::Delete, key, None).await
    }

    async fn recover_memory_node(&self, c: &Client<T>, node: NodeId) -> IndexResult<()> {
        if MODE > 2 {
            return Err(IndexError::Unsupported(format!(
                "{:?} keeps one replica: nothing to rebuild memory node {node} from",
                self.mode
            )));
        }
        self.rebuild_node(c, node).await.map(drop)
    }

    fn stats(&self) -> IndexStats {
        let n = &self.counters;
        IndexStats {
            cache_bytes: 0,
            retries: 0,
            extra: vec![
                ("bucket_reads", n.bucket_reads.get()),
                ("chain_hops", get(&n.chain_hops)),
                ("signature_misses", get(&n.signature_misses)),
                ("lookup_requests", get(&n.lookups)),
                ("scan_requests", get(&n.scans)),
                ("scan_items", get(&n.scan_items)),
                ("misses", get(&n.misses)),
                ("stale_refusals", get(&n.stale)),
                ("failovers", get(&n.failovers)),
                ("rebuilds", get(&n.rebuilds)),
            ],
        }
    }
}

impl<T: Transport, const MODE: u8> RangeIndex<T> for Store<MODE> {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        if count == 0 {
            out.clear();
            return Ok(());
        }
        self.scan_between(c, from, None, count, out).await
    }

    async fn scan_range_into(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        if lo >= hi {
            out.clear();
            return Ok(());
        }
        self.scan_between(c, lo, Some(hi), usize::MAX, out).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_spreads_replicas_and_keeps_node_zero_for_data() {
        assert_eq!(placement(Mode::HiStore, 1, 1), (vec![[0, 0, 0]], vec![0]));
        assert_eq!(placement(Mode::HiStore, 1, 4), (vec![[1, 2, 3]], vec![0]));
        assert_eq!(placement(Mode::HiStore, 2, 7), (vec![[1, 2, 3], [4, 5, 6]], vec![0]));
        assert_eq!(placement(Mode::HiStore, 1, 6), (vec![[1, 2, 3]], vec![0, 4, 5]));
        assert_eq!(placement(Mode::SingleSkiplist, 1, 3), (vec![[1, 0, 0]], vec![0, 2]));
        // Fewer nodes than replicas: replicas share nodes but stay distinct replicas.
        assert_eq!(placement(Mode::HiStore, 1, 3), (vec![[1, 2, 1]], vec![0]));
    }
}
