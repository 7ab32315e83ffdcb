//! What the tests share: keys, a handle's counters, and a store's replicas served in process
//! ([`one_node`]).

pub mod one_node;

use dmindex_histore::HiStore;
use dmindex_index::{IndexStats, PointIndex};
use dmindex_sim::SimTransport;

pub fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

pub fn stats(ix: &HiStore) -> IndexStats {
    <HiStore as PointIndex<SimTransport>>::stats(ix)
}

pub fn stat(s: &IndexStats, name: &str) -> u64 {
    s.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).expect("a counter of that name")
}
