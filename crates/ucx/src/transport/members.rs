//! Cluster members and fencing, the client's side ([`crate::sessions`] is the memnode's).
//!
//! A client registered as a member holds, per memnode, a session (a slot and its key, drawn by
//! the memnode) and its verb messages speak for it, so that a fence of the member stops them at
//! the memnode. A registered client sends no verb message without its session: where it has none
//! (its registration with that memnode failed) the verb fails instead, as a message no fence
//! could reach would be unsafe. A reconnect to a new incarnation of a memnode registers with it
//! again (the old one's sessions went with it); dropping the client ends its sessions.

use dmindex_fabric::{FabricError, GlobalAddr, NodeId, Result};

use super::wait::verb_result;
use super::{unavailable, NodeConn, UcxTransport};
use crate::auth::VERB_KEY;
use crate::message_verbs::{Status, Verb};

/// A client's session with one incarnation of a memnode.
#[derive(Clone, Copy, Debug)]
pub(super) struct Session {
    pub(super) generation: u64,
    pub(super) slot: u32,
    pub(super) key: [u8; VERB_KEY],
}

impl UcxTransport {
    /// The session and key a verb message to `to` carries: this client's session there, or none
    /// and the memnode's verb key for a client that is no member (and for a REGISTER, which
    /// opens a session as the memnode's client). One cell read per message.
    #[inline]
    pub(super) fn credentials(
        &self,
        node: NodeId,
        to: &NodeConn,
        verb: Verb,
    ) -> Result<(u32, [u8; VERB_KEY])> {
        if let Verb::Register { .. } = verb {
            return Ok((0, to.verb_key));
        }
        match self.sessions[node as usize].get() {
            Some(s) if s.generation == to.generation => Ok((s.slot, s.key)),
            _ if self.member.get() == 0 => Ok((0, to.verb_key)),
            _ => Err(unavailable(
                node,
                "this client is registered as a cluster member but holds no session with the \
                 memnode (its registration there failed): register again",
            )),
        }
    }

    /// Registers this client as `member` with memory node `node` (ending the session it held
    /// there); `Fenced` if the memnode had fenced `member` already (the session it keeps then
    /// refuses every verb).
    pub(super) async fn register_with(&self, node: NodeId, member: u64) -> Result<()> {
        let to = self.node(node)?;
        self.end_session(node);
        let at = GlobalAddr::new(node, 0);
        let verb = Verb::Register { member, one_sided: to.one_sided };
        let a = self.post_message(&to, at, verb, &[], true)?.expect("a reply was asked for");
        let (reply, key) = a.delivered(self.shared.timeout).await?;
        if !matches!(reply.status, Status::Ok | Status::Fenced) {
            return verb_result(&reply, &self.info, at, 0);
        }
        let (Ok(slot @ 1..), Ok(key)) = (u32::try_from(reply.value), key.try_into()) else {
            return Err(unavailable(node, "the memnode answered a registration malformed"));
        };
        let generation = to.generation;
        self.sessions[node as usize].set(Some(Session { generation, slot, key }));
        match reply.status {
            Status::Fenced => Err(FabricError::Fenced { node }),
            _ => Ok(()),
        }
    }

    /// Fences `member` at memory node `node`: one FENCE message, answered once no verb of the
    /// member's executes there ([`crate::sessions`]).
    pub(super) async fn fence_at(&self, node: NodeId, member: u64) -> Result<()> {
        let to = self.node(node)?;
        let at = GlobalAddr::new(node, 0);
        let verb = Verb::Fence { member };
        let a = self.post_message(&to, at, verb, &[], true)?.expect("a reply was asked for");
        let (reply, _) = a.delivered(self.shared.timeout).await?;
        verb_result(&reply, &self.info, at, 0)
    }

    /// Ends this client's session with `node`, if it holds one there that this thread's
    /// endpoint still reaches: a message without reply. Otherwise the session went with the
    /// memnode's incarnation, or stays there unused (the endpoint failed).
    pub(super) fn end_session(&self, node: NodeId) {
        let Some(s) = self.sessions[node as usize].take() else { return };
        let to = self.conn.nodes.borrow()[node as usize].clone();
        let Some(to) = to.filter(|t| t.generation == s.generation && t.ep.failure().is_none())
        else {
            return;
        };
        let at = GlobalAddr::new(node, 0);
        // A failed send leaves the session unused; nothing else depends on it.
        let _ = self.post_request(&to, at, Verb::End, false, (s.slot, s.key), (0, 0), |_| {});
    }
}
