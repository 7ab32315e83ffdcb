//! The `local` verb path allocates nothing: every verb, batch and zero-wait write is counted by a
//! global allocator that must see no allocation while they run.

use dmindex_fabric::alloc_count::{allocations, CountingAlloc};
use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{BatchOp, Fabric, LocalConfig, LocalFabric};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn verbs_do_not_allocate() {
    let f = LocalFabric::new(LocalConfig {
        node_size: 8 << 20,
        chunk_size: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let a = c.alloc(4096, 64).await.unwrap();
        let mut buf = [0u8; 256];
        let mut b2 = [0u8; 8];
        let before = allocations();
        for i in 0..1000u64 {
            c.read(a, &mut buf).await.unwrap();
            c.write(a.add(256), &buf).await.unwrap();
            c.write_zero_wait(a.add(512), &buf[..8]).unwrap();
            c.cas(a, i, i + 1).await.unwrap();
            c.masked_cas(a.add(8), 0, 1, u64::MAX, u64::MAX).await.unwrap();
            c.faa(a.add(16), 1).await.unwrap();
            c.batch(&mut [
                BatchOp::Read { addr: a, buf: &mut b2 },
                BatchOp::Write { addr: a.add(1024), data: &buf[..64] },
            ])
            .await
            .unwrap();
        }
        c.flush().await.unwrap();
        // Carving from the current chunk is allocation-free too.
        c.alloc(64, 64).await.unwrap();
        assert_eq!(allocations() - before, 0, "heap allocations on the verb path");
    }]);
}
