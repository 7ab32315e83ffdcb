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
/// leaves, which writes read afresh) are held inline: decoding them allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeImage {
    pub rev: GlobalAddr,
    pub header: Header,
    pub slots: SmallVec<[Slot; 16]>,
}

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
        Some(NodeImage { rev: GlobalAddr::from_raw(word(0)), header, slots })
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
        let mut first_empty = None;
        for (i, &s) in self.slots.iter().enumerate() {
            if s.is_empty() {
                first_empty.get_or_insert(i);
            } else if s.partial() == p {
                return Lookup::Found(i, s);
            }
        }
        Lookup::Absent(first_empty)
    }

    /// The used, non-tombstone slot (thawed) with the largest partial key at most `p`, and its
    /// index: Dolphin's special node names each leaf by its low key's last byte, so the leaf
    /// whose range may hold a key is the floor of the key's byte.
    pub fn floor(&self, p: Partial) -> Option<(usize, Slot)> {
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
        let mut v: Vec<Slot> = self
            .slots
            .iter()
            .map(|s| s.thawed())
            .filter(|s| !s.is_empty() && !s.is_tombstone())
            .collect();
        v.sort_by_key(|s| s.partial());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Floor: the largest partial key at most the one asked for, frozen or not, never a
        // tombstone.
        assert_eq!(n.floor(Partial::Byte(200)), Some((0, s1)));
        assert_eq!(n.floor(Partial::Byte(9)), Some((0, s1)));
        assert_eq!(n.floor(Partial::Byte(8)), Some((1, s0)));
        let mut m = n.clone();
        m.slots[0] = s1.frozen();
        m.slots[2] = Slot::leaf(Partial::Byte(100), a, 64).tombstone();
        assert_eq!(m.floor(Partial::Byte(120)), Some((0, s1)));
        m.slots[1] = Slot::leaf(Partial::Byte(3), a, 64);
        assert_eq!(m.floor(Partial::Byte(2)), None);
        assert_eq!(m.floor(Partial::End), None);
        assert!(NodeImage::decode(&[0; 48], Kind::N4).is_none(), "unwritten memory");
    }
}
