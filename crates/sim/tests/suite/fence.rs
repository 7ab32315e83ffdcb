//! Fencing a cluster member: once the fence returns, no verb of the member's connections
//! executes on that node, and its verbs already in flight either landed before or are refused.

use dmindex_fabric::{Client, FabricError, Transport};
use dmindex_sim::{Sim, SimConfig, SimTransport, Task};

fn sim(seed: u64) -> Sim {
    Sim::new(SimConfig { memory_nodes: 2, ..SimConfig::stress_with_delays(seed) }).unwrap()
}

/// A zombie keeps writing its own number into a word; a judge fences it and then writes its
/// own. After the fence returns, the word never changes again and the zombie's verbs fail
/// with `Fenced` on the fenced node only.
#[test]
fn a_fenced_member_writes_nothing_after_the_fence_returns() {
    for seed in 0..40 {
        let s = sim(seed);
        let (zombie, judge) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let (a, b) = s.block_on(async {
            (zombie.alloc_on(0, 64, 64).await.unwrap(), zombie.alloc_on(1, 64, 64).await.unwrap())
        });
        let after_fence = std::cell::Cell::new(None::<u64>);
        let refused = std::cell::Cell::new(false);
        let z = async {
            zombie.register_member(0xABC).await.unwrap();
            // Ends at the first refusal; bounded by the judge's fence, which comes early.
            for i in 1..10_000u64 {
                match zombie.write(a, &i.to_le_bytes()).await {
                    Ok(()) => {}
                    Err(FabricError::Fenced { node: 0 }) => {
                        refused.set(true);
                        // The other node still takes its verbs: the fence was node 0's.
                        zombie.write(b, &i.to_le_bytes()).await.unwrap();
                        return;
                    }
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
        };
        let j = async {
            judge.pause(3_000).await;
            fence_node0(&judge, 0xABC).await;
            let seen = judge.read_word(a).await.unwrap();
            after_fence.set(Some(seen));
            judge.pause(20_000).await;
            assert_eq!(judge.read_word(a).await.unwrap(), seen, "seed {seed}: written after fence");
        };
        let out = s.run([Box::pin(z) as Task, Box::pin(j) as Task]);
        assert!(out.all_finished(), "seed {seed}: {out:?}");
        assert!(refused.get(), "seed {seed}: the zombie was never refused");
        assert!(after_fence.get().unwrap() > 0, "seed {seed}: the zombie wrote before the fence");
    }
}

async fn fence_node0(c: &Client<SimTransport>, member: u64) {
    c.transport().fence(0, member).await.unwrap();
}
