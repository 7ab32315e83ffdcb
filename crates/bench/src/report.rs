//! What a run measured: [`BenchReport`] (table and JSON) and how client metrics are summed into it.

use anyhow::bail;
use dmindex_fabric::{FabricError, Transport, VerbCounts};
use dmindex_index::{IndexError, IndexStats, PointIndex};
use dmindex_ycsb::OpKind;
use serde::{Deserialize, Serialize};

use crate::runner::{self, ClientMetrics, Mark};
use crate::{BenchConfig, Plan, TransportKind, Window};

/// Latency percentiles, mean and maximum in µs, all of one population: every operation on
/// virtual time, the timed sample on a real clock ([`crate::runner::Timing`]).
///
/// The mean can sit above p99.9 without any error: when fewer than one operation in a thousand
/// takes thousands of times longer than the rest (a client thread the host deschedules for a
/// few ms), those few carry most of the time, and `max` shows them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    #[serde(default)]
    pub mean: f64,
    #[serde(default)]
    pub max: f64,
}

/// Per-operation-kind figures of the run phase.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OpBreakdown {
    pub op: String,
    pub count: u64,
    /// Of `count`, operations that found their key: searches that hit, updates and deletes of
    /// present keys, read-modify-writes of present keys, scans that returned pairs (`null` for
    /// inserts, which are upserts).
    pub found: Option<u64>,
    /// Of `count`, operations that did not.
    pub not_found: Option<u64>,
    pub latency_us: Latency,
    pub round_trips_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
}

/// The part of the run phase a report measured (`--window`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MeasuredWindow {
    /// Where it opened and closed, as fractions of the run phase's operations.
    pub from: f64,
    pub to: f64,
    /// Completed operations of the run phase when it opened and closed.
    pub opened_at_op: u64,
    pub closed_at_op: u64,
    /// Operations of the whole run phase.
    pub phase_ops: u64,
    /// When it opened and closed, in seconds from the run phase's start (virtual time on sim).
    pub opened_s: f64,
    pub closed_s: f64,
}

/// What one `bench` run measured. Field names are stable: scripts depend on them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BenchReport {
    pub index: String,
    pub transport: TransportKind,
    pub preset: Option<String>,
    pub workload: String,
    pub items: u64,
    /// Run-phase operations measured: all of them, or those started inside the `window`.
    pub ops: u64,
    pub cns: u16,
    pub clients: usize,
    pub coroutines: usize,
    pub seed: u64,
    /// Load phase inserts per second (real time on local, virtual on sim; 0 when fast-forward
    /// or bulk-loaded).
    pub load_throughput_ops: f64,
    /// Whether the load phase ran by fast-forward (untimed, `--fast-load`).
    #[serde(default)]
    pub load_fast_forward: bool,
    /// Whether the load phase was the index's bulk load (untimed, `--bulk-load`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub load_bulk: bool,
    /// Run phase operations per second (real time on local, virtual on sim); with a `window`,
    /// the completions between its marks over the time between them.
    pub throughput_ops: f64,
    /// The part of the run phase every run-phase figure is of (`--window`): throughput,
    /// latencies, per-operation verbs and bytes, the index's counters and retries (its levels,
    /// such as the cache in use, at the window's close). Absent: the whole run phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<MeasuredWindow>,
    pub latency_us: Latency,
    pub round_trips_per_op: f64,
    pub verbs_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
    pub cas_failures_per_op: f64,
    pub retries: u64,
    /// CN-side cache bytes in use, averaged over compute nodes.
    pub cache_bytes: u64,
    /// Bytes allocated on memory nodes (whole allocation chunks).
    pub remote_bytes: u64,
    /// Of those, bytes the clients carved for the index's objects during load and run (the
    /// index's memory-side footprint, without the chunks' unused reserve).
    #[serde(default)]
    pub index_bytes: u64,
    pub load_factor: Option<f64>,
    /// Of the run's reads (with a `window`, those inside it), the share whose key their compute
    /// node had read before in the run: the ceiling of a per-node cache's hit ratio
    /// (`--key-reuse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_reuse: Option<f64>,
    /// Index-specific counters summed over compute nodes (e.g. leaf splits).
    pub index_stats: std::collections::BTreeMap<String, u64>,
    pub per_op: Vec<OpBreakdown>,
    /// Seconds of real time the run phase took.
    pub run_seconds: f64,
    /// The memory node that failed during the run phase, and its rebuild (`--mn-crash-us`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<crate::Recovery>,
    /// The history's verdict (`--check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<crate::Checked>,
    /// Run-phase completions per interval (`--timeline-us`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::Timeline>,
    /// Where the run phase's client time went, per memory node (simulator only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<dmindex_sim::phases::NodePhases>,
    /// The transports a run over UCX was given (`UCX_TLS` when it ran; `None`: unset, UCX's
    /// choice, or not a UCX run), so a chart drawn again from the report names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ucx_tls: Option<String>,
}

impl BenchReport {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "index {} on {}{} | workload {} | {} items, {} ops | {} CN × {} clients × {} coroutines\n",
            self.index,
            serde_json::to_value(self.transport).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            self.preset.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(),
            self.workload,
            self.items,
            self.ops,
            self.cns,
            self.clients,
            self.coroutines
        );
        if let Some(w) = &self.window {
            s += &format!(
                "window {}:{} of the run phase: operations {} to {} of {} completed, {:.3} s to \
                 {:.3} s; the run figures are of the {} operations started inside it\n",
                w.from,
                w.to,
                w.opened_at_op,
                w.closed_at_op,
                w.phase_ops,
                w.opened_s,
                w.closed_s,
                self.ops
            );
        }
        let load = if self.load_bulk {
            "load untimed (bulk load)".to_string()
        } else if self.load_fast_forward {
            "load untimed (fast-forward)".to_string()
        } else {
            format!("load {}", rate(self.load_throughput_ops))
        };
        s += &format!(
            "{load} | run {} | latency p50 {:.2} us p99 {:.2} us p999 {:.2} us mean {:.2} us\n",
            rate(self.throughput_ops),
            self.latency_us.p50,
            self.latency_us.p99,
            self.latency_us.p999,
            self.latency_us.mean
        );
        let l = &self.latency_us;
        if l.mean > l.p999 {
            let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
            let threads = self.cns as usize * self.clients;
            let host = match self.transport {
                TransportKind::Sim => String::new(),
                _ => format!(
                    " (on a real clock, e.g. client threads the host deschedules: {threads} \
                     client threads on {cores} cores here)"
                ),
            };
            s += &format!(
                "note: the mean is above p999: fewer than 1 in 1000 operations took far longer \
                 (up to {:.2} us) and carry most of the time{host}\n",
                l.max
            );
        }
        s += &format!(
            "per op: {:.2} round trips, {:.2} verbs, {:.1} B read, {:.1} B written, {:.3} CAS failures | retries {}\n",
            self.round_trips_per_op,
            self.verbs_per_op,
            self.bytes_read_per_op,
            self.bytes_written_per_op,
            self.cas_failures_per_op,
            self.retries
        );
        s += &format!(
            "cache {:.2} MB per CN | remote {:.2} MB (index objects {:.2} MB){}\n",
            self.cache_bytes as f64 / 1e6,
            self.remote_bytes as f64 / 1e6,
            self.index_bytes as f64 / 1e6,
            self.load_factor.map(|l| format!(" | load factor {:.3}", l)).unwrap_or_default()
        );
        if let Some(r) = self.key_reuse {
            s += &format!(
                "key reuse: {:.2} % of reads repeat a key their compute node read before (for \
                 reads alone, the hit-ratio ceiling of a per-node cache that learns from them)\n",
                r * 100.0
            );
        }
        if !self.index_stats.is_empty() {
            s += "index counters (summed over compute nodes):\n";
            let width = self.index_stats.keys().map(String::len).max().unwrap_or(0);
            for (k, v) in &self.index_stats {
                let label = crate::counters::counter_label(k).map_or_else(
                    || format!("(not described: see docs/{}.md)", self.index),
                    String::from,
                );
                s += &format!("  {k:<width$} {v:>12}  {label}\n");
            }
        }
        if let Some(r) = self.per_op.iter().find(|o| o.op == "read" && o.not_found == Some(o.count))
        {
            s += &format!(
                "warning: all {} reads found no key: do the loaded keys match the workload's or \
                 trace's (key size, --ordered, --ycsb-keys, --load-trace)?\n",
                r.count
            );
        }
        s += &format!(
            "{:<8} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10} {:>10}\n",
            "op", "count", "not found", "p50 us", "p99 us", "RT/op", "B read", "B written"
        );
        for o in &self.per_op {
            s += &format!(
                "{:<8} {:>10} {:>10} {:>9.2} {:>9.2} {:>8.2} {:>10.1} {:>10.1}\n",
                o.op,
                o.count,
                o.not_found.map_or("-".to_string(), |n| n.to_string()),
                o.latency_us.p50,
                o.latency_us.p99,
                o.round_trips_per_op,
                o.bytes_read_per_op,
                o.bytes_written_per_op
            );
        }
        if let Some(r) = &self.recovery {
            s += &r.table();
        }
        if let Some(c) = &self.check {
            let start = match c.unknown_start {
                true => "; each key from a value unknown to this attached run",
                false => "",
            };
            s += &match &c.violation {
                None => format!(
                    "history: linearizable ({} operations, {} never answered, {} keys{start})\n",
                    c.ops, c.pending, c.keys
                ),
                Some(v) => {
                    format!("history: NOT linearizable ({} operations{start}): {v}\n", c.ops)
                }
            };
        }
        s += &self.legend();
        s
    }

    /// What the table's columns and words mean, and what the transport's figures are of.
    fn legend(&self) -> String {
        let mut rows = vec![
            (
                "RT/op",
                "network round trips per operation (a verb, a doorbell batch of verbs or a \
                 request to a memory node's CPU, each awaited once)",
            ),
            ("verbs", "one-sided RDMA operations posted (READ, WRITE, CAS, FAA)"),
            ("B read, B written", "bytes per operation from and to memory nodes"),
            ("CAS failures", "compare-and-swaps that lost to another client"),
            (
                "retries",
                "operations the index started again (a torn read, a lost race, a lock held)",
            ),
            ("not found", "operations whose key was absent"),
            (
                "p50 ... mean",
                "latency percentiles and mean, of the same operations (on a real clock a \
                 sample of them; see docs/bench.md)",
            ),
        ];
        if self.index_stats.keys().any(|k| k.starts_with("rdwc_")) {
            rows.push((
                "RDWC",
                "read delegation and write combining: clients of one compute node that work on \
                 the same key at the same time share one remote operation",
            ));
        }
        rows.push(match self.transport {
            TransportKind::Local => (
                "local",
                "memory nodes inside this process, reached through shared memory with no \
                 network cost: a floor for the index's own work, not a cluster's speed",
            ),
            TransportKind::Sim => (
                "sim",
                "a simulated cluster: throughput and latency are in virtual time of the \
                 modelled testbed (the preset), not of this machine",
            ),
            TransportKind::Ucx => ("ucx", "memory-node processes over OpenUCX, real time"),
        });
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut s = String::from("legend:\n");
        for (k, v) in rows {
            s += &format!("  {k:<width$}  {v}\n");
        }
        s
    }
}

/// Operations per second in the unit that shows at least three significant digits: Mops/s
/// from a million up, kops/s from a thousand, else ops/s.
pub(crate) fn rate(ops_per_s: f64) -> String {
    let (v, unit) = match ops_per_s {
        x if x >= 1e6 => (x / 1e6, "Mops/s"),
        x if x >= 1e3 => (x / 1e3, "kops/s"),
        x => (x, "ops/s"),
    };
    // Three decimals below 10, as many as three significant digits need above.
    let decimals = match v {
        v if v >= 100.0 => 1,
        v if v >= 10.0 => 2,
        _ => 3,
    };
    format!("{v:.decimals$} {unit}")
}

/// The percentiles, mean and maximum of one histogram, so that all are of the same operations.
fn latency(h: &hdrhistogram::Histogram<u64>) -> Latency {
    let q = |p| if h.is_empty() { 0.0 } else { h.value_at_quantile(p) as f64 / 1e3 };
    let mean = if h.is_empty() { 0.0 } else { h.mean() / 1e3 };
    let max = if h.is_empty() { 0.0 } else { h.max() as f64 / 1e3 };
    Latency { p50: q(0.5), p99: q(0.99), p999: q(0.999), mean, max }
}

pub(crate) struct Phase {
    pub(crate) metrics: ClientMetrics,
    pub(crate) ns: u64,
    /// Length of the phase's busy window (0: measured over the whole phase).
    pub(crate) busy_ns: u64,
    pub(crate) counts: VerbCounts,
    /// The measured part of the phase (`--window`).
    pub(crate) window: Option<PhaseWindow>,
}

/// A phase's [`runner::MeasureWindow`] once the phase is over.
pub(crate) struct PhaseWindow {
    pub(crate) window: Window,
    /// Completed operations at which it opened and closed.
    pub(crate) marks: (u64, u64),
    /// When the phase started, on the clock the marks were read on.
    pub(crate) t0: u64,
    pub(crate) opened: Mark,
    pub(crate) closed: Mark,
}

impl PhaseWindow {
    /// Completions between the marks per second of the time between them.
    fn throughput(&self) -> f64 {
        let (open, close) = self.marks;
        match self.closed.ns.saturating_sub(self.opened.ns) {
            0 => 0.0,
            ns => (close - open) as f64 * 1e9 / ns as f64,
        }
    }

    fn report(&self, phase_ops: u64) -> MeasuredWindow {
        let s = |m: &Mark| m.ns.saturating_sub(self.t0) as f64 / 1e9;
        MeasuredWindow {
            from: self.window.from(),
            to: self.window.to(),
            opened_at_op: self.marks.0,
            closed_at_op: self.marks.1,
            phase_ops,
            opened_s: s(&self.opened),
            closed_s: s(&self.closed),
        }
    }

    /// Each compute node's counters over the window: the increase of each count, the value of
    /// each of `levels` (and of the cache in use) at its close.
    fn stats(&self, levels: &[&str]) -> Vec<IndexStats> {
        let opened = self.opened.stats.iter();
        let pairs = self.closed.stats.iter().zip(opened);
        pairs
            .map(|(close, open)| IndexStats {
                cache_bytes: close.cache_bytes,
                retries: close.retries.saturating_sub(open.retries),
                extra: close
                    .extra
                    .iter()
                    .map(|&(k, v)| {
                        let before = open.extra.iter().find(|(o, _)| *o == k).map_or(0, |o| o.1);
                        match levels.contains(&k) {
                            true => (k, v),
                            false => (k, v.saturating_sub(before)),
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

impl Phase {
    /// The error a failed client stopped with, as the run reports it.
    pub(crate) fn failed(&self) -> anyhow::Result<()> {
        match &self.metrics.first_error {
            Some(e @ IndexError::Fabric(FabricError::OutOfMemory { .. })) => bail!(
                "an operation failed: {e} (a memory node's size is --mn-gb, {} GiB unless given)",
                crate::config::DEFAULT_MN_GB
            ),
            Some(e) => bail!("an operation failed: {e}"),
            None => Ok(()),
        }
    }

    /// Operations per second: on real time over the part of the phase in which every client
    /// was busy, on the simulator (no window) over the whole phase of `ops` operations.
    fn throughput(&self, ops: u64) -> f64 {
        match (self.metrics.busy_ops, self.busy_ns, self.ns) {
            (busy, ns, _) if busy > 0 && ns > 0 => busy as f64 * 1e9 / ns as f64,
            (_, _, 0) => 0.0,
            (_, _, ns) => ops as f64 * 1e9 / ns as f64,
        }
    }
}

/// What a finished run hands to [`summarise`].
pub(crate) struct Finished {
    pub(crate) load: Phase,
    pub(crate) run: Phase,
    pub(crate) run_seconds: f64,
    pub(crate) remote_bytes: u64,
    pub(crate) load_factor: Option<f64>,
    pub(crate) preset: Option<String>,
    pub(crate) recovery: Option<crate::Recovery>,
    pub(crate) phases: Vec<dmindex_sim::phases::NodePhases>,
    pub(crate) check: Option<crate::Checked>,
}

pub(crate) fn summarise<T: Transport, I: PointIndex<T>>(
    cfg: &BenchConfig,
    plan: &Plan,
    handles: &[I],
    f: Finished,
) -> anyhow::Result<BenchReport> {
    let Finished {
        load,
        run,
        run_seconds,
        remote_bytes,
        load_factor,
        preset,
        recovery,
        phases,
        check,
    } = f;
    load.failed()?;
    run.failed()?;
    let m = &run.metrics;
    let ops: u64 = m.counts.iter().sum();
    let mut all = runner::new_histogram();
    for h in &m.latency {
        all.add(h).expect("same bounds");
    }
    let per = |x: u64| if ops == 0 { 0.0 } else { x as f64 / ops as f64 };
    // With a window, the verbs of the operations it measured (each client's, split at the
    // operation where it entered and the one where it left).
    let c = match &run.window {
        Some(_) => m.window_counts,
        None => run.counts,
    };
    let per_op = OpKind::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| m.counts[*i] > 0)
        .map(|(i, k)| {
            let n = m.counts[i] as f64;
            let missed = (*k != OpKind::Insert).then_some(m.not_found[i]);
            OpBreakdown {
                op: k.name().into(),
                count: m.counts[i],
                found: missed.map(|x| m.counts[i] - x),
                not_found: missed,
                latency_us: latency(&m.latency[i]),
                round_trips_per_op: m.verbs[i].round_trips as f64 / n,
                bytes_read_per_op: m.verbs[i].bytes_read as f64 / n,
                bytes_written_per_op: m.verbs[i].bytes_written as f64 / n,
            }
        })
        .collect();
    let load_ops: u64 = load.metrics.counts.iter().sum();
    let stats: Vec<_> = match &run.window {
        Some(w) => w.stats(I::LEVELS),
        None => handles.iter().map(|h| h.stats()).collect(),
    };
    Ok(BenchReport {
        index: cfg.index.name.clone(),
        transport: cfg.cluster.transport,
        preset,
        workload: if cfg.workload.trace.is_some() {
            "trace".into()
        } else {
            plan.spec.name.clone()
        },
        items: plan.items,
        ops,
        cns: cfg.cluster.cns,
        clients: cfg.cluster.clients,
        coroutines: cfg.cluster.coroutines,
        seed: cfg.workload.seed,
        load_fast_forward: cfg.workload.fast_load,
        load_bulk: cfg.workload.bulk_load,
        load_throughput_ops: load.throughput(load_ops),
        throughput_ops: run.window.as_ref().map_or_else(|| run.throughput(ops), |w| w.throughput()),
        window: run.window.as_ref().map(|w| w.report(plan.ops)),
        latency_us: latency(&all),
        round_trips_per_op: per(c.round_trips),
        verbs_per_op: per(c.verbs()),
        bytes_read_per_op: per(c.bytes_read),
        bytes_written_per_op: per(c.bytes_written),
        cas_failures_per_op: per(c.cas_failures),
        retries: stats.iter().map(|s| s.retries).sum(),
        cache_bytes: stats.iter().map(|s| s.cache_bytes).sum::<u64>() / handles.len().max(1) as u64,
        remote_bytes,
        index_bytes: load.counts.bytes_allocated + run.counts.bytes_allocated,
        load_factor,
        key_reuse: if cfg.output.key_reuse {
            let per_cn = cfg.cluster.clients * cfg.cluster.coroutines;
            let window = cfg.workload.window;
            crate::reuse::key_reuse(plan, cfg.cluster.cns as usize * per_cn, per_cn, window)
        } else {
            None
        },
        index_stats: stats.iter().flat_map(|s| s.extra.iter()).fold(
            std::collections::BTreeMap::new(),
            |mut m, (k, v)| {
                *m.entry(k.to_string()).or_insert(0) += v;
                m
            },
        ),
        per_op,
        run_seconds,
        recovery,
        check,
        timeline: (m.timeline_ns > 0)
            .then(|| crate::Timeline { interval_ns: m.timeline_ns, ops: m.timeline.clone() }),
        phases,
        ucx_tls: match cfg.cluster.transport {
            TransportKind::Ucx => std::env::var("UCX_TLS").ok(),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_show_three_significant_digits_in_a_fitting_unit() {
        for (ops_per_s, shown) in [
            (123_456_789.0, "123.5 Mops/s"),
            (2_675_000.0, "2.675 Mops/s"),
            (12_345.0, "12.35 kops/s"),
            (1_500.0, "1.500 kops/s"),
            (999.0, "999.0 ops/s"),
            (42.0, "42.00 ops/s"),
            (0.5, "0.500 ops/s"),
        ] {
            assert_eq!(rate(ops_per_s), shown);
        }
    }

    /// Percentiles, mean and maximum are of one population: a few operations a thousand times
    /// slower than the rest put the mean above p99.9 and below the maximum.
    #[test]
    fn a_rare_stall_lifts_the_mean_above_p999_but_not_above_the_maximum() {
        let mut h = runner::new_histogram();
        h.record_n(1_000, 99_990).unwrap();
        h.record_n(10_000_000, 10).unwrap();
        let l = latency(&h);
        assert!((l.p50 - 1.0).abs() < 0.01 && (l.p999 - 1.0).abs() < 0.01, "{l:?}");
        assert!(l.mean > 1.9 * l.p999 && l.mean < l.max, "{l:?}");
        assert!((l.max - 10_000.0).abs() < 10.0, "{l:?}");
        let exact = (1_000.0 * 99_990.0 + 10_000_000.0 * 10.0) / 100_000.0 / 1e3;
        assert!((l.mean - exact).abs() < 0.01 * exact, "{} against {exact}", l.mean);
    }
}
