//! The testbed model against the hardware measurements its numbers come from.
//!
//! Not a paper's figure: `dmindex experiment testbed/verbs` runs the verb microbenchmarks the
//! NIC parameters were taken from (`dmindex_sim::presets`), on the preset of the machine they
//! were measured on, next to the published values, and the papers' own microbenchmarks on the
//! papers' presets as held-out checks. Every point is one `dmindex_sim::microbench` run.

use dmindex_bench::experiment::{
    chart, model_and_published, Experiment, Paper, Point, Scale, Session,
};
use dmindex_sim::microbench::{run, Verb, VerbBench};

pub static PAPER: Paper = Paper {
    name: "testbed",
    title: "The testbed model against published RDMA microbenchmarks",
    testbed: "smart-bench",
    scale: Scale::default,
    clients_mean: "(not used: each microbenchmark sets its own threads)",
    items: 1,
    lines: &[],
    experiments: &[Experiment {
        name: "verbs",
        figure: "verb throughput and latency against threads, depth and size; atomics on one \
                 word; CHIME Fig. 4c and the papers' round trips (held out)",
        body: verbs,
        took_s: Some(1),
    }],
};

/// The SMART microbenchmarks (ASPLOS '24), raw data of Figs. 3a, 3b and 4a: 8-byte verbs,
/// one compute node, per-thread doorbells.
const SMART: &str = "Ren et al., SMART (ASPLOS '24), ConnectX-6 200 Gb/s IB";
const READ_THREADS: [(usize, f64); 7] =
    [(1, 1.81), (8, 14.5), (16, 28.7), (32, 55.2), (48, 75.4), (64, 90.3), (96, 111.2)];
const WRITE_THREADS: [(usize, f64); 7] =
    [(1, 1.70), (8, 13.9), (16, 27.3), (32, 50.3), (48, 68.8), (64, 78.4), (96, 90.6)];
const READ_DEPTH: [(usize, f64); 3] = [(1, 33.0), (4, 81.6), (8, 111.0)];

fn bench(verb: Verb, bytes: usize, cns: u16, threads: usize, depth: usize) -> VerbBench {
    VerbBench { verb, bytes, cns, threads, depth, rounds: 30, one_word: false, meta: None }
}

/// Runs `b` on `preset` and records it as point `x` of `series`.
fn measure(
    s: &mut Session<'_>,
    preset: &str,
    series: &str,
    x: f64,
    b: &VerbBench,
    published: Option<(f64, &str)>,
) -> anyhow::Result<f64> {
    let net = s.net(preset)?;
    let m = run(&net, b).map_err(anyhow::Error::msg)?;
    s.point(Point {
        series: series.into(),
        x,
        model: m.mops,
        unit: "M verbs/s".into(),
        published: published.map(|p| p.0),
        source: published.map_or_else(|| "(model only)".into(), |p| p.1.into()),
    });
    Ok(m.mops)
}

fn verbs(s: &mut Session<'_>) -> anyhow::Result<()> {
    for (verb, name, table) in
        [(Verb::Read, "READ", &READ_THREADS), (Verb::Write, "WRITE", &WRITE_THREADS)]
    {
        for &(threads, published) in table {
            let b = bench(verb, 8, 1, threads, 8);
            let series = format!("{name} 8 B × 8 in flight");
            measure(s, "smart-bench", &series, threads as f64, &b, Some((published, SMART)))?;
        }
    }
    for (depth, published) in READ_DEPTH {
        let b = bench(Verb::Read, 8, 1, 96, depth);
        measure(
            s,
            "smart-bench",
            "READ 8 B, 96 threads",
            depth as f64,
            &b,
            Some((published, SMART)),
        )?;
    }
    let idle = bench(Verb::Read, 8, 1, 12, 1);
    measure(s, "smart-bench", "READ 8 B, 12 threads × 1", 12.0, &idle, Some((5.10, SMART)))?;
    let one_word = VerbBench { one_word: true, ..bench(Verb::Cas, 8, 1, 32, 4) };
    let anecdote = "CAS on one host-memory word, ConnectX-6 (published with public DM code)";
    measure(s, "smart-bench", "CAS on one word", 32.0, &one_word, Some((2.04, anecdote)))?;
    // Held out: CHIME Fig. 4c, one 19-byte entry against an 8-entry neighbourhood, 10 CNs × 64
    // clients × 6 coroutines; the paper: the 8-entry READ at least 1.3× slower.
    let mut fig4c = Vec::new();
    for (entries, bytes) in [(1.0, 19), (8.0, 152)] {
        let b = VerbBench { rounds: 10, ..bench(Verb::Read, bytes, 10, 64, 6) };
        fig4c.push(measure(s, "chime-testbed", "CHIME Fig. 4c READ", entries, &b, None)?);
    }
    s.point(Point {
        series: "CHIME Fig. 4c, 1-entry / 8-entry".into(),
        x: 1.0,
        model: fig4c[0] / fig4c[1],
        unit: "×".into(),
        published: Some(1.3),
        source: "CHIME (SOSP '24) §3.2.3: at least 1.3×".into(),
    });
    // Held out: the papers' round trips at one client (8-byte READ, CPU included).
    let rtt = [
        ("chime-testbed", None),
        (
            "sephash-testbed",
            Some((2.15, "SepHash (VLDB '24) §5.2.1: 4.3 µs insert, 2 round trips")),
        ),
        ("dolphin-testbed", None),
        ("histore-testbed", None),
    ];
    for (i, (preset, published)) in rtt.into_iter().enumerate() {
        let net = s.net(preset)?;
        let m = run(&net, &bench(Verb::Read, 8, 1, 1, 1)).map_err(anyhow::Error::msg)?;
        s.point(Point {
            series: format!("idle READ round trip, {preset}"),
            x: i as f64,
            model: m.round_ns / 1e3,
            unit: "µs".into(),
            published: published.map(|p| p.0),
            source: published.map_or_else(|| "(model only)".into(), |p| p.1.into()),
        });
    }
    for (file, title, x, prefix) in [
        (
            "threads",
            "8-byte verbs vs threads, 8 in flight each (smart-bench)",
            "threads",
            "8 B × 8",
        ),
        (
            "depth",
            "8-byte READs vs verbs in flight, 96 threads (smart-bench)",
            "in flight",
            "96 threads",
        ),
    ] {
        let (model, published) = model_and_published(&s.points, prefix, "M verbs/s");
        s.chart(file, chart(title, x, "M verbs/s", model).with_paper(published));
    }
    Ok(())
}
