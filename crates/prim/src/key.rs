//! Fixed 8-byte keys, compared as big-endian integers (the designs whose leaves hold a key in one
//! CAS-able word: Dolphin, Marlin): the word a key is stored as, and scan bounds rounded to keys.
//! Key 0 is reserved: a zero key word marks a free entry.

use dmindex_index::{IndexError, IndexResult};

/// Bytes of a key.
pub const BYTES: usize = 8;

/// The key as the integer a leaf stores: `InvalidKey` (naming `index`) unless exactly 8 bytes
/// and not all zero.
pub fn word(key: &[u8], index: &str) -> IndexResult<u64> {
    let Ok(b) = <[u8; BYTES]>::try_from(key) else {
        return Err(IndexError::InvalidKey(format!(
            "{index} keys are exactly {BYTES} bytes, got {}",
            key.len()
        )));
    };
    match u64::from_be_bytes(b) {
        0 => Err(IndexError::InvalidKey("the all-zero key is reserved (a free entry)".into())),
        k => Ok(k),
    }
}

/// The smallest key at or after `bound` (which may be shorter or longer than a key), if any.
pub fn ceil(bound: &[u8]) -> Option<u64> {
    let mut b = [0u8; BYTES];
    let n = bound.len().min(BYTES);
    b[..n].copy_from_slice(&bound[..n]);
    let k = u64::from_be_bytes(b);
    if bound.len() > BYTES && bound[BYTES..].iter().any(|&x| x != 0) {
        // A longer bound sorts after its first 8 bytes.
        k.checked_add(1)
    } else {
        Some(k)
    }
    .map(|k| k.max(1))
}

/// Where a scan from `from` starts: the smallest key at or after it, if any; a bound longer than
/// a key is `KeyTooLong` (a scan's start is a key the index could hold).
pub fn scan_from(from: &[u8]) -> IndexResult<Option<u64>> {
    if from.len() > BYTES {
        return Err(IndexError::KeyTooLong { len: from.len(), max: BYTES });
    }
    Ok(ceil(from))
}

/// The keys of `[lo, hi)` as an inclusive range of words, if any.
pub fn range(lo: &[u8], hi: &[u8]) -> Option<(u64, u64)> {
    let lo = ceil(lo)?;
    // Keys below `hi` are the keys below its ceiling (every key, if it has none).
    match ceil(hi) {
        Some(h) if h <= lo => None,
        Some(h) => Some((lo, h - 1)),
        None => Some((lo, u64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_bounds() {
        assert_eq!(ceil(b""), Some(1), "key 0 does not exist");
        assert_eq!(ceil(b"ab"), Some(u64::from_be_bytes(*b"ab\0\0\0\0\0\0")));
        assert_eq!(ceil(b"abcdefgh"), Some(u64::from_be_bytes(*b"abcdefgh")));
        assert_eq!(ceil(b"abcdefgh\0"), Some(u64::from_be_bytes(*b"abcdefgh")));
        assert_eq!(ceil(b"abcdefgh\x01"), Some(u64::from_be_bytes(*b"abcdefgi")));
        assert_eq!(ceil(&[0xFF; 9]), None);
        assert!(word(&[0; 8], "t").is_err() && word(b"short", "t").is_err());
        assert_eq!(word(&[0, 0, 0, 0, 0, 0, 1, 2], "t").unwrap(), 0x102);
        assert_eq!(range(b"", &5u64.to_be_bytes()), Some((1, 4)));
        assert_eq!(scan_from(b"ab").unwrap(), ceil(b"ab"));
        assert!(matches!(scan_from(&[1; 9]), Err(IndexError::KeyTooLong { len: 9, max: 8 })));
        assert_eq!(range(&5u64.to_be_bytes(), &5u64.to_be_bytes()), None);
        assert_eq!(range(&5u64.to_be_bytes(), &[0xFF; 9]), Some((5, u64::MAX)));
    }
}
