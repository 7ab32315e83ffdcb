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
//! trip of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use dmindex_fabric::service::{MnContext, ServiceError};
use dmindex_fabric::NodeId;
use dmindex_prim::hash::hash_bytes;

use crate::layout::{Place, Slot, MAX_REPLICAS};
use crate::mode::Mode;
use crate::proto::{self, Entry, Head, Kind, Put, Reader};
use crate::structure::{Structure, TableAt};
use crate::SERVICE;

/// Committed entries a backup lets pile up before it applies them.
pub const APPLY_BATCH: u64 = 32;

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

/// One replica.
pub struct Replica {
    pub setup: Setup,
    parts: Vec<Part>,
}

struct Part {
    /// The primary's group-commit leader turn.
    lead: Mutex<()>,
    state: Mutex<PartState>,
}

struct PartState {
    /// Entries `applied + 1 ..= appended`.
    log: VecDeque<Entry>,
    appended: u64,
    applied: u64,
    /// Backups: entries up to here are applied on the primary.
    committed: u64,
    /// Primary: results of applied entries whose writers have not collected them yet.
    results: HashMap<u64, bool>,
    structure: Structure,
}

impl Replica {
    /// A replica with an empty structure (its table at `table`, if it keeps one).
    pub fn new(setup: Setup, table: Option<TableAt>) -> Replica {
        let parts = (0..setup.partitions)
            .map(|_| Part {
                lead: Mutex::new(()),
                state: Mutex::new(PartState {
                    log: VecDeque::new(),
                    appended: 0,
                    applied: 0,
                    committed: 0,
                    results: HashMap::new(),
                    structure: match table {
                        Some(at) => Structure::table(at),
                        None => Structure::sorted(),
                    },
                }),
            })
            .collect();
        Replica { setup, parts }
    }

    fn head(&self, op: u8, replica: u8) -> Head {
        Head { op, replica, group: self.setup.group, store: self.setup.store }
    }

    fn backups(&self) -> &[NodeId] {
        &self.setup.nodes[1..self.setup.mode.replicas()]
    }

    /// WRITE on the primary: log, ship, apply, answer whether the key existed.
    pub fn write(&self, ctx: &MnContext<'_>, e: Entry) -> Result<bool, ServiceError> {
        let place = self.setup.place(&e.key);
        let p = place.partition;
        if place.group != self.setup.group as usize {
            return Err(ServiceError::BadRequest("key belongs to another group".into()));
        }
        if e.kind != Kind::Delete
            && Slot::decode(e.word).is_none_or(|s| s.signature != place.signature)
        {
            return Err(ServiceError::BadRequest("slot word does not match the key".into()));
        }
        let part = &self.parts[p];
        let seq = {
            let mut st = part.state.lock().expect("partition lock");
            st.appended += 1;
            st.log.push_back(e);
            st.appended
        };
        let _lead = part.lead.lock().expect("leader lock");
        let mut st = part.state.lock().expect("partition lock");
        if let Some(existed) = st.results.remove(&seq) {
            return Ok(existed);
        }
        let last = st.appended;
        if !self.backups().is_empty() {
            // The entries once; one header per backup (its replica number differs).
            let mut body = Vec::with_capacity(20 + st.log.len() * 24);
            body.u16(p as u16);
            body.u16(st.log.len() as u16);
            body.u64(st.applied + 1);
            body.u64(st.applied);
            for e in &st.log {
                body.entry(e.kind, &e.key, e.word);
            }
            drop(st);
            let msgs: Vec<Vec<u8>> = (1..=self.backups().len())
                .map(|r| {
                    let mut m = Vec::with_capacity(proto::HEAD + body.len());
                    m.head(self.head(proto::SHIP, r as u8));
                    m.put(&body);
                    m
                })
                .collect();
            let calls: Vec<(NodeId, &[u8])> =
                self.backups().iter().zip(&msgs).map(|(&n, m)| (n, &m[..])).collect();
            for (i, r) in ctx.peers.call_all(SERVICE, &calls).into_iter().enumerate() {
                let next = r
                    .map_err(|e| {
                        ServiceError::Failed(format!(
                            "log shipping to backup {} failed: {e}",
                            i + 1
                        ))
                    })
                    .and_then(|b| Reader::new(&b).u64())?;
                if next != last + 1 {
                    return Err(ServiceError::Failed(format!(
                        "backup {} holds the log up to {} after a ship up to {last}",
                        i + 1,
                        next - 1
                    )));
                }
            }
            st = part.state.lock().expect("partition lock");
        }
        st.apply_through(ctx, &self.setup, last, true)?;
        Ok(st.results.remove(&seq).expect("the leader applied its own entry"))
    }

    /// SHIP on a backup: append, learn what is committed, apply a batch if enough piled up.
    pub fn ship(&self, ctx: &MnContext<'_>, r: &mut Reader<'_>) -> Result<Vec<u8>, ServiceError> {
        let p = r.u16()? as usize;
        let n = r.u16()? as u64;
        let first = r.u64()?;
        let committed = r.u64()?;
        let part = self.parts.get(p).ok_or_else(|| bad_partition(p))?;
        let mut st = part.state.lock().expect("partition lock");
        for seq in first..first + n {
            let e = r.entry()?;
            if seq <= st.appended {
                continue;
            }
            if seq != st.appended + 1 {
                return Err(ServiceError::Failed(format!(
                    "log gap: entry {seq} after {}",
                    st.appended
                )));
            }
            st.log.push_back(e);
            st.appended = seq;
        }
        r.end()?;
        st.committed = st.committed.max(committed);
        if st.committed - st.applied >= APPLY_BATCH {
            let through = st.committed;
            st.apply_through(ctx, &self.setup, through, false)?;
        }
        Ok((st.appended + 1).to_le_bytes().to_vec())
    }

    /// WATERMARK on the primary: every partition's applied sequence number.
    pub fn watermark(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + 8 * self.parts.len());
        out.u16(self.parts.len() as u16);
        for part in &self.parts {
            out.u64(part.state.lock().expect("partition lock").applied);
        }
        out
    }

    /// The primary's applied sequence numbers, when this replica is a backup.
    fn cut(&self, ctx: &MnContext<'_>) -> Result<Option<Vec<u64>>, ServiceError> {
        if self.setup.replica == 0 {
            return Ok(None);
        }
        let mut ask = Vec::with_capacity(proto::HEAD);
        ask.head(self.head(proto::WATERMARK, 0));
        let reply = ctx
            .peers
            .call(self.setup.nodes[0], SERVICE, &ask)
            .map_err(|e| ServiceError::Failed(format!("asking the primary for its cut: {e}")))?;
        let mut r = Reader::new(&reply);
        let n = r.u16()? as usize;
        (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>().map(Some)
    }

    /// Brings partition `p` to `cut` (a backup) and runs `f` on its structure.
    fn read<R>(
        &self,
        ctx: &MnContext<'_>,
        p: usize,
        cut: &Option<Vec<u64>>,
        f: impl FnOnce(&Structure) -> R,
    ) -> Result<R, ServiceError> {
        let mut st = self.parts[p].state.lock().expect("partition lock");
        if let Some(cut) = cut {
            let w = *cut.get(p).ok_or_else(|| bad_partition(p))?;
            if st.appended < w {
                return Err(ServiceError::Failed(format!(
                    "backup holds entries up to {} of partition {p}, the primary applied {w}",
                    st.appended
                )));
            }
            st.committed = st.committed.max(w);
            st.apply_through(ctx, &self.setup, w, false)?;
        }
        Ok(f(&st.structure))
    }

    /// LOOKUP: the slot word of a key (0: absent).
    pub fn lookup(&self, ctx: &MnContext<'_>, key: &[u8]) -> Result<Vec<u8>, ServiceError> {
        let cut = self.cut(ctx)?;
        let p = self.setup.place(key).partition;
        let word = self.read(ctx, p, &cut, |s| s.get(ctx.memory, key))?.unwrap_or(0);
        Ok(word.to_le_bytes().to_vec())
    }

    /// SCAN: up to `count` (key, slot word) pairs with `lo` ≤ key < `hi`, from every partition.
    pub fn scan(
        &self,
        ctx: &MnContext<'_>,
        lo: &[u8],
        hi: Option<&[u8]>,
        count: usize,
    ) -> Result<Vec<u8>, ServiceError> {
        let cut = self.cut(ctx)?;
        let mut pairs = Vec::new();
        for p in 0..self.parts.len() {
            self.read(ctx, p, &cut, |s| s.range(lo, hi, count, &mut pairs))?
                .ok_or_else(|| ServiceError::BadRequest("SCAN on a hash-table replica".into()))?;
        }
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        pairs.truncate(count);
        let mut out =
            Vec::with_capacity(4 + pairs.iter().map(|(k, _)| k.len() + 10).sum::<usize>());
        out.u32(pairs.len() as u32);
        for (k, w) in &pairs {
            out.key(k);
            out.u64(*w);
        }
        Ok(out)
    }

    /// Entries this replica's logs have taken in, over all partitions.
    pub fn logged(&self) -> u64 {
        self.parts.iter().map(|p| p.state.lock().expect("partition lock").appended).sum()
    }

    /// Keys this replica's structures hold (applied entries only).
    pub fn keys(&self) -> usize {
        self.parts.iter().map(|p| p.state.lock().expect("partition lock").structure.len()).sum()
    }
}

impl PartState {
    /// Applies the log through sequence `through`, keeping each result if `keep`.
    fn apply_through(
        &mut self,
        ctx: &MnContext<'_>,
        setup: &Setup,
        through: u64,
        keep: bool,
    ) -> Result<(), ServiceError> {
        while self.applied < through {
            let e = self.log.pop_front().expect("entries up to `appended` are in the log");
            let existed = self.structure.apply(ctx.memory, setup.place(&e.key).bucket, &e)?;
            self.applied += 1;
            if keep {
                self.results.insert(self.applied, existed);
            }
        }
        Ok(())
    }
}

fn bad_partition(p: usize) -> ServiceError {
    ServiceError::BadRequest(format!("no partition {p}"))
}
