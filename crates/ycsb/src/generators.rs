//! YCSB 0.17's number generators, reproduced exactly (same constants, same arithmetic).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;

/// FNV offset basis, 64-bit.
const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
/// FNV prime, 64-bit.
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of `val`, then `Math.abs`.
pub fn fnvhash64(val: u64) -> u64 {
    let mut v = val;
    let mut h = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        h ^= v & 0xFF;
        v >>= 8;
        h = h.wrapping_mul(FNV_PRIME_64);
    }
    // Java's Math.abs leaves Long.MIN_VALUE negative; as unsigned that is 2^63.
    (h as i64).wrapping_abs() as u64
}

/// A double in [0, 1) from the top 53 bits, as `java.util.Random.nextDouble` builds one.
pub fn next_double(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform integer in `[0, n)` (n > 0).
pub fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// Default Zipfian constant θ.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// Item count of the Zipfian inside [`ScrambledZipfian`].
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// Precomputed ζ(10^10, 0.99) used by [`ScrambledZipfian`].
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// ζ over items `[from, to)` added to `initial`: Σ_{i=from}^{to-1} 1/(i+1)^θ.
pub fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// ζ(n, θ) = Σ_{i=1}^{n} i^−θ: summed exactly up to 2^20 terms, the rest by Euler–Maclaurin
/// (integral, end-point and first derivative terms; the next term is below 10^−25 there).
pub fn zeta_of(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 1 << 20;
    if n <= EXACT {
        return zeta(0, n, theta, 0.0);
    }
    let (m, nf) = (EXACT as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let df = |x: f64| -theta * x.powf(-theta - 1.0);
    zeta(0, EXACT, theta, 0.0)
        + (nf.powf(1.0 - theta) - m.powf(1.0 - theta)) / (1.0 - theta)
        + (f(nf) - f(m)) / 2.0
        + (df(nf) - df(m)) / 12.0
}

/// Zipfian over `[base, base + items)` (Gray et al., SIGMOD '94), as YCSB's `ZipfianGenerator`:
/// item `base` is the most popular. The item count can grow; ζ is then extended incrementally.
#[derive(Clone, Debug)]
pub struct Zipfian {
    base: u64,
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// A Zipfian over `[min, max]` with ζ(n) given (or computed when `None`).
    pub fn new(min: u64, max: u64, theta: f64, zetan: Option<f64>) -> Zipfian {
        let items = max - min + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let zetan = zetan.unwrap_or_else(|| zeta(0, items, theta, 0.0));
        let mut z = Zipfian {
            base: min,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2theta,
            zetan,
            eta: 0.0,
            count_for_zeta: items,
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// ζ(n) currently in use.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// A draw over the first `item_count` items.
    pub fn next_long(&mut self, rng: &mut ChaCha8Rng, item_count: u64) -> u64 {
        if item_count != self.count_for_zeta {
            if item_count > self.count_for_zeta {
                self.zetan = zeta(self.count_for_zeta, item_count, self.theta, self.zetan);
            } else {
                self.zetan = zeta(0, item_count, self.theta, 0.0);
            }
            self.count_for_zeta = item_count;
            self.eta = self.eta_for(item_count);
        }
        let u = next_double(rng);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    /// A draw over the configured items.
    pub fn next(&mut self, rng: &mut ChaCha8Rng) -> u64 {
        let n = self.count_for_zeta;
        self.next_long(rng, n)
    }
}

/// YCSB's "zipfian" request distribution: a Zipfian over 10^10 ranks, scattered over
/// `[min, max]` by `fnvhash64(rank) % items`, so popular keys are spread across the key space.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    items: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    /// Over `[min, max]`, θ = 0.99.
    pub fn new(min: u64, max: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            items: max - min + 1,
            gen: Zipfian::new(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, Some(SCRAMBLED_ZETAN)),
        }
    }

    /// Over `[min, max]` with skew `theta`: as YCSB's generator, ranks over 10^10 items for
    /// every θ (YCSB sums ζ(10^10, θ) term by term; [`zeta_of`] gets it in milliseconds, and
    /// callers making many generators pass it in).
    pub fn with_theta(min: u64, max: u64, theta: f64, zetan: Option<f64>) -> ScrambledZipfian {
        if theta == ZIPFIAN_CONSTANT {
            return ScrambledZipfian::new(min, max);
        }
        let zetan = zetan.unwrap_or_else(|| zeta_of(SCRAMBLED_ITEM_COUNT, theta));
        ScrambledZipfian {
            min,
            items: max - min + 1,
            gen: Zipfian::new(0, SCRAMBLED_ITEM_COUNT, theta, Some(zetan)),
        }
    }

    /// Over `[min, max]` with skew `theta`, drawing from `ranks` ranks instead of YCSB's
    /// 10^10 (ζ(ranks, θ) is `zetan` if given).
    pub fn with_ranks(
        min: u64,
        max: u64,
        theta: f64,
        ranks: u64,
        zetan: Option<f64>,
    ) -> ScrambledZipfian {
        if ranks == SCRAMBLED_ITEM_COUNT {
            return ScrambledZipfian::with_theta(min, max, theta, zetan);
        }
        let zetan = zetan.unwrap_or_else(|| zeta_of(ranks, theta));
        // Ranks 0..ranks: exactly `ranks` of them (YCSB's own 10^10 is `0..=10^10`).
        let gen = Zipfian::new(0, ranks - 1, theta, Some(zetan));
        ScrambledZipfian { min, items: max - min + 1, gen }
    }

    /// The next key number.
    pub fn next(&mut self, rng: &mut ChaCha8Rng) -> u64 {
        let rank = self.gen.next(rng);
        self.min + fnvhash64(rank) % self.items
    }
}

/// YCSB's `AcknowledgedCounterGenerator`: hands out insert numbers in order and tracks the highest
/// number below which every insert has been acknowledged. Shared by all clients.
///
/// Every operation of a workload with a "latest" or bounded key choice reads the limit, so
/// `next` and `last_value` are single atomics; only `acknowledge` (once per insert) takes the
/// lock that orders out-of-order acknowledgements. The limit only grows, so a reader that sees
/// a slightly older one picks among keys that were all acknowledged, as YCSB's does.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    /// Every number below `limit` is acknowledged.
    limit: AtomicU64,
    /// Acknowledged numbers at or above `limit`.
    acked: Mutex<BTreeSet<u64>>,
}

impl AcknowledgedCounter {
    /// Numbers start at `start`; everything below it counts as acknowledged (the loaded records).
    pub fn new(start: u64) -> AcknowledgedCounter {
        AcknowledgedCounter {
            next: AtomicU64::new(start),
            limit: AtomicU64::new(start),
            acked: Mutex::new(BTreeSet::new()),
        }
    }

    /// The next insert number.
    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks `n` as inserted.
    pub fn acknowledge(&self, n: u64) {
        let mut acked = self.acked.lock().expect("counter lock");
        acked.insert(n);
        // Only this lock's holder moves the limit.
        let mut limit = self.limit.load(Ordering::Relaxed);
        while acked.first() == Some(&limit) {
            acked.pop_first();
            limit += 1;
        }
        self.limit.store(limit, Ordering::Release);
    }

    /// The highest number with every number up to it acknowledged (YCSB's `lastValue`).
    pub fn last_value(&self) -> u64 {
        self.limit.load(Ordering::Acquire).saturating_sub(1)
    }
}

/// YCSB's `SkewedLatestGenerator`: recent inserts are the most popular.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// Over the `items` acknowledged so far with skew `theta` (ζ(items, θ) may be passed in to
    /// share its cost).
    pub fn new(items: u64, theta: f64, zetan: Option<f64>) -> SkewedLatest {
        SkewedLatest { zipf: Zipfian::new(0, items.max(1) - 1, theta, zetan) }
    }

    /// The next key number, given the last acknowledged one.
    pub fn next(&mut self, rng: &mut ChaCha8Rng, last: u64) -> u64 {
        last - self.zipf.next_long(rng, last.max(1)).min(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;

    #[test]
    fn fnvhash64_matches_ycsb_vectors() {
        assert_eq!(fnvhash64(0), 6284781860667377211);
        assert_eq!(fnvhash64(1), 8517097267634966620);
        assert_eq!(fnvhash64(2), 1820151046732198393);
        assert_eq!(fnvhash64(999), 2071219101098386137);
        assert_eq!(fnvhash64(1000), 5952875239596136740);
    }

    #[test]
    fn scrambled_zetan_is_zeta_of_ten_billion() {
        // Check the constant's leading digits against a partial sum plus the integral tail.
        let n = 10_000_000u64;
        let partial = zeta(0, n, 0.99, 0.0);
        let tail = ((1e10f64).powf(0.01) - (n as f64).powf(0.01)) / 0.01;
        assert!((partial + tail - SCRAMBLED_ZETAN).abs() < 1e-3, "{}", partial + tail);
    }

    #[test]
    fn zipfian_head_probabilities() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut z = Zipfian::new(0, 999, 0.99, None);
        let n = 200_000;
        let mut counts = [0u32; 3];
        for _ in 0..n {
            let v = z.next(&mut rng);
            assert!(v < 1000);
            if v < 3 {
                counts[v as usize] += 1;
            }
        }
        let zetan = zeta(0, 1000, 0.99, 0.0);
        for (i, &c) in counts.iter().enumerate() {
            let p = 1.0 / ((i + 1) as f64).powf(0.99) / zetan;
            let got = c as f64 / n as f64;
            // Gray's closed form is approximate beyond rank 1; ranks 0 and 1 are exact.
            let tol = if i < 2 { 0.1 } else { 0.35 };
            assert!((got - p).abs() / p < tol, "rank {i}: {got} vs {p}");
        }
    }

    #[test]
    fn zeta_of_matches_the_sum_and_ycsb_constant() {
        assert!((zeta_of(SCRAMBLED_ITEM_COUNT, 0.99) - SCRAMBLED_ZETAN).abs() < 1e-9);
        for (n, theta) in [(3_000_000, 0.5), (5_000_000, 0.9), (1 << 20, 0.99)] {
            let exact = zeta(0, n, theta, 0.0);
            assert!((zeta_of(n, theta) - exact).abs() / exact < 1e-12, "ζ({n}, {theta})");
        }
    }

    #[test]
    fn hottest_scrambled_key_over_60m_items_gets_about_3_8_percent() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut z = ScrambledZipfian::new(0, 60_000_000 - 1);
        let n = 400_000;
        let hot = fnvhash64(0) % 60_000_000;
        let hits = (0..n).filter(|_| z.next(&mut rng) == hot).count();
        let share = hits as f64 / n as f64;
        assert!((share - 0.038).abs() < 0.002, "hottest key share {share}");
    }

    #[test]
    fn acknowledged_counter_tracks_contiguous_prefix() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last_value(), 9);
        let (a, b, d) = (c.next(), c.next(), c.next());
        assert_eq!((a, b, d), (10, 11, 12));
        c.acknowledge(11);
        assert_eq!(c.last_value(), 9, "10 is not acknowledged yet");
        c.acknowledge(10);
        assert_eq!(c.last_value(), 11);
        c.acknowledge(12);
        assert_eq!(c.last_value(), 12);
    }

    #[test]
    fn skewed_latest_prefers_recent() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut g = SkewedLatest::new(1000, ZIPFIAN_CONSTANT, None);
        let draws: Vec<u64> = (0..10_000).map(|_| g.next(&mut rng, 999)).collect();
        assert!(draws.iter().all(|&d| d <= 999));
        let latest = draws.iter().filter(|&&d| d == 999).count() as f64 / 10_000.0;
        assert!(latest > 0.1, "the latest key should be the most popular: {latest}");
    }
}
