//! Remote locks: a lock bit in an aligned 8-byte word, taken by CAS and released by the WRITE
//! that publishes what its holder changed; and the CN-local lock table clients queue on first.
//!
//! # The lock word
//!
//! ```text
//!  63  62                                                       0
//! +---+----------------------------------------------------------+
//! | 0 |  free: the index's own bits (CHIME: vacancy bitmap,      |
//! |   |  argmax), or zero for a word that is only a lock         |
//! +---+-----------------------------+----------------------------+
//! | 1 |  held: the holder's member  | its acquisition number     |
//! |   |  word (bits 62-32, [`lease`])| (bits 31-0)               |
//! +---+-----------------------------+----------------------------+
//! ```
//!
//! The word is aligned, so CAS and WRITE on it are atomic. While a lock is held its word names
//! the holder ([`held_word`]): the locking (masked) CAS compares the lock bit only and swaps the
//! whole word, and returns the free word's metadata to the holder, who carries it until the
//! unlocking WRITE puts the new metadata back. So a waiter can tell who holds the lock, and the
//! acquisition number makes each acquisition's word its own: a word unchanged for three leases
//! is one acquisition that has not ended.
//!
//! # Acquire
//!
//! * [`LocalLocks::acquire`]: a masked CAS that compares the lock bit and swaps in the held
//!   word. One round trip both locks and returns the metadata bits as they were (CHIME's
//!   access-aggregated metadata).
//! * [`acquire_whole`]: a CAS from 0, for a word that holds nothing but the lock.
//! * [`LocalLocks::acquire_keeping`]: for a design whose readers need some of the free word's
//!   bits while it is held (ROLEX's retirement bits): bits 62-61 ([`KEPT_BITS`]) stay in place
//!   and the holder is named in the bits below them ([`kept_held_word`]):
//!
//! ```text
//!  63   62 .. 61             60 .. 30                   29 .. 0
//! +---+-------------------+--------------------------+------------------------+
//! | 1 | kept: the free    | the holder's member word | its acquisition number |
//! |   | word's, unchanged | (`lease`, 31 bits)       | (low 30 bits)          |
//! +---+-------------------+--------------------------+------------------------+
//! ```
//!
//!   A free word of such a lock has bits 60-0 clear.
//!
//! Each retries while the lock is held, calling `on_retry` after each failed attempt and backing
//! off ([`crate::backoff`]: a few retries at network pace, then pauses doubling to a cap).
//!
//! # A dead holder
//!
//! Once the backoff pauses, every failed look also goes to a [`lease::Watch`] over the held word
//! and its holder's lease. When the watch finds the holder dead (three leases without a renewal,
//! [`crate::lease`]) it fences it, and the waiter takes the lock over: one CAS from the exact
//! word the dead holder left to its own held word. The CAS fails if another waiter took over
//! first. Holding the lock, the waiter repairs: the index's [`Repair`] makes the node whole
//! (if a crash can leave it half written) and computes the free word, which the waiter goes on
//! with as if its locking CAS had found it. A repairer that dies leaves its own held word, which
//! the next waiter judges and repairs again; the fence makes sure the dead holder's own
//! unlocking WRITE, if it was merely paused, can never land afterwards.

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

use std::future::Future;

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use futures::lock::{Mutex, MutexGuard};

use crate::backoff::{Backoff, FREE};
use crate::hash::mix64;
use crate::lease::{self, Verdict, Watch, MEMBER_BITS};

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

/// The word of a lock held by member `member` in its acquisition number `n`.
#[inline]
pub const fn held_word(member: u64, n: u32) -> u64 {
    LOCK_BIT | member << 32 | n as u64
}

/// Bits 62-61, which a lock taken by [`LocalLocks::acquire_keeping`] leaves as they were.
pub const KEPT_BITS: u64 = 0b11 << 61;
/// Where a kept held word puts the member word (above the acquisition number).
const KEPT_MEMBER_SHIFT: u32 = 30;
const _: () = assert!(KEPT_MEMBER_SHIFT + MEMBER_BITS == 61, "the member stops below KEPT_BITS");

/// The word of a keeping lock held by `member` in its acquisition number `n` (its low 30 bits),
/// [`KEPT_BITS`] clear: the locking CAS swaps it in under a mask that leaves them in place.
#[inline]
pub const fn kept_held_word(member: u64, n: u32) -> u64 {
    LOCK_BIT | member << KEPT_MEMBER_SHIFT | (n as u64 & ((1 << KEPT_MEMBER_SHIFT) - 1))
}

/// The member a word held by [`LocalLocks::acquire_keeping`] names, if it is held.
#[inline]
pub const fn kept_holder(word: u64) -> Option<u64> {
    let m = (word >> KEPT_MEMBER_SHIFT) & ((1 << MEMBER_BITS) - 1);
    if word & LOCK_BIT != 0 && m >> (MEMBER_BITS - 1) == 1 {
        Some(m)
    } else {
        None
    }
}

/// The member a held word ([`held_word`]) names, if it names one.
#[inline]
pub const fn holder(word: u64) -> Option<u64> {
    let m = (word >> 32) & ((1 << MEMBER_BITS) - 1);
    if word & LOCK_BIT != 0 && m >> (MEMBER_BITS - 1) == 1 {
        Some(m)
    } else {
        None
    }
}

/// How an index frees a lock whose holder died: the free word to put in place of `held`, from
/// the node as the holder left it (which the repair may first make whole: it runs holding the
/// lock, taken over from the fenced holder, so nothing else writes the node meanwhile). The
/// waiter that repaired goes on holding the lock with that word as the free word it found.
pub trait Repair<T: Transport> {
    /// The free word for the lock at `lock` (lock bit clear).
    fn free_word(
        &self,
        c: &Client<T>,
        lock: GlobalAddr,
        held: u64,
    ) -> impl Future<Output = IndexResult<u64>>;
}

/// The repair of a lock word that carries nothing but the lock, guarding writes that land
/// whole (one WRITE of at most one packet, or a node image that includes the unlocking word):
/// free is 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMetadata;

impl<T: Transport> Repair<T> for NoMetadata {
    async fn free_word(&self, _: &Client<T>, _: GlobalAddr, _: u64) -> IndexResult<u64> {
        Ok(0)
    }
}

/// This client's held word for its next acquisition (joining the cluster first if it has not,
/// and renewing its lease if due): for a lock an index takes with its own verbs.
pub async fn next_held_word<T: Transport>(c: &Client<T>) -> IndexResult<u64> {
    let (member, n) = next_acquisition(c).await?;
    Ok(held_word(member, n))
}

/// Like [`next_held_word`], for a keeping lock ([`kept_held_word`]).
pub async fn next_kept_word<T: Transport>(c: &Client<T>) -> IndexResult<u64> {
    let (member, n) = next_acquisition(c).await?;
    Ok(kept_held_word(member, n))
}

/// This client's member word (joining or renewing as due) and its next acquisition number.
async fn next_acquisition<T: Transport>(c: &Client<T>) -> IndexResult<(u64, u32)> {
    let member = lease::renew_if_due(c).await?;
    let n = &c.membership().acquisitions;
    n.set(n.get().wrapping_add(1));
    Ok((member, n.get()))
}

/// One failed look at `addr` that found `old`, held by `member` if it names one: past the
/// backoff's free looks, watches the holder, and when it is dead and fenced takes the lock
/// over — a CAS from the exact word the dead holder left to `mine`, this client's held word —
/// and repairs under it. Returns the free word the repair computed if this client now holds
/// the lock; `None` to look again (the holder may be alive, or another waiter took over first).
async fn judge<T: Transport>(
    c: &Client<T>,
    (addr, old, mine): (GlobalAddr, u64, u64),
    member: Option<u64>,
    watch: &mut Watch,
    backoff: &Backoff,
    repair: &impl Repair<T>,
) -> IndexResult<Option<u64>> {
    let Some(member) = member else { return Ok(None) };
    if backoff.looks() < FREE {
        return Ok(None);
    }
    lease::renew_if_due(c).await?;
    if watch.look(c, old, member).await? == Verdict::Wait {
        return Ok(None);
    }
    *watch = Watch::new();
    take_over(c, (addr, old, mine), repair).await
}

/// Takes the lock at `addr` over from a holder already fenced that left `old`: a CAS from
/// exactly `old` to `mine`, then the repair under it. The free word the repair computed if this
/// client now holds the lock; `None` if another waiter took it over first.
async fn take_over<T: Transport>(
    c: &Client<T>,
    (addr, old, mine): (GlobalAddr, u64, u64),
    repair: &impl Repair<T>,
) -> IndexResult<Option<u64>> {
    if c.cas(addr, old, mine).await? != old {
        return Ok(None);
    }
    // Held by this client now: the repair is the only writer of the node, and if this client
    // dies in it, the next waiter finds this client's word, judges it and repairs again.
    Ok(Some(unlocked(repair.free_word(c, addr, old).await?)))
}

/// [`judge_kept`] for a holder this client knows is fenced (it judged it for another word):
/// takes the lock over at once, without watching it for leases.
pub async fn take_over_kept<T: Transport>(
    c: &Client<T>,
    (addr, old, mine): (GlobalAddr, u64, u64),
    repair: &impl Repair<T>,
) -> IndexResult<Option<u64>> {
    take_over(c, (addr, old, mine | (old & KEPT_BITS)), repair).await
}

/// `judge` for a keeping lock ([`kept_held_word`]), for an index that takes such a lock with
/// its own verbs: one failed look at `addr` that found `old`. Takes the lock over from a dead
/// holder by CAS from `old` to `mine` with `old`'s [`KEPT_BITS`] added, and returns the free
/// word `repair` computed (lock bit clear); `None` to look again.
pub async fn judge_kept<T: Transport>(
    c: &Client<T>,
    (addr, old, mine): (GlobalAddr, u64, u64),
    watch: &mut Watch,
    backoff: &Backoff,
    repair: &impl Repair<T>,
) -> IndexResult<Option<u64>> {
    let take = mine | (old & KEPT_BITS);
    judge(c, (addr, old, take), kept_holder(old), watch, backoff, repair).await
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

/// How a lock word names its holder while held: [`held_word`] over the whole word, or
/// [`kept_held_word`] below the [`KEPT_BITS`] the lock leaves in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Naming {
    Whole,
    Kept,
}

/// Retries a masked CAS of the lock bit at `addr` that swaps in this client's held word
/// (named as `naming` says), backing off while it is held and repairing it when its holder is
/// dead; returns the word it found free, or the free word the repair computed.
async fn spin<T: Transport>(
    c: &Client<T>,
    addr: GlobalAddr,
    naming: Naming,
    mut on_retry: impl FnMut(),
    repair: &impl Repair<T>,
) -> IndexResult<u64> {
    let (held, swap_mask) = match naming {
        Naming::Whole => (next_held_word(c).await?, u64::MAX),
        Naming::Kept => (next_kept_word(c).await?, !KEPT_BITS),
    };
    let (mut backoff, mut watch) = (Backoff::new(), Watch::new());
    // Ends when the CAS finds the lock free, or the backoff's bound on a lock never let go.
    loop {
        let old = c.masked_cas(addr, 0, LOCK_BIT, held, swap_mask).await?;
        if old & LOCK_BIT == 0 {
            return Ok(old);
        }
        on_retry();
        let seen = (addr, old, held);
        let judged = match naming {
            Naming::Whole => judge(c, seen, holder(old), &mut watch, &backoff, repair).await?,
            Naming::Kept => judge_kept(c, seen, &mut watch, &backoff, repair).await?,
        };
        if let Some(free) = judged {
            return Ok(free);
        }
        backoff.failed(c, addr, "lock word").await?;
    }
}

/// Takes the lock at `addr`, a word holding nothing else, by CAS from 0, backing off while it
/// is held and freeing it (to 0) when its holder is dead.
pub async fn acquire_whole<T: Transport>(
    c: &Client<T>,
    addr: GlobalAddr,
    mut on_retry: impl FnMut(),
) -> IndexResult<Held<'static>> {
    let held = next_held_word(c).await?;
    let (mut backoff, mut watch) = (Backoff::new(), Watch::new());
    // Ends when the CAS finds the word free, or the backoff's bound on a lock never let go.
    loop {
        let old = c.cas(addr, 0, held).await?;
        if old == 0 {
            return Ok(Held { addr, word: 0, _local: None });
        }
        on_retry();
        let named = holder(old);
        if judge(c, (addr, old, held), named, &mut watch, &backoff, &NoMetadata).await?.is_some() {
            return Ok(Held { addr, word: 0, _local: None });
        }
        backoff.failed(c, addr, "lock word").await?;
    }
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
    /// bit, naming this client in the word while it holds it; the other bits come back in
    /// [`Held::word`]. A dead holder's lock is freed with `repair`'s word.
    pub async fn acquire<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        on_retry: impl FnMut(),
        repair: &impl Repair<T>,
    ) -> IndexResult<Held<'_>> {
        let local = self.queue(addr).await;
        let word = spin(c, addr, Naming::Whole, on_retry, repair).await?;
        Ok(Held { addr, word, _local: Some(local) })
    }

    /// Like [`LocalLocks::acquire`], but leaves [`KEPT_BITS`] in place while held, for
    /// readers that need them then, and names this client in the bits below them
    /// ([`kept_held_word`]). [`Held::word`] is the free word found (or the one `repair`
    /// computed for a dead holder's lock, taken over with the dead word's [`KEPT_BITS`]).
    pub async fn acquire_keeping<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        on_retry: impl FnMut(),
        repair: &impl Repair<T>,
    ) -> IndexResult<Held<'_>> {
        let local = self.queue(addr).await;
        let word = spin(c, addr, Naming::Kept, on_retry, repair).await?;
        Ok(Held { addr, word, _local: Some(local) })
    }

    /// Queues on `addr`'s local slot.
    async fn queue(&self, addr: GlobalAddr) -> MutexGuard<'_, ()> {
        let slot = self.slot(addr);
        // A free slot (the common case) is taken without the lock future and its waiter list.
        match slot.try_lock() {
            Some(local) => local,
            None => slot.lock().await,
        }
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
            let held = table.acquire(&c, a, || panic!("free"), &NoMetadata).await.unwrap();
            assert_eq!(held.word(), 0x1234);
            assert_eq!(LOCK_BIT, 0x8000_0000_0000_0000);
            // While held the word names the holder (its member word, acquisition 1).
            let member = c.membership().member.get();
            assert_ne!(member, 0, "taking a lock joined the cluster");
            let w = c.read_word(a).await.unwrap();
            assert_eq!(w, LOCK_BIT | member << 32 | 1, "bit 63 is the lock");
            assert_eq!(holder(w), Some(member));
            assert_eq!(holder(0x1234), None);
            held.unlock_with(&c, LOCK_BIT | 0x99).await.unwrap();
            assert_eq!(c.read_word(a).await.unwrap(), 0x99, "the unlocking word, lock bit clear");
            // Unlocked by the last WRITE of a batch.
            let held = table.acquire(&c, a, || panic!("free"), &NoMetadata).await.unwrap();
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
            assert_eq!(c.read_word(b).await.unwrap(), held_word(member, 3));
            held.unlock_with(&c, 0).await.unwrap();
            assert_eq!(c.read_word(b).await.unwrap(), 0);
        }]);
    }

    /// A keeping lock: bits 62-61 stay as the free word had them while it is held, the holder
    /// is named below them, and the unlock puts the free word back.
    #[test]
    fn a_kept_word_names_its_holder_below_the_kept_bits() {
        assert_eq!(KEPT_BITS, 0x6000_0000_0000_0000);
        let m = lease::member_word(5, 9);
        assert_eq!(kept_held_word(m, 7), 1 << 63 | m << 30 | 7);
        assert_eq!(kept_held_word(m, u32::MAX) & KEPT_BITS, 0, "the number is cut to 30 bits");
        assert_eq!(kept_holder(kept_held_word(m, 7) | KEPT_BITS), Some(m));
        assert_eq!((kept_holder(KEPT_BITS), kept_holder(LOCK_BIT)), (None, None));
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let table = LocalLocks::default();
        run_tasks([async {
            let a = c.alloc(64, 64).await.unwrap();
            c.write(a, &(1u64 << 62).to_le_bytes()).await.unwrap();
            let held = table.acquire_keeping(&c, a, || panic!("free"), &NoMetadata).await.unwrap();
            assert_eq!(held.word(), 1 << 62);
            let member = c.membership().member.get();
            let w = c.read_word(a).await.unwrap();
            assert_eq!(w, 1 << 62 | kept_held_word(member, 1), "bit 62 kept, holder named");
            assert_eq!(kept_holder(w), Some(member));
            let free = held.word();
            held.unlock_with(&c, free).await.unwrap();
            assert_eq!(c.read_word(a).await.unwrap(), 1 << 62);
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
                let held = table
                    .acquire(&c1, a, || spins.set(spins.get() + 1), &NoMetadata)
                    .await
                    .unwrap();
                for _ in 0..5 {
                    yield_now().await;
                }
                order.set(1);
                held.unlock_with(&c1, 0).await.unwrap();
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
            Box::pin(async {
                yield_now().await;
                let held = table
                    .acquire(&c2, a, || spins.set(spins.get() + 1), &NoMetadata)
                    .await
                    .unwrap();
                assert_eq!(order.get(), 1, "the second client got the lock after the first");
                held.unlock_with(&c2, 0).await.unwrap();
            }),
        ]);
        assert_eq!(spins.get(), 0, "nobody spun remotely");
        assert_eq!(LocalLocks::default().slots.len(), LOCAL_SLOTS);
    }
}
