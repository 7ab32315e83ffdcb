//! The SMART leaf: one key-value item, read and written whole.
//!
//! ```text
//! offset 0      8        16         24     26     28          28 + klen     28 + klen + vlen
//!        +------+--------+----------+------+------+-- ... --+-- ... --+---------- ... --+
//!        | rev  | status | checksum | klen | vlen |   key   |  value  | spare (in-place) |
//!        +------+--------+----------+------+------+-- ... --+-- ... --+---------- ... --+
//!                                    \_________ checksummed _________/
//! status:  63 62 | 61   | 60 … 0
//!          state | lock | MOVED: the slot word of the item's new leaf (address, size)
//!                |      | LIVE, locked: holder's member word (60-30) | acquisition (29-0)
//!                |      | LIVE, unlocked: 0
//!          state: 1 live, 2 deleted, 3 moved
//! ```
//!
//! A leaf is allocated in 64-B units (the slot records how many, so one READ fetches it) and
//! never reused. **rev** is the slot that published it (rewritten when a push-down moves it
//! under a new node). The **status** word is the one word changed by CAS: a delete turns live
//! into deleted, an update too long for the leaf turns it into moved (naming the new leaf), and
//! an in-place update holds the lock bit while it rewrites the checksummed part. Both end states
//! are final, so a live leaf holding a key is that key's item wherever it was reached from.
//!
//! A held status names its holder: the holder's member word ([`dmindex_prim::lease`], 31 bits)
//! and its acquisition number (low 30 bits), in the 61 bits a live leaf does not otherwise use.
//! So a waiter can judge the holder's lease, and each acquisition's word is its own (a word
//! unchanged for three leases is one acquisition that has not ended; the `lock` module).
//!
//! The checksum (SMART: CRC64) is the shared 64-bit hash of the checksummed bytes: a READ that
//! tore across an in-place update fails it, except with probability 2⁻⁶⁴ per torn read.

use dmindex_fabric::GlobalAddr;
use dmindex_prim::hash::hash_bytes;
use dmindex_prim::lease::MEMBER_BITS;
use dmindex_prim::radix::slot::MAX_LEAF;
use dmindex_prim::radix::{Partial, Slot};

/// Bytes before the key.
pub const LEAF_HEADER: usize = 28;
const LIVE: u64 = 1 << 62;
const DELETED: u64 = 2 << 62;
const MOVED: u64 = 3 << 62;
const LOCK: u64 = 1 << 61;
const TARGET: u64 = (1 << 61) - 1;
/// Where a held status keeps its holder's member word, above the acquisition number.
const HOLDER_SHIFT: u32 = 30;
const ACQUISITION: u64 = (1 << HOLDER_SHIFT) - 1;
const _: () = assert!(HOLDER_SHIFT + MEMBER_BITS == 61, "the holder fills bits 60-0");
/// A leaf slot's leaf bit ([`Slot::leaf`]).
const SLOT_LEAF: u64 = 1 << 61;

/// A leaf's status word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub u64);

/// What a status word says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The item (maybe being rewritten in place: `locked`).
    Live {
        locked: bool,
    },
    Deleted,
    /// Superseded by the leaf that slot word names.
    Moved(Slot),
    /// Not a status word (unwritten memory).
    Invalid,
}

impl Status {
    pub const LIVE: Status = Status(LIVE);
    pub const DELETED: Status = Status(DELETED);

    /// Live, locked by member `member` (a [`dmindex_prim::lease`] member word) in its
    /// acquisition number `n` (its low 30 bits are kept).
    pub fn held(member: u64, n: u32) -> Status {
        debug_assert!(member >> (MEMBER_BITS - 1) == 1, "a member word has its marker bit");
        Status(
            LIVE | LOCK
                | (member & ((1 << MEMBER_BITS) - 1)) << HOLDER_SHIFT
                | n as u64 & ACQUISITION,
        )
    }

    /// The member word a locked live status names (`None` for any other status). A word whose
    /// holder field lacks the member marker bit is garbage, and names no one either.
    pub fn holder(self) -> Option<u64> {
        if self.0 & (3 << 62 | LOCK) != LIVE | LOCK {
            return None;
        }
        let m = self.0 >> HOLDER_SHIFT & ((1 << MEMBER_BITS) - 1);
        (m >> (MEMBER_BITS - 1) == 1).then_some(m)
    }

    /// Moved to the leaf `target` names (its partial key is dropped).
    pub fn moved(target: Slot) -> Status {
        Status(MOVED | (target.0 & TARGET & !(0xFF << 48)))
    }

    pub fn state(self) -> State {
        match self.0 & (3 << 62) {
            LIVE => State::Live { locked: self.0 & LOCK != 0 },
            DELETED => State::Deleted,
            // The target is kept without the slot's leaf bit (bit 61, the lock's here).
            MOVED => State::Moved(Slot(self.0 & TARGET | SLOT_LEAF)),
            _ => State::Invalid,
        }
    }
}

/// Bytes a leaf for `klen` + `vlen` is allocated (whole 64-B units).
pub fn alloc_len(klen: usize, vlen: usize) -> usize {
    (LEAF_HEADER + klen + vlen).div_ceil(64) * 64
}

/// Longest key + value a leaf holds.
pub const MAX_ITEM: usize = MAX_LEAF - LEAF_HEADER;

fn checksum(body: &[u8]) -> u64 {
    hash_bytes(body)
}

/// Writes the checksummed part (checksum, lengths, key, value) at `out[16..]`; returns the
/// bytes written from offset 16.
pub fn encode_body(key: &[u8], value: &[u8], out: &mut [u8]) -> usize {
    let end = LEAF_HEADER + key.len() + value.len();
    out[24..26].copy_from_slice(&(key.len() as u16).to_le_bytes());
    out[26..28].copy_from_slice(&(value.len() as u16).to_le_bytes());
    out[28..28 + key.len()].copy_from_slice(key);
    out[28 + key.len()..end].copy_from_slice(value);
    let sum = checksum(&out[24..end]);
    out[16..24].copy_from_slice(&sum.to_le_bytes());
    end - 16
}

/// A whole new live leaf at the front of `out` (at least its allocation long, zeroed past the
/// item); returns its allocation length.
pub fn encode(rev: GlobalAddr, key: &[u8], value: &[u8], out: &mut [u8]) -> usize {
    let len = alloc_len(key.len(), value.len());
    out[..len].fill(0);
    out[..8].copy_from_slice(&rev.raw().to_le_bytes());
    out[8..16].copy_from_slice(&LIVE.to_le_bytes());
    encode_body(key, value, out);
    len
}

/// The slot naming a leaf of `len` bytes at `addr`.
pub fn slot(p: Partial, addr: GlobalAddr, len: usize) -> Slot {
    Slot::leaf(p, addr, len)
}

/// A leaf as one READ saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafView<'a> {
    pub rev: GlobalAddr,
    pub status: Status,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Why a READ of a leaf cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Torn {
    /// The checksummed part does not check: an in-place update was in flight; read again.
    Checksum,
}

impl<'a> LeafView<'a> {
    pub fn decode(buf: &'a [u8]) -> Result<LeafView<'a>, Torn> {
        let word = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().unwrap());
        let status = Status(word(8));
        let klen = u16::from_le_bytes([buf[24], buf[25]]) as usize;
        let vlen = u16::from_le_bytes([buf[26], buf[27]]) as usize;
        let end = LEAF_HEADER + klen + vlen;
        if end > buf.len() || checksum(&buf[24..end]) != word(16) {
            return Err(Torn::Checksum);
        }
        Ok(LeafView {
            rev: GlobalAddr::from_raw(word(0)),
            status,
            key: &buf[28..28 + klen],
            value: &buf[28 + klen..end],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmindex_prim::lease;

    #[test]
    fn layout_is_pinned() {
        let mut b = vec![0xEE; 128];
        assert_eq!(encode(GlobalAddr::new(1, 0x40), b"key", b"value", &mut b), 64);
        b.truncate(64);
        assert!(b[36..].iter().all(|&x| x == 0), "zeroed past the item");
        assert_eq!(&b[..8], &GlobalAddr::new(1, 0x40).raw().to_le_bytes());
        assert_eq!(&b[8..16], &(1u64 << 62).to_le_bytes());
        assert_eq!(&b[24..36], b"\x03\x00\x05\x00keyvalue");
        assert_eq!(&b[16..24], &hash_bytes(&b[24..36]).to_le_bytes());
        let v = LeafView::decode(&b).unwrap();
        assert_eq!(
            (v.key, v.value, v.status.state()),
            (&b"key"[..], &b"value"[..], State::Live { locked: false })
        );
        b[30] ^= 1;
        assert_eq!(LeafView::decode(&b), Err(Torn::Checksum));
        assert_eq!(alloc_len(8, 28), 64);
        assert_eq!(alloc_len(8, 29), 128);
    }

    #[test]
    fn status_words() {
        let t = slot(Partial::Byte(9), GlobalAddr::new(2, 4096), 128);
        let m = Status::moved(t);
        assert_eq!(m.state(), State::Moved(slot(Partial::Byte(0), GlobalAddr::new(2, 4096), 128)));
        let member = lease::member_word(2047, (1 << 19) + 5);
        let held = Status::held(member, (1 << 30) + 9);
        assert_eq!(held.0, 0x6000_0000_0000_0000 | member << 30 | 9, "bits 60-30, 29-0");
        assert_eq!(held.0, 0x7FFE_0001_4000_0009, "member 2047/5, acquisition 9");
        assert_eq!(held.state(), State::Live { locked: true });
        assert_eq!(held.holder(), Some(member));
        assert_eq!(Status::LIVE.holder(), None);
        assert_eq!(m.holder(), None, "a moved word names a leaf, not a holder");
        assert_eq!(Status(held.0 & !(1 << 60)).holder(), None, "no marker bit: garbage");
        assert_eq!(Status::DELETED.state(), State::Deleted);
        assert_eq!(Status(0).state(), State::Invalid);
    }
}
