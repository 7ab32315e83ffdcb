//! Over a network: a memnode, a client and an attacker on three test hosts (network namespaces
//! joined by veth links to a bridge, [`dmindex_ucx::testhosts`]), UCX over TCP. This test binary
//! plays every part: run as the test, it builds the hosts and starts itself on each as the
//! memnode, the client or the attacker (chosen by an environment variable).
//!
//! * UCX listens on the interface of `--listen` only: every listening socket on the memnode's
//!   host is bound to its address there.
//! * The client, which holds the token, writes a word into the pool.
//! * The attacker, without the token but with the memnode's worker address (as if it had sniffed
//!   it), opens a UCX endpoint and sends forged verbs: every one is refused and logged, and no
//!   byte of the pool comes back. Its bootstrap with a guessed token is refused too. It then
//!   sends UCX's own GET, PUT and fetch-and-add to the pool's address with a remote key of its
//!   own memory, and a GET at an unmapped address: none completes or changes a byte, and the
//!   memnode stays up.
//! * The client reads its word back unchanged.
//!
//! A second test floods UCX's own listener from the attacker's host while the client's is
//! served ([`a_flood_from_another_host_leaves_ucx_serving_a_third`]).
//!
//! Needs root and iproute2 (it skips, saying so, without them).
#![cfg(feature = "ucx")]

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, GlobalAddr};
use dmindex_ucx::server::{serve, MemnodeConfig};
use dmindex_ucx::testhosts::{marked_lines, Net};
use dmindex_ucx::transport::UcxFabric;

const TEST: &str = "an_attacker_on_another_host_cannot_touch_the_pool";
const ROLE: &str = "DMINDEX_UCX_TEST_ROLE";
const HOSTS: [&str; 3] = ["mn", "cn", "at"];

#[test]
fn an_attacker_on_another_host_cannot_touch_the_pool() {
    match std::env::var(ROLE).as_deref() {
        Ok("memnode") => return memnode(),
        Ok("client") => return client(),
        Ok("attacker") => return attacker(),
        _ => {}
    }
    if !Net::available() {
        eprintln!("SKIPPED {TEST}: it makes network namespaces, which needs root and iproute2");
        return;
    }
    let net = Net::create(&HOSTS).expect("test hosts");
    let addr = format!("{}:7000", Net::addr(0));
    let log = std::env::temp_dir().join(format!("dmx-ucx-hosts-{}.log", std::process::id()));
    let log_file = Stdio::from(std::fs::File::create(&log).unwrap());
    let mut mn = spawn(&net, "mn", TEST, "memnode", &addr, log_file);
    let (_, from_mn) = lines(&mut mn);
    expect(&from_mn, "MEMNODE READY");
    // Every listener on the memnode's host is on its address there, none on a wildcard.
    let listening = net.run("mn", &["ss", "-Hltn"]).unwrap();
    let listeners: Vec<&str> =
        listening.lines().filter_map(|l| l.split_whitespace().nth(3)).collect();
    assert!(listeners.len() >= 2, "the control port and UCX's: {listening}");
    for l in &listeners {
        assert!(
            l.starts_with(&Net::addr(0)),
            "{l} is not bound to the listen address: {listening}"
        );
    }
    let mut cn = spawn(&net, "cn", TEST, "client", &addr, Stdio::inherit());
    let (mut to_cn, from_cn) = lines(&mut cn);
    let wrote = expect(&from_cn, "WROTE");
    let (worker, at_pool) = wrote["WROTE ".len()..].split_once(' ').unwrap();
    let mut at = spawn(&net, "at", TEST, "attacker", &addr, Stdio::inherit());
    let (mut to_at, from_at) = lines(&mut at);
    writeln!(to_at, "{worker} {at_pool}").unwrap();
    let verdict = expect(&from_at, "ATTACK");
    eprintln!("{verdict}");
    let want = format!("ATTACK refused {} replies, 0 bytes, bootstrap refused", common::FORGED);
    assert_eq!(verdict, want, "{verdict}");
    let unkeyed = expect(&from_at, "UNKEYED");
    eprintln!("{unkeyed}");
    assert_eq!(unkeyed, "UNKEYED read None, faa false", "{unkeyed}");
    writeln!(to_cn, "CHECK").unwrap();
    assert_eq!(expect(&from_cn, "READ"), "READ 42", "the pool is unchanged");
    assert!(cn.wait().unwrap().success() && at.wait().unwrap().success());
    let _ = mn.kill();
    let _ = mn.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("refused a verb message without this memnode's verb key"), "{text}");
    assert!(text.contains("refused: the client left after the challenge"), "{text}");
}

fn spawn(net: &Net, host: &str, test: &str, role: &str, addr: &str, stderr: Stdio) -> Child {
    command(net, host, test, role, addr, stderr).spawn().unwrap()
}

/// Test `test` of this binary on `host`, in part `role`, with the memnode at `addr`.
fn command(net: &Net, host: &str, test: &str, role: &str, addr: &str, stderr: Stdio) -> Command {
    let mut c = net.this_test(host, test).unwrap();
    c.env(ROLE, role)
        .env("DMX_MEMNODE", addr)
        .env("UCX_TLS", "tcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    c
}

/// A child's stdin, and what it prints after the mark `DMX `.
fn lines(child: &mut Child) -> (std::process::ChildStdin, Receiver<String>) {
    (child.stdin.take().unwrap(), marked_lines(child.stdout.take().unwrap()))
}

fn expect(from: &Receiver<String>, what: &str) -> String {
    match from.recv_timeout(Duration::from_secs(60)) {
        Ok(l) if l.starts_with(what) => l,
        other => panic!("expected {what}, got {other:?}"),
    }
}

fn memnode() {
    let cfg = MemnodeConfig {
        listen: std::env::var("DMX_MEMNODE").unwrap(),
        size: 64 << 20,
        token: common::TOKEN.to_vec(),
        id: 0,
        cores: 2,
        services: None,
        peers: Vec::new(),
        peer_timeout: Duration::from_secs(2),
    };
    serve(&cfg, Arc::new(AtomicBool::new(false)), |a| println!("DMX MEMNODE READY {a}")).unwrap();
}

fn client() {
    let addr = std::env::var("DMX_MEMNODE").unwrap();
    let f = UcxFabric::connect(std::slice::from_ref(&addr), common::TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    run_tasks([c.write(a, &42u64.to_le_bytes())]).remove(0).unwrap();
    let (_, welcome) =
        dmindex_ucx::control::ControlConn::connect(&addr, common::TOKEN, Duration::from_secs(5))
            .unwrap();
    let hex: String = welcome.worker_address.iter().map(|b| format!("{b:02x}")).collect();
    println!("DMX WROTE {hex} {} {}", a.offset(), welcome.base);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "CHECK");
    let w = run_tasks([c.read_word(GlobalAddr::new(0, a.offset()))]).remove(0).unwrap();
    println!("DMX READ {w}");
}

fn attacker() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let mut words = line.split_whitespace();
    let (hex, offset, base) = (words.next().unwrap(), words.next().unwrap(), words.next().unwrap());
    let (offset, base): (u64, u64) = (offset.parse().unwrap(), base.parse().unwrap());
    let address: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let out = common::forge(&address, offset);
    let refused = out
        .replies
        .iter()
        .filter(|r| r.status == dmindex_ucx::message_verbs::Status::Refused)
        .count();
    let addr = std::env::var("DMX_MEMNODE").unwrap();
    let e = UcxFabric::connect(&[addr], b"a guess", 1 << 20).err().unwrap_or_default();
    let boot =
        if e.contains("hold different tokens") { "bootstrap refused" } else { "bootstrap ???" };
    println!("DMX ATTACK refused {refused} replies, {} bytes, {boot}", out.bytes);
    let got = common::unkeyed_rma(&address, base + offset);
    let _ = common::unkeyed_rma(&address, 0x1000);
    println!("DMX UNKEYED read {:?}, faa {}", got.read, got.faa);
}

const FLOOD_TEST: &str = "a_flood_from_another_host_leaves_ucx_serving_a_third";

/// UCX's own listener, flooded from another host, serves a third. The memnode (limited to 1024
/// descriptors) is on one host; the attacker, on another, opens 40 raw connections to UCX's
/// port and then 3000 more, and never sends a byte; a client on a third host connects and is
/// served meanwhile. The attacker's 40 are closed 5 s after it opened them (plus the guard's
/// period), the memnode's descriptors stay well under its limit, and once the attacker drops
/// its flood it connects as a client itself and is served.
#[test]
fn a_flood_from_another_host_leaves_ucx_serving_a_third() {
    use common::flood::{self, FdPeak, MEMNODE_FD_LIMIT};
    match std::env::var(ROLE).as_deref() {
        Ok("memnode") => {
            return flood::memnode_until_stdin_closes(&std::env::var("DMX_MEMNODE").unwrap())
        }
        Ok("client") => return flood_client(),
        Ok("attacker") => return flooder(),
        _ => {}
    }
    if !Net::available() {
        eprintln!(
            "SKIPPED {FLOOD_TEST}: it makes network namespaces, which needs root and iproute2"
        );
        return;
    }
    let net = Net::create(&HOSTS).expect("test hosts");
    let addr = format!("{}:7000", Net::addr(0));
    let log = std::env::temp_dir().join(format!("dmx-ucx-flood-{}.log", std::process::id()));
    let log_file = Stdio::from(std::fs::File::create(&log).unwrap());
    let mut cmd = command(&net, "mn", FLOOD_TEST, "memnode", &addr, log_file);
    let mut mn = flood::with_fd_limit(&mut cmd).spawn().unwrap();
    let (to_mn, from_mn) = lines(&mut mn);
    expect(&from_mn, "MEMNODE READY");
    let text = std::fs::read_to_string(&log).unwrap();
    let ucx = text.lines().find_map(flood::ucx_listener_in).expect("UCX's listener is named");
    assert_eq!(ucx.ip().to_string(), Net::addr(0), "{text}");
    let peak = FdPeak::watch(mn.id());
    let mut at = spawn(&net, "at", FLOOD_TEST, "attacker", &addr, Stdio::inherit());
    let (mut to_at, from_at) = lines(&mut at);
    writeln!(to_at, "{ucx}").unwrap();
    expect(&from_at, "FLOODING");
    let mut cn = spawn(&net, "cn", FLOOD_TEST, "client", &addr, Stdio::inherit());
    let (_to_cn, from_cn) = lines(&mut cn);
    assert_eq!(expect(&from_cn, "CLIENT"), "CLIENT served", "a third host's client, mid-flood");
    writeln!(to_at, "MEASURE").unwrap();
    let silent = expect(&from_at, "SILENT");
    eprintln!("{silent}");
    let ms: Vec<u64> = silent.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [closed, first, last] = ms[..] else { panic!("{silent}") };
    assert_eq!(closed, 40, "{silent}");
    assert!((4900..=6500).contains(&first) && (4900..=6500).contains(&last), "{silent}");
    assert_eq!(expect(&from_at, "AFTER"), "AFTER served", "the attacker's host, after its flood");
    assert!(cn.wait().unwrap().success() && at.wait().unwrap().success());
    let peak = peak.peak();
    eprintln!("memnode descriptors at most {peak} of {MEMNODE_FD_LIMIT}");
    assert!(peak + 64 <= MEMNODE_FD_LIMIT as usize, "descriptors ran close to the limit: {peak}");
    assert!(mn.try_wait().unwrap().is_none(), "the memnode is up");
    drop(to_mn);
    assert!(mn.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("sent no UCX handshake within 5s"), "{text}");
    assert!(text.contains(&format!("refuses new connections from {}", Net::addr(2))), "{text}");
    assert!(!text.contains("is gone") && !text.contains("accept() failed"), "{text}");
}

/// The client on the third host: connects mid-flood and is served.
fn flood_client() {
    let addr = std::env::var("DMX_MEMNODE").unwrap();
    match common::flood::client_is_served(&addr, 7) {
        Ok(()) => println!("DMX CLIENT served"),
        Err(e) => println!("DMX CLIENT failed: {e}"),
    }
}

/// The attacker: 40 raw connections to UCX's listener (named on its standard input), then 3000
/// more; once told, how long the 40 lasted; then, its flood dropped, a client of its own.
fn flooder() {
    use common::flood::Flood;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let ucx: std::net::SocketAddr = line.trim().parse().unwrap();
    let me: std::net::SocketAddr = format!("{}:0", Net::addr(2)).parse().unwrap();
    let mut silent = Flood::open(me, ucx, 40);
    assert_eq!(silent.established(Duration::from_secs(5)), 40);
    let opened = std::time::Instant::now();
    let flood = Flood::open(me, ucx, 3000);
    println!("DMX FLOODING {} connections", flood.len() + silent.len());
    line.clear();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "MEASURE");
    silent.watch_ends(opened + Duration::from_secs(7));
    let ms: Vec<u128> = silent.lifetimes().iter().map(Duration::as_millis).collect();
    let (first, last) = (ms.iter().min().copied(), ms.iter().max().copied());
    println!("DMX SILENT {} {} {}", ms.len(), first.unwrap_or(0), last.unwrap_or(0));
    drop((flood, silent));
    let addr = std::env::var("DMX_MEMNODE").unwrap();
    match common::flood::client_is_served(&addr, 8) {
        Ok(()) => println!("DMX AFTER served"),
        Err(e) => println!("DMX AFTER failed: {e}"),
    }
}
