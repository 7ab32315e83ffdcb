//! The 64-bit hash every index uses to place keys (hopscotch home entries, hash tables).
//!
//! A multiply-xorshift mix (the `splitmix64` finaliser) of the key's first 8 bytes folded with
//! the rest: fast, stable across platforms and versions, and well spread in every bit.

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
    let mut h = 0x9E37_79B9_7F4A_7C15u64 ^ b.len() as u64;
    for chunk in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix64(h ^ u64::from_le_bytes(w));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_values() {
        // Changing these moves every key in every stored index: they are part of the layout.
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161D_100B_05E5);
        assert_eq!(hash_bytes(&1u64.to_be_bytes()), hash_bytes(&[0, 0, 0, 0, 0, 0, 0, 1]));
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
}
