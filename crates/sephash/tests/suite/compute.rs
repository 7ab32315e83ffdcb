//! Compute-side work a SepHash search reports ([`dmindex_fabric::Work`]), one client, warm
//! caches: one hash of the key, one directory-cache and one FPTable-cache lookup, a
//! fingerprint compared per entry decoded plus the key compared in each block read, and no
//! more bytes checked than came back.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_sephash::SepHash;

const N: u64 = 3000;

#[test]
fn a_search_reports_one_hash_and_two_table_probes() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let idx = SepHash::create(&c, &IndexConfig::default(), 0).await.unwrap();
        for k in 0..N {
            idx.insert(&c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
        for k in 0..N {
            idx.search(&c, &k.to_be_bytes()).await.unwrap();
        }
        for k in 0..N + 100 {
            let before = c.counts();
            let got = idx.search(&c, &k.to_be_bytes()).await.unwrap();
            let d = c.counts() - before;
            assert_eq!(got.is_some(), k < N);
            assert_eq!((d.keys_hashed, d.table_probes), (1, 2), "key {k}: {d:?}");
            // The block that holds a present key had its key compared, at the least.
            assert!(k >= N || d.keys_compared >= 1, "key {k}: {d:?}");
            assert!(d.bytes_scanned > 0 && d.bytes_scanned <= d.bytes_read, "key {k}: {d:?}");
        }
        // An insert hashes its key once too.
        let before = c.counts();
        idx.insert(&c, &(N + 7).to_be_bytes(), &[1; 8]).await.unwrap();
        assert_eq!((c.counts() - before).keys_hashed, 1);
    }]);
}
