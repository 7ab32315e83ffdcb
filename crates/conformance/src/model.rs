//! The model test: random sequences of every operation an index offers, from one client, checked
//! step by step against `BTreeMap` (ordered indexes) or `HashMap` (point indexes), then once more
//! through a fresh handle on another compute node with a cold cache. Every scan runs twice, as
//! owned pairs and into one [`ScanBuf`] the whole run reuses (scans of every size, so the buffer
//! is refilled both shorter and longer than it was).

use std::collections::{BTreeMap, HashMap};

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use dmindex_index::{mn_services, IndexConfig, IndexKind, IndexStats, PointIndex, ScanBuf, Scans};

/// One step of a model run; keys are numbers in `1..=keys`, mapped to bytes by
/// [`ModelConfig::key`].
#[derive(Clone, Debug)]
pub enum Step {
    Search(u64),
    Insert(u64, u8),
    Update(u64, u8),
    Delete(u64),
    Scan(u64, u8),
    ScanRange(u64, u64),
}

impl Step {
    fn key(&self) -> u64 {
        match *self {
            Step::Search(x) | Step::Insert(x, _) | Step::Update(x, _) | Step::Delete(x) => x,
            Step::Scan(x, _) | Step::ScanRange(x, _) => x,
        }
    }
}

/// Shape of a model test.
#[derive(Clone)]
pub struct ModelConfig {
    pub index: IndexConfig,
    /// Keys are drawn from `1..=keys`.
    pub keys: u64,
    /// Key number to key bytes (distinct numbers must give distinct keys).
    pub key: fn(u64) -> Vec<u8>,
    /// Value for write byte `v`, at most `max_value` bytes long.
    pub value: fn(v: u8, max_value: usize) -> Vec<u8>,
    /// Steps per case are drawn from `1..max_steps`.
    pub max_steps: usize,
    pub cases: u32,
    /// Search the touched key twice more after every step (paths taken on a repeated read,
    /// e.g. speculative reads of a hot key).
    pub search_again: bool,
    /// Checks the handle's counters after a case, given how many keys the model holds.
    pub after: Option<fn(&IndexStats, usize)>,
    pub node_size: u64,
    pub chunk_size: u64,
    /// Memory nodes of the in-process cluster.
    pub memory_nodes: u16,
}

impl ModelConfig {
    /// `cases` runs of up to 600 steps over `keys` 8-byte big-endian keys, values of
    /// `index.max_value` bytes.
    pub fn new(index: IndexConfig, keys: u64, cases: u32) -> ModelConfig {
        ModelConfig {
            index,
            keys,
            key: |x| x.to_be_bytes().to_vec(),
            value: |v, len| vec![v; len],
            max_steps: 600,
            cases,
            search_again: false,
            after: None,
            node_size: 64 << 20,
            chunk_size: 1 << 20,
            memory_nodes: 1,
        }
    }
}

/// A pair already in a scan's output, which the scan must keep (scans append).
fn appended() -> (Vec<u8>, Vec<u8>) {
    (b"already here".to_vec(), b"kept".to_vec())
}

/// Random step sequences for an index of `kind`: no scans for point indexes.
pub fn steps(kind: IndexKind, keys: u64, max_steps: usize) -> impl Strategy<Value = Vec<Step>> {
    let scans = if kind == IndexKind::Ordered { 1 } else { 0 };
    let step = prop_oneof![
        3 => (1..=keys).prop_map(Step::Search),
        5 => (1..=keys, any::<u8>()).prop_map(|(k, v)| Step::Insert(k, v)),
        2 => (1..=keys, any::<u8>()).prop_map(|(k, v)| Step::Update(k, v)),
        2 => (1..=keys).prop_map(Step::Delete),
        scans => (1..=keys, 0..30u8).prop_map(|(k, n)| Step::Scan(k, n)),
        scans => (1..=keys, 1..=keys).prop_map(|(a, b)| Step::ScanRange(a, b)),
    ];
    prop::collection::vec(step, 1..max_steps.max(2))
}

/// Runs `cfg.cases` random sequences on index `I`; a failure panics with the shrunk sequence.
pub fn model_test<I, S>(cfg: &ModelConfig)
where
    I: PointIndex<LocalTransport>,
    S: Scans<LocalTransport, I>,
{
    let mut runner = TestRunner::new(Config {
        cases: cfg.cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&steps(S::KIND, cfg.keys, cfg.max_steps), |steps| {
        run_model::<I, S>(cfg, &steps);
        Ok(())
    });
    if let Err(e) = result {
        panic!("model test failed: {e}");
    }
}

/// The model both kinds share: what a point operation may observe.
enum Model {
    Ordered(BTreeMap<Vec<u8>, Vec<u8>>),
    Point(HashMap<Vec<u8>, Vec<u8>>),
}

impl Model {
    fn get(&self, k: &[u8]) -> Option<Vec<u8>> {
        match self {
            Model::Ordered(m) => m.get(k).cloned(),
            Model::Point(m) => m.get(k).cloned(),
        }
    }
    fn contains(&self, k: &[u8]) -> bool {
        self.get(k).is_some()
    }
    fn insert(&mut self, k: Vec<u8>, v: Vec<u8>) {
        match self {
            Model::Ordered(m) => drop(m.insert(k, v)),
            Model::Point(m) => drop(m.insert(k, v)),
        }
    }
    fn remove(&mut self, k: &[u8]) -> bool {
        match self {
            Model::Ordered(m) => m.remove(k).is_some(),
            Model::Point(m) => m.remove(k).is_some(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Model::Ordered(m) => m.len(),
            Model::Point(m) => m.len(),
        }
    }
    fn ordered(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        match self {
            Model::Ordered(m) => m,
            Model::Point(_) => unreachable!("scans are only generated for ordered indexes"),
        }
    }
}

/// Runs one step sequence on a fresh single-node cluster.
pub fn run_model<I, S>(cfg: &ModelConfig, steps: &[Step])
where
    I: PointIndex<LocalTransport>,
    S: Scans<LocalTransport, I>,
{
    let services = mn_services(4, I::SERVICES).expect("index services");
    let f = LocalFabric::with_services(
        LocalConfig {
            memory_nodes: cfg.memory_nodes,
            node_size: cfg.node_size,
            chunk_size: cfg.chunk_size,
            ..Default::default()
        },
        services,
    )
    .expect("fabric");
    let c = f.client(0).expect("client");
    let (k, vlen) = (cfg.key, cfg.index.max_value);
    let val = |v| (cfg.value)(v, vlen);
    run_tasks([async {
        let t = I::create(&c, &cfg.index, 0).await.expect("create");
        let blind = t.blind_writes();
        let mut buf = ScanBuf::new();
        let mut model = match S::KIND {
            IndexKind::Ordered => Model::Ordered(BTreeMap::new()),
            IndexKind::Point => Model::Point(HashMap::new()),
        };
        for step in steps {
            match *step {
                Step::Search(x) => {
                    assert_eq!(t.search(&c, &k(x)).await.unwrap(), model.get(&k(x)), "search {x}")
                }
                Step::Insert(x, v) => {
                    t.insert(&c, &k(x), &val(v)).await.unwrap();
                    model.insert(k(x), val(v));
                }
                // Blind writes (an index option) set or remove the key whatever it held and
                // return true; checked ones say whether it existed.
                Step::Update(x, v) => {
                    let had = model.contains(&k(x));
                    let want = had || blind;
                    assert_eq!(t.update(&c, &k(x), &val(v)).await.unwrap(), want, "update {x}");
                    if want {
                        model.insert(k(x), val(v));
                    }
                }
                Step::Delete(x) => {
                    let had = model.remove(&k(x));
                    assert_eq!(t.delete(&c, &k(x)).await.unwrap(), had || blind, "delete {x}")
                }
                Step::Scan(x, n) => {
                    let mut out = vec![appended()];
                    S::scan(&t, &c, &k(x), n as usize, &mut out).await.unwrap();
                    assert_eq!(out.remove(0), appended(), "a scan appends to its output");
                    let want: Vec<_> = model
                        .ordered()
                        .range(k(x)..)
                        .take(n as usize)
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .collect();
                    assert_eq!(out, want, "scan from {x} × {n}");
                    S::scan_into(&t, &c, &k(x), n as usize, &mut buf).await.unwrap();
                    assert_eq!(buf.to_pairs(), want, "scan into a reused buffer from {x} × {n}");
                }
                Step::ScanRange(a, b) => {
                    let (lo, hi) = (k(a), k(b));
                    let mut out = vec![appended()];
                    S::scan_range(&t, &c, &lo, &hi, &mut out).await.unwrap();
                    assert_eq!(out.remove(0), appended(), "a range scan appends to its output");
                    let want: Vec<_> = if lo < hi {
                        model
                            .ordered()
                            .range(lo.clone()..hi.clone())
                            .map(|(a, b)| (a.clone(), b.clone()))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    assert_eq!(out, want, "scan [{a}, {b})");
                    S::scan_range_into(&t, &c, &lo, &hi, &mut buf).await.unwrap();
                    assert_eq!(buf.to_pairs(), want, "scan into a reused buffer [{a}, {b})");
                }
            }
            if cfg.search_again {
                let x = step.key();
                for _ in 0..2 {
                    let got = t.search(&c, &k(x)).await.unwrap();
                    assert_eq!(got, model.get(&k(x)), "search {x} again after {step:?}");
                }
            }
        }
        if let Some(after) = cfg.after {
            after(&t.stats(), model.len());
        }
        // Everything is still there, through a fresh handle with a cold cache.
        let other = I::open(&c, &cfg.index, 1).await.expect("open");
        for x in 1..=cfg.keys {
            assert_eq!(other.search(&c, &k(x)).await.unwrap(), model.get(&k(x)), "search {x}");
        }
        if let Model::Ordered(m) = &model {
            if let Some(first) = m.keys().next() {
                let mut all = Vec::new();
                S::scan(&other, &c, first, usize::MAX, &mut all).await.unwrap();
                assert_eq!(all, m.clone().into_iter().collect::<Vec<_>>(), "full scan");
                S::scan_into(&other, &c, first, usize::MAX, &mut buf).await.unwrap();
                assert_eq!(buf.to_pairs(), all, "full scan into the reused buffer");
                // Then a short one into the same buffer: only its pairs are left.
                S::scan_into(&other, &c, first, 1, &mut buf).await.unwrap();
                assert_eq!(buf.to_pairs(), all[..1], "one pair into the reused buffer");
            }
        }
    }]);
}
