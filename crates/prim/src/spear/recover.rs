//! Recovering a Spear word from clients that died with a share of it.
//!
//! # Judging
//!
//! A client that waits on a Spear word (an SMO for its operations in flight to drain, a writer
//! for a claim to go) and sees no progress for a lease ([`Panel`]) starts *rounds*, at most one
//! per quarter lease while it waits. A round reads how many member slots were ever joined
//! ([`lease::slots_in_use`]: `n`), then, in one doorbell to the word's memory node,
//!
//! ```text
//! [READ intents 0..n (τ0), READ the word (t1), READ the born record (if any), READ intents 0..n (τ2)]
//! ```
//!
//! (in order on one connection, so every slot's first read is before `t1` and its second after)
//! and takes as *candidates* the members whose intent holds the word in either read, and the
//! member a born record names ([`Recover::born_record`]); slot `n` must still be unjoined after
//! the scan (a client joins before it writes any intent). Each candidate is judged by the lease
//! rules ([`lease::Sighting`]: its intent word, or born record, the held word; three leases
//! without a heartbeat on the waiter's own clock; fenced before anything is repaired), or found
//! *frozen* already: its member slot FENCED, FREE (its last incarnation left holding nothing),
//! or FENCING (fenced again here, which is idempotent).
//!
//! # Recounting
//!
//! A round is *quiet* when
//!
//! * every candidate was found frozen in an earlier round (so before this round's first read)
//!   and its member slot still shows the same status after the second read (nobody joined it
//!   since: every verb in the slot's intent came from the frozen incarnation), and
//! * every other slot is *clean*: the same value in both reads, not holding the word; or a
//!   value followed by the same entry done or by exactly one new entry
//!   ([`Intent::followed_by`]), neither of which names the word.
//!
//! Then the word `W` read at `t1` is exactly the frozen clients' shares plus the waiter's own:
//! a live client with a share at `t1` had its intent holding the word from before its FAA until
//! after its last one ([`super::intent`]), so either a read saw it holding the word (a candidate,
//! not frozen: not quiet) or its slot changed across `t1` by an entry on the word (not clean).
//! The frozen shares never change again. So a CAS of the word from exactly `W` to the waiter's
//! own share drops every dead share at once, exactly once: it succeeds only if nothing moved
//! the word since `t1` (a live client that entered since and left again moved it by 0), and
//! whoever looks next, repairer or not, reads the result. It never needs to know whether a dead
//! client's FAA landed, nor which of them did.
//!
//! # Taking over a dead claim
//!
//! A quiet word that still shows a claim was claimed by a dead SMO, which may have left its
//! node half rewritten. The waiter takes the claim over: `[WRITE its intent (in), CAS W →
//! (c + 1) · 2³² + 1]` (`c` the claims in `W`), so the word goes from the dead shares to its own
//! in one step, and always changes: with `W = 2³² + 1` (a dead claimer and its own +1) a CAS to
//! `2³² + 1` would change nothing, and every waiter that saw the round would win it and repair
//! and release at once — one release then dropping another client's later claim. Its release
//! subtracts exactly what it holds. Holding the claim
//! it calls the index's [`Recover::finish`] (roll a half-done SMO forward) and releases. A
//! repairer that dies after its CAS is a dead claimant like any other, and the next waiter
//! repeats the repair; one that dies before it changed nothing. The index's
//! [`Recover::prepare`] runs first, for what must be repaired before this node may be taken
//! (Dolphin: a new leaf can only be opened once the leaf it split from is shrunk).
//!
//! # Cost
//!
//! Nothing while words drain. Per round: one 1-KiB READ of member statuses on node 0 per 64
//! slots in use, one doorbell of two READs of 8 bytes per slot in use on the word's node (16 KiB
//! each at most, with all 2048 slots joined), and one doorbell of 16-byte status READs on node 0
//! per 16 candidates; at most four rounds a lease, only once a wait has lasted a lease (an SMO
//! that holds its claim rounds again after its drain polls).

use std::future::Future;

use dmindex_fabric::layout::{intent_slot, MEMBER_SLOTS};
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;

use super::intent::{Intent, Mine};
use super::{Claimed, Word, CLAIM, IDU};
use crate::lease::{self, Sighting, Verdict, FENCED, FREE};

/// What an index does for the recovery of one of its Spear-locked nodes.
pub trait Recover<T: Transport> {
    /// The address (on the node's memory node) of a word in the node that names the member
    /// holding the node's claim without an intent naming it (0: none), if the index has such
    /// claims (Dolphin: a leaf born claimed by the split that made it).
    fn born_record(&self, node: GlobalAddr) -> Option<GlobalAddr>;

    /// Before this client takes over the dead claim on `node` (whose born record read `born`):
    /// repairs what must be whole first, and returns once it is.
    fn prepare(
        &self,
        c: &Client<T>,
        node: GlobalAddr,
        born: u64,
    ) -> impl Future<Output = IndexResult<()>>;

    /// Holding the claim on `node` (Spear word `word`) taken over from a dead claimant: makes
    /// the node whole (rolls forward what the dead SMO left half done).
    fn finish(
        &self,
        c: &Client<T>,
        word: GlobalAddr,
        node: GlobalAddr,
    ) -> impl Future<Output = IndexResult<()>>;
}

/// The recovery of an index whose SMOs leave nothing half done: every node rewrite is one WRITE
/// that lands whole, posted with the release (Marlin).
#[derive(Clone, Copy, Debug, Default)]
pub struct WholeRewrites;

impl<T: Transport> Recover<T> for WholeRewrites {
    fn born_record(&self, _: GlobalAddr) -> Option<GlobalAddr> {
        None
    }

    async fn prepare(&self, _: &Client<T>, _: GlobalAddr, _: u64) -> IndexResult<()> {
        Ok(())
    }

    async fn finish(&self, _: &Client<T>, _: GlobalAddr, _: GlobalAddr) -> IndexResult<()> {
        Ok(())
    }
}

/// What a quiet round read: the word at `t1` (frozen shares and the reader's own only) and the
/// born record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub word: Word,
    pub born: u64,
}

/// One candidate: a member slot, found through its intent or through a born record.
#[derive(Debug)]
struct Seat {
    slot: u32,
    born: bool,
    sighting: Sighting,
    /// The slot's status when the member was found frozen, in an earlier round.
    frozen: Option<u64>,
    /// The last round that named it.
    round: u64,
}

/// One waiter's judgement of the holders of a Spear word it sees make no progress; see the
/// module docs. Carried across a waiter's attempts (an SMO's claims and waits) so that the
/// leases it counts go on; empty (no allocation) until a wait has lasted a lease.
#[derive(Debug, Default)]
pub struct Panel {
    /// The Spear word it judges the holders of.
    word: GlobalAddr,
    /// The first look of the current stretch without progress (0: none).
    since_ns: u64,
    last_round_ns: u64,
    rounds: u64,
    seats: Vec<Seat>,
    /// The two reads of the intent table.
    scan: Vec<u8>,
}

impl Panel {
    /// A panel that has seen nothing.
    pub const fn new() -> Panel {
        Panel {
            word: GlobalAddr::NULL,
            since_ns: 0,
            last_round_ns: 0,
            rounds: 0,
            seats: Vec::new(),
            scan: Vec::new(),
        }
    }

    /// The word moved on (drained, released): forget the stretch and the candidates.
    pub fn progress(&mut self) {
        self.since_ns = 0;
        self.seats.clear();
    }

    /// One look that saw no progress.
    pub fn stalled<T: Transport>(&mut self, c: &Client<T>) {
        if self.since_ns == 0 {
            self.since_ns = c.now_ns().max(1);
        }
    }

    /// Whether a round is due while waiting: the stretch has lasted a lease, and the last
    /// round was a quarter lease ago (so that each candidate's watch is looked at well within
    /// a lease, at a bounded cost).
    pub fn due<T: Transport>(&self, c: &Client<T>) -> bool {
        let (now, lease) = (c.now_ns(), c.transport().lease_ns());
        self.stalled_a_lease(c) && now.saturating_sub(self.last_round_ns) >= lease / 4
    }

    /// Whether the stretch without progress has lasted a lease: what an SMO that holds the
    /// claim checks before it rounds at once (its claim keeps everyone else's shares out, so
    /// its round is the likeliest to be quiet).
    pub fn stalled_a_lease<T: Transport>(&self, c: &Client<T>) -> bool {
        let (now, lease) = (c.now_ns(), c.transport().lease_ns());
        self.since_ns != 0 && now.saturating_sub(self.since_ns) >= lease
    }

    /// One round over the Spear word at `word` of `node`: judges its candidates (fencing the
    /// dead) and, when it is quiet, what it read.
    pub async fn round<T: Transport, R: Recover<T>>(
        &mut self,
        c: &Client<T>,
        word: GlobalAddr,
        node: GlobalAddr,
        rec: &R,
    ) -> IndexResult<Option<Seen>> {
        if self.word != word {
            // Another word (the SMO's key moved to another leaf): other holders.
            self.seats.clear();
            self.word = word;
        }
        let member = lease::renew_if_due(c).await?;
        let (own, _) = lease::parse_member(member);
        self.last_round_ns = c.now_ns();
        self.rounds += 1;
        // Only the slots ever joined can hold intents; a client that joins after this READ is
        // seen joined by the status READs after the scan (its join precedes its intents).
        let slots = lease::slots_in_use(c).await?;
        let n = 8 * slots as usize;
        self.scan.resize(2 * n, 0);
        let (first, second) = self.scan.split_at_mut(n);
        let table = intent_slot(word.node(), 0);
        let (mut w, mut b) = ([0u8; 8], [0u8; 8]);
        match rec.born_record(node) {
            Some(at) => {
                c.batch(&mut [
                    BatchOp::Read { addr: table, buf: first },
                    BatchOp::Read { addr: word, buf: &mut w },
                    BatchOp::Read { addr: at, buf: &mut b },
                    BatchOp::Read { addr: table, buf: second },
                ])
                .await?
            }
            None => {
                c.batch(&mut [
                    BatchOp::Read { addr: table, buf: first },
                    BatchOp::Read { addr: word, buf: &mut w },
                    BatchOp::Read { addr: table, buf: second },
                ])
                .await?
            }
        }
        let seen = Seen { word: Word(u64::from_le_bytes(w)), born: u64::from_le_bytes(b) };
        // Candidates: (slot, the word that names them, born).
        let mut named: Vec<(u32, u64, bool)> = Vec::new();
        let mut clean = true;
        let (first, second) = self.scan.split_at(n);
        for slot in 0..slots {
            let at = 8 * slot as usize;
            let v0 = Intent(u64::from_le_bytes(first[at..at + 8].try_into().expect("8 bytes")));
            let v2 = Intent(u64::from_le_bytes(second[at..at + 8].try_into().expect("8 bytes")));
            if slot == own {
                continue;
            }
            let holds = v0.holds(word) || v2.holds(word);
            if holds {
                named.push((slot, if v2.holds(word) { v2.0 } else { v0.0 }, false));
            }
            if v0 != v2 && (holds || v2.names(word) || !v0.followed_by(v2)) {
                clean = false;
            }
        }
        if seen.born != 0 {
            let (slot, _) = lease::parse_member(seen.born);
            if slot != own {
                named.push((slot, seen.born, true));
            }
        }
        // The first slot not joined before the scan, still not joined after it.
        if slots < MEMBER_SLOTS {
            named.push((slots, 0, false));
        }
        let frozen_before = self.judge(c, &named).await?;
        let round = self.rounds;
        self.seats.retain(|s| s.round == round);
        Ok((clean && frozen_before).then_some(seen))
    }

    /// Judges the candidates `named`: reads their member slots (after the round's reads),
    /// watches the live ones and records the frozen. Whether every one of them was already
    /// frozen before this round, with the same status now.
    async fn judge<T: Transport>(
        &mut self,
        c: &Client<T>,
        named: &[(u32, u64, bool)],
    ) -> IndexResult<bool> {
        let mut all = true;
        for chunk in named.chunks(MAX_BATCH) {
            let mut slots = [[0u8; 16]; MAX_BATCH];
            let mut ops: Vec<BatchOp<'_>> = chunk
                .iter()
                .zip(slots.iter_mut())
                .map(|(&(slot, _, _), buf)| BatchOp::Read { addr: lease::slot_addr(slot), buf })
                .collect();
            c.batch(&mut ops).await?;
            drop(ops);
            for (&(slot, shown, born), buf) in chunk.iter().zip(slots.iter()) {
                let s = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                let round = self.rounds;
                let i = match self.seats.iter().position(|t| t.slot == slot && t.born == born) {
                    Some(i) => i,
                    None => {
                        let seat =
                            Seat { slot, born, sighting: Sighting::new(), frozen: None, round };
                        self.seats.push(seat);
                        self.seats.len() - 1
                    }
                };
                let seat = &mut self.seats[i];
                seat.round = round;
                if shown == 0 {
                    // The end of the slots in use: it must still be unused.
                    all &= s == 0;
                    continue;
                }
                all &= seat.frozen == Some(s);
                if seat.frozen == Some(s) {
                    continue;
                }
                let beat = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
                let inc = lease::incarnation_of(s);
                // The member the slot's intent is from (intents are cleared when a slot is
                // joined), or the one a born record names.
                let member = if born { shown } else { lease::member_word(slot, inc) };
                seat.frozen = match lease::state_of(s) {
                    FENCED | FREE => Some(s),
                    // A born record of an incarnation that is gone: it left holding nothing,
                    // or was fenced before its slot could be joined again.
                    _ if born && !lease::same_incarnation(s, shown) => Some(s),
                    _ => match seat.sighting.look(c, shown, member, s, beat).await? {
                        Verdict::Fenced => Some(lease::status(FENCED, inc)),
                        Verdict::Wait => None,
                    },
                };
            }
        }
        Ok(all)
    }
}

/// Takes over the dead claim a quiet round saw on the word at `word` of `node`, finishes the
/// node and releases it; whether it did (the CAS failed if the word moved since the round).
pub(crate) async fn take_over<T: Transport, R: Recover<T>>(
    c: &Client<T>,
    word: GlobalAddr,
    node: GlobalAddr,
    seen: Seen,
    rec: &R,
) -> IndexResult<bool> {
    rec.prepare(c, node, seen.born).await?;
    let intent = Mine::enter(c, word).await?;
    // One more claim than the dead ones, and this client's +1: the word always changes, so of
    // several waiters that saw the same quiet round exactly one wins (the dead claimer's
    // claim and +1 alone would be the same word as `2³² + 1`, and every such CAS would win).
    let hold = (u64::from(Word(seen.word.0).claims()) + 1) * CLAIM + IDU;
    let swap = AtomicOp::Cas { expected: seen.word.0, new: hold };
    let mut ops = [intent.write(), BatchOp::atomic(word, swap)];
    c.batch(&mut ops).await?;
    let won = ops[1].old() == Some(seen.word.0);
    if !won {
        // Nothing taken: the intent goes back to done, so nobody waits on this client.
        let done = intent.done(c);
        c.batch(&mut [done.write()]).await?;
        return Ok(false);
    }
    let claimed = Claimed { word, intent, hold };
    rec.finish(c, word, node).await?;
    let release = claimed.release(c);
    c.batch(&mut release.ops()).await?;
    Ok(true)
}

/// Drops the dead shares a quiet round saw in the word at `word`, keeping `own` (this client's
/// share); whether the CAS found the word as the round read it.
pub(crate) async fn recount<T: Transport>(
    c: &Client<T>,
    word: GlobalAddr,
    seen: Seen,
    own: u64,
) -> IndexResult<bool> {
    Ok(c.cas(word, seen.word.0, own).await? == seen.word.0)
}
