//! A replica's side of a view change: adopting a view, a new primary's activation, and the log
//! tails it collects. The client's side (who starts a change, who drives it) is in
//! [`crate::route`]; the view word itself is `dmindex_prim::view`.
//!
//! # Why no acknowledged write is lost
//!
//! A primary answers a write only after every backup of its view logged it. A change to a view
//! is adopted by each member it keeps *before* the new primary activates, and a member that
//! adopted epoch `e + 1` refuses a SHIP of epoch `e`: from the first adoption on, the old
//! primary can complete no write. So every write that was answered is in the log of every member
//! of the new view that was a member of the old one. A member that was not is a replacement
//! ([`crate::join`]): it learned the old view's log from its leader's snapshot on, and keeps
//! logging that leader's SHIPs of the old epoch after it adopted the new one; the activation
//! below checks that it holds every entry the new primary applied (each TAIL reply carries the
//! member's log end), and drops it from the view if not.
//!
//! # Bringing the logs level (activation)
//!
//! Within one view every member's log is a prefix of the primary's. When a view ends, the
//! members' logs are therefore prefixes of one sequence: the new primary asks every other member
//! for the entries past its own (TAIL), appends the longest tail, then runs one leader turn per
//! partition: it ships everything it has not applied to every member and applies it. Entries it
//! takes in this way were never answered (the old primary needed every acknowledgement); they
//! take effect now, at the latest before the view settles, and a retry of their writes finds
//! them by writer and sequence number.
//!
//! A backup applies only what the old primary had applied, and every member logged all of that;
//! so the new primary never asks for an entry another member has already dropped from its log.

use dmindex_fabric::service::{MnContext, ServiceError};
use dmindex_prim::view::View;

use crate::proto::{self, Put, Reader};
use crate::replica::{Refused, Replica, Serving};

impl Replica {
    /// ADOPT: serve `view` from now on; refuse an older one. A backup serves it at once (its
    /// reads take their cut from the primary, which refuses until it is activated); the primary
    /// waits for ACTIVATE.
    ///
    /// A replacement adopts only the view right after the one it learned, and only with its
    /// whole snapshot in and no hole in its log; otherwise it answers *down*, so that the view
    /// drops it again ([`crate::join`]).
    pub fn adopt(&self, view: View) -> Result<(), Refused> {
        let mut s = self.serving.lock().expect("view lock");
        if s.joining {
            let me = self.setup.replica as usize;
            let ready = !s.broken
                && view.epoch == s.view.epoch.wrapping_add(1)
                && view.has(me)
                && (0..self.parts.len()).all(|p| !self.lock(p).loading);
            if !ready {
                return Err(Refused::Down(self.node()));
            }
        } else if view.epoch < s.view.epoch {
            return Err(Refused::Stale);
        } else if view.epoch == s.view.epoch {
            return Ok(());
        }
        *s = Serving {
            view,
            active: view.leader != self.setup.replica,
            joining: false,
            broken: false,
            learned: s.joining.then_some(s.view.epoch),
        };
        drop(s);
        // Replacements learning the old view either are members now or start over.
        for p in 0..self.parts.len() {
            self.lock(p).learners.clear();
        }
        self.snapshots.lock().expect("snapshots").clear();
        Ok(())
    }

    /// ACTIVATE on the new primary: collect the members' tails, replicate and apply everything,
    /// then serve.
    pub fn activate(&self, ctx: &MnContext<'_>, epoch: u32) -> Result<(), Refused> {
        let view = self.in_view(epoch, false)?;
        if view.leader != self.setup.replica {
            return Err(Refused::Bad(ServiceError::BadRequest(format!(
                "replica {} does not lead view {epoch}",
                self.setup.replica
            ))));
        }
        if self.in_view(epoch, true).is_ok() {
            return Ok(());
        }
        self.level(ctx, view)?;
        for p in 0..self.parts.len() {
            let _lead = self.parts[p].lead.lock().expect("leader lock");
            self.replicate(ctx, view, p)?;
        }
        let mut s = self.serving.lock().expect("view lock");
        if s.view.epoch != epoch {
            return Err(Refused::Stale);
        }
        s.active = true;
        Ok(())
    }

    /// Appends, per partition, the longest tail another member of `view` holds past this log.
    fn level(&self, ctx: &MnContext<'_>, view: View) -> Result<(), Refused> {
        let others: Vec<usize> =
            view.slots().filter(|&s| s != self.setup.replica as usize).collect();
        if others.is_empty() {
            return Ok(());
        }
        let firsts: Vec<u64> = (0..self.parts.len()).map(|p| self.lock(p).appended + 1).collect();
        let mut body = Vec::with_capacity(2 + 8 * firsts.len());
        body.u16(firsts.len() as u16);
        for &f in &firsts {
            body.u64(f);
        }
        let replies = self.call_members(ctx, proto::TAIL, &others, view.epoch, &body);
        for (&member, reply) in others.iter().zip(replies) {
            let reply = reply.map_err(Refused::peer)?;
            let mut r = Refused::status(&reply)?;
            for (p, &first) in firsts.iter().enumerate() {
                let mut st = self.lock(p);
                if r.u64()? < st.applied {
                    // A replacement that missed entries this primary applied and dropped: it
                    // cannot be brought level, so the view drops it.
                    return Err(Refused::Unfit(self.setup.nodes[member]));
                }
                let n = r.u32()? as u64;
                // Tails are parts of one sequence: entries already taken from another are skipped.
                for seq in first..first + n {
                    st.take(seq, r.entry()?)?;
                }
            }
            r.end()?;
        }
        Ok(())
    }

    /// TAIL on a member of the new view: the entries of each partition from the asked sequence
    /// number on.
    pub fn tail(&self, epoch: u32, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), Refused> {
        let view = self.in_view(epoch, false)?;
        let n = r.u16()? as usize;
        if n != self.parts.len() {
            return Err(ServiceError::BadRequest(format!("TAIL of {n} partitions")).into());
        }
        for p in 0..n {
            let from = r.u64()?;
            let st = self.lock(p);
            if from <= st.applied {
                // The new primary lacks entries this member applied and dropped: only a
                // replacement that missed a SHIP can; it cannot lead, so the view drops it.
                return Err(Refused::Unfit(self.setup.nodes[view.leader as usize]));
            }
            let skip = (from - st.applied - 1) as usize;
            let count = st.log.len().saturating_sub(skip);
            out.u64(st.appended);
            out.u32(count as u32);
            for e in st.log.iter().skip(skip) {
                out.entry(e);
            }
        }
        r.end()?;
        Ok(())
    }
}
