//! Fencing on the in-process fabric: a fenced member's verbs are refused on the fenced node,
//! and a fence returns only once a verb of the member's that had started is done — checked
//! with a zombie on another OS thread writing as fast as it can.

use std::sync::atomic::{AtomicBool, Ordering};

use dmindex_fabric::exec::block_on;
use dmindex_fabric::{Fabric, FabricError, LocalConfig, LocalFabric, Transport};

#[test]
fn a_fenced_member_writes_nothing_after_the_fence_returns() {
    let f = LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
    let judge = f.client(0).unwrap();
    let (a, b) = block_on(async {
        (judge.alloc_on(0, 64, 64).await.unwrap(), judge.alloc_on(1, 64, 64).await.unwrap())
    });
    let registered = AtomicBool::new(false);
    std::thread::scope(|s| {
        let zombie = s.spawn(|| {
            let z = f.client(1).unwrap();
            block_on(async {
                z.register_member(42).await.unwrap();
                registered.store(true, Ordering::SeqCst);
                // Ends at the first refusal, which the judge's fence brings.
                for i in 1u64.. {
                    match z.write(a, &i.to_le_bytes()).await {
                        Ok(()) => {}
                        Err(FabricError::Fenced { node: 0 }) => {
                            z.write(b, &i.to_le_bytes()).await.unwrap();
                            return i;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                unreachable!("the loop ends at the refusal")
            })
        });
        while !registered.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        block_on(async {
            judge.transport().fence(0, 42).await.unwrap();
            let seen = judge.read_word(a).await.unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(judge.read_word(a).await.unwrap(), seen, "written after the fence");
        });
        let refused_at = zombie.join().unwrap();
        assert!(refused_at > 0);
        assert_eq!(block_on(judge.read_word(b)).unwrap(), refused_at, "node 1 was not fenced");
    });
    // Unregistered members are not touched by a fence.
    let other = f.client(0).unwrap();
    block_on(async { other.write(a, &[1; 8]).await }).unwrap();
}
