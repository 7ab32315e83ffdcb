//! Admission to the memnode's bootstrap: a bounded number of control connections may be in
//! their bootstrap (accepted, not authenticated yet) at once, and fewer of them from any one
//! source address, so that neither a flood from one host nor a slow leak of slots keeps
//! clients out.
//!
//! A connection holds a [`Slot`] from its accept until its bootstrap ends, either way; the slot
//! is given back when it is dropped, so every path that abandons a connection (a failed
//! `try_clone`, no thread for it, a bootstrap that fails or times out) gives it back without
//! code of its own. One source may hold at most `per_source` slots, so `total - per_source`
//! always remain for the others: a process re-opening unauthenticated connections as fast as
//! it can holds its share and no more.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// The bootstrap slots of one memnode.
#[derive(Debug)]
pub struct BootstrapSlots {
    total: usize,
    per_source: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// Why a connection was turned away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot is held.
    Full { total: usize },
    /// Its source holds its share already.
    SourceFull { per_source: usize },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Full { total } => {
                write!(f, "{total} connections are still in their bootstrap")
            }
            Refusal::SourceFull { per_source } => {
                write!(f, "its address has {per_source} connections still in their bootstrap")
            }
        }
    }
}

/// One connection's place in the bootstrap, given back when dropped.
#[must_use = "a slot is given back as soon as it is dropped"]
#[derive(Debug)]
pub struct Slot {
    slots: Arc<BootstrapSlots>,
    source: IpAddr,
}

impl BootstrapSlots {
    /// `total` slots, at most `per_source` (at least 1, at most `total`) from one address.
    pub fn new(total: usize, per_source: usize) -> Arc<BootstrapSlots> {
        assert!(total >= 1 && (1..=total).contains(&per_source), "{per_source} of {total}");
        Arc::new(BootstrapSlots { total, per_source, held: Mutex::default() })
    }

    /// A slot for a connection from `source`, or why there is none.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Result<Slot, Refusal> {
        let mut held = self.lock();
        if held.total >= self.total {
            return Err(Refusal::Full { total: self.total });
        }
        let mine = held.by_source.entry(source).or_insert(0);
        if *mine >= self.per_source {
            return Err(Refusal::SourceFull { per_source: self.per_source });
        }
        *mine += 1;
        held.total += 1;
        Ok(Slot { slots: Arc::clone(self), source })
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // The counts are updated whole under the lock; a panic elsewhere leaves them valid.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        held.total -= 1;
        let mine = held.by_source.get_mut(&self.source).expect("a held slot's source is counted");
        *mine -= 1;
        if *mine == 0 {
            held.by_source.remove(&self.source);
        }
    }
}

/// Whether the `n`th occurrence of a logged event is logged: the first ten, then at powers of
/// two (a flood of them costs a few lines). For every log of the memnode's that a peer can make
/// happen at will.
pub fn often(n: u64) -> bool {
    n <= 10 || n.is_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// One source fills its share and no more; the others still get the rest; a dropped slot
    /// is given back, and nothing is left held once every slot is dropped.
    #[test]
    fn a_source_holds_its_share_and_the_rest_stay_free() {
        let s = BootstrapSlots::new(8, 3);
        let flood: Vec<Slot> = (0..3).map(|_| s.admit(ip(1)).expect("within its share")).collect();
        assert_eq!(s.admit(ip(1)).unwrap_err(), Refusal::SourceFull { per_source: 3 });
        let others: Vec<Slot> =
            (2..7).map(|i| s.admit(ip(i)).expect("others are admitted")).collect();
        assert_eq!(s.held(), 8);
        assert_eq!(s.admit(ip(9)).unwrap_err(), Refusal::Full { total: 8 });
        drop(others);
        assert_eq!(s.held(), 3);
        assert!(s.admit(ip(9)).is_ok(), "a slot given back is taken again");
        drop(flood);
        assert_eq!(s.held(), 0);
        assert!(s.lock().by_source.is_empty(), "no source is left counted");
        let again: Vec<Slot> = (0..3).map(|_| s.admit(ip(1)).expect("share back")).collect();
        assert_eq!(again.len(), 3);
    }

    /// Against a model of the counts: random admits and drops from a few sources never exceed
    /// either bound, refuse only when one is reached, and return to zero.
    #[test]
    fn admissions_follow_the_bounds_exactly() {
        let s = BootstrapSlots::new(16, 5);
        let mut held: Vec<Slot> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 == 0 && !held.is_empty() {
                drop(held.swap_remove((x >> 8) as usize % held.len()));
                continue;
            }
            let src = ip((x >> 20) as u8 % 6);
            let from_src = held.iter().filter(|h| h.source == src).count();
            match s.admit(src) {
                Ok(slot) => {
                    assert!(held.len() < 16 && from_src < 5, "admitted past a bound");
                    held.push(slot);
                }
                Err(Refusal::Full { .. }) => assert_eq!(held.len(), 16),
                Err(Refusal::SourceFull { .. }) => assert_eq!(from_src, 5),
            }
            assert_eq!(s.held(), held.len());
        }
        held.clear();
        assert_eq!(s.held(), 0);
    }
}
