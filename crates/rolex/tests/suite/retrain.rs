//! Retraining under concurrent inserts: many clients of one in-process cluster insert disjoint
//! keys (yielding at every verb, so retrains interleave with inserts and searches); every
//! acknowledged insert must be found afterwards, by a search and by a full scan.

use std::cell::Cell;

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex, RangeIndex};
use dmindex_rolex::Rolex;

fn cfg(opts: &[(&str, &str)]) -> IndexConfig {
    IndexConfig::with_options(opts)
}

/// A key of client `c`'s `i`-th insert: scattered, distinct across clients.
fn key(c: u64, i: u64) -> u64 {
    ((i * 64 + c + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1) | 1
}

fn run(config: IndexConfig, clients: u64, per_client: u64) -> (u64, u64, usize) {
    let f = LocalFabric::new(LocalConfig {
        yield_per_verb: true,
        node_size: 256 << 20,
        memory_nodes: 2,
        ..LocalConfig::default()
    })
    .unwrap();
    let cs: Vec<_> = (0..clients).map(|_| f.client(0).unwrap()).collect();
    let idx =
        run_tasks([async { Rolex::create(&cs[0], &config, 0).await.unwrap() }]).pop().unwrap();
    let searched = Cell::new(0u64);
    let tasks = cs.iter().enumerate().map(|(ci, c)| {
        let (idx, searched) = (&idx, &searched);
        Box::pin(async move {
            let ci = ci as u64;
            for i in 0..per_client {
                let k = key(ci, i);
                idx.insert(c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
                // Every acknowledged key of this client so far, now and then, while others
                // retrain: none may be missing.
                if i % 50 == 49 {
                    for j in 0..=i {
                        let k = key(ci, j);
                        let got = idx.search(c, &k.to_be_bytes()).await.unwrap();
                        assert_eq!(got, Some(k.to_le_bytes().to_vec()), "client {ci} key {j}");
                        searched.set(searched.get() + 1);
                    }
                }
            }
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
    });
    run_tasks(tasks);
    let stats = PointIndex::<dmindex_fabric::local::LocalTransport>::stats(&idx);
    let retrains = stats.extra.iter().find(|e| e.0 == "retrains").unwrap().1;
    // A fresh handle: every key, by search and in one scan, in order.
    let c = f.client(1).unwrap();
    let mut all: Vec<u64> =
        (0..clients).flat_map(|ci| (0..per_client).map(move |i| key(ci, i))).collect();
    all.sort_unstable();
    run_tasks([async {
        let fresh = Rolex::open(&c, &config, 1).await.unwrap();
        for &k in &all {
            let got = fresh.search(&c, &k.to_be_bytes()).await.unwrap();
            assert_eq!(got, Some(k.to_le_bytes().to_vec()), "key {k:#x}");
        }
        let mut out = Vec::new();
        fresh.scan(&c, &[], all.len() + 10, &mut out).await.unwrap();
        let keys: Vec<u64> =
            out.iter().map(|p| u64::from_be_bytes(p.0.as_slice().try_into().unwrap())).collect();
        assert_eq!(keys, all);
    }]);
    (retrains, searched.get(), idx.models())
}

#[test]
fn every_acknowledged_key_survives_retrains_default_shape() {
    let (retrains, searched, _) = run(cfg(&[]), 8, 600);
    assert!(retrains >= 10, "{retrains} retrains");
    assert!(searched > 10_000);
}

#[test]
fn every_acknowledged_key_survives_constant_retraining() {
    let opts = [("span", "4"), ("epsilon", "2"), ("fill", "4"), ("retrain", "1")];
    let (retrains, _, models) = run(cfg(&opts), 8, 1000);
    assert!(retrains >= 100, "{retrains} retrains");
    // More models than a directory page holds: retrains rewrote pages and split them.
    assert!(models > 2 * dmindex_rolex::layout::PAGE_MODELS, "{models} models");
}

fn extra(idx: &Rolex, name: &str) -> u64 {
    let stats = PointIndex::<dmindex_fabric::local::LocalTransport>::stats(idx);
    stats.extra.iter().find(|e| e.0 == name).unwrap().1
}

/// A retrain published by another compute node retires leaves that all eight clients of this
/// node are reading: one of them READs the new directory, the others take its copy.
#[test]
fn a_retrain_is_read_once_by_the_clients_of_a_node() {
    let f = LocalFabric::new(LocalConfig {
        yield_per_verb: true,
        memory_nodes: 2,
        ..LocalConfig::default()
    })
    .unwrap();
    let opts = cfg(&[("span", "4"), ("epsilon", "2"), ("fill", "4"), ("retrain", "1")]);
    let cs: Vec<_> = (0..8).map(|_| f.client(0).unwrap()).collect();
    let other = f.client(1).unwrap();
    let ks: Vec<u64> = (1..=400).map(|i| i * 16).collect();
    let (node, retrainer) = run_tasks([async {
        let node = Rolex::create(&cs[0], &opts, 0).await.unwrap();
        let pairs: Vec<_> = ks.iter().map(|&k| (k, k.to_le_bytes().to_vec())).collect();
        node.pretrain(&cs[0], &pairs).await.unwrap();
        (node, Rolex::open(&other, &opts, 1).await.unwrap())
    }])
    .pop()
    .unwrap();
    // Every client caches the directory's leaf tables before the retrain.
    let warm = cs.iter().map(|c| {
        let (node, ks) = (&node, &ks);
        Box::pin(async move {
            for &k in ks {
                assert!(node.search(c, &k.to_be_bytes()).await.unwrap().is_some());
            }
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
    });
    run_tasks(warm);
    // The other node inserts between full leaves' keys until a model is retrained.
    let hot = run_tasks([async {
        for i in 0..ks.len() as u64 {
            let k = 1000 + i;
            retrainer.insert(&other, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
            if extra(&retrainer, "retrains") > 0 {
                return k;
            }
        }
        panic!("no retrain after {} inserts into full leaves", ks.len())
    }])
    .pop()
    .unwrap();
    let before = extra(&node, "directory_refreshes");
    let readers = cs.iter().map(|c| {
        let node = &node;
        Box::pin(async move {
            let got = node.search(c, &hot.to_be_bytes()).await.unwrap();
            assert_eq!(got, Some(hot.to_le_bytes().to_vec()));
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
    });
    run_tasks(readers);
    assert_eq!(
        extra(&node, "directory_refreshes") - before,
        1,
        "eight clients, one directory read"
    );
}
