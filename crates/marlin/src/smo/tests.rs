//! An SMO dies holding its leaf's claim, in virtual time, before it wrote anything: once it is
//! judged dead, a writer of that leaf takes the claim over and releases it, an insert that must
//! split the leaf goes on, and every key reads as last written.

use std::cell::Cell;

use dmindex_fabric::Transport;
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_prim::lease::DEAD_AFTER_LEASES;
use dmindex_prim::spear::{self, Claim, Panel, WholeRewrites};
use dmindex_sim::{Sim, SimConfig, Task};

use crate::leaf::SPEAR;
use crate::write::Write;
use crate::Marlin;

fn key(n: u64) -> [u8; 8] {
    (0x1000 + n).to_be_bytes()
}

#[test]
fn a_dead_smos_claim_is_taken_over_and_the_tree_goes_on() {
    for seed in 0..8 {
        let s = Sim::new(SimConfig::stress_with_delays(seed)).unwrap();
        let spans = vec![("span".into(), "4".into()), ("internal_span".into(), "4".into())];
        let cfg = IndexConfig { extra: spans, ..IndexConfig::default() };
        let c0 = s.client_on_own_thread(0);
        let ix = s.block_on(<Marlin as PointIndex<_>>::create(&c0, &cfg, 0)).unwrap();
        s.block_on(async {
            for n in 1..=4 {
                ix.insert(&c0, &key(n), &n.to_le_bytes()).await.unwrap();
            }
        });
        let (dead, w1, w2) =
            (s.client_on_own_thread(1), s.client_on_own_thread(2), s.client_on_own_thread(3));
        let (died, took) = (Cell::new(false), Cell::new(0u64));
        let leaf = Cell::new(dmindex_fabric::GlobalAddr::NULL);
        let d = async {
            let k = u64::from_be_bytes(key(5));
            let loc = ix.blink.locate(&dead, k).await.unwrap();
            let mut buf = vec![0u8; ix.shape.bytes];
            let w = ix.writer().upsert(&dead, loc.leaf, k, &[5; 8], &mut buf).await.unwrap();
            let Write::Full(held) = w else { panic!("seed {seed}: four keys fill the leaf") };
            let (mut panel, rec) = (Panel::new(), &WholeRewrites);
            let claim = spear::claim(&dead, held, loc.leaf, &mut buf, 4, &mut panel, rec).await;
            let Claim::Held(claimed) = claim.unwrap() else { panic!("seed {seed}: alone") };
            // Dies holding the claim, before its SMO wrote anything.
            let _ = claimed;
            leaf.set(loc.leaf);
            died.set(true);
        };
        let u = async {
            // Bounded: the dead SMO's few round trips come first.
            while !died.get() {
                w1.pause(1_000).await;
            }
            let start = w1.now_ns();
            assert!(ix.update(&w1, &key(2), &[22; 8]).await.unwrap());
            took.set(w1.now_ns() - start);
        };
        let i = async {
            // Bounded: as above.
            while !died.get() {
                w2.pause(1_000).await;
            }
            ix.insert(&w2, &key(6), &[6; 8]).await.unwrap();
        };
        let lease = c0.transport().lease_ns();
        let out = s.run_until([Box::pin(d) as Task, Box::pin(u), Box::pin(i)], 60 * lease);
        assert!(out.all_finished(), "seed {seed}: {out:?}");
        assert!(took.get() >= DEAD_AFTER_LEASES * lease, "seed {seed}: judged too early");
        s.block_on(async {
            let expect = [(1, 1u64.to_le_bytes()), (2, [22; 8]), (3, 3u64.to_le_bytes())];
            for (n, v) in expect.into_iter().chain([(4, 4u64.to_le_bytes()), (6, [6; 8])]) {
                let got = ix.search(&c0, &key(n)).await.unwrap();
                assert_eq!(got.as_deref(), Some(&v[..]), "seed {seed}: key {n}");
            }
            assert_eq!(ix.search(&c0, &key(5)).await.unwrap(), None, "seed {seed}: never done");
            let word = c0.read_word(leaf.get().add(SPEAR as u64)).await.unwrap();
            assert_eq!(word, 0, "seed {seed}: the dead claim released");
        });
    }
}
