//! The executor under [`run_tasks`](super::run_tasks) and its kin: runs one future (a thread's
//! tasks, joined) until it is done, and when none of its tasks can run, waits for the
//! communication they wait for instead of spinning.
//!
//! # Why not spin
//!
//! A task waiting for a remote verb used to yield and be polled again at once: its thread then
//! spun on its transport, whatever the verb's latency. Where the verb is a message a memory
//! node's CPU must answer (UCX over TCP), a client thread spinning in the kernel (a poll of its
//! sockets per turn) takes the very core the memory node needs to answer: on a 2-core host, 62 %
//! of client CPU was in the kernel and verbs took milliseconds.
//!
//! # How a thread waits
//!
//! A transport whose verbs complete asynchronously registers a [`WaitSource`] for its thread
//! ([`register`]). A task that must wait for it stores its waker where the transport's
//! completion finds it and returns `Pending` without waking itself — but only when
//! [`can_sleep`] says this executor drives the thread (under another executor it yields as
//! before, so it cannot wait forever). When no task is runnable the executor:
//!
//! 0. tells every source to send what its tasks posted ([`WaitSource::flush`]: a transport may
//!    hold messages back until then, to send them together), and progresses every source at
//!    least once even if a task is runnable again already (one that keeps yielding must not
//!    starve those that wait on a source);
//! 1. progresses every source for up to [`SPIN`](super::spin::SPIN) (a reply on loopback or RDMA often comes
//!    within it, and blocking and waking cost two system calls and a context switch) — or not
//!    at all while the thread keeps being preempted ([`super::spin`]);
//! 2. then arms every source and blocks in `poll(2)` on their descriptors for at most
//!    [`NAP`]; a source that cannot be armed (events already pending) ends the wait at once;
//! 3. after a nap that timed out, or once a nap's time passed without one (a thread its other
//!    tasks keep busy), tells every source ([`WaitSource::napped`]), so that tasks
//!    waiting for a deadline or a failure look again.
//!
//! A task that pauses ([`super::timer::sleep`], a retry's backoff) cuts both the spin and the
//! block short at its deadline.
//!
//! A wake from another thread (a CN-local combiner's follower, whose leader runs on another
//! thread) sets the flag the executor checks and unparks it, and while the executor blocks in
//! `poll` also rings a bell in the poll set (an eventfd), so such a wake ends the block at once.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::spin::SpinPolicy;
use super::timer;

/// The longest a blocked thread sleeps before its tasks look at their deadlines again.
pub const NAP: Duration = Duration::from_millis(5);

/// Something a thread's tasks wait for that can wake the thread: a transport's worker.
pub trait WaitSource {
    /// Sends what the thread's tasks posted and the source holds back until they all wait
    /// (to send it together): called before every wait, and when the thread's future is done.
    fn flush(&self) {}
    /// Makes progress on outstanding communication, waking the tasks it completes; whether
    /// anything happened.
    fn progress(&self) -> bool;
    /// Prepares to block: the descriptor that becomes readable once there is something to
    /// progress, or `None` if there is already (then the thread does not block).
    fn arm(&self) -> Option<RawFd>;
    /// A nap ended without an event: wake every waiting task (deadlines, failures).
    fn napped(&self);
}

thread_local! {
    /// Whether this executor drives the current thread.
    static DRIVING: Cell<bool> = const { Cell::new(false) };
    static SOURCES: RefCell<Vec<Weak<dyn WaitSource>>> = const { RefCell::new(Vec::new()) };
    /// Tasks waiting for a descriptor to be readable ([`readable`]).
    static READERS: RefCell<Vec<(RawFd, Waker)>> = const { RefCell::new(Vec::new()) };
    /// How long this thread spins before it blocks ([`super::spin`]).
    static SPINNING: Cell<SpinPolicy> = const { Cell::new(SpinPolicy::new()) };
    /// The buffers a wait uses, kept between waits so that waiting allocates nothing.
    static SCRATCH: Cell<Scratch> = const { Cell::new((Vec::new(), Vec::new())) };
    /// When waiting tasks were last told to look at their deadlines ([`look_again`]).
    static LOOKED: Cell<Option<Instant>> = const { Cell::new(None) };
}

type Scratch = (Vec<Rc<dyn WaitSource>>, Vec<libc::pollfd>);

/// Lets the current thread's executor wait on `source` when its tasks all wait; kept until the
/// source is dropped.
pub fn register(source: Weak<dyn WaitSource>) {
    SOURCES.with(|s| {
        let mut s = s.borrow_mut();
        s.retain(|w| w.strong_count() > 0);
        s.push(source);
    });
}

/// Whether a task may wait by storing its waker and returning `Pending` without waking itself:
/// this module's executor drives the thread (it progresses the registered sources when every
/// task waits). Elsewhere a waiting task must yield ([`super::yield_now`]) instead.
pub fn can_sleep() -> bool {
    DRIVING.with(Cell::get)
}

/// Waits until woken once: `park` gets the task's waker, to leave where whatever the task
/// waits for will wake it, and returns whether it did (`false`: what it waits for is already
/// there, so the task goes on at once). Under another executor, yields instead (nothing would
/// progress the thread's sources while the task sleeps). For transports' waiting futures.
pub async fn park(park: impl FnOnce(&Waker) -> bool) {
    if !can_sleep() {
        return super::yield_now().await;
    }
    let mut park = Some(park);
    // Pending once, if parked; ready when polled again (woken) or if not parked.
    std::future::poll_fn(|cx| match park.take().is_some_and(|park| park(cx.waker())) {
        true => Poll::Pending,
        false => Poll::Ready(()),
    })
    .await
}

/// Waits until `fd` may be readable (or a nap passed: look again). Under another executor,
/// yields instead. For a task that reads a non-blocking socket (a two-sided call).
pub async fn readable(fd: RawFd) {
    park(|w| {
        READERS.with(|r| r.borrow_mut().push((fd, w.clone())));
        true
    })
    .await
}

/// Wakes the readers whose descriptor `ready` says is readable (all of them if `ready` is
/// `None`: a nap passed).
fn wake_readers(ready: Option<&[libc::pollfd]>) {
    READERS.with(|r| {
        r.borrow_mut().retain(|(fd, w)| {
            let woken = ready.is_none_or(|p| p.iter().any(|p| p.fd == *fd && p.revents != 0));
            if woken {
                w.wake_by_ref();
            }
            !woken
        })
    });
}

/// Adds the descriptor `fd` to a poll set, to wait for it to be readable.
fn watch(fds: &mut Vec<libc::pollfd>, fd: RawFd) {
    fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
}

/// Adds the readers' descriptors to a poll set.
fn watch_readers(fds: &mut Vec<libc::pollfd>) {
    READERS.with(|r| r.borrow().iter().for_each(|(fd, _)| watch(fds, *fd)));
}

/// Polls the readers' descriptors without blocking and wakes those that are readable.
fn poll_readers(fds: &mut Vec<libc::pollfd>) {
    fds.clear();
    watch_readers(fds);
    if fds.is_empty() {
        return;
    }
    // SAFETY: `fds` is a valid array of pollfd for the call's duration; zero timeout.
    if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) } > 0 {
        wake_readers(Some(fds));
    }
}

/// Wakes the executor: a flag it checks between polls, an unpark for a thread parked with
/// nothing to poll, and a bell for one blocked in `poll(2)` (only then can the wake come from
/// another thread).
struct Signal {
    woken: AtomicBool,
    /// The executor blocks in `poll`, or is about to: a wake rings the bell.
    polling: AtomicBool,
    /// An eventfd in the executor's poll set; `None` if none could be made (a wake from
    /// another thread is then seen within a nap).
    bell: Option<OwnedFd>,
    thread: Thread,
}

impl Signal {
    fn new() -> Signal {
        // SAFETY: eventfd returns a new descriptor that we own, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        // SAFETY: a non-negative fd was just made and is owned by nobody else.
        let bell = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let (woken, polling) = (AtomicBool::new(false), AtomicBool::new(false));
        Signal { woken, polling, bell, thread: std::thread::current() }
    }

    /// Empties the bell after a poll it may have ended.
    fn silence(&self) {
        if let Some(bell) = &self.bell {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into `count` from a non-blocking eventfd we own; a bell
            // that did not ring reads nothing (EAGAIN).
            unsafe { libc::read(bell.as_raw_fd(), (&raw mut count).cast(), 8) };
        }
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // SeqCst with the executor's store of `polling` then load of `woken`: either the
        // executor sees this wake before it polls, or this sees it polling and rings.
        if self.woken.swap(true, Ordering::SeqCst) {
            return;
        }
        self.thread.unpark();
        if let (true, Some(bell)) = (self.polling.load(Ordering::SeqCst), &self.bell) {
            let one = 1u64;
            // SAFETY: writes 8 bytes from `one` to an eventfd we own (it lives as long as the
            // Signal this method borrows).
            unsafe { libc::write(bell.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// Marks the thread as driven by this executor while it lives (and restores what was before,
/// for an executor run inside a task).
struct Driving(bool);

impl Driving {
    fn enter() -> Driving {
        Driving(DRIVING.with(|d| d.replace(true)))
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        DRIVING.with(|d| d.set(self.0));
    }
}

/// Runs `fut` to completion on the calling thread.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    block_on_napping(fut, NAP)
}

/// [`block_on`] with naps of `nap` (tests lengthen them to tell a wake that ends a block from
/// one seen after a nap).
fn block_on_napping<F: Future>(fut: F, nap: Duration) -> F::Output {
    let _driving = Driving::enter();
    let signal = Arc::new(Signal::new());
    let waker = Waker::from(Arc::clone(&signal));
    let mut cx = Context::from_waker(&waker);
    // Declared before the future, so dropped after it: what the last tasks posted without
    // waiting (a zero-wait WRITE), or posted while the future is dropped (a client's goodbye),
    // still goes out, on return and on unwind alike.
    let _flush = FlushOnDrop;
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        wait_for_wake(&signal, nap);
    }
}

/// Tells every source of the thread to send what it holds back when dropped.
struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        with_sources(|sources, _| sources.iter().for_each(|s| s.flush()));
    }
}

/// Runs `f` on this thread's live sources and the wait's poll set (kept between waits, so
/// that waiting allocates nothing).
fn with_sources<R>(f: impl FnOnce(&[Rc<dyn WaitSource>], &mut Vec<libc::pollfd>) -> R) -> R {
    let (mut sources, mut fds) = SCRATCH.take();
    SOURCES.with(|s| sources.extend(s.borrow().iter().filter_map(Weak::upgrade)));
    let r = f(&sources, &mut fds);
    sources.clear();
    SCRATCH.set((sources, fds));
    r
}

/// Returns once a task was woken: progresses the sources, spins a little, then blocks.
fn wait_for_wake(signal: &Signal, nap: Duration) {
    with_sources(|sources, fds| {
        // What the tasks posted goes out before anything waits for its answer.
        for s in sources {
            s.flush();
        }
        // Waiting tasks look at their deadlines at least once a nap, even on a thread that
        // never naps because its other tasks keep it busy.
        let now = Instant::now();
        let last = LOOKED.with(|l| {
            let last = l.get().unwrap_or(now);
            l.set(Some(last));
            last
        });
        if now.duration_since(last) >= nap {
            look_again(sources, now);
        }
        wait_on(signal, sources, fds, nap);
    })
}

/// Wakes every waiting task to look at its deadline ([`WaitSource::napped`]); `now` is when.
fn look_again(sources: &[Rc<dyn WaitSource>], now: Instant) {
    for s in sources {
        s.napped();
    }
    wake_readers(None);
    LOOKED.with(|l| l.set(Some(now)));
}

fn wait_on(
    signal: &Signal,
    sources: &[Rc<dyn WaitSource>],
    fds: &mut Vec<libc::pollfd>,
    nap: Duration,
) {
    // Readers are looked at once a wait, so that busy sources cannot hold them back.
    poll_readers(fds);
    let spin = SPINNING.with(|p| {
        let mut policy = p.get();
        let spin = policy.limit();
        p.set(policy);
        spin
    });
    let mut quiet_since = Instant::now();
    let mut progressed = false;
    // Ends when a task is woken: by a source's progress, from another thread, or after a nap.
    loop {
        // Due pauses wake their tasks (and so this thread's signal) here.
        let next = timer::wake_due();
        if signal.woken.swap(false, Ordering::Acquire) {
            // Every wait progresses the sources at least once, so that a task that keeps
            // yielding (polling a channel) cannot starve the tasks that wait on them.
            if !progressed {
                for s in sources {
                    s.progress();
                }
            }
            return;
        }
        let readers = READERS.with(|r| r.borrow().len());
        // A pause due within a spin is waited out spinning: a sleep that short would end a
        // timer slack (50 µs by default) late.
        if next.is_some_and(|due| due.saturating_duration_since(Instant::now()) < spin) {
            for s in sources {
                s.progress();
            }
            std::hint::spin_loop();
            continue;
        }
        if sources.is_empty() && readers == 0 {
            match next {
                Some(due) => {
                    std::thread::park_timeout(due.saturating_duration_since(Instant::now()))
                }
                None => std::thread::park(),
            }
            continue;
        }
        let mut busy = false;
        for s in sources {
            busy |= s.progress();
        }
        progressed = true;
        if busy {
            quiet_since = Instant::now();
            continue;
        }
        if quiet_since.elapsed() < spin {
            std::hint::spin_loop();
            continue;
        }
        fds.clear();
        let mut armed = true;
        for s in sources {
            match s.arm() {
                Some(fd) => watch(fds, fd),
                None => armed = false,
            }
        }
        watch_readers(fds);
        if let Some(bell) = &signal.bell {
            watch(fds, bell.as_raw_fd());
        }
        signal.polling.store(true, Ordering::SeqCst);
        if !armed || signal.woken.load(Ordering::SeqCst) {
            signal.polling.store(false, Ordering::SeqCst);
            continue;
        }
        // A pause due before the nap ends cuts the block short (and is no nap).
        let block = timer::block_for(nap, next);
        let napping = block == nap;
        let timeout = libc::timespec {
            tv_sec: block.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: block.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of pollfd and `timeout` a valid timespec for the
        // call's duration; no signal mask is passed. An interrupted poll (EINTR) only ends the
        // wait early.
        let ready = unsafe {
            libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &timeout, std::ptr::null())
        };
        signal.polling.store(false, Ordering::SeqCst);
        signal.silence();
        // A block cut short by a pause is no nap: the loop's top wakes the paused task.
        if ready > 0 {
            wake_readers(Some(fds));
        } else if ready == 0 && napping {
            look_again(sources, Instant::now());
        }
        quiet_since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::mpsc;

    /// A source whose event is a byte in a pipe; its waiting task is woken when progress reads
    /// one.
    struct Pipe {
        read: OwnedFd,
        waiter: RefCell<Option<Waker>>,
        arrived: Cell<bool>,
        progressed: Cell<u64>,
        naps: Cell<u64>,
        /// Flushes, and progress calls made before the first flush.
        flushed: Cell<u64>,
        unflushed_progress: Cell<u64>,
    }

    impl WaitSource for Pipe {
        fn flush(&self) {
            self.flushed.set(self.flushed.get() + 1);
        }
        fn progress(&self) -> bool {
            if self.flushed.get() == 0 {
                self.unflushed_progress.set(self.unflushed_progress.get() + 1);
            }
            self.progressed.set(self.progressed.get() + 1);
            let mut b = [0u8; 1];
            // SAFETY: reads at most one byte into `b` from a non-blocking pipe we own.
            let n = unsafe { libc::read(self.read.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
            if n != 1 {
                return false;
            }
            self.arrived.set(true);
            if let Some(w) = self.waiter.take() {
                w.wake();
            }
            true
        }
        fn arm(&self) -> Option<RawFd> {
            Some(self.read.as_raw_fd())
        }
        fn napped(&self) {
            self.naps.set(self.naps.get() + 1);
            if let Some(w) = self.waiter.take() {
                w.wake();
            }
        }
    }

    impl Pipe {
        /// A source on the pipe's read end, registered with this thread's executor.
        fn registered(read: OwnedFd) -> Rc<Pipe> {
            let source = Rc::new(Pipe {
                read,
                waiter: RefCell::new(None),
                arrived: Cell::new(false),
                progressed: Cell::new(0),
                naps: Cell::new(0),
                flushed: Cell::new(0),
                unflushed_progress: Cell::new(0),
            });
            register(Rc::downgrade(&(source.clone() as Rc<dyn WaitSource>)));
            source
        }
    }

    /// A non-blocking pipe: (read end, write end).
    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors that we then own.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) }, 0);
        // SAFETY: both descriptors were just made and are owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    #[test]
    fn sources_send_what_they_hold_before_each_wait_and_when_the_future_is_done() {
        let (read, write) = pipe();
        let source = Pipe::registered(read);
        // Done at once: nothing waited, but what the future posted still goes out.
        block_on(async {});
        assert_eq!(source.flushed.get(), 1);
        // One wait (the byte is there already), then done: a flush before the wait's first
        // progress, and one at the end.
        // SAFETY: writes one byte from a live buffer to the pipe's write end.
        assert_eq!(unsafe { libc::write(write.as_raw_fd(), [7u8].as_ptr().cast(), 1) }, 1);
        source.flushed.set(0);
        block_on(poll_fn(|cx| {
            if source.arrived.get() {
                return Poll::Ready(());
            }
            *source.waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }));
        assert_eq!(source.flushed.get(), 2);
        assert_eq!(source.unflushed_progress.get(), 0, "progressed before it was flushed");
    }

    #[test]
    fn a_task_that_keeps_yielding_does_not_starve_one_that_waits_on_a_source() {
        let (read, write) = pipe();
        let source = Pipe::registered(read);
        // SAFETY: writes one byte from a live buffer to the pipe's write end.
        assert_eq!(unsafe { libc::write(write.as_raw_fd(), [7u8].as_ptr().cast(), 1) }, 1);
        let waiter = poll_fn(|cx| {
            if source.arrived.get() {
                return Poll::Ready(());
            }
            *source.waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        });
        let yielder = async {
            // Bounded: a starved waiter fails the test instead of hanging it.
            for _ in 0..10_000 {
                if source.arrived.get() {
                    return;
                }
                crate::exec::yield_now().await;
            }
            panic!("the waiting task was starved: its source was never progressed");
        };
        block_on(futures::future::join(waiter, yielder));
    }

    #[test]
    fn a_thread_kept_busy_still_tells_its_waiting_tasks_to_look_again() {
        let (read, _write) = pipe();
        let source = Pipe::registered(read);
        // One task waits for an event that never comes; another keeps the thread busy, so the
        // thread never naps, until the waiting task is told to look again. Bounded by far more
        // than a nap, not by a few naps' time: a thread descheduled for some milliseconds on a
        // loaded host would pass a short bound before it looked, as a CI run beside a long
        // simulation did.
        let waiter = poll_fn(|cx| {
            if source.naps.get() > 0 {
                return Poll::Ready(());
            }
            *source.waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        });
        let end = Instant::now() + 400 * NAP;
        let busy = async {
            while source.naps.get() == 0 && Instant::now() < end {
                crate::exec::yield_now().await;
            }
            // Before the thread is idle and naps for real.
            assert!(source.naps.get() >= 1, "the waiting task was not told to look again");
        };
        block_on(futures::future::join(waiter, busy));
    }

    #[test]
    fn a_thread_whose_task_waits_blocks_until_its_source_has_an_event() {
        let (read, write) = pipe();
        let source = Pipe::registered(read);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(60));
            // SAFETY: writes one byte from a live buffer to the pipe's write end.
            assert_eq!(unsafe { libc::write(write.as_raw_fd(), [7u8].as_ptr().cast(), 1) }, 1);
        });
        let start = Instant::now();
        block_on(poll_fn(|cx| {
            assert!(can_sleep());
            if source.arrived.get() {
                return Poll::Ready(());
            }
            *source.waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }));
        writer.join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(60));
        // Spinning for 60 ms would progress tens of thousands of times; a thread that blocks
        // progresses for SPIN after each nap (a dozen naps) and after the event.
        let (progressed, naps) = (source.progressed.get(), source.naps.get());
        assert!(progressed < 5_000, "progressed {progressed} times in 60 ms: it spun");
        assert!(naps >= 5, "{naps} naps in 60 ms of NAP = {NAP:?}");
        assert!(!can_sleep());
    }

    /// A wake from another thread while the executor blocks in `poll` on a source ends the
    /// block at once (the bell), not at the end of a nap (10 s here).
    #[test]
    fn a_wake_from_another_thread_ends_a_block_on_a_source() {
        let (read, _write) = pipe();
        let source = Pipe::registered(read);
        let (tx, rx) = mpsc::channel::<Waker>();
        let waker_thread = std::thread::spawn(move || {
            let w = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            w.wake();
        });
        let (start, mut sent) = (Instant::now(), false);
        block_on_napping(
            poll_fn(|cx| {
                if sent {
                    return Poll::Ready(());
                }
                sent = true;
                tx.send(cx.waker().clone()).unwrap();
                Poll::Pending
            }),
            Duration::from_secs(10),
        );
        waker_thread.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(5), "the wake waited for the nap");
        assert_eq!(source.naps.get(), 0);
    }

    #[test]
    fn a_wake_from_another_thread_ends_the_wait() {
        let (tx, rx) = mpsc::channel::<Waker>();
        let waker_thread = std::thread::spawn(move || {
            let w = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            w.wake();
        });
        let mut sent = false;
        block_on(poll_fn(|cx| {
            if sent {
                return Poll::Ready(());
            }
            sent = true;
            tx.send(cx.waker().clone()).unwrap();
            Poll::Pending
        }));
        waker_thread.join().unwrap();
    }

    #[test]
    fn a_task_that_yields_runs_again_without_waiting() {
        let start = Instant::now();
        block_on(async {
            for _ in 0..1000 {
                super::super::yield_now().await;
            }
        });
        // A nap per yield would take 5 s.
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_reader_is_woken_when_its_descriptor_is_readable() {
        let (read, write) = pipe();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: writes one byte from a live buffer to the pipe's write end.
            assert_eq!(unsafe { libc::write(write.as_raw_fd(), [7u8].as_ptr().cast(), 1) }, 1);
            write
        });
        let (start, mut waits) = (Instant::now(), 0u32);
        block_on(async {
            loop {
                let mut b = [0u8; 1];
                // SAFETY: reads at most one byte into `b` from a non-blocking pipe we own.
                if unsafe { libc::read(read.as_raw_fd(), b.as_mut_ptr().cast(), 1) } == 1 {
                    break;
                }
                waits += 1;
                readable(read.as_raw_fd()).await;
            }
        });
        let _write = writer.join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
        // Woken by the byte, or by a nap now and then: never spun.
        assert!(waits <= 10, "{waits} waits for one byte in 30 ms");
        assert_eq!(READERS.with(|r| r.borrow().len()), 0);
    }
}
