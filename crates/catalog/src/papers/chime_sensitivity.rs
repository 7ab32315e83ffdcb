//! CHIME (SOSP '24): the figures beyond the main comparison that the simulator can speak to —
//! workload skew (Fig. 18a), value size (Fig. 18c/d), variable-length items (Fig. 13), cache
//! against read amplification (Fig. 3a), the extra metadata accesses CHIME removes (Fig. 4a/b)
//! and the replica bytes sibling-based validation saves (Fig. 16). What none of them can run
//! (CHIME-Learned, SMART-RCU, CHIME's inline values longer than 8 bytes) is listed in
//! `docs/reproduce.md`.

use dmindex_bench::experiment::{
    cache_mb, chart, lines, model_and_published, mops, Point, Session,
};
use dmindex_chime::layout::{LeafKind, LeafLayout, ENTRY, REPLICA_FENCED};
use dmindex_sim::microbench::{run, Meta, Verb, VerbBench};

use super::{rolex_span, rolex_whole_cache, warm, with_cache, PAPER};

/// Clients per CN of the sensitivity analysis: twice the factor analysis' (the paper's §5.4
/// runs 640 clients where §5.3 runs 320).
fn sensitivity_clients(s: &Session<'_>) -> usize {
    2 * s.scale.peak_clients
}

/// The paper's legend for `index` (its line's label).
fn label(index: &str) -> &'static str {
    PAPER.lines.iter().find(|l| l.index == index).map_or("?", |l| l.label)
}

/// The zipfian skews of Fig. 18a.
pub const THETAS: [f64; 6] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.99];

/// Fig. 18a: 50 % search + 50 % update (YCSB A's mix) as the zipfian skew grows. RDWC
/// combines more of the hot keys' writes the more skewed they are.
pub(super) fn skew(s: &mut Session<'_>) -> anyhow::Result<()> {
    for index in ["chime", "sherman", "rolex", "smart"] {
        for theta in THETAS {
            let mut c = with_cache(s, index, "a", 100.0);
            c.workload.zipf_theta = Some(theta);
            c.cluster.clients = sensitivity_clients(s);
            s.go(label(index), theta, warm(s, c))?;
        }
    }
    let tput = lines(&s.runs, mops);
    s.chart(
        "skew",
        chart("Skew, 50 % search + 50 % update", "zipfian θ", "throughput (Mops/s)", tput),
    );
    Ok(())
}

/// The value sizes of Fig. 18c/d.
pub const VALUE_SIZES: [usize; 4] = [8, 32, 128, 512];

/// Fig. 18c/d: YCSB C as values grow. CHIME and Sherman keep an 8-byte value in the leaf and
/// any longer one in a block behind an 8-byte pointer (`ChimeShape::indirect`), so from 8 to
/// 512 bytes their lines are Fig. 18d's indirect values; SMART's leaf holds the value itself
/// (Fig. 18c's SMART). ROLEX keeps its values as CHIME and Sherman do.
pub(super) fn value_size(s: &mut Session<'_>) -> anyhow::Result<()> {
    for index in ["chime", "sherman", "rolex", "smart"] {
        for v in VALUE_SIZES {
            let mut c = with_cache(s, index, "c", 100.0);
            c.keys.value_size = v;
            c.cluster.clients = sensitivity_clients(s);
            s.go(label(index), v as f64, warm(s, c))?;
        }
    }
    let (tput, read) = (lines(&s.runs, mops), lines(&s.runs, |r| r.bytes_read_per_op));
    s.chart(
        "value-size",
        chart("Value size, YCSB C", "value size (B)", "throughput (Mops/s)", tput),
    );
    s.chart(
        "value-size-bytes-read",
        chart("Value size: bytes read", "value size (B)", "bytes read per operation", read),
    );
    Ok(())
}

/// Fig. 13's values: the shortest CHIME keeps behind a pointer (8 bytes stay in the leaf).
pub const VARIABLE_VALUE: usize = 16;

/// Fig. 13: YCSB A–E with variable-length items at the factor analysis' clients (320 in the
/// paper). CHIME with its values in blocks (CHIME-Indirect), ROLEX likewise (ROLEX-Indirect),
/// Marlin (items always out of place), and SMART, whose leaf holds the item (standing in for
/// SMART-RCU, which this workspace lacks).
pub(super) fn variable(s: &mut Session<'_>) -> anyhow::Result<()> {
    let workloads = s.workloads(&["a", "b", "c", "d", "e"]);
    for (i, w) in workloads.iter().enumerate() {
        for index in ["chime", "rolex", "marlin", "smart"] {
            let mut c = with_cache(s, index, w, 100.0);
            c.keys.value_size = VARIABLE_VALUE;
            let series = match index {
                "chime" => "CHIME-Indirect",
                "rolex" => "ROLEX-Indirect",
                _ => label(index),
            };
            s.go(series, i as f64, warm(s, c))?;
        }
    }
    let names: Vec<String> =
        workloads.iter().map(|w| format!("YCSB {}", w.to_uppercase())).collect();
    let (tput, p99) = (lines(&s.runs, mops), lines(&s.runs, |r| r.latency_us.p99));
    let mut ch = chart("Variable-length items", "workload", "throughput (Mops/s)", tput);
    ch.x_names.clone_from(&names);
    s.chart("variable-throughput", ch);
    let mut ch = chart("Variable-length items", "workload", "P99 latency (us)", p99);
    ch.x_names = names;
    s.chart("variable-p99", ch);
    Ok(())
}

/// Fig. 3a: cache each CN needs (all internal nodes cached) against the read amplification
/// factor, entries read per search: a B+ tree's leaf span (Sherman), twice the span for a
/// learned index (ROLEX, its model error equal to the span: two leaves a search, as the paper
/// counts it) or 1 (SMART, one item per leaf).
pub(super) fn amplification(s: &mut Session<'_>) -> anyhow::Result<()> {
    let sufficient = |s: &Session<'_>, index: &str| {
        let mut c = s.as_paper(index, "c");
        c.workload.ops = Some(1000);
        c.cluster.clients = 4;
        // Enough cache to hold every internal node (as `chime/cache`).
        c.cluster.cache_mb = 4096.0;
        c
    };
    for span in [16usize, 32, 64, 128, 256] {
        let mut c = sufficient(s, "sherman");
        c.index.options.push(("span".into(), span.to_string()));
        s.go("Sherman", span as f64, warm(s, c))?;
    }
    for span in [16usize, 32, 64, 128] {
        let mut c = sufficient(s, "rolex");
        rolex_span(&mut c, span);
        rolex_whole_cache(&mut c);
        s.go("ROLEX", 2.0 * span as f64, warm(s, c))?;
    }
    let c = sufficient(s, "smart-opt");
    s.go("SMART", 1.0, warm(s, c))?;
    s.chart(
        "amplification",
        chart(
            "Cache against read amplification",
            "amplification factor (entries read per search)",
            "cache per CN (MB)",
            lines(&s.runs, cache_mb),
        ),
    );
    Ok(())
}

/// Clients per CN along Fig. 4a/b's microbenchmark.
const MICRO_CLIENTS: [usize; 4] = [4, 16, 32, 64];

/// Fig. 4a/b: continuous READs of the data alone against the data plus a metadata READ, on
/// the testbed model (`dmindex_sim::microbench`), 8-byte keys and values. 4a: a hop range (one
/// neighbourhood, H = 8 entries) after the 8-byte lock word holding the vacancy bitmap (the
/// range depends on it: the READs are in turn). 4b: a neighbourhood beside the leaf's fenced
/// header (independent: posted together, as CHIME without metadata replication does).
pub(super) fn metadata_accesses(s: &mut Session<'_>) -> anyhow::Result<()> {
    let leaf = LeafLayout::new(64, 8).map_err(anyhow::Error::msg)?;
    let data = leaf.h * ENTRY;
    let figures = [
        ("Fig. 4a", "hop range", "vacancy bitmap + hop range", Meta { bytes: 8, first: true }),
        (
            "Fig. 4b",
            "neighbourhood",
            "leaf meta + neighbourhood",
            Meta { bytes: REPLICA_FENCED, first: false },
        ),
    ];
    let net = s.net(PAPER.testbed)?;
    for (figure, alone, with, meta) in figures {
        let mut worst: f64 = 0.0;
        for clients in MICRO_CLIENTS {
            let b = VerbBench {
                verb: Verb::Read,
                bytes: data,
                cns: s.scale.cns,
                threads: clients,
                depth: s.scale.coroutines,
                rounds: 10,
                one_word: false,
                meta: None,
            };
            let mut m = [0.0; 2];
            for (k, (series, meta)) in [(alone, None), (with, Some(meta))].into_iter().enumerate() {
                m[k] =
                    run(&net, &VerbBench { meta, ..b.clone() }).map_err(anyhow::Error::msg)?.mops;
                s.point(Point {
                    series: format!("{figure} {series}"),
                    x: clients as f64,
                    model: m[k],
                    unit: "M reads/s".into(),
                    published: None,
                    source: "(model only)".into(),
                });
            }
            worst = worst.max(m[0] / m[1]);
        }
        s.point(Point {
            series: format!("{figure}, largest slowdown of the extra access"),
            x: 0.0,
            model: worst,
            unit: "×".into(),
            published: Some(1.8),
            source: "CHIME (SOSP '24) §3.2.2: up to 1.8× (4a), 1.8× at 8-byte items (4b)".into(),
        });
    }
    for (file, figure) in [("metadata-vacancy", "Fig. 4a"), ("metadata-leaf-meta", "Fig. 4b")] {
        let series = model_and_published(&s.points, figure, "M reads/s").0;
        let title = format!("{figure}: extra metadata READ (per CN)");
        s.chart(file, chart(&title, "clients per CN", "M reads/s", series));
    }
    Ok(())
}

/// Key sizes of Fig. 16.
pub const KEY_SIZES: [usize; 6] = [8, 16, 32, 64, 128, 256];

/// Metadata replica bytes of one CHIME leaf (span 64, H = 8) with `key` bytes per key:
/// (fence keys, sibling-based validation). A fenced replica adds a low and a high key to the
/// sibling-validated one; this workspace's leaves hold 8-byte keys (longer keys live in
/// blocks), so at 8 bytes these are its layouts' sizes and above they follow the paper's
/// 2 · key size per replica (§4.2.3).
pub fn replica_bytes(key: usize) -> anyhow::Result<(usize, usize)> {
    let sv = LeafLayout::new(64, 8).map_err(anyhow::Error::msg)?;
    let fenced = LeafKind { fenced: true, ..LeafKind::CHIME };
    let fenced = LeafLayout::with_kind(64, 8, fenced).map_err(anyhow::Error::msg)?;
    let fences = fenced.meta_len - sv.meta_len;
    let per = sv.meta_len + fences / dmindex_chime::layout::KEY * key;
    Ok((fenced.groups() * per, sv.groups() * sv.meta_len))
}

/// Fig. 16: metadata replica bytes per leaf as keys grow, with fence keys and with
/// sibling-based validation. Structural: computed from the leaf layouts, no run.
pub(super) fn sibling(s: &mut Session<'_>) -> anyhow::Result<()> {
    const SOURCE: &str = "CHIME (SOSP '24) §5.3: the saving grows from 1.4× to 8.6×";
    for key in KEY_SIZES {
        let (fenced, sv) = replica_bytes(key)?;
        for (series, bytes) in [("fence keys", fenced), ("sibling-based validation", sv)] {
            s.point(Point {
                series: format!("replicas per leaf, {series}"),
                x: key as f64,
                model: bytes as f64,
                unit: "B".into(),
                published: None,
                source: "(layout)".into(),
            });
        }
        let published = match key {
            8 => Some(1.4),
            256 => Some(8.6),
            _ => None,
        };
        s.point(Point {
            series: "saving of sibling-based validation".into(),
            x: key as f64,
            model: fenced as f64 / sv as f64,
            unit: "×".into(),
            published,
            source: if published.is_some() { SOURCE.into() } else { "(layout)".into() },
        });
    }
    let series = model_and_published(&s.points, "replicas per leaf", "B").0;
    s.chart(
        "sibling",
        chart("Metadata replicas per leaf (span 64, H 8)", "key size (B)", "bytes", series),
    );
    let (saving, published) = model_and_published(&s.points, "saving of sibling", "×");
    let title = "Fig. 16: replica bytes saved by sibling-based validation";
    s.chart(
        "sibling-saving",
        chart(title, "key size (B)", "fence keys / sibling", saving).with_paper(published),
    );
    Ok(())
}
