//! The testbed model's parts, each against a closed form: connections scheduled independently,
//! per-kind NIC rates, packets and their headers, compute-node cores shared by client threads,
//! and the CPU of posting, polling and an index's own work.

use dmindex_fabric::{BatchOp, GlobalAddr, Work};
use dmindex_sim::{NetParams, Sim, SimConfig, Task};

fn sim(net: NetParams) -> Sim {
    let net = NetParams { jitter_ns: 0, ..net };
    Sim::new(SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(1, net) })
        .unwrap()
}

fn alloc(s: &Sim, len: u64) -> GlobalAddr {
    let c = s.client_on_own_thread(0);
    s.block_on(async move { c.alloc(len, 64).await.unwrap() })
}

/// A fresh simulation of `net`, a 128 KB region, two clients on their own threads, and how long
/// an 8-byte READ of the second takes on the idle fabric.
fn idle_pair(net: &NetParams) -> (Sim, GlobalAddr, u64) {
    let s = sim(net.clone());
    let a = alloc(&s, 128 << 10);
    let t0 = s.now_ns();
    let probe = s.client_on_own_thread(2);
    s.block_on(async { probe.read_word(a).await.unwrap() });
    let idle = s.now_ns() - t0;
    (s, a, idle)
}

/// A verb that waits for its own connection's previous verb holds nothing another connection
/// needs: while one client's READ queues behind its own 64 KB WRITE (the same doorbell), another
/// client's READ is served at an idle round trip.
#[test]
fn a_verb_waiting_on_its_own_connection_does_not_hold_the_nic() {
    let net = NetParams::chime_testbed();
    let (s, a, idle) = idle_pair(&net);
    let (writer, reader) = (s.client_on_own_thread(1), s.client_on_own_thread(3));
    let big = vec![7u8; 64 << 10];
    let (wrote, read) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    let t0 = s.now_ns();
    let tasks = [
        Box::pin(async {
            let mut tail = [0u8; 8];
            let mut ops = [
                BatchOp::Write { addr: a, data: &big },
                BatchOp::Read { addr: a.add(64 << 10), buf: &mut tail },
            ];
            writer.batch(&mut ops).await.unwrap();
            wrote.set(s.now_ns() - t0);
        }) as Task,
        Box::pin(async {
            // Posted just after the writer's doorbell, so it reaches the NIC behind it.
            reader.pause(300).await;
            reader.read_word(a.add(96 << 10)).await.unwrap();
            read.set(s.now_ns() - t0);
        }),
    ];
    assert!(s.run(tasks).all_finished());
    let wire = net.wire_ps(net.wire_bytes(64 << 10)) / 1000;
    assert!(wrote.get() > idle + wire, "the doorbell waits out its WRITE: {}", wrote.get());
    assert!(
        read.get() < 300 + idle + idle / 10,
        "the other client's READ ({} ns) is served as on an idle NIC ({idle} ns)",
        read.get()
    );
}

/// READs, WRITEs and atomics each have their own rate at the memory node's NIC.
#[test]
fn each_verb_kind_has_its_rate() {
    let net = NetParams::chime_testbed();
    for (kind, predicted) in [("read", net.read_mops), ("write", net.write_mops)] {
        let s = sim(net.clone());
        let base = alloc(&s, 4096);
        let cs: Vec<_> = (0..640).map(|i| s.client_on_own_thread(i % 10)).collect::<Vec<_>>();
        let t0 = s.now_ns();
        let tasks = cs.iter().enumerate().map(|(i, c)| {
            Box::pin(async move {
                for r in 0..20u64 {
                    let at = base.add(((i as u64 + r) % 64) * 8);
                    if kind == "read" {
                        c.read_word(at).await.unwrap();
                    } else {
                        c.write(at, &r.to_le_bytes()).await.unwrap();
                    }
                }
            }) as Task
        });
        assert!(s.run(tasks).all_finished());
        let mops = 640.0 * 20.0 * 1e3 / (s.now_ns() - t0) as f64;
        let err = (mops - predicted).abs() / predicted;
        assert!(err < 0.05, "{kind}: {mops:.1} M/s against the NIC's {predicted}");
    }
}

/// Client threads beyond a node's cores share them: with one core, two threads' CPU work takes
/// twice as long as with two.
#[test]
fn threads_share_their_nodes_cores() {
    let run = |cores: usize| {
        let net = NetParams { cn_cores: cores, ..NetParams::chime_testbed() };
        let s = sim(net);
        let (a, b) = (s.client_on(0, 0), s.client_on(0, 1));
        let t0 = s.now_ns();
        let tasks = [&a, &b].map(|c| {
            Box::pin(async move {
                for _ in 0..10 {
                    c.compute(Work::CacheLookup, 1000);
                    c.pause(1).await;
                }
                // The pause starts once the thread's work is done.
            }) as Task
        });
        assert!(s.run(tasks).all_finished());
        s.now_ns() - t0
    };
    let (one, two) = (run(1), run(2));
    let lookups = 10.0 * 1000.0 * NetParams::chime_testbed().cache_lookup_ns;
    assert!((one as f64 - 2.0 * lookups).abs() < 0.05 * lookups, "one core: {one} ns");
    assert!((two as f64 - lookups).abs() < 0.05 * lookups, "two cores: {two} ns");
}

/// A client's CPU per verb: a doorbell and a work request to post it, a completion to poll;
/// a doorbell batch rings once and polls once.
#[test]
fn posting_and_polling_cost_the_clients_cpu() {
    let net = NetParams::chime_testbed();
    let s = sim(net.clone());
    let a = alloc(&s, 4096);
    let c = s.client_on_own_thread(1);
    let elapsed = |task: Task<'_>| {
        let t0 = s.now_ns();
        assert!(s.run([task]).all_finished());
        s.now_ns() - t0
    };
    // Each measurement starts with the previous one's completion still to poll.
    let warm = elapsed(Box::pin(async {
        c.read_word(a).await.unwrap();
    }));
    let one = elapsed(Box::pin(async {
        c.read_word(a).await.unwrap();
    }));
    assert!(one.abs_diff(warm + net.poll_ns) <= 2, "the previous completion's poll: {one}, {warm}");
    let four = elapsed(Box::pin(async {
        let mut bufs = [[0u8; 8]; 4];
        let [b0, b1, b2, b3] = &mut bufs;
        let mut ops = [
            BatchOp::Read { addr: a, buf: b0 },
            BatchOp::Read { addr: a.add(64), buf: b1 },
            BatchOp::Read { addr: a.add(128), buf: b2 },
            BatchOp::Read { addr: a.add(192), buf: b3 },
        ];
        c.batch(&mut ops).await.unwrap();
    }));
    // Three more work requests, no more doorbells or polls; the NIC's own time for three more
    // small READs (engine and wire) is a few ns each.
    let extra = four as i64 - one as i64 - 3 * net.post_ns as i64;
    assert!((0..60).contains(&extra), "one READ {one} ns, a batch of four {four} ns");
    let cpu = elapsed(Box::pin(async {
        c.compute(Work::KeyHash, 100);
        c.read_word(a).await.unwrap();
    }));
    let hashes = (100.0 * net.key_hash_ns) as u64;
    assert!(cpu.abs_diff(one + hashes) <= 2, "hashing delays the post: {cpu} vs {one}");
}

/// A message longer than the MTU is cut into packets, each with its headers: a 4 KB READ on a
/// 1 KB-MTU fabric carries four packets' headers.
#[test]
fn long_messages_pay_headers_per_packet() {
    let net = NetParams { link_gbps: 1.0, ..NetParams::chime_testbed() };
    let s = sim(net.clone());
    let a = alloc(&s, 8192);
    let c = s.client_on_own_thread(1);
    let time = |len: usize| {
        let t0 = s.now_ns();
        s.block_on(async {
            let mut buf = vec![0u8; len];
            c.read(a, &mut buf).await.unwrap();
        });
        s.now_ns() - t0
    };
    let (small, large) = (time(8), time(4096));
    // At 1 Gb/s a byte is 8 ns; the links on the way are pipelined (cut-through), so the
    // response's bytes take that once.
    let extra_bytes = (4096 + 3 * net.header_bytes - 8) as f64;
    let predicted = extra_bytes * 8.0;
    let got = (large - small) as f64;
    assert!((got - predicted).abs() < 0.02 * predicted, "{got} ns against {predicted} ns");
}

/// Packets of messages on different connections interleave: a small READ's response queued
/// behind another client's 64 KB response waits for a packet of it, not for all of it.
#[test]
fn a_small_response_overtakes_a_long_one_packet_by_packet() {
    let net = NetParams::chime_testbed();
    let (s, a, idle) = idle_pair(&net);
    let (big, small) = (s.client_on_own_thread(1), s.client_on_own_thread(3));
    let read = std::cell::Cell::new(0);
    let t0 = s.now_ns();
    let tasks = [
        Box::pin(async {
            let mut buf = vec![0u8; 64 << 10];
            big.read(a, &mut buf).await.unwrap();
        }) as Task,
        Box::pin(async {
            small.pause(500).await;
            small.read_word(a.add(96 << 10)).await.unwrap();
            read.set(s.now_ns() - t0);
        }),
    ];
    assert!(s.run(tasks).all_finished());
    let packet = net.wire_ps(net.mtu_bytes + net.header_bytes) / 1000;
    let whole = net.wire_ps(net.wire_bytes(64 << 10)) / 1000;
    let waited = read.get() - 500 - idle;
    assert!(waited <= packet + 15, "waited {waited} ns: one packet is {packet}, all {whole}");
}
