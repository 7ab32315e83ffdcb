//! Searches and updates over bulk-trained models: every key found with its value, absent keys
//! between, below and above them not found, updates seen by a second handle.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_rolex::Rolex;

fn cfg(opts: &[(&str, &str)]) -> IndexConfig {
    IndexConfig::with_options(opts)
}

/// Scattered keys in clusters (many models), sorted and distinct, all even.
fn keys(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (1..=n)
        .map(|i| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (((h >> 61) << 58) | ((h >> 20) % (1 << 30))) & !1
        })
        .filter(|&k| k > 2)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A ROLEX created on `c` with `opts` and loaded through the contract's bulk load with `ks`,
/// each key's value its little-endian bytes.
async fn bulk_loaded(c: &Client<LocalTransport>, opts: &[(&str, &str)], ks: &[u64]) -> Rolex {
    let idx = Rolex::create(c, &cfg(opts), 0).await.unwrap();
    let pairs: Vec<_> =
        ks.iter().map(|&k| (k.to_be_bytes().to_vec(), k.to_le_bytes().to_vec())).collect();
    PointIndex::bulk_load(&idx, c, &pairs).await.unwrap();
    idx
}

#[test]
fn bulk_trained_search_and_update() {
    for opts in [&[][..], &[("span", "4"), ("epsilon", "2"), ("fill", "3")][..]] {
        let f =
            LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
        let c = f.client(0).unwrap();
        let ks = keys(5000);
        run_tasks([async {
            let idx = Rolex::create(&c, &cfg(opts), 0).await.unwrap();
            let pairs: Vec<_> = ks.iter().map(|&k| (k, k.to_le_bytes().to_vec())).collect();
            idx.pretrain(&c, &pairs).await.unwrap();
            assert!(idx.models() >= 8, "eight clusters need eight models: {}", idx.models());
            for &k in &ks {
                let got = idx.search(&c, &k.to_be_bytes()).await.unwrap();
                assert_eq!(got, Some(k.to_le_bytes().to_vec()), "key {k:#x}");
                for absent in [k - 1, k + 1] {
                    assert_eq!(idx.search(&c, &absent.to_be_bytes()).await.unwrap(), None);
                }
            }
            assert_eq!(idx.search(&c, &u64::MAX.to_be_bytes()).await.unwrap(), None);
            assert_eq!(idx.search(&c, &1u64.to_be_bytes()).await.unwrap(), None);
            for &k in ks.iter().step_by(7) {
                assert!(idx.update(&c, &k.to_be_bytes(), &[9; 8]).await.unwrap());
                assert!(!idx.update(&c, &(k + 1).to_be_bytes(), &[9; 8]).await.unwrap());
            }
            let other = Rolex::open(&c, &cfg(opts), 1).await.unwrap();
            for (i, &k) in ks.iter().enumerate() {
                let want = if i % 7 == 0 { vec![9; 8] } else { k.to_le_bytes().to_vec() };
                assert_eq!(other.search(&c, &k.to_be_bytes()).await.unwrap(), Some(want));
            }
        }]);
    }
}

#[test]
fn refusals() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let idx = Rolex::create(&c, &cfg(&[]), 0).await.unwrap();
        assert!(idx.search(&c, b"short").await.is_err());
        assert!(idx.search(&c, &[0; 8]).await.is_err(), "key 0 is reserved");
        assert!(idx.update(&c, &5u64.to_be_bytes(), &[1; 3]).await.is_err(), "value length");
        let e = Rolex::create(&c, &cfg(&[]), 0).await.err().unwrap();
        assert!(e.to_string().contains("already in use"), "{e}");
        let other = IndexConfig { root_slot: 8, ..cfg(&[]) };
        assert!(Rolex::open(&c, &other, 0).await.is_err(), "an empty slot");
        let long = IndexConfig { max_key: 16, ..cfg(&[]) };
        assert!(Rolex::open(&c, &long, 0).await.is_err());
    }]);
}

/// The contract's bulk load, as `bench --bulk-load` drives it: byte keys, a handle of another
/// compute node opened before the load finds every key through its own (stale) directory,
/// its scans see them in order, and a second load or an unsorted one is refused.
#[test]
fn bulk_load_through_the_contract() {
    use dmindex_index::RangeIndex;
    let f = LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
    let c = f.client(0).unwrap();
    let ks = keys(3000);
    run_tasks([async {
        let opts = [("fill", "16")];
        let idx = Rolex::create(&c, &cfg(&opts), 0).await.unwrap();
        let before = Rolex::open(&c, &cfg(&opts), 1).await.unwrap();
        let pairs: Vec<_> =
            ks.iter().map(|&k| (k.to_be_bytes().to_vec(), k.to_le_bytes().to_vec())).collect();
        let unsorted: Vec<_> = pairs.iter().rev().take(2).cloned().collect();
        assert!(PointIndex::bulk_load(&idx, &c, &unsorted).await.is_err());
        PointIndex::bulk_load(&idx, &c, &pairs).await.unwrap();
        assert!(idx.models() >= 8, "models: {}", idx.models());
        for &k in &ks {
            let got = before.search(&c, &k.to_be_bytes()).await.unwrap();
            assert_eq!(got, Some(k.to_le_bytes().to_vec()), "key {k:#x}");
        }
        let mut out = Vec::new();
        before.scan(&c, &ks[100].to_be_bytes(), 50, &mut out).await.unwrap();
        let want: Vec<_> = ks[100..150].iter().map(|k| k.to_be_bytes().to_vec()).collect();
        assert_eq!(out.into_iter().map(|p| p.0).collect::<Vec<_>>(), want);
        let again = PointIndex::bulk_load(&idx, &c, &pairs[..1]).await;
        assert!(again.is_err(), "a second load into a trained index");
    }]);
}

/// The compute node's cache of a model trained once on every key and only read is the
/// paper's leaf table, 8 bytes a base leaf (and 48 a model); a leaf table's synonym hints
/// (8 bytes a base leaf more) appear with the first synonym seen.
#[test]
fn leaf_tables_without_synonyms_cost_eight_bytes_a_leaf() {
    let f = LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
    let c = f.client(0).unwrap();
    let ks = keys(4000);
    run_tasks([async {
        let opts = [("fill", "16"), ("retrain", "0")];
        let _idx = bulk_loaded(&c, &opts, &ks).await;
        let reader = Rolex::open(&c, &cfg(&opts), 1).await.unwrap();
        for &k in &ks {
            assert!(reader.search(&c, &k.to_be_bytes()).await.unwrap().is_some());
        }
        let models = reader.models() as u64;
        let n = ks.len() as u64;
        // Full leaves of 16: between n / 16 and n / 16 + one partial leaf per model.
        let (least, most) = (48 * models + 8 * (n / 16), 48 * models + 8 * (n / 16 + models));
        let read_only = reader.cache_bytes();
        assert!((least..=most).contains(&read_only), "{read_only} not in {least}..={most}");
        // Every leaf but each model's last is full: an insert next to a key of a full leaf
        // grows a synonym leaf, which the inserting handle hints from then on. (Keys are even,
        // so key + 1 is new; a model's last leaf may have room, so go on to the next key.)
        let mut hinted = read_only;
        for &key in ks[ks.len() / 2..].iter().take(64) {
            let k = key + 1;
            reader.insert(&c, &k.to_be_bytes(), &[7; 8]).await.unwrap();
            assert_eq!(reader.search(&c, &k.to_be_bytes()).await.unwrap(), Some(vec![7; 8]));
            hinted = reader.cache_bytes();
            if hinted > read_only {
                break;
            }
        }
        assert!(hinted > read_only, "no hints after a synonym: {hinted} B");
        let one_table = 8 * dmindex_rolex::build::MAX_MODEL_LEAVES as u64;
        assert!(hinted <= read_only + one_table, "hints beyond one table: {hinted} B");
    }]);
}

/// The cache keeps to its budget: every model, and as many leaf tables as fit, the oldest
/// fetched evicted first and fetched again on their next use; with no room for tables, one is
/// kept at a time. Every key is still found.
#[test]
fn leaf_tables_are_evicted_to_keep_the_cache_budget() {
    // Enough keys that all their tables (about 20 KB) far exceed one table (at most 2 KB).
    let ks = keys(40_000);
    for tables_room in [0u64, 8 * 64, 1 << 20] {
        let f =
            LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let opts = [("fill", "16"), ("retrain", "0")];
            let _idx = bulk_loaded(&c, &opts, &ks).await;
            let models = Rolex::open(&c, &cfg(&opts), 1).await.unwrap().models() as u64;
            let budget = 48 * models + tables_room;
            let small = IndexConfig { cache_bytes: budget, ..cfg(&opts) };
            let reader = Rolex::open(&c, &small, 1).await.unwrap();
            for round in 0..2 {
                for &k in &ks {
                    let got = reader.search(&c, &k.to_be_bytes()).await.unwrap();
                    assert_eq!(got, Some(k.to_le_bytes().to_vec()), "key {k:#x}, round {round}");
                }
            }
            let held = reader.cache_bytes();
            let evictions =
                <Rolex as PointIndex<dmindex_fabric::local::LocalTransport>>::stats(&reader)
                    .extra
                    .iter()
                    .find(|(n, _)| *n == "leaf_table_evictions")
                    .map(|&(_, v)| v)
                    .unwrap();
            // Over the budget by at most the one table just fetched (at most 256 leaves).
            let one_table = 8 * dmindex_rolex::build::MAX_MODEL_LEAVES as u64;
            assert!(held <= budget.max(48 * models + one_table), "{held} B over {budget}");
            let all_tables = 8 * (ks.len() as u64 / 16);
            assert!(all_tables > 4 * one_table, "a bound that cannot fail");
            if tables_room < (1 << 20) {
                assert!(evictions > 0, "room for {tables_room} B of tables, nothing evicted");
            } else {
                assert_eq!(evictions, 0, "room for every table");
                assert!(held > 48 * models + 8 * (ks.len() as u64 / 16), "every table held");
            }
        }]);
    }
}
