//! A multi-line writer dies at the worst points, in virtual time: holding the cell's lock with
//! nothing written, and with the cell's later lines landed but not line 0 (the old value
//! overwritten in part). A reader and a writer of the key get through once it is judged dead,
//! the cell ends whole with the dead write finished from its redo record, and a client that
//! joins the dead one's member slot before anyone waits finishes it when it first writes.

use std::cell::Cell;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_prim::lease::{self, Verdict, Watch, DEAD_AFTER_LEASES, FENCED};
use dmindex_prim::spear;
use dmindex_sim::{Sim, SimConfig, SimTransport, Task};

use super::{lock_cell, Locked, Pending};
use crate::leaf::{LeafImage, LineHead, LINE, SPEAR};
use crate::ops::Route;
use crate::redo::HEADER;
use crate::Dolphin;

const P: u64 = 0x0102_0304_0506_0700;
const KEY: u64 = P + 5;
const W: usize = 100;

fn config() -> IndexConfig {
    IndexConfig { max_value: W, ..IndexConfig::default() }
}

fn value(n: u8) -> [u8; W] {
    [n; W]
}

/// A simulator of `seed` with an index holding keys `P + 1 ..= P + 8` (value `n` each), made
/// by client 0.
fn loaded(seed: u64) -> (Sim, Client<SimTransport>, Dolphin) {
    let s = Sim::new(SimConfig::stress_with_delays(seed)).unwrap();
    let c0 = s.client_on_own_thread(0);
    let ix0 = s.block_on(<Dolphin as PointIndex<_>>::create(&c0, &config(), 0)).unwrap();
    s.block_on(async {
        for n in 1..=8u8 {
            ix0.insert(&c0, &(P + u64::from(n)).to_be_bytes(), &value(n)).await.unwrap();
        }
    });
    (s, c0, ix0)
}

/// How far the dying writer gets.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// Its lock CAS landed, nothing else.
    Locked,
    /// Its lock CAS and the WRITE of the cell's later lines landed; line 0 never did.
    Torn,
}

/// Enters `KEY`'s leaf, locks its cell to write `value(2)` and stops as `death` says, holding
/// its Spear share. The leaf, and the cell's version before.
async fn write_and_die(ix: &Dolphin, c: &Client<SimTransport>, death: Death) -> (GlobalAddr, u16) {
    let Route::Leaf { leaf, .. } = ix.route(c, KEY).await.unwrap() else { panic!("a leaf") };
    let shape = &ix.shape;
    let mut buf = vec![0u8; shape.bytes];
    let check = |b| LeafImage::check(shape, b).ok();
    let word = leaf.add(SPEAR as u64);
    let entered = spear::enter_checked(c, word, leaf, &mut buf, ix, check, || unreachable!());
    let (_held, img) = entered.await.unwrap().expect("no SMO");
    let j = img.find(KEY).unwrap();
    let mut pending = Pending::new();
    let redo = ix.redo.as_ref();
    let v = value(2);
    let locked = lock_cell(c, shape, leaf, j, img.head(j), true, &v, redo, &mut pending);
    assert!(matches!(locked.await.unwrap(), Locked::Held));
    if let Death::Torn = death {
        let at = leaf.add((shape.head_at(j) + LINE) as u64);
        c.write(at, &pending.rec[HEADER + LINE..HEADER + shape.cell]).await.unwrap();
    }
    (leaf, img.head(j).cv())
}

#[test]
fn a_dead_writers_cell_is_finished_by_whoever_waits() {
    for seed in 0..4 {
        for death in [Death::Locked, Death::Torn] {
            dead_writer(seed, death);
        }
    }
}

fn dead_writer(seed: u64, death: Death) {
    let (s, c0, ix0) = loaded(seed);
    let cfg = config();
    let (dead_c, reader_c, writer_c) =
        (s.client_on_own_thread(1), s.client_on_own_thread(2), s.client_on_own_thread(3));
    let open = |c, cn| s.block_on(<Dolphin as PointIndex<_>>::open(c, &cfg, cn)).unwrap();
    let (dead, reader, writer) = (open(&dead_c, 1), open(&reader_c, 2), open(&writer_c, 3));
    let (died, took) = (Cell::new(false), Cell::new(0u64));
    let leaf = Cell::new((GlobalAddr::NULL, 0));
    let d = async {
        leaf.set(write_and_die(&dead, &dead_c, death).await);
        died.set(true);
    };
    let after_death = async |cl: &Client<SimTransport>| {
        // Bounded: the dying writer's few round trips come first.
        while !died.get() {
            cl.pause(1_000).await;
        }
    };
    let r = async {
        after_death(&reader_c).await;
        let got = reader.search(&reader_c, &KEY.to_be_bytes()).await.unwrap().unwrap();
        // The old value while the lock stands whole; the dead write once it was finished; the
        // update once it came after that.
        let whole = [value(5), value(2), value(9)];
        assert!(whole.iter().any(|v| got == v), "seed {seed} {death:?}: a torn value");
    };
    let w = async {
        after_death(&writer_c).await;
        let start = writer_c.now_ns();
        assert!(writer.update(&writer_c, &KEY.to_be_bytes(), &value(9)).await.unwrap());
        took.set(writer_c.now_ns() - start);
    };
    let lease = c0.transport().lease_ns();
    let out = s.run_until([Box::pin(d) as Task, Box::pin(r), Box::pin(w)], 60 * lease);
    assert!(out.all_finished(), "seed {seed} {death:?}: {out:?}");
    assert!(took.get() >= DEAD_AFTER_LEASES * lease, "seed {seed}: judged too early");
    s.block_on(async {
        let got = ix0.search(&c0, &KEY.to_be_bytes()).await.unwrap();
        assert_eq!(got.as_deref(), Some(&value(9)[..]), "seed {seed} {death:?}");
        let shape = &ix0.shape;
        let mut b = vec![0u8; shape.bytes];
        let (at, cv) = leaf.get();
        let img = super::super::read(&c0, shape, at, &mut b, &ix0.counters.sync).await.unwrap();
        let j = img.find(KEY).unwrap();
        assert!(img.cell_whole(j) && !img.head(j).locked(), "seed {seed} {death:?}");
        // The dead write was finished (cv + 1), then the update wrote (cv + 2).
        assert_eq!(img.head(j).cv(), cv + 2, "seed {seed} {death:?}: dead write, update");
        let (slot, _) = lease::parse_member(dead_c.membership().member.get());
        let st = c0.read_word(lease::slot_addr(slot)).await.unwrap();
        assert_eq!(lease::state_of(st), FENCED, "seed {seed}");
    });
}

/// The dead writer's slot is fenced and joined again before anyone waits on its cell: the new
/// member finishes the dead write before its own first record on that node overwrites the
/// dead one's.
#[test]
fn a_client_that_joins_a_dead_writers_slot_finishes_its_write() {
    for seed in 0..4 {
        let (s, c0, ix0) = loaded(seed);
        let cfg = config();
        let dead_c = s.client_on_own_thread(1);
        let dead = s.block_on(<Dolphin as PointIndex<_>>::open(&dead_c, &cfg, 1)).unwrap();
        let (leaf, _) = s.block_on(write_and_die(&dead, &dead_c, Death::Torn));
        let member = dead_c.membership().member.get();
        // A judge fences it (three leases without a heartbeat), waiting on nothing else.
        let judge = async {
            let mut watch = Watch::new();
            // Ends once the member is judged dead: it never renews again.
            while watch.look(&c0, 1, member).await.unwrap() != Verdict::Fenced {
                c0.pause(c0.transport().lease_ns() / 4).await;
            }
        };
        let lease = c0.transport().lease_ns();
        assert!(s.run_until([Box::pin(judge) as Task], 10 * lease).all_finished());
        // The next client to join takes the lowest FREE or FENCED slot: the dead one's.
        let heir_c = s.client_on_own_thread(2);
        let heir = s.block_on(<Dolphin as PointIndex<_>>::open(&heir_c, &cfg, 2)).unwrap();
        s.block_on(async {
            // A write of another key on the same leaf, so the same memory node.
            assert!(heir.update(&heir_c, &(P + 1).to_be_bytes(), &value(7)).await.unwrap());
            let heir_member = heir_c.membership().member.get();
            assert_eq!(lease::parse_member(heir_member).0, lease::parse_member(member).0);
            let shape = &heir.shape;
            let mut b = vec![0u8; shape.bytes];
            let img = super::super::read(&c0, shape, leaf, &mut b, &ix0.counters.sync).await;
            let img = img.unwrap();
            let j = img.find(KEY).unwrap();
            let head: LineHead = img.head(j);
            assert!(img.cell_whole(j) && !head.locked(), "seed {seed}: finished by the heir");
            let got = ix0.search(&c0, &KEY.to_be_bytes()).await.unwrap();
            assert_eq!(got.as_deref(), Some(&value(2)[..]), "seed {seed}: the dead write");
            let got = ix0.search(&c0, &(P + 1).to_be_bytes()).await.unwrap();
            assert_eq!(got.as_deref(), Some(&value(7)[..]), "seed {seed}: the heir's write");
        });
    }
}
