//! The races RACE must close, provoked on purpose under the simulator (torn reads, delays):
//! racing inserts of one absent key, and splits under a storm of concurrent inserts. Each test
//! looks at remote memory afterwards, not only at what the operations returned.

use crate::common;

use common::sim;
use dmindex_fabric::Client;
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_race::Race;
use dmindex_sim::{Faults, Sim, SimTransport, Task};

fn config() -> IndexConfig {
    IndexConfig {
        extra: vec![("groups".into(), "1".into()), ("depth".into(), "0".into())],
        ..IndexConfig::default()
    }
}

fn stat(idx: &Race, name: &str) -> u64 {
    let s = <Race as PointIndex<SimTransport>>::stats(idx);
    s.extra.iter().find(|(k, _)| *k == name).map(|&(_, v)| v).unwrap()
}

/// Clients, handles on three compute nodes, and the table, created fault-free.
fn setup(sim: &Sim, clients: usize) -> (Vec<Client<SimTransport>>, Vec<Race>) {
    let setup = sim.client_on_own_thread(0);
    sim.block_on(<Race as PointIndex<SimTransport>>::create(&setup, &config(), 0)).unwrap();
    let handles: Vec<Race> = (0..3)
        .map(|cn| sim.block_on(Race::open(&sim.client_on_own_thread(cn), &config(), cn)).unwrap())
        .collect();
    let clients = (0..clients).map(|i| sim.client_on_own_thread((i % 3) as u16)).collect();
    (clients, handles)
}

fn faults() -> Faults {
    Faults::delays()
}

/// Runs `tasks` to the end under the faults set, none stuck or crashed, then, fault-free, a
/// fresh client and handle on compute node 1 to look at what they left.
fn run_then_open<'a>(
    sim: &Sim,
    seed: u64,
    tasks: impl IntoIterator<Item = Task<'a>>,
) -> (Client<SimTransport>, Race) {
    let out = sim.run_until(tasks, sim.now_ns() + 2_000_000_000);
    assert!(out.stuck.is_empty() && out.crashed.is_empty(), "seed {seed}: {out:?}");
    sim.set_faults(Faults::default());
    let c = sim.client_on_own_thread(1);
    let fresh = sim.block_on(Race::open(&c, &config(), 1)).unwrap();
    (c, fresh)
}

const HOT: u64 = 48;

/// Twelve clients insert the same 48 keys, in the same order, each first inserting a key of its
/// own: every shared key is inserted absent by several clients at once, while the other keys
/// they insert change which combined bucket each sees as less loaded, so racing inserts CAS
/// different slots (RACE's duplicates; here all but one are withdrawn or aborted before they
/// commit), and the one-group segments split.
/// Afterwards every key is in exactly one slot.
#[test]
fn racing_inserts_of_one_key_leave_one_slot() {
    let mut raced = 0;
    for seed in 0..30 {
        let sim = sim(seed);
        let (clients, handles) = setup(&sim, 12);
        sim.set_faults(faults());
        let tasks = clients.iter().enumerate().map(|(i, c)| {
            let idx = &handles[i % 3];
            Box::pin(async move {
                for hot in 1..=HOT {
                    let own = (1000 + i as u64 * 100 + hot).to_be_bytes();
                    idx.insert(c, &own, &own).await.unwrap();
                    let v = (i as u64).to_be_bytes();
                    idx.insert(c, &hot.to_be_bytes(), &v).await.unwrap();
                }
            }) as Task
        });
        let (c, fresh) = run_then_open(&sim, seed, tasks);
        sim.block_on(async {
            for hot in 1..=HOT {
                let k = hot.to_be_bytes();
                let n = fresh.slots_holding(&c, &k).await.unwrap();
                assert_eq!(n, 1, "seed {seed}: key {hot} in {n} slots");
                let v = fresh.search(&c, &k).await.unwrap().expect("present");
                assert!(u64::from_be_bytes(v.try_into().unwrap()) < 12);
            }
            for i in 0..12u64 {
                for hot in 1..=HOT {
                    let own = (1000 + i * 100 + hot).to_be_bytes();
                    assert_eq!(fresh.search(&c, &own).await.unwrap(), Some(own.to_vec()));
                    assert_eq!(fresh.slots_holding(&c, &own).await.unwrap(), 1);
                }
            }
        });
        raced += handles
            .iter()
            .map(|h| stat(h, "tentative_aborts") + stat(h, "insert_withdrawals"))
            .sum::<u64>();
        let splits: u64 = handles.iter().map(|h| stat(h, "splits")).sum();
        assert!(splits > 0, "seed {seed}: no split happened");
    }
    assert!(raced > 0, "no insert ever met another's entry: the race was not exercised");
}

/// Sixteen clients insert 50 distinct keys each into one-group segments from a one-segment
/// directory: hundreds of splits and directory doublings race inserts into the segments being
/// split. Every key is then found, with its value, in exactly one slot, through a cold handle.
#[test]
fn splits_under_concurrent_inserts_lose_nothing() {
    for seed in 0..10 {
        let sim = sim(seed);
        let (clients, handles) = setup(&sim, 16);
        sim.set_faults(faults());
        common::insert_storm(&sim, &clients, &handles, seed, 5_000_000_000);
        let splits: u64 = handles.iter().map(|h| stat(h, "splits")).sum();
        assert!(splits >= 16, "seed {seed}: only {splits} splits for 800 keys");
        sim.set_faults(Faults::default());
        let c = sim.client_on_own_thread(2);
        let fresh = sim.block_on(Race::open(&c, &config(), 2)).unwrap();
        sim.block_on(async {
            for k in 1..=800u64 {
                let k = k.to_be_bytes();
                assert_eq!(fresh.search(&c, &k).await.unwrap(), Some(k.to_vec()), "seed {seed}");
                assert_eq!(fresh.slots_holding(&c, &k).await.unwrap(), 1, "seed {seed}");
            }
            let lf = fresh.load_factor(&c).await.unwrap().unwrap();
            assert!(lf > 0.2 && lf <= 1.0, "seed {seed}: load factor {lf}");
        });
        assert!(stat(&fresh, "directory_depth") >= 4, "seed {seed}");
    }
}

/// Twelve clients update and upsert the same few keys under delays: one whose CAS loses to
/// another write of its key is done without a second search, and the key then holds a value
/// some client wrote, in exactly one slot.
#[test]
fn a_write_that_loses_to_a_later_write_of_its_key_is_done() {
    let mut superseded = 0;
    for seed in 0..10 {
        let sim = sim(seed);
        let (clients, handles) = setup(&sim, 12);
        let hot: Vec<[u8; 8]> = (1..=3u64).map(u64::to_be_bytes).collect();
        sim.block_on(async {
            for k in &hot {
                handles[0].insert(&clients[0], k, &[0; 8]).await.unwrap();
            }
        });
        sim.set_faults(faults());
        let tasks = clients.iter().enumerate().map(|(i, c)| {
            let (idx, hot) = (&handles[i % 3], &hot);
            Box::pin(async move {
                for round in 0..20u64 {
                    let k = &hot[(round as usize + i) % hot.len()];
                    let v = (i as u64 * 100 + round + 1).to_be_bytes();
                    // Every third write an upsert, which takes the same shortcut.
                    if round % 3 == 2 {
                        idx.insert(c, k, &v).await.unwrap();
                    } else {
                        assert!(idx.update(c, k, &v).await.unwrap(), "the key is held");
                    }
                }
            }) as Task
        });
        let (c, fresh) = run_then_open(&sim, seed, tasks);
        sim.block_on(async {
            for k in &hot {
                assert_eq!(fresh.slots_holding(&c, k).await.unwrap(), 1, "seed {seed}");
                let v = fresh.search(&c, k).await.unwrap().expect("present");
                let v = u64::from_be_bytes(v.try_into().unwrap());
                assert!(v % 100 >= 1 && v % 100 <= 20 && v / 100 < 12, "seed {seed}: {v}");
            }
        });
        superseded += handles.iter().map(|h| stat(h, "updates_superseded")).sum::<u64>();
    }
    assert!(superseded > 0, "no update lost its CAS to another: the race was not exercised");
}
