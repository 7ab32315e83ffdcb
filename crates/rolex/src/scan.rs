//! Scans: from the key's predicted leaves on, base leaves in key order, a few per doorbell
//! with their hinted synonyms, each chain's pairs sorted (a chain's leaves are not ordered among
//! themselves), then the next model's leaves.
//!
//! Chains hold disjoint, increasing key ranges (their fences), so the pairs of a batch of chains
//! sorted together come out in key order; a key seen in two leaves of its chain (moved by a
//! delete and a re-insert between their READs) is returned once, as first seen. Each chain is read as a point search reads it, so each
//! pair returned was the key's value at the instant its leaf was READ, and a key of a chain not
//! returned was absent at an instant of that chain's READs (per-key linearizability, the
//! contract's scan semantics). A stale model (a RETIRED leaf, or RETIRING and a moved root)
//! refreshes the directory and the scan goes on from the next key it still needs.

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexResult, ScanBuf};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::key;

use crate::layout::{self, BASE, RETIRED, RETIRING};
use crate::ops::Pass;
use crate::Rolex;

/// Base leaves READ per doorbell by a scan.
pub const SCAN_LEAVES: usize = 4;

impl Rolex {
    pub(crate) async fn scan_chains<T: Transport>(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        let Some(mut k) = key::scan_from(from)? else { return Ok(()) };
        if count == 0 {
            return Ok(());
        }
        let d = self.layout.decoded;
        let mut pooled = self.scratch.get(c, || crate::ops::Scratch::new(&self.layout));
        let s: &mut crate::ops::Scratch = &mut pooled;
        let mut attempts = Attempts::new();
        let mut dir = self.cache.current();
        // Each round READs one batch of leaves; it ends when `count` pairs are out or the last
        // model's leaves are done. A stale round refreshes the directory (a retrain published).
        'model: loop {
            let j = dir.find(k);
            let m = &dir.models[j];
            let t = self.cache.table(c, m).await?;
            let (mut leaf, _) = m.range(k, self.shape.eps);
            while leaf < t.leaves.len() {
                let end = (leaf + SCAN_LEAVES).min(t.leaves.len());
                s.addrs.clear();
                for i in leaf..end {
                    s.addrs.push(t.leaves[i]);
                    let h = t.hint(i);
                    if h != 0 {
                        s.addrs.push(GlobalAddr::from_raw(h));
                    }
                }
                self.read_from(c, s, 0, &mut attempts).await?;
                let mut stale = s.words.iter().any(|w| w & RETIRED != 0);
                let retiring = s.words.iter().any(|w| w & RETIRING != 0);
                s.pairs.clear();
                let mut b = 0;
                let mut n = leaf;
                while !stale && b < s.addrs.len() {
                    if layout::kind(s.leaf(d, b)) != BASE {
                        b += 1;
                        continue;
                    }
                    if let Pass::Stale = self.walk(c, s, b, &mut attempts).await? {
                        stale = true;
                        break;
                    }
                    let next = layout::next(s.leaf(d, b)).map_or(0, |a| a.raw());
                    t.set_hint(n, next);
                    for ci in 0..s.chain.len() {
                        let img = &s.dec[s.chain[ci] * d..(s.chain[ci] + 1) * d];
                        for x in 0..layout::count(img) {
                            if layout::key(img, x) >= k {
                                s.pairs.push((layout::key(img, x), layout::value(img, x)));
                            }
                        }
                    }
                    b += 1;
                    n += 1;
                }
                if !stale && retiring && self.root_moved(c, &dir).await? {
                    stale = true;
                }
                if stale {
                    dir = self.cache.refresh(c).await?;
                    continue 'model;
                }
                // A key deleted from one leaf of its chain and inserted into a later one between
                // their READs is seen twice: its first sighting (chain order, kept by the
                // stable sort) is a value it had during the scan.
                s.pairs.sort_by_key(|p| p.0);
                s.pairs.dedup_by_key(|p| p.0);
                c.compute(Work::KeyCompare, s.pairs.len() as u64);
                for i in 0..s.pairs.len() {
                    let (pk, v) = s.pairs[i];
                    self.push_pair(c, pk, v, &mut s.value, out).await?;
                    if out.len() == count {
                        return Ok(());
                    }
                    match pk.checked_add(1) {
                        Some(nk) => k = nk,
                        None => return Ok(()),
                    }
                }
                leaf = end;
            }
            match dir.models.get(j + 1) {
                Some(next) => k = k.max(next.e.low),
                None => return Ok(()),
            }
        }
    }
}
