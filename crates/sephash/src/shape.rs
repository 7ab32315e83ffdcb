//! SepHash's shape: what [`IndexConfig::extra`] may say, the checks it must pass, and the
//! descriptor word that records it next to the root word.

use dmindex_index::{IndexConfig, IndexError, IndexResult};
use dmindex_prim::options::{Opt, Options};
use dmindex_prim::root::Magic;

use crate::layout::{CurLayout, CUR_HEADER};

/// The descriptor's magic (top 8 bits). 0x60 since a CurSegment's second word is its merge
/// record, not its suffix (0x5F), and 0x5F since the filter lines carry a tag (0x5E): an index
/// an older layout made is refused, not misread.
pub const MAGIC: Magic = Magic { name: "SepHash index", value: 0x60, bits: 8 };

/// Longest key (bytes) and value the descriptor can record.
pub const MAX_KEY: usize = 255;
pub const MAX_VALUE: usize = (1 << 14) - 1;

const OPTIONS: Options = Options {
    what: "SepHash",
    known: &[
        Opt::number("cur", &["cur_bytes"], 64..=8192),
        Opt::number("main_ratio", &["ratio"], 1..=255),
        Opt::number("depth", &["initial_depth"], 0..=16),
        Opt::number("max_depth", &[], 1..=32),
        Opt::number("filter", &["filter_positions"], 0..=65536),
        Opt::number("window", &[], 1..=64),
        Opt::flag("fptable", &[]),
        Opt::flag("entry_layout", &["resize_entry"]),
        Opt::flag("zero_wait", &[]),
        Opt::choice("update", &[], &["checked", "upsert"]),
    ],
};

/// SepHash's shape, from [`IndexConfig::extra`]: `cur` (CurSegment bytes, default 1024: the
/// meta, the suffix and 126 slots), `main_ratio` (a MainSegment splits past `main_ratio` ×
/// slots entries, default 64), `depth` (initial, default 4), `max_depth` (default 16),
/// `filter` (CurSegment filter positions, a power of two, default 1024; 0 = no filter: every
/// search reads the CurSegment), `window` (slots an insert reads, default 8), `fptable` (1:
/// searches read the range the FPTable predicts; 0: the whole MainSegment), and the ablations of
/// the paper's Fig. 19a: `entry_layout` (0: splits read every key's block instead of using the
/// stored depth bits, and merges rewrite every slot to empty it) and `zero_wait` (0: the block
/// and filter WRITEs are awaited). One choice is the compute node's alone (not recorded in
/// the descriptor): `update` (`checked`, the default: update and delete say whether the key
/// existed, 3 round trips; `upsert`: the paper's blind appends, 2 round trips, see
/// [`dmindex_index::PointIndex::blind_writes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub cur: CurLayout,
    pub main_ratio: usize,
    pub depth: u32,
    pub max_depth: u32,
    pub window: usize,
    pub fptable: bool,
    pub entry_layout: bool,
    pub zero_wait: bool,
    /// Updates and deletes are blind appends (`update=upsert`).
    pub upsert: bool,
    pub max_key: usize,
    pub max_value: usize,
}

impl Shape {
    pub fn from_config(cfg: &IndexConfig) -> IndexResult<Shape> {
        let (mut cur, mut filter) = (1024usize, 1024usize);
        let mut s = Shape {
            cur: CurLayout { n: 0, positions: 0 },
            main_ratio: 64,
            depth: 4,
            max_depth: 16,
            window: 8,
            fptable: true,
            entry_layout: true,
            zero_wait: true,
            upsert: false,
            max_key: cfg.max_key,
            max_value: cfg.max_value,
        };
        for (name, n) in OPTIONS.parse(&cfg.extra)?.iter() {
            match name {
                "cur" => cur = n,
                "main_ratio" => s.main_ratio = n,
                "depth" => s.depth = n as u32,
                "max_depth" => s.max_depth = n as u32,
                "filter" => filter = n,
                "window" => s.window = n,
                "fptable" => s.fptable = n == 1,
                "entry_layout" => s.entry_layout = n == 1,
                "zero_wait" => s.zero_wait = n == 1,
                "update" => s.upsert = n == 1,
                _ => unreachable!("declared options only"),
            }
        }
        let bad = |m: String| Err(IndexError::Config(m));
        if cur % 8 != 0 {
            return bad(format!("option cur={cur}: must be a multiple of 8"));
        }
        if filter != 0 && !filter.is_power_of_two() {
            return bad(format!("option filter={filter}: must be 0 or a power of two"));
        }
        if s.depth > s.max_depth {
            return bad(format!("depth={} exceeds max_depth={}", s.depth, s.max_depth));
        }
        if !(1..=MAX_KEY).contains(&s.max_key) || s.max_value > MAX_VALUE {
            return bad(format!(
                "SepHash keys are 1..={MAX_KEY} bytes and values 0..={MAX_VALUE} (got {} and {})",
                s.max_key, s.max_value
            ));
        }
        s.cur = CurLayout { n: (cur - CUR_HEADER as usize) / 8, positions: filter };
        Ok(s)
    }

    /// Entries past which a merge splits the MainSegment.
    pub fn main_limit(&self) -> usize {
        self.main_ratio * self.cur.n
    }

    /// The descriptor's shape bits: slots (10) | ratio (8) | depth (5) | max depth (6) |
    /// log2 filter + 1 or 0 (5) | max key (8) | max value (14).
    pub fn word(&self) -> u64 {
        let f = if self.cur.positions == 0 { 0 } else { self.cur.positions.trailing_zeros() + 1 };
        (self.cur.n as u64) << 46
            | (self.main_ratio as u64) << 38
            | (self.depth as u64) << 33
            | (self.max_depth as u64) << 27
            | (f as u64) << 22
            | (self.max_key as u64) << 14
            | self.max_value as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &[(&str, &str)]) -> IndexConfig {
        IndexConfig {
            extra: extra.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            ..IndexConfig::default()
        }
    }

    #[test]
    fn defaults_are_the_papers() {
        let s = Shape::from_config(&cfg(&[])).unwrap();
        assert_eq!((s.cur.n, s.cur.positions, s.main_limit(), s.depth), (126, 1024, 8064, 4));
        assert_eq!(s.word(), 126 << 46 | 64 << 38 | 4 << 33 | 16 << 27 | 11 << 22 | 8 << 14 | 8);
        assert!(s.word() >> 56 == 0, "the shape leaves the magic's 8 bits free");
    }

    #[test]
    fn bad_shapes_are_named() {
        let e = |x: &[(&str, &str)]| match Shape::from_config(&cfg(x)) {
            Err(IndexError::Config(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(e(&[("cur", "100")]), "option cur=100: must be a multiple of 8");
        assert_eq!(e(&[("filter", "100")]), "option filter=100: must be 0 or a power of two");
        assert_eq!(e(&[("depth", "9"), ("max_depth", "8")]), "depth=9 exceeds max_depth=8");
        assert!(e(&[("nope", "1")]).starts_with("unknown SepHash option 'nope'"));
        assert_eq!(e(&[("update", "blind")]), "option update=blind: use checked or upsert");
        let s = Shape::from_config(&cfg(&[("update", "upsert")])).unwrap();
        assert!(s.upsert);
        assert_eq!(s.word(), Shape::from_config(&cfg(&[])).unwrap().word(), "CN-side choices");
    }
}
