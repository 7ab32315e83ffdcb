//! CHIME (SOSP '24): the figures of its techniques and parameters — the factor analysis
//! (Fig. 15), speculative reads at high client counts (Fig. 17), SMART against its cache budget
//! (Fig. 18b), the span and neighbourhood sweeps (Figs. 18e/f, 19a/b) and the hotspot buffer
//! (Fig. 19c).

use dmindex_bench::experiment::{cache_mb, chart, curves, lines, mops, reads, stat, Run, Session};
use dmindex_bench::plot::paper_series;
use dmindex_bench::BenchReport;

use super::{
    rolex_span, split_load_factors, warm, with_cache, LOADED, MAX_LOAD_FACTOR_BY_H, PAPER_ITEMS,
    WORKLOADS,
};

/// The factor staircase of Fig. 15, from Sherman: (label, options). The one list of CHIME's
/// factors in the order the paper adds them is `dmindex_chime::FACTORS`.
pub fn staircase() -> Vec<(String, Vec<(String, String)>)> {
    const LABELS: [&str; 5] = ["hopscotch", "vacancy", "replication", "sibling", "speculative"];
    let mut steps = vec![("Sherman".to_string(), Vec::new())];
    for (k, label) in LABELS.iter().enumerate() {
        steps.push((format!("+{label}"), dmindex_chime::factors_on(k + 1, &[])));
    }
    steps
}

/// Hotspot hit ratio: speculative hits per search (reads of the run phase).
fn hit_ratio(r: &BenchReport) -> f64 {
    let n = reads(r);
    if n == 0.0 {
        0.0
    } else {
        stat(r, "speculative_hits") / n
    }
}

/// The hotspot buffer `paper_mb` MB stands for at 60 M items, in KiB at this scale's items.
pub fn hotspot_kb(s: &Session<'_>, paper_mb: f64) -> String {
    ((paper_mb * 1024.0 * s.scale.items as f64 / PAPER_ITEMS).round() as u64).to_string()
}

pub(super) fn factors(s: &mut Session<'_>) -> anyhow::Result<()> {
    let steps = staircase();
    for w in s.workloads(&WORKLOADS) {
        for (i, (label, o)) in steps.iter().enumerate() {
            let mut c = s.as_paper("sherman", w);
            c.index.options.extend(o.iter().cloned());
            // Speculative reads with the paper's 30 MB buffer, as the paper's CHIME line.
            if o.iter().any(|(k, v)| k == "speculative" && v == "1") {
                c.index.options.push(("hotspot_kb".into(), hotspot_kb(s, 30.0)));
            }
            let line = format!("YCSB {}", w.to_uppercase());
            // One line per workload across the steps.
            let run = s.go(&format!("{line} {label}"), i as f64, warm(s, c))?;
            run.series = line;
        }
    }
    let title =
        format!("Factor analysis ({} clients)", s.scale.peak_clients * s.scale.cns as usize);
    let mut ch = chart(&title, "technique added", "throughput (Mops/s)", lines(&s.runs, mops));
    ch.x_names = steps.into_iter().map(|(label, _)| label).collect();
    s.chart("factors", ch);
    Ok(())
}

pub(super) fn speculative(s: &mut Session<'_>) -> anyhow::Result<()> {
    let mut cl = s.scale.clients.clone();
    cl.extend([96, 128].into_iter().filter(|c| !s.scale.clients.contains(c)));
    for (series, spec) in [("CHIME without SR", "0"), ("CHIME", "1")] {
        for &n in &cl {
            let mut c = s.as_paper("chime", "c");
            c.cluster.clients = n;
            c.index.options.push(("speculative".into(), spec.into()));
            s.go(series, n as f64, warm(s, c))?;
        }
    }
    let series = curves(&s.runs, |r| r.latency_us.p50);
    s.chart(
        "speculative",
        chart("Speculative reads, YCSB C", "throughput (Mops/s)", "P50 latency (us)", series),
    );
    Ok(())
}

pub(super) fn span(s: &mut Session<'_>) -> anyhow::Result<()> {
    for index in ["chime", "sherman", "rolex"] {
        for span in [16usize, 32, 64, 128, 256] {
            let mut c = s.as_paper(index, "c");
            match index {
                // A ROLEX leaf holds at most 128 slots (its count is a byte).
                "rolex" if span > dmindex_rolex::layout::MAX_SPAN => continue,
                "rolex" => rolex_span(&mut c, span),
                _ => c.index.options.push(("span".into(), span.to_string())),
            }
            s.go(index, span as f64, warm(s, c))?;
        }
    }
    let chime: Vec<Run> = s.runs.iter().filter(|r| r.series == "chime").cloned().collect();
    let all = lines(&s.runs, mops);
    let split = split_load_factors(s, LOADED, "span", &[16, 32, 64, 128, 256])?;
    s.chart("span-throughput", chart("Span size, YCSB C", "span", "throughput (Mops/s)", all));
    s.chart(
        "span-cache",
        chart("Span size: CHIME cache", "span", "cache per CN (MB)", lines(&chime, cache_mb)),
    );
    s.chart(
        "span-load-factor",
        chart("Span size: CHIME load factor when a hop first fails", "span", "load factor", split)
            // Fig. 19a: 88.1 % at span 64 (§5.4); the other spans are drawn, not stated.
            .with_paper(paper_series(&[(LOADED, &[(64.0, 0.881)])])),
    );
    Ok(())
}

pub(super) fn neighbourhood(s: &mut Session<'_>) -> anyhow::Result<()> {
    for h in [2usize, 4, 8, 16] {
        let mut c = s.as_paper("chime", "c");
        c.index.options.push(("h".into(), h.to_string()));
        s.go("chime", h as f64, warm(s, c))?;
    }
    let (tput, cache) = (lines(&s.runs, mops), lines(&s.runs, cache_mb));
    let lf = split_load_factors(s, LOADED, "h", &[2, 4, 8, 16])?;
    s.chart(
        "neighbourhood-throughput",
        chart("Neighbourhood size, YCSB C", "H", "throughput (Mops/s)", tput),
    );
    s.chart(
        "neighbourhood-cache",
        chart("Neighbourhood size: cache", "H", "cache per CN (MB)", cache),
    );
    s.chart(
        "neighbourhood-load-factor",
        chart("Neighbourhood size: load factor when a hop first fails", "H", "load factor", lf)
            .with_paper(paper_series(&[(LOADED, &MAX_LOAD_FACTOR_BY_H)])),
    );
    Ok(())
}

pub(super) fn hotspot(s: &mut Session<'_>) -> anyhow::Result<()> {
    for mb in [0u64, 10, 30, 50] {
        let mut c = s.as_paper("chime", "c");
        // The paper's MB at 60 M items, as the same share of the keys here.
        c.index.options.push(("hotspot_kb".into(), hotspot_kb(s, mb as f64)));
        c.output.key_reuse = true;
        s.go("chime", mb as f64, warm(s, c))?;
    }
    let (tput, mut hits) = (lines(&s.runs, mops), lines(&s.runs, hit_ratio));
    // What no per-node buffer can beat: reads of keys their node had not read before miss.
    hits.extend(lines(&s.runs, |r| r.key_reuse.unwrap_or(0.0)).into_iter().map(|mut l| {
        l.name = "ceiling (key reuse)".into();
        l
    }));
    s.chart(
        "hotspot-throughput",
        chart("Hotspot buffer, YCSB C", "hotspot buffer (MB)", "throughput (Mops/s)", tput),
    );
    s.chart(
        "hotspot-hit-ratio",
        chart(
            "Hotspot buffer hit ratio",
            "hotspot buffer (MB)",
            "speculative hits per search",
            hits,
        ),
    );
    Ok(())
}

/// Fig. 18b: SMART's throughput as its cache grows (budgets in the paper's MB at 60 M items).
pub(super) fn smart_cache_sweep(s: &mut Session<'_>) -> anyhow::Result<()> {
    for mb in [25.0, 50.0, 100.0, 200.0, 400.0, 600.0] {
        s.go("smart", mb, warm(s, with_cache(s, "smart", "c", mb)))?;
        s.go("chime", mb, warm(s, with_cache(s, "chime", "c", mb)))?;
    }
    let (tput, cache) = (lines(&s.runs, mops), lines(&s.runs, cache_mb));
    s.chart(
        "smart-cache-throughput",
        chart(
            "Cache budget, YCSB C",
            "cache budget (MB at 60 M items)",
            "throughput (Mops/s)",
            tput,
        ),
    );
    s.chart(
        "smart-cache-used",
        chart(
            "Cache budget: cache used",
            "cache budget (MB at 60 M items)",
            "cache per CN (MB)",
            cache,
        ),
    );
    Ok(())
}
