//! The simulated fabric: verbs in flight, NIC queues, and memory effects at virtual instants.
//!
//! # A verb's life
//!
//! ```text
//!  client core            CN NIC              wire                MN NIC
//!  doorbell + post ──▶ engine (1/nic_mops) ─▶ tx link ─▶ one way ─▶ its QP free? ─▶ engine (1/read_mops,
//!  (one doorbell per      request packets                (+ jitter,  else it waits,    1/write_mops,
//!   batch)                 (payload + headers             + delay)    holding nothing   1/atomic_mops)
//!                           per MTU packet)                                                 │
//!                                                                                             ▼
//!  poll (one per   ◀── rx link ◀── one way ◀── READ:   DMA up the PCIe in TLPs ∥ response packets on the tx link;
//!  completion)                                          each line sampled at a random instant of that interval
//!                                                WRITE:  request packets off the rx link ∥ DMA down the PCIe;
//!                                                        lines land in address order over that interval
//!                                                atomic: one instant, ≥ same_addr_atomic_ns after the last on its word
//!                                                request: queued for an MN core, served at one instant
//!                                                         ([`crate::peers`])
//! ```
//!
//! Every queue is a FIFO server whose next free instant is kept as a number: engines charge
//! their kind's time per verb, links and PCIe charge bytes over bandwidth (payload plus headers
//! per packet or TLP), and each 8-byte word takes one atomic per `same_addr_atomic_ns`. A
//! memory node's NIC schedules connections independently: a verb that must wait for its own
//! queue pair's previous verb (a doorbell's second READ, a READ behind the same client's
//! zero-wait WRITE) waits in that queue pair and takes the engine only once it may start, so it
//! holds up no other connection. Verbs from one client to one memory node still arrive, start
//! and take effect in the order they were posted (an RC queue pair), whatever the jitter.
//!
//! A client's CPU is a core of its compute node, shared with the other threads placed on that
//! core: it rings a doorbell and builds a work request per verb (one doorbell per batch), polls
//! one completion per awaited verb or batch, and does the index's own work as the index reports
//! it ([`dmindex_fabric::Work`]). The next post waits for all of it.
//!
//! A client that crashes at a post may have rung the doorbell first: then a prefix of what it
//! posted goes on the wire as above, with no one waiting (the `crash` module).
//!
//! Time is kept in picoseconds so that sub-nanosecond service times add up exactly; the public
//! API speaks nanoseconds.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::task::Waker;

use dmindex_fabric::memory::{Region, CACHE_LINE};
use dmindex_fabric::service::{ServiceId, Services};
use dmindex_fabric::{AtomicOp, FabricError, GlobalAddr};
use hdrhistogram::Histogram;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::config::{rate_ps, Faults, NetParams};
use crate::cores::Cores;
use crate::link::Link;
use crate::pause::Pauses;
use crate::phases::Phases;

mod cpu;
pub(crate) mod crash;
mod serve;

pub(crate) const PS_PER_NS: u64 = 1000;
/// How long a client (or a peer) waits on a crashed memory node before its verb or request fails:
/// an RC queue pair's retries running out, shortened to keep runs small (real NICs take
/// milliseconds; only the order of events matters to the protocols that detect failures).
pub const MN_TIMEOUT_NS: u64 = 100_000;
const ATOMIC_TABLE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    Arrive,
    Sample,
    Land,
    Atomic,
    Rpc,
    CoreFree,
    Complete,
    /// A crashed memory node comes back empty (`op` is the node).
    Restart,
    /// A request's reply leaves its memory node.
    Reply,
    /// A client's pause ends (`op` is the pause's slot).
    Wake,
}

/// One scheduled instant. Ordered by time, then by the order it was scheduled in (`seq` is
/// unique, so the order is total and never depends on the other fields).
#[derive(Clone, Copy, Debug)]
struct Event {
    time: u64,
    seq: u64,
    kind: EventKind,
    op: u32,
    line: u32,
}

impl PartialEq for Event {
    fn eq(&self, o: &Event) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Event) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Event) -> std::cmp::Ordering {
        (self.time, self.seq).cmp(&(o.time, o.seq))
    }
}

/// What a verb does at the memory node.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpKind {
    Read,
    Write,
    Atomic(AtomicOp),
    Rpc(ServiceId),
    /// A new connection to the node ([`dmindex_fabric::Transport::reconnect`]).
    Connect,
    /// Fence a cluster member at the node ([`dmindex_fabric::Transport::fence`]).
    Fence(u64),
}

pub(crate) struct Op {
    kind: OpKind,
    addr: GlobalAddr,
    client: u32,
    /// READ: the bytes sampled so far; WRITE: the data; request: the request, then the reply.
    pub(crate) buf: Vec<u8>,
    pub(crate) result: Result<u64, FabricError>,
    pub(crate) done: bool,
    detached: bool,
    abandoned: bool,
    pub(crate) waker: Option<Waker>,
    posted_at: u64,
    /// A request: when it reached its memory node's core queue.
    arrived: u64,
    /// A request: the batch it may join in its node's queue (`Service::batch_key`).
    batch_key: Option<u64>,
    /// Its place among its client's verbs to its memory node, in posting order.
    qp_seq: u64,
    /// The incarnation of its memory node it reached: effects scheduled for an earlier
    /// incarnation are dropped when the node has restarted since.
    incarnation: u32,
}

/// Why a memory node never answers an op.
#[derive(Clone, Copy, Debug)]
enum Lost {
    /// The node is down.
    Crashed,
    /// The op came through a connection to an earlier incarnation of the node.
    Restarted,
}

/// A NIC's FIFO servers and counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Nic {
    engine_free: u64,
    pub(crate) tx: Link,
    pub(crate) rx: Link,
    /// A memory node's PCIe: DMA reads towards the NIC, DMA writes towards memory; the TLPs of
    /// concurrent DMAs interleave as packets do on a link.
    pub(crate) pcie_up: Link,
    pub(crate) pcie_down: Link,
    pub(crate) engine_busy_ps: u64,
    pub(crate) msgs: u64,
}

#[derive(Debug)]
pub(crate) struct ClientState {
    cn: u16,
    /// The core of its compute node this client's thread runs on.
    core: usize,
    /// Per memory node: latest arrival and latest data-phase end of this client's verbs.
    last_arrival: Vec<u64>,
    qp_free: Vec<u64>,
    /// Per memory node: verbs posted, and verbs that have started (an RC queue pair starts
    /// them in posting order).
    posted: Vec<u64>,
    started: Vec<u64>,
    /// Per memory node: verbs that arrived before their turn, in arrival (so posting) order;
    /// the first is let in when its predecessor starts, so a queue pair of n waiting verbs
    /// costs O(n) events, not a re-arrival of each at every start.
    parked: Vec<VecDeque<u32>>,
    pub(crate) outstanding: u32,
    pub(crate) quiesce_waker: Option<Waker>,
    pub(crate) crashed: bool,
    /// Awaited posts left before this client crashes, when a crash is armed
    /// ([`crate::SimTransport::crash_within`]).
    pub(crate) crash_in: Option<u32>,
    /// The word this client's latest atomic verb targeted.
    pub(crate) last_atomic: Option<GlobalAddr>,
    /// The latest word this client's atomics changed, and the value they left there.
    pub(crate) last_set: Option<(GlobalAddr, u64)>,
    /// Per memory node, the incarnation this client's connection reaches.
    connected: Vec<u32>,
    /// The cluster member this client registered as (0: none).
    pub(crate) member: u64,
}

/// Verb counters of the whole simulation, by kind.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) atomics: u64,
    pub(crate) rpcs: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
}

pub(crate) struct World {
    pub(crate) now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<Event>>,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) net: NetParams,
    pub(crate) faults: Faults,
    /// A compute node's NIC: per message sent.
    msg_ps: u64,
    /// One full packet on a link, one full TLP on a memory node's PCIe.
    packet_ps: u64,
    tlp_ps: u64,
    /// A memory node's NIC: per READ, WRITE and atomic served.
    read_ps: u64,
    write_ps: u64,
    atomic_ps: u64,
    pub(crate) cn_nics: Vec<Nic>,
    pub(crate) mn_nics: Vec<Nic>,
    cores: RefCell<Cores>,
    /// Requests waiting for a core, per memory node.
    core_queues: Vec<VecDeque<u32>>,
    /// Instants at which the latest request's cores free up (node, core), to schedule.
    frees: RefCell<Vec<(u64, u16, u32)>>,
    atomic_words: Vec<(u64, u64)>,
    ops: Vec<Op>,
    free_ops: Vec<u32>,
    buf_pool: Vec<Vec<u8>>,
    pub(crate) clients: Vec<ClientState>,
    /// Per client thread (compute node, thread number): its core.
    threads: BTreeMap<(u16, usize), usize>,
    /// Per compute node, the client threads placed on it.
    threads_per_cn: Vec<usize>,
    /// The next thread number of a client on a thread of its own.
    own_threads: usize,
    /// Per compute node, per core: the instant the core is free of client work.
    cpu_free: Vec<Vec<u64>>,
    pub(crate) trace_hash: u64,
    pub(crate) crash_current: bool,
    pub(crate) crashes: u32,
    /// Per memory node, the instant it crashes (`u64::MAX`: never).
    pub(crate) dead_at: Vec<u64>,
    /// Per memory node, how many times it restarted.
    incarnation: Vec<u32>,
    pub(crate) counters: Counters,
    pub(crate) phases: Phases,
    pub(crate) latency_ns: Histogram<u64>,
    pub(crate) events_processed: u64,
    pub(crate) pauses: Pauses,
    /// Per memory node, the members fenced there: their verbs are refused.
    fenced: Vec<Vec<u64>>,
    /// Every client crash so far, and when its member was fenced ([`crash::Crash`]).
    pub(crate) crash_log: Vec<crash::Crash>,
}

/// Folds one word into the trace hash (rotate, xor, multiply: cheap and order-sensitive).
#[inline]
fn mix(h: u64, x: u64) -> u64 {
    (h.rotate_left(5) ^ x).wrapping_mul(0x517C_C1B7_2722_0A95)
}

impl World {
    pub(crate) fn new(seed: u64, net: NetParams, faults: Faults, memory_nodes: u16) -> World {
        World {
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            msg_ps: net.msg_ps(),
            packet_ps: net.wire_ps(net.mtu_bytes + net.header_bytes),
            tlp_ps: net.pcie_ps(net.pcie_payload_bytes),
            read_ps: rate_ps(net.read_mops),
            write_ps: rate_ps(net.write_mops),
            atomic_ps: rate_ps(net.atomic_mops),
            cores: RefCell::new(Cores::new(memory_nodes, net.mn_cores, net.mn_workers)),
            core_queues: vec![VecDeque::new(); memory_nodes as usize],
            frees: RefCell::new(Vec::new()),
            net,
            faults,
            cn_nics: Vec::new(),
            mn_nics: vec![Nic::default(); memory_nodes as usize],
            atomic_words: vec![(u64::MAX, 0); ATOMIC_TABLE],
            ops: Vec::new(),
            free_ops: Vec::new(),
            buf_pool: Vec::new(),
            clients: Vec::new(),
            threads: BTreeMap::new(),
            own_threads: 0,
            threads_per_cn: Vec::new(),
            cpu_free: Vec::new(),
            trace_hash: 0xCBF2_9CE4_8422_2325,
            crash_current: false,
            crashes: 0,
            dead_at: vec![u64::MAX; memory_nodes as usize],
            incarnation: vec![0; memory_nodes as usize],
            counters: Counters::default(),
            phases: Phases::new(memory_nodes),
            latency_ns: Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("histogram bounds"),
            events_processed: 0,
            pauses: Pauses::default(),
            fenced: vec![Vec::new(); memory_nodes as usize],
            crash_log: Vec::new(),
        }
    }

    /// A uniform number in `[0, n]`.
    pub(crate) fn uniform(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else if n == u64::MAX {
            self.rng.next_u64()
        } else {
            // Multiply-shift: portable, and unbiased enough for scheduling noise.
            ((self.rng.next_u64() as u128 * (n as u128 + 1)) >> 64) as u64
        }
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub(crate) fn add_client(&mut self, cn: u16, thread: Option<usize>) -> u32 {
        if self.cn_nics.len() <= cn as usize {
            self.cn_nics.resize(cn as usize + 1, Nic::default());
            self.cpu_free.resize(cn as usize + 1, Vec::new());
            self.threads_per_cn.resize(cn as usize + 1, 0);
        }
        let thread = thread.unwrap_or_else(|| {
            // Numbers no shared thread uses.
            self.own_threads += 1;
            usize::MAX - self.own_threads
        });
        // Threads take their node's cores in turn, and share them once there are more threads
        // than cores.
        let core = match self.threads.get(&(cn, thread)) {
            Some(&core) => core,
            None => {
                let n = &mut self.threads_per_cn[cn as usize];
                let core = if self.net.cn_cores == 0 { *n } else { *n % self.net.cn_cores };
                *n += 1;
                let cores = &mut self.cpu_free[cn as usize];
                if cores.len() <= core {
                    cores.resize(core + 1, 0);
                }
                self.threads.insert((cn, thread), core);
                core
            }
        };
        let nodes = self.mn_nics.len();
        self.clients.push(ClientState {
            cn,
            core,
            last_arrival: vec![0; nodes],
            qp_free: vec![0; nodes],
            posted: vec![0; nodes],
            started: vec![0; nodes],
            parked: vec![VecDeque::new(); nodes],
            outstanding: 0,
            quiesce_waker: None,
            crashed: false,
            crash_in: None,
            last_atomic: None,
            last_set: None,
            connected: self.incarnation.clone(),
            member: 0,
        });
        (self.clients.len() - 1) as u32
    }

    fn schedule(&mut self, time: u64, kind: EventKind, op: u32, line: u32) {
        self.seq += 1;
        self.events.push(Reverse(Event { time, seq: self.seq, kind, op, line }));
    }

    pub(crate) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Takes a buffer of `len` zero bytes from the pool.
    pub(crate) fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.buf_pool.pop().unwrap_or_default();
        b.clear();
        b.resize(len, 0);
        b
    }

    fn new_op(&mut self, kind: OpKind, addr: GlobalAddr, client: u32, buf: Vec<u8>) -> u32 {
        let op = Op {
            kind,
            addr,
            client,
            buf,
            result: Ok(0),
            done: false,
            detached: false,
            abandoned: false,
            waker: None,
            posted_at: self.now,
            arrived: 0,
            batch_key: None,
            qp_seq: 0,
            incarnation: 0,
        };
        match self.free_ops.pop() {
            Some(i) => {
                self.ops[i as usize] = op;
                i
            }
            None => {
                self.ops.push(op);
                (self.ops.len() - 1) as u32
            }
        }
    }

    pub(crate) fn op(&mut self, i: u32) -> &mut Op {
        &mut self.ops[i as usize]
    }

    /// Releases a finished op's slot and buffer.
    pub(crate) fn free_op(&mut self, i: u32) {
        let buf = std::mem::take(&mut self.ops[i as usize].buf);
        if buf.capacity() > 0 && self.buf_pool.len() < 4096 {
            self.buf_pool.push(buf);
        }
        self.ops[i as usize].waker = None;
        self.free_ops.push(i);
    }

    /// The waiting future went away (its task was dropped): free now or at completion.
    pub(crate) fn abandon(&mut self, i: u32) {
        if self.ops[i as usize].done {
            self.free_op(i);
        } else {
            self.ops[i as usize].abandoned = true;
            self.ops[i as usize].waker = None;
        }
    }

    /// How long the client stalls before a post it waits for (ps; 0 mostly).
    pub(crate) fn stall_ps(&mut self) -> u64 {
        if self.chance(self.faults.stall_prob) {
            self.uniform(self.faults.stall_max_ns) * PS_PER_NS
        } else {
            0
        }
    }

    /// Puts a verb on the wire at `ready` (after posting); returns its op id.
    pub(crate) fn post(
        &mut self,
        ready: u64,
        client: u32,
        kind: OpKind,
        addr: GlobalAddr,
        buf: Vec<u8>,
        detached: bool,
    ) -> u32 {
        let req_bytes = self.net.wire_bytes(match kind {
            OpKind::Write | OpKind::Rpc(_) => buf.len() as u64,
            OpKind::Atomic(AtomicOp::MaskedCas { .. }) => 32,
            OpKind::Atomic(AtomicOp::Cas { .. }) => 16,
            OpKind::Atomic(AtomicOp::Faa { .. }) => 8,
            OpKind::Read | OpKind::Connect => 0,
            OpKind::Fence(_) => 8,
        });
        let op = self.new_op(kind, addr, client, buf);
        self.ops[op as usize].detached = detached;
        if detached {
            self.clients[client as usize].outstanding += 1;
        }
        let (cn, node) = (self.clients[client as usize].cn, addr.node() as usize);
        let msg_ps = self.msg_ps;
        let (wire, packet) = (self.net.wire_ps(req_bytes), self.packet_ps);
        let packets = self.net.packets(req_bytes);
        let nic = &mut self.cn_nics[cn as usize];
        let es = ready.max(nic.engine_free);
        nic.engine_free = es + msg_ps;
        nic.engine_busy_ps += msg_ps;
        nic.msgs += 1;
        let sent = nic.tx.send(nic.engine_free, wire, packets, packet);
        let mut arrive = sent + self.net.one_way_ns * PS_PER_NS;
        arrive += self.uniform(self.net.jitter_ns) * PS_PER_NS;
        if self.chance(self.faults.delay_prob) {
            arrive += self.uniform(self.faults.delay_max_ns) * PS_PER_NS;
        }
        // An RC queue pair delivers in order.
        let c = &mut self.clients[client as usize];
        arrive = arrive.max(c.last_arrival[node]);
        c.last_arrival[node] = arrive;
        self.ops[op as usize].qp_seq = c.posted[node];
        c.posted[node] += 1;
        self.schedule(arrive, EventKind::Arrive, op, 0);
        op
    }

    /// Runs the next event; returns false if there is none.
    pub(crate) fn step(&mut self, regions: &[Region], services: &Services) -> bool {
        let Some(Reverse(ev)) = self.events.pop() else { return false };
        debug_assert!(ev.time >= self.now, "time went backwards");
        self.now = ev.time;
        self.events_processed += 1;
        let tag = (ev.kind as u64) << 56 | (ev.line as u64) << 32 | ev.op as u64;
        self.trace_hash = mix(mix(self.trace_hash, ev.time), tag);
        match ev.kind {
            EventKind::Arrive => self.arrive(ev.op),
            EventKind::Sample | EventKind::Land | EventKind::Atomic if self.outdated(ev.op) => {}
            EventKind::Sample => self.sample(ev.op, ev.line, regions),
            EventKind::Land => self.land(ev.op, ev.line, regions),
            EventKind::Atomic => {
                let op = &mut self.ops[ev.op as usize];
                let OpKind::Atomic(a) = op.kind else { unreachable!("atomic event on non-atomic") };
                let region = &regions[op.addr.node() as usize];
                let old = region.atomic(op.addr.offset(), a);
                op.result = Ok(old);
                let (addr, client) = (op.addr, op.client as usize);
                self.trace_hash = mix(self.trace_hash, old);
                let mut new = [0u8; 8];
                region.read(addr.offset(), &mut new);
                let new = u64::from_le_bytes(new);
                let c = &mut self.clients[client];
                c.last_atomic = Some(addr);
                if new != old {
                    c.last_set = Some((addr, new));
                }
            }
            EventKind::Rpc => self.request_arrives(ev.op, regions, services),
            EventKind::CoreFree => self.core_frees(ev.op as usize, regions, services),
            EventKind::Complete => self.complete(ev.op),
            EventKind::Restart => self.restart(ev.op as usize, regions, services),
            EventKind::Wake => self.pauses.end(ev.op),
            EventKind::Reply => {
                // The reply (empty if the request failed: the request itself was taken).
                let len = self.ops[ev.op as usize].buf.len() as u64;
                self.respond(ev.op, self.now, len);
            }
        }
        true
    }

    /// Starts a pause of `ps` for `client` from when its thread's CPU work is done; returns its
    /// slot ([`crate::pause`]).
    pub(crate) fn pause(&mut self, client: u32, ps: u64) -> u32 {
        let slot = self.pauses.start();
        let from = self.charge_cpu(client, 0);
        self.schedule(from + ps, EventKind::Wake, slot, 0);
        slot
    }

    /// Brings crashed node `node` back at `at`, empty ([`crate::Sim::restart_memory_node`]).
    pub(crate) fn schedule_restart(&mut self, node: u16, at: u64) {
        self.schedule(at, EventKind::Restart, node as u32, 0);
    }

    /// Node `node` restarts now: a new incarnation with zeroed, freshly formatted memory and
    /// services that kept nothing for it. Requests still queued on it are lost.
    fn restart(&mut self, node: usize, regions: &[Region], services: &Services) {
        dmindex_fabric::layout::reformat(&regions[node], node as u16);
        services.restarted(node as u16);
        self.incarnation[node] += 1;
        self.dead_at[node] = u64::MAX;
        self.cores.borrow_mut().reset(node, self.now);
        while let Some(i) = self.core_queues[node].pop_front() {
            self.time_out(i, Lost::Crashed);
        }
        self.trace_hash = mix(self.trace_hash, 0x5E57_A127 ^ node as u64);
    }

    /// Registers `client` as cluster member `member` ([`dmindex_fabric::Transport::register_member`]).
    pub(crate) fn register_member(&mut self, client: u32, member: u64) {
        self.clients[client as usize].member = member;
    }

    /// Fences `member` at `node` at once, outside the model (fast-forward).
    pub(crate) fn fence_now(&mut self, client: u32, node: u16, member: u64) {
        if !self.fenced[node as usize].contains(&member) {
            self.fenced[node as usize].push(member);
        }
        self.fence_answered(client, node as usize, member);
    }

    /// Connects `client` to `node`'s current incarnation outside the model (fast-forward).
    pub(crate) fn connect_now(&mut self, client: u32, node: u16) {
        let current = self.incarnation[node as usize];
        self.clients[client as usize].connected[node as usize] = current;
    }

    /// Whether op `i`'s memory node restarted after the op reached it.
    fn outdated(&self, i: u32) -> bool {
        let op = &self.ops[i as usize];
        op.incarnation != self.incarnation[op.addr.node() as usize]
    }

    fn lines_of(addr: GlobalAddr, len: usize) -> u32 {
        if len == 0 {
            return 1;
        }
        let first = addr.offset() / CACHE_LINE;
        let last = (addr.offset() + len as u64 - 1) / CACHE_LINE;
        (last - first + 1) as u32
    }

    fn arrive(&mut self, i: u32) {
        let (kind, addr, client, len) = {
            let op = &self.ops[i as usize];
            (op.kind, op.addr, op.client, op.buf.len())
        };
        let node = addr.node() as usize;
        let c = &mut self.clients[client as usize];
        let (qp_free, turn) = (c.qp_free[node], self.ops[i as usize].qp_seq == c.started[node]);
        if !turn {
            // Its predecessor on the queue pair has not started: the request waits in its own
            // queue, holding no engine and no link other connections could use, until the
            // predecessor's start lets it in (below).
            c.parked[node].push_back(i);
            return;
        }
        if qp_free > self.now {
            // Its queue pair still serves the client's previous verb.
            self.schedule(qp_free, EventKind::Arrive, i, 0);
            return;
        }
        c.started[node] += 1;
        if let Some(next) = c.parked[node].pop_front() {
            // Its successor arrived already: it comes again at this instant, after this
            // verb has set when the queue pair frees, and waits for that.
            debug_assert_eq!(self.ops[next as usize].qp_seq, c.started[node]);
            self.schedule(self.now, EventKind::Arrive, next, 0);
        }
        if self.now >= self.dead_at[node] {
            return self.time_out(i, Lost::Crashed);
        }
        let current = self.incarnation[node];
        self.ops[i as usize].incarnation = current;
        let connected = &mut self.clients[client as usize].connected[node];
        if matches!(kind, OpKind::Connect) {
            *connected = current;
        } else if *connected != current {
            return self.time_out(i, Lost::Restarted);
        }
        if let OpKind::Fence(member) = kind {
            return self.fence_arrives(i, node, member);
        }
        let member = self.clients[client as usize].member;
        if member != 0 && self.fenced[node].contains(&member) {
            // Refused like a verb on a queue pair in the error state: no effect, an error back.
            self.ops[i as usize].result = Err(FabricError::Fenced { node: node as u16 });
            let end = self.now.max(self.mn_nics[node].engine_free) + self.read_ps;
            self.clients[client as usize].qp_free[node] = end;
            return self.respond(i, end, 0);
        }
        let stretch = if self.chance(self.faults.delay_prob) {
            self.uniform(self.faults.delay_max_ns) * PS_PER_NS
        } else {
            0
        };
        let engine_ps = match kind {
            OpKind::Read | OpKind::Connect | OpKind::Rpc(_) | OpKind::Fence(_) => self.read_ps,
            OpKind::Write => self.write_ps,
            OpKind::Atomic(_) => self.atomic_ps,
        };
        let nic = &mut self.mn_nics[node];
        let s = self.now.max(nic.engine_free);
        nic.engine_free = s + engine_ps;
        nic.engine_busy_ps += engine_ps;
        nic.msgs += 1;
        let (end, resp_bytes) = match kind {
            OpKind::Read => {
                // DMA from memory in TLPs, the response's packets out on the link; the
                // response is done when both are.
                let (wire, dma) = (
                    self.net.wire_ps(self.net.wire_bytes(len as u64)),
                    self.net.pcie_ps(len as u64),
                );
                let (packets, packet) = (self.net.packets(len as u64), self.packet_ps);
                let (tlps, tlp) = (self.net.tlps(len as u64), self.tlp_ps);
                let nic = &mut self.mn_nics[node];
                let fetched = nic.pcie_up.send(s, dma, tlps, tlp);
                let end = nic.tx.send(s, wire, packets, packet).max(fetched) + stretch;
                for line in 0..Self::lines_of(addr, len) {
                    let t = s + self.uniform(end - s);
                    self.schedule(t, EventKind::Sample, i, line);
                }
                (end, len as u64)
            }
            OpKind::Write => {
                let (wire, dma) = (
                    self.net.wire_ps(self.net.wire_bytes(len as u64)),
                    self.net.pcie_ps(len as u64),
                );
                // The request's packets came in over the receiving link on their way here
                // (its wire time ending at arrival, behind any backlog). Its lines land in
                // address order over one wire time of the message from its start, or over its
                // DMA if the PCIe is slower: the window a READ can see it half written in.
                let (packets, packet) = (self.net.packets(len as u64), self.packet_ps);
                let nic = &mut self.mn_nics[node];
                let received = nic.rx.send(self.now.saturating_sub(wire), wire, packets, packet);
                let rs = s.max(received.saturating_sub(wire));
                let (tlps, tlp) = (self.net.tlps(len as u64), self.tlp_ps);
                let stored = self.mn_nics[node].pcie_down.send(rs, dma, tlps, tlp);
                let end = (rs + wire).max(stored) + stretch;
                let n = Self::lines_of(addr, len) as u64;
                if n == 1 {
                    self.schedule(end, EventKind::Land, i, 0);
                } else {
                    for line in 0..n {
                        let t = rs + (line + 1) * (end - rs) / n;
                        self.schedule(t, EventKind::Land, i, line as u32);
                    }
                }
                (end, 0)
            }
            OpKind::Atomic(_) => {
                let slot = ((addr.raw() >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize
                    % ATOMIC_TABLE;
                let word_free = match self.atomic_words[slot] {
                    (a, t) if a == addr.raw() => t,
                    _ => 0,
                };
                // Atomics on one word are serialised; the engine time covers the rest.
                let at = (s + stretch).max(word_free);
                self.atomic_words[slot] =
                    (addr.raw(), at + self.net.same_addr_atomic_ns * PS_PER_NS);
                self.schedule(at, EventKind::Atomic, i, 0);
                (at + engine_ps, 8)
            }
            OpKind::Connect | OpKind::Fence(_) => (s + engine_ps, 0),
            OpKind::Rpc(_) => {
                // The request joins the node's core queue; its reply is sent once served.
                self.clients[client as usize].qp_free[node] = s + stretch;
                self.schedule(s + stretch, EventKind::Rpc, i, 0);
                return;
            }
        };
        self.clients[client as usize].qp_free[node] = end;
        self.respond(i, end, resp_bytes);
    }

    /// A fence of `member` reaches `node`: from now on the node refuses the member's verbs; the
    /// answer leaves once the verbs it already accepted are done (their data landed).
    fn fence_arrives(&mut self, i: u32, node: usize, member: u64) {
        if !self.fenced[node].contains(&member) {
            self.fenced[node].push(member);
        }
        let accepted = self
            .clients
            .iter()
            .filter(|c| c.member == member)
            .map(|c| c.qp_free[node])
            .max()
            .unwrap_or(0);
        let s = self.now.max(self.mn_nics[node].engine_free);
        self.mn_nics[node].engine_free = s + self.read_ps;
        self.trace_hash = mix(self.trace_hash, member);
        self.respond(i, (s + self.read_ps).max(accepted), 0)
    }

    /// Fails op `i`, which its memory node will never answer, once its client's wait runs out.
    fn time_out(&mut self, i: u32, lost: Lost) {
        let op = &mut self.ops[i as usize];
        let node = op.addr.node();
        op.result = Err(match lost {
            Lost::Crashed => crate::peers::crashed(node),
            Lost::Restarted => FabricError::Unavailable {
                node,
                reason: "memory node restarted since this client connected (reconnect)".into(),
            },
        });
        let at = self.now.max(op.posted_at + MN_TIMEOUT_NS * PS_PER_NS);
        self.schedule(at, EventKind::Complete, i, 0);
    }

    /// Sends op `i`'s response, which leaves its memory node at `end` carrying `payload`
    /// bytes.
    fn respond(&mut self, i: u32, end: u64, payload: u64) {
        let cn = self.clients[self.ops[i as usize].client as usize].cn as usize;
        let back = end + (self.net.one_way_ns + self.uniform(self.net.jitter_ns)) * PS_PER_NS;
        let wire = self.net.wire_ps(self.net.wire_bytes(payload));
        let (packets, packet) = (self.net.packets(payload), self.packet_ps);
        // Cut through: the response's bytes cross the receiving link as they arrive.
        let nic = &mut self.cn_nics[cn];
        let done = nic.rx.send(back.saturating_sub(wire), wire, packets, packet).max(back);
        self.schedule(done, EventKind::Complete, i, 0);
    }

    /// The byte range of `line` (relative to the op) within `[addr, addr + len)`.
    fn line_range(addr: GlobalAddr, len: usize, line: u32) -> (usize, usize) {
        let start = addr.offset();
        let line_start = (start / CACHE_LINE + line as u64) * CACHE_LINE;
        let lo = line_start.max(start) - start;
        let hi = (line_start + CACHE_LINE).min(start + len as u64) - start;
        (lo as usize, hi as usize)
    }

    fn sample(&mut self, i: u32, line: u32, regions: &[Region]) {
        let op = &mut self.ops[i as usize];
        let (lo, hi) = Self::line_range(op.addr, op.buf.len(), line);
        regions[op.addr.node() as usize].read(op.addr.offset() + lo as u64, &mut op.buf[lo..hi]);
    }

    fn land(&mut self, i: u32, line: u32, regions: &[Region]) {
        let op = &self.ops[i as usize];
        let (lo, hi) = Self::line_range(op.addr, op.buf.len(), line);
        regions[op.addr.node() as usize].write(op.addr.offset() + lo as u64, &op.buf[lo..hi]);
    }

    fn complete(&mut self, i: u32) {
        let (posted, client, node) = {
            let op = &self.ops[i as usize];
            (op.posted_at, op.client as usize, op.addr.node() as usize)
        };
        let _ = self.latency_ns.record(((self.now - posted) / PS_PER_NS).max(1));
        if node < self.dead_at.len() {
            self.phases.completed(client, node, posted, self.now);
        }
        let (kind, len, client, detached, abandoned) = {
            let op = &mut self.ops[i as usize];
            op.done = true;
            (op.kind, op.buf.len() as u64, op.client, op.detached, op.abandoned)
        };
        let c = &mut self.counters;
        match kind {
            OpKind::Read => {
                c.reads += 1;
                c.bytes_read += len;
            }
            OpKind::Write => {
                c.writes += 1;
                c.bytes_written += len;
            }
            OpKind::Atomic(_) => c.atomics += 1,
            OpKind::Rpc(_) => c.rpcs += 1,
            OpKind::Connect => c.rpcs += 1,
            OpKind::Fence(member) => {
                c.rpcs += 1;
                if self.ops[i as usize].result.is_ok() {
                    self.fence_answered(client, node, member);
                }
            }
        }
        if kind_is_read(kind) {
            // Fold what the read saw into the trace, so a different interleaving changes it.
            let mut h = self.trace_hash;
            for chunk in self.ops[i as usize].buf.chunks(8) {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                h = mix(h, u64::from_le_bytes(w));
            }
            self.trace_hash = h;
        }
        if detached {
            let c = &mut self.clients[client as usize];
            c.outstanding -= 1;
            if c.outstanding == 0 {
                if let Some(w) = c.quiesce_waker.take() {
                    w.wake();
                }
            }
            self.free_op(i);
        } else if abandoned {
            self.free_op(i);
        } else if let Some(w) = self.ops[i as usize].waker.take() {
            w.wake();
        }
    }
}

fn kind_is_read(k: OpKind) -> bool {
    matches!(k, OpKind::Read)
}
