//! A client that crashes at an awaited post, and what of that post still reaches memory.
//!
//! A crash fires where a client is about to post a verb or a doorbell batch it would wait for.
//! Half the time (a coin from the world's RNG) it dies before ringing the doorbell and nothing
//! of the post goes out. The other half it dies just after: the work requests are in its send
//! queue, and the requester's NIC executes them until the kernel tears the queue pair down and
//! drops the ones it has not sent. So some prefix of the post lands, in order (a reliable
//! connection executes its work requests in order, so a verb after one that did not land cannot
//! land):
//!
//! ```text
//!  doorbell:  [ v0 ][ v1 ][ v2 ][ v3 ]        k uniform in 1..=4, here k = 3
//!  lands:     [ v0 ][ v1 ][ v2'] - - - -      v2' = a prefix of v2 if v2 is a WRITE
//!                                              of more than one packet; v3 is dropped
//!  a WRITE:   | pkt 0 | pkt 1 | pkt 2 |..|    whole packets of mtu_bytes from its start,
//!             |<--- lands --->|               1..=all of them
//! ```
//!
//! The client never wakes: its task is dropped, and the verbs that went out complete with no one
//! waiting. Zero-wait WRITEs it posted earlier are already on the wire and land as before.
//!
//! ## Time to recover
//!
//! Every crash is logged ([`Crash`]): the client, the cluster member it had registered as, and
//! the instant. A survivor that judges the member dead fences it on every memory node in turn
//! (`Client::fence`, node 0 first); the first fence of that member on the last memory node that
//! is answered without error — the instant its answer reaches the fencing client — is when the
//! member counts as fenced, and by whom. Fences are rare (one per judged member per judge), so
//! the log costs nothing per verb; it grows by one entry per crash.

use super::{OpKind, World, PS_PER_NS};
use dmindex_fabric::GlobalAddr;

/// A client that crashed, and when a survivor had fenced the member it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The crashed client ([`crate::SimTransport::id`]).
    pub client: u32,
    /// The cluster member it had registered as (0: none; it never joined, so it held nothing
    /// a survivor could name).
    pub member: u64,
    /// Virtual instant of the crash, ns.
    pub at_ns: u64,
    /// The first fence of `member` answered on the last memory node: the fencing client and the
    /// instant the answer reached it, ns.
    pub fenced: Option<(u32, u64)>,
}

impl World {
    /// Whether the client should crash at this verb boundary (and marks it if so).
    fn crash_here(&mut self, client: u32) -> bool {
        let armed = &mut self.clients[client as usize].crash_in;
        if let Some(n) = armed.take() {
            if n <= 1 {
                self.crash_client(client);
                return true;
            }
            *armed = Some(n - 1);
        }
        let f = &self.faults;
        if f.crash_prob > 0.0 && self.crashes < f.max_crashes && self.chance(self.faults.crash_prob)
        {
            self.crash_client(client);
            return true;
        }
        false
    }

    /// Marks `client` crashed now: its task is dropped when it yields.
    pub(crate) fn crash_client(&mut self, client: u32) {
        self.crashes += 1;
        self.crash_current = true;
        let c = &mut self.clients[client as usize];
        c.crashed = true;
        let member = c.member;
        self.crash_log.push(Crash { client, member, at_ns: self.now / PS_PER_NS, fenced: None });
    }

    /// A fence of `member` by `client` was answered without error on memory node `node`: on the
    /// last node, the member is fenced everywhere (nodes are fenced in order).
    pub(crate) fn fence_answered(&mut self, client: u32, node: usize, member: u64) {
        if node + 1 != self.mn_nics.len() {
            return;
        }
        let now = self.now / PS_PER_NS;
        for c in &mut self.crash_log {
            if c.member == member && c.fenced.is_none() {
                c.fenced = Some((client, now));
            }
        }
    }

    /// Whether `client` crashes at an awaited post of `verbs` work requests (one doorbell), and
    /// if so how many of them went out before it died: `None`, no crash; `Some(0)`, the doorbell
    /// was never rung (always, for a client already crashed); `Some(k)`, the first `k` (uniform
    /// in `1..=verbs`) go out. Draws from the RNG only when a crash fires, so runs without
    /// crashes replay as before.
    pub(crate) fn crash_at_post(&mut self, client: u32, verbs: usize) -> Option<usize> {
        if self.clients[client as usize].crashed {
            // Dead already: a doorbell of the same round, rung after the one it died at, never
            // goes out (its task is dropped at its next yield; nothing it rings lands).
            return Some(0);
        }
        if !self.crash_here(client) {
            return None;
        }
        if verbs == 0 || self.rng_bit() {
            return Some(0);
        }
        Some(1 + self.uniform(verbs as u64 - 1) as usize)
    }

    /// One fair coin from the world's RNG.
    fn rng_bit(&mut self) -> bool {
        self.uniform(1) == 0
    }

    /// Posts at `ready` a verb of a client that has crashed: it goes out and takes effect, and
    /// nobody waits for its completion. `last`: it is the last verb that went out, so if it is a
    /// WRITE of more than one packet the queue pair may have been torn down mid-message, and
    /// only a prefix of whole packets lands.
    pub(crate) fn post_orphan(
        &mut self,
        ready: u64,
        client: u32,
        kind: OpKind,
        addr: GlobalAddr,
        mut buf: Vec<u8>,
        last: bool,
    ) {
        if last && matches!(kind, OpKind::Write) {
            let sent = self.packets_sent(buf.len());
            buf.truncate(sent);
        }
        let op = self.post(ready, client, kind, addr, buf, false);
        self.ops[op as usize].abandoned = true;
    }

    /// How many of a `len`-byte WRITE's bytes left the requester before its queue pair was torn
    /// down: a uniform number of whole packets, from the first to all of them.
    ///
    /// The responder places an RC WRITE packet by packet, each at its offset in the message, and
    /// every packet but the last carries one path MTU of payload. The InfiniBand Architecture
    /// Specification (vol. 1) allows a path MTU of 256, 512, 1024, 2048 or 4096 bytes, the same
    /// five values as the verbs API's `ibv_mtu`, and RoCE uses the same set: a WRITE that fits
    /// one packet of the largest, 4096, is whole or absent on a 4096-byte path, a longer one may
    /// be cut on any path. The model's path MTU is `mtu_bytes` (4096 in the presets but CHIME's
    /// RoCE testbed, 1024): the cut points are the packets the wire model sent.
    fn packets_sent(&mut self, len: usize) -> usize {
        let mtu = self.net.mtu_bytes as usize;
        let packets = len.div_ceil(mtu);
        if packets <= 1 {
            return len;
        }
        let sent = 1 + self.uniform(packets as u64 - 1) as usize;
        (sent * mtu).min(len)
    }
}
