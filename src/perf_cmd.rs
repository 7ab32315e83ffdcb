//! `dmindex perf`: nanoseconds per operation per thread for every operation of every index on the
//! in-process fabric, next to the verb floor (one READ of 256 bytes), so regressions show.
//!
//! Each operation kind is its own `bench` run (`--mix` of that kind only: inserts of new keys,
//! searches, updates and deletes of loaded ones, scans of 1–100 pairs) on `--threads` client
//! threads of one compute node. ns/op/thread is threads × 10⁹ / throughput. Each index runs on
//! the key space of its catalog line (Dolphin's paper's folded keys for Dolphin, hashed keys
//! for the rest), so that its scans measure what they are built for.

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

pub fn run(a: &Args) -> anyhow::Result<()> {
    if a.items == 0 || a.ops == 0 || a.threads == 0 {
        bail!("--items, --ops and --threads must be positive");
    }
    let fabric = LocalFabric::new(LocalConfig {
        node_size: (a.threads as u64 * SPAN * 2).max(64 << 20),
        chunk_size: 1 << 20,
        ..LocalConfig::default()
    })
    .map_err(anyhow::Error::msg)?;
    let floor = measure(&fabric, Verb::Read256, a.threads, 1, 2_000_000)?.ns_per_verb;
    let entries: Vec<&IndexEntry> = if a.indexes.is_empty() {
        INDEXES.iter().collect()
    } else {
        a.indexes.iter().map(|n| dmindex_catalog::find(n)).collect::<anyhow::Result<_>>()?
    };
    let mut rows = Vec::new();
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
        for (op, mix) in kinds {
            let mut cfg = BenchConfig::of(e.name, "c");
            let (cluster, w) = (&mut cfg.cluster, &mut cfg.workload);
            (cluster.transport, cluster.clients, cluster.mn_gb) =
                (TransportKind::Local, a.threads, Some(16));
            (w.items, w.ops, w.mix) = (a.items, Some(a.ops), Some(mix.into()));
            cfg.keys.folded = e.keys == KeySpace::Folded;
            let r = (e.bench)(&cfg).with_context(|| format!("{} {op}", e.name))?;
            let ns = a.threads as f64 * 1e9 / r.throughput_ops;
            rows.push(row(e, op, ns, floor, &r));
        }
    }
    if a.json {
        let v = serde_json::json!({ "threads": a.threads, "items": a.items, "ops": a.ops,
            "floor_read_256_ns": floor, "rows": rows });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "verb floor: READ 256 B = {floor:.1} ns per thread ({} threads); {} items, {} ops per run",
        a.threads, a.items, a.ops
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
