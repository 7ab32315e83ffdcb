//! The `ucx` verb path over shared memory allocates nothing on the client, on a mapping of the
//! pool and through UCX's RMA calls: READs, WRITEs, zero-wait WRITEs, atomics and doorbell
//! batches (a search's verb) are counted by a global allocator that must see no allocation
//! while they run.
#![cfg(feature = "ucx")]

mod common;

use dmindex_fabric::alloc_count::{allocations, CountingAlloc};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{AtomicOp, BatchOp, Client, Fabric, GlobalAddr, Transport};
use dmindex_ucx::transport::{UcxFabric, UcxOptions};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn one_sided_verbs_do_not_allocate() {
    common::use_tls("sm,self");
    let mn = common::memnode(0, 8 << 20);
    for map_shared in [true, false] {
        let options = UcxOptions { map_shared, ..UcxOptions::default() };
        let f = UcxFabric::connect_with(std::slice::from_ref(&mn.addr), common::TOKEN, &options)
            .unwrap();
        assert_eq!(f.mapped().unwrap(), [map_shared]);
        count(&f, map_shared);
    }
}

/// Asserts that 1000 rounds of verbs allocate nothing.
fn count(f: &UcxFabric, map_shared: bool) {
    let c = f.client(0).unwrap();
    run_tasks([async {
        let a = c.alloc(4096, 64).await.unwrap();
        // The first verbs make this thread's endpoint and unpack the key.
        for i in 0..10 {
            round(&c, a, i).await;
        }
        let before = allocations();
        for i in 10..1010 {
            round(&c, a, i).await;
        }
        c.flush().await.unwrap();
        let n = allocations() - before;
        assert_eq!(n, 0, "{n} heap allocations in 1000 rounds (pool mapped: {map_shared})");
        assert_eq!(c.read_word(a.add(512)).await.unwrap(), 1009, "the last zero-wait WRITE");
    }]);
}

/// One of each verb on the 4 KiB at `a`.
async fn round<T: Transport>(c: &Client<T>, a: GlobalAddr, i: u64) {
    let mut buf = [0u8; 256];
    let (mut b1, mut b2) = ([0u8; 164], [0u8; 64]);
    c.read(a, &mut buf).await.unwrap();
    c.write(a.add(256), &buf).await.unwrap();
    c.write_zero_wait(a.add(512), &i.to_le_bytes()).unwrap();
    c.cas(a, i, i + 1).await.unwrap();
    // One bit set if clear: a native fetch-OR.
    c.masked_cas(a.add(8), 0, 1, 1, 1).await.unwrap();
    c.faa(a.add(16), 1).await.unwrap();
    // A search's doorbell: two READs.
    c.batch(&mut [
        BatchOp::Read { addr: a.add(1024), buf: &mut b1 },
        BatchOp::Read { addr: a.add(2048), buf: &mut b2 },
    ])
    .await
    .unwrap();
    // An unlocking doorbell: a WRITE, then an atomic ordered after it.
    c.batch(&mut [
        BatchOp::Write { addr: a.add(1024), data: &b2 },
        BatchOp::atomic(a.add(24), AtomicOp::Faa { delta: 1 }),
    ])
    .await
    .unwrap();
}
