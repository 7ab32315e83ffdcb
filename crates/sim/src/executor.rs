//! The single-threaded task executor under the simulator.
//!
//! Tasks are futures polled in FIFO order of wake-up. A waker is the task's index packed into
//! the waker's data pointer; waking pushes the index onto this thread's ready queue, so waking
//! allocates nothing and the order of polls depends only on the order of wake-ups, which depends
//! only on the simulation's events. One simulation runs on a thread at a time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, RawWaker, RawWakerVTable, Waker};

/// A task: any future, boxed, borrowing whatever outlives the run.
pub type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

#[derive(Default)]
struct ReadyQueue {
    queue: VecDeque<usize>,
    queued: Vec<bool>,
    active: bool,
}

thread_local! {
    static READY: RefCell<ReadyQueue> = RefCell::new(ReadyQueue::default());
}

fn wake_index(i: usize) {
    READY.with(|r| {
        let mut r = r.borrow_mut();
        if r.active && i < r.queued.len() && !r.queued[i] {
            r.queued[i] = true;
            r.queue.push_back(i);
        }
    });
}

const VTABLE: RawWakerVTable = RawWakerVTable::new(
    |data| RawWaker::new(data, &VTABLE),
    |data| wake_index(data as usize),
    |data| wake_index(data as usize),
    |_| {},
);

fn waker_for(i: usize) -> Waker {
    // SAFETY: the vtable's functions never dereference the data pointer; it only carries the
    // task index. Cloning copies the index, dropping does nothing, waking pushes the index onto
    // the thread-local queue (ignored when no run is active or the index is stale), so every
    // RawWaker contract holds for any pointer value.
    unsafe { Waker::from_raw(RawWaker::new(i as *const (), &VTABLE)) }
}

/// The tasks of one run and the thread's ready queue, owned while the run lasts.
pub(crate) struct Executor<'a> {
    tasks: Vec<Option<Task<'a>>>,
    live: usize,
}

impl<'a> Executor<'a> {
    /// Takes this thread's ready queue for a run of `tasks`, all initially ready.
    pub(crate) fn new(tasks: Vec<Task<'a>>) -> Executor<'a> {
        READY.with(|r| {
            let mut r = r.borrow_mut();
            assert!(!r.active, "a simulation is already running on this thread (nested run?)");
            r.active = true;
            r.queue.clear();
            r.queue.extend(0..tasks.len());
            r.queued.clear();
            r.queued.resize(tasks.len(), true);
        });
        let live = tasks.len();
        Executor { tasks: tasks.into_iter().map(Some).collect(), live }
    }

    /// Tasks not finished or dropped.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// The next woken task, if any.
    pub(crate) fn next_ready(&mut self) -> Option<usize> {
        READY.with(|r| {
            let mut r = r.borrow_mut();
            let i = r.queue.pop_front()?;
            r.queued[i] = false;
            Some(i)
        })
    }

    /// Polls task `i` once; returns true if it finished.
    pub(crate) fn poll(&mut self, i: usize) -> bool {
        let Some(task) = self.tasks[i].as_mut() else { return false };
        let waker = waker_for(i);
        let mut cx = Context::from_waker(&waker);
        if task.as_mut().poll(&mut cx).is_ready() {
            self.tasks[i] = None;
            self.live -= 1;
            true
        } else {
            false
        }
    }

    /// Drops task `i` where it stands (a crashed client).
    pub(crate) fn drop_task(&mut self, i: usize) {
        if self.tasks[i].take().is_some() {
            self.live -= 1;
        }
    }

    /// Drops every task still alive; returns their indices.
    pub(crate) fn drop_all(&mut self) -> Vec<usize> {
        let alive: Vec<usize> =
            (0..self.tasks.len()).filter(|&i| self.tasks[i].is_some()).collect();
        for &i in &alive {
            self.drop_task(i);
        }
        alive
    }
}

impl Drop for Executor<'_> {
    fn drop(&mut self) {
        // Tasks hold simulator handles; drop them before releasing the queue.
        self.tasks.clear();
        READY.with(|r| {
            let mut r = r.borrow_mut();
            r.active = false;
            r.queue.clear();
            r.queued.clear();
        });
    }
}
