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
//! The word is only ever changed by fetch-and-add after the node is created (and, to drop a
//! dead client's share, by one CAS from the exact value the recovery read: [`recover`]), so
//! concurrent increments are never lost (a WRITE of the word would erase them); a node's WRITEs
//! never cover it. Each field stays non-negative in correct use, so the fields never borrow
//! from each other.
//!
//! # Protocol
//!
//! | who | verbs | rule |
//! |---|---|---|
//! | an insert, update or delete enters | doorbell `[WRITE intent, FAA +1, READ node]` ([`enter`]) | the old word shows a claim: it leaves (`[FAA −1, WRITE intent done]`), waits until the claim is gone, and the operation starts over (the node may have split) |
//! | it leaves | `FAA −1, WRITE intent done`, the last verbs of its final doorbell ([`Held::leave`]) | after its WRITE or CAS in the same doorbell, so they have landed first |
//! | an SMO claims (holding its own +1) | doorbell `[FAA +2³², READ node]` ([`claim`]) | another claim was there: it drops its claim and its +1, waits, starts over. Otherwise it polls `[READ word, READ node]` until `idu = 1` (its own), at most `polls` times, then gives up the same way |
//! | it releases | `FAA −(2³²+1), WRITE intent done` in its final doorbell ([`Claimed::release`]) | after the WRITEs that rewrite the node |
//! | a node born claimed | created with the word [`BORN_CLAIMED`] and a born record naming its SMO, released by `[FAA −2³², WRITE born record 0]` ([`Born::release`]) | so nobody changes it before the SMO that made it is done |
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
//! The word cannot name its holders, so each memory node keeps an intent table, one word per
//! member slot, that says which Spear word of that node a client may have a share of
//! ([`intent`]): written in the doorbell of its first FAA, before it, and marked done in the
//! doorbell of its last, after it. A waiter that sees no progress for a lease (an SMO whose
//! node does not drain, a writer whose node stays claimed) judges the members the table names
//! with the lease rules and fences the dead, then sets the word to exactly the live shares by
//! one CAS, taking over and finishing a dead SMO's claim ([`recover`]). What the index must roll
//! forward after a dead SMO it says through [`Recover`].
//!
//! # Cost
//!
//! Per operation: the intent WRITE in the entering doorbell and the done WRITE in the leaving
//! one, 8 bytes each, on the node's memory node; no round trip. An SMO writes nothing more;
//! a born node's release clears its 8-byte born record in the same doorbell. Clients join the
//! member table before their first entry ([`crate::lease`]).

pub mod intent;
pub mod recover;

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use crate::backoff::Backoff;
use crate::lease;
use intent::Mine;
pub use recover::{Panel, Recover, Seen, WholeRewrites};

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

/// The last verbs of an operation or an SMO on a node: the FAA that takes its share back, then
/// the WRITE that marks its intent done.
#[must_use = "a share is only taken back when these verbs are posted"]
#[derive(Debug)]
pub struct Leave {
    word: GlobalAddr,
    delta: u64,
    done: Mine,
}

impl Leave {
    /// `[FAA, WRITE intent done]`, in that order: put them last in the doorbell.
    pub fn ops(&self) -> [BatchOp<'_>; 2] {
        [faa(self.word, self.delta), self.done.write()]
    }
}

/// One insert, update or delete in flight on a node: `#[must_use]`, consumed by [`Held::leave`]
/// (its `FAA −1`, posted with the operation's last verbs) or turned into a claim.
#[must_use = "an operation in flight leaves with Held::leave (FAA -1) in its final doorbell"]
#[derive(Debug)]
pub struct Held {
    word: GlobalAddr,
    intent: Mine,
}

impl Held {
    /// The Spear word's address.
    pub fn word(&self) -> GlobalAddr {
        self.word
    }

    /// The `FAA −1` that ends the operation, and its intent marked done: put them after the
    /// operation's WRITE or CAS in the same doorbell.
    pub fn leave<T: Transport>(self, c: &Client<T>) -> Leave {
        Leave { word: self.word, delta: IDU.wrapping_neg(), done: self.intent.done(c) }
    }

    /// Leaves on its own (an operation that found nothing to change). One round trip.
    pub async fn leave_now<T: Transport>(self, c: &Client<T>) -> IndexResult<()> {
        let leave = self.leave(c);
        c.batch(&mut leave.ops()).await?;
        Ok(())
    }
}

/// A node this client's SMO holds: consumed by [`Claimed::release`], the last verbs of the SMO's
/// final doorbell (it also drops the SMO's own +1).
#[must_use = "a claim is released with Claimed::release in the SMO's final doorbell"]
#[derive(Debug)]
pub struct Claimed {
    word: GlobalAddr,
    intent: Mine,
    /// What this claim added to the word: `2³² + 1` for a claim of one's own; more for a claim
    /// taken over from a dead SMO ([`recover`]), so that the takeover changed the word.
    hold: u64,
}

impl Claimed {
    /// The Spear word's address.
    pub fn word(&self) -> GlobalAddr {
        self.word
    }

    /// The `FAA −(2³²+1)` that releases the claim and the SMO's own +1 (more for a claim taken
    /// over: what it holds), and its intent done.
    pub fn release<T: Transport>(self, c: &Client<T>) -> Leave {
        let delta = self.hold.wrapping_neg();
        Leave { word: self.word, delta, done: self.intent.done(c) }
    }
}

/// A node created claimed ([`BORN_CLAIMED`]) by an SMO: released with the SMO's other claim.
#[must_use = "a node born claimed is released with Born::release in the SMO's final doorbell"]
#[derive(Debug)]
pub struct Born {
    word: GlobalAddr,
    record: GlobalAddr,
}

/// What clears a born record.
static NO_RECORD: [u8; 8] = [0; 8];

impl Born {
    /// The node whose Spear word is at `word` will be written with [`BORN_CLAIMED`] there, and
    /// with this client's member word in its born record at `record` (on the same memory node):
    /// what names the SMO that holds the node's claim ([`Recover::born_record`]).
    pub fn new(word: GlobalAddr, record: GlobalAddr) -> Born {
        Born { word, record }
    }

    /// The member word the born record holds until the release: this client's (it has
    /// joined, having entered the node it splits).
    pub fn record<T: Transport>(c: &Client<T>) -> u64 {
        c.membership().member.get()
    }

    /// `[FAA −2³², WRITE born record 0]`, in that order: opens the node to writers, then says
    /// no SMO holds it by birth any more.
    pub fn release(self) -> [BatchOp<'static>; 2] {
        [
            faa(self.word, CLAIM.wrapping_neg()),
            BatchOp::Write { addr: self.record, data: &NO_RECORD },
        ]
    }
}

/// Waits, one READ of the word per look with backoff between looks, until no SMO claims it;
/// a claim that makes no progress for a lease is judged, and a dead one taken over, finished
/// and released ([`recover`]).
pub async fn wait_unclaimed<T: Transport, R: Recover<T>>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    rec: &R,
) -> IndexResult<()> {
    wait_claim_gone(c, word, node, &mut Panel::new(), rec).await
}

/// [`wait_unclaimed`] judging with `panel` (an SMO's, which goes on judging through its waits).
async fn wait_claim_gone<T: Transport, R: Recover<T>>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    panel: &mut Panel,
    rec: &R,
) -> IndexResult<()> {
    let mut backoff = Backoff::new();
    // Ends when the word shows no claim: a live SMO releases it within its drain and its
    // doorbells, a dead one's is released here once it is fenced (or the backoff's bound on a
    // claim never let go).
    loop {
        if !Word(c.read_word(word).await?).is_claimed() {
            return Ok(());
        }
        lease::renew_if_due(c).await?;
        panel.stalled(c);
        if panel.due(c) {
            if let Some(seen) = panel.round(c, word, node, rec).await? {
                if !seen.word.is_claimed() || recover::take_over(c, word, node, seen, rec).await? {
                    return Ok(());
                }
            }
        }
        backoff.failed(c, word, "Spear word's SMO claim").await?;
    }
}

/// Waits without a claim until no operation is in flight on the node whose Spear word is at
/// `word`, or for `polls` looks (with backoff pauses) at most, whichever comes first: what an
/// SMO does after it gave up its drain, so that the node's other writers go on meanwhile.
/// `panel`, carried across the SMO's attempts, judges the shares that never leave; once their
/// holders are fenced it drops them (and takes over, finishes and releases a dead claim).
pub async fn wait_drain<T: Transport, R: Recover<T>>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    polls: u32,
    panel: &mut Panel,
    rec: &R,
) -> IndexResult<()> {
    let mut backoff = Backoff::new();
    // Ends after `polls` looks at most.
    for _ in 0..polls {
        if Word(c.read_word(word).await?).idu() == 0 {
            panel.progress();
            return Ok(());
        }
        lease::renew_if_due(c).await?;
        panel.stalled(c);
        if panel.due(c) {
            if let Some(seen) = panel.round(c, word, node, rec).await? {
                let repaired = if seen.word.is_claimed() {
                    recover::take_over(c, word, node, seen, rec).await?
                } else {
                    recover::recount(c, word, seen, 0).await?
                };
                if repaired {
                    panel.progress();
                    return Ok(());
                }
            }
        }
        backoff.failed(c, word, "Spear word's operations in flight").await?;
    }
    Ok(())
}

/// Enters the node whose Spear word is at `word` and READs `node` into `buf` in the same
/// doorbell (one round trip). `None` if an SMO held it: the +1 has been taken back, the SMO is
/// gone, and the caller starts over (the node may have changed).
pub async fn enter<T: Transport, R: Recover<T>>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    buf: &mut [u8],
    rec: &R,
) -> IndexResult<Option<Held>> {
    let intent = Mine::enter(c, word).await?;
    let mut ops = [intent.write(), faa(word, IDU), BatchOp::Read { addr: node, buf }];
    c.batch(&mut ops).await?;
    let claimed = old_word(&ops[1]).is_claimed();
    let held = Held { word, intent };
    if !claimed {
        return Ok(Some(held));
    }
    held.leave_now(c).await?;
    wait_unclaimed(c, word, node, rec).await?;
    Ok(None)
}

/// [`enter`], then the node image it READ, made by `check` from `buf` (the READ's bytes). No
/// SMO runs while the operation is in flight and a finished one's WRITEs precede its release,
/// so the image cannot be torn: `check` returning `None` means there is no node at `node`, and
/// the operation leaves at once with the error `not_node` makes. `Ok(None)`: an SMO held the
/// node, as [`enter`].
#[allow(clippy::too_many_arguments)]
pub async fn enter_checked<'b, T: Transport, R: Recover<T>, I>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    buf: &'b mut [u8],
    rec: &R,
    check: impl FnOnce(&'b [u8]) -> Option<I>,
    not_node: impl FnOnce() -> IndexError,
) -> IndexResult<Option<(Held, I)>> {
    let Some(held) = enter(c, word, node, &mut *buf, rec).await? else { return Ok(None) };
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
    /// and the +1 were dropped; wait ([`wait_drain`]) and start over.
    GaveUp,
}

/// Claims the node `held` is in for an SMO, READing `node` into `buf` with it; waits (at most
/// `polls` round trips) for the other operations in flight to leave, READing `node` again with
/// each poll so that `buf` ends as the image they left. Shares that never leave are judged by
/// `panel` (across the SMO's attempts); once it has fenced their holders, they are dropped
/// here and the claim holds.
#[allow(clippy::too_many_arguments)]
pub async fn claim<T: Transport, R: Recover<T>>(
    c: &Client<T>,
    held: Held,
    node: GlobalAddr,
    buf: &mut [u8],
    polls: u32,
    panel: &mut Panel,
    rec: &R,
) -> IndexResult<Claim> {
    let word = held.word;
    let mut ops = [faa(word, CLAIM), BatchOp::Read { addr: node, buf: &mut *buf }];
    c.batch(&mut ops).await?;
    let old = old_word(&ops[0]);
    let claimed = Claimed { word, intent: held.intent, hold: CLAIM + IDU };
    if old.is_claimed() {
        c.batch(&mut claimed.release(c).ops()).await?;
        wait_claim_gone(c, word, node, panel, rec).await?;
        return Ok(Claim::Lost);
    }
    if old.idu() == 1 {
        panel.progress();
        return Ok(Claim::Held(claimed));
    }
    for _ in 0..polls {
        let mut w = [0u8; 8];
        c.batch(&mut [
            BatchOp::Read { addr: word, buf: &mut w },
            BatchOp::Read { addr: node, buf: &mut *buf },
        ])
        .await?;
        if Word(u64::from_le_bytes(w)).idu() == 1 {
            panel.progress();
            return Ok(Claim::Held(claimed));
        }
        lease::renew_if_due(c).await?;
        panel.stalled(c);
        // Judging goes on while the claim waits, so that a dead share is found even when the
        // SMO spends its time claiming.
        if panel.due(c) {
            if let Some(seen) = panel.round(c, word, node, rec).await? {
                if recover::recount(c, word, seen, CLAIM + IDU).await? {
                    c.read(node, buf).await?;
                    panel.progress();
                    return Ok(Claim::Held(claimed));
                }
            }
        }
    }
    // The shares left may be dead ones the panel judged while this SMO waited before: every
    // other share in a quiet word is a fenced client's, so the word keeps only this claim's.
    // Held, the claim turns every live writer away at once, so a round soon finds the word
    // quiet; a second one covers a writer turned away during the first.
    if panel.stalled_a_lease(c) {
        for _ in 0..2 {
            if let Some(seen) = panel.round(c, word, node, rec).await? {
                if recover::recount(c, word, seen, CLAIM + IDU).await? {
                    c.read(node, buf).await?;
                    panel.progress();
                    return Ok(Claim::Held(claimed));
                }
            }
        }
    }
    c.batch(&mut claimed.release(c).ops()).await?;
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
            let x =
                enter(&a, word, node, &mut buf, &WholeRewrites).await.unwrap().expect("free node");
            assert_eq!(buf, [9; 8], "the READ rides with the FAA");
            let y = enter(&b, word, node, &mut buf, &WholeRewrites).await.unwrap().expect("shared");
            assert_eq!(Word(a.read_word(word).await.unwrap()).idu(), 2);
            // A claim by x gives up while y stays in flight.
            let before = a.counts().round_trips;
            assert!(matches!(
                claim(&a, x, node, &mut buf, 3, &mut Panel::new(), &WholeRewrites).await.unwrap(),
                Claim::GaveUp
            ));
            assert_eq!(a.counts().round_trips - before, 1 + 3 + 1, "claim, 3 polls, give up");
            assert_eq!(a.read_word(word).await.unwrap(), 1, "only y left in flight");
            // Once y is the only one in flight, its claim is immediate.
            let Claim::Held(claimed) =
                claim(&b, y, node, &mut buf, 3, &mut Panel::new(), &WholeRewrites).await.unwrap()
            else {
                panic!("a lone operation claims at once")
            };
            assert_eq!(Word(a.read_word(word).await.unwrap()), Word(CLAIM + 1));
            let out = claimed.release(&b);
            let [f, d] = out.ops();
            b.batch(&mut [BatchOp::Write { addr: node, data: &[4; 8] }, f, d]).await.unwrap();
            assert_eq!(a.read_word(word).await.unwrap(), 0);
            let x = enter(&a, word, node, &mut buf, &WholeRewrites).await.unwrap().unwrap();
            assert_eq!(buf, [4; 8], "the SMO's WRITE landed before its release");
            a.batch(&mut x.leave(&a).ops()).await.unwrap();
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
                let h = enter(&op, word, node, &mut buf, &WholeRewrites).await.unwrap().unwrap();
                for _ in 0..4 {
                    futures::pending!();
                }
                let out = h.leave(&op);
                let [f, d] = out.ops();
                op.batch(&mut [BatchOp::Write { addr: node, data: &[1; 8] }, f, d]).await.unwrap();
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
            Box::pin(async {
                futures::pending!();
                let mut buf = [0u8; 8];
                let h = enter(&smo, word, node, &mut buf, &WholeRewrites).await.unwrap().unwrap();
                let Claim::Held(c) =
                    claim(&smo, h, node, &mut buf, 1000, &mut Panel::new(), &WholeRewrites)
                        .await
                        .unwrap()
                else {
                    panic!("the claim waits for the operation in flight")
                };
                assert_eq!(buf, [1; 8], "the drained image has the operation's WRITE");
                order.set(1);
                for _ in 0..4 {
                    futures::pending!();
                }
                let out = c.release(&smo);
                let [f, d] = out.ops();
                smo.batch(&mut [BatchOp::Write { addr: node, data: &[2; 8] }, f, d]).await.unwrap();
            }),
            Box::pin(async {
                // Comes while the SMO holds the node: turned away, then waits it out.
                while order.get() == 0 {
                    futures::pending!();
                }
                let mut buf = [0u8; 8];
                assert!(enter(&late, word, node, &mut buf, &WholeRewrites)
                    .await
                    .unwrap()
                    .is_none());
                assert_eq!(late.read_vec(node, 8).await.unwrap(), [2; 8], "the SMO is gone");
                let h = enter(&late, word, node, &mut buf, &WholeRewrites).await.unwrap().unwrap();
                h.leave_now(&late).await.unwrap();
            }),
        ]);
        assert_eq!(run_tasks([smo.read_word(word)]).pop().unwrap().unwrap(), 0);
    }

    #[test]
    fn an_entry_names_its_word_in_the_intent_table_until_it_leaves() {
        let f = fabric();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let word = c.alloc(64, 64).await.unwrap();
            let mut buf = [0u8; 8];
            let held = enter(&c, word, word, &mut buf, &WholeRewrites).await.unwrap().unwrap();
            let (slot, _) = lease::parse_member(c.membership().member.get());
            let at = dmindex_fabric::layout::intent_slot(0, slot);
            let first = intent::Intent(c.read_word(at).await.unwrap());
            assert!(first.holds(word) && first.seq() == 1, "{first:?}");
            // The leaving doorbell: the FAA, then the same entry marked done.
            let leave = held.leave(&c);
            let ops = leave.ops();
            assert!(matches!(ops[0], BatchOp::Atomic { addr, .. } if addr == word));
            assert!(matches!(ops[1], BatchOp::Write { addr, .. } if addr == at));
            c.batch(&mut leave.ops()).await.unwrap();
            assert_eq!(intent::Intent(c.read_word(at).await.unwrap()), first.done());
            assert_eq!(c.read_word(word).await.unwrap(), 0);
            // The next entry on the node counts on.
            let held = enter(&c, word, word, &mut buf, &WholeRewrites).await.unwrap().unwrap();
            let second = intent::Intent(c.read_word(at).await.unwrap());
            assert!(second.holds(word) && first.followed_by(second) && second.seq() == 2);
            held.leave_now(&c).await.unwrap();
            // A born node's release opens it, then clears its record.
            let record = word.add(8);
            c.write(record, &7u64.to_le_bytes()).await.unwrap();
            c.faa(word, BORN_CLAIMED).await.unwrap();
            c.batch(&mut Born::new(word, record).release()).await.unwrap();
            assert_eq!(
                (c.read_word(word).await.unwrap(), c.read_word(record).await.unwrap()),
                (0, 0)
            );
        }]);
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
                let h = enter(&a, word, node, &mut buf, &WholeRewrites).await.unwrap().unwrap();
                futures::pending!();
                match claim(&a, h, node, &mut buf, 1000, &mut Panel::new(), &WholeRewrites)
                    .await
                    .unwrap()
                {
                    Claim::Held(c) => {
                        a.batch(&mut c.release(&a).ops()).await.unwrap();
                        "held"
                    }
                    _ => "not held",
                }
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = &str>>>,
            Box::pin(async {
                let mut buf = [0u8; 8];
                let h = enter(&b, word, node, &mut buf, &WholeRewrites).await.unwrap().unwrap();
                while !Word(b.read_word(word).await.unwrap()).is_claimed() {}
                match claim(&b, h, node, &mut buf, 1000, &mut Panel::new(), &WholeRewrites)
                    .await
                    .unwrap()
                {
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
            let ok = enter_checked(
                &c,
                word,
                node,
                &mut buf,
                &WholeRewrites,
                |b| Some(b[0]),
                || unreachable!(),
            );
            let (held, first) = ok.await.unwrap().expect("free node");
            assert_eq!((first, c.read_word(word).await.unwrap()), (7, IDU));
            held.leave_now(&c).await.unwrap();
            let gone = || IndexError::Corrupt("no node".into());
            let bad =
                enter_checked(&c, word, node, &mut buf, &WholeRewrites, |_| None::<()>, gone).await;
            assert!(matches!(bad, Err(IndexError::Corrupt(_))));
            assert_eq!(c.read_word(word).await.unwrap(), 0, "left before the error");
        }]);
    }
}
