//! Division by a layout constant without a divide instruction.
//!
//! Leaf geometry divides by numbers fixed when a tree is made but unknown to the compiler: the
//! vacancy bitmap's bucket count (57 for a span of 64), spans that are not powers of two. A
//! 64-bit `div` takes tens of cycles and sat on the insert path several times per operation.
//! [`Divisor`] keeps `m = ⌈2³² / d⌉` and computes `⌊x / d⌋` as `(x · m) >> 32`.
//!
//! # Why it is exact
//!
//! Write `m = (2³² + e) / d` with `0 ≤ e < d`. Then `x · m / 2³² = x / d + x · e / (d · 2³²)`,
//! and the error term is below `x / 2³²`. The fractional part of `x / d` is at most
//! `(d − 1) / d`, so the floor is unchanged while the error stays below `1 / d`, that is while
//! `x · d < 2³²`. Both `x` and `d` are below 2¹⁶ here ([`Divisor::LIMIT`]), which is checked.

/// `⌊x / d⌋` and `⌈x / d⌉` for a fixed `d` and `x`, `d` below [`Divisor::LIMIT`]. One word:
/// `m` (at most 2³², 33 bits) above `d` (16 bits), so that layouts holding several stay small
/// (they are copied with every buffer that carries one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divisor(u64);

impl Divisor {
    /// Exclusive bound on divisors and dividends.
    pub const LIMIT: usize = 1 << 16;

    /// Division by `d` (`0 < d <` [`Divisor::LIMIT`]).
    pub fn new(d: usize) -> Divisor {
        assert!(d > 0 && d < Self::LIMIT, "divisor {d} out of range");
        Divisor((1u64 << 32).div_ceil(d as u64) << 16 | d as u64)
    }

    /// The divisor.
    #[inline]
    pub fn get(self) -> usize {
        (self.0 & 0xFFFF) as usize
    }

    /// `⌊x / d⌋` (`x <` [`Divisor::LIMIT`]).
    #[inline]
    pub fn quotient(self, x: usize) -> usize {
        debug_assert!(x < Self::LIMIT, "dividend {x} out of range");
        ((x as u64 * (self.0 >> 16)) >> 32) as usize
    }

    /// `⌈x / d⌉` (`x + d − 1 <` [`Divisor::LIMIT`]).
    #[inline]
    pub fn quotient_ceil(self, x: usize) -> usize {
        self.quotient(x + self.get() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every divisor a leaf can use, against the hardware's division: every dividend below 4096
    /// and the ones around each multiple of `d` up to the limit, where an error would show first.
    #[test]
    fn agrees_with_division() {
        for d in 1..=1024 {
            let dv = Divisor::new(d);
            let near = (1..Divisor::LIMIT / d).flat_map(|k| [k * d - 1, k * d, k * d + 1]);
            for x in (0..4096).chain(near).filter(|&x| x + d < Divisor::LIMIT) {
                assert_eq!(dv.quotient(x), x / d, "{x} / {d}");
                assert_eq!(dv.quotient_ceil(x), x.div_ceil(d), "{x} / {d} rounded up");
            }
        }
        assert_eq!((Divisor::new(1).get(), Divisor::new(57).get()), (1, 57));
        assert_eq!(size_of::<Divisor>(), 8);
        let top = Divisor::new(Divisor::LIMIT - 1);
        assert_eq!(top.quotient(Divisor::LIMIT - 1), 1);
        assert_eq!(top.quotient(Divisor::LIMIT - 2), 0);
    }
}
