//! How long a thread with nothing to run spins before it blocks: [`SPIN`] while spinning costs
//! nobody, nothing while the thread keeps being preempted.
//!
//! Spinning a few microseconds catches a reply that is about to arrive without the two system
//! calls and the context switch of blocking. But a thread that spins is, to the scheduler, a
//! thread that wants the CPU: on a host with more runnable threads than cores (a memory node and
//! its clients on a small host, or any other busy process) spinning threads are preempted for a
//! time slice (milliseconds) at a time, and the thread that would have answered them — the
//! memory node — waits for a core they hold. Measured on a 2-core host with other CPU-bound
//! processes running, a client thread of a memory node over loopback TCP switched 95 times in 3 s
//! (it hardly ever blocked) and once waited 60 ms for a core; blocking at once, like an
//! event-driven server, keeps the p99 within round trips.
//!
//! So the thread watches its own involuntary context switches (`getrusage(RUSAGE_THREAD)`, one
//! system call per [`WINDOW`] waits): a window with [`PREEMPTED`] or more of them turns spinning
//! off for [`HOLD`] windows, after which it is tried again. On a quiet host the thread keeps
//! spinning; on a contended one it spins during one window in [`HOLD`] + 1.

use std::time::Duration;

/// How long a thread spins once quiet when spinning costs nobody: a few round trips of a fast
/// fabric (a loopback message round trip through a memory node takes 10–25 µs; an RDMA READ
/// 2–3 µs), far below a scheduler's time slice.
pub const SPIN: Duration = Duration::from_micros(20);
/// Waits between two looks at the thread's involuntary context switches.
pub const WINDOW: u32 = 64;
/// Involuntary context switches in a window that say the thread competes for its core.
pub const PREEMPTED: u64 = 2;
/// Windows without spinning after a contended one.
pub const HOLD: u32 = 16;

/// One thread's spin policy (module docs).
#[derive(Clone, Copy, Debug)]
pub struct SpinPolicy {
    waits: u32,
    switches: u64,
    hold: u32,
    limit: Duration,
}

impl Default for SpinPolicy {
    fn default() -> SpinPolicy {
        SpinPolicy::new()
    }
}

impl SpinPolicy {
    /// A policy that spins until it sees the thread preempted.
    pub const fn new() -> SpinPolicy {
        SpinPolicy { waits: 0, switches: 0, hold: 0, limit: SPIN }
    }

    /// How long to spin in this wait.
    pub fn limit(&mut self) -> Duration {
        self.waits = self.waits.wrapping_add(1);
        if self.waits % WINDOW == 0 {
            self.judge(involuntary_switches());
        }
        self.limit
    }

    /// Ends a window in which the thread's involuntary switches reached `switches`.
    fn judge(&mut self, switches: u64) {
        let preempted = switches.saturating_sub(self.switches);
        self.switches = switches;
        if preempted >= PREEMPTED {
            self.hold = HOLD;
            self.limit = Duration::ZERO;
        } else if self.hold > 0 {
            self.hold -= 1;
        } else {
            self.limit = SPIN;
        }
    }
}

/// The calling thread's involuntary context switches so far (0 if the system cannot say).
fn involuntary_switches() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: writes one rusage into `ru`, which lives across the call.
    match unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } {
        0 => ru.ru_nivcsw.max(0) as u64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preempted_window_stops_spinning_for_hold_windows() {
        let mut p = SpinPolicy::new();
        assert_eq!(p.limit, SPIN);
        p.judge(1);
        assert_eq!(p.limit, SPIN, "one involuntary switch in a window is noise");
        p.judge(1 + PREEMPTED);
        assert_eq!(p.limit, Duration::ZERO);
        for _ in 0..HOLD {
            p.judge(1 + PREEMPTED);
            assert_eq!(p.limit, Duration::ZERO, "held off while the hold lasts");
        }
        p.judge(1 + PREEMPTED);
        assert_eq!(p.limit, SPIN, "tried again once the hold is over");
    }

    #[test]
    fn a_thread_sharing_its_core_with_a_spinner_sees_itself_preempted() {
        // Two threads pinned to one core, both spinning for 100 ms: the scheduler must take
        // the core from each several times (time slices are a few ms). The core is the one the
        // test runs on, so the pinning cannot be refused by a restricted CPU set.
        // SAFETY: no arguments; returns the calling thread's CPU or -1.
        let cpu = unsafe { libc::sched_getcpu() };
        assert!(cpu >= 0, "sched_getcpu failed");
        let pin_and_spin = || {
            // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: `cpu` is a CPU this process runs on, within the set's bounds.
            unsafe { libc::CPU_SET(cpu as usize, &mut set) };
            // SAFETY: pins the calling thread; `set` lives across the call.
            let pinned = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
            assert_eq!(pinned, 0, "cannot pin a thread to CPU {cpu}");
            let before = involuntary_switches();
            let end = std::time::Instant::now() + Duration::from_millis(100);
            while std::time::Instant::now() < end {
                std::hint::spin_loop();
            }
            involuntary_switches() - before
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(pin_and_spin);
            let b = s.spawn(pin_and_spin);
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(a.min(b) >= PREEMPTED, "involuntary switches seen: {a} and {b}");
    }
}
