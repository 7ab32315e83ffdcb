//! The paper's experiments (CHIME, SOSP '24, §5) as runs of [`crate::run`] on the simulated
//! CHIME testbed, each writing `<name>.json` (every run's full report) and SVG charts.
//!
//! Every run uses the `chime-testbed` preset (100 Gbps NICs, one MN), `cns` compute nodes with
//! 2 coroutines per client, a 100 MB cache per CN, zipf 0.99, 8-byte keys and values, as the
//! paper. Item and operation counts are scaled down to fit this machine (see `docs/reproduce.md`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use crate::plot::{Chart, Series};
use crate::{BenchConfig, BenchReport, TransportKind};

/// Experiment names and what they reproduce.
pub const EXPERIMENTS: &[(&str, &str)] = &[
    ("load-factor", "Fig. 3d: leaf load factor vs neighbourhood size H"),
    ("ycsb", "Fig. 12: throughput vs P99 latency, YCSB LOAD/A/B/C/D/E, CHIME vs Sherman"),
    ("cache", "Fig. 14: CN cache consumption vs items loaded"),
    ("factors", "Fig. 15: factor analysis, Sherman + each CHIME technique in turn"),
    ("speculative", "Fig. 17: speculative reads at high client counts (YCSB C)"),
    ("span", "Fig. 18e/19a: span size vs throughput, cache and load factor"),
    ("neighbourhood", "Fig. 18f/19b: neighbourhood size vs throughput, cache and load factor"),
    ("hotspot", "Fig. 19c: hotspot buffer size vs throughput and hit ratio"),
];

/// The YCSB workloads of Fig. 12 and 15.
pub const WORKLOADS: [&str; 6] = ["load", "a", "b", "c", "d", "e"];

/// The factor staircase of Fig. 15: (label, index, options).
pub const STAIRCASE: [(&str, &[(&str, &str)]); 6] = [
    ("Sherman", &[]),
    ("+hopscotch", &[("hopscotch", "1")]),
    ("+vacancy", &[("hopscotch", "1"), ("vacancy_piggyback", "1")]),
    (
        "+replication",
        &[("hopscotch", "1"), ("vacancy_piggyback", "1"), ("metadata_replication", "1")],
    ),
    (
        "+sibling",
        &[
            ("hopscotch", "1"),
            ("vacancy_piggyback", "1"),
            ("metadata_replication", "1"),
            ("sibling_validation", "1"),
        ],
    ),
    (
        "+speculative",
        &[
            ("hopscotch", "1"),
            ("vacancy_piggyback", "1"),
            ("metadata_replication", "1"),
            ("sibling_validation", "1"),
            ("speculative", "1"),
        ],
    ),
];

/// Scale and placement of an experiment's runs.
#[derive(Clone, Debug, Serialize)]
pub struct Scale {
    /// Items loaded before each run phase.
    pub items: u64,
    /// Operations per run phase.
    pub ops: u64,
    pub cns: u16,
    /// Clients per CN for throughput–latency curves.
    pub clients: Vec<usize>,
    /// Clients per CN for single-point comparisons (factor and sensitivity analyses).
    pub peak_clients: usize,
    pub coroutines: usize,
    pub seed: u64,
}

impl Default for Scale {
    fn default() -> Scale {
        Scale {
            items: 200_000,
            ops: 200_000,
            cns: 10,
            clients: vec![4, 16, 32, 64],
            peak_clients: 32,
            coroutines: 2,
            seed: 1,
        }
    }
}

/// One run of an experiment.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// The chart line it belongs to.
    pub series: String,
    /// Its position on that line (clients, span, H, …).
    pub x: f64,
    pub report: BenchReport,
}

/// What an experiment wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub experiment: String,
    pub description: String,
    pub scale: Scale,
    pub seconds: f64,
    pub runs: Vec<Run>,
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

fn base(scale: &Scale, index: &str, workload: &str) -> BenchConfig {
    BenchConfig {
        index: index.into(),
        transport: TransportKind::Sim,
        preset: "chime-testbed".into(),
        cns: scale.cns,
        clients: scale.peak_clients,
        coroutines: scale.coroutines,
        items: scale.items,
        ops: Some(scale.ops),
        workload: workload.into(),
        // YCSB E scans dense integer keys (as the paper's traces).
        ordered_keys: workload == "e",
        cache_mb: 100,
        seed: scale.seed,
        ..BenchConfig::default()
    }
}

fn opts(o: &[(&str, &str)]) -> Vec<(String, String)> {
    o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn stat(r: &BenchReport, name: &str) -> f64 {
    r.index_stats.get(name).copied().unwrap_or(0) as f64
}

/// Keys per slot in leaves when their hop first failed (CHIME's "load factor at split").
fn split_load_factor(r: &BenchReport) -> f64 {
    let slots = stat(r, "leaf_slots_at_split");
    if slots == 0.0 {
        0.0
    } else {
        stat(r, "leaf_keys_at_split") / slots
    }
}

fn mops(r: &BenchReport) -> f64 {
    r.throughput_ops / 1e6
}

fn mb(r: &BenchReport) -> f64 {
    r.cache_bytes as f64 / (1 << 20) as f64
}

/// Hotspot hit ratio: speculative hits per search (reads of the run phase).
fn hit_ratio(r: &BenchReport) -> f64 {
    let reads = r.per_op.iter().find(|o| o.op == "read").map_or(0, |o| o.count) as f64;
    if reads == 0.0 {
        0.0
    } else {
        stat(r, "speculative_hits") / reads
    }
}

/// One line per series of `y` against `x`, in run order.
fn plot(runs: &[Run], x: impl Fn(&Run) -> f64, y: impl Fn(&BenchReport) -> f64) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in runs {
        let p = (x(r), y(&r.report));
        match out.iter_mut().find(|s| s.name == r.series) {
            Some(s) => s.points.push(p),
            None => out.push(Series { name: r.series.clone(), points: vec![p] }),
        }
    }
    out
}

/// Lines of `y` against each run's x (clients, span, H, …).
fn lines(runs: &[Run], y: impl Fn(&BenchReport) -> f64) -> Vec<Series> {
    plot(runs, |r| r.x, y)
}

/// Throughput–latency lines: x = Mops/s.
fn curves(runs: &[Run], y: impl Fn(&BenchReport) -> f64) -> Vec<Series> {
    plot(runs, |r| mops(&r.report), y)
}

fn chart(title: &str, x: &str, y: &str, series: Vec<Series>) -> Chart {
    Chart { title: title.into(), x_label: x.into(), y_label: y.into(), series, x_names: Vec::new() }
}

/// Runs experiment `name` at `scale`, writing its JSON and charts into `out`; `log` hears about
/// each run as it finishes.
pub fn run_experiment(
    name: &str,
    scale: &Scale,
    out: &Path,
    mut log: impl FnMut(&str),
) -> anyhow::Result<Outcome> {
    let description =
        EXPERIMENTS.iter().find(|e| e.0 == name).map(|e| e.1.to_string()).ok_or_else(|| {
            let known: Vec<_> = EXPERIMENTS.iter().map(|e| e.0).collect();
            anyhow::anyhow!("unknown experiment '{name}' (known: {}, all)", known.join(", "))
        })?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let start = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    let mut go = |series: &str, x: f64, cfg: BenchConfig, runs: &mut Vec<Run>| {
        let t = Instant::now();
        let report = crate::run(&cfg).with_context(|| format!("{name}: {series} at {x}"))?;
        log(&format!(
            "{name}: {series} x={x}: {:.2} Mops/s, p50 {:.2} us, p99 {:.2} us, cache {:.1} MB ({:.1} s)",
            mops(&report),
            report.latency_us.p50,
            report.latency_us.p99,
            mb(&report),
            t.elapsed().as_secs_f64()
        ));
        runs.push(Run { series: series.into(), x, report });
        anyhow::Ok(())
    };
    let mut charts: Vec<(String, Chart)> = Vec::new();
    match name {
        "load-factor" => {
            for h in [2usize, 4, 8, 16] {
                let mut c = base(scale, "chime", "c");
                c.ops = Some(1000);
                c.clients = 4;
                c.index_options = opts(&[("h", &h.to_string())]);
                go("chime", h as f64, c, &mut runs)?;
            }
            let mut s = lines(&runs, split_load_factor);
            s[0].name = "when a hop first fails".into();
            s.extend(lines(&runs, |r| r.load_factor.unwrap_or(0.0)).into_iter().map(|mut l| {
                l.name = "average after loading".into();
                l
            }));
            charts.push((
                "load-factor".into(),
                chart("Leaf load factor vs H (span 64)", "neighbourhood size H", "load factor", s),
            ));
        }
        "ycsb" => {
            for w in WORKLOADS {
                let first = runs.len();
                for index in ["chime", "sherman"] {
                    for &cl in &scale.clients {
                        let mut c = base(scale, index, w);
                        c.clients = cl;
                        go(&format!("{index} {w}"), cl as f64, c, &mut runs)?;
                    }
                }
                let s = curves(&runs[first..], |r| r.latency_us.p99);
                charts.push((
                    format!("ycsb-{w}"),
                    chart(
                        &format!("YCSB {}", w.to_uppercase()),
                        "throughput (Mops/s)",
                        "P99 latency (us)",
                        s,
                    ),
                ));
            }
        }
        "cache" => {
            for index in ["chime", "sherman"] {
                for f in [1u64, 2, 4, 8] {
                    let mut c = base(scale, index, "c");
                    c.items = scale.items * f / 4;
                    c.ops = Some(1000);
                    c.clients = 4;
                    // Enough cache to hold every internal node (the paper's "sufficient caches").
                    c.cache_mb = 4096;
                    go(index, c.items as f64, c, &mut runs)?;
                }
            }
            charts.push((
                "cache".into(),
                chart(
                    "CN cache consumption",
                    "items loaded",
                    "cache per CN (MB)",
                    lines(&runs, mb),
                ),
            ));
        }
        "factors" => {
            for w in WORKLOADS {
                for (i, (label, o)) in STAIRCASE.iter().enumerate() {
                    let mut c = base(scale, "sherman", w);
                    c.index_options = opts(o);
                    go(&format!("YCSB {} {label}", w.to_uppercase()), i as f64, c, &mut runs)?;
                    // One line per workload across the steps.
                    let r = runs.last_mut().expect("just pushed");
                    r.series = format!("YCSB {}", w.to_uppercase());
                }
            }
            let mut ch = chart(
                &format!("Factor analysis ({} clients)", scale.peak_clients * scale.cns as usize),
                "technique added",
                "throughput (Mops/s)",
                lines(&runs, mops),
            );
            ch.x_names = STAIRCASE.iter().map(|s| s.0.to_string()).collect();
            charts.push(("factors".into(), ch));
        }
        "speculative" => {
            let mut cl = scale.clients.clone();
            cl.extend([96, 128].into_iter().filter(|c| !scale.clients.contains(c)));
            for (series, spec) in [("CHIME without SR", "0"), ("CHIME", "1")] {
                for &n in &cl {
                    let mut c = base(scale, "chime", "c");
                    c.clients = n;
                    c.index_options = opts(&[("speculative", spec)]);
                    go(series, n as f64, c, &mut runs)?;
                }
            }
            charts.push((
                "speculative".into(),
                chart(
                    "Speculative reads, YCSB C",
                    "throughput (Mops/s)",
                    "P50 latency (us)",
                    curves(&runs, |r| r.latency_us.p50),
                ),
            ));
        }
        "span" => {
            for index in ["chime", "sherman"] {
                for span in [16usize, 32, 64, 128, 256] {
                    let mut c = base(scale, index, "c");
                    c.index_options = opts(&[("span", &span.to_string())]);
                    go(index, span as f64, c, &mut runs)?;
                }
            }
            let chime: Vec<Run> = runs.iter().filter(|r| r.series == "chime").cloned().collect();
            charts.push((
                "span-throughput".into(),
                chart("Span size, YCSB C", "span", "throughput (Mops/s)", lines(&runs, mops)),
            ));
            charts.push((
                "span-cache".into(),
                chart("Span size: CHIME cache", "span", "cache per CN (MB)", lines(&chime, mb)),
            ));
            charts.push((
                "span-load-factor".into(),
                chart(
                    "Span size: CHIME load factor when a hop first fails",
                    "span",
                    "load factor",
                    lines(&chime, split_load_factor),
                ),
            ));
        }
        "neighbourhood" => {
            for h in [2usize, 4, 8, 16] {
                let mut c = base(scale, "chime", "c");
                c.index_options = opts(&[("h", &h.to_string())]);
                go("chime", h as f64, c, &mut runs)?;
            }
            charts.push((
                "neighbourhood-throughput".into(),
                chart("Neighbourhood size, YCSB C", "H", "throughput (Mops/s)", lines(&runs, mops)),
            ));
            charts.push((
                "neighbourhood-cache".into(),
                chart("Neighbourhood size: cache", "H", "cache per CN (MB)", lines(&runs, mb)),
            ));
            charts.push((
                "neighbourhood-load-factor".into(),
                chart(
                    "Neighbourhood size: load factor when a hop first fails",
                    "H",
                    "load factor",
                    lines(&runs, split_load_factor),
                ),
            ));
        }
        "hotspot" => {
            for mb_size in [0u64, 10, 30, 50] {
                let mut c = base(scale, "chime", "c");
                c.index_options = opts(&[("hotspot_mb", &mb_size.to_string())]);
                go("chime", mb_size as f64, c, &mut runs)?;
            }
            charts.push((
                "hotspot-throughput".into(),
                chart(
                    "Hotspot buffer, YCSB C",
                    "hotspot buffer (MB)",
                    "throughput (Mops/s)",
                    lines(&runs, mops),
                ),
            ));
            charts.push((
                "hotspot-hit-ratio".into(),
                chart(
                    "Hotspot buffer hit ratio",
                    "hotspot buffer (MB)",
                    "speculative hits per search",
                    lines(&runs, hit_ratio),
                ),
            ));
        }
        _ => unreachable!("checked above"),
    }
    let mut outcome = Outcome {
        experiment: name.into(),
        description,
        scale: scale.clone(),
        seconds: start.elapsed().as_secs_f64(),
        runs,
        files: Vec::new(),
    };
    let json = out.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(&outcome)?)
        .with_context(|| format!("writing {}", json.display()))?;
    outcome.files.push(json);
    for (file, ch) in charts {
        let p = out.join(format!("{file}.svg"));
        std::fs::write(&p, ch.svg()).with_context(|| format!("writing {}", p.display()))?;
        outcome.files.push(p);
    }
    Ok(outcome)
}
