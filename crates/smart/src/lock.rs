//! The leaf lock: changing a live leaf's status, waiting while another client holds it, and
//! repairing a leaf whose holder died.
//!
//! # Who waits on whom
//!
//! Every change of a leaf's status is a CAS from *live, unlocked* ([`Status::LIVE`]): an
//! in-place update to its held word ([`Status::held`], naming this client and its acquisition),
//! a delete to *deleted*, an update too long for the leaf to *moved*. A CAS that finds the leaf
//! held waits ([`SmartIndex::claim`]): it looks again by the same CAS, backing off
//! ([`dmindex_prim::backoff`]), and past the backoff's free looks each failed look goes to a
//! [`Watch`] over the held word and its holder's lease. A CAS that finds *deleted* or *moved*
//! has lost to a final change: the caller finds the key again.
//!
//! Nothing else in SMART waits on another client: readers never look at the lock (they check
//! the item's checksum and re-read a torn READ), inner nodes are changed by slot CASes only, and
//! a type switch is finished by whoever meets its frozen node.
//!
//! # A dead holder
//!
//! An in-place update is the lock CAS, then one doorbell to the leaf's memory node: the WRITE of
//! the checksummed part (checksum, lengths, key, value), then the WRITE of the unlocked status.
//! A holder that stops between the two leaves the leaf held and its item either as it was (the
//! doorbell never left, or its first WRITE did not land) or rewritten whole (the first WRITE
//! landed): at most [`MAX_LEAF`] − 16 bytes, one packet, so it lands whole or not at all. Both
//! are items a reader already accepts, old or new by the checksum, so the repair rewrites
//! nothing: once the [`Watch`] has fenced the holder (nothing it posted can land any more), it
//! READs the leaf and, if the item checks, CASes the status from the exact held word back to
//! *live*. The dead client's update then took effect if its item WRITE landed (the instant it
//! landed is its linearization point, as for a live holder) and not at all otherwise; it was
//! never acknowledged either way.
//!
//! The repair is idempotent and survives its own repairer's crash: the held word names one
//! acquisition of a fenced member, so once a CAS moves it on it never comes back, and a second
//! repairer's CAS from it fails harmlessly; a repairer that dies before its CAS leaves the word
//! held for the next waiter to judge. An item that does not check while the status is still
//! the dead holder's word is one no WRITE order of the fabric can leave; the repair reports it
//! ([`IndexError::Corrupt`]) rather than unlock a torn item.
//!
//! # Cost
//!
//! An in-place update renews this client's lease if due (a zero-wait WRITE every half lease;
//! joining the member table costs a READ and a CAS once per client): no round trip. The held
//! word takes the status bits a live leaf leaves unused, so no side record is written. A wait
//! costs what it did before (a CAS per look) with the backoff's pauses; judging adds two 16-B
//! READs per wait that lasts a lease or more.

use dmindex_fabric::{Client, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::backoff::{Backoff, FREE};
use dmindex_prim::lease::{self, Verdict, Watch};
use dmindex_prim::radix::slot::MAX_LEAF;

use crate::leaf::{LeafView, State, Status};
use crate::ops::Item;
use crate::{bump, SmartIndex, Variant};

/// The item WRITE of an in-place update must be one packet, so that it lands whole or not at
/// all when its client stops (see the module docs); 4096 B is the smallest RDMA MTU in use.
const _: () = assert!(MAX_LEAF - 16 <= 4096);

impl<V: Variant> SmartIndex<V> {
    /// This client's held status for its next in-place update: its member word (joining the
    /// member table first if it has not, and renewing its lease if due) and the next number of
    /// its acquisitions.
    pub(crate) async fn next_held<T: Transport>(c: &Client<T>) -> IndexResult<Status> {
        let member = lease::renew_if_due(c).await?;
        let n = &c.membership().acquisitions;
        n.set(n.get().wrapping_add(1));
        Ok(Status::held(member, n.get()))
    }

    /// CASes `item`'s status from live (unlocked) to `new`, waiting while another client holds
    /// the leaf and repairing it if that client died. Whether it won: `false` when the leaf is
    /// no longer live (deleted or moved: final), so the caller finds the key again.
    pub(crate) async fn claim<T: Transport>(
        &self,
        c: &Client<T>,
        item: &Item,
        new: Status,
    ) -> IndexResult<bool> {
        let status = item.addr.add(8);
        let (mut backoff, mut watch) = (Backoff::new(), Watch::new());
        // Ends when the CAS finds the leaf live and unlocked (won) or final (lost), or at the
        // backoff's bound on a lock never let go; a dead holder's lock is freed by the repair.
        loop {
            let old = c.cas(status, Status::LIVE.0, new.0).await?;
            if old == Status::LIVE.0 {
                return Ok(true);
            }
            let held = Status(old);
            let Some(member) = held.holder() else {
                if let State::Live { locked: true } = held.state() {
                    return Err(IndexError::Corrupt(format!(
                        "smart leaf at {:?} is locked by no member: {old:#x}",
                        item.addr
                    )));
                }
                return Ok(false);
            };
            bump(&self.counters.lock_waits);
            if backoff.looks() >= FREE {
                lease::renew_if_due(c).await?;
                if watch.look(c, old, member).await? == Verdict::Fenced {
                    self.repair(c, item, held).await?;
                    (backoff, watch) = (Backoff::new(), Watch::new());
                    continue;
                }
            }
            backoff.failed(c, status, "smart leaf lock").await?;
        }
    }

    /// Frees `item`'s leaf, held as `held` by a member now fenced: the item stands as the holder
    /// left it (old or rewritten whole), and the status goes back to live by CAS from `held`.
    async fn repair<T: Transport>(
        &self,
        c: &Client<T>,
        item: &Item,
        held: Status,
    ) -> IndexResult<()> {
        let status = item.addr.add(8);
        let mut buf = [0u8; MAX_LEAF];
        c.read(item.addr, &mut buf[..item.len]).await?;
        c.compute(Work::BytesScanned, item.len as u64);
        if LeafView::decode(&buf[..item.len]).is_err() {
            // Torn: another repairer may have freed the leaf and a live holder be rewriting it
            // now. Only while the status is still the dead holder's word is the item as it left
            // it (no one else can write it then), and then it cannot be freed.
            if c.read_word(status).await? != held.0 {
                return Ok(());
            }
            return Err(IndexError::Corrupt(format!(
                "smart leaf at {:?}: its fenced holder left an item that does not check",
                item.addr
            )));
        }
        // Fails if another repairer got there first: either way the word moved on.
        if c.cas(status, held.0, Status::LIVE.0).await? == held.0 {
            bump(&self.counters.repairs);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use dmindex_fabric::FabricError;
    use dmindex_index::{IndexConfig, PointIndex};
    use dmindex_prim::counter::get;
    use dmindex_prim::lease::DEAD_AFTER_LEASES;
    use dmindex_sim::{Sim, SimConfig, Task};

    use super::*;
    use crate::leaf;
    use crate::Smart;

    const KEY: &[u8] = b"key00001";

    /// Where the holder of an in-place update stops (it never sends its unlocking WRITE).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Stop {
        /// Right after the lock CAS: the item as it was.
        Locked,
        /// After the item WRITE landed whole.
        Rewritten,
        /// After a WRITE of the new checksum alone: an item no fabric leaves (one packet lands
        /// whole), which must not be freed.
        Torn,
    }

    /// What the waiting client saw, and the leaf after.
    #[derive(Debug)]
    struct Seen {
        /// The value a search returned while the leaf was held.
        read: Option<Vec<u8>>,
        /// The outcome of its update (or delete).
        wrote: Option<IndexResult<bool>>,
        /// Virtual ns its update (or delete) took, in leases.
        took_leases: f64,
        /// Leaves it repaired.
        repairs: u64,
        /// The leaf's status word after, and the key's value then.
        status: u64,
        after: Option<Vec<u8>>,
    }

    fn sim(seed: u64) -> Sim {
        Sim::new(SimConfig::stress_with_delays(seed)).unwrap()
    }

    /// One client locks `KEY`'s leaf to rewrite "old" as "new", stops at `stop` and stays
    /// stopped far past three leases; another searches the key, then updates it to "waiter"
    /// (or deletes it).
    fn run(seed: u64, stop: Stop, delete: bool) -> Seen {
        let s = sim(seed);
        let (dead, waiter) = (s.client_on_own_thread(0), s.client_on_own_thread(1));
        let cfg = IndexConfig::default();
        let a: Smart = s.block_on(Smart::create(&dead, &cfg, 0)).unwrap();
        let b: Smart = s.block_on(Smart::open(&waiter, &cfg, 1)).unwrap();
        s.block_on(a.insert(&dead, KEY, b"old")).unwrap();
        let item = s.block_on(a.find(&dead, KEY, None)).unwrap().expect("inserted");
        let (locked, read, wrote, took) =
            (Cell::new(false), RefCell::new(None), RefCell::new(None), Cell::new(0));
        let d = async {
            let held = Smart::next_held(&dead).await.unwrap();
            assert!(a.claim(&dead, &item, held).await.unwrap(), "seed {seed}: free at first");
            let mut body = [0u8; MAX_LEAF];
            let n = leaf::encode_body(KEY, b"new", &mut body);
            let end = match stop {
                Stop::Locked => 16,
                Stop::Rewritten => 16 + n,
                Stop::Torn => 24,
            };
            if end > 16 {
                dead.write(item.addr.add(16), &body[16..end]).await.unwrap();
            }
            locked.set(true);
            dead.pause(200_000_000).await;
            // Merely paused, it would now unlock: it was fenced, so nothing lands.
            let unlock = Status::LIVE.0.to_le_bytes();
            let e = dead.write(item.addr.add(8), &unlock).await.unwrap_err();
            assert!(matches!(e, FabricError::Fenced { .. }), "seed {seed}: {e}");
        };
        let w = async {
            // Bounded: the other task locks within its first round trips.
            while !locked.get() {
                waiter.pause(1_000).await;
            }
            if stop != Stop::Torn {
                // Readers never wait for the lock: they see the item as the holder left it.
                let mut out = Vec::new();
                assert!(b.search_into(&waiter, KEY, &mut out).await.unwrap(), "seed {seed}");
                *read.borrow_mut() = Some(out);
            }
            let start = waiter.now_ns();
            let r = match (stop, delete) {
                // A torn item stops a search (it re-reads until the item checks), so the wait
                // is entered directly.
                (Stop::Torn, _) => b.claim(&waiter, &item, Status::DELETED).await,
                (_, true) => b.delete(&waiter, KEY).await,
                (_, false) => b.update(&waiter, KEY, b"waiter").await,
            };
            took.set(waiter.now_ns() - start);
            *wrote.borrow_mut() = Some(r);
        };
        let out = s.run_until([Box::pin(d) as Task, Box::pin(w) as Task], 1_000_000_000);
        assert!(out.all_finished(), "seed {seed} {stop:?}: {out:?}");
        let status = s.block_on(async { waiter.read_word(item.addr.add(8)).await.unwrap() });
        let mut value = Vec::new();
        let after = match stop {
            Stop::Torn => None,
            _ => s.block_on(b.search_into(&waiter, KEY, &mut value)).unwrap().then_some(value),
        };
        Seen {
            read: read.into_inner(),
            wrote: wrote.into_inner(),
            took_leases: took.get() as f64 / waiter.transport().lease_ns() as f64,
            repairs: get(&b.counters.repairs),
            status,
            after,
        }
    }

    /// Judged dead after three leases without a renewal, not before, and freed soon after.
    fn judged_in_time(seed: u64, seen: &Seen) {
        let t = seen.took_leases;
        assert!(t >= DEAD_AFTER_LEASES as f64, "seed {seed}: judged too early ({t} leases)");
        assert!(t < (DEAD_AFTER_LEASES + 2) as f64, "seed {seed}: judged too late ({t} leases)");
    }

    #[test]
    fn a_holder_stopped_before_its_rewrite_leaves_the_old_item() {
        for seed in 0..8 {
            let seen = run(seed, Stop::Locked, true);
            assert_eq!(seen.read.as_deref(), Some(&b"old"[..]), "seed {seed}");
            assert!(matches!(seen.wrote, Some(Ok(true))), "seed {seed}: {:?}", seen.wrote);
            judged_in_time(seed, &seen);
            assert_eq!(seen.repairs, 1, "seed {seed}");
            assert_eq!(seen.status, Status::DELETED.0, "seed {seed}: the delete's CAS");
            assert_eq!(seen.after, None, "seed {seed}: deleted");
        }
    }

    #[test]
    fn a_holder_stopped_after_its_rewrite_leaves_the_new_item() {
        for seed in 0..8 {
            let seen = run(seed, Stop::Rewritten, false);
            assert_eq!(seen.read.as_deref(), Some(&b"new"[..]), "seed {seed}");
            assert!(matches!(seen.wrote, Some(Ok(true))), "seed {seed}: {:?}", seen.wrote);
            judged_in_time(seed, &seen);
            assert_eq!(seen.repairs, 1, "seed {seed}");
            assert_eq!(seen.status, Status::LIVE.0, "seed {seed}: unlocked by the waiter");
            assert_eq!(seen.after.as_deref(), Some(&b"waiter"[..]), "seed {seed}");
        }
    }

    #[test]
    fn a_torn_item_is_not_freed() {
        let seen = run(1, Stop::Torn, false);
        match &seen.wrote {
            Some(Err(IndexError::Corrupt(m))) => assert!(m.contains("does not check"), "{m}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        judged_in_time(1, &seen);
        assert_eq!(seen.repairs, 0);
        assert!(Status(seen.status).holder().is_some(), "still the dead holder's word");
    }
}
