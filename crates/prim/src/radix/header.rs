//! The inner-node header word: depth, kind and compressed prefix.
//!
//! ```text
//!  63                                        16 15  13 12  10 9          0
//! +--------------------------------------------+------+------+------------+
//! |  prefix bytes p0 … p5 (p0 in bits 16..24)  | len  | kind |   depth    |
//! +--------------------------------------------+------+------+------------+
//! ```
//!
//! `depth` is the index of the key byte that picks a child here; the prefix is the `len` key
//! bytes just before it, `key[depth - len .. depth]`, which every key below the node shares. A
//! path longer than 6 bytes with no branch is a chain of one-child nodes. Never rewritten: a path
//! split puts a new node above this one (whose prefix then repeats bytes the new node checks,
//! which is harmless: every key below still has them).

use super::node::Kind;

/// Longest prefix a header holds.
pub const MAX_PREFIX: usize = 6;
/// Deepest node: keys are at most this long.
pub const MAX_DEPTH: usize = (1 << 10) - 1;

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub depth: u16,
    pub kind: Kind,
    pub len: u8,
    pub prefix: [u8; MAX_PREFIX],
}

impl Header {
    /// The header of a node at `depth` whose prefix is `key[depth - len .. depth]`.
    pub fn new(kind: Kind, depth: usize, key: &[u8], len: usize) -> Header {
        assert!(depth <= MAX_DEPTH && len <= MAX_PREFIX && len <= depth && depth <= key.len());
        let mut prefix = [0; MAX_PREFIX];
        prefix[..len].copy_from_slice(&key[depth - len..depth]);
        Header { depth: depth as u16, kind, len: len as u8, prefix }
    }

    pub fn encode(&self) -> u64 {
        let mut p = [0u8; 8];
        p[2..].copy_from_slice(&self.prefix);
        u64::from_le_bytes(p)
            | self.depth as u64
            | (self.kind as u64) << 10
            | (self.len as u64) << 13
    }

    /// `None` for a word no header encodes (unwritten memory, foreign data).
    pub fn decode(w: u64) -> Option<Header> {
        let kind = Kind::from_bits((w >> 10 & 3) as u8);
        let len = (w >> 13 & 7) as u8;
        let depth = (w & 0x3FF) as u16;
        if w == 0 || len as usize > MAX_PREFIX || (len as u16) > depth {
            return None;
        }
        let b = w.to_le_bytes();
        let mut prefix = [0; MAX_PREFIX];
        prefix.copy_from_slice(&b[2..]);
        Some(Header { depth, kind, len, prefix })
    }

    pub fn prefix(&self) -> &[u8] {
        &self.prefix[..self.len as usize]
    }

    /// First position at or after `from` where `key` leaves this node's prefix (it differs, or
    /// ends), or `None` if it has every prefix byte from `from` on.
    pub fn mismatch(&self, key: &[u8], from: usize) -> Option<usize> {
        let (d, start) = (self.depth as usize, self.depth as usize - self.len as usize);
        (from.max(start)..d).find(|&i| key.get(i) != Some(&self.prefix[i - start]))
    }

    /// The prefix byte at key position `i` (`depth - len <= i < depth`).
    pub fn byte_at(&self, i: usize) -> u8 {
        self.prefix[i + self.len as usize - self.depth as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_pinned() {
        let h = Header::new(Kind::N16, 9, b"abcdefghij", 3);
        assert_eq!(h.prefix(), b"ghi");
        // depth 9, kind 1 << 10, len 3 << 13, then g h i at bytes 2, 3, 4.
        assert_eq!(h.encode(), 0x0000_0069_6867_6409);
        assert_eq!(Header::decode(h.encode()), Some(h));
        assert_eq!(Header::decode(0), None);
        assert_eq!(Header::decode(2 << 13 | 1), None, "a prefix longer than the depth");
    }

    #[test]
    fn mismatch_checks_from_the_given_position() {
        let h = Header::new(Kind::N4, 6, b"xyabcd", 4);
        assert_eq!(h.mismatch(b"xyabcdzz", 0), None);
        assert_eq!(h.mismatch(b"xyabXd", 0), Some(4));
        assert_eq!(h.mismatch(b"xyab", 0), Some(4), "a key that ends inside the prefix");
        assert_eq!(h.mismatch(b"QQQQcd", 4), None, "bytes before `from` were checked above");
        assert_eq!(h.byte_at(3), b'b');
    }
}
