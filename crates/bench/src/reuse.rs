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
use crate::{share, Plan, Window};

/// Reads whose key their compute node read before, over all reads, for a run of `n` clients
/// with `per_cn` on each node (clients `cn * per_cn ..` on node `cn`); `None` if the streams
/// cannot be drawn ahead or the run has no reads.
///
/// With a `window` (`--window`), of the reads inside it, the share whose key the node read
/// before (inside the window or earlier): client `i`'s operation `p` of its share `s` is taken
/// to run when the run is `p / s` through, as when clients keep pace.
pub(crate) fn key_reuse(
    plan: &Plan,
    n: usize,
    per_cn: usize,
    window: Option<Window>,
) -> Option<f64> {
    if plan.trace.is_some() || per_cn == 0 {
        return None;
    }
    let (from, to) = window.map_or((0.0, 1.0), |w| (w.from(), w.to()));
    let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);
    let is_read = |o: &&PlannedOp| o.kind == OpKind::Read;
    let (mut reads, mut first_reads) = (0u64, 0u64);
    // Each read key of a node, with how far through the run a client first read it and
    // whether that was inside the window.
    let mut keys: Vec<(u64, f64, bool)> = Vec::new();
    for first in (0..n).step_by(per_cn) {
        keys.clear();
        for i in first..(first + per_cn).min(n) {
            let OpSource::Planned { ops, .. } = planned_source(plan, &shared, i, n) else {
                return None;
            };
            // The client replays `ops` cyclically for its share of the run.
            let run = share(plan.ops, n, i);
            if ops.is_empty() || run == 0 {
                continue;
            }
            let all = ops.iter().filter(is_read).count() as u64;
            let len = ops.len() as u64;
            // Reads among the client's first `x` operations.
            let upto = |x: u64| {
                let rest = ops[..(x % len) as usize].iter().filter(is_read).count() as u64;
                x / len * all + rest
            };
            // The client's operations inside the window: from the first at `from` of its share.
            let at = |f: f64| ((f * run as f64).ceil() as u64).min(run);
            let inside = at(from)..at(to);
            reads += upto(inside.end) - upto(inside.start);
            let seen = &ops[..run.min(len) as usize];
            let reads_at = seen.iter().enumerate().filter(|(_, o)| is_read(o));
            keys.extend(
                reads_at.map(|(p, o)| (o.key, p as f64 / run as f64, inside.contains(&(p as u64)))),
            );
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        keys.dedup_by_key(|k| k.0);
        first_reads += keys.iter().filter(|k| k.2).count() as u64;
    }
    (reads > 0).then(|| (reads - first_reads) as f64 / reads as f64)
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
            dealt: None,
            load: None,
            bulk: false,
            items: 5000,
            ops,
            stream,
            seed: 7,
        }
    }

    /// Every client's operations as the run performs them, one by one, the clients keeping
    /// pace, and a set per node: the share of the reads inside `[from, to)` of the run that
    /// repeat a key.
    fn replayed(plan: &Plan, n: usize, per_cn: usize, (from, to): (f64, f64)) -> f64 {
        let shared = Shared::new(plan.spec.clone(), plan.format, plan.items, plan.ops);
        let (mut reads, mut repeats) = (0, 0);
        for first in (0..n).step_by(per_cn) {
            // (how far through the run, client, key, read) of each of the node's operations.
            let mut ops = Vec::new();
            for i in first..(first + per_cn).min(n) {
                let mut src = planned_source(plan, &shared, i, n);
                let mut op =
                    Op { kind: OpKind::Read, key: Vec::new(), scan_len: 0, insert_number: None };
                let run = share(plan.ops, n, i);
                for p in 0..run {
                    src.next_into(&mut op);
                    let f = p as f64 / run as f64;
                    ops.push((f, i, op.key.clone(), op.kind == OpKind::Read));
                }
            }
            ops.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut seen = HashSet::new();
            for (f, _, key, read) in ops {
                if read {
                    let repeat = !seen.insert(key);
                    if (from..to).contains(&f) {
                        reads += 1;
                        repeats += u32::from(repeat);
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
            let got = key_reuse(&p, n, per_cn, None).unwrap();
            let want = replayed(&p, n, per_cn, (0.0, 1.0));
            assert!((got - want).abs() < 1e-12, "{w} {ops}/{stream} {n}/{per_cn}: {got} vs {want}");
        }
        // Nodes count their own reads: one node of all clients repeats at least as much.
        let p = plan("c", 3000, 3000);
        assert!(key_reuse(&p, 4, 4, None).unwrap() >= key_reuse(&p, 4, 1, None).unwrap());
    }

    /// With a window, the reads inside it that repeat a key the node read before it or inside
    /// it; a window after the stream's first pass repeats every read.
    #[test]
    fn key_reuse_of_a_window_counts_the_reads_inside_it() {
        for (w, ops, stream, n, per_cn, from, to) in [
            ("c", 3000, 3000, 4, 2, 0.4, 0.8),
            ("c", 3001, 700, 6, 3, 0.1, 0.3),
            ("b", 4000, 1333, 5, 2, 0.25, 0.5),
            ("c", 2000, 1999, 3, 3, 0.0, 0.5),
        ] {
            let p = plan(w, ops, stream);
            let window = Window::new(from, to).unwrap();
            let got = key_reuse(&p, n, per_cn, Some(window)).unwrap();
            let want = replayed(&p, n, per_cn, (from, to));
            assert!((got - want).abs() < 1e-12, "{w} {ops}/{stream} {from}:{to}: {got} vs {want}");
        }
        let (p, late) = (plan("c", 5000, 1000), Window::new(0.4, 0.8).unwrap());
        assert_eq!(key_reuse(&p, 4, 2, Some(late)), Some(1.0));
        let (early, whole) = (Window::new(0.0, 0.2).unwrap(), key_reuse(&p, 4, 2, None).unwrap());
        assert!(key_reuse(&p, 4, 2, Some(early)).unwrap() < whole);
    }

    #[test]
    fn streams_that_cannot_be_drawn_ahead_have_no_ceiling() {
        assert_eq!(key_reuse(&plan("d", 100, 100), 2, 1, None), None);
        let mut p = plan("c", 100, 100);
        p.trace = Some(Arc::new(Vec::new()));
        assert_eq!(key_reuse(&p, 2, 1, None), None);
    }
}
