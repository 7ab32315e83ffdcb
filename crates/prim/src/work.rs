//! Counting the compute-side work a primitive does, for [`dmindex_fabric::Client::compute`].
//!
//! The counts are what the code actually walks: a bisection of `n` sorted keys compares
//! [`bisect_compares`]`(n)` of them, a slot scan compares the slots it looks at, a validated
//! READ scans the bytes it decoded. Helpers here keep every index counting them alike.

pub use dmindex_fabric::Work;

/// Keys a bisection of `n` sorted keys compares (`slice::partition_point` and
/// `binary_search`, which halve without an early exit and check the last candidate):
/// ⌈log₂ n⌉ + 1 for `n ≥ 1`, none for an empty slice.
#[inline]
pub const fn bisect_compares(n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    (usize::BITS - (n - 1).leading_zeros()) as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisection_compares_match_partition_point() {
        for n in 0..300usize {
            let keys: Vec<usize> = (0..n).collect();
            for probe in [0, n / 3, n] {
                let compared = std::cell::Cell::new(0u64);
                let at = keys.partition_point(|&k| {
                    compared.set(compared.get() + 1);
                    k < probe
                });
                assert_eq!(at, probe.min(n));
                assert_eq!(compared.get(), bisect_compares(n), "n {n} probe {probe}");
            }
        }
    }
}
