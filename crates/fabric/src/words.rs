//! Bytes kept in aligned 64-bit atomic words: the copies every in-process view of a memory node
//! is built on, and [`SharedWords`], a memory node's pool mapped into a client's process.
//!
//! # Layout
//!
//! Byte `i` is byte `i % 8` of word `i / 8` in little-endian order, so atomic verbs see words in
//! host (x86, RDMA) byte order:
//!
//! ```text
//! bytes:  | 0 1 2 3 4 5 6 7 | 8 9 10 11 12 13 14 15 | ...
//! words:  | word 0 (LE)     | word 1 (LE)           | ...
//! ```
//!
//! # Copies
//!
//! A copy out loads each word it touches once (acquire); a copy in stores whole words (release)
//! and merges a partial word by CAS, so that a concurrent atomic verb on the word's other bytes
//! is never undone. Every access is atomic, so concurrent verbs are never a data race; a copy of
//! several words is not a snapshot (a concurrent WRITE can show in some words and not others).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::memory::MnMemory;
use crate::verbs::AtomicOp;

/// Stores `src` at bytes `[pos, pos + src.len())` of `words`.
#[inline]
pub(crate) fn copy_in(words: &[AtomicU64], pos: usize, src: &[u8]) {
    if src.is_empty() {
        // Nothing to merge (and a merge of no bytes has no mask).
        return;
    }
    let mut p = pos;
    let mut i = 0;
    if p % 8 != 0 {
        let n = (8 - p % 8).min(src.len());
        merge_bytes(&words[p / 8], p % 8, &src[..n]);
        p += n;
        i += n;
    }
    let whole = (src.len() - i) / 8;
    for (chunk, word) in src[i..i + whole * 8].chunks_exact(8).zip(&words[p / 8..p / 8 + whole]) {
        word.store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Release);
    }
    p += whole * 8;
    i += whole * 8;
    if i < src.len() {
        merge_bytes(&words[p / 8], 0, &src[i..]);
    }
}

/// Loads bytes `[pos, pos + dst.len())` of `words` into `dst`, each word touched once.
#[inline]
pub(crate) fn copy_out(words: &[AtomicU64], pos: usize, dst: &mut [u8]) {
    let mut p = pos;
    let mut rest = dst;
    if p % 8 != 0 && !rest.is_empty() {
        let (b, n) = (p % 8, (8 - p % 8).min(rest.len()));
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&words[p / 8].load(Ordering::Acquire).to_le_bytes()[b..b + n]);
        (p, rest) = (p + n, tail);
    }
    // Whole words eight at a time: fixed-size blocks compile to straight loads and stores,
    // without a bounds check or a loop test per word (244 -> 172 instructions for a
    // neighbourhood's READ).
    let mut lines = rest.chunks_exact_mut(64);
    for (block, ws) in (&mut lines).zip(words[p / 8..].chunks_exact(8)) {
        for (chunk, word) in block.chunks_exact_mut(8).zip(ws) {
            chunk.copy_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
        }
        p += 64;
    }
    let mut whole = lines.into_remainder().chunks_exact_mut(8);
    for (chunk, word) in (&mut whole).zip(&words[p / 8..]) {
        chunk.copy_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
        p += 8;
    }
    let tail = whole.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&words[p / 8].load(Ordering::Acquire).to_le_bytes()[..n]);
    }
}

/// Replaces bytes `b..b + src.len()` of one word, atomically with respect to other verbs on it.
#[inline]
fn merge_bytes(word: &AtomicU64, b: usize, src: &[u8]) {
    let n = src.len();
    let mut bytes = [0u8; 8];
    bytes[b..b + n].copy_from_slice(src);
    let val = u64::from_le_bytes(bytes);
    let mask = (u64::MAX >> (64 - 8 * n as u32)) << (8 * b as u32);
    let _ = word.fetch_update(Ordering::Release, Ordering::Relaxed, |old| {
        Some((old & !mask) | (val & mask))
    });
}

/// Memory shared with other processes (a memory node's pool, mapped into this one), reached word
/// by word: aligned words are atomic, as RDMA's are; a multi-word READ or WRITE is not a unit,
/// not even within a cache line (what a CPU's copy of shared memory gives, and what a transport
/// that copies through a mapping gives too).
#[derive(Clone, Copy)]
pub struct SharedWords<'a> {
    words: &'a [AtomicU64],
}

impl<'a> SharedWords<'a> {
    /// The `len` bytes at `base`, or `None` if `base` is not 8-byte aligned or `len` is not a
    /// multiple of 8.
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes for `'a`, and every access to
    /// those bytes from this process during `'a` must be atomic (through this type, or another
    /// of its kind).
    pub unsafe fn from_raw(base: *mut u8, len: usize) -> Option<SharedWords<'a>> {
        if base as usize % 8 != 0 || len % 8 != 0 {
            return None;
        }
        // SAFETY: aligned (checked), valid for `len` bytes for 'a and only accessed atomically
        // (the caller's promise); AtomicU64 has u64's size and alignment.
        let words = unsafe { std::slice::from_raw_parts(base as *const AtomicU64, len / 8) };
        Some(SharedWords { words })
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// A memory node's pool as its own CPU, or a client that mapped it, sees it.
impl MnMemory for SharedWords<'_> {
    fn size(&self) -> u64 {
        self.len()
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    ///
    /// # Panics
    /// If the range is outside the memory (callers validate first).
    fn read(&self, offset: u64, buf: &mut [u8]) {
        assert!(offset.checked_add(buf.len() as u64).is_some_and(|e| e <= self.len()));
        copy_out(self.words, offset as usize, buf);
    }

    /// Stores `data` at `offset`, in increasing address order.
    ///
    /// # Panics
    /// If the range is outside the memory (callers validate first).
    fn write(&self, offset: u64, data: &[u8]) {
        assert!(offset.checked_add(data.len() as u64).is_some_and(|e| e <= self.len()));
        copy_in(self.words, offset as usize, data);
    }

    /// Applies an atomic verb to the aligned word at `offset`; returns the old word.
    ///
    /// # Panics
    /// If `offset` is misaligned or outside the memory (callers validate first).
    fn atomic(&self, offset: u64, op: AtomicOp) -> u64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len(), "bad atomic offset");
        op.apply_to(&self.words[(offset / 8) as usize])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shared(words: &mut [u64]) -> SharedWords<'_> {
        // SAFETY: the words are ours, aligned, for the borrow, and only reached through this.
        unsafe { SharedWords::from_raw(words.as_mut_ptr() as *mut u8, words.len() * 8) }
            .expect("aligned")
    }

    #[test]
    fn byte_order_is_little_endian_words() {
        let mut w = [0u64; 4];
        let m = shared(&mut w);
        m.write(8, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(m.atomic(8, AtomicOp::Faa { delta: 1 }), 0x0807_0605_0403_0201);
        let mut b = [0u8; 3];
        m.read(8, &mut b);
        assert_eq!(b, [2, 2, 3]);
        let mut w = [0u64; 2];
        // SAFETY: as in `shared`; the pointer is one byte past an aligned one.
        let odd = unsafe { SharedWords::from_raw((w.as_mut_ptr() as *mut u8).add(1), 8) };
        assert!(odd.is_none(), "a misaligned base is refused");
    }

    #[test]
    fn partial_and_empty_writes_keep_the_other_bytes() {
        let mut w = [0u64; 2];
        let m = shared(&mut w);
        m.atomic(0, AtomicOp::Faa { delta: 0xff00_0000_0000_0000 });
        m.write(1, &[7, 7]);
        m.write(5, &[]);
        let mut b = [0u8; 8];
        m.read(0, &mut b);
        assert_eq!(b, [0, 7, 7, 0, 0, 0, 0, 0xff]);
    }

    /// Every start and length across a few words, up to two and a half 64-byte blocks of
    /// whole words: a READ returns exactly the bytes there, and a WRITE changes exactly its own.
    #[test]
    fn every_offset_and_length_reads_and_writes_its_bytes() {
        let mut w = [0u64; 24];
        let m = shared(&mut w);
        let pattern: Vec<u8> = (1..=192).collect();
        for pos in 0..24 {
            for len in 0..=160 {
                m.write(0, &pattern);
                let mut buf = vec![0u8; len];
                m.read(pos as u64, &mut buf);
                assert_eq!(buf, pattern[pos..pos + len], "READ of {len} at {pos}");
                m.write(pos as u64, &vec![0xEE; len]);
                let mut model = pattern.clone();
                model[pos..pos + len].fill(0xEE);
                let mut all = [0u8; 192];
                m.read(0, &mut all);
                assert_eq!(all[..], model[..], "WRITE of {len} at {pos}");
            }
        }
    }

    /// Replays `ops` (offset, bytes, whether a WRITE) on 512 bytes reached by `read` and
    /// `write`, and on a plain byte array: every READ, and the whole memory at the end, agree.
    pub(crate) fn agrees_with_bytes(
        ops: Vec<(u64, Vec<u8>, bool)>,
        read: impl Fn(u64, &mut [u8]),
        write: impl Fn(u64, &[u8]),
    ) -> Result<(), TestCaseError> {
        let mut model = vec![0u8; 512];
        for (off, data, is_write) in ops {
            let len = data.len().min(512 - off as usize);
            if is_write {
                write(off, &data[..len]);
                model[off as usize..off as usize + len].copy_from_slice(&data[..len]);
            } else {
                let mut buf = vec![0xAAu8; len];
                read(off, &mut buf);
                prop_assert_eq!(&buf[..], &model[off as usize..off as usize + len]);
            }
        }
        let mut all = vec![0u8; 512];
        read(0, &mut all);
        prop_assert_eq!(all, model);
        Ok(())
    }

    /// Operations for [`agrees_with_bytes`].
    pub(crate) fn byte_ops() -> impl Strategy<Value = Vec<(u64, Vec<u8>, bool)>> {
        prop::collection::vec(
            (0u64..300, prop::collection::vec(any::<u8>(), 0..150), any::<bool>()),
            1..40,
        )
    }

    proptest! {
        /// Reads and writes at any offset and length agree with a plain byte array.
        #[test]
        fn matches_byte_model(ops in byte_ops()) {
            let mut w = [0u64; 64];
            let m = shared(&mut w);
            agrees_with_bytes(ops, |o, b| m.read(o, b), |o, d| m.write(o, d))?;
        }
    }
}
