//! Per-client verb statistics.
//!
//! A [`crate::Client`] counts every verb it issues in a [`ClientStats`] (plain cells: a client
//! belongs to one task). [`ClientStats::snapshot`] gives a [`VerbCounts`]; the difference of two
//! snapshots taken around an operation is that operation's cost:
//!
//! ```
//! # use dmindex_fabric::VerbCounts;
//! # let (before, after) = (VerbCounts::default(), VerbCounts::default());
//! let per_op: VerbCounts = after - before;
//! # assert_eq!(per_op.round_trips, 0);
//! ```
//!
//! **Round trips**: every awaited verb, doorbell batch or two-sided request is one. A zero-wait
//! WRITE is a verb and moves bytes but is not a round trip: nobody waits for it.

use std::cell::Cell;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

/// Counters of verbs, round trips and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbCounts {
    /// Awaited network round trips (verbs, doorbell batches, two-sided requests).
    pub round_trips: u64,
    /// READ verbs, inside batches or not.
    pub reads: u64,
    /// WRITE verbs, inside batches or not, zero-wait included.
    pub writes: u64,
    /// Of `writes`, those posted zero-wait.
    pub zero_wait_writes: u64,
    /// CAS verbs.
    pub cas: u64,
    /// Masked CAS verbs.
    pub masked_cas: u64,
    /// FAA verbs.
    pub faa: u64,
    /// CAS or masked CAS verbs whose comparison failed.
    pub cas_failures: u64,
    /// Doorbell batches (their verbs are also counted by kind).
    pub batches: u64,
    /// Two-sided requests.
    pub rpcs: u64,
    /// Bytes carried from memory nodes to the client (READ payloads, atomic results, replies).
    pub bytes_read: u64,
    /// Bytes carried from the client to memory nodes (WRITE payloads, atomic operands, requests).
    pub bytes_written: u64,
    /// Remote bytes the client allocated (carved from its chunks, or given a range of their
    /// own): what its index's objects take, without the chunks' unused reserve.
    #[serde(default)]
    pub bytes_allocated: u64,
    /// Pauses before a retry (backoff while another client holds what this one waits for):
    /// not verbs, nothing on the network.
    #[serde(default)]
    pub pauses: u64,
    /// Compute-side cache lookups the index reported ([`crate::Work::CacheLookup`]).
    #[serde(default)]
    pub cache_lookups: u64,
    /// Radix-cache copies looked up ([`crate::Work::RadixStep`]).
    #[serde(default)]
    pub radix_steps: u64,
    /// Directly indexed tables probed ([`crate::Work::TableProbe`]).
    #[serde(default)]
    pub table_probes: u64,
    /// Keys compared ([`crate::Work::KeyCompare`]).
    #[serde(default)]
    pub keys_compared: u64,
    /// Keys hashed ([`crate::Work::KeyHash`]).
    #[serde(default)]
    pub keys_hashed: u64,
    /// Bytes decoded or checked after READs ([`crate::Work::BytesScanned`]).
    #[serde(default)]
    pub bytes_scanned: u64,
}

impl VerbCounts {
    /// One-sided verbs of every kind (not counting batches or requests as verbs of their own).
    pub fn verbs(&self) -> u64 {
        self.reads + self.writes + self.cas + self.masked_cas + self.faa
    }
}

macro_rules! fieldwise {
    ($($f:ident),*) => {
        impl Add for VerbCounts {
            type Output = VerbCounts;
            fn add(self, o: VerbCounts) -> VerbCounts {
                VerbCounts { $($f: self.$f + o.$f),* }
            }
        }
        impl Sub for VerbCounts {
            type Output = VerbCounts;
            fn sub(self, o: VerbCounts) -> VerbCounts {
                VerbCounts { $($f: self.$f - o.$f),* }
            }
        }
        impl ClientStats {
            /// The counts so far.
            pub fn snapshot(&self) -> VerbCounts {
                VerbCounts { $($f: self.$f.get()),* }
            }
            /// Sets every counter to zero.
            pub fn reset(&self) {
                $(self.$f.set(0);)*
            }
        }
    };
}

fieldwise!(
    round_trips,
    reads,
    writes,
    zero_wait_writes,
    cas,
    masked_cas,
    faa,
    cas_failures,
    batches,
    rpcs,
    bytes_read,
    bytes_written,
    bytes_allocated,
    pauses,
    cache_lookups,
    radix_steps,
    table_probes,
    keys_compared,
    keys_hashed,
    bytes_scanned
);

impl AddAssign for VerbCounts {
    fn add_assign(&mut self, o: VerbCounts) {
        *self = *self + o;
    }
}

impl std::iter::Sum for VerbCounts {
    fn sum<I: Iterator<Item = VerbCounts>>(iter: I) -> VerbCounts {
        iter.fold(VerbCounts::default(), Add::add)
    }
}

/// Live counters of one client.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub(crate) round_trips: Cell<u64>,
    pub(crate) reads: Cell<u64>,
    pub(crate) writes: Cell<u64>,
    pub(crate) zero_wait_writes: Cell<u64>,
    pub(crate) cas: Cell<u64>,
    pub(crate) masked_cas: Cell<u64>,
    pub(crate) faa: Cell<u64>,
    pub(crate) cas_failures: Cell<u64>,
    pub(crate) batches: Cell<u64>,
    pub(crate) rpcs: Cell<u64>,
    pub(crate) bytes_read: Cell<u64>,
    pub(crate) bytes_written: Cell<u64>,
    pub(crate) bytes_allocated: Cell<u64>,
    pub(crate) pauses: Cell<u64>,
    pub(crate) cache_lookups: Cell<u64>,
    pub(crate) radix_steps: Cell<u64>,
    pub(crate) table_probes: Cell<u64>,
    pub(crate) keys_compared: Cell<u64>,
    pub(crate) keys_hashed: Cell<u64>,
    pub(crate) bytes_scanned: Cell<u64>,
    /// Members this client fenced ([`crate::Client::fence`]), since it was made: not a verb
    /// count, so neither in [`VerbCounts`] nor reset.
    pub(crate) fences: Cell<u64>,
}

/// What the harness charges each operation: round trips and bytes each way (the per-kind
/// figures of a report), read in three loads rather than a whole snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCost {
    pub round_trips: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Sub for OpCost {
    type Output = OpCost;
    fn sub(self, o: OpCost) -> OpCost {
        OpCost {
            round_trips: self.round_trips - o.round_trips,
            bytes_read: self.bytes_read - o.bytes_read,
            bytes_written: self.bytes_written - o.bytes_written,
        }
    }
}

impl AddAssign for OpCost {
    fn add_assign(&mut self, o: OpCost) {
        self.round_trips += o.round_trips;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
    }
}

impl ClientStats {
    /// Members this client fenced since it was made, one per [`crate::Client::fence`] that
    /// succeeded on every memory node: how many times it judged a member dead (or fenced one
    /// again that another judge was fencing).
    pub fn fences(&self) -> u64 {
        self.fences.get()
    }

    /// Round trips and bytes so far (subtract two to cost an operation).
    #[inline]
    pub fn cost(&self) -> OpCost {
        OpCost {
            round_trips: self.round_trips.get(),
            bytes_read: self.bytes_read.get(),
            bytes_written: self.bytes_written.get(),
        }
    }
}

#[inline]
pub(crate) fn bump(c: &Cell<u64>, n: u64) {
    c.set(c.get() + n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_fieldwise() {
        let s = ClientStats::default();
        bump(&s.reads, 3);
        bump(&s.bytes_read, 24);
        let a = s.snapshot();
        bump(&s.reads, 1);
        bump(&s.cas, 2);
        let d = s.snapshot() - a;
        assert_eq!(d, VerbCounts { reads: 1, cas: 2, ..Default::default() });
        assert_eq!((a + d).verbs(), 6);
        assert_eq!([a, d].into_iter().sum::<VerbCounts>(), s.snapshot());
        s.reset();
        assert_eq!(s.snapshot(), VerbCounts::default());
    }
}
