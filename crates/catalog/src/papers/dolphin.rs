//! Dolphin (MSST '24, §IV): the figures it reproduces on the simulated Dolphin testbed.
//!
//! Every run uses the `dolphin-testbed` preset, the paper's placement (4 compute nodes × 18
//! client threads, 4 memory nodes, one coroutine a thread), 8-byte keys and values, and the
//! paper's key format: keys *folded* into a space twice the keys a run reaches and loaded in
//! pseudo-random order (`--folded`; the paper: 512 M keys in 2³⁰), so a 7-byte prefix holds
//! ~128 keys as in the paper. Item counts are scaled down (`Scale::items` instead of 512 M) and
//! so are cache budgets: a budget the paper gives in MB is multiplied by `items / 512 M`
//! ([`budget`]), so each index
//! keeps the same fraction of what it would cache at the paper's scale.

use dmindex_bench::config::Deal;
use dmindex_bench::experiment::{
    cache_mb, chart, lines, mops, Experiment, Line, LoadBy, Paper, Scale, Session,
};
use dmindex_bench::plot::paper_series;
use dmindex_bench::{BenchConfig, BenchReport};

pub static PAPER: Paper = Paper {
    name: "dolphin",
    title: "Dolphin: A Resource-efficient Hybrid Index on Disaggregated Memory (MSST '24)",
    testbed: "dolphin-testbed",
    scale,
    clients_mean: "client threads per CN (the paper: 18 on each of 4 CNs)",
    items: 512_000_000,
    lines: &[
        Line {
            label: "Dolphin",
            index: "dolphin",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "the paper's Dolphin: radix inner nodes, B+ leaves, Spear, MS-RNIC writes",
        },
        Line {
            label: "Sherman",
            index: "sherman",
            options: &[("cache_charge", "page")],
            scaled: None,
            load: LoadBy::Inserts,
            why: "the original Sherman's cache, as the paper counts it: whole 1 KB internal \
                  pages (CHIME's enhanced Sherman counts entries)",
        },
        Line {
            label: "Marlin",
            index: "marlin",
            options: &[("cache_charge", "page")],
            scaled: None,
            load: LoadBy::Inserts,
            why: "the paper's B-link baseline, unsorted {key, item pointer} leaves; Sherman's \
                  cache of whole internal pages",
        },
        Line {
            label: "SMART",
            index: "smart",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "radix cache within the paper's budgets, scaled by items",
        },
        Line {
            label: "SMART-Opt",
            index: "smart-opt",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "SMART with an unlimited radix cache, for Table II's cache need",
        },
    ],
    experiments: &[
        Experiment {
            name: "rtt",
            figure: "§I/§III: round trips per search, update, insert and 100-item scan, one client",
            body: rtt,
            took_s: Some(71),
        },
        Experiment {
            name: "memory",
            figure:
                "Table II: CN cache for best throughput and MN memory, extrapolated to 512 M items",
            body: memory,
            took_s: Some(15),
        },
        Experiment {
            name: "cache",
            figure: "Fig. 6: YCSB A throughput vs CN cache size, zipfian 0.99 and 0.9, and uniform",
            body: cache,
            took_s: Some(674),
        },
        Experiment {
            name: "ycsb",
            figure: "Fig. 7: YCSB A, C and LOAD throughput, P50 and P99",
            body: ycsb,
            took_s: Some(78),
        },
        Experiment {
            name: "scan",
            figure: "Fig. 8: range-only and range-write (100-item scans, uniform) throughput",
            body: scan,
            took_s: Some(180),
        },
        Experiment {
            name: "twitter",
            figure: "Fig. 9: Twitter cache traces cluster8 and cluster9 (needs --traces DIR)",
            body: twitter,
            took_s: None,
        },
        Experiment {
            name: "twitter-standin",
            figure: "Fig. 9 stand-in: synthetic traces with cluster8's and cluster9's published \
                     op mix, skew and key count (not the traces)",
            body: twitter_standin,
            took_s: Some(4),
        },
    ],
};

/// 4 CNs × 18 clients, 500 k dense items (the paper: 512 M), 200 k operations a run.
fn scale() -> Scale {
    Scale {
        items: 500_000,
        ops: 200_000,
        cns: 4,
        clients: vec![18],
        peak_clients: 18,
        coroutines: 1,
        seed: 1,
        fast_load: false,
        ..Scale::default()
    }
}

/// The indexes of the paper's figures.
const INDEXES: [&str; 4] = ["dolphin", "sherman", "marlin", "smart"];

/// Items the paper loads.
const PAPER_ITEMS: f64 = 512e6;

/// Memory nodes of the paper's testbed.
const MEMORY_NODES: u16 = 4;

/// A budget the paper gives in MB, scaled to `items`.
pub fn budget(s: &Session<'_>, paper_mb: f64) -> f64 {
    paper_mb * s.scale.items as f64 / PAPER_ITEMS
}

/// A run of `index` on `workload` as the paper runs it: folded keys, 4 memory nodes, the
/// paper's 2000 MB cache (scaled) unless a figure says otherwise.
pub fn base(s: &Session<'_>, index: &str, workload: &str) -> BenchConfig {
    let mut c = s.as_paper(index, workload);
    (c.keys.ordered, c.keys.folded) = (false, true);
    c.cluster.memory_nodes = Some(MEMORY_NODES);
    c.cluster.cache_mb = budget(s, 2000.0);
    c
}

/// 100-item scans of a `scan` share, the rest inserts, uniform keys.
pub fn scans(s: &Session<'_>, index: &str, scan: f64) -> BenchConfig {
    let mut c = base(s, index, "e");
    c.workload.mix = Some(format!("scan={scan},insert={}", 1.0 - scan));
    c.workload.scan_len = Some(100);
    c.workload.distribution = Some("uniform".into());
    c
}

fn p50(r: &BenchReport) -> f64 {
    r.latency_us.p50
}

fn p99(r: &BenchReport) -> f64 {
    r.latency_us.p99
}

/// The paper's round trips per operation where it states them, at the x of [`RTT_OPS`]: a
/// search takes one for Dolphin and Sherman and two for Marlin, whose items are out of place
/// (§I; Fig. 7b's text); an update two for Dolphin and at least three for the others, here
/// Sherman's and Marlin's three (§III; Fig. 7a's text; SMART's "at least" is not drawn); an
/// insert three for Dolphin, Sherman and Marlin (Fig. 7c's text).
const PAPER_RTT: [(&str, &[(f64, f64)]); 3] = [
    ("dolphin", &[(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]),
    ("sherman", &[(0.0, 1.0), (1.0, 3.0), (2.0, 3.0)]),
    ("marlin", &[(0.0, 2.0), (1.0, 3.0), (2.0, 3.0)]),
];

/// Table II at 512 M items, Dolphin, Sherman, Marlin, SMART: the CN cache holding every inner
/// node (MB) and the memory-side bytes (GB), each at the chart's one category.
const TABLE_II_CS: [(&str, &[(f64, f64)]); 4] = [
    ("dolphin", &[(0.0, 320.0)]),
    ("sherman", &[(0.0, 460.0)]),
    ("marlin", &[(0.0, 460.0)]),
    ("smart", &[(0.0, 5200.0)]),
];
const TABLE_II_MS: [(&str, &[(f64, f64)]); 4] = [
    ("dolphin", &[(0.0, 14.0)]),
    ("sherman", &[(0.0, 12.0)]),
    ("marlin", &[(0.0, 26.0)]),
    ("smart", &[(0.0, 156.0)]),
];

/// The operations of the round-trip figure: name, workload, mix.
const RTT_OPS: [(&str, &str, Option<&str>); 4] = [
    ("search", "c", None),
    ("update", "a", Some("update=1")),
    ("insert", "load", None),
    ("scan 100", "e", Some("scan=1")),
];

fn rtt(s: &mut Session<'_>) -> anyhow::Result<()> {
    for index in INDEXES {
        for (i, (_, workload, mix)) in RTT_OPS.iter().enumerate() {
            let mut c = base(s, index, workload);
            (c.cluster.cns, c.cluster.clients) = (1, 1);
            c.workload.ops = Some(s.scale.ops.min(20_000));
            c.workload.mix = mix.map(str::to_string);
            c.workload.distribution = Some("uniform".into());
            c.workload.scan_len = Some(100);
            s.go(index, i as f64, c)?;
        }
    }
    let mut ch = chart(
        "Round trips per operation (one client, warm cache)",
        "operation",
        "round trips",
        lines(&s.runs, |r| r.round_trips_per_op),
    );
    ch.x_names = RTT_OPS.iter().map(|o| o.0.to_string()).collect();
    s.chart("rtt", ch.with_paper(paper_series(&PAPER_RTT)));
    Ok(())
}

/// Bytes per item of a loaded index, extrapolated to the paper's 512 M items, in MB.
fn at_paper_scale(r: &BenchReport, bytes: u64) -> f64 {
    bytes as f64 / r.items.max(1) as f64 * PAPER_ITEMS / (1 << 20) as f64
}

fn memory(s: &mut Session<'_>) -> anyhow::Result<()> {
    for index in INDEXES {
        // One client, so that memory is what the index holds, not allocation chunks in reserve;
        // an unlimited cache, warmed by uniform searches of every leaf.
        let mut c = base(s, index, "c");
        (c.cluster.cns, c.cluster.clients) = (1, 1);
        c.cluster.cache_mb = 1e6;
        c.workload.ops = Some(s.scale.items);
        c.workload.distribution = Some("uniform".into());
        if index == "smart" {
            c.index.name = "smart-opt".into();
        }
        s.go(index, 0.0, c)?;
    }
    let cn = lines(&s.runs, |r| at_paper_scale(r, r.cache_bytes));
    let mn = lines(&s.runs, |r| at_paper_scale(r, r.index_bytes) / 1024.0);
    let mut ch = chart("CN cache holding every inner node, at 512 M items", "", "MB per CN", cn)
        .with_paper(paper_series(&TABLE_II_CS));
    ch.x_names = vec!["Table II: CS".into()];
    s.chart("memory-cn", ch);
    let mut ch = chart("Memory-side bytes, at 512 M items", "", "GB", mn)
        .with_paper(paper_series(&TABLE_II_MS));
    ch.x_names = vec!["Table II: MS".into()];
    s.chart("memory-mn", ch);
    Ok(())
}

/// The paper's cache budgets of Fig. 6, MB.
const CACHE_MB: [f64; 5] = [50.0, 100.0, 200.0, 400.0, 800.0];

/// Fig. 6's panels: (a) zipfian 0.99, (b) "less skewed" (the text gives no θ; 0.9 assumed),
/// (c) uniform.
const PANELS: [(&str, &str, Option<f64>); 3] =
    [("a", "zipfian", None), ("b", "zipfian", Some(0.9)), ("c", "uniform", None)];

fn cache(s: &mut Session<'_>) -> anyhow::Result<()> {
    for (tag, dist, theta) in PANELS {
        let first = s.runs.len();
        for index in INDEXES {
            for mb in CACHE_MB {
                let mut c = base(s, index, "a");
                c.cluster.cache_mb = budget(s, mb);
                c.workload.distribution = Some(dist.into());
                c.workload.zipf_theta = theta;
                s.go(index, mb, c)?;
            }
        }
        let dist = match theta {
            Some(t) => format!("{dist}{t}"),
            None => dist.to_string(),
        };
        let title = format!("YCSB A, {dist}: throughput vs cache (paper MB, scaled)");
        let runs = s.runs[first..].to_vec();
        s.chart(
            &format!("cache-{tag}-{dist}"),
            chart(&title, "cache at the paper's scale (MB)", "Mops/s", lines(&runs, mops)),
        );
        let used = lines(&runs, cache_mb);
        s.chart(
            &format!("cache-{tag}-{dist}-used"),
            chart("Cache used per CN", "cache at the paper's scale (MB)", "MB", used),
        );
    }
    Ok(())
}

/// The run-phase workloads of Fig. 7; its LOAD is every run's timed load phase.
const YCSB: [&str; 2] = ["a", "c"];

fn ycsb(s: &mut Session<'_>) -> anyhow::Result<()> {
    let workloads = s.workloads(&YCSB);
    for index in INDEXES {
        for (i, w) in workloads.iter().enumerate() {
            let c = base(s, index, w);
            s.go(index, i as f64, c)?;
        }
    }
    let mut names: Vec<String> = workloads.iter().map(|w| w.to_uppercase()).collect();
    for (file, y, what) in [
        ("ycsb-p50", p50 as fn(&BenchReport) -> f64, "P50 latency (us)"),
        ("ycsb-p99", p99, "P99 latency (us)"),
    ] {
        let mut ch = chart("YCSB (2000 MB cache, scaled)", "workload", what, lines(&s.runs, y));
        ch.x_names = names.clone();
        s.chart(file, ch);
    }
    // LOAD: the load phase of the last workload's runs (each client inserts its own share of
    // the keys, in folded order), timed like a run phase.
    let mut series = lines(&s.runs, mops);
    if !s.scale.fast_load {
        let last = workloads.len() - 1;
        for line in &mut series {
            let run = s.runs.iter().find(|r| r.series == line.name && r.x == last as f64);
            if let Some(r) = run {
                line.points.push((workloads.len() as f64, r.report.load_throughput_ops / 1e6));
            }
        }
        names.push("LOAD".into());
    }
    let mut ch = chart("YCSB (2000 MB cache, scaled)", "workload", "Mops/s", series);
    ch.x_names = names;
    s.chart("ycsb-throughput", ch);
    Ok(())
}

fn scan(s: &mut Session<'_>) -> anyhow::Result<()> {
    for index in INDEXES {
        for (i, share) in [1.0, 0.5].into_iter().enumerate() {
            let c = scans(s, index, share);
            s.go(index, i as f64, c)?;
        }
    }
    let mut ch =
        chart("Range queries of 100 items, uniform", "workload", "Mops/s", lines(&s.runs, mops));
    ch.x_names = vec!["range-only".into(), "range-write (50 % inserts)".into()];
    s.chart("scan", ch);
    Ok(())
}

/// The Twitter clusters of Fig. 9: cluster8 is write-heavy, cluster9 read-only.
const CLUSTERS: [&str; 2] = ["cluster8", "cluster9"];

/// How to get a cluster's trace (the error when it is missing says so).
const TRACE_HOW: &str = "the twitter/cache-trace release's clusterN.sort.zst, `zstd -d` it and \
                         cut it with `head -n`; docs/reproduce-dolphin.md";

/// Each cluster's trace replayed from the start by every index: the index is first loaded with
/// the trace's distinct keys (a cache trace has no load phase; its gets would otherwise miss),
/// numbered by first appearance and folded like the other figures' keys.
fn twitter(s: &mut Session<'_>) -> anyhow::Result<()> {
    let files: Vec<_> =
        CLUSTERS.iter().map(|c| s.trace(c, TRACE_HOW)).collect::<anyhow::Result<_>>()?;
    for index in INDEXES {
        for (i, file) in files.iter().enumerate() {
            s.go(index, i as f64, replay(s, index, file))?;
        }
    }
    let mut ch = chart("Twitter cache traces", "trace", "Mops/s", lines(&s.runs, mops));
    ch.x_names = vec!["cluster8 (write-heavy)".into(), "cluster9 (read-only)".into()];
    s.chart("twitter", ch);
    Ok(())
}

/// A cache trace replayed by `index`, loaded first with the trace's keys. Its requests are
/// dealt to the clients round-robin, as a cache's clients take requests as they come: dealt by
/// key (`bench`'s default, which keeps a key's operations in order), a Zipf α of 1.7 puts the
/// hot keys' requests on a few clients, which then bound the run (the stand-ins ran at 0.25–0.61
/// Mops/s so, against 2.8–14.6 round-robin). A get that overtakes its key's set misses, as it
/// may in a cache.
fn replay(s: &Session<'_>, index: &str, file: &std::path::Path) -> BenchConfig {
    let mut c = base(s, index, "c");
    (c.workload.trace, c.workload.trace_warm) = (Some(file.to_path_buf()), true);
    c.workload.deal = Deal::RoundRobin;
    c
}

/// Fig. 9 without the traces: for each cluster a synthetic trace made from the statistics
/// Twitter published for it ([`dmindex_ycsb::twitter_standin`]: op mix, Zipf α, distinct keys
/// from the working set, capped at the scale's items), replayed exactly as a real trace is. A
/// stand-in, labelled so on the chart; `twitter` replays the real traces.
fn twitter_standin(s: &mut Session<'_>) -> anyhow::Result<()> {
    use dmindex_ycsb::twitter_standin::{write, CLUSTERS};
    let dir = std::env::temp_dir().join(format!("dmindex-twitter-standin-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::new();
    for stats in &CLUSTERS {
        let path = dir.join(format!("{}-standin.csv", stats.name));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let keys = stats.keys().min(s.scale.items);
        write(stats, keys, s.scale.ops, s.scale.seed, &mut out)?;
        std::io::Write::flush(&mut out)?;
        files.push(path);
    }
    let ran = (|| {
        for index in INDEXES {
            for (i, file) in files.iter().enumerate() {
                s.go(index, i as f64, replay(s, index, file))?;
            }
        }
        anyhow::Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    ran?;
    let title = "Twitter stand-ins (published statistics, not the traces)";
    let mut ch = chart(title, "stand-in", "Mops/s", lines(&s.runs, mops));
    ch.x_names =
        vec!["cluster8 stand-in (write-heavy)".into(), "cluster9 stand-in (read-only)".into()];
    s.chart("twitter-standin", ch);
    Ok(())
}
