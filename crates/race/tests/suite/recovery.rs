//! Client-crash recovery in virtual time: a splitter killed at every point of a split (its task
//! dropped; verbs it posted still land), then another client writes and reads every key. The
//! waiter must get through (judging the dead splitter, fencing it and finishing or undoing its
//! split), and afterwards every key must hold its value in exactly one slot. Without the repair
//! the waiter never finishes.

use crate::common;

use dmindex_fabric::Client;
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_race::{Race, RaceSepHash};
use dmindex_sim::{Sim, SimTransport, Task};

/// Keys the test writes: a one-group segment holds 21, so the first split comes early and the
/// waiter's keys split again behind the repair.
const KEYS: u64 = 40;
/// Kill instants spread over the split.
const POINTS: u64 = 48;

fn config() -> IndexConfig {
    IndexConfig { extra: common::opts(1, 0), ..IndexConfig::default() }
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

fn stat(t: &Race, name: &str) -> u64 {
    let s = <Race as PointIndex<SimTransport>>::stats(t);
    s.extra.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

/// A table with a handle per client: `dead` (compute node 0) will be killed, `live` (1)
/// waits on what it left.
struct Setup<I> {
    s: Sim,
    dead: Client<SimTransport>,
    live: Client<SimTransport>,
    a: I,
    b: I,
}

fn setup<I: PointIndex<SimTransport>>() -> Setup<I> {
    let s = common::sim(11);
    let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let a = s.block_on(async { I::create(&dead, &config(), 0).await.unwrap() });
    let b = s.block_on(async { I::open(&live, &config(), 1).await.unwrap() });
    Setup { s, dead, live, a, b }
}

/// The first key whose insert (keys from 1, one client, no faults: a deterministic run)
/// splits, and how long that insert takes.
fn first_split<I: PointIndex<SimTransport>>(table: fn(&I) -> &Race) -> (u64, u64) {
    let t = setup::<I>();
    // Ends within 22 keys: a one-group segment has 21 slots.
    for k in 1..=KEYS {
        let start = t.s.now_ns();
        t.s.block_on(async { t.a.insert(&t.dead, &key(k), &key(k)).await.unwrap() });
        if stat(table(&t.a), "splits") > 0 {
            return (k, t.s.now_ns() - start);
        }
    }
    panic!("no split in {KEYS} keys");
}

/// The same run, its insert of key `k` killed `run_ns` into it.
fn killed<I: PointIndex<SimTransport>>(k: u64, run_ns: u64) -> Setup<I> {
    let t = setup::<I>();
    for j in 1..k {
        t.s.block_on(async { t.a.insert(&t.dead, &key(j), &key(j)).await.unwrap() });
    }
    let insert = async { t.a.insert(&t.dead, &key(k), &key(k)).await.unwrap() };
    let out = t.s.run_until([Box::pin(insert) as Task], t.s.now_ns() + run_ns);
    assert!(out.crashed.is_empty(), "{out:?}");
    t
}

fn kill_at_every_point<I: PointIndex<SimTransport>>(table: fn(&I) -> &Race) {
    let (k, took) = first_split::<I>(table);
    let mut repaired = 0;
    for p in 0..=POINTS {
        let t = killed::<I>(k, took * p / POINTS + 1);
        let (s, live, b) = (&t.s, &t.live, &t.b);
        // The waiter: every key written (the killed insert's too), then read back.
        let task = async {
            for k in 1..=KEYS {
                b.insert(live, &key(k), &key(k + 1000)).await.unwrap();
            }
            for k in 1..=KEYS {
                let got = b.search(live, &key(k)).await.unwrap();
                assert_eq!(got, Some(key(k + 1000).to_vec()), "point {p}: key {k}");
            }
        };
        let out = s.run_until([Box::pin(task) as Task], s.now_ns() + 400_000_000);
        assert!(out.all_finished(), "point {p} of {POINTS}: the waiter is stuck: {out:?}");
        for k in 1..=KEYS {
            let n = s.block_on(async { table(b).slots_holding(live, &key(k)).await.unwrap() });
            assert_eq!(n, 1, "point {p}: key {k} in {n} slots");
        }
        repaired += stat(table(b), "crash_repairs");
    }
    assert!(repaired > 0, "no kill point left anything to repair");
}

#[test]
fn race_split_killed_at_every_point() {
    kill_at_every_point::<Race>(|t| t);
}

#[test]
fn race_sephash_split_killed_at_every_point() {
    kill_at_every_point::<RaceSepHash>(|t| t.table());
}
