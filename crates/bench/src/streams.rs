//! Where each client's run-phase operations come from, and what drawing them ahead costs.
//!
//! # Sources
//!
//! * A trace, dealt to the clients ([`Dealt`]) by key (`--deal by-key`, the default): every
//!   operation of a key goes to one client, which replays them in trace order, so what a trace
//!   orders on one key (an insert, then a read of it) stays in order. Round-robin
//!   (`--deal round-robin`): client `i` of `n` replays lines `i, i + n, …`, and a read can
//!   overtake the insert of its key on another client. Either way a client replays its lines
//!   cyclically if it runs more operations than it has.
//! * A YCSB stream, generated as the client goes (streams with inserts or "latest", whose keys
//!   depend on which inserts completed; and every stream on the simulator, where generating costs
//!   no virtual time).
//! * A YCSB stream drawn ahead, before a timed run phase starts, so that the generator is not in
//!   the measured time (`local`, `ucx`).
//!
//! # Replaying a shorter stream (`--stream-ops`)
//!
//! The reference harnesses of CHIME, Sherman and SMART draw a fixed trace (60 M operations) and
//! replay each client's slice cyclically for a fixed time (ten epochs of 0.5 s), so a client's
//! keys come back once its slice wraps. With `stream_ops` each client draws its share of that
//! many operations and replays it for its share of the run's operations, on every transport.
//! This is what a per-node cache of keys (CHIME's hotspot buffer) sees in those runs: its hit
//! ratio depends on how often keys come back ([`crate::reuse`]).

use std::sync::Arc;

use dmindex_ycsb::{ClientStream, Op, Shared};

use crate::runner::OpSource;
use crate::{share, BenchConfig, Plan};

/// A trace's lines dealt to `n` clients by key: client `i` replays lines
/// `order[starts[i]..starts[i + 1]]`, in trace order.
///
/// A key's operations all go to one client, so those that depend on each other through the key
/// (an insert and the reads, updates and deletes after it) keep their trace order. A scan goes
/// with its start key: it may still overtake an insert of another key in its range, which
/// another client replays. Dealt once, before the run phase, so that a client's next operation
/// is an index into the trace (no allocation per operation).
#[derive(Debug)]
pub struct Dealt {
    order: Vec<usize>,
    starts: Vec<usize>,
}

impl Dealt {
    /// Deals `ops` to `n` clients (at least one) by key.
    pub(crate) fn by_key(ops: &[Op], n: usize) -> Dealt {
        let n = n.max(1);
        let owner: Vec<usize> = ops.iter().map(|op| client_of(&op.key, n)).collect();
        // A counting sort by owner, stable, so each client's lines stay in trace order.
        let mut starts = vec![0; n + 1];
        for &c in &owner {
            starts[c + 1] += 1;
        }
        for c in 0..n {
            starts[c + 1] += starts[c];
        }
        let mut fill = starts[..n].to_vec();
        let mut order = vec![0; ops.len()];
        for (line, &c) in owner.iter().enumerate() {
            order[fill[c]] = line;
            fill[c] += 1;
        }
        Dealt { order, starts }
    }

    /// The clients dealt to.
    pub(crate) fn clients(&self) -> usize {
        self.starts.len() - 1
    }

    /// Client `i`'s lines, in trace order.
    pub(crate) fn lines(&self, i: usize) -> &[usize] {
        &self.order[self.starts[i]..self.starts[i + 1]]
    }

    /// Client `i`'s share of a run phase of `ops` operations: in proportion to its lines, so
    /// that with `ops` the trace's length each client replays its lines once (a client with
    /// none gets none), and the shares add up to `ops`.
    pub(crate) fn share(&self, ops: u64, i: usize) -> u64 {
        let total = self.order.len().max(1) as u128;
        let upto = |line: usize| (ops as u128 * line as u128 / total) as u64;
        upto(self.starts[i + 1]) - upto(self.starts[i])
    }
}

/// The client of `n` that replays every operation of `key`: a stable hash (FNV-1a, then
/// SplitMix64's finaliser, so that keys that differ in a last byte spread), the same on every
/// run and machine, scaled to `0..n` by a multiply-shift.
pub(crate) fn client_of(key: &[u8], n: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    ((h as u128 * n as u128) >> 64) as usize
}

/// Bytes one operation drawn ahead takes.
const PLANNED_OP_BYTES: u64 = std::mem::size_of::<dmindex_ycsb::PlannedOp>() as u64;

/// Client `i` of `n`'s source, generated as it goes (or its trace slice).
pub(crate) fn op_source(plan: &Plan, shared: &Arc<Shared>, i: usize, n: usize) -> OpSource {
    match &plan.trace {
        Some(t) => match &plan.dealt {
            Some(d) => {
                assert_eq!(d.clients(), n, "the trace was dealt to the run's client tasks");
                OpSource::Dealt { ops: Arc::clone(t), dealt: Arc::clone(d), client: i, next: 0 }
            }
            None => OpSource::Trace {
                ops: Arc::clone(t),
                index: i % t.len().max(1),
                clients: n.min(t.len()),
                next: 0,
            },
        },
        None => OpSource::Generated(Box::new(ClientStream::new(
            Arc::clone(shared),
            plan.seed,
            i as u64,
        ))),
    }
}

/// Client `i` of `n`'s source with its share of the stream drawn now, if the stream allows it
/// (else as [`op_source`]): replayed cyclically if the stream is shorter than its run.
pub(crate) fn planned_source(plan: &Plan, shared: &Arc<Shared>, i: usize, n: usize) -> OpSource {
    op_source(plan, shared, i, n).planned(share(plan.stream, n, i), plan.format)
}

/// Every client's source, drawn ahead where the stream allows: made before a timed run phase
/// starts.
pub(crate) fn planned_sources(plan: &Plan, shared: &Arc<Shared>, n: usize) -> Vec<OpSource> {
    (0..n).map(|i| planned_source(plan, shared, i, n)).collect()
}

/// The flag that needs the run's streams drawn ahead, if one is given: `--key-reuse` or
/// `--stream-ops` (the first if both), for errors that name it.
pub(crate) fn draw_ahead_flag(cfg: &BenchConfig) -> Option<&'static str> {
    if cfg.output.key_reuse {
        Some("--key-reuse")
    } else {
        cfg.workload.stream_ops.map(|_| "--stream-ops")
    }
}

/// Refuses `--key-reuse` and `--stream-ops` on a stream that cannot be drawn ahead, and
/// operations drawn ahead that would take more than half of `machine` bytes (the index and the
/// run need the rest), naming the flag. Traces are refused earlier, before they are read.
pub(crate) fn check_planned(
    cfg: &BenchConfig,
    plan: &Plan,
    machine: Option<u64>,
) -> anyhow::Result<()> {
    if !plan.spec.plannable() {
        if let Some(flag) = draw_ahead_flag(cfg) {
            anyhow::bail!(
                "{flag} draws the run's streams ahead: it needs a YCSB workload without \
                 inserts or \"latest\" (a, b, c, f or a --mix like them)"
            );
        }
        return Ok(());
    }
    if plan.trace.is_some() {
        return Ok(());
    }
    // The simulator generates as it goes unless a stream is replayed.
    let drawn = match (cfg.cluster.transport, cfg.workload.stream_ops) {
        (crate::TransportKind::Sim, None) => return Ok(()),
        _ => plan.stream,
    };
    let bytes = drawn.saturating_mul(PLANNED_OP_BYTES);
    if let Some(machine) = machine.filter(|&m| bytes > m / 2) {
        let flag = if cfg.workload.stream_ops.is_some() { "--stream-ops" } else { "--ops" };
        anyhow::bail!(
            "{flag} {drawn}: drawing {drawn} operations ahead takes {} GiB, more than half of \
             this machine's {} GiB (draw fewer, or replay a shorter stream with --stream-ops)",
            bytes >> 30,
            machine >> 30
        );
    }
    Ok(())
}

/// This machine's memory in bytes (`MemTotal`), if it can be read.
pub fn machine_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use dmindex_ycsb::OpKind;

    use super::*;

    /// `len` operations on `keys` keys, their kinds and keys mixed by a fixed LCG.
    fn trace(len: usize, keys: u64) -> Vec<Op> {
        let mut x: u64 = 12345;
        let kinds = [OpKind::Insert, OpKind::Read, OpKind::Update, OpKind::Scan, OpKind::Delete];
        (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let key = format!("user{}", (x >> 33) % keys).into_bytes();
                let kind = kinds[((x >> 20) % kinds.len() as u64) as usize];
                Op { kind, key, scan_len: 5, insert_number: None }
            })
            .collect()
    }

    /// Every line goes to exactly one client, each client's lines are in trace order, all of a
    /// key's lines go to the one client its hash names, and the keys spread over the clients.
    #[test]
    fn dealing_by_key_keeps_each_keys_operations_in_order_on_one_client() {
        let ops = trace(4000, 200);
        for n in [1, 2, 3, 8] {
            let d = Dealt::by_key(&ops, n);
            assert_eq!(d.clients(), n);
            let mut seen: Vec<usize> = (0..n).flat_map(|i| d.lines(i).to_vec()).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..ops.len()).collect::<Vec<_>>(), "{n} clients");
            let mut owner: HashMap<&[u8], usize> = HashMap::new();
            for i in 0..n {
                let lines = d.lines(i);
                assert!(lines.windows(2).all(|w| w[0] < w[1]), "client {i} of {n} out of order");
                for &l in lines {
                    let key = ops[l].key.as_slice();
                    assert_eq!(*owner.entry(key).or_insert(i), i, "a key on two clients");
                    assert_eq!(client_of(key, n), i);
                }
            }
            // 200 keys over n clients: each gets some, none more than twice its fair share.
            let mut keys = vec![0usize; n];
            for &c in owner.values() {
                keys[c] += 1;
            }
            let fair = owner.len() / n;
            assert!(keys.iter().all(|&k| k > 0 && k <= 2 * fair), "{n} clients: {keys:?}");
        }
    }

    /// Shares follow the lines dealt: with the trace's length each client replays its lines
    /// once, and for any run length the shares add up to it.
    #[test]
    fn dealt_shares_add_up_to_the_run() {
        let ops = trace(1000, 37);
        let d = Dealt::by_key(&ops, 5);
        for i in 0..5 {
            assert_eq!(d.share(1000, i), d.lines(i).len() as u64);
        }
        for run in [0, 1, 7, 999, 1001, 3 * 1000 + 5, u64::MAX / 2] {
            assert_eq!((0..5).map(|i| d.share(run, i)).sum::<u64>(), run, "run of {run}");
        }
        // A client dealt nothing gets nothing, however long the run.
        let one_key = vec![Op { key: b"k".to_vec(), ..Op::default() }; 10];
        let d = Dealt::by_key(&one_key, 4);
        let owner = client_of(b"k", 4);
        for i in 0..4 {
            assert_eq!(d.share(25, i), if i == owner { 25 } else { 0 });
        }
    }

    /// A dealt source hands out its client's lines in trace order, then again from the first.
    #[test]
    fn a_dealt_source_replays_its_lines_in_order_cyclically() {
        let ops = Arc::new(trace(300, 20));
        let dealt = Arc::new(Dealt::by_key(&ops, 3));
        for client in 0..3 {
            let mine = dealt.lines(client).to_vec();
            let dealt = Arc::clone(&dealt);
            let mut src = OpSource::Dealt { ops: Arc::clone(&ops), dealt, client, next: 0 };
            let mut op = Op::default();
            for k in 0..2 * mine.len() {
                src.next_into(&mut op);
                assert_eq!(op, ops[mine[k % mine.len()]], "client {client}, operation {k}");
            }
        }
    }
}
