//! Heap allocations per operation on the hot paths, counted by a global allocator: a search
//! allocates only the value it returns, an insert at most three times (leaf buffers come from a
//! per-CN pool, READ ranges, write plans and doorbells live on the stack or in the buffer's
//! scratch, cache lines encode and decode in place, hops keep an inline undo log, and RDWC copies
//! nothing when a client is alone on its key).

use dmindex_chime::{Chime, Sherman};
use dmindex_fabric::alloc_count::{allocations, CountingAlloc};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_prim::rdwc::Rdwc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const N: u64 = 20_000;

fn key(x: u64) -> [u8; 8] {
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).to_be_bytes()
}

/// Allocations per operation of each kind on a loaded index of type `I`.
fn per_op<I: PointIndex<dmindex_fabric::local::LocalTransport>>() -> [f64; 4] {
    let f = LocalFabric::new(LocalConfig { node_size: 256 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    let cfg = IndexConfig::default();
    run_tasks([async {
        let t = I::create(&c, &cfg, 0).await.unwrap();
        for x in 0..N {
            t.insert(&c, &key(x), &x.to_le_bytes()).await.unwrap();
        }
        let count = |ops: u64, before: u64| (allocations() - before) as f64 / ops as f64;
        let b = allocations();
        for x in 0..N {
            assert!(t.search(&c, &key(x)).await.unwrap().is_some());
        }
        let search = count(N, b);
        let b = allocations();
        for x in N..2 * N {
            t.insert(&c, &key(x), &x.to_le_bytes()).await.unwrap();
        }
        let insert = count(N, b);
        let b = allocations();
        for x in 0..N {
            assert!(t.update(&c, &key(x), &[7; 8]).await.unwrap());
        }
        let update = count(N, b);
        let b = allocations();
        for x in 0..N {
            assert!(t.delete(&c, &key(x)).await.unwrap());
        }
        let delete = count(N, b);
        [search, insert, update, delete]
    }])
    .remove(0)
}

#[test]
fn allocations_per_operation() {
    for (name, a) in [
        ("chime", per_op::<Chime>()),
        ("chime+rdwc", per_op::<Rdwc<Chime>>()),
        ("sherman", per_op::<Sherman>()),
        ("sherman+rdwc", per_op::<Rdwc<Sherman>>()),
    ] {
        eprintln!(
            "{name}: search {:.2}, insert {:.2}, update {:.2}, delete {:.2}",
            a[0], a[1], a[2], a[3]
        );
    }
}
