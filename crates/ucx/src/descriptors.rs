//! The memnode's descriptor limit, and how many connections to UCX's own TCP listener it can
//! afford.
//!
//! UCX 1.13's TCP transport accepts every connection to its listener, and the first `accept`
//! that fails for any reason other than "try again" closes the listening socket for good
//! (`uct_tcp_iface_connect_handler`): once the process runs out of descriptors, no client can
//! connect until the memnode restarts, which empties its pool. So the memnode raises its soft
//! limit as far as it may, and keeps UCX's accepted connections to a share of it
//! ([`crate::ucx_guard`]); the rest is a reserve that connections to UCX never use.

/// The most connections to UCX's listener a memnode keeps, whatever its limit: each holds
/// UCX's buffers for its endpoint, and legitimate clients hold one per client thread.
pub const MAX_UCX_CONNECTIONS: usize = 4096;

/// Of the descriptors under the limit, UCX's accepted connections get at most one in this
/// many.
const UCX_SHARE: u64 = 4;

/// Of the UCX connections, one source address may hold at most one in this many, so the others
/// always keep three quarters.
const SOURCE_SHARE: usize = 4;

/// Below this many connections per source, a client process of 8 threads (9 UCX connections
/// per memnode: one per thread and the process's own) might not fit; said at start.
const ROOM_FOR_A_CLIENT: usize = 16;

/// What the memnode's descriptors allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The soft descriptor limit the memnode runs with.
    pub limit: u64,
    /// The soft limit it started with.
    pub was: u64,
    /// Connections to UCX's listener held at once, from every source.
    pub ucx_total: usize,
    /// Of those, from any one source address.
    pub ucx_per_source: usize,
}

impl Budget {
    /// The budget for a soft limit of `limit` descriptors (which was `was`).
    ///
    /// UCX's connections get a quarter of the descriptors, at most [`MAX_UCX_CONNECTIONS`];
    /// the other three quarters are the reserve: the control port (64 connections in their
    /// bootstrap at once, three descriptors each, and the authenticated ones), peer links,
    /// UCX's own descriptors (about fifteen at start, more with shared-memory peers), the
    /// guard's, and the connections that complete before the guard closes the listener's gate
    /// (up to about 250 past the caps in the tests, where one process opened 3000 at once on
    /// loopback).
    pub fn for_limit(limit: u64, was: u64) -> Budget {
        let share = usize::try_from(limit / UCX_SHARE).unwrap_or(usize::MAX);
        let ucx_total = share.clamp(1, MAX_UCX_CONNECTIONS);
        let ucx_per_source = (ucx_total / SOURCE_SHARE).max(1);
        Budget { limit, was, ucx_total, ucx_per_source }
    }

    /// Raises this process's soft descriptor limit to its hard limit and sizes the budget from
    /// what it got (the soft limit as it was if raising fails, which is said).
    pub fn raise() -> Budget {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the limits into `lim`, a valid rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            let e = std::io::Error::last_os_error();
            eprintln!("cannot read the descriptor limit ({e}); assuming 1024");
            return Budget::for_limit(1024, 1024);
        }
        let was = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            // SAFETY: setrlimit reads a valid rlimit; raising the soft limit up to the hard one
            // needs no privilege.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim.rlim_cur = lim.rlim_max;
            } else {
                let e = std::io::Error::last_os_error();
                eprintln!("cannot raise the descriptor limit from {was} to {}: {e}", lim.rlim_max);
            }
        }
        Budget::for_limit(lim.rlim_cur, was)
    }

    /// How the budget reads in the memnode's start-up line.
    pub fn describe(&self) -> String {
        let raised = match self.was == self.limit {
            true => String::new(),
            false => format!(", raised from {}", self.was),
        };
        let small = match self.ucx_per_source < ROOM_FOR_A_CLIENT {
            true => " (a small limit: raise the hard limit, ulimit -Hn)",
            false => "",
        };
        format!(
            "descriptor limit {}{raised}: at most {} connections to UCX's listener, {} per \
             address{small}",
            self.limit, self.ucx_total, self.ucx_per_source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_a_share_of_the_limit() {
        let b = Budget::for_limit(1024, 1024);
        assert_eq!((b.ucx_total, b.ucx_per_source), (256, 64));
        assert!(b.limit - b.ucx_total as u64 >= 768, "three quarters stay in reserve");
        let big = Budget::for_limit(1 << 20, 1024);
        assert_eq!((big.ucx_total, big.ucx_per_source), (MAX_UCX_CONNECTIONS, 1024));
        assert!(big.describe().contains("raised from 1024"), "{}", big.describe());
        let tiny = Budget::for_limit(3, 3);
        assert_eq!((tiny.ucx_total, tiny.ucx_per_source), (1, 1));
        assert!(tiny.describe().contains("small limit"));
        let huge = Budget::for_limit(u64::MAX, u64::MAX);
        assert_eq!(huge.ucx_total, MAX_UCX_CONNECTIONS);
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        let b = Budget::raise();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into a valid rlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(b.limit, lim.rlim_cur);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
