//! Writer processes killed with SIGKILL in the middle of their writes, over UCX (TCP on
//! loopback), for every index whose catalog entry says it recovers from client crashes (and
//! Dolphin, below): the next writer on the same keys gets through, and every write a killed
//! process acknowledged is still there.
//!
//! # Script, per index
//!
//! Two memnode processes; a loader process creates the index and writes every key. Then, one
//! after another, writer processes `1..=kills`, each with several coroutines (a fabric client
//! each, so a member of its own), and a last writer:
//!
//! 1. **read pass**: every key a process acknowledged a write of is read once; each must hold
//!    what the previous process acknowledged last for it, or the write it had in flight on that
//!    key when it was killed (which may or may not have landed);
//! 2. **sweep**: every key is written once (each coroutine owns the keys `≡ j mod coroutines`).
//!    A lock or share a killed process left held on the way is judged after three leases
//!    without a heartbeat (250 ms each on UCX), its member fenced and the structure repaired:
//!    the read pass and sweep together are "getting through";
//! 3. the coroutines keep writing their keys round-robin, each update followed by the insert of
//!    a new key (so the index grows and restructures: splits, merges, SMOs, whose locks a killed
//!    process may hold), until the test kills the process (SIGKILL, at a different instant after
//!    the sweep for each process); the last writer instead reads its keys back, each must hold
//!    its own write.
//!
//! # What a killed process acknowledged
//!
//! A writer prints `> key value` before each insert and `< key value` once it returned, each a
//! `write(2)` of one line to a pipe the test reads: what the kernel took before the SIGKILL
//! reaches the test. So an acknowledged write is one whose `<` line the test read; a write
//! whose `>` line came without its `<` was in flight (it may have landed, whole: the indexes'
//! writes are atomic per key). Each key has one writing coroutine at a time, so at most one
//! write per key is in flight at a kill.
//!
//! This binary plays every part: run as the test it starts memnodes (the `dmindex` binary) and
//! itself as each writer (chosen by an environment variable).
#![cfg(feature = "ucx")]

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Client, Fabric, Transport};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_ucx::testhosts::marked_lines;
use dmindex_ucx::transport::{UcxFabric, UcxOptions, UcxTransport};

const ROLE: &str = "DMX_CRASH_ROLE";
/// The test every child runs as (never ignored, so a plain `--exact` finds it).
const CHILD_TEST: &str = "killed_writers_leave_nothing_held_and_lose_no_acknowledged_write";
const TOKEN: &str = "crash-test-token";
const KEYS: u64 = 600;
const COROUTINES: u64 = 4;
/// How long a writer may take to get through (read pass and sweep) after a kill: three leases
/// to judge a dead holder, and far more than the repair and the writes themselves take here.
const GET_THROUGH: Duration = Duration::from_secs(20);

/// The indexes under test: those that claim recovery built as the writers build them (8-byte
/// values: Dolphin claims it for one-line cells only).
fn indexes() -> Vec<&'static str> {
    dmindex_catalog::INDEXES
        .iter()
        .filter(|e| (e.recovers_client_crashes)(&index_config()))
        .map(|e| e.name)
        .collect()
}

/// The configuration every process of a script builds or opens the index with.
fn index_config() -> IndexConfig {
    IndexConfig { expected_items: KEYS, ..IndexConfig::default() }
}

/// Runs `$f::<I>()` for the index type the catalog names `$name`.
macro_rules! with_index {
    ($name:expr, $f:ident) => {
        match $name {
            "chime" => $f::<dmindex_chime::Chime>(),
            "sherman" => $f::<dmindex_chime::Sherman>(),
            "sephash" => $f::<dmindex_sephash::SepHash>(),
            "race" => $f::<dmindex_race::Race>(),
            "race-sephash" => $f::<dmindex_race::RaceSepHash>(),
            "plush" => $f::<dmindex_plush::Plush>(),
            "clevel" => $f::<dmindex_clevel::CLevel>(),
            "smart" => $f::<dmindex_smart::Smart>(),
            "smart-opt" => $f::<dmindex_smart::SmartOpt>(),
            "dolphin" => $f::<dmindex_dolphin::Dolphin>(),
            "marlin" => $f::<dmindex_marlin::Marlin>(),
            "rolex" => $f::<dmindex_rolex::Rolex>(),
            "ref" => $f::<dmindex_reference::LockedShards>(),
            other => panic!("{other} claims client-crash recovery: name its type in with_index!"),
        }
    };
}

/// Two writers killed per index: the normal run.
#[test]
fn killed_writers_leave_nothing_held_and_lose_no_acknowledged_write() {
    if std::env::var(ROLE).is_ok() {
        return child();
    }
    for name in indexes() {
        eprintln!("{}", Script::run(name, 2).summary());
    }
}

/// Ten writers killed per index (about 15 s an index; `cargo test --features ucx --test
/// ucx_client_crash -- --ignored`).
#[test]
#[ignore = "ten kills per index, a few minutes in all"]
fn ten_killed_writers_per_index() {
    for name in indexes() {
        eprintln!("{}", Script::run(name, 10).summary());
    }
}

/// What one index's script measured.
struct Script {
    name: &'static str,
    kills: u32,
    /// The clients' lease, ms.
    lease_ms: f64,
    /// Writer 1's time to get through (its read pass and sweep, from its start), ms: it follows
    /// the loader, which ended cleanly, so nothing is left held.
    baseline_ms: f64,
    /// Per writer after a kill: ms to get through, and the members it fenced on the way.
    after_kill: Vec<(f64, u64)>,
    /// Writers that were killed with a write in flight.
    in_flight: u32,
    /// Keys acknowledged by the end (the loaded ones and those the killed writers added).
    keys: usize,
}

impl Script {
    fn run(name: &'static str, kills: u32) -> Script {
        let dir = std::env::temp_dir().join(format!("dmx-crash-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, TOKEN).unwrap();
        let mut mns = Vec::new();
        let mut addrs = Vec::new();
        for id in 0..2 {
            let (child, addr) = memnode(id, &token, &dir);
            mns.push(child);
            addrs.push(addr);
        }
        let list = addrs.join(",");
        let mut s = Script {
            name,
            kills,
            lease_ms: 0.0,
            baseline_ms: 0.0,
            after_kill: Vec::new(),
            in_flight: 0,
            keys: 0,
        };
        // Per key, what the latest process acknowledged last, and what it had in flight.
        let mut acked: HashMap<u64, u64> = HashMap::new();
        let mut pending: HashMap<u64, u64> = HashMap::new();
        let loader = Writer::start(name, &list, 0, "load", &dir);
        let lines = loader.finish(Duration::from_secs(60));
        apply(&lines, &mut acked, &mut pending);
        assert_eq!(acked.len() as u64, KEYS, "{name}: the loader wrote every key");
        for p in 1..=kills + 1 {
            let last = p == kills + 1;
            // The keys it reads first: every key some process acknowledged a write of.
            let ids: Vec<String> = acked.keys().map(|k| format!("{k:x}")).collect();
            std::fs::write(dir.join("keys"), ids.join("\n")).unwrap();
            let mut w = Writer::start(name, &list, p, if last { "last" } else { "write" }, &dir);
            let t0 = Instant::now();
            let mut seen = Vec::new();
            let got_through = w.wait_for("SWEPT", GET_THROUGH, &mut seen);
            let through = t0.elapsed();
            let lines = if last {
                w.finish(Duration::from_secs(60))
            } else {
                // A different instant after the sweep for each process.
                std::thread::sleep(Duration::from_millis(30 + 97 * p as u64 % 250));
                w.kill()
            };
            seen.extend(lines);
            if got_through.is_none() {
                panic!(
                    "{name}: writer {p} did not get through within {GET_THROUGH:?}\n{}",
                    logs(&dir)
                );
            }
            let through_ms = through.as_secs_f64() * 1e3;
            // The read pass saw, for every key, the latest acknowledged write or the one in
            // flight.
            let mut read = 0;
            for l in &seen {
                let Some((k, v)) = l.strip_prefix("= ").and_then(pair) else { continue };
                let ok = acked.get(&k) == Some(&v) || pending.get(&k) == Some(&v);
                assert!(
                    ok,
                    "{name}: writer {p} read key {k} = {v:#x}; writer {} acknowledged {:#x?} last \
                     and had {:#x?} in flight",
                    p - 1,
                    acked.get(&k),
                    pending.get(&k)
                );
                read += 1;
            }
            assert_eq!(read, acked.len(), "{name}: writer {p} read every key");
            let said = |what: &str| {
                let n = seen.iter().find_map(|l| l.strip_prefix(what)).map(str::parse::<u64>);
                n.unwrap_or_else(|| panic!("{name}: writer {p} said no {what:?}")).unwrap()
            };
            s.lease_ms = said("LEASE ") as f64 / 1e6;
            let fences = said("FENCES ");
            if p == 1 {
                s.baseline_ms = through_ms;
            } else {
                // Each dead member a waiter meets costs it three leases of its own clock before
                // it fences, and the waits of one writer's coroutines may follow one another;
                // the repair itself is a few round trips.
                // Its read pass grows with the keys written so far.
                let keys = (read as f64 / KEYS as f64).max(1.0);
                let bound =
                    2.0 * keys * s.baseline_ms + (fences + 1) as f64 * 4.0 * s.lease_ms + 500.0;
                assert!(
                    through_ms <= bound,
                    "{name}: writer {p} took {through_ms:.0} ms to get through (fenced {fences}, \
                     baseline {:.0} ms)",
                    s.baseline_ms
                );
                s.after_kill.push((through_ms, fences));
            }
            pending.clear();
            apply(&seen, &mut acked, &mut pending);
            s.in_flight += u32::from(!pending.is_empty());
            if last {
                assert!(seen.iter().any(|l| l == "READ BACK"), "{name}: {seen:?}");
            }
        }
        s.keys = acked.len();
        for m in &mut mns {
            assert!(m.try_wait().unwrap().is_none(), "{name}: a memnode died\n{}", logs(&dir));
            let _ = Command::new("kill").arg("-INT").arg(m.id().to_string()).status();
            let _ = m.wait();
        }
        let _ = std::fs::remove_dir_all(&dir);
        s
    }

    fn summary(&self) -> String {
        let mut t: Vec<f64> = self.after_kill.iter().map(|a| a.0).collect();
        t.sort_by(f64::total_cmp);
        let fences: u64 = self.after_kill.iter().map(|a| a.1).sum();
        let repairing: Vec<f64> = self.after_kill.iter().filter(|a| a.1 > 0).map(|a| a.0).collect();
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        format!(
            "{}: {} of {} killed writers ({COROUTINES} coroutines each) had a write in flight; \
             the next writer got through (read every key, {KEYS} to {}, and wrote {KEYS}) in \
             median {:.0} ms, max {:.0} ms (baseline with no kill {:.0} ms; lease {:.0} ms); \
             {fences} members fenced by {} of the {} writers, which took up to {:.0} ms",
            self.name,
            self.in_flight,
            self.kills,
            self.keys,
            t[(t.len() - 1) / 2],
            max(&t),
            self.baseline_ms,
            self.lease_ms,
            repairing.len(),
            t.len(),
            max(&repairing)
        )
    }
}

/// Folds a writer's `>` and `<` lines into what is acknowledged and in flight per key.
fn apply(lines: &[String], acked: &mut HashMap<u64, u64>, pending: &mut HashMap<u64, u64>) {
    for l in lines {
        if let Some((k, v)) = l.strip_prefix("> ").and_then(pair) {
            pending.insert(k, v);
        } else if let Some((k, v)) = l.strip_prefix("< ").and_then(pair) {
            assert_eq!(pending.remove(&k), Some(v), "acknowledged what it started: {l}");
            acked.insert(k, v);
        }
    }
}

/// `key value`, both hexadecimal.
fn pair(s: &str) -> Option<(u64, u64)> {
    let (k, v) = s.split_once(' ')?;
    Some((u64::from_str_radix(k, 16).ok()?, u64::from_str_radix(v, 16).ok()?))
}

/// A memnode process on an ephemeral loopback port, and its address.
fn memnode(id: u16, token: &Path, dir: &Path) -> (Child, String) {
    use std::io::{BufRead, BufReader};
    let log = std::fs::File::create(dir.join(format!("memnode{id}.log"))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dmindex"))
        .env("UCX_TLS", "tcp")
        .args(["memnode", "--listen", "127.0.0.1:0", "--size", "256m", "--id", &id.to_string()])
        .arg("--token-file")
        .arg(token)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (child, line.trim().rsplit(' ').next().unwrap().to_string())
}

/// A writer process and the lines it marked.
struct Writer {
    child: Child,
    lines: Receiver<String>,
}

impl Writer {
    fn start(name: &str, memnodes: &str, process: u32, mode: &str, dir: &Path) -> Writer {
        let log = std::fs::File::create(dir.join(format!("writer{process}.log"))).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(ROLE, mode)
            .env("DMX_INDEX", name)
            .env("DMX_MEMNODES", memnodes)
            .env("DMX_PROCESS", process.to_string())
            .env("DMX_KEYS_FILE", dir.join("keys"))
            .env("UCX_TLS", "tcp")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let lines = marked_lines(child.stdout.take().unwrap());
        Writer { child, lines }
    }

    /// Collects lines until one starts with `what` (returned) or `within` passes (`None`).
    fn wait_for(&mut self, what: &str, within: Duration, into: &mut Vec<String>) -> Option<String> {
        let end = Instant::now() + within;
        // Ends at `what`, at the deadline, or when the process closed its output.
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(what) => {
                    into.push(l.clone());
                    return Some(l);
                }
                Ok(l) => into.push(l),
                Err(_) => return None,
            }
        }
    }

    /// SIGKILL, then every line it wrote before it died.
    fn kill(mut self) -> Vec<String> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.lines.iter().collect()
    }

    /// Waits for a writer that ends on its own; every line; panics if it failed.
    fn finish(mut self, within: Duration) -> Vec<String> {
        let mut out = Vec::new();
        let done = self.wait_for("DONE", within, &mut out);
        let status = self.child.wait().unwrap();
        assert!(done.is_some() && status.success(), "the writer failed ({status}): {out:?}");
        out
    }
}

/// The logs of every process of a script, for a failure's message.
fn logs(dir: &Path) -> String {
    let mut out = String::new();
    let mut files: Vec<_> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.sort();
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "log")) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out += &format!("--- {}\n", f.display());
        for l in &lines[lines.len().saturating_sub(15)..] {
            out += &format!("{l}\n");
        }
    }
    out
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// One marked line, in one `write(2)`: what the kernel took is the test's even if this process
/// is killed right after (print! would be captured by the test harness).
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::with_capacity(48);
    writeln!(buf, "DMX {line}").unwrap();
    out.write_all(&buf).unwrap();
    out.flush().unwrap();
}

fn child() {
    with_index!(env("DMX_INDEX").as_str(), writer)
}

fn key(k: u64) -> [u8; 8] {
    (k + 1).to_be_bytes()
}

/// The `n`-th new key coroutine `j` of `process` inserts: the keys grow the index while
/// processes are killed (splits, merges and other restructuring, whose locks a killed process
/// may hold), 256 consecutive ones sharing their first seven bytes (a Dolphin leaf's prefix).
fn new_key(process: u64, j: u64, n: u64) -> u64 {
    1 << 56 | process << 32 | j << 24 | n
}

/// A value no other write of the script writes: process, coroutine and sequence number.
fn value(process: u64, coroutine: u64, seq: u64) -> u64 {
    process << 48 | coroutine << 40 | seq
}

/// This process as a writer (see the crate docs): `load` creates the index and writes every key
/// once; `write` reads, sweeps and writes until it is killed; `last` reads, sweeps and reads
/// back.
fn writer<I: PointIndex<UcxTransport>>() {
    let mode = env(ROLE);
    let process: u64 = env("DMX_PROCESS").parse().unwrap();
    let addrs: Vec<String> = env("DMX_MEMNODES").split(',').map(String::from).collect();
    let options = UcxOptions {
        chunk_size: 1 << 20,
        timeout: Duration::from_secs(5),
        ..UcxOptions::default()
    };
    let f = UcxFabric::connect_with(&addrs, TOKEN.as_bytes(), &options).unwrap();
    let icfg = index_config();
    let setup = f.client(0).unwrap();
    if mode == "load" {
        run_tasks([I::create(&setup, &icfg, 0)]).remove(0).unwrap();
    }
    let idx = run_tasks([I::open(&setup, &icfg, 0)]).remove(0).unwrap();
    let clients: Vec<Client<UcxTransport>> =
        (0..COROUTINES).map(|_| f.client(0).unwrap()).collect();
    let mine = |j: u64| (j..KEYS).step_by(COROUTINES as usize);
    if mode != "load" {
        let text = std::fs::read_to_string(env("DMX_KEYS_FILE")).unwrap();
        let keys: Vec<u64> = text.lines().map(|l| u64::from_str_radix(l, 16).unwrap()).collect();
        let keys = &keys;
        run_tasks(clients.iter().zip(0..).map(|(c, j)| {
            let idx = &idx;
            async move {
                for &k in keys.iter().skip(j as usize).step_by(COROUTINES as usize) {
                    let v = idx.search(c, &key(k)).await.unwrap().expect("every key was written");
                    say(format_args!(
                        "= {k:x} {:x}",
                        u64::from_le_bytes(v[..8].try_into().unwrap())
                    ));
                }
            }
        }));
    }
    let swept = std::cell::Cell::new(0);
    let fences = || clients.iter().chain([&setup]).map(|c| c.stats().fences()).sum::<u64>();
    run_tasks(clients.iter().zip(0..).map(|(c, j)| {
        let (idx, swept, mode, fences) = (&idx, &swept, &mode, &fences);
        async move {
            let (mut seq, mut round) = (0, 0);
            // Ends after one round unless this process writes until it is killed.
            loop {
                for k in mine(j) {
                    // After the sweep, each update of its keys is followed by a new key.
                    let new = (round > 0).then(|| new_key(process, j, seq));
                    for k in [k].into_iter().chain(new) {
                        seq += 1;
                        let v = value(process, j, seq);
                        say(format_args!("> {k:x} {v:x}"));
                        idx.insert(c, &key(k), &v.to_le_bytes()).await.unwrap();
                        say(format_args!("< {k:x} {v:x}"));
                    }
                }
                round += 1;
                if round == 1 {
                    swept.set(swept.get() + 1);
                    if swept.get() == COROUTINES {
                        say(format_args!("SWEPT"));
                        say(format_args!("FENCES {}", fences()));
                        say(format_args!("LEASE {}", c.transport().lease_ns()));
                    }
                }
                if mode != "write" {
                    return;
                }
            }
        }
    }));
    if mode == "last" {
        // Every key holds this process's own write: nothing a killed process had in flight
        // landed after it.
        let c = &clients[0];
        for k in 0..KEYS {
            let j = k % COROUTINES;
            let v = run_tasks([idx.search(c, &key(k))]).remove(0).unwrap().unwrap();
            let want = value(process, j, 1 + (k - j) / COROUTINES);
            assert_eq!(v, want.to_le_bytes(), "key {k}");
        }
        say(format_args!("READ BACK"));
    }
    say(format_args!("DONE"));
}
