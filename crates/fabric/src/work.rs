//! Compute-side CPU work an index reports, so a testbed model can charge it.
//!
//! An index's own work between verbs — looking up its compute-side cache, comparing keys in a
//! leaf it read, hashing a key, checking the bytes a READ brought back — takes CPU time on the
//! compute node. On a real fabric that time simply passes; a simulated fabric has no clock but
//! its own, so index code reports what it did ([`crate::Client::compute`]) and the transport
//! turns it into time (the simulator charges a per-primitive cost measured on this machine and
//! documented in `docs/sim.md`). Index code never measures or waits for time itself.
//!
//! The kinds are primitives, not operations: each is charged per unit, so an index that does
//! more of them pays more, whatever it calls the work.

use serde::{Deserialize, Serialize};

/// One kind of compute-side CPU work, charged per unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Work {
    /// One lookup in a compute-side index cache (B-link internal nodes): a probe of an
    /// in-memory map of nodes and the routing inside the node found, including its misses.
    CacheLookup,
    /// One cached radix-node copy looked up in a radix cache walk (SMART, Dolphin): a walk
    /// pays one per level it descends in the cache.
    RadixStep,
    /// One probe of a directly indexed table (a hotspot buffer's set, a hash index's directory
    /// or FPTable cache): a hash to a slot and the entries there.
    TableProbe,
    /// One key compared with another (a slot of a leaf, an entry of a bucket or neighbourhood).
    KeyCompare,
    /// One key hashed (bucket, fingerprint, placement).
    KeyHash,
    /// Bytes decoded or checked after a READ (versions, checksums, entries copied out).
    BytesScanned,
}

impl Work {
    /// A short name for reports and parameters.
    pub fn name(self) -> &'static str {
        match self {
            Work::CacheLookup => "cache_lookup",
            Work::RadixStep => "radix_step",
            Work::TableProbe => "table_probe",
            Work::KeyCompare => "key_compare",
            Work::KeyHash => "key_hash",
            Work::BytesScanned => "byte_scanned",
        }
    }
}
