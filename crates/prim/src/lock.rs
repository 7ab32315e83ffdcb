//! Remote locks: a lock bit in an aligned 8-byte word, taken by CAS and released by the WRITE
//! that publishes what its holder changed; and the CN-local lock table clients queue on first.
//!
//! # The lock word
//!
//! ```text
//!  63  62                                                       0
//! +---+----------------------------------------------------------+
//! | L |  metadata: the index's own bits (CHIME: vacancy bitmap,  |
//! |   |  argmax), or zero for a word that is only a lock         |
//! +---+----------------------------------------------------------+
//! L = LOCK_BIT: 1 while held
//! ```
//!
//! The word is aligned, so CAS and WRITE on it are atomic.
//!
//! # Acquire
//!
//! * [`LocalLocks::acquire`]: a masked CAS that compares and sets the lock bit only. One round
//!   trip both locks and returns the metadata bits as they were (CHIME's access-aggregated
//!   metadata).
//! * [`acquire_whole`]: a CAS from 0, for a word that holds nothing but the lock.
//!
//! Both retry while the lock is held, calling `on_retry` after each failed attempt and backing
//! off ([`crate::backoff`]: a few retries at network pace, then pauses doubling to a cap). There
//! are no leases yet: a client that crashes holding a lock leaves it held, and its waiters
//! report it after the backoff's bound.
//!
//! # Release
//!
//! The holder releases the lock with a WRITE of the word with the lock bit clear, carrying the
//! new metadata ([`unlocked`]): alone ([`Held::unlock_with`]), or as the last WRITE of a
//! doorbell batch that also writes what the holder changed ([`Held::released_by`]; the verbs of
//! a batch execute in order, so the data is in place before the lock is seen free). A [`Held`]
//! lock is `#[must_use]` and consumed by the unlocking write's completion.
//!
//! # The CN-local lock table (Sherman)
//!
//! Clients of one compute node first queue on a CN-local async lock ([`LocalLocks`],
//! [`LOCAL_SLOTS`] slots hashed by the lock word's address), so at most one client per compute
//! node spins on a remote word. The slot is held with the remote lock and released right after
//! the unlocking write completes; since slots are shared by hashing, a client never holds one
//! while taking another lock.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use futures::lock::{Mutex, MutexGuard};

use crate::backoff::Backoff;
use crate::hash::mix64;

/// The lock bit.
pub const LOCK_BIT: u64 = 1 << 63;

/// Slots in each compute node's local lock table.
pub const LOCAL_SLOTS: usize = 4096;
const _: () = assert!(LOCAL_SLOTS.is_power_of_two());

/// Lock word `word` with the lock bit clear: what an unlocking WRITE puts in place.
#[inline]
pub const fn unlocked(word: u64) -> u64 {
    word & !LOCK_BIT
}

/// A remote lock this client holds: the lock word's address, the word the locking CAS found
/// (lock bit clear), and the CN-local slot held with it, if any.
#[must_use = "a held lock is released by its unlocking WRITE (unlock_with or released_by)"]
#[derive(Debug)]
pub struct Held<'t> {
    addr: GlobalAddr,
    word: u64,
    _local: Option<MutexGuard<'t, ()>>,
}

impl Held<'_> {
    /// The word as the locking CAS found it, lock bit clear: the metadata it carries.
    pub fn word(&self) -> u64 {
        self.word
    }

    /// Releases the lock with one WRITE of `word` (lock bit cleared) to the lock word, then
    /// the local slot.
    pub async fn unlock_with<T: Transport>(self, c: &Client<T>, word: u64) -> IndexResult<()> {
        c.write(self.addr, &unlocked(word).to_le_bytes()).await?;
        Ok(())
    }

    /// Releases the lock once `written`, the completion of a WRITE (or doorbell batch ending in
    /// one) that put an [`unlocked`] word at the lock word's address, is in: then the local
    /// slot goes, also when the WRITE failed. Taking the completion rather than the WRITE's
    /// future leaves the future where the caller made it (moving it in cost a copy of its
    /// state an insert).
    pub fn released_by<E>(self, written: Result<(), E>) -> Result<(), E> {
        written
    }
}

/// Retries a masked CAS of the lock bit at `addr`, backing off while it is held; returns the
/// word it found free.
async fn spin<T: Transport>(
    c: &Client<T>,
    addr: GlobalAddr,
    mut on_retry: impl FnMut(),
) -> IndexResult<u64> {
    let mut backoff = Backoff::new();
    // Ends when the CAS finds the lock free, or the backoff's bound on a lock never let go.
    loop {
        let old = c.masked_cas(addr, 0, LOCK_BIT, LOCK_BIT, LOCK_BIT).await?;
        if old & LOCK_BIT == 0 {
            return Ok(old);
        }
        on_retry();
        backoff.failed(c, addr, "lock word").await?;
    }
}

/// Takes the lock at `addr`, a word holding nothing else, by CAS from 0, backing off while it
/// is held.
pub async fn acquire_whole<T: Transport>(
    c: &Client<T>,
    addr: GlobalAddr,
    mut on_retry: impl FnMut(),
) -> IndexResult<Held<'static>> {
    let mut backoff = Backoff::new();
    while c.cas(addr, 0, LOCK_BIT).await? != 0 {
        on_retry();
        backoff.failed(c, addr, "lock word").await?;
    }
    Ok(Held { addr, word: 0, _local: None })
}

/// A compute node's local lock table.
pub struct LocalLocks {
    slots: Box<[Mutex<()>]>,
}

impl Default for LocalLocks {
    fn default() -> LocalLocks {
        LocalLocks { slots: (0..LOCAL_SLOTS).map(|_| Mutex::new(())).collect() }
    }
}

impl LocalLocks {
    /// The slot of lock word `addr`.
    fn slot(&self, addr: GlobalAddr) -> &Mutex<()> {
        // A constant power of two: a mask, not a divide, on every lock.
        &self.slots[(mix64(addr.raw()) % LOCAL_SLOTS as u64) as usize]
    }

    /// Queues on `addr`'s local slot, then takes the lock at `addr` by masked CAS on the lock
    /// bit; the other bits come back in [`Held::word`].
    pub async fn acquire<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        on_retry: impl FnMut(),
    ) -> IndexResult<Held<'_>> {
        let slot = self.slot(addr);
        // A free slot (the common case) is taken without the lock future and its waiter list.
        let local = match slot.try_lock() {
            Some(local) => local,
            None => slot.lock().await,
        };
        let word = spin(c, addr, on_retry).await?;
        Ok(Held { addr, word, _local: Some(local) })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use dmindex_fabric::exec::{run_tasks, yield_now};
    use dmindex_fabric::{BatchOp, Fabric, LocalConfig, LocalFabric};

    use super::*;

    #[test]
    fn the_lock_word_carries_metadata_through_lock_and_unlock() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let table = LocalLocks::default();
        run_tasks([async {
            let a = c.alloc(64, 64).await.unwrap();
            c.write(a, &0x1234u64.to_le_bytes()).await.unwrap();
            let held = table.acquire(&c, a, || panic!("free")).await.unwrap();
            assert_eq!(held.word(), 0x1234);
            assert_eq!(LOCK_BIT, 0x8000_0000_0000_0000);
            assert_eq!(c.read_word(a).await.unwrap(), LOCK_BIT | 0x1234, "bit 63 is the lock");
            held.unlock_with(&c, LOCK_BIT | 0x99).await.unwrap();
            assert_eq!(c.read_word(a).await.unwrap(), 0x99, "the unlocking word, lock bit clear");
            // Unlocked by the last WRITE of a batch.
            let held = table.acquire(&c, a, || panic!("free")).await.unwrap();
            let word = unlocked(7).to_le_bytes();
            let data = [5u8; 8];
            let mut ops = [
                BatchOp::Write { addr: a.add(8), data: &data },
                BatchOp::Write { addr: a, data: &word },
            ];
            held.released_by(c.batch(&mut ops).await).unwrap();
            assert_eq!(c.read_word(a).await.unwrap(), 7);
            // A word that is only a lock.
            let b = a.add(16);
            let held = acquire_whole(&c, b, || panic!("free")).await.unwrap();
            assert_eq!(c.read_word(b).await.unwrap(), LOCK_BIT);
            held.unlock_with(&c, 0).await.unwrap();
            assert_eq!(c.read_word(b).await.unwrap(), 0);
        }]);
    }

    /// Two clients of one compute node: the second queues on the local slot, so only the
    /// first ever spins remotely, and it gets the lock as soon as the first unlocks.
    #[test]
    fn local_slots_queue_clients_of_one_node() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let (c1, c2) = (f.client(0).unwrap(), f.client(0).unwrap());
        let table = LocalLocks::default();
        let a = run_tasks([async { c1.alloc(64, 64).await.unwrap() }])[0];
        let (spins, order) = (Cell::new(0), Cell::new(0));
        run_tasks([
            Box::pin(async {
                let held = table.acquire(&c1, a, || spins.set(spins.get() + 1)).await.unwrap();
                for _ in 0..5 {
                    yield_now().await;
                }
                order.set(1);
                held.unlock_with(&c1, 0).await.unwrap();
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
            Box::pin(async {
                yield_now().await;
                let held = table.acquire(&c2, a, || spins.set(spins.get() + 1)).await.unwrap();
                assert_eq!(order.get(), 1, "the second client got the lock after the first");
                held.unlock_with(&c2, 0).await.unwrap();
            }),
        ]);
        assert_eq!(spins.get(), 0, "nobody spun remotely");
        assert_eq!(LocalLocks::default().slots.len(), LOCAL_SLOTS);
    }
}
