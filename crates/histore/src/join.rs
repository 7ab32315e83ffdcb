//! A replacement replica's side of a rebuild: learning a view's log from its leader, loading the
//! leader's snapshot, and joining the next view. The client that drives a rebuild is in
//! `crate::rebuild`.
//!
//! # Learning while the group serves
//!
//! A replacement starts as a *learner* of the group's view `v`, of which it is not a member
//! (JOIN). Then, per partition (COPY), it asks `v`'s leader for a snapshot (SNAPSHOT). The leader
//! takes it under the partition's leader turn and lock: every (key, slot word) its structure
//! holds, which is exactly its log applied through `s`, and its writers' results up to `s`. In the
//! same critical section it adds the replacement to the partition's learners, so that its next
//! leader turn, which starts at `s + 1`, ships to the replacement as well as to the backups.
//! Writes go on meanwhile: the replacement logs the SHIPs that arrive before or while the
//! snapshot comes in (in chunks), and applies nothing until it is all in. Writes never wait on a
//! learner: one that misses a SHIP (or refuses it) is dropped by the leader, and is then dropped
//! by the join too (below). The paper's "retrieve the skiplist from the temporary primary" and
//! "fetch the hash table from the primary" are this snapshot; building the hash table (or the
//! skiplist) from it is the replacement's CPU work.
//!
//! # Joining
//!
//! The driver then changes the view to `v + 1` with the replacement in it (a hash-table
//! replacement of HiStore takes the primary role back). A learner adopts only `v + 1`, and only
//! with its snapshot in and no hole in its log: its log is then a prefix of the leader's, which
//! is all that the activation of `v + 1` needs ([`crate::failover`]): the new primary collects
//! the longest tail and ships every entry it has not applied to every member. If the learner
//! missed entries that another member already dropped, the activation finds out (a TAIL or a
//! SHIP with a hole) and answers *down* for the learner's node, and the next view drops it.
//! Before it joins, a learner answers *down* to every request but its leader's SHIPs: a client
//! that asks it as a member of an older view means the replica its node held before it crashed.

use dmindex_fabric::service::{MnContext, ServiceError};

use crate::cpu;
use crate::proto::{self, Put, Reader};
use crate::replica::{Refused, Replica, Written};
use crate::SERVICE;

/// Pairs one SNAPSHOT reply carries.
pub const SNAPSHOT_CHUNK: usize = 4096;

/// A snapshot a leader hands out in chunks.
pub(crate) struct Snapshot {
    pairs: Vec<(Box<[u8]>, u64)>,
}

impl Replica {
    /// Whether a SHIP of `epoch` is for a replacement learning it (`Ok(true)`), for a member
    /// (`Ok(false)`), or refused.
    pub(crate) fn learning(&self, epoch: u32) -> Result<bool, Refused> {
        let s = *self.serving.lock().expect("view lock");
        if !s.joining {
            // A member takes SHIPs of its view, and a replacement that joined also those of the
            // view it learned: the old leader's last turns, which members that have not adopted
            // the next view may still acknowledge (without them its log would have a hole the
            // join cannot see).
            return match s.view.epoch == epoch || s.learned == Some(epoch) {
                true => Ok(false),
                false => Err(Refused::Stale),
            };
        }
        match !s.broken && s.view.epoch == epoch {
            true => Ok(true),
            false => Err(Refused::Stale),
        }
    }

    /// A replacement whose log has a hole stops learning: it refuses the leader's SHIPs (which
    /// drops it there) and every view.
    pub(crate) fn stop_learning(&self) -> Refused {
        self.serving.lock().expect("view lock").broken = true;
        Refused::Stale
    }

    /// PING: whether this replica serves `epoch` (a client checking a node it lost touch with).
    /// A replacement asked about the view it is to join next has not adopted it yet: stale.
    pub fn ping(&self, epoch: u32) -> Result<(), Refused> {
        let s = *self.serving.lock().expect("view lock");
        if s.joining && !s.broken && epoch == s.view.epoch.wrapping_add(1) {
            return Err(Refused::Stale);
        }
        self.in_view(epoch, false).map(drop)
    }

    /// SNAPSHOT on a leader: chunk `from` of partition `p`'s snapshot for replacement `learner`;
    /// the first (`from` = 0) takes the snapshot and makes `learner` a learner of `p`.
    pub fn snapshot(
        &self,
        ctx: &MnContext<'_>,
        epoch: u32,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), Refused> {
        let view = self.in_view(epoch, true)?;
        let p = r.u16()? as usize;
        let learner = r.u8()?;
        let from = r.u64()? as usize;
        r.end()?;
        let bad = |m: String| Refused::Bad(ServiceError::BadRequest(m));
        if view.leader != self.setup.replica {
            return Err(bad(format!("replica {} does not lead view {epoch}", self.setup.replica)));
        }
        if p >= self.parts.len()
            || learner as usize >= self.setup.mode.replicas()
            || view.has(learner as usize)
        {
            return Err(bad(format!("snapshot of partition {p} for replica {learner}")));
        }
        let mut snaps = self.snapshots.lock().expect("snapshots");
        if from == 0 {
            let _lead = self.parts[p].lead.lock().expect("leader lock");
            let mut st = self.lock(p);
            let pairs = st.structure.pairs(ctx);
            let applied = st.applied;
            out.u64(applied);
            out.u64(pairs.len() as u64);
            let done: Vec<(&u64, &Written)> = st
                .writers
                .iter()
                .filter(|(_, w)| w.existed.is_some() && w.pos <= applied)
                .collect();
            out.u32(done.len() as u32);
            for (&writer, w) in done {
                out.u64(writer);
                out.u32(w.seq);
                out.u64(w.pos);
                out.u8(u8::from(w.existed == Some(true)));
            }
            if !st.learners.contains(&learner) {
                st.learners.push(learner);
            }
            snaps.insert((learner, p), Snapshot { pairs });
        }
        let snap = snaps.get(&(learner, p)).ok_or_else(|| {
            Refused::Bad(ServiceError::Failed(format!(
                "no snapshot of partition {p} is open for replica {learner}"
            )))
        })?;
        let chunk = snap.pairs.get(from..).unwrap_or_default();
        let chunk = &chunk[..chunk.len().min(SNAPSHOT_CHUNK)];
        out.u32(chunk.len() as u32);
        for (k, w) in chunk {
            out.key(k);
            out.u64(*w);
        }
        if from + chunk.len() >= snap.pairs.len() {
            snaps.remove(&(learner, p));
        }
        Ok(())
    }

    /// COPY on a replacement: loads partition `p` from its view's leader, chunk by chunk, then
    /// applies the entries it logged meanwhile that are committed.
    pub fn copy(&self, ctx: &MnContext<'_>, r: &mut Reader<'_>) -> Result<(), Refused> {
        let p = r.u16()? as usize;
        r.end()?;
        let s = *self.serving.lock().expect("view lock");
        if !s.joining || s.broken {
            return Err(Refused::Stale);
        }
        if p >= self.parts.len() || !self.lock(p).loading {
            return Err(Refused::Bad(ServiceError::BadRequest(format!(
                "partition {p} is not waiting for a copy"
            ))));
        }
        let leader = s.view.leader;
        let (mut from, mut total) = (0u64, 0u64);
        loop {
            let mut ask = Vec::with_capacity(proto::HEAD + 11);
            ask.head(self.head(proto::SNAPSHOT, leader, s.view.epoch));
            ask.u16(p as u16);
            ask.u8(self.setup.replica);
            ask.u64(from);
            ctx.charge(cpu::SEND_NS);
            let reply = ctx
                .peers
                .call(self.setup.nodes[leader as usize], SERVICE, &ask)
                .map_err(Refused::peer)?;
            let mut rd = Refused::status(&reply)?;
            let mut st = self.lock(p);
            if from == 0 {
                let applied = rd.u64()?;
                total = rd.u64()?;
                if !st.based {
                    st.base(applied);
                } else if st.applied != applied {
                    // SHIPs came that do not follow this snapshot.
                    drop(st);
                    return Err(self.stop_learning());
                }
                for _ in 0..rd.u32()? {
                    let writer = rd.u64()?;
                    let w =
                        Written { seq: rd.u32()?, pos: rd.u64()?, existed: Some(rd.u8()? != 0) };
                    // SHIPs that came first carry newer entries of the same writer.
                    st.writers.entry(writer).or_insert(w);
                }
            }
            let n = rd.u32()? as u64;
            if st.retired {
                return Err(Refused::Stale);
            }
            for _ in 0..n {
                let key: Box<[u8]> = rd.key()?.into();
                let word = rd.u64()?;
                let bucket = self.setup.place(&key).bucket;
                st.structure.insert(ctx, bucket, key, word)?;
            }
            rd.end()?;
            from += n;
            if from >= total || n == 0 {
                if from != total {
                    return Err(Refused::Bad(ServiceError::Failed(format!(
                        "snapshot of partition {p} ended after {from} of {total} pairs"
                    ))));
                }
                st.loading = false;
                let through = st.committed;
                st.apply_through(ctx, &self.setup, through)?;
                return Ok(());
            }
        }
    }
}
