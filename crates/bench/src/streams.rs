//! Where each client's run-phase operations come from, and what drawing them ahead costs.
//!
//! # Sources
//!
//! * A trace: client `i` of `n` replays lines `i, i + n, …` cyclically.
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

use dmindex_ycsb::{ClientStream, Shared};

use crate::runner::OpSource;
use crate::{share, BenchConfig, Plan};

/// Bytes one operation drawn ahead takes.
const PLANNED_OP_BYTES: u64 = std::mem::size_of::<dmindex_ycsb::PlannedOp>() as u64;

/// Client `i` of `n`'s source, generated as it goes (or its trace slice).
pub(crate) fn op_source(plan: &Plan, shared: &Arc<Shared>, i: usize, n: usize) -> OpSource {
    match &plan.trace {
        Some(t) => OpSource::Trace {
            ops: Arc::clone(t),
            index: i % t.len().max(1),
            clients: n.min(t.len()),
            next: 0,
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
