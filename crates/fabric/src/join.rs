//! Awaiting a few futures of one type together, without allocating: the doorbells a client
//! posts back to back ([`crate::Client::doorbells`]) are awaited as one round trip.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

/// Polls every future of `futs` until all are done, each in its place; the first error (in
/// array order) once all are done. Every future runs to its end even after another failed:
/// each borrows a buffer its verbs are still filling.
pub(crate) async fn join_results<F, E, const N: usize>(futs: [Option<F>; N]) -> Result<(), E>
where
    F: Future<Output = Result<(), E>>,
{
    let mut futs = pin!(futs);
    let mut first: Option<(usize, E)> = None;
    poll_fn(|cx| {
        let mut pending = false;
        for i in 0..N {
            // SAFETY: the array is pinned (above) and never moved; an element is polled where
            // it lies and dropped where it lies (`set(None)`), never moved out, so projecting
            // the pin onto it keeps the pinning guarantee.
            let mut slot = unsafe { futs.as_mut().map_unchecked_mut(|a| &mut a[i]) };
            let Some(f) = slot.as_mut().as_pin_mut() else { continue };
            match f.poll(cx) {
                Poll::Ready(r) => {
                    if let Err(e) = r {
                        if first.as_ref().is_none_or(|(j, _)| i < *j) {
                            first = Some((i, e));
                        }
                    }
                    slot.set(None);
                }
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    match first {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::exec::block_on;

    /// A future ready after `polls` polls, counting how often it was polled.
    async fn after(polls: usize, seen: &Cell<usize>, out: Result<(), usize>) -> Result<(), usize> {
        for _ in 0..polls {
            seen.set(seen.get() + 1);
            let mut yielded = false;
            poll_fn(|cx| {
                if yielded {
                    Poll::Ready(())
                } else {
                    yielded = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
        }
        out
    }

    #[test]
    fn every_future_runs_to_its_end_and_the_first_error_wins() {
        let seen = [Cell::new(0), Cell::new(0), Cell::new(0)];
        let futs = [
            Some(after(3, &seen[0], Ok(()))),
            Some(after(1, &seen[1], Err(1))),
            None,
            Some(after(5, &seen[2], Err(3))),
        ];
        assert_eq!(block_on(join_results(futs)), Err(1));
        // The failed one did not cut the others short.
        assert_eq!(seen.iter().map(Cell::get).collect::<Vec<_>>(), [3, 1, 5]);
        let seen = Cell::new(0);
        let futs = [None, Some(after(2, &seen, Err(7))), Some(after(0, &seen, Err(2)))];
        // The earlier in the array wins, though the later finished first.
        assert_eq!(block_on(join_results(futs)), Err(7));
        let none: [Option<std::future::Ready<Result<(), ()>>>; 2] = [None, None];
        assert_eq!(block_on(join_results(none)), Ok(()));
    }
}
