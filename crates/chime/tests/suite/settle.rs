//! A hopscotch write cut short: for inserts into random leaves (every one that hops or wraps
//! included), each prefix of the write's WRITEs, in the order a writer posts them, laid over the
//! leaf as it was; settling it must keep every key the leaf held, each once with its value, in
//! its neighbourhood, with every hop bitmap matching the keys, and settle nothing on a second
//! pass. The other order (the run from its start first) is shown to lose keys.

use std::collections::BTreeMap;

use dmindex_chime::layout::LeafLayout;
use dmindex_chime::leaf::{home, Hop, LeafBuf};
use dmindex_chime::view::LeafView;

/// xorshift64*: a fixed stream of keys.
struct Keys(u64);

impl Keys {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1
    }
}

/// The leaf's keys and value slots.
fn pairs(b: &LeafBuf) -> Vec<(u64, [u8; 8])> {
    (0..b.l.span).map(|i| (b.key(i), b.value(i))).filter(|p| p.0 != 0).collect()
}

/// `old` with the decoded ranges `ranges` of `new` laid over it.
fn overlay(old: &LeafBuf, new: &LeafBuf, ranges: &[(usize, usize)]) -> LeafBuf {
    let mut out = old.clone();
    for &(d0, d1) in ranges {
        out.bytes[d0..d1].copy_from_slice(&new.bytes[d0..d1]);
    }
    out
}

/// Settles `torn` (from a write of `old`) and checks what it must hold; whether `torn` had
/// lost a key of `old`.
fn settles(l: LeafLayout, old: &LeafBuf, torn: &LeafBuf, case: &str) -> bool {
    let before: BTreeMap<u64, [u8; 8]> = pairs(old).into_iter().collect();
    let seen: BTreeMap<u64, [u8; 8]> = pairs(torn).into_iter().collect();
    let lost = before.keys().any(|k| !seen.contains_key(k));
    let mut s = torn.clone();
    s.settle();
    let after = pairs(&s);
    let once: BTreeMap<u64, [u8; 8]> = after.iter().copied().collect();
    assert_eq!(once.len(), after.len(), "{case}: a key twice after settling");
    assert_eq!(once, seen, "{case}: settling kept exactly the keys the torn leaf showed");
    for (&k, &v) in &once {
        let at = s.find(home(k, l.span), k).unwrap_or_else(|| panic!("{case}: {k} not near home"));
        assert_eq!(s.value(at), v, "{case}");
    }
    for h in 0..l.span {
        assert_eq!(s.bitmap(h), s.status(h), "{case}: home {h}'s hop bitmap");
    }
    assert!(s.clone().settle().is_empty(), "{case}: a second settling changed something");
    lost
}

#[test]
fn every_prefix_of_a_hop_write_settles_with_no_key_lost() {
    let (mut wrapped, mut lost_other_way) = (0, 0);
    for (span, h) in [(8, 2), (8, 4), (16, 4), (64, 8)] {
        let l = LeafLayout::new(span, h).unwrap();
        let mut keys = Keys(0x9e37_79b9_7f4a_7c15 ^ span as u64);
        let mut leaf = LeafBuf::empty(l);
        for step in 0..4000 {
            let old = leaf.clone();
            let k = keys.next();
            let mut new = leaf.clone();
            let Hop::Done(modified) = new.hop_insert(k, k.to_le_bytes()) else {
                leaf = LeafBuf::empty(l);
                continue;
            };
            // What the writer WRITEs: the run from the home over every slot changed.
            let hk = home(k, span);
            let first = modified.iter().map(|&i| l.dist(hk, i)).min().unwrap();
            let last = modified.iter().map(|&i| l.dist(hk, i)).max().unwrap();
            let ranges = l.write_ranges((hk + first) % span, last - first + 1);
            for p in 0..=ranges.len() {
                let case = format!("{span}/{h} step {step} prefix {p} of {ranges:?}");
                let lost = settles(l, &old, &overlay(&old, &new, &ranges[..p]), &case);
                assert!(!lost, "{case}: the torn leaf lost a key");
            }
            if ranges.len() == 2 {
                wrapped += 1;
                let other = overlay(&old, &new, &ranges[1..]);
                let case = format!("{span}/{h} step {step}: the run's start alone");
                lost_other_way += settles(l, &old, &other, &case) as u64;
            }
            let mut whole = new.clone();
            assert!(whole.settle().is_empty(), "a whole write leaves nothing to settle");
            leaf = new;
        }
    }
    assert!(wrapped > 100, "only {wrapped} writes wrapped");
    assert!(lost_other_way > 0, "no wrapped write moved a key across the wrap");
}
