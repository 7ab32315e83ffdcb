//! `dmindex cpu-costs`: nanoseconds per unit of each kind of compute-side work an index reports
//! ([`dmindex_fabric::Work`]), measured on this machine with the code the indexes run.
//!
//! Each primitive is timed over random keys against a structure of realistic size (the index
//! caches hold a million entries, so a lookup mostly misses the CPU's caches, as an index
//! cache's does under a uniform workload). A run times `--ops` units after one warm-up pass; the
//! figure is the median of `--runs` runs. Every result goes through [`black_box`] so that the
//! compiler cannot drop the work.
//!
//! | kind | what one unit is | timed code |
//! |---|---|---|
//! | `cache_lookup` | one probe of an index cache | a B-link node-cache lookup at level 1 and the routing in the copy found (CHIME, Sherman, Marlin) |
//! | `key_compare` | one key compared | a sorted leaf's bisection (Sherman), per key it compared |
//! | `key_hash` | one key hashed | the project hash of an 8-byte key (`hash_bytes`: SepHash, RACE, HiStore) |
//! | `byte_scanned` | one byte checked after a READ | decoding an internal node's READ (cache-line versions checked, entries copied out), per byte |
//!
//! The other caches and hashes are printed beside them (a radix-cache copy, a hotspot-buffer
//! probe, `hash_u64`, a SMART leaf checksum): the simulator charges one cost per kind, the
//! first of each, and the others show how far an index's own primitive is from it.

use std::hint::black_box;
use std::time::Instant;

use anyhow::bail;
use dmindex_chime::hotspot::Hotspots;
use dmindex_chime::layout::{LeafKind, LeafLayout};
use dmindex_chime::leaf::LeafBuf;
use dmindex_chime::view::LeafView;
use dmindex_fabric::{GlobalAddr, Work};
use dmindex_index::IndexConfig;
use dmindex_prim::blink::{Internal, InternalLayout, NodeCache, Routes};
use dmindex_prim::hash::{hash_bytes, hash_u64, mix64};
use dmindex_prim::radix::{Header, Kind, NodeImage, Partial, RadixCache, Slot};
use serde::Serialize;
use smallvec::SmallVec;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Units timed per run of each primitive.
    #[arg(long, default_value_t = 2_000_000)]
    ops: u64,
    /// Runs per primitive (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Entries in each index cache (internal nodes, radix copies).
    #[arg(long, default_value_t = 1 << 20)]
    cache_entries: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// One primitive's cost: the median and every run, in ns per unit.
#[derive(Debug, Serialize)]
struct Cost {
    name: &'static str,
    /// The [`dmindex_fabric::Work`] kind it is charged as, if it is that kind's reference.
    charged_as: Option<&'static str>,
    unit: &'static str,
    ns_per_unit: f64,
    runs: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    cpu: String,
    ops: u64,
    runs: usize,
    cache_entries: u64,
    costs: Vec<Cost>,
}

/// Internal nodes' span (CHIME's default `internal_span`).
const INTERNAL_SPAN: usize = 64;
/// Sorted leaves' span (CHIME's and Sherman's default `span`).
const LEAF_SPAN: usize = 64;
/// Sorted leaves timed over: a few, in the CPU's caches, as a leaf is when it is searched (the
/// READ has just copied it into the client's buffer).
const LEAVES: usize = 16;

pub fn run(a: &Args) -> anyhow::Result<()> {
    if a.ops == 0 || a.runs == 0 || a.cache_entries == 0 {
        bail!("--ops, --runs and --cache-entries must be positive");
    }
    let costs = vec![
        node_cache(a),
        radix_cache(a),
        hotspot(a),
        sorted_leaf(a),
        hash(a, "hash_bytes_8", Some(Work::KeyHash.name()), |k| hash_bytes(&k.to_be_bytes())),
        hash(a, "hash_u64", None, hash_u64),
        internal_decode(a),
        leaf_checksum(a),
    ];
    let report = Report {
        cpu: cpu_model(),
        ops: a.ops,
        runs: a.runs,
        cache_entries: a.cache_entries,
        costs,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("cpu: {}", report.cpu);
    println!("{:<22} {:<14} {:<16} {:>10}  runs", "primitive", "charged as", "unit", "ns/unit");
    for c in &report.costs {
        let runs: Vec<String> = c.runs.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{:<22} {:<14} {:<16} {:>10.2}  {}",
            c.name,
            c.charged_as.unwrap_or("-"),
            c.unit,
            c.ns_per_unit,
            runs.join(" ")
        );
    }
    Ok(())
}

/// The CPU model `/proc/cpuinfo` names, if it can be read.
fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        .map_or_else(|| "unknown".to_string(), |(_, m)| m.trim().to_string())
}

/// `runs` timings of `body(ops)`, which must do `units` units of work, as a [`Cost`]: one
/// untimed warm-up pass first.
fn timed(
    a: &Args,
    name: &'static str,
    charged_as: Option<&'static str>,
    unit: &'static str,
    mut body: impl FnMut() -> u64,
) -> Cost {
    body();
    let mut runs: Vec<f64> = (0..a.runs)
        .map(|_| {
            let t = Instant::now();
            let units = body();
            t.elapsed().as_nanos() as f64 / units.max(1) as f64
        })
        .collect();
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    runs.iter_mut().for_each(|r| *r = (*r * 100.0).round() / 100.0);
    Cost { name, charged_as, unit, ns_per_unit: (median * 100.0).round() / 100.0, runs }
}

/// Random keys below `bound`, a fixed sequence.
fn keys(n: u64, bound: u64, seed: u64) -> Vec<u64> {
    (0..n).map(|i| mix64(i ^ seed.rotate_left(32)) % bound).collect()
}

/// The B-link node cache with `cache_entries` level-1 nodes of [`INTERNAL_SPAN`] routes each,
/// each covering a range of 2^20 keys: one lookup is the level's bucket and bisection of the
/// low fences, the fence check, and the routing bisection in the copy found.
fn node_cache(a: &Args) -> Cost {
    const WIDTH: u64 = 1 << 20;
    let cache = NodeCache::new(u64::MAX);
    let step = WIDTH / INTERNAL_SPAN as u64;
    for i in 0..a.cache_entries {
        let low = i * WIDTH;
        let pivots: Vec<u64> = (1..INTERNAL_SPAN as u64).map(|j| low + j * step).collect();
        let children: Vec<GlobalAddr> =
            (0..pivots.len() as u64).map(|j| GlobalAddr::new(0, (i * 64 + j + 1) * 64)).collect();
        let node = Internal {
            version: 1,
            level: 1,
            valid: true,
            sibling: GlobalAddr::NULL,
            leftmost: GlobalAddr::new(0, 64),
            sibling_leftmost: GlobalAddr::NULL,
            low,
            high: low + WIDTH - 1,
            routes: Routes::new(&pivots, &children),
        };
        cache.insert(GlobalAddr::new(1, (i + 1) * 4096), node);
    }
    let ks = keys(a.ops, a.cache_entries * WIDTH, 1);
    timed(a, "blink_node_cache", Some(Work::CacheLookup.name()), "lookup", || {
        for &k in &ks {
            black_box(cache.with(1, &black_box(k), |p| p.node.child_for(k).0));
        }
        ks.len() as u64
    })
}

/// A radix cache of N16 copies six levels deep (about 1.1 million copies at the default size):
/// a walk looks up one copy per level, and the cost is per copy looked up.
fn radix_cache(a: &Args) -> Cost {
    const FANOUT: u64 = 16;
    // Levels until the copies number at least `cache_entries` in all.
    let (mut depth, mut total) = (1, 1);
    while total < a.cache_entries {
        total += FANOUT.pow(depth);
        depth += 1;
    }
    let depth = depth as usize;
    let cache = RadixCache::new(u64::MAX);
    // Node `n` at level `d` (numbered in its level) lives at a unique address.
    let addr = |d: usize, n: u64| GlobalAddr::new(d as u16, (n + 1) * 256);
    let mut key = vec![0u8; depth];
    for d in 0..depth {
        for n in 0..FANOUT.pow(d as u32) {
            // The key bytes leading to node n of level d: its base-16 digits.
            for (j, b) in key[..d].iter_mut().enumerate() {
                *b = ((n >> (4 * (d - 1 - j))) & 0xF) as u8;
            }
            let header = Header::new(Kind::N16, d, &key, 0);
            let slots: SmallVec<[Slot; 16]> = (0..FANOUT)
                .map(|b| {
                    let p = Partial::Byte(b as u8);
                    let child = addr(d + 1, n * FANOUT + b);
                    if d + 1 == depth {
                        Slot::leaf(p, child, 64)
                    } else {
                        Slot::inner(p, child, Kind::N16)
                    }
                })
                .collect();
            cache.insert(addr(d, n), NodeImage::new(GlobalAddr::NULL, header, slots));
        }
    }
    let walks: Vec<[u8; 8]> = keys(a.ops / depth as u64, FANOUT.pow(depth as u32), 2)
        .into_iter()
        .map(|x| {
            let mut k = [0u8; 8];
            for (j, b) in k[..depth].iter_mut().enumerate() {
                *b = ((x >> (4 * (depth - 1 - j))) & 0xF) as u8;
            }
            k
        })
        .collect();
    let root = addr(0, 0);
    timed(a, "radix_cache_copy", Some(Work::RadixStep.name()), "copy looked up", || {
        let mut probes = 0;
        for k in &walks {
            let w = cache.walk(root, Kind::N16, black_box(&k[..depth]));
            probes += w.probes;
            black_box(w);
        }
        probes
    })
}

/// CHIME's hotspot buffer at its default size (3/10 of the default cache budget), filled by
/// touches of random leaves' slots: one unit is one `best` probe.
fn hotspot(a: &Args) -> Cost {
    let leaf = LeafLayout::new(LEAF_SPAN, 8).expect("CHIME's default leaf");
    let hs = Hotspots::new(IndexConfig::default().cache_bytes * 3 / 10, leaf);
    let leaf_of = |x: u64| GlobalAddr::new(0, (x % a.cache_entries + 1) * 4096);
    for (i, &x) in keys(a.cache_entries, u64::MAX, 3).iter().enumerate() {
        let home = (x >> 32) as usize % LEAF_SPAN;
        hs.touch(leaf_of(x), home, (home + i % 8) % LEAF_SPAN, x | 1);
    }
    let ks = keys(a.ops, u64::MAX, 3);
    timed(a, "hotspot_buffer", Some(Work::TableProbe.name()), "probe", || {
        for &x in &ks {
            let home = (x >> 32) as usize % LEAF_SPAN;
            black_box(hs.best(leaf_of(x), home, black_box(x | 1)));
        }
        ks.len() as u64
    })
}

/// Sherman's sorted leaves, full, [`LEAVES`] of them, warm: one unit is one key the bisection
/// compared (its count is what the index reports).
fn sorted_leaf(a: &Args) -> Cost {
    let layout = LeafLayout::with_kind(LEAF_SPAN, LEAF_SPAN.min(8), LeafKind::SHERMAN)
        .expect("Sherman's leaf");
    let leaves: Vec<LeafBuf> = (0..LEAVES as u64)
        .map(|l| {
            let mut b = LeafBuf::empty(layout);
            for i in 0..LEAF_SPAN as u64 {
                b.set_entry(i as usize, (l * LEAF_SPAN as u64 + i + 1) * 2, i.to_le_bytes());
            }
            b
        })
        .collect();
    let total = (LEAVES * LEAF_SPAN) as u64;
    let ks = keys(a.ops / 6, total, 4);
    timed(a, "sorted_leaf_search", Some(Work::KeyCompare.name()), "key compared", || {
        let mut compared = 0;
        for &x in &ks {
            let leaf = &leaves[(x / LEAF_SPAN as u64) as usize];
            let (found, n) = leaf.sorted_search_compares(black_box((x + 1) * 2));
            black_box(found.is_ok());
            compared += n;
        }
        compared
    })
}

/// A hash of random keys.
fn hash(a: &Args, name: &'static str, charged: Option<&'static str>, f: fn(u64) -> u64) -> Cost {
    let ks = keys(a.ops, u64::MAX, 5);
    timed(a, name, charged, "key hashed", || {
        for &k in &ks {
            black_box(f(black_box(k)));
        }
        ks.len() as u64
    })
}

/// Decoding READs of internal nodes ([`INTERNAL_SPAN`] routes; cache-line versions checked,
/// every entry copied out): one unit is one physical byte decoded.
fn internal_decode(a: &Args) -> Cost {
    let l = InternalLayout { span: INTERNAL_SPAN };
    let images: Vec<Vec<u8>> = (0..64u64)
        .map(|i| {
            let pivots: Vec<u64> = (1..INTERNAL_SPAN as u64).map(|j| i << 32 | j << 8).collect();
            let children: Vec<GlobalAddr> =
                (1..INTERNAL_SPAN as u64).map(|j| GlobalAddr::new(0, j * 64)).collect();
            let node = Internal {
                version: 3,
                level: 1,
                valid: true,
                sibling: GlobalAddr::NULL,
                leftmost: GlobalAddr::new(0, 64),
                sibling_leftmost: GlobalAddr::NULL,
                low: i << 32,
                high: (i + 1) << 32,
                routes: Routes::new(&pivots, &children),
            };
            node.physical_with_lock(&l)[..l.physical()].to_vec()
        })
        .collect();
    let n = (a.ops / l.physical() as u64).max(1);
    timed(a, "internal_node_decode", Some(Work::BytesScanned.name()), "byte", || {
        for i in 0..n {
            let img = &images[(i % images.len() as u64) as usize];
            black_box(Internal::decode(&l, black_box(img)).is_ok());
        }
        n * l.physical() as u64
    })
}

/// SMART's leaf check: the checksum (the project hash) over a 64-byte leaf body, per byte.
fn leaf_checksum(a: &Args) -> Cost {
    const BODY: usize = 64;
    let bodies: Vec<u8> = (0..64 * BODY as u64).map(|i| mix64(i) as u8).collect();
    let n = (a.ops / BODY as u64).max(1);
    timed(a, "leaf_checksum_64", None, "byte", || {
        for i in 0..n {
            let at = (i % 64) as usize * BODY;
            black_box(hash_bytes(black_box(&bodies[at..at + BODY])));
        }
        n * BODY as u64
    })
}
