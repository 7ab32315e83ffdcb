//! CPU time per 100-pair scan on the in-process fabric, into a reused [`ScanBuf`] and as owned
//! pairs, for CHIME, Sherman and Dolphin. A measurement, not a check (ignored by default):
//!
//! ```text
//! cargo test --release -p dmindex-catalog --test suite scan_cost -- --ignored --nocapture
//! ```
//!
//! Time is the thread's own CPU time (the kernel's per-thread schedstat), so that other work on
//! a busy machine does not count; wall time is printed beside it.

use std::time::Instant;

use dmindex_chime::{Chime, Sherman};
use dmindex_dolphin::Dolphin;
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, RangeIndex, ScanBuf};

/// Items loaded (a power of two: see [`perm`]), scans timed per way, pairs per scan.
const ITEMS: u64 = 1 << 20;
const SCANS: u64 = 200_000;
const LEN: usize = 100;

/// This thread's CPU time so far, in ns (first field of its schedstat).
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    s.split_whitespace().next().and_then(|n| n.parse().ok()).expect("CPU ns")
}

/// A well-mixed 64-bit word of `x` (hashed keys, scan starts).
fn mix(x: u64) -> u64 {
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A permutation of `0..ITEMS`: the order keys are loaded in.
fn perm(x: u64) -> u64 {
    x.wrapping_mul(0x9E37_79B1) % ITEMS
}

/// Runs [`SCANS`] scans of [`LEN`] pairs from keys spread over the index, into one reused
/// buffer (`into`) or as owned pairs; (CPU ns, wall ns) per scan.
async fn time_scans<I: RangeIndex<LocalTransport>>(
    t: &I,
    c: &dmindex_fabric::Client<LocalTransport>,
    key: &impl Fn(u64) -> [u8; 8],
    into: bool,
) -> (f64, f64) {
    let mut buf = ScanBuf::new();
    let mut pairs = 0usize;
    let (cpu, wall) = (cpu_ns(), Instant::now());
    for i in 0..SCANS {
        let from = key(mix(i) % (ITEMS - LEN as u64));
        if into {
            t.scan_into(c, &from, LEN, &mut buf).await.expect("scan_into");
            pairs += buf.len();
        } else {
            // As the harness took owned pairs: a fresh vector per scan.
            let mut out = Vec::with_capacity(LEN.min(128));
            t.scan(c, &from, LEN, &mut out).await.expect("scan");
            pairs += out.len();
        }
    }
    let per = |ns: f64| ns / SCANS as f64;
    let r = (per((cpu_ns() - cpu) as f64), per(wall.elapsed().as_nanos() as f64));
    assert!(pairs as u64 >= SCANS * LEN as u64 * 99 / 100, "scans came back short: {pairs}");
    r
}

fn measure<I: RangeIndex<LocalTransport>>(name: &str, key: impl Fn(u64) -> [u8; 8]) {
    let f = LocalFabric::new(LocalConfig { node_size: 4 << 30, ..Default::default() })
        .expect("a local fabric");
    let c = f.client(0).expect("a client");
    run_tasks([async {
        let cfg = IndexConfig { expected_items: ITEMS, ..IndexConfig::default() };
        let t = I::create(&c, &cfg, 0).await.expect("create");
        for i in 0..ITEMS {
            let x = perm(i);
            t.insert(&c, &key(x), &x.to_le_bytes()).await.expect("load");
        }
        // Warm-up (caches, pools, the buffer), then each way twice, interleaved.
        time_scans(&t, &c, &key, true).await;
        for round in 0..2 {
            let (cpu, wall) = time_scans(&t, &c, &key, true).await;
            println!("{name:8} into  round {round}: {cpu:8.0} ns CPU, {wall:8.0} ns wall");
            let (cpu, wall) = time_scans(&t, &c, &key, false).await;
            println!("{name:8} owned round {round}: {cpu:8.0} ns CPU, {wall:8.0} ns wall");
        }
    }]);
}

#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn cpu_per_100_pair_scan() {
    // CHIME and Sherman on hashed keys (as `dmindex perf` runs them), in key order by number
    // only through the hash, so scans start anywhere; Dolphin on dense keys (its paper's
    // folded keys fill a 7-byte prefix's leaves).
    let hashed = |x: u64| (mix(x) | 1).to_be_bytes();
    let dense = |x: u64| (0x0100_0000_0000_0000 + x).to_be_bytes();
    measure::<Chime>("chime", hashed);
    measure::<Sherman>("sherman", hashed);
    measure::<Dolphin>("dolphin", dense);
}
