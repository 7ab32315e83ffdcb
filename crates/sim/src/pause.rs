//! Pauses in virtual time: a client that backs off before a retry
//! ([`dmindex_fabric::Transport::pause`]) sleeps until a virtual instant, with nothing on the
//! network and no CPU charged, while the other clients' events run.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::Shared;

/// One pause in flight.
#[derive(Debug, Default)]
pub(crate) struct Pause {
    done: bool,
    /// Its future was dropped before the pause ended: the slot is freed when it ends.
    abandoned: bool,
    waker: Option<Waker>,
}

/// The pauses in flight, in slots reused once their future is done or dropped.
#[derive(Debug, Default)]
pub(crate) struct Pauses {
    slots: Vec<Pause>,
    free: Vec<u32>,
}

impl Pauses {
    /// A new pause's slot.
    pub(crate) fn start(&mut self) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Pause::default();
                i
            }
            None => {
                self.slots.push(Pause::default());
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The pause in slot `i` is over: wake its client.
    pub(crate) fn end(&mut self, i: u32) {
        let p = &mut self.slots[i as usize];
        if p.abandoned {
            self.free.push(i);
            return;
        }
        p.done = true;
        if let Some(w) = p.waker.take() {
            w.wake();
        }
    }
}

/// Waits for the pause in slot `slot` to end.
pub(crate) struct PauseWait<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) slot: u32,
    pub(crate) taken: bool,
}

impl Future for PauseWait<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.shared.world.borrow_mut();
        let pauses = &mut w.pauses;
        let p = &mut pauses.slots[self.slot as usize];
        if p.done {
            pauses.free.push(self.slot);
            drop(w);
            self.taken = true;
            Poll::Ready(())
        } else {
            p.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for PauseWait<'_> {
    fn drop(&mut self) {
        if !self.taken {
            let mut w = self.shared.world.borrow_mut();
            let pauses = &mut w.pauses;
            let p = &mut pauses.slots[self.slot as usize];
            if p.done {
                pauses.free.push(self.slot);
            } else {
                p.waker = None;
                p.abandoned = true;
            }
        }
    }
}
