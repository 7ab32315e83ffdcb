//! Every remote byte layout of CLevel, drawn; all words are little-endian.
//!
//! # Slot (8 B, aligned; changed only by CAS)
//!
//! The slot word RACE uses too, drawn and pinned in [`dmindex_prim::kv_slot`]: fingerprint,
//! frozen bit, block length in 64-B units, tentative bit, block address. Here:
//!
//! * `fp`: 8 bits of a third hash of the key ([`Hashes::fp`]).
//! * `F` (frozen): set by the rehasher on a committed entry of the bottom level it is moving
//!   up. No writer's CAS expects a frozen word, so the entry can no longer change; it stays the
//!   key's value, and so does its copy above, which holds the same word.
//! * `T` (tentative): an insert of an absent key placed the entry and has not committed it;
//!   another insert of the key or the rehasher may abort it.
//!
//! # Bucket (64 B = one cache line, 64-B aligned): 8 slots
//!
//! A key has two buckets in each level, `h1 mod 2^n` and `h2 mod 2^n` of a level of `2^n`
//! buckets ([`Hashes::buckets`]); the two may be one. A level is an array of buckets, zeroed
//! when allocated, on one memory node.
//!
//! # Context (128 B, 64-B aligned, on memory node 0; written once, before it is published)
//!
//! ```text
//! +0   generation u64 (the first context's is 1; each next one's one more)
//! +8   levels u64 (2..=MAX_LEVELS)
//! +16  level word 0 (the bottom) | level word 1 | ... | level word levels - 1 (the top)
//!      | zero up to +128
//! level word: log2 of its buckets << 58 | the level's address (node << 48 | offset)
//! ```
//!
//! The levels, bottom first. Each is twice its predecessor's size. Two levels is the resting
//! state; more means a rehash is due: the bottom is being drained into the levels above.
//!
//! # Table header (64 B, 64-B aligned, on memory node 0; its address is the root word)
//!
//! ```text
//! +0   magic u64 (b"DMCLEVL1")
//! +8   max key bytes u32 | max value bytes u32
//! +16  context word u64: the current context's address; changed only by CAS, from one context
//!      to a newer one (contexts are never reused, so a word seen twice is one context
//!      throughout)
//! +24  resize lock u64 ([`dmindex_prim::lock`] held word; 0 free): one grower at a time
//! +32  rehash lock u64 (likewise): the one client that moves entries out of the bottom level
//! +40  zero
//! ```

use dmindex_fabric::GlobalAddr;
use dmindex_prim::hash::{hash_bytes, mix64};
use dmindex_prim::root::Magic;

pub use dmindex_prim::kv_slot::{
    entry, is_frozen, is_tentative, slot, slot_block, slot_fp, slot_units, units, FROZEN,
    MAX_BLOCK, MAX_NODES, MAX_NODE_BYTES, TENTATIVE,
};

/// Slots in a bucket (8, the port's: one cache line).
pub const SLOTS: usize = 8;
/// Bytes in a bucket.
pub const BUCKET: u64 = 64;
/// Levels a context can list (the paper's CLevel reached 8.28 at 128 threads, Table 1).
pub const MAX_LEVELS: usize = 14;
/// The largest level: 2^40 buckets.
pub const MAX_LOG2: u32 = 40;

/// The root table's descriptor word of a CLevel table: the magic over the bottom level's log2.
pub const MAGIC: Magic = Magic { name: "CLevel hash table", value: 0x434C, bits: 16 };
/// The table header's first word.
pub const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"DMCLEVL1");
/// Bytes of the table header.
pub const HEADER: u64 = 64;
/// Offset of the context word in the table header.
pub const CONTEXT_WORD: u64 = 16;
/// Offset of the resize lock in the table header.
pub const RESIZE_LOCK: u64 = 24;
/// Offset of the rehash lock in the table header.
pub const REHASH_LOCK: u64 = 32;
/// Bytes of a context.
pub const CONTEXT: u64 = 128;

const _: () = assert!(SLOTS as u64 * 8 == BUCKET, "a bucket is one cache line of slots");
const _: () = assert!(16 + 8 * MAX_LEVELS as u64 == CONTEXT, "a context is two cache lines");
const _: () = assert!(REHASH_LOCK + 8 <= HEADER);

/// A key's hashes: two bucket choices and a fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hashes {
    pub h1: u64,
    pub h2: u64,
    fp: u8,
}

impl Hashes {
    pub fn of(key: &[u8]) -> Hashes {
        let h = hash_bytes(key);
        Hashes { h1: h, h2: mix64(h ^ 0x5DEE_CE66_DA3C_0B19), fp: (mix64(h ^ 0xF1F1) >> 56) as u8 }
    }

    /// The fingerprint slots of this key carry.
    pub fn fp(&self) -> u8 {
        self.fp
    }

    /// The key's two buckets in a level of `2^log2` buckets (equal when both hashes agree
    /// there).
    pub fn buckets(&self, log2: u32) -> [u64; 2] {
        let mask = (1u64 << log2) - 1;
        [self.h1 & mask, self.h2 & mask]
    }
}

/// A level: its address and log2 of its buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Level {
    pub addr: GlobalAddr,
    pub log2: u32,
}

impl Level {
    pub fn word(self) -> u64 {
        (self.log2 as u64) << 58 | self.addr.raw()
    }

    pub fn from_word(w: u64) -> Level {
        Level { addr: GlobalAddr::from_raw(w & ((1 << 58) - 1)), log2: (w >> 58) as u32 }
    }

    pub fn buckets(self) -> u64 {
        1 << self.log2
    }

    pub fn bytes(self) -> u64 {
        BUCKET << self.log2
    }

    /// The address of bucket `b`.
    pub fn bucket(self, b: u64) -> GlobalAddr {
        self.addr.add(BUCKET * b)
    }
}

/// A context as its 64 bytes say: generation and levels, bottom first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Context {
    pub generation: u64,
    pub count: usize,
    pub levels: [Level; MAX_LEVELS],
}

impl Context {
    pub fn levels(&self) -> &[Level] {
        &self.levels[..self.count]
    }

    /// Whether a rehash is due: more than the resting two levels.
    pub fn rehashing(&self) -> bool {
        self.count > 2
    }

    pub fn top(&self) -> Level {
        self.levels[self.count - 1]
    }

    pub fn bottom(&self) -> Level {
        self.levels[0]
    }

    /// The next context: these levels and `top` above them.
    pub fn grown(&self, top: Level) -> Context {
        let mut next = Context { generation: self.generation + 1, ..*self };
        next.levels[self.count] = top;
        next.count += 1;
        next
    }

    /// The next context: these levels without the bottom one.
    pub fn drained(&self) -> Context {
        let mut next = Context { generation: self.generation + 1, count: self.count - 1, ..*self };
        next.levels = [Level::default(); MAX_LEVELS];
        next.levels[..self.count - 1].copy_from_slice(&self.levels[1..self.count]);
        next
    }

    /// Offset in a context of level `i`'s word (the port's per-level header stands here).
    pub const fn level_word_at(i: usize) -> u64 {
        16 + 8 * i as u64
    }

    pub fn to_bytes(&self) -> [u8; CONTEXT as usize] {
        let mut b = [0u8; CONTEXT as usize];
        b[0..8].copy_from_slice(&self.generation.to_le_bytes());
        b[8..16].copy_from_slice(&(self.count as u64).to_le_bytes());
        for (i, l) in self.levels().iter().enumerate() {
            let at = Self::level_word_at(i) as usize;
            b[at..at + 8].copy_from_slice(&l.word().to_le_bytes());
        }
        b
    }

    /// The context in `b`; `None` if its level count is out of range.
    pub fn from_bytes(b: &[u8]) -> Option<Context> {
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let count = usize::try_from(word(1)).ok().filter(|n| (2..=MAX_LEVELS).contains(n))?;
        let mut levels = [Level::default(); MAX_LEVELS];
        for (i, l) in levels.iter_mut().take(count).enumerate() {
            *l = Level::from_word(word(2 + i));
        }
        Some(Context { generation: word(0), count, levels })
    }
}

/// The little-endian words of `b`.
pub fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_pinned() {
        let h = Hashes::of(&42u64.to_be_bytes());
        assert_eq!(h.h1, hash_bytes(&42u64.to_be_bytes()));
        assert_eq!(h.buckets(11), [h.h1 & 0x7FF, h.h2 & 0x7FF]);
        // Pinned values: a change here moves every key of every table.
        assert_eq!((h.h1 & 0xFFFF, h.h2 & 0xFFFF, h.fp()), (0xB43D, 0xB6F8, 0x2B));
    }

    #[test]
    fn contexts_are_pinned() {
        let bottom = Level { addr: GlobalAddr::new(0, 0x4000), log2: 11 };
        let top = Level { addr: GlobalAddr::new(1, 0x8000), log2: 12 };
        let mut c = Context { generation: 1, count: 2, levels: [Level::default(); MAX_LEVELS] };
        c.levels[0] = bottom;
        c.levels[1] = top;
        let b = c.to_bytes();
        assert_eq!(&b[0..16], &[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 11 << 58 | 0x4000);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 12 << 58 | 1 << 48 | 0x8000);
        assert_eq!((Context::level_word_at(0), Context::level_word_at(13)), (16, 120));
        assert_eq!(b.len(), 128);
        assert!(b[32..].iter().all(|&x| x == 0));
        assert_eq!(Context::from_bytes(&b), Some(c));
        let third = Level { addr: GlobalAddr::new(2, 0x10000), log2: 13 };
        let grown = c.grown(third);
        assert!(grown.rehashing() && grown.generation == 2 && grown.top() == third);
        let drained = grown.drained();
        assert_eq!(drained.levels(), &[top, third]);
        assert!(!drained.rehashing() && drained.generation == 3);
        let mut bad = b;
        bad[8] = 15;
        assert_eq!(Context::from_bytes(&bad), None);
    }
}
