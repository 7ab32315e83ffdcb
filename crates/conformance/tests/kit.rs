//! The conformance kit itself: a correct index passes, a racy one is caught, a stuck client with
//! no crash to explain it fails the seed while a slow one does not, runs replay by seed, and an
//! index that spins on garbage or takes it for data fails the garbage test.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dmindex_conformance::{
    check_seed, garbage_test, model_test, not_runnable, suite, CheckConfig, CrashClock, Crashes,
    GarbageConfig, Garble, ModelConfig, Op,
};
use dmindex_fabric::{layout, Client, GlobalAddr, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, Ordered, PointIndex, PointOnly, RangeIndex, ScanBuf,
};
use dmindex_reference::LockedShards;

#[test]
fn reference_index_is_linearizable_under_faults() {
    let cfg = CheckConfig { crashes: Crashes::EverySeed, ..CheckConfig::default() };
    let sum =
        suite::<LockedShards, Ordered>("reference_index_is_linearizable_under_faults", &cfg, 0..40);
    if dmindex_sim::seeds::seed_override().is_none() {
        assert_eq!(sum.seeds, 40);
        assert!(sum.completed > 0 && sum.completed <= sum.requested);
        // The reference index's only waits are on shard locks, whose dead holders are judged,
        // fenced and released: nobody stays stuck behind a crash.
        assert!(sum.crashed > 0, "40 crash seeds and no crash");
        assert_eq!(sum.stuck, 0, "{sum}");
    }
}

/// The unchecked operations of a run with a crash in every seed are the crashed clients' own:
/// the survivors complete all of theirs. The reference index's writers queue on shard locks
/// (15–20 round trips an operation here, against about 3 for the hash tables), so on the post
/// clock its clients die early in their lists and few of their operations are checked; on the
/// operation clock they die as far in as any index's.
#[test]
fn on_the_operation_clock_crashes_strike_as_far_into_every_index() {
    let by = |crash_clock| CheckConfig {
        crashes: Crashes::EverySeed,
        crash_clock,
        ..CheckConfig::default()
    };
    let name = "on_the_operation_clock_crashes_strike_as_far_into_every_index";
    let post = suite::<LockedShards, Ordered>(name, &by(CrashClock::Post), 0..30);
    let op = suite::<LockedShards, Ordered>(name, &by(CrashClock::Operation), 0..30);
    if dmindex_sim::seeds::seed_override().is_none() {
        for sum in [&post, &op] {
            assert!(sum.crashed > 0, "{sum}");
            assert_eq!(sum.stuck, 0, "{sum}");
            assert_eq!(sum.survivors_completed, sum.survivors_requested, "{sum}");
        }
        assert!(post.coverage() < 0.8, "{post}");
        assert!(op.coverage() > 0.83, "{op}");
    }
}

/// The point-only path of the suite: no scans are issued, and the summary counts every client.
#[test]
fn reference_index_as_a_point_index() {
    let cfg = CheckConfig { crashes: Crashes::Never, ..CheckConfig::default() };
    let sum = suite::<LockedShards, PointOnly>("reference_index_as_a_point_index", &cfg, 0..10);
    if dmindex_sim::seeds::seed_override().is_none() {
        assert_eq!(sum.completed, sum.requested, "no crashes: every operation completes");
        assert_eq!((sum.crashed, sum.stuck), (0, 0));
    }
}

#[test]
fn same_seed_same_run() {
    let cfg = CheckConfig { crashes: Crashes::EverySeed, ..CheckConfig::default() };
    let a = check_seed::<LockedShards, Ordered>(&cfg, 5).unwrap();
    let b = check_seed::<LockedShards, Ordered>(&cfg, 5).unwrap();
    assert_eq!(a, b);
}

/// A register per key with no concurrency control: WRITE the presence word, then WRITE the value
/// word, as two verbs; READ both at once. A reader between the two WRITEs sees a value that was
/// never written with that presence.
struct Racy {
    base: GlobalAddr,
    keys: u64,
}

impl Racy {
    fn slot(&self, key: &[u8]) -> IndexResult<GlobalAddr> {
        let k = u64::from_be_bytes(
            key.try_into().map_err(|_| IndexError::InvalidKey("8 bytes".into()))?,
        );
        Ok(self.base.add(16 * (k % self.keys)))
    }
}

impl<T: Transport> PointIndex<T> for Racy {
    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let base = c.alloc(16 * (config.expected_items.max(1) + 1), 64).await?;
        c.write(layout::root_slot(config.root_slot), &base.raw().to_le_bytes()).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let base = GlobalAddr::from_raw(c.read_word(layout::root_slot(config.root_slot)).await?);
        Ok(Racy { base, keys: config.expected_items.max(1) + 1 })
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        out.clear();
        let b = c.read_vec(self.slot(key)?, 16).await?;
        if b[0] == 1 {
            out.extend_from_slice(&b[8..16]);
        }
        Ok(b[0] == 1)
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let s = self.slot(key)?;
        c.write(s, &1u64.to_le_bytes()).await?;
        c.write(s.add(8), value).await?;
        Ok(())
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let present = self.search(c, key).await?.is_some();
        if present {
            c.write(self.slot(key)?.add(8), value).await?;
        }
        Ok(present)
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        let present = self.search(c, key).await?.is_some();
        c.write(self.slot(key)?, &[0u8; 16]).await?;
        Ok(present)
    }
}

impl<T: Transport> RangeIndex<T> for Racy {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        let start = u64::from_be_bytes(
            from.try_into().map_err(|_| IndexError::InvalidKey("8 bytes".into()))?,
        );
        for k in start..self.keys {
            if out.len() >= count {
                break;
            }
            let kb = k.to_be_bytes();
            if let Some(v) = self.search(c, &kb).await? {
                out.push(&kb, &v);
            }
        }
        Ok(())
    }
}

#[test]
fn a_racy_index_is_caught() {
    let cfg = CheckConfig { crashes: Crashes::Never, ..CheckConfig::default() };
    let caught =
        (0..20).find_map(|seed| check_seed::<Racy, Ordered>(&cfg, seed).err().map(|e| (seed, e)));
    let (seed, e) = caught.expect("20 seeds and the racy index was never caught");
    let msg = format!("{e:#}");
    assert!(msg.contains("not linearizable"), "seed {seed}: {msg}");
}

/// One remote lock word that every operation takes and releases, except deletes, which take it
/// and forget it (a client that did not crash): everyone behind it is stuck, nothing explains it,
/// and the seed must fail as a deadlock.
struct Leaky;

impl Leaky {
    async fn lock<T: Transport>(c: &Client<T>, release: bool) -> IndexResult<()> {
        let word = layout::root_slot(7);
        while c.cas(word, 0, 1).await? != 0 {}
        if release {
            c.write(word, &0u64.to_le_bytes()).await?;
        }
        Ok(())
    }
}

impl<T: Transport> PointIndex<T> for Leaky {
    async fn create(_: &Client<T>, _: &IndexConfig, _: u16) -> IndexResult<Self> {
        Ok(Leaky)
    }
    async fn open(_: &Client<T>, _: &IndexConfig, _: u16) -> IndexResult<Self> {
        Ok(Leaky)
    }
    async fn search_into(&self, c: &Client<T>, _: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        out.clear();
        Leaky::lock(c, true).await.map(|()| false)
    }
    async fn insert(&self, c: &Client<T>, _: &[u8], _: &[u8]) -> IndexResult<()> {
        Leaky::lock(c, true).await
    }
    async fn update(&self, c: &Client<T>, _: &[u8], _: &[u8]) -> IndexResult<bool> {
        Leaky::lock(c, true).await.map(|()| false)
    }
    async fn delete(&self, c: &Client<T>, _: &[u8]) -> IndexResult<bool> {
        Leaky::lock(c, false).await.map(|()| false)
    }
}

#[test]
fn a_client_stuck_without_a_crash_fails_the_seed() {
    let cfg = CheckConfig { crashes: Crashes::Never, ..CheckConfig::default() };
    let e = check_seed::<Leaky, PointOnly>(&cfg, 1).expect_err("a leaked lock must be caught");
    let msg = format!("{e:#}");
    assert!(msg.contains("stuck") && msg.contains("deadlock or livelock"), "{msg}");
}

/// The reference index where a delete of key 1 first waits for a word that nobody ever writes,
/// READing it again and again: its client never completes another operation, while clients
/// that never delete key 1 finish theirs.
struct Waiting(LockedShards);

impl<T: Transport> PointIndex<T> for Waiting {
    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Waiting(<LockedShards as PointIndex<T>>::create(c, config, cn).await?))
    }
    async fn open(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Waiting(<LockedShards as PointIndex<T>>::open(c, config, cn).await?))
    }
    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.0.search_into(c, key, out).await
    }
    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.0.insert(c, key, value).await
    }
    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.0.update(c, key, value).await
    }
    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        if key == 1u64.to_be_bytes() {
            let mut word = [0u8; 8];
            while word == [0; 8] {
                c.read(layout::root_slot(7), &mut word).await?;
            }
        }
        self.0.delete(c, key).await
    }
}

/// Clients that finish do not hide those that wait for ever: once no client has completed an
/// operation for a window, the seed fails as a deadlock, naming how many are stuck.
#[test]
fn clients_waiting_for_ever_fail_the_seed_while_others_finish() {
    let cfg = CheckConfig { keys: 4, crashes: Crashes::Never, ..CheckConfig::default() };
    let mut partial = 0;
    for seed in 0..8 {
        let e = check_seed::<Waiting, PointOnly>(&cfg, seed).expect_err("a client waits for ever");
        let msg = format!("{e:#}");
        let stuck: usize = msg.split(' ').next().and_then(|n| n.parse().ok()).expect(&msg);
        assert!(
            msg.contains(&format!("{stuck} of 12 clients are stuck"))
                && msg.contains("no client completed an operation in the last 200.0 ms")
                && msg.contains("deadlock or livelock"),
            "seed {seed}: {msg}"
        );
        partial += usize::from(stuck < 12);
    }
    assert!(partial > 0, "in 8 seeds every client deleted key 1: nobody finished");
}

/// The reference index at 24 clients × 100 operations on 256 keys with 32-byte values: a run
/// phase lasts 300 to 450 ms of virtual time, past the fixed 200 ms deadline that used to call
/// such runs deadlocks (or, after a crash, count their clients as stuck behind it), and clients
/// complete operations throughout. Slow is not stuck: every seed passes, and in a crash seed
/// (8) no slow client is counted as stuck behind the crash.
fn slow_cfg() -> CheckConfig {
    CheckConfig {
        clients: 24,
        ops_per_client: 100,
        keys: 256,
        value_size: 32,
        ..Default::default()
    }
}

#[test]
fn a_slow_run_is_not_stuck() {
    let cfg = slow_cfg();
    for seed in [1, 8] {
        let r = check_seed::<LockedShards, Ordered>(&cfg, seed).expect("slow is not stuck");
        assert!(r.run_ns > 200_000_000, "seed {seed}: {r}");
        assert_eq!(r.stuck, 0, "seed {seed}: {r}");
        assert_eq!(r.crashed > 0, seed == 8, "seed {seed}: {r}");
        if r.crashed == 0 {
            assert_eq!(r.completed, r.requested, "seed {seed}: {r}");
        }
    }
}

/// The same seeds with the run's bound held at the old 200 ms: the clients are still completing
/// operations when it passes, and the seed fails saying so — neither as a deadlock nor, in the
/// crash seed, by counting the slow clients as stuck behind the crash.
#[test]
fn a_bound_the_run_cannot_meet_is_reported_as_such() {
    let cfg = CheckConfig { bound_ns: Some(200_000_000), ..slow_cfg() };
    for seed in [1, 8] {
        let e = check_seed::<LockedShards, Ordered>(&cfg, seed).expect_err("the bound is short");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("reached its bound of 200.0 ms of virtual time")
                && msg.contains("still completing operations")
                && msg.contains("not a deadlock")
                && !msg.contains("are stuck"),
            "seed {seed}: {msg}"
        );
    }
}

/// The reference index whose inserts each take 1 MiB of remote memory more and never use it:
/// a few dozen fill a check's memory node.
struct Hoarder(LockedShards);

impl<T: Transport> PointIndex<T> for Hoarder {
    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Hoarder(<LockedShards as PointIndex<T>>::create(c, config, cn).await?))
    }
    async fn open(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Hoarder(<LockedShards as PointIndex<T>>::open(c, config, cn).await?))
    }
    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.0.search_into(c, key, out).await
    }
    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        c.alloc(1 << 20, 64).await?;
        self.0.insert(c, key, value).await
    }
    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.0.update(c, key, value).await
    }
    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.0.delete(c, key).await
    }
}

/// Memory that runs out in the fault-free preload says the index cannot hold the workload (a
/// configuration `dmindex check` refuses with exit 2), not that a seed failed.
#[test]
fn memory_too_small_for_the_preload_is_not_a_failing_seed() {
    let cfg = CheckConfig { keys: 200, crashes: Crashes::Never, ..CheckConfig::default() };
    let e = check_seed::<Hoarder, PointOnly>(&cfg, 0).expect_err("100 MiB in a 64 MiB node");
    let msg = format!("{e:#}");
    assert!(not_runnable(&e), "{msg}");
    assert!(
        msg.contains("the index cannot hold this workload: preloading 100 of 200 keys")
            && msg.contains("out of memory"),
        "{msg}"
    );
}

/// An index that acknowledges deletes without deleting: the model test must catch it.
struct Forgetful(LockedShards);

impl<T: Transport> PointIndex<T> for Forgetful {
    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Forgetful(<LockedShards as PointIndex<T>>::create(c, config, cn).await?))
    }
    async fn open(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Forgetful(<LockedShards as PointIndex<T>>::open(c, config, cn).await?))
    }
    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.0.search_into(c, key, out).await
    }
    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.0.insert(c, key, value).await
    }
    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.0.update(c, key, value).await
    }
    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        Ok(self.0.search(c, key).await?.is_some())
    }
}

#[test]
fn the_model_test_catches_a_lost_delete() {
    let cfg = ModelConfig::new(IndexConfig::default(), 20, 32);
    let r = std::panic::catch_unwind(|| model_test::<Forgetful, PointOnly>(&cfg));
    let msg = r.err().and_then(|p| p.downcast_ref::<String>().cloned()).expect("must fail");
    assert!(msg.contains("model test failed"), "{msg}");
}

/// A register per key, a value word and its check word written together; a search re-reads the
/// pair until they agree, without bound (until `STOP_SPINNING`, so that the test's thread ends).
/// Its slots are [`Racy`]'s.
struct Spinning(Racy);

static STOP_SPINNING: AtomicBool = AtomicBool::new(false);

impl<T: Transport> PointIndex<T> for Spinning {
    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        <Racy as PointIndex<T>>::create(c, config, cn).await.map(Spinning)
    }
    async fn open(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        <Racy as PointIndex<T>>::open(c, config, cn).await.map(Spinning)
    }
    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        loop {
            let b = c.read_vec(self.0.slot(key)?, 16).await?;
            let (v, check) = (&b[..8], &b[8..]);
            if v.iter().zip(check).all(|(x, y)| *x == !*y) {
                out.clear();
                out.extend_from_slice(v);
                return Ok(v.iter().any(|&x| x != 0));
            }
            if STOP_SPINNING.load(Ordering::Relaxed) {
                return Err(IndexError::Unsupported("stopped spinning".into()));
            }
        }
    }
    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let mut b = [0u8; 16];
        b[..value.len()].copy_from_slice(value);
        for i in 0..8 {
            b[8 + i] = !b[i];
        }
        Ok(c.write(self.0.slot(key)?, &b).await?)
    }
    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.insert(c, key, value).await.map(|()| true)
    }
    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.insert(c, key, &[0; 8]).await.map(|()| true)
    }
}

/// The garbage test's failure message, for an index that does not report garbage as corrupt.
fn garbage_failure<I: PointIndex<dmindex_conformance::Traced> + 'static>() -> String {
    let mut cfg = GarbageConfig::new(IndexConfig::default(), dmindex_index::IndexKind::Point);
    (cfg.keys, cfg.victim, cfg.ops, cfg.garbles) = (20, 10, vec![Op::Search], vec![Garble::All]);
    cfg.timeout = Duration::from_secs(2);
    let r = std::panic::catch_unwind(|| garbage_test::<I, PointOnly>(&cfg));
    r.err().and_then(|p| p.downcast_ref::<String>().cloned()).expect("must fail")
}

#[test]
fn the_garbage_test_catches_a_search_that_spins() {
    let msg = garbage_failure::<Spinning>();
    STOP_SPINNING.store(true, Ordering::Relaxed);
    assert!(msg.contains("did not end within 2s: a retry loop spins"), "{msg}");
}

#[test]
fn the_garbage_test_catches_garbage_taken_for_data() {
    let msg = garbage_failure::<Racy>();
    assert!(msg.contains("the garbage went unnoticed"), "{msg}");
}
