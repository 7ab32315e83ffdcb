//! Spear recovery in virtual time: a client that dies with a share of a Spear word — a `+1`,
//! a claim, or a doorbell that landed only in part — is judged by the lease rules, fenced, and
//! its share dropped exactly once, while live writers keep entering and leaving the word; a dead
//! claim is taken over, finished and released; a slow holder that renews is never judged dead.

use std::cell::Cell;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lease::{self, DEAD_AFTER_LEASES, FENCED};
use dmindex_prim::spear::intent::Mine;
use dmindex_prim::spear::{self, Claim, Claimed, Panel, Recover, CLAIM, IDU};
use dmindex_sim::{Sim, SimConfig, SimTransport, Task};

fn sim(seed: u64) -> Sim {
    Sim::new(SimConfig::stress_with_delays(seed)).unwrap()
}

/// An index with nothing to roll forward, that counts the claims it finished (taking
/// `finish_ns` over each).
#[derive(Default)]
struct Counting {
    finished: Cell<u32>,
    finish_ns: u64,
}

impl Recover<SimTransport> for Counting {
    fn born_record(&self, _: GlobalAddr) -> Option<GlobalAddr> {
        None
    }

    async fn prepare(&self, _: &Client<SimTransport>, _: GlobalAddr, _: u64) -> IndexResult<()> {
        Ok(())
    }

    async fn finish(
        &self,
        c: &Client<SimTransport>,
        _: GlobalAddr,
        _: GlobalAddr,
    ) -> IndexResult<()> {
        self.finished.set(self.finished.get() + 1);
        if self.finish_ns > 0 {
            c.pause(self.finish_ns).await;
        }
        Ok(())
    }
}

/// An SMO as an index runs one: enter, claim, and after giving up wait unclaimed, until the
/// node is held. Ends once it is: the run's deadline stops it otherwise.
async fn smo(c: &Client<SimTransport>, word: GlobalAddr, rec: &Counting) -> Claimed {
    let (mut buf, mut panel) = ([0u8; 64], Panel::new());
    loop {
        let Some(held) = spear::enter(c, word, word, &mut buf, rec).await.unwrap() else {
            continue;
        };
        match spear::claim(c, held, word, &mut buf, 16, &mut panel, rec).await.unwrap() {
            Claim::Held(claimed) => return claimed,
            Claim::Lost => {}
            Claim::GaveUp => {
                spear::wait_drain(c, word, word, 16, &mut panel, rec).await.unwrap();
            }
        }
    }
}

/// A writer that enters and leaves `word` until `stop`, pausing a little in between.
async fn writer(c: &Client<SimTransport>, word: GlobalAddr, rec: &Counting, stop: &Cell<bool>) {
    let mut buf = [0u8; 64];
    // Ends when the SMO is done.
    while !stop.get() {
        if let Some(held) = spear::enter(c, word, word, &mut buf, rec).await.unwrap() {
            c.pause(3_000).await;
            held.leave_now(c).await.unwrap();
        }
        c.pause(20_000).await;
    }
}

/// How a client dies with a share of the word, or with a doorbell landed only in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Death {
    /// Entered: its intent and its `+1` landed.
    Entered,
    /// Only the intent WRITE of its entering doorbell landed, not the FAA.
    IntentOnly,
    /// Its leaving doorbell landed its `FAA −1`, not the WRITE that marks its intent done.
    LeftWithoutDone,
    /// Entered and added a claim it never dropped (an SMO that lost a race and died).
    LostClaim,
}

/// What `death` leaves in the word, done by `c`.
async fn die(c: &Client<SimTransport>, word: GlobalAddr, death: Death) {
    let mut buf = [0u8; 64];
    let rec = Counting::default();
    if death == Death::IntentOnly {
        let intent = Mine::enter(c, word).await.unwrap();
        c.batch(&mut [intent.write()]).await.unwrap();
        return;
    }
    let held = spear::enter(c, word, word, &mut buf, &rec).await.unwrap().unwrap();
    let _ = held;
    match death {
        Death::LeftWithoutDone => drop(c.faa(word, IDU.wrapping_neg()).await.unwrap()),
        Death::LostClaim => drop(c.faa(word, CLAIM).await.unwrap()),
        _ => {}
    }
}

/// Two clients die: one that entered (so the word cannot drain and must be repaired; paused,
/// not gone, it comes back later and is refused), and one that died as `death`, whose share, if
/// any, must be dropped once and no more. Live writers come and go meanwhile. The word ends at
/// exactly 0 once everyone left.
#[test]
fn a_dead_share_is_dropped_once_and_the_smo_gets_through() {
    for death in [Death::Entered, Death::IntentOnly, Death::LeftWithoutDone, Death::LostClaim] {
        for seed in 0..6 {
            dead_shares(death, seed);
        }
    }
}

fn dead_shares(death: Death, seed: u64) {
    let s = sim(seed);
    let (zombie, dead) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let smo_c = s.client_on_own_thread(2);
    let writers: Vec<_> = (0..3).map(|i| s.client_on_own_thread(3 + i)).collect();
    let word = s.block_on(async { zombie.alloc(64, 64).await.unwrap() });
    let (rec, stop, died) = (Counting::default(), Cell::new(false), Cell::new(0));
    let took = Cell::new(0u64);
    let z = async {
        let mut buf = [0u8; 64];
        let held = spear::enter(&zombie, word, word, &mut buf, &rec).await.unwrap().unwrap();
        died.set(died.get() + 1);
        // Paused, not gone: back after many leases, its leaving doorbell is refused.
        zombie.pause(200_000_000).await;
        let e = held.leave_now(&zombie).await.unwrap_err();
        assert!(e.to_string().contains("fenced"), "{death:?} seed {seed}: {e}");
    };
    let d = async {
        // Bounded: the zombie enters within its first round trips.
        while died.get() < 1 {
            dead.pause(1_000).await;
        }
        die(&dead, word, death).await;
        died.set(died.get() + 1);
    };
    let m = async {
        // Bounded: the two dying clients' few verbs come first.
        while died.get() < 2 {
            smo_c.pause(1_000).await;
        }
        let start = smo_c.now_ns();
        let claimed = smo(&smo_c, word, &rec).await;
        took.set(smo_c.now_ns() - start);
        smo_c.batch(&mut claimed.release(&smo_c).ops()).await.unwrap();
        stop.set(true);
    };
    let mut tasks = vec![Box::pin(z) as Task, Box::pin(d) as Task, Box::pin(m) as Task];
    for w in &writers {
        tasks.push(Box::pin(writer(w, word, &rec, &stop)));
    }
    let lease = zombie.transport().lease_ns();
    let out = s.run_until(tasks, 40 * lease);
    assert!(out.all_finished(), "{death:?} seed {seed}: {out:?}");
    let judged = took.get();
    assert!(judged >= DEAD_AFTER_LEASES * lease, "{death:?} seed {seed}: judged too early");
    assert!(judged < 12 * lease, "{death:?} seed {seed}: judged too late ({judged} ns)");
    assert_eq!(s.block_on(smo_c.read_word(word)).unwrap(), 0, "{death:?} seed {seed}");
    if death != Death::LostClaim {
        assert_eq!(rec.finished.get(), 0, "{death:?} seed {seed}: no claim to take over");
    }
    let (slot, _) = lease::parse_member(zombie.membership().member.get());
    let status = s.block_on(smo_c.read_word(lease::slot_addr(slot))).unwrap();
    assert_eq!(lease::state_of(status), FENCED, "{death:?} seed {seed}");
}

/// Enters `word` alone, claims it and dies holding the claim, in the middle of its SMO.
async fn claim_and_die(c: &Client<SimTransport>, word: GlobalAddr, rec: &Counting) {
    let mut buf = [0u8; 64];
    let held = spear::enter(c, word, word, &mut buf, rec).await.unwrap().unwrap();
    let claim = spear::claim(c, held, word, &mut buf, 4, &mut Panel::new(), rec).await;
    let Claim::Held(claimed) = claim.unwrap() else { panic!("alone on the word") };
    let _ = claimed;
}

#[test]
fn a_dead_claim_is_taken_over_finished_and_released() {
    for seed in 0..10 {
        let s = sim(seed);
        let (dead, waiter) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let word = s.block_on(async { dead.alloc(64, 64).await.unwrap() });
        let (rec, died, took) = (Counting::default(), Cell::new(false), Cell::new(0u64));
        let d = async {
            claim_and_die(&dead, word, &rec).await;
            died.set(true);
        };
        let w = async {
            // Bounded: the dead client's few verbs come first.
            while !died.get() {
                waiter.pause(1_000).await;
            }
            let start = waiter.now_ns();
            let mut buf = [0u8; 64];
            let first = spear::enter(&waiter, word, word, &mut buf, &rec).await.unwrap();
            assert!(first.is_none(), "seed {seed}: turned away, then the claim was repaired");
            took.set(waiter.now_ns() - start);
            let held = spear::enter(&waiter, word, word, &mut buf, &rec).await.unwrap();
            held.expect("unclaimed after the repair").leave_now(&waiter).await.unwrap();
        };
        let lease = dead.transport().lease_ns();
        let out = s.run_until([Box::pin(d) as Task, Box::pin(w) as Task], 40 * lease);
        assert!(out.all_finished(), "seed {seed}: {out:?}");
        assert!(took.get() >= DEAD_AFTER_LEASES * lease, "seed {seed}: judged too early");
        assert_eq!(rec.finished.get(), 1, "seed {seed}: finished once");
        assert_eq!(s.block_on(waiter.read_word(word)).unwrap(), 0, "seed {seed}");
    }
}

/// Three waiters see the same quiet word, a dead SMO's claim and its own +1 (`2³² + 1`, the
/// word a claim of one's own also makes): exactly one takes it over and finishes it, however
/// long the finishing takes, and the word ends at 0. (With a takeover to `2³² + 1`, a CAS that
/// changes nothing, every waiter won, and one's release dropped the next claim.)
#[test]
fn of_waiters_on_one_dead_claim_exactly_one_takes_it_over() {
    for seed in 0..10 {
        let s = sim(seed);
        let dead = s.client_on_own_thread(0);
        let waiters: Vec<_> = (1..=3).map(|cn| s.client_on_own_thread(cn)).collect();
        let word = s.block_on(async { dead.alloc(64, 64).await.unwrap() });
        let lease = dead.transport().lease_ns();
        let rec = Counting { finish_ns: lease / 2, ..Counting::default() };
        s.block_on(claim_and_die(&dead, word, &rec));
        assert_eq!(s.block_on(dead.read_word(word)).unwrap(), CLAIM + IDU);
        let wait = |c| {
            let rec = &rec;
            async move {
                let mut buf = [0u8; 64];
                // Ends once the repaired word lets it in (the run's deadline otherwise).
                loop {
                    if let Some(held) = spear::enter(c, word, word, &mut buf, rec).await.unwrap() {
                        held.leave_now(c).await.unwrap();
                        return;
                    }
                }
            }
        };
        let tasks: Vec<Task> = waiters.iter().map(|c| Box::pin(wait(c)) as Task).collect();
        let out = s.run_until(tasks, s.now_ns() + 40 * lease);
        assert!(out.all_finished(), "seed {seed}: {out:?}");
        assert_eq!(rec.finished.get(), 1, "seed {seed}: taken over and finished once");
        assert_eq!(s.block_on(waiters[0].read_word(word)).unwrap(), 0, "seed {seed}");
    }
}

#[test]
fn a_slow_holder_that_renews_keeps_its_share() {
    let s = sim(5);
    let (slow, smo_c) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let word = s.block_on(async { slow.alloc(64, 64).await.unwrap() });
    let (rec, entered, left) = (Counting::default(), Cell::new(false), Cell::new(false));
    let h = async {
        let mut buf = [0u8; 64];
        let held = spear::enter(&slow, word, word, &mut buf, &rec).await.unwrap().unwrap();
        entered.set(true);
        // Ten leases in flight on the node, renewing as it goes.
        for _ in 0..40 {
            slow.pause(2_500_000).await;
            lease::renew_if_due(&slow).await.unwrap();
        }
        left.set(true);
        held.leave_now(&slow).await.unwrap();
    };
    let m = async {
        // Bounded: the other task enters within its first round trips.
        while !entered.get() {
            smo_c.pause(1_000).await;
        }
        let claimed = smo(&smo_c, word, &rec).await;
        assert!(left.get(), "held before the slow holder left");
        smo_c.batch(&mut claimed.release(&smo_c).ops()).await.unwrap();
    };
    let out = s.run_until([Box::pin(h) as Task, Box::pin(m) as Task], 100 * 10_000_000);
    assert!(out.all_finished(), "{out:?}");
    assert_eq!(s.block_on(smo_c.read_word(word)).unwrap(), 0);
}
