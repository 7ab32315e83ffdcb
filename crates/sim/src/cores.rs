//! The cores of every memory node, as the intervals each is busy.
//!
//! A client's request takes a core that is free at its arrival, or waits in the node's FIFO
//! until one frees up. A peer call is served at its caller's instant, which may lie ahead of the
//! simulation's clock (the caller's own earlier calls took time), and takes the first free
//! instant of a core from its arrival on. So a core keeps its busy intervals, not one
//! busy-until instant: a reservation ahead of the clock leaves the core free until it starts.
//! (With one instant, a rebuild's chain of SNAPSHOT calls behind one long call marked every
//! core of the leader busy until the chain's end, and stalled all its clients for that time.)
//! A request that starts in a gap may run past the next reservation; the overlap is accepted.
//!
//! Worker cores ([`crate::config::NetParams::mn_workers`]) take only work left for after a
//! reply, in order, so each keeps one busy-until instant.

/// The cores of every memory node.
#[derive(Debug)]
pub(crate) struct Cores {
    /// Per node, per core, busy intervals `[start, end)` in order of start.
    busy: Vec<Vec<Vec<(u64, u64)>>>,
    /// Per node, when each worker core is busy until.
    workers: Vec<Vec<u64>>,
}

impl Cores {
    pub(crate) fn new(nodes: u16, cores: usize, workers: usize) -> Cores {
        Cores {
            busy: vec![vec![Vec::new(); cores.max(1)]; nodes as usize],
            workers: vec![vec![0; workers]; nodes as usize],
        }
    }

    /// A core of `node` free at `now`, if any (intervals over by `now` are dropped).
    pub(crate) fn free_at(&mut self, node: usize, now: u64) -> Option<usize> {
        let mut found = None;
        for (i, core) in self.busy[node].iter_mut().enumerate() {
            core.retain(|&(_, end)| end > now);
            if found.is_none() && core.first().is_none_or(|&(start, _)| start > now) {
                found = Some(i);
            }
        }
        found
    }

    /// The core of `node` with the first free instant from `at` on, and that instant.
    pub(crate) fn earliest(&self, node: usize, at: u64) -> (usize, u64) {
        self.busy[node]
            .iter()
            .map(|core| {
                let mut t = at;
                for &(start, end) in core {
                    if start > t {
                        break;
                    }
                    t = t.max(end);
                }
                t
            })
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("at least one core")
    }

    /// Marks `core` of `node` busy over `[start, end)`.
    pub(crate) fn occupy(&mut self, node: usize, core: usize, start: u64, end: u64) {
        let core = &mut self.busy[node][core];
        let at = core.partition_point(|&(s, _)| s <= start);
        core.insert(at, (start, end));
    }

    /// Work of `ps` that a request on `core` left for after its reply at `from`: on the worker
    /// core of `node` that frees up first, else (no workers) on `core` right after. The instant
    /// `core` frees up if the work ran there.
    pub(crate) fn after_reply(
        &mut self,
        node: usize,
        core: usize,
        from: u64,
        ps: u64,
    ) -> Option<u64> {
        match self.workers[node].iter_mut().min_by_key(|t| **t) {
            Some(t) => {
                *t = (*t).max(from).saturating_add(ps);
                None
            }
            None => {
                let end = from.saturating_add(ps);
                self.occupy(node, core, from, end);
                Some(end)
            }
        }
    }

    /// Every core of `node` free from `now` (the node restarted; what ran there is gone).
    pub(crate) fn reset(&mut self, node: usize, now: u64) {
        for core in &mut self.busy[node] {
            core.clear();
        }
        for t in &mut self.workers[node] {
            *t = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_ahead_of_the_clock_leaves_the_core_free_until_it_starts() {
        let mut c = Cores::new(1, 1, 0);
        c.occupy(0, 0, 100, 110);
        assert_eq!(c.free_at(0, 50), Some(0), "free before the reservation");
        assert_eq!(c.free_at(0, 105), None);
        assert_eq!(c.earliest(0, 50), (0, 50));
        assert_eq!(c.earliest(0, 100), (0, 110), "the first free instant after it");
        c.occupy(0, 0, 110, 120);
        assert_eq!(c.earliest(0, 101), (0, 120), "back-to-back intervals");
        assert_eq!(c.free_at(0, 120), Some(0));
    }

    #[test]
    fn peer_calls_take_the_core_free_first_and_after_reply_work_the_workers() {
        let mut c = Cores::new(1, 2, 1);
        c.occupy(0, 0, 0, 50);
        c.occupy(0, 1, 0, 30);
        assert_eq!(c.earliest(0, 10), (1, 30));
        assert_eq!(c.after_reply(0, 0, 50, 40), None, "on the worker");
        assert_eq!(c.earliest(0, 10), (1, 30), "request cores untouched");
        let mut solo = Cores::new(1, 1, 0);
        assert_eq!(solo.after_reply(0, 0, 50, 40), Some(90), "no workers: on the core itself");
        assert_eq!(solo.free_at(0, 60), None);
        solo.reset(0, 60);
        assert_eq!(solo.free_at(0, 60), Some(0));
    }
}
