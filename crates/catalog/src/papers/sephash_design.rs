//! SepHash (VLDB '24): the figures of its own design — the FPTable cache (Table 3), the
//! write and read ablations (Fig. 19), segment sizes (Fig. 20), memory nodes (Fig. 21) and KV
//! sizes (Fig. 22).

use dmindex_bench::experiment::{cache_mb, chart, lines, mops, opts, Run, Session};
use dmindex_bench::plot::Series;
use dmindex_bench::BenchConfig;

use super::{inserts, searches, sweep, variant, INDEXES, PER_CN};

/// Table 3: FPTable cache per compute node after filling `items` keys, per MainSegment size.
pub(super) fn fptable(s: &mut Session<'_>) -> anyhow::Result<()> {
    for ratio in [64usize, 32, 16, 8] {
        let mut c = searches(s, "sephash", PER_CN);
        c.workload.ops = Some(10_000);
        c.index.options = opts(&[("main_ratio", &ratio.to_string())]);
        s.go("sephash", ratio as f64, c)?;
    }
    let items = s.scale.items as f64;
    let per_100m = lines(&s.runs, |r| cache_mb(r) * 1e8 / items);
    s.chart(
        "fptable",
        chart(
            "FPTable cache, scaled to 100 M keys",
            "MainSegment / CurSegment",
            "MB per CN at 100 M keys",
            per_100m,
        ),
    );
    Ok(())
}

/// Fig. 19: (a) inserts as SepHash's techniques are added, (b) searches likewise, RACE first.
pub(super) fn ablation(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    let write: [(&str, &[(&str, &str)]); 3] = [
        ("Base", &[("entry_layout", "0"), ("zero_wait", "0")]),
        ("+entry layout", &[("zero_wait", "0")]),
        ("+zero-wait", &[]),
    ];
    let read: [(&str, &[(&str, &str)]); 3] = [
        ("Base", &[("fptable", "0"), ("filter", "0")]),
        ("+FPTable", &[("filter", "0")]),
        ("+filter", &[]),
    ];
    let mut names = vec!["RACE".to_string()];
    s.go("insert", 0.0, inserts(s, "race", peak))?;
    s.go("search", 0.0, searches(s, "race", peak))?;
    for (i, ((wl, wo), (rl, ro))) in write.iter().zip(read.iter()).enumerate() {
        let x = (i + 1) as f64;
        let mut c = inserts(s, "sephash", peak);
        c.index.options = opts(wo);
        s.go("insert", x, c)?;
        let mut c = searches(s, "sephash", peak);
        c.index.options = opts(ro);
        s.go("search", x, c)?;
        names.push(format!("{wl} / {rl}"));
    }
    let mut ch = chart("Ablation at peak threads", "technique (insert / search)", "Mops/s", {
        lines(&s.runs, mops)
    });
    ch.x_names = names;
    s.chart("ablation", ch);
    Ok(())
}

/// Fig. 20: (a) CurSegment 128 B – 2 KB (MainSegment 64×), (b) MainSegment 8–64 KB (CurSegment
/// 1 KB), inserts and searches at peak threads.
pub(super) fn segment_size(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    for (op, make) in
        [("insert", inserts as fn(&Session<'_>, &str, usize) -> BenchConfig), ("search", searches)]
    {
        sweep(s, &format!("CurSegment, {op}"), &[128, 256, 512, 1024, 2048], |s, cur| {
            let mut c = make(s, "sephash", peak);
            c.index.options = opts(&[("cur", &cur.to_string())]);
            c
        })?;
        sweep(s, &format!("MainSegment, {op}"), &[8, 16, 32, 64], |s, kb| {
            let mut c = make(s, "sephash", peak);
            c.index.options = opts(&[("main_ratio", &kb.to_string())]);
            c
        })?;
    }
    let of = |prefix: &str| -> Vec<Series> {
        let runs: Vec<Run> =
            s.runs.iter().filter(|r| r.series.starts_with(prefix)).cloned().collect();
        lines(&runs, mops)
    };
    let (cur, main) = (of("CurSegment"), of("MainSegment"));
    s.chart("cur-size", chart("CurSegment size", "CurSegment (bytes)", "Mops/s", cur));
    s.chart(
        "main-size",
        chart("MainSegment size (CurSegment 1 KB)", "MainSegment (KB)", "Mops/s", main),
    );
    Ok(())
}

/// Fig. 21: 1–4 memory nodes (the directory on the first), inserts and searches at peak.
pub(super) fn memory_nodes(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    // The paper leaves CLevel out: "incompatible with multi-memory nodes because each level
    // requires large contiguous memory".
    for v in INDEXES.into_iter().filter(|v| v.index != "clevel") {
        sweep(s, &format!("{} insert", v.series), &[1, 2, 3, 4], |s, m| {
            let mut c = variant(s, v, peak, inserts);
            c.cluster.memory_nodes = Some(m as u16);
            c
        })?;
        sweep(s, &format!("{} search", v.series), &[1, 2, 3, 4], |s, m| {
            let mut c = variant(s, v, peak, searches);
            c.cluster.memory_nodes = Some(m as u16);
            c
        })?;
    }
    let t = lines(&s.runs, mops);
    s.chart("memory-nodes", chart("Memory nodes", "memory nodes", "Mops/s", t));
    Ok(())
}

/// KV sizes of Fig. 22 (key and value bytes; keys stay 16 bytes).
const KV_BYTES: [usize; 6] = [32, 64, 128, 256, 512, 1024];

/// Fig. 22: SepHash's inserts and searches at peak threads as its items grow. The paper finds
/// inserts flat (bound by CAS) and searches falling past 256 bytes (its Fig. 3: a READ's latency
/// rises past the PCIe packet size).
pub(super) fn kv_size(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    for (op, make) in
        [("insert", inserts as fn(&Session<'_>, &str, usize) -> BenchConfig), ("search", searches)]
    {
        sweep(s, &format!("SepHash {op}"), &KV_BYTES, |s, kv| {
            let mut c = make(s, "sephash", peak);
            c.keys.value_size = kv - c.keys.size;
            c
        })?;
    }
    let t = lines(&s.runs, mops);
    s.chart("kv-size", chart("Fig. 22: KV size", "KV size (bytes)", "Mops/s", t));
    Ok(())
}
