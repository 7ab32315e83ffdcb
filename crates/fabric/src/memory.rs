//! The bytes of one memory node, shared by many threads with RDMA's guarantees and no more.
//!
//! # What a [`Region`] promises
//!
//! * **Aligned 8-byte words are atomic** for CAS, masked CAS and FAA ([`Region::atomic`]), which are
//!   real 64-bit atomic read-modify-writes.
//! * **Each 64-byte cache line is read and written as a unit**, which is what a NIC's DMA gives in
//!   practice and what cache-line versions (CHIME, Sherman) rely on. A READ or WRITE that spans
//!   several lines is *not* atomic: a READ overlapping a WRITE may return any mix of old and new
//!   lines, and a WRITE's lines land one after another in increasing address order.
//! * A verb that completed before another verb was issued is visible to it (release stores,
//!   acquire loads), so "WRITE the data, then WRITE the unlock" publishes the data to whoever
//!   acquires the lock.
//!
//! # How
//!
//! The region is an array of `AtomicU64` words, so every access is a data-race-free atomic access.
//! Line atomicity comes from a sequence lock per 64-byte line: a WRITE takes the line's sequence
//! (odd while writing), a READ copies the line optimistically and retries if the sequence moved.
//! Atomic verbs do not touch the sequence: they change one word, so a line copy that one atomic
//! interleaves with is still a snapshot of some instant. Two atomics on different words of one
//! line inside one copy (a few nanoseconds) can give a picture of no single instant, which RDMA
//! does not promise either.
//! Bytes sit in words as [`crate::words`] draws them. Both arrays are committed lazily as they
//! are touched, on small or on huge pages ([`Pages`]).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crate::verbs::{AtomicOp, BatchOp};
use crate::words::copy_in;
pub use crate::zeroed::Pages;
use crate::zeroed::Zeroed;

/// Bytes per cache line, the unit of READ/WRITE atomicity.
pub const CACHE_LINE: u64 = 64;
const WORDS_PER_LINE: usize = (CACHE_LINE / 8) as usize;

/// Asks the CPU for every cache line of `items` at once, so code that then walks them (a READ's
/// lines, a binary search) waits for memory about once rather than once per dependent step.
#[inline]
pub fn prefetch<T>(items: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let (start, len) = (items.as_ptr() as usize, std::mem::size_of_val(items));
        let line = CACHE_LINE as usize;
        let mut at = start & !(line - 1);
        while at < start + len {
            // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is only a hint: it
            // never faults and changes no memory (the address is within `items`' lines).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at as *const i8) };
            at += line;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = items;
}

/// One memory node's memory: `len` bytes, zero-initialised.
pub struct Region {
    words: Zeroed<AtomicU64>,
    seqs: Zeroed<AtomicU32>,
    len: u64,
}

impl Region {
    /// A zeroed region of `len` bytes (rounded up to whole cache lines).
    pub fn new(len: u64) -> Region {
        Self::try_new(len).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Region::new`], or an error saying the machine will not give that much memory.
    pub fn try_new(len: u64) -> Result<Region, String> {
        Self::try_with_pages(len, Pages::Small)
    }

    /// [`Region::try_new`] on pages of kind `pages`.
    pub fn try_with_pages(len: u64, pages: Pages) -> Result<Region, String> {
        let too_big = || format!("this machine cannot hold a memory node of {len} bytes");
        let len = crate::addr::align_up(len.max(CACHE_LINE), CACHE_LINE);
        let lines = usize::try_from(len / CACHE_LINE).map_err(|_| too_big())?;
        let words = lines.checked_mul(WORDS_PER_LINE).ok_or_else(too_big)?;
        Ok(Region {
            words: Zeroed::new(words, pages).ok_or_else(too_big)?,
            seqs: Zeroed::new(lines, pages).ok_or_else(too_big)?,
            len,
        })
    }

    /// Size in bytes.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region has no bytes (never: regions hold at least one line).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[offset, offset + len)` lies inside the region.
    #[inline]
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`, each cache line as one snapshot.
    ///
    /// # Panics
    /// If the range is outside the region (callers validate first).
    #[inline]
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        self.read_at(offset, buf);
    }

    /// [`Region::read`], returning the wrapping sum of the lines' sequences at the instants they
    /// were copied: [`Region::seq_sum`] of the same range minus it counts twice the WRITEs that
    /// landed on those lines since.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> u32 {
        assert!(self.contains(offset, buf.len() as u64), "read outside region");
        if buf.is_empty() {
            return 0;
        }
        let line = CACHE_LINE as usize;
        let pos = offset as usize;
        let (first, last) = line_span(pos, buf.len());
        let (words, seqs) = self.fetch_lines(first, last);
        let mut lines = words.chunks_exact(WORDS_PER_LINE).zip(seqs);
        let mut next = || lines.next().expect("a line per part of the READ");
        // A head that starts inside a line, then whole lines straight into the buffer, then a
        // tail that ends inside one.
        let mut rest = buf;
        let mut seqs = 0u32;
        let from = pos % line;
        if from != 0 {
            let n = (line - from).min(rest.len());
            let (head, tail) = rest.split_at_mut(n);
            let (w, seq) = next();
            let mut out = [0u8; CACHE_LINE as usize];
            seqs = seqs.wrapping_add(line_into(w, seq, &mut out));
            head.copy_from_slice(&out[from..from + n]);
            rest = tail;
        }
        let mut whole = rest.chunks_exact_mut(line);
        for dst in &mut whole {
            let (w, seq) = next();
            seqs = seqs.wrapping_add(line_into(w, seq, dst.try_into().expect("a whole line")));
        }
        let tail = whole.into_remainder();
        if !tail.is_empty() {
            let (w, seq) = next();
            let n = tail.len();
            let mut out = [0u8; CACHE_LINE as usize];
            seqs = seqs.wrapping_add(line_into(w, seq, &mut out));
            tail.copy_from_slice(&out[..n]);
        }
        seqs
    }

    /// The wrapping sum of the current sequences of the lines `[offset, offset + len)` touches
    /// (the range is inside the region: callers READ it first).
    #[inline]
    pub fn seq_sum(&self, offset: u64, len: usize) -> u32 {
        if len == 0 {
            return 0;
        }
        let (first, last) = line_span(offset as usize, len);
        self.seqs[first..=last]
            .iter()
            .fold(0u32, |sum, seq| sum.wrapping_add(seq.load(Ordering::Acquire)))
    }

    /// Asks the CPU for every line of `[pos, pos + len)` and their sequences at once, so a
    /// multi-line READ waits for memory about once rather than once per line (as a NIC's DMA
    /// engine fetches a READ's lines in parallel).
    #[inline]
    pub fn prefetch(&self, pos: usize, len: usize) {
        let (first, last) = line_span(pos, len.max(1));
        self.fetch_lines(first, last);
    }

    /// The words and sequences of lines `first ..= last`, bounds-checked once and asked of the
    /// CPU at once.
    #[inline]
    fn fetch_lines(&self, first: usize, last: usize) -> (&[AtomicU64], &[AtomicU32]) {
        let words = &self.words[first * WORDS_PER_LINE..(last + 1) * WORDS_PER_LINE];
        let seqs = &self.seqs[first..=last];
        prefetch(words);
        prefetch(seqs);
        (words, seqs)
    }

    /// Stores `data` at `offset`, line by line in increasing address order, each line as a unit.
    ///
    /// # Panics
    /// If the range is outside the region (callers validate first).
    pub fn write(&self, offset: u64, data: &[u8]) {
        assert!(self.contains(offset, data.len() as u64), "write outside region");
        let mut pos = offset as usize;
        let mut inp = 0;
        while inp < data.len() {
            let line = pos / CACHE_LINE as usize;
            let line_end = (line + 1) * CACHE_LINE as usize;
            let n = (line_end - pos).min(data.len() - inp);
            self.write_in_line(line, pos, &data[inp..inp + n]);
            pos += n;
            inp += n;
        }
    }

    fn write_in_line(&self, line: usize, pos: usize, src: &[u8]) {
        let seq = &self.seqs[line];
        let s = loop {
            let s = seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && seq
                    .compare_exchange_weak(
                        s,
                        s.wrapping_add(1),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break s;
            }
            std::hint::spin_loop();
        };
        fence(Ordering::Release);
        copy_in(&self.words, pos, src);
        seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Applies an atomic verb to the aligned word at `offset`; returns the old word.
    ///
    /// # Panics
    /// If `offset` is misaligned or outside the region (callers validate first).
    pub fn atomic(&self, offset: u64, op: AtomicOp) -> u64 {
        assert!(offset % 8 == 0 && self.contains(offset, 8), "bad atomic offset");
        op.apply_to(&self.words[(offset / 8) as usize])
    }

    /// Reads the aligned word at `offset` atomically (a convenience for memory-node services).
    pub fn load_word(&self, offset: u64) -> u64 {
        assert!(offset % 8 == 0 && self.contains(offset, 8), "bad word offset");
        self.words[(offset / 8) as usize].load(Ordering::SeqCst)
    }
}

/// What a memory node's CPU can do to its own memory: what its services
/// ([`crate::service::Service`]) and [`crate::layout::format`] work through. A [`Region`] is one;
/// a transport that keeps a node's memory elsewhere implements it for that memory.
pub trait MnMemory: Sync {
    /// Region size.
    fn size(&self) -> u64;
    /// Copy bytes out.
    fn read(&self, offset: u64, buf: &mut [u8]);
    /// Copy bytes in.
    fn write(&self, offset: u64, data: &[u8]);
    /// Atomic verb on an aligned word; returns the old word.
    fn atomic(&self, offset: u64, op: AtomicOp) -> u64;
    /// Zeroes `len` bytes at `offset` (memory handed out again: a restarted node, a reused table).
    fn zero(&self, offset: u64, len: u64) {
        let zeros = [0u8; 4096];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64);
            self.write(offset + at, &zeros[..n as usize]);
            at += n;
        }
    }
    /// A doorbell batch's verbs, in order, each done as the memory's own CPU would (a transport
    /// that reaches the memory directly: `local`, a mapped pool).
    #[inline]
    fn apply(&self, ops: &mut [BatchOp<'_>]) {
        for op in ops.iter_mut() {
            match op {
                BatchOp::Read { addr, buf } => self.read(addr.offset(), buf),
                BatchOp::Write { addr, data } => self.write(addr.offset(), data),
                BatchOp::Atomic { addr, op, old } => *old = self.atomic(addr.offset(), *op),
            }
        }
    }
}

impl MnMemory for Region {
    fn size(&self) -> u64 {
        Region::len(self)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        Region::read(self, offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) {
        Region::write(self, offset, data)
    }
    fn atomic(&self, offset: u64, op: AtomicOp) -> u64 {
        Region::atomic(self, offset, op)
    }
}

/// The first and last cache lines that `len > 0` bytes at `pos` touch.
#[inline]
pub(crate) fn line_span(pos: usize, len: usize) -> (usize, usize) {
    let line = CACHE_LINE as usize;
    (pos / line, (pos + len - 1) / line)
}

/// A line's eight `words` into `dst` as one snapshot: loaded between two equal, even readings of
/// its sequence `seq` (a WRITE of the line in between makes it odd, or moves it on). Returns that
/// sequence.
#[inline]
fn line_into(words: &[AtomicU64], seq: &AtomicU32, dst: &mut [u8; CACHE_LINE as usize]) -> u32 {
    loop {
        let s1 = seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        for (chunk, w) in dst.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        fence(Ordering::Acquire);
        if seq.load(Ordering::Relaxed) == s1 {
            return s1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::tests::{agrees_with_bytes, byte_ops};
    use proptest::prelude::*;

    #[test]
    fn byte_order_is_little_endian_words() {
        let r = Region::new(128);
        r.write(8, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(r.load_word(8), 0x0807_0605_0403_0201);
        assert_eq!(r.atomic(8, AtomicOp::Faa { delta: 1 }), 0x0807_0605_0403_0201);
        let mut b = [0u8; 3];
        r.read(8, &mut b);
        assert_eq!(b, [2, 2, 3]);
    }

    #[test]
    fn size_rounds_to_lines() {
        assert_eq!(Region::new(1).len(), 64);
        assert_eq!(Region::new(65).len(), 128);
        assert!(Region::new(64).contains(0, 64));
        assert!(!Region::new(64).contains(1, 64));
        assert!(!Region::new(64).contains(u64::MAX, 2));
    }

    proptest! {
        /// Reads and writes at any offset and length agree with a plain byte array.
        #[test]
        fn matches_byte_model(ops in byte_ops()) {
            let r = Region::new(512);
            agrees_with_bytes(ops, |o, b| r.read(o, b), |o, d| r.write(o, d))?;
        }
    }
}
