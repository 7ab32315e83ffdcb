//! Cluster membership with leases: who may hold a lock, how a waiter tells a slow holder from a
//! dead one, and how a dead one is fenced before anyone repairs what it left.
//!
//! # The member table
//!
//! [`MEMBER_SLOTS`] slots of 16 bytes on memory node 0 ([`dmindex_fabric::layout`]):
//!
//! ```text
//! slot i, at MEMBERS_OFFSET + 16 i
//!  word 0: status, changed by CAS only            word 1: heartbeat, WRITEs of its owner only
//! +-------+-------------------+--------------+   +-----------------------------------------+
//! | state | zero              | incarnation  |   | the owner's clock at its latest renewal |
//! | 63-62 | 61-32             | 31-0         |   | (any value that changes)                |
//! +-------+-------------------+--------------+   +-----------------------------------------+
//! state: 0 FREE, 1 LIVE, 2 FENCING (judged dead; being fenced), 3 FENCED
//! ```
//!
//! A client *joins* by CAS of the lowest FREE or FENCED slot's status to LIVE with the
//! incarnation plus one (so the slots ever joined are a prefix of the table, which is what
//! bounds a scan of the members, [`slots_in_use`]; when every slot is taken, through a slot
//! whose client stopped renewing, fenced first), clears the slot's intent words
//! ([`crate::spear::intent`]), and registers the member word ([`member_word`]: slot and low
//! incarnation bits) with
//! every memory node ([`Client::register_member`]). It renews by a zero-wait WRITE of its
//! heartbeat once half a lease ([`Transport::lease_ns`]) has passed on its own clock, whenever
//! it takes a lock or waits for one ([`renew_if_due`]): no round trip, and nothing at all for a
//! client that locks nothing.
//!
//! # Judging a holder
//!
//! A lock word a member holds names it ([`crate::lock`]). A waiter that has seen the same held
//! word for a lease reads the holder's slot; after two more leases with the word unchanged it
//! reads it again ([`Watch`]). Dead means: the heartbeat did not change between the two reads
//! while the status stayed LIVE with the same incarnation — three leases without a renewal, on
//! the waiter's own clock (clocks are never compared across clients; a waiter whose own looks
//! were more than a lease apart, having been descheduled itself, starts over). A status that is
//! no longer LIVE for that incarnation means it is already fenced, or left holding nothing.
//!
//! # Fencing
//!
//! The judge moves the status LIVE → FENCING by CAS, asks every memory node to refuse the
//! member's verbs ([`Client::fence`]), then FENCING → FENCED. Fencing is idempotent, so a judge
//! that finds FENCING (its predecessor may have died mid-way) fences again. Once FENCED nothing
//! the dead member posted can still land, so what it left may be repaired, and repairs release
//! its locks by CAS from the exact word it left.
//!
//! Safety never rests on clocks: a member judged dead while merely paused is fenced before
//! anything it held is touched, and its next verb fails ([`FabricError::Fenced`]). Clocks only
//! decide *when* a holder is judged: never before three leases without a renewal.
//!
//! # Cost
//!
//! Joining: one READ of 32 slots and one CAS, once per client, and a zero-wait WRITE per memory
//! node that clears the slot's intent words there. Renewing: a zero-wait WRITE per
//! half lease of locking. Judging: two 16-byte READs per wait that lasts a lease or more.
//! Fencing: a CAS, one request per memory node, a CAS.

use dmindex_fabric::layout::{intent_slot, MEMBERS_OFFSET, MEMBER_SLOTS, MEMBER_SLOT_BYTES};
use dmindex_fabric::{Client, FabricError, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

/// Slot states (status word bits 63-62).
pub const FREE: u64 = 0;
pub const LIVE: u64 = 1;
pub const FENCING: u64 = 2;
pub const FENCED: u64 = 3;

/// Leases without a renewal after which a holder is dead.
pub const DEAD_AFTER_LEASES: u64 = 3;

/// Slots one join reads at a time.
const WINDOW: u32 = 32;

/// Bits of the incarnation kept in a member word.
const INC_BITS: u32 = 19;
/// Bits of a member word: a marker bit, the slot (11 bits), the incarnation's low bits.
pub const MEMBER_BITS: u32 = 31;
const SLOT_BITS: u32 = MEMBER_BITS - 1 - INC_BITS;
const _: () = assert!(1 << SLOT_BITS == MEMBER_SLOTS);

/// The status word of a slot.
#[inline]
pub const fn status(state: u64, incarnation: u32) -> u64 {
    state << 62 | incarnation as u64
}

/// The state of status word `s`.
#[inline]
pub const fn state_of(s: u64) -> u64 {
    s >> 62
}

/// The incarnation of status word `s`.
#[inline]
pub const fn incarnation_of(s: u64) -> u32 {
    s as u32
}

/// The member word of slot `slot` at incarnation `inc`: non-zero, [`MEMBER_BITS`] wide.
///
/// ```text
///  30       29 .. 19     18 .. 0
/// +---+----------------+--------------------------+
/// | 1 | slot (11 bits) | incarnation, low 19 bits |
/// +---+----------------+--------------------------+
/// ```
#[inline]
pub const fn member_word(slot: u32, inc: u32) -> u64 {
    1 << (MEMBER_BITS - 1) | (slot as u64) << INC_BITS | (inc as u64 & ((1 << INC_BITS) - 1))
}

/// The slot and low incarnation bits of member word `m`.
#[inline]
pub const fn parse_member(m: u64) -> (u32, u32) {
    (((m >> INC_BITS) & ((1 << SLOT_BITS) - 1)) as u32, (m & ((1 << INC_BITS) - 1)) as u32)
}

/// Whether status word `s` is of the incarnation member word `m` names.
#[inline]
pub const fn same_incarnation(s: u64, m: u64) -> bool {
    incarnation_of(s) & ((1 << INC_BITS) - 1) == parse_member(m).1
}

/// The address of slot `slot`'s status word (its heartbeat follows).
pub fn slot_addr(slot: u32) -> GlobalAddr {
    GlobalAddr::new(0, MEMBERS_OFFSET + slot as u64 * MEMBER_SLOT_BYTES)
}

/// Joins the cluster if this client has not: claims a FREE or FENCED slot and registers its
/// member word with every memory node. Returns the member word.
pub async fn join<T: Transport>(c: &Client<T>) -> IndexResult<u64> {
    let m = c.membership();
    if m.member.get() != 0 {
        return Ok(m.member.get());
    }
    let mut buf = [0u8; WINDOW as usize * MEMBER_SLOT_BYTES as usize];
    // Ends after one pass over the table: each window is read once. Lowest slots first (see
    // [`slots_in_use`]).
    for w in 0..MEMBER_SLOTS / WINDOW {
        let first = w * WINDOW;
        c.read(slot_addr(first), &mut buf).await?;
        for i in 0..WINDOW {
            let at = (i * MEMBER_SLOT_BYTES as u32) as usize;
            let s = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
            if !matches!(state_of(s), FREE | FENCED) {
                continue;
            }
            let slot = first + i;
            let inc = incarnation_of(s).wrapping_add(1);
            if c.cas(slot_addr(slot), s, status(LIVE, inc)).await? != s {
                continue;
            }
            return became(c, slot, inc).await;
        }
    }
    reclaim(c).await
}

/// This client took slot `slot` at incarnation `inc`: registers its member word, clears the
/// slot's intent words and writes its first heartbeat. The member word.
async fn became<T: Transport>(c: &Client<T>, slot: u32, inc: u32) -> IndexResult<u64> {
    let m = c.membership();
    let member = member_word(slot, inc);
    c.register_member(member).await?;
    // The slot's intent words on every node may be a fenced predecessor's: this incarnation
    // starts from none ([`crate::spear`] judges a slot's intents by the member that holds the
    // slot now). Posted before any intent of its own on each node.
    for (node, last) in m.intents.iter().enumerate() {
        c.write_zero_wait(intent_slot(node as u16, slot), &0u64.to_le_bytes())?;
        last.set(0);
    }
    m.renewed_ns.set(c.now_ns());
    c.write_zero_wait(slot_addr(slot).add(8), &c.now_ns().to_le_bytes())?;
    Ok(member)
}

/// Joins through a slot whose client stopped renewing: the table had no FREE or FENCED slot.
/// Clients that end without leaving keep their slots LIVE, so a long-lived cluster fills its
/// table; a joiner then reads it whole, waits [`DEAD_AFTER_LEASES`] leases, reads it again,
/// and fences a slot whose status and heartbeat did not change (a client that holds nothing or
/// is dead: a live locker renews) before taking it. Rare and slow by design: once per client
/// that finds the table full.
async fn reclaim<T: Transport>(c: &Client<T>) -> IndexResult<u64> {
    let bytes = (MEMBER_SLOTS as u64 * MEMBER_SLOT_BYTES) as usize;
    let (mut before, mut after) = (vec![0u8; bytes], vec![0u8; bytes]);
    c.read(slot_addr(0), &mut before).await?;
    c.pause(DEAD_AFTER_LEASES * c.transport().lease_ns()).await;
    c.read(slot_addr(0), &mut after).await?;
    let words = |b: &[u8], slot: u32| {
        let at = (slot as u64 * MEMBER_SLOT_BYTES) as usize;
        let w = |o: usize| u64::from_le_bytes(b[at + o..at + o + 8].try_into().expect("8 bytes"));
        (w(0), w(8))
    };
    // Ends after one pass: each slot is looked at once.
    for slot in 0..MEMBER_SLOTS {
        let (s, beat) = words(&after, slot);
        if words(&before, slot) != (s, beat) || !matches!(state_of(s), LIVE | FENCING) {
            continue;
        }
        let stale = member_word(slot, incarnation_of(s));
        fence(c, stale, s).await?;
        let fenced = status(FENCED, incarnation_of(s));
        let inc = incarnation_of(s).wrapping_add(1);
        if c.cas(slot_addr(slot), fenced, status(LIVE, inc)).await? != fenced {
            continue;
        }
        return became(c, slot, inc).await;
    }
    Err(IndexError::Full(format!(
        "the member table has no free slot: {MEMBER_SLOTS} clients joined, none left and all \
         renewed their leases"
    )))
}

/// How many member slots have ever been joined: every slot from the first whose status word
/// is still 0 on is unused, as of this READ. A join takes the lowest slot it finds FREE or
/// FENCED, trying each in order, so when it takes slot `i` every slot below `i` is taken or was
/// (a status word never returns to 0): the joined slots are a prefix of the table. One READ of
/// 64 status words per 64 slots in use (so usually one).
pub async fn slots_in_use<T: Transport>(c: &Client<T>) -> IndexResult<u32> {
    const SCAN: u32 = 64;
    let mut buf = [0u8; SCAN as usize * MEMBER_SLOT_BYTES as usize];
    // Ends after one pass over the table at most: each window is read once.
    for first in (0..MEMBER_SLOTS).step_by(SCAN as usize) {
        c.read(slot_addr(first), &mut buf).await?;
        for i in 0..SCAN {
            let at = (i * MEMBER_SLOT_BYTES as u32) as usize;
            if buf[at..at + 8] == [0; 8] {
                return Ok(first + i);
            }
        }
    }
    Ok(MEMBER_SLOTS)
}

/// Leaves the cluster: the slot goes back to FREE. The client must hold no lock (a lock it
/// still held would be released by its first waiter as a dead member's).
pub async fn leave<T: Transport>(c: &Client<T>) -> IndexResult<()> {
    let m = c.membership();
    let member = m.member.get();
    if member == 0 {
        return Ok(());
    }
    let (slot, _) = parse_member(member);
    let s = c.read_word(slot_addr(slot)).await?;
    if state_of(s) == LIVE && same_incarnation(s, member) {
        c.cas(slot_addr(slot), s, status(FREE, incarnation_of(s))).await?;
    }
    m.member.set(0);
    Ok(())
}

/// Renews this client's lease with a zero-wait WRITE of its heartbeat if half a lease passed
/// since its last renewal (joins first if it has not). No round trip.
pub async fn renew_if_due<T: Transport>(c: &Client<T>) -> IndexResult<u64> {
    let member = join(c).await?;
    let m = c.membership();
    let now = c.now_ns();
    if now.saturating_sub(m.renewed_ns.get()) >= c.transport().lease_ns() / 2 {
        m.renewed_ns.set(now);
        let (slot, _) = parse_member(member);
        c.write_zero_wait(slot_addr(slot).add(8), &now.to_le_bytes())?;
    }
    Ok(member)
}

/// What a [`Watch`] concluded about the holder of the word it watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep waiting: the holder may be alive.
    Wait,
    /// The holder is fenced: nothing it posted can land any more; repair what it left.
    Fenced,
}

/// One waiter's watch over a held word and its holder's lease; see the module docs.
#[derive(Debug, Default)]
pub struct Watch {
    word: u64,
    since_ns: u64,
    last_look_ns: u64,
    /// The holder's slot as first read (status, heartbeat), and when.
    first: Option<(u64, u64, u64)>,
}

impl Watch {
    /// A watch that has seen nothing yet.
    pub const fn new() -> Watch {
        Watch { word: 0, since_ns: 0, last_look_ns: 0, first: None }
    }

    /// One failed look that found `word` held by member `member`: judges the holder when the
    /// word has not changed for long enough, and fences it when it is dead.
    pub async fn look<T: Transport>(
        &mut self,
        c: &Client<T>,
        word: u64,
        member: u64,
    ) -> IndexResult<Verdict> {
        let now = c.now_ns();
        let lease = c.transport().lease_ns();
        let paused = now.saturating_sub(self.last_look_ns) > lease;
        self.last_look_ns = now;
        if word != self.word || paused || self.since_ns == 0 {
            // A new holder, or this waiter was descheduled itself: start over.
            *self = Watch { word, since_ns: now.max(1), last_look_ns: now, first: None };
            return Ok(Verdict::Wait);
        }
        if now - self.since_ns < lease {
            return Ok(Verdict::Wait);
        }
        let (slot, _) = parse_member(member);
        let mut b = [0u8; 16];
        c.read(slot_addr(slot), &mut b).await?;
        let s = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let beat = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        if state_of(s) != LIVE || !same_incarnation(s, member) {
            // Fenced already, being fenced (a judge may have died mid-way), or gone: fencing
            // again is harmless and makes sure.
            fence(c, member, s).await?;
            return Ok(Verdict::Fenced);
        }
        match self.first {
            None => {
                self.first = Some((s, beat, now));
                Ok(Verdict::Wait)
            }
            Some((_, first_beat, _)) if first_beat != beat => {
                // It renewed: alive, merely slow. Watch afresh.
                self.first = Some((s, beat, now));
                self.since_ns = now;
                Ok(Verdict::Wait)
            }
            Some((_, _, at)) if now - at < (DEAD_AFTER_LEASES - 1) * lease => Ok(Verdict::Wait),
            Some(_) => {
                fence(c, member, s).await?;
                Ok(Verdict::Fenced)
            }
        }
    }
}

/// A [`Watch`] for a wait that runs its own retry loop (an index waiting for another client's
/// split or merge to end, re-reading what it needs): the wait looks at the holder only once it
/// has lasted half a lease, then once a quarter lease ([`WaitWatch::due`]). A wait that ends
/// normally costs nothing more, and a dead holder is still judged in [`DEAD_AFTER_LEASES`]
/// leases and a little: the looks are never a lease apart, so the watch never restarts.
#[derive(Debug, Default)]
pub struct WaitWatch {
    began_ns: u64,
    looked_ns: u64,
    /// The watch over the holder's word, for [`Watch::look`] on the due looks.
    pub watch: Watch,
}

impl WaitWatch {
    /// A wait that has not looked yet.
    pub const fn new() -> WaitWatch {
        WaitWatch { began_ns: 0, looked_ns: 0, watch: Watch::new() }
    }

    /// Whether this failed look goes on to the holder (the first one only starts the clock).
    pub fn due<T: Transport>(&mut self, c: &Client<T>) -> bool {
        let now = c.now_ns().max(1);
        let lease = c.transport().lease_ns();
        if self.began_ns == 0 {
            self.began_ns = now;
            return false;
        }
        if now - self.began_ns < lease / 2 || now.saturating_sub(self.looked_ns) < lease / 4 {
            return false;
        }
        self.looked_ns = now;
        true
    }
}

/// One judge's sightings of one member that holds a word, for a judge that looks at several
/// holders in rounds between other work, so that its looks at one may be more than a lease
/// apart (a [`Watch`] would start over): the same rules from two reads of the member's slot
/// that the judge makes itself. Dead means: the two reads, at least [`DEAD_AFTER_LEASES`]
/// leases apart on the judge's own clock, show the same heartbeat with the status LIVE for the
/// same incarnation, while the held word stayed the same (a word that names one acquisition or
/// one entry of its own, so the same word at both looks is one hold that has not ended); then it
/// is fenced before the verdict. Any change starts the count over.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sighting {
    word: u64,
    status: u64,
    beat: u64,
    at_ns: u64,
}

impl Sighting {
    /// A judge that has seen nothing yet.
    pub const fn new() -> Sighting {
        Sighting { word: 0, status: 0, beat: 0, at_ns: 0 }
    }

    /// One look at `member`, holding `word`, whose slot the judge just read as status `s` and
    /// heartbeat `beat`.
    pub async fn look<T: Transport>(
        &mut self,
        c: &Client<T>,
        word: u64,
        member: u64,
        s: u64,
        beat: u64,
    ) -> IndexResult<Verdict> {
        if state_of(s) != LIVE || !same_incarnation(s, member) {
            // Fenced already, being fenced, or gone: fencing again is harmless and makes sure.
            fence(c, member, s).await?;
            return Ok(Verdict::Fenced);
        }
        let (now, lease) = (c.now_ns(), c.transport().lease_ns());
        let same = (self.word, self.status, self.beat) == (word, s, beat);
        if self.at_ns == 0 || !same {
            *self = Sighting { word, status: s, beat, at_ns: now.max(1) };
            return Ok(Verdict::Wait);
        }
        if now.saturating_sub(self.at_ns) < DEAD_AFTER_LEASES * lease {
            return Ok(Verdict::Wait);
        }
        fence(c, member, s).await?;
        Ok(Verdict::Fenced)
    }
}

/// Fences member `member`, whose slot status was read as `s`: LIVE → FENCING by CAS (unless a
/// judge got there first), a fence on every memory node, FENCING → FENCED.
async fn fence<T: Transport>(c: &Client<T>, member: u64, s: u64) -> IndexResult<()> {
    let (slot, _) = parse_member(member);
    let addr = slot_addr(slot);
    let mut s = s;
    if state_of(s) == LIVE && same_incarnation(s, member) {
        let fencing = status(FENCING, incarnation_of(s));
        let old = c.cas(addr, s, fencing).await?;
        s = if old == s { fencing } else { old };
    }
    match c.fence(member).await {
        Ok(()) => {}
        Err(FabricError::Unsupported(what)) => {
            return Err(IndexError::Unsupported(format!(
                "a dead client holds a lock and this transport cannot {what}, so it cannot be \
                 released safely"
            )))
        }
        Err(e) => return Err(e.into()),
    }
    if state_of(s) == FENCING && same_incarnation(s, member) {
        c.cas(addr, s, status(FENCED, incarnation_of(s))).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_pinned() {
        assert_eq!(status(LIVE, 7), 0x4000_0000_0000_0007);
        assert_eq!(state_of(status(FENCED, 9)), FENCED);
        assert_eq!(incarnation_of(status(FENCING, 9)), 9);
        let m = member_word(2047, (1 << 19) + 5);
        assert_eq!(m, 1 << 30 | 2047 << 19 | 5);
        assert!(m < 1 << MEMBER_BITS && m != 0);
        assert_eq!(parse_member(m), (2047, 5));
        assert!(same_incarnation(status(LIVE, (1 << 19) + 5), m));
        assert!(!same_incarnation(status(LIVE, 6), m));
        assert_eq!(slot_addr(3), GlobalAddr::new(0, 0x2030));
    }
}
