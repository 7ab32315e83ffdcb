//! Client-crash recovery in virtual time: the client that closed a CurSegment killed at every
//! point of its merge, and of a merge that splits (its task dropped; verbs it posted still
//! land), then another client writes, reads and deletes every key. The waiter must get
//! through (judging the dead merger, fencing it and merging or splitting in its place) and
//! every key must hold its newest value; without the repair the waiter never finishes.

use dmindex_conformance::killed::{counter, nth_insert, Pair};
use dmindex_index::{mn_services, IndexConfig, PointIndex};
use dmindex_sephash::SepHash;
use dmindex_sim::{NetParams, Sim, SimConfig, Task};

/// Keys written: enough for tiny segments to merge and split several times.
const KEYS: u64 = 60;
/// Kill instants spread over the killed insert.
const POINTS: u64 = 48;

/// The conformance kit's tiny shape: 8 slots a CurSegment, a split past 16 entries.
fn config() -> IndexConfig {
    let o =
        [("cur", "80"), ("main_ratio", "2"), ("depth", "1"), ("max_depth", "10"), ("window", "3")];
    IndexConfig {
        extra: o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        ..IndexConfig::default()
    }
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

fn stat(idx: &SepHash, name: &str) -> u64 {
    counter(idx, name)
}

/// A table with a handle per client: `dead` (compute node 0) will be killed, `live` (1)
/// waits on what it left.
type Setup = Pair<SepHash>;

fn setup() -> Setup {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, &[]).unwrap();
    let cfg = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(5, net) };
    Pair::new(Sim::with_services(cfg, services).unwrap(), &config())
}

/// The first key whose insert (keys from 1, one client, no faults: a deterministic run)
/// bumps counter `what` (`merges` or `splits`), and how long that insert takes.
fn first(what: &str) -> (u64, u64) {
    let found = nth_insert(setup, KEYS, 1, |a| stat(a, what));
    found.unwrap_or_else(|| panic!("no {what} in {KEYS} keys"))
}

/// The same run, its insert of key `k` killed `run_ns` into it.
fn killed(k: u64, run_ns: u64) -> Setup {
    dmindex_conformance::killed::killed(setup, k, run_ns)
}

fn kill_at_every_point(what: &str) -> u64 {
    let (k, took) = first(what);
    let mut repaired = 0;
    for p in 0..=POINTS {
        let t = killed(k, took * p / POINTS + 1);
        let (s, live, b) = (&t.s, &t.live, &t.b);
        let task = async {
            for k in 1..=KEYS {
                b.insert(live, &key(k), &key(k + 1000)).await.unwrap();
            }
            for k in 1..=KEYS {
                let got = b.search(live, &key(k)).await.unwrap();
                assert_eq!(got, Some(key(k + 1000).to_vec()), "{what} point {p}: key {k}");
            }
            for k in (1..=KEYS).step_by(2) {
                assert!(b.delete(live, &key(k)).await.unwrap(), "{what} point {p}: key {k}");
            }
            for k in 1..=KEYS {
                let want = (k % 2 == 0).then(|| key(k + 1000).to_vec());
                let got = b.search(live, &key(k)).await.unwrap();
                assert_eq!(got, want, "{what} point {p}: key {k} after the deletes");
            }
        };
        let out = s.run_until([Box::pin(task) as Task], s.now_ns() + 400_000_000);
        assert!(out.all_finished(), "{what} point {p} of {POINTS}: the waiter is stuck: {out:?}");
        repaired += stat(b, "crash_repairs");
    }
    repaired
}

#[test]
fn a_merger_killed_at_every_point() {
    assert!(kill_at_every_point("merges") > 0, "no kill point left a merge to repair");
}

#[test]
fn a_splitter_killed_at_every_point() {
    assert!(kill_at_every_point("splits") > 0, "no kill point left a split to repair");
}
