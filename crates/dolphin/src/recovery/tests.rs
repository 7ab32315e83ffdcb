//! A splitter dies between publishing its new leaf and its last doorbell, in virtual time:
//! the old leaf is claimed and not shrunk, the new leaf claimed by birth. Writers of either
//! leaf get through once the splitter is judged dead, the old leaf ends shrunk before the new
//! one opens, and every key reads as last written, also through a compute node whose cached
//! special node still names only the old leaf.

use std::cell::Cell;
use std::collections::BTreeMap;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, PointIndex, RangeIndex};
use dmindex_prim::lease::{self, DEAD_AFTER_LEASES, FENCED};
use dmindex_prim::spear::{Panel, Word};
use dmindex_sim::{Sim, SimConfig, SimTransport, Task};

use crate::leaf::{LeafImage, SPEAR};
use crate::ops::{Route, Split};
use crate::smo::{self, Smo};
use crate::sync::{self, Write};
use crate::Dolphin;

/// The keys of one 7-byte prefix.
const P: u64 = 0x0102_0304_0506_0700;

fn config() -> IndexConfig {
    IndexConfig { extra: vec![("slots".into(), "8".into())], ..IndexConfig::default() }
}

fn value(n: u64) -> [u8; 8] {
    n.to_le_bytes()
}

/// Inserts `key` until the leaf it goes to must split, then publishes the new leaf and stops:
/// the split's last doorbell never comes. The new leaf's address.
async fn split_and_die(ix: &Dolphin, c: &Client<SimTransport>, key: u64) -> GlobalAddr {
    let Route::Leaf { leaf, special, kind } = ix.route(c, key).await.unwrap() else {
        panic!("the prefix exists")
    };
    let (shape, sc) = (&ix.shape, &ix.counters.sync);
    let mut buf = vec![0u8; shape.bytes];
    let v = value(key);
    let w = sync::upsert(c, shape, leaf, key, &v, &mut buf, sc, ix).await.unwrap();
    let Write::Full(held) = w else { panic!("a full leaf") };
    let mut panel = Panel::new();
    let smo = smo::compact_or_split(c, shape, leaf, held, key, &v, &mut buf, 8, &mut panel, ix);
    let Smo::Split { claimed, pairs, at, frame } = smo.await.unwrap() else {
        panic!("nine live pairs in eight slots split")
    };
    let to = Split { leaf, special, kind, frame };
    let published = ix.split_publish(c, &to, &pairs, at, key).await.unwrap();
    // Dies holding the old leaf's claim (and the new leaf's, by birth).
    let _ = claimed;
    published.new
}

#[test]
fn a_split_left_half_done_is_finished_by_its_writers() {
    for seed in 0..6 {
        // The new leaf's writer alone (it must shrink the old leaf first), then writers of
        // both leaves at once.
        half_done_split(seed, false);
        half_done_split(seed, true);
    }
}

fn half_done_split(seed: u64, both: bool) {
    let s = Sim::new(SimConfig::stress_with_delays(seed)).unwrap();
    let cfg = config();
    let c0 = s.client_on_own_thread(0);
    let ix0 = s.block_on(<Dolphin as PointIndex<_>>::create(&c0, &cfg, 0)).unwrap();
    let mut model = BTreeMap::new();
    s.block_on(async {
        for n in 1..=8 {
            ix0.insert(&c0, &(P + 2 * n).to_be_bytes(), &value(n)).await.unwrap();
            model.insert(P + 2 * n, value(n));
        }
    });
    // A compute node whose cached special node names only the leaf before the split.
    let (stale_c, dead_c) = (s.client_on_own_thread(1), s.client_on_own_thread(2));
    let (new_c, old_c) = (s.client_on_own_thread(3), s.client_on_own_thread(4));
    let open = |c, cn| s.block_on(<Dolphin as PointIndex<_>>::open(c, &cfg, cn)).unwrap();
    let (stale, dead, writers) = (open(&stale_c, 1), open(&dead_c, 2), open(&new_c, 3));
    s.block_on(stale.search(&stale_c, &(P + 16).to_be_bytes())).unwrap();
    let (died, took) = (Cell::new(false), Cell::new(0u64));
    let new_leaf = Cell::new(GlobalAddr::NULL);
    let d = async {
        new_leaf.set(split_and_die(&dead, &dead_c, P + 17).await);
        died.set(true);
    };
    // Bounded: the dead splitter's few round trips come first.
    let after_death = async |cl: &Client<SimTransport>| {
        while !died.get() {
            cl.pause(1_000).await;
        }
    };
    let n = async {
        after_death(&new_c).await;
        let start = new_c.now_ns();
        assert!(writers.update(&new_c, &(P + 16).to_be_bytes(), &value(99)).await.unwrap());
        took.set(new_c.now_ns() - start);
    };
    let o = async {
        if both {
            after_death(&old_c).await;
            assert!(writers.update(&old_c, &(P + 2).to_be_bytes(), &value(98)).await.unwrap());
        }
    };
    let lease = c0.transport().lease_ns();
    let out = s.run_until([Box::pin(d) as Task, Box::pin(n), Box::pin(o)], 60 * lease);
    assert!(out.all_finished(), "seed {seed} both {both}: {out:?}");
    assert!(took.get() >= DEAD_AFTER_LEASES * lease, "seed {seed}: judged too early");
    model.insert(P + 16, value(99));
    if both {
        model.insert(P + 2, value(98));
    }
    s.block_on(async {
        // The old leaf shrunk below the new one, both open, the splitter fenced.
        let new = new_leaf.get();
        let shape = &writers.shape;
        let (mut a, mut b) = (vec![0u8; shape.bytes], vec![0u8; shape.bytes]);
        let n_img = sync::read(&c0, shape, new, &mut b, &writers.counters.sync).await.unwrap();
        let Route::Leaf { leaf: old, .. } = writers.route(&c0, P + 2).await.unwrap() else {
            panic!("the prefix exists")
        };
        let o_img = sync::read(&c0, shape, old, &mut a, &writers.counters.sync).await.unwrap();
        assert_eq!(o_img.hi() + 1, n_img.lo(), "seed {seed}: the old leaf ends below the new");
        assert_eq!((Word(o_img.spear()), Word(n_img.spear())), (Word(0), Word(0)));
        assert_eq!(n_img.born(), 0, "seed {seed}: the born record cleared");
        let _ = LeafImage::check(shape, &a).unwrap();
        let (slot, _) = lease::parse_member(dead_c.membership().member.get());
        let st = c0.read_word(lease::slot_addr(slot)).await.unwrap();
        assert_eq!(lease::state_of(st), FENCED, "seed {seed}");
        // Every key as last written, through every compute node, the stale one included; the
        // insert that split the leaf died before it completed, so it may or may not be there.
        for (&k, v) in &model {
            for (ix, c) in [(&stale, &stale_c), (&writers, &new_c), (&ix0, &c0)] {
                let got = ix.search(c, &k.to_be_bytes()).await.unwrap();
                assert_eq!(got.as_deref(), Some(&v[..]), "seed {seed} both {both}: key {k:#x}");
            }
        }
        let mut out = Vec::new();
        stale.scan(&stale_c, &P.to_be_bytes(), 100, &mut out).await.unwrap();
        let keys: Vec<u64> = out
            .iter()
            .map(|(k, _)| u64::from_be_bytes(k[..].try_into().unwrap()))
            .filter(|&k| k != P + 17)
            .collect();
        assert_eq!(keys, model.keys().copied().collect::<Vec<_>>(), "seed {seed}: the scan");
        let w = c0.read_word(old.add(SPEAR as u64)).await.unwrap();
        assert_eq!(w, 0, "seed {seed}");
    });
}
