//! HiStore (arXiv '22, §5): the figures it reproduces on the simulated HiStore testbed.
//!
//! Every run uses the `histore-testbed` preset and the paper's placement: one data server
//! (memory node 0), one index group on three index servers (nodes 1–3: the primary's hash table
//! on node 1, the backups' skiplists on nodes 2 and 3), one client machine, 16-byte keys and
//! 32-byte values, memory filled with `Scale::items` keys by fast-forward before each run.
//!
//! Recovery (Fig. 13) crashes the primary's or a backup's node 100 µs into the run phase and
//! restarts it empty 100 µs later; a monitor client rebuilds it while the workload goes on. The
//! figure is the rebuild's real time on this machine: the snapshot, its transfer through the
//! in-process fabric and the building of the hash table or skiplist, which is CPU work as on the
//! paper's servers (the simulated network's share is reported beside it in the JSON).

use dmindex_bench::experiment::{chart, lines, mops, Experiment, Paper, Scale, Session};
use dmindex_bench::plot::Series;
use dmindex_bench::{BenchConfig, MnFault};

pub static PAPER: Paper = Paper {
    name: "histore",
    title: "HiStore: Rethinking Hybrid Index in RDMA-based Key-Value Store (arXiv '22)",
    testbed: "histore-testbed",
    scale,
    clients_mean: "client threads on the one client machine",
    experiments: &[
        Experiment {
            name: "recovery",
            figure: "Fig. 13: recovery time of the primary and of a backup vs keys",
            body: recovery,
        },
        Experiment {
            name: "timeline",
            figure: "§5.5 as a time series: throughput before, during and after the primary crashes, restarts and is rebuilt (the issue's run over UCX, on the simulator)",
            body: timeline,
        },
        Experiment {
            name: "degraded",
            figure: "Fig. 14: PUT, GET and SCAN throughput with the primary or a backup down, normalised to normal",
            body: degraded,
        },
    ],
};

/// 1 M keys filled by fast-forward (the paper: 10–100 M), 100 k operations per run, 4 to 64
/// client threads on one client machine.
fn scale() -> Scale {
    Scale {
        items: 1_000_000,
        ops: 100_000,
        cns: 1,
        clients: vec![4, 16, 32, 64],
        peak_clients: 16,
        coroutines: 1,
        seed: 1,
        fast_load: true,
        ..Scale::default()
    }
}

/// A run of `index` with the paper's placement and item sizes, `mix` the operations.
fn base(s: &Session<'_>, index: &str, mix: &str) -> BenchConfig {
    let mut c = s.base(index, "a");
    c.memory_nodes = 4;
    c.key_size = 16;
    c.value_size = 32;
    c.mix = Some(mix.into());
    c.ordered_keys = false;
    c.cache_mb = 0.0;
    c
}

/// The primary's node (the hash table) and a backup's (a skiplist).
const PRIMARY: u16 = 1;
const BACKUP: u16 = 2;

fn recovery(s: &mut Session<'_>) -> anyhow::Result<()> {
    for (series, node) in [("primary", PRIMARY), ("backup", BACKUP)] {
        for times in [1, 2, 4] {
            let mut c = base(s, "histore", "read=0.5,update=0.5");
            c.items = s.scale.items * times;
            c.mn_fault = Some(MnFault { node, crash_ns: 100_000, restart_ns: Some(100_000) });
            let run = s.go(series, c.items as f64 / 1e6, c)?;
            if run.report.recovery.as_ref().and_then(|r| r.rebuild_wall_s).is_none() {
                anyhow::bail!("recovery: the {series} was not rebuilt: {:?}", run.report.recovery);
            }
        }
    }
    let wall = |r: &dmindex_bench::BenchReport| {
        r.recovery.as_ref().and_then(|x| x.rebuild_wall_s).unwrap_or(0.0)
    };
    s.chart(
        "recovery",
        chart(
            "Fig. 13: recovery time (rebuild on this machine's CPU)",
            "keys (M)",
            "seconds",
            lines(&s.runs, wall),
        ),
    );
    Ok(())
}

/// Width of the timeline's intervals.
const INTERVAL_NS: u64 = 250_000;

/// YCSB A's mix with the primary crashing 5 ms into the run and restarting 2 ms later; the
/// completions per 250 µs, as Mops/s against ms.
fn timeline(s: &mut Session<'_>) -> anyhow::Result<()> {
    let mut c = base(s, "histore", "read=0.5,update=0.5");
    c.ops = Some(s.scale.ops * 4);
    c.mn_fault = Some(MnFault { node: PRIMARY, crash_ns: 5_000_000, restart_ns: Some(2_000_000) });
    c.timeline_ns = INTERVAL_NS;
    let run = s.go("histore", 0.0, c)?;
    let t = run.report.timeline.clone().ok_or_else(|| anyhow::anyhow!("no timeline"))?;
    let ms = |i: usize| (i as u64 * t.interval_ns) as f64 / 1e6;
    let points =
        t.ops.iter().enumerate().map(|(i, &n)| (ms(i), n as f64 * 1e3 / t.interval_ns as f64));
    let series = vec![Series { name: "histore".into(), points: points.collect() }];
    s.chart(
        "timeline",
        chart("Primary crash at 5 ms, restart at 7 ms, rebuilt after", "ms", "Mops/s", series),
    );
    Ok(())
}

/// PUT, GET and SCAN as the paper's db_bench runs them: updates of loaded keys, reads, scans.
const OPS: [(&str, &str); 3] = [("PUT", "update=1"), ("GET", "read=1"), ("SCAN", "scan=1")];

fn degraded(s: &mut Session<'_>) -> anyhow::Result<()> {
    let down = [("normal", None), ("primary down", Some(PRIMARY)), ("backup down", Some(BACKUP))];
    for (series, node) in down {
        for (x, (_, mix)) in OPS.iter().enumerate() {
            let mut c = base(s, "histore", mix);
            if *mix == "scan=1" {
                c.ops = Some((s.scale.ops / 10).max(1));
            }
            c.mn_fault = node.map(|node| MnFault { node, crash_ns: 0, restart_ns: None });
            s.go(series, x as f64, c)?;
        }
    }
    let normal: Vec<f64> =
        s.runs.iter().filter(|r| r.series == "normal").map(|r| mops(&r.report)).collect();
    let mut series = lines(&s.runs, mops);
    for line in &mut series {
        for (i, p) in line.points.iter_mut().enumerate() {
            p.1 /= normal[i].max(f64::MIN_POSITIVE);
        }
    }
    let mut ch = chart(
        "Fig. 14: throughput with one index server down, normalised to normal",
        "operation",
        "throughput / normal",
        series,
    );
    ch.x_names = OPS.iter().map(|(n, _)| n.to_string()).collect();
    s.chart("degraded", ch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmindex_bench::BenchReport;

    /// Both experiments run end to end at a tiny scale: every recovery run rebuilt its node
    /// (the monitor's report is there), and the degraded runs crash the right node or none.
    #[test]
    fn recovery_and_degraded_runs_report_what_the_figures_need() {
        let scale = Scale { items: 3000, ops: 3000, peak_clients: 4, ..scale() };
        let mut log = |_: &str| {};
        let runner = |c: &BenchConfig| -> anyhow::Result<BenchReport> { crate::bench(c) };
        let mut s = Session::for_test(&scale, "histore-testbed", &runner, &mut log);
        recovery(&mut s).unwrap();
        assert_eq!(s.runs.len(), 6);
        for r in &s.runs {
            let rec = r.report.recovery.as_ref().expect("a recovery report");
            assert!(rec.rebuild_end_ns > rec.rebuild_start_ns, "{rec:?}");
            assert_eq!(rec.node, if r.series == "primary" { PRIMARY } else { BACKUP });
            assert_eq!(r.report.index_stats.get("rebuilds"), Some(&1));
        }
        assert_eq!(s.runs[2].report.items, 12_000, "1, 2 and 4 times the scale's keys");
        s.runs.clear();
        timeline(&mut s).unwrap();
        let r = &s.runs[0].report;
        let t = r.timeline.as_ref().expect("a timeline");
        assert_eq!(t.ops.iter().sum::<u64>(), r.ops, "every completion in some interval");
        assert!(r.recovery.as_ref().is_some_and(|x| x.rebuild_end_ns.is_some()));
        s.runs.clear();
        degraded(&mut s).unwrap();
        assert_eq!(s.runs.len(), 9);
        for r in &s.runs {
            let crashed = r.report.recovery.as_ref().map(|x| x.node);
            let want = match r.series.as_str() {
                "normal" => None,
                "primary down" => Some(PRIMARY),
                _ => Some(BACKUP),
            };
            assert_eq!(crashed, want, "{}", r.series);
        }
    }
}
