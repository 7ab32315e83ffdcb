//! Compute-side work reported per operation ([`dmindex_fabric::Work`]), one client, warm cache:
//! a CHIME search looks its leaf's parent up once, hashes its key once, compares the keys of
//! its neighbourhood from the home to the hit (all H on a miss, which also rehashes them to
//! rebuild the hop bitmap) and checks every byte it READ; a Sherman search binary-searches the
//! whole leaf it READ and hashes nothing.

use dmindex_chime::{Chime, Sherman};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric, Transport, VerbCounts};
use dmindex_index::{IndexConfig, PointIndex};

/// CHIME's default leaf shape: 64 slots, neighbourhoods of 8.
const SPAN: u64 = 64;
const H: u64 = 8;
const KEYS: u64 = 2000;

fn key(n: u64) -> [u8; 8] {
    (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes()
}

/// The work `c` reported during `op`.
async fn during<T: Transport, F: std::future::Future>(c: &Client<T>, op: F) -> VerbCounts {
    let before = c.counts();
    op.await;
    c.counts() - before
}

async fn load<T: Transport, I: PointIndex<T>>(c: &Client<T>) -> I {
    let ix = I::create(c, &IndexConfig::default(), 0).await.unwrap();
    for n in 0..KEYS {
        ix.insert(c, &key(n), &n.to_le_bytes()).await.unwrap();
    }
    // Warm the cache: every leaf's parent is cached once a search has passed through it.
    for n in 0..KEYS {
        ix.search(c, &key(n)).await.unwrap();
    }
    ix
}

#[test]
fn a_chime_search_reports_one_lookup_one_hash_and_its_neighbourhood() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let ix: Chime = load(&c).await;
        let (mut fewest, mut most) = (u64::MAX, 0);
        for n in 0..KEYS {
            let d = during(&c, ix.search(&c, &key(n))).await;
            assert_eq!(d.round_trips, 1, "warm search of key {n}");
            assert_eq!((d.cache_lookups, d.keys_hashed), (1, 1), "key {n}");
            assert!((1..=H).contains(&d.keys_compared), "key {n}: {}", d.keys_compared);
            assert_eq!(d.bytes_scanned, d.bytes_read, "key {n}: the neighbourhood READ, checked");
            (fewest, most) = (fewest.min(d.keys_compared), most.max(d.keys_compared));
        }
        // The count is where the key sits: some keys at their home (one compare), some hopped
        // further into the neighbourhood.
        assert_eq!(fewest, 1);
        assert!(most > 1, "every key at its home?");
        // An absent key: the whole neighbourhood compared, then hashed for the hop bitmap.
        let d = during(&c, ix.search(&c, &key(KEYS + 1))).await;
        assert_eq!((d.cache_lookups, d.keys_hashed, d.keys_compared), (1, 1 + H, H));
        assert_eq!(d.bytes_scanned, d.bytes_read);
    }]);
}

#[test]
fn a_sherman_search_binary_searches_the_whole_leaf() {
    let f = LocalFabric::new(LocalConfig::default()).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let ix: Sherman = load(&c).await;
        // A bisection of 64 slots compares at most ⌊log₂ 64⌋ + 1 keys.
        let most = u64::from(SPAN.ilog2()) + 1;
        for n in 0..KEYS {
            let d = during(&c, ix.search(&c, &key(n))).await;
            assert_eq!(d.round_trips, 1, "warm search of key {n}");
            assert_eq!((d.cache_lookups, d.keys_hashed), (1, 0), "key {n}");
            assert!((1..=most).contains(&d.keys_compared), "key {n}: {}", d.keys_compared);
            assert_eq!(d.bytes_scanned, d.bytes_read, "key {n}: the whole leaf READ, checked");
        }
        // An absent key: the bisection runs to the end.
        let d = during(&c, ix.search(&c, &key(KEYS + 1))).await;
        assert!(d.keys_compared >= most - 1, "{}", d.keys_compared);
    }]);
}
