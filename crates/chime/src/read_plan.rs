//! Read plans: everything about one neighbourhood READ that depends only on the leaf's geometry
//! and the home slot, worked out once per home when a tree handle is made, so that a search
//! does no layout arithmetic (no division, no range search) per operation.
//!
//! # What a plan says
//!
//! For the slots `lo .. lo + n` (circularly) and the replica they need
//! ([`LeafLayout::read_ranges`]):
//!
//! ```text
//! reads:    [(physical offset in the leaf, length)]     pieces READ back to back into `raw`
//! checks:   [(line version in raw, its owner's version byte in raw)]   must be equal
//! runs:     [(from in raw, to in window, length)]       each line's data, without its version
//! slots:    [window offset of slot lo + j]
//! replicas: [window offset of each replica read]
//! pieces:   [(d0, d1, window offset)]                   decoded ranges, for writing back
//! ```
//!
//! A READ is valid when every check holds (no line torn) and every object — each slot and each
//! replica — carries one node-level version; the neighbourhood
//! ([`crate::neighbourhood::Neighbourhood`]) applies a plan to its buffers.

use std::mem::MaybeUninit;

use arrayvec::ArrayVec;
use dmindex_prim::cacheline::{phys, phys_range, Objects, LINE};
use smallvec::SmallVec;

use dmindex_prim::version;

use crate::layout::{LeafLayout, Ranges, ENTRY, MAX_H, REPLICA_FENCED};
use crate::leaf::Invalid;
use crate::view::wrap;

/// Bytes after a buffer's data so that every line's data moves as one fixed 64-byte copy.
pub const SLACK: usize = 64;

/// Decoded bytes a neighbourhood READ can cover: H entries and up to three headers.
pub const WINDOW: usize = MAX_H * ENTRY + 3 * REPLICA_FENCED;
/// Physical bytes of such a READ: its decoded bytes plus a line version per 63 and one leading
/// line version per piece.
pub const RAW: usize = WINDOW + WINDOW.div_ceil(63) + 3;
/// Most lines a neighbourhood READ spans (a run and a check per line, plus one of each per
/// piece): a plan that size keeps everything inline; a whole leaf's spills to the heap.
const LINES: usize = RAW.div_ceil(LINE) + 3;

/// One planned READ of a window of a leaf (see the module docs). Offsets within the READ are
/// `u16` (the largest leaf, 1024 entries with H = 2, replicated and fenced, is about 33 KB), so
/// that a neighbourhood's plan, read on every search, spans a few cache lines rather than eight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    pub reads: ArrayVec<(u32, u32), 3>,
    pub checks: SmallVec<[(u16, u16); LINES]>,
    pub runs: SmallVec<[(u16, u16, u8); LINES]>,
    pub lo: usize,
    pub count: usize,
    pub slots: SmallVec<[u16; MAX_H]>,
    pub replicas: SmallVec<[u16; 4]>,
    pub pieces: ArrayVec<(usize, usize, usize), 3>,
    /// Physical bytes READ, and decoded bytes in the window.
    pub raw_len: usize,
    pub window_len: usize,
}

impl ReadPlan {
    /// The plan for slots `lo .. lo + n` with their replica (the whole leaf when `n` is its
    /// span), or for entry `lo` alone (`entry_only`: a speculative read, no replica).
    pub fn new(l: &LeafLayout, lo: usize, n: usize, entry_only: bool) -> ReadPlan {
        assert!(n >= 1 && n <= l.span, "a READ plan covers 1 ..= span slots, not {n}");
        let ranges: Ranges = if entry_only {
            let e = l.entry(lo);
            [(e, e + l.entry_len)].into_iter().collect()
        } else {
            l.read_ranges(lo, n)
        };
        let mut plan = ReadPlan {
            reads: ArrayVec::new(),
            checks: SmallVec::new(),
            runs: SmallVec::new(),
            lo,
            count: n,
            slots: SmallVec::new(),
            replicas: SmallVec::new(),
            pieces: ArrayVec::new(),
            raw_len: 0,
            window_len: 0,
        };
        let group = l.group();
        let (mut off, mut at) = (0, 0);
        for &(d0, d1) in &ranges {
            let (p0, p1) = phys_range(d0, d1);
            plan.reads.push((p0 as u32, (p1 - p0) as u32));
            plan.pieces.push((d0, d1, at));
            // A line version must equal its first data byte's owner's version (the owner starts
            // inside the piece: READs start at objects).
            let mut b = p0.max(LINE).div_ceil(LINE) * LINE;
            while b < p1 {
                let owner = l.object_start(b + 1 - b / LINE);
                assert!(owner >= d0, "line {b} is owned by an object before the READ");
                plan.checks.push(((off + b - p0) as u16, (off + phys(owner) - p0) as u16));
                b += LINE;
            }
            // Each line's data, in order, without its version byte.
            let (mut ph, mut d) = (p0, d0);
            while ph < p1 {
                if ph >= LINE && ph % LINE == 0 {
                    ph += 1;
                    continue;
                }
                let len = ((ph / LINE + 1) * LINE).min(p1) - ph;
                plan.runs.push(((off + ph - p0) as u16, (at + d - d0) as u16, len as u8));
                (ph, d) = (ph + len, d + len);
            }
            // Replicas start at group boundaries.
            let mut g = d0.div_ceil(group) * group;
            while g < d1 {
                plan.replicas.push((at + g - d0) as u16);
                g += group;
            }
            (off, at) = (off + p1 - p0, at + d1 - d0);
        }
        (plan.raw_len, plan.window_len) = (off, at);
        assert!(off <= u16::MAX as usize, "a READ of {off} bytes is past a plan's offsets");
        for j in 0..n {
            let e = l.entry(wrap(lo + j, l.span));
            let &(d0, _, at) =
                plan.pieces.iter().find(|&&(d0, d1, _)| d0 <= e && e < d1).expect("slot read");
            plan.slots.push((at + e - d0) as u16);
        }
        plan
    }

    /// Whether the objects a decoded `window` holds carry more than one node-level version.
    #[inline]
    pub fn nv_mixed(&self, window: &[u8]) -> bool {
        let first = window[*self.replicas.first().unwrap_or(&self.slots[0]) as usize];
        let objects = self.slots.iter().chain(&self.replicas);
        version::nv_mixed(objects.fold(0, |d, &o| d | (window[o as usize] ^ first)))
    }

    /// Whether a line of the READ in `raw` is torn: its version differs from its owner's.
    #[inline]
    fn torn(&self, raw: &[u8]) -> bool {
        self.checks.iter().any(|&(line, owner)| raw[line as usize] != raw[owner as usize])
    }

    /// Checks a READ by this plan in `raw` (followed by at least [`SLACK`] more bytes): every
    /// line's version against its object's, then copies each line's data into `window`; `Err`
    /// if a line is torn. Node-level versions are [`ReadPlan::nv_mixed`]'s.
    #[inline]
    pub fn copy_lines(&self, raw: &[u8], window: &mut [u8]) -> Result<(), Invalid> {
        if self.torn(raw) {
            return Err(Invalid::Torn);
        }
        for &(from, to, _) in &self.runs {
            let (from, to) = (from as usize, to as usize);
            // Past a run's own bytes this copies garbage that the next run (or the slack) takes.
            window[to..to + SLACK].copy_from_slice(&raw[from..from + SLACK]);
        }
        Ok(())
    }

    /// [`ReadPlan::copy_lines`] into a window not yet initialised. On `Ok`, returns how long a
    /// prefix of `window` the runs wrote back to back from 0 (each writes [`SLACK`] bytes, at
    /// least its own): `window_len` or more for every plan [`ReadPlan::new`] makes (pinned by
    /// a test), less only for a plan changed since.
    #[inline]
    pub fn copy_lines_uninit(
        &self,
        raw: &[u8],
        window: &mut [MaybeUninit<u8>],
    ) -> Result<usize, Invalid> {
        if self.torn(raw) {
            return Err(Invalid::Torn);
        }
        let mut written = 0;
        for &(from, to, _) in &self.runs {
            let (from, to) = (from as usize, to as usize);
            let (src, dst) = (&raw[from..from + SLACK], &mut window[to..to + SLACK]);
            // SAFETY: both ranges were bounds-checked just above to be SLACK bytes long; they
            // lie in different buffers; `MaybeUninit<u8>` has `u8`'s layout, and writing
            // initialised bytes into it is always allowed.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), SLACK)
            };
            if to <= written {
                written = written.max(to + SLACK);
            }
        }
        Ok(written)
    }

    /// Encodes decoded bytes `[d0, d1)` of the leaf — whole objects within one piece of this
    /// plan — from `window` (decoded by this plan) into `out`, as the physical bytes a WRITE
    /// of them puts in place: the READ's decoding run backwards, each line's data by its run
    /// (clipped to the range), then each line's version as its owner's, by its check (the
    /// owner lies in the range: writes cover whole objects). What
    /// [`dmindex_prim::cacheline::encode_window`] gives, without its layout arithmetic; returns
    /// the bytes written.
    pub fn encode_range(&self, window: &[u8], d0: usize, d1: usize, out: &mut [u8]) -> usize {
        let (q0, q1) = phys_range(d0, d1);
        // Where the range's piece sits in the READ and in the window.
        let mut off = 0;
        let mut found = None;
        for (&(pd0, pd1, at), &(p0, n)) in self.pieces.iter().zip(&self.reads) {
            if pd0 <= d0 && d1 <= pd1 {
                found = Some((off, p0 as usize, at + d0 - pd0, at + d1 - pd0));
                break;
            }
            off += n as usize;
        }
        let (off, p0, w0, w1) = found.expect("a written range lies in one piece read");
        // `out[i]` is the READ's byte `base + i`.
        let (base, end) = (off + q0 - p0, off + q1 - p0);
        for &(from, to, len) in &self.runs {
            let (from, to, len) = (from as usize, to as usize, len as usize);
            if to >= w1 {
                break;
            }
            let (x, y) = (to.max(w0), (to + len).min(w1));
            if x < y {
                let at = from + x - to - base;
                out[at..at + y - x].copy_from_slice(&window[x..y]);
            }
        }
        for &(line, owner) in &self.checks {
            let (line, owner) = (line as usize, owner as usize);
            if (base..end).contains(&line) {
                out[line - base] = out[owner - base];
            }
        }
        end - base
    }

    /// Whether a READ by this plan fits a neighbourhood's fixed buffers.
    pub fn fits_window(&self) -> bool {
        self.window_len <= WINDOW && self.raw_len <= RAW
    }

    /// The plan of a whole leaf: every entry and replica.
    pub fn whole(l: &LeafLayout) -> ReadPlan {
        ReadPlan::new(l, 0, l.span, false)
    }

    /// The plans of every home's neighbourhood of a leaf of layout `l`, indexed by home.
    pub fn every_home(l: &LeafLayout) -> Box<[ReadPlan]> {
        (0..l.span)
            .map(|h| ReadPlan::new(l, h, l.h, false))
            .inspect(|p| assert!(p.fits_window()))
            .collect()
    }

    /// The plans of every home's insert READ when the vacancy bitmap shows a free slot within
    /// its neighbourhood, indexed by home: from the start of the home's bucket to the end of
    /// the neighbourhood ([`LeafLayout::insert_read`]). `None` where the home's bucket reaches
    /// past the neighbourhood (buckets of more than H slots: large spans with a small H), so
    /// that any free slot a window holds from the home on is one it can take without a hop,
    /// and where the READ does not fit a neighbourhood's buffers: such inserts READ into a
    /// whole-leaf buffer.
    pub fn every_insert(l: &LeafLayout) -> Box<[Option<ReadPlan>]> {
        (0..l.span)
            .map(|h| {
                let (lo, n) = l.insert_read(h, 0);
                (n == l.dist(lo, h) + l.h)
                    .then(|| ReadPlan::new(l, lo, n, false))
                    .filter(ReadPlan::fits_window)
            })
            .collect()
    }

    /// The plans of every entry alone, indexed by slot (speculative reads).
    pub fn every_entry(l: &LeafLayout) -> Box<[ReadPlan]> {
        (0..l.span).map(|i| ReadPlan::new(l, i, 1, true)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default leaf (S 64, H 8): home 3's neighbourhood is one piece that crosses into
    /// group 1 (its replica in the middle), home 8's starts at group 1's replica, home 60's
    /// wraps into two pieces, the second starting at replica 0.
    #[test]
    fn plans_are_pinned() {
        let l = LeafLayout::new(64, 8).unwrap();
        let p = ReadPlan::new(&l, 3, 8, false);
        assert_eq!(p.pieces.as_slice(), [(l.entry(3), l.entry(10) + 19, 0)]);
        // Decoded [67, 229) is physical [68, 232): lines 2 and 3 start inside it.
        assert_eq!(p.reads.as_slice(), [(68, 164)]);
        assert_eq!(p.replicas.as_slice(), [(l.replica(1) - l.entry(3)) as u16]);
        assert_eq!(p.slots.as_slice(), &[0, 19, 38, 57, 76, 105, 124, 143]);
        // Line 2's version (physical 128) is entry 6's (decoded 124, physical 125); line 3's
        // (physical 192) is entry 8's (decoded 172, physical 174); offsets are from 68.
        assert_eq!(p.checks.as_slice(), [(60, 57), (124, 106)]);
        assert_eq!((p.raw_len, p.window_len), (164, 162));
        let p = ReadPlan::new(&l, 8, 8, false);
        assert_eq!((p.replicas.as_slice(), p.slots[0]), (&[0u16][..], 10));
        let p = ReadPlan::new(&l, 60, 8, false);
        assert_eq!(p.pieces.len(), 2);
        assert_eq!(p.pieces[1], (0, l.entry(3) + 19, 4 * 19));
        assert_eq!(p.replicas.as_slice(), [4 * 19]);
        let e = ReadPlan::new(&l, 5, 1, true);
        assert!(e.replicas.is_empty());
        assert_eq!((e.count, e.window_len), (1, 19));
        assert_eq!(ReadPlan::every_home(&l).len(), 64);
        // Inserts: 57 vacancy buckets over 64 slots, so seven buckets hold two slots and the
        // second slot's insert READ starts one slot early (home 1: slots 0 ..= 8).
        let ins = ReadPlan::every_insert(&l);
        let lo_count = |h: usize| ins[h].as_ref().map(|p| (p.lo, p.count));
        assert_eq!((lo_count(1), lo_count(3)), (Some((0, 9)), Some((3, 8))));
        assert_eq!(ins.iter().flatten().filter(|p| p.count == 9).count(), 7);
        // A whole leaf: one piece, every slot and replica, a check per line after the first.
        let w = ReadPlan::whole(&l);
        assert_eq!((w.reads.as_slice(), w.window_len), (&[(0, 1316)][..], 1296));
        assert_eq!((w.slots.len(), w.replicas.len(), w.checks.len()), (64, 8, 20));
        assert!(!w.fits_window());
        assert!(std::mem::size_of::<ReadPlan>() <= 344, "{}", std::mem::size_of::<ReadPlan>());
    }

    /// The runs of every plan write its whole window, back to back from 0, each at most
    /// [`SLACK`] bytes: what lets a neighbourhood count its window initialised up to
    /// `window_len` after decoding into uninitialised bytes.
    #[test]
    fn runs_cover_the_window_back_to_back() {
        use crate::layout::LeafKind;
        for kind in LeafKind::HOPSCOTCH_KINDS {
            for (span, h) in [(64, 8), (64, 4), (64, 16), (32, 8), (128, 16)] {
                let l = LeafLayout::with_kind(span, h, kind).unwrap();
                let plans = ReadPlan::every_home(&l).into_vec().into_iter();
                let plans = plans.chain(ReadPlan::every_entry(&l).into_vec());
                let plans =
                    plans.chain(ReadPlan::every_insert(&l).into_vec().into_iter().flatten());
                for p in plans.chain([ReadPlan::whole(&l)]) {
                    let mut end = 0;
                    for &(_, to, len) in &p.runs {
                        assert_eq!(to as usize, end, "runs of {:?} leave a gap", p.reads);
                        assert!(len as usize <= SLACK);
                        end += len as usize;
                    }
                    assert_eq!(end, p.window_len);
                }
            }
        }
    }
}
