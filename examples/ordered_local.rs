//! An ordered index (CHIME, behind RDWC as `dmindex bench` runs it) on the in-process `local`
//! transport, used from several OS threads: create, insert, search, update, delete, scan.
//!
//!     cargo run --example ordered_local
//!
//! The workload, [`demo`], is generic over the fabric: `ucx_cluster` runs this same function
//! on memnodes over OpenUCX.

use dmindex_chime::ChimeRdwc;
use dmindex_fabric::exec::block_on;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex};

/// OS threads issuing operations; each has its own client (a client belongs to one task).
const THREADS: u64 = 4;
/// Keys each thread inserts.
const KEYS_PER_THREAD: u64 = 2_000;

/// Key `i` as the index sees it: 8 big-endian bytes, so byte order is numeric order. Keys start
/// at 1 because the all-zero key is reserved (CHIME marks empty entries with it).
fn key(i: u64) -> [u8; 8] {
    (i + 1).to_be_bytes()
}

/// Creates the index on `fabric`, fills it from [`THREADS`] threads, then exercises every
/// operation; panics if the index answers anything a `BTreeMap` would not.
pub fn demo<F>(fabric: &F) -> Result<(), Box<dyn std::error::Error>>
where
    F: Fabric + Sync,
    ChimeRdwc: RangeIndex<F::Transport> + Sync,
{
    // Every value is exactly `max_value` bytes (CHIME stores 8-byte values inline, longer ones
    // in blocks of their own); keys are at most `max_key` bytes. The index's root goes into
    // root slot 0 of memory node 0: one index per slot.
    let cfg = IndexConfig { max_key: 8, max_value: 8, root_slot: 0, ..IndexConfig::default() };

    // One client creates the index in remote memory; each compute node (here: one, `cn` 0)
    // then opens one handle that all of its threads share (its caches and RDWC's table live
    // there). Operations are futures: `block_on` drives one on this thread.
    let setup = fabric.client(0)?;
    block_on(ChimeRdwc::create(&setup, &cfg, 0))?;
    let index = block_on(ChimeRdwc::open(&setup, &cfg, 0))?;

    // Insert from several threads at once: thread t writes keys t, t + THREADS, ...
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let index = &index;
            s.spawn(move || {
                let c = fabric.client(0).expect("a client on compute node 0");
                block_on(async {
                    for i in (t..THREADS * KEYS_PER_THREAD).step_by(THREADS as usize) {
                        index.insert(&c, &key(i), &(i * 10).to_le_bytes()).await.expect("insert");
                    }
                })
            });
        }
    });
    let n = THREADS * KEYS_PER_THREAD;
    println!("inserted {n} keys from {THREADS} threads");

    let c = fabric.client(0)?;
    block_on(async {
        let v = index.search(&c, &key(42)).await?;
        assert_eq!(v.as_deref(), Some(&420u64.to_le_bytes()[..]));
        println!("search(42) = {}", u64::from_le_bytes(v.unwrap().try_into().unwrap()));

        let existed = index.update(&c, &key(42), &7u64.to_le_bytes()).await?;
        let v = index.search(&c, &key(42)).await?.expect("key 42");
        assert!(existed);
        println!(
            "update(42, 7) -> existed {existed}; now {}",
            u64::from_le_bytes(v.try_into().unwrap())
        );

        assert!(index.delete(&c, &key(43)).await?);
        assert!(!index.delete(&c, &key(43)).await?);
        assert_eq!(index.search(&c, &key(43)).await?, None);
        println!("delete(43) -> true, again -> false; search(43) = None");

        // Up to 5 pairs with key >= key(40), ascending: 43 is gone, 42 holds 7.
        let mut pairs = Vec::new();
        index.scan(&c, &key(40), 5, &mut pairs).await?;
        let got: Vec<(u64, u64)> = pairs
            .iter()
            .map(|(k, v)| {
                let k = u64::from_be_bytes(k[..].try_into().unwrap()) - 1;
                (k, u64::from_le_bytes(v[..].try_into().unwrap()))
            })
            .collect();
        assert_eq!(got, [(40, 400), (41, 410), (42, 7), (44, 440), (45, 450)]);
        println!("scan(40, 5) = {got:?}");

        // Every pair in [key(100), key(200)): 100 of them.
        let mut range = Vec::new();
        index.scan_range(&c, &key(100), &key(200), &mut range).await?;
        assert_eq!(range.len(), 100);
        println!("scan_range(100, 200) -> {} pairs", range.len());
        Ok::<(), dmindex_index::IndexError>(())
    })?;

    // Index counters of this compute node, and the client's verb counts.
    let stats = PointIndex::<F::Transport>::stats(&index);
    println!("retries {}, CN cache {} bytes", stats.retries, stats.cache_bytes);
    println!("this client's round trips: {}", c.stats().cost().round_trips);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One in-process memory node of 256 MiB (committed as it is touched), running the
    // services the index needs on every memory node (CHIME needs none beyond the built-in ones).
    let config = LocalConfig { node_size: 256 << 20, ..LocalConfig::default() };
    let services =
        mn_services(config.mn_cores, <ChimeRdwc as PointIndex<LocalTransport>>::SERVICES)?;
    let fabric = LocalFabric::with_services(config, services)?;
    demo(&fabric)
}
