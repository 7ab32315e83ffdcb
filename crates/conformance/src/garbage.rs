//! Garbage in remote memory: an operation on a node that holds garbage must end in
//! [`IndexError::Corrupt`] within a time bound, not spin re-reading it.
//!
//! The nodes an operation hits are the design's own, so the test finds them by watching the
//! operation: a load of `1 ..= keys` on the in-process fabric, then the operation on one key with
//! a tracing transport ([`Traced`]) that records the bytes it READs and the words its atomics
//! target. A twin of that cluster, loaded the same way (checked: the two heaps are equal, byte for byte), has
//! exactly those bytes overwritten with random ones through its raw client — except the words
//! the operation's atomics target (lock words, CAS'd slots: garbage there could look like a lock
//! held by another client, and lock waits are out of scope) and the superblock and root table —
//! and runs the same operation again on another thread. It must return `Err(Corrupt)` before
//! the timeout; a hang or any other answer fails the test.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::layout::{heap_used, HEAP_START};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{
    AtomicOp, BatchOp, Client, Fabric, GlobalAddr, LocalConfig, LocalFabric, NodeId, ServiceId,
    Transport,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use dmindex_index::{mn_services, IndexConfig, IndexError, IndexKind, PointIndex, Scans};

/// A transport over a client of the in-process fabric that records, while on, the byte ranges
/// READ and the words atomics target.
pub struct Traced {
    inner: Client<LocalTransport>,
    on: AtomicBool,
    log: Mutex<Trace>,
}

/// What a [`Traced`] transport recorded.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// `(address, length)` of every READ, in a batch or not.
    pub reads: Vec<(GlobalAddr, usize)>,
    /// Every word an atomic targeted.
    pub atomics: BTreeSet<GlobalAddr>,
}

impl Traced {
    fn new(inner: Client<LocalTransport>) -> Traced {
        Traced { inner, on: AtomicBool::new(false), log: Mutex::new(Trace::default()) }
    }

    /// Starts recording (what was recorded before is dropped).
    pub fn start(&self) {
        *self.log.lock().expect("trace") = Trace::default();
        self.on.store(true, Ordering::Relaxed);
    }

    /// Stops recording and returns what was recorded.
    pub fn stop(&self) -> Trace {
        self.on.store(false, Ordering::Relaxed);
        std::mem::take(&mut *self.log.lock().expect("trace"))
    }

    fn note(&self, f: impl FnOnce(&mut Trace)) {
        if self.on.load(Ordering::Relaxed) {
            f(&mut self.log.lock().expect("trace"));
        }
    }
}

impl Transport for Traced {
    async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> dmindex_fabric::Result<()> {
        self.note(|t| t.reads.push((addr, buf.len())));
        self.inner.read(addr, buf).await
    }
    async fn write(&self, addr: GlobalAddr, data: &[u8]) -> dmindex_fabric::Result<()> {
        self.inner.write(addr, data).await
    }
    fn post_write(&self, addr: GlobalAddr, data: &[u8]) -> dmindex_fabric::Result<()> {
        self.inner.write_zero_wait(addr, data)
    }
    async fn quiesce(&self) -> dmindex_fabric::Result<()> {
        self.inner.flush().await
    }
    async fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> dmindex_fabric::Result<u64> {
        self.note(|t| {
            t.atomics.insert(addr);
        });
        self.inner.atomic(addr, op).await
    }
    async fn batch(&self, _node: NodeId, ops: &mut [BatchOp<'_>]) -> dmindex_fabric::Result<()> {
        self.note(|t| {
            for op in ops.iter() {
                match op {
                    BatchOp::Read { addr, buf } => t.reads.push((*addr, buf.len())),
                    BatchOp::Atomic { addr, .. } => {
                        t.atomics.insert(*addr);
                    }
                    BatchOp::Write { .. } => {}
                }
            }
        });
        self.inner.batch(ops).await
    }
    async fn call(
        &self,
        node: NodeId,
        service: ServiceId,
        request: &[u8],
    ) -> dmindex_fabric::Result<Vec<u8>> {
        self.inner.call(node, service, request).await
    }
    async fn reconnect(&self, node: NodeId) -> dmindex_fabric::Result<()> {
        self.inner.reconnect(node).await
    }
    async fn pause(&self, ns: u64) {
        self.inner.pause(ns).await
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn lease_ns(&self) -> u64 {
        self.inner.transport().lease_ns()
    }
    async fn register_member(&self, member: u64) -> dmindex_fabric::Result<()> {
        self.inner.transport().register_member(member).await
    }
    async fn fence(&self, node: NodeId, member: u64) -> dmindex_fabric::Result<()> {
        self.inner.transport().fence(node, member).await
    }
}

/// Which of the bytes an operation READs are garbled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Garble {
    /// Every byte: most designs reject such a node at once (a tag, a header that does not
    /// parse), and some re-read it.
    All,
    /// The second half of each READ (from an 8-byte boundary; all of a READ of 8 bytes): a node
    /// whose header still says what it is but whose versions, epochs or checksum never agree,
    /// as a torn READ's would, so the design's retry loop is what must end.
    Tail,
}

impl Garble {
    /// Where garbage starts in a READ of `len` bytes.
    fn from(self, len: usize) -> usize {
        match self {
            Garble::All => 0,
            Garble::Tail => (len / 2) & !7,
        }
    }
}

/// An operation on the key whose nodes hold garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Search,
    /// An upsert of the (present) key.
    Insert,
    Update,
    Delete,
    /// A scan of a few keys from the key (ordered indexes).
    Scan,
}

impl Op {
    /// Every operation an index of `kind` offers.
    pub fn all(kind: IndexKind) -> Vec<Op> {
        let mut ops = vec![Op::Search, Op::Insert, Op::Update, Op::Delete];
        if kind == IndexKind::Ordered {
            ops.push(Op::Scan);
        }
        ops
    }
}

/// Shape of a garbage test.
#[derive(Clone, Debug)]
pub struct GarbageConfig {
    pub index: IndexConfig,
    /// Keys `1 ..= keys` (8-byte big-endian) are loaded first.
    pub keys: u64,
    /// The key the operations are on.
    pub victim: u64,
    /// The operations, each on a twin of its own with each kind of garbage.
    pub ops: Vec<Op>,
    pub garbles: Vec<Garble>,
    /// Seed of the garbage bytes.
    pub seed: u64,
    /// How long an operation on garbage may take before the test calls it a hang.
    pub timeout: Duration,
    pub memory_nodes: u16,
}

impl GarbageConfig {
    /// 300 keys, the operations on key 150, every operation `kind` offers, 1 memory node, a
    /// timeout of 120 s (an operation gives up after `dmindex_prim`'s bound of failed
    /// validations: about a second in a release build, several in a test build).
    pub fn new(index: IndexConfig, kind: IndexKind) -> GarbageConfig {
        GarbageConfig {
            index: IndexConfig { expected_items: 300, ..index },
            keys: 300,
            victim: 150,
            ops: Op::all(kind),
            garbles: vec![Garble::All, Garble::Tail],
            seed: 1,
            timeout: Duration::from_secs(120),
            memory_nodes: 1,
        }
    }
}

/// How one operation on garbage ended, for the test's report.
#[derive(Clone, Debug)]
pub struct Ended {
    pub op: Op,
    pub garble: Garble,
    /// Bytes overwritten with garbage.
    pub garbled: u64,
    pub message: String,
    pub took: Duration,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} on {} garbage bytes ({:?}): corrupt in {:.2?}: {}",
            self.op, self.garbled, self.garble, self.took, self.message
        )
    }
}

/// Runs every operation of `cfg` on garbage (module docs); panics unless each ends in
/// `Err(IndexError::Corrupt)` within `cfg.timeout`. Returns how each ended.
pub fn garbage_test<I, S>(cfg: &GarbageConfig) -> Vec<Ended>
where
    I: PointIndex<Traced> + 'static,
    S: Scans<Traced, I> + 'static,
{
    let mut ended = Vec::new();
    for (&op, &garble) in cfg.ops.iter().flat_map(|o| cfg.garbles.iter().map(move |g| (o, g))) {
        let (tx, rx) = mpsc::channel();
        let c = cfg.clone();
        // Detached: a run that hangs spins on until the test process exits.
        std::thread::spawn(move || {
            let _ = tx.send(on_garbage::<I, S>(&c, op, garble));
        });
        let what = format!("{op:?} of key {} on garbage ({garble:?})", cfg.victim);
        let e = match rx.recv_timeout(cfg.timeout) {
            Ok(Ok(e)) => e,
            Ok(Err(m)) => panic!("{what}: {m}"),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{what} did not end within {:?}: a retry loop spins", cfg.timeout)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
        };
        eprintln!("{e}");
        ended.push(e);
    }
    ended
}

/// The key bytes of key number `x`.
fn key(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

/// Every memory node's heap, as the allocation service has handed it out (to check that two
/// clusters are twins).
fn heaps(f: &LocalFabric, nodes: u16) -> Vec<Vec<u8>> {
    (0..nodes)
        .filter_map(|n| f.region(n))
        .map(|r| {
            let mut heap = vec![0u8; heap_used(r) as usize];
            r.read(HEAP_START, &mut heap);
            heap
        })
        .collect()
}

/// A fresh cluster with keys `1 ..= cfg.keys` loaded through a traced client.
fn loaded<I: PointIndex<Traced>>(
    cfg: &GarbageConfig,
) -> Result<(LocalFabric, Client<Traced>, I), String> {
    let services = mn_services(4, I::SERVICES).map_err(|e| e.to_string())?;
    let f = LocalFabric::with_services(
        LocalConfig {
            memory_nodes: cfg.memory_nodes,
            node_size: 64 << 20,
            chunk_size: 1 << 20,
            ..LocalConfig::default()
        },
        services,
    )?;
    let raw = f.client(0).map_err(|e| e.to_string())?;
    let info = std::sync::Arc::new(f.info().clone());
    let c = Client::new(Traced::new(raw), info, 0, 1 << 20);
    let vlen = cfg.index.max_value;
    let idx = run_tasks([async {
        let idx = I::create(&c, &cfg.index, 0).await.map_err(|e| format!("create: {e}"))?;
        for x in 1..=cfg.keys {
            let v = vec![x as u8; vlen];
            idx.insert(&c, &key(x), &v).await.map_err(|e| format!("load of {x}: {e}"))?;
        }
        c.flush().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(idx)
    }])
    .remove(0)?;
    Ok((f, c, idx))
}

/// Runs `op` on the victim key of `idx`: `Err` with a description of anything but a corrupt
/// index, `Ok` with the corrupt index's message.
async fn run_op<I, S>(cfg: &GarbageConfig, c: &Client<Traced>, idx: &I, op: Op) -> Outcome
where
    I: PointIndex<Traced>,
    S: Scans<Traced, I>,
{
    let (k, v) = (key(cfg.victim), vec![0xEE; cfg.index.max_value]);
    let mut out = Vec::new();
    let got = match op {
        Op::Search => idx.search(c, &k).await.map(|v| format!("{v:?}")),
        Op::Insert => idx.insert(c, &k, &v).await.map(|()| "()".to_string()),
        Op::Update => idx.update(c, &k, &v).await.map(|b| b.to_string()),
        Op::Delete => idx.delete(c, &k).await.map(|b| b.to_string()),
        Op::Scan => S::scan(idx, c, &k, 5, &mut out).await.map(|()| format!("{out:?}")),
    };
    match got {
        Err(IndexError::Corrupt(m)) => Ok(m),
        Err(e) => Err(format!("ended with another error: {e}")),
        Ok(v) => Err(format!("returned {v}: the garbage went unnoticed")),
    }
}

/// A corrupt index's message, or what else an operation did.
type Outcome = Result<String, String>;

/// One operation on garbage (module docs).
fn on_garbage<I, S>(cfg: &GarbageConfig, op: Op, garble: Garble) -> Result<Ended, String>
where
    I: PointIndex<Traced>,
    S: Scans<Traced, I>,
{
    // The first twin: what the operation touches.
    let (f, c, idx) = loaded::<I>(cfg)?;
    // As loaded, before the operation changes it.
    let loaded_heaps = heaps(&f, cfg.memory_nodes);
    c.transport().start();
    let before = run_tasks([run_op::<I, S>(cfg, &c, &idx, op)]).remove(0);
    let trace = c.transport().stop();
    if let Ok(m) = before {
        return Err(format!("the intact index reported corruption: {m}"));
    }
    // The second: the same bytes, garbled.
    let (g, c, idx) = loaded::<I>(cfg)?;
    if heaps(&g, cfg.memory_nodes) != loaded_heaps {
        return Err("two loads of the same keys left different heaps: no twin to garble".into());
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut garbled = 0u64;
    run_tasks([async {
        for &(at, len) in &trace.reads {
            let mut bytes = c.read_vec(at, len).await.map_err(|e| e.to_string())?;
            for (i, b) in bytes.iter_mut().enumerate().skip(garble.from(len)) {
                let offset = at.offset() + i as u64;
                let word = GlobalAddr::new(at.node(), offset & !7);
                // Kept as they are: the superblock and root table, lock words, CAS'd slots.
                if offset >= HEAP_START && !trace.atomics.contains(&word) {
                    *b = rng.next_u32() as u8;
                    garbled += 1;
                }
            }
            c.write(at, &bytes).await.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }])
    .remove(0)?;
    if garbled == 0 {
        return Err(format!("{op:?} READ nothing that could be garbled"));
    }
    let start = Instant::now();
    let message = run_tasks([run_op::<I, S>(cfg, &c, &idx, op)]).remove(0)?;
    Ok(Ended { op, garble, garbled, message, took: start.elapsed() })
}
