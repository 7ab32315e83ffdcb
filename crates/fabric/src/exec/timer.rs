//! Pauses on [`block_on`](super::block_on)'s thread: a task that backs off before it retries
//! waits for an instant without spinning on the network and, when the pause is long enough,
//! without holding the CPU.
//!
//! A pausing task leaves its deadline and waker in the thread's timer list and returns
//! `Pending`. The executor wakes due timers each time it looks for work, spins no further than
//! the earliest deadline, and blocks no longer than until it: a pause shorter than the
//! executor's spin is spent progressing the thread's transports (other tasks' replies still
//! arrive), a longer one sleeps in `ppoll(2)`, which takes nanoseconds, so a 30 µs pause is not
//! rounded up to a millisecond.
//!
//! Under another executor a pause yields once (nothing here would wake it).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

thread_local! {
    /// Paused tasks: when each is due, and its waker. Few at a time (one per waiting task).
    static TIMERS: RefCell<Vec<(Instant, Waker)>> = const { RefCell::new(Vec::new()) };
}

/// A pause until an instant ([`sleep`]).
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    due: Instant,
    /// Under another executor: yielded once already.
    yielded: bool,
}

/// Waits `d` (at least), leaving the thread to its other tasks and transports meanwhile.
pub fn sleep(d: Duration) -> Sleep {
    Sleep { due: Instant::now() + d, yielded: false }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.due {
            return Poll::Ready(());
        }
        if !super::block::can_sleep() {
            if self.yielded {
                return Poll::Ready(());
            }
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let due = self.due;
        TIMERS.with(|t| t.borrow_mut().push((due, cx.waker().clone())));
        Poll::Pending
    }
}

/// Wakes the tasks whose pause is over; returns the earliest deadline still pending.
pub(super) fn wake_due() -> Option<Instant> {
    TIMERS.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_empty() {
            return None;
        }
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        t.retain(|(due, w)| {
            if *due <= now {
                w.wake_by_ref();
                return false;
            }
            next = Some(next.map_or(*due, |n| n.min(*due)));
            true
        });
        next
    })
}

/// How long a thread may block: `nap`, cut short by the earliest pending deadline `next`.
pub(super) fn block_for(nap: Duration, next: Option<Instant>) -> Duration {
    match next {
        Some(due) => nap.min(due.saturating_duration_since(Instant::now())),
        None => nap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{block_on, run_tasks, yield_now};
    use std::cell::Cell;

    #[test]
    fn a_pause_lasts_at_least_its_duration_and_lets_other_tasks_run() {
        let ran = Cell::new(0u32);
        let start = Instant::now();
        run_tasks((0..2).map(|t| {
            let ran = &ran;
            async move {
                if t == 0 {
                    sleep(Duration::from_millis(3)).await;
                    // The other task finished its steps while this one paused.
                    assert_eq!(ran.get(), 100);
                } else {
                    for _ in 0..100 {
                        ran.set(ran.get() + 1);
                        yield_now().await;
                    }
                }
            }
        }));
        assert!(start.elapsed() >= Duration::from_millis(3));
    }

    #[test]
    fn a_long_pause_blocks_the_thread_instead_of_spinning() {
        // Process CPU time over a 40 ms pause: a spinning executor burns ~40 ms of it.
        fn cpu() -> Duration {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: writes one timespec into `ts`, which lives across the call.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        }
        let before = cpu();
        block_on(sleep(Duration::from_millis(40)));
        let used = cpu() - before;
        assert!(used < Duration::from_millis(20), "a 40 ms pause used {used:?} of CPU");
    }

    #[test]
    fn timers_report_the_earliest_deadline_and_wake_only_due_ones() {
        let now = Instant::now();
        let woken = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        struct Count(std::sync::Arc<std::sync::atomic::AtomicU32>);
        impl std::task::Wake for Count {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let w = Waker::from(std::sync::Arc::new(Count(woken.clone())));
        let late = now + Duration::from_secs(60);
        TIMERS.with(|t| {
            let mut t = t.borrow_mut();
            t.push((now, w.clone()));
            t.push((late + Duration::from_secs(1), w.clone()));
            t.push((late, w.clone()));
        });
        assert_eq!(wake_due(), Some(late));
        assert_eq!(woken.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(block_for(Duration::from_millis(5), Some(late)) == Duration::from_millis(5));
        assert!(block_for(Duration::from_secs(120), Some(late)) <= Duration::from_secs(60));
        TIMERS.with(|t| t.borrow_mut().clear());
    }

    #[test]
    fn under_another_executor_a_pause_yields_once() {
        let mut s = std::pin::pin!(sleep(Duration::from_secs(60)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(s.as_mut().poll(&mut cx).is_pending());
        assert!(s.as_mut().poll(&mut cx).is_ready());
    }
}
