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
