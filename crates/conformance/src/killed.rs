//! A client killed inside one of its inserts, in virtual time: two handles on one index (the
//! one to be killed on compute node 0, a survivor on compute node 1), the insert that makes an
//! event happen (a split, a retrain, a merge) found by a run without faults, and the same run
//! cut short inside that insert. The index crates' recovery tests kill at points spread over it.

use dmindex_fabric::Client;
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_sim::{Sim, SimTransport, Task};

/// One index with a handle per client: `dead` (compute node 0) will be killed, `live` (1) goes
/// on; `a` is `dead`'s handle, `b` is `live`'s.
pub struct Pair<I> {
    pub s: Sim,
    pub dead: Client<SimTransport>,
    pub live: Client<SimTransport>,
    pub a: I,
    pub b: I,
}

impl<I: PointIndex<SimTransport>> Pair<I> {
    /// `dead` creates the index on `s` with `cfg`, `live` opens it.
    pub fn new(s: Sim, cfg: &IndexConfig) -> Pair<I> {
        let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let a = s.block_on(async { I::create(&dead, cfg, 0).await.unwrap() });
        let b = s.block_on(async { I::open(&live, cfg, 1).await.unwrap() });
        Pair { s, dead, live, a, b }
    }

    /// `dead` inserts key `k` (8 bytes, big-endian, its own value) and the run stops `run_ns`
    /// into it: the insert is dropped wherever it was, the verbs it posted still land.
    pub fn kill_insert(&self, k: u64, run_ns: u64) {
        let insert = async { self.a.insert(&self.dead, &k.to_be_bytes(), &k.to_be_bytes()).await };
        let out = self.s.run_until(
            [Box::pin(async { insert.await.unwrap() }) as Task],
            self.s.now_ns() + run_ns,
        );
        assert!(out.crashed.is_empty(), "{out:?}");
    }

    /// `dead` inserts keys `from..to` (each its own value), one after the other.
    pub fn insert_keys(&self, from: u64, to: u64) {
        for j in from..to {
            let k = j.to_be_bytes();
            self.s.block_on(async { self.a.insert(&self.dead, &k, &k).await.unwrap() });
        }
    }
}

/// The first key of `1..=keys` whose insert, on a pair `make` builds and one client inserting
/// keys from 1 (a deterministic run without faults), brings `count` of its handle to `nth`, and
/// how long that insert took; `None` if no key does.
pub fn nth_insert<I: PointIndex<SimTransport>>(
    make: impl Fn() -> Pair<I>,
    keys: u64,
    nth: u64,
    count: impl Fn(&I) -> u64,
) -> Option<(u64, u64)> {
    let t = make();
    for k in 1..=keys {
        let start = t.s.now_ns();
        t.insert_keys(k, k + 1);
        if count(&t.a) >= nth {
            return Some((k, t.s.now_ns() - start));
        }
    }
    None
}

/// The run [`nth_insert`] made, on a pair `make` builds, its insert of key `k` killed `run_ns`
/// into it.
pub fn killed<I: PointIndex<SimTransport>>(
    make: impl Fn() -> Pair<I>,
    k: u64,
    run_ns: u64,
) -> Pair<I> {
    let t = make();
    t.insert_keys(1, k);
    t.kill_insert(k, run_ns);
    t
}

/// Index counter `name` of handle `idx` ([`dmindex_index::IndexStats::extra`]; 0 if absent).
pub fn counter<I: PointIndex<SimTransport>>(idx: &I, name: &str) -> u64 {
    idx.stats().extra.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}
