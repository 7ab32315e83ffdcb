//! YCSB core workloads LOAD and A–F, and the per-client operation streams they generate.

use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::generators::{
    below, fnvhash64, next_double, zeta_of, AcknowledgedCounter, ScrambledZipfian, SkewedLatest,
    Zipfian, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT,
};

/// How YCSB picks the key of a read, update, scan or read-modify-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// YCSB's "zipfian": scrambled Zipfian, θ = 0.99 unless the spec says otherwise.
    Zipfian,
    /// Plain Zipfian (Gray et al.) over the loaded keys: key number 0 is the hottest.
    PlainZipfian,
    /// YCSB's "latest": skewed towards the most recent acknowledged inserts.
    Latest,
    /// Uniform over the loaded keys.
    Uniform,
}

/// A workload's operation mix and request distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Name (load, a … f).
    pub name: String,
    /// Proportions of read, update, insert, scan, read-modify-write.
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub rmw: f64,
    /// Not a YCSB operation: deletes of existing keys (for measuring them).
    #[serde(default)]
    pub delete: f64,
    /// Key distribution.
    pub distribution: Distribution,
    /// Skew θ of the zipfian, plain zipfian and latest distributions (YCSB's
    /// `zipfianconstant`, 0.99).
    #[serde(default = "default_theta")]
    pub theta: f64,
    /// Ranks the scrambled zipfian draws from before scattering them over the keys (YCSB's
    /// `ItemCount`, 10^10): ranks past the keys loaded land like uniform draws, a share of
    /// 1 − ζ(keys)/ζ(ranks) of the requests that depends on the keys loaded.
    #[serde(default = "default_ranks")]
    pub zipf_ranks: u64,
    /// Scan lengths are uniform in `[min_scan, max_scan]` (YCSB: `[1, maxscanlength]`).
    pub max_scan: u64,
    #[serde(default = "one")]
    pub min_scan: u64,
}

fn one() -> u64 {
    1
}

/// `x` as written for a person: 0.99 as `0.99`, but 1e308 as `1e308` rather than its 309
/// digits (and 1e-300 likewise).
fn short(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() <= 12 {
        plain
    } else {
        format!("{x:e}")
    }
}

fn default_theta() -> f64 {
    ZIPFIAN_CONSTANT
}

fn default_ranks() -> u64 {
    SCRAMBLED_ITEM_COUNT
}

impl WorkloadSpec {
    /// Whether its streams can be drawn ahead of time: no inserts and no "latest" choice, so no
    /// operation depends on which inserts completed before it.
    pub fn plannable(&self) -> bool {
        self.insert == 0.0 && self.distribution != Distribution::Latest
    }

    /// YCSB's workload by name: `load`, `a` … `f` (case-insensitive).
    pub fn named(name: &str) -> Result<WorkloadSpec, String> {
        let (read, update, insert, scan, rmw, distribution) = match name
            .to_ascii_lowercase()
            .as_str()
        {
            "load" => (0.0, 0.0, 1.0, 0.0, 0.0, Distribution::Zipfian),
            "a" => (0.5, 0.5, 0.0, 0.0, 0.0, Distribution::Zipfian),
            "b" => (0.95, 0.05, 0.0, 0.0, 0.0, Distribution::Zipfian),
            "c" => (1.0, 0.0, 0.0, 0.0, 0.0, Distribution::Zipfian),
            "d" => (0.95, 0.0, 0.05, 0.0, 0.0, Distribution::Latest),
            "e" => (0.0, 0.0, 0.05, 0.95, 0.0, Distribution::Zipfian),
            "f" => (0.5, 0.0, 0.0, 0.0, 0.5, Distribution::Zipfian),
            other => {
                return Err(format!("unknown workload '{other}' (known: load, a, b, c, d, e, f)"))
            }
        };
        Ok(WorkloadSpec {
            name: name.to_ascii_lowercase(),
            read,
            update,
            insert,
            scan,
            rmw,
            delete: 0.0,
            distribution,
            theta: ZIPFIAN_CONSTANT,
            zipf_ranks: SCRAMBLED_ITEM_COUNT,
            max_scan: 100,
            min_scan: 1,
        })
    }

    /// Overrides proportions from `read=0.5,update=0.3,delete=0.2,…` (names: read, update,
    /// insert, scan, rmw, delete); the others become 0.
    pub fn with_mix(mut self, mix: &str) -> Result<WorkloadSpec, String> {
        let (mut r, mut u, mut i, mut s, mut m, mut d) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for part in mix.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("mix entry '{part}' is not name=proportion"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| *x >= 0.0 && x.is_finite())
                .ok_or_else(|| format!("mix proportion '{v}' is not a non-negative number"))?;
            match k.trim() {
                "read" => r = v,
                "update" => u = v,
                "insert" => i = v,
                "scan" => s = v,
                "rmw" => m = v,
                "delete" => d = v,
                other => return Err(format!("unknown operation '{other}' in mix (known: read, update, insert, scan, rmw, delete)")),
            }
        }
        if r + u + i + s + m + d <= 0.0 {
            return Err("mix proportions sum to zero".into());
        }
        (self.read, self.update, self.insert, self.scan, self.rmw, self.delete) =
            (r, u, i, s, m, d);
        self.name = format!("{}+mix({mix})", self.name);
        Ok(self)
    }

    /// Every scan asks for exactly `n` pairs (1 to 1 000 000), not YCSB's uniform `[1, 100]`.
    pub fn with_scan_len(mut self, n: u64) -> Result<WorkloadSpec, String> {
        if !(1..=1_000_000).contains(&n) {
            return Err(format!("scan length {n} is outside 1..=1000000"));
        }
        (self.min_scan, self.max_scan) = (n, n);
        self.name = format!("{}+scan{n}", self.name);
        Ok(self)
    }

    /// Sets the skew θ of the zipfian-family distributions, in `(0, 1)` like YCSB's
    /// `zipfianconstant` (θ = 1 divides by zero in Gray's formula).
    pub fn with_theta(mut self, theta: f64) -> Result<WorkloadSpec, String> {
        if !(theta > 0.0 && theta < 1.0) {
            return Err(format!("zipfian skew {} is outside (0, 1)", short(theta)));
        }
        self.theta = theta;
        self.name = format!("{}+theta{}", self.name, short(theta));
        Ok(self)
    }

    /// Sets the ranks the scrambled zipfian draws from (YCSB: 10^10), in `1..=10^10`: with
    /// fewer, fewer requests land past the keys loaded. A run on fewer keys than a paper's can
    /// so keep the paper's share of such requests (1 − ζ(keys)/ζ(ranks)).
    pub fn with_zipf_ranks(mut self, ranks: u64) -> Result<WorkloadSpec, String> {
        if self.distribution != Distribution::Zipfian {
            return Err("ranks shape the scrambled zipfian only; this run's distribution is \
                        another"
                .into());
        }
        if !(1..=SCRAMBLED_ITEM_COUNT).contains(&ranks) {
            return Err(format!("zipfian ranks {ranks} are outside 1..={SCRAMBLED_ITEM_COUNT}"));
        }
        self.zipf_ranks = ranks;
        self.name = format!("{}+ranks{ranks}", self.name);
        Ok(self)
    }

    /// Overrides the request distribution (`zipfian`, `uniform`, `latest`, `plain_zipfian`).
    pub fn with_distribution(mut self, name: &str) -> Result<WorkloadSpec, String> {
        self.distribution = Distribution::named(name)?;
        self.name = format!("{}+{}", self.name, name.trim().to_ascii_lowercase());
        Ok(self)
    }
}

impl Distribution {
    /// The distribution called `name` (YCSB's `requestdistribution` values, plus
    /// `plain_zipfian`).
    pub fn named(name: &str) -> Result<Distribution, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "zipfian" => Ok(Distribution::Zipfian),
            "uniform" => Ok(Distribution::Uniform),
            "latest" => Ok(Distribution::Latest),
            "plain_zipfian" => Ok(Distribution::PlainZipfian),
            other => Err(format!(
                "unknown request distribution '{other}' (known: zipfian, uniform, latest, plain_zipfian)"
            )),
        }
    }
}

/// What one operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    Delete,
}

impl OpKind {
    /// Every kind, in report order (which is declaration order: `kind as usize` indexes it).
    pub const ALL: [OpKind; 6] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::Delete,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
            OpKind::Delete => "delete",
        }
    }
}

/// Longest key [`KeyStyle::Ycsb`] makes: `"user"` and a Java `long` in decimal, which is at most
/// 20 characters (19 digits, or `-9223372036854775808`: YCSB's `fnvhash64` applies `Math.abs`,
/// which leaves `Long.MIN_VALUE` negative).
pub const YCSB_MAX_KEY_LEN: usize = 24;

/// How a [`KeyFormat`] spells a key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyStyle {
    /// Every key is exactly `size` bytes: an 8-byte big-endian integer when `size` is 8, else
    /// `user` and the number zero-padded (and, below 20 digits, cut to its low digits) to fill
    /// `size`. Ordered key numbers start at 1.
    #[default]
    Fixed,
    /// YCSB 0.17 CoreWorkload's own keys (`buildKeyName` with the default `zeropadding=1`):
    /// `user` followed by the number as Java's `Long.toString` writes it, with no padding, so keys
    /// are 5 to [`YCSB_MAX_KEY_LEN`] bytes long and byte-equal to the keys of a real YCSB trace.
    /// Ordered key number n is `user<n>` (from `user0`), as in YCSB.
    Ycsb,
}

/// Turns key numbers into key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFormat {
    /// [`KeyStyle::Fixed`]: the key size in bytes (8 means 8-byte big-endian integers, more means
    /// `user…` strings zero-padded to exactly this length). [`KeyStyle::Ycsb`]: the longest key,
    /// [`YCSB_MAX_KEY_LEN`]. Either way [`KeyFormat::max_key_len`].
    pub size: usize,
    /// YCSB `insertorder=ordered`: the key number itself is the value (plus one for
    /// [`KeyStyle::Fixed`], which keeps 0 free); otherwise hashed: `fnvhash64(n)`.
    pub ordered: bool,
    /// How keys are spelled.
    #[serde(default)]
    pub style: KeyStyle,
    /// Folded keys (8-byte integers only, [`KeyFormat::folded`]): key number n is a bijective
    /// mix of n's low `fold_bits` bits, plus one. 0: not folded.
    #[serde(default)]
    pub fold_bits: u8,
}

impl KeyFormat {
    /// Fixed-size keys of `size` bytes ([`KeyStyle::Fixed`]); checks the size.
    pub fn new(size: usize, ordered: bool) -> Result<KeyFormat, String> {
        if size < 8 {
            return Err(format!("key size {size} is below 8 bytes"));
        }
        if size > 255 {
            return Err(format!("key size {size} exceeds 255 bytes"));
        }
        Ok(KeyFormat { size, ordered, style: KeyStyle::Fixed, fold_bits: 0 })
    }

    /// The Dolphin paper's key format: 8-byte integer keys *folded* into a space of 2^`bits`
    /// (`1 ..= 2^bits`), each number's key a bijective mix of it ([`fold`]), so a load inserts
    /// them in pseudo-random order and `2^(bits − 1)` items fill half the space (the paper: 512 M
    /// keys in 2³⁰). Numbers at or past 2^`bits` wrap onto earlier keys.
    pub fn folded(bits: u8) -> Result<KeyFormat, String> {
        if !(2..=63).contains(&bits) {
            return Err(format!("a folded key space of 2^{bits} keys is out of 2^2..=2^63"));
        }
        Ok(KeyFormat { size: 8, ordered: false, style: KeyStyle::Fixed, fold_bits: bits })
    }

    /// The bits of the smallest folded space that holds `keys` at density at most ½.
    pub fn fold_bits_for(keys: u64) -> u8 {
        (64 - keys.max(2).saturating_sub(1).leading_zeros() as u8 + 1).clamp(2, 63)
    }

    /// Keys exactly as YCSB 0.17 forms them ([`KeyStyle::Ycsb`]): `"user" + fnvhash64(n)`, or
    /// `"user" + n` when `ordered`, in plain decimal.
    pub fn ycsb(ordered: bool) -> KeyFormat {
        KeyFormat { size: YCSB_MAX_KEY_LEN, ordered, style: KeyStyle::Ycsb, fold_bits: 0 }
    }

    /// The longest key this format makes (every key has this length for [`KeyStyle::Fixed`]): what
    /// an index must be sized for.
    pub fn max_key_len(&self) -> usize {
        match self.style {
            KeyStyle::Fixed => self.size,
            KeyStyle::Ycsb => YCSB_MAX_KEY_LEN,
        }
    }

    /// Whether keys are 8-byte big-endian integers.
    pub fn is_integer(&self) -> bool {
        self.style == KeyStyle::Fixed && self.size == 8
    }

    /// The key of key number `n`.
    pub fn key(&self, n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        self.key_into(n, &mut out);
        out
    }

    /// [`KeyFormat::key`] written into `out` (cleared first): a client that reuses one buffer
    /// makes its keys without allocating.
    pub fn key_into(&self, n: u64, out: &mut Vec<u8>) {
        self.key_of_value_into(self.value_of(n), out)
    }

    /// The integer key number `n` is spelled from ([`KeyFormat::key_of_value`]): hashed, folded
    /// or shifted as the format says.
    #[inline]
    pub fn value_of(&self, n: u64) -> u64 {
        match (self.style, self.ordered) {
            _ if self.fold_bits > 0 => fold(n, self.fold_bits) + 1,
            (KeyStyle::Fixed, true) => n + 1,
            (KeyStyle::Ycsb, true) => n,
            (_, false) => fnvhash64(n),
        }
    }

    /// The key for an already-hashed (or trace-given) integer `v`. For [`KeyStyle::Ycsb`], `v` is
    /// the bits of YCSB's Java `long`, written as that `long` (so 2^63 is `user-9223372036854775808`,
    /// what YCSB writes for `fnvhash64`'s one negative result).
    pub fn key_of_value(&self, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        self.key_of_value_into(v, &mut out);
        out
    }

    /// [`KeyFormat::key_of_value`] written into `out` (cleared first).
    pub fn key_of_value_into(&self, v: u64, out: &mut Vec<u8>) {
        use std::io::Write;
        out.clear();
        if self.style == KeyStyle::Ycsb {
            write!(out, "user{}", v as i64).expect("writing to a Vec");
            return;
        }
        if self.size == 8 {
            out.extend_from_slice(&v.to_be_bytes());
            return;
        }
        let digits = self.size - 4;
        let v = if digits < 20 { v % 10u64.pow(digits as u32) } else { v };
        write!(out, "user{v:0digits$}").expect("writing to a Vec");
    }
}

/// A bijection of `[0, 2^bits)` (`n` taken modulo 2^bits): multiply by odd constants and
/// xor-shift right, each step invertible on `bits`-bit words, so consecutive numbers land far
/// apart.
pub fn fold(n: u64, bits: u8) -> u64 {
    let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let half = (bits / 2).max(1);
    let mut v = n & mask;
    v = v.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask;
    v ^= v >> half;
    v = v.wrapping_mul(0xBF58_476D_1CE4_E5B9) & mask;
    v ^= v >> half;
    v
}

/// One operation to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub key: Vec<u8>,
    /// Scan length (scans only).
    pub scan_len: usize,
    /// The insert number to acknowledge when an insert completes.
    pub insert_number: Option<u64>,
}

/// An operation drawn but not yet spelled: its kind and key (16 bytes), so a client's whole
/// stream can be drawn before a measured run ([`ClientStream::plannable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedOp {
    pub kind: OpKind,
    /// For an insert, its insert number; otherwise the key as its format's integer
    /// ([`KeyFormat::value_of`] of the key number), hashed when drawn so that spelling it in a
    /// measured run is a copy.
    pub key: u64,
    pub scan_len: u32,
}

impl PlannedOp {
    /// Spells this operation over `op` in `format` (its key buffer reused).
    #[inline]
    pub fn write_into(self, format: KeyFormat, op: &mut Op) {
        op.kind = self.kind;
        op.scan_len = self.scan_len as usize;
        if self.kind == OpKind::Insert {
            op.insert_number = Some(self.key);
            format.key_into(self.key, &mut op.key);
        } else {
            op.insert_number = None;
            format.key_of_value_into(self.key, &mut op.key);
        }
    }
}

impl Default for Op {
    /// A read of the empty key: a buffer for [`ClientStream::next_into`] to fill.
    fn default() -> Op {
        Op { kind: OpKind::Read, key: Vec::new(), scan_len: 0, insert_number: None }
    }
}

/// State shared by all clients of one run: the insert counter and the key-space size.
#[derive(Debug)]
pub struct Shared {
    pub spec: WorkloadSpec,
    pub format: KeyFormat,
    /// Records loaded before the run.
    pub records: u64,
    /// Insert numbers for the run phase.
    pub inserts: AcknowledgedCounter,
    key_space: u64,
    /// ζ of the chosen zipfian-family distribution over its items, computed once for all
    /// clients (0 when the distribution needs none).
    zetan: f64,
}

impl Shared {
    /// The shared state for a run over `records` loaded records and `ops` operations.
    pub fn new(spec: WorkloadSpec, format: KeyFormat, records: u64, ops: u64) -> Arc<Shared> {
        // YCSB sizes the zipfian key space to cover expected inserts so hot keys do not move.
        let expected_new = (ops as f64 * spec.insert * 2.0) as u64;
        let key_space = records + expected_new + 1;
        let zetan = match spec.distribution {
            Distribution::Latest | Distribution::PlainZipfian => {
                zeta_of(records.max(1), spec.theta)
            }
            Distribution::Zipfian
                if spec.theta != ZIPFIAN_CONSTANT || spec.zipf_ranks != SCRAMBLED_ITEM_COUNT =>
            {
                zeta_of(spec.zipf_ranks, spec.theta)
            }
            _ => 0.0,
        };
        Arc::new(Shared {
            key_space,
            inserts: AcknowledgedCounter::new(records),
            spec,
            format,
            records,
            zetan,
        })
    }
}

enum Chooser {
    Scrambled(ScrambledZipfian),
    Plain(Zipfian),
    Latest(SkewedLatest),
    Uniform,
}

/// One client's operation stream.
pub struct ClientStream {
    shared: Arc<Shared>,
    rng: ChaCha8Rng,
    chooser: Chooser,
    weights: [f64; 6],
}

impl ClientStream {
    /// The stream of client `client` under `seed`.
    pub fn new(shared: Arc<Shared>, seed: u64, client: u64) -> ClientStream {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(client + 1);
        let records = shared.records.max(1);
        let (theta, zetan) = (shared.spec.theta, Some(shared.zetan));
        let chooser = match shared.spec.distribution {
            Distribution::Zipfian => Chooser::Scrambled(ScrambledZipfian::with_ranks(
                0,
                shared.key_space - 1,
                theta,
                shared.spec.zipf_ranks,
                zetan,
            )),
            Distribution::PlainZipfian => {
                Chooser::Plain(Zipfian::new(0, records - 1, theta, zetan))
            }
            Distribution::Latest => Chooser::Latest(SkewedLatest::new(records, theta, zetan)),
            Distribution::Uniform => Chooser::Uniform,
        };
        let s = &shared.spec;
        let weights = [s.read, s.update, s.insert, s.scan, s.rmw, s.delete];
        ClientStream { shared, rng, chooser, weights }
    }

    /// A key number for a non-insert operation, never above the last acknowledged insert.
    fn key_number(&mut self) -> u64 {
        let last = self.shared.inserts.last_value();
        loop {
            let n = match &mut self.chooser {
                Chooser::Scrambled(z) => z.next(&mut self.rng),
                Chooser::Plain(z) => z.next(&mut self.rng),
                Chooser::Latest(z) => z.next(&mut self.rng, last),
                Chooser::Uniform => below(&mut self.rng, last + 1),
            };
            if n <= last {
                return n;
            }
        }
    }

    /// The next operation.
    pub fn next_op(&mut self) -> Op {
        let mut op = Op::default();
        self.next_into(&mut op);
        op
    }

    /// The next operation, written over `op` (its key buffer reused: no allocation once it has
    /// grown to the longest key).
    pub fn next_into(&mut self, op: &mut Op) {
        let p = self.next_planned();
        p.write_into(self.shared.format, op);
    }

    /// The next operation, not yet spelled ([`PlannedOp::write_into`]).
    pub fn next_planned(&mut self) -> PlannedOp {
        let total: f64 = self.weights.iter().sum();
        let mut u = next_double(&mut self.rng) * total;
        // Rounding can leave u at the total: fall back to the last operation with weight.
        let mut pick = self.weights.iter().rposition(|&w| w > 0.0).unwrap_or(0);
        for (i, w) in self.weights.iter().enumerate() {
            if u < *w {
                pick = i;
                break;
            }
            u -= w;
        }
        // `weights` follow `OpKind::ALL`'s order.
        let kind = OpKind::ALL[pick];
        if kind == OpKind::Insert {
            let n = self.shared.inserts.next();
            return PlannedOp { kind, key: n, scan_len: 0 };
        }
        let number = self.key_number();
        let scan_len = if kind == OpKind::Scan {
            let spec = &self.shared.spec;
            (spec.min_scan + below(&mut self.rng, spec.max_scan - spec.min_scan + 1)) as u32
        } else {
            0
        };
        PlannedOp { kind, key: self.shared.format.value_of(number), scan_len }
    }

    /// Whether this stream can be drawn ahead of time: no inserts and no "latest" choice, so no
    /// operation depends on which inserts completed before it.
    pub fn plannable(&self) -> bool {
        self.shared.spec.plannable()
    }

    /// Acknowledges a completed insert (so later reads may pick it).
    pub fn acknowledge(&self, op: &Op) {
        if let Some(n) = op.insert_number {
            self.shared.inserts.acknowledge(n);
        }
    }
}

/// The keys of the load phase for loader `i` of `loaders`: numbers `i, i + loaders, …` below
/// `records`.
pub fn load_keys(
    format: KeyFormat,
    records: u64,
    i: u64,
    loaders: u64,
) -> impl Iterator<Item = Vec<u8>> {
    load_numbers(records, i, loaders).map(move |n| format.key(n))
}

/// The key numbers of [`load_keys`] (format each with [`KeyFormat::key_into`] to reuse a
/// buffer).
pub fn load_numbers(records: u64, i: u64, loaders: u64) -> impl Iterator<Item = u64> {
    (i..records).step_by(loaders.max(1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_keys_are_a_shuffled_half_full_space() {
        assert_eq!(KeyFormat::fold_bits_for(512 << 20), 30, "the paper: 512 M keys in 2^30");
        assert_eq!(KeyFormat::fold_bits_for(500_000), 20);
        assert!(KeyFormat::folded(1).is_err() && KeyFormat::folded(64).is_err());
        let f = KeyFormat::folded(12).unwrap();
        let mut seen: Vec<u64> =
            (0..4096).map(|n| u64::from_be_bytes(f.key(n).try_into().unwrap())).collect();
        // Pseudo-random order: consecutive numbers are not neighbours.
        assert!(seen.windows(2).filter(|w| w[0].abs_diff(w[1]) < 16).count() < 64);
        seen.sort_unstable();
        assert_eq!(seen, (1..=4096).collect::<Vec<u64>>(), "a bijection onto 1..=2^bits");
        assert_eq!(f.key(4096), f.key(0), "numbers wrap");
    }

    /// The share of reads that hit the most requested key of a zipfian run at skew `theta`.
    fn hottest_share(theta: f64) -> f64 {
        hottest_share_of(WorkloadSpec::named("c").unwrap().with_theta(theta).unwrap())
    }

    /// The share of `spec`'s reads of 100 000 keys that go to its hottest key.
    fn hottest_share_of(spec: WorkloadSpec) -> f64 {
        let shared = Shared::new(spec, KeyFormat::new(8, true).unwrap(), 100_000, 0);
        let mut s = ClientStream::new(shared, 3, 0);
        let mut counts = std::collections::HashMap::new();
        let n = 200_000;
        for _ in 0..n {
            *counts.entry(s.key_number()).or_insert(0u32) += 1;
        }
        *counts.values().max().unwrap() as f64 / n as f64
    }

    #[test]
    fn zipf_theta_sets_the_skew() {
        // As YCSB's, ranks run over 10^10 items for every θ; the hottest key's share is
        // 1/ζ(10^10, θ): 1.10 % at θ = 0.9 (3.8 % at 0.99), 0.0005 % at 0.5, where the hottest
        // key is no hotter than a uniform draw's luckiest.
        let (t9, t5) = (hottest_share(0.9), hottest_share(0.5));
        assert!((t9 - 0.0110).abs() < 0.0012, "θ = 0.9: {t9}");
        assert!(t5 < 1e-4, "θ = 0.5: {t5}");
        // θ = 0.99 keeps YCSB's own generator (ranks over 10^10, 3.8 % over 60 M keys).
        let a = WorkloadSpec::named("a").unwrap();
        let same = a.clone().with_theta(ZIPFIAN_CONSTANT).unwrap();
        let stream = |spec| {
            let shared = Shared::new(spec, KeyFormat::new(8, true).unwrap(), 1000, 100);
            let mut s = ClientStream::new(shared, 5, 1);
            (0..100).map(|_| s.next_op().key).collect::<Vec<_>>()
        };
        assert_eq!(stream(a), stream(same));
        for bad in [0.0, 1.0, -0.5, f64::NAN, 2.0] {
            let e = WorkloadSpec::named("a").unwrap().with_theta(bad).unwrap_err();
            assert!(e.contains("outside (0, 1)"), "{e}");
        }
        // Extremes are echoed short, not digit by digit.
        let e = WorkloadSpec::named("a").unwrap().with_theta(1e308).unwrap_err();
        assert_eq!(e, "zipfian skew 1e308 is outside (0, 1)");
        let tiny = WorkloadSpec::named("a").unwrap().with_theta(1e-300).unwrap();
        assert_eq!(tiny.name, "a+theta1e-300");
        assert_eq!(WorkloadSpec::named("a").unwrap().with_theta(0.9).unwrap().name, "a+theta0.9");
    }

    /// The share of a zipfian run's reads of 100 000 keys that go to its hottest key, with
    /// `ranks` ranks.
    fn hottest_share_over(ranks: u64) -> f64 {
        hottest_share_of(WorkloadSpec::named("c").unwrap().with_zipf_ranks(ranks).unwrap())
    }

    #[test]
    fn zipf_ranks_set_the_share_past_the_keys() {
        // The hottest key takes 1/ζ(ranks): 3.8 % over YCSB's 10^10 ranks, 5.9 % over 3.9 M
        // (where 14 % of requests land past 500 000 keys, as past the Dolphin paper's 512 M
        // over 10^10), every request with one rank.
        let default = hottest_share_over(SCRAMBLED_ITEM_COUNT);
        let fewer = hottest_share_over(3_885_969);
        let want = 1.0 / crate::generators::zeta_of(3_885_969, ZIPFIAN_CONSTANT);
        assert!((default - 0.0383).abs() < 0.003, "10^10 ranks: {default}");
        assert!(
            (fewer - want).abs() < 0.003 && want > 0.055,
            "3.9 M ranks: {fewer}, ζ says {want}"
        );
        assert_eq!(hottest_share_over(1), 1.0);
        let c = || WorkloadSpec::named("c").unwrap();
        assert_eq!(c().with_zipf_ranks(SCRAMBLED_ITEM_COUNT).unwrap().zipf_ranks, c().zipf_ranks);
        for bad in [0, SCRAMBLED_ITEM_COUNT + 1] {
            let e = c().with_zipf_ranks(bad).unwrap_err();
            assert!(e.contains("outside 1..="), "{e}");
        }
        let e = c().with_distribution("uniform").unwrap().with_zipf_ranks(10).unwrap_err();
        assert!(e.contains("scrambled zipfian only"), "{e}");
        assert_eq!(c().with_zipf_ranks(10).unwrap().name, "c+ranks10");
    }

    #[test]
    fn kinds_index_their_report_order() {
        for (i, k) in OpKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{}", k.name());
        }
    }

    #[test]
    fn proportions_follow_the_spec() {
        for (name, want) in [
            ("a", [0.5, 0.5, 0.0, 0.0, 0.0]),
            ("b", [0.95, 0.05, 0.0, 0.0, 0.0]),
            ("e", [0.0, 0.0, 0.05, 0.95, 0.0]),
            ("f", [0.5, 0.0, 0.0, 0.0, 0.5]),
        ] {
            let spec = WorkloadSpec::named(name).unwrap();
            let shared = Shared::new(spec, KeyFormat::new(8, false).unwrap(), 10_000, 20_000);
            let mut s = ClientStream::new(shared, 1, 0);
            let mut counts = [0usize; 5];
            let n = 20_000;
            for _ in 0..n {
                let op = s.next_op();
                let i = [
                    OpKind::Read,
                    OpKind::Update,
                    OpKind::Insert,
                    OpKind::Scan,
                    OpKind::ReadModifyWrite,
                ]
                .iter()
                .position(|k| *k == op.kind)
                .unwrap();
                counts[i] += 1;
                if op.kind == OpKind::Scan {
                    assert!((1..=100).contains(&op.scan_len));
                }
                s.acknowledge(&op);
            }
            for i in 0..5 {
                let got = counts[i] as f64 / n as f64;
                assert!(
                    (got - want[i]).abs() < 0.015,
                    "workload {name} op {i}: {got} vs {}",
                    want[i]
                );
            }
        }
    }

    #[test]
    fn a_fixed_scan_length_is_every_scan_s() {
        let spec = WorkloadSpec::named("e").unwrap().with_scan_len(100).unwrap();
        assert_eq!(spec.name, "e+scan100");
        let shared = Shared::new(spec, KeyFormat::new(8, true).unwrap(), 10_000, 20_000);
        let mut s = ClientStream::new(shared, 1, 0);
        let scans: Vec<usize> = (0..2000)
            .map(|_| s.next_op())
            .filter(|op| op.kind == OpKind::Scan)
            .map(|op| op.scan_len)
            .collect();
        assert!(scans.len() > 1800 && scans.iter().all(|&n| n == 100));
        assert!(WorkloadSpec::named("e").unwrap().with_scan_len(0).is_err());
    }

    #[test]
    fn reads_never_pick_unacknowledged_inserts() {
        let spec = WorkloadSpec::named("d").unwrap();
        let f = KeyFormat::new(8, true).unwrap();
        let shared = Shared::new(spec, f, 100, 1000);
        let mut s = ClientStream::new(shared.clone(), 3, 0);
        let mut pending = Vec::new();
        for _ in 0..2000 {
            let op = s.next_op();
            if op.kind == OpKind::Insert {
                pending.push(op); // never acknowledged
            } else {
                let n = u64::from_be_bytes(op.key.clone().try_into().unwrap()) - 1;
                assert!(n < 100, "read of unacknowledged key number {n}");
            }
        }
        assert!(!pending.is_empty());
    }

    #[test]
    fn ycsb_keys_are_ycsb_s() {
        let f = KeyFormat::ycsb(false);
        assert_eq!((f.style, f.max_key_len(), f.is_integer()), (KeyStyle::Ycsb, 24, false));
        // Key numbers 0, 1, 2 and 13 as YCSB 0.17 (BasicDB, default properties) writes them in a
        // load; 13 hashes to an 18-digit number, which gets no zero padding.
        assert_eq!(f.key(0), b"user6284781860667377211");
        assert_eq!(f.key(1), b"user8517097267634966620");
        assert_eq!(f.key(2), b"user1820151046732198393");
        assert_eq!(f.key(13), b"user412164360235391016");
        for n in [0, 1, 2, 13, 999, 1000, 123_456_789] {
            assert_eq!(f.key(n), format!("user{}", fnvhash64(n)).into_bytes(), "key number {n}");
            assert_eq!(f.key(n), f.key_of_value(fnvhash64(n)));
        }
        let o = KeyFormat::ycsb(true);
        assert_eq!(o.key(0), b"user0");
        assert_eq!(o.key(41), b"user41");
        assert_eq!(o.key(1000), b"user1000");
        // A Java long in decimal: the longest keys are 23 bytes, and 24 for Long.MIN_VALUE, which
        // is what YCSB's fnvhash64 returns when Math.abs overflows.
        assert_eq!(f.key_of_value(i64::MAX as u64), b"user9223372036854775807");
        assert_eq!(f.key_of_value(1 << 63), b"user-9223372036854775808");
        assert_eq!(f.key_of_value(1 << 63).len(), YCSB_MAX_KEY_LEN);
        assert!((0..10_000).all(|n| (5..=YCSB_MAX_KEY_LEN).contains(&f.key(n).len())));
        // The fixed-size styles are unchanged and report their size.
        let fixed = KeyFormat::new(24, false).unwrap();
        assert_eq!((fixed.style, fixed.max_key_len()), (KeyStyle::Fixed, 24));
        assert!(KeyFormat::new(8, true).unwrap().is_integer());
        assert_ne!(fixed.key(13), f.key(13));
    }

    #[test]
    fn key_formats() {
        let f = KeyFormat::new(8, false).unwrap();
        assert_eq!(f.key(0), 6284781860667377211u64.to_be_bytes());
        assert_eq!(KeyFormat::new(8, true).unwrap().key(0), 1u64.to_be_bytes());
        let s = KeyFormat::new(24, false).unwrap();
        assert_eq!(s.key(0), b"user06284781860667377211".to_vec());
        let short = KeyFormat::new(10, true).unwrap();
        assert_eq!(short.key(41), b"user000042".to_vec());
        assert!(KeyFormat::new(4, false).is_err());
        assert!(WorkloadSpec::named("z").unwrap_err().contains("unknown workload 'z'"));
        let m = WorkloadSpec::named("c").unwrap().with_mix("read=1,delete=1").unwrap();
        assert_eq!((m.read, m.delete, m.update), (1.0, 1.0, 0.0));
        assert!(WorkloadSpec::named("c")
            .unwrap()
            .with_mix("jump=1")
            .unwrap_err()
            .contains("unknown operation 'jump'"));
        assert!(WorkloadSpec::named("c").unwrap().with_mix("read=0").unwrap_err().contains("zero"));
        let u = WorkloadSpec::named("c").unwrap().with_distribution("Uniform").unwrap();
        assert_eq!((u.distribution, u.name.as_str()), (Distribution::Uniform, "c+uniform"));
        let e = WorkloadSpec::named("c").unwrap().with_distribution("gauss").unwrap_err();
        assert!(e.contains("unknown request distribution 'gauss'"), "{e}");
        let keys: Vec<_> = load_keys(KeyFormat::new(8, true).unwrap(), 10, 1, 3).collect();
        assert_eq!(
            keys,
            vec![
                2u64.to_be_bytes().to_vec(),
                5u64.to_be_bytes().to_vec(),
                8u64.to_be_bytes().to_vec()
            ]
        );
    }
}
