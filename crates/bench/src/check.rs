//! `dmindex check`: mixed workloads on the simulator with torn reads, delays and crashes, every
//! history checked for linearizability.
//!
//! One seed decides everything: the fabric's schedule, the faults, and each client's operations.
//! The workload is small and hot on purpose — a few dozen keys, many clients, every kind of
//! operation including deletes and scans — so that operations collide on keys, leaves and locks.
//! Setup and a preload run fault-free; then faults switch on. Tasks still running at the virtual
//! deadline (e.g. spinning on a lock a crashed client holds) are dropped and their operations
//! count as pending, like the crashed clients'.

use std::cell::RefCell;
use std::ops::Range;

use anyhow::bail;
use dmindex_check::{CheckStats, History};
use dmindex_chime::{Chime, Sherman};
use dmindex_index::rdwc::Rdwc;
use dmindex_index::reference::LockedShards;
use dmindex_index::{IndexConfig, RangeIndex};
use dmindex_sim::{Faults, NetParams, Sim, SimConfig, SimTransport, Task};
use indicatif::ProgressBar;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::runner::{self, TaskEnv};

/// Shape of one checked run.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub index: String,
    pub clients: usize,
    pub ops_per_client: u64,
    pub keys: u64,
    pub value_size: usize,
    pub crashes: bool,
    pub delays: bool,
    pub preset: String,
    /// Virtual-time budget of the run phase, ns.
    pub deadline_ns: u64,
    pub index_options: Vec<(String, String)>,
    /// Use exactly these keys (8-byte big-endian integers, non-zero) instead of `1 ..= keys`.
    pub key_list: Vec<u64>,
    /// Use string keys of 8 to 11 bytes, three per 8-byte prefix.
    pub long_keys: bool,
}

impl Default for CheckConfig {
    fn default() -> CheckConfig {
        CheckConfig {
            index: "chime".into(),
            clients: 12,
            ops_per_client: 60,
            keys: 48,
            value_size: 8,
            crashes: true,
            delays: true,
            preset: "stress".into(),
            deadline_ns: 200_000_000,
            index_options: Vec::new(),
            key_list: Vec::new(),
            long_keys: false,
        }
    }
}

/// What one seed's run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub seed: u64,
    pub stats: CheckStats,
    pub crashed: usize,
    pub stuck: usize,
    pub trace_hash: u64,
}

/// Runs one seed; `Err` describes a linearizability violation or a failed operation.
pub fn check_seed(cfg: &CheckConfig, seed: u64) -> anyhow::Result<SeedReport> {
    match cfg.index.as_str() {
        "ref" => check_seed_with::<LockedShards>(cfg, seed),
        "chime" => check_seed_with::<Rdwc<Chime>>(cfg, seed),
        "sherman" => check_seed_with::<Rdwc<Sherman>>(cfg, seed),
        other => bail!("unknown index '{other}' (known: {})", crate::INDEXES.join(", ")),
    }
}

/// Runs `seeds` in order, stopping at the first failure, whose error names the seed.
pub fn check_seeds(
    cfg: &CheckConfig,
    seeds: Range<u64>,
    mut each: impl FnMut(&SeedReport),
) -> anyhow::Result<Vec<SeedReport>> {
    let mut out = Vec::new();
    for seed in seeds {
        match check_seed(cfg, seed) {
            Ok(r) => {
                each(&r);
                out.push(r);
            }
            Err(e) => bail!("seed {seed} failed (replay with --seed {seed}): {e:#}"),
        }
    }
    Ok(out)
}

impl CheckConfig {
    fn universe(&self) -> u64 {
        if self.key_list.is_empty() {
            self.keys
        } else {
            self.key_list.len() as u64
        }
    }

    /// The `i`-th key of the run.
    fn key(&self, i: u64) -> Vec<u8> {
        if self.long_keys {
            let suffix: &[u8] = [&b""[..], b"-x", b"-yy"][(i % 3) as usize];
            return [format!("k{:07}", i / 3).as_bytes(), suffix].concat();
        }
        match self.key_list.get(i as usize) {
            Some(k) => k.to_be_bytes().to_vec(),
            None => (i + 1).to_be_bytes().to_vec(),
        }
    }
}

/// Runs one seed on index `I`.
pub fn check_seed_with<I: RangeIndex<SimTransport>>(
    cfg: &CheckConfig,
    seed: u64,
) -> anyhow::Result<SeedReport> {
    if cfg.clients == 0 || cfg.universe() == 0 || cfg.key_list.contains(&0) {
        bail!("clients and keys must be positive");
    }
    let net = NetParams::preset(&cfg.preset).map_err(anyhow::Error::msg)?;
    let sim = Sim::new(SimConfig {
        node_size: 64 << 20,
        chunk_size: 1 << 20,
        ..SimConfig::new(seed, net)
    })
    .map_err(anyhow::Error::msg)?;
    let icfg = IndexConfig {
        max_key: if cfg.long_keys { 11 } else { 8 },
        max_value: cfg.value_size,
        cache_bytes: 1 << 20,
        expected_items: cfg.universe(),
        root_slot: 0,
        extra: cfg.index_options.clone(),
    };
    let history = History::new();
    let setup = sim.client_on_own_thread(0);
    sim.block_on(I::create(&setup, &icfg, 0))?;
    let cns = 3u16;
    let mut handles = Vec::new();
    for cn in 0..cns {
        let c = sim.client_on_own_thread(cn);
        handles.push(sim.block_on(I::open(&c, &icfg, cn))?);
    }
    let now = || sim.now_ns();
    let bar = ProgressBar::hidden();
    // Preload every other key, recorded, fault-free.
    let loader = sim.client_on_own_thread(0);
    let env = TaskEnv {
        now: &now,
        history: Some(&history),
        progress: &bar,
        value_size: cfg.value_size,
        client: u32::MAX,
    };
    sim.block_on(async {
        for k in (0..cfg.universe()).step_by(2) {
            runner::insert(&handles[0], &loader, &env, &cfg.key(k), &env.value(k)).await?;
        }
        Ok::<(), dmindex_index::IndexError>(())
    })?;

    sim.set_faults(Faults {
        delay_prob: if cfg.delays { 0.05 } else { 0.0 },
        delay_max_ns: 20_000,
        crash_prob: if cfg.crashes { 0.002 } else { 0.0 },
        max_crashes: if cfg.crashes { (cfg.clients as u32 / 4).max(1) } else { 0 },
    });
    let clients: Vec<_> =
        (0..cfg.clients).map(|i| sim.client_on_own_thread((i % cns as usize) as u16)).collect();
    let seeds: Vec<u64> = clients.iter().map(|_| sim.random_u64()).collect();
    let errors = RefCell::new(Vec::new());
    let start = sim.now_ns();
    let tasks = clients.iter().zip(seeds).enumerate().map(|(i, (c, s))| {
        let (idx, history, errors, now, bar) =
            (&handles[i % cns as usize], &history, &errors, &now, &bar);
        Box::pin(async move {
            let env = TaskEnv {
                now,
                history: Some(history),
                progress: bar,
                value_size: cfg.value_size,
                client: i as u32,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(s);
            for seq in 0..cfg.ops_per_client {
                let r = rng.next_u64();
                let k = cfg.key((r >> 8) % cfg.universe());
                let v = env.value(seq);
                let res = match r % 100 {
                    0..=29 => runner::search(idx, c, &env, &k).await.map(drop),
                    30..=54 => runner::insert(idx, c, &env, &k, &v).await,
                    55..=69 => runner::update(idx, c, &env, &k, &v).await.map(drop),
                    70..=79 => runner::delete(idx, c, &env, &k).await.map(drop),
                    80..=89 => {
                        runner::scan(idx, c, &env, &k, 1 + (r >> 40) as usize % 12).await.map(drop)
                    }
                    _ => {
                        // A range over the next few keys of the universe (in its key order).
                        let hi = cfg.key((r >> 8) % cfg.universe() + 1 + (r >> 40) % 16);
                        runner::scan_range(idx, c, &env, &k, &hi).await.map(drop)
                    }
                };
                if let Err(e) = res {
                    errors.borrow_mut().push(format!("client {i}: {e}"));
                    return;
                }
            }
        }) as Task
    });
    let out = sim.run_until(tasks, start + cfg.deadline_ns);
    if let Some(e) = errors.into_inner().into_iter().next() {
        bail!("an operation failed: {e}");
    }
    match history.check() {
        Ok(stats) => Ok(SeedReport {
            seed,
            stats,
            crashed: out.crashed.len(),
            stuck: out.stuck.len(),
            trace_hash: sim.trace_hash(),
        }),
        Err(v) => bail!("history is not linearizable: {v}"),
    }
}
