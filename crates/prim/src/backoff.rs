//! Backoff: how a client waits for what another client holds — a lock word, a closed segment,
//! an SMO's claim — without flooding the memory node with retries or holding a CPU the holder
//! may need.
//!
//! # The schedule
//!
//! The first [`FREE`] failed looks retry at once: each look is a round trip already, and a
//! holder that works keeps what it holds for a few of them (a Sherman or CHIME leaf write: two;
//! a SepHash merge: a few doorbells). After that the client pauses before each look
//! ([`dmindex_fabric::Client::pause`]): [`FIRST_NS`], doubling up to [`CAP_NS`]. A pause puts
//! nothing on the network and writes nothing, so a waiter costs the memory node one READ or
//! CAS per (round trip + pause) instead of one per round trip; on a real fabric the waiting
//! thread runs its other tasks or sleeps (a holder descheduled by the OS gets the core back), and
//! on the simulator the pause is virtual time.
//!
//! ```text
//! look:    1   2   3   4 | 5   6   7   8    9    10   11   12 …
//! pause:   0   0   0   0 | 1   2   4   8   16    32   64   64 …  µs
//! ```
//!
//! Waiting ends when the holder lets go. A wait that sees no progress through [`STUCK`] looks
//! (over a minute at the cap) says so with [`IndexError::Corrupt`]: the holder stopped (client
//! crashes are not recovered yet) or the word is garbage; either way no retry will succeed.
//!
//! # Cost
//!
//! A `u32` per wait; nothing on the first [`FREE`] looks; a pause of at most [`CAP_NS`]
//! after, so a waiter sees the holder's release at most one cap late (a lock held 100 µs is
//! taken at most ~64 µs after it is free, instead of one round trip after). No allocation.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

/// Failed looks retried without a pause.
pub const FREE: u32 = 4;
/// The first pause, in nanoseconds: half an RDMA round trip.
pub const FIRST_NS: u64 = 1_000;
/// The longest pause, in nanoseconds: 20–30 RDMA round trips, a few message round trips on
/// loopback TCP; far below a scheduler's time slice.
pub const CAP_NS: u64 = 64_000;
/// Failed looks after which a wait reports that what it waits for is never let go.
pub const STUCK: u32 = 1 << 20;

/// One wait for another client's progress; see the module docs. Made per wait, not copied.
#[derive(Debug, Default)]
pub struct Backoff {
    looks: u32,
}

impl Backoff {
    /// A wait that has not failed a look yet.
    #[inline]
    pub const fn new() -> Backoff {
        Backoff { looks: 0 }
    }

    /// The pause after failed look number `look` (from 1), in nanoseconds: 0 for the first
    /// [`FREE`], then [`FIRST_NS`] doubling to [`CAP_NS`].
    pub const fn pause_ns(look: u32) -> u64 {
        if look <= FREE {
            return 0;
        }
        let doublings = look - FREE - 1;
        if doublings >= 16 {
            return CAP_NS;
        }
        let ns = FIRST_NS << doublings;
        if ns > CAP_NS {
            CAP_NS
        } else {
            ns
        }
    }

    /// Counts one failed look at `what` at `addr` (held by someone else) and pauses as the
    /// schedule says before the caller looks again; [`IndexError::Corrupt`] on the
    /// [`STUCK`]-th.
    pub async fn failed<T: Transport>(
        &mut self,
        c: &Client<T>,
        addr: GlobalAddr,
        what: &'static str,
    ) -> IndexResult<()> {
        self.looks += 1;
        if self.looks >= STUCK {
            return Err(stuck(addr, what, self.looks));
        }
        let ns = Backoff::pause_ns(self.looks);
        if ns > 0 {
            c.pause(ns).await;
        }
        Ok(())
    }

    /// Failed looks so far.
    pub fn looks(&self) -> u32 {
        self.looks
    }
}

#[cold]
#[inline(never)]
fn stuck(addr: GlobalAddr, what: &str, looks: u32) -> IndexError {
    IndexError::Corrupt(format!(
        "{what} at {addr} was still held after {looks} looks (over a minute): its holder \
         stopped or the word is garbage"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::local::{LocalConfig, LocalFabric};
    use dmindex_fabric::Fabric;

    #[test]
    fn the_schedule_is_free_then_doubling_to_the_cap() {
        let pauses: Vec<u64> = (1..=13).map(Backoff::pause_ns).collect();
        let us = |n: u64| n * 1_000;
        assert_eq!(
            pauses,
            [0, 0, 0, 0, us(1), us(2), us(4), us(8), us(16), us(32), us(64), us(64), us(64)]
        );
        assert_eq!(Backoff::pause_ns(STUCK), CAP_NS);
        assert_eq!(Backoff::pause_ns(u32::MAX), CAP_NS);
    }

    #[test]
    fn pauses_are_counted_and_put_nothing_on_the_network() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let a = c.alloc(8, 8).await.unwrap();
            let before = c.counts();
            let mut b = Backoff::new();
            for _ in 0..6 {
                b.failed(&c, a, "test word").await.unwrap();
            }
            let d = c.counts() - before;
            assert_eq!(b.looks(), 6);
            assert_eq!(d.pauses, 2, "looks 5 and 6 pause");
            assert_eq!((d.round_trips, d.verbs()), (0, 0));
        }]);
    }

    #[test]
    fn a_wait_that_never_ends_is_reported_at_the_bound() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let a = c.alloc(8, 8).await.unwrap();
            // Skip ahead to just below the bound: the last look is the one that reports.
            let mut b = Backoff { looks: STUCK - 2 };
            b.failed(&c, a, "segment meta").await.unwrap();
            let e = b.failed(&c, a, "segment meta").await.unwrap_err();
            assert!(matches!(&e, IndexError::Corrupt(m) if m.contains("segment meta")), "{e}");
        }]);
    }
}
