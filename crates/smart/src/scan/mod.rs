//! Ordered scans, level by level, as SMART's range query runs: each round READs a frontier of
//! subtrees and leaves in one round trip (every doorbell rung before any is awaited,
//! [`Client::doorbells`]), and every item comes from its own leaf (one READ per key returned).
//!
//! # Rounds
//!
//! ```text
//! round 1   the nodes the CN cache knows on the start key's path, root first, READ afresh
//!           together: the copies give their addresses, never their contents
//! round k   the first entries of the frontier (in key order), enough for the pairs still
//!           wanted: leaves become items, inner nodes become their children in range
//! emit      items at the front of the frontier, in key order, until `count`
//! ```
//!
//! A node lists as many of its children as the scan still wants and keeps the rest for later
//! ([`list`]), so a round READs few nodes it will not need. SMART's own range query looks each key of the range up in the cache and trusts the
//! cached nodes' slots for which children exist; here every node whose children are listed is
//! READ afresh (a cached copy may miss a child inserted since), which costs the first round.
//!
//! # Linearizability
//!
//! Every node is judged as a point search judges a node read afresh: unfrozen, its slots are what
//! it held at the instant it was read, and positions are permanent. A child whose image came in
//! the same round as its parent's (the cached path) is used only if the parent's fresh slot names
//! its address: such a node was reachable from the copy's time to the parent's READ, so what it
//! lacked was absent at its own READ. Subtrees wholly below the start or at or above the end are
//! skipped by their position. A frozen node met on the way has its switch finished and the scan
//! starts again after the last key it returned, so every key it skips was absent at the instant
//! its slot was read from a reachable node.

use std::ops::Range;
use std::sync::Arc;

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult, ScanBuf};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::doorbell;
use dmindex_prim::radix::slot::{Child, MAX_LEAF};
use dmindex_prim::radix::{Kind, NodeImage, Partial, Slot};

use crate::leaf::{LeafView, State};
use crate::{bump, SmartIndex, Variant, ROOT_KIND};

mod list;

use list::{read_len, round_cut, Bounds, Entry, Frame, Listed};

/// A scan's working vectors, kept in a per-compute-node pool (`SmartIndex::scans`) so that a
/// scan allocates only the images of inner nodes it finds changed.
#[derive(Default)]
pub(crate) struct ScanScratch {
    frontier: Vec<Entry>,
    next: Vec<Entry>,
    /// Every frame's position, end to end (a scan's are a few hundred bytes).
    positions: Vec<u8>,
    /// Items' keys and values, end to end.
    items: Vec<u8>,
    /// Inner nodes' live children in partial-key order, a stretch per node being listed.
    children: Vec<Slot>,
    /// The cached path's nodes, and the images READ of them in the first round.
    path: Vec<(GlobalAddr, Kind)>,
    known: Vec<(GlobalAddr, Arc<NodeImage>)>,
    /// One round's READs, and their bytes end to end.
    pieces: Vec<(GlobalAddr, usize)>,
    bytes: Vec<u8>,
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
        if count == 0 {
            return Ok(());
        }
        let b = Bounds { lo, hi };
        let mut scratch = self.scans.get(c, ScanScratch::default);
        let s = &mut *scratch;
        let root = Slot::inner(Partial::Byte(0), self.root, ROOT_KIND);
        let mut restarts = Attempts::new();
        // Each pass ends in a return or a restart; restarts are bounded by `restarts`.
        'restart: loop {
            s.frontier.clear();
            s.positions.clear();
            s.items.clear();
            // Round 1: the cached path along the start, READ afresh together.
            s.path.clear();
            let walk = self.tree().cache.walk_path(self.root, ROOT_KIND, lo, &mut s.path);
            c.compute(Work::RadixStep, walk.probes);
            s.pieces.clear();
            s.pieces.extend(s.path.iter().map(|&(a, k)| (a, k.bytes())));
            self.read_round(c, s).await?;
            s.known.clear();
            let mut at = 0;
            for &(addr, kind) in &s.path {
                let buf = &s.bytes[at..at + kind.bytes()];
                at += kind.bytes();
                // A stale address may hold no node: it is then simply not used.
                if let Some(img) = self.adopt(c, addr, buf, kind) {
                    s.known.push((addr, img));
                }
            }
            if !s.known.iter().any(|(a, _)| *a == self.root) {
                return Err(IndexError::Corrupt(format!("no radix root at {:?}", self.root)));
            }
            let top = Frame { slot: root, link: None, pos: 0..0, all: false };
            let mut frontier = std::mem::take(&mut s.frontier);
            let listed = s.list(&top, self.root, b, &mut frontier, count);
            s.frontier = frontier;
            if self.settle(c, listed, &mut restarts).await? {
                continue 'restart;
            }
            // Later rounds: each READs the frontier's first entries. Bounded by the tree's
            // depth plus the pairs wanted: every round turns at least its first entry into
            // items or children, and the frontier holds only the range's nodes and leaves.
            loop {
                s.emit(out, count);
                if out.len() >= count || s.frontier.is_empty() {
                    return Ok(());
                }
                let wanted = count - out.len();
                s.list_rests(b, wanted);
                let cut = round_cut(&s.frontier, wanted);
                s.pieces.clear();
                s.pieces.extend(s.frontier[..cut].iter().filter_map(|e| match e {
                    Entry::Unread(f) => Some((f.slot.addr()?, read_len(f.slot))),
                    Entry::Rest(_) | Entry::Item { .. } => None,
                }));
                self.read_round(c, s).await?;
                let mut next = std::mem::take(&mut s.next);
                next.clear();
                let mut at = 0;
                let mut frontier = std::mem::take(&mut s.frontier);
                let mut outcome = Ok(false);
                for (j, e) in frontier.drain(..).enumerate() {
                    let f = match e {
                        Entry::Unread(f) if j < cut => f,
                        other => {
                            next.push(other);
                            continue;
                        }
                    };
                    let (Some(addr), len) = (f.slot.addr(), read_len(f.slot)) else { continue };
                    let range = at..at + len;
                    at += len;
                    if outcome.as_ref().is_ok_and(|again| *again) {
                        // Starting again: the rest of the round is not used.
                        continue;
                    }
                    match f.slot.child() {
                        Some(Child::Leaf { .. }) => {
                            if let Err(e) = self.take_leaf(c, s, f.slot, range, b, &mut next).await
                            {
                                outcome = Err(e);
                                break;
                            }
                        }
                        Some(Child::Inner { kind, .. }) => {
                            let Some(img) = self.adopt(c, addr, &s.bytes[range], kind) else {
                                outcome = Err(IndexError::Corrupt(format!(
                                    "no radix node of {kind:?} at {addr:?}"
                                )));
                                break;
                            };
                            s.known.clear();
                            s.known.push((addr, img));
                            let listed = s.list(&f, addr, b, &mut next, wanted);
                            outcome = self.settle(c, listed, &mut restarts).await;
                            if outcome.is_err() {
                                break;
                            }
                        }
                        None => {}
                    }
                }
                s.frontier = frontier;
                s.next = next;
                match outcome {
                    Err(e) => return Err(e),
                    Ok(true) => continue 'restart,
                    Ok(false) => std::mem::swap(&mut s.frontier, &mut s.next),
                }
            }
        }
    }

    /// Finishes what listing a node found: whether the scan must start again.
    async fn settle<T: Transport>(
        &self,
        c: &Client<T>,
        listed: Listed,
        restarts: &mut Attempts,
    ) -> IndexResult<bool> {
        match listed {
            Listed::Keys(_) => Ok(false),
            Listed::Frozen { addr, link, img } => {
                if let Some(l) = link {
                    self.tree().switch(c, &l, addr, &img).await?;
                }
                restarts.failed(addr, "radix node frozen for a type switch")?;
                // The pairs already returned stay (each was the key's value at an instant of the
                // scan); the next pass starts from the start key and returns only keys after
                // the last of them (`emit`).
                bump(&self.counters.descent.fresh_restarts);
                Ok(true)
            }
            Listed::Misplaced(addr) => {
                restarts.failed(addr, "radix node depth and prefix")?;
                bump(&self.counters.descent.fresh_restarts);
                Ok(true)
            }
        }
    }

    /// The image of the node at `addr` whose READ is `buf` (its bytes checked, charged as such),
    /// shared with the CN cache: the cached copy if the READ found it unchanged (nothing decoded
    /// or allocated), else the READ decoded and cached in its place, as SMART's range query
    /// caches the nodes it reads. `None` if `buf` holds no node of `kind`.
    fn adopt<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        buf: &[u8],
        kind: Kind,
    ) -> Option<Arc<NodeImage>> {
        c.compute(Work::BytesScanned, buf.len() as u64);
        let cache = self.tree().cache;
        if let Some(old) = cache.get(addr).filter(|old| old.is_read_of(buf, kind)) {
            return Some(old);
        }
        let img = Arc::new(NodeImage::decode(buf, kind)?);
        cache.insert_shared(addr, Arc::clone(&img));
        Some(img)
    }

    /// READs the round's `pieces` into `bytes`: every doorbell rung before any is awaited.
    async fn read_round<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut ScanScratch,
    ) -> IndexResult<()> {
        s.bytes.clear();
        s.bytes.resize(s.pieces.iter().map(|p| p.1).sum(), 0);
        doorbell::read_per_node(c, &s.pieces, &mut s.bytes).await
    }

    /// Turns the leaf READ into `bytes[range]` into an item of `next` if it is live and in
    /// range; a torn READ or a moved leaf is followed one leaf at a time.
    async fn take_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut ScanScratch,
        slot: Slot,
        range: Range<usize>,
        b: Bounds<'_>,
        next: &mut Vec<Entry>,
    ) -> IndexResult<()> {
        let mut take = |items: &mut Vec<u8>, key: &[u8], value: &[u8], state: State| {
            let live = matches!(state, State::Live { .. });
            let in_range = key >= b.lo && b.hi.is_none_or(|hi| key < hi);
            if live && in_range {
                let k = items.len();
                items.extend_from_slice(key);
                let v = items.len();
                items.extend_from_slice(value);
                next.push(Entry::Item { key: k..v, value: v..items.len() });
            }
        };
        c.compute(Work::BytesScanned, range.len() as u64);
        let mut state = match LeafView::decode(&s.bytes[range]) {
            Ok(v) => match v.status.state() {
                State::Moved(t) => State::Moved(t),
                st => {
                    take(&mut s.items, v.key, v.value, st);
                    return Ok(());
                }
            },
            Err(_) => State::Moved(slot),
        };
        // A torn read (in-place update in flight) or a move: read on, one leaf at a time.
        let mut one = [0u8; MAX_LEAF];
        let mut moves = Attempts::new();
        while let State::Moved(t) = state {
            let Some(Child::Leaf { addr, len }) = t.child() else { break };
            moves.failed(addr, "chain of moved leaves")?;
            let v = self.read_leaf(c, addr, len, &mut one).await?;
            state = v.status.state();
            if !matches!(state, State::Moved(_)) {
                take(&mut s.items, v.key, v.value, state);
            }
        }
        Ok(())
    }
}
