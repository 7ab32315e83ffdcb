//! Bounded retries: a loop that re-reads remote memory after a failed validation gives up, past
//! a bound, with [`IndexError::Corrupt`] naming the node and what failed, instead of spinning.
//!
//! # What counts
//!
//! A READ that overlaps a WRITE may see old and new cache lines mixed, and a node a live writer
//! is rewriting fails validation until the writer is done: every index re-reads then. Garbage
//! in a node (a stray or hostile WRITE) fails validation on every READ, and a re-read of it
//! spins forever. An [`Attempts`] made per operation and per retry loop counts the loop's
//! failed validations — cache-line or node versions that disagree, fences that do not hold the
//! key, a checksum, a header that does not parse, a pointer chain that does not end — and the
//! [`BOUND`]-th in a row ends the loop with `Corrupt`. Waiting for a lock another client holds
//! is not a validation failure and is not counted (a lock word that stays set is a crashed
//! holder's, or garbage: client-crash recovery, with leases, is a later step); nor is a CAS
//! lost to another writer, which is progress somewhere.
//!
//! # The bound
//!
//! [`BOUND`] = 2²⁰ failures in a row. Each failure costs at least one round trip, so 2²⁰ of
//! them take more than a second at RDMA's 1–2 µs: a torn READ needs a WRITE landing during it,
//! and a node under rewrite is whole again within the writer's next round trips, so no
//! legitimate contention comes near it. The simulator's checks make the argument exact: a
//! run's virtual time is bounded by the work asked for (`dmindex check`: 1 ms per operation
//! plus a 200 ms window, 920 ms at the defaults, and a run ends once no client completes an
//! operation for 200 ms), and the fastest preset's round trip is 1 µs (`stress`: 500 ns each
//! way), so at the defaults a client fails fewer than 920 000 validations in a run — below the
//! bound — even one stuck for the whole run re-reading a node a crashed writer left behind. A
//! check with enough work to go on for more than a second after a crash, while other clients
//! still complete operations, can see such a client reach the bound and report `Corrupt`.
//! The count is per loop, not per node: a loop that fails on two garbage nodes in turn (two
//! buckets, a restart between two levels) must end too, and a loop's guard is dropped when it
//! ends, so an operation that validates a node and moves on starts the next loop from zero.
//!
//! # Cost
//!
//! A `u32` in the operation's state, set to zero; one increment and one compare per failed
//! validation, none on a READ that validates. The error is formatted only when the bound is
//! reached. Nothing is allocated and no verb is added.

use dmindex_fabric::GlobalAddr;
use dmindex_index::{IndexError, IndexResult};

/// Failed validations in a row after which a retry loop reports a corrupt index (module docs).
pub const BOUND: u32 = 1 << 20;

/// A retry loop's count of failed validations; see the module docs. Not `Copy`: a copy passed
/// by value would count from where the original stood and quietly restart it.
#[derive(Debug, Default)]
pub struct Attempts {
    failed: u32,
}

impl Attempts {
    /// No failure yet: made before the loop, once per operation.
    #[inline]
    pub const fn new() -> Attempts {
        Attempts { failed: 0 }
    }

    /// Counts one failed validation of `what` at `node`: `Ok` while under [`BOUND`], then
    /// [`IndexError::Corrupt`] naming both (the caller's `?`, or `break Err`, ends its loop).
    #[inline]
    pub fn failed(&mut self, node: GlobalAddr, what: &'static str) -> IndexResult<()> {
        self.failed += 1;
        if self.failed < BOUND {
            Ok(())
        } else {
            Err(corrupt(node, what, self.failed))
        }
    }

    /// Failures counted so far.
    pub fn count(&self) -> u32 {
        self.failed
    }
}

/// The error of a loop that reached the bound.
#[cold]
#[inline(never)]
fn corrupt(node: GlobalAddr, what: &str, n: u32) -> IndexError {
    IndexError::Corrupt(format!("{what} at {node} failed validation {n} times in a row"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_th_failure_names_the_node_and_what_failed() {
        let mut a = Attempts::new();
        let node = GlobalAddr::new(1, 0x1_0040);
        for _ in 1..BOUND {
            a.failed(GlobalAddr::new(0, 0x2_0000), "other").unwrap();
        }
        assert_eq!(a.count(), BOUND - 1);
        match a.failed(node, "leaf versions") {
            Err(IndexError::Corrupt(m)) => {
                assert_eq!(
                    m,
                    format!("leaf versions at 1:0x10040 failed validation {BOUND} times in a row")
                )
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_new_guard_starts_from_zero() {
        let mut a = Attempts::new();
        a.failed(GlobalAddr::new(0, 64), "node").unwrap();
        assert_eq!((a.count(), Attempts::new().count()), (1, 0));
        assert_eq!(std::mem::size_of::<Attempts>(), 4);
    }
}
