use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use dmindex_fabric::exec::{run_tasks, yield_now};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

use super::*;
use crate::leaf::encode;
use crate::smo::{compact_or_split, Smo};
use dmindex_prim::spear::{Panel, WholeRewrites};

const LO: u64 = 0x1122_3344_5566_7700;
const HI: u64 = LO | 0xFF;

fn fabric() -> LocalFabric {
    LocalFabric::new(LocalConfig { yield_per_verb: true, ..LocalConfig::default() }).unwrap()
}

/// A fresh leaf covering `[LO, HI]`, on the fabric's node 0.
fn new_leaf(c: &Client<LocalTransport>, shape: &Shape) -> GlobalAddr {
    run_tasks([async {
        let leaf = c.alloc(shape.bytes as u64, 64).await.unwrap();
        let mut img = Vec::new();
        encode(shape, 0, 0, LO, HI, 1, &[], std::iter::empty(), &mut img);
        c.write(leaf, &img).await.unwrap();
        leaf
    }])
    .pop()
    .unwrap()
}

/// `clients` clients of one in-process fabric and a fresh leaf of `slots` `width`-byte values.
fn setup(
    clients: usize,
    slots: usize,
    width: usize,
) -> (LocalFabric, Vec<Client<LocalTransport>>, Shape, GlobalAddr) {
    let f = fabric();
    let clients: Vec<_> = (0..clients).map(|_| f.client(0).unwrap()).collect();
    let shape = Shape::new(slots, width).unwrap();
    let leaf = new_leaf(&clients[0], &shape);
    (f, clients, shape, leaf)
}

/// A `width`-byte value naming `n` in every 8 bytes (so a value torn between two is seen).
fn val(n: u64, width: usize) -> Vec<u8> {
    n.to_le_bytes().iter().copied().cycle().take(width).collect()
}

/// The number a value made by [`val`] names, checking it is not torn.
fn num(v: &[u8]) -> u64 {
    let n = u64::from_le_bytes(v[..8].try_into().unwrap());
    assert_eq!(v, val(n, v.len()), "a torn value");
    n
}

/// Multi-line writers turn away from a locked cell ([`Write::Again`]): try again.
macro_rules! until_done {
    ($e:expr) => {
        loop {
            match $e {
                Write::Again => continue,
                w => break done(w),
            }
        }
    };
}

fn done<T: std::fmt::Debug>(w: Write<T>) -> T {
    match w {
        Write::Done(t) => t,
        other => panic!("expected done, got {other:?}"),
    }
}

#[test]
fn a_leaf_behaves_as_a_map_and_each_operation_costs_its_round_trips() {
    // One-line cells, and multi-line ones (a lock round trip more on every write).
    for (width, lock) in [(8, 0), (100, 1)] {
        a_leaf_behaves_as_a_map(width, lock);
    }
}

fn a_leaf_behaves_as_a_map(width: usize, lock: u64) {
    let (_f, clients, shape, leaf) = setup(1, 16, width);
    let c = &clients[0];
    let k = SyncCounters::default();
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    // Slots taken (by live keys and by deleted ones: a re-insert after a delete takes a free
    // slot, and only an SMO frees one).
    let mut taken = 0;
    let mut compactions = 0;
    let mut buf = vec![0u8; shape.bytes];
    let mut out = Vec::new();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    run_tasks([async {
        // A client joins the member table once, before its first entry (a READ and a CAS): not
        // a cost of the operations counted here.
        dmindex_prim::lease::join(c).await.unwrap();
        for step in 0..3000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = LO + 1 + rng % 24;
            let value = val(step, width);
            let rt = c.counts().round_trips;
            let cost = |c: &Client<LocalTransport>| c.counts().round_trips - rt;
            match rng >> 60 {
                0..=5 => {
                    let img = read(c, &shape, leaf, &mut buf, &k).await.unwrap();
                    let found = search_image(&img, key, &mut out).expect("no writer: whole");
                    assert_eq!(found.then_some(&out[..]), model.get(&key).map(|v| &v[..]));
                    assert_eq!(cost(c), 1, "search");
                }
                6..=9 => {
                    let present = model.contains_key(&key);
                    match upsert(c, &shape, leaf, key, &value, &mut buf, &k, &WholeRewrites)
                        .await
                        .unwrap()
                    {
                        Write::Done(()) => {
                            model.insert(key, value);
                            taken += usize::from(!present);
                            assert_eq!(cost(c), lock + if present { 2 } else { 3 }, "insert");
                        }
                        Write::Full(h) => {
                            // Slots hold deleted keys too until an SMO compacts the leaf.
                            assert!(!present && taken == shape.slots);
                            let mut panel = Panel::new();
                            let (p, r) = (&mut panel, &WholeRewrites);
                            let smo = compact_or_split(
                                c, &shape, leaf, h, key, &value, &mut buf, 8, p, r,
                            );
                            match smo.await.unwrap() {
                                Smo::Compacted => {
                                    model.insert(key, value);
                                    (taken, compactions) = (model.len(), compactions + 1);
                                }
                                Smo::Split { claimed, .. } => {
                                    c.batch(&mut claimed.release(c).ops()).await.unwrap();
                                }
                                Smo::Again | Smo::GaveUp => {
                                    panic!("one client: no one else holds the leaf")
                                }
                            }
                        }
                        other => panic!("{other:?}"),
                    }
                }
                10..=12 => {
                    let r = done(
                        update(c, &shape, leaf, key, &value, &mut buf, &k, &WholeRewrites)
                            .await
                            .unwrap(),
                    );
                    assert_eq!(r, model.contains_key(&key), "update");
                    if r {
                        model.insert(key, value);
                    }
                    assert_eq!(cost(c), if r { 2 + lock } else { 2 }, "update");
                }
                _ => {
                    let r = done(
                        delete(c, &shape, leaf, key, &mut buf, &k, &WholeRewrites).await.unwrap(),
                    );
                    assert_eq!(r, model.remove(&key).is_some(), "delete");
                    assert_eq!(cost(c), 2, "delete");
                }
            }
        }
        assert!(compactions > 0, "deleted slots were reclaimed");
        let img = read(c, &shape, leaf, &mut buf, &k).await.unwrap();
        assert_eq!(img.spear(), 0, "every operation left");
        let mut live: Vec<u64> = img.live().map(|(k, _)| k).collect();
        live.sort_unstable();
        let mut want: Vec<u64> = model.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(live, want);
    }]);
}

#[test]
fn keys_outside_the_range_are_sent_elsewhere_still_in_flight() {
    let (_f, clients, shape, leaf) = setup(1, 16, 8);
    let c = &clients[0];
    let k = SyncCounters::default();
    let mut buf = vec![0u8; shape.bytes];
    run_tasks([async {
        for (key, judge) in [(HI + 1, Judge::OtherPrefix), (LO - 1, Judge::OtherPrefix)] {
            let Write::Elsewhere(h, j) =
                upsert(c, &shape, leaf, key, &[0; 8], &mut buf, &k, &WholeRewrites).await.unwrap()
            else {
                panic!("not this leaf's key")
            };
            assert_eq!(j, judge);
            assert_eq!(c.read_word(leaf.add(SPEAR as u64)).await.unwrap(), 1, "still in flight");
            c.batch(&mut h.leave(c).ops()).await.unwrap();
        }
        assert_eq!(c.read_word(leaf.add(SPEAR as u64)).await.unwrap(), 0);
    }]);
}

type Task<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

#[test]
fn concurrent_inserts_of_one_key_take_one_slot() {
    for width in [8, 100] {
        concurrent_inserts_of_one_key(width);
    }
}

fn concurrent_inserts_of_one_key(width: usize) {
    let (_f, clients, shape, leaf) = setup(8, 36, width);
    let k = SyncCounters::default();
    for round in 0..20u64 {
        let key = LO + 1 + round;
        let tasks: Vec<Task<'_, ()>> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (shape, k) = (&shape, &k);
                Box::pin(async move {
                    let mut buf = vec![0u8; shape.bytes];
                    for _ in 0..i % 3 {
                        yield_now().await;
                    }
                    let v = val(i as u64, shape.value);
                    until_done!(upsert(c, shape, leaf, key, &v, &mut buf, k, &WholeRewrites)
                        .await
                        .unwrap());
                }) as Task<'_, ()>
            })
            .collect();
        run_tasks(tasks);
        let c = &clients[0];
        let mut buf = vec![0u8; shape.bytes];
        let img = run_tasks([read(c, &shape, leaf, &mut buf, &k)]).pop().unwrap().unwrap();
        let slots = (0..shape.slots).filter(|&j| img.key(j) == key).count();
        assert_eq!(slots, 1, "round {round}: one slot for the key");
        let mut out = Vec::new();
        assert_eq!(search_image(&img, key, &mut out), Some(true));
        assert!(num(&out) < 8);
        assert_eq!(img.spear(), 0);
    }
    assert!(k.lost_key_cas.load(std::sync::atomic::Ordering::Relaxed) == 0);
}

#[test]
fn concurrent_writers_of_distinct_keys_keep_every_acknowledged_write() {
    for width in [8, 100] {
        concurrent_writers_of_distinct_keys(width);
    }
}

fn concurrent_writers_of_distinct_keys(width: usize) {
    let (_f, clients, shape, leaf) = setup(6, 64, width);
    let k = SyncCounters::default();
    let tasks: Vec<Task<'_, ()>> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (shape, k) = (&shape, &k);
            Box::pin(async move {
                let mut buf = vec![0u8; shape.bytes];
                let keys: Vec<u64> = (0..8).map(|n| LO + 1 + (n * 6 + i) as u64).collect();
                for &key in &keys {
                    let v = val(key, shape.value);
                    until_done!(upsert(c, shape, leaf, key, &v, &mut buf, k, &WholeRewrites)
                        .await
                        .unwrap());
                }
                for &key in keys.iter().step_by(2) {
                    assert!(done(
                        delete(c, shape, leaf, key, &mut buf, k, &WholeRewrites).await.unwrap()
                    ));
                }
                for &key in keys.iter().skip(1).step_by(2) {
                    let v = val(key + 1, shape.value);
                    assert!(until_done!(update(
                        c,
                        shape,
                        leaf,
                        key,
                        &v,
                        &mut buf,
                        k,
                        &WholeRewrites
                    )
                    .await
                    .unwrap()));
                }
            }) as Task<'_, ()>
        })
        .collect();
    run_tasks(tasks);
    let mut buf = vec![0u8; shape.bytes];
    let img = run_tasks([read(&clients[0], &shape, leaf, &mut buf, &k)]).pop().unwrap().unwrap();
    let mut out = Vec::new();
    for n in 0..48u64 {
        let key = LO + 1 + n;
        let live = search_image(&img, key, &mut out).expect("writers done: whole");
        let odd = (n / 6) % 2 == 1;
        assert_eq!(live, odd, "key {n}");
        if live {
            assert_eq!(num(&out), key + 1);
        }
    }
    assert!(k.lost_key_cas.load(std::sync::atomic::Ordering::Relaxed) > 0, "inserts raced");
    assert_eq!(img.spear(), 0);
}

#[test]
fn a_write_landing_on_a_deleted_cell_is_never_seen() {
    // An update that read key k LIVE in slot 0 writes after a delete of k and a re-insert of k:
    // the re-insert took a free slot, so the late WRITE lands on a dead cell.
    let (_f, clients, shape, leaf) = setup(1, 16, 8);
    let c = &clients[0];
    let k = SyncCounters::default();
    let mut buf = vec![0u8; shape.bytes];
    let key = LO + 1;
    run_tasks([async {
        done(upsert(c, &shape, leaf, key, &val(1, 8), &mut buf, &k, &WholeRewrites).await.unwrap());
        let stale = read(c, &shape, leaf, &mut buf, &k).await.unwrap().find(key).unwrap();
        assert!(done(delete(c, &shape, leaf, key, &mut buf, &k, &WholeRewrites).await.unwrap()));
        done(upsert(c, &shape, leaf, key, &val(2, 8), &mut buf, &k, &WholeRewrites).await.unwrap());
        c.write(leaf.add(shape.value_at(stale) as u64), &val(3, 8)).await.unwrap();
        let img = read(c, &shape, leaf, &mut buf, &k).await.unwrap();
        let slots: Vec<(usize, State)> =
            (0..shape.slots).filter(|&j| img.key(j) == key).map(|j| (j, img.state(j))).collect();
        assert_eq!(slots, [(stale, State::Deleted), (stale + 1, State::Live)]);
        let mut out = Vec::new();
        assert_eq!(search_image(&img, key, &mut out), Some(true));
        assert_eq!(num(&out), 2, "the re-insert's value, not the late WRITE's");
        // The cells sharing the line head were never written by it.
        assert_eq!(shape.head_at(stale), shape.head_at(stale + 1));
    }]);
}
