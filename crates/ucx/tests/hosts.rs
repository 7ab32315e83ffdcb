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
//! Needs root and iproute2 (it skips, saying so, without them).
#![cfg(feature = "ucx")]

mod common;

use std::io::Write;
use std::process::{Child, Stdio};
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
    let mut mn =
        spawn(&net, "mn", "memnode", &addr, Stdio::from(std::fs::File::create(&log).unwrap()));
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
    let mut cn = spawn(&net, "cn", "client", &addr, Stdio::inherit());
    let (mut to_cn, from_cn) = lines(&mut cn);
    let wrote = expect(&from_cn, "WROTE");
    let (worker, at_pool) = wrote["WROTE ".len()..].split_once(' ').unwrap();
    let mut at = spawn(&net, "at", "attacker", &addr, Stdio::inherit());
    let (mut to_at, from_at) = lines(&mut at);
    writeln!(to_at, "{worker} {at_pool}").unwrap();
    let verdict = expect(&from_at, "ATTACK");
    eprintln!("{verdict}");
    assert_eq!(verdict, "ATTACK refused 4 replies, 0 bytes, bootstrap refused", "{verdict}");
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

fn spawn(net: &Net, host: &str, role: &str, addr: &str, stderr: Stdio) -> Child {
    net.this_test(host, TEST)
        .unwrap()
        .env(ROLE, role)
        .env("DMX_MEMNODE", addr)
        .env("UCX_TLS", "tcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap()
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
