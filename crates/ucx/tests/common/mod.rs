//! A memnode on loopback inside the test process, and the checks every UCX transport must pass.
// Each test binary (transport) uses the checks that apply to it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Once};
use std::time::Duration;

use dmindex_fabric::exec::{run_on_threads, run_tasks};
use dmindex_fabric::service::NODE_INFO;
use dmindex_fabric::service::{MnContext, Service, ServiceError};
use dmindex_fabric::{conformance, Fabric, FabricError, ServiceId, Services};
use dmindex_ucx::server::{serve, MemnodeConfig};
use dmindex_ucx::transport::{UcxFabric, UcxOptions};

pub mod fence;
pub mod flood;

pub const TOKEN: &[u8] = b"test-token";

/// Selects UCX transports for this test process (before any UCX object exists).
pub fn use_tls(tls: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY-free: set before any thread of this process reads the environment through UCX.
        std::env::set_var("UCX_TLS", tls);
    });
}

pub struct Memnode {
    pub addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Drop for Memnode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }
}

/// Starts memnode `id` of `size` bytes on an ephemeral loopback port.
pub fn memnode(id: u16, size: u64) -> Memnode {
    memnode_with(id, size, None)
}

/// Starts memnode `id` running `services` (the built-in ones when `None`).
pub fn memnode_with(id: u16, size: u64, services: Option<Services>) -> Memnode {
    memnode_at(id, size, "127.0.0.1:0", services, Vec::new())
}

/// A loopback port that is free now (for memnodes that must know each other's addresses).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts memnode `id` listening on `listen`, running `services`, linked to `peers`.
pub fn memnode_at(
    id: u16,
    size: u64,
    listen: &str,
    services: Option<Services>,
    peers: Vec<String>,
) -> Memnode {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let cfg = MemnodeConfig {
        listen: listen.into(),
        size,
        token: TOKEN.to_vec(),
        id,
        cores: 2,
        services,
        peers,
        peer_timeout: Duration::from_secs(2),
    };
    let s = Arc::clone(&stop);
    let thread = std::thread::spawn(move || serve(&cfg, s, |a| tx.send(a).unwrap()));
    let addr = rx.recv().expect("memnode started").to_string();
    Memnode { addr, stop, thread: Some(thread) }
}

/// The conformance suite on one or two memnodes, with clients on two threads × 3 tasks; `one_sided`
/// says whether the transports reach the pools without the memnodes' CPU (else verbs are messages).
pub fn conformance_suite(one_sided: bool) {
    conformance_suite_with(one_sided, true);
}

/// [`conformance_suite`], with the pools mapped into the clients' process where UCX can
/// (`map_shared`) or every verb through UCX's RMA calls.
pub fn conformance_suite_with(one_sided: bool, map_shared: bool) {
    let mns = [memnode(0, 64 << 20), memnode(1, 64 << 20)];
    let addrs: Vec<String> = mns.iter().map(|m| m.addr.clone()).collect();
    let options = UcxOptions { map_shared, ..UcxOptions::default() };
    let f = UcxFabric::connect_with(&addrs, TOKEN, &options).unwrap();
    assert_eq!(f.info().nodes(), 2);
    assert_eq!(f.one_sided().unwrap(), [one_sided; 2]);
    // Shared memory maps the pools; TCP cannot.
    assert_eq!(f.mapped().unwrap(), [one_sided && map_shared; 2]);
    let c = f.client(0).unwrap();
    run_tasks([conformance::single_client(&c)]);
    // Concurrent increments from 6 clients on 2 threads: no lost update.
    let counter = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    let failures: u64 = run_on_threads(2, 3, |_, _| {
        let f = &f;
        async move {
            let c = f.client(1).unwrap();
            conformance::increment(&c, counter, 200).await
        }
    })
    .into_iter()
    .sum();
    assert_eq!(run_tasks([c.read_word(counter)]).remove(0).unwrap(), 1200);
    assert_eq!(run_tasks([c.read_word(counter.add(8))]).remove(0).unwrap(), 1200);
    eprintln!("CAS failures under contention: {failures}");
    // Allocations from many clients never overlap.
    let all: Vec<Vec<dmindex_fabric::GlobalAddr>> = run_on_threads(2, 2, |t, k| {
        let f = &f;
        async move {
            let c = f.client(0).unwrap();
            conformance::allocate_and_stamp(&c, 50, 200, (t * 2 + k) as u64 + 1).await
        }
    });
    for (i, list) in all.iter().enumerate() {
        for (j, a) in list.iter().enumerate() {
            let w = run_tasks([c.read_word(*a)]).remove(0).unwrap();
            assert_eq!(w, ((i as u64 + 1) << 32) | j as u64, "allocation {a} overlaps another");
        }
    }
}

/// A thread's clients that wait together send together: two tasks' verbs travel in one
/// message each way, executed in the order each task posted them.
pub fn a_threads_verbs_share_messages() {
    let mn = memnode(0, 16 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    let before = f.messages_sent().unwrap();
    const ROUNDS: u64 = 200;
    let seen = run_tasks((0..2u64).map(|t| {
        let c = &c;
        async move {
            let word = a.add(8 * t);
            let mut wrong = 0;
            for i in 1..=ROUNDS {
                // A zero-wait WRITE, then a READ that must see it (the same memnode, in order).
                c.write_zero_wait(word, &(i * 10 + t).to_le_bytes()).unwrap();
                wrong += u64::from(c.read_word(word).await.unwrap() != i * 10 + t);
            }
            wrong
        }
    }));
    assert_eq!(seen, [0, 0], "a READ missed the WRITE its task posted before it");
    let after = f.messages_sent().unwrap();
    let (messages, requests) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(requests, 2 * 2 * ROUNDS, "every WRITE and READ was sent once");
    // In lockstep every message carries both tasks' WRITE and READ; allow for drift.
    assert!(requests >= 3 * messages, "{requests} requests in {messages} messages");
    drop(c);
    drop(f);
    // Two READs whose replies together pass what one envelope may ask for go in two messages
    // (the memnode would drop one that asked for both), and both succeed.
    let mn = memnode(0, 192 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    const BIG: usize = 40 << 20;
    let at = run_tasks([c.alloc(2 * BIG as u64, 64)]).remove(0).unwrap();
    run_tasks([c.write(at, &[7; 64]), c.write(at.add(BIG as u64), &[9; 64])]);
    let before = f.messages_sent().unwrap();
    let firsts = run_tasks((0..2u64).map(|t| {
        let c = &c;
        async move {
            let mut buf = vec![0u8; BIG];
            c.read(at.add(t * BIG as u64), &mut buf).await.unwrap();
            buf[0]
        }
    }));
    assert_eq!(firsts, [7, 9]);
    let after = f.messages_sent().unwrap();
    assert_eq!((after.0 - before.0, after.1 - before.1), (2, 2), "one READ per message");
}

/// What a thread's last task posted without waiting for it (a zero-wait WRITE) goes out when
/// the thread's tasks are done, though the thread lives on and posts nothing more.
pub fn the_last_posted_verb_goes_out() {
    let mn = memnode(0, 16 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    let (posted_tx, posted_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let f = &f;
        s.spawn(move || {
            let c = f.client(0).unwrap();
            run_tasks([async { c.write_zero_wait(a, &42u64.to_le_bytes()) }]).remove(0).unwrap();
            posted_tx.send(()).unwrap();
            // Alive, and posting nothing more, until the other thread has looked.
            done_rx.recv().unwrap();
        });
        posted_rx.recv().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut seen = 0;
        while seen != 42 && std::time::Instant::now() < deadline {
            seen = run_tasks([c.read_word(a)]).remove(0).unwrap();
        }
        done_tx.send(()).unwrap();
        assert_eq!(seen, 42, "the WRITE never left its thread");
    });
}

/// Refusals are clear errors, not hangs.
pub fn bad_connections_are_refused() {
    let mn = memnode(0, 8 << 20);
    let e = UcxFabric::connect(std::slice::from_ref(&mn.addr), b"wrong", 1 << 20).err().unwrap();
    assert!(e.contains("hold different tokens") && e.contains("check --token-file"), "{e}");
    let e = UcxFabric::connect(&["127.0.0.1:1".into()], TOKEN, 1 << 20).err().unwrap();
    assert!(e.contains("cannot reach memnode at 127.0.0.1:1"), "{e}");
    let other = memnode(1, 8 << 20);
    let e = UcxFabric::connect(std::slice::from_ref(&other.addr), TOKEN, 1 << 20).err().unwrap();
    assert!(e.contains("is memory node 1"), "{e}");
    // A client that speaks garbage does not take the memnode down.
    {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(&mn.addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    }
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    run_tasks([c.write(a, &7u64.to_le_bytes())]).remove(0).unwrap();
    assert_eq!(run_tasks([c.read_word(a)]).remove(0).unwrap(), 7);
    // Out of memory comes back as such.
    let e = run_tasks([c.alloc(1 << 40, 64)]).remove(0).unwrap_err();
    assert!(matches!(e, dmindex_fabric::FabricError::OutOfMemory { .. }), "{e}");
}

/// A verb abandoned mid-flight (its future dropped after it was sent, as when a client task is
/// cancelled) does not disturb later ones: its late reply is discarded, never taken by another.
pub fn abandoned_verbs_do_not_confuse_later_ones() {
    use std::future::Future;
    use std::task::{Context, Waker};

    let mn = memnode(0, 16 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    run_tasks([c.write(a, &1u64.to_le_bytes())]).remove(0).unwrap();
    run_tasks([c.write(a.add(8), &2u64.to_le_bytes())]).remove(0).unwrap();
    for i in 0..200u64 {
        let mut abandoned = Box::pin(c.read_word(a));
        let _ = abandoned.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        drop(abandoned);
        let mut cas = Box::pin(c.cas(a, i + 1, i + 2));
        let _ = cas.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        drop(cas);
        assert_eq!(run_tasks([c.read_word(a.add(8))]).remove(0).unwrap(), 2, "round {i}");
    }
    // Each abandoned CAS was sent, so it took effect (once): 1 → 2 → … → 201.
    assert_eq!(run_tasks([c.read_word(a)]).remove(0).unwrap(), 201);
}

/// A memnode that goes away: the client's next verb fails with an error naming it, not a hang.
pub fn lost_memnode_is_an_error() {
    let mn = memnode(0, 16 << 20);
    let addr = mn.addr.clone();
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let f = UcxFabric::connect(&[addr], TOKEN, 1 << 20).unwrap();
        let c = f.client(0).unwrap();
        let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
        run_tasks([c.write(a, &5u64.to_le_bytes())]).remove(0).unwrap();
        assert_eq!(run_tasks([c.read_word(a)]).remove(0).unwrap(), 5);
        stop_tx.send(()).unwrap();
        // Verbs until one fails (the memnode is stopping meanwhile).
        let e = loop {
            if let Err(e) = run_tasks([c.read_word(a)]).remove(0) {
                break e;
            }
        };
        tx.send(e.to_string()).unwrap();
    });
    stop_rx.recv().unwrap();
    drop(mn);
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("a verb hung after its memnode went away");
    assert!(e.contains("memory node 0 unavailable"), "{e}");
    client.join().unwrap();
}

/// A service that answers its request reversed.
struct Reverse;

impl Service for Reverse {
    fn name(&self) -> &str {
        "reverse"
    }
    fn handle(&self, _: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
        Ok(r.iter().rev().copied().collect())
    }
}

/// A memnode runs the services it is given (as `dmindex memnode --index NAME` installs an
/// index's): a two-sided call to one is answered, an id it lacks is an error naming it.
pub fn index_services_are_served() {
    let mut services = Services::new(2);
    services.register(ServiceId(33), Arc::new(Reverse)).unwrap();
    let mn = memnode_with(0, 16 << 20, Some(services));
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    assert_eq!(run_tasks([c.call(0, ServiceId(33), b"abc")]).remove(0).unwrap(), b"cba");
    let e = run_tasks([c.call(0, ServiceId(34), b"x")]).remove(0).unwrap_err();
    assert!(e.to_string().contains("#34"), "{e}");
}

/// A service that relays its request's tail to service 34 on the memnode its first byte names,
/// and one (34) that reverses its request.
fn relay_services() -> Services {
    struct Relay;
    impl Service for Relay {
        fn name(&self) -> &str {
            "relay"
        }
        fn handle(&self, ctx: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
            let (&to, rest) = r.split_first().ok_or(ServiceError::BadRequest("empty".into()))?;
            let mut answers =
                ctx.peers.call_all(ServiceId(34), &[(to as u16, rest), (ctx.node, rest)]);
            let mine = answers.pop().unwrap().map_err(|e| ServiceError::Failed(e.to_string()))?;
            let theirs = answers.pop().unwrap().map_err(|e| ServiceError::Failed(e.to_string()))?;
            assert_eq!(mine, theirs);
            Ok(theirs)
        }
    }
    let mut s = Services::new(2);
    s.register(ServiceId(33), Arc::new(Relay)).unwrap();
    s.register(ServiceId(34), Arc::new(Reverse)).unwrap();
    s
}

/// Memnodes given `--peers` call each other's services (and their own); a peer that went away
/// is reported unavailable by name, an unknown one as unknown.
pub fn memnodes_call_their_peers() {
    let addrs: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let m0 = memnode_at(0, 16 << 20, &addrs[0], Some(relay_services()), addrs.clone());
    let m1 = memnode_at(1, 16 << 20, &addrs[1], Some(relay_services()), addrs.clone());
    let f = UcxFabric::connect(&addrs, TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    for (from, to) in [(0u16, 1u8), (1, 0), (0, 0)] {
        let r = run_tasks([c.call(from, ServiceId(33), &[to, b'a', b'b', b'c'])]).remove(0);
        assert_eq!(r.unwrap(), b"cba", "{from} to {to}");
    }
    let e = run_tasks([c.call(0, ServiceId(33), &[5, 1])]).remove(0).unwrap_err();
    assert!(e.to_string().contains("unknown memory node 5"), "{e}");
    drop(m1);
    let e = run_tasks([c.call(0, ServiceId(33), &[1, 1])]).remove(0).unwrap_err();
    assert!(e.to_string().contains("memory node 1 unavailable"), "{e}");
    drop(m0);
}

/// A memnode restarted on its address is a new, empty server: a client bound to the old one
/// fails every verb and call until it reconnects, then reaches the new pool; another client of
/// the same thread that did not reconnect keeps failing; reconnecting to a memnode that is down
/// fails.
pub fn restarted_memnode_needs_reconnect() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mn = memnode_at(0, 16 << 20, &addr, None, Vec::new());
    let f = UcxFabric::connect(std::slice::from_ref(&addr), TOKEN, 1 << 20).unwrap();
    let (c1, c2) = (f.client(0).unwrap(), f.client(0).unwrap());
    let a = run_tasks([c1.alloc(64, 64)]).remove(0).unwrap();
    run_tasks([c1.write(a, &7u64.to_le_bytes())]).remove(0).unwrap();
    assert_eq!(run_tasks([c2.read_word(a)]).remove(0).unwrap(), 7);
    drop(mn);
    let e = run_tasks([c1.reconnect(0)]).remove(0).unwrap_err();
    assert!(matches!(e, FabricError::Unavailable { node: 0, .. }), "{e}");
    let _mn = memnode_at(0, 16 << 20, &addr, None, Vec::new());
    for r in [
        run_tasks([c1.read_word(a)]).remove(0).map(drop),
        run_tasks([c1.call(0, NODE_INFO, &[])]).remove(0).map(drop),
    ] {
        assert!(matches!(r, Err(FabricError::Unavailable { node: 0, .. })), "{r:?}");
    }
    run_tasks([c1.reconnect(0)]).remove(0).unwrap();
    assert_eq!(run_tasks([c1.read_word(a)]).remove(0).unwrap(), 0, "the new pool is empty");
    run_tasks([c1.call(0, NODE_INFO, &[])]).remove(0).unwrap();
    let e = run_tasks([c2.read_word(a)]).remove(0).unwrap_err();
    assert!(e.to_string().contains("earlier incarnation"), "{e}");
    let e = run_tasks([c2.call(0, NODE_INFO, &[])]).remove(0).unwrap_err();
    assert!(matches!(e, FabricError::Unavailable { node: 0, .. }), "{e}");
    run_tasks([c2.reconnect(0)]).remove(0).unwrap();
    run_tasks([c2.write(a, &9u64.to_le_bytes())]).remove(0).unwrap();
    let c3 = f.client(0).unwrap();
    assert_eq!(run_tasks([c3.read_word(a)]).remove(0).unwrap(), 9);
    // Back with a smaller pool, it cannot serve verbs checked against the first size: the
    // reconnect is refused, naming both, and a verb past the new end is an error, not a panic.
    drop(_mn);
    let _mn = memnode_at(0, 8 << 20, &addr, None, Vec::new());
    let e = run_tasks([c1.reconnect(0)]).remove(0).unwrap_err();
    assert!(
        e.to_string().contains("restarted with a pool of 8388608 bytes, not the 16777216"),
        "{e}"
    );
    let past = dmindex_fabric::GlobalAddr::new(0, 12 << 20);
    assert!(run_tasks([c1.read_word(past)]).remove(0).is_err());
}

/// A call the memnode does not answer within the fabric's timeout fails, naming the wait; the
/// client's next call works (on a fresh connection).
pub fn slow_calls_time_out() {
    struct Slow;
    impl Service for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn handle(&self, _: &MnContext<'_>, r: &[u8]) -> Result<Vec<u8>, ServiceError> {
            std::thread::sleep(Duration::from_millis(r[0] as u64 * 10));
            Ok(r.to_vec())
        }
    }
    let mut services = Services::new(2);
    services.register(ServiceId(33), Arc::new(Slow)).unwrap();
    let mn = memnode_with(0, 16 << 20, Some(services));
    let options = UcxOptions { timeout: Duration::from_millis(300), ..UcxOptions::default() };
    let f = UcxFabric::connect_with(std::slice::from_ref(&mn.addr), TOKEN, &options).unwrap();
    let c = f.client(0).unwrap();
    let t0 = std::time::Instant::now();
    let e = run_tasks([c.call(0, ServiceId(33), &[100])]).remove(0).unwrap_err();
    assert!(e.to_string().contains("no answer within 300ms"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(900), "{:?}", t0.elapsed());
    assert_eq!(run_tasks([c.call(0, ServiceId(33), &[1])]).remove(0).unwrap(), [1]);
}

/// What an attacker got back who reached a memnode's UCX worker (its address sniffed or
/// guessed) without ever authenticating: the replies to forged verbs, and the bytes they carried.
pub struct Forged {
    pub replies: Vec<dmindex_ucx::message_verbs::Reply>,
    pub bytes: usize,
}

/// How many verb messages [`forge`] sends.
pub const FORGED: usize = 6;

/// Sends forged verb messages to the worker at `address`: a WRITE of 666 and a READ at
/// `offset`, a READ of the superblock and an FAA, a registration as a cluster member and a
/// fence of one, with no key or a guessed one.
pub fn forge(address: &[u8], offset: u64) -> Forged {
    use dmindex_ucx::auth::{random, VERB_KEY};
    use dmindex_ucx::message_verbs::{Reply, Request, Verb, REPLY_AM, REQUEST_AM, REQUEST_LEN};
    use dmindex_ucx::ucp::{Posted, Worker};
    use std::cell::RefCell;
    use std::rc::Rc;

    let got: Rc<RefCell<Vec<(Reply, usize)>>> = Rc::default();
    let mut w = Worker::new().unwrap();
    let g = Rc::clone(&got);
    w.on_message(
        REPLY_AM,
        Box::new(move |h, payload, _| {
            if let Some(r) = Reply::decode(h) {
                g.borrow_mut().push((r, payload.len()));
            }
        }),
    )
    .unwrap();
    let ep = w.connect(address).unwrap();
    let faa = Verb::Atomic(dmindex_fabric::AtomicOp::Faa { delta: 1 });
    let forged: [(u64, Verb, &[u8], [u8; VERB_KEY]); FORGED] = [
        (1, Verb::Write, &666u64.to_le_bytes(), [0; VERB_KEY]),
        (2, Verb::Read { len: 8 }, &[], [0; VERB_KEY]),
        (3, Verb::Read { len: 64 }, &[], random()),
        (4, faa, &[], random()),
        (5, Verb::Register { member: 1, one_sided: false }, &[], random()),
        (6, Verb::Fence { member: 1 }, &[], [0; VERB_KEY]),
    ];
    for (tag, verb, payload, key) in forged {
        let at = if tag == 3 { 0 } else { offset };
        let mut m = Request { session: 0, tag, offset: at, verb, key }.encode().to_vec();
        m.extend_from_slice(payload);
        // SAFETY: `m` lives until the send has completed (waited for right here).
        let p = unsafe { ep.send_message(REQUEST_AM, &m[..REQUEST_LEN], &m[REQUEST_LEN..]) };
        if let Ok(p @ Posted::Pending(_)) = p {
            let _ = w.wait_until(p, std::time::Instant::now() + Duration::from_secs(5));
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while got.borrow().len() < FORGED && std::time::Instant::now() < deadline {
        w.progress();
    }
    let got = got.borrow();
    Forged {
        replies: got.iter().map(|(r, _)| *r).collect(),
        bytes: got.iter().map(|(_, n)| n).sum(),
    }
}

/// An endpoint that never authenticated reaches the memnode's worker and sends verbs: every one
/// is refused, no byte comes back (no session key either), and the pool is unchanged.
pub fn forged_verbs_are_refused() {
    let mn = memnode(0, 16 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let a = run_tasks([c.alloc(64, 64)]).remove(0).unwrap();
    run_tasks([c.write(a, &42u64.to_le_bytes())]).remove(0).unwrap();
    // The worker's address, as an eavesdropper would have it (only the welcome carries it).
    let (_, welcome) =
        dmindex_ucx::control::ControlConn::connect(&mn.addr, TOKEN, Duration::from_secs(5))
            .unwrap();
    let out = forge(&welcome.worker_address, a.offset());
    assert_eq!(out.replies.len(), FORGED, "every forged verb is answered");
    assert!(
        out.replies.iter().all(|r| r.status == dmindex_ucx::message_verbs::Status::Refused),
        "{:?}",
        out.replies
    );
    assert_eq!(out.bytes, 0, "no byte of the pool came back");
    assert_eq!(run_tasks([c.read_word(a)]).remove(0).unwrap(), 42, "the pool is unchanged");
}

/// What UCX's own one-sided requests to a memnode's worker did, sent with a remote key of the
/// attacker's own memory instead of the pool's.
#[derive(Debug)]
pub struct Unkeyed {
    /// The first 8 bytes of the pool a GET brought back, if it completed.
    pub read: Option<[u8; 8]>,
    /// Whether a PUT completed at the sender (once sent), and a fetch-and-add (once answered).
    pub put: bool,
    pub faa: bool,
}

/// An endpoint that never authenticated sends UCX GET, PUT and fetch-and-add to `base` (the
/// pool's address, as every client ever admitted and the memnode's log know it) on the worker
/// at `address`, with a remote key of its own memory: UCX's software RMA over TCP checks no
/// key, so these reach the pool unless the memnode never enables them. Each waits at most 2 s.
pub fn unkeyed_rma(address: &[u8], base: u64) -> Unkeyed {
    use dmindex_ucx::sys::UCP_ATOMIC_OP_ADD;
    use dmindex_ucx::ucp::Worker;
    use std::time::Instant;

    let w = Worker::new().unwrap();
    let own = w.map_pool(4096).unwrap();
    let ep = w.connect(address).unwrap();
    // The attacker's own key always unpacks: a refusal here would make the checks below pass
    // without any request having been sent.
    let key = ep.unpack(&own.rkey).expect("a key of the attacker's own memory");
    let done = |p| matches!(w.wait_until(p, Instant::now() + Duration::from_secs(2)), Ok(true));
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the wait; an operation still pending when the endpoint is closed
    // below is cancelled with it.
    let read = unsafe { ep.get(&mut buf, base, &key) }.is_ok_and(done).then_some(buf);
    let data = *b"PWNED!!!";
    // SAFETY: as above, for data.
    let put = unsafe { ep.put(&data, base + 64, &key) }.is_ok_and(done);
    let (one, mut old) = (1u64, 0u64);
    // SAFETY: as above, for one and old.
    let faa =
        unsafe { ep.atomic(UCP_ATOMIC_OP_ADD, &one, &mut old, base + 128, &key) }.is_ok_and(done);
    drop(ep);
    Unkeyed { read, put, faa }
}

/// UCX's one-sided requests without the pool's remote key reach nothing over TCP: no byte of
/// the pool comes back, nothing is written, the memnode stays up and serves its clients, and
/// a GET at an unmapped address does not take it down.
pub fn unkeyed_rma_is_refused() {
    let mn = memnode(0, 16 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    let c = f.client(0).unwrap();
    let (_, welcome) =
        dmindex_ucx::control::ControlConn::connect(&mn.addr, TOKEN, Duration::from_secs(5))
            .unwrap();
    let a = run_tasks([c.alloc(256, 64)]).remove(0).unwrap();
    for i in 0..32u64 {
        run_tasks([c.write(a.add(8 * i), &(i * 0x0101_0101).to_le_bytes())]).remove(0).unwrap();
    }
    let words = || -> Vec<u64> {
        (0..32).map(|i| run_tasks([c.read_word(a.add(8 * i))]).remove(0).unwrap()).collect()
    };
    let before = words();
    let got = unkeyed_rma(&welcome.worker_address, welcome.base + a.offset());
    assert!(got.read.is_none(), "a GET without the pool's key read {:?}", got.read);
    // A PUT completes at its sender once sent, whether or not anything was written: the
    // pool's contents, below, say whether it was.
    assert!(!got.faa, "a fetch-and-add without the pool's key completed: {got:?}");
    assert_eq!(before, words(), "the pool changed");
    // An address no mapping covers: the memnode does not fault on it.
    let _ = unkeyed_rma(&welcome.worker_address, 0x1000);
    run_tasks([c.write(a, &9u64.to_le_bytes())]).remove(0).unwrap();
    assert_eq!(run_tasks([c.read_word(a)]).remove(0).unwrap(), 9, "the memnode serves on");
}
