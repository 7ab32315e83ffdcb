//! In virtual time: a writer that hops a key across the end of a leaf dies after the first of
//! its two WRITEs landed (the leaf still locked in its name, a moved key in two slots, hop
//! bitmaps that do not match the keys). A client on another compute node that only reads must
//! get through — its reads see a hop in flight, and after a lease it takes the lock, which
//! judges the writer dead, fences it and settles the leaf — and then writes and reads as usual.
//! Without the reader's lock, or without settling, the reader never finishes.

use std::collections::BTreeMap;

use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex, ScanBuf};
use dmindex_sim::{NetParams, Sim, SimConfig, Task};

use crate::leaf::{home, Hop, LeafBuf};
use crate::view::LeafView;
use crate::Chime;

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

/// Whether inserting `k` into `leaf` hops a key across the leaf's end: the write wraps, and its
/// first WRITE alone leaves some key in two slots. `None` if `k` does not go in without a split.
fn crosses_the_end(leaf: &LeafBuf, k: u64) -> Option<bool> {
    let l = leaf.l;
    let mut new = leaf.clone();
    let Hop::Done(modified) = new.hop_insert(k, key(k)) else { return None };
    let hk = home(k, l.span);
    let first = modified.iter().map(|&i| l.dist(hk, i)).min().expect("changed");
    let last = modified.iter().map(|&i| l.dist(hk, i)).max().expect("changed");
    let ranges = l.write_ranges((hk + first) % l.span, last - first + 1);
    let Some(&(d0, d1)) = ranges.first().filter(|_| ranges.len() == 2) else { return Some(false) };
    let mut torn = leaf.clone();
    torn.bytes[d0..d1].copy_from_slice(&new.bytes[d0..d1]);
    let keys: Vec<u64> = (0..l.span).map(|i| torn.key(i)).filter(|&x| x != 0).collect();
    let mut distinct = keys.clone();
    distinct.sort_unstable();
    distinct.dedup();
    Some(distinct.len() < keys.len())
}

#[test]
fn a_reader_gets_past_a_hop_cut_short_at_the_leaf_end() {
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, &[]).unwrap();
    let cfg = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(7, net) };
    let s = Sim::with_services(cfg, services).unwrap();
    let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let o = [("span", "16"), ("h", "4"), ("internal_span", "4")];
    let icfg = IndexConfig {
        extra: o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        ..IndexConfig::default()
    };
    let a = s.block_on(async { Chime::create(&dead, &icfg, 0).await.unwrap() });
    let b = s.block_on(async { Chime::open(&live, &icfg, 1).await.unwrap() });
    let t = &a.tree;
    let span = t.leaf.span;
    let (height, leaf) = s.block_on(async { t.blink.root(&dead).await.unwrap() });
    assert_eq!(height, 1, "one leaf");
    // Keys go in until one would hop a key across the leaf's end.
    let mut m = BTreeMap::new();
    let mut fatal = None;
    for k in 1..2000u64 {
        let buf = s.block_on(async { t.read_slots(&dead, leaf, 0, span).await.unwrap() });
        match crosses_the_end(&buf, k) {
            Some(true) => {
                fatal = Some(k);
                break;
            }
            Some(false) => {
                s.block_on(async { a.insert(&dead, &key(k), &key(k)).await.unwrap() });
                m.insert(k, k);
            }
            None => {}
        }
    }
    let k = fatal.expect("some insert hops a key across the leaf's end");
    // The writer locks, hops, posts the run's first WRITE, and dies before the second.
    s.block_on(async {
        let locked = t.lock_hopscotch_leaf(&dead, leaf).await.unwrap();
        let mut buf = t.read_slots(&dead, leaf, 0, span).await.unwrap();
        let Hop::Done(modified) = buf.hop_insert(k, key(k)) else { panic!("checked") };
        let hk = home(k, span);
        let first = modified.iter().map(|&i| t.leaf.dist(hk, i)).min().unwrap();
        let last = modified.iter().map(|&i| t.leaf.dist(hk, i)).max().unwrap();
        let lo = (hk + first) % span;
        let mut out = vec![0u8; t.leaf.lock_offset() + 16];
        let plan = t.write_plan(&*buf, lo, last - first + 1, locked.lw, &mut out);
        assert_eq!(plan.len(), 2, "two WRITEs, the unlock in the second");
        let (at, r) = plan[0].clone();
        dead.write(leaf.add(at as u64), &out[r]).await.unwrap();
        std::mem::forget(locked);
    });
    let reader = async {
        // Only reads first: a search of every key and of keys never written, and scans.
        let mut buf = ScanBuf::new();
        for x in 1..=k + 5 {
            let got = b.search(&live, &key(x)).await.unwrap();
            if x != k {
                assert_eq!(got, m.get(&x).map(|v| key(*v).to_vec()), "key {x}");
            }
        }
        b.scan_into(&live, &key(1), 100, &mut buf).await.unwrap();
        let mut want = m.clone();
        if b.search(&live, &key(k)).await.unwrap().is_some() {
            want.insert(k, k);
        }
        let want_pairs: Vec<(Vec<u8>, Vec<u8>)> =
            want.iter().map(|(x, v)| (key(*x).to_vec(), key(*v).to_vec())).collect();
        assert_eq!(buf.to_pairs(), want_pairs, "a whole-leaf scan");
        // Then writes: every key deleted, each once.
        for &x in want.keys() {
            assert!(b.delete(&live, &key(x)).await.unwrap(), "delete {x}");
            assert_eq!(b.search(&live, &key(x)).await.unwrap(), None, "{x} deleted");
        }
        b.scan_into(&live, &key(1), 100, &mut buf).await.unwrap();
        assert_eq!(buf.to_pairs(), vec![], "nothing left");
    };
    gets_through_and_fences(&s, Box::pin(reader), &dead, leaf);
}

/// Runs `reader` (a client that meets what `dead` left at `leaf`) for up to 400 virtual ms: it
/// must finish, and `dead`, judged and fenced on the way, must find its late WRITE refused.
pub(crate) fn gets_through_and_fences(
    s: &Sim,
    reader: Task<'_>,
    dead: &dmindex_fabric::Client<dmindex_sim::SimTransport>,
    leaf: dmindex_fabric::GlobalAddr,
) {
    let out = s.run_until([reader], s.now_ns() + 400_000_000);
    assert!(out.all_finished(), "the reader is stuck: {out:?}");
    let late = s.block_on(async { dead.write(leaf, &[0; 8]).await });
    assert!(late.is_err(), "the dead writer was fenced");
}
