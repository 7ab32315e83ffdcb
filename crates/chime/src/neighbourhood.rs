//! A neighbourhood READ kept on the stack: the window of a leaf a search, an update, a delete or
//! most inserts need, decoded in place, with nothing of the rest of the leaf.
//!
//! # What it holds
//!
//! A hopscotch key lives within H slots of its home, so these operations READ slots
//! `h .. h + H` (circularly) and the metadata replica that range always contains (the one
//! before the group boundary it crosses, or the group's own when `h` starts one; a wrapped
//! range is two pieces, the second starting at replica 0). An insert whose vacancy bitmap shows
//! a free slot within the neighbourhood READs from the start of the home's vacancy bucket, up
//! to a bucket's length earlier ([`crate::read_plan::ReadPlan::every_insert`]). Without
//! metadata replication a dedicated READ of the header joins the doorbell. At most three
//! pieces, READ back to back into one fixed buffer and decoded there in place:
//!
//! ```text
//! READ:     buf = [ piece 0 physical | piece 1 physical | piece 2 physical ]
//! absorbed: buf = [ piece 0 decoded | piece 1 decoded | piece 2 decoded ]   (≤ WINDOW bytes)
//! pieces:   [(d0, d1, at)]: decoded range [d0, d1) of the leaf is buf[at .. at + d1 - d0]
//! ```
//!
//! # Validation
//!
//! The same as a whole leaf's: every cache-line version agrees with its object (checked on the
//! physical bytes before they are compacted), every object carries one node-level version,
//! and a replica was read. A single-entry READ (a speculative read) has no replica and is only
//! checked for tearing.
//!
//! # Writing back
//!
//! An update, a delete or an insert changes entries inside the window, and the WRITE is
//! encoded from the window by the same plan that decoded it, run backwards
//! ([`ReadPlan::encode_range`]): each line's data by its run, each line's version as its
//! owner's, with no layout arithmetic (see `tree::leaf_io`).

use std::mem::MaybeUninit;

use crate::layout::LeafLayout;
use crate::leaf::Invalid;
use crate::read_plan::{ReadPlan, RAW, SLACK, WINDOW};
use crate::view::{home, wrap, LeafView};

/// One neighbourhood (or entry) of a leaf, as READ: the READ lands in `raw` as physical bytes;
/// [`Neighbourhood::absorb`] checks its line versions and copies each line's data into
/// `window`, all as the [`ReadPlan`] of its home says.
///
/// Neither buffer is cleared when made (a search would otherwise zero about 900 bytes it never
/// reads): each keeps how much of it, from its start, holds bytes, and only those are ever
/// looked at as bytes. `raw` is zeroed up to what the next READ and its decoding take, once
/// (a READ lands only in bytes); `window` counts as filled up to the plan's window once a
/// decoding has written it (zeroing whatever part of it the plan's runs left unwritten, which
/// no plan made by [`ReadPlan::new`] does; a plan's fields are public, so this is checked, not
/// assumed).
pub struct Neighbourhood<'p> {
    l: LeafLayout,
    plan: &'p ReadPlan,
    nv_mixed: bool,
    /// `raw[..raw_init]` is initialised.
    raw_init: usize,
    /// `window[..window_init]` is initialised.
    window_init: usize,
    raw: [MaybeUninit<u8>; RAW + SLACK],
    window: [MaybeUninit<u8>; WINDOW + SLACK],
}

impl<'p> Neighbourhood<'p> {
    /// A window for leaves of layout `l`, planned as `plan` says. Make it once per operation and
    /// [`Neighbourhood::reset`] it for each READ: it is large, so it should not move.
    pub fn new(l: LeafLayout, plan: &'p ReadPlan) -> Neighbourhood<'p> {
        assert!(plan.fits_window(), "a neighbourhood holds at most {WINDOW} decoded bytes");
        Neighbourhood {
            l,
            plan,
            nv_mixed: false,
            raw_init: 0,
            window_init: 0,
            raw: [MaybeUninit::uninit(); RAW + SLACK],
            window: [MaybeUninit::uninit(); WINDOW + SLACK],
        }
    }

    /// Plans the next READ by `plan` (what was absorbed before is forgotten).
    #[inline]
    pub fn reset(&mut self, plan: &'p ReadPlan) {
        debug_assert!(plan.fits_window());
        (self.plan, self.nv_mixed) = (plan, false);
    }

    /// The plan of the next (or last) READ.
    pub fn plan(&self) -> &'p ReadPlan {
        self.plan
    }

    /// Physical bytes the READ of every piece takes, in order: (offset in the leaf, length).
    pub fn raw_lens(&self) -> impl Iterator<Item = (usize, usize)> + 'p {
        self.plan.reads.iter().map(|&(p0, n)| (p0 as usize, n as usize))
    }

    /// The buffer a READ lands in: the pieces' physical bytes back to back.
    pub fn raw_mut(&mut self) -> &mut [u8] {
        let need = self.plan.raw_len;
        &mut raw_filled(&mut self.raw, &mut self.raw_init, need + SLACK)[..need]
    }

    /// The decoded bytes, as far as decodings have filled the window.
    #[inline]
    fn win(&self) -> &[u8] {
        // SAFETY: `window[..window_init]` is initialised: `absorb` raises `window_init` to a
        // plan's `window_len` only once every byte below it holds one (written by the runs
        // just now, initialised before, or zeroed there), and writes go through `win_mut`'s
        // byte slices. `window_init` never exceeds the array: `absorb` bounds-checks it.
        unsafe { std::slice::from_raw_parts(self.window.as_ptr().cast::<u8>(), self.window_init) }
    }

    /// [`Neighbourhood::win`], to change.
    #[inline]
    fn win_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `win`; the slice borrows `self.window` mutably for its lifetime.
        unsafe {
            std::slice::from_raw_parts_mut(self.window.as_mut_ptr().cast::<u8>(), self.window_init)
        }
    }

    /// Checks the READ in `raw` and decodes it into the window; `Err` if a line is torn. Node
    /// versions are compared for [`Neighbourhood::validate`].
    pub fn absorb(&mut self) -> Result<(), Invalid> {
        let plan = self.plan;
        let raw = raw_filled(&mut self.raw, &mut self.raw_init, plan.raw_len + SLACK);
        let written = plan.copy_lines_uninit(raw, &mut self.window)?;
        let need = plan.window_len;
        if written < need {
            // Only a plan changed after `ReadPlan::new` gets here: its gap reads as zeroes.
            let from = written.max(self.window_init).min(need);
            self.window[from..need].fill(MaybeUninit::new(0));
        }
        // `need` is within the array: the runs wrote past it, or the fill above checked it.
        self.window_init = self.window_init.max(need);
        self.nv_mixed = plan.nv_mixed(self.win());
        Ok(())
    }

    /// Whether everything absorbed carries one node-level version and a replica was read.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.nv_mixed {
            return Err(Invalid::NodeVersion);
        }
        if self.plan.replicas.is_empty() {
            return Err(Invalid::NoReplica);
        }
        Ok(())
    }

    /// Where slot `i` sits in the window.
    #[inline]
    fn at(&self, i: usize) -> usize {
        let (lo, count) = (self.plan.lo, self.plan.count);
        let j = if i >= lo { i - lo } else { i + self.l.span - lo };
        assert!(j < count, "slot {i} was not read");
        self.plan.slots[j] as usize
    }

    /// The key at the `j`-th slot read.
    #[inline]
    fn key_at(&self, j: usize) -> u64 {
        let at = self.plan.slots[j] as usize + self.l.key_off();
        u64::from_be_bytes(self.win()[at..at + 8].try_into().expect("8 bytes"))
    }
}

/// The first `need` bytes of `raw`, of which `raw[..*init]` are initialised: the rest up to
/// `need` is zeroed first (a READ lands in them, or the decoding's slack reads them).
#[inline]
fn raw_filled<'a>(raw: &'a mut [MaybeUninit<u8>], init: &mut usize, need: usize) -> &'a mut [u8] {
    if *init < need {
        raw[*init..need].fill(MaybeUninit::new(0));
        *init = need;
    }
    let raw = &mut raw[..need];
    // SAFETY: all `need` bytes are initialised: zeroed just above or by an earlier call, and
    // written since only through byte slices like this one, which cannot uninitialise them.
    // `MaybeUninit<u8>` and `u8` have the same size and alignment; the result reborrows `raw`.
    unsafe { &mut *(raw as *mut [MaybeUninit<u8>] as *mut [u8]) }
}

impl LeafView for Neighbourhood<'_> {
    #[inline]
    fn layout(&self) -> &LeafLayout {
        &self.l
    }

    #[inline]
    fn is_loaded(&self, i: usize) -> bool {
        self.l.dist(self.plan.lo, i) < self.plan.count
    }

    #[inline]
    fn entry_bytes(&self, i: usize) -> &[u8] {
        let at = self.at(i);
        &self.win()[at..at + self.l.entry_len]
    }

    #[inline]
    fn entry_bytes_mut(&mut self, i: usize) -> &mut [u8] {
        let at = self.at(i);
        let n = self.l.entry_len;
        &mut self.win_mut()[at..at + n]
    }

    fn replica_bytes(&self) -> Option<&[u8]> {
        let at = *self.plan.replicas.first()? as usize;
        Some(&self.win()[at..at + self.l.meta_len])
    }

    fn encode(&self, d0: usize, d1: usize, out: &mut [u8]) -> usize {
        self.plan.encode_range(self.win(), d0, d1, out)
    }

    /// Through the plan's slot table when home `h`'s neighbourhood was read (from `h`, or from
    /// the start of its bucket: an insert's window).
    #[inline]
    fn find(&self, h: usize, key: u64) -> Option<usize> {
        let (l, plan) = (self.l, self.plan);
        let j0 = l.dist(plan.lo, h);
        if j0 + l.h > plan.count {
            return (0..l.h).map(|d| wrap(h + d, l.span)).find(|&i| self.key(i) == key);
        }
        // The slot table and the window taken once, not per key (each `key_at` re-derived both).
        let (win, off) = (self.win(), l.key_off());
        let slots = &plan.slots[j0..j0 + l.h];
        let at_key = |&at: &u16| {
            let at = at as usize + off;
            u64::from_be_bytes(win[at..at + 8].try_into().expect("8 bytes")) == key
        };
        slots.iter().position(at_key).map(|j| wrap(h + j, l.span))
    }

    fn status(&self, h: usize) -> u16 {
        let l = self.l;
        assert!(h == self.plan.lo && self.plan.count >= l.h, "home {h}'s neighbourhood was read");
        let mut b = 0;
        for j in 0..l.h {
            let k = self.key_at(j);
            if k != 0 && home(k, l.span) == h {
                b |= self.hop_bit(j);
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LeafKind;
    use crate::leaf::{Hop, LeafBuf};
    use dmindex_prim::cacheline::{self, phys_range};

    /// A window of `plan` READ from `phys`, a whole leaf's physical bytes, and decoded.
    fn read_window<'p>(l: LeafLayout, plan: &'p ReadPlan, phys: &[u8]) -> Neighbourhood<'p> {
        let mut nb = Neighbourhood::new(l, plan);
        let mut raw = Vec::new();
        for (p0, n) in nb.raw_lens() {
            raw.extend_from_slice(&phys[p0..p0 + n]);
        }
        nb.raw_mut()[..raw.len()].copy_from_slice(&raw);
        nb.absorb().unwrap();
        nb
    }

    /// A neighbourhood decoded from a leaf's physical bytes sees exactly the whole leaf's
    /// entries and metadata, for every home, with and without replication and fences.
    #[test]
    fn windows_agree_with_the_whole_leaf() {
        for kind in LeafKind::HOPSCOTCH_KINDS {
            for h in [4, 8, 16] {
                let l = LeafLayout::with_kind(64, h, kind).unwrap();
                let mut whole = LeafBuf::empty(l);
                for i in 0..64 {
                    whole.set_entry(i, 1000 + i as u64, (i as u64).to_le_bytes());
                    whole.set_bitmap(i, i as u16);
                }
                whole.set_sibling(dmindex_fabric::GlobalAddr::new(0, 0x4000));
                if kind.fenced {
                    whole.set_fences(5, 9999);
                }
                let mut phys = Vec::new();
                cacheline::encode(&l, &whole.bytes, 0, l.decoded(), &mut phys);
                for home in 0..64 {
                    let plan = ReadPlan::new(&l, home, h, false);
                    let nb = read_window(l, &plan, &phys);
                    nb.validate().unwrap();
                    for d in 0..h {
                        let i = (home + d) % 64;
                        assert_eq!(nb.key(i), whole.key(i));
                        assert_eq!(nb.value(i), whole.value(i));
                        assert_eq!(nb.bitmap(i), whole.bitmap(i));
                    }
                    assert_eq!(nb.meta(), whole.meta());
                    assert_eq!(nb.fences(), whole.fences());
                    assert_eq!(nb.status(home), whole.status(home));
                }
            }
        }
    }

    /// An insert's window takes a key exactly as the whole-leaf buffer the same READ filled
    /// did before windows: the same entries, the same vacancy bitmap from any bitmap the lock
    /// returned (stale bits included), and nothing where that buffer's hop found no empty slot.
    /// There is a window exactly where the home's bucket ends within its neighbourhood and the
    /// READ fits: six geometries (buckets of up to four slots), three kinds.
    #[test]
    fn insert_windows_insert_as_a_partial_leaf_did() {
        use rand_core::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (mut windows, mut full, mut stale) = (0, 0, 0);
        for kind in LeafKind::HOPSCOTCH_KINDS {
            for (span, h) in [(64, 8), (64, 16), (32, 4), (128, 16), (128, 2), (256, 4)] {
                let l = LeafLayout::with_kind(span, h, kind).unwrap();
                let plans = ReadPlan::every_insert(&l);
                let mut whole = LeafBuf::empty(l);
                // Fill until hops fail, then empty every third slot of the first half.
                let mut next = 1u64;
                while let Hop::Done(_) = whole.hop_insert(next, next.to_le_bytes()) {
                    next += 1;
                }
                for i in (0..span / 2).step_by(3) {
                    let k = whole.key(i);
                    if k != 0 {
                        whole.remove(home(k, span), i);
                    }
                }
                let mut phys = Vec::new();
                cacheline::encode(&l, &whole.bytes, 0, l.decoded(), &mut phys);
                let mask = if l.buckets == 64 { u64::MAX } else { (1 << l.buckets) - 1 };
                for home_slot in 0..span {
                    let (lo, n) = l.insert_read(home_slot, 0);
                    let near = n == l.dist(lo, home_slot) + h;
                    let fits = ReadPlan::new(&l, lo, n, false).fits_window();
                    let case = format!("{kind:?} span {span} H {h} home {home_slot}");
                    assert_eq!(plans[home_slot].is_some(), near && fits, "{case}");
                    let Some(plan) = &plans[home_slot] else { continue };
                    windows += 1;
                    let mut nb = read_window(l, plan, &phys);
                    nb.validate().unwrap();
                    // The same READ into a whole-leaf buffer, as inserts were made before.
                    let mut part = LeafBuf::new(l);
                    part.forget();
                    for (d0, d1) in part.ranges(lo, n) {
                        let (p0, p1) = phys_range(d0, d1);
                        part.absorb(d0, d1, &phys[p0..p1]).unwrap();
                    }
                    for i in 0..span {
                        assert_eq!(nb.is_loaded(i), part.is_loaded(i), "{case}: slot {i}");
                    }
                    // A key of this home that is not in the leaf.
                    let k = (next..).find(|&k| crate::view::home(k, span) == home_slot).unwrap();
                    assert_eq!(nb.find(home_slot, k), None);
                    let hopped = part.hop_insert(k, [7; 8]);
                    let Some(e) = nb.insert_near(home_slot, k, [7; 8]) else {
                        assert_eq!(hopped, Hop::NoEmpty, "{case}");
                        full += 1;
                        continue;
                    };
                    let Hop::Done(m) = hopped else { panic!("{case}: {hopped:?}") };
                    let mut want = vec![home_slot, e];
                    want.sort_unstable();
                    want.dedup();
                    assert_eq!(m.to_vec(), want, "{case}: no key moved");
                    for i in (0..span).filter(|&i| part.is_loaded(i)) {
                        assert_eq!(nb.entry_bytes(i), part.entry_bytes(i), "{case}: slot {i}");
                    }
                    for bits in [0, mask, rng.next_u64() & mask, rng.next_u64() & mask] {
                        let got = nb.vacancy_after(bits, &[home_slot, e]);
                        assert_eq!(got, part.vacancy_after(bits, &m), "{case}: bitmap {bits:x}");
                        stale += usize::from(got != nb.vacancy_after(bits, &[e]));
                    }
                }
            }
        }
        assert!(windows > 500, "only {windows} insert windows were tried");
        assert!(full > 50 && full < windows - 100, "{full} of {windows} windows were full");
        assert!(stale > 0, "no bitmap had a stale bit in the home's bucket");
    }

    /// A window encodes every run of whole entries it holds (within one piece, as writes are)
    /// to the physical bytes the whole leaf encodes them to, for every home's neighbourhood
    /// and insert window, every kind and several geometries (the versions differ entry by
    /// entry, so a line version taken from the wrong owner shows).
    #[test]
    fn windows_encode_as_the_whole_leaf_does() {
        let mut ranges = 0;
        for kind in LeafKind::HOPSCOTCH_KINDS {
            for (span, h) in [(64, 8), (64, 16), (32, 4), (128, 16)] {
                let l = LeafLayout::with_kind(span, h, kind).unwrap();
                let mut whole = LeafBuf::empty(l);
                for i in 0..span {
                    whole.set_entry(i, 7000 + i as u64, (i as u64).to_le_bytes());
                    for _ in 0..i % 5 {
                        whole.bump_ev(i);
                    }
                }
                let mut phys = Vec::new();
                cacheline::encode(&l, &whole.bytes, 0, l.decoded(), &mut phys);
                let plans = ReadPlan::every_home(&l).into_vec().into_iter();
                for plan in plans.chain(ReadPlan::every_insert(&l).into_vec().into_iter().flatten())
                {
                    let nb = read_window(l, &plan, &phys);
                    for first in 0..plan.count {
                        for n in 1..=plan.count - first {
                            let lo = (plan.lo + first) % span;
                            for (d0, d1) in l.write_ranges(lo, n) {
                                let (mut got, mut want) = ([0u8; 512], [0u8; 512]);
                                let g = nb.encode(d0, d1, &mut got);
                                let w = whole.encode(d0, d1, &mut want);
                                let case =
                                    format!("{kind:?} {span}/{h} plan {} slots {lo}+{n}", plan.lo);
                                assert_eq!(got[..g], want[..w], "{case}");
                                assert_eq!(want[..w], phys[phys_range(d0, d1).0..][..w], "{case}");
                                ranges += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(ranges > 10_000, "only {ranges} ranges were encoded");
    }

    /// Pieces of two node versions, or a torn line, fail; a single entry has no replica.
    #[test]
    fn mixed_versions_torn_lines_and_missing_replicas_fail() {
        let l = LeafLayout::new(64, 8).unwrap();
        let old = LeafBuf::empty(l);
        let mut new = LeafBuf::empty(l);
        new.bump_node_version();
        let phys = |b: &LeafBuf| {
            let mut out = Vec::new();
            cacheline::encode(&l, &b.bytes, 0, l.decoded(), &mut out);
            out
        };
        let (po, pn) = (phys(&old), phys(&new));
        // Home 60 wraps: its second piece comes from the new version.
        let plan = ReadPlan::new(&l, 60, 8, false);
        let mut nb = Neighbourhood::new(l, &plan);
        let lens: Vec<_> = nb.raw_lens().collect();
        let mut raw = po[lens[0].0..lens[0].0 + lens[0].1].to_vec();
        raw.extend_from_slice(&pn[lens[1].0..lens[1].0 + lens[1].1]);
        nb.raw_mut()[..raw.len()].copy_from_slice(&raw);
        nb.absorb().unwrap();
        assert_eq!(nb.validate(), Err(Invalid::NodeVersion));
        // A line version that disagrees with its object.
        let plan = ReadPlan::new(&l, 3, 8, false);
        let mut nb = Neighbourhood::new(l, &plan);
        let (p0, n) = nb.raw_lens().next().unwrap();
        let mut raw = po[p0..p0 + n].to_vec();
        let cl = (0..n).find(|&b| (p0 + b) % 64 == 0).unwrap();
        raw[cl] ^= 0x10;
        nb.raw_mut()[..raw.len()].copy_from_slice(&raw);
        assert_eq!(nb.absorb(), Err(Invalid::Torn));
        let plan = ReadPlan::new(&l, 5, 1, true);
        let mut one = Neighbourhood::new(l, &plan);
        let (p0, n) = one.raw_lens().next().unwrap();
        one.raw_mut()[..n].copy_from_slice(&po[p0..p0 + n]);
        one.absorb().unwrap();
        assert_eq!((one.key(5), one.validate()), (0, Err(Invalid::NoReplica)));
    }

    /// One neighbourhood reused as a search uses it: a single-entry READ, then a neighbourhood
    /// READ that is torn, then the retry; and a plan whose runs were taken away after it was
    /// made, whose window then reads as zeroes rather than as bytes never written.
    #[test]
    fn one_window_through_plans_of_every_size_and_a_broken_plan() {
        let l = LeafLayout::new(64, 8).unwrap();
        let mut whole = LeafBuf::empty(l);
        for i in 0..64 {
            whole.set_entry(i, 500 + i as u64, (i as u64 * 3).to_le_bytes());
        }
        let mut phys = Vec::new();
        cacheline::encode(&l, &whole.bytes, 0, l.decoded(), &mut phys);
        let read = |nb: &mut Neighbourhood<'_>, torn: bool| {
            let mut raw = Vec::new();
            for (p0, n) in nb.raw_lens() {
                raw.extend_from_slice(&phys[p0..p0 + n]);
            }
            if torn {
                let line = (0..raw.len()).find(|&b| (68 + b) % 64 == 0).unwrap();
                raw[line] ^= 0x10;
            }
            nb.raw_mut()[..raw.len()].copy_from_slice(&raw);
            nb.absorb()
        };
        let (entry, home) = (ReadPlan::new(&l, 5, 1, true), ReadPlan::new(&l, 3, 8, false));
        let mut nb = Neighbourhood::new(l, &entry);
        read(&mut nb, false).unwrap();
        assert_eq!((nb.key(5), nb.value(5)), (505, 15u64.to_le_bytes()));
        nb.reset(&home);
        assert_eq!(read(&mut nb, true), Err(Invalid::Torn));
        nb.reset(&home);
        read(&mut nb, false).unwrap();
        nb.validate().unwrap();
        for i in 3..11 {
            assert_eq!((nb.key(i), nb.value(i)), (whole.key(i), whole.value(i)));
        }
        let mut broken = ReadPlan::new(&l, 5, 1, true);
        broken.runs.clear();
        let mut nb = Neighbourhood::new(l, &broken);
        read(&mut nb, false).unwrap();
        assert_eq!((nb.key(5), nb.value(5)), (0, [0; 8]));
    }
}
