//! The client's side of views: which view a handle acts in, and what it does when an attempt
//! misses (a replica refused the view, or a node did not answer).
//!
//! # Failover, driven by clients
//!
//! Each handle caches every group's view word. An operation is tried in the cached view; if it
//! misses:
//!
//! * **stale**: reload the word (a change happened or is under way; drive it to the end);
//! * **down(node)**: if the word still holds the view used and the node's replicas are lost (it
//!   does not answer a reconnect, or it answers but no longer serves the view: it restarted), CAS
//!   the word to the view without the replicas on that node (the paper's primary-down case makes
//!   a backup the temporary primary; the backup-down case leaves writes one acknowledgement to
//!   wait for), then drive the change: ADOPT at every member, ACTIVATE at the leader, CAS to
//!   stable. A change that meets another dead member removes it too. If the node answers and
//!   still serves the view, only this client's connection was old (the node restarted and its
//!   replica has been rebuilt since): the client has reconnected and retries.
//!
//! Writes are retried with the same writer and sequence number, which the replicas deduplicate,
//! so a write whose first attempt took effect before the failure is not applied twice and is
//! answered with its first result. A handle gives up after [`MAX_ATTEMPTS`] misses in one
//! operation.
//!
//! The data server that holds the view words (node 0) is outside the failure model, as the
//! paper's configuration service is.
//!
//! # Cached views and tables
//!
//! Each handle caches, per group, the view word and the hash-table offsets of the replicas. An
//! offset changes only while its replica is out of the view (a rebuild allocates a new table on
//! the restarted node and writes its offset before the view that adds it), so a handle reads
//! the offsets *after* the view word it caches, under a lock that keeps the cache's view and
//! offsets from going backwards. A reader that pairs a view with newer offsets reads a table
//! that belongs to a later view, and its validation against the view word fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dmindex_fabric::{Client, FabricError, NodeId, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::view::{View, ViewWord};

use crate::layout::{Descriptor, GroupPlace, MAX_REPLICAS};
use crate::proto::{self, Put, Reader, Status};
use crate::{Store, SERVICE};

/// Misses one operation tolerates before it fails.
pub const MAX_ATTEMPTS: u32 = 16;

/// What a handle knows of one group: its view and its replicas' hash-table offsets.
pub(crate) struct GroupCache {
    view: AtomicU64,
    tables: [AtomicU64; MAX_REPLICAS],
    update: Mutex<()>,
}

impl GroupCache {
    /// The cache as the descriptor `g` describes it (read once; [`Store::cache`] then keeps it).
    pub(crate) fn new(g: &GroupPlace) -> GroupCache {
        GroupCache {
            view: AtomicU64::new(g.view),
            tables: g.tables.map(AtomicU64::new),
            update: Mutex::new(()),
        }
    }
}

/// How one attempt of an operation missed.
#[derive(Debug)]
pub(crate) enum Miss {
    /// A replica holds another view.
    Stale,
    /// A node did not answer (or a replica could not reach it).
    Down(NodeId),
    /// The replica on this node answers but cannot serve in the view: drop it.
    Unfit(NodeId),
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
        Ok(Status::Unfit(node)) => Err(Miss::Unfit(node)),
        Err(e) => Err(Miss::Fatal(IndexError::Corrupt(format!("reply: {e:?}")))),
    }
}

impl<const MODE: u8> Store<MODE> {
    /// The cached view of group `g`.
    pub(crate) fn view(&self, g: usize) -> View {
        View::decode(self.groups[g].view.load(Ordering::Acquire))
    }

    /// The hash-table offset of group `g`'s replica `r` (0: none), as cached with the view.
    pub(crate) fn table(&self, g: usize, r: usize) -> u64 {
        self.groups[g].tables[r].load(Ordering::Acquire)
    }

    /// Caches `v`, a stable view of group `g` read from its word, with the table offsets read
    /// after it; the view cached afterwards (never older than before).
    pub(crate) async fn cache<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        v: View,
    ) -> IndexResult<View> {
        let cache = &self.groups[g];
        if v.word() <= cache.view.load(Ordering::Acquire) {
            return Ok(self.view(g));
        }
        let mut b = [0u8; 8 * MAX_REPLICAS];
        c.read(self.desc_at.add(Descriptor::tables_offset(g)), &mut b).await?;
        let _u = cache.update.lock().expect("group cache");
        if v.word() > cache.view.load(Ordering::Acquire) {
            for (t, w) in cache.tables.iter().zip(b.chunks_exact(8)) {
                t.store(u64::from_le_bytes(w.try_into().expect("8 bytes")), Ordering::Release);
            }
            cache.view.store(v.word(), Ordering::Release);
        }
        Ok(self.view(g))
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
            Miss::Fatal(e) => {
                // A read that went wrong in a view that has changed since (an old table) retries.
                let now = self.view_word(g).load(c).await?;
                if !self.validates() || now == used {
                    return Err(e);
                }
                now
            }
            Miss::Stale => {
                self.counters.stale.fetch_add(1, Ordering::Relaxed);
                self.view_word(g).load(c).await?
            }
            // Only an activation (in `drive`) reports a member unfit; here it is one more node
            // to ask about.
            Miss::Down(node) | Miss::Unfit(node) => {
                let now = self.view_word(g).load(c).await?;
                if now == used && self.lost(c, g, used, node).await? {
                    self.without_node(c, g, used, node).await?
                } else {
                    now
                }
            }
        };
        self.drive(c, g, now).await.map(drop)
    }

    /// After `node` did not answer in view `v` of group `g`: whether its replicas of `v` are
    /// lost (it does not take a new connection, or a replica of `v` there answers *down*: it
    /// restarted since). If they all still serve `v`, only this client's connection was old;
    /// it has reconnected. One reconnect and a PING per replica on the node.
    pub(crate) async fn lost<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        v: View,
        node: NodeId,
    ) -> IndexResult<bool> {
        match c.reconnect(node).await {
            Err(FabricError::Unavailable { .. }) => return Ok(true),
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
        let nodes = self.desc.groups[g].nodes;
        for s in v.slots().filter(|&s| nodes[s] == node) {
            let mut m = Vec::with_capacity(proto::HEAD);
            m.head(self.head(proto::PING, s, g, v.epoch));
            let reply = match c.call(node, SERVICE, &m).await {
                Ok(reply) => reply,
                Err(FabricError::Unavailable { .. }) => return Ok(true),
                Err(e) => return Err(e.into()),
            };
            match status(&reply) {
                Ok(_) | Err(Miss::Stale) => {}
                Err(Miss::Down(n) | Miss::Unfit(n)) if n == node => return Ok(true),
                Err(Miss::Down(_) | Miss::Unfit(_)) => {}
                Err(Miss::Fatal(e)) => return Err(e),
            }
        }
        Ok(false)
    }

    /// CAS group `g`'s view from `v` to `v` without the replicas on `node`; the view the word
    /// holds afterwards.
    pub(crate) async fn without_node<T: Transport>(
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

    /// Drives group `g`'s view `v` to a stable one and caches it. A view read from the word
    /// that names replicas the group does not have is garbage: a corrupt index.
    pub(crate) async fn drive<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        mut v: View,
    ) -> IndexResult<View> {
        let replicas = (1u16 << self.mode.replicas()) - 1;
        for _ in 0..MAX_ATTEMPTS {
            if v.members as u16 & !replicas != 0 || (v.members != 0 && !v.has(v.leader as usize)) {
                return Err(IndexError::Corrupt(format!(
                    "group {g}'s view word {:#x} names replicas the group does not have",
                    v.word()
                )));
            }
            if !v.changing {
                return self.cache(c, g, v).await;
            }
            v = match self.install(c, g, v).await {
                Ok(()) => self.view_word(g).change(c, v, v.stable()).await?,
                Err(Miss::Stale) => self.view_word(g).load(c).await?,
                Err(Miss::Down(node)) if self.lost(c, g, v, node).await? => {
                    self.without_node(c, g, v, node).await?
                }
                Err(Miss::Down(_)) => v,
                // A member that answers but cannot serve (its log lacks entries): no PING would
                // tell, so it leaves on the word of the replica that found it out.
                Err(Miss::Unfit(node)) => self.without_node(c, g, v, node).await?,
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
