//! HiStore over UCX on a small cluster of test hosts: four memnodes (a data server, the primary
//! and two backups, with peer links) and a client, each in its own network namespace joined to
//! the others by veth links (`dmindex_ucx::testhosts`), UCX over TCP on those links. This test binary plays
//! every part: run as the test, it builds the hosts and starts itself in each namespace as a
//! memnode or as the client (chosen by an environment variable), then drives the failures.
//!
//! # Script
//!
//! 1. The client loads the store and runs a mix of searches, updates, inserts, deletes and
//!    scans on four tasks, every operation recorded. Two more handles, B and C, read once and then stay idle:
//!    they keep the view from before the failures.
//! 2. **Partition**: the primary's link is cut. Its requests and one-sided reads time out, the
//!    clients drop it from the view and backup 1 becomes the temporary primary; writes go on.
//! 3. **Heal**: the old primary is back, alive, still holding the old view. B writes through it
//!    (the view B holds names it primary): it logs the write but cannot ship it — both backups
//!    have adopted the next view and refuse — so it never acknowledges it, and B's retry lands in
//!    the current view. C reads through the old primary's table and validates against the view
//!    word, so it cannot return what that stale table says.
//! 4. The client rebuilds the healed node in place (its old replica retired) and hands it the
//!    primary role back; then the primary is **killed** (SIGKILL), restarted empty on its address
//!    a second later, and rebuilt again while the tasks go on.
//! 5. The tasks stop, every key is read once more, and the whole history must be linearizable:
//!    no acknowledged write was lost across the partition, the heal, the kill or the rebuilds.
//!
//! Needs root and iproute2 (it skips, saying so, without them); about 20 s.
#![cfg(feature = "ucx")]

use std::cell::Cell;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmindex_check::History;
use dmindex_fabric::exec::{run_tasks, yield_now};
use dmindex_fabric::Fabric;
use dmindex_histore::HiStore;
use dmindex_index::recorded::Recorder;
use dmindex_index::{mn_services, IndexConfig, Ordered, PointIndex};
use dmindex_ucx::server::{serve, MemnodeConfig};
use dmindex_ucx::testhosts::{marked_lines, Net};
use dmindex_ucx::transport::{UcxFabric, UcxOptions, UcxTransport};

const TEST: &str = "partition_heal_and_kill_9_over_ucx_lose_nothing";
const ROLE: &str = "DMINDEX_HISTORE_TEST_ROLE";
const TOKEN: &[u8] = b"cluster-test-token";
const HOSTS: [&str; 5] = ["mn0", "mn1", "mn2", "mn3", "cn"];
/// The primary of the store's only group.
const PRIMARY: usize = 1;
const KEYS: u64 = 2000;
/// Clients give up on a memnode after this long without an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Memnodes give up on a peer after this long.
const PEER_TIMEOUT: Duration = Duration::from_millis(500);

#[test]
fn partition_heal_and_kill_9_over_ucx_lose_nothing() {
    match std::env::var(ROLE).as_deref() {
        Ok("memnode") => return memnode_role(),
        Ok("client") => return client_role(),
        _ => {}
    }
    if !Net::available() {
        eprintln!("SKIPPED {TEST}: it makes network namespaces, which needs root and iproute2");
        return;
    }
    let net = Net::create(&HOSTS).expect("test hosts");
    let logs = std::env::temp_dir().join(format!("dmx-histore-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    let addrs: Vec<String> = (0..4).map(|i| format!("{}:7000", Net::addr(i))).collect();
    // Killed when the test ends, failed or not, before its hosts go.
    let mut mns = Killed((0..4).map(|i| memnode(&net, i, &addrs, &logs)).collect());
    let (client, mut to_client, from_client) = start_client(&net, &addrs, &logs);
    let mut client = Killed(vec![client]);
    let fail = |what: &str| -> ! {
        panic!("{what}\n{}", tails(&logs));
    };
    let expect = |what: &str, within: Duration| -> String {
        match from_client.recv_timeout(within) {
            Ok(l) if l.starts_with(what) => l,
            Ok(l) => fail(&format!("the client said {l:?}, not {what}")),
            Err(_) => fail(&format!("the client did not say {what} within {within:?}")),
        }
    };
    let mut tell = |what: &str| {
        writeln!(to_client, "{what}").unwrap();
        to_client.flush().unwrap();
    };
    expect("READY", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    net.cut(HOSTS[PRIMARY]).unwrap();
    // Long enough for the clients to time out on the primary and change the view.
    std::thread::sleep(4 * CLIENT_TIMEOUT);
    net.heal(HOSTS[PRIMARY]).unwrap();
    tell("HEALED");
    expect("REBUILT", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    mns.0[PRIMARY].kill().unwrap();
    mns.0[PRIMARY].wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    mns.0[PRIMARY] = memnode(&net, PRIMARY, &addrs, &logs);
    tell("RESTARTED");
    let verdict = expect("VERDICT", Duration::from_secs(120));
    let status = client.0[0].wait().unwrap();
    eprintln!("{verdict}");
    if !status.success() || !verdict.contains("linearizable") {
        fail(&format!("the client failed ({status}): {verdict}"));
    }
    drop(mns);
    let _ = std::fs::remove_dir_all(&logs);
}

/// Processes this test started, killed (and reaped) when dropped: a failing test leaves none
/// running on its hosts.
struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// This binary as memnode `id` on its host, once it serves.
fn memnode(net: &Net, id: usize, addrs: &[String], logs: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("mn{id}.log")))
        .unwrap();
    let mut child = net
        .this_test(HOSTS[id], TEST)
        .unwrap()
        .env(ROLE, "memnode")
        .env("DMX_ID", id.to_string())
        .env("DMX_PEERS", addrs.join(","))
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", "eth0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let lines = marked_lines(child.stdout.take().unwrap());
    match lines.recv_timeout(Duration::from_secs(30)) {
        Ok(l) if l.starts_with("MEMNODE READY") => child,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("memnode {id} did not start ({other:?})\n{}", tails(logs))
        }
    }
}

/// This binary as the client on its host: its stdin, and the lines it marks on its stdout.
fn start_client(net: &Net, addrs: &[String], logs: &Path) -> (Child, ChildStdin, Receiver<String>) {
    let log = std::fs::File::create(logs.join("client.log")).unwrap();
    let mut child = net
        .this_test("cn", TEST)
        .unwrap()
        .env(ROLE, "client")
        .env("DMX_MEMNODES", addrs.join(","))
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", "eth0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = marked_lines(child.stdout.take().unwrap());
    (child, stdin, lines)
}

/// The end of every log, for a failure's message.
fn tails(logs: &Path) -> String {
    let mut out = String::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(logs)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
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

/// A memnode running HiStore's service, until it is killed.
fn memnode_role() {
    let id: u16 = env("DMX_ID").parse().unwrap();
    let peers: Vec<String> = env("DMX_PEERS").split(',').map(String::from).collect();
    let cfg = MemnodeConfig {
        listen: peers[id as usize].clone(),
        size: 256 << 20,
        token: TOKEN.to_vec(),
        id,
        cores: 4,
        services: Some(mn_services(4, dmindex_histore::SERVICES).unwrap()),
        peers,
        peer_timeout: PEER_TIMEOUT,
    };
    let stop = Arc::new(AtomicBool::new(false));
    serve(&cfg, stop, |a| println!("DMX MEMNODE READY {a}")).unwrap();
}

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn stat(ix: &HiStore, name: &str) -> u64 {
    let s = <HiStore as PointIndex<UcxTransport>>::stats(ix);
    s.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).unwrap()
}

/// The client: load, the workload tasks and the script task on one thread, every operation
/// recorded; it ends by printing the history's verdict.
fn client_role() {
    let addrs: Vec<String> = env("DMX_MEMNODES").split(',').map(String::from).collect();
    let options =
        UcxOptions { chunk_size: 1 << 20, timeout: CLIENT_TIMEOUT, ..UcxOptions::default() };
    let f = UcxFabric::connect_with(&addrs, TOKEN, &options).unwrap();
    let (commands_tx, commands) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            let _ = commands_tx.send(line);
        }
    });
    let setup = f.client(0).unwrap();
    let cfg = IndexConfig { expected_items: 2 * KEYS, ..IndexConfig::default() };
    let open = |cn| run_tasks([<HiStore as PointIndex<_>>::open(&setup, &cfg, cn)]).remove(0);
    run_tasks([<HiStore as PointIndex<_>>::create(&setup, &cfg, 0)]).remove(0).unwrap();
    let (a, b, c) = (open(0).unwrap(), open(1).unwrap(), open(2).unwrap());
    let history = History::new();
    let start = Instant::now();
    let now = move || start.elapsed().as_nanos() as u64;
    let rec = |client: u32| Recorder { now: &now, history: Some(&history), client, value_size: 8 };
    run_tasks((0..4u64).map(|t| {
        let (f, a, rec) = (&f, &a, rec(t as u32));
        async move {
            let cl = f.client(0).unwrap();
            for n in (1 + t..=KEYS).step_by(4) {
                rec.insert(a, &cl, &key(n), &rec.value(n)).await.unwrap();
            }
        }
    }));
    let (rb, rc) = (rec(10), rec(11));
    let (cb, cc) = (f.client(1).unwrap(), f.client(2).unwrap());
    run_tasks([rb.search(&b, &cb, &key(1 << 40)), rc.search(&c, &cc, &key(1 << 40))]);
    println!("DMX READY");
    let stop = Cell::new(false);
    let done = Cell::new(0u64);
    let failed = Cell::new(0u64);
    let workload = (0..4u32).map(|t| {
        let (f, a, rec, stop, done, failed) = (&f, &a, rec(100 + t), &stop, &done, &failed);
        async move {
            let cl = f.client(0).unwrap();
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
            let mut seq = 1 << 32;
            while !stop.get() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(1 + x % (KEYS + KEYS / 4));
                seq += 1;
                let r = match x >> 59 {
                    0..=14 => rec.search(a, &cl, &k).await.map(drop),
                    15..=24 => rec.update(a, &cl, &k, &rec.value(seq)).await.map(drop),
                    25..=28 => rec.insert(a, &cl, &k, &rec.value(seq)).await,
                    29..=30 => rec.delete(a, &cl, &k).await.map(drop),
                    // Scans go to a backup, at the primary's cut.
                    _ => rec
                        .scan::<_, _, Ordered>(a, &cl, &k, 1 + (x >> 8) as usize % 8)
                        .await
                        .map(drop),
                };
                match r {
                    Ok(()) => done.set(done.get() + 1),
                    Err(e) => {
                        failed.set(failed.get() + 1);
                        eprintln!("task {t}: {e}");
                        yield_now().await;
                    }
                }
            }
        }
    });
    let script = async {
        let wait_for = |what: &'static str| {
            let commands = &commands;
            async move {
                loop {
                    match commands.try_recv() {
                        Ok(l) if l == what => return,
                        Ok(l) => panic!("told {l:?} while waiting for {what}"),
                        Err(mpsc::TryRecvError::Empty) => yield_now().await,
                        Err(mpsc::TryRecvError::Disconnected) => panic!("the test went away"),
                    }
                }
            }
        };
        let done = &done;
        let progress = |since: u64, n: u64| async move {
            while done.get() < since + n {
                yield_now().await;
            }
        };
        wait_for("HEALED").await;
        assert!(stat(&a, "failovers") >= 1, "the partition changed the view");
        let mark = done.get();
        // B still holds the view that names the old primary, which is alive again.
        let stale_before = stat(&b, "stale_refusals");
        // A key of its own (the workload's keys come and go).
        let mine = key(1 << 40);
        rb.insert(&b, &cb, &mine, &rb.value(7)).await.unwrap();
        assert!(
            stat(&b, "stale_refusals") > stale_before,
            "the old primary refused B's write (it could not ship it to the backups)"
        );
        eprintln!(
            "B's write through the old primary was refused, then acknowledged in the new view"
        );
        let got = rc.search(&c, &cc, &mine).await.unwrap();
        assert_eq!(got, Some(rb.value(7)), "C reads B's write, not the old primary's table");
        progress(mark, 200).await;
        let monitor = f.client(0).unwrap();
        a.recover_memory_node(&monitor, PRIMARY as u16).await.expect("rebuilt after the heal");
        println!("DMX REBUILT");
        let mark = done.get();
        wait_for("RESTARTED").await;
        assert!(done.get() > mark, "operations went on while the primary was down");
        a.recover_memory_node(&monitor, PRIMARY as u16).await.expect("rebuilt after the kill");
        progress(done.get(), 500).await;
        stop.set(true);
    };
    let mut tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> =
        workload.map(|w| Box::pin(w) as _).collect();
    tasks.push(Box::pin(script));
    run_tasks(tasks);
    let reader = rec(200);
    for n in 1..=KEYS + KEYS / 4 {
        run_tasks([reader.search(&a, &setup, &key(n))]).remove(0).unwrap();
    }
    let (failovers, rebuilds) = (stat(&a, "failovers"), stat(&a, "rebuilds"));
    assert!(failovers >= 2, "a view change for the partition and one for the kill: {failovers}");
    assert!(rebuilds >= 2, "the healed node and the restarted one rebuilt: {rebuilds}");
    match history.check() {
        Ok(s) => println!(
            "DMX VERDICT linearizable: {} operations ({} never answered, {} failed), {} keys, \
             {failovers} view changes, {rebuilds} rebuilds",
            s.ops,
            s.pending,
            failed.get(),
            s.keys
        ),
        Err(v) => println!("DMX VERDICT NOT linearizable: {}", v.to_string().replace('\n', " | ")),
    }
}
