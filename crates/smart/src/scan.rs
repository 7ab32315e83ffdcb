//! Ordered scans: a depth-first walk in partial-key order, every inner node read afresh and
//! every item read from its own leaf (as SMART does: one READ per key returned).
//!
//! Subtrees wholly below the start or at or above the end are skipped by their position (the
//! key bytes above them, known from the path and the nodes' prefixes). A frozen node met on
//! the way has its switch finished and the scan resumes after the last key it returned, so
//! every key it skips was absent at the instant its slot was read from a reachable node.

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, Transport};
use dmindex_index::{IndexResult, Pair};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::radix::node::slot_addr;
use dmindex_prim::radix::slot::{Child, MAX_LEAF};
use dmindex_prim::radix::{Link, Partial, Slot};
use std::cmp::Ordering;

use crate::leaf::{LeafView, State};
use crate::{bump, SmartIndex, Variant, ROOT_KIND};

/// A subtree still to visit.
struct Frame {
    slot: Slot,
    link: Option<Link>,
    /// Key bytes above the child (its parent's position and its partial key byte).
    pos: Vec<u8>,
    /// Every key below is at or after the start.
    all: bool,
}

/// Compares a position (a key prefix) with `bound` over the position's length.
fn cmp_prefix(pos: &[u8], bound: &[u8]) -> Ordering {
    let n = pos.len().min(bound.len());
    match pos[..n].cmp(&bound[..n]) {
        Ordering::Equal if pos.len() > bound.len() => Ordering::Greater,
        o => o,
    }
}

impl<V: Variant> SmartIndex<V> {
    pub(crate) async fn scan_keys<T: Transport>(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: Option<&[u8]>,
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let start = out.len();
        let root = Slot::inner(Partial::Byte(0), self.root, ROOT_KIND);
        let mut stack = Vec::new();
        let mut restarts = Attempts::new();
        'restart: loop {
            stack.clear();
            stack.push(Frame { slot: root, link: None, pos: Vec::new(), all: false });
            while let Some(f) = stack.pop() {
                if out.len() - start >= count {
                    return Ok(());
                }
                match f.slot.child() {
                    Some(Child::Leaf { addr, .. }) => {
                        // This leaf and the next ones on the stack on the same memory node, up
                        // to what the scan still needs, in one doorbell.
                        let want = (count - (out.len() - start)).min(MAX_BATCH);
                        let mut leaves = vec![f.slot];
                        while leaves.len() < want {
                            match stack.last().and_then(|g| g.slot.child()) {
                                Some(Child::Leaf { addr: a, .. }) if a.node() == addr.node() => {
                                    leaves.push(stack.pop().expect("peeked").slot);
                                }
                                _ => break,
                            }
                        }
                        self.scan_leaves(c, &leaves, lo, hi, start, out).await?;
                    }
                    Some(Child::Inner { addr, kind }) => {
                        let img = self.tree().read_node(c, addr, kind).await?;
                        if img.any_frozen() {
                            if let Some(l) = f.link {
                                self.tree().switch(c, &l, addr, &img).await?;
                            }
                            restarts.failed(addr, "radix node frozen for a type switch")?;
                            // Resume after the last key returned (pairs returned were each
                            // the key's value at an instant of the scan).
                            bump(&self.counters.descent.fresh_restarts);
                            continue 'restart;
                        }
                        let h = img.header;
                        let depth = h.depth as usize;
                        if depth < f.pos.len() || depth - (h.len as usize) > f.pos.len() {
                            restarts.failed(addr, "radix node depth and prefix")?;
                            bump(&self.counters.descent.fresh_restarts);
                            continue 'restart;
                        }
                        let mut pos = f.pos;
                        for i in pos.len()..depth {
                            pos.push(h.byte_at(i));
                        }
                        let mut all = f.all;
                        if !all {
                            match cmp_prefix(&pos, lo) {
                                Ordering::Less => continue,
                                Ordering::Greater => all = true,
                                Ordering::Equal => {}
                            }
                        }
                        if hi.is_some_and(|hi| cmp_prefix(&pos, hi) == Ordering::Greater) {
                            continue;
                        }
                        for s in img.live_sorted().into_iter().rev() {
                            let mut p = pos.clone();
                            if let Partial::Byte(b) = s.partial() {
                                p.push(b);
                            }
                            // Children wholly outside the range are not read at all: an
                            // end-of-key child is the key `p`; any other holds keys that start
                            // with `p`.
                            let (below, above) = match s.partial() {
                                Partial::End => {
                                    (p.as_slice() < lo, hi.is_some_and(|hi| p.as_slice() >= hi))
                                }
                                Partial::Byte(_) => (
                                    cmp_prefix(&p, lo) == Ordering::Less,
                                    hi.is_some_and(|hi| cmp_prefix(&p, hi) == Ordering::Greater),
                                ),
                            };
                            if (!all && below) || above {
                                continue;
                            }
                            let i = img.slots().iter().position(|x| x.thawed() == s).unwrap_or(0);
                            let link = Link { slot: slot_addr(addr, i), word: s, depth };
                            let all = all || cmp_prefix(&p, lo) == Ordering::Greater;
                            stack.push(Frame { slot: s, link: Some(link), pos: p, all });
                        }
                    }
                    None => {}
                }
            }
            return Ok(());
        }
    }

    /// Reads the leaves `slots` name in one doorbell (one memory node) and returns the live
    /// items in range, after every pair already returned; a moved item is followed.
    #[allow(clippy::too_many_arguments)]
    async fn scan_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        slots: &[Slot],
        lo: &[u8],
        hi: Option<&[u8]>,
        start: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let mut bufs: Vec<Vec<u8>> = slots
            .iter()
            .map(|s| match s.child() {
                Some(Child::Leaf { len, .. }) => vec![0; len],
                _ => Vec::new(),
            })
            .collect();
        let mut ops: Vec<BatchOp<'_>> = slots
            .iter()
            .zip(bufs.iter_mut())
            .filter_map(|(s, buf)| Some(BatchOp::Read { addr: s.addr()?, buf }))
            .collect();
        c.batch(&mut ops).await?;
        drop(ops);
        let mut one = [0u8; MAX_LEAF];
        for (s, buf) in slots.iter().zip(&bufs) {
            let (mut key, mut value, mut state) = match LeafView::decode(buf) {
                Ok(v) => (v.key.to_vec(), v.value.to_vec(), v.status.state()),
                Err(_) => (Vec::new(), Vec::new(), State::Moved(*s)),
            };
            // A torn read (in-place update in flight) or a move: read on, one leaf at a time.
            let mut moves = Attempts::new();
            while let State::Moved(t) = state {
                let Some(Child::Leaf { addr, len }) = t.child() else { break };
                moves.failed(addr, "chain of moved leaves")?;
                let v = self.read_leaf(c, addr, len, &mut one).await?;
                (key, value, state) = (v.key.to_vec(), v.value.to_vec(), v.status.state());
            }
            let live = matches!(state, State::Live { .. });
            let in_range = key.as_slice() >= lo && hi.is_none_or(|hi| key.as_slice() < hi);
            let fresh = out[start..].last().is_none_or(|(k, _)| key > *k);
            if live && in_range && fresh {
                out.push((key, value));
            }
        }
        Ok(())
    }
}
