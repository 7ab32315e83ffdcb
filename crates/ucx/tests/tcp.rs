//! The `ucx` transport over TCP: no one-sided lane, so verbs are messages the memnode executes.
#![cfg(feature = "ucx")]

mod common;

#[test]
fn conformance_over_tcp() {
    common::use_tls("tcp");
    common::conformance_suite(false);
}

#[test]
fn verbs_share_messages_over_tcp() {
    common::use_tls("tcp");
    common::a_threads_verbs_share_messages();
}

#[test]
fn the_last_posted_verb_goes_out_over_tcp() {
    common::use_tls("tcp");
    common::the_last_posted_verb_goes_out();
}

#[test]
fn bad_connections_over_tcp() {
    common::use_tls("tcp");
    common::bad_connections_are_refused();
}

#[test]
fn abandoned_verbs_over_tcp() {
    common::use_tls("tcp");
    common::abandoned_verbs_do_not_confuse_later_ones();
}

#[test]
fn lost_memnode_over_tcp() {
    common::use_tls("tcp");
    common::lost_memnode_is_an_error();
}

#[test]
fn index_services_over_tcp() {
    common::use_tls("tcp");
    common::index_services_are_served();
}

#[test]
fn peers_over_tcp() {
    common::use_tls("tcp");
    common::memnodes_call_their_peers();
}

#[test]
fn restart_over_tcp() {
    common::use_tls("tcp");
    common::restarted_memnode_needs_reconnect();
}

#[test]
fn timeouts_over_tcp() {
    common::use_tls("tcp");
    common::slow_calls_time_out();
}

#[test]
fn fencing_over_tcp() {
    common::use_tls("tcp");
    common::fence::a_fenced_member_writes_nothing_after_the_fence_returns();
}

#[test]
fn forged_verbs_over_tcp() {
    common::use_tls("tcp");
    common::forged_verbs_are_refused();
}

/// One source holding as many unauthenticated control connections as it can open leaves
/// room for clients from other addresses: a process on 127.0.0.2 opens 100 and keeps them
/// idle (the memnode holds at most its per-source share of them in their bootstrap, and closes
/// the rest at once), and ten clients from 127.0.0.1 still connect and are served while it
/// does. With one cap for every source, the flood took all 64 slots and kept every new client
/// out until the bootstraps' deadline.
#[test]
fn a_flood_from_one_source_leaves_room_for_others_over_tcp() {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::Fabric;
    use dmindex_ucx::transport::UcxFabric;
    use socket2::{Domain, Socket, Type};

    common::use_tls("tcp");
    let mn = common::memnode(0, 32 << 20);
    let to: std::net::SocketAddr = mn.addr.parse().unwrap();
    let from: std::net::SocketAddr = "127.0.0.2:0".parse().unwrap();
    let flood: Vec<Socket> = (0..100)
        .map(|_| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            s.bind(&from.into()).expect("a second loopback address");
            s.connect(&to.into()).unwrap();
            s
        })
        .collect();
    // Let the memnode accept them all (turning away those past the source's share).
    std::thread::sleep(std::time::Duration::from_millis(300));
    for i in 0..10u64 {
        let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), common::TOKEN, 1 << 20)
            .unwrap_or_else(|e| panic!("client {i} kept out by a flood from another address: {e}"));
        let c = f.client(0).unwrap();
        let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
        run_tasks([c.write(a, &i.to_le_bytes())]).remove(0).unwrap();
        assert_eq!(run_tasks([c.read_word(a)]).remove(0).unwrap(), i);
    }
    drop(flood);
}

#[test]
fn unkeyed_rma_over_tcp() {
    common::use_tls("tcp");
    common::unkeyed_rma_is_refused();
}

/// UCX's own log goes to standard error, so a command's standard output holds only what it
/// prints itself (`bench --json`): this test runs again as a child that makes UCX warn (an
/// unkeyed GET to a memnode of its own, which UCX logs as a message with no handler) and reads
/// the child's two streams apart.
#[test]
fn ucx_logs_to_stderr_over_tcp() {
    const ROLE: &str = "DMINDEX_UCX_LOG_CHILD";
    if std::env::var_os(ROLE).is_some() {
        common::use_tls("tcp");
        let mn = common::memnode(0, 8 << 20);
        let (_, welcome) = dmindex_ucx::control::ControlConn::connect(
            &mn.addr,
            common::TOKEN,
            std::time::Duration::from_secs(5),
        )
        .unwrap();
        let _ = common::unkeyed_rma(&welcome.worker_address, welcome.base);
        println!("CHILD DONE");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "ucx_logs_to_stderr_over_tcp", "--nocapture", "--test-threads", "1"])
        .env(ROLE, "1")
        .env_remove("UCX_LOG_FILE")
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("CHILD DONE"), "{stdout}");
    assert!(stderr.contains("but no handler installed"), "UCX warned on stderr: {stderr}");
    assert!(!stdout.contains("UCX "), "UCX wrote to stdout: {stdout}");
}

/// UCX's own TCP listener is bounded like the control port. A memnode limited to 1024
/// descriptors (hard limit included) takes 3000 raw connections to its UCX port from 127.0.0.2
/// and 40 from 127.0.0.3, none of which ever sends a byte: the flood holds at most its
/// source's share (the rest are closed at once, and its source's new connections refused by
/// the listener), a client from 127.0.0.1 connects and is served during the flood, the 40
/// silent connections are closed 5 s after they were opened (plus the guard's period), the
/// memnode's descriptors stay well under its limit, and once the flood goes a new client is
/// served. Without the guard, UCX accepted about 1010 of them, its listener failed on the
/// descriptor limit and closed for good, and every later client was refused.
#[test]
fn a_flood_of_raw_connections_to_ucx_leaves_it_listening_over_tcp() {
    use common::flood::{self, FdPeak, Flood, MEMNODE_FD_LIMIT};
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    const TEST: &str = "a_flood_of_raw_connections_to_ucx_leaves_it_listening_over_tcp";
    const ROLE: &str = "DMINDEX_UCX_FLOOD_MEMNODE";
    if std::env::var_os(ROLE).is_some() {
        return flood::memnode_until_stdin_closes("127.0.0.1:0");
    }
    common::use_tls("tcp");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
        .env(ROLE, "1")
        .env("UCX_TLS", "tcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut mn = flood::with_fd_limit(&mut cmd).spawn().unwrap();
    // The memnode's log, kept and echoed.
    let (log_tx, log_rx) = std::sync::mpsc::channel::<String>();
    let stderr = mn.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("  | {line}");
            let _ = log_tx.send(line.clone());
            all.push(line);
        }
        all
    });
    let ready = dmindex_ucx::testhosts::marked_lines(mn.stdout.take().unwrap());
    let line = ready.recv_timeout(Duration::from_secs(60)).expect("the memnode starts");
    let addr = line.rsplit(' ').next().unwrap().to_string();
    let pid = mn.id();
    let ucx = match flood::ucx_listeners_of(pid, addr.parse().unwrap())[..] {
        [one] => one,
        ref other => panic!("UCX listens on {other:?}"),
    };
    let named = std::iter::from_fn(|| log_rx.recv_timeout(Duration::from_secs(5)).ok())
        .find_map(|l| flood::ucx_listener_in(&l));
    assert_eq!(named, Some(ucx), "the memnode's start-up line names UCX's listener");
    let baseline = flood::fd_count(pid).unwrap();
    let peak = FdPeak::watch(pid);
    let mut silent = Flood::open("127.0.0.3:0".parse().unwrap(), ucx, 40);
    assert_eq!(silent.established(Duration::from_secs(5)), 40);
    let t0 = Instant::now();
    let mut flood = Flood::open("127.0.0.2:0".parse().unwrap(), ucx, 3000);
    eprintln!("3000 connections requested in {:?}", t0.elapsed());
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    flood::client_is_served(&addr, 1).expect("a client from another address during the flood");
    eprintln!("a client was served during the flood in {:?}", t.elapsed());

    silent.watch_ends(Instant::now() + Duration::from_secs(7));
    let ended = silent.lifetimes();
    eprintln!("silent connections closed after {:?}", (ended.iter().min(), ended.iter().max()));
    assert_eq!(ended.len(), 40, "every silent connection was closed: {ended:?}");
    for d in &ended {
        assert!(*d >= Duration::from_millis(4900), "closed before its deadline: {ended:?}");
        assert!(*d <= Duration::from_millis(6500), "closed late: {ended:?}");
    }
    flood.watch_ends(Instant::now());
    let flood_ended = flood.lifetimes().len();
    assert!(flood_ended >= 64, "the memnode closed {flood_ended} of the flood's connections");
    assert!(mn.try_wait().unwrap().is_none(), "the memnode is up");
    drop((flood, silent));
    flood::client_is_served(&addr, 2).expect("a client after the flood");
    let deadline = Instant::now() + Duration::from_secs(5);
    while flood::fd_count(pid).unwrap() > baseline + 16 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (after, peak) = (flood::fd_count(pid).unwrap(), peak.peak());
    eprintln!("memnode descriptors: {baseline} before, {peak} at most, {after} after the flood");
    assert!(after <= baseline + 16, "UCX closed the connections the guard ended: {after}");
    assert!(peak + 64 <= MEMNODE_FD_LIMIT as usize, "descriptors ran close to the limit: {peak}");
    drop(mn.stdin.take());
    assert!(mn.wait().unwrap().success());
    let log = log.join().unwrap();
    let has = |s: &str| log.iter().any(|l| l.contains(s));
    assert!(has("sent no UCX handshake within 5s"), "silent connections were logged");
    assert!(has("refuses new connections from 127.0.0.2"), "the gate was logged");
    assert!(!has("is gone") && !has("accept() failed"), "UCX's listener stayed");
    assert!(log.len() < 100, "{} lines of log for one flood", log.len());
}
