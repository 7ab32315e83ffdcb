//! The conformance suites `race` and `race-sephash` share: shapes that split all the time, run
//! through the kit under the simulator (torn reads, delays, crashes, every history checked).
//! Each test file names its own index and seeds; only the resize differs between the two.
//! Also the simulator and the insert storm the two races tests share.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::cell::Cell;
use std::ops::Range;

use dmindex_conformance::{suite, CheckConfig, Crashes};
use dmindex_fabric::Client;
use dmindex_index::{mn_services, PointIndex, PointOnly};
use dmindex_sim::{NetParams, Sim, SimConfig, SimTransport, Task};

/// A simulator on the stress preset (torn reads), 64 MiB nodes.
pub fn sim(seed: u64) -> Sim {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, &[]).unwrap();
    let cfg = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(seed, net) };
    Sim::with_services(cfg, services).unwrap()
}

/// Sixteen clients, each on handle `i % handles`, insert 50 distinct keys each (keys 1..=800,
/// the key its value), each reading back a key another client inserted the round before (which
/// may be racing a split). Every client must finish within `deadline_ns` of virtual time.
pub fn insert_storm<I: PointIndex<SimTransport>>(
    sim: &Sim,
    clients: &[Client<SimTransport>],
    handles: &[I],
    seed: u64,
    deadline_ns: u64,
) {
    assert_eq!(clients.len(), 16, "the storm's keys are laid out for 16 clients");
    let done = Cell::new(0);
    let tasks = clients.iter().enumerate().map(|(i, c)| {
        let (idx, done) = (&handles[i % handles.len()], &done);
        Box::pin(async move {
            for n in 0..50u64 {
                let k = (1 + i as u64 + 16 * n).to_be_bytes();
                idx.insert(c, &k, &k).await.unwrap();
                if n > 0 {
                    let other = (1 + (i as u64 + 1) % 16 + 16 * (n - 1)).to_be_bytes();
                    let _ = idx.search(c, &other).await.unwrap();
                }
            }
            done.set(done.get() + 1);
        }) as Task
    });
    let out = sim.run_until(tasks, sim.now_ns() + deadline_ns);
    assert!(out.stuck.is_empty() && done.get() == 16, "seed {seed}: {out:?}");
}

/// RACE's shape options: groups per segment and the initial directory depth.
pub fn opts(groups: usize, depth: usize) -> Vec<(String, String)> {
    vec![("groups".into(), groups.to_string()), ("depth".into(), depth.to_string())]
}

/// One-group segments (21 slots) from a one-segment directory: hot keys split segments and
/// double the directory while other clients read, write and crash (clients behind a crashed
/// splitter are reported stuck, not failed).
pub fn splits_with_crashes<I: PointIndex<SimTransport>>(name: &str, seeds: Range<u64>) {
    let cfg = CheckConfig { index_options: opts(1, 0), ..CheckConfig::default() };
    suite::<I, PointOnly>(name, &cfg, seeds);
}

/// More keys than one-group segments hold at depth 2, and more clients, no crashes: every
/// client must finish.
pub fn many_keys_many_clients<I: PointIndex<SimTransport>>(name: &str, seeds: Range<u64>) {
    let cfg = CheckConfig {
        index_options: opts(1, 2),
        keys: 160,
        clients: 16,
        ops_per_client: 80,
        crashes: Crashes::Never,
        ..CheckConfig::default()
    };
    suite::<I, PointOnly>(name, &cfg, seeds);
}

/// Hundreds of keys in one-group segments with crashes: dozens of splits per seed, and crashes
/// inside them.
pub fn many_splits_with_crashes<I: PointIndex<SimTransport>>(name: &str, seeds: Range<u64>) {
    let cfg = CheckConfig { index_options: opts(1, 0), keys: 300, ..CheckConfig::default() };
    suite::<I, PointOnly>(name, &cfg, seeds);
}

/// Longer keys and values in blocks of two cache lines.
pub fn long_keys_and_values<I: PointIndex<SimTransport>>(name: &str, seeds: Range<u64>) {
    let cfg = CheckConfig {
        index_options: opts(2, 0),
        long_keys: true,
        value_size: 80,
        ..CheckConfig::default()
    };
    suite::<I, PointOnly>(name, &cfg, seeds);
}
