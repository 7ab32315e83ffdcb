//! Hashing: the one hash module every index uses.
//!
//! # Key hash
//!
//! [`hash_bytes`] places keys (hopscotch homes, hash-table buckets, RDWC and lock-table slots):
//! a multiply-xorshift mix ([`mix64`], the `splitmix64` finaliser) of the key's 8-byte chunks
//! folded in order, seeded with the length. Fast, stable across platforms and versions, and well
//! spread in every bit; its values are part of every stored layout, so they are pinned below.
//!
//! # Fingerprints
//!
//! [`fingerprint`] is a 16-bit tag of an 8-byte key (the top 16 bits of a salted [`mix64`]),
//! never 0 so that 0 can mark an empty tag: a CN-side table compares tags before it spends a
//! READ on a candidate (CHIME's hotspot buffer).
//!
//! ```text
//! fingerprint(k) = (mix64(k ^ 0xF1F1_F1F1) >> 48) | 1      (u16)
//! ```
//!
//! # CN-side maps by address
//!
//! [`AddrHash`] is the `BuildHasher` of CN-side hash maps keyed by remote addresses (a radix
//! cache's copies): one [`mix64`] of the address word instead of SipHash, whose resistance to
//! chosen keys buys nothing for addresses the index allocated itself.

/// Mixes one word.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hash of a byte string.
#[inline]
pub fn hash_bytes(b: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(b) {
        // The common 8-byte key: its one chunk without the copy into a padded word.
        Ok(w) => hash_u64(u64::from_be_bytes(w)),
        Err(_) => hash_chunks(b),
    }
}

/// [`hash_bytes`] by its definition: the 8-byte chunks, zero-padded, folded in order.
fn hash_chunks(b: &[u8]) -> u64 {
    let mut h = 0x9E37_79B9_7F4A_7C15u64 ^ b.len() as u64;
    for chunk in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix64(h ^ u64::from_le_bytes(w));
    }
    h
}

/// [`hash_bytes`] of a key's 8 big-endian bytes, without the byte loop (the same value).
#[inline]
pub fn hash_u64(key: u64) -> u64 {
    // The one 8-byte chunk of hash_bytes: big-endian bytes read as little-endian.
    mix64(0x9E37_79B9_7F4A_7C15u64 ^ 8 ^ key.swap_bytes())
}

/// The 16-bit fingerprint of an 8-byte key; never 0.
#[inline]
pub fn fingerprint(key: u64) -> u16 {
    (mix64(key ^ 0xF1F1_F1F1) >> 48) as u16 | 1
}

/// A `BuildHasher` for maps keyed by 8-byte words (remote addresses): [`mix64`] of the word.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddrHash;

impl std::hash::BuildHasher for AddrHash {
    type Hasher = AddrHasher;
    fn build_hasher(&self) -> AddrHasher {
        AddrHasher(0)
    }
}

/// The hasher of [`AddrHash`]: words are mixed in; other bytes are folded in 8 at a time.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    #[inline]
    fn write_u64(&mut self, w: u64) {
        self.0 = mix64(self.0 ^ w);
    }

    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {

    /// `hash_bytes` of an 8-byte key takes `hash_u64`: both must be the chunk loop's value.
    #[test]
    fn hash_u64_is_hash_bytes_of_the_big_endian_key() {
        let mut k = 1u64;
        for _ in 0..10_000 {
            assert_eq!(hash_u64(k), hash_chunks(&k.to_be_bytes()), "key {k:#x}");
            assert_eq!(hash_bytes(&k.to_be_bytes()), hash_u64(k), "key {k:#x}");
            k = mix64(k);
        }
        assert_eq!(hash_u64(0), hash_chunks(&[0; 8]));
    }

    use super::*;

    #[test]
    fn pinned_values() {
        // Changing these moves every key in every stored index: they are part of the layout.
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161D_100B_05E5);
        // 8-byte keys take a path of their own: pinned against the chunk loop's values.
        assert_eq!(hash_bytes(&1u64.to_be_bytes()), 0xD498_57ED_C6E1_6E29);
        assert_eq!(hash_bytes(b"user1234"), 0x70E3_EC6D_93E1_09F2);
        assert_eq!(hash_bytes(b"a"), 0x6232_9690_0026_2121);
        let sixteen: Vec<u8> = (1..=16).collect();
        assert_eq!(hash_bytes(&sixteen), 0xC44A_9A53_D4F6_CC88);
        assert_ne!(hash_bytes(b"a"), hash_bytes(b"b"));
    }

    #[test]
    fn homes_are_spread() {
        let mut counts = [0u32; 64];
        for k in 1..=64_000u64 {
            counts[(hash_bytes(&k.to_be_bytes()) % 64) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }

    #[test]
    fn addresses_hash_to_their_mix() {
        use std::hash::BuildHasher;
        let a = dmindex_fabric::GlobalAddr::new(1, 0x40);
        assert_eq!(AddrHash.hash_one(a), mix64(a.raw()));
        assert_ne!(AddrHash.hash_one([1u8, 2, 3]), AddrHash.hash_one([1u8, 2, 4]));
    }

    #[test]
    fn fingerprints_are_pinned_and_never_zero() {
        // CHIME's hotspot buffer keeps these tags on compute nodes only, but a change would
        // still change which speculative READs a run makes.
        assert_eq!((fingerprint(1), fingerprint(42)), (0xED53, 0x4A95));
        assert_eq!(fingerprint(0xF1F1_F1F1), 1, "mix64(0) = 0: the tag is still not 0");
        assert!((0..10_000u64).all(|k| fingerprint(k) != 0 && fingerprint(k) & 1 == 1));
        assert_ne!(fingerprint(1), fingerprint(2));
    }
}
