//! RDWC's unit tests: a gated index decides what arrives while a leader is in flight.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;

use dmindex_fabric::exec::{run_tasks, yield_now};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

use super::*;

/// One key's value in a cell; searches and updates wait at a gate after taking effect, so
/// a test decides what arrives while they are in flight.
#[derive(Default)]
struct Gated {
    value: Cell<u8>,
    gate: Cell<bool>,
    searches: Cell<u32>,
    updates: RefCell<Vec<u8>>,
}

impl Gated {
    async fn wait(&self) {
        while !self.gate.get() {
            yield_now().await;
        }
    }
}

impl<T: Transport> PointIndex<T> for Gated {
    async fn create(_: &Client<T>, _: &IndexConfig, _: u16) -> IndexResult<Self> {
        Ok(Gated::default())
    }
    async fn open(_: &Client<T>, _: &IndexConfig, _: u16) -> IndexResult<Self> {
        Ok(Gated::default())
    }
    async fn search_into(&self, _: &Client<T>, _: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        let v = self.value.get();
        self.searches.set(self.searches.get() + 1);
        self.wait().await;
        out.clear();
        out.push(v);
        Ok(true)
    }
    async fn insert(&self, _: &Client<T>, _: &[u8], _: &[u8]) -> IndexResult<()> {
        Ok(())
    }
    async fn update(&self, _: &Client<T>, _: &[u8], v: &[u8]) -> IndexResult<bool> {
        self.value.set(v[0]);
        self.updates.borrow_mut().push(v[0]);
        self.wait().await;
        Ok(true)
    }
    async fn delete(&self, _: &Client<T>, _: &[u8]) -> IndexResult<bool> {
        Ok(false)
    }
}

/// A gated index with RDWC on, and a client for it.
fn gated() -> (Rdwc<Gated>, Client<LocalTransport>) {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    (Rdwc::wrap(Gated::default(), Some(Table::default())), f.client(0).unwrap())
}

type Task<'a> = Pin<Box<dyn Future<Output = Option<Vec<u8>>> + 'a>>;

async fn spin(n: usize) {
    for _ in 0..n {
        yield_now().await;
    }
}

/// A search that arrives while a leader's read is in flight must not take that read's
/// result: a write completed before it arrived would be lost to it.
#[test]
fn a_late_reader_never_takes_an_older_read() {
    let (t, c) = gated();
    let (t, c) = (&t, &c);
    let key = b"k".as_slice();
    let tasks: Vec<Task<'_>> = vec![
        // The leader reads 0 and stays in flight.
        Box::pin(async move { t.search(c, key).await.unwrap() }),
        // Then a write completes and a second reader arrives; later the gate opens.
        Box::pin(async move {
            spin(3).await;
            t.inner.value.set(7);
            let fut = t.search(c, key);
            fut.await.unwrap()
        }),
        Box::pin(async move {
            spin(10).await;
            t.inner.gate.set(true);
            None
        }),
    ];
    let out = run_tasks(tasks);
    assert_eq!(out[0], Some(vec![0]));
    assert_eq!(out[1], Some(vec![7]), "the late reader saw a value older than a completed write");
    assert_eq!(t.inner.searches.get(), 2);
}

/// Readers that queue behind one in-flight read share the next one; writers that queue
/// behind one update are combined into one update of the latest value. The first reader is
/// alone in its slot and leads unlisted (the fast path), so the second leads its own read and
/// the four after it queue behind that one; the first writer arrives with the reader in the
/// slot, so it is listed and the three after it combine.
#[test]
fn queued_readers_share_and_queued_writers_combine() {
    let (t, c) = gated();
    let (t, c) = (&t, &c);
    let key = b"k".as_slice();
    let mut tasks: Vec<Task<'_>> = vec![Box::pin(async move { t.search(c, key).await.unwrap() })];
    for i in 0..5 {
        tasks.push(Box::pin(async move {
            spin(2 + i).await;
            t.search(c, key).await.unwrap()
        }));
    }
    tasks.push(Box::pin(async move {
        t.update(c, key, &[1]).await.unwrap();
        None
    }));
    for v in 2..=4u8 {
        tasks.push(Box::pin(async move {
            spin(v as usize).await;
            assert!(t.update(c, key, &[v]).await.unwrap());
            None
        }));
    }
    tasks.push(Box::pin(async move {
        spin(20).await;
        t.inner.gate.set(true);
        None
    }));
    run_tasks(tasks);
    assert_eq!(t.inner.searches.get(), 3, "six readers, three remote reads");
    assert_eq!(*t.inner.updates.borrow(), vec![1, 4], "the batch writes its latest value");
    let s = PointIndex::<dmindex_fabric::local::LocalTransport>::stats(t);
    let get = |n: &str| s.extra.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    assert_eq!(get("rdwc_reads_delegated"), Some(3));
    assert_eq!((get("rdwc_reads"), get("rdwc_writes")), (Some(6), Some(4)));
    assert_eq!(get("rdwc_writes_combined"), Some(2));
}

/// A leader that is dropped midway (a crashed client) sends its batch off to retry, and the
/// key is free again.
#[test]
fn a_dropped_leader_releases_its_batch() {
    let (t, c) = gated();
    let (t, c) = (&t, &c);
    let key = b"k".as_slice();
    let tasks: Vec<Task<'_>> = vec![
        Box::pin(async move {
            // Lead, then give up before the gate opens.
            let lead = t.search(c, key);
            futures::pin_mut!(lead);
            for _ in 0..5 {
                if futures::poll!(lead.as_mut()).is_ready() {
                    panic!("the gate is closed");
                }
                yield_now().await;
            }
            None
        }),
        Box::pin(async move {
            spin(2).await;
            t.search(c, key).await.unwrap()
        }),
        Box::pin(async move {
            spin(12).await;
            t.inner.gate.set(true);
            None
        }),
    ];
    let out = run_tasks(tasks);
    assert_eq!(out[1], Some(vec![0]));
    assert_eq!(t.inner.searches.get(), 2);
    assert!(t
        .table
        .as_ref()
        .unwrap()
        .slots
        .iter()
        .all(|s| s.active.lock().unwrap().is_empty() && s.busy.load(Ordering::Relaxed) == 0));
}

/// The table's counters for `t`: (entered, delegated).
fn entered_and_delegated(t: &Rdwc<Gated>) -> (u64, u64) {
    let s = PointIndex::<LocalTransport>::stats(t);
    let get = |n: &str| s.extra.iter().find(|(k, _)| *k == n).map_or(0, |(_, v)| *v);
    (get("rdwc_entered"), get("rdwc_reads_delegated"))
}

/// Whether the slot of `key` is hot.
fn hot(t: &Rdwc<Gated>, key: &[u8]) -> bool {
    t.table.as_ref().unwrap().hot[slot_of(hash_bytes(key))].load(Ordering::Relaxed)
}

/// `n` searches of `key` one after another (the gate open): no client ever meets another.
fn searches_alone(t: &Rdwc<Gated>, c: &Client<LocalTransport>, key: &[u8], n: u64) {
    t.inner.gate.set(true);
    for _ in 0..n {
        assert_eq!(futures::executor::block_on(t.search(c, key)).unwrap(), Some(vec![0]));
    }
}

/// A slot that meets no contention goes cold after `COOL_AFTER` entries, and from then on only
/// one operation in `SAMPLE_EVERY` touches it; nothing stays counted in it.
#[test]
fn an_uncontended_slot_goes_cold_and_is_bypassed() {
    let (t, c) = gated();
    let key = b"k".as_slice();
    searches_alone(&t, &c, key, u64::from(COOL_AFTER) - 1);
    assert!(hot(&t, key), "cooled early");
    searches_alone(&t, &c, key, 1);
    assert!(!hot(&t, key), "still hot after {COOL_AFTER} uncontended entries");
    assert_eq!(entered_and_delegated(&t), (u64::from(COOL_AFTER), 0));
    searches_alone(&t, &c, key, 10 * SAMPLE_EVERY);
    assert_eq!(entered_and_delegated(&t), (u64::from(COOL_AFTER) + 10, 0));
    assert!(!hot(&t, key), "a sampled client alone must not heat the slot");
    assert!(t.table.as_ref().unwrap().slots.iter().all(|s| s.busy.load(Ordering::Relaxed) == 0));
}

/// Readers piling up on a cold slot's key: the sampled ones find each other, the slot turns
/// hot, and the readers after that queue behind one read again.
#[test]
fn contention_on_a_cold_slot_turns_it_hot() {
    let (t, c) = gated();
    let (t, c) = (&t, &c);
    let key = b"k".as_slice();
    searches_alone(t, c, key, u64::from(COOL_AFTER));
    assert!(!hot(t, key));
    t.inner.gate.set(false);
    let before = t.inner.searches.get();
    // Operation 256 is sampled and leads alone, 257–271 bypass, 272 is sampled and meets it:
    // hot. The ones after enter and queue.
    let readers = 2 * SAMPLE_EVERY as usize + 4;
    let mut tasks: Vec<Task<'_>> = (0..readers)
        .map(|i| -> Task<'_> {
            Box::pin(async move {
                spin(i).await;
                t.search(c, key).await.unwrap()
            })
        })
        .collect();
    tasks.push(Box::pin(async move {
        spin(readers + 10).await;
        t.inner.gate.set(true);
        None
    }));
    let out = run_tasks(tasks);
    assert!(out[..readers].iter().all(|v| v.as_deref() == Some(&[0u8][..])));
    assert!(hot(t, key), "contended slot stayed cold");
    let (_, delegated) = entered_and_delegated(t);
    assert!(delegated >= SAMPLE_EVERY, "only {delegated} reads delegated once hot");
    assert_eq!(u64::from(t.inner.searches.get() - before) + delegated, readers as u64);
}

/// An index that answers every defaulted `PointIndex` and `RangeIndex` item with something
/// recognisable, and says it replicates: whatever RDWC fails to forward comes back as the
/// trait's default instead.
#[derive(Default)]
struct Replicated {
    recovered: RefCell<Vec<dmindex_fabric::NodeId>>,
}

/// The stub's memory-node service: it answers nothing, it only has to be listed.
struct Nothing;

impl dmindex_fabric::service::Service for Nothing {
    fn name(&self) -> &str {
        "nothing"
    }
    fn handle(
        &self,
        _: &dmindex_fabric::service::MnContext<'_>,
        _: &[u8],
    ) -> Result<Vec<u8>, dmindex_fabric::service::ServiceError> {
        Ok(Vec::new())
    }
}

const STUB_SERVICE: MnService = MnService {
    id: dmindex_fabric::ServiceId(dmindex_fabric::service::FIRST_USER_SERVICE),
    name: "stub-replicas",
    make: || std::sync::Arc::new(Nothing),
};

fn stub_stats() -> IndexStats {
    IndexStats { cache_bytes: 7, retries: 3, extra: vec![("stub_counter", 11)] }
}

impl<T: Transport> PointIndex<T> for Replicated {
    const SERVICES: &'static [MnService] = &[STUB_SERVICE];
    const SURVIVES_MN_CRASH: bool = true;

    async fn create(_: &Client<T>, _: &IndexConfig, _: u16) -> IndexResult<Self> {
        Ok(Replicated::default())
    }
    async fn open(_: &Client<T>, _: &IndexConfig, _: u16) -> IndexResult<Self> {
        Ok(Replicated::default())
    }
    async fn search_into(&self, _: &Client<T>, _: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        out.clear();
        out.extend_from_slice(b"found");
        Ok(true)
    }
    async fn insert(&self, _: &Client<T>, _: &[u8], _: &[u8]) -> IndexResult<()> {
        Ok(())
    }
    async fn update(&self, _: &Client<T>, _: &[u8], _: &[u8]) -> IndexResult<bool> {
        Ok(true)
    }
    async fn delete(&self, _: &Client<T>, _: &[u8]) -> IndexResult<bool> {
        Ok(true)
    }
    fn stats(&self) -> IndexStats {
        stub_stats()
    }
    async fn load_factor(&self, _: &Client<T>) -> IndexResult<Option<f64>> {
        Ok(Some(0.25))
    }
    async fn recover_memory_node(
        &self,
        _: &Client<T>,
        node: dmindex_fabric::NodeId,
    ) -> IndexResult<()> {
        self.recovered.borrow_mut().push(node);
        Ok(())
    }
}

impl<T: Transport> RangeIndex<T> for Replicated {
    async fn scan_into(
        &self,
        _: &Client<T>,
        _: &[u8],
        _: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        out.push(b"scan_into", b"");
        Ok(())
    }
    async fn scan_range_into(
        &self,
        _: &Client<T>,
        _: &[u8],
        _: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        out.push(b"range_into", b"");
        Ok(())
    }
    async fn scan(
        &self,
        _: &Client<T>,
        _: &[u8],
        _: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        out.push((b"scan".to_vec(), Vec::new()));
        Ok(())
    }
    async fn scan_range(
        &self,
        _: &Client<T>,
        _: &[u8],
        _: &[u8],
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        out.push((b"range".to_vec(), Vec::new()));
        Ok(())
    }
}

/// Wrapping an index changes none of its `PointIndex` answers, crash survival included: a
/// replicated index behind RDWC that claimed to survive a memory-node crash and then refused
/// to rebuild the node would fail every crash check. With RDWC on, its statistics only gain
/// RDWC's own counters after the index's.
#[test]
fn wrapping_an_index_changes_none_of_its_answers() {
    type L = LocalTransport;
    type W = Rdwc<Replicated>;
    const { assert!(<W as PointIndex<L>>::SURVIVES_MN_CRASH) };
    let services = <W as PointIndex<L>>::SERVICES;
    assert_eq!(
        services.iter().map(|s| (s.id, s.name)).collect::<Vec<_>>(),
        [(STUB_SERVICE.id, STUB_SERVICE.name)]
    );
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    for table in [None, Some(Table::default())] {
        let on = table.is_some();
        let w = Rdwc::wrap(Replicated::default(), table);
        futures::executor::block_on(async {
            assert_eq!(PointIndex::<L>::search(&w, &c, b"k").await, Ok(Some(b"found".to_vec())));
            assert_eq!(PointIndex::<L>::load_factor(&w, &c).await, Ok(Some(0.25)));
            assert_eq!(PointIndex::<L>::recover_memory_node(&w, &c, 2).await, Ok(()));
            assert_eq!(*w.inner.recovered.borrow(), [2], "the wrapped index rebuilt the node");
            let mut out = Vec::new();
            RangeIndex::<L>::scan(&w, &c, b"a", 1, &mut out).await.unwrap();
            RangeIndex::<L>::scan_range(&w, &c, b"a", b"z", &mut out).await.unwrap();
            let mut buf = ScanBuf::new();
            RangeIndex::<L>::scan_into(&w, &c, b"a", 1, &mut buf).await.unwrap();
            out.push((buf.key(0).to_vec(), Vec::new()));
            RangeIndex::<L>::scan_range_into(&w, &c, b"a", b"z", &mut buf).await.unwrap();
            out.push((buf.key(0).to_vec(), Vec::new()));
            let keys: Vec<&[u8]> = out.iter().map(|(k, _)| k.as_slice()).collect();
            assert_eq!(keys, [b"scan".as_slice(), b"range", b"scan_into", b"range_into"]);
        });
        let s = PointIndex::<L>::stats(&w);
        let want = stub_stats();
        assert_eq!((s.cache_bytes, s.retries), (want.cache_bytes, want.retries));
        assert_eq!(
            s.extra[..want.extra.len()],
            want.extra[..],
            "the index's own, first (RDWC {on})"
        );
        assert_eq!(s.extra.len() > want.extra.len(), on, "RDWC's counters only when it is on");
    }
}

/// Defaulted trait items RDWC deliberately leaves to the default: `search` is defined through
/// `search_into`, so the default already goes through RDWC's table (forwarding it to the wrapped
/// index would bypass RDWC).
const LEFT_TO_DEFAULT: &[&str] = &["search"];

/// The text of the block that starts at the first `start` in `src`, up to its closing brace at
/// the start of a line.
fn block<'a>(src: &'a str, start: &str) -> &'a str {
    let from = src.find(start).unwrap_or_else(|| panic!("no `{start}`"));
    let len = src[from..].find("\n}\n").unwrap_or_else(|| panic!("`{start}` never closes"));
    &src[from..from + len]
}

/// The names of a trait body's items that have a default: constants with a value and methods
/// whose signature ends in a body rather than `;`. Items are the lines indented by one level.
fn defaulted(body: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find("\n    ") {
        rest = &rest[at + 5..];
        let item = rest.strip_prefix("async ").unwrap_or(rest);
        let name_end = |s: &str| s.find(|ch: char| !(ch.is_alphanumeric() || ch == '_'));
        if let Some(c) = item.strip_prefix("const ") {
            let name = &c[..name_end(c).unwrap_or(0)];
            let decl = &c[..c.find(';').unwrap_or(c.len())];
            if decl.contains(" = ") {
                names.push(name);
            }
        } else if let Some(f) = item.strip_prefix("fn ") {
            let name = &f[..name_end(f).unwrap_or(0)];
            if f.find('{').unwrap_or(usize::MAX) < f.find(';').unwrap_or(usize::MAX) {
                names.push(name);
            }
        }
    }
    names
}

/// Every `PointIndex` and `RangeIndex` item with a default body is forwarded by RDWC (or listed
/// in [`LEFT_TO_DEFAULT`] with its reason): a default the wrapped index overrides would
/// otherwise be silently replaced by the trait's, as `recover_memory_node` once was. This reads
/// the trait's source, so a method added to the trait later is caught here, not in production.
#[test]
fn every_defaulted_trait_item_is_forwarded() {
    let traits = include_str!("../../../index/src/lib.rs");
    let rdwc = include_str!("../rdwc.rs");
    let pairs = [
        ("pub trait PointIndex<", "PointIndex<T> for Rdwc<I> {"),
        ("pub trait RangeIndex<", "RangeIndex<T> for Rdwc<I> {"),
    ];
    let mut all = Vec::new();
    for (tr, im) in pairs {
        let imp = block(rdwc, im);
        for name in defaulted(block(traits, tr)) {
            all.push(name);
            let forwarded =
                imp.contains(&format!("fn {name}(")) || imp.contains(&format!("const {name}:"));
            assert!(
                forwarded || LEFT_TO_DEFAULT.contains(&name),
                "RDWC does not forward `{name}`: the wrapped index's own answer would be lost"
            );
        }
    }
    // The exemptions must still be defaulted items (this also shows the trait was parsed).
    for name in LEFT_TO_DEFAULT {
        assert!(all.contains(name), "`{name}` is no defaulted trait item (found {all:?})");
    }
}
