//! Clients that crash at an awaited post: half the time before the doorbell (nothing lands),
//! half the time after it (a prefix of the post lands, the last WRITE of it perhaps cut at a
//! packet boundary). Each test runs many seeds and checks both what may land and that each
//! outcome happens.

use std::cell::Cell;
use std::collections::BTreeSet;

use dmindex_fabric::{BatchOp, GlobalAddr};
use dmindex_sim::{Faults, NetParams, Sim, SimConfig, Task};

/// Every awaited post crashes, once.
fn crash_next_post() -> Faults {
    Faults { crash_prob: 1.0, max_crashes: 1, ..Faults::none() }
}

/// A fault-free simulator with `len` bytes allocated (zeroed), then set to crash the next
/// awaited post.
fn setup(seed: u64, net: NetParams, len: u64) -> (Sim, GlobalAddr) {
    let s = Sim::new(SimConfig {
        node_size: 16 << 20,
        chunk_size: 1 << 20,
        ..SimConfig::new(seed, net)
    })
    .unwrap();
    let c = s.client_on_own_thread(0);
    let addr = s.block_on(async { c.alloc(len, 64).await.unwrap() });
    s.set_faults(crash_next_post());
    (s, addr)
}

/// Runs `task` (client 0's only task), which must crash and never wake; memory at `addr`
/// afterwards (every verb that went out has landed by then).
fn run_crashing(s: &Sim, addr: GlobalAddr, len: usize, task: Task<'_>) -> Vec<u8> {
    let out = s.run([task]);
    assert_eq!(out.crashed, vec![0], "the task crashed at its first post: {out:?}");
    let mut mem = vec![0u8; len];
    s.region(addr.node()).unwrap().read(addr.offset(), &mut mem);
    mem
}

/// A crashed client's WRITE is in memory afterwards in some seeds (posted, then died) and
/// absent in others (died before the doorbell), about half each; never half there, as a WRITE
/// of one packet is placed whole.
#[test]
fn a_crashed_write_lands_in_some_seeds_and_not_in_others() {
    const SEEDS: u64 = 64;
    let mut landed = 0;
    for seed in 0..SEEDS {
        let (s, addr) = setup(seed, NetParams::stress(), 64);
        let c = s.client_on_own_thread(0);
        let woke = Cell::new(false);
        let task = Box::pin(async {
            let _ = c.write(addr, &[0xA5; 64]).await;
            woke.set(true);
        });
        let mem = run_crashing(&s, addr, 64, task);
        assert!(!woke.get(), "seed {seed}: a crashed client never sees its verb complete");
        match mem.as_slice() {
            m if m == [0xA5; 64] => landed += 1,
            m if m == [0; 64] => {}
            m => panic!("seed {seed}: a one-packet WRITE landed in part: {m:?}"),
        }
    }
    assert!(
        (SEEDS / 4..=3 * SEEDS / 4).contains(&landed),
        "{landed} of {SEEDS} crashed WRITEs landed: both outcomes, about half each"
    );
}

/// A doorbell batch of a crashing client lands a prefix: never verb k without verb k - 1. Over
/// the seeds, none of it, all of it and partial prefixes all happen.
#[test]
fn a_crashed_batch_lands_only_prefixes() {
    const VERBS: usize = 8;
    // WRITEs of i + 1 to word i, but word 2 takes an FAA of 3 (an atomic lands the same way).
    let value = |i: usize| if i == 2 { 3 } else { i as u64 + 1 };
    let mut prefixes = BTreeSet::new();
    for seed in 0..200 {
        let (s, base) = setup(seed, NetParams::stress(), 64 * VERBS as u64);
        let word = |i: usize| base.add(64 * i as u64);
        let c = s.client_on_own_thread(0);
        let data: Vec<[u8; 8]> = (0..VERBS).map(|i| value(i).to_le_bytes()).collect();
        let task = Box::pin(async {
            let mut ops: Vec<BatchOp<'_>> = (0..VERBS)
                .map(|i| match i {
                    2 => BatchOp::Atomic {
                        addr: word(i),
                        op: dmindex_fabric::AtomicOp::Faa { delta: value(i) },
                        old: 0,
                    },
                    _ => BatchOp::Write { addr: word(i), data: &data[i] },
                })
                .collect();
            let _ = c.batch(&mut ops).await;
            unreachable!("a crashed client never sees its batch complete");
        });
        let mem = run_crashing(&s, base, 64 * VERBS, task);
        let landed: Vec<bool> = (0..VERBS)
            .map(|i| {
                let w = u64::from_le_bytes(mem[64 * i..64 * i + 8].try_into().unwrap());
                assert!(w == 0 || w == value(i), "seed {seed}: word {i} holds {w}");
                w != 0
            })
            .collect();
        let prefix = landed.iter().take_while(|&&l| l).count();
        assert!(
            landed[prefix..].iter().all(|&l| !l),
            "seed {seed}: a verb landed after one that did not: {landed:?}"
        );
        prefixes.insert(prefix);
    }
    assert!(
        prefixes.contains(&0) && prefixes.contains(&VERBS) && prefixes.len() >= 5,
        "prefixes seen: {prefixes:?}"
    );
}

/// A WRITE of five packets cut short by its client's crash lands whole packets from its start:
/// on the stress preset's 4096-byte path MTU (the largest InfiniBand allows) and on CHIME's
/// 1024-byte RoCE path. Over the seeds, nothing, all of it and cuts in between all happen.
#[test]
fn a_long_crashed_write_lands_whole_packets_only() {
    for net in [NetParams::stress(), NetParams::chime_testbed()] {
        let mtu = net.mtu_bytes as usize;
        let len = 4 * mtu + 1000;
        // Every byte nonzero and position-dependent, so a misplaced byte shows.
        let data: Vec<u8> = (0..len).map(|i| (i % 251 + 1) as u8).collect();
        let mut cuts = BTreeSet::new();
        for seed in 0..100 {
            let (s, addr) = setup(seed, net.clone(), len as u64);
            let c = s.client_on_own_thread(0);
            let task = Box::pin(async {
                let _ = c.write(addr, &data).await;
                unreachable!("a crashed client never sees its WRITE complete");
            });
            let mem = run_crashing(&s, addr, len, task);
            let kept = mem.iter().zip(&data).take_while(|(m, d)| m == d).count();
            assert!(
                mem[kept..].iter().all(|&b| b == 0),
                "seed {seed}, MTU {mtu}: bytes landed after the first {kept}"
            );
            assert!(
                kept % mtu == 0 || kept == len,
                "seed {seed}: {kept} bytes landed, not whole {mtu}-byte packets"
            );
            cuts.insert(kept);
        }
        let partial = cuts.iter().filter(|&&k| k > 0 && k < len).count();
        assert!(
            cuts.contains(&0) && cuts.contains(&len) && partial >= 2,
            "MTU {mtu}: bytes landed over the seeds: {cuts:?}"
        );
    }
}

/// A crash armed at the client's third awaited post strikes there, with no fault probability
/// at all: the first two WRITEs complete, the fourth never goes out, and the third lands or not
/// as a crash at a post does. Disarmed (`crash_within(0)`), nothing strikes.
#[test]
fn an_armed_crash_strikes_at_its_post() {
    for seed in 0..32 {
        let (s, addr) = setup(seed, NetParams::stress(), 32);
        s.set_faults(Faults::none());
        let c = s.client_on_own_thread(0);
        let completed = Cell::new(0);
        c.transport().crash_within(3);
        assert!(c.transport().crash_armed());
        let task = Box::pin(async {
            for i in 0..4u64 {
                let _ = c.write(addr.add(8 * i), &[0xA5; 8]).await;
                completed.set(completed.get() + 1);
            }
        });
        let mem = run_crashing(&s, addr, 32, task);
        assert_eq!(completed.get(), 2, "seed {seed}: two posts completed before the third");
        assert_eq!(&mem[..16], &[0xA5; 16], "seed {seed}");
        assert_eq!(&mem[24..], &[0; 8], "seed {seed}: the fourth never went out");
        assert_eq!(s.crashes().len(), 1, "seed {seed}");
    }
    let (s, addr) = setup(0, NetParams::stress(), 8);
    s.set_faults(Faults::none());
    let c = s.client_on_own_thread(0);
    c.transport().crash_within(1);
    c.transport().crash_within(0);
    assert!(!c.transport().crash_armed());
    let out = s.run([Box::pin(async { c.write(addr, &[1; 8]).await.unwrap() }) as Task]);
    assert!(out.crashed.is_empty() && out.all_finished(), "{out:?}");
}

/// A client that crashes at one doorbell of a round rung together (`Client::doorbells`) rings
/// none after it: with a crash armed at the round's second doorbell, the first lands whole, the
/// second a prefix or nothing, the third nothing, so what landed is a prefix of the round. (A
/// dead client once went on ringing the rest of the round, and could crash a second time.)
#[test]
fn a_crash_in_a_round_of_doorbells_rings_none_after_it() {
    use dmindex_fabric::verbs::MAX_BATCH;
    let n = 3 * MAX_BATCH;
    let mut partial = 0;
    for seed in 0..32 {
        let (s, addr) = setup(seed, NetParams::stress(), 8 * n as u64);
        s.set_faults(Faults::none());
        let c = s.client_on_own_thread(0);
        c.transport().crash_within(2);
        let task = Box::pin(async {
            let words = [[0xA5u8; 8]; 3 * MAX_BATCH];
            let mut ops: Vec<dmindex_fabric::BatchOp<'_>> = words
                .iter()
                .enumerate()
                .map(|(i, w)| dmindex_fabric::BatchOp::Write {
                    addr: addr.add(8 * i as u64),
                    data: w,
                })
                .collect();
            let _ = c.doorbells(&mut ops).await;
            unreachable!("the round's second doorbell crashes its client");
        });
        let mem = run_crashing(&s, addr, 8 * n, task);
        let landed: Vec<bool> = mem.chunks(8).map(|w| w == [0xA5; 8]).collect();
        let k = landed.iter().take_while(|&&l| l).count();
        assert!(landed[k..].iter().all(|&l| !l), "seed {seed}: not a prefix: {landed:?}");
        assert!((MAX_BATCH..=2 * MAX_BATCH).contains(&k), "seed {seed}: {k} WRITEs landed");
        partial += usize::from(k > MAX_BATCH && k < 2 * MAX_BATCH);
        assert_eq!(s.crashes().len(), 1, "seed {seed}: one crash");
    }
    assert!(partial > 0, "some seeds land part of the second doorbell");
}
