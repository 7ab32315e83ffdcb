//! Ordered scans: a depth-first walk in partial-key order, every inner node read afresh and
//! every item read from its own leaf (as SMART does: one READ per key returned).
//!
//! Subtrees wholly below the start or at or above the end are skipped by their position (the
//! key bytes above them, known from the path and the nodes' prefixes). A frozen node met on
//! the way has its switch finished and the scan resumes after the last key it returned, so
//! every key it skips was absent at the instant its slot was read from a reachable node.

use std::cmp::Ordering;
use std::ops::Range;

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, Transport, Work};
use dmindex_index::{IndexResult, ScanBuf};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::doorbell;
use dmindex_prim::radix::node::slot_addr;
use dmindex_prim::radix::slot::{Child, MAX_LEAF};
use dmindex_prim::radix::{Link, Partial, Slot};

use crate::leaf::{LeafView, State};
use crate::{bump, SmartIndex, Variant, ROOT_KIND};

/// A subtree still to visit.
struct Frame {
    slot: Slot,
    link: Option<Link>,
    /// Key bytes above the child (its parent's position and its partial key byte), in the
    /// scratch's `positions`.
    pos: Range<usize>,
    /// Every key below is at or after the start.
    all: bool,
}

/// A scan's working vectors, kept in a per-compute-node pool (`SmartIndex::scans`) so that a
/// scan allocates only the inner-node images it reads.
#[derive(Default)]
pub(crate) struct ScanScratch {
    stack: Vec<Frame>,
    /// Every frame's position, end to end (a scan's are a few hundred bytes).
    positions: Vec<u8>,
    /// An inner node's live children, in partial-key order.
    children: Vec<Slot>,
    /// One doorbell's leaves, and their bytes end to end.
    leaves: Vec<Slot>,
    bytes: Vec<u8>,
}

/// Compares a position (a key prefix) with `bound` over the position's length.
fn cmp_prefix(pos: &[u8], bound: &[u8]) -> Ordering {
    let n = pos.len().min(bound.len());
    match pos[..n].cmp(&bound[..n]) {
        Ordering::Equal if pos.len() > bound.len() => Ordering::Greater,
        o => o,
    }
}

/// Appends a copy of `positions[from]` followed by `more` to `positions`; where it is.
fn extend_position(
    positions: &mut Vec<u8>,
    from: Range<usize>,
    more: impl IntoIterator<Item = u8>,
) -> Range<usize> {
    let at = positions.len();
    positions.extend_from_within(from);
    positions.extend(more);
    at..positions.len()
}

impl<V: Variant> SmartIndex<V> {
    pub(crate) async fn scan_keys<T: Transport>(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: Option<&[u8]>,
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        let mut scratch = self.scans.get(c, ScanScratch::default);
        let ScanScratch { stack, positions, children, leaves, bytes } = &mut *scratch;
        let root = Slot::inner(Partial::Byte(0), self.root, ROOT_KIND);
        let mut restarts = Attempts::new();
        'restart: loop {
            stack.clear();
            positions.clear();
            stack.push(Frame { slot: root, link: None, pos: 0..0, all: false });
            while let Some(f) = stack.pop() {
                if out.len() >= count {
                    return Ok(());
                }
                match f.slot.child() {
                    Some(Child::Leaf { addr, .. }) => {
                        // This leaf and the next ones on the stack on the same memory node, up
                        // to what the scan still needs, in one doorbell.
                        let want = (count - out.len()).min(MAX_BATCH);
                        leaves.clear();
                        leaves.push(f.slot);
                        while leaves.len() < want {
                            match stack.last().and_then(|g| g.slot.child()) {
                                Some(Child::Leaf { addr: a, .. }) if a.node() == addr.node() => {
                                    leaves.push(stack.pop().expect("peeked").slot);
                                }
                                _ => break,
                            }
                        }
                        self.scan_leaves(c, leaves, bytes, lo, hi, out).await?;
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
                        let more = (f.pos.len()..depth).map(|i| h.byte_at(i));
                        let pos = extend_position(positions, f.pos, more);
                        let mut all = f.all;
                        if !all {
                            match cmp_prefix(&positions[pos.clone()], lo) {
                                Ordering::Less => continue,
                                Ordering::Greater => all = true,
                                Ordering::Equal => {}
                            }
                        }
                        let here = &positions[pos.clone()];
                        if hi.is_some_and(|hi| cmp_prefix(here, hi) == Ordering::Greater) {
                            continue;
                        }
                        children.clear();
                        children.extend(
                            img.slots()
                                .iter()
                                .map(|s| s.thawed())
                                .filter(|s| !s.is_empty() && !s.is_tombstone()),
                        );
                        children.sort_unstable_by_key(|s| s.partial());
                        for &s in children.iter().rev() {
                            let byte = match s.partial() {
                                Partial::Byte(b) => Some(b),
                                Partial::End => None,
                            };
                            let child = extend_position(positions, pos.clone(), byte);
                            let p = &positions[child.clone()];
                            // Children wholly outside the range are not read at all: an
                            // end-of-key child is the key `p`; any other holds keys that start
                            // with `p`.
                            let (below, above) = match s.partial() {
                                Partial::End => (p < lo, hi.is_some_and(|hi| p >= hi)),
                                Partial::Byte(_) => (
                                    cmp_prefix(p, lo) == Ordering::Less,
                                    hi.is_some_and(|hi| cmp_prefix(p, hi) == Ordering::Greater),
                                ),
                            };
                            if (!all && below) || above {
                                positions.truncate(child.start);
                                continue;
                            }
                            let i = img.slots().iter().position(|x| x.thawed() == s).unwrap_or(0);
                            let link = Link { slot: slot_addr(addr, i), word: s, depth };
                            let all = all || cmp_prefix(p, lo) == Ordering::Greater;
                            stack.push(Frame { slot: s, link: Some(link), pos: child, all });
                        }
                    }
                    None => {}
                }
            }
            return Ok(());
        }
    }

    /// Reads the leaves `slots` name in one doorbell (one memory node, into `bytes`) and
    /// appends the live items in range that come after every pair already returned; a moved
    /// item is followed.
    async fn scan_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        slots: &[Slot],
        bytes: &mut Vec<u8>,
        lo: &[u8],
        hi: Option<&[u8]>,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        let len = |s: &Slot| match s.child() {
            Some(Child::Leaf { len, .. }) => len,
            _ => 0,
        };
        bytes.clear();
        bytes.resize(slots.iter().map(len).sum(), 0);
        let mut rest = &mut bytes[..];
        let reads = slots.iter().filter_map(|s| {
            let (buf, tail) = std::mem::take(&mut rest).split_at_mut(len(s));
            rest = tail;
            Some(BatchOp::Read { addr: s.addr()?, buf })
        });
        doorbell::post_iter(c, reads).await?;
        let take = |out: &mut ScanBuf, key: &[u8], value: &[u8], state: State| {
            let live = matches!(state, State::Live { .. });
            let in_range = key >= lo && hi.is_none_or(|hi| key < hi);
            let fresh = out.last_key().is_none_or(|k| key > k);
            if live && in_range && fresh {
                out.push(key, value);
            }
        };
        let mut one = [0u8; MAX_LEAF];
        let mut at = 0;
        for s in slots {
            let buf = &bytes[at..at + len(s)];
            at += len(s);
            c.compute(Work::BytesScanned, buf.len() as u64);
            let mut state = match LeafView::decode(buf) {
                Ok(v) => match v.status.state() {
                    State::Moved(t) => State::Moved(t),
                    st => {
                        take(out, v.key, v.value, st);
                        continue;
                    }
                },
                Err(_) => State::Moved(*s),
            };
            // A torn read (in-place update in flight) or a move: read on, one leaf at a time.
            let mut moves = Attempts::new();
            while let State::Moved(t) = state {
                let Some(Child::Leaf { addr, len }) = t.child() else { break };
                moves.failed(addr, "chain of moved leaves")?;
                let v = self.read_leaf(c, addr, len, &mut one).await?;
                state = v.status.state();
                if !matches!(state, State::Moved(_)) {
                    take(out, v.key, v.value, state);
                }
            }
        }
        Ok(())
    }
}
