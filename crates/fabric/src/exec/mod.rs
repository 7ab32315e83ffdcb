//! Running many client tasks per OS thread.
//!
//! The papers run a few client threads per compute node and several coroutines per thread. Here a
//! coroutine is a future and a thread drives its futures with [`block_on`], which waits for a
//! transport's communication instead of spinning when all of them wait ([`block`]). Index code
//! never calls into this module: benchmarks, tests, transports and the CLI do.

pub mod block;
pub mod spin;
pub mod timer;

pub use block::block_on;
pub use timer::sleep;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Nanoseconds on this process's monotonic clock since its first reading: a real fabric's
/// [`crate::Transport::now_ns`].
pub fn monotonic_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A future that returns `Pending` once, so that the executor runs the thread's other tasks.
#[derive(Debug, Default)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow(bool);

/// Lets the thread's other tasks run before this one continues.
pub fn yield_now() -> YieldNow {
    YieldNow(false)
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Runs `tasks_per_thread` tasks on each of `threads` OS threads and returns their results in
/// order (thread-major). `make(thread, task)` is called on the worker thread, so the futures it
/// returns need not be `Send`.
pub fn run_on_threads<R, F, Fut>(threads: usize, tasks_per_thread: usize, make: F) -> Vec<R>
where
    F: Fn(usize, usize) -> Fut + Sync,
    Fut: Future<Output = R>,
    R: Send,
{
    let make = &make;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let tasks = (0..tasks_per_thread).map(|i| make(t, i));
                    block_on(futures::future::join_all(tasks))
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Like [`run_on_threads`], with one `init(thread)` state per thread that the thread's tasks
/// share (through an `Rc`, made on the worker thread); returns each thread's state after its
/// tasks finished, with their results, in thread order.
pub fn run_on_threads_with<St, R, I, F, Fut>(
    threads: usize,
    tasks_per_thread: usize,
    init: I,
    make: F,
) -> Vec<(St, Vec<R>)>
where
    St: Send,
    I: Fn(usize) -> St + Sync,
    F: Fn(&Rc<St>, usize, usize) -> Fut + Sync,
    Fut: Future<Output = R>,
    R: Send,
{
    let (init, make) = (&init, &make);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let state = Rc::new(init(t));
                    let tasks = (0..tasks_per_thread).map(|i| make(&state, t, i));
                    let out = block_on(futures::future::join_all(tasks));
                    let state = Rc::try_unwrap(state)
                        .unwrap_or_else(|_| panic!("a task kept its thread's state"));
                    (state, out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Runs the futures to completion on the calling thread, interleaved, and returns their results.
pub fn run_tasks<R, Fut: Future<Output = R>>(tasks: impl IntoIterator<Item = Fut>) -> Vec<R> {
    block_on(futures::future::join_all(tasks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn yield_interleaves_tasks() {
        let log = RefCell::new(Vec::new());
        run_tasks((0..2).map(|t| {
            let log = &log;
            async move {
                for step in 0..3 {
                    log.borrow_mut().push((t, step));
                    yield_now().await;
                }
            }
        }));
        let log = log.into_inner();
        // Both tasks made progress before either finished.
        let first_done = log.iter().position(|&e| e.1 == 2).unwrap();
        assert!(
            log[..first_done].iter().any(|e| e.0 == 0)
                && log[..first_done].iter().any(|e| e.0 == 1)
        );
    }

    #[test]
    fn results_are_thread_major() {
        let r = run_on_threads(3, 2, |t, i| async move { t * 10 + i });
        assert_eq!(r, vec![0, 1, 10, 11, 20, 21]);
    }
}
