//! Every prefix of a sorted leaf's rewrite, in the order it is posted, settles to every key
//! once: inserts, deletes and splits at every position, and a repair's own rewrite cut short.
//! The orders the module rejects (and the single WRITE cut at a packet) lose keys.

use dmindex_fabric::GlobalAddr;
use dmindex_prim::cacheline;

use super::{fits_first_piece, pieces, settle, write_order, Moves, ONE_PACKET};
use crate::layout::{LeafKind, LeafLayout};
use crate::leaf::LeafBuf;
use crate::view::LeafView;

fn sherman(span: usize) -> LeafLayout {
    LeafLayout::with_kind(span, 8, LeafKind::SHERMAN).unwrap()
}

fn val(k: u64) -> [u8; 8] {
    (k * 3).to_le_bytes()
}

/// A leaf holding `keys` (ascending) between fences `[low, high]`.
fn leaf(l: LeafLayout, keys: &[u64], (low, high): (u64, u64)) -> LeafBuf {
    let mut b = LeafBuf::empty(l);
    b.set_fences(low, high);
    for (i, &k) in keys.iter().enumerate() {
        b.set_entry(i, k, val(k));
    }
    b
}

/// A leaf's whole image as the tree encodes it: versioned part, pad, lock word, upper bound.
fn image(b: &LeafBuf) -> Vec<u8> {
    let l = b.l;
    let mut out = Vec::new();
    cacheline::encode(&l, &b.bytes, 0, l.decoded(), &mut out);
    out.resize(l.lock_offset(), 0);
    out.extend_from_slice(&[0xAB; 8]);
    out.extend_from_slice(&b.fences().unwrap().1.to_be_bytes());
    out
}

/// `old` with the `ranges` of `new` landed.
fn land(old: &[u8], new: &[u8], ranges: &[(usize, usize)]) -> Vec<u8> {
    let mut out = old.to_vec();
    for &(p0, p1) in ranges {
        out[p0..p1].copy_from_slice(&new[p0..p1]);
    }
    out
}

/// What a repairer makes of image `raw`: the settled leaf, its keys (checked packed, ascending,
/// each once, each with its own value) and its sibling.
fn settled(l: LeafLayout, raw: &[u8]) -> (LeafBuf, Vec<u64>, GlobalAddr) {
    let mut b = LeafBuf::new(l);
    b.absorb_whole_unchecked(&raw[..l.physical()]);
    let (low, high) = b.fences().unwrap();
    settle(&mut b, low, high);
    let n = (0..l.span).take_while(|&i| b.key(i) != 0).count();
    let keys: Vec<u64> = (0..n).map(|i| b.key(i)).collect();
    assert!((n..l.span).all(|i| b.key(i) == 0), "packed from slot 0: {keys:?}");
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "ascending, each once: {keys:?}");
    assert!((0..n).all(|i| b.value(i) == val(b.key(i))), "values travel with their keys");
    let sib = b.meta().unwrap().0;
    (b, keys, sib)
}

fn union(a: &[u64], k: u64) -> Vec<u64> {
    let mut v = a.to_vec();
    v.push(k);
    v.sort_unstable();
    v
}

#[test]
fn shermans_leaf_pieces_are_pinned() {
    let l = sherman(64);
    assert_eq!((l.physical(), l.lock_offset(), l.bound_offset() + 8), (1131, 1136, 1152));
    let p = pieces(&l).unwrap();
    assert_eq!(&*p, &[(0, 1010), (1010, 1131)]);
    assert_eq!(
        write_order(&p, 1131, 1152, Moves::Right).as_slice(),
        [(1010, 1131), (0, 1010), (1131, 1152)]
    );
    assert_eq!(write_order(&p, 1131, 1152, Moves::Left).as_slice(), [(0, 1010), (1010, 1152)]);
    // The first piece holds the header and 57 entries: a split's left half (33 at most with
    // distinct keys) fits.
    assert!(fits_first_piece(&l, &p, 57) && !fits_first_piece(&l, &p, 58));
    // A leaf whose whole image fits a packet is one WRITE.
    let small = sherman(32);
    assert!(small.bound_offset() + 8 <= ONE_PACKET);
    assert!(pieces(&small).unwrap().is_empty());
    assert_eq!(write_order(&[], small.physical(), 640, Moves::Right).as_slice(), [(0, 640)]);
    // Bigger leaves: pieces cover the versioned part back to back, each within a packet.
    for span in [64, 104, 200, 400] {
        let l = sherman(span);
        let p = pieces(&l).unwrap();
        assert_eq!(p.first().unwrap().0, 0);
        assert_eq!(p.last().unwrap().1, l.physical());
        assert!(p.windows(2).all(|w| w[0].1 == w[1].0), "span {span}: {p:?}");
        assert!(p.iter().all(|&(a, b)| b - a <= ONE_PACKET), "span {span}: {p:?}");
    }
}

/// Every prefix of a rewrite posted in `order`, from `old` to `new`: the keys settled.
fn prefixes(l: LeafLayout, old: &LeafBuf, new: &LeafBuf, moves: Moves) -> Vec<Vec<u64>> {
    let p = pieces(&l).unwrap();
    let (a, b) = (image(old), image(new));
    let order = write_order(&p, l.physical(), a.len(), moves);
    (0..=order.len()).map(|j| settled(l, &land(&a, &b, &order[..j])).1).collect()
}

#[test]
fn every_prefix_of_an_insert_or_a_delete_keeps_every_key() {
    for span in [64, 104] {
        let l = sherman(span);
        for n in [span / 2, span - 1] {
            let old_keys: Vec<u64> = (1..=n as u64).map(|i| 10 * i).collect();
            let old = leaf(l, &old_keys, (1, u64::MAX));
            for p in 0..=n {
                let k = 10 * p as u64 + 5;
                let mut new = old.clone();
                new.sorted_insert(p, k, val(k));
                new.bump_node_version();
                let got = prefixes(l, &old, &new, Moves::Right);
                for keys in &got {
                    assert!(*keys == old_keys || *keys == union(&old_keys, k), "insert at {p}");
                }
                assert_eq!(got.last().unwrap(), &union(&old_keys, k));
            }
            for p in 0..n {
                let k = old_keys[p];
                let mut new = old.clone();
                new.sorted_remove(p);
                new.bump_node_version();
                let without: Vec<u64> = old_keys.iter().copied().filter(|&x| x != k).collect();
                let got = prefixes(l, &old, &new, Moves::Left);
                for keys in &got {
                    assert!(*keys == old_keys || *keys == without, "delete at {p}: {keys:?}");
                }
                assert_eq!(got.last().unwrap(), &without);
            }
        }
    }
}

#[test]
fn the_other_orders_lose_keys() {
    let l = sherman(64);
    let old_keys: Vec<u64> = (1..=63).map(|i| 10 * i).collect();
    let old = leaf(l, &old_keys, (1, u64::MAX));
    let mut new = old.clone();
    new.sorted_insert(0, 5, val(5));
    new.bump_node_version();
    let lost = |keys: &Vec<u64>| !old_keys.iter().all(|k| keys.contains(k));
    // An insert posted left to right loses the entry across the cut.
    assert!(prefixes(l, &old, &new, Moves::Left).iter().any(lost));
    // So does one WRITE of the whole image with only its first packet landed.
    let (a, b) = (image(&old), image(&new));
    assert!(lost(&settled(l, &land(&a, &b, &[(0, ONE_PACKET)])).1));
}

#[test]
fn every_prefix_of_a_split_keeps_every_key_reachable() {
    let l = sherman(64);
    let right_addr = GlobalAddr::new(1, 0x40_0000);
    let old_keys: Vec<u64> = (1..=64).map(|i| 10 * i).collect();
    let old = leaf(l, &old_keys, (1, u64::MAX));
    for at in 0..=64 {
        let k = 10 * at as u64 + 5;
        let all = union(&old_keys, k);
        let cut = all.len() / 2;
        assert!(fits_first_piece(&l, &pieces(&l).unwrap(), cut));
        let left_max = all[cut - 1];
        let mut left = leaf(l, &all[..cut], (1, left_max));
        left.set_sibling(right_addr);
        left.bump_node_version();
        let (a, b) = (image(&old), image(&left));
        let p = pieces(&l).unwrap();
        let order = write_order(&p, l.physical(), a.len(), Moves::Left);
        for j in 0..=order.len() {
            let (_, mut keys, sib) = settled(l, &land(&a, &b, &order[..j]));
            if sib == right_addr {
                keys.extend_from_slice(&all[cut..]);
            }
            assert!(keys == old_keys || keys == all, "split, new key at {at}, prefix {j}");
        }
    }
}

/// A left half too long for the first piece (keys sharing prefixes push the cut up) splits
/// without the new key: no entry of it moves, so again every prefix keeps every key.
#[test]
fn every_prefix_of_a_long_left_half_split_without_the_new_key_keeps_every_key() {
    let l = sherman(64);
    let p = pieces(&l).unwrap();
    let right_addr = GlobalAddr::new(1, 0x40_0000);
    let old_keys: Vec<u64> = (1..=64).map(|i| 10 * i).collect();
    let old = leaf(l, &old_keys, (1, u64::MAX));
    for cut in [58, 60, 63] {
        assert!(!fits_first_piece(&l, &p, cut));
        let left_max = old_keys[cut - 1];
        let mut left = leaf(l, &old_keys[..cut], (1, left_max));
        left.set_sibling(right_addr);
        left.bump_node_version();
        let (a, b) = (image(&old), image(&left));
        let order = write_order(&p, l.physical(), a.len(), Moves::Left);
        for j in 0..=order.len() {
            let (_, mut keys, sib) = settled(l, &land(&a, &b, &order[..j]));
            if sib == right_addr {
                keys.extend_from_slice(&old_keys[cut..]);
            }
            assert_eq!(keys, old_keys, "cut {cut}, prefix {j}");
        }
    }
}

#[test]
fn a_repair_cut_short_is_settled_the_same_way_again() {
    let l = sherman(64);
    let p = pieces(&l).unwrap();
    let old_keys: Vec<u64> = (1..=63).map(|i| 10 * i).collect();
    let old = leaf(l, &old_keys, (1, u64::MAX));
    for at in [0, 20, 57, 58, 63] {
        let k = 10 * at as u64 + 5;
        let mut new = old.clone();
        new.sorted_insert(at, k, val(k));
        new.bump_node_version();
        let (a, b) = (image(&old), image(&new));
        let order = write_order(&p, l.physical(), a.len(), Moves::Right);
        // The dead writer's first WRITE landed; a repairer settles and rewrites left to right.
        let torn = land(&a, &b, &order[..1]);
        let (mut fixed, keys, _) = settled(l, &torn);
        fixed.set_node_version(9);
        let redo = image(&fixed);
        for j in 0..=p.len() {
            let (_, again, _) = settled(l, &land(&torn, &redo, &p[..j]));
            assert_eq!(again, keys, "insert at {at}, repair prefix {j}");
        }
    }
}

/// In virtual time: a Sherman writer that shifts every entry of a leaf dies after the first of
/// its WRITEs (the leaf's last piece) landed: the leaf is locked in its name and its objects
/// carry two node versions. A client on another compute node that only reads must get through
/// (after a lease of torn READs it takes the lock, which fences the writer and settles the
/// leaf), find every key, and then delete them all.
#[test]
fn a_reader_gets_past_an_insert_cut_short() {
    use std::collections::BTreeMap;

    use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex, ScanBuf};
    use dmindex_sim::{NetParams, Sim, SimConfig};

    use crate::Sherman;

    let key = |k: u64| k.to_be_bytes();
    let net = NetParams::preset("stress").unwrap();
    let services = mn_services(net.mn_cores, &[]).unwrap();
    let cfg = SimConfig { node_size: 64 << 20, chunk_size: 1 << 20, ..SimConfig::new(7, net) };
    let s = Sim::with_services(cfg, services).unwrap();
    let (dead, live) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
    let icfg = IndexConfig::default();
    let a = s.block_on(async { Sherman::create(&dead, &icfg, 0).await.unwrap() });
    let b = s.block_on(async { Sherman::open(&live, &icfg, 1).await.unwrap() });
    let t = &a.tree;
    assert!(!t.sorted_pieces.is_empty(), "Sherman's default leaf is over a packet");
    let m: BTreeMap<u64, u64> = (1..=40).map(|i| (10 * i, 10 * i)).collect();
    for &k in m.keys() {
        s.block_on(async { a.insert(&dead, &key(k), &key(k)).await.unwrap() });
    }
    let (height, leaf) = s.block_on(async { t.blink.root(&dead).await.unwrap() });
    assert_eq!(height, 1, "one leaf");
    // The writer locks, shifts every entry right, posts the first WRITE only, and dies.
    s.block_on(async {
        let locked = t.lock_leaf(&dead, leaf).await.unwrap();
        let mut buf = t.read_slots(&dead, leaf, 0, t.leaf.span).await.unwrap();
        buf.sorted_insert(0, 5, key(5));
        buf.bump_node_version();
        let high = buf.fences().unwrap().1;
        let mut img = Vec::new();
        t.leaf_image_into(&buf, locked.lw, high, &mut img);
        let order = write_order(&t.sorted_pieces, t.leaf.physical(), img.len(), Moves::Right);
        let (p0, p1) = order[0];
        dead.write(leaf.add(p0 as u64), &img[p0..p1]).await.unwrap();
        std::mem::forget(locked);
    });
    let reader = async {
        let mut buf = ScanBuf::new();
        for x in (5..=420).step_by(5) {
            let got = b.search(&live, &key(x)).await.unwrap();
            if x != 5 {
                assert_eq!(got, m.get(&x).map(|v| key(*v).to_vec()), "key {x}");
            }
        }
        let mut want = m.clone();
        if b.search(&live, &key(5)).await.unwrap().is_some() {
            want.insert(5, 5);
        }
        b.scan_into(&live, &key(1), 100, &mut buf).await.unwrap();
        let want_pairs: Vec<(Vec<u8>, Vec<u8>)> =
            want.iter().map(|(x, v)| (key(*x).to_vec(), key(*v).to_vec())).collect();
        assert_eq!(buf.to_pairs(), want_pairs, "a scan");
        for &x in want.keys() {
            assert!(b.delete(&live, &key(x)).await.unwrap(), "delete {x}");
        }
        b.scan_into(&live, &key(1), 100, &mut buf).await.unwrap();
        assert_eq!(buf.to_pairs(), vec![], "nothing left");
    };
    crate::tree::cut_short::gets_through_and_fences(&s, Box::pin(reader), &dead, leaf);
}

/// The (key, value) pairs a repairer makes of image `raw`, in slot order (packed from slot 0).
fn settled_pairs(l: LeafLayout, raw: &[u8]) -> Vec<(u64, [u8; 8])> {
    let mut b = LeafBuf::new(l);
    b.absorb_whole_unchecked(&raw[..l.physical()]);
    let (low, high) = b.fences().unwrap();
    settle(&mut b, low, high);
    (0..l.span).map(|i| (b.key(i), b.value(i))).take_while(|&(k, _)| k != 0).collect()
}

/// Long keys: entries sharing an 8-byte key field, told apart by the blocks their values name,
/// in the order the leaf keeps them. Every prefix of an insert or a delete at each position of
/// such groups settles to the old entries or the new ones, in their order.
#[test]
fn keys_sharing_a_prefix_keep_their_entries_and_order_through_every_prefix() {
    let l = sherman(64);
    let p = pieces(&l).unwrap();
    let old: Vec<(u64, [u8; 8])> = (1..=20u64)
        .flat_map(|x| (0..3u64).map(move |j| (10 * x, (100 * x + j).to_le_bytes())))
        .collect();
    let mut a = LeafBuf::empty(l);
    a.set_fences(1, u64::MAX);
    for (i, &(k, v)) in old.iter().enumerate() {
        a.set_entry(i, k, v);
    }
    let img = image(&a);
    let mut cases = Vec::new();
    for at in 0..=old.len() {
        let k = old.get(at).map_or(200, |e| e.0);
        let mut want = old.clone();
        want.insert(at, (k, 7777u64.to_le_bytes()));
        let mut b = a.clone();
        b.sorted_insert(at, k, 7777u64.to_le_bytes());
        cases.push((b, want, Moves::Right));
    }
    for at in 0..old.len() {
        let mut want = old.clone();
        want.remove(at);
        let mut b = a.clone();
        b.sorted_remove(at);
        cases.push((b, want, Moves::Left));
    }
    for (mut b, want, moves) in cases {
        b.bump_node_version();
        let new = image(&b);
        let order = write_order(&p, l.physical(), img.len(), moves);
        for j in 0..=order.len() {
            let got = settled_pairs(l, &land(&img, &new, &order[..j]));
            assert!(got == old || got == want, "{moves:?}, prefix {j}: {got:?}");
        }
        assert_eq!(settled_pairs(l, &new), want);
    }
}
