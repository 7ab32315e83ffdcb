//! [`ScanBuf`]: where a scan puts its pairs, reused from one scan to the next.
//!
//! A scan that returns owned pairs ([`crate::Pair`]) allocates twice per pair; a 100-pair scan
//! made over a hundred allocations, about 40 % of its time. A `ScanBuf` lays the keys end to
//! end in one byte vector and the values in another, with each pair's offsets in a third, so a
//! caller that keeps one buffer per client allocates nothing once the vectors have grown to its
//! largest scan. Clearing it keeps their memory.
//!
//! An index fills it in key order with [`ScanBuf::push`] (or [`ScanBuf::push_with`], which
//! writes the value in place); one that gathers pairs out of order (a hash-ordered leaf, several
//! replicas' answers) may sort and trim what it pushed ([`ScanBuf::sort_from`],
//! [`ScanBuf::truncate`], [`ScanBuf::retain`]): these move offsets only, never bytes.

use crate::Pair;

/// Where one pair's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct At {
    key: usize,
    key_len: usize,
    value: usize,
    value_len: usize,
}

/// A scan's pairs, keys and values flat in reusable vectors (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct ScanBuf {
    keys: Vec<u8>,
    values: Vec<u8>,
    pairs: Vec<At>,
}

impl ScanBuf {
    /// An empty buffer; it grows as scans fill it.
    pub fn new() -> ScanBuf {
        ScanBuf::default()
    }

    /// An empty buffer with room for `pairs` pairs of `key` and `value` bytes each, so that
    /// even the first scan of that size allocates nothing.
    pub fn with_capacity(pairs: usize, key: usize, value: usize) -> ScanBuf {
        ScanBuf {
            keys: Vec::with_capacity(pairs.saturating_mul(key)),
            values: Vec::with_capacity(pairs.saturating_mul(value)),
            pairs: Vec::with_capacity(pairs),
        }
    }

    /// Forgets every pair, keeping the memory.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        self.pairs.clear();
    }

    /// Pairs held.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether it holds no pair.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Appends a pair.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        self.push_with(key, |v| v.extend_from_slice(value));
    }

    /// Appends a pair whose value `value` writes in place: it appends the value's bytes to the
    /// vector it is given (and must not touch what is already there). For values assembled
    /// from pieces (a multi-line cell) without a copy in between.
    pub fn push_with(&mut self, key: &[u8], value: impl FnOnce(&mut Vec<u8>)) {
        let (k, v) = (self.keys.len(), self.values.len());
        self.keys.extend_from_slice(key);
        value(&mut self.values);
        debug_assert!(self.values.len() >= v, "a value writer removed earlier values' bytes");
        let value_len = self.values.len().saturating_sub(v);
        self.pairs.push(At { key: k, key_len: key.len(), value: v, value_len });
    }

    /// The key of pair `i`. Panics if `i` is out of range, as a slice index does.
    pub fn key(&self, i: usize) -> &[u8] {
        let a = self.pairs[i];
        &self.keys[a.key..a.key + a.key_len]
    }

    /// The value of pair `i`. Panics if `i` is out of range, as a slice index does.
    pub fn value(&self, i: usize) -> &[u8] {
        let a = self.pairs[i];
        &self.values[a.value..a.value + a.value_len]
    }

    /// Pair `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        (i < self.len()).then(|| (self.key(i), self.value(i)))
    }

    /// The last pair's key.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.len().checked_sub(1).map(|i| self.key(i))
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.value(i)))
    }

    /// Keeps the first `n` pairs (their bytes stay until the next [`ScanBuf::clear`]).
    pub fn truncate(&mut self, n: usize) {
        self.pairs.truncate(n);
    }

    /// Keeps the pairs for which `keep(key, value)` holds, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        let (keys, values) = (&self.keys, &self.values);
        self.pairs.retain(|a| {
            keep(&keys[a.key..a.key + a.key_len], &values[a.value..a.value + a.value_len])
        });
    }

    /// Sorts the pairs from the `start`-th on by key (pairs of equal keys in any order),
    /// moving their offsets, not their bytes; allocates nothing.
    pub fn sort_from(&mut self, start: usize) {
        let keys = &self.keys;
        let Some(tail) = self.pairs.get_mut(start..) else { return };
        tail.sort_unstable_by(|a, b| {
            keys[a.key..a.key + a.key_len].cmp(&keys[b.key..b.key + b.key_len])
        });
    }

    /// Appends every pair, as owned pairs, to `out`.
    pub fn extend_pairs(&self, out: &mut Vec<Pair>) {
        out.reserve(self.len());
        out.extend(self.iter().map(|(k, v)| (k.to_vec(), v.to_vec())));
    }

    /// The pairs as owned pairs.
    pub fn to_pairs(&self) -> Vec<Pair> {
        let mut out = Vec::new();
        self.extend_pairs(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_come_back_as_pushed_sorted_and_trimmed() {
        let mut b = ScanBuf::new();
        assert!(b.is_empty() && b.get(0).is_none() && b.last_key().is_none());
        b.push(b"k3", b"three");
        b.push(b"k1", b"");
        b.push_with(b"k22", |v| {
            v.extend_from_slice(b"tw");
            v.push(b'o');
        });
        assert_eq!(b.len(), 3);
        assert_eq!(b.get(2), Some((&b"k22"[..], &b"two"[..])));
        assert_eq!(b.value(1), b"");
        b.sort_from(1);
        assert_eq!(b.to_pairs(), [pair("k3", "three"), pair("k1", ""), pair("k22", "two")]);
        b.sort_from(0);
        assert_eq!(b.to_pairs(), [pair("k1", ""), pair("k22", "two"), pair("k3", "three")]);
        assert_eq!(b.last_key(), Some(&b"k3"[..]));
        b.retain(|k, v| k != b"k22" && v != b"nothing");
        assert_eq!(b.to_pairs(), [pair("k1", ""), pair("k3", "three")]);
        b.truncate(1);
        let mut owned = vec![pair("already", "here")];
        b.extend_pairs(&mut owned);
        assert_eq!(owned, [pair("already", "here"), pair("k1", "")]);
        b.sort_from(5);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn a_cleared_buffer_keeps_its_memory() {
        let mut b = ScanBuf::with_capacity(4, 2, 8);
        let at = |b: &ScanBuf| (b.keys.as_ptr(), b.values.as_ptr(), b.pairs.as_ptr());
        let first = at(&b);
        for round in 0..3u8 {
            b.clear();
            for i in 0..4u8 {
                b.push(&[round, i], &[i; 8]);
            }
            assert_eq!(b.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>()[3], [round, 3]);
            assert_eq!(at(&b), first, "round {round} moved the buffer's memory");
        }
        assert_eq!(b.value(3), [3; 8]);
    }

    fn pair(k: &str, v: &str) -> Pair {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }
}
