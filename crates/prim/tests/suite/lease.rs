//! Leases and lock recovery in virtual time: a dead holder's lock is freed after three leases
//! with the word the index's repair computes, and the dead holder, if it comes back, can no
//! longer write; a slow holder that renews is never judged dead.

use std::cell::Cell;

use dmindex_fabric::{Client, FabricError, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lease::{self, DEAD_AFTER_LEASES, FENCED};
use dmindex_prim::lock::{holder, LocalLocks, Repair};
use dmindex_sim::{Faults, NetParams, Sim, SimConfig, SimTransport, Task};

fn sim(seed: u64) -> Sim {
    Sim::new(SimConfig::stress_with_delays(seed)).unwrap()
}

/// Repairs with a fixed metadata word and counts its calls.
struct Fixed(Cell<u32>);

impl Repair<SimTransport> for Fixed {
    async fn free_word(
        &self,
        _: &Client<SimTransport>,
        _: GlobalAddr,
        held: u64,
    ) -> IndexResult<u64> {
        assert!(holder(held).is_some(), "repairs a named holder's word");
        self.0.set(self.0.get() + 1);
        Ok(0x77)
    }
}

#[test]
fn a_dead_holders_lock_is_repaired_and_the_holder_fenced() {
    for seed in 0..20 {
        let s = sim(seed);
        let (dead, waiter) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let a = s.block_on(async { dead.alloc(64, 64).await.unwrap() });
        let (tables, repair) =
            ([LocalLocks::default(), LocalLocks::default()], Fixed(Cell::new(0)));
        let (taken_at, locked) = (Cell::new(0u64), Cell::new(false));
        let d = async {
            let held = tables[0].acquire(&dead, a, || {}, &repair).await.unwrap();
            locked.set(true);
            // Paused, not dead: it holds the lock and renews nothing for a long while.
            dead.pause(200_000_000).await;
            let e = dead.write(a.add(8), &[1; 8]).await.unwrap_err();
            assert!(matches!(e, FabricError::Fenced { node: 0 }), "seed {seed}: {e}");
            std::mem::forget(held);
        };
        let w = async {
            // Bounded: the other task locks within its first round trips.
            while !locked.get() {
                waiter.pause(1_000).await;
            }
            let start = waiter.now_ns();
            let held = tables[1].acquire(&waiter, a, || {}, &repair).await.unwrap();
            taken_at.set(waiter.now_ns() - start);
            assert_eq!(held.word(), 0x77, "seed {seed}: the repair's free word");
            held.unlock_with(&waiter, 0x78).await.unwrap();
        };
        let out = s.run([Box::pin(d) as Task, Box::pin(w) as Task]);
        assert!(out.all_finished(), "seed {seed}: {out:?}");
        let lease = dead.transport().lease_ns();
        assert!(taken_at.get() >= DEAD_AFTER_LEASES * lease, "seed {seed}: judged too early");
        assert!(taken_at.get() < (DEAD_AFTER_LEASES + 2) * lease, "seed {seed}: judged too late");
        assert_eq!(repair.0.get(), 1, "seed {seed}: repaired once");
        let m = dead.membership().member.get();
        let (slot, _) = lease::parse_member(m);
        let st = s.block_on(async { waiter.read_word(lease::slot_addr(slot)).await.unwrap() });
        assert_eq!(lease::state_of(st), FENCED, "seed {seed}");
        assert_eq!(s.block_on(async { waiter.read_word(a.add(8)).await.unwrap() }), 0);
    }
}

/// A holder that crashes (the simulator's crash, as a fault would) right after it locked: the
/// simulator logs the crash and, once the waiter fenced the dead member on every memory node,
/// the waiter and when. That is what `check`'s time to recover is measured from; it is at least
/// the three leases a judge waits and well under five, on one memory node and on three.
#[test]
fn a_crashed_holder_is_logged_fenced_by_its_waiter_within_three_to_five_leases() {
    for (seed, nodes) in (0..10).flat_map(|s| [(s, 1u16), (s, 3)]) {
        let s = Sim::new(SimConfig {
            memory_nodes: nodes,
            node_size: 16 << 20,
            chunk_size: 1 << 20,
            faults: Faults::delays(),
            ..SimConfig::new(seed, NetParams::stress())
        })
        .unwrap();
        let (dead, waiter) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let a = s.block_on(async { dead.alloc(64, 64).await.unwrap() });
        let (tables, repair) =
            ([LocalLocks::default(), LocalLocks::default()], Fixed(Cell::new(0)));
        let locked = Cell::new(false);
        let d = async {
            let held = tables[0].acquire(&dead, a, || {}, &repair).await.unwrap();
            locked.set(true);
            std::mem::forget(held);
            dead.transport().crash().await
        };
        let w = async {
            // Bounded: the other task locks within its first round trips.
            while !locked.get() {
                waiter.pause(1_000).await;
            }
            let held = tables[1].acquire(&waiter, a, || {}, &repair).await.unwrap();
            held.unlock_with(&waiter, 0).await.unwrap();
        };
        let out = s.run([Box::pin(d) as Task, Box::pin(w) as Task]);
        assert_eq!((out.crashed.len(), out.finished.len()), (1, 1), "seed {seed}: {out:?}");
        let log = s.crashes();
        assert_eq!(log.len(), 1, "seed {seed}: {log:?}");
        let c = log[0];
        assert_eq!(c.client, dead.transport().id());
        assert_eq!(c.member, dead.membership().member.get(), "seed {seed}");
        let Some((by, at)) = c.fenced else { panic!("seed {seed}: not fenced: {c:?}") };
        assert_eq!(by, waiter.transport().id(), "seed {seed}");
        assert_eq!(waiter.stats().fences(), 1, "seed {seed}: one member fenced, counted once");
        let lease = waiter.transport().lease_ns();
        let took = at - c.at_ns;
        assert!(took >= DEAD_AFTER_LEASES * lease, "seed {seed}, {nodes} nodes: {took} ns");
        assert!(took < (DEAD_AFTER_LEASES + 2) * lease, "seed {seed}, {nodes} nodes: {took} ns");
    }
}

#[test]
fn a_slow_holder_that_renews_keeps_its_lock() {
    let s = sim(3);
    let (slow, waiter) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let a = s.block_on(async { slow.alloc(64, 64).await.unwrap() });
    let (tables, repair) = ([LocalLocks::default(), LocalLocks::default()], Fixed(Cell::new(0)));
    let (released, locked) = (Cell::new(false), Cell::new(false));
    let h = async {
        let held = tables[0].acquire(&slow, a, || {}, &repair).await.unwrap();
        locked.set(true);
        // Ten leases of work, renewing as it goes.
        for _ in 0..40 {
            slow.pause(2_500_000).await;
            lease::renew_if_due(&slow).await.unwrap();
        }
        released.set(true);
        held.unlock_with(&slow, 5).await.unwrap();
        slow.write(a.add(8), &[1; 8]).await.unwrap();
    };
    let w = async {
        // Bounded: the other task locks within its first round trips.
        while !locked.get() {
            waiter.pause(1_000).await;
        }
        let held = tables[1].acquire(&waiter, a, || {}, &repair).await.unwrap();
        assert!(released.get(), "taken before the slow holder let go");
        assert_eq!(held.word(), 5);
        held.unlock_with(&waiter, 0).await.unwrap();
    };
    let out = s.run([Box::pin(h) as Task, Box::pin(w) as Task]);
    assert!(out.all_finished(), "{out:?}");
    assert_eq!(repair.0.get(), 0, "a live holder was repaired");
}

/// The first repair call stalls (its caller "dies" mid-repair); later calls finish.
struct StallsFirst(Cell<u32>);

impl Repair<SimTransport> for StallsFirst {
    async fn free_word(&self, c: &Client<SimTransport>, _: GlobalAddr, _: u64) -> IndexResult<u64> {
        self.0.set(self.0.get() + 1);
        if self.0.get() == 1 {
            c.pause(500_000_000).await;
        }
        Ok(0x55)
    }
}

/// A waiter that took a dead holder's lock over and then stopped mid-repair holds the lock under
/// its own name: the next waiter judges it in turn, fences it and repairs again.
#[test]
fn a_repairer_that_dies_is_repaired_after() {
    let s = sim(11);
    let [dead, r1, r2] = [0, 1, 2].map(|cn| s.client_on_own_thread(cn));
    let a = s.block_on(async { dead.alloc(64, 64).await.unwrap() });
    let tables = [LocalLocks::default(), LocalLocks::default(), LocalLocks::default()];
    let repair = StallsFirst(Cell::new(0));
    let locked = Cell::new(false);
    let d = async {
        let held = tables[0].acquire(&dead, a, || {}, &repair).await.unwrap();
        locked.set(true);
        dead.pause(1_000_000_000).await;
        std::mem::forget(held);
    };
    let first = async {
        // Bounded: the holder locks within its first round trips.
        while !locked.get() {
            r1.pause(1_000).await;
        }
        let held = tables[1].acquire(&r1, a, || {}, &repair).await;
        // It took over, stalled in the repair past three leases, and was fenced meanwhile.
        let e = r1.write(a.add(8), &[9; 8]).await.unwrap_err();
        assert!(matches!(e, FabricError::Fenced { .. }), "{e}");
        std::mem::forget(held);
    };
    let second = async {
        // Bounded as above; then wait until the first repairer took over.
        while !locked.get() {
            r2.pause(1_000).await;
        }
        r2.pause(50_000_000).await;
        let held = tables[2].acquire(&r2, a, || {}, &repair).await.unwrap();
        assert_eq!(held.word(), 0x55);
        held.unlock_with(&r2, 0x56).await.unwrap();
    };
    let out = s.run([Box::pin(d) as Task, Box::pin(first) as Task, Box::pin(second) as Task]);
    assert!(out.all_finished(), "{out:?}");
    assert_eq!(repair.0.get(), 2, "repaired twice: the second time by the next waiter");
    assert_eq!(s.block_on(async { r2.read_word(a).await.unwrap() }), 0x56);
    assert_eq!(s.block_on(async { r2.read_word(a.add(8)).await.unwrap() }), 0);
}

/// A full member table: clients that ended without leaving keep their slots LIVE. The next
/// joiner waits three leases, fences a slot that did not renew and takes it; the client that
/// held it can no longer write.
#[test]
fn a_full_table_is_reclaimed_from_clients_that_stopped_renewing() {
    let s = Sim::new(SimConfig {
        node_size: 16 << 20,
        chunk_size: 1 << 20,
        ..SimConfig::new(5, NetParams::stress())
    })
    .unwrap();
    let first = s.client_on_own_thread(0);
    let a = s.block_on(async { first.alloc(64, 64).await.unwrap() });
    s.block_on(async { lease::join(&first).await.unwrap() });
    let others: Vec<_> =
        (1..dmindex_fabric::layout::MEMBER_SLOTS).map(|_| s.client_on_own_thread(0)).collect();
    for c in &others {
        s.block_on(async { lease::join(c).await.unwrap() });
    }
    let late = s.client_on_own_thread(1);
    let member = s.block_on(async { lease::join(&late).await.unwrap() });
    let (slot, _) = lease::parse_member(member);
    let holders = std::iter::once(&first).chain(&others);
    let evicted: Vec<_> =
        holders.filter(|c| lease::parse_member(c.membership().member.get()).0 == slot).collect();
    assert_eq!(evicted.len(), 1, "one client's slot was taken");
    let e = s.block_on(async { evicted[0].write(a, &[1; 8]).await.unwrap_err() });
    assert!(matches!(e, FabricError::Fenced { .. }), "{e}");
    s.block_on(async { late.write(a, &[2; 8]).await.unwrap() });
}

/// Members join the lowest slot that is FREE or FENCED, so the slots ever joined are a prefix
/// of the table and `slots_in_use` bounds a scan of the members; a fenced slot is the next
/// joiner's, whose intents start cleared.
#[test]
fn members_join_the_lowest_free_slot() {
    let s = sim(1);
    let cs: Vec<_> = (0..3).map(|i| s.client_on_own_thread(i)).collect();
    s.block_on(async {
        assert_eq!(lease::slots_in_use(&cs[0]).await.unwrap(), 0);
        for (i, c) in cs.iter().enumerate() {
            let m = lease::join(c).await.unwrap();
            assert_eq!(lease::parse_member(m).0, i as u32);
        }
        assert_eq!(lease::slots_in_use(&cs[0]).await.unwrap(), 3);
        // Slot 1 fenced (its member judged dead by a watch that saw no renewal): the next
        // joiner takes it, not slot 3.
        let m1 = cs[1].membership().member.get();
        let mut watch = lease::Watch::new();
        let fenced = async {
            // Ends after three leases and a little: the member never renews.
            loop {
                if watch.look(&cs[0], 1, m1).await.unwrap() == lease::Verdict::Fenced {
                    return;
                }
                cs[0].pause(1_000_000).await;
            }
        };
        fenced.await;
        let late = s.client_on_own_thread(0);
        assert_eq!(lease::parse_member(lease::join(&late).await.unwrap()).0, 1);
        assert_eq!(lease::slots_in_use(&cs[0]).await.unwrap(), 3);
    });
}

/// A sighting judges from the judge's own slot reads, however far apart: the same heartbeat
/// and word three leases apart is dead (and fenced); a heartbeat that moves is alive.
#[test]
fn a_sighting_needs_three_leases_without_a_heartbeat() {
    let s = sim(2);
    let (judge, held, renewing) =
        (s.client_on_own_thread(0), s.client_on_own_thread(1), s.client_on_own_thread(2));
    s.block_on(async {
        let (dead, live) =
            (lease::join(&held).await.unwrap(), lease::join(&renewing).await.unwrap());
        let lease_ns = judge.transport().lease_ns();
        let (mut on_dead, mut on_live) = (lease::Sighting::new(), lease::Sighting::new());
        let start = judge.now_ns();
        // Ends within four leases: the dead member is fenced after three.
        let judged = loop {
            lease::renew_if_due(&renewing).await.unwrap();
            let mut b = [0u8; 32];
            let (d, l) = (lease::parse_member(dead).0, lease::parse_member(live).0);
            judge.read(lease::slot_addr(d), &mut b[..16]).await.unwrap();
            judge.read(lease::slot_addr(l), &mut b[16..]).await.unwrap();
            let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
            let v = on_live.look(&judge, 9, live, w(16), w(24)).await.unwrap();
            assert_eq!(v, lease::Verdict::Wait, "a member that renews is alive");
            if on_dead.look(&judge, 9, dead, w(0), w(8)).await.unwrap() == lease::Verdict::Fenced {
                break judge.now_ns() - start;
            }
            // Looks far apart are fine: the heartbeat is the evidence.
            judge.pause(lease_ns * 3 / 4).await;
        };
        assert!(judged >= DEAD_AFTER_LEASES * lease_ns && judged < 5 * lease_ns, "{judged}");
        let st = judge.read_word(lease::slot_addr(lease::parse_member(dead).0)).await.unwrap();
        assert_eq!(lease::state_of(st), FENCED);
        let refused = held.read_word(lease::slot_addr(0)).await.unwrap_err();
        assert!(matches!(refused, FabricError::Fenced { node: 0 }), "{refused}");
    });
}
