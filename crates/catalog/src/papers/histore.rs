//! HiStore (arXiv '22, §5): the figures it reproduces on the simulated HiStore testbed.
//!
//! Every run uses the `histore-testbed` preset and the paper's placement: one data server
//! (memory node 0), one index group on three index servers (nodes 1–3: the primary's hash table
//! on node 1, the backups' skiplists on nodes 2 and 3), one client machine, 16-byte keys and
//! 32-byte values, memory filled with `Scale::items` keys by fast-forward before each run.
//!
//! Recovery (Fig. 13) crashes the primary's or a backup's node 100 µs into the run phase and
//! restarts it empty 100 µs later; a monitor client rebuilds it while the workload goes on. The
//! figure is the rebuild's virtual time: the snapshot, its transfer and the building of the hash
//! table or skiplist, at the CPU cost per pair that HiStore's services charge
//! (`dmindex_histore::cpu`); the rebuild's real time on this machine is charted beside it.

use dmindex_bench::experiment::{
    chart, lines, mops, Experiment, Line, LoadBy, Paper, Run, Scale, Session,
};
use dmindex_bench::plot::Series;
use dmindex_bench::BenchConfig;

pub static PAPER: Paper = Paper {
    name: "histore",
    title: "HiStore: Rethinking Hybrid Index in RDMA-based Key-Value Store (arXiv '22)",
    testbed: "histore-testbed",
    scale,
    clients_mean: "client threads on the one client machine",
    items: 100_000_000,
    lines: &[
        Line {
            label: "HiStore",
            index: "histore",
            options: &[("scan_reads", "each")],
            scaled: None,
            load: LoadBy::Inserts,
            why: "hash table on the primary, skiplists on two backups, batched log sync; a SCAN's items READ one after another, as the paper's client (96 % of a SCAN is data access, §5.3)",
        },
        Line {
            label: "All-Hashtable",
            index: "all-hashtable",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "three hash tables per group, no scans",
        },
        Line {
            label: "All-Skiplist",
            index: "all-skiplist",
            options: &[("scan_reads", "each")],
            scaled: None,
            load: LoadBy::Inserts,
            why: "three skiplists per group; SCAN items READ one after another, as HiStore's",
        },
        Line {
            label: "Single-Hashtable",
            index: "single-hashtable",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "one unreplicated hash table",
        },
        Line {
            label: "Single-Skiplist",
            index: "single-skiplist",
            options: &[("scan_reads", "each")],
            scaled: None,
            load: LoadBy::Inserts,
            why: "one unreplicated skiplist; SCAN items READ one after another, as HiStore's",
        },
    ],
    experiments: &[
        Experiment {
            name: "basic",
            figure: "Fig. 9 and 10: PUT, GET and SCAN throughput and mean latency of the five schemes vs client threads",
            body: basic, took_s: Some(537),
        },
        Experiment {
            name: "breakdown",
            figure: "Fig. 11: where a PUT, GET and SCAN's time goes at 64 clients (index request, queue wait, index access, server-to-server, data access)",
            body: breakdown, took_s: Some(185),
        },
        Experiment {
            name: "ycsb",
            figure: "Fig. 12: YCSB A–F throughput and latency of HiStore and all-hashtable normalised to all-skiplist",
            body: ycsb, took_s: Some(158),
        },
        Experiment {
            name: "recovery",
            figure: "Fig. 13: recovery time of the primary and of a backup vs keys",
            body: recovery, took_s: Some(186),
        },
        Experiment {
            name: "timeline",
            figure: "§5.5 as a time series: throughput before, during and after the primary crashes, restarts and is rebuilt (the issue's run over UCX, on the simulator)",
            body: timeline, took_s: Some(15),
        },
        Experiment {
            name: "ucx-timeline",
            figure: "§5.5 as a time series over UCX: memnode processes on this machine, the primary killed with SIGKILL, restarted and rebuilt while YCSB A runs (needs a build with --features ucx)",
            body: ucx_timeline, took_s: Some(12),
        },
        Experiment {
            name: "degraded",
            figure: "Fig. 14: PUT, GET and SCAN throughput with the primary or a backup down, normalised to normal",
            body: degraded, took_s: Some(95),
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
        clients: vec![4, 16, 32, 48, 64],
        peak_clients: 16,
        coroutines: 1,
        seed: 1,
        fast_load: true,
        ..Scale::default()
    }
}

/// A run of `index` with the paper's placement and item sizes, `mix` the operations.
fn base(s: &Session<'_>, index: &str, mix: &str) -> BenchConfig {
    let mut c = testbed(s, index, "a");
    c.workload.mix = Some(mix.into());
    c
}

/// A run of YCSB `workload` on `index` with the paper's placement and item sizes.
fn testbed(s: &Session<'_>, index: &str, workload: &str) -> BenchConfig {
    let mut c = s.as_paper(index, workload);
    c.cluster.memory_nodes = Some(4);
    c.keys.size = 16;
    c.keys.value_size = 32;
    c.keys.ordered = false;
    c.cluster.cache_mb = 0.0;
    c
}

/// The primary's node (the hash table) and a backup's (a skiplist).
pub const PRIMARY: u16 = 1;
pub const BACKUP: u16 = 2;

fn recovery(s: &mut Session<'_>) -> anyhow::Result<()> {
    for (series, node) in [("primary", PRIMARY), ("backup", BACKUP)] {
        for times in [1, 2, 4] {
            let mut c = base(s, "histore", "read=0.5,update=0.5");
            c.workload.items = s.scale.items * times;
            c.faults.crash(node, 100, Some(100));
            let run = s.go(series, c.workload.items as f64 / 1e6, c)?;
            if run.report.recovery.as_ref().and_then(|r| r.rebuild_wall_s).is_none() {
                anyhow::bail!("recovery: the {series} was not rebuilt: {:?}", run.report.recovery);
            }
        }
    }
    s.chart(
        "recovery",
        chart(
            "Fig. 13: recovery time (the simulated index servers' CPU and network)",
            "keys (M)",
            "seconds",
            lines(&s.runs, rebuild_s),
        ),
    );
    let wall = |r: &dmindex_bench::BenchReport| {
        r.recovery.as_ref().and_then(|x| x.rebuild_wall_s).unwrap_or(0.0)
    };
    s.chart(
        "recovery-real",
        chart(
            "Fig. 13 on this machine: real time of the rebuild",
            "keys (M)",
            "seconds",
            lines(&s.runs, wall),
        ),
    );
    Ok(())
}

/// A rebuild's virtual time in seconds: from the monitor's start to the node serving again.
pub fn rebuild_s(r: &dmindex_bench::BenchReport) -> f64 {
    r.recovery
        .as_ref()
        .and_then(|x| Some(x.rebuild_end_ns?.saturating_sub(x.rebuild_start_ns?) as f64 / 1e9))
        .unwrap_or(0.0)
}

/// Width of the timeline's intervals.
const INTERVAL_US: u64 = 250;

/// YCSB A's mix on a tenth of the keys (so that the rebuild, whose CPU is simulated, ends
/// inside the run) with the primary crashing 5 ms into the run and restarting 2 ms later; the
/// completions per 250 µs, as Mops/s against ms.
fn timeline(s: &mut Session<'_>) -> anyhow::Result<()> {
    let mut c = base(s, "histore", "read=0.5,update=0.5");
    c.workload.items = (s.scale.items / 10).max(1);
    c.workload.ops = Some(s.scale.ops * 4);
    c.faults.crash(PRIMARY, 5_000, Some(2_000));
    c.output.timeline_us = Some(INTERVAL_US);
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

/// The run over UCX: four memnode processes on loopback (a data server and three index
/// servers), one client thread with four coroutines (more spinning threads than this machine's
/// two cores only slow every process down), YCSB A's mix on a fiftieth of the keys (a real
/// load, not a fast-forward), the primary killed 3 s into the run and restarted a second
/// later; completions per 100 ms, as thousands of operations per second against seconds.
fn ucx_timeline(s: &mut Session<'_>) -> anyhow::Result<()> {
    let Some(exe) = s.scale.memnode_exe.clone() else {
        return Err(dmindex_bench::experiment::NeedsUcx(
            "ucx-timeline: starts memnode processes over UCX; rebuild with --features ucx".into(),
        )
        .into());
    };
    let mut c = base(s, "histore", "read=0.5,update=0.5");
    c.cluster.transport = dmindex_bench::TransportKind::Ucx;
    (c.cluster.spawn_memnodes, c.cluster.memnode_exe) = (true, Some(exe));
    c.cluster.mn_gb = Some(1);
    c.workload.fast_load = false;
    c.workload.items = (s.scale.items / 50).max(1000);
    c.workload.ops = Some(s.scale.ops * 2);
    c.cluster.clients = 1;
    c.cluster.coroutines = 4;
    c.faults.crash(PRIMARY, 3_000_000, Some(1_000_000));
    c.output.timeline_us = Some(UCX_INTERVAL_US);
    let run = s.go("histore", 0.0, c)?;
    let t = run.report.timeline.clone().ok_or_else(|| anyhow::anyhow!("no timeline"))?;
    // The last interval is cut short by the run's end.
    let whole = &t.ops[..t.ops.len().saturating_sub(1)];
    let points = whole.iter().enumerate().map(|(i, &n)| {
        ((i as u64 * t.interval_ns) as f64 / 1e9, n as f64 * 1e6 / t.interval_ns as f64)
    });
    let series = vec![Series { name: "histore over UCX".into(), points: points.collect() }];
    // From the report, not this process's environment: a replot names what the run was given.
    let tls = run.report.ucx_tls.as_deref().unwrap_or("UCX's choice");
    let title = format!("Primary killed at 3 s, restarted at 4 s (UCX_TLS={tls})");
    s.chart("ucx-timeline", chart(&title, "s", "Kops/s", series));
    Ok(())
}

/// Width of the UCX timeline's intervals.
const UCX_INTERVAL_US: u64 = 100_000;

/// PUT, GET and SCAN as the paper's db_bench runs them: updates of loaded keys, reads, scans.
const OPS: [(&str, &str); 3] = [("PUT", "update=1"), ("GET", "read=1"), ("SCAN", "scan=1")];

/// The five schemes of §5.1.
const SCHEMES: [&str; 5] =
    ["histore", "all-hashtable", "all-skiplist", "single-hashtable", "single-skiplist"];

/// Client threads of Fig. 11 and 12 (the paper's largest point).
pub const PEAK: usize = 64;

/// A run of one basic operation: a tenth of the operations for SCAN, each of 100 keys (§5.2).
fn op_run(s: &Session<'_>, index: &str, op: usize) -> BenchConfig {
    let (name, mix) = OPS[op];
    let mut c = base(s, index, mix);
    if name == "SCAN" {
        c.workload.ops = Some((s.scale.ops / 10).max(1));
        c.workload.scan_len = Some(100);
    }
    c
}

/// Whether a scheme answers the operation (hash tables alone have no SCAN).
fn serves(index: &str, op: usize) -> bool {
    OPS[op].0 != "SCAN" || !index.ends_with("hashtable")
}

/// Mean latency in µs.
fn mean_us(r: &dmindex_bench::BenchReport) -> f64 {
    r.latency_us.mean
}

/// Lines of `y` against each run's x, each point divided by the `base` series' at the same x.
fn normalised(runs: &[Run], y: fn(&dmindex_bench::BenchReport) -> f64, base: &str) -> Vec<Series> {
    let of_base: Vec<(f64, f64)> =
        runs.iter().filter(|r| r.series == base).map(|r| (r.x, y(&r.report))).collect();
    let mut out = lines(runs, y);
    for p in out.iter_mut().flat_map(|line| line.points.iter_mut()) {
        let b = of_base.iter().find(|b| b.0 == p.0).map_or(f64::NAN, |b| b.1);
        p.1 /= b.max(f64::MIN_POSITIVE);
    }
    out
}

/// The lines of the runs whose series starts with `prefix`, named by the rest.
fn lines_of(
    runs: &[Run],
    prefix: &str,
    y: impl Fn(&dmindex_bench::BenchReport) -> f64,
) -> Vec<Series> {
    let mine: Vec<Run> = runs
        .iter()
        .filter_map(|r| {
            let rest = r.series.strip_prefix(prefix)?;
            Some(Run { series: rest.into(), ..r.clone() })
        })
        .collect();
    lines(&mine, y)
}

fn basic(s: &mut Session<'_>) -> anyhow::Result<()> {
    for (op, (name, _)) in OPS.iter().enumerate() {
        for index in SCHEMES.iter().filter(|i| serves(i, op)) {
            for &clients in &s.scale.clients {
                let mut c = op_run(s, index, op);
                c.cluster.clients = clients;
                s.go(&format!("{name} {index}"), clients as f64, c)?;
            }
        }
    }
    type Y = fn(&dmindex_bench::BenchReport) -> f64;
    let figures: [(&str, &str, &str, Y); 2] =
        [("Fig. 9", "throughput", "Mops/s", mops), ("Fig. 10", "mean latency", "µs", mean_us)];
    for (name, _) in OPS {
        let prefix = format!("{name} ");
        for (fig, what, unit, y) in figures {
            let ch = chart(
                &format!("{fig}: {name} {what}"),
                "client threads",
                unit,
                lines_of(&s.runs, &prefix, y),
            );
            let file = what.rsplit(' ').next().unwrap_or(what);
            s.chart(&format!("basic-{}-{file}", name.to_lowercase()), ch);
        }
    }
    Ok(())
}

/// The phases of Fig. 11, in µs per operation.
pub const PHASES: [&str; 6] =
    ["index request", "queue wait", "index access", "server to server", "data access", "client"];

/// Where a run's mean latency goes, in µs per operation ([`PHASES`]), from the simulator's
/// per-node accounting: the data server's wait is *data access*; an index server's requests
/// split into *queue wait* (for a core), *index access* (their CPU), *server to server* (the
/// primary's log sync, a backup's cut) and *index request* (the rest of their wait: the wire
/// and the NICs); an index server read one-sidedly is *index access* whole; what is left of
/// the mean latency is the client's own time (posting, its CPU).
pub fn phases(r: &dmindex_bench::BenchReport, data_nodes: &[usize]) -> [f64; 6] {
    let ops = r.ops.max(1) as f64;
    let mut t = [0.0; 6];
    for (node, p) in r.phases.iter().enumerate() {
        let wait = p.wait_ns as f64;
        if data_nodes.contains(&node) {
            t[4] += wait;
        } else if p.requests == 0 {
            t[2] += wait;
        } else {
            let served = (p.queue_ns + p.cpu_ns + p.peer_ns) as f64;
            t[0] += (wait - served).max(0.0);
            t[1] += p.queue_ns as f64;
            t[2] += p.cpu_ns as f64;
            t[3] += p.peer_ns as f64;
        }
    }
    let mut us = t.map(|ns| ns / ops / 1e3);
    us[5] = (r.latency_us.mean - us[..5].iter().sum::<f64>()).max(0.0);
    us
}

/// The data server of the testbed's placement.
pub const DATA: [usize; 1] = [0];

fn breakdown(s: &mut Session<'_>) -> anyhow::Result<()> {
    let schemes = ["histore", "all-hashtable", "all-skiplist"];
    let mut names = Vec::new();
    for (op, (name, _)) in OPS.iter().enumerate() {
        for index in schemes.iter().filter(|i| serves(i, op)) {
            let mut c = op_run(s, index, op);
            c.cluster.clients = PEAK;
            s.go(&format!("{name} {index}"), names.len() as f64, c)?;
            names.push(format!("{name} {index}"));
        }
    }
    let series = PHASES
        .iter()
        .enumerate()
        .map(|(k, phase)| Series {
            name: phase.to_string(),
            points: s.runs.iter().map(|r| (r.x, phases(&r.report, &DATA)[k])).collect(),
        })
        .collect();
    let mut ch = chart(
        "Fig. 11: latency breakdown at 64 clients",
        "operation, scheme",
        "µs per operation",
        series,
    );
    ch.x_names = names;
    ch.stacked = true;
    s.chart("breakdown", ch);
    Ok(())
}

/// YCSB as §5.4 runs it: keys of about 20 bytes, 32-byte values, zipfian 0.9, scans of 100.
fn ycsb(s: &mut Session<'_>) -> anyhow::Result<()> {
    let workloads = s.workloads(&["a", "b", "c", "d", "e", "f"]);
    let schemes = ["all-skiplist", "histore", "all-hashtable"];
    for (x, w) in workloads.iter().enumerate() {
        for index in schemes {
            if *w == "e" && index == "all-hashtable" {
                continue;
            }
            let mut c = testbed(s, index, w);
            c.keys.size = 20;
            c.workload.zipf_theta = Some(0.9);
            c.workload.scan_len = Some(100);
            c.cluster.clients = PEAK;
            if *w == "e" {
                c.workload.ops = Some((s.scale.ops / 10).max(1));
            }
            s.go(index, x as f64, c)?;
        }
    }
    let names: Vec<String> = workloads.iter().map(|w| w.to_uppercase()).collect();
    let mut ch = chart(
        "Fig. 12a: YCSB throughput / all-skiplist",
        "workload",
        "normalised throughput",
        normalised(&s.runs, mops, "all-skiplist"),
    );
    ch.x_names = names.clone();
    s.chart("ycsb-throughput", ch);
    let mut ch = chart(
        "Fig. 12b: YCSB mean latency / all-skiplist",
        "workload",
        "normalised latency",
        normalised(&s.runs, mean_us, "all-skiplist"),
    );
    ch.x_names = names;
    s.chart("ycsb-latency", ch);
    Ok(())
}

fn degraded(s: &mut Session<'_>) -> anyhow::Result<()> {
    let down = [("normal", None), ("primary down", Some(PRIMARY)), ("backup down", Some(BACKUP))];
    for (series, node) in down {
        for x in 0..OPS.len() {
            let mut c = op_run(s, "histore", x);
            if let Some(node) = node {
                c.faults.crash(node, 0, None);
            }
            s.go(series, x as f64, c)?;
        }
    }
    let series = normalised(&s.runs, mops, "normal");
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
