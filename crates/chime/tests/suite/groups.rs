//! Collision groups under a writer killed in virtual time: the insert that forms a group (its
//! group written, its entry put in, the plain entries it shadows cleared under a later lock)
//! and the delete of a group's last key are each cut at instants spread over them; another
//! client on another compute node then reads, scans and writes the prefix. It must finish,
//! agree with a model at every step, and never see a deleted key come back.

use std::collections::BTreeMap;

use dmindex_chime::{Chime, Sherman};
use dmindex_fabric::{Client, Transport};
use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex, ScanBuf};
use dmindex_sim::{NetParams, Sim, SimConfig, SimTransport, Task};

/// Kill instants spread over the killed operation.
const POINTS: u64 = 30;

/// Keys of one 8-byte prefix, `crowded!` and a letter, and keys around it.
fn crowd(i: usize) -> Vec<u8> {
    format!("crowded!{}", (b'a' + i as u8) as char).into_bytes()
}

const AROUND: [&[u8]; 4] = [b"crowd", b"crowded", b"crowdee-1", b"zz-last"];

struct Run<I> {
    s: Sim,
    dead: Client<SimTransport>,
    live: Client<SimTransport>,
    a: I,
    b: I,
}

fn run<I: PointIndex<SimTransport>>(cfg: &IndexConfig) -> Run<I> {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, &[]).unwrap();
    let sim = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(3, net) };
    let s = Sim::with_services(sim, services).unwrap();
    let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let a = s.block_on(async { I::create(&dead, cfg, 0).await.unwrap() });
    let b = s.block_on(async { I::open(&live, cfg, 1).await.unwrap() });
    Run { s, dead, live, a, b }
}

impl<I: PointIndex<SimTransport>> Run<I> {
    /// `dead` puts `key` (value: its last byte, eight times) and the run stops `run_ns` into
    /// it, or runs to the end (`None`); how long it took.
    fn put(&self, key: &[u8], run_ns: Option<u64>) -> u64 {
        let start = self.s.now_ns();
        let op = async { self.a.insert(&self.dead, key, &value(key)).await.unwrap() };
        match run_ns {
            Some(ns) => drop(self.s.run_until([Box::pin(op) as Task], start + ns)),
            None => self.s.block_on(op),
        }
        self.s.now_ns() - start
    }

    /// `dead` deletes `key`, stopped as [`Run::put`] is.
    fn delete(&self, key: &[u8], run_ns: Option<u64>) -> u64 {
        let start = self.s.now_ns();
        let op = async {
            assert!(self.a.delete(&self.dead, key).await.unwrap());
        };
        match run_ns {
            Some(ns) => drop(self.s.run_until([Box::pin(op) as Task], start + ns)),
            None => self.s.block_on(op),
        }
        self.s.now_ns() - start
    }
}

fn value(key: &[u8]) -> Vec<u8> {
    vec![*key.last().unwrap(); 8]
}

/// The survivor's reads against model `m`: every key, and scans of 1 to 8 from every key and
/// from below them all.
async fn agree<I: PointIndex<SimTransport> + RangeIndex<SimTransport>>(
    b: &I,
    c: &Client<SimTransport>,
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    at: &str,
) {
    for k in (0..8).map(crowd).chain(AROUND.map(|k| k.to_vec())) {
        assert_eq!(b.search(c, &k).await.unwrap(), m.get(&k).cloned(), "{at}: {k:?}");
    }
    let mut buf = ScanBuf::new();
    let starts: Vec<Vec<u8>> = std::iter::once(b"a".to_vec()).chain(m.keys().cloned()).collect();
    for from in starts {
        for count in 1..=8 {
            b.scan_into(c, &from, count, &mut buf).await.unwrap();
            let want: Vec<_> =
                m.range(from.clone()..).take(count).map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(buf.to_pairs(), want, "{at}: scan of {count} from {from:?}");
        }
    }
}

/// Kills, at every point, the insert of `crowd(limit)` into a tree already holding
/// `crowd(0..limit)` and the keys around (at the leaf's plain limit: the insert that forms the
/// group; past it, one that adds a key to the group, makes it a directory, appends to a page or
/// splits one), then the survivor reads, deletes the prefix's keys one by one down to none
/// (checking every `check_every` deletes), and inserts one again.
fn kill_the_forming_insert<I: PointIndex<SimTransport> + RangeIndex<SimTransport>>(
    cfg: &IndexConfig,
    limit: usize,
    check_every: usize,
) {
    let fill = |t: &Run<I>| {
        for k in AROUND.iter().map(|k| k.to_vec()).chain((0..limit).map(crowd)) {
            t.put(&k, None);
        }
    };
    let t = run::<I>(cfg);
    fill(&t);
    let took = t.put(&crowd(limit), None);
    for p in 0..=POINTS {
        let t = run::<I>(cfg);
        fill(&t);
        t.put(&crowd(limit), Some(took * p / POINTS + 1));
        let (s, live, b) = (&t.s, &t.live, &t.b);
        let task = async {
            let mut m: BTreeMap<Vec<u8>, Vec<u8>> = AROUND
                .iter()
                .map(|k| k.to_vec())
                .chain((0..limit).map(crowd))
                .map(|k| (k.clone(), value(&k)))
                .collect();
            // The killed insert took effect or it did not: once what it posted has landed (a
            // lease is far longer than any verb's flight), the first search says which.
            live.pause(live.transport().lease_ns()).await;
            if b.search(live, &crowd(limit)).await.unwrap().is_some() {
                m.insert(crowd(limit), value(&crowd(limit)));
            }
            agree(b, live, &m, &format!("point {p}")).await;
            for i in 0..=limit {
                let was = m.remove(&crowd(i)).is_some();
                assert_eq!(b.delete(live, &crowd(i)).await.unwrap(), was, "point {p}: {i}");
                if i % check_every == 0 || i == limit {
                    agree(b, live, &m, &format!("point {p}, {i} deleted")).await;
                }
            }
            b.insert(live, &crowd(7), &value(&crowd(7))).await.unwrap();
            m.insert(crowd(7), value(&crowd(7)));
            agree(b, live, &m, &format!("point {p}, again")).await;
        };
        let out = s.run_until([Box::pin(task) as Task], s.now_ns() + 400_000_000);
        assert!(out.all_finished(), "point {p} of {POINTS}: the survivor is stuck: {out:?}");
    }
}

/// Kills, at every point, the delete of `crowd(0)` from a group formed of `limit + 1` keys,
/// `crowd(keep + 1..=limit)` deleted first (`keep` 0: the group's last key); the survivor then
/// reads and inserts keys of the prefix again.
fn kill_the_last_delete<I: PointIndex<SimTransport> + RangeIndex<SimTransport>>(
    cfg: &IndexConfig,
    limit: usize,
    keep: usize,
) {
    let fill = |t: &Run<I>| {
        for k in AROUND.iter().map(|k| k.to_vec()).chain((0..=limit).map(crowd)) {
            t.put(&k, None);
        }
        for i in keep + 1..=limit {
            t.delete(&crowd(i), None);
        }
    };
    let t = run::<I>(cfg);
    fill(&t);
    let took = t.delete(&crowd(0), None);
    for p in 0..=POINTS {
        let t = run::<I>(cfg);
        fill(&t);
        t.delete(&crowd(0), Some(took * p / POINTS + 1));
        let (s, live, b) = (&t.s, &t.live, &t.b);
        let task = async {
            let mut m: BTreeMap<Vec<u8>, Vec<u8>> = AROUND
                .iter()
                .map(|k| k.to_vec())
                .chain((1..=keep).map(crowd))
                .map(|k| (k.clone(), value(&k)))
                .collect();
            live.pause(live.transport().lease_ns()).await;
            if b.search(live, &crowd(0)).await.unwrap().is_some() {
                m.insert(crowd(0), value(&crowd(0)));
            }
            agree(b, live, &m, &format!("point {p}")).await;
            for i in [3, 0, 5] {
                b.insert(live, &crowd(i), &value(&crowd(i))).await.unwrap();
                m.insert(crowd(i), value(&crowd(i)));
            }
            agree(b, live, &m, &format!("point {p}, again")).await;
        };
        let out = s.run_until([Box::pin(task) as Task], s.now_ns() + 400_000_000);
        assert!(out.all_finished(), "point {p} of {POINTS}: the survivor is stuck: {out:?}");
    }
}

fn long(extra: &[(&str, &str)]) -> IndexConfig {
    IndexConfig {
        max_key: 12,
        extra: extra.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        cache_bytes: 1 << 20,
        ..IndexConfig::default()
    }
}

#[test]
fn chime_forming_insert_killed_at_every_point() {
    kill_the_forming_insert::<Chime>(&long(&[]), 4, 1);
}

#[test]
fn chime_last_delete_killed_at_every_point() {
    kill_the_last_delete::<Chime>(&long(&[]), 4, 0);
}

#[test]
fn sherman_forming_insert_killed_at_every_point() {
    let tiny = [("span", "8"), ("h", "4"), ("internal_span", "4")];
    kill_the_forming_insert::<Sherman>(&long(&tiny), 4, 1);
}

// Past a page's records (32 at 12-byte keys) a group becomes a directory of pages
// ([`dmindex_chime::collision::page`]): 33 keys make three pages of 11, the last page takes
// `crowd(22..)`, and `crowd(54)` finds it full.

#[test]
fn chime_insert_making_a_directory_killed_at_every_point() {
    kill_the_forming_insert::<Chime>(&long(&[]), 32, 8);
}

#[test]
fn chime_append_to_a_page_killed_at_every_point() {
    kill_the_forming_insert::<Chime>(&long(&[]), 40, 8);
}

#[test]
fn chime_page_split_killed_at_every_point() {
    kill_the_forming_insert::<Chime>(&long(&[]), 54, 11);
}

#[test]
fn sherman_page_split_killed_at_every_point() {
    let tiny = [("span", "8"), ("h", "4"), ("internal_span", "4")];
    kill_the_forming_insert::<Sherman>(&long(&tiny), 54, 11);
}

#[test]
fn chime_delete_copying_a_page_killed_at_every_point() {
    kill_the_last_delete::<Chime>(&long(&[]), 40, 40);
}

#[test]
fn chime_delete_of_a_directorys_last_key_killed_at_every_point() {
    kill_the_last_delete::<Chime>(&long(&[]), 40, 0);
}

// At 255-byte keys a page holds 6 records and a directory node 14 pages: `crowd(45)` splits
// the root of a one-level directory, and 51 keys make two levels.

#[test]
fn chime_root_split_of_a_directory_killed_at_every_point() {
    kill_the_forming_insert::<Chime>(&IndexConfig { max_key: 255, ..long(&[]) }, 45, 9);
}

#[test]
fn chime_delete_copying_a_two_level_path_killed_at_every_point() {
    kill_the_last_delete::<Chime>(&IndexConfig { max_key: 255, ..long(&[]) }, 50, 50);
}
