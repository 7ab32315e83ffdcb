//! The client's side of views: which view a handle acts in, and what it does when an attempt
//! misses (a replica refused the view, or a node did not answer).
//!
//! # Failover, driven by clients
//!
//! Each handle caches every group's view word. An operation is tried in the cached view; if it
//! misses:
//!
//! * **stale**: reload the word (a change happened or is under way; drive it to the end);
//! * **down(node)**: if the word still holds the view used, CAS it to the view without the
//!   replicas on that node (the paper's primary-down case makes a backup the temporary primary;
//!   the backup-down case leaves writes one acknowledgement to wait for), then drive the change:
//!   ADOPT at every member, ACTIVATE at the leader, CAS to stable. A change that meets another
//!   dead member removes it too.
//!
//! Writes are retried with the same writer and sequence number, which the replicas deduplicate,
//! so a write whose first attempt took effect before the failure is not applied twice and is
//! answered with its first result. A handle gives up after [`MAX_ATTEMPTS`] misses in one
//! operation.
//!
//! The data server that holds the view words (node 0) is outside the failure model, as the
//! paper's configuration service is.

use std::sync::atomic::Ordering;

use dmindex_fabric::{Client, FabricError, NodeId, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::view::{View, ViewWord};

use crate::layout::Descriptor;
use crate::proto::{self, Put, Reader, Status};
use crate::{Store, SERVICE};

/// Misses one operation tolerates before it fails.
pub const MAX_ATTEMPTS: u32 = 16;

/// How one attempt of an operation missed.
#[derive(Debug)]
pub(crate) enum Miss {
    /// A replica holds another view.
    Stale,
    /// A node did not answer (or a replica could not reach it).
    Down(NodeId),
    /// Anything else: the operation fails.
    Fatal(IndexError),
}

impl From<FabricError> for Miss {
    fn from(e: FabricError) -> Miss {
        match e {
            FabricError::Unavailable { node, .. } => Miss::Down(node),
            e => Miss::Fatal(e.into()),
        }
    }
}

impl From<IndexError> for Miss {
    fn from(e: IndexError) -> Miss {
        match e {
            IndexError::Fabric(e) => e.into(),
            e => Miss::Fatal(e),
        }
    }
}

/// The body of a reply, or how its status says the attempt missed.
pub(crate) fn status(reply: &[u8]) -> Result<Reader<'_>, Miss> {
    match proto::status(reply) {
        Ok(Status::Done(r)) => Ok(r),
        Ok(Status::Stale) => Err(Miss::Stale),
        Ok(Status::Down(node)) => Err(Miss::Down(node)),
        Err(e) => Err(Miss::Fatal(IndexError::Corrupt(format!("reply: {e:?}")))),
    }
}

impl<const MODE: u8> Store<MODE> {
    /// The cached view of group `g`.
    pub(crate) fn view(&self, g: usize) -> View {
        View::decode(self.views[g].load(Ordering::Acquire))
    }

    /// Group `g`'s view word.
    pub(crate) fn view_word(&self, g: usize) -> ViewWord {
        ViewWord { at: self.desc_at.add(Descriptor::view_offset(g)) }
    }

    /// Whether reads must check the view word after they read (replicated modes only).
    pub(crate) fn validates(&self) -> bool {
        self.mode.replicas() > 1
    }

    /// After an attempt in view `used` of group `g` missed: bring the cached view up to date,
    /// failing over if a member is down; `Err` if the operation should give up.
    pub(crate) async fn recover<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        used: View,
        miss: Miss,
        tries: &mut u32,
    ) -> IndexResult<()> {
        *tries += 1;
        if *tries > MAX_ATTEMPTS {
            return Err(IndexError::Fabric(FabricError::Unavailable {
                node: self.desc.groups[g].nodes[used.leader as usize],
                reason: format!("group {g} did not settle after {MAX_ATTEMPTS} attempts: {miss:?}"),
            }));
        }
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        let now = match miss {
            Miss::Fatal(e) => return Err(e),
            Miss::Stale => self.view_word(g).load(c).await?,
            Miss::Down(node) => {
                let now = self.view_word(g).load(c).await?;
                if now == used {
                    self.without_node(c, g, used, node).await?
                } else {
                    now
                }
            }
        };
        self.drive(c, g, now).await.map(drop)
    }

    /// CAS group `g`'s view from `v` to `v` without the replicas on `node`; the view the word
    /// holds afterwards.
    async fn without_node<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        v: View,
        node: NodeId,
    ) -> IndexResult<View> {
        let nodes = &self.desc.groups[g].nodes;
        let gone = v.slots().filter(|&s| nodes[s] == node).fold(0u8, |m, s| m | 1 << s);
        let unavailable =
            |reason: String| IndexError::Fabric(FabricError::Unavailable { node, reason });
        if gone == 0 {
            return Err(unavailable(format!(
                "memory node {node} holds no replica of group {g} to fail over"
            )));
        }
        let next = v.without(gone);
        if next.members == 0 {
            return Err(unavailable(format!("every replica of group {g} is down")));
        }
        self.counters.failovers.fetch_add(1, Ordering::Relaxed);
        Ok(self.view_word(g).change(c, v, next).await?)
    }

    /// Drives group `g`'s view `v` to a stable one and caches it.
    pub(crate) async fn drive<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        mut v: View,
    ) -> IndexResult<View> {
        for _ in 0..MAX_ATTEMPTS {
            if !v.changing {
                self.views[g].fetch_max(v.word(), Ordering::AcqRel);
                return Ok(self.view(g));
            }
            v = match self.install(c, g, v).await {
                Ok(()) => self.view_word(g).change(c, v, v.stable()).await?,
                Err(Miss::Stale) => self.view_word(g).load(c).await?,
                Err(Miss::Down(node)) => self.without_node(c, g, v, node).await?,
                Err(Miss::Fatal(e)) => return Err(e),
            };
        }
        Err(IndexError::Fabric(FabricError::Unavailable {
            node: self.desc.groups[g].nodes[v.leader as usize],
            reason: format!("the view of group {g} kept changing"),
        }))
    }

    /// ADOPT `v` at each of its members, then ACTIVATE its leader.
    async fn install<T: Transport>(&self, c: &Client<T>, g: usize, v: View) -> Result<(), Miss> {
        let nodes = self.desc.groups[g].nodes;
        for s in v.slots() {
            let mut m = Vec::with_capacity(proto::HEAD + 8);
            m.head(self.head(proto::ADOPT, s, g, v.epoch));
            m.u64(v.word());
            status(&c.call(nodes[s], SERVICE, &m).await?)?;
        }
        let mut m = Vec::with_capacity(proto::HEAD);
        m.head(self.head(proto::ACTIVATE, v.leader as usize, g, v.epoch));
        status(&c.call(nodes[v.leader as usize], SERVICE, &m).await?)?;
        Ok(())
    }
}
