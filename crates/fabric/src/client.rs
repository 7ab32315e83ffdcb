//! The client: what index code holds to reach remote memory.
//!
//! A [`Client`] wraps one transport connection. It checks every verb against the cluster's shape
//! (known node, range inside the region, 8-byte alignment for atomics, batch on one node), counts
//! it in the client's [`ClientStats`], and forwards it. It also carves remote memory out of
//! chunks it takes from the memory nodes' allocation service, the way CHIME and Sherman do, so
//! that allocating a node costs no round trip most of the time.
//!
//! A client belongs to one task (a "coroutine" in the papers); a compute node runs many of them on
//! a few threads. Nothing here blocks, spawns or reads a clock.

use std::cell::Cell;
use std::future::{ready, Future};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use futures::future::Either;

use crate::addr::{align_up, GlobalAddr, NodeId};
use crate::error::{FabricError, Result};
use crate::service::{self, ServiceId, ALLOC_CHUNK};
use crate::stats::{bump, ClientStats, VerbCounts};
use crate::verbs::{AtomicOp, BatchOp, ClusterInfo, Transport, MAX_BATCH};

/// Default size of the chunks a client takes from a memory node (as CHIME: 16 MiB).
pub const DEFAULT_CHUNK: u64 = 16 << 20;
/// Alignment of chunks.
pub const CHUNK_ALIGN: u64 = 4096;

/// The next [`Client::ordinal`].
static NEXT_ORDINAL: AtomicU32 = AtomicU32::new(0);

/// Where the client carves its next allocations from.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    next: GlobalAddr,
    end: u64,
}

/// A cluster that hands out clients: one per task, each for a given compute node.
pub trait Fabric {
    /// The transport its clients use.
    type Transport: Transport;
    /// The memory nodes' sizes.
    fn info(&self) -> &ClusterInfo;
    /// A new client on compute node `cn`.
    fn client(&self, cn: u16) -> Result<Client<Self::Transport>>;
}

/// A task's handle on remote memory over transport `T`.
pub struct Client<T> {
    transport: T,
    info: Arc<ClusterInfo>,
    cn: u16,
    ordinal: u32,
    stats: ClientStats,
    chunk_size: u64,
    chunk: Cell<Option<Chunk>>,
    /// Chunks for [`Client::alloc_on`], one per memory node, taken on first use.
    placed: Box<[Cell<Option<Chunk>>]>,
    next_node: Cell<NodeId>,
    membership: MemberState,
}

/// A client's cluster membership, as the lease protocol (in the primitives crate) keeps it: the
/// member word it joined as (0: not joined), when it last renewed its lease on its own clock,
/// and how many locks it has taken. Cells, not a protocol:
/// the fabric only carries them with the client.
#[derive(Debug, Default)]
pub struct MemberState {
    /// The member word this client joined as; 0 until it joins.
    pub member: Cell<u64>,
    /// [`Client::now_ns`] at its last renewal.
    pub renewed_ns: Cell<u64>,
    /// Locks taken so far (wrapping): what makes each acquisition's held word its own.
    pub acquisitions: Cell<u32>,
    /// Per memory node, the intent word this client last wrote into its slot of that node's
    /// intent table ([`crate::layout::intent_slot`]; the primitives crate's Spear draws it):
    /// where its next intent takes its sequence number from. 0 after joining.
    pub intents: Box<[Cell<u64>]>,
}

/// Most doorbells [`Client::doorbells`] rings before it waits (one round trip). A bound of this
/// client, not a measured NIC limit: 8 × [`MAX_BATCH`] = 128 verbs, which covers a 100-item
/// scan's round and keeps the verbs a caller gathers on the stack small (SMART's code rings a
/// doorbell of up to 1 024 READs per memory node).
pub const MAX_DOORBELLS: usize = 8;

/// Regroups `ops` so that each node's verbs are contiguous, nodes in the order their first verb
/// appears and each node's verbs in their order; no allocation (an insertion by group, cheap for
/// the few nodes and the tens of verbs of a scan).
fn group_by_node(ops: &mut [BatchOp<'_>]) {
    let mut start = 0;
    while start < ops.len() {
        let node = ops[start].addr().node();
        let mut end = start + 1;
        for i in start + 1..ops.len() {
            if ops[i].addr().node() == node {
                // Moves verb i down to the end of the group, the verbs between shifted up by one.
                ops[end..=i].rotate_right(1);
                end += 1;
            }
        }
        start = end;
    }
}

impl<T: Transport> Client<T> {
    /// A client of compute node `cn` over `transport`, taking chunks of `chunk_size` bytes.
    pub fn new(transport: T, info: Arc<ClusterInfo>, cn: u16, chunk_size: u64) -> Client<T> {
        let nodes = info.nodes().max(1);
        Client {
            transport,
            cn,
            ordinal: NEXT_ORDINAL.fetch_add(1, Ordering::Relaxed),
            stats: ClientStats::default(),
            chunk_size: align_up(chunk_size.max(CHUNK_ALIGN), CHUNK_ALIGN),
            chunk: Cell::new(None),
            placed: (0..info.nodes()).map(|_| Cell::new(None)).collect(),
            next_node: Cell::new(cn % nodes),
            membership: MemberState {
                intents: (0..info.nodes()).map(|_| Cell::new(0)).collect(),
                ..MemberState::default()
            },
            info,
        }
    }

    /// The compute node this client runs on.
    pub fn cn(&self) -> u16 {
        self.cn
    }

    /// A number that differs between clients made one after another in this process (it
    /// wraps): what CN-local tables shard by, so that clients on different threads keep off
    /// each other's cache lines. Never a correctness key: two clients may share it.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The shape of the cluster.
    pub fn info(&self) -> &ClusterInfo {
        &self.info
    }

    /// The underlying transport connection.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// This client's membership cells ([`MemberState`]).
    pub fn membership(&self) -> &MemberState {
        &self.membership
    }

    /// The client's own clock, ns ([`Transport::now_ns`]).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.transport.now_ns()
    }

    /// Registers this connection as cluster member `member` with every memory node
    /// ([`Transport::register_member`]) and remembers it. Once per client.
    pub async fn register_member(&self, member: u64) -> Result<()> {
        self.transport.register_member(member).await?;
        self.membership.member.set(member);
        Ok(())
    }

    /// Fences member `member` on every memory node ([`Transport::fence`]): once this returns,
    /// no verb of theirs executes anywhere. One round trip per node.
    pub async fn fence(&self, member: u64) -> Result<()> {
        for node in 0..self.info.nodes() {
            bump(&self.stats.round_trips, 1);
            bump(&self.stats.rpcs, 1);
            self.transport.fence(node, member).await?;
        }
        bump(&self.stats.fences, 1);
        Ok(())
    }

    /// Live statistics.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// The counts so far (subtract two snapshots to cost an operation).
    pub fn counts(&self) -> VerbCounts {
        self.stats.snapshot()
    }

    fn check(&self, addr: GlobalAddr, len: u64) -> Result<()> {
        let node = addr.node();
        let size = self
            .info
            .node_size(node)
            .ok_or(FabricError::UnknownNode { node, nodes: self.info.nodes() })?;
        match addr.offset().checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(FabricError::OutOfBounds { addr, len, size }),
        }
    }

    fn check_atomic(&self, addr: GlobalAddr) -> Result<()> {
        self.check(addr, 8)?;
        if !addr.is_aligned(8) {
            return Err(FabricError::Misaligned { addr, required: 8 });
        }
        Ok(())
    }

    /// READ `buf.len()` bytes at `addr`. One round trip.
    ///
    /// The verb is checked and counted when called; the future returned is the transport's own
    /// (no wrapping state machine: verbs are on every hot path).
    pub fn read<'a>(
        &'a self,
        addr: GlobalAddr,
        buf: &'a mut [u8],
    ) -> impl Future<Output = Result<()>> + 'a {
        if let Err(e) = self.check(addr, buf.len() as u64) {
            return Either::Right(ready(Err(e)));
        }
        let s = &self.stats;
        bump(&s.round_trips, 1);
        bump(&s.reads, 1);
        bump(&s.bytes_read, buf.len() as u64);
        Either::Left(self.transport.read(addr, buf))
    }

    /// READ `len` bytes at `addr` into a new vector. One round trip.
    pub async fn read_vec(&self, addr: GlobalAddr, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v).await?;
        Ok(v)
    }

    /// READ the 8-byte little-endian word at `addr` (any alignment; not atomic unless aligned).
    pub async fn read_word(&self, addr: GlobalAddr) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).await?;
        Ok(u64::from_le_bytes(b))
    }

    /// WRITE `data` at `addr` and wait for it. One round trip. (Checked and counted when
    /// called, like [`Client::read`].)
    pub fn write<'a>(
        &'a self,
        addr: GlobalAddr,
        data: &'a [u8],
    ) -> impl Future<Output = Result<()>> + 'a {
        if let Err(e) = self.check(addr, data.len() as u64) {
            return Either::Right(ready(Err(e)));
        }
        let s = &self.stats;
        bump(&s.round_trips, 1);
        bump(&s.writes, 1);
        bump(&s.bytes_written, data.len() as u64);
        Either::Left(self.transport.write(addr, data))
    }

    /// WRITE `data` at `addr` without waiting (SepHash's zero-wait write). `data` may be reused at
    /// once. Later verbs of this client to the same node execute after it; [`Client::flush`] waits
    /// for all such writes. Not a round trip.
    pub fn write_zero_wait(&self, addr: GlobalAddr, data: &[u8]) -> Result<()> {
        self.check(addr, data.len() as u64)?;
        let s = &self.stats;
        bump(&s.writes, 1);
        bump(&s.zero_wait_writes, 1);
        bump(&s.bytes_written, data.len() as u64);
        self.transport.post_write(addr, data)
    }

    /// Waits for every zero-wait WRITE this client posted. Call before the client is dropped.
    pub async fn flush(&self) -> Result<()> {
        self.transport.quiesce().await
    }

    /// Counts one atomic verb (not its round trip).
    fn count_atomic(&self, op: AtomicOp) {
        let s = &self.stats;
        let (kind, operand_bytes) = match op {
            AtomicOp::Cas { .. } => (&s.cas, 16),
            AtomicOp::MaskedCas { .. } => (&s.masked_cas, 32),
            AtomicOp::Faa { .. } => (&s.faa, 8),
        };
        bump(kind, 1);
        bump(&s.bytes_written, operand_bytes);
        bump(&s.bytes_read, 8);
    }

    /// Counts a completed atomic that failed its comparison.
    fn count_failure(&self, op: AtomicOp, old: u64) {
        if op.failed(old) {
            bump(&self.stats.cas_failures, 1);
        }
    }

    /// An atomic verb on the aligned word at `addr`; returns the old word. One round trip.
    /// (Checked and counted when called; a failed comparison is counted when it completes.)
    pub fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> impl Future<Output = Result<u64>> + '_ {
        let checked = self.check_atomic(addr);
        if checked.is_ok() {
            self.count_atomic(op);
            bump(&self.stats.round_trips, 1);
        }
        async move {
            checked?;
            let old = self.transport.atomic(addr, op).await?;
            self.count_failure(op, old);
            Ok(old)
        }
    }

    /// Compare-and-swap on the aligned word at `addr`; returns the old word (success iff it
    /// equals `expected`). One round trip.
    pub fn cas(
        &self,
        addr: GlobalAddr,
        expected: u64,
        new: u64,
    ) -> impl Future<Output = Result<u64>> + '_ {
        self.atomic(addr, AtomicOp::Cas { expected, new })
    }

    /// Masked compare-and-swap: compares only the `compare_mask` bits of the word with `compare`;
    /// on a match replaces only the `swap_mask` bits with those of `swap`. Returns the whole old
    /// word. One round trip.
    pub fn masked_cas(
        &self,
        addr: GlobalAddr,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    ) -> impl Future<Output = Result<u64>> + '_ {
        self.atomic(addr, AtomicOp::MaskedCas { compare, compare_mask, swap, swap_mask })
    }

    /// Fetch-and-add (wrapping) on the aligned word at `addr`; returns the old word. One round
    /// trip.
    pub fn faa(&self, addr: GlobalAddr, delta: u64) -> impl Future<Output = Result<u64>> + '_ {
        self.atomic(addr, AtomicOp::Faa { delta })
    }

    /// A doorbell batch: READ, WRITE and atomic verbs to one memory node, posted and completed
    /// together, in order. One round trip. At most [`MAX_BATCH`] verbs. Each atomic's old word is
    /// in its [`BatchOp::old`] afterwards.
    pub async fn batch(&self, ops: &mut [BatchOp<'_>]) -> Result<()> {
        let first = ops.first().ok_or(FabricError::EmptyBatch)?.addr().node();
        if ops.len() > MAX_BATCH {
            return Err(FabricError::BatchTooLarge { len: ops.len(), max: MAX_BATCH });
        }
        for op in ops.iter() {
            if op.addr().node() != first {
                return Err(FabricError::MixedNodesInBatch { first, other: op.addr().node() });
            }
            self.check_op(op)?;
        }
        let s = &self.stats;
        bump(&s.round_trips, 1);
        bump(&s.batches, 1);
        let atomics = self.count_ops(ops);
        self.transport.batch(first, ops).await?;
        if atomics {
            self.count_failures(ops);
        }
        Ok(())
    }

    /// Independent verbs, on any memory nodes, posted as doorbells back to back and awaited
    /// together: one round trip for up to [`MAX_DOORBELLS`] doorbells, as a requester that
    /// rings several doorbells (on one queue pair or several) before it polls its completion
    /// queue (SMART's range query reads a tree level this way). Each node's verbs go in
    /// doorbells of at most [`MAX_BATCH`], in the order given (a doorbell of one verb counts as
    /// that verb, not as a batch); nodes are taken in the order their first verb appears, and `ops` is
    /// regrouped by node in place, stably (each verb keeps its buffer). The verbs must not
    /// depend on each other: doorbells in flight together promise no order among them. More
    /// than [`MAX_DOORBELLS`] doorbells take one more round trip per [`MAX_DOORBELLS`]. Each
    /// atomic's old word is in its [`BatchOp::old`] afterwards; on an error, every doorbell
    /// of the round has still completed.
    pub async fn doorbells(&self, ops: &mut [BatchOp<'_>]) -> Result<()> {
        for op in ops.iter() {
            self.check_op(op)?;
        }
        group_by_node(ops);
        let mut doorbells = ops
            .chunk_by_mut(|a, b| a.addr().node() == b.addr().node())
            .flat_map(|run| run.chunks_mut(MAX_BATCH))
            .peekable();
        let s = &self.stats;
        while doorbells.peek().is_some() {
            bump(&s.round_trips, 1);
            let round = std::array::from_fn::<_, MAX_DOORBELLS, _>(|_| {
                let d = doorbells.next()?;
                if d.len() > 1 {
                    bump(&s.batches, 1);
                }
                let atomics = self.count_ops(d);
                let node = d[0].addr().node();
                Some(async move {
                    self.transport.batch(node, d).await?;
                    if atomics {
                        self.count_failures(d);
                    }
                    Ok(())
                })
            });
            crate::join::join_results(round).await?;
        }
        Ok(())
    }

    /// Checks one verb of a batch against the cluster's shape.
    fn check_op(&self, op: &BatchOp<'_>) -> Result<()> {
        match op {
            BatchOp::Atomic { addr, .. } => self.check_atomic(*addr),
            _ => self.check(op.addr(), op.len() as u64),
        }
    }

    /// Counts a batch's verbs by kind (not its round trip); whether it holds an atomic.
    fn count_ops(&self, ops: &[BatchOp<'_>]) -> bool {
        let s = &self.stats;
        let mut atomics = false;
        for op in ops {
            match op {
                BatchOp::Read { buf, .. } => {
                    bump(&s.reads, 1);
                    bump(&s.bytes_read, buf.len() as u64);
                }
                BatchOp::Write { data, .. } => {
                    bump(&s.writes, 1);
                    bump(&s.bytes_written, data.len() as u64);
                }
                BatchOp::Atomic { op, .. } => {
                    self.count_atomic(*op);
                    atomics = true;
                }
            }
        }
        atomics
    }

    /// Counts the failed comparisons of a completed batch's atomics.
    fn count_failures(&self, ops: &[BatchOp<'_>]) {
        for op in ops {
            if let BatchOp::Atomic { op, old, .. } = op {
                self.count_failure(*op, *old);
            }
        }
    }

    /// A two-sided request to `service` on memory node `node`. One round trip.
    pub async fn call(&self, node: NodeId, service: ServiceId, request: &[u8]) -> Result<Vec<u8>> {
        if node >= self.info.nodes() {
            return Err(FabricError::UnknownNode { node, nodes: self.info.nodes() });
        }
        let s = &self.stats;
        bump(&s.round_trips, 1);
        bump(&s.rpcs, 1);
        bump(&s.bytes_written, request.len() as u64);
        let reply = self.transport.call(node, service, request).await?;
        bump(&s.bytes_read, reply.len() as u64);
        Ok(reply)
    }

    /// Connects to memory node `node` afresh ([`Transport::reconnect`]): after it restarted, the
    /// old connection fails every verb. One round trip.
    pub async fn reconnect(&self, node: NodeId) -> Result<()> {
        if node >= self.info.nodes() {
            return Err(FabricError::UnknownNode { node, nodes: self.info.nodes() });
        }
        bump(&self.stats.round_trips, 1);
        self.transport.reconnect(node).await
    }

    /// Waits about `ns` nanoseconds before the next verb ([`Transport::pause`]): a retry's
    /// backoff, counted in [`VerbCounts::pauses`]. No round trip.
    pub async fn pause(&self, ns: u64) {
        bump(&self.stats.pauses, 1);
        self.transport.pause(ns).await
    }

    /// Reports compute-side CPU work the index did since its last verb ([`crate::work`]):
    /// counted in [`VerbCounts`] and charged by a simulated fabric. Cheap: two cell updates.
    #[inline]
    pub fn compute(&self, work: crate::Work, count: u64) {
        let c = match work {
            crate::Work::CacheLookup => &self.stats.cache_lookups,
            crate::Work::RadixStep => &self.stats.radix_steps,
            crate::Work::TableProbe => &self.stats.table_probes,
            crate::Work::KeyCompare => &self.stats.keys_compared,
            crate::Work::KeyHash => &self.stats.keys_hashed,
            crate::Work::BytesScanned => &self.stats.bytes_scanned,
        };
        bump(c, count);
        self.transport.compute(work, count)
    }

    /// A monitor's wait for memory node `node` to restart: reconnects (a heartbeat each round
    /// trip) until the node stops answering, then until it answers again, and returns connected
    /// to the new incarnation. Returns only once the node has gone down and come back.
    pub async fn await_restart(&self, node: NodeId) {
        while self.reconnect(node).await.is_ok() {}
        while self.reconnect(node).await.is_err() {}
    }

    /// Allocates `len` zeroed bytes of remote memory aligned to `align` (a power of two, at most
    /// 1 GiB). Carved from the client's current chunk; a new chunk is taken from the memory nodes
    /// round-robin when it runs out (one two-sided request), and once no node has a whole chunk
    /// left, each allocation takes its own range of what is left. Remote memory is never freed.
    pub async fn alloc(&self, len: u64, align: u64) -> Result<GlobalAddr> {
        self.check_alloc(self.next_node.get(), len, align)?;
        bump(&self.stats.bytes_allocated, len);
        if let Some(a) = carve(&self.chunk, len, align) {
            return Ok(a);
        }
        if len > self.chunk_size / 4 {
            // Large objects get a range of their own rather than wasting most of a chunk.
            return self.alloc_from_nodes(len, align.max(8)).await;
        }
        match self.alloc_from_nodes(self.chunk_size, CHUNK_ALIGN.max(align)).await {
            Ok(base) => {
                let end = base.offset() + self.chunk_size;
                self.chunk.set(Some(Chunk { next: base.add(len), end }));
                Ok(base)
            }
            // No node has a whole chunk left: what is left of their heaps still serves
            // allocations, each a range of its own (memory is nearly full, so the extra
            // request per allocation is the price of using the last chunk's worth of it).
            Err(FabricError::OutOfMemory { .. }) => self.alloc_from_nodes(len, align.max(8)).await,
            Err(e) => Err(e),
        }
    }

    /// Like [`Client::alloc`], but on memory node `node`: for designs that place data on a
    /// chosen node (replicas, segments). Carved from a chunk of that node's, taken on first use.
    pub async fn alloc_on(&self, node: NodeId, len: u64, align: u64) -> Result<GlobalAddr> {
        let nodes = self.info.nodes();
        let slot =
            self.placed.get(node as usize).ok_or(FabricError::UnknownNode { node, nodes })?;
        self.check_alloc(node, len, align)?;
        bump(&self.stats.bytes_allocated, len);
        if let Some(a) = carve(slot, len, align) {
            return Ok(a);
        }
        if len > self.chunk_size / 4 {
            return self.alloc_at(node, len, align.max(8)).await;
        }
        match self.alloc_at(node, self.chunk_size, CHUNK_ALIGN.max(align)).await {
            Ok(base) => {
                let end = base.offset() + self.chunk_size;
                slot.set(Some(Chunk { next: base.add(len), end }));
                Ok(base)
            }
            // Less than a chunk left on the node: the rest still serves, a range each (as
            // `alloc` does).
            Err(FabricError::OutOfMemory { .. }) => self.alloc_at(node, len, align.max(8)).await,
            Err(e) => Err(e),
        }
    }

    fn check_alloc(&self, node: NodeId, len: u64, align: u64) -> Result<()> {
        if len == 0 || !align.is_power_of_two() || align > service::MAX_ALIGN {
            return Err(FabricError::Service {
                node,
                service: ALLOC_CHUNK,
                message: format!("bad allocation: {len} bytes aligned to {align}"),
            });
        }
        Ok(())
    }

    /// One allocation request to memory node `node`.
    async fn alloc_at(&self, node: NodeId, len: u64, align: u64) -> Result<GlobalAddr> {
        let reply = self.call(node, ALLOC_CHUNK, &service::alloc_request(len, align)).await?;
        let off = service::decode_word(&reply).ok_or_else(|| FabricError::Service {
            node,
            service: ALLOC_CHUNK,
            message: format!("malformed reply of {} bytes", reply.len()),
        })?;
        Ok(GlobalAddr::new(node, off))
    }

    /// Asks the memory nodes, round-robin from the next one, for `len` bytes; fails only when
    /// every node is out of memory.
    async fn alloc_from_nodes(&self, len: u64, align: u64) -> Result<GlobalAddr> {
        let nodes = self.info.nodes();
        let mut last_err = None;
        for _ in 0..nodes {
            let node = self.next_node.get();
            self.next_node.set((node + 1) % nodes);
            match self.alloc_at(node, len, align).await {
                Ok(a) => return Ok(a),
                Err(e @ FabricError::OutOfMemory { .. }) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or(FabricError::UnknownNode { node: 0, nodes }))
    }
}

/// `len` bytes aligned to `align` from the chunk in `slot`, if they fit.
fn carve(slot: &Cell<Option<Chunk>>, len: u64, align: u64) -> Option<GlobalAddr> {
    let c = slot.get()?;
    let start = align_up(c.next.offset(), align);
    if start.checked_add(len).is_none_or(|e| e > c.end) {
        return None;
    }
    slot.set(Some(Chunk { next: GlobalAddr::new(c.next.node(), start + len), end: c.end }));
    Some(GlobalAddr::new(c.next.node(), start))
}
