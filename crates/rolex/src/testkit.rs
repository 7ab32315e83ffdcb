//! What the retraining and recovery unit tests share: a tiny shape that retrains at once, and
//! keys spread far apart.

use dmindex_index::IndexConfig;

/// Spans of 4, error 2, 3 keys a leaf at load, retraining on the first overflow.
pub(crate) fn cfg() -> IndexConfig {
    IndexConfig::with_options(&[("span", "4"), ("epsilon", "2"), ("fill", "3"), ("retrain", "0")])
}

/// Key `x`, 1000 apart from the next.
pub(crate) fn k(x: u64) -> [u8; 8] {
    (x * 1000).to_be_bytes()
}
