//! Piecewise-linear models of bounded error: the optimal streaming PLA (the convex-hull
//! algorithm of O'Rourke, as learned indexes use it), built on a compute node.
//!
//! # Input and output
//!
//! Sorted, distinct keys; key `i` of a segment starting at `start` has position `i − start`.
//! [`segments`] cuts the keys into the fewest segments such that, for each, one line predicts
//! every key's position within `eps`: it streams the keys, keeping the upper and lower convex
//! hulls of the points `(x, y ± eps)` and the rectangle of the extreme feasible lines; a point
//! whose band leaves every feasible line starts a new segment. Arithmetic is exact (`i128` on
//! key offsets and positions).
//!
//! # The line and its check
//!
//! A segment's slope is the middle of the feasible slopes; its intercept centres the residuals
//! `y − slope · x`, so the worst residual is about `eps`. Both are `f64`s, which is what a
//! compute node evaluates ([`predict`]), so the segment is then checked in `f64` exactly as it
//! will be used: every key's prediction must be within [`TOLERANCE`] + `eps` of its position. A
//! key that is not (floating-point rounding on huge key offsets) ends the segment before it.
//! The leaf ranges a compute node reads rely on this bound and on [`predict`] being monotone in
//! the key (the crate docs give the argument).

/// Slack over `eps` a segment's check allows for the rounding of `f64` arithmetic.
pub const TOLERANCE: f64 = 0.5;

/// One segment: keys `[start, start + len)` of the input, predicted from its first key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    pub start: usize,
    pub len: usize,
    pub slope: f64,
    pub intercept: f64,
}

/// The position a model with `anchor`, `slope` and `intercept` predicts for key `k`: monotone
/// non-decreasing in `k` (for slopes ≥ 0); keys below the anchor predict as the anchor.
#[inline]
pub fn predict(anchor: u64, slope: f64, intercept: f64, k: u64) -> f64 {
    intercept + slope * (k.saturating_sub(anchor) as f64)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pt {
    x: i128,
    y: i128,
}

/// A direction `(dx, dy)`, compared by slope; both operands of a comparison have `dx` of one
/// sign, so the cross-multiplied comparison is the slopes'.
#[derive(Clone, Copy, Debug)]
struct Dir {
    dx: i128,
    dy: i128,
}

fn sub(a: Pt, b: Pt) -> Dir {
    Dir { dx: a.x - b.x, dy: a.y - b.y }
}

fn lt(a: Dir, b: Dir) -> bool {
    a.dy * b.dx < b.dy * a.dx
}

fn gt(a: Dir, b: Dir) -> bool {
    a.dy * b.dx > b.dy * a.dx
}

fn cross(o: Pt, a: Pt, b: Pt) -> i128 {
    (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x)
}

/// The hulls of one segment being grown.
struct Hull {
    eps: i128,
    points: usize,
    /// Extreme lines: 0 → 2 is the least feasible slope, 1 → 3 the greatest.
    rect: [Pt; 4],
    upper: Vec<Pt>,
    lower: Vec<Pt>,
    upper_start: usize,
    lower_start: usize,
}

impl Hull {
    fn new(eps: u64) -> Hull {
        let o = Pt { x: 0, y: 0 };
        Hull {
            eps: eps as i128,
            points: 0,
            rect: [o; 4],
            upper: Vec::new(),
            lower: Vec::new(),
            upper_start: 0,
            lower_start: 0,
        }
    }

    /// Adds point `(x, y)` (x greater than every earlier one): whether one line still fits
    /// every point so far within `eps`.
    fn add(&mut self, x: i128, y: i128) -> bool {
        let p1 = Pt { x, y: y + self.eps };
        let p2 = Pt { x, y: y - self.eps };
        match self.points {
            0 => {
                self.rect[0] = p1;
                self.rect[1] = p2;
                self.upper.clear();
                self.lower.clear();
                self.upper.push(p1);
                self.lower.push(p2);
                self.upper_start = 0;
                self.lower_start = 0;
                self.points = 1;
                return true;
            }
            1 => {
                self.rect[2] = p2;
                self.rect[3] = p1;
                self.upper.push(p1);
                self.lower.push(p2);
                self.points = 2;
                return true;
            }
            _ => {}
        }
        let slope1 = sub(self.rect[2], self.rect[0]);
        let slope2 = sub(self.rect[3], self.rect[1]);
        if lt(sub(p1, self.rect[2]), slope1) || gt(sub(p2, self.rect[3]), slope2) {
            return false;
        }
        if lt(sub(p1, self.rect[1]), slope2) {
            // The greatest slope drops: the new line through p1 and the lower hull point that
            // makes it least steep.
            let mut min = sub(self.lower[self.lower_start], p1);
            let mut min_i = self.lower_start;
            for i in self.lower_start + 1..self.lower.len() {
                let v = sub(self.lower[i], p1);
                if gt(v, min) {
                    break;
                }
                (min, min_i) = (v, i);
            }
            self.rect[1] = self.lower[min_i];
            self.rect[3] = p1;
            self.lower_start = min_i;
            let mut end = self.upper.len();
            while end >= self.upper_start + 2
                && cross(self.upper[end - 2], self.upper[end - 1], p1) <= 0
            {
                end -= 1;
            }
            self.upper.truncate(end);
            self.upper.push(p1);
        }
        if gt(sub(p2, self.rect[0]), slope1) {
            // The least slope rises: the line through p2 and the upper hull point that makes
            // it steepest.
            let mut max = sub(self.upper[self.upper_start], p2);
            let mut max_i = self.upper_start;
            for i in self.upper_start + 1..self.upper.len() {
                let v = sub(self.upper[i], p2);
                if lt(v, max) {
                    break;
                }
                (max, max_i) = (v, i);
            }
            self.rect[0] = self.upper[max_i];
            self.rect[2] = p2;
            self.upper_start = max_i;
            let mut end = self.lower.len();
            while end >= self.lower_start + 2
                && cross(self.lower[end - 2], self.lower[end - 1], p2) >= 0
            {
                end -= 1;
            }
            self.lower.truncate(end);
            self.lower.push(p2);
        }
        self.points += 1;
        true
    }

    /// The middle of the feasible slopes (0 for one point), never negative.
    fn slope(&self) -> f64 {
        if self.points < 2 {
            return 0.0;
        }
        let s = |d: Dir| d.dy as f64 / d.dx as f64;
        let lo = s(sub(self.rect[2], self.rect[0]));
        let hi = s(sub(self.rect[3], self.rect[1]));
        ((lo + hi) / 2.0).max(0.0)
    }
}

/// The intercept centring the residuals of keys `[start, end)` under `slope`.
fn centre(keys: &[u64], start: usize, end: usize, slope: f64) -> f64 {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (i, &k) in keys[start..end].iter().enumerate() {
        let r = i as f64 - slope * ((k - keys[start]) as f64);
        lo = lo.min(r);
        hi = hi.max(r);
    }
    (lo + hi) / 2.0
}

/// The first key of `[start, end)` the line predicts beyond `eps` + [`TOLERANCE`], if any.
fn first_miss(keys: &[u64], start: usize, end: usize, eps: u64, s: f64, b: f64) -> Option<usize> {
    let bound = eps as f64 + TOLERANCE;
    (start..end).find(|&i| (predict(keys[start], s, b, keys[i]) - (i - start) as f64).abs() > bound)
}

/// The fewest segments of at most `max_len` keys that predict `keys` (sorted, distinct) within
/// `eps`; see the module docs. Empty keys give no segment.
pub fn segments(keys: &[u64], eps: u64, max_len: usize) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut hull = Hull::new(eps);
    let mut start = 0;
    // Each round emits a segment of at least one key, so it ends after `keys.len()` rounds.
    while start < keys.len() {
        hull.points = 0;
        let mut end = start;
        while end < keys.len()
            && end - start < max_len.max(1)
            && hull.add((keys[end] - keys[start]) as i128, (end - start) as i128)
        {
            end += 1;
        }
        let slope = hull.slope();
        let mut intercept = centre(keys, start, end, slope);
        // Shrinks while f64 rounding misses the bound; one key always fits (slope · 0).
        while let Some(miss) = first_miss(keys, start, end, eps, slope, intercept) {
            end = miss.max(start + 1);
            intercept = centre(keys, start, end, slope);
            if end == start + 1 {
                intercept = 0.0;
            }
        }
        out.push(Segment { start, len: end - start, slope, intercept });
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys from a small deterministic generator: uniform, clustered, and dense runs.
    fn keys(n: usize, seed: u64, kind: u32) -> Vec<u64> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut v: Vec<u64> = match kind {
            0 => (0..n).map(|_| next()).collect(),
            1 => (0..n).map(|_| ((next() % 8) << 60) | (next() % 100_000)).collect(),
            _ => (0..n as u64).map(|i| i * 3 + next() % 3 + 1).collect(),
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Shrinking-cone segments through each segment's first point: a valid cover, so the
    /// optimal one has no more segments.
    fn cone_count(keys: &[u64], eps: u64) -> usize {
        let (mut n, mut start) = (0, 0);
        while start < keys.len() {
            let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
            let mut end = start + 1;
            while end < keys.len() {
                let dx = (keys[end] - keys[start]) as f64;
                let dy = (end - start) as f64;
                let (l, h) = ((dy - eps as f64) / dx, (dy + eps as f64) / dx);
                if l.max(lo) > h.min(hi) {
                    break;
                }
                (lo, hi) = (l.max(lo), h.min(hi));
                end += 1;
            }
            n += 1;
            start = end;
        }
        n
    }

    #[test]
    fn every_key_is_predicted_within_eps_and_segments_tile_the_keys() {
        for (n, seed, kind, eps) in
            [(5000, 7, 0, 16), (5000, 9, 1, 16), (3000, 3, 2, 4), (4000, 5, 0, 2), (1, 1, 0, 16)]
        {
            let keys = keys(n, seed, kind);
            let segs = segments(&keys, eps, usize::MAX);
            let mut at = 0;
            for s in &segs {
                assert_eq!(s.start, at, "segments tile the keys");
                assert!(s.len >= 1 && s.slope >= 0.0);
                for i in s.start..s.start + s.len {
                    let p = predict(keys[s.start], s.slope, s.intercept, keys[i]);
                    assert!((p - (i - s.start) as f64).abs() <= eps as f64 + TOLERANCE);
                }
                at += s.len;
            }
            assert_eq!(at, keys.len());
            assert!(segs.len() <= cone_count(&keys, eps), "optimal ≤ shrinking cone");
        }
    }

    #[test]
    fn a_line_is_one_segment_and_prediction_is_monotone() {
        let keys: Vec<u64> = (1..=10_000u64).map(|i| i * 1000).collect();
        let segs = segments(&keys, 16, usize::MAX);
        assert_eq!(segs.len(), 1);
        let capped = segments(&keys, 16, 3000);
        assert_eq!(capped.iter().map(|s| s.len).collect::<Vec<_>>(), [3000, 3000, 3000, 1000]);
        let s = segs[0];
        let mut last = f64::NEG_INFINITY;
        for k in (0..10_100_000u64).step_by(777) {
            let p = predict(keys[0], s.slope, s.intercept, k);
            assert!(p >= last);
            last = p;
        }
        // Uniform random keys need far fewer segments than keys.
        let random = super::tests::keys(20_000, 11, 0);
        assert!(segments(&random, 16, usize::MAX).len() < random.len() / 50);
    }
}
