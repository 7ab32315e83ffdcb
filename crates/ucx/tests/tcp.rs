//! The `ucx` transport over TCP: no one-sided lane, so verbs are messages the memnode executes.
#![cfg(feature = "ucx")]

mod common;

#[test]
fn conformance_over_tcp() {
    common::use_tls("tcp");
    common::conformance_suite(false);
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
