//! Training: models, leaves and leaf tables for a sorted run of pairs, written out of place
//! (nothing written here is reachable until a directory naming it is published).
//!
//! Keys are cut into segments by the PLA ([`crate::pla`]), of at most [`MAX_MODEL_LEAVES`]
//! leaves' worth of keys; each segment becomes a model whose
//! leaves hold `fill` keys each, in key order, so position `p` of the segment is in leaf
//! `p / fill`. Leaf `i`'s fence is its first key, and leaf 0's is the model's `low` (the first
//! model's is the `low` of the range being trained, the others' their first key): the fences
//! partition the model's keys, for good, among its leaves' chains.

use dmindex_fabric::{Client, GlobalAddr, NodeId, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::hash::mix64;

use crate::layout::{self, DirEntry, LeafLayout, BASE, TABLE_HEADER};
use crate::pla;
use crate::shape::Shape;

/// Most base leaves a model gets: a model on smooth keys (one line fits them all) is cut into
/// models of this many leaves, so that retraining one, which rewrites all of its keys, stays
/// bounded when inserts pile into one end of it (increasing keys).
pub const MAX_MODEL_LEAVES: usize = 256;

/// A key and its 8-byte value slot.
pub type Pair = (u64, [u8; 8]);

/// The memory node a model starting at `low` goes to.
pub fn node_for<T: Transport>(c: &Client<T>, low: u64) -> NodeId {
    (mix64(low) % u64::from(c.info().nodes().max(1))) as NodeId
}

/// Writes the models, leaves and leaf tables of `pairs` (sorted by key, distinct, every key at
/// least `low`), `fill` keys a leaf, the first model starting at `low`; returns their directory
/// entries.
pub async fn build<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    fill: usize,
    low: u64,
    pairs: &[Pair],
) -> IndexResult<Vec<DirEntry>> {
    let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    let mut segs = pla::segments(&keys, shape.eps, MAX_MODEL_LEAVES * fill);
    if segs.is_empty() {
        segs.push(pla::Segment { start: 0, len: 0, slope: 0.0, intercept: 0.0 });
    }
    let mut out = Vec::with_capacity(segs.len());
    for (i, s) in segs.iter().enumerate() {
        let run = &pairs[s.start..s.start + s.len];
        let seg_low = if i == 0 { low } else { run[0].0 };
        let anchor = run.first().map_or(seg_low, |p| p.0);
        let node = node_for(c, seg_low);
        let (table, leaves) = write_model(c, shape, fill, node, seg_low, run).await?;
        // A retrainer holds its model's leaves while it builds: it renews its lease as it goes.
        dmindex_prim::lease::renew_if_due(c).await?;
        out.push(DirEntry {
            low: seg_low,
            anchor,
            slope: s.slope,
            intercept: s.intercept,
            table,
            leaves,
            per_leaf: fill as u16,
        });
    }
    Ok(out)
}

/// Writes one model's leaves (one WRITE of the leaf array) and leaf table on `node`.
async fn write_model<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    fill: usize,
    node: NodeId,
    low: u64,
    run: &[Pair],
) -> IndexResult<(GlobalAddr, u32)> {
    let l: LeafLayout = shape.layout();
    let n = run.len().div_ceil(fill).max(1);
    let base = c.alloc_on(node, (n * l.stride) as u64, 64).await?;
    let mut img = vec![0u8; n * l.stride];
    let (mut d, mut enc) = (vec![0u8; l.decoded], Vec::with_capacity(l.data));
    let mut table = vec![0u8; TABLE_HEADER as usize + 8 * n];
    for i in 0..n {
        let part = run.get(i * fill..run.len().min((i + 1) * fill)).unwrap_or(&[]);
        let fence = if i == 0 { low } else { part[0].0 };
        layout::init(&l, BASE, fence, &mut d);
        for (j, &(k, v)) in part.iter().enumerate() {
            layout::insert_at(&mut d, j, k, v);
        }
        layout::encode(&l, &d, &mut enc);
        img[i * l.stride..i * l.stride + l.data].copy_from_slice(&enc);
        let at = TABLE_HEADER as usize + 8 * i;
        table[at..at + 8].copy_from_slice(&base.add((i * l.stride) as u64).raw().to_le_bytes());
    }
    c.write(base, &img).await?;
    let t = c.alloc_on(node, table.len() as u64, 64).await?;
    c.write(t, &table).await?;
    Ok((t, n as u32))
}

/// Writes a directory of `entries` on memory node 0; returns its root word.
pub async fn write_dir<T: Transport>(c: &Client<T>, entries: &[DirEntry]) -> IndexResult<u64> {
    let pages = write_pages(c, entries).await?;
    write_top(c, &pages).await
}

/// Writes `entries` (sorted, at least one) as pages of up to [`layout::PAGE_MODELS`] models on
/// memory node 0; returns their top-array entries (low, page word).
pub async fn write_pages<T: Transport>(
    c: &Client<T>,
    entries: &[DirEntry],
) -> IndexResult<Vec<(u64, u64)>> {
    let mut out = Vec::with_capacity(entries.len().div_ceil(layout::PAGE_MODELS));
    let mut b = Vec::with_capacity(layout::PAGE_MODELS * layout::DIR_ENTRY);
    for page in entries.chunks(layout::PAGE_MODELS) {
        b.clear();
        for e in page {
            e.encode(&mut b);
        }
        let at = c.alloc_on(0, b.len() as u64, 64).await?;
        c.write(at, &b).await?;
        out.push((page[0].low, layout::root_word(at, page.len())));
    }
    Ok(out)
}

/// Writes a top array of `pages` (low, page word) on memory node 0; returns its root word.
pub async fn write_top<T: Transport>(c: &Client<T>, pages: &[(u64, u64)]) -> IndexResult<u64> {
    let mut b = Vec::with_capacity(pages.len() * layout::TOP_ENTRY);
    for (low, word) in pages {
        b.extend_from_slice(&low.to_le_bytes());
        b.extend_from_slice(&word.to_le_bytes());
    }
    let at = c.alloc_on(0, b.len() as u64, 64).await?;
    c.write(at, &b).await?;
    Ok(layout::root_word(at, pages.len()))
}
