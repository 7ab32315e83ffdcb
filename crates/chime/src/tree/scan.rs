//! Scans: whole leaves READ along the sibling chain, several per doorbell when the cached
//! parent names the next ones and they share a memory node ([`dmindex_prim::doorbell`]). A
//! leaf counts once its versions agree and no hop is in flight in it (every home's hop bitmap
//! matches its neighbourhood). The load factor walks the same chain.

use std::collections::VecDeque;

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::Internal;
use dmindex_prim::doorbell;
use dmindex_prim::node_cache::Cached;

use super::leaf_io::{at_least, PooledLeaf};
use super::Tree;
use crate::leaf::SLACK;
use crate::view::LeafView;

impl Tree {
    /// READs whole leaves (one doorbell when they share a memory node, else one READ each) into
    /// pooled buffers, re-reading each until it validates and no hop is in flight in it.
    async fn read_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        leaves: &[GlobalAddr],
    ) -> IndexResult<Vec<PooledLeaf<'_>>> {
        let plan = &self.whole_plan;
        let mut bufs: Vec<PooledLeaf<'_>> = leaves
            .iter()
            .map(|_| {
                let mut b = self.leaf_buf(c);
                at_least(&mut b.raw, plan.raw_len + SLACK);
                b
            })
            .collect();
        let reads = leaves
            .iter()
            .zip(bufs.iter_mut())
            .map(|(a, b)| BatchOp::Read { addr: *a, buf: &mut b.raw[..plan.raw_len] });
        doorbell::post_iter(c, reads).await?;
        for (a, b) in leaves.iter().zip(bufs.iter_mut()) {
            let raw = std::mem::take(&mut b.raw);
            let whole = &raw[..plan.raw_len + SLACK];
            let ok =
                b.absorb_whole(whole, plan).is_ok() && b.validate().is_ok() && b.hops_settled();
            b.raw = raw;
            if ok {
                continue;
            }
            self.retry();
            let mut hops = Attempts::new();
            loop {
                let fresh = self.read_slots(c, *a, 0, self.leaf.span).await?;
                if fresh.hops_settled() {
                    *b = fresh;
                    break;
                }
                hops.failed(*a, "leaf hop bitmaps")?;
                self.retry();
            }
        }
        Ok(bufs)
    }

    /// Up to `count` pairs with key ≥ `from`, ascending: whole leaves along the sibling chain,
    /// several per doorbell when the parent names the next ones.
    pub(crate) async fn scan<T: Transport>(
        &self,
        c: &Client<T>,
        from: u64,
        count: usize,
        whole_groups: bool,
        until: Option<u64>,
        out: &mut Vec<(u64, [u8; 8])>,
    ) -> IndexResult<()> {
        if count == 0 {
            return Ok(());
        }
        let loc = self.blink.locate(c, from).await?;
        let mut ahead: VecDeque<GlobalAddr> = loc
            .parent
            .and_then(|p| {
                let children = |n: &Cached<Internal>| {
                    (n.addr == p).then(|| n.node.children_from(from).into_iter().skip(1).collect())
                };
                self.blink.cache.with(1, &from, children).flatten()
            })
            .unwrap_or_default();
        let mut cur = loc.leaf;
        let start = out.len();
        loop {
            let mut batch = vec![cur];
            let need = (count - (out.len() - start)).div_ceil(self.leaf.span / 2).clamp(1, 4);
            while batch.len() < need {
                match ahead.pop_front() {
                    Some(a) if a.node() == cur.node() => batch.push(a),
                    _ => break,
                }
            }
            let leaves = self.read_leaves(c, &batch).await?;
            let mut next = GlobalAddr::NULL;
            for (i, leaf) in leaves.iter().enumerate() {
                let mut pairs: Vec<(u64, [u8; 8])> = (0..self.leaf.span)
                    .map(|j| (leaf.key(j), leaf.value(j)))
                    .filter(|&(x, _)| x != 0 && x >= from)
                    .collect();
                pairs.sort_unstable_by_key(|p| p.0);
                let stop = match until {
                    // A range scan ends at the first leaf holding a key beyond the range: every
                    // later leaf holds only larger keys.
                    Some(u) => {
                        let beyond = pairs.iter().any(|p| p.0 > u);
                        out.extend(pairs.into_iter().filter(|p| p.0 <= u));
                        beyond
                    }
                    None => {
                        let mut cut = false;
                        for p in pairs {
                            // With long keys, never cut a group of equal prefixes: the caller
                            // orders them by full key.
                            let full = out.len() - start >= count;
                            if full && !(whole_groups && out.last().is_some_and(|l| l.0 == p.0)) {
                                cut = true;
                                break;
                            }
                            out.push(p);
                        }
                        cut || out.len() - start >= count
                    }
                };
                if stop {
                    return Ok(());
                }
                let (sib, _) = leaf.meta().expect("whole leaf");
                next = sib;
                if batch.get(i + 1) != Some(&sib) {
                    ahead.clear();
                    break;
                }
            }
            if next.is_null() {
                return Ok(());
            }
            cur = next;
        }
    }

    /// Keys per slot over all leaves, walking the leaf chain from the leftmost leaf.
    pub(crate) async fn load_factor<T: Transport>(&self, c: &Client<T>) -> IndexResult<f64> {
        let (height, mut addr) = self.blink.root(c).await?;
        for _ in 1..height {
            addr = self.blink.read_internal(c, addr).await?.leftmost;
        }
        let (mut keys, mut leaves) = (0usize, 0usize);
        while !addr.is_null() {
            let leaf = self.read_leaves(c, &[addr]).await?.remove(0);
            keys += leaf.count();
            leaves += 1;
            addr = leaf.meta().expect("whole leaf").0;
        }
        Ok(keys as f64 / (leaves * self.leaf.span) as f64)
    }
}
