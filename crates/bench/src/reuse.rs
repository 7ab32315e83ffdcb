//! Key reuse per compute node: the ceiling of any cache a compute node fills from its own reads.
//!
//! # What
//!
//! Of a run's reads, the share whose key a read of the same compute node had asked for before
//! in the run: for each node, 1 − (distinct keys among its reads) / (its reads), weighted by its
//! reads. A per-node cache that learns a key when one of the node's reads finds it (CHIME's
//! hotspot buffer) cannot answer a node's first read of a key, so whatever its size, sets and
//! replacement, its hit ratio stays at or under this share. (Updates teach CHIME's buffer too;
//! counting only reads keeps the share independent of how clients interleave, and for YCSB C
//! it is exact.)
//!
//! # Why it matters
//!
//! Under YCSB's zipfian the share depends on how many reads each node performs, not only on the
//! skew: YCSB draws a rank from a zipfian over 10^10 items and hashes it onto the key space, so
//! at 60 M keys about a quarter of the draws have a rank beyond the key count and land on
//! near-uniform keys, nearly all of them first reads. A hit ratio is only comparable with a
//! paper's next to this ceiling.
//!
//! # How
//!
//! The run's own streams are drawn again (the same seeds, clients and shares as the run, replayed
//! cyclically when `--stream-ops` is shorter: [`crate::streams`]) and each node's read keys
//! sorted and counted; a trace or a stream that cannot be drawn ahead (inserts, "latest") has no
//! ceiling here. Memory: one node's read keys at a time, 8 B each, and one client's stream.

use dmindex_ycsb::{OpKind, PlannedOp, Shared};

use crate::runner::OpSource;
use crate::streams::planned_source;
use crate::{share, Plan};

/// Reads whose key their compute node read before, over all reads, for a run of `n` clients
/// with `per_cn` on each node (clients `cn * per_cn ..` on node `cn`); `None` if the streams
/// cannot be drawn ahead or the run has no reads.
pub(crate) fn key_reuse(plan: &Plan, n: usize, per_cn: usize) -> Option<f64> {
    if plan.trace.is_some() || per_cn == 0 {
        return None;
    }
    let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);
    let is_read = |o: &&PlannedOp| o.kind == OpKind::Read;
    let (mut reads, mut distinct) = (0u64, 0u64);
    let mut keys = Vec::new();
    for first in (0..n).step_by(per_cn) {
        keys.clear();
        for i in first..(first + per_cn).min(n) {
            let OpSource::Planned { ops, .. } = planned_source(plan, &shared, i, n) else {
                return None;
            };
            // The client replays `ops` cyclically for its share of the run.
            let run = share(plan.ops, n, i) as usize;
            let seen = &ops[..run.min(ops.len())];
            if let Some(cycles) = run.checked_div(ops.len()) {
                let rest = &ops[..run % ops.len()];
                let all = ops.iter().filter(is_read).count();
                reads += (cycles * all + rest.iter().filter(is_read).count()) as u64;
            }
            keys.extend(seen.iter().filter(is_read).map(|o| o.key));
        }
        keys.sort_unstable();
        keys.dedup();
        distinct += keys.len() as u64;
    }
    (reads > 0).then(|| (reads - distinct) as f64 / reads as f64)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use dmindex_ycsb::{KeyFormat, Op, WorkloadSpec};

    use super::*;

    fn plan(workload: &str, ops: u64, stream: u64) -> Plan {
        Plan {
            format: KeyFormat::new(8, false).unwrap(),
            spec: WorkloadSpec::named(workload).unwrap(),
            trace: None,
            load: None,
            items: 5000,
            ops,
            stream,
            seed: 7,
        }
    }

    /// Every client's operations as the run performs them, one by one, and a set per node.
    fn replayed(plan: &Plan, n: usize, per_cn: usize) -> f64 {
        let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);
        let (mut reads, mut repeats) = (0, 0);
        for first in (0..n).step_by(per_cn) {
            let mut seen = HashSet::new();
            for i in first..(first + per_cn).min(n) {
                let mut src = planned_source(plan, &shared, i, n);
                let mut op =
                    Op { kind: OpKind::Read, key: Vec::new(), scan_len: 0, insert_number: None };
                for _ in 0..share(plan.ops, n, i) {
                    src.next_into(&mut op);
                    if op.kind == OpKind::Read {
                        reads += 1;
                        repeats += u32::from(!seen.insert(op.key.clone()));
                    }
                }
            }
        }
        f64::from(repeats) / f64::from(reads)
    }

    #[test]
    fn key_reuse_counts_what_the_replayed_run_repeats() {
        for (w, ops, stream, n, per_cn) in [
            ("c", 3000, 3000, 4, 2),
            ("c", 3001, 700, 6, 3),
            ("b", 4000, 333, 5, 2),
            ("c", 2000, 1999, 3, 3),
        ] {
            let p = plan(w, ops, stream);
            let got = key_reuse(&p, n, per_cn).unwrap();
            let want = replayed(&p, n, per_cn);
            assert!((got - want).abs() < 1e-12, "{w} {ops}/{stream} {n}/{per_cn}: {got} vs {want}");
        }
        // Nodes count their own reads: one node of all clients repeats at least as much.
        let p = plan("c", 3000, 3000);
        assert!(key_reuse(&p, 4, 4).unwrap() >= key_reuse(&p, 4, 1).unwrap());
    }

    #[test]
    fn streams_that_cannot_be_drawn_ahead_have_no_ceiling() {
        assert_eq!(key_reuse(&plan("d", 100, 100), 2, 1), None);
        let mut p = plan("c", 100, 100);
        p.trace = Some(Arc::new(Vec::new()));
        assert_eq!(key_reuse(&p, 2, 1), None);
    }
}
