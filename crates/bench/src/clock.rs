//! The clock every real-time measurement is read from: the run phases' throughput and
//! latencies here, and the verb floor that `dmindex perf` divides them by, so that a ratio of
//! the two compares like with like.

/// Wall time in ns since the clock was made, from the CPU's time-stamp counter scaled to ns:
/// two readings per timed operation (about 10 ns each here) instead of two `clock_gettime`
/// calls (about 7 % of a search on two threads). Wall time: a thread descheduled while it is
/// timed is charged for it, as a busy host's runs are.
pub struct WallClock {
    clock: quanta::Clock,
    start: u64,
}

impl WallClock {
    pub fn new() -> WallClock {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        WallClock { clock, start }
    }

    /// ns since [`WallClock::new`].
    pub fn now_ns(&self) -> u64 {
        self.clock.delta_as_nanos(self.start, self.clock.raw())
    }
}

impl Default for WallClock {
    fn default() -> WallClock {
        WallClock::new()
    }
}
