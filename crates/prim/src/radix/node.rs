//! Node kinds and the decoded image of an inner node.
//!
//! # Why partial keys stay unique without a lock
//!
//! A node's slots are unordered (every kind has the same layout, so a type switch is a copy),
//! and an insert puts a new partial key into the *first* empty slot it saw, by CAS from empty.
//! Slots are never emptied again (a delete leaves a tombstone that keeps the partial key) and a
//! used slot's partial key never changes. So when an insert of partial key `p` CASes slot `i`,
//! every slot before `i` was used when it read them, hence is still used and holds another
//! partial key; and anyone who later fills a slot after `i` reads `i` used, with `p`. Two slots
//! with one partial key would need one of these two to be false.
//!
//! # Reading a node
//!
//! A READ of a node may tear (any mix of old and new words), but every slot word is read
//! atomically and a slot's partial key is immutable once set, so each slot is judged on its own:
//! a slot read empty and unfrozen proves that, at the instant it was read, the node was still
//! reachable and had no child there.

use std::sync::OnceLock;

use dmindex_fabric::GlobalAddr;
use smallvec::SmallVec;

use super::header::Header;
use super::slot::{Partial, Slot};

/// The adaptive node kinds; every one is an unordered array of slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    N4 = 0,
    N16 = 1,
    N48 = 2,
    /// 256 key bytes and the end of key.
    N256 = 3,
}

/// Bytes before the slots: the reverse pointer and the header.
pub const NODE_HEADER: usize = 16;

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::N4, Kind::N16, Kind::N48, Kind::N256];

    pub fn from_bits(b: u8) -> Kind {
        Kind::ALL[(b & 3) as usize]
    }

    /// Slots it has.
    pub const fn slots(self) -> usize {
        match self {
            Kind::N4 => 4,
            Kind::N16 => 16,
            Kind::N48 => 48,
            Kind::N256 => 257,
        }
    }

    /// Bytes a READ of the node fetches: 16 + 8·N.
    pub const fn bytes(self) -> usize {
        NODE_HEADER + 8 * self.slots()
    }

    /// Bytes it is allocated (64-B aligned, as slots name 64-B units).
    pub const fn alloc_bytes(self) -> u64 {
        (self.bytes() as u64).div_ceil(64) * 64
    }

    /// The smallest kind holding `n` children.
    pub fn holding(n: usize) -> Kind {
        Kind::ALL.into_iter().find(|k| k.slots() >= n).unwrap_or(Kind::N256)
    }

    /// The next kind up, or `None` for the largest (which holds every partial key).
    pub fn grow(self) -> Option<Kind> {
        match self {
            Kind::N4 => Some(Kind::N16),
            Kind::N16 => Some(Kind::N48),
            Kind::N48 => Some(Kind::N256),
            Kind::N256 => None,
        }
    }
}

/// Where the slot with index `i` of the node at `node` lies.
pub fn slot_addr(node: GlobalAddr, i: usize) -> GlobalAddr {
    node.add((NODE_HEADER + 8 * i) as u64)
}

/// A node as one READ saw it. The slots of the small kinds (4 and 16, the nodes near the
/// leaves, which writes read afresh) are held inline: decoding them allocates nothing. An image
/// of the large kinds (48 and 257 slots) that a compute node's radix cache keeps is given an
/// index of where each partial key's slot is ([`NodeImage::index`]), so that
/// [`NodeImage::find`] reads one slot's line instead of scanning up to 2 KB: the cache walks such
/// copies on every operation. The slots are fixed once an image is made, so the index stays
/// true.
#[derive(Clone, Debug)]
pub struct NodeImage {
    pub rev: GlobalAddr,
    pub header: Header,
    slots: SmallVec<[Slot; 16]>,
    /// Once indexed, by [`Partial::ordinal`], the first used slot with that partial key plus
    /// one (0: none).
    by_partial: OnceLock<Box<[u16; 257]>>,
}

impl PartialEq for NodeImage {
    fn eq(&self, o: &NodeImage) -> bool {
        (self.rev, self.header, &self.slots) == (o.rev, o.header, &o.slots)
    }
}

impl Eq for NodeImage {}

/// What a node says about one partial key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The slot with that partial key (maybe frozen or a tombstone).
    Found(usize, Slot),
    /// No slot has it; the first empty slot, if any (frozen ones included).
    Absent(Option<usize>),
}

impl NodeImage {
    /// Decodes a READ of `kind`'s bytes; `None` if the header is not a header of that kind
    /// (unwritten memory).
    pub fn decode(buf: &[u8], kind: Kind) -> Option<NodeImage> {
        let word = |i: usize| u64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().unwrap());
        let header = Header::decode(word(1))?;
        if header.kind != kind || buf.len() < kind.bytes() {
            return None;
        }
        let slots = (0..kind.slots()).map(|i| Slot(word(2 + i))).collect();
        Some(NodeImage::new(GlobalAddr::from_raw(word(0)), header, slots))
    }

    /// Whether `buf`, a READ of `kind`'s bytes, holds exactly this image: a node read again
    /// and found unchanged, judged without decoding or allocating anything.
    pub fn is_read_of(&self, buf: &[u8], kind: Kind) -> bool {
        let word = |i: usize| u64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().unwrap());
        buf.len() >= kind.bytes()
            && self.header.kind == kind
            && word(0) == self.rev.raw()
            && Header::decode(word(1)) == Some(self.header)
            && self.slots.iter().enumerate().all(|(i, s)| word(2 + i) == s.0)
    }

    /// An image of these slots.
    pub fn new(rev: GlobalAddr, header: Header, slots: SmallVec<[Slot; 16]>) -> NodeImage {
        NodeImage { rev, header, slots, by_partial: OnceLock::new() }
    }

    /// Indexes the slots by partial key if this is a large kind (one allocation, once): for
    /// an image that will be looked up many times, such as a cached copy.
    pub fn index(&self) {
        if self.slots.len() > 16 {
            self.by_partial.get_or_init(|| {
                let mut ix = Box::new([0u16; 257]);
                for (i, s) in self.slots.iter().enumerate().rev() {
                    if !s.is_empty() {
                        ix[s.partial().ordinal()] = i as u16 + 1;
                    }
                }
                ix
            });
        }
    }

    /// Slots compared by a lookup that found slot `found` (or none): one index entry if the
    /// image is indexed, else the slots [`NodeImage::find`] scanned, eight at a time, up to the
    /// hit (all of them on a miss or a floor lookup, which scans every slot).
    pub fn slots_compared(&self, found: Option<usize>, floor: bool) -> u64 {
        if self.by_partial.get().is_some() {
            return 1;
        }
        let n = self.slots.len();
        match found {
            Some(i) if !floor => n.min((i / 8 + 1) * 8) as u64,
            _ => n as u64,
        }
    }

    /// Its slots, in node order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// A new node's bytes: reverse pointer, header and `children` (at most the kind's slots).
    pub fn encode_new(rev: GlobalAddr, header: &Header, children: &[Slot], out: &mut Vec<u8>) {
        out.clear();
        out.resize(header.kind.bytes(), 0);
        out[..8].copy_from_slice(&rev.raw().to_le_bytes());
        out[8..16].copy_from_slice(&header.encode().to_le_bytes());
        for (i, s) in children.iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&s.0.to_le_bytes());
        }
    }

    /// The slot for partial key `p`, or where a new one would go.
    pub fn lookup(&self, p: Partial) -> Lookup {
        match self.find(p) {
            Some((i, s)) => Lookup::Found(i, s),
            None => Lookup::Absent(self.slots.iter().position(|s| s.is_empty())),
        }
    }

    /// The used slot with partial key `p`: looked up in the index if the image has one, else
    /// found by scanning the (unordered) slots eight at a time without a branch each.
    #[inline]
    pub fn find(&self, p: Partial) -> Option<(usize, Slot)> {
        if let Some(ix) = self.by_partial.get() {
            let at = ix[p.ordinal()] as usize;
            return at.checked_sub(1).map(|i| (i, self.slots[i]));
        }
        let (mask, want) = p.slot_bits();
        for (c, chunk) in self.slots.chunks(8).enumerate() {
            let mut hits = 0u32;
            for (j, s) in chunk.iter().enumerate() {
                hits |= u32::from(s.0 & mask == want && !s.is_empty()) << j;
            }
            if hits != 0 {
                let i = c * 8 + hits.trailing_zeros() as usize;
                return Some((i, self.slots[i]));
            }
        }
        None
    }

    /// The used, non-tombstone slot (thawed) with the largest partial key at most `p`, and its
    /// index: Dolphin's special node names each leaf by its low key's last byte, so the leaf
    /// whose range may hold a key is the floor of the key's byte.
    pub fn floor(&self, p: Partial) -> Option<(usize, Slot)> {
        if let Some(ix) = self.by_partial.get() {
            // Partial keys in descending order from `p`: its byte and those below, then the
            // end of the key (which sorts first).
            let bytes = match p {
                Partial::End => 0..0,
                Partial::Byte(b) => 0..b as usize + 1,
            };
            return bytes.rev().chain([256]).find_map(|o| {
                let i = (ix[o] as usize).checked_sub(1)?;
                let s = self.slots[i].thawed();
                (!s.is_tombstone()).then_some((i, s))
            });
        }
        let mut best: Option<(usize, Slot)> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let s = s.thawed();
            if s.is_empty() || s.is_tombstone() || s.partial() > p {
                continue;
            }
            if best.is_none_or(|(_, b)| s.partial() > b.partial()) {
                best = Some((i, s));
            }
        }
        best
    }

    /// Whether a type switch froze any slot.
    pub fn any_frozen(&self) -> bool {
        self.slots.iter().any(|s| s.is_frozen())
    }

    /// Used, non-tombstone children sorted by partial key (what a type switch copies and a scan
    /// visits).
    pub fn live_sorted(&self) -> Vec<Slot> {
        let mut v = Vec::new();
        self.live_sorted_into(&mut v);
        v
    }

    /// [`NodeImage::live_sorted`] appended to `out`: walked in partial-key order through the
    /// index if the image has one (no sort), else collected and sorted.
    pub fn live_sorted_into(&self, out: &mut Vec<Slot>) {
        let live = |s: &Slot| !s.is_empty() && !s.is_tombstone();
        match self.by_partial.get() {
            // The end of the key sorts first (its ordinal is the last).
            Some(ix) => out.extend(
                ix[256..]
                    .iter()
                    .chain(&ix[..256])
                    .filter(|&&i| i > 0)
                    .map(|&i| self.slots[i as usize - 1].thawed())
                    .filter(live),
            ),
            None => {
                let from = out.len();
                out.extend(self.slots.iter().map(|s| s.thawed()).filter(live));
                out[from..].sort_unstable_by_key(|s| s.partial());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `find` (eight slots at a time, or indexed) and `floor` (indexed) against plain scans,
    /// over nodes of every kind with empty, frozen, tombstoned and end-of-key slots, each
    /// partial key in at most one slot (as inserts keep it).
    #[test]
    fn find_agrees_with_a_scan() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x = crate::hash::mix64(x.wrapping_add(1));
            x
        };
        let addr = GlobalAddr::new(1, 0x4000);
        for kind in Kind::ALL {
            for _ in 0..200 {
                let mut slots: SmallVec<[Slot; 16]> = SmallVec::new();
                let offset = next() as usize;
                for i in 0..kind.slots() {
                    let r = next();
                    // A permutation of the 257 partial keys (257 is prime).
                    let o = (i * 167 + offset % 257) % 257;
                    let p = if o == 256 { Partial::End } else { Partial::Byte(o as u8) };
                    let len = 64 * (1 + (r >> 12) as usize % 16);
                    let mut s = match r % 5 {
                        0 => Slot::EMPTY,
                        1 => Slot::leaf(p, addr, len),
                        _ => Slot::inner(p, addr, Kind::ALL[(r >> 12) as usize % 4]),
                    };
                    if r & 0x100 != 0 {
                        s = s.frozen();
                    }
                    if r & 0x200 != 0 && !s.is_empty() {
                        s = s.tombstone();
                    }
                    slots.push(s);
                }
                let header = crate::radix::Header::new(kind, 0, b"", 0);
                let scanned = NodeImage::new(GlobalAddr::NULL, header, slots);
                let n = scanned.clone();
                n.index();
                assert_eq!(n.by_partial.get().is_some(), kind.slots() > 16);
                let probes = (0..=255u8).map(Partial::Byte).chain([Partial::End]);
                for p in probes {
                    let scan =
                        n.slots.iter().enumerate().find(|(_, s)| !s.is_empty() && s.partial() == p);
                    assert_eq!(n.find(p), scan.map(|(i, &s)| (i, s)), "{kind:?} {p:?}");
                    assert_eq!(scanned.find(p), n.find(p));
                    assert_eq!(scanned.floor(p), n.floor(p), "{kind:?} {p:?}");
                    let empty = n.slots.iter().position(|s| s.is_empty());
                    let want = scan.map_or(Lookup::Absent(empty), |(i, &s)| Lookup::Found(i, s));
                    assert_eq!(n.lookup(p), want);
                }
                let mut indexed = vec![Slot::EMPTY];
                n.live_sorted_into(&mut indexed);
                let mut sorted: Vec<Slot> = n
                    .slots
                    .iter()
                    .map(|s| s.thawed())
                    .filter(|s| !s.is_empty() && !s.is_tombstone())
                    .collect();
                sorted.sort_by_key(|s| s.partial());
                assert_eq!(indexed[1..], sorted, "{kind:?}: in partial-key order, appended");
                assert_eq!(scanned.live_sorted(), sorted);
            }
        }
    }

    #[test]
    fn sizes_are_pinned() {
        let b: Vec<usize> = Kind::ALL.iter().map(|k| k.bytes()).collect();
        assert_eq!(b, [48, 144, 400, 2072]);
        let a: Vec<u64> = Kind::ALL.iter().map(|k| k.alloc_bytes()).collect();
        assert_eq!(a, [64, 192, 448, 2112]);
        assert_eq!(Kind::holding(5), Kind::N16);
        assert_eq!(Kind::holding(257), Kind::N256);
        assert_eq!(Kind::N48.grow(), Some(Kind::N256));
        assert_eq!(slot_addr(GlobalAddr::new(1, 128), 2), GlobalAddr::new(1, 160));
    }

    #[test]
    fn encode_decode_lookup() {
        let h = Header::new(Kind::N4, 2, b"ab", 1);
        let a = GlobalAddr::new(0, 4096);
        let s1 = Slot::leaf(Partial::Byte(9), a, 64);
        let s0 = Slot::inner(Partial::End, a.add(64), Kind::N16);
        let mut buf = Vec::new();
        NodeImage::encode_new(a.add(8), &h, &[s1, s0], &mut buf);
        assert_eq!(buf.len(), 48);
        let n = NodeImage::decode(&buf, Kind::N4).expect("decodes");
        assert_eq!((n.rev, n.header), (a.add(8), h));
        assert_eq!(n.lookup(Partial::Byte(9)), Lookup::Found(0, s1));
        assert_eq!(n.lookup(Partial::Byte(8)), Lookup::Absent(Some(2)));
        assert_eq!(n.live_sorted(), vec![s0, s1]);
        assert!(NodeImage::decode(&buf, Kind::N16).is_none(), "wrong kind");
        assert!(n.is_read_of(&buf, Kind::N4), "the bytes it was decoded from");
        for at in [0, 8, 16, 47] {
            let mut changed = buf.clone();
            changed[at] ^= 1;
            assert!(!n.is_read_of(&changed, Kind::N4), "a byte changed at {at}");
        }
        // Floor: the largest partial key at most the one asked for, frozen or not, never a
        // tombstone.
        assert_eq!(n.floor(Partial::Byte(200)), Some((0, s1)));
        assert_eq!(n.floor(Partial::Byte(9)), Some((0, s1)));
        assert_eq!(n.floor(Partial::Byte(8)), Some((1, s0)));
        let mut slots = n.slots.clone();
        slots[0] = s1.frozen();
        slots[2] = Slot::leaf(Partial::Byte(100), a, 64).tombstone();
        let m = NodeImage::new(n.rev, n.header, slots.clone());
        assert_eq!(m.floor(Partial::Byte(120)), Some((0, s1)));
        slots[1] = Slot::leaf(Partial::Byte(3), a, 64);
        let m = NodeImage::new(n.rev, n.header, slots);
        assert_eq!(m.floor(Partial::Byte(2)), None);
        assert_eq!(m.floor(Partial::End), None);
        assert!(NodeImage::decode(&[0; 48], Kind::N4).is_none(), "unwritten memory");
    }
}
