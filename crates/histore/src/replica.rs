//! One replica of one index group, as its index server's CPU runs it: the replication log per
//! partition, group commit on the primary, asynchronous apply on the backups, and the consistent
//! cut a backup takes before it answers a SCAN or a LOOKUP.
//!
//! # Write (primary)
//!
//! 1. Append the entry to its partition's log (sequence number `s`).
//! 2. Take the partition's leader turn. If another leader already applied `s`, answer with its
//!    result. Otherwise ship every entry not yet applied, in one SHIP message to every backup at
//!    once (the batch: entries appended while the previous leader waited on its backups), and
//!    wait for all acknowledgements.
//! 3. Apply the batch to the hash table in log order, one 8-byte CAS per slot, and answer.
//!
//! An entry is acknowledged to its client only once every backup holds it in its log, and is
//! visible to GETs from the instant its slot CAS lands: that CAS is the write's linearization
//! point.
//!
//! # Backups
//!
//! SHIP appends in sequence order (a repeated entry is skipped, a gap refused) and answers at
//! once. Each SHIP also carries the primary's applied sequence number, which makes every entry
//! up to it *committed*; a backup applies committed entries to its skiplist in batches of
//! [`APPLY_BATCH`], and never an entry that is not committed.
//!
//! # Consistent reads on a backup (a race in the paper, closed)
//!
//! The paper's backup "applies every unapplied log entry" before a SCAN. An entry the backup
//! holds may not be applied on the primary yet (its leader is still waiting for the other
//! backup): a SCAN that returned it, followed by a GET that does not see it, is not
//! linearizable, and if the primary then failed before the other backup had it, the SCAN would
//! have shown a write that is lost. So a backup first asks the primary for its applied sequence
//! numbers (WATERMARK: taken under each partition's lock, so at that instant the hash table holds
//! exactly the entries up to them), applies its log up to exactly those, and reads. Every key's
//! result is then its value at the WATERMARK's instant, inside the SCAN. Cost: one
//! backup-to-primary round trip per SCAN or LOOKUP on a backup; the client still waits one round
//! trip of its own. The backup's core does not wait with it: the WATERMARK goes out as an eRPC
//! handler sends a nested request, and the core serves other requests until its answer is in
//! ([`MnContext::continue_after_calls`]); the primary's core answers it in one request's time.
//!
//! # Views
//!
//! Every request carries the epoch of the group's view it was sent in
//! (`dmindex_prim::view`); a replica serves only requests of the view it has adopted, and
//! answers *stale* to any other. Which replica leads (the primary) is the view's: after a
//! failover a backup leads with its skiplist (a *temporary primary*; GETs then go to it by
//! request). Adopting, activating and the log tails a new primary collects are in
//! [`crate::failover`].
//!
//! # Writers
//!
//! Each entry names its writer and the writer's sequence number. A replica remembers, per
//! partition and writer, the last entry it logged and, once applied, its result: a write retried
//! after a failover (its first attempt may have been logged, or applied, somewhere) is applied
//! once and answered with the first attempt's result.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use dmindex_fabric::service::{MnContext, ServiceError};
use dmindex_fabric::{FabricError, NodeId};
use dmindex_prim::hash::hash_bytes;
use dmindex_prim::view::View;

use crate::cpu;
use crate::layout::{Place, Slot, MAX_REPLICAS};
use crate::mode::Mode;
use crate::proto::{self, Entry, Head, Kind, Put, Reader, Status};
use crate::structure::{merged_range, Structure, TableAt};
use crate::SERVICE;

/// Committed entries a backup lets pile up before it applies them.
pub const APPLY_BATCH: u64 = 32;
/// Most entries one SHIP carries.
pub const MAX_SHIP: u64 = 4096;

/// What a replica was set up with.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub mode: Mode,
    pub store: u16,
    pub group: u16,
    pub replica: u8,
    pub groups: u16,
    pub partitions: u8,
    pub nodes: [NodeId; MAX_REPLICAS],
    pub buckets: u64,
}

impl Setup {
    /// Where `key` goes in this store.
    pub fn place(&self, key: &[u8]) -> Place {
        Place::of(hash_bytes(key), self.groups as usize, self.partitions as usize, self.buckets)
    }
}

/// Why a replica did not do what it was asked.
#[derive(Debug)]
pub enum Refused {
    /// The request's view is not the one this replica serves (or it has not activated it).
    Stale,
    /// A node this replica needed did not answer.
    Down(NodeId),
    /// The replica on this node cannot serve in the view (it lacks entries): the view must
    /// drop it although it answers.
    Unfit(NodeId),
    /// The request itself is wrong.
    Bad(ServiceError),
}

impl From<ServiceError> for Refused {
    fn from(e: ServiceError) -> Refused {
        Refused::Bad(e)
    }
}

impl Refused {
    /// What a failed peer call means.
    pub fn peer(e: FabricError) -> Refused {
        match e {
            FabricError::Unavailable { node, .. } => Refused::Down(node),
            e => Refused::Bad(ServiceError::Failed(e.to_string())),
        }
    }

    /// Reads a peer's reply status: `Ok` with the body after it, if done.
    pub fn status(reply: &[u8]) -> Result<Reader<'_>, Refused> {
        match proto::status(reply)? {
            Status::Done(r) => Ok(r),
            Status::Stale => Err(Refused::Stale),
            Status::Down(node) => Err(Refused::Down(node)),
            Status::Unfit(node) => Err(Refused::Unfit(node)),
        }
    }
}

/// The view a replica serves, and whether it serves it yet (a new primary activates it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Serving {
    pub(crate) view: View,
    pub(crate) active: bool,
    /// A replacement that is not a member yet: it learns `view`'s log from its leader, to join
    /// the next view ([`crate::join`]); it serves nothing else.
    pub(crate) joining: bool,
    /// A replacement whose log has a hole: it will never join.
    pub(crate) broken: bool,
    /// A replacement that joined `view`: the epoch it learned, whose SHIPs it still logs (the
    /// old leader's last turns, which other members may still acknowledge).
    pub(crate) learned: Option<u32>,
}

/// A WRITE after its first step on the primary ([`Replica::log_write`]).
pub enum Logged {
    /// A retried write whose first attempt was applied: its answer.
    Answered(bool),
    /// Logged, waiting for its group commit.
    Waiting(Waiting),
}

/// A logged WRITE waiting for its group commit.
#[derive(Clone, Copy, Debug)]
pub struct Waiting {
    view: View,
    p: usize,
    writer: u64,
    seq: u32,
    pos: u64,
}

impl Waiting {
    /// Its partition.
    pub fn partition(&self) -> usize {
        self.p
    }
}

/// One replica.
pub struct Replica {
    pub setup: Setup,
    /// Where its hash table lies, if it keeps one.
    pub(crate) table: Option<TableAt>,
    pub(crate) serving: Mutex<Serving>,
    pub(crate) parts: Vec<Part>,
    /// Snapshots a leader hands out to replacements in chunks ([`crate::join`]).
    pub(crate) snapshots: Mutex<HashMap<(u8, usize), crate::join::Snapshot>>,
}

pub(crate) struct Part {
    /// The primary's group-commit leader turn.
    pub(crate) lead: Mutex<()>,
    pub(crate) state: Mutex<PartState>,
}

/// The last entry a writer logged in a partition.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Written {
    pub(crate) seq: u32,
    pub(crate) pos: u64,
    /// Whether the key existed, once the entry is applied.
    pub(crate) existed: Option<bool>,
}

pub(crate) struct PartState {
    /// Entries `applied + 1 ..= appended`.
    pub(crate) log: VecDeque<Entry>,
    pub(crate) appended: u64,
    pub(crate) applied: u64,
    /// Backups: entries up to here are applied on the primary.
    pub(crate) committed: u64,
    pub(crate) writers: HashMap<u64, Written>,
    pub(crate) structure: Structure,
    /// Leader: replacements it also ships to ([`crate::join`]).
    pub(crate) learners: Vec<u8>,
    /// Replacement: the snapshot is not in yet, so nothing is applied; `based` once the log's
    /// start is known (from the first SHIP or the snapshot).
    pub(crate) loading: bool,
    pub(crate) based: bool,
    /// Replaced by a replacement on the same table ([`Replica::retire`]): changes nothing more.
    pub(crate) retired: bool,
}

impl Replica {
    /// A replica with an empty structure (its table at `table`, if it keeps one): a member of
    /// the store's first view, or, with `joining`, a replacement learning that view's log.
    pub fn new(setup: Setup, table: Option<TableAt>, joining: Option<View>) -> Replica {
        let parts = (0..setup.partitions)
            .map(|_| Part {
                lead: Mutex::new(()),
                state: Mutex::new(PartState {
                    log: VecDeque::new(),
                    appended: 0,
                    applied: 0,
                    committed: 0,
                    writers: HashMap::new(),
                    structure: match table {
                        Some(at) => Structure::table(at),
                        None => Structure::sorted(),
                    },
                    learners: Vec::new(),
                    loading: joining.is_some(),
                    based: false,
                    retired: false,
                }),
            })
            .collect();
        let all = ((1u16 << setup.mode.replicas()) - 1) as u8;
        let serving = Mutex::new(match joining {
            None => {
                let view = View::initial(all, 0);
                Serving { view, active: true, joining: false, broken: false, learned: None }
            }
            Some(view) => {
                Serving { view, active: false, joining: true, broken: false, learned: None }
            }
        });
        Replica { setup, table, serving, parts, snapshots: Mutex::new(HashMap::new()) }
    }

    /// Stops this replica from changing its structures (and its table) from now on, whatever
    /// requests are still running on it: a replacement is about to take its table over. Every
    /// change happens under a partition lock, which this takes in turn.
    pub(crate) fn retire(&self) {
        for p in 0..self.parts.len() {
            self.lock(p).retired = true;
        }
    }

    /// This replica's node.
    pub(crate) fn node(&self) -> NodeId {
        self.setup.nodes[self.setup.replica as usize]
    }

    pub(crate) fn head(&self, op: u8, replica: u8, epoch: u32) -> Head {
        Head { op, replica, group: self.setup.group, store: self.setup.store, epoch }
    }

    pub(crate) fn lock(&self, p: usize) -> MutexGuard<'_, PartState> {
        self.parts[p].state.lock().expect("partition lock")
    }

    /// The view of `epoch`, if this replica has adopted it (and, if `active`, activated it). A
    /// replacement that has not joined yet answers *down* to everything: whoever asks it as a
    /// member of some view means the replica this node held before it restarted.
    pub(crate) fn in_view(&self, epoch: u32, active: bool) -> Result<View, Refused> {
        let s = *self.serving.lock().expect("view lock");
        if s.joining {
            return Err(Refused::Down(self.node()));
        }
        if s.view.epoch != epoch || (active && !s.active) {
            return Err(Refused::Stale);
        }
        Ok(s.view)
    }

    /// The view of `epoch`, if this replica serves it as its primary.
    fn leading(&self, epoch: u32) -> Result<View, Refused> {
        let v = self.in_view(epoch, true)?;
        if v.leader != self.setup.replica {
            return Err(Refused::Bad(ServiceError::BadRequest(format!(
                "replica {} does not lead view {epoch}",
                self.setup.replica
            ))));
        }
        Ok(v)
    }

    /// WRITE on the primary: log, ship, apply, answer whether the key existed.
    pub fn write(&self, ctx: &MnContext<'_>, epoch: u32, e: Entry) -> Result<bool, Refused> {
        match self.log_write(ctx, epoch, e)? {
            Logged::Answered(existed) => Ok(existed),
            Logged::Waiting(w) => {
                self.commit(ctx, &w)?;
                self.written(&w)
            }
        }
    }

    /// A WRITE's first step on the primary: the entry appended to its partition's log (a
    /// retried write already logged is not appended again; one already applied is answered).
    pub fn log_write(&self, ctx: &MnContext<'_>, epoch: u32, e: Entry) -> Result<Logged, Refused> {
        let view = self.leading(epoch)?;
        let place = self.setup.place(&e.key);
        let p = place.partition;
        if place.group != self.setup.group as usize {
            return Err(ServiceError::BadRequest("key belongs to another group".into()).into());
        }
        if e.kind != Kind::Delete
            && Slot::decode(e.word).is_none_or(|s| s.signature != place.signature)
        {
            return Err(ServiceError::BadRequest("slot word does not match the key".into()).into());
        }
        let (writer, seq) = (e.writer, e.seq);
        let mut st = self.lock(p);
        let pos = match st.writers.get(&writer) {
            Some(w) if w.seq == seq => match w.existed {
                Some(existed) => return Ok(Logged::Answered(existed)),
                None => w.pos,
            },
            _ => {
                ctx.charge(cpu::LOG_NS);
                st.append(e)
            }
        };
        Ok(Logged::Waiting(Waiting { view, p, writer, seq, pos }))
    }

    /// A logged WRITE's group commit: the partition's leader turn, which ships and applies
    /// every entry logged so far unless an earlier turn already applied this one. Writes logged
    /// together and committed one after the other share the first one's turn.
    pub fn commit(&self, ctx: &MnContext<'_>, w: &Waiting) -> Result<(), Refused> {
        let _lead = self.parts[w.p].lead.lock().expect("leader lock");
        if self.lock(w.p).applied < w.pos {
            self.replicate(ctx, w.view, w.p)?;
        }
        Ok(())
    }

    /// A committed WRITE's answer: whether its key existed.
    pub fn written(&self, w: &Waiting) -> Result<bool, Refused> {
        let st = self.lock(w.p);
        match st.writers.get(&w.writer) {
            Some(x) if x.seq == w.seq => x.existed.ok_or(Refused::Stale),
            // The writer went on without this answer (it retried elsewhere).
            _ => Err(Refused::Stale),
        }
    }

    /// The leader's turn on partition `p` (its lead lock held): ship every entry not yet applied
    /// to every backup of `view` at once, wait for all, apply them.
    pub(crate) fn replicate(
        &self,
        ctx: &MnContext<'_>,
        view: View,
        p: usize,
    ) -> Result<(), Refused> {
        let backups: Vec<usize> =
            view.slots().filter(|&s| s != self.setup.replica as usize).collect();
        let mut st = self.lock(p);
        let end = st.appended;
        while st.applied < end {
            let n = (end - st.applied).min(MAX_SHIP);
            let last = st.applied + n;
            let learners: Vec<usize> = st.learners.iter().map(|&r| r as usize).collect();
            if !backups.is_empty() || !learners.is_empty() {
                // The entries once; one header per backup (its replica number differs).
                let mut body = Vec::with_capacity(20 + n as usize * 36);
                body.u16(p as u16);
                body.u16(n as u16);
                body.u64(st.applied + 1);
                body.u64(st.applied);
                for e in st.log.iter().take(n as usize) {
                    body.entry(e);
                }
                drop(st);
                let to: Vec<usize> = backups.iter().chain(&learners).copied().collect();
                ctx.charge(cpu::LOG_NS * n);
                let mut replies = self.call_members(ctx, proto::SHIP, &to, view.epoch, &body);
                let learned = replies.split_off(backups.len());
                for (r, reply) in backups.iter().zip(replies) {
                    let reply = reply.map_err(Refused::peer)?;
                    let next = Refused::status(&reply)?.u64()?;
                    if next <= last {
                        return Err(Refused::Bad(ServiceError::Failed(format!(
                            "backup {r} holds the log up to {} after a ship up to {last}",
                            next - 1
                        ))));
                    }
                }
                st = self.lock(p);
                // A replacement that missed this SHIP cannot join with this log: stop shipping
                // to it (it finds out when it tries to join). Writes never wait on it.
                for (&r, reply) in learners.iter().zip(learned) {
                    let ok = reply.ok().is_some_and(|b| {
                        Refused::status(&b).is_ok_and(|mut b| b.u64().is_ok_and(|n| n > last))
                    });
                    if !ok {
                        st.learners.retain(|&l| l as usize != r);
                    }
                }
            }
            st.apply_through(ctx, &self.setup, last)?;
        }
        Ok(())
    }

    /// Sends `body` as request `op` of `epoch` to each replica in `members` at once (a header
    /// each: its replica number differs); their replies in order.
    pub(crate) fn call_members(
        &self,
        ctx: &MnContext<'_>,
        op: u8,
        members: &[usize],
        epoch: u32,
        body: &[u8],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        let msgs: Vec<Vec<u8>> = members
            .iter()
            .map(|&r| {
                let mut m = Vec::with_capacity(proto::HEAD + body.len());
                m.head(self.head(op, r as u8, epoch));
                m.put(body);
                m
            })
            .collect();
        let calls: Vec<(NodeId, &[u8])> =
            members.iter().zip(&msgs).map(|(&r, m)| (self.setup.nodes[r], &m[..])).collect();
        ctx.charge(cpu::SEND_NS * calls.len() as u64);
        ctx.peers.call_all(SERVICE, &calls)
    }

    /// SHIP on a backup: append, learn what is committed, apply a batch if enough piled up.
    pub fn ship(
        &self,
        ctx: &MnContext<'_>,
        epoch: u32,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), Refused> {
        let joining = self.learning(epoch)?;
        let p = r.u16()? as usize;
        let n = r.u16()? as u64;
        let first = r.u64()?;
        let committed = r.u64()?;
        if p >= self.parts.len() {
            return Err(bad_partition(p).into());
        }
        ctx.charge(cpu::LOG_NS * n);
        let mut st = self.lock(p);
        if st.loading && !st.based {
            // A replacement's first SHIP follows its snapshot: the log starts here.
            st.base(first - 1);
        }
        for seq in first..first + n {
            let e = r.entry()?;
            if st.take(seq, e).is_err() {
                // A hole in this log: it can never serve. A replacement stops learning; a
                // member says it is down, so that the view drops it.
                drop(st);
                return Err(match joining {
                    true => self.stop_learning(),
                    false => Refused::Down(self.node()),
                });
            }
        }
        r.end()?;
        st.committed = st.committed.max(committed);
        if !st.loading && st.committed - st.applied >= APPLY_BATCH {
            // The paper's worker threads apply asynchronously: the core is busy, the
            // acknowledgement does not wait.
            let through = st.committed;
            ctx.after_reply(|| st.apply_through(ctx, &self.setup, through))?;
        }
        out.u64(st.appended + 1);
        Ok(())
    }

    /// WATERMARK on the primary: every partition's applied sequence number.
    pub fn watermark(&self, epoch: u32, out: &mut Vec<u8>) -> Result<(), Refused> {
        self.leading(epoch)?;
        out.u16(self.parts.len() as u16);
        for p in 0..self.parts.len() {
            out.u64(self.lock(p).applied);
        }
        Ok(())
    }

    /// The primary's applied sequence numbers, when this replica is not the primary of `view`.
    fn cut(&self, ctx: &MnContext<'_>, view: View) -> Result<Option<Vec<u64>>, Refused> {
        if view.leader == self.setup.replica {
            return Ok(None);
        }
        ctx.charge(cpu::SEND_NS);
        ctx.continue_after_calls();
        let mut ask = Vec::with_capacity(proto::HEAD);
        ask.head(self.head(proto::WATERMARK, view.leader, view.epoch));
        let reply = ctx
            .peers
            .call(self.setup.nodes[view.leader as usize], SERVICE, &ask)
            .map_err(Refused::peer)?;
        let mut r = Refused::status(&reply)?;
        let n = r.u16()? as usize;
        Ok(Some((0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?))
    }

    /// Partition `p` locked and brought to `cut` (a backup).
    fn at_cut(
        &self,
        ctx: &MnContext<'_>,
        p: usize,
        cut: &Option<Vec<u64>>,
    ) -> Result<MutexGuard<'_, PartState>, Refused> {
        let mut st = self.lock(p);
        if let Some(cut) = cut {
            let w = *cut.get(p).ok_or_else(|| bad_partition(p))?;
            if st.appended < w {
                // A view's members hold every entry its primary applied: this one does not.
                return Err(Refused::Bad(ServiceError::Failed(format!(
                    "backup holds entries up to {} of partition {p}, the primary applied {w}",
                    st.appended
                ))));
            }
            st.committed = st.committed.max(w);
            st.apply_through(ctx, &self.setup, w)?;
        }
        Ok(st)
    }

    /// LOOKUP: the slot word of a key (0: absent).
    pub fn lookup(
        &self,
        ctx: &MnContext<'_>,
        epoch: u32,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Refused> {
        let cut = self.cut(ctx, self.in_view(epoch, true)?)?;
        let p = self.setup.place(key).partition;
        let word = self.at_cut(ctx, p, &cut)?.structure.get(ctx, key).unwrap_or(0);
        out.u64(word);
        Ok(())
    }

    /// SCAN: up to `count` (key, slot word) pairs with `lo` ≤ key < `hi`, from every partition.
    #[allow(clippy::too_many_arguments)]
    pub fn scan(
        &self,
        ctx: &MnContext<'_>,
        epoch: u32,
        lo: &[u8],
        hi: Option<&[u8]>,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), Refused> {
        let cut = self.cut(ctx, self.in_view(epoch, true)?)?;
        // Every partition at the cut, locked in ascending order (no other path holds two), then
        // merged.
        let parts = (0..self.parts.len())
            .map(|p| self.at_cut(ctx, p, &cut))
            .collect::<Result<Vec<_>, _>>()?;
        let structures: Vec<&Structure> = parts.iter().map(|st| &st.structure).collect();
        // The pairs go straight into the reply, their number in front once known; room for
        // `count` keys as long as `lo` (an estimate: keys are not all one length).
        out.reserve(4 + count.min(1 << 12) * (2 + lo.len() + 8));
        let (at, mut n) = (out.len(), 0u32);
        out.u32(0);
        let emit = |k: &[u8], w| {
            out.key(k);
            out.u64(w);
            n += 1;
        };
        merged_range(ctx, &structures, lo, hi, count, emit).ok_or_else(|| {
            Refused::Bad(ServiceError::BadRequest("SCAN on a hash-table replica".into()))
        })?;
        out[at..at + 4].copy_from_slice(&n.to_le_bytes());
        Ok(())
    }

    /// Entries this replica's logs have taken in, over all partitions.
    pub fn logged(&self) -> u64 {
        (0..self.parts.len()).map(|p| self.lock(p).appended).sum()
    }

    /// Keys this replica's structures hold (applied entries only).
    pub fn keys(&self) -> usize {
        (0..self.parts.len()).map(|p| self.lock(p).structure.len()).sum()
    }
}

impl PartState {
    /// Starts an empty log after entry `applied` (a replacement's, at its snapshot).
    pub(crate) fn base(&mut self, applied: u64) {
        (self.appended, self.applied, self.committed) = (applied, applied, applied);
        self.based = true;
    }

    /// Appends `e` as the next entry; returns its sequence number.
    pub(crate) fn append(&mut self, e: Entry) -> u64 {
        self.appended += 1;
        let w = Written { seq: e.seq, pos: self.appended, existed: None };
        self.writers.insert(e.writer, w);
        self.log.push_back(e);
        self.appended
    }

    /// Takes entry `seq` from the primary: a repeat is skipped, a gap refused.
    pub(crate) fn take(&mut self, seq: u64, e: Entry) -> Result<(), ServiceError> {
        if seq <= self.appended {
            return Ok(());
        }
        if seq != self.appended + 1 {
            return Err(ServiceError::Failed(format!(
                "log gap: entry {seq} after {}",
                self.appended
            )));
        }
        self.append(e);
        Ok(())
    }

    /// Applies the log through sequence `through`, recording each writer's result. What is
    /// applied counts as committed (a primary applies only what every backup logged), so
    /// `committed` never falls behind `applied`, also on a primary that becomes a backup.
    pub(crate) fn apply_through(
        &mut self,
        ctx: &MnContext<'_>,
        setup: &Setup,
        through: u64,
    ) -> Result<(), ServiceError> {
        if self.retired {
            return Err(ServiceError::Failed("this replica was replaced".into()));
        }
        while self.applied < through {
            let e = self.log.pop_front().expect("entries up to `appended` are in the log");
            let writer = e.writer;
            let existed = self.structure.apply(ctx, setup.place(&e.key).bucket, e)?;
            self.applied += 1;
            if let Some(w) = self.writers.get_mut(&writer).filter(|w| w.pos == self.applied) {
                w.existed = Some(existed);
            }
        }
        self.committed = self.committed.max(self.applied);
        Ok(())
    }
}

fn bad_partition(p: usize) -> ServiceError {
    ServiceError::BadRequest(format!("no partition {p}"))
}
