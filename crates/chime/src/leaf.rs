//! A leaf as a client sees it: the parts it READ, decoded, plus the hopscotch algorithm.
//!
//! # Hopping
//!
//! To insert key k with home h: find the first empty slot e at or after h. While e is H or more
//! slots from h, look at the H-1 slots before e, farthest first, for a key whose own
//! neighbourhood also contains e; move it to e (updating its home's hop bitmap) and continue with
//! its old slot as the new empty e. Every home whose bitmap changes lies strictly between h and the
//! first e (a moved key's home is within H-1 slots before e, and e is at least H past h), so the
//! range [h, first e] READ under the lock holds everything the hop touches.
//!
//! Choosing the farthest candidate means a slot's new key never has the same home as its old one
//! (or the slot was empty) — the property that lets readers detect hops by rebuilding a home's
//! bitmap from the keys they read (the third level of the optimistic synchronization).

use dmindex_prim::cacheline::{self, Torn};
use smallvec::SmallVec;

use dmindex_prim::version;

use crate::layout::{self, LeafLayout, Ranges, KEY};
use crate::read_plan::ReadPlan;
pub use crate::read_plan::SLACK;
pub use crate::view::{home, Modified};
use crate::view::{hop_of, wrap, LeafView};

/// The decoded leaf and which of its parts were read.
pub struct LeafBuf {
    pub l: LeafLayout,
    pub bytes: Vec<u8>,
    loaded: Vec<bool>,
    replica_loaded: Vec<bool>,
    /// What the READs absorbed so far say about node-level versions: the first object's NV,
    /// and whether any other object disagreed (checked as objects arrive, so validating costs
    /// nothing per slot).
    nv: Option<u8>,
    nv_mixed: bool,
    /// Scratch for the physical bytes of READs (the whole leaf's worth), reused with the buffer.
    pub(crate) raw: Vec<u8>,
}

/// Why a READ of a leaf cannot be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// A cache line disagreed with its object (entry write or node write in flight).
    Torn,
    /// Objects carry different node-level versions (node write in flight).
    NodeVersion,
    /// No metadata replica was read.
    NoReplica,
}

impl From<Torn> for Invalid {
    fn from(_: Torn) -> Invalid {
        Invalid::Torn
    }
}

/// The decoded offset of every object of a leaf of layout `l` (each starts with its version
/// byte): the metadata replicas, then the entries.
pub(crate) fn object_offsets(l: LeafLayout) -> impl Iterator<Item = usize> {
    (0..l.groups()).map(move |g| l.replica(g)).chain(l.entry_offsets())
}

/// What a hop attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hop {
    /// Inserted; these slots changed.
    Done(Modified),
    /// No empty slot among the loaded ones from the key's home on.
    NoEmpty,
    /// An empty slot, but no sequence of hops brings it into the neighbourhood.
    NoHop,
}

/// A copy of the decoded leaf; the READ scratch is not copied (a copy never READs into it).
impl Clone for LeafBuf {
    fn clone(&self) -> LeafBuf {
        LeafBuf {
            l: self.l,
            bytes: self.bytes.clone(),
            loaded: self.loaded.clone(),
            replica_loaded: self.replica_loaded.clone(),
            nv: self.nv,
            nv_mixed: self.nv_mixed,
            raw: Vec::new(),
        }
    }
}

impl LeafView for LeafBuf {
    #[inline]
    fn layout(&self) -> &LeafLayout {
        &self.l
    }

    #[inline]
    fn is_loaded(&self, i: usize) -> bool {
        self.loaded[i]
    }

    #[inline]
    fn entry_bytes(&self, i: usize) -> &[u8] {
        // A buffer is not cleared between READs: only slots read may be looked at.
        debug_assert!(self.loaded[i], "slot {i} was not read");
        let at = self.l.entry(i);
        &self.bytes[at..at + self.l.entry_len]
    }

    #[inline]
    fn entry_bytes_mut(&mut self, i: usize) -> &mut [u8] {
        debug_assert!(self.loaded[i], "slot {i} was not read");
        let at = self.l.entry(i);
        &mut self.bytes[at..at + self.l.entry_len]
    }

    fn replica_bytes(&self) -> Option<&[u8]> {
        let g = self.replica_loaded.iter().position(|&r| r)?;
        let at = self.l.replica(g);
        Some(&self.bytes[at..at + self.l.meta_len])
    }

    #[inline]
    fn encode(&self, d0: usize, d1: usize, out: &mut [u8]) -> usize {
        cacheline::encode_window(&self.l, &self.bytes[d0..], d0, d1, out)
    }
}

impl LeafBuf {
    pub fn new(l: LeafLayout) -> LeafBuf {
        LeafBuf {
            // Slack after the leaf so a planned READ copies each line's data as one 64-byte move.
            bytes: vec![0; l.decoded() + SLACK],
            loaded: vec![false; l.span],
            replica_loaded: vec![false; l.groups()],
            nv: None,
            nv_mixed: false,
            // A whole leaf's READ, or a write plan of every entry plus the lock word.
            raw: Vec::with_capacity(l.physical().max(l.lock_offset() + 8) + SLACK),
            l,
        }
    }

    /// Forgets what was read, leaving the bytes (for a READ that overwrites all of them).
    pub fn forget(&mut self) {
        self.loaded.fill(false);
        self.replica_loaded.fill(false);
        (self.nv, self.nv_mixed) = (None, false);
    }

    /// Decodes a READ of the whole leaf by `plan` ([`ReadPlan::whole`]) from `raw` (the READ,
    /// followed by at least [`SLACK`] more bytes): line checks, a 64-byte move per line, one
    /// node-level version over every object.
    pub fn absorb_whole(&mut self, raw: &[u8], plan: &ReadPlan) -> Result<(), Invalid> {
        let l = self.l;
        debug_assert_eq!((plan.count, plan.window_len), (l.span, l.decoded()));
        plan.copy_lines(raw, &mut self.bytes)?;
        // Every object's first byte, group by group at the layout's fixed strides (the plan's
        // general list of object offsets costs a load per object), xor-folded against replica
        // 0's at offset 0 ([`version::nv_mixed`]).
        let first = self.bytes[0];
        let mut differ = 0;
        for group in self.bytes[..l.decoded()].chunks_exact(l.group()) {
            differ |= group[0] ^ first;
            for entry in group[l.meta_len..].chunks_exact(l.entry_len) {
                differ |= entry[0] ^ first;
            }
        }
        (self.nv, self.nv_mixed) = (Some(version::nv(first)), version::nv_mixed(differ));
        self.loaded.fill(true);
        self.replica_loaded.fill(true);
        Ok(())
    }

    /// Decodes the versioned part of a whole leaf (`phys`: its [`LeafLayout::physical`] bytes)
    /// whatever its versions say, and returns the node-level versions its objects carry (bit
    /// `nv` set for each). What a repairer holding the lock of a leaf a dead writer left part
    /// written reads: each WRITE covered whole objects, so every object is one writer's, and
    /// only the cache-line copies and the objects' NVs disagree.
    pub fn absorb_whole_unchecked(&mut self, phys: &[u8]) -> u16 {
        let l = self.l;
        // The data is copied whole before the line checks, whose verdict is not wanted here.
        let _lines_agree = cacheline::decode(&l, phys, 0, l.decoded(), &mut self.bytes).is_ok();
        let present = object_offsets(l).fold(0u16, |m, at| m | 1 << version::nv(self.bytes[at]));
        self.loaded.fill(true);
        self.replica_loaded.fill(true);
        (self.nv, self.nv_mixed) = (Some(version::nv(self.bytes[0])), present.count_ones() > 1);
        present
    }

    /// Stamps every object with node-level version `nv`.
    pub fn set_node_version(&mut self, nv: u8) {
        for at in object_offsets(self.l) {
            self.bytes[at] = version::with_nv(self.bytes[at], nv);
        }
        (self.nv, self.nv_mixed) = (Some(nv), false);
    }

    /// A fresh, empty leaf (every object at version 0, valid, no sibling) fully "loaded".
    pub fn empty(l: LeafLayout) -> LeafBuf {
        let mut b = LeafBuf::new(l);
        b.make_empty();
        b
    }

    /// Makes this buffer the empty leaf [`LeafBuf::empty`] gives, keeping its memory (a pooled
    /// buffer becoming a split's new sibling).
    pub fn make_empty(&mut self) {
        let l = self.l;
        self.bytes[..l.decoded()].fill(0);
        self.loaded.fill(true);
        self.replica_loaded.fill(true);
        (self.nv, self.nv_mixed) = (None, false);
        for g in 0..l.groups() {
            self.bytes[l.replica(g) + 1] = 1;
        }
        if l.kind.fenced {
            self.set_fences(0, u64::MAX);
        }
    }

    pub fn span(&self) -> usize {
        self.l.span
    }

    pub fn dist(&self, a: usize, b: usize) -> usize {
        self.l.dist(a, b)
    }

    /// Sets every replica's fence keys.
    pub fn set_fences(&mut self, low: u64, high: u64) {
        for g in 0..self.l.groups() {
            let at = self.l.replica(g) + super::layout::REPLICA;
            layout::put_key(&mut self.bytes, at, low);
            layout::put_key(&mut self.bytes, at + KEY, high);
        }
    }

    /// Sets every replica's sibling pointer.
    pub fn set_sibling(&mut self, s: dmindex_fabric::GlobalAddr) {
        for g in 0..self.l.groups() {
            let at = self.l.replica(g);
            layout::put_addr(&mut self.bytes, at + 2, s);
            self.bytes[at + 1] = 1;
        }
    }

    /// Bumps NV of every object (a node write).
    pub fn bump_node_version(&mut self) {
        let nv = version::nv(version::bump_nv(self.bytes[0]));
        for at in object_offsets(self.l) {
            self.bytes[at] = version::with_nv(self.bytes[at], nv);
        }
    }

    /// Decoded ranges covering slots `lo .. lo + n` (circular): [`LeafLayout::read_ranges`].
    pub fn ranges(&self, lo: usize, n: usize) -> Ranges {
        self.l.read_ranges(lo, n)
    }

    /// Decodes a READ of decoded range `[d0, d1)` (starting at an object) and marks what it
    /// covered, noting each object's node-level version for [`LeafBuf::validate`].
    pub fn absorb(&mut self, d0: usize, d1: usize, phys: &[u8]) -> Result<(), Invalid> {
        cacheline::decode(&self.l, phys, d0, d1, &mut self.bytes)?;
        let l = self.l;
        let nv = *self.nv.get_or_insert(version::nv(self.bytes[d0]));
        // Group by group: the replica if the range holds it, then a run of entries at their
        // fixed stride (one division for where the READ starts, none per object).
        let (group, meta, len) = (l.group(), l.meta_len, l.entry_len);
        let (mut g, mut r) = l.group_of(d0);
        debug_assert!(r == 0 || (r >= meta && (r - meta) % len == 0), "READs start at objects");
        let mut first = g * l.rg + l.entries_in(r.saturating_sub(meta));
        let (mut at, mut mixed) = (d0, false);
        while at < d1 {
            if r == 0 {
                mixed |= version::nv(self.bytes[at]) != nv;
                self.replica_loaded[g] = true;
                (at, r) = (at + meta, meta);
            }
            let end = (at - r + group).min(d1);
            let entries = self.bytes[at..end].chunks_exact(len);
            debug_assert!(entries.remainder().is_empty(), "READs end at objects");
            let n = entries.len();
            for e in entries {
                mixed |= version::nv(e[0]) != nv;
            }
            self.loaded[first..first + n].fill(true);
            (at, g, r, first) = (end, g + 1, 0, (g + 1) * l.rg);
        }
        self.nv_mixed |= mixed;
        Ok(())
    }

    /// Checks that everything absorbed carries one node-level version and a replica was read.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.nv_mixed {
            return Err(Invalid::NodeVersion);
        }
        if !self.replica_loaded.iter().any(|&r| r) {
            return Err(Invalid::NoReplica);
        }
        Ok(())
    }

    /// Whether every home's hop bitmap matches the keys around it (whole leaf loaded): the third
    /// level of validation applied to a whole-leaf READ, which a hop in flight would fail.
    pub fn hops_settled(&self) -> bool {
        !self.l.kind.hopscotch
            || self.bitmaps().iter().enumerate().all(|(h, &b)| b == self.bitmap(h))
    }

    /// Every home's hop bitmap rebuilt from the keys (all loaded), in one pass over the slots
    /// (one hash per key rather than one per key per home it might belong to).
    pub(crate) fn bitmaps(&self) -> SmallVec<[u16; 64]> {
        let s = self.l.span;
        let mut out: SmallVec<[u16; 64]> = smallvec::smallvec![0; s];
        for i in 0..s {
            let k = self.key(i);
            if k == 0 {
                continue;
            }
            let (h, bit) = hop_of(&self.l, k, i);
            out[h] |= bit;
        }
        out
    }

    /// Sorted leaf: the slot of `key`, or where it would go (keys packed from slot 0).
    pub fn sorted_search(&self, key: u64) -> Result<usize, usize> {
        self.sorted_search_compares(key).0
    }

    /// [`LeafBuf::sorted_search`] and the keys it compared (one per bisection step, the step
    /// that finds the key included).
    pub fn sorted_search_compares(&self, key: u64) -> (Result<usize, usize>, u64) {
        // Keys are packed from slot 0 and empty entries (key 0) follow, so over the whole span
        // 0 sorts after every key: one binary search, no count first.
        let (mut lo, mut hi, mut compared) = (0, self.l.span, 0);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let m = self.key(mid);
            compared += 1;
            if m == key {
                return (Ok(mid), compared);
            }
            if m != 0 && m < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (Err(lo), compared)
    }

    /// Sorted leaf: how many keys it holds (they are packed from slot 0).
    pub fn sorted_len(&self) -> usize {
        let (mut lo, mut hi) = (0, self.l.span);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) != 0 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Sorted leaf: puts `key` at slot `at`, shifting the larger keys right (not full).
    pub fn sorted_insert(&mut self, at: usize, key: u64, value: [u8; 8]) {
        let n = self.sorted_len();
        debug_assert!(n < self.l.span);
        for i in (at..n).rev() {
            let (k, v) = (self.key(i), self.value(i));
            self.set_entry(i + 1, k, v);
        }
        self.set_entry(at, key, value);
    }

    /// Sorted leaf: removes slot `at`, shifting the larger keys left.
    pub fn sorted_remove(&mut self, at: usize) {
        let n = self.sorted_len();
        for i in at + 1..n {
            let (k, v) = (self.key(i), self.value(i));
            self.set_entry(i - 1, k, v);
        }
        self.set_entry(n - 1, 0, [0; 8]);
    }

    /// Inserts `key` (absent from its neighbourhood) by hopping, within the loaded slots. The
    /// hop sequence is planned on the keys of the run from the home to the first empty slot,
    /// each read once (every candidate lies inside that run), and applied to the entries only
    /// once it reaches the neighbourhood: a failed sequence leaves the buffer untouched and a
    /// successful one moves each entry once.
    pub fn hop_insert(&mut self, key: u64, value: [u8; 8]) -> Hop {
        let l = self.l;
        let (s, hh) = (l.span, l.h);
        let h = home(key, s);
        // run[d]: the key at distance d from the home, up to the first empty slot (run[e] = 0).
        let mut run: SmallVec<[u64; 64]> = SmallVec::new();
        loop {
            let d = run.len();
            let i = wrap(h + d, s);
            if d == s || !self.loaded[i] {
                return Hop::NoEmpty;
            }
            let k = self.key(i);
            run.push(k);
            if k == 0 {
                break;
            }
        }
        // Moves as (from, to) distances from the home: the farthest candidate whose own
        // neighbourhood holds the empty slot goes there, and its old slot is the next empty one.
        let mut moves: SmallVec<[(usize, usize); 16]> = SmallVec::new();
        let mut e = run.len() - 1;
        while e >= hh {
            let found = (e + 1 - hh..e).find(|&j| {
                let kj = run[j];
                // kj's home, as a distance from h (it lies in the run: hops stay inside it).
                kj != 0 && {
                    let hj = l.dist(h, home(kj, s));
                    hj <= j && e - hj < hh
                }
            });
            let Some(j) = found else {
                return Hop::NoHop;
            };
            moves.push((j, e));
            (run[e], run[j]) = (run[j], 0);
            e = j;
        }
        let mut modified = Modified::new();
        for &(j, to) in &moves {
            let (from, to) = (wrap(h + j, s), wrap(h + to, s));
            let (kj, v) = (self.key(from), self.value(from));
            let hj = home(kj, s);
            let bm =
                self.bitmap(hj) & !self.hop_bit(l.dist(hj, from)) | self.hop_bit(l.dist(hj, to));
            self.set_bitmap(hj, bm);
            self.set_entry(to, kj, v);
            self.set_entry(from, 0, [0; 8]);
            modified.extend([hj, to, from]);
        }
        let e = wrap(h + e, s);
        self.set_entry(e, key, value);
        let bm = self.bitmap(h) | self.hop_bit(l.dist(h, e));
        self.set_bitmap(h, bm);
        modified.extend([h, e]);
        modified.sort_unstable();
        modified.dedup();
        for &i in &modified {
            self.bump_ev(i);
        }
        Hop::Done(modified)
    }

    /// Whether every entry and replica was read.
    pub fn all_loaded(&self) -> bool {
        self.loaded.iter().all(|&x| x) && self.replica_loaded.iter().all(|&x| x)
    }

    /// Occupied slots (all loaded).
    pub fn count(&self) -> usize {
        (0..self.l.span).filter(|&i| self.loaded[i] && self.key(i) != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LeafKind;

    /// A whole-leaf READ decodes to the leaf, CHIME's and Sherman's; any one object at another
    /// node-level version fails validation, and a torn line fails the READ.
    #[test]
    fn whole_reads_decode_and_catch_mixed_versions() {
        for kind in [LeafKind::CHIME, LeafKind::SHERMAN] {
            let l = LeafLayout::with_kind(64, 8, kind).unwrap();
            let plan = ReadPlan::whole(&l);
            let mut leaf = LeafBuf::empty(l);
            for i in 0..64 {
                leaf.set_entry(i, 1000 + i as u64, [i as u8; 8]);
            }
            let phys = |b: &LeafBuf| {
                let mut out = Vec::new();
                cacheline::encode(&l, &b.bytes, 0, l.decoded(), &mut out);
                out.resize(plan.raw_len + SLACK, 0);
                out
            };
            let mut got = LeafBuf::new(l);
            got.absorb_whole(&phys(&leaf), &plan).unwrap();
            assert_eq!(got.validate(), Ok(()));
            assert_eq!(got.bytes[..l.decoded()], leaf.bytes[..l.decoded()]);
            let objects = (0..l.groups()).map(|g| l.replica(g)).chain((0..64).map(|i| l.entry(i)));
            for o in objects {
                let mut odd = leaf.clone();
                odd.bytes[o] = version::bump_nv(odd.bytes[o]);
                got.forget();
                got.absorb_whole(&phys(&odd), &plan).unwrap();
                assert_eq!(got.validate(), Err(Invalid::NodeVersion), "object at {o}");
            }
            // Entry writes bump EVs only: objects whose EVs differ are one node version.
            let mut written = leaf.clone();
            for o in [l.entry(0), l.entry(63)] {
                written.bytes[o] = version::bump_ev(written.bytes[o]);
            }
            got.forget();
            got.absorb_whole(&phys(&written), &plan).unwrap();
            assert_eq!(got.validate(), Ok(()));
            let mut torn = phys(&leaf);
            torn[64] ^= 0x10;
            assert_eq!(got.absorb_whole(&torn, &plan), Err(Invalid::Torn));
        }
    }

    /// Ranged READs mark exactly the objects they cover, and notice one at another node-level
    /// version wherever it sits: the group-by-group walk against an object-by-object one, over
    /// every start and length of four geometries and every kind.
    #[test]
    fn ranged_reads_mark_the_objects_they_cover() {
        let mut mixed_seen = 0;
        let kinds = LeafKind::HOPSCOTCH_KINDS.into_iter().chain([LeafKind::SHERMAN]);
        for kind in kinds {
            for (span, h) in [(64, 8), (16, 4), (24, 4), (32, 16)] {
                let l = LeafLayout::with_kind(span, h, kind).unwrap();
                let leaf = LeafBuf::empty(l);
                let objects: Vec<usize> = (0..l.groups())
                    .map(|g| l.replica(g))
                    .chain((0..span).map(|i| l.entry(i)))
                    .collect();
                for (lo, n) in (0..span).flat_map(|lo| (1..=span).map(move |n| (lo, n))) {
                    let odd = objects[(lo * 7 + n) % objects.len()];
                    let mut src = leaf.clone();
                    src.bytes[odd] = version::bump_nv(src.bytes[odd]);
                    let mut got = LeafBuf::new(l);
                    let mut want = (vec![false; span], vec![false; l.groups()], false);
                    let ranges = l.read_ranges(lo, n);
                    // Node-level versions are held to the first object read's.
                    let nv0 = version::nv(src.bytes[ranges[0].0]);
                    for &(d0, d1) in &ranges {
                        let mut phys = Vec::new();
                        cacheline::encode(&l, &src.bytes, d0, d1, &mut phys);
                        got.absorb(d0, d1, &phys).unwrap();
                        // Object by object, as the walk did before.
                        let mut at = d0;
                        while at < d1 {
                            want.2 |= version::nv(src.bytes[at]) != nv0;
                            if let Some(g) = (0..l.groups()).find(|&g| l.replica(g) == at) {
                                want.1[g] = true;
                                at += l.meta_len;
                            } else {
                                let i = (0..span).find(|&i| l.entry(i) == at).expect("an object");
                                want.0[i] = true;
                                at += l.entry_len;
                            }
                        }
                    }
                    let case = format!("{kind:?} span {span} h {h}: slots {lo} + {n}");
                    assert_eq!(got.loaded, want.0, "{case}");
                    assert_eq!(got.replica_loaded, want.1, "{case}");
                    assert_eq!(got.nv_mixed, want.2, "{case}");
                    mixed_seen += usize::from(want.2);
                }
            }
        }
        assert!(mixed_seen > 1000, "the odd object was read with another only {mixed_seen} times");
    }

    fn layout() -> LeafLayout {
        LeafLayout::new(64, 8).unwrap()
    }

    /// A sorted leaf's search agrees with a binary search of its packed keys, for every fill
    /// of several spans and every key present, between, below and above them.
    #[test]
    fn sorted_search_matches_the_packed_keys() {
        for (span, h) in [(2, 2), (3, 3), (6, 2), (16, 8), (40, 8), (64, 8)] {
            let l = LeafLayout::with_kind(span, h, LeafKind::SHERMAN).unwrap();
            for n in 0..=span {
                let mut b = LeafBuf::empty(l);
                let keys: Vec<u64> = (1..=n as u64).map(|i| i * 10).collect();
                for (i, &k) in keys.iter().enumerate() {
                    b.set_entry(i, k, [0; 8]);
                }
                for probe in 1..=(n as u64 + 1) * 10 + 5 {
                    assert_eq!(
                        b.sorted_search(probe),
                        keys.binary_search(&probe),
                        "span {span}, {n} keys, probe {probe}"
                    );
                }
            }
        }
    }

    /// Every key findable in its neighbourhood, bitmaps equal to the rebuilt status everywhere.
    fn assert_invariants(b: &LeafBuf) {
        for h in 0..b.span() {
            assert_eq!(b.bitmap(h), b.status(h), "bitmap of home {h}");
        }
        for i in 0..b.span() {
            let k = b.key(i);
            if k != 0 {
                assert_eq!(b.find(home(k, b.span()), k), Some(i));
            }
        }
    }

    /// Hopscotch insertion as the module docs state it, on the slots' keys alone: the first
    /// empty slot from the home; while it is H or more away, the farthest of the H - 1 keys
    /// before it whose own neighbourhood holds it moves there. `None` when no empty slot, or no
    /// hop, brings the key home (the slots unchanged).
    fn model_hop(slots: &mut [u64], hh: usize, key: u64) -> Option<Hop> {
        let s = slots.len();
        let dist = |a: usize, b: usize| (b + s - a) % s;
        let h = home(key, s);
        let Some(mut e) = (0..s).map(|d| (h + d) % s).find(|&i| slots[i] == 0) else {
            return Some(Hop::NoEmpty);
        };
        let before = slots.to_vec();
        while dist(h, e) >= hh {
            let j = (1..hh).rev().map(|back| (e + s - back) % s).find(|&j| {
                let hj = home(slots[j], s);
                slots[j] != 0 && dist(hj, e) < hh && dist(hj, j) < dist(hj, e)
            });
            let Some(j) = j else {
                slots.copy_from_slice(&before);
                return Some(Hop::NoHop);
            };
            (slots[e], slots[j]) = (slots[j], 0);
            e = j;
        }
        slots[e] = key;
        None
    }

    /// Hops agree with the model key for key, fail where it fails and leave the leaf as it was,
    /// keep every bitmap equal to the keys around it and every value with its key, through
    /// thousands of inserts and removals on four geometries.
    #[test]
    fn hopping_matches_a_model_of_the_keys() {
        use rand_core::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut hops, mut failed) = (0, 0);
        for (span, h) in [(64, 8), (64, 16), (32, 4), (16, 2)] {
            let l = LeafLayout::new(span, h).unwrap();
            for _ in 0..40 {
                let mut b = LeafBuf::empty(l);
                let mut model = vec![0u64; span];
                for _ in 0..4 * span {
                    if rng.next_u32() % 4 == 0 {
                        let i = rng.next_u32() as usize % span;
                        let k = b.key(i);
                        if k != 0 {
                            b.remove(home(k, span), i);
                            model[i] = 0;
                        }
                        continue;
                    }
                    let k = rng.next_u64() | 1;
                    let before = b.bytes.clone();
                    let got = b.hop_insert(k, k.to_le_bytes());
                    match (model_hop(&mut model, h, k), &got) {
                        (None, Hop::Done(m)) => {
                            hops += usize::from(m.len() > 2);
                            assert!(m.windows(2).all(|w| w[0] < w[1]), "{m:?}");
                        }
                        (Some(want), _) if want == got => {
                            failed += 1;
                            assert!(b.bytes == before, "a failed hop changed the leaf");
                        }
                        (want, _) => panic!("span {span} H {h}: model {want:?}, leaf {got:?}"),
                    }
                    let keys: Vec<u64> = (0..span).map(|i| b.key(i)).collect();
                    assert_eq!(keys, model, "span {span} H {h}");
                    assert_invariants(&b);
                    for i in (0..span).filter(|&i| keys[i] != 0) {
                        assert_eq!(b.value(i), keys[i].to_le_bytes(), "slot {i}");
                    }
                }
            }
        }
        assert!(hops > 500 && failed > 500, "{hops} inserts moved keys, {failed} failed");
    }

    #[test]
    fn hopping_fills_most_of_a_leaf_and_keeps_invariants() {
        let mut b = LeafBuf::empty(layout());
        let mut inserted = 0;
        for k in 1..=200u64 {
            if b.find(home(k, 64), k).is_some() {
                continue;
            }
            match b.hop_insert(k, k.to_le_bytes()) {
                Hop::Done(m) => {
                    inserted += 1;
                    assert!(!m.is_empty());
                }
                _ => break,
            }
            assert_invariants(&b);
        }
        assert!(
            inserted >= 32,
            "hopping should fill at least half a 64-slot leaf with H=8, got {inserted}"
        );
        for i in 0..64 {
            let k = b.key(i);
            if k != 0 {
                assert_eq!(u64::from_le_bytes(b.value(i)), k);
            }
        }
    }

    #[test]
    fn remove_clears_home_bit() {
        let mut b = LeafBuf::empty(layout());
        for k in 1..=20u64 {
            assert!(matches!(b.hop_insert(k, [0; 8]), Hop::Done(_)));
        }
        let k = 7;
        let h = home(k, 64);
        let i = b.find(h, k).unwrap();
        b.remove(h, i);
        assert_eq!(b.find(h, k), None);
        assert_invariants(&b);
        // The freed slot is reused.
        assert!(matches!(b.hop_insert(1000, [1; 8]), Hop::Done(_)));
        assert_invariants(&b);
    }

    #[test]
    fn ranges_include_a_replica_and_wrap() {
        let b = LeafBuf::new(layout());
        let l = layout();
        assert_eq!(b.ranges(8, 8).as_slice(), [(l.replica(1), l.entry(15) + 19)]);
        assert_eq!(b.ranges(3, 8).as_slice(), [(l.entry(3), l.entry(10) + 19)]);
        assert_eq!(
            b.ranges(60, 8).as_slice(),
            [(l.entry(60), l.entry(63) + 19), (l.replica(0), l.entry(3) + 19)]
        );
        assert_eq!(b.ranges(5, 64).as_slice(), [(0, l.decoded())]);
        assert_eq!(
            b.l.write_ranges(62, 4).as_slice(),
            [(l.entry(0), l.entry(1) + 19), (l.entry(62), l.entry(63) + 19)]
        );
    }

    #[test]
    fn vacancy_tracks_loaded_buckets() {
        let l = layout();
        let mut b = LeafBuf::empty(l);
        let (f, t) = l.bucket_slots(0);
        assert_eq!(b.vacancy_after(0, &[f]), 0);
        for i in f..=t {
            b.set_entry(i, 100 + i as u64, [0; 8]);
        }
        let full = b.vacancy_after(0, &[t]);
        assert_eq!(full, 1);
        assert_eq!(b.l.first_vacant_bucket_slot(full, 0), Some(t + 1));
        b.set_entry(f, 0, [0; 8]);
        assert_eq!(b.vacancy_after(full, &[f]), 0);
        b.forget();
        assert_eq!(b.vacancy_after(full, &[f]), full, "a bucket not read keeps its bit");
    }

    /// Absorbing pieces of two node versions (a split landed between them) fails validation;
    /// pieces of one version pass, and so does a READ that holds a replica.
    #[test]
    fn validation_sees_mixed_node_versions_across_reads() {
        let l = layout();
        let old = LeafBuf::empty(l);
        let mut new = LeafBuf::empty(l);
        new.bump_node_version();
        let phys = |b: &LeafBuf, d0: usize, d1: usize| {
            let mut out = Vec::new();
            cacheline::encode(&l, &b.bytes, d0, d1, &mut out);
            out
        };
        let read = |parts: &[(&LeafBuf, usize, usize)]| {
            let mut b = LeafBuf::new(l);
            for &(src, lo, n) in parts {
                for (d0, d1) in b.ranges(lo, n) {
                    b.absorb(d0, d1, &phys(src, d0, d1)).unwrap();
                }
            }
            b.validate()
        };
        let rg = l.rg;
        assert_eq!(read(&[(&old, 0, 8)]), Ok(()));
        assert_eq!(read(&[(&old, 0, 8), (&old, rg, 8)]), Ok(()));
        assert_eq!(read(&[(&old, 0, 8), (&new, rg, 8)]), Err(Invalid::NodeVersion));
        assert_eq!(read(&[(&new, 0, 8), (&old, 2, 4)]), Err(Invalid::NodeVersion));
        assert_eq!(read(&[]), Err(Invalid::NoReplica));
    }
}
