//! Fencing a cluster member on memnodes: a zombie client keeps writing while a judge fences it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{BatchOp, Fabric, FabricError, GlobalAddr};
use dmindex_ucx::transport::UcxFabric;

use super::{memnode, TOKEN};

/// The member the zombie registers as, the one its neighbour does, and the one it joins again as.
const ZOMBIE: u64 = 0x0ABC_0001;
const NEIGHBOUR: u64 = 0x0DEF_0001;
const REJOINED: u64 = 0x0ABC_0002;

/// How long the zombie may write before the judge's fence reaches both memnodes.
const PATIENCE: Duration = Duration::from_secs(30);

/// A zombie registers as a member on two memnodes and writes an increasing number into a word on
/// each (a zero-wait WRITE, then an acknowledged one). A judge on another thread fences it (one
/// FENCE per memnode); once the fence returns, the judge reads both words, waits while the zombie
/// keeps trying, and reads them again: they never change. The zombie's verbs there are refused
/// with `Fenced` naming the memnode — WRITEs, atomics, batches, flushes alike — while a
/// neighbour registered as another member on the zombie's own thread (the same UCX worker and
/// endpoints: another session only) and an unregistered client go on. A late registration as the
/// fenced member is fenced from its start; joining again as another member writes again.
pub fn a_fenced_member_writes_nothing_after_the_fence_returns() {
    let mns = [memnode(0, 16 << 20), memnode(1, 16 << 20)];
    let addrs: Vec<String> = mns.iter().map(|m| m.addr.clone()).collect();
    let f = UcxFabric::connect(&addrs, TOKEN, 1 << 20).unwrap();
    let judge = f.client(0).unwrap();
    let word = |node| run_tasks([judge.alloc_on(node, 64, 64)]).remove(0).unwrap();
    let (a, b) = (word(0), word(1));
    let (na, nb, pa) = (word(0), word(1), word(0));
    let writing = AtomicBool::new(false);
    let judged = AtomicBool::new(false);
    std::thread::scope(|s| {
        let zombie = s.spawn(|| {
            let z = f.client(1).unwrap();
            let neighbour = f.client(1).unwrap();
            let plain = f.client(1).unwrap();
            let refused = run_tasks([async {
                z.register_member(ZOMBIE).await.unwrap();
                neighbour.register_member(NEIGHBOUR).await.unwrap();
                assert_eq!(z.membership().member.get(), ZOMBIE);
                let refused = write_until_refused(&z, [a, b], &writing).await;
                // Refused from then on, whatever the verb, while the judge watches.
                while !judged.load(Ordering::SeqCst) {
                    all_refused(&z, a).await;
                    all_refused(&z, b).await;
                }
                // Its neighbours on this thread are unaffected.
                neighbour.write(na, &7u64.to_le_bytes()).await.unwrap();
                neighbour.write(nb, &8u64.to_le_bytes()).await.unwrap();
                neighbour.flush().await.unwrap();
                plain.write(pa, &9u64.to_le_bytes()).await.unwrap();
                // Joining again as another member, it writes again.
                z.register_member(REJOINED).await.unwrap();
                z.write(pa.add(8), &10u64.to_le_bytes()).await.unwrap();
                refused
            }]);
            refused.into_iter().next().unwrap()
        });
        // The fence comes once the zombie has written on both memnodes, and a little later.
        while !writing.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        run_tasks([judge.fence(ZOMBIE)]).remove(0).unwrap();
        let seen =
            [run_tasks([judge.read_word(a)]).remove(0), run_tasks([judge.read_word(b)]).remove(0)]
                .map(Result::unwrap);
        std::thread::sleep(Duration::from_millis(200));
        let after =
            [run_tasks([judge.read_word(a)]).remove(0), run_tasks([judge.read_word(b)]).remove(0)]
                .map(Result::unwrap);
        assert_eq!(after, seen, "the zombie wrote after the fence returned");
        judged.store(true, Ordering::SeqCst);
        let refused = zombie.join().unwrap();
        for n in 0..2 {
            // The WRITE refused first carried refused[n]; the zero-wait WRITE before it, of the
            // same number, may have landed.
            assert!(seen[n] > 0, "the zombie wrote nothing on memnode {n} before the fence");
            assert!(
                seen[n] == refused[n] || seen[n] + 1 == refused[n],
                "memnode {n}: the word holds {}, the first refused WRITE carried {}",
                seen[n],
                refused[n]
            );
        }
    });
    let read = |at| run_tasks([judge.read_word(at)]).remove(0).unwrap();
    assert_eq!([read(na), read(nb), read(pa), read(pa.add(8))], [7, 8, 9, 10]);
    // A zombie that registers only now (paused between its registrations) is fenced from the
    // start, and sends no verb to a memnode it holds no session with.
    let late = f.client(0).unwrap();
    let e = run_tasks([late.register_member(ZOMBIE)]).remove(0).unwrap_err();
    assert_eq!(e, FabricError::Fenced { node: 0 });
    let e = run_tasks([late.write(a, &[1; 8])]).remove(0).unwrap_err();
    assert_eq!(e, FabricError::Fenced { node: 0 });
    let e = run_tasks([late.write(b, &[1; 8])]).remove(0).unwrap_err();
    assert!(e.to_string().contains("holds no session"), "{e}");
    // Fencing a member no memnode knows yet holds for its later registrations; clients that
    // are no members are untouched.
    run_tasks([judge.fence(0x5EED)]).remove(0).unwrap();
    let fresh = f.client(1).unwrap();
    let e = run_tasks([fresh.register_member(0x5EED)]).remove(0).unwrap_err();
    assert_eq!(e, FabricError::Fenced { node: 0 });
    let plain = f.client(1).unwrap();
    run_tasks([plain.write(a.add(8), &[2; 8])]).remove(0).unwrap();
    assert_eq!(read(a.add(8)), 0x0202_0202_0202_0202);
}

/// Writes `i`, `i + 1`, … into each word (a zero-wait WRITE, then the same number
/// acknowledged) until each word's memnode refuses the zombie, setting `writing` once both took
/// one; per word, the number of the first acknowledged WRITE refused there.
async fn write_until_refused<T: dmindex_fabric::Transport>(
    z: &dmindex_fabric::Client<T>,
    words: [GlobalAddr; 2],
    writing: &AtomicBool,
) -> [u64; 2] {
    let mut refused = [0u64; 2];
    let deadline = Instant::now() + PATIENCE;
    // Ends once both memnodes refused, which the judge's fence brings (or at the deadline).
    for i in 1u64.. {
        for (n, w) in words.iter().enumerate() {
            if refused[n] != 0 {
                continue;
            }
            let bytes = i.to_le_bytes();
            z.write_zero_wait(*w, &bytes).unwrap();
            match z.write(*w, &bytes).await {
                Ok(()) => {}
                Err(FabricError::Fenced { node }) if node == w.node() => refused[n] = i,
                Err(e) => panic!("memnode {n}: {e}"),
            }
        }
        if refused.iter().all(|&r| r != 0) {
            return refused;
        }
        writing.store(true, Ordering::SeqCst);
        assert!(Instant::now() < deadline, "not fenced within {PATIENCE:?}");
    }
    unreachable!("the loop ends at the refusals")
}

/// Every kind of verb the zombie sends to `at`'s memnode is refused as fenced there.
async fn all_refused<T: dmindex_fabric::Transport>(z: &dmindex_fabric::Client<T>, at: GlobalAddr) {
    let fenced = Err(FabricError::Fenced { node: at.node() });
    assert_eq!(z.write(at, &u64::MAX.to_le_bytes()).await, fenced);
    assert_eq!(z.faa(at, 1).await.map(drop), fenced);
    assert_eq!(z.cas(at, 0, 1).await.map(drop), fenced);
    assert_eq!(z.read_word(at).await.map(drop), fenced, "a fenced member reads nothing either");
    let data = [0xEEu8; 8];
    let mut ops =
        [BatchOp::Write { addr: at, data: &data }, BatchOp::Write { addr: at.add(8), data: &data }];
    assert_eq!(z.batch(&mut ops).await, fenced);
    z.write_zero_wait(at, &data).unwrap();
    assert!(matches!(z.flush().await, Err(FabricError::Fenced { .. })));
}

/// Over shared memory a member's verbs reach the pool without the memnode: a fence of it marks
/// its sessions but reports that it cannot hold, and registering and fencing work otherwise.
pub fn a_one_sided_member_cannot_be_fenced() {
    let mn = memnode(0, 16 << 20);
    let f = UcxFabric::connect(std::slice::from_ref(&mn.addr), TOKEN, 1 << 20).unwrap();
    assert_eq!(f.one_sided().unwrap(), [true]);
    let (z, judge) = (f.client(0).unwrap(), f.client(0).unwrap());
    run_tasks([z.register_member(ZOMBIE)]).remove(0).unwrap();
    let a = run_tasks([z.alloc(64, 64)]).remove(0).unwrap();
    let e = run_tasks([judge.fence(ZOMBIE)]).remove(0).unwrap_err();
    assert!(matches!(e, FabricError::Unsupported(m) if m.contains("one-sidedly")), "{e}");
    // A member with no session here is fenced as anywhere.
    run_tasks([judge.fence(NEIGHBOUR)]).remove(0).unwrap();
    run_tasks([z.write(a, &5u64.to_le_bytes())]).remove(0).unwrap();
    assert_eq!(run_tasks([judge.read_word(a)]).remove(0).unwrap(), 5);
}
