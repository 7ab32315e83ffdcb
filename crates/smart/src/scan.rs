//! Ordered scans: a depth-first walk in partial-key order, every inner node read afresh and
//! every item read from its own leaf (as SMART does: one READ per key returned).
//!
//! Subtrees wholly below the start or at or above the end are skipped by their position (the
//! key bytes above them, known from the path and the nodes' prefixes). A frozen node met on
//! the way has its switch finished and the scan resumes after the last key it returned, so
//! every key it skips was absent at the instant its slot was read from a reachable node.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexResult, Pair};
use dmindex_prim::radix::node::slot_addr;
use dmindex_prim::radix::slot::Child;
use dmindex_prim::radix::{Partial, Slot};
use std::cmp::Ordering;

use crate::leaf::State;
use crate::locate::Link;
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
        'restart: loop {
            stack.clear();
            stack.push(Frame { slot: root, link: None, pos: Vec::new(), all: false });
            while let Some(f) = stack.pop() {
                if out.len() - start >= count {
                    return Ok(());
                }
                match f.slot.child() {
                    Some(Child::Leaf { addr, len }) => {
                        self.scan_leaf(c, addr, len, lo, hi, start, out).await?;
                    }
                    Some(Child::Inner { addr, kind }) => {
                        let img = self.read_node(c, addr, kind).await?;
                        if img.any_frozen() {
                            if let Some(l) = f.link {
                                self.switch(c, &l, addr, &img).await?;
                            }
                            // Resume after the last key returned (pairs returned were each
                            // the key's value at an instant of the scan).
                            bump(&self.counters.fresh_restarts);
                            continue 'restart;
                        }
                        let h = img.header;
                        let depth = h.depth as usize;
                        if depth < f.pos.len() || depth - (h.len as usize) > f.pos.len() {
                            bump(&self.counters.fresh_restarts);
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
                        let children = img.live_sorted();
                        for s in children.into_iter().rev() {
                            let i = img.slots.iter().position(|x| x.thawed() == s).unwrap_or(0);
                            let mut p = pos.clone();
                            if let Partial::Byte(b) = s.partial() {
                                p.push(b);
                            }
                            let link = Link { slot: slot_addr(addr, i), word: s, depth };
                            stack.push(Frame { slot: s, link: Some(link), pos: p, all });
                        }
                    }
                    None => {}
                }
            }
            return Ok(());
        }
    }

    /// Reads one item and returns it if live and in range (and after every pair returned).
    #[allow(clippy::too_many_arguments)]
    async fn scan_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        len: usize,
        lo: &[u8],
        hi: Option<&[u8]>,
        start: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let mut s = Slot::leaf(Partial::Byte(0), addr, len);
        let mut buf = [0u8; dmindex_prim::radix::slot::MAX_LEAF];
        loop {
            let Some(Child::Leaf { addr, len }) = s.child() else { return Ok(()) };
            let v = self.read_leaf(c, addr, len, &mut buf).await?;
            match v.status.state() {
                State::Live { .. } => {
                    let in_range = v.key >= lo && hi.is_none_or(|hi| v.key < hi);
                    let fresh = out[start..].last().is_none_or(|(k, _)| v.key > k.as_slice());
                    if in_range && fresh {
                        out.push((v.key.to_vec(), v.value.to_vec()));
                    }
                    return Ok(());
                }
                State::Moved(t) => s = t,
                _ => return Ok(()),
            }
        }
    }
}
