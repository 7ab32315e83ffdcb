//! The scan's frontier: what is still to READ or to return, in key order, and how a node READ
//! lists its children into it.
//!
//! A node lists only as many children as the scan still wants (each counted at the keys its kind
//! implies, [`keys_at_least`]) and leaves a [`Rest`] for the others, listed from the same image
//! if the frontier reaches it: a scan of 100 keys does not carry the rest of the root's 256
//! children from round to round. Listing later from the image is listing at its READ: the
//! children are what the node held at that instant either way.

use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

use dmindex_fabric::GlobalAddr;
use dmindex_prim::doorbell::ROUND_READS;
use dmindex_prim::radix::node::slot_addr;
use dmindex_prim::radix::slot::Child;
use dmindex_prim::radix::{Kind, Link, NodeImage, Partial, Slot};

use super::ScanScratch;

/// A subtree still to READ.
#[derive(Clone)]
pub(super) struct Frame {
    pub slot: Slot,
    pub link: Option<Link>,
    /// Key bytes above the child (its parent's position and its partial key byte), in the
    /// scratch's `positions`.
    pub pos: Range<usize>,
    /// Every key below is at or after the start.
    pub all: bool,
}

/// The live children of a node READ in this pass, from the `from`-th in partial-key order on.
#[derive(Clone)]
pub(super) struct Rest {
    img: Arc<NodeImage>,
    addr: GlobalAddr,
    /// The node's position and whether every key below it is at or after the start.
    pos: Range<usize>,
    all: bool,
    from: usize,
    /// Children left, each at least one key.
    left: usize,
}

/// The frontier in key order.
#[derive(Clone)]
pub(super) enum Entry {
    Unread(Frame),
    Rest(Rest),
    /// A live pair in range, its bytes in the scratch's `items`.
    Item {
        key: Range<usize>,
        value: Range<usize>,
    },
}

/// What listing a node found.
pub(super) enum Listed {
    /// Its children (or the node itself, unread) are in the frontier: at least this many keys.
    Keys(usize),
    /// The node is frozen for a type switch: finish it (through `link`) and start again.
    Frozen { addr: GlobalAddr, link: Option<Link>, img: Arc<NodeImage> },
    /// Its depth or prefix does not fit where it was reached: start again.
    Misplaced(GlobalAddr),
}

/// The range a scan returns: `[lo, hi)`.
#[derive(Clone, Copy)]
pub(super) struct Bounds<'k> {
    pub lo: &'k [u8],
    pub hi: Option<&'k [u8]>,
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

/// Keys an unread subtree holds at least, as a round's budget counts them: a leaf one, an inner
/// node one more than the largest kind below its own (kinds only grow and slots are never
/// emptied, though deletes may have left tombstones: an estimate the scan never trusts).
fn keys_at_least(slot: Slot) -> usize {
    match slot.child() {
        Some(Child::Inner { kind: Kind::N256, .. }) => Kind::N48.slots() + 1,
        Some(Child::Inner { kind: Kind::N48, .. }) => Kind::N16.slots() + 1,
        Some(Child::Inner { kind: Kind::N16, .. }) => Kind::N4.slots() + 1,
        _ => 1,
    }
}

/// Bytes a READ of an unread subtree's top fetches.
pub(super) fn read_len(slot: Slot) -> usize {
    match slot.child() {
        Some(Child::Leaf { len, .. }) => len,
        Some(Child::Inner { kind, .. }) => kind.bytes(),
        None => 0,
    }
}

/// How many of the frontier's first entries the next round takes: enough for `wanted` more
/// pairs by [`keys_at_least`], at most [`ROUND_READS`] READs, at least one.
pub(super) fn round_cut(frontier: &[Entry], wanted: usize) -> usize {
    let (mut keys, mut reads) = (0, 0);
    for (j, e) in frontier.iter().enumerate() {
        if keys >= wanted || reads == ROUND_READS {
            return j.max(1);
        }
        keys += e.keys_at_least();
        reads += usize::from(matches!(e, Entry::Unread(_)));
    }
    frontier.len()
}

impl Entry {
    /// Keys this entry holds at least.
    fn keys_at_least(&self) -> usize {
        match self {
            Entry::Item { .. } => 1,
            Entry::Rest(r) => r.left,
            Entry::Unread(f) => keys_at_least(f.slot),
        }
    }
}

impl ScanScratch {
    /// Lists into the frontier the children a [`Rest`] within the next round's cut stands for
    /// (as many as the scan wants there), until none is: every entry the round takes is then a
    /// READ or an item. Bounded: each listing takes at least one child out of a rest.
    pub(super) fn list_rests(&mut self, b: Bounds<'_>, wanted: usize) {
        loop {
            let cut = round_cut(&self.frontier, wanted);
            let Some(r) = self.frontier[..cut].iter().position(|e| matches!(e, Entry::Rest(_)))
            else {
                return;
            };
            let Entry::Rest(rest) = self.frontier.remove(r) else { unreachable!("found above") };
            let before: usize = self.frontier[..r].iter().map(Entry::keys_at_least).sum();
            let budget = wanted.saturating_sub(before).max(1);
            let mut listed = std::mem::take(&mut self.next);
            listed.clear();
            self.known.clear();
            let keys = self.children_of(
                &rest.img,
                rest.addr,
                rest.pos,
                rest.all,
                rest.from,
                b,
                &mut listed,
                budget,
            );
            debug_assert!(matches!(keys, Listed::Keys(_)), "no image is known: nothing nests");
            self.frontier.splice(r..r, listed.drain(..));
            self.next = listed;
        }
    }

    /// Appends to `next`, in key order, the children in range of the node at `addr` reached as
    /// `f`, its image the one `known` holds for `addr` (the node itself goes unread if none):
    /// as many as `wanted` keys, a [`Rest`] for the others. A child whose image `known` holds
    /// too is listed in its place.
    pub(super) fn list(
        &mut self,
        f: &Frame,
        addr: GlobalAddr,
        b: Bounds<'_>,
        next: &mut Vec<Entry>,
        wanted: usize,
    ) -> Listed {
        let Some(img) = self.known.iter().find(|(a, _)| *a == addr).map(|(_, i)| Arc::clone(i))
        else {
            next.push(Entry::Unread(f.clone()));
            return Listed::Keys(keys_at_least(f.slot));
        };
        if img.any_frozen() {
            return Listed::Frozen { addr, link: f.link, img };
        }
        let h = img.header;
        let depth = h.depth as usize;
        if depth < f.pos.len() || depth - (h.len as usize) > f.pos.len() {
            return Listed::Misplaced(addr);
        }
        let more = (f.pos.len()..depth).map(|i| h.byte_at(i));
        let pos = extend_position(&mut self.positions, f.pos.clone(), more);
        let mut all = f.all;
        if !all {
            match cmp_prefix(&self.positions[pos.clone()], b.lo) {
                Ordering::Less => return Listed::Keys(0),
                Ordering::Greater => all = true,
                Ordering::Equal => {}
            }
        }
        if b.hi.is_some_and(|hi| cmp_prefix(&self.positions[pos.clone()], hi) == Ordering::Greater)
        {
            return Listed::Keys(0);
        }
        self.children_of(&img, addr, pos, all, 0, b, next, wanted)
    }

    /// The children of `img` (the node at `addr`, at `pos`) in range from the `from`-th live
    /// one in partial-key order, into `next` until `wanted` keys, then a [`Rest`].
    #[allow(clippy::too_many_arguments)]
    fn children_of(
        &mut self,
        img: &Arc<NodeImage>,
        addr: GlobalAddr,
        pos: Range<usize>,
        all: bool,
        from: usize,
        b: Bounds<'_>,
        next: &mut Vec<Entry>,
        wanted: usize,
    ) -> Listed {
        let depth = img.header.depth as usize;
        let start = self.children.len();
        img.live_sorted_into(&mut self.children);
        let end = self.children.len();
        let mut keys = 0;
        let mut nested = None;
        for k in start + from..end {
            if keys >= wanted {
                let rest =
                    Rest { img: Arc::clone(img), addr, pos, all, from: k - start, left: end - k };
                keys += rest.left;
                next.push(Entry::Rest(rest));
                break;
            }
            let child_slot = self.children[k];
            let byte = match child_slot.partial() {
                Partial::Byte(b) => Some(b),
                Partial::End => None,
            };
            let child = extend_position(&mut self.positions, pos.clone(), byte);
            let p = &self.positions[child.clone()];
            // Children wholly outside the range are not read at all: an end-of-key child is
            // the key `p`; any other holds keys that start with `p`.
            let (below, above) = match child_slot.partial() {
                Partial::End => (p < b.lo, b.hi.is_some_and(|hi| p >= hi)),
                Partial::Byte(_) => (
                    cmp_prefix(p, b.lo) == Ordering::Less,
                    b.hi.is_some_and(|hi| cmp_prefix(p, hi) == Ordering::Greater),
                ),
            };
            if (!all && below) || above {
                self.positions.truncate(child.start);
                continue;
            }
            // Its slot, through the image's own lookup (indexed for the large kinds): partial
            // keys are unique in a node, and the child was listed from this image.
            let i = img.find(child_slot.partial()).map_or(0, |(i, _)| i);
            debug_assert_eq!(img.slots()[i].thawed(), child_slot);
            let link = Link { slot: slot_addr(addr, i), word: child_slot, depth };
            let all = all || cmp_prefix(p, b.lo) == Ordering::Greater;
            let frame = Frame { slot: child_slot, link: Some(link), pos: child, all };
            match child_slot.child() {
                Some(Child::Inner { addr: a, .. })
                    if nested.is_none() && self.known.iter().any(|(k, _)| *k == a) =>
                {
                    // READ in the same round (the cached path): listed in its place.
                    match self.list(&frame, a, b, next, wanted - keys) {
                        Listed::Keys(n) => keys += n,
                        stop => nested = Some(stop),
                    }
                }
                _ => {
                    keys += keys_at_least(child_slot);
                    next.push(Entry::Unread(frame));
                }
            }
        }
        self.children.truncate(start);
        nested.unwrap_or(Listed::Keys(keys))
    }

    /// Returns the items at the front of the frontier that come after every pair returned.
    pub(super) fn emit(&mut self, out: &mut dmindex_index::ScanBuf, count: usize) {
        let mut done = 0;
        for e in &self.frontier {
            if out.len() >= count {
                break;
            }
            let Entry::Item { key, value } = e else { break };
            done += 1;
            let k = &self.items[key.clone()];
            if out.last_key().is_none_or(|last| k > last) {
                out.push(k, &self.items[value.clone()]);
            }
        }
        self.frontier.drain(..done);
    }
}
