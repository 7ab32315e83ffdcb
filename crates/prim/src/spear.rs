//! Spear: the FAA-only ternary-state node lock of Dolphin (and Marlin's leaf lock).
//!
//! # The word
//!
//! ```text
//!  63                              32 31                               0
//! +----------------------------------+----------------------------------+
//! | claims: SMOs that claimed it     | idu: in-flight insert/update/    |
//! | (0 or 1 once a race settles)     | delete operations                |
//! +----------------------------------+----------------------------------+
//!  free: 0      shared: idu > 0, claims = 0      SMO-claimed: claims > 0
//! ```
//!
//! The word is only ever changed by fetch-and-add after the node is created, so concurrent
//! increments are never lost (a WRITE of the word would erase them); a node's WRITEs never cover
//! it. Each field stays non-negative in correct use, so the fields never borrow from each other.
//!
//! # Protocol
//!
//! | who | verbs | rule |
//! |---|---|---|
//! | an insert, update or delete enters | doorbell `[FAA +1, READ node]` ([`enter`]) | the old word shows a claim: it leaves (`FAA −1`), waits until the claim is gone, and the operation starts over (the node may have split) |
//! | it leaves | `FAA −1`, the last verb of its final doorbell ([`Held::leave`]) | after its WRITE or CAS in the same doorbell, so they have landed first |
//! | an SMO claims (holding its own +1) | doorbell `[FAA +2³², READ node]` ([`claim`]) | another claim was there: it drops its claim and its +1, waits, starts over. Otherwise it polls `[READ word, READ node]` until `idu = 1` (its own), at most `polls` times, then gives up the same way |
//! | it releases | `FAA −(2³²+1)` in its final doorbell ([`Claimed::release`]) | after the WRITEs that rewrite the node |
//! | a node born claimed | created with the word [`BORN_CLAIMED`], released by `FAA −2³²` ([`Born::release`]) | so nobody changes it before the SMO that made it is done |
//! | searches, scans | none | lock-free |
//!
//! What it guarantees: between an operation's `FAA +1` and its `FAA −1` no SMO modifies the node,
//! and the node image an operation READ after its `FAA +1` (same doorbell, in order) is not torn
//! by an SMO: a finished SMO's WRITEs precede its release in its doorbell, and a later one waits
//! for the operation to leave. When a claim sees `idu = 1` every earlier operation's WRITEs have
//! landed (each precedes its `FAA −1` on one connection), so the READ after it is the final image.
//!
//! # Crashes
//!
//! There are no leases (the index has no clock). A client that dies holding +1 makes the node
//! unclaimable: each claimer gives up after its `polls` and retries, so only the operations that
//! need an SMO of that node wait; the others go on. A client that dies holding a claim leaves
//! the node (and a node born claimed with it) locked for writers forever; readers go on.

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use crate::backoff::Backoff;

/// One in-flight insert, update or delete.
pub const IDU: u64 = 1;
/// One SMO claim.
pub const CLAIM: u64 = 1 << 32;
/// The word of a node created claimed by the SMO that made it.
pub const BORN_CLAIMED: u64 = CLAIM;

/// A Spear word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word(pub u64);

impl Word {
    /// In-flight inserts, updates and deletes.
    pub const fn idu(self) -> u32 {
        self.0 as u32
    }

    /// SMO claims.
    pub const fn claims(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Whether an SMO holds (or is taking) the node.
    pub const fn is_claimed(self) -> bool {
        self.claims() != 0
    }
}

const fn faa(word: GlobalAddr, delta: u64) -> BatchOp<'static> {
    BatchOp::Atomic { addr: word, op: AtomicOp::Faa { delta }, old: 0 }
}

/// What a Spear FAA of a completed batch returned.
fn old_word(op: &BatchOp<'_>) -> Word {
    Word(op.old().expect("a Spear FAA"))
}

/// One insert, update or delete in flight on a node: `#[must_use]`, consumed by [`Held::leave`]
/// (its `FAA −1`, posted with the operation's last verbs) or turned into a claim.
#[must_use = "an operation in flight leaves with Held::leave (FAA -1) in its final doorbell"]
#[derive(Debug)]
pub struct Held {
    word: GlobalAddr,
}

impl Held {
    /// The Spear word's address.
    pub fn word(&self) -> GlobalAddr {
        self.word
    }

    /// The `FAA −1` that ends the operation: put it after the operation's WRITE or CAS in the
    /// same doorbell.
    pub fn leave(self) -> BatchOp<'static> {
        faa(self.word, IDU.wrapping_neg())
    }

    /// Leaves on its own (an operation that found nothing to change). One round trip.
    pub async fn leave_now<T: Transport>(self, c: &Client<T>) -> IndexResult<()> {
        c.faa(self.word, IDU.wrapping_neg()).await?;
        Ok(())
    }
}

/// A node this client's SMO holds: consumed by [`Claimed::release`], the last verb of the SMO's
/// final doorbell (it also drops the SMO's own +1).
#[must_use = "a claim is released with Claimed::release in the SMO's final doorbell"]
#[derive(Debug)]
pub struct Claimed {
    word: GlobalAddr,
}

impl Claimed {
    /// The Spear word's address.
    pub fn word(&self) -> GlobalAddr {
        self.word
    }

    /// The `FAA −(2³²+1)` that releases the claim and the SMO's own +1.
    pub fn release(self) -> BatchOp<'static> {
        faa(self.word, (CLAIM + IDU).wrapping_neg())
    }
}

/// A node created claimed ([`BORN_CLAIMED`]) by an SMO: released with the SMO's other claim.
#[must_use = "a node born claimed is released with Born::release in the SMO's final doorbell"]
#[derive(Debug)]
pub struct Born {
    word: GlobalAddr,
}

impl Born {
    /// The node whose Spear word is at `word` will be written with [`BORN_CLAIMED`] there.
    pub fn new(word: GlobalAddr) -> Born {
        Born { word }
    }

    /// The `FAA −2³²` that opens the node to writers.
    pub fn release(self) -> BatchOp<'static> {
        faa(self.word, CLAIM.wrapping_neg())
    }
}

/// Waits, one READ of the word per look with backoff between looks, until no SMO claims it.
async fn wait_unclaimed<T: Transport>(c: &Client<T>, word: GlobalAddr) -> IndexResult<()> {
    let mut backoff = Backoff::new();
    while Word(c.read_word(word).await?).is_claimed() {
        backoff.failed(c, word, "Spear word's SMO claim").await?;
    }
    Ok(())
}

/// Enters the node whose Spear word is at `word` and READs `node` into `buf` in the same
/// doorbell (one round trip). `None` if an SMO held it: the +1 has been taken back, the SMO is
/// gone, and the caller starts over (the node may have changed).
pub async fn enter<T: Transport>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    buf: &mut [u8],
) -> IndexResult<Option<Held>> {
    let mut ops = [faa(word, IDU), BatchOp::Read { addr: node, buf }];
    c.batch(&mut ops).await?;
    if !old_word(&ops[0]).is_claimed() {
        return Ok(Some(Held { word }));
    }
    c.faa(word, IDU.wrapping_neg()).await?;
    wait_unclaimed(c, word).await?;
    Ok(None)
}

/// [`enter`], then the node image it READ, made by `check` from `buf` (the READ's bytes). No
/// SMO runs while the operation is in flight and a finished one's WRITEs precede its release,
/// so the image cannot be torn: `check` returning `None` means there is no node at `node`, and
/// the operation leaves at once with the error `not_node` makes. `Ok(None)`: an SMO held the
/// node, as [`enter`].
pub async fn enter_checked<'b, T: Transport, I>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    buf: &'b mut [u8],
    check: impl FnOnce(&'b [u8]) -> Option<I>,
    not_node: impl FnOnce() -> IndexError,
) -> IndexResult<Option<(Held, I)>> {
    let Some(held) = enter(c, word, node, &mut *buf).await? else { return Ok(None) };
    let buf: &'b [u8] = buf;
    match check(buf) {
        Some(img) => Ok(Some((held, img))),
        None => {
            held.leave_now(c).await?;
            Err(not_node())
        }
    }
}

/// How a claim ended.
#[derive(Debug)]
pub enum Claim {
    /// The node is this client's; `buf` holds its image with no other operation in flight.
    Held(Claimed),
    /// Another SMO held it: the claim and the +1 were dropped, that SMO is gone; start over.
    Lost,
    /// Operations stayed in flight for `polls` polls (one may have crashed inside): the claim
    /// and the +1 were dropped; start over.
    GaveUp,
}

/// Claims the node `held` is in for an SMO, READing `node` into `buf` with it; waits (at most
/// `polls` round trips) for the other operations in flight to leave, READing `node` again with
/// each poll so that `buf` ends as the image they left.
pub async fn claim<T: Transport>(
    c: &Client<T>,
    held: Held,
    node: GlobalAddr,
    buf: &mut [u8],
    polls: u32,
) -> IndexResult<Claim> {
    let word = held.word;
    let mut ops = [faa(word, CLAIM), BatchOp::Read { addr: node, buf: &mut *buf }];
    c.batch(&mut ops).await?;
    let old = old_word(&ops[0]);
    if old.is_claimed() {
        c.faa(word, (CLAIM + IDU).wrapping_neg()).await?;
        wait_unclaimed(c, word).await?;
        return Ok(Claim::Lost);
    }
    if old.idu() == 1 {
        return Ok(Claim::Held(Claimed { word }));
    }
    for _ in 0..polls {
        let mut w = [0u8; 8];
        c.batch(&mut [
            BatchOp::Read { addr: word, buf: &mut w },
            BatchOp::Read { addr: node, buf: &mut *buf },
        ])
        .await?;
        if Word(u64::from_le_bytes(w)).idu() == 1 {
            return Ok(Claim::Held(Claimed { word }));
        }
    }
    c.faa(word, (CLAIM + IDU).wrapping_neg()).await?;
    Ok(Claim::GaveUp)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;

    fn fabric() -> LocalFabric {
        LocalFabric::new(LocalConfig { yield_per_verb: true, ..LocalConfig::default() }).unwrap()
    }

    #[test]
    fn word_fields_and_deltas() {
        let w = Word(3 * CLAIM + 7);
        assert_eq!((w.claims(), w.idu(), w.is_claimed()), (3, 7, true));
        assert!(!Word(5).is_claimed());
        // Entering, claiming and releasing in any interleaving adds back to zero.
        let deltas = [IDU, CLAIM, (CLAIM + IDU).wrapping_neg(), IDU, IDU.wrapping_neg()];
        assert_eq!(deltas.iter().fold(0u64, |w, d| w.wrapping_add(*d)), 0);
        assert_eq!(BORN_CLAIMED.wrapping_add(CLAIM.wrapping_neg()), 0);
        // A full u32 of operations in flight does not reach the claims field.
        assert_eq!(Word(u64::from(u32::MAX)).claims(), 0);
    }

    #[test]
    fn operations_share_and_a_claim_excludes_them() {
        let f = fabric();
        let (a, b) = (f.client(0).unwrap(), f.client(0).unwrap());
        run_tasks([async {
            let word = a.alloc(64, 64).await.unwrap();
            let node = word.add(8);
            a.write(node, &[9; 8]).await.unwrap();
            let mut buf = [0u8; 8];
            // Two operations in flight at once.
            let x = enter(&a, word, node, &mut buf).await.unwrap().expect("free node");
            assert_eq!(buf, [9; 8], "the READ rides with the FAA");
            let y = enter(&b, word, node, &mut buf).await.unwrap().expect("shared");
            assert_eq!(Word(a.read_word(word).await.unwrap()).idu(), 2);
            // A claim by x gives up while y stays in flight.
            let before = a.counts().round_trips;
            assert!(matches!(claim(&a, x, node, &mut buf, 3).await.unwrap(), Claim::GaveUp));
            assert_eq!(a.counts().round_trips - before, 1 + 3 + 1, "claim, 3 polls, give up");
            assert_eq!(a.read_word(word).await.unwrap(), 1, "only y left in flight");
            // Once y is the only one in flight, its claim is immediate.
            let Claim::Held(claimed) = claim(&b, y, node, &mut buf, 3).await.unwrap() else {
                panic!("a lone operation claims at once")
            };
            assert_eq!(Word(a.read_word(word).await.unwrap()), Word(CLAIM + 1));
            b.batch(&mut [BatchOp::Write { addr: node, data: &[4; 8] }, claimed.release()])
                .await
                .unwrap();
            assert_eq!(a.read_word(word).await.unwrap(), 0);
            let x = enter(&a, word, node, &mut buf).await.unwrap().unwrap();
            assert_eq!(buf, [4; 8], "the SMO's WRITE landed before its release");
            a.batch(&mut [x.leave()]).await.unwrap();
            assert_eq!(a.read_word(word).await.unwrap(), 0);
        }]);
    }

    #[test]
    fn a_claim_waits_for_operations_in_flight_and_blocks_new_ones() {
        let f = fabric();
        let (smo, op, late) = (f.client(0).unwrap(), f.client(0).unwrap(), f.client(0).unwrap());
        let word = run_tasks([smo.alloc(128, 64)]).pop().unwrap().unwrap();
        let node = word.add(64);
        let order = Cell::new(0u32);
        run_tasks([
            Box::pin(async {
                // An operation is in flight and writes the node before it leaves.
                let mut buf = [0u8; 8];
                let h = enter(&op, word, node, &mut buf).await.unwrap().unwrap();
                for _ in 0..4 {
                    futures::pending!();
                }
                op.batch(&mut [BatchOp::Write { addr: node, data: &[1; 8] }, h.leave()])
                    .await
                    .unwrap();
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
            Box::pin(async {
                futures::pending!();
                let mut buf = [0u8; 8];
                let h = enter(&smo, word, node, &mut buf).await.unwrap().unwrap();
                let Claim::Held(c) = claim(&smo, h, node, &mut buf, 1000).await.unwrap() else {
                    panic!("the claim waits for the operation in flight")
                };
                assert_eq!(buf, [1; 8], "the drained image has the operation's WRITE");
                order.set(1);
                for _ in 0..4 {
                    futures::pending!();
                }
                smo.batch(&mut [BatchOp::Write { addr: node, data: &[2; 8] }, c.release()])
                    .await
                    .unwrap();
            }),
            Box::pin(async {
                // Comes while the SMO holds the node: turned away, then waits it out.
                while order.get() == 0 {
                    futures::pending!();
                }
                let mut buf = [0u8; 8];
                assert!(enter(&late, word, node, &mut buf).await.unwrap().is_none());
                assert_eq!(late.read_vec(node, 8).await.unwrap(), [2; 8], "the SMO is gone");
                let h = enter(&late, word, node, &mut buf).await.unwrap().unwrap();
                h.leave_now(&late).await.unwrap();
            }),
        ]);
        assert_eq!(run_tasks([smo.read_word(word)]).pop().unwrap().unwrap(), 0);
    }

    #[test]
    fn of_two_claims_the_later_is_lost() {
        let f = fabric();
        let (a, b) = (f.client(0).unwrap(), f.client(0).unwrap());
        let word = run_tasks([a.alloc(64, 64)]).pop().unwrap().unwrap();
        let node = word.add(8);
        let outcomes = run_tasks([
            Box::pin(async {
                let mut buf = [0u8; 8];
                let h = enter(&a, word, node, &mut buf).await.unwrap().unwrap();
                futures::pending!();
                match claim(&a, h, node, &mut buf, 1000).await.unwrap() {
                    Claim::Held(c) => {
                        a.batch(&mut [c.release()]).await.unwrap();
                        "held"
                    }
                    _ => "not held",
                }
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = &str>>>,
            Box::pin(async {
                let mut buf = [0u8; 8];
                let h = enter(&b, word, node, &mut buf).await.unwrap().unwrap();
                while !Word(b.read_word(word).await.unwrap()).is_claimed() {}
                match claim(&b, h, node, &mut buf, 1000).await.unwrap() {
                    Claim::Lost => "lost",
                    _ => "not lost",
                }
            }),
        ]);
        assert_eq!(outcomes, ["held", "lost"]);
        assert_eq!(run_tasks([a.read_word(word)]).pop().unwrap().unwrap(), 0);
    }

    #[test]
    fn a_checked_entry_hands_over_the_image_or_leaves() {
        let f = fabric();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let word = c.alloc(64, 64).await.unwrap();
            let node = word.add(8);
            c.write(node, &[7; 8]).await.unwrap();
            let mut buf = [0u8; 8];
            let ok = enter_checked(&c, word, node, &mut buf, |b| Some(b[0]), || unreachable!());
            let (held, first) = ok.await.unwrap().expect("free node");
            assert_eq!((first, c.read_word(word).await.unwrap()), (7, IDU));
            held.leave_now(&c).await.unwrap();
            let gone = || IndexError::Corrupt("no node".into());
            let bad = enter_checked(&c, word, node, &mut buf, |_| None::<()>, gone).await;
            assert!(matches!(bad, Err(IndexError::Corrupt(_))));
            assert_eq!(c.read_word(word).await.unwrap(), 0, "left before the error");
        }]);
    }
}
