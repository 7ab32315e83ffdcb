//! Garbage over what each operation on one key READs (the conformance kit): every operation
//! reports a corrupt index within the time bound instead of re-reading forever.

use dmindex_conformance::{garbage_test, GarbageConfig};
use dmindex_index::{IndexConfig, IndexKind, Ordered};
use dmindex_rolex::Rolex;

#[test]
fn reports_garbage_as_corrupt() {
    let cfg = GarbageConfig::new(IndexConfig::default(), IndexKind::Ordered);
    garbage_test::<Rolex, Ordered>(&cfg);
}
