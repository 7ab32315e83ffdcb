//! Cluster members and fencing on a memnode: the sessions verb messages speak for.
//!
//! # Sessions
//!
//! A client that registers as cluster member M (`Transport::register_member`) sends each memnode
//! a REGISTER message ([`crate::message_verbs`]) and gets a session there: a slot number and a
//! session key of 128 random bits. Its verb messages then carry the slot in their header and the
//! session key where other messages carry the memnode's verb key, so the memnode knows which
//! session each message speaks for, whatever endpoint it came on (the clients of one thread
//! share one endpoint per memnode, so an endpoint names no client). A REGISTER itself carries the
//! memnode's verb key: only authenticated clients open sessions, and only a session's own client,
//! which alone learnt its key, speaks for it.
//!
//! # Fencing
//!
//! A FENCE of member M, from any authenticated client that is not fenced itself, marks every
//! session of M here as fenced and remembers M, so that a later registration as M is fenced from
//! its start (a zombie paused between its registrations with two memnodes cannot register after
//! the fence and write). A fenced session's messages are refused (status Fenced) and touch
//! nothing; its key stays valid so that its client learns why. The session's client must
//! register again, as another member, before it writes.
//!
//! When the answer comes: the memnode's worker is single-threaded and progressed by its main
//! thread alone (`server`); UCX hands a verb message to the handler from within that progress,
//! one message at a time and whole (requests are sent eagerly; a rendezvous is dropped), and the
//! handler executes the verb completely before it returns. A FENCE is such a message. So while
//! its handler runs, no verb of any client is executing here, and every verb message handled
//! after it finds its session fenced: the reply, sent from the handler, leaves once no verb of
//! the member's executes here. A verb already executed stays executed; one that UCX has received
//! but not yet handed over is refused.
//!
//! # What a fence does not cover
//!
//! * Verbs that reach the pool one-sidedly (shared memory, RDMA) never reach the memnode's CPU.
//!   A session says at registration whether its verbs do; a fence of a member with such a session
//!   here marks it all the same but answers Unfenceable, which the client reports as
//!   `FabricError::Unsupported`: nothing here can stop those verbs (that would take a remote key
//!   per client that the memnode revokes, which UCX's shared-memory transport cannot give).
//! * Two-sided calls travel on control connections that clients share and are not tied to
//!   sessions; a fenced client's calls are still served.
//! * A restarted memnode is a new process: its sessions and fenced members went with its pool.
//!
//! # Cost
//!
//! Per verb message: the session's entry (one index into a vector) and one test of its flag,
//! besides the key comparison every verb message had. Registrations, fences and ends are rare:
//! a registration draws a key; a fence scans the sessions.

use std::collections::HashSet;

use crate::auth::{keys_equal, random, VERB_KEY};
use crate::message_verbs::Status;

/// Sessions a memnode keeps at once; a registration past them is refused (status Full).
pub const MAX_SESSIONS: usize = 1 << 16;
/// Members a memnode remembers as fenced; a fence of another one past them is refused (status
/// Full) after it has marked the member's sessions, so its caller does not go on as if it held.
pub const MAX_FENCED: usize = 1 << 18;

/// One session: whose it is, the key its messages carry, and whether it may still act.
#[derive(Clone, Copy)]
struct Session {
    key: [u8; VERB_KEY],
    member: u64,
    /// Its verbs reach the pool one-sidedly, out of a fence's reach.
    one_sided: bool,
    fenced: bool,
    /// Ended (its slot may be given again, with a new key).
    ended: bool,
}

/// What a registration gave: the slot and key the session's messages carry, and whether it is
/// fenced from its start (its member was fenced here before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    pub slot: u32,
    pub key: [u8; VERB_KEY],
    pub fenced: bool,
}

/// What a fence did: how many sessions it marked, and whether one of them reaches the pool
/// one-sidedly (so the fence cannot hold for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fenced {
    pub sessions: u64,
    pub one_sided: bool,
}

/// A memnode's sessions and fenced members, owned by its progress thread.
pub struct Sessions {
    verb_key: [u8; VERB_KEY],
    /// Slot `s` (1, 2, …) at index `s - 1`; slot 0 is "no session".
    table: Vec<Session>,
    /// Ended slots, to give again.
    free: Vec<u32>,
    fenced: HashSet<u64>,
}

impl Sessions {
    /// No session yet; messages without one must carry `verb_key`.
    pub fn new(verb_key: [u8; VERB_KEY]) -> Sessions {
        Sessions { verb_key, table: Vec::new(), free: Vec::new(), fenced: HashSet::new() }
    }

    /// Whether a message for `slot` carrying `key` may act: `Refused` if the key is not the
    /// memnode's (slot 0) or the session's (a slot never given, or ended, has none), `Fenced` if
    /// the session was fenced. Every verb message's check: an index and a flag.
    #[inline]
    pub fn admit(&self, slot: u32, key: &[u8; VERB_KEY]) -> Result<(), Status> {
        if slot == 0 {
            return match keys_equal(key, &self.verb_key) {
                true => Ok(()),
                false => Err(Status::Refused),
            };
        }
        match self.table.get(slot as usize - 1) {
            Some(s) if !s.ended && keys_equal(key, &s.key) => match s.fenced {
                false => Ok(()),
                true => Err(Status::Fenced),
            },
            _ => Err(Status::Refused),
        }
    }

    /// Opens a session for `member` (non-zero), whose verbs reach the pool one-sidedly if
    /// `one_sided`; `Full` if [`MAX_SESSIONS`] are open.
    pub fn register(&mut self, member: u64, one_sided: bool) -> Result<Registered, Status> {
        let fenced = self.fenced.contains(&member);
        let session = Session { key: random(), member, one_sided, fenced, ended: false };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.table[slot as usize - 1] = session;
                slot
            }
            None if self.table.len() < MAX_SESSIONS => {
                self.table.push(session);
                self.table.len() as u32
            }
            None => return Err(Status::Full),
        };
        Ok(Registered { slot, key: session.key, fenced })
    }

    /// Fences `member`: marks its sessions and remembers it for later registrations. `Full` if
    /// [`MAX_FENCED`] other members are remembered already (its sessions are marked even so).
    pub fn fence(&mut self, member: u64) -> Result<Fenced, Status> {
        let mut done = Fenced { sessions: 0, one_sided: false };
        for s in self.table.iter_mut().filter(|s| !s.ended && s.member == member) {
            s.fenced = true;
            done.sessions += 1;
            done.one_sided |= s.one_sided;
        }
        if !self.fenced.contains(&member) {
            if self.fenced.len() >= MAX_FENCED {
                return Err(Status::Full);
            }
            self.fenced.insert(member);
        }
        Ok(done)
    }

    /// Ends session `slot` (its client is going away or registering anew), fenced or not; its
    /// slot is given again later with a new key, so a message with the old one is refused.
    /// The caller checked the session's key ([`Sessions::admit`]).
    pub fn end(&mut self, slot: u32) {
        let Some(s) = slot.checked_sub(1).and_then(|i| self.table.get_mut(i as usize)) else {
            return;
        };
        if !s.ended {
            s.ended = true;
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::memory::Region;
    use dmindex_fabric::AtomicOp;

    use super::*;
    use crate::message_verbs::{execute, push_batched, Reply, Request, Verb};

    const KEY: [u8; VERB_KEY] = [7; VERB_KEY];

    #[test]
    fn a_session_speaks_only_with_its_own_key_until_fenced() {
        let mut s = Sessions::new(KEY);
        assert_eq!(s.admit(0, &KEY), Ok(()));
        assert_eq!(s.admit(0, &[0; VERB_KEY]), Err(Status::Refused));
        let a = s.register(0xA, false).unwrap();
        let b = s.register(0xB, false).unwrap();
        assert_eq!((a.slot, b.slot, a.fenced), (1, 2, false));
        assert_ne!(a.key, b.key);
        assert_eq!(s.admit(a.slot, &a.key), Ok(()));
        // Another session's key, the memnode's, or a slot never given: refused.
        assert_eq!(s.admit(a.slot, &b.key), Err(Status::Refused));
        assert_eq!(s.admit(a.slot, &KEY), Err(Status::Refused));
        assert_eq!(s.admit(9, &a.key), Err(Status::Refused));
        assert_eq!(s.admit(u32::MAX, &a.key), Err(Status::Refused));
        // Fencing A leaves B and unregistered clients alone.
        assert_eq!(s.fence(0xA), Ok(Fenced { sessions: 1, one_sided: false }));
        assert_eq!(s.admit(a.slot, &a.key), Err(Status::Fenced));
        assert_eq!(s.admit(b.slot, &b.key), Ok(()));
        assert_eq!(s.admit(0, &KEY), Ok(()));
        // Fencing it again marks the same session, and remembers nothing new.
        assert_eq!(s.fence(0xA).unwrap().sessions, 1);
        assert_eq!(s.fenced.len(), 1);
    }

    /// A member fenced before it registers (a zombie paused between its registrations with two
    /// memnodes) is fenced from its start; registering as another member is not.
    #[test]
    fn a_registration_after_the_fence_is_fenced_from_its_start() {
        let mut s = Sessions::new(KEY);
        assert_eq!(s.fence(0xA), Ok(Fenced { sessions: 0, one_sided: false }));
        let late = s.register(0xA, false).unwrap();
        assert!(late.fenced);
        assert_eq!(s.admit(late.slot, &late.key), Err(Status::Fenced));
        let again = s.register(0xA2, false).unwrap();
        assert_eq!((again.fenced, s.admit(again.slot, &again.key)), (false, Ok(())));
    }

    /// An ended slot is given again with a new key: the old key is refused there, and the new
    /// session is not fenced by its predecessor's fence.
    #[test]
    fn an_ended_slot_is_given_again_with_a_new_key() {
        let mut s = Sessions::new(KEY);
        let a = s.register(0xA, false).unwrap();
        s.fence(0xA).unwrap();
        s.end(a.slot);
        s.end(a.slot);
        s.end(0);
        s.end(77);
        assert_eq!(s.admit(a.slot, &a.key), Err(Status::Refused), "ended");
        let b = s.register(0xB, false).unwrap();
        assert_eq!(b.slot, a.slot, "the slot is given again");
        assert_eq!(s.admit(b.slot, &a.key), Err(Status::Refused), "the old key");
        assert_eq!(s.admit(b.slot, &b.key), Ok(()));
        assert_eq!(s.register(0xC, false).unwrap().slot, 2, "given once");
        // An ended session is not marked by a later fence of its member.
        assert_eq!(s.fence(0xA).unwrap().sessions, 0);
    }

    #[test]
    fn one_sided_sessions_are_marked_but_reported() {
        let mut s = Sessions::new(KEY);
        s.register(0xA, false).unwrap();
        s.register(0xA, true).unwrap();
        assert_eq!(s.fence(0xA), Ok(Fenced { sessions: 2, one_sided: true }));
    }

    #[test]
    fn sessions_and_fenced_members_are_bounded() {
        let mut s = Sessions::new(KEY);
        for i in 0..MAX_SESSIONS {
            s.register(i as u64 + 1, false).unwrap();
        }
        assert_eq!(s.register(1, false), Err(Status::Full));
        s.end(5);
        assert_eq!(s.register(1, false).unwrap().slot, 5);
        let mut s = Sessions::new(KEY);
        let a = s.register(u64::MAX, false).unwrap();
        for m in 1..=MAX_FENCED as u64 {
            s.fence(m).unwrap();
        }
        // Full: the member's sessions are marked all the same.
        assert_eq!(s.fence(u64::MAX), Err(Status::Full));
        assert_eq!(s.admit(a.slot, &a.key), Err(Status::Fenced));
        assert_eq!(s.fence(1), Ok(Fenced { sessions: 0, one_sided: false }), "known already");
    }

    /// A registered session's verbs run until its member is fenced; from then on every one of
    /// them (a WRITE, an atomic, a batch, a FLUSH, a FENCE) is refused as fenced and touches
    /// nothing, while other sessions and unregistered clients go on; its key, and only its key,
    /// still ends it.
    #[test]
    fn a_fenced_session_is_refused_and_others_are_not() {
        let mem = Region::new(4096);
        let mut sessions = Sessions::new(KEY);
        let mut exec = |session, key, verb, payload: &[u8]| {
            let req = Request { session, tag: 1, offset: 64, verb, key };
            let mut out = Vec::new();
            let r = execute(&mem, &mut sessions, &req, payload, &mut out).unwrap();
            (r, out)
        };
        let register = |member| Verb::Register { member, one_sided: false };
        // Without the memnode's key, no session opens and no fence is made.
        let (r, key) = exec(0, [0; VERB_KEY], register(0xA), &[]);
        assert_eq!((r.status, key.len()), (Status::Refused, 0));
        assert_eq!(
            exec(0, [0; VERB_KEY], Verb::Fence { member: 0xA }, &[]).0.status,
            Status::Refused
        );
        let (r, zombie_key) = exec(0, KEY, register(0xA), &[]);
        let (zombie, zombie_key): (u32, [u8; VERB_KEY]) =
            (r.value as u32, zombie_key.try_into().unwrap());
        assert_eq!((r.status, zombie), (Status::Ok, 1));
        let (r, other_key) = exec(0, KEY, register(0xB), &[]);
        let (other, other_key): (u32, [u8; VERB_KEY]) =
            (r.value as u32, other_key.try_into().unwrap());
        assert_eq!(exec(zombie, zombie_key, Verb::Write, &[1; 8]).0.status, Status::Ok);
        // A session registers no other (a client registers anew as the memnode's client).
        assert_eq!(exec(zombie, zombie_key, register(0xC), &[]).0.status, Status::Refused);
        let fence = Verb::Fence { member: 0xA };
        assert_eq!(
            exec(other, other_key, fence, &[]).0,
            Reply { tag: 1, status: Status::Ok, value: 1 }
        );
        let faa = Verb::Atomic(AtomicOp::Faa { delta: 1 });
        let mut batched = Vec::new();
        push_batched(&mut batched, 64, Verb::Write, &[2; 8]);
        push_batched(&mut batched, 64, faa, &[]);
        for (verb, payload) in [
            (Verb::Write, &[2u8; 8][..]),
            (faa, &[]),
            (Verb::Batch { count: 2 }, &batched[..]),
            (Verb::Flush, &[]),
            (Verb::Read { len: 8 }, &[]),
            (Verb::Fence { member: 0xB }, &[]),
        ] {
            let (r, out) = exec(zombie, zombie_key, verb, payload);
            assert_eq!((r.status, out.len()), (Status::Fenced, 0), "{verb:?}");
        }
        let mut b = [0u8; 16];
        mem.read(64, &mut b);
        assert_eq!(b, [[1; 8], [0; 8]].concat()[..], "nothing of the zombie's after the fence");
        assert_eq!(exec(other, other_key, faa, &[]).0.status, Status::Ok, "another member");
        let r = exec(0, KEY, faa, &[]).0;
        assert_eq!((r.status, r.value), (Status::Ok, 0x0101_0101_0101_0102), "no member");
        // Registering again as the fenced member gives a session fenced from its start.
        let (r, key) = exec(0, KEY, register(0xA), &[]);
        assert_eq!((r.status, key.len()), (Status::Fenced, VERB_KEY));
        // The zombie's END needs its key; then its slot is the next registration's.
        exec(zombie, other_key, Verb::End, &[]);
        assert_eq!(exec(zombie, zombie_key, Verb::Write, &[3; 8]).0.status, Status::Fenced);
        exec(zombie, zombie_key, Verb::End, &[]);
        assert_eq!(exec(zombie, zombie_key, Verb::Write, &[3; 8]).0.status, Status::Refused);
        assert_eq!(exec(0, KEY, register(0xD), &[]).0.value, zombie as u64);
        // A fence that meets a one-sided session says it cannot hold.
        exec(0, KEY, Verb::Register { member: 0xE, one_sided: true }, &[]);
        let r = exec(0, KEY, Verb::Fence { member: 0xE }, &[]).0;
        assert_eq!((r.status, r.value), (Status::Unfenceable, 1));
    }
}
