//! Loading from an empty tree at a paper's concurrency: every client starts at the root leaf,
//! and a client that waited long for its lock must not then walk the whole leaf chain.

use dmindex_chime::Chime;
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_sim::{NetParams, Sim, SimConfig};

const CNS: u16 = 4;
const CLIENTS: u64 = 64;
const KEYS_EACH: u64 = 40;

fn key(x: u64) -> [u8; 8] {
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes()
}

/// 256 clients on 4 compute nodes insert 10 240 keys into an empty CHIME. Walks right from a
/// leaf reached while the root was a leaf re-read the root word and descend again once the tree
/// has grown; without that, clients queued on the first leaf's lock walked right thousands of
/// times each (here 1.25 moves right per insert without, 0.17 with).
#[test]
fn a_concurrent_load_from_empty_does_not_walk_the_leaf_chain() {
    let sim = Sim::new(SimConfig {
        memory_nodes: 2,
        node_size: 512 << 20,
        ..SimConfig::new(7, NetParams::chime_testbed())
    })
    .unwrap();
    let cfg = IndexConfig::default();
    let setup = sim.client_on_own_thread(0);
    sim.block_on(async { Chime::create(&setup, &cfg, 0).await.map(drop) }).unwrap();
    let handles: Vec<Chime> = (0..CNS)
        .map(|cn| {
            let c = sim.client_on_own_thread(cn);
            sim.block_on(async { Chime::open(&c, &cfg, cn).await }).unwrap()
        })
        .collect();
    let clients: Vec<_> = (0..CNS as u64 * CLIENTS)
        .map(|i| sim.client_on_own_thread((i % CNS as u64) as u16))
        .collect();
    let tasks = clients.iter().enumerate().map(|(i, c)| {
        let t = &handles[i % CNS as usize];
        Box::pin(async move {
            for j in 0..KEYS_EACH {
                let x = i as u64 * KEYS_EACH + j;
                t.insert(c, &key(x), &x.to_le_bytes()).await.unwrap();
            }
        }) as dmindex_sim::Task<'_>
    });
    let out = sim.run(tasks);
    assert!(out.all_finished(), "{out:?}");
    let inserts = CNS as u64 * CLIENTS * KEYS_EACH;
    let moves: u64 = handles
        .iter()
        .map(|h| {
            let s = PointIndex::<dmindex_sim::SimTransport>::stats(h);
            s.extra.iter().find(|(k, _)| *k == "leaf_moves_right").expect("counted").1
        })
        .sum();
    assert!(
        moves * 3 < inserts,
        "{moves} moves right for {inserts} inserts: clients walked the leaf chain"
    );
    let c = &clients[0];
    sim.block_on(async {
        for x in 0..inserts {
            assert_eq!(
                handles[0].search(c, &key(x)).await.unwrap(),
                Some(x.to_le_bytes().to_vec())
            );
        }
    });
}
