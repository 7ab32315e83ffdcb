//! CHIME's shape: what [`IndexConfig::extra`] may say (typed by [`dmindex_prim::options`]),
//! the checks a shape must pass, and the descriptor word that records the remote part of it
//! next to the root word ([`dmindex_prim::root`]).

use dmindex_index::{IndexConfig, IndexError, IndexResult};
use dmindex_prim::blink::Accounting;
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::root::Magic;

use crate::layout::{LeafKind, LeafLayout};

/// CHIME's shape, from [`IndexConfig::extra`]: `span` (leaf entries, default 64), `h`
/// (neighbourhood, default 8), `internal_span` (default 64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChimeShape {
    pub span: usize,
    pub h: usize,
    pub internal_span: usize,
    /// Inline value length (1..=8), or the longest value kept in blocks.
    pub value_len: usize,
    /// Longest key: 8 means 8-byte keys in the leaf; more means the leaf holds the first 8
    /// bytes and the block holds the full key.
    pub key_len: usize,
    /// The factors of the paper's analysis (§5.3): which leaf is remote ([`LeafKind`]) …
    pub kind: LeafKind,
    /// … whether the lock word carries the vacancy bitmap (off: a separate READ of it after
    /// locking) …
    pub vacancy: bool,
    /// … and hotness-aware speculative reads (CN-side choices, not part of the remote shape).
    pub speculative: bool,
    /// Bytes of the hotspot buffer (default 30 % of the cache budget, as the paper's 30 of 100 MB).
    pub hotspot_bytes: Option<u64>,
    /// Scans READ only the entries their keys' neighbourhoods hold in leaves they cover in
    /// part (the paper's §4.4; CN-side, on for CHIME, off for Sherman and the staircase) …
    pub fine_grained_scan: bool,
    /// … merging a leaf's nearby neighbourhoods into READs of up to half a leaf (greedy).
    pub greedy_scan: bool,
    /// How the CN cache charges an internal node (`cache_charge=entry|page`; CN-side):
    /// per entry, as the CHIME paper counts its enhanced Sherman, by default.
    pub cache_charge: Accounting,
}

/// The ablation options, in the order the paper adds them to Sherman.
pub const FACTORS: [&str; 5] =
    ["hopscotch", "vacancy_piggyback", "metadata_replication", "sibling_validation", "speculative"];

/// Scans READ only what their keys' neighbourhoods need ([`ChimeShape::fine_grained_scan`]).
/// Not one of the [`FACTORS`]: the paper's factor analysis (Fig. 15) runs without it, and its
/// CHIME (Fig. 12) with it.
pub const FINE_GRAINED_SCAN: &str = "fine_grained_scan";

/// Fine-grained scans merge nearby READs of a leaf ([`ChimeShape::greedy_scan`]).
pub const GREEDY_SCAN: &str = "greedy_scan";

/// Options for step `k` of the paper's factor staircase (Fig. 15): Sherman with the first `k`
/// [`FACTORS`] turned on, `with` added after them.
pub fn factors_on(k: usize, with: &[(&str, &str)]) -> Vec<(String, String)> {
    let on = FACTORS[..k.min(FACTORS.len())].iter().map(|f| (f.to_string(), "1".to_string()));
    on.chain(with.iter().map(|(a, b)| (a.to_string(), b.to_string()))).collect()
}

/// CHIME's options: the shape (span and H are checked with the leaf layout), the hotspot
/// buffer, and the factors.
const OPTIONS: Options = Options {
    what: "CHIME",
    known: &[
        Opt::number("span", &[], 0..=usize::MAX),
        Opt::number("h", &["neighbourhood"], 0..=usize::MAX),
        Opt::number("internal_span", &[], 4..=1024),
        // At most 16 TiB: a larger budget would wrap its byte count.
        Opt::number("hotspot_mb", &[], 0..=1 << 24),
        // The same in KiB, for a buffer scaled down with the items (30 MB at 60 M items is
        // 100 KiB at 200 k).
        Opt::number("hotspot_kb", &[], 0..=1 << 34),
        Opt::flag(FACTORS[0], &[]),
        Opt::flag(FACTORS[1], &["vacancy"]),
        Opt::flag(FACTORS[2], &["replication"]),
        Opt::flag(FACTORS[3], &["sbv"]),
        Opt::flag(FACTORS[4], &[]),
        Opt::flag(FINE_GRAINED_SCAN, &[]),
        Opt::flag(GREEDY_SCAN, &[]),
        Opt::choice("cache_charge", &[], Accounting::WORDS),
    ],
};

impl ChimeShape {
    /// Reads and checks the options; `sherman` starts from every factor off.
    pub fn from_config(cfg: &IndexConfig, sherman: bool) -> IndexResult<ChimeShape> {
        let mut shape = ChimeShape {
            span: 64,
            h: 8,
            internal_span: 64,
            value_len: cfg.max_value,
            key_len: cfg.max_key,
            kind: LeafKind::CHIME,
            vacancy: true,
            speculative: false,
            hotspot_bytes: None,
            fine_grained_scan: false,
            greedy_scan: false,
            cache_charge: Accounting::PerEntry,
        };
        // Factors as given; the unset ones follow the index (all on for chime except
        // speculative reads, all off for sherman and whenever the leaf is sorted).
        let mut f: [Option<bool>; 5] = [None; 5];
        let (mut fine, mut greedy) = (None, None);
        for (name, n) in OPTIONS.parse(&cfg.extra)?.iter() {
            match name {
                "span" => shape.span = n,
                "h" => shape.h = n,
                "internal_span" => shape.internal_span = n,
                "hotspot_mb" | "hotspot_kb" => {
                    let unit = if name == "hotspot_mb" { MIB } else { 1024 };
                    shape.hotspot_bytes = Some(n as u64 * unit);
                    f[4] = Some(f[4].unwrap_or(true) && n > 0);
                }
                FINE_GRAINED_SCAN => fine = Some(n == 1),
                GREEDY_SCAN => greedy = Some(n == 1),
                "cache_charge" => shape.cache_charge = Accounting::from_choice(n),
                factor => {
                    let i = FACTORS.iter().position(|&x| x == factor).expect("declared");
                    f[i] = Some(n == 1);
                }
            }
        }
        let hopscotch = f[0].unwrap_or(!sherman);
        let default = !sherman && hopscotch;
        if !hopscotch {
            if let Some(i) = (1..5).find(|&i| f[i] == Some(true)) {
                return Err(IndexError::Config(format!(
                    "{}=1 needs hopscotch leaves (hopscotch=0 is Sherman's sorted leaf, read whole)",
                    FACTORS[i]
                )));
            }
        }
        shape.kind = LeafKind {
            hopscotch,
            replicated: f[2].unwrap_or(default),
            fenced: !f[3].unwrap_or(default),
        };
        shape.vacancy = f[1].unwrap_or(default);
        shape.speculative = f[4].unwrap_or(false);
        // Fine-grained scans READ neighbourhoods: hopscotch leaves only. Unset, they follow the
        // index (on for chime, off for sherman and its staircase).
        if !hopscotch && (fine == Some(true) || greedy == Some(true)) {
            return Err(IndexError::Config(format!(
                "{FINE_GRAINED_SCAN} and {GREEDY_SCAN} need hopscotch leaves (a sorted leaf is read whole)"
            )));
        }
        shape.fine_grained_scan = fine.unwrap_or(default);
        shape.greedy_scan = shape.fine_grained_scan && greedy.unwrap_or(true);
        if !(8..=255).contains(&cfg.max_key) {
            return Err(IndexError::Config(format!(
                "CHIME keys are up to 8..=255 bytes long (got --key-size {})",
                cfg.max_key
            )));
        }
        if !(1..=MAX_INDIRECT).contains(&cfg.max_value) {
            return Err(IndexError::Config(format!(
                "CHIME values are 1..={MAX_INDIRECT} bytes (got {})",
                cfg.max_value
            )));
        }
        LeafLayout::with_kind(shape.span, shape.h, shape.kind).map_err(IndexError::Config)?;
        Ok(shape)
    }

    /// Whether values live in blocks behind pointers (long values, or long keys).
    pub fn indirect(&self) -> bool {
        self.value_len > 8 || self.long_keys()
    }

    /// Whether keys may be longer than the 8 bytes a leaf entry holds.
    pub fn long_keys(&self) -> bool {
        self.key_len > 8
    }

    /// The shape bits of the descriptor word kept in the root slot after the root word
    /// ([`dmindex_prim::root`]): magic 0x62 (7 bits) | hopscotch, replicated, fenced (1 bit
    /// each) | span (11) | H (5) | internal span (11) | key length (8) | value length (17).
    pub fn descriptor(&self) -> u64 {
        let k = self.kind;
        (k.hopscotch as u64) << 56
            | (k.replicated as u64) << 55
            | (k.fenced as u64) << 54
            | (self.span as u64) << 41
            | (self.h as u64) << 36
            | (self.internal_span as u64) << 25
            | (self.key_len as u64) << 17
            | self.value_len as u64
    }
}

/// The magic of CHIME's descriptor word.
pub(crate) const MAGIC: Magic = Magic { name: "CHIME tree", value: 0x62, bits: 7 };
const MIB: u64 = 1 << 20;

/// Largest indirect value.
pub const MAX_INDIRECT: usize = 1 << 16;
