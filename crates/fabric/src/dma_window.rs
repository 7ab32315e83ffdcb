//! A READ's lines sampled within one short window, as a NIC's DMA samples them.
//!
//! # Why
//!
//! A NIC executes a READ (or a doorbell batch of READs) in about a microsecond, whatever the
//! client's CPU is doing: its lines are sampled close together in time. On `local` the client's
//! own thread copies the lines, and the operating system can deschedule that thread between two
//! lines for milliseconds. The READ then pairs lines that no NIC could pair, thousands of other
//! clients' writes apart, and defeats the small wrapping counters that designs use to detect
//! torn reads because a NIC's window is short: CHIME's 4-bit cache-line versions (16 writes of
//! a leaf inside one READ), SepHash's 8-bit merge edition (256 merges of a segment inside one
//! doorbell). Real threads on an oversubscribed machine produced both: a CHIME search returned
//! another key's value, and a SepHash delete was undone.
//!
//! # What
//!
//! A READ that spans more than one line, and a doorbell batch made only of READs, is timed with
//! the CPU's cycle counter; when it took longer than a budget far above what copying its lines
//! costs (see [`budget`]), it is redone. The client cannot tell a redone READ from one the NIC
//! executed at that later instant, so this removes a scheduling artefact and promises nothing
//! RDMA does not: lines are still sampled at different instants, only never further apart than
//! a NIC's would be. A one-line READ is atomic anyway and is not timed; a batch with a WRITE or an atomic
//! is not redone (its effects cannot be taken back), and no design relies on the window there.

/// Cycles a READ may take before it counts as descheduled: 40 000 (10–20 µs at 2–4 GHz),
/// about 100 times what copying a few lines costs, plus [`PER_LINE`] per line.
pub const BASE: u64 = 40_000;
/// Extra cycles allowed per line of the READ (a cache-missing line copy costs a few hundred).
pub const PER_LINE: u64 = 2_000;

/// The cycle budget of a READ (or batch of READs) of `lines` cache lines.
#[inline]
pub fn budget(lines: u64) -> u64 {
    BASE + PER_LINE * lines
}

/// The CPU's cycle counter (nanoseconds since a fixed instant off x86-64).
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Cache lines touched by `len` bytes at `offset`.
#[inline]
pub fn lines(offset: u64, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let line = crate::memory::CACHE_LINE;
    (offset + len as u64 - 1) / line - offset / line + 1
}

/// Runs `read` (which only reads) until one run takes at most the budget of `lines` lines.
#[inline]
pub fn within_window(lines: u64, mut read: impl FnMut()) {
    if lines <= 1 {
        read();
        return;
    }
    let budget = budget(lines);
    loop {
        let start = ticks();
        read();
        // A counter that went backwards (a migration between unsynchronised counters) reads
        // as a huge span: redone too, which is always allowed.
        if ticks().wrapping_sub(start) <= budget {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_counts_every_line_touched() {
        assert_eq!(lines(0, 0), 0);
        assert_eq!(lines(0, 64), 1);
        assert_eq!(lines(0, 65), 2);
        assert_eq!(lines(63, 2), 2);
        assert_eq!(lines(64, 128), 2);
        assert_eq!(lines(100, 200), 4);
    }

    #[test]
    fn a_stalled_read_is_redone_and_a_quick_one_is_not() {
        let mut runs = 0;
        within_window(3, || {
            runs += 1;
            if runs == 1 {
                // Stall far past the budget, as a descheduled thread would.
                let start = ticks();
                while ticks().wrapping_sub(start) <= budget(3) * 4 {
                    std::hint::spin_loop();
                }
            }
        });
        assert_eq!(runs, 2, "the stalled run is redone once");
        let mut runs = 0;
        within_window(3, || runs += 1);
        assert_eq!(runs, 1);
        let mut runs = 0;
        within_window(1, || runs += 1);
        assert_eq!(runs, 1, "a one-line READ is never timed");
    }
}
