//! The crate docs' table of round trips per operation (two levels, no rehash, blocks of one
//! READ), and with the SepHash port's reads (`reads=levels`): the context word, then each
//! level's word and buckets a round trip each, and for a search the block and the context word
//! again; and the port's client KV cache, which saves a search the block READ when the
//! searching client published the key's value.

use dmindex_clevel::CLevel;
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};

fn k(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

/// Round trips of `f`'s operation.
async fn rts<F: std::future::Future>(c: &Client<LocalTransport>, f: F) -> u64 {
    let before = c.counts().round_trips;
    f.await;
    c.counts().round_trips - before
}

fn levels_read(idx: &CLevel) -> u64 {
    let s = <CLevel as PointIndex<LocalTransport>>::stats(idx);
    s.extra.iter().find(|(k, _)| *k == "search_levels_read").map(|&(_, v)| v).unwrap()
}

#[test]
fn each_operation_costs_its_round_trips() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let idx = CLevel::create(&c, &IndexConfig::default(), 0).await.unwrap();
        for i in 1..=100 {
            idx.insert(&c, &k(i), &k(i)).await.unwrap();
        }
        let search = rts(&c, async { assert!(idx.search(&c, &k(7)).await.unwrap().is_some()) });
        assert_eq!(search.await, 2, "search, key present");
        let absent = rts(&c, async { assert!(idx.search(&c, &k(7000)).await.unwrap().is_none()) });
        assert_eq!(absent.await, 2, "search, key absent");
        assert_eq!(rts(&c, idx.insert(&c, &k(7), &k(1))).await, 4, "insert, key present");
        assert_eq!(rts(&c, idx.insert(&c, &k(101), &k(1))).await, 5, "insert, key absent");
        let update = rts(&c, async { assert!(idx.update(&c, &k(8), &k(2)).await.unwrap()) });
        assert_eq!(update.await, 4, "update");
        let delete = rts(&c, async { assert!(idx.delete(&c, &k(9)).await.unwrap()) });
        assert_eq!(delete.await, 3, "delete");
    }]);
}

/// The port's search on two levels, and on the levels a table without a rehasher piles up: two
/// round trips a level plus three (context word, block, context word again); an absent key
/// READs no block. The same table searched with the default reads costs two throughout.
/// Writes with the port's first read: the default's table with the context word and one more
/// round trip a level in place of the one doorbell.
#[test]
fn the_ports_writes_read_level_by_level_first() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let port = IndexConfig::with_options(&[("reads", "levels")]);
        let idx = CLevel::create(&c, &port, 0).await.unwrap();
        for i in 1..=100 {
            idx.insert(&c, &k(i), &k(i)).await.unwrap();
        }
        // Two levels: 1 + 2 x 2 round trips where the default takes 1.
        assert_eq!(rts(&c, idx.insert(&c, &k(7), &k(1))).await, 4 + 4, "insert, key present");
        assert_eq!(rts(&c, idx.insert(&c, &k(101), &k(1))).await, 5 + 4, "insert, key absent");
        let update = rts(&c, async { assert!(idx.update(&c, &k(8), &k(2)).await.unwrap()) });
        assert_eq!(update.await, 4 + 4, "update");
        let delete = rts(&c, async { assert!(idx.delete(&c, &k(9)).await.unwrap()) });
        assert_eq!(delete.await, 3 + 4, "delete");
        let absent = rts(&c, async { assert!(!idx.delete(&c, &k(999)).await.unwrap()) });
        assert_eq!(absent.await, 2 + 4, "delete, key absent");
    }]);
}

#[test]
fn the_ports_search_costs_two_round_trips_a_level() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let small = [("log2_buckets", "1")];
        let port = IndexConfig::with_options(&[("log2_buckets", "1"), ("reads", "levels")]);
        let idx = CLevel::create(&c, &port, 0).await.unwrap();
        idx.insert(&c, &k(1), &k(1)).await.unwrap();
        let present = rts(&c, async { assert!(idx.search(&c, &k(1)).await.unwrap().is_some()) });
        assert_eq!(present.await, 2 * 2 + 3);
        let absent = rts(&c, async { assert!(idx.search(&c, &k(99)).await.unwrap().is_none()) });
        assert_eq!(absent.await, 2 * 2 + 2);
        // No background client: levels pile up (2 + 4 buckets hold few keys).
        for i in 2..=60 {
            idx.insert(&c, &k(i), &k(i)).await.unwrap();
        }
        // A handle with the default reads, opened on the grown table (a handle refreshes its
        // context only when it must: a search that finds its key never does).
        let doorbell = CLevel::open(&c, &IndexConfig::with_options(&small), 0).await.unwrap();
        for i in [1, 30, 60] {
            let before = levels_read(&idx);
            let port = rts(&c, async { assert!(idx.search(&c, &k(i)).await.unwrap().is_some()) });
            let port = port.await;
            let levels = levels_read(&idx) - before;
            assert!(levels > 2, "{levels} levels: the table grew");
            let ours =
                rts(&c, async { assert!(doorbell.search(&c, &k(i)).await.unwrap().is_some()) });
            // Ours: the bottom level a round trip before the others while a rehash is due,
            // then the blocks of fingerprint matches up to the key's (one, or two after a false
            // match); the port READs those blocks too.
            let ours = ours.await;
            assert!((3..=4).contains(&ours), "key {i}: {ours} round trips");
            assert_eq!(port, 2 * levels + 2 + (ours - 2), "key {i} over {levels} levels");
        }
    }]);
}

/// With the port's client KV cache, a search of a key whose current value the searching client
/// published takes its buckets only; another client's search, or a search after another client
/// replaced the value, READs the block as before. The same with the port's reads.
#[test]
fn the_kv_cache_saves_the_block_read_of_a_clients_own_keys() {
    // Round trips of a search answered from the cache, and of one of an absent key (which
    // confirms its context: a READ more by default, the port's last READ otherwise).
    for (reads, bucket_rts, absent_rts) in [("doorbell", 1, 2), ("levels", 2 * 2 + 2, 2 * 2 + 2)] {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let (c, other) = (f.client(0).unwrap(), f.client(0).unwrap());
        run_tasks([async {
            let cfg = IndexConfig::with_options(&[("kv_cache", "40"), ("reads", reads)]);
            let idx = CLevel::create(&c, &cfg, 0).await.unwrap();
            for i in 1..=100 {
                idx.insert(&c, &k(i), &k(i)).await.unwrap();
            }
            let own = rts(&c, async {
                assert_eq!(idx.search(&c, &k(7)).await.unwrap(), Some(k(7).to_vec()))
            });
            assert_eq!(own.await, bucket_rts, "{reads}: own key");
            let theirs = rts(&other, async {
                assert_eq!(idx.search(&other, &k(7)).await.unwrap(), Some(k(7).to_vec()))
            });
            assert_eq!(theirs.await, bucket_rts + 1, "{reads}: another client's key");
            assert!(idx.update(&other, &k(7), &k(70)).await.unwrap());
            let replaced = rts(&c, async {
                assert_eq!(idx.search(&c, &k(7)).await.unwrap(), Some(k(70).to_vec()))
            });
            assert_eq!(replaced.await, bucket_rts + 1, "{reads}: replaced by another client");
            assert!(idx.update(&c, &k(8), &k(80)).await.unwrap());
            let updated = rts(&c, async {
                assert_eq!(idx.search(&c, &k(8)).await.unwrap(), Some(k(80).to_vec()))
            });
            assert_eq!(updated.await, bucket_rts, "{reads}: own update");
            let absent =
                rts(&c, async { assert!(idx.search(&c, &k(7000)).await.unwrap().is_none()) });
            assert_eq!(absent.await, absent_rts, "{reads}: absent key");
        }]);
    }
}
