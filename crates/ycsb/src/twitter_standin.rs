//! Stand-ins for Twitter's cache traces, made from the statistics Twitter published for each
//! cluster, for when the traces themselves (hundreds of GB) are not at hand.
//!
//! The real traces ([`crate::twitter`]) are what the Dolphin paper replays in its Fig. 9. Their
//! release publishes a table of per-cluster statistics (the cache-trace repository's March 2020
//! table; Yang, Yue and Rashmi, OSDI '20). A stand-in keeps what decides an index's
//! throughput on a replay and nothing else:
//!
//! * the **operation mix** (cluster8: set 0.50, get 0.50; cluster9: get 0.99);
//! * the **popularity skew**: the table's fitted Zipf α (1.7366 and 1.6796), so the key of
//!   popularity rank `r` is requested with probability ∝ `r^-α`;
//! * the **number of distinct keys**: the table's working set (not counting TTLs) over the mean
//!   key + value size: 1007 MB / (23 + 9497) B ≈ 111 k keys for cluster8, 449 MB / (32 + 39) B
//!   ≈ 6.6 M for cluster9 (a caller may cap it to its scale);
//! * the **key and value sizes** of the table, written into each line (the replay hashes a key
//!   string to an 8-byte key and uses the run's value size, as for a real trace).
//!
//! What it does not keep: TTLs, timestamps, diurnal changes, the order of requests (drawn
//! independently), the one-hit wonders, and the `add`/`cas`/`incr` operations of other
//! clusters. Ranks are scattered over key ids by a fixed permutation, so hot keys are not
//! neighbours in key order.
//!
//! The output is in the real traces' format (`timestamp,key,key size,value size,client,op,TTL`),
//! so it goes through the same parser and replay as a real trace.

use std::io::{self, Write};

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use crate::generators::next_double;

/// One cluster's published statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterStats {
    pub name: &'static str,
    /// Mean key size, bytes.
    pub key_size: usize,
    /// Mean value size, bytes.
    pub value_size: usize,
    /// Share of requests that are gets (the rest are sets).
    pub get: f64,
    /// Fitted Zipf α of the popularity.
    pub zipf_alpha: f64,
    /// Working set size not counting TTLs, MB.
    pub wss_mb: f64,
}

/// cluster8: write-heavy (set 0.50, get 0.50), large values.
pub const CLUSTER8: ClusterStats = ClusterStats {
    name: "cluster8",
    key_size: 23,
    value_size: 9497,
    get: 0.50,
    zipf_alpha: 1.7366,
    wss_mb: 1007.0,
};

/// cluster9: read-only in effect (get 0.99), small values.
pub const CLUSTER9: ClusterStats = ClusterStats {
    name: "cluster9",
    key_size: 32,
    value_size: 39,
    get: 0.99,
    zipf_alpha: 1.6796,
    wss_mb: 449.0,
};

/// The clusters a stand-in can be made for.
pub const CLUSTERS: [ClusterStats; 2] = [CLUSTER8, CLUSTER9];

impl ClusterStats {
    /// Distinct keys: the working set over the mean key + value size.
    pub fn keys(&self) -> u64 {
        (self.wss_mb * (1u64 << 20) as f64 / (self.key_size + self.value_size) as f64) as u64
    }
}

/// A sampler of popularity ranks `0..n`, rank `r` with probability ∝ `(r + 1)^-α`: inversion of
/// the cumulative table (8 bytes a key).
pub struct ZipfRanks {
    cdf: Vec<f64>,
}

impl ZipfRanks {
    /// The sampler over `n ≥ 1` ranks with exponent `alpha > 0`.
    pub fn new(n: u64, alpha: f64) -> ZipfRanks {
        assert!(n >= 1 && alpha > 0.0, "n {n}, alpha {alpha}");
        let mut sum = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|r| {
                sum += (r as f64).powf(-alpha);
                sum
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= sum);
        ZipfRanks { cdf }
    }

    /// The rank of uniform draw `u` in `[0, 1)`.
    pub fn rank(&self, u: f64) -> u64 {
        (self.cdf.partition_point(|&c| c <= u) as u64).min(self.cdf.len() as u64 - 1)
    }
}

/// The key id of popularity rank `r` among `n`: `r × step mod n`, a permutation of `0..n` for a
/// step coprime with `n`.
fn scatter(r: u64, n: u64, step: u64) -> u64 {
    ((r as u128 * step as u128) % n as u128) as u64
}

/// A step coprime with `n`, far from 0 and 1 so neighbours in rank land far apart.
fn coprime_step(n: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    // The golden ratio of n, moved up until coprime; at most a few steps (coprimes are dense).
    let mut s = ((n as f64 * 0.618_033_988_75) as u64).max(1);
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

/// The key string of id `i`: `size` characters, the cluster's tag then `i` in base 36.
fn key_string(tag: &str, i: u64, size: usize, out: &mut String) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    out.clear();
    out.push_str(tag);
    let mut digits = [0u8; 13];
    let (mut n, mut len) = (i, 0);
    loop {
        digits[len] = DIGITS[(n % 36) as usize];
        (n, len) = (n / 36, len + 1);
        if n == 0 {
            break;
        }
    }
    let pad = size.saturating_sub(tag.len() + len);
    out.extend(std::iter::repeat_n('0', pad));
    out.extend(digits[..len].iter().rev().map(|&d| d as char));
}

/// Writes `requests` lines of a stand-in for `stats` over `keys` distinct keys, from `seed`.
pub fn write(
    stats: &ClusterStats,
    keys: u64,
    requests: u64,
    seed: u64,
    out: &mut impl Write,
) -> io::Result<()> {
    let keys = keys.max(1);
    let ranks = ZipfRanks::new(keys, stats.zipf_alpha);
    let step = coprime_step(keys);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tag = format!("{}:", stats.name.trim_start_matches("cluster"));
    let mut key = String::with_capacity(stats.key_size.max(16));
    writeln!(
        out,
        "# stand-in for {} from its published statistics: get {}, Zipf alpha {}, {} keys",
        stats.name, stats.get, stats.zipf_alpha, keys
    )?;
    for t in 0..requests {
        let id = scatter(ranks.rank(next_double(&mut rng)), keys, step);
        key_string(&tag, id, stats.key_size, &mut key);
        let get = next_double(&mut rng) < stats.get;
        let (value, op) = if get { (0, "get") } else { (stats.value_size, "set") };
        writeln!(out, "{t},{key},{},{value},0,{op},0", key.len())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{KeyFormat, OpKind};

    #[test]
    fn the_published_numbers_give_the_key_counts() {
        assert_eq!((CLUSTER8.keys(), CLUSTER9.keys()), (110_915, 6_631_135));
    }

    #[test]
    fn ranks_follow_the_power_law() {
        let z = ZipfRanks::new(1000, 1.5);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut count = [0u64; 4];
        let draws = 200_000;
        for _ in 0..draws {
            let r = z.rank(next_double(&mut rng));
            if r < 4 {
                count[r as usize] += 1;
            }
        }
        // P(rank 0) / P(rank r) = (r + 1)^1.5: 2.83, 5.20, 8.00, within sampling error.
        for (r, want) in [(1, 2.83), (2, 5.20), (3, 8.00)] {
            let got = count[0] as f64 / count[r] as f64;
            assert!((got / want - 1.0).abs() < 0.06, "rank {r}: {got} vs {want}");
        }
        assert_eq!(z.rank(0.0), 0);
        assert_eq!(z.rank(0.999_999_999_9), 999);
    }

    #[test]
    fn ranks_scatter_to_every_key_once() {
        for n in [1u64, 2, 10, 36, 1000, 110_915] {
            let step = coprime_step(n);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let id = scatter(r, n, step) as usize;
                assert!(!seen[id], "n {n}: id {id} twice");
                seen[id] = true;
            }
        }
    }

    #[test]
    fn a_stand_in_parses_as_a_real_trace_with_its_mix_and_sizes() {
        let mut text = Vec::new();
        write(&CLUSTER8, 5000, 20_000, 3, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let mut gets = 0;
        let mut distinct = std::collections::HashSet::new();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f[1].len(), CLUSTER8.key_size, "{line}");
            distinct.insert(f[1].to_string());
            let op = crate::twitter::parse_line(line, KeyFormat::new(8, false).unwrap())
                .unwrap()
                .unwrap();
            match op.kind {
                OpKind::Read => gets += 1,
                OpKind::Insert => assert_eq!(f[3], "9497"),
                other => panic!("{other:?}"),
            }
        }
        let share = gets as f64 / 20_000.0;
        assert!((share - 0.5).abs() < 0.02, "{share}");
        // α 1.74 over 5 000 keys: the hottest key alone takes a third of the requests, so far
        // fewer keys than requests are seen.
        assert!(distinct.len() < 2_000 && distinct.len() > 50, "{}", distinct.len());
        // The same seed writes the same trace.
        let mut again = Vec::new();
        write(&CLUSTER8, 5000, 20_000, 3, &mut again).unwrap();
        assert_eq!(again, text.as_bytes());
    }
}
