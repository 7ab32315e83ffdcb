//! One Dolphin leaf under the simulator's stress network (torn reads, reordered arrivals,
//! injected delays): writers insert and delete their own keys through Spear, which keeps
//! compacting the leaf in place, while readers search it lock-free. Every value a reader sees
//! was written and is never older than one it saw before; the final leaf holds exactly each
//! writer's last word.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use dmindex_dolphin::leaf::{encode, Shape, SPEAR};
use dmindex_dolphin::smo::{compact_or_split, Smo};
use dmindex_dolphin::sync::{self, search_image, SyncCounters, Write};
use dmindex_fabric::{Client, GlobalAddr};
use dmindex_prim::spear::{Panel, WholeRewrites};
use dmindex_sim::{Faults, NetParams, Sim, SimConfig, SimTransport, Task};

const LO: u64 = 0x0102_0304_0506_0700;
const WRITERS: u64 = 4;
/// Keys per writer, visited in turn: inserted, overwritten, deleted, so deleted keys pile up in
/// the slots and inserts of the next key keep compacting the leaf.
const KEYS: u64 = 6;
const OPS: u64 = 60;

fn key(w: u64, n: u64) -> u64 {
    LO + 1 + w * KEYS + n
}

/// A `width`-byte value naming `v` in every 8 bytes, so a value torn between two shows.
fn val(v: u64, width: usize) -> Vec<u8> {
    v.to_le_bytes().iter().copied().cycle().take(width).collect()
}

#[allow(clippy::too_many_arguments)]
async fn insert(
    c: &Client<SimTransport>,
    s: &Shape,
    leaf: GlobalAddr,
    k: u64,
    v: u64,
    buf: &mut [u8],
    ctr: &SyncCounters,
    smos: &Cell<u64>,
) {
    let v = val(v, s.value);
    loop {
        match sync::upsert(c, s, leaf, k, &v, buf, ctr, &WholeRewrites).await.unwrap() {
            Write::Done(()) => return,
            Write::Again => {}
            Write::Full(held) => {
                match compact_or_split(
                    c,
                    s,
                    leaf,
                    held,
                    k,
                    &v,
                    buf,
                    64,
                    &mut Panel::new(),
                    &WholeRewrites,
                )
                .await
                .unwrap()
                {
                    Smo::Compacted => {
                        smos.set(smos.get() + 1);
                        return;
                    }
                    Smo::Again | Smo::GaveUp => {}
                    Smo::Split { .. } => {
                        panic!("at most {} live keys: never a split", WRITERS * KEYS + 1)
                    }
                }
            }
            Write::Elsewhere(..) => panic!("every key is in the leaf's range"),
        }
    }
}

#[test]
fn searches_during_in_place_compactions_see_only_written_values_in_order() {
    searches_during_compactions(8);
}

/// The same with 100-byte values: two-line cells, written under their lock while readers READ.
#[test]
fn multi_line_values_are_never_seen_torn() {
    searches_during_compactions(100);
}

fn searches_during_compactions(width: usize) {
    let (mut torn, mut compactions) = (0, 0);
    let mid_write = Cell::new(0u64);
    for seed in 0..12 {
        let net = NetParams::preset("stress").unwrap();
        let cfg =
            SimConfig { node_size: 16 << 20, chunk_size: 1 << 20, ..SimConfig::new(seed, net) };
        let sim = Sim::new(cfg).unwrap();
        let shape = Shape::new(12, width).unwrap();
        let setup = sim.client_on_own_thread(0);
        let leaf = sim.block_on(async {
            let leaf = setup.alloc(shape.bytes as u64, 64).await.unwrap();
            let mut img = Vec::new();
            encode(&shape, 0, 0, LO, LO | 0xFF, 1, &[], std::iter::empty(), &mut img);
            setup.write(leaf, &img).await.unwrap();
            leaf
        });
        sim.set_faults(Faults::delays());
        let ctr = SyncCounters::default();
        let smos = Cell::new(0);
        // Per key: the highest sequence number whose write has started.
        let started: Vec<Cell<u64>> = (0..WRITERS * KEYS).map(|_| Cell::new(0)).collect();
        let writers: Vec<_> =
            (0..WRITERS).map(|w| (w, sim.client_on_own_thread((w % 2) as u16))).collect();
        let readers: Vec<_> = (0..2).map(|r| sim.client_on_own_thread(r)).collect();
        let mut tasks: Vec<Task> = Vec::new();
        for (w, c) in &writers {
            let (shape, ctr, smos, started) = (&shape, &ctr, &smos, &started);
            tasks.push(Box::pin(async move {
                let mut buf = vec![0u8; shape.bytes];
                for seq in 1..=OPS {
                    let n = seq / 3 % KEYS;
                    let k = key(*w, n);
                    started[(w * KEYS + n) as usize].set(seq);
                    if seq % 3 == 2 {
                        loop {
                            match sync::delete(c, shape, leaf, k, &mut buf, ctr, &WholeRewrites)
                                .await
                                .unwrap()
                            {
                                Write::Done(_) => break,
                                Write::Again => {}
                                other => panic!("{other:?}"),
                            }
                        }
                    } else {
                        // The value names its key, so a cell seen under another key shows.
                        let v = (w * KEYS + n) << 32 | seq;
                        insert(c, shape, leaf, k, v, &mut buf, ctr, smos).await;
                    }
                }
            }));
        }
        for c in &readers {
            let (shape, ctr, started, mid_write) = (&shape, &ctr, &started, &mid_write);
            tasks.push(Box::pin(async move {
                let mut buf = vec![0u8; shape.bytes];
                let mut last = vec![0u64; (WRITERS * KEYS) as usize];
                let mut out = Vec::new();
                for _ in 0..60 {
                    let img = sync::read(c, shape, leaf, &mut buf, ctr).await.unwrap();
                    // Every key of the image, so a torn image would show somewhere.
                    for i in 0..(WRITERS * KEYS) as usize {
                        let k = key(i as u64 / KEYS, i as u64 % KEYS);
                        // A multi-line cell mid-write is not taken (its searcher READs again).
                        match search_image(&img, k, &mut out) {
                            Some(true) => {}
                            Some(false) => continue,
                            None => {
                                mid_write.set(mid_write.get() + 1);
                                continue;
                            }
                        }
                        let v = u64::from_le_bytes(out[..8].try_into().unwrap());
                        assert_eq!(out, val(v, width), "seed {seed}: key {i}'s value torn");
                        assert_eq!(
                            v >> 32,
                            i as u64,
                            "seed {seed}: key {i} shows another key's value"
                        );
                        let v = v & 0xFFFF_FFFF;
                        assert!(
                            v <= started[i].get(),
                            "seed {seed}: key {i} shows {v}, never written"
                        );
                        assert!(
                            v >= last[i],
                            "seed {seed}: key {i} went back from {} to {v}",
                            last[i]
                        );
                        last[i] = v;
                    }
                }
            }));
        }
        let out = sim.run_until(tasks, sim.now_ns() + 5_000_000_000);
        assert!(out.stuck.is_empty() && out.crashed.is_empty(), "seed {seed}: {out:?}");
        sim.set_faults(Faults::default());
        let c = sim.client_on_own_thread(1);
        sim.block_on(async {
            let mut buf = vec![0u8; shape.bytes];
            let img = sync::read(&c, &shape, leaf, &mut buf, &ctr).await.unwrap();
            assert_eq!(
                c.read_word(leaf.add(SPEAR as u64)).await.unwrap(),
                0,
                "seed {seed}: Spear at rest"
            );
            let mut out = Vec::new();
            for w in 0..WRITERS {
                for n in 0..KEYS {
                    // The last operation on key n.
                    let Some(last) = (1..=OPS).rev().find(|s| s / 3 % KEYS == n) else {
                        continue;
                    };
                    let found = search_image(&img, key(w, n), &mut out) == Some(true);
                    if last % 3 == 2 {
                        assert!(!found, "seed {seed}: key {w}/{n} was deleted last");
                    } else {
                        assert!(found, "seed {seed}: key {w}/{n} lost");
                        let v = (w * KEYS + n) << 32 | last;
                        assert_eq!(out, val(v, width), "seed {seed}: key {w}/{n}");
                    }
                }
            }
        });
        torn += ctr.torn_reads.load(Ordering::Relaxed);
        compactions += smos.get();
    }
    assert!(compactions > 50, "{compactions} compactions: the SMO path was not exercised");
    assert!(torn > 0, "no READ was ever torn by a compaction: the check was not exercised");
    let multi = Shape::new(12, width).unwrap().multi_line();
    assert!(!multi || mid_write.get() > 0, "no cell was ever seen mid-write: cl bytes unexercised");
}
