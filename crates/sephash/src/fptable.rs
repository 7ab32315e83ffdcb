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

/// The entry range `[lo, hi)` that holds every entry of fingerprint `fp`.
pub fn range(points: &[Point], entries: u32, fp: u8) -> (u32, u32) {
    let delta_at = |i: usize| {
        let j = points.partition_point(|p| (p.fp as usize) <= i);
        if j == 0 {
            0
        } else {
            points[j - 1].delta as i64
        }
    };
    let i = fp as usize;
    let t = tol(entries);
    let lo = base(entries, i) + delta_at(i) - t;
    let hi = if i + 1 == N { entries as i64 } else { base(entries, i + 1) + delta_at(i + 1) + t };
    (lo.clamp(0, entries as i64) as u32, hi.clamp(0, entries as i64) as u32)
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

    #[test]
    fn a_uniform_segment_needs_few_points() {
        // The paper reserves 32 points and finds them "sufficient in most cases".
        let mut fps: Vec<u8> = (0..8064u64).map(|i| (mix64(i) >> 56) as u8).collect();
        let pts = check(&mut fps);
        assert!(pts <= 64, "{pts} record points for a full uniform MainSegment");
    }
}
