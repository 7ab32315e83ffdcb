//! Measures what HiStore's index structures cost this machine's CPU per operation, the numbers
//! behind `dmindex_histore::cpu` (which the simulator charges to an index server's cores).
//!
//! `cargo run --release -p dmindex-histore --example cpu-costs`
//!
//! For partitions of 2^14 to 2^22 keys of 16 random bytes: a skiplist lookup and a skiplist
//! insert of a new key, a hash-table (with its key shadow) insert, update and lookup, and a
//! range walk per pair returned. Each figure is the median of five passes of 100 000
//! operations on random keys (inserts: a quarter of the keys at most, removed after each pass,
//! so that the partition stays near its size); the skiplist's are also fitted to
//! `a + b·log2(n)`, which the cache misses of the larger sizes bend.

use std::time::Instant;

use dmindex_fabric::memory::Region;
use dmindex_fabric::service::MnContext;
use dmindex_histore::layout::BUCKET;
use dmindex_histore::proto::{Entry, Kind};
use dmindex_histore::structure::{merged_range, Structure, TableAt};

const OPS: usize = 100_000;
const PASSES: usize = 5;

/// A xorshift stream of 16-byte keys (no dependency on the harness's generators).
struct Keys(u64);

impl Keys {
    fn next(&mut self) -> Box<[u8]> {
        let mut k = [0u8; 16];
        for half in k.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            half.copy_from_slice(&self.0.to_le_bytes());
        }
        k.into()
    }
}

fn entry(kind: Kind, key: Box<[u8]>, word: u64) -> Entry {
    Entry { kind, writer: 1, seq: 1, key, word }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `f` over `OPS` calls, the median of `PASSES` passes.
fn time(mut f: impl FnMut(usize)) -> f64 {
    median(
        (0..PASSES)
            .map(|p| {
                let t = Instant::now();
                for i in 0..OPS {
                    f(p * OPS + i);
                }
                t.elapsed().as_nanos() as f64 / OPS as f64
            })
            .collect(),
    )
}

/// ns per insert of a fresh key into `s` (of `n` keys): per pass, at most a quarter of `n` new
/// keys (so that the structure stays near `n`) inserted, timed, then removed, untimed.
fn time_inserts(
    s: &mut Structure,
    ctx: &MnContext<'_>,
    fresh: &[Box<[u8]>],
    n: usize,
    bucket: impl Fn(&[u8]) -> u64,
) -> f64 {
    let m = OPS.min(n / 4);
    median(
        (0..PASSES)
            .map(|p| {
                let keys = &fresh[p * m..(p + 1) * m];
                let t = Instant::now();
                for k in keys {
                    s.apply(ctx, bucket(k), entry(Kind::Upsert, k.clone(), 1 << 8)).unwrap();
                }
                let ns = t.elapsed().as_nanos() as f64 / m as f64;
                for k in keys {
                    s.apply(ctx, bucket(k), entry(Kind::Delete, k.clone(), 0)).unwrap();
                }
                ns
            })
            .collect(),
    )
}

/// One partition size's figures (ns per operation; the range walk's per pair).
struct Row {
    shift: f64,
    skip_get: f64,
    skip_insert: f64,
    table_insert: f64,
    table_update: f64,
    table_get: f64,
    range_item: f64,
}

/// Least squares of `y` against log2 of the size: (a, b) of a + b·log2(n).
fn fit(rows: &[Row], y: impl Fn(&Row) -> f64) -> (f64, f64) {
    let m = rows.len() as f64;
    let (mx, my) =
        (rows.iter().map(|r| r.shift).sum::<f64>() / m, rows.iter().map(&y).sum::<f64>() / m);
    let sxy: f64 = rows.iter().map(|r| (r.shift - mx) * (y(r) - my)).sum();
    let sxx: f64 = rows.iter().map(|r| (r.shift - mx) * (r.shift - mx)).sum();
    let b = sxy / sxx;
    (my - b * mx, b)
}

fn main() {
    let mut rows = Vec::new();
    println!("keys      skip-get  skip-insert  table-insert  table-update  table-get  scan-item");
    for shift in [14u32, 16, 18, 20, 22] {
        let n = 1usize << shift;
        let mut gen = Keys(0x9E37_79B9_7F4A_7C15 ^ n as u64);
        let keys: Vec<Box<[u8]>> = (0..n).map(|_| gen.next()).collect();
        let fresh: Vec<Box<[u8]>> = (0..OPS * PASSES).map(|_| gen.next()).collect();
        // Skiplist of n keys.
        let none = Region::new(BUCKET);
        let none = MnContext::new(0, &none);
        let mut sorted = Structure::sorted();
        for k in &keys {
            sorted.apply(&none, 0, entry(Kind::Upsert, k.clone(), 1)).unwrap();
        }
        let pick = |i: usize| &keys[(i.wrapping_mul(0x9E37_79B9) >> 3) % n];
        let get = time(|i| {
            std::hint::black_box(sorted.get(&none, pick(i)));
        });
        let mut out = Vec::with_capacity(128);
        let scan = time(|i| {
            out.clear();
            // Each key copied out, as the SCAN reply does.
            merged_range(&none, &[&sorted], pick(i), None, 100, |k, w| out.push((k.to_vec(), w)));
            std::hint::black_box(&out);
        }) / 100.0;
        let insert = time_inserts(&mut sorted, &none, &fresh, n, |_| 0);
        drop(sorted);
        // Hash table of n keys, 2 buckets per 7 keys as HiStore over-provisions.
        let buckets = (n as u64).div_ceil(7) * 2 + (OPS * PASSES) as u64;
        let memory = Region::new(buckets * BUCKET + BUCKET);
        let memory = MnContext::new(1, &memory);
        let at = TableAt { node: 1, offset: BUCKET, buckets };
        let mut table = Structure::table(at);
        let bucket = |k: &[u8]| u64::from_le_bytes(k[..8].try_into().unwrap()) % buckets;
        for k in &keys {
            table.apply(&memory, bucket(k), entry(Kind::Upsert, k.clone(), 1 << 8)).unwrap();
        }
        let t_update = time(|i| {
            let k = pick(i);
            table.apply(&memory, bucket(k), entry(Kind::Update, k.clone(), 2 << 8)).unwrap();
        });
        let t_get = time(|i| {
            std::hint::black_box(table.get(&memory, pick(i)));
        });
        let t_insert = time_inserts(&mut table, &memory, &fresh, n, bucket);
        println!(
            "2^{shift:<6} {get:>8.0}  {insert:>11.0}  {t_insert:>12.0}  {t_update:>12.0}  {t_get:>9.0}  {scan:>9.1}"
        );
        rows.push(Row {
            shift: shift as f64,
            skip_get: get,
            skip_insert: insert,
            table_insert: t_insert,
            table_update: t_update,
            table_get: t_get,
            range_item: scan,
        });
    }
    let (ga, gb) = fit(&rows, |r| r.skip_get);
    let (ia, ib) = fit(&rows, |r| r.skip_insert);
    println!(
        "skiplist lookup ≈ {ga:.0} + {gb:.1}·log2(n) ns; insert ≈ {ia:.0} + {ib:.1}·log2(n) ns"
    );
    let last = rows.last().expect("five sizes");
    println!(
        "at 2^22 keys: hash-table insert {:.0} ns, update {:.0} ns, lookup {:.0} ns, range walk {:.1} ns per pair",
        last.table_insert, last.table_update, last.table_get, last.range_item
    );
}
