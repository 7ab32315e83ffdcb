//! HiStore's memory-node service: the replicas an index server hosts, and what each request does
//! to them. One service object serves every node of a cluster in this process (the in-process
//! and simulated fabrics) or the one node of a `memnode` process, so replicas are kept by
//! (node, store, group, replica).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use dmindex_fabric::service::{alloc_local, MnContext, Service, ServiceError};
use dmindex_fabric::NodeId;

use crate::layout::{BUCKET, MAX_REPLICAS};
use crate::mode::Mode;
use dmindex_prim::view::View;

use crate::proto::{self, Head, Put, Reader};
use crate::replica::{Logged, Refused, Replica, Setup, Waiting, MAX_SHIP};
use crate::structure::TableAt;

type ReplicaKey = (NodeId, u16, u16, u8);

/// The service.
#[derive(Default)]
pub struct Server {
    replicas: RwLock<HashMap<ReplicaKey, Arc<Replica>>>,
}

impl Server {
    /// The replica `h` names on `node`.
    pub fn replica(&self, node: NodeId, h: Head) -> Result<Arc<Replica>, ServiceError> {
        let map = self.replicas.read().expect("replica map");
        map.get(&(node, h.store, h.group, h.replica)).cloned().ok_or_else(|| {
            ServiceError::Failed(format!(
                "no replica {} of group {} of the store at root slot {} on this node",
                h.replica, h.group, h.store
            ))
        })
    }

    /// SETUP: a fresh replica (and its hash table, if it keeps one); answers the table's
    /// offset. JOIN: the same as a replacement learning a view ([`crate::join`]). A replica that
    /// is there already but out of that view (a replacement whose driver started over, or a
    /// member dropped on a wrong suspicion) is retired and replaced on the same table; one that
    /// adopted the view or a later one is not.
    fn setup(
        &self,
        ctx: &MnContext<'_>,
        h: Head,
        r: &mut Reader<'_>,
    ) -> Result<Vec<u8>, ServiceError> {
        let bad = |m: String| ServiceError::BadRequest(m);
        let mode = r.u8()?;
        let mode = Mode::decode(mode).ok_or_else(|| bad(format!("mode {mode}")))?;
        let groups = r.u16()?;
        let partitions = r.u8()?;
        let nodes: [NodeId; MAX_REPLICAS] = [r.u16()?, r.u16()?, r.u16()?];
        let buckets = r.u64()?;
        let joining = match h.op {
            proto::JOIN => Some(View::decode(r.u64()?)),
            _ => None,
        };
        r.end()?;
        if h.replica as usize >= mode.replicas() || h.group >= groups || partitions == 0 {
            return Err(bad(format!(
                "replica {} of group {} with {groups} groups and {partitions} partitions",
                h.replica, h.group
            )));
        }
        if let Some(v) = joining {
            if v.has(h.replica as usize) || v.changing || v.epoch != h.epoch {
                return Err(bad(format!("replica {} cannot learn view {v:?}", h.replica)));
            }
        }
        let setup = Setup {
            mode,
            store: h.store,
            group: h.group,
            replica: h.replica,
            groups,
            partitions,
            nodes,
            buckets,
        };
        let mut map = self.replicas.write().expect("replica map");
        let key = (ctx.node, h.store, h.group, h.replica);
        let old = map.get(&key).cloned();
        let table = match (old, joining) {
            (Some(_), None) => {
                return Err(ServiceError::Failed(format!(
                    "replica {} of group {} of the store at root slot {} already exists here",
                    h.replica, h.group, h.store
                )))
            }
            (Some(old), Some(v)) => {
                // A replacement that started over, or a member the view dropped while it was
                // alive (a wrong suspicion): both are out of `v`. One that adopted `v` or a
                // later view is not.
                let s = *old.serving.lock().expect("view lock");
                if !s.joining && s.view.epoch >= v.epoch {
                    return Ok(vec![proto::STALE]);
                }
                old.retire();
                if let Some(t) = old.table {
                    ctx.memory.zero(t.offset, t.buckets * BUCKET);
                }
                old.table
            }
            (None, _) if mode.table_at(h.replica as usize) => {
                let bytes =
                    buckets.checked_mul(BUCKET).ok_or_else(|| bad(format!("{buckets} buckets")))?;
                Some(TableAt {
                    node: ctx.node,
                    offset: alloc_local(ctx.memory, bytes, BUCKET)?,
                    buckets,
                })
            }
            (None, _) => None,
        };
        map.insert(key, Arc::new(Replica::new(setup, table, joining)));
        let offset = table.map_or(0, |t| t.offset).to_le_bytes();
        Ok(match joining {
            Some(_) => [&[proto::DONE][..], &offset].concat(),
            None => offset.to_vec(),
        })
    }
}

impl Service for Server {
    fn name(&self) -> &str {
        "histore"
    }

    fn restarted(&self, node: NodeId) {
        self.replicas.write().expect("replica map").retain(|k, _| k.0 != node);
    }

    fn handle(&self, ctx: &MnContext<'_>, request: &[u8]) -> Result<Vec<u8>, ServiceError> {
        let mut r = Reader::new(request);
        let h = r.head()?;
        if h.op == proto::SETUP || h.op == proto::JOIN {
            return self.setup(ctx, h, &mut r);
        }
        let Ok(rep) = self.replica(ctx.node, h) else {
            // Nothing here by that name: the node restarted and lost it, which is down.
            let mut out = vec![proto::DOWN];
            out.u16(ctx.node);
            return Ok(out);
        };
        let mut out = vec![proto::DONE];
        let done = match h.op {
            proto::WRITE => {
                let e = r.entry()?;
                r.end()?;
                rep.write(ctx, h.epoch, e).map(|existed| out.u8(existed as u8))
            }
            proto::SHIP => rep.ship(ctx, h.epoch, &mut r, &mut out),
            proto::WATERMARK => {
                r.end()?;
                rep.watermark(h.epoch, &mut out)
            }
            proto::LOOKUP => {
                let key = r.key()?;
                r.end()?;
                rep.lookup(ctx, h.epoch, key, &mut out)
            }
            proto::SCAN => {
                let count = r.u32()? as usize;
                let lo = r.key()?;
                let hi = match r.u8()? {
                    0 => None,
                    _ => Some(r.key()?),
                };
                r.end()?;
                rep.scan(ctx, h.epoch, lo, hi, count, &mut out)
            }
            proto::ADOPT => {
                let view = View::decode(r.u64()?);
                r.end()?;
                if view.epoch != h.epoch {
                    return Err(ServiceError::BadRequest("ADOPT of another epoch".into()));
                }
                rep.adopt(view)
            }
            proto::ACTIVATE => {
                r.end()?;
                rep.activate(ctx, h.epoch)
            }
            proto::TAIL => rep.tail(h.epoch, &mut r, &mut out),
            proto::SNAPSHOT => rep.snapshot(ctx, h.epoch, &mut r, &mut out),
            proto::COPY => rep.copy(ctx, &mut r),
            proto::PING => {
                r.end()?;
                rep.ping(h.epoch)
            }
            op => return Err(ServiceError::BadRequest(format!("op {op}"))),
        };
        answer(done, out)
    }

    /// A WRITE's log (its replica and partition): a core takes together the writes queued for
    /// one log, the entries one worker thread of the paper ships in a batch. Other requests
    /// are served alone.
    fn batch_key(&self, request: &[u8]) -> Option<u64> {
        let mut r = Reader::new(request);
        let h = r.head().ok().filter(|h| h.op == proto::WRITE)?;
        let node = self.replicas.read().expect("replica map");
        // The replica's node is not in the request; every node's replica of a store has the
        // same shape, so any one of them places the key.
        let rep = node.iter().find(|(k, _)| (k.1, k.2, k.3) == (h.store, h.group, h.replica))?.1;
        let key = r.entry().ok()?.key;
        let p = rep.setup.place(&key).partition as u64;
        Some((h.store as u64) << 40 | (h.group as u64) << 24 | (h.replica as u64) << 16 | p)
    }

    /// The most writes one core takes at once: as many as one SHIP carries.
    fn batch_limit(&self) -> usize {
        MAX_SHIP as usize
    }

    /// Requests that waited together: WRITEs are logged first, all of them, then committed,
    /// so that one leader turn per partition ships the whole batch to the backups (the
    /// paper's log synchronization in a batch); every other request is answered as alone.
    fn handle_batch(
        &self,
        ctx: &MnContext<'_>,
        requests: &[&[u8]],
    ) -> Vec<Result<Vec<u8>, ServiceError>> {
        let mut answers = Vec::with_capacity(requests.len());
        let mut waiting = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            match self.log_if_write(ctx, request) {
                Step::Waiting(rep, w) => {
                    waiting.push((i, rep, w));
                    answers.push(Ok(Vec::new()));
                }
                Step::Answer(a) => answers.push(a),
                Step::Alone => answers.push(self.handle(ctx, request)),
            }
        }
        for (i, rep, w) in &waiting {
            let mut out = vec![proto::DONE];
            let done = rep.commit(ctx, w).and_then(|()| rep.written(w));
            answers[*i] = answer(done.map(|existed| out.u8(existed as u8)), out);
        }
        answers
    }
}

/// What a batch does first with one of its requests.
enum Step {
    /// A WRITE logged, waiting for its group commit.
    Waiting(Arc<Replica>, Waiting),
    /// Answered already.
    Answer(Result<Vec<u8>, ServiceError>),
    /// Anything else: answered as alone.
    Alone,
}

impl Server {
    /// A request's first step in a batch: a WRITE is logged ([`Replica::log_write`]).
    fn log_if_write(&self, ctx: &MnContext<'_>, request: &[u8]) -> Step {
        let mut r = Reader::new(request);
        let h = match r.head() {
            Ok(h) if h.op == proto::WRITE => h,
            _ => return Step::Alone,
        };
        let Ok(rep) = self.replica(ctx.node, h) else {
            return Step::Alone;
        };
        let e = match r.entry().and_then(|e| r.end().map(|()| e)) {
            Ok(e) => e,
            Err(e) => return Step::Answer(Err(e)),
        };
        match rep.log_write(ctx, h.epoch, e) {
            Ok(Logged::Waiting(w)) => Step::Waiting(rep, w),
            Ok(Logged::Answered(existed)) => Step::Answer(Ok(vec![proto::DONE, existed as u8])),
            Err(refused) => Step::Answer(answer(Err(refused), Vec::new())),
        }
    }
}

/// A request's reply: `out` if it was done, else its status.
fn answer(done: Result<(), Refused>, out: Vec<u8>) -> Result<Vec<u8>, ServiceError> {
    match done {
        Ok(()) => Ok(out),
        Err(Refused::Stale) => Ok(vec![proto::STALE]),
        Err(Refused::Down(node)) => {
            let mut out = vec![proto::DOWN];
            out.u16(node);
            Ok(out)
        }
        Err(Refused::Unfit(node)) => {
            let mut out = vec![proto::UNFIT];
            out.u16(node);
            Ok(out)
        }
        Err(Refused::Bad(e)) => Err(e),
    }
}

/// The SETUP request for the replica `s` describes.
pub fn setup_request(s: &Setup) -> Vec<u8> {
    setup_message(s, None)
}

/// The JOIN request for the replica `s` describes, a replacement learning view `v`.
pub fn join_request(s: &Setup, v: View) -> Vec<u8> {
    setup_message(s, Some(v))
}

fn setup_message(s: &Setup, joining: Option<View>) -> Vec<u8> {
    let mut m = Vec::with_capacity(proto::HEAD + 28);
    let (op, epoch) = joining.map_or((proto::SETUP, 0), |v| (proto::JOIN, v.epoch));
    m.head(Head { op, replica: s.replica, group: s.group, store: s.store, epoch });
    m.u8(s.mode as u8);
    m.u16(s.groups);
    m.u8(s.partitions);
    for n in s.nodes {
        m.u16(n);
    }
    m.u64(s.buckets);
    if let Some(v) = joining {
        m.u64(v.word());
    }
    m
}
