//! The index's options and the shape they give, recorded in the descriptor.

use dmindex_index::{IndexConfig, IndexError, IndexResult};
use dmindex_prim::key;
use dmindex_prim::options::{Opt, Options};

use crate::layout::{LeafLayout, MAX_SPAN};

/// ROLEX's options.
pub const OPTIONS: Options = Options {
    what: "rolex",
    known: &[
        Opt::number("span", &["leaf_span"], 4..=MAX_SPAN),
        Opt::number("epsilon", &["eps"], 1..=1024),
        Opt::number("fill", &[], 1..=MAX_SPAN),
        Opt::number("retrain", &["retrain_pct"], 0..=10_000),
    ],
};

/// Slots per leaf by default (CHIME's setting for ROLEX).
pub const DEFAULT_SPAN: usize = 16;
/// Model error by default (CHIME's setting for ROLEX).
pub const DEFAULT_EPSILON: usize = 16;
/// Synonym leaves a model may grow, in percent of its base leaves, before it is retrained.
pub const DEFAULT_RETRAIN_PCT: usize = 25;
/// Longest value stored inline; longer ones go to value blocks.
pub const INLINE: usize = 8;
/// Longest value accepted (in a block).
pub const MAX_VALUE: usize = 4096;

/// What the options and the configuration give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub span: usize,
    pub eps: u64,
    /// Keys a training on a given key set (the bulk load) puts in each leaf; a retrain after
    /// inserts puts at most ¾ of the span ([`Shape::refill`]).
    pub fill: usize,
    /// Synonym leaves, in percent of base leaves, that trigger a model's retrain (0: never).
    pub retrain_pct: usize,
    pub value_len: usize,
}

impl Shape {
    pub fn from_config(cfg: &IndexConfig) -> IndexResult<Shape> {
        let o = OPTIONS.parse(&cfg.extra)?;
        if cfg.max_key != key::BYTES {
            return Err(IndexError::Config(format!(
                "rolex keys are exactly {} bytes (its models need integer keys), not max_key={}",
                key::BYTES,
                cfg.max_key
            )));
        }
        if !(1..=MAX_VALUE).contains(&cfg.max_value) {
            return Err(IndexError::Config(format!(
                "rolex values are 1 to {MAX_VALUE} bytes, not max_value={}",
                cfg.max_value
            )));
        }
        let span = o.number("span").unwrap_or(DEFAULT_SPAN);
        let fill = o.number("fill").unwrap_or(span * 3 / 4);
        if fill > span {
            return Err(IndexError::Config(format!(
                "option fill={fill}: at most the span ({span})"
            )));
        }
        Ok(Shape {
            span,
            eps: o.number("epsilon").unwrap_or(DEFAULT_EPSILON) as u64,
            fill,
            retrain_pct: o.number("retrain").unwrap_or(DEFAULT_RETRAIN_PCT),
            value_len: cfg.max_value,
        })
    }

    /// Keys a retrain puts in each leaf: `fill`, but at most ¾ of the span. A model is
    /// retrained because inserts overflowed its leaves; rebuilt full, it would overflow again at
    /// the next insert into each leaf, and every overflow is a step towards the next retrain,
    /// which every compute node then pays for by re-reading the directory.
    pub fn refill(&self) -> usize {
        self.fill.min((self.span * 3 / 4).max(1))
    }

    pub fn layout(&self) -> LeafLayout {
        LeafLayout::new(self.span)
    }

    /// Whether values live in blocks (longer than [`INLINE`]).
    pub fn indirect(&self) -> bool {
        self.value_len > INLINE
    }

    /// The descriptor's shape bits: span 8 | epsilon 11 | fill 8 | value length 13.
    pub fn descriptor(&self) -> u64 {
        ((self.span as u64) << 32)
            | (self.eps << 21)
            | ((self.fill as u64) << 13)
            | self.value_len as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &[(&str, &str)]) -> IndexConfig {
        IndexConfig::with_options(extra)
    }

    #[test]
    fn defaults_options_and_refusals() {
        let s = Shape::from_config(&cfg(&[])).unwrap();
        assert_eq!((s.span, s.eps, s.fill, s.retrain_pct, s.value_len), (16, 16, 12, 25, 8));
        assert_eq!(s.descriptor(), (16 << 32) | (16 << 21) | (12 << 13) | 8);
        let s = Shape::from_config(&cfg(&[("span", "8"), ("eps", "4"), ("fill", "8")])).unwrap();
        assert_eq!((s.span, s.eps, s.fill, s.refill()), (8, 4, 8, 6));
        let e = Shape::from_config(&cfg(&[("span", "8"), ("fill", "9")])).unwrap_err();
        assert_eq!(e, IndexError::Config("option fill=9: at most the span (8)".into()));
        let long = IndexConfig { max_key: 16, ..IndexConfig::default() };
        let e = Shape::from_config(&long).unwrap_err();
        assert!(matches!(e, IndexError::Config(m) if m.contains("exactly 8 bytes")));
        let e = Shape::from_config(&cfg(&[("nope", "1")])).unwrap_err();
        assert!(matches!(e, IndexError::Config(m) if m.starts_with("unknown rolex option")));
    }
}
