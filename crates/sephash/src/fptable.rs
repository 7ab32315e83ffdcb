//! The FPTable: where a fingerprint's entries sit in a MainSegment, predicted from a few record
//! points (paper §4.4.2, formulas (1) and (2)).
//!
//! # Prediction
//!
//! A MainSegment holds `E` entries sorted by fingerprint; with `N` = 256 fingerprints the
//! average run is `avr = E / N`. The entries of fingerprint `i` start near
//!
//! ```text
//! pre(i) = round(avr · i) + δ          δ = the delta of the last record point with fp ≤ i (0 if none)
//! ```
//!
//! # Record points
//!
//! The merger that writes a MainSegment walks `i = 0 ..= N` with the true starts `start(i)` (the
//! number of entries with a smaller fingerprint; `start(N) = E`) and adds a record point
//! `(i, start(i) − round(avr · i))` wherever `|pre(i) − start(i)|` would exceed the tolerance
//! `tol = max(1, ⌊avr / 2⌋)` (the paper's 0.5 × avr). So every start is within `tol` of its
//! prediction, and reading `[pre(i) − tol, pre(i + 1) + tol)` always covers fingerprint `i`'s
//! run: one READ, never a miss. The points are stored in the MainSegment's header (it is
//! immutable, so they never go stale while it is current) and cached by clients.
//!
//! # What a search reads
//!
//! That range is about 2 × avr entries. The paper reads the predicted run plus "several more
//! entries before and after" and reads further when the run spills over. Our entries are sorted
//! by (fp, fp2), so within fingerprint `i`'s run a key's entries sit about `fp2 / 256` of the way
//! along: a search reads a window of `2 · ⌈avr / 2⌉ + 1` entries centred there, inside the range
//! ([`window`]). The window misses the key's entries only if its first entry sorts at or after
//! the key's (fp, fp2) (they may begin before it) or its last at or before (they may go on after
//! it); then the search re-reads the rest of the range on that side ([`spill`]). On uniform
//! MainSegments of 4 k to 8 k entries about 2 % of searches spill, and a window is about half
//! the range. (The paper's window, the predicted run ± ⌈avr / 3⌉, read ~50 entries where this
//! one reads ~31 at 7 k to 8 k entries, for the same spills.)

use crate::layout::Point;

/// Fingerprints.
pub const N: usize = 256;

fn avr(entries: u32) -> f64 {
    entries as f64 / N as f64
}

/// The tolerance of a MainSegment of `entries` entries.
pub fn tol(entries: u32) -> i64 {
    ((avr(entries) / 2.0).floor() as i64).max(1)
}

fn base(entries: u32, i: usize) -> i64 {
    (avr(entries) * i as f64).round() as i64
}

/// The record points of a MainSegment whose entries have fingerprints `fps` (sorted).
pub fn build(fps: impl IntoIterator<Item = u8>, entries: u32, out: &mut Vec<Point>) {
    let mut starts = [0u32; N + 1];
    for fp in fps {
        starts[fp as usize + 1] += 1;
    }
    for i in 1..=N {
        starts[i] += starts[i - 1];
    }
    debug_assert_eq!(starts[N], entries);
    out.clear();
    let (tol, mut delta) = (tol(entries), 0i64);
    for (i, &start) in starts.iter().enumerate() {
        let b = base(entries, i);
        if (b + delta - start as i64).abs() > tol {
            delta = start as i64 - b;
            // i = N needs no point: start(N) = E and reads are clamped to E.
            if i < N {
                out.push(Point { fp: i as u8, delta: delta as i32 });
            }
        }
    }
}

/// The half-width of a search's window: half the average run.
pub fn half_window(entries: u32) -> i64 {
    (avr(entries) / 2.0).ceil().max(1.0) as i64
}

fn delta_at(points: &[Point], i: usize) -> i64 {
    let j = points.partition_point(|p| (p.fp as usize) <= i);
    if j == 0 {
        0
    } else {
        points[j - 1].delta as i64
    }
}

/// The predicted start of fingerprint `i`'s run (`i` = N: the end of the segment).
fn start(points: &[Point], entries: u32, i: usize) -> i64 {
    if i == N {
        entries as i64
    } else {
        base(entries, i) + delta_at(points, i)
    }
}

/// `[lo, hi)` clamped to the segment and made non-empty-or-empty in order.
fn clamp(lo: i64, hi: i64, entries: u32) -> (u32, u32) {
    let e = entries as i64;
    (lo.clamp(0, e) as u32, hi.max(lo).clamp(0, e) as u32)
}

/// The entry range `[lo, hi)` that holds every entry of fingerprint `fp`.
pub fn range(points: &[Point], entries: u32, fp: u8) -> (u32, u32) {
    let (i, t) = (fp as usize, tol(entries));
    clamp(start(points, entries, i) - t, start(points, entries, i + 1) + t, entries)
}

/// The entries `[lo, hi)` a search for fingerprints (`fp`, `fp2`) reads first: [`half_window`]
/// entries on each side of the point `fp2 / 256` of the way along `fp`'s predicted run, inside
/// [`range`].
pub fn window(points: &[Point], entries: u32, fp: u8, fp2: u8) -> (u32, u32) {
    let (i, t) = (fp as usize, tol(entries));
    let (run_lo, run_hi) = (start(points, entries, i), start(points, entries, i + 1));
    let at = run_lo + ((run_hi - run_lo) * fp2 as i64 + 128) / 256;
    let w = half_window(entries);
    clamp((at - w).max(run_lo - t), (at + w + 1).min(run_hi + t), entries)
}

/// Which sides of `window` (entries `[lo, hi)` with sort keys `first ..= last`, or none) may
/// miss entries with sort key `fps` that lie inside `range` (`[rlo, rhi)`): (before, after).
pub fn spill(
    window: (u32, u32),
    range: (u32, u32),
    ends: Option<(u16, u16)>,
    fps: u16,
) -> (bool, bool) {
    let ((lo, hi), (rlo, rhi)) = (window, range);
    match ends {
        None => (rlo < lo, hi < rhi),
        Some((first, last)) => (rlo < lo && first >= fps, hi < rhi && last <= fps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmindex_prim::hash::mix64;

    fn check(fps: &mut [u8]) -> usize {
        fps.sort_unstable();
        let e = fps.len() as u32;
        let mut pts = Vec::new();
        build(fps.iter().copied(), e, &mut pts);
        for fp in 0..=255u8 {
            let start = fps.partition_point(|&x| x < fp) as u32;
            let end = fps.partition_point(|&x| x <= fp) as u32;
            let (lo, hi) = range(&pts, e, fp);
            assert!(lo <= start && end <= hi, "fp {fp}: run {start}..{end} outside {lo}..{hi}");
            assert!(hi - lo <= (end - start) + 4 * tol(e) as u32 + 2, "range too wide");
        }
        pts.len()
    }

    #[test]
    fn predicted_ranges_always_cover_the_run() {
        for (n, seed) in [(0, 1), (1, 2), (10, 3), (255, 4), (1000, 5), (8064, 6), (30000, 7)] {
            let mut fps: Vec<u8> =
                (0..n).map(|i| (mix64(i as u64 ^ seed << 32) >> 56) as u8).collect();
            check(&mut fps);
        }
        // Skewed: every entry one fingerprint; and half the space empty.
        check(&mut vec![77; 500]);
        check(&mut (0..4000).map(|i| (i % 128) as u8).collect::<Vec<_>>());
    }

    /// Windows lie inside the range; on uniform segments few searches spill, none misses its
    /// key's entries once the spilled side is re-read, and windows are about half the range.
    #[test]
    fn windows_spill_rarely_and_never_miss() {
        let (mut spills, mut searches, mut read, mut ranged) = (0, 0, 0u64, 0u64);
        for (n, seed) in [(4032u64, 11u64), (5000, 12), (6500, 13), (8064, 14), (300, 15)] {
            let mut keys: Vec<u16> = (0..n).map(|i| (mix64(i ^ seed << 32) >> 48) as u16).collect();
            keys.sort_unstable();
            let e = keys.len() as u32;
            let mut pts = Vec::new();
            build(keys.iter().map(|&k| (k >> 8) as u8), e, &mut pts);
            for (j, &k) in keys.iter().enumerate().step_by(3) {
                let (fp, fp2) = ((k >> 8) as u8, k as u8);
                let (w, r) = (window(&pts, e, fp, fp2), range(&pts, e, fp));
                assert!(r.0 <= w.0 && w.1 <= r.1 && w.0 <= w.1, "{w:?} outside {r:?}");
                let ends = (w.0 < w.1).then(|| (keys[w.0 as usize], keys[w.1 as usize - 1]));
                let (before, after) = spill(w, r, ends, k);
                let lo = if before { r.0 } else { w.0 };
                let hi = if after { r.1 } else { w.1 };
                let first = keys.partition_point(|&x| x < k);
                let end = keys.partition_point(|&x| x <= k);
                assert!(lo as usize <= first && end <= hi as usize, "key {k:#x}: {lo}..{hi}");
                assert!((lo as usize..hi as usize).contains(&j));
                spills += (before || after) as u32;
                searches += 1;
                read += (w.1 - w.0) as u64;
                ranged += (r.1 - r.0) as u64;
            }
        }
        assert!(spills * 100 <= searches * 4, "{spills} spills in {searches} searches");
        assert!(read * 100 <= ranged * 60, "windows {read} entries, ranges {ranged}");
    }

    #[test]
    fn a_uniform_segment_needs_few_points() {
        // The paper reserves 32 points and finds them "sufficient in most cases".
        let mut fps: Vec<u8> = (0..8064u64).map(|i| (mix64(i) >> 56) as u8).collect();
        let pts = check(&mut fps);
        assert!(pts <= 64, "{pts} record points for a full uniform MainSegment");
    }
}
