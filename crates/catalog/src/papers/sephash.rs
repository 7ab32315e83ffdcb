//! SepHash (VLDB '24, §5): the figures it reproduces on the simulated SepHash testbed.
//!
//! Every run uses the `sephash-testbed` preset (100 Gbps InfiniBand, one memory node with one
//! core), 16-byte keys and 32-byte values, 2 coroutines per client, and the paper's placement:
//! up to 16 client threads on one compute node, 32/64/128 threads on 2/4/8 compute nodes
//! (`Scale::clients` are totals here). Micro-benchmark searches pick keys uniformly (the paper
//! reads back the keys it inserted); YCSB runs use YCSB's distributions. Throughput runs insert
//! into or search an index first filled with `Scale::items` keys by fast-forward, so the
//! segment count is that of a grown index rather than of its first thousand inserts; insert
//! runs then double it (see `docs/reproduce-sephash.md` for why that extrapolates to the
//! paper's 100 M keys).

use dmindex_bench::experiment::{
    chart, lines, mops, opts, stat, Experiment, Line, LoadBy, Paper, Run, Scale, Session,
};
use dmindex_bench::{BenchConfig, BenchReport};

#[path = "sephash_design.rs"]
mod design;

pub static PAPER: Paper = Paper {
    name: "sephash",
    title: "SepHash: A Write-Optimized Hash Index On Disaggregated Memory via Separate Segment Structure (VLDB '24)",
    testbed: "sephash-testbed",
    scale,
    clients_mean: "client threads in total, 16 per CN up to --cns CNs",
    items: 100_000_000,
    lines: &[
        Line {
            label: "SepHash",
            index: "sephash",
            options: &[("update", "upsert")],
            scaled: None,
            load: LoadBy::Inserts,
            why: "the paper's SepHash (1 KB CurSegment, 8-slot window, FPTable, filter), an \
                  update or delete appended blind as the paper describes",
        },
        Line {
            label: "RACE",
            index: "race",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "RACE as its own paper describes it (a lock per segment, lock-free reads): \
                  stronger than the RACE the SepHash paper measured",
        },
        Line {
            label: "RACE (SepHash's)",
            index: "race-sephash",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "RACE as the SepHash authors ran it: one global split lock, the whole \
                  directory re-read on every conflict, entries moved one by one",
        },
        Line {
            label: "CLevel",
            index: "clevel",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "CLevel in the SepHash authors' shape (8-slot buckets, a first bottom level of \
                  16 x 128 buckets under one twice its size), its rehash run by a background \
                  client of its own as the paper runs it; racing inserts committed one at a \
                  time and moving entries frozen, which the port does not do; the figures also \
                  run it as its port reads, a level a round trip, with the port's client KV \
                  cache (40 MiB a client of the blocks it published; series \
                  \"clevel (SepHash's)\")",
        },
        Line {
            label: "Plush",
            index: "plush",
            options: &[],
            scaled: None,
            load: LoadBy::Inserts,
            why: "Plush in the SepHash authors' shape (128 top groups of 16 buckets of 16 \
                  entries, fanout 16), each migration one immutable run per child group with a \
                  Bloom filter; the figures also run it as their port reads, every run of a \
                  group and each key one READ at a time (series \"plush (SepHash's)\")",
        },
    ],
    experiments: &[
        Experiment {
            name: "insert",
            figure: "Fig. 12/13: insert throughput and median/P99 latency vs client threads",
            body: insert, took_s: Some(714),
        },
        Experiment {
            name: "search",
            figure: "Fig. 15/16: search throughput and median latency vs client threads",
            body: search, took_s: Some(50),
        },
        Experiment {
            name: "hybrid",
            figure: "Fig. 14: throughput vs insert ratio of a mixed insert/search workload",
            body: hybrid, took_s: Some(553),
        },
        Experiment { name: "ycsb", figure: "Fig. 17: YCSB A-D throughput", body: ycsb, took_s: Some(40) },
        Experiment {
            name: "resize",
            figure: "Table 1: resizes, resize bytes, retries and buckets read per search, 1 vs peak threads",
            body: resize, took_s: Some(247),
        },
        Experiment {
            name: "utilisation",
            figure: "Fig. 18 / Table 2: entry utilisation and entries per key as keys are inserted",
            body: utilisation, took_s: Some(44),
        },
        Experiment {
            name: "fptable",
            figure: "Table 3: FPTable cache size vs MainSegment/CurSegment ratio",
            body: design::fptable, took_s: Some(5),
        },
        Experiment {
            name: "ablation",
            figure: "Fig. 19: write (Base, +entry layout, +zero-wait) and read (Base, +FPTable, +filter) ablations vs RACE",
            body: design::ablation, took_s: Some(113),
        },
        Experiment {
            name: "segment-size",
            figure: "Fig. 20: CurSegment size and MainSegment size vs insert and search throughput",
            body: design::segment_size, took_s: Some(125),
        },
        Experiment {
            name: "memory-nodes",
            figure: "Fig. 21: insert and search throughput vs memory nodes",
            body: design::memory_nodes, took_s: Some(478),
        },
        Experiment {
            name: "kv-size",
            figure: "Fig. 22: SepHash insert and search throughput vs KV size (16-byte keys)",
            body: design::kv_size, took_s: Some(125),
        },
    ],
};

/// The paper's sweep: 1–128 client threads on up to 8 compute nodes; 1 M keys filled by
/// fast-forward before each throughput run, 200 k operations measured.
fn scale() -> Scale {
    Scale {
        items: 1_000_000,
        ops: 200_000,
        cns: 8,
        clients: vec![1, 2, 4, 8, 16, 32, 64, 128],
        peak_clients: 128,
        coroutines: 2,
        seed: 1,
        fast_load: true,
        ..Scale::default()
    }
}

/// Threads per compute node in the paper's placement.
const PER_CN: usize = 16;

/// One line of the figures: a catalog index as the paper's table runs it, with `options` on
/// top (a second variant of the same index under its own name).
#[derive(Clone, Copy)]
pub struct Variant {
    pub series: &'static str,
    pub index: &'static str,
    pub options: &'static [(&'static str, &'static str)],
}

const fn plain(index: &'static str) -> Variant {
    Variant { series: index, index, options: &[] }
}

/// Plush as the SepHash authors' port runs it: every run of each group on a search's path read
/// (its Table 1 counts 34 buckets a search), and a migration's keys read one READ at a time.
const PLUSH_SEPHASH: Variant = Variant {
    series: "plush (SepHash's)",
    index: "plush",
    options: &[("filters", "0"), ("key_reads", "each")],
};

/// CLevel with the SepHash authors' port's reads: every operation first READs the directory,
/// then each level's header and its two buckets a round trip each from the bottom up; a search
/// then the directory again (its Table 1 counts 16.6 buckets a search over 8.28 levels). Each
/// client keeps the port's KV cache of the blocks it published (40 MiB), which saves a search
/// the block READ of a key whose value that client wrote.
const CLEVEL_SEPHASH: Variant = Variant {
    series: "clevel (SepHash's)",
    index: "clevel",
    options: &[("reads", "levels"), ("kv_cache", "40")],
};

/// SepHash and its baselines: RACE as its paper describes it and as the SepHash authors ran it,
/// CLevel and Plush as built here and as the authors' ports read.
pub const INDEXES: [Variant; 7] = [
    plain("sephash"),
    plain("race"),
    plain("race-sephash"),
    plain("clevel"),
    CLEVEL_SEPHASH,
    plain("plush"),
    PLUSH_SEPHASH,
];

/// The run `make` builds for `v`'s index, with `v`'s options added.
pub fn variant(
    s: &Session<'_>,
    v: Variant,
    x: usize,
    make: fn(&Session<'_>, &str, usize) -> BenchConfig,
) -> BenchConfig {
    let mut c = make(s, v.index, x);
    c.index.options.extend(opts(v.options));
    c
}

/// A run of `index` on `workload` with `threads` client threads placed as the paper places
/// them, 16-byte keys and 32-byte values.
pub fn base(s: &Session<'_>, index: &str, workload: &str, threads: usize) -> BenchConfig {
    let mut c = s.as_paper(index, workload);
    let cns = threads.div_ceil(PER_CN).clamp(1, s.scale.cns as usize);
    c.cluster.cns = cns as u16;
    c.cluster.clients = threads.div_ceil(cns);
    c.keys.size = 16;
    c.keys.value_size = 32;
    c.keys.ordered = false;
    c
}

/// Doublings an insert run grows the index through.
pub const DOUBLINGS: u32 = 4;

/// Inserts of new keys only, growing the index from `items / 16` to `items` keys: four
/// doublings, the paper's growth from empty in miniature. A doubling takes every segment
/// through one split and its share of merges, and uniform hashing keeps the segments in step,
/// so a window shorter than a doubling catches them between splits or all splitting at once;
/// and one SepHash split in four (when the 4 depth bits stored in an entry are used up) must
/// re-read every key's block, so fewer than four doublings over- or under-weight it.
pub fn inserts(s: &Session<'_>, index: &str, threads: usize) -> BenchConfig {
    let mut c = base(s, index, "load", threads);
    let fill = (s.scale.items >> DOUBLINGS).max(1);
    c.workload.items = fill;
    c.workload.ops = Some(s.scale.items - fill);
    c
}

/// Uniform searches of loaded keys.
pub fn searches(s: &Session<'_>, index: &str, threads: usize) -> BenchConfig {
    let mut c = base(s, index, "c", threads);
    c.workload.distribution = Some("uniform".into());
    c
}

/// Percentile `p` of the run's latency.
fn p50(r: &BenchReport) -> f64 {
    r.latency_us.p50
}

fn p99(r: &BenchReport) -> f64 {
    r.latency_us.p99
}

/// Combined buckets (RACE), segment parts (SepHash) or top buckets and runs (Plush) read per
/// search: the paper's ReadBuc.
fn buckets_per_search(r: &BenchReport) -> f64 {
    let searches = stat(r, "searches");
    if searches == 0.0 {
        return 0.0;
    }
    let read = ["search_segment_reads", "search_combined_buckets_read", "search_buckets_read"];
    read.iter().map(|n| stat(r, n)).sum::<f64>() / searches
}

/// Index entries per stored key (1 / entry utilisation with distinct keys).
fn entries_per_key(r: &BenchReport) -> f64 {
    r.load_factor.filter(|&l| l > 0.0).map_or(0.0, |l| 1.0 / l)
}

/// Runs `cfg` for each x, as line `series`.
fn sweep(
    s: &mut Session<'_>,
    series: &str,
    xs: &[usize],
    mut cfg: impl FnMut(&Session<'_>, usize) -> BenchConfig,
) -> anyhow::Result<()> {
    for &x in xs {
        let c = cfg(s, x);
        s.go(series, x as f64, c)?;
    }
    Ok(())
}

fn insert(s: &mut Session<'_>) -> anyhow::Result<()> {
    let threads = s.scale.clients.clone();
    for v in INDEXES {
        sweep(s, v.series, &threads, |s, t| variant(s, v, t, inserts))?;
    }
    let runs = &s.runs;
    let (t, m, l) = (lines(runs, mops), lines(runs, p50), lines(runs, p99));
    s.chart("insert-throughput", chart("Insert throughput", "client threads", "Mops/s", t));
    s.chart("insert-p50", chart("Insert median latency", "client threads", "P50 latency (us)", m));
    s.chart("insert-p99", chart("Insert tail latency", "client threads", "P99 latency (us)", l));
    Ok(())
}

fn search(s: &mut Session<'_>) -> anyhow::Result<()> {
    let threads = s.scale.clients.clone();
    for v in INDEXES {
        sweep(s, v.series, &threads, |s, t| variant(s, v, t, searches))?;
    }
    let (t, m) = (lines(&s.runs, mops), lines(&s.runs, p50));
    s.chart("search-throughput", chart("Search throughput", "client threads", "Mops/s", t));
    s.chart("search-p50", chart("Search median latency", "client threads", "P50 latency (us)", m));
    Ok(())
}

/// Insert percentages of Fig. 14.
const INSERT_RATIOS: [usize; 6] = [0, 20, 40, 60, 80, 100];

fn hybrid(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    for v in INDEXES {
        sweep(s, v.series, &INSERT_RATIOS, |s, pct| {
            // As the paper: as many operations as keys pre-inserted.
            let mut c = variant(s, v, peak, searches);
            c.workload.ops = Some(s.scale.items.max(s.scale.ops));
            let ins = pct as f64 / 100.0;
            c.workload.mix = Some(format!("insert={ins},read={}", 1.0 - ins));
            c
        })?;
    }
    let t = lines(&s.runs, mops);
    s.chart("hybrid", chart("Mixed insert/search", "insert ratio (%)", "Mops/s", t));
    Ok(())
}

const YCSB: [&str; 4] = ["a", "b", "c", "d"];

fn ycsb(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    let workloads = s.workloads(&YCSB);
    for v in INDEXES {
        for (i, w) in workloads.iter().enumerate() {
            let mut c = base(s, v.index, w, peak);
            c.index.options.extend(opts(v.options));
            s.go(v.series, i as f64, c)?;
        }
    }
    let mut ch = chart("YCSB", "workload", "Mops/s", lines(&s.runs, mops));
    ch.x_names = workloads.iter().map(|w| w.to_uppercase()).collect();
    s.chart("ycsb", ch);
    Ok(())
}

/// Table 1 from scratch: `items` inserts into an empty index (timed, resizes included) at 1 and
/// peak threads, then uniform searches of an index loaded the same way.
fn resize(s: &mut Session<'_>) -> anyhow::Result<()> {
    let peak = s.scale.peak_clients;
    for v in INDEXES {
        for t in [1, peak] {
            let mut c = variant(s, v, t, inserts);
            c.workload.items = 1;
            c.workload.ops = Some(s.scale.items);
            c.workload.fast_load = false;
            s.go(&format!("{} insert", v.series), t as f64, c)?;
            let mut c = variant(s, v, t, searches);
            c.workload.fast_load = false;
            s.go(&format!("{} search", v.series), t as f64, c)?;
        }
    }
    let per_insert = |name: &'static str| {
        move |r: &BenchReport| {
            if r.workload.starts_with("load") {
                stat(r, name) / r.ops.max(1) as f64
            } else {
                0.0
            }
        }
    };
    let inserts_only: Vec<Run> =
        s.runs.iter().filter(|r| r.series.ends_with("insert")).cloned().collect();
    let searches_only: Vec<Run> =
        s.runs.iter().filter(|r| r.series.ends_with("search")).cloned().collect();
    s.chart(
        "resizes",
        chart(
            "Resizes per 1000 inserts (SepHash: merges + splits; RACE: splits; CLevel: levels added; Plush: top-group migrations)",
            "client threads",
            "resizes",
            lines(&inserts_only, |r| {
                let names = ["merges", "splits", "resizes", "top_migrations"];
                1000.0 * names.iter().map(|&n| per_insert(n)(r)).sum::<f64>()
            }),
        ),
    );
    // The paper's Table 1 counted split attempts, failed ones included (its authors' RACE
    // counts every call of its resize); `splits` above counts the ones that split.
    s.chart(
        "split-attempts",
        chart(
            "Split attempts per 1000 inserts",
            "client threads",
            "attempts",
            lines(&inserts_only, |r| 1000.0 * per_insert("split_attempts")(r)),
        ),
    );
    s.chart(
        "resize-retries",
        chart(
            "Retries per insert",
            "client threads",
            "retries",
            lines(&inserts_only, |r| r.retries as f64 / r.ops.max(1) as f64),
        ),
    );
    s.chart(
        "insert-levels",
        chart(
            "Levels read per insert (CLevel's level_cnt)",
            "client threads",
            "levels",
            lines(&inserts_only, |r| stat(r, "insert_levels_read") / r.ops.max(1) as f64),
        ),
    );
    s.chart(
        "search-levels",
        chart(
            "Levels read per search (CLevel's level_cnt; Plush: below the top)",
            "client threads",
            "levels",
            lines(&searches_only, |r| stat(r, "search_levels_read") / stat(r, "searches").max(1.0)),
        ),
    );
    s.chart(
        "read-buckets",
        chart(
            "Buckets read per search (ReadBuc)",
            "client threads",
            "buckets",
            lines(&searches_only, buckets_per_search),
        ),
    );
    Ok(())
}

/// Fig. 18: entry utilisation after inserting 10 k, 20 k, … keys (4 clients on one CN).
fn utilisation(s: &mut Session<'_>) -> anyhow::Result<()> {
    let steps: Vec<usize> = (1..=20).map(|k| k * 10_000).collect();
    for v in INDEXES {
        sweep(s, v.series, &steps, |s, n| {
            let mut c = variant(s, v, 4, searches);
            c.workload.items = n as u64;
            c.workload.ops = Some(1000);
            c.workload.fast_load = false;
            c
        })?;
    }
    let u = lines(&s.runs, |r| r.load_factor.unwrap_or(0.0));
    let e = lines(&s.runs, entries_per_key);
    s.chart("utilisation", chart("Entry utilisation", "keys inserted", "entry utilisation", u));
    s.chart("entries-per-key", chart("Entries per key", "keys inserted", "entries per key", e));
    Ok(())
}
