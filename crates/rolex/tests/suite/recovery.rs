//! Client-crash recovery in virtual time: a ROLEX client killed at instants spread over the
//! insert that grows a chain to its bound and retrains the model (its task dropped; verbs it
//! posted still land): holding the base leaf's lock as a writer, or the model's leaves frozen as
//! a retrainer, before or after its publish. Another client on another compute node then writes
//! every leaf's keys and must get through, judging the dead holder, and find every key as
//! written — by search and by scan.

use std::collections::BTreeMap;

use dmindex_conformance::killed::{counter, nth_insert, Pair};
use dmindex_fabric::Client;
use dmindex_index::{IndexConfig, PointIndex, RangeIndex, ScanBuf};
use dmindex_prim::root::RootSlot;
use dmindex_rolex::Rolex;
use dmindex_sim::{NetParams, Sim, SimConfig, SimTransport, Task};

/// Keys the killed client may write before its fatal insert (from 1, ascending).
const KEYS: u64 = 200;
/// Kill instants spread over the killed insert.
const POINTS: u64 = 40;

/// Tiny leaves (4 slots, 3 trained keys each), so that ascending inserts grow the last chain
/// to its bound and retrain within a few dozen keys.
fn config() -> IndexConfig {
    IndexConfig::with_options(&[("span", "4"), ("epsilon", "2"), ("fill", "3")])
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

fn extra(idx: &Rolex, name: &str) -> u64 {
    counter(idx, name)
}

/// An index with a handle per client: `dead` (compute node 0) will be killed, `live` (1) goes
/// on.
type Setup = Pair<Rolex>;

fn setup() -> Setup {
    let net = NetParams::preset("stress").unwrap();
    let cfg = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(5, net) };
    Pair::new(Sim::new(cfg).unwrap(), &config())
}

/// The first key whose insert (keys from 1, one client, no faults: a deterministic run) makes
/// the `nth` retrain, and how long that insert takes.
fn nth_retrain(nth: u64) -> (u64, u64) {
    let found = nth_insert(setup, KEYS, nth, |a| extra(a, "retrains"));
    found.unwrap_or_else(|| panic!("fewer than {nth} retrains in {KEYS} keys"))
}

fn root(t: &Setup) -> u64 {
    let slot = RootSlot::new(config().root_slot).unwrap();
    t.s.block_on(async { slot.load(&t.live).await.unwrap() })
}

/// Scans of 5 from every key of `1..=top` against `m`.
async fn scans_agree(b: &Rolex, c: &Client<SimTransport>, m: &BTreeMap<u64, u64>, top: u64) {
    let mut buf = ScanBuf::new();
    for x in 1..=top {
        b.scan_into(c, &key(x), 5, &mut buf).await.unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            m.range(x..).take(5).map(|(k, v)| (key(*k).to_vec(), key(*v).to_vec())).collect();
        assert_eq!(buf.to_pairs(), want, "scan of 5 from {x}");
    }
}

/// What a kill left, as the survivor met it.
#[derive(Debug, Default)]
struct Seen {
    /// Kills that left the model claimed but not published (the freeze rolled back).
    unpublished: u64,
    /// Kills after the publish (the old leaves retired by the survivor's repair).
    published: u64,
    /// Kills whose lock the survivor took over and repaired.
    repaired: u64,
}

#[test]
fn a_writer_or_retrainer_killed_at_every_point_leaves_writers_going() {
    // The fourth: the model retrained then has several base leaves, frozen one by one.
    let (k, took) = nth_retrain(4);
    let mut seen = Seen::default();
    for p in 0..=POINTS {
        let t = setup();
        t.insert_keys(1, k);
        let before = root(&t);
        t.kill_insert(k, took * p / POINTS + 1);
        let claimed = extra(&t.a, "retrains") >= 4;
        let published = root(&t) != before;
        let (s, live, b) = (&t.s, &t.live, &t.b);
        let task = async {
            // The killed insert took effect or it did not: the survivor's first search says
            // which, and every later read must agree.
            let mut m: BTreeMap<u64, u64> = (1..k).map(|j| (j, j)).collect();
            if b.search(live, &key(k)).await.unwrap().is_some() {
                m.insert(k, k);
            }
            scans_agree(b, live, &m, k + 2).await;
            // Writes to every leaf, the dead holder's among them.
            for j in (1..=k + 20).rev().step_by(3) {
                b.insert(live, &key(j), &key(j + 1000)).await.unwrap();
                m.insert(j, j + 1000);
            }
            for j in (2..=k).step_by(4) {
                assert_eq!(b.delete(live, &key(j)).await.unwrap(), m.remove(&j).is_some());
            }
            for j in 1..=k + 20 {
                let got = b.search(live, &key(j)).await.unwrap();
                assert_eq!(got, m.get(&j).map(|v| key(*v).to_vec()), "point {p}: key {j}");
            }
            scans_agree(b, live, &m, k + 20).await;
            // A handle opened now, on the directory as it stands, sees the same.
            let fresh = Rolex::open(live, &config(), 2).await.unwrap();
            for j in 1..=k + 20 {
                let got = fresh.search(live, &key(j)).await.unwrap();
                assert_eq!(got, m.get(&j).map(|v| key(*v).to_vec()), "point {p}: fresh, key {j}");
            }
            scans_agree(&fresh, live, &m, k + 20).await;
        };
        let out = s.run_until([Box::pin(task) as Task], s.now_ns() + 400_000_000);
        assert!(out.all_finished(), "point {p} of {POINTS}: the survivor is stuck: {out:?}");
        seen.unpublished += u64::from(claimed && !published);
        seen.published += u64::from(published);
        seen.repaired += u64::from(extra(b, "lock_repairs") > 0);
    }
    assert!(
        seen.unpublished > 0 && seen.published > 0,
        "kills on both sides of the publish: {seen:?}"
    );
    assert!(seen.repaired > 0, "a dead holder's lock was repaired: {seen:?}");
}
