//! Reproducing a paper's figures: each experiment is a set of [`crate::run`]s on a simulated
//! testbed, written as `<name>.json` (every run's full report) and SVG charts.
//!
//! This module is the framework — scale, the run loop, chart helpers, files. What each paper's
//! experiments run lives in one table per paper (the catalog's `papers`), as [`Paper`]s of
//! [`Experiment`]s whose bodies call [`Session::go`] and [`Session::chart`]. The harness runs an
//! index by name through a runner it is handed, so it depends on no index.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::plot::{Chart, Series};
use crate::{BenchConfig, BenchReport, TransportKind, Window};

/// A paper whose figures can be reproduced.
pub struct Paper {
    /// Short name, the prefix of `dmindex experiment PAPER/NAME`.
    pub name: &'static str,
    /// Title and venue.
    pub title: &'static str,
    /// The simulator preset that models the paper's testbed.
    pub testbed: &'static str,
    /// The scale its experiments run at unless the command line says otherwise.
    pub scale: fn() -> Scale,
    /// What `Scale::clients` and `Scale::cns` mean in this paper's sweeps (for `--list`).
    pub clients_mean: &'static str,
    /// Items the paper loads: what [`Line::scaled`] options are given for.
    pub items: u64,
    /// The systems its figures compare, each as the paper ran it.
    pub lines: &'static [Line],
    pub experiments: &'static [Experiment],
}

/// One system of a paper's figures, as the paper ran it: the catalog index and the options
/// that make it the paper's variant. Experiments build their runs from these
/// ([`Session::as_paper`]), so which variant a figure measured is data, printed by
/// `dmindex experiment --list` and in each paper's docs page ([`Paper::lines_table`]).
pub struct Line {
    /// The paper's name for it, as its legends say.
    pub label: &'static str,
    /// The catalog index.
    pub index: &'static str,
    /// Options as the paper ran it (`--option name=value`).
    pub options: &'static [(&'static str, &'static str)],
    /// An option the paper sets for its own item count, as (name, value at [`Paper::items`]):
    /// a run gets the value times its items over the paper's, rounded, at least 1, so that it
    /// covers the same share of the keys (CHIME's hotspot buffer).
    pub scaled: Option<(&'static str, f64)>,
    /// How the paper loaded it before measuring: by inserts, or trained once on every loaded
    /// key (`bench --bulk-load`).
    pub load: LoadBy,
    /// Why this variant, in one sentence.
    pub why: &'static str,
}

/// How a paper's line is loaded before its run phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadBy {
    /// By inserts through the index, as a user would.
    Inserts,
    /// By the index's bulk load, sorted keys in one pass (`bench --bulk-load`): CHIME's ROLEX,
    /// whose models the paper trains once on every loaded key.
    Bulk,
}

impl Line {
    /// Its options for a run of `items` items on a paper of `paper_items`.
    pub fn options_at(&self, items: u64, paper_items: u64) -> Vec<(String, String)> {
        let mut o = opts(self.options);
        if let Some((k, v)) = self.scaled {
            let n = (v * items as f64 / paper_items as f64).round().max(1.0) as u64;
            o.push((k.to_string(), n.to_string()));
        }
        o
    }
}

/// `n` as the papers write counts: 60 M, 200 k.
fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} k", n / 1_000),
        n => n.to_string(),
    }
}

impl Paper {
    /// The experiment called `name`.
    pub fn experiment(&self, name: &str) -> anyhow::Result<&Experiment> {
        self.experiments.iter().find(|e| e.name == name).ok_or_else(|| {
            let known: Vec<_> = self.experiments.iter().map(|e| e.name).collect();
            anyhow::anyhow!(
                "unknown experiment '{name}' of paper '{}' (known: {}, all)",
                self.name,
                known.join(", ")
            )
        })
    }

    /// The Markdown table of its lines, as each paper's docs page shows it.
    pub fn lines_table(&self) -> String {
        let mut t = String::from("| line | index | options | why |\n|---|---|---|---|\n");
        for l in self.lines {
            let mut o: Vec<String> = l.options.iter().map(|(k, v)| format!("`{k}={v}`")).collect();
            if let Some((k, v)) = l.scaled {
                o.push(format!("`{k}` = {v} at {} items, scaled by items", count(self.items)));
            }
            if l.load == LoadBy::Bulk {
                o.push("bulk-loaded (`--bulk-load`)".into());
            }
            let o = if o.is_empty() { "—".to_string() } else { o.join(", ") };
            t.push_str(&format!("| {} | `{}` | {o} | {} |\n", l.label, l.index, l.why));
        }
        t
    }
}

/// One figure (or group of figures) of a paper.
pub struct Experiment {
    pub name: &'static str,
    /// The figure(s) it reproduces.
    pub figure: &'static str,
    /// Issues the runs and charts.
    pub body: fn(&mut Session<'_>) -> anyhow::Result<()>,
    /// Real seconds it takes at the paper's default scale on the 2-core development host,
    /// from its last recorded run there (or, where a line was added since, that run's time
    /// grown by the line's share, said where it is given); `--list` shows it as the time to
    /// expect. `None`: not run here (it needs traces this host does not have).
    pub took_s: Option<u32>,
}

impl Experiment {
    /// [`Experiment::took_s`] as `--list` gives it: `~40 s`, `~12 min`, or `not timed`.
    pub fn expected_time(&self) -> String {
        match self.took_s {
            None => "not timed".into(),
            Some(s) if s < 90 => format!("~{} s", s.max(1)),
            Some(s) => format!("~{} min", (s + 30) / 60),
        }
    }
}

/// Scale and placement of an experiment's runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
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
    /// Fill memory by fast-forward before each run phase (paper-scale item counts); load
    /// throughput is then not measured.
    pub fast_load: bool,
    /// Only these YCSB workloads, in experiments that sweep workloads (empty: the paper's).
    pub workloads: Vec<String>,
    /// Fabric parameters overriding the paper's testbed preset (`name=value`).
    pub overrides: Vec<String>,
    /// Directory of the real-world traces that experiments replay (`--traces`).
    pub traces: Option<PathBuf>,
    /// Memory per memory node in GiB (`--mn-gb`; `None`: `bench`'s default), for item counts
    /// whose index outgrows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mn_gb: Option<u64>,
    /// The `dmindex` executable, for experiments that start memnode processes over UCX (set
    /// by a build with the `ucx` feature).
    #[serde(skip)]
    pub memnode_exe: Option<PathBuf>,
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
            fast_load: false,
            workloads: Vec::new(),
            overrides: Vec::new(),
            traces: None,
            mn_gb: None,
            memnode_exe: None,
        }
    }
}

/// An experiment replays real-world traces and no `--traces` directory was given: running
/// every experiment skips it, naming it alone is an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NeedsTraces(pub String);

/// An experiment runs memnode processes over UCX and this build cannot (no `ucx` feature):
/// running every experiment skips it, naming it alone is an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NeedsUcx(pub String);

/// One run of an experiment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// The chart line it belongs to.
    pub series: String,
    /// Its position on that line (clients, span, H, …).
    pub x: f64,
    pub report: BenchReport,
}

/// A value an experiment measured outside a bench run (a verb microbenchmark), next to the
/// published value it is checked against.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The chart line it belongs to.
    pub series: String,
    pub x: f64,
    /// What the model gave.
    pub model: f64,
    pub unit: String,
    /// The published value, if there is one.
    pub published: Option<f64>,
    /// Where the published value comes from.
    pub source: String,
}

impl Point {
    /// The model's error against the published value, as a fraction of it.
    pub fn error(&self) -> Option<f64> {
        self.published.map(|p| (self.model - p) / p)
    }
}

/// What an experiment wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub paper: String,
    pub experiment: String,
    pub description: String,
    pub scale: Scale,
    pub seconds: f64,
    pub runs: Vec<Run>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<Point>,
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

/// Runs an index by name (the catalog's dispatch).
pub type Runner<'a> = &'a dyn Fn(&BenchConfig) -> anyhow::Result<BenchReport>;

/// An experiment in progress: its scale, its runs so far and the charts to write.
pub struct Session<'a> {
    pub scale: &'a Scale,
    pub runs: Vec<Run>,
    pub points: Vec<Point>,
    charts: Vec<(String, Chart)>,
    name: &'a str,
    testbed: &'a str,
    /// The paper's lines and item count, for [`Session::as_paper`].
    lines: (&'a [Line], u64),
    runner: Runner<'a>,
    log: &'a mut dyn FnMut(&str),
    /// When the experiment started, for the log's elapsed times.
    started: Instant,
}

impl<'a> Session<'a> {
    /// Of a paper's `workloads`, those this scale runs: the ones `--workloads` names (all if
    /// none), without LOAD when memory is filled by fast-forward (an untimed load has no figure).
    pub fn workloads(&self, workloads: &[&'static str]) -> Vec<&'static str> {
        let chosen = &self.scale.workloads;
        workloads
            .iter()
            .copied()
            .filter(|w| chosen.is_empty() || chosen.iter().any(|c| c == w))
            .filter(|&w| !(self.scale.fast_load && w == "load"))
            .collect()
    }

    /// The configuration every run starts from: the paper's testbed preset, `peak_clients`
    /// clients per CN, a 100 MB cache per CN, zipf 0.99, 8-byte keys and values.
    pub fn base(&self, index: &str, workload: &str) -> BenchConfig {
        let scale = self.scale;
        let mut c = BenchConfig::default();
        c.index.name = index.into();
        let cluster = &mut c.cluster;
        cluster.transport = TransportKind::Sim;
        cluster.preset = Some(self.testbed.into());
        cluster.overrides.clone_from(&scale.overrides);
        cluster.mn_gb = scale.mn_gb;
        (cluster.cns, cluster.clients, cluster.coroutines) =
            (scale.cns, scale.peak_clients, scale.coroutines);
        cluster.cache_mb = 100.0;
        let w = &mut c.workload;
        w.name = workload.into();
        (w.items, w.ops, w.seed, w.fast_load) =
            (scale.items, Some(scale.ops), scale.seed, scale.fast_load);
        // YCSB E scans dense integer keys (as the papers' traces).
        c.keys.ordered = workload == "e";
        c
    }

    /// [`Session::base`] for `index` as the paper ran it: the options of the paper's line for
    /// that index, scaled options at this scale's items. An index the paper's table does not
    /// have is a bug of the table (its tests run every experiment's configurations).
    pub fn as_paper(&self, index: &str, workload: &str) -> BenchConfig {
        self.as_paper_at(index, workload, self.scale.items)
    }

    /// [`Session::as_paper`] loading `items` items (a figure whose deciding quantity needs more
    /// than the scale's), its scaled options scaled to them.
    pub fn as_paper_at(&self, index: &str, workload: &str, items: u64) -> BenchConfig {
        let (lines, paper_items) = self.lines;
        let Some(l) = lines.iter().find(|l| l.index == index) else {
            panic!("the paper's table has no line for index '{index}'");
        };
        let mut c = self.base(index, workload);
        c.workload.items = items;
        c.index.options = l.options_at(items, paper_items);
        c.workload.bulk_load = l.load == LoadBy::Bulk;
        c
    }

    /// `cfg` measured as the papers measure, warm and steady: each client replays its share
    /// of a stream of `ops / replays` operations `replays` times over the run's `ops`
    /// ([`crate::Workload::stream_ops`]), and only `window` of the run is measured
    /// ([`crate::Workload::window`]; [`PAPER_WINDOW`] for CHIME's seconds 4 to 8 of 10).
    pub fn warm(&self, mut cfg: BenchConfig, replays: u64, window: Window) -> BenchConfig {
        let ops = cfg.workload.ops.unwrap_or(cfg.workload.items);
        cfg.workload.stream_ops = Some(ops.div_ceil(replays.max(1)).max(1));
        cfg.workload.window = Some(window);
        cfg
    }

    /// The trace file in the `--traces` directory named `prefix` or `prefix.…` (e.g. `cluster8`,
    /// `cluster8.sort`, `cluster8.csv`, not `cluster80`), compressed files left aside.
    /// [`NeedsTraces`] when no directory was given.
    pub fn trace(&self, prefix: &str, how: &str) -> anyhow::Result<PathBuf> {
        let Some(dir) = &self.scale.traces else {
            return Err(NeedsTraces(format!(
                "{}: replays the {prefix} trace, which is not shipped: pass --traces DIR with \
                 it decompressed in DIR ({how})",
                self.name
            ))
            .into());
        };
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("--traces {}", dir.display()))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                let packed = [".zst", ".gz", ".xz", ".bz2"].iter().any(|z| name.ends_with(z));
                let named =
                    name.strip_prefix(prefix).is_some_and(|r| r.is_empty() || r.starts_with('.'));
                named && !packed && p.is_file()
            })
            .collect();
        found.sort();
        found.into_iter().next().with_context(|| {
            format!("--traces {}: no decompressed file named {prefix}… ({how})", dir.display())
        })
    }

    /// Runs `cfg` as point `x` of line `series`.
    pub fn go(&mut self, series: &str, x: f64, cfg: BenchConfig) -> anyhow::Result<&mut Run> {
        let t = Instant::now();
        let name = self.name;
        (self.log)(&format!(
            "{name}: {series} x={x}: run {} started, {:.0} s into the experiment",
            self.runs.len() + 1,
            self.started.elapsed().as_secs_f64()
        ));
        let report = (self.runner)(&cfg).with_context(|| format!("{name}: {series} at {x}"))?;
        (self.log)(&format!(
            "{name}: {series} x={x}: {}, p50 {:.2} us, p99 {:.2} us, cache {:.1} MB ({:.1} s, \
             {:.0} s into the experiment)",
            crate::report::rate(report.throughput_ops),
            report.latency_us.p50,
            report.latency_us.p99,
            cache_mb(&report),
            t.elapsed().as_secs_f64(),
            self.started.elapsed().as_secs_f64()
        ));
        self.runs.push(Run { series: series.into(), x, report });
        Ok(self.runs.last_mut().expect("just pushed"))
    }

    /// The fabric of preset `name` with the scale's `--set` overrides.
    pub fn net(&self, name: &str) -> anyhow::Result<dmindex_sim::NetParams> {
        let mut net = dmindex_sim::NetParams::preset(name).map_err(anyhow::Error::msg)?;
        for o in &self.scale.overrides {
            net.set(o).map_err(anyhow::Error::msg)?;
        }
        Ok(net)
    }

    /// Records `point`, logging it with its error against the published value.
    pub fn point(&mut self, point: Point) {
        let against = match (point.published, point.error()) {
            (Some(p), Some(e)) => format!(" (published {p}, {:+.1} %)", e * 100.0),
            _ => String::new(),
        };
        (self.log)(&format!(
            "{}: {} x={}: {:.3} {}{against}",
            self.name, point.series, point.x, point.model, point.unit
        ));
        self.points.push(point);
    }

    /// A session outside [`run_experiment`], for testing what a paper's bodies configure.
    pub fn for_test(
        scale: &'a Scale,
        paper: &'a Paper,
        runner: Runner<'a>,
        log: &'a mut dyn FnMut(&str),
    ) -> Session<'a> {
        Session {
            scale,
            runs: Vec::new(),
            points: Vec::new(),
            charts: Vec::new(),
            name: "test",
            testbed: paper.testbed,
            lines: (paper.lines, paper.items),
            runner,
            log,
            started: Instant::now(),
        }
    }

    /// Adds a chart, written as `<file>.svg`.
    pub fn chart(&mut self, file: &str, chart: Chart) {
        self.charts.push((file.into(), chart));
    }
}

/// The part of a run the papers measure: CHIME's runs replay each client's trace for 10 s and
/// count seconds 4 to 8, so 0.4 to 0.8 of the run's operations at a steady rate.
pub const PAPER_WINDOW: (f64, f64) = (0.4, 0.8);

/// [`PAPER_WINDOW`] as a [`Window`].
pub fn paper_window() -> Window {
    Window::new(PAPER_WINDOW.0, PAPER_WINDOW.1).expect("0.4 is below 0.8")
}

/// `name=value` pairs from string slices.
pub fn opts(o: &[(&str, &str)]) -> Vec<(String, String)> {
    o.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// An index counter summed over compute nodes (0 when the index does not keep it).
pub fn stat(r: &BenchReport, name: &str) -> f64 {
    r.index_stats.get(name).copied().unwrap_or(0) as f64
}

/// Run-phase throughput in Mops/s.
pub fn mops(r: &BenchReport) -> f64 {
    r.throughput_ops / 1e6
}

/// CN cache per compute node in MB.
pub fn cache_mb(r: &BenchReport) -> f64 {
    r.cache_bytes as f64 / (1 << 20) as f64
}

/// Searches (reads) of the run phase.
pub fn reads(r: &BenchReport) -> f64 {
    r.per_op.iter().find(|o| o.op == "read").map_or(0, |o| o.count) as f64
}

/// One line per series of `y` against `x`, in run order.
pub fn plot(runs: &[Run], x: impl Fn(&Run) -> f64, y: impl Fn(&BenchReport) -> f64) -> Vec<Series> {
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
pub fn lines(runs: &[Run], y: impl Fn(&BenchReport) -> f64) -> Vec<Series> {
    plot(runs, |r| r.x, y)
}

/// Throughput–latency lines: x = Mops/s.
pub fn curves(runs: &[Run], y: impl Fn(&BenchReport) -> f64) -> Vec<Series> {
    plot(runs, |r| mops(&r.report), y)
}

/// Per series, the points whose series contains `filter` and whose unit is `unit`: what the
/// model gave (first) and the published values (second, only those with one), both named by
/// the point's series so a chart draws each published line in its model line's colour.
pub fn model_and_published(
    points: &[Point],
    filter: &str,
    unit: &str,
) -> (Vec<Series>, Vec<Series>) {
    let (mut model, mut published): (Vec<Series>, Vec<Series>) = (Vec::new(), Vec::new());
    let add = |set: &mut Vec<Series>, name: &str, p: (f64, f64)| match set
        .iter_mut()
        .find(|s| s.name == name)
    {
        Some(s) => s.points.push(p),
        None => set.push(Series { name: name.into(), points: vec![p] }),
    };
    for p in points.iter().filter(|p| p.series.contains(filter) && p.unit == unit) {
        add(&mut model, &p.series, (p.x, p.model));
        if let Some(v) = p.published {
            add(&mut published, &p.series, (p.x, v));
        }
    }
    (model, published)
}

/// A chart with no categorical x names.
pub fn chart(title: &str, x: &str, y: &str, series: Vec<Series>) -> Chart {
    Chart::new(title, x, y, series)
}

/// Runs experiment `name` of `paper` at `scale` through `runner`, writing its JSON and charts
/// into `out`; `log` hears about each run as it finishes.
pub fn run_experiment(
    paper: &Paper,
    name: &str,
    scale: &Scale,
    out: &Path,
    runner: Runner<'_>,
    log: impl FnMut(&str),
) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let (mut outcome, charts) = play(paper, name, scale, runner, log)?;
    let json = out.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(&outcome)?)
        .with_context(|| format!("writing {}", json.display()))?;
    outcome.files.push(json);
    outcome.files.extend(write_charts(&charts, out)?);
    Ok(outcome)
}

/// Runs the body of experiment `name`: its outcome (no files yet) and its charts.
pub(crate) fn play(
    paper: &Paper,
    name: &str,
    scale: &Scale,
    runner: Runner<'_>,
    mut log: impl FnMut(&str),
) -> anyhow::Result<(Outcome, Vec<(String, Chart)>)> {
    let e = paper.experiment(name)?;
    let start = Instant::now();
    let mut s = Session {
        scale,
        runs: Vec::new(),
        points: Vec::new(),
        charts: Vec::new(),
        name,
        testbed: paper.testbed,
        lines: (paper.lines, paper.items),
        runner,
        log: &mut log,
        started: start,
    };
    (e.body)(&mut s)?;
    let Session { runs, points, charts, .. } = s;
    let outcome = Outcome {
        paper: paper.name.into(),
        experiment: name.into(),
        description: e.figure.into(),
        scale: scale.clone(),
        seconds: start.elapsed().as_secs_f64(),
        runs,
        points,
        files: Vec::new(),
    };
    Ok((outcome, charts))
}

/// Writes each chart as `<file>.svg` into `out`, returning the paths.
pub(crate) fn write_charts(charts: &[(String, Chart)], out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::with_capacity(charts.len());
    for (file, ch) in charts {
        let p = out.join(format!("{file}.svg"));
        std::fs::write(&p, ch.svg()?).with_context(|| format!("writing {}", p.display()))?;
        files.push(p);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paper with one line, whose option is scaled by items.
    static TEST_PAPER: Paper = Paper {
        name: "test",
        title: "a test paper",
        testbed: "chime-testbed",
        scale: Scale::default,
        clients_mean: "clients per CN",
        items: 1_000_000,
        lines: &[Line {
            label: "X",
            index: "chime",
            options: &[("speculative", "1")],
            scaled: Some(("hotspot_kb", 1000.0)),
            load: LoadBy::Inserts,
            why: "a test line",
        }],
        experiments: &[],
    };

    /// A run as the paper ran it has its line's options, the scaled one scaled by items (at
    /// least 1), and the table shows both; an index with no line is a bug of the table.
    #[test]
    fn as_paper_applies_the_line_s_options_scaled_by_items() {
        let scale = Scale { items: 200_000, ..Scale::default() };
        let runner = |_: &BenchConfig| -> anyhow::Result<BenchReport> { anyhow::bail!("no runs") };
        let mut log = |_: &str| {};
        let s = Session::for_test(&scale, &TEST_PAPER, &runner, &mut log);
        let c = s.as_paper("chime", "c");
        assert_eq!(c.index.options, opts(&[("speculative", "1"), ("hotspot_kb", "200")]));
        assert_eq!(c.workload.items, 200_000);
        let tiny = s.as_paper_at("chime", "c", 10);
        assert_eq!(tiny.index.options[1], ("hotspot_kb".into(), "1".into()), "at least 1");
        let t = TEST_PAPER.lines_table();
        assert!(
            t.contains("| X | `chime` | `speculative=1`, `hotspot_kb` = 1000 at 1 M items"),
            "{t}"
        );
        let as_sherman = std::panic::AssertUnwindSafe(|| s.as_paper("sherman", "c"));
        let missing = std::panic::catch_unwind(as_sherman);
        assert!(missing.is_err(), "no line for sherman");
    }

    /// `--list`'s time: seconds up to a minute and a half, then whole minutes, rounded.
    #[test]
    fn expected_times_read_as_seconds_then_minutes() {
        let e = |took_s| Experiment { name: "x", figure: "x", body: |_| Ok(()), took_s };
        let shown: Vec<String> = [Some(0), Some(13), Some(89), Some(90), Some(2084), None]
            .map(|t| e(t).expected_time())
            .into();
        assert_eq!(shown, ["~1 s", "~13 s", "~89 s", "~2 min", "~35 min", "not timed"]);
    }

    /// A warm configuration replays a stream of its share of the operations and measures the
    /// papers' window, and the harness accepts it as it stands.
    #[test]
    fn a_warm_config_replays_a_stream_and_measures_a_window() {
        let scale = Scale::default();
        let runner = |_: &BenchConfig| -> anyhow::Result<BenchReport> { anyhow::bail!("no runs") };
        let mut log = |_: &str| {};
        let s = Session::for_test(&scale, &TEST_PAPER, &runner, &mut log);
        let cold = s.base("chime", "c");
        assert_eq!((cold.workload.stream_ops, cold.workload.window), (None, None));
        let c = s.warm(cold, 5, paper_window());
        assert_eq!(c.workload.stream_ops, Some(scale.ops / 5));
        let w = c.workload.window.expect("a window");
        assert_eq!((w.from(), w.to()), PAPER_WINDOW);
        crate::check_config(&c).expect("a run the harness takes");
        // A stream is never empty, however many replays are asked for.
        let mut tiny = s.base("chime", "c");
        tiny.workload.ops = Some(3);
        assert_eq!(s.warm(tiny, 10, paper_window()).workload.stream_ops, Some(1));
    }
}
