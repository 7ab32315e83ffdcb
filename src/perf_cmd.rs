//! `dmindex perf`: nanoseconds per operation per thread for every operation of every index on the
//! in-process fabric, next to the verb floor (one READ of 256 bytes), so regressions show.
//!
//! Each operation kind is its own `bench` run (`--mix` of that kind only: inserts of new keys,
//! searches, updates and deletes of loaded ones, scans of 1–100 pairs) on `--threads` client
//! threads of one compute node. ns/op/thread is threads × 10⁹ / throughput. Each index runs on
//! the key space of its catalog line (Dolphin's paper's folded keys for Dolphin, hashed keys
//! for the rest), so that its scans measure what they are built for.
//!
//! The floor is sampled before every index run and once after the last, on the clock the runs
//! are timed on (wall time), and the ratios divide by the median sample: a single sample taken
//! first is short enough to be spared the preemption a busy host inflicts on the runs, and
//! reads low (it moved from 24 to 59 ns within minutes on a shared machine).

use anyhow::{bail, Context};
use dmindex_bench::{BenchConfig, BenchReport, TransportKind};
use dmindex_catalog::{IndexEntry, KeySpace, INDEXES};
use dmindex_fabric::{LocalConfig, LocalFabric};
use dmindex_index::IndexKind;
use serde::Serialize;

use crate::fabric_bench::{measure, Verb, SPAN};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Indexes to measure (repeatable; default: every index of the catalog).
    #[arg(long = "index", value_parser = crate::bench_cmd::parse_index)]
    indexes: Vec<String>,
    /// Items loaded before each run (the load phase times inserts).
    #[arg(long, default_value_t = 1_000_000)]
    items: u64,
    /// Operations per run.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Verbs per floor sample (per thread): 50–80 ms here.
const FLOOR_VERBS: u64 = 2_000_000;

#[derive(Serialize)]
struct Row {
    index: String,
    op: &'static str,
    keys: &'static str,
    ns_per_op_per_thread: f64,
    /// ns per op over the verb floor (a 256-byte READ per round trip).
    over_floor: f64,
    round_trips_per_op: f64,
    bytes_read_per_op: f64,
    bytes_written_per_op: f64,
}

/// Everything `perf` checks before it runs (each of its runs is a `bench` run, which checks
/// the rest).
pub fn validate(a: &Args) -> anyhow::Result<()> {
    if a.items == 0 || a.ops == 0 || a.threads == 0 {
        bail!("--items, --ops and --threads must be positive");
    }
    crate::limits::at_most("--items", a.items, crate::limits::MAX_OPS)?;
    crate::limits::at_most("--ops", a.ops, crate::limits::MAX_OPS)?;
    crate::limits::threads_and_tasks(a.threads, 1)
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    validate(a)?;
    let fabric = LocalFabric::new(LocalConfig {
        node_size: (a.threads as u64 * SPAN * 2).max(64 << 20),
        chunk_size: 1 << 20,
        ..LocalConfig::default()
    })
    .map_err(anyhow::Error::msg)?;
    let entries: Vec<&IndexEntry> = if a.indexes.is_empty() {
        INDEXES.iter().collect()
    } else {
        a.indexes.iter().map(|n| dmindex_catalog::find(n)).collect::<anyhow::Result<_>>()?
    };
    let mut runs = Vec::new();
    for e in entries {
        let mut kinds = vec![
            ("insert", "insert=1"),
            ("search", "read=1"),
            ("update", "update=1"),
            ("delete", "delete=1"),
        ];
        if e.kind == IndexKind::Ordered {
            kinds.push(("scan", "scan=1"));
        }
        runs.extend(kinds.into_iter().map(|(op, mix)| (e, op, mix)));
    }
    let sample =
        || measure(&fabric, Verb::Read256, a.threads, 1, FLOOR_VERBS).map(|r| r.ns_per_verb);
    let (floor, reports) = interleaved(runs, sample, |(e, op, mix)| {
        let mut cfg = BenchConfig::of(e.name, "c");
        let (cluster, w) = (&mut cfg.cluster, &mut cfg.workload);
        (cluster.transport, cluster.clients, cluster.mn_gb) =
            (TransportKind::Local, a.threads, Some(16));
        (w.items, w.ops, w.mix) = (a.items, Some(a.ops), Some(mix.into()));
        cfg.keys.folded = e.keys == KeySpace::Folded;
        let r = (e.bench)(&cfg).with_context(|| format!("{} {op}", e.name))?;
        Ok((e, op, r))
    })?;
    let median = floor.median();
    let rows: Vec<Row> = reports
        .into_iter()
        .map(|(e, op, r)| row(e, op, a.threads as f64 * 1e9 / r.throughput_ops, median, &r))
        .collect();
    let (min, max) = floor.spread();
    if a.json {
        let v = serde_json::json!({ "threads": a.threads, "items": a.items, "ops": a.ops,
            "floor_read_256_ns": median, "floor_read_256_min_ns": min,
            "floor_read_256_max_ns": max, "floor_read_256_samples_ns": floor.samples_ns,
            "rows": rows });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "verb floor: READ 256 B = {median:.1} ns per thread, median of {} samples between the \
         runs ({min:.1}–{max:.1}); {} threads; {} items, {} ops per run",
        floor.samples_ns.len(),
        a.threads,
        a.items,
        a.ops
    );
    println!(
        "{:<9} {:<7} {:<6} {:>12} {:>11} {:>7} {:>9} {:>10}",
        "index", "op", "keys", "ns/op/thread", "x floor", "RT/op", "B read", "B written"
    );
    for r in &rows {
        println!(
            "{:<9} {:<7} {:<6} {:>12.1} {:>11.1} {:>7.2} {:>9.1} {:>10.1}",
            r.index,
            r.op,
            r.keys,
            r.ns_per_op_per_thread,
            r.over_floor,
            r.round_trips_per_op,
            r.bytes_read_per_op,
            r.bytes_written_per_op
        );
    }
    Ok(())
}

fn row(e: &IndexEntry, op: &'static str, ns: f64, floor: f64, r: &BenchReport) -> Row {
    Row {
        index: e.name.into(),
        op,
        keys: e.keys.name(),
        ns_per_op_per_thread: ns,
        over_floor: ns / floor,
        round_trips_per_op: r.round_trips_per_op,
        bytes_read_per_op: r.bytes_read_per_op,
        bytes_written_per_op: r.bytes_written_per_op,
    }
}

/// The verb floor's samples, in the order taken.
#[derive(Debug)]
struct Floor {
    samples_ns: Vec<f64>,
}

impl Floor {
    /// The middle sample (the mean of the middle two of an even count).
    fn median(&self) -> f64 {
        let mut s = self.samples_ns.clone();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        match n % 2 {
            1 => s[n / 2],
            _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        }
    }

    /// The least and the greatest sample.
    fn spread(&self) -> (f64, f64) {
        let min = self.samples_ns.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.samples_ns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }
}

/// Does `runs` in order with a floor sample before each and one after the last, so that the
/// floor is measured under the load the runs met; returns the samples and the runs' results.
fn interleaved<T, R>(
    runs: Vec<T>,
    mut sample: impl FnMut() -> anyhow::Result<f64>,
    mut run: impl FnMut(T) -> anyhow::Result<R>,
) -> anyhow::Result<(Floor, Vec<R>)> {
    let mut samples_ns = Vec::with_capacity(runs.len() + 1);
    let mut results = Vec::with_capacity(runs.len());
    for r in runs {
        samples_ns.push(sample()?);
        results.push(run(r)?);
    }
    samples_ns.push(sample()?);
    Ok((Floor { samples_ns }, results))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn the_floor_is_sampled_around_every_run_and_its_median_taken() {
        let log = RefCell::new(Vec::new());
        let mut next = [30.0, 90.0, 20.0, 40.0].into_iter();
        let sample = || {
            log.borrow_mut().push("floor".to_string());
            Ok(next.next().expect("one sample per gap"))
        };
        let run = |r: &str| {
            log.borrow_mut().push(r.to_string());
            Ok(r.len())
        };
        let (floor, results) = interleaved(vec!["a", "bb", "ccc"], sample, run).unwrap();
        assert_eq!(log.into_inner(), ["floor", "a", "floor", "bb", "floor", "ccc", "floor"]);
        assert_eq!(results, [1, 2, 3]);
        assert_eq!(floor.samples_ns, [30.0, 90.0, 20.0, 40.0], "in the order taken");
        assert_eq!(floor.median(), 35.0, "the mean of the middle two of four");
        assert_eq!(floor.spread(), (20.0, 90.0));
    }

    #[test]
    fn the_median_of_an_odd_count_is_its_middle_sample_whatever_the_outliers() {
        let floor = Floor { samples_ns: vec![59.0, 24.0, 26.0, 25.0, 500.0] };
        assert_eq!(floor.median(), 26.0);
        assert_eq!(floor.spread(), (24.0, 500.0));
    }

    #[test]
    fn a_failed_sample_or_run_stops_the_measurement() {
        let failing = || Err(anyhow::anyhow!("no floor"));
        let err = interleaved(vec![1], failing, Ok).unwrap_err();
        assert!(err.to_string().contains("no floor"));
        let failing = |_| -> anyhow::Result<()> { Err(anyhow::anyhow!("run failed")) };
        let err = interleaved(vec![1, 2], || Ok(1.0), failing).unwrap_err();
        assert!(err.to_string().contains("run failed"));
    }
}
