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
//! That range is about 2 × avr entries. A search reads the predicted run plus a margin of
//! `⌈avr / 3⌉` entries on each side ([`window`]), as the paper does ("several more entries
//! before and after"); entries are sorted by (fp, fp2), so the key's own entries are missing from
//! the window only if its first entry has the key's (fp, fp2) or a larger one (the key's entries
//! may begin before it), or its last one the key's or a smaller one. Then the search re-reads the
//! rest of the range on that side: a spill. On uniform MainSegments of 4 k to 8 k entries, 2 %
//! of searches spill, and a search reads ~40 entries where the range is ~48 (a margin of avr / 4
//! read 36 and spilled 5 %, avr / 5 34 and 6 %: 8 B saved for each extra 1 % of searches that
//! pay two more verbs and a round trip).

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

/// The margin a search reads on each side of the predicted run: a third of the average run.
pub fn margin(entries: u32) -> i64 {
    (avr(entries) / 3.0).ceil().max(1.0) as i64
}

/// The predicted run of fingerprint `fp`, `pad` entries wider on each side, clamped to the
/// segment.
fn predicted(points: &[Point], entries: u32, fp: u8, pad: i64) -> (u32, u32) {
    let delta_at = |i: usize| {
        let j = points.partition_point(|p| (p.fp as usize) <= i);
        if j == 0 {
            0
        } else {
            points[j - 1].delta as i64
        }
    };
    let i = fp as usize;
    let lo = base(entries, i) + delta_at(i) - pad;
    let hi = if i + 1 == N { entries as i64 } else { base(entries, i + 1) + delta_at(i + 1) + pad };
    let hi = hi.max(lo);
    (lo.clamp(0, entries as i64) as u32, hi.clamp(0, entries as i64) as u32)
}

/// The entry range `[lo, hi)` that holds every entry of fingerprint `fp`.
pub fn range(points: &[Point], entries: u32, fp: u8) -> (u32, u32) {
    predicted(points, entries, fp, tol(entries))
}

/// The entries `[lo, hi)` a search reads first for fingerprint `fp`: the predicted run and
/// [`margin`] entries on each side; inside [`range`].
pub fn window(points: &[Point], entries: u32, fp: u8) -> (u32, u32) {
    predicted(points, entries, fp, margin(entries).min(tol(entries)))
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
    /// key's entries once the spilled side is re-read, and windows are narrower than ranges.
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
                let fp = (k >> 8) as u8;
                let (w, r) = (window(&pts, e, fp), range(&pts, e, fp));
                assert!(r.0 <= w.0 && w.1 <= r.1 && w.0 <= w.1, "{w:?} outside {r:?}");
                let ends = (w.0 < w.1).then(|| (keys[w.0 as usize], keys[w.1 as usize - 1]));
                let (before, after) = spill(w, r, ends, k);
                let lo = if before { r.0 } else { w.0 };
                let hi = if after { r.1 } else { w.1 };
                let (first, end) =
                    (keys.partition_point(|&x| x < k), keys.partition_point(|&x| x <= k));
                assert!(lo as usize <= first && end <= hi as usize, "key {k:#x}: {lo}..{hi}");
                assert!((lo as usize..hi as usize).contains(&j));
                spills += (before || after) as u32;
                searches += 1;
                read += (w.1 - w.0) as u64;
                ranged += (r.1 - r.0) as u64;
            }
        }
        assert!(spills * 100 <= searches * 4, "{spills} spills in {searches} searches");
        assert!(read * 100 <= ranged * 90, "windows {read} entries, ranges {ranged}");
    }

    #[test]
    fn a_uniform_segment_needs_few_points() {
        // The paper reserves 32 points and finds them "sufficient in most cases".
        let mut fps: Vec<u8> = (0..8064u64).map(|i| (mix64(i) >> 56) as u8).collect();
        let pts = check(&mut fps);
        assert!(pts <= 64, "{pts} record points for a full uniform MainSegment");
    }
}
