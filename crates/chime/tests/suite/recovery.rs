//! Client-crash recovery in virtual time: a CHIME client killed at instants spread over an
//! insert that splits a leaf (its task dropped; verbs it posted still land), then another
//! client on another compute node searches, scans (fine-grained: the scan plans its READs from
//! cached parents) and writes around it. The survivor must finish — judging a dead holder of the
//! leaf lock, or crossing a half split whose separator never reached the parent — and see
//! every key as written.

use std::collections::BTreeMap;

use dmindex_chime::Chime;
use dmindex_conformance::killed::{counter, nth_insert, Pair};
use dmindex_fabric::{Client, Transport};
use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex, ScanBuf};
use dmindex_sim::{NetParams, Sim, SimConfig, SimTransport, Task};

/// Keys the killed client writes before and during its fatal insert (from 1, ascending).
const KEYS: u64 = 40;
/// Kill instants spread over the killed insert.
const POINTS: u64 = 40;

/// Tiny nodes: 8-slot leaves of neighbourhood 4, four children an internal node.
fn config() -> IndexConfig {
    let o = [("span", "8"), ("h", "4"), ("internal_span", "4")];
    IndexConfig {
        extra: o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        cache_bytes: 1 << 20,
        ..IndexConfig::default()
    }
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

fn splits(idx: &Chime) -> u64 {
    counter(idx, "leaf_splits")
}

fn retries(idx: &Chime) -> u64 {
    <Chime as PointIndex<SimTransport>>::stats(idx).retries
}

/// A tree with a handle per client: `dead` (compute node 0) will be killed, `live` (1) goes on.
type Setup = Pair<Chime>;

fn setup() -> Setup {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, &[]).unwrap();
    let cfg = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(3, net) };
    Pair::new(Sim::with_services(cfg, services).unwrap(), &config())
}

/// The first key whose insert (keys from 1, one client, no faults: a deterministic run) makes
/// the `nth` leaf split, and how long that insert takes.
fn nth_split(nth: u64) -> (u64, u64) {
    let found = nth_insert(setup, KEYS, nth, splits);
    found.unwrap_or_else(|| panic!("fewer than {nth} splits in {KEYS} keys"))
}

/// The same run, its insert of key `k` killed `run_ns` into it.
fn killed(k: u64, run_ns: u64) -> Setup {
    dmindex_conformance::killed::killed(setup, k, run_ns)
}

/// Scans of 5 from every key of `1..=top` against `m`.
async fn scans_agree(b: &Chime, c: &Client<SimTransport>, m: &BTreeMap<u64, u64>, top: u64) {
    let mut buf = ScanBuf::new();
    for x in 1..=top {
        b.scan_into(c, &key(x), 5, &mut buf).await.unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            m.range(x..).take(5).map(|(k, v)| (key(*k).to_vec(), key(*v).to_vec())).collect();
        assert_eq!(buf.to_pairs(), want, "scan of 5 from {x}");
    }
}

/// Kills the insert that makes the `nth` split at every point; returns at how many points the
/// survivor found the split's separator missing from the parent (a half split its splitter
/// left), which the survivor then finishes.
fn kill_at_every_point(nth: u64) -> u64 {
    let (k, took) = nth_split(nth);
    let mut half_splits = 0;
    for p in 0..=POINTS {
        let t = killed(k, took * p / POINTS + 1);
        let (s, live, b) = (&t.s, &t.live, &t.b);
        let task = async {
            // The killed insert took effect or it did not: the survivor's first search says
            // which, and every later read must agree.
            let mut m: BTreeMap<u64, u64> = (1..k).map(|j| (j, j)).collect();
            if b.search(live, &key(k)).await.unwrap().is_some() {
                m.insert(k, k);
            }
            scans_agree(b, live, &m, k + 2).await;
            let before = retries(b);
            scans_agree(b, live, &m, k + 2).await;
            // A half split costs every scan across it a dropped parent: retries go on.
            if retries(b) > before {
                half_splits += 1;
            }
            for j in (1..=k + 20).step_by(3) {
                b.insert(live, &key(j), &key(j + 1000)).await.unwrap();
                m.insert(j, j + 1000);
            }
            for j in (2..=k).step_by(4) {
                assert!(b.delete(live, &key(j)).await.unwrap(), "point {p}: key {j}");
                m.remove(&j);
            }
            for j in 1..=k + 20 {
                let got = b.search(live, &key(j)).await.unwrap();
                assert_eq!(got, m.get(&j).map(|v| key(*v).to_vec()), "point {p}: key {j}");
            }
            scans_agree(b, live, &m, k + 20).await;
            // A half split left for good is finished by a client that crosses it a lease after
            // it first did: from then on nothing across it retries.
            live.pause(2 * live.transport().lease_ns()).await;
            for j in 1..=k + 20 {
                b.search(live, &key(j)).await.unwrap();
            }
            let before = retries(b);
            scans_agree(b, live, &m, k + 20).await;
            for j in 1..=k + 20 {
                let got = b.search(live, &key(j)).await.unwrap();
                assert_eq!(got, m.get(&j).map(|v| key(*v).to_vec()), "point {p}: key {j}");
            }
            assert_eq!(retries(b), before, "point {p}: a half split is still crossed");
        };
        let out = s.run_until([Box::pin(task) as Task], s.now_ns() + 400_000_000);
        assert!(out.all_finished(), "point {p} of {POINTS}: the survivor is stuck: {out:?}");
    }
    half_splits
}

/// The third split: the root is an internal node by then, so scans plan from a cached parent.
#[test]
fn a_splitter_killed_at_every_point_leaves_scans_and_writers_going() {
    assert!(kill_at_every_point(3) > 0, "no kill point left a split half done");
}
