//! Leaf I/O: READs of a leaf's neighbourhoods (or of the whole leaf) into a [`LeafBuf`],
//! repeated until cache-line and node-level versions agree; the leaf lock, one masked CAS on
//! the lock word that also returns the vacancy bitmap and argmax, queued behind the CN-local
//! lock table ([`dmindex_prim::lock`]); and the WRITEs that put entries back and unlock the leaf
//! in the same doorbell.

use arrayvec::ArrayVec;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::write_split;
use dmindex_prim::cacheline::{self, phys_range};
use dmindex_prim::doorbell;
use dmindex_prim::lock::{Held, Repair};
use dmindex_prim::pool::Pooled;

use super::Tree;
use crate::layout::LockWord;
use crate::leaf::{LeafBuf, SLACK};
use crate::neighbourhood::Neighbourhood;
use crate::read_plan;
use crate::view::LeafView;

/// Frees the lock of a leaf whose holder died, holding it (taken over from the fenced holder):
/// the leaf is READ whole (until its versions agree), a hopscotch leaf is settled, and the free
/// word's vacancy bitmap and argmax are computed from the keys it holds.
///
/// A sorted leaf is settled by [`Tree::repair_sorted`]. For a hopscotch leaf, what a dead
/// holder can have left: each WRITE of a leaf's pieces fits one packet (a leaf of at most 4096
/// physical bytes), so it landed whole or not at all, and of a doorbell of several only a
/// prefix, in order. A write that does not wrap around the leaf is one range
/// of slots, new or old as a whole, with the unlock in it or after it. A wrapped one is two
/// WRITEs, the part from slot 0 first ([`LeafLayout::write_ranges`](crate::layout::LeafLayout::write_ranges)):
/// if only that landed, a key a hop moved across the wrap is in its new slot and still in its
/// old one, and hop bitmaps on either side may not match the keys — readers would retry for
/// ever. [`LeafBuf::settle`] clears the old copy and rebuilds the bitmaps, and the entries it
/// changed are written back (one WRITE, the lock still held) before the free word is computed.
/// Every key the leaf held before the dead write, or that a reader may have seen after it, is
/// still there once. Settling is a function of the keys, so a repairer that dies before or
/// after its WRITE leaves the next one the same work or none.
struct LeafRepair<'t> {
    tree: &'t Tree,
    leaf: GlobalAddr,
}

impl<T: Transport> Repair<T> for LeafRepair<'_> {
    async fn free_word(&self, c: &Client<T>, _lock: GlobalAddr, _held: u64) -> IndexResult<u64> {
        let l = self.tree.leaf;
        if !l.kind.hopscotch {
            // A sorted leaf's rewrite comes in pieces that may have landed in part
            // ([`super::sorted_write`]); its lock word carries no metadata.
            self.tree.repair_sorted(c, self.leaf).await?;
            return Ok(LockWord { full: 0, argmax: 0 }.encode(&l));
        }
        let mut buf = self.tree.read_whole(c, self.leaf).await?;
        let changed = buf.settle();
        if let (Some(&lo), Some(&hi)) = (changed.first(), changed.last()) {
            // Slots lo ..= hi (ascending: no wrap), one WRITE that leaves the lock held.
            let (d0, d1) = (l.entry(lo), l.entry(hi) + l.entry_len);
            let mut out = vec![0u8; l.physical()];
            let n = buf.encode(d0, d1, &mut out);
            c.write(self.leaf.add(phys_range(d0, d1).0 as u64), &out[..n]).await?;
        }
        let keys: Vec<u64> = (0..l.span).map(|i| buf.key(i)).collect();
        Ok(crate::split::lock_word(&l, &keys).encode(&l))
    }
}

/// A leaf under this client's lock: its address, the lock word the locking CAS returned
/// (vacancy bitmap and argmax), and the held lock with its slot of the CN-local lock table.
/// Consumed by the WRITE that unlocks the leaf, which releases the slot right after.
#[must_use = "a locked leaf is released by the WRITE that unlocks it"]
pub(crate) struct LockedLeaf<'t> {
    pub addr: GlobalAddr,
    pub lw: LockWord,
    pub held: Held<'t>,
}

/// READs the neighbourhood of home `$h` of leaf `$leaf` (a [`GlobalAddr`]) into `$nb` (a
/// [`Neighbourhood`]) until the READ validates: one doorbell into its buffer, nothing allocated
/// or copied. Evaluates to an [`IndexResult<()>`](IndexResult), a failed READ's error or a
/// corrupt leaf's (one that failed validation [`BOUND`](dmindex_prim::attempts::BOUND) times in
/// a row), for the caller's `?`: the macro itself never leaves the caller. A macro, awaited in
/// the calling async fn's own state machine: as an async fn, a layer between the caller and the
/// verb, it cost 76 instructions a search (2504 → 2580) and 62 an insert (callgrind;
/// `docs/perf.md`, eleventh and thirteenth rounds). A one-piece READ (most neighbourhoods) is the
/// client's READ awaited here, not through [`read_pieces`].
macro_rules! await_neighbourhood {
    ($tree:expr, $c:expr, $leaf:expr, $h:expr, $nb:ident) => {{
        let tree = $tree;
        $crate::tree::leaf_io::await_window!(tree, $c, $leaf, &tree.plans[$h], $nb)
    }};
}
pub(crate) use await_neighbourhood;

/// [`await_neighbourhood!`] by any plan `$plan` that fits a [`Neighbourhood`] (an insert's).
macro_rules! await_window {
    ($tree:expr, $c:expr, $leaf:expr, $plan:expr, $nb:ident) => {{
        let (tree, c, leaf, plan) = ($tree, $c, $leaf, $plan);
        let mut attempts = dmindex_prim::attempts::Attempts::new();
        loop {
            $nb.reset(plan);
            let plan = $nb.plan();
            let read = if let [(p0, n)] = plan.reads[..] {
                let raw = &mut $nb.raw_mut()[..n as usize];
                c.read(leaf.add(p0 as u64), raw).await.map_err(Into::into)
            } else {
                let pieces = plan.reads.iter().map(|&(p0, n)| (p0 as usize, n as usize));
                $crate::tree::leaf_io::read_pieces(c, leaf, pieces, $nb.raw_mut()).await
            };
            if let Err(e) = read {
                break Err(e);
            }
            // Absorbing checks every line's version and copies the window out of the READ.
            c.compute(dmindex_fabric::Work::BytesScanned, plan.raw_len as u64);
            if $nb.absorb().is_ok() && $nb.validate().is_ok() {
                break Ok(());
            }
            if let Err(e) = attempts.failed(leaf, "leaf neighbourhood versions") {
                break Err(e);
            }
            tree.retry();
        }
    }};
}
pub(crate) use await_window;

impl Tree {
    /// The address of a leaf's lock word.
    fn lock_addr(&self, leaf: GlobalAddr) -> GlobalAddr {
        leaf.add(self.leaf.lock_offset() as u64)
    }

    /// Acquires a leaf's lock with one masked CAS that also returns the vacancy bitmap and argmax,
    /// after queueing on the CN-local lock table. Never hold the returned [`LockedLeaf`] while
    /// taking another lock (table slots are shared by hashing).
    pub(crate) async fn lock_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<LockedLeaf<'_>> {
        let repair = LeafRepair { tree: self, leaf };
        let lock = self.lock_addr(leaf);
        let held = self.blink.locks.acquire(c, lock, || self.retry(), &repair).await?;
        let lw = LockWord::decode(&self.leaf, held.word());
        Ok(LockedLeaf { addr: leaf, lw, held })
    }

    /// Called by a reader on each READ of a leaf that showed a hop in flight (a home's hop
    /// bitmap that its keys do not match), `since` being when the first of them came (`None`
    /// before): whether they have gone on for a lease of this client's clock (then `since` is
    /// reset), and the reader should [`Tree::unstick`] the leaf.
    pub(crate) fn overdue<T: Transport>(c: &Client<T>, since: &mut Option<u64>) -> bool {
        let now = c.now_ns();
        let first = *since.get_or_insert(now);
        if now.saturating_sub(first) < c.transport().lease_ns() {
            return false;
        }
        *since = None;
        true
    }

    /// Locks `leaf` and unlocks it as it found it: what a reader does once a hop in flight has
    /// lasted a lease ([`Tree::overdue`]). A live writer's hop lands with its doorbell; a
    /// mismatch that lasts a lease is a writer paused, whom the lock waits for, or one that died
    /// after a prefix of its WRITEs landed, whom the lock judges, fences and repairs
    /// ([`LeafRepair`]). Readers take no lock otherwise, so without this a client that only
    /// reads would wait for a writer to come by, for ever if none does.
    pub(crate) async fn unstick<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<()> {
        let locked = self.lock_leaf(c, leaf).await?;
        self.unlock_leaf(c, locked).await
    }

    /// Locks a hopscotch leaf ([`Tree::lock_leaf`]) and gets its vacancy bitmap: from the lock
    /// CAS, or without vacancy-bitmap piggybacking from a READ of its own right after it.
    pub(super) async fn lock_hopscotch_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<LockedLeaf<'_>> {
        let locked = self.lock_leaf(c, leaf).await?;
        if !self.vacancy {
            // Without piggybacking the lock CAS is used as a plain lock and the vacancy
            // bitmap costs its own READ. The word names the holder while it is held, so the
            // bitmap this READ stands for is the one the CAS returned (same cost, same bits).
            c.read_word(self.lock_addr(leaf)).await?;
        }
        Ok(locked)
    }

    /// Releases a leaf's remote lock: one WRITE of its lock word `leaf.lw` (vacancy bitmap and
    /// argmax) with the lock bit clear; then its local slot.
    pub(crate) async fn unlock_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
    ) -> IndexResult<()> {
        leaf.held.unlock_with(c, leaf.lw.encode(&self.leaf)).await
    }

    /// A leaf buffer from this compute node's pool, as [`LeafBuf::new`] makes it; it goes back
    /// to the pool when dropped, so steady-state reads allocate nothing.
    pub(crate) fn leaf_buf<T: Transport>(&self, c: &Client<T>) -> PooledLeaf<'_> {
        let mut buf = self.bufs.get(c, || LeafBuf::new(self.leaf));
        // Not cleared: only the slots a READ covers are looked at (debug builds check).
        buf.forget();
        buf
    }

    /// An empty leaf ([`LeafBuf::make_empty`]) in a buffer from this compute node's pool: a
    /// split's new sibling.
    pub(crate) fn empty_leaf_buf<T: Transport>(&self, c: &Client<T>) -> PooledLeaf<'_> {
        let mut buf = self.bufs.get(c, || LeafBuf::new(self.leaf));
        buf.make_empty();
        buf
    }

    /// READs decoded `ranges` of a leaf (one doorbell) into `buf`; `Ok(false)` if what came back
    /// is torn or mid-write.
    async fn read_into<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        buf: &mut LeafBuf,
        ranges: &[(usize, usize)],
    ) -> IndexResult<bool> {
        // One scratch buffer split into the ranges' physical pieces.
        let mut raw = std::mem::take(&mut buf.raw);
        let lens = ranges.iter().map(|&(d0, d1)| {
            let (p0, p1) = phys_range(d0, d1);
            (p0, p1 - p0)
        });
        let total = lens.clone().map(|(_, n)| n).sum();
        at_least(&mut raw, total);
        let posted = read_pieces(c, leaf, lens, &mut raw[..total]).await;
        c.compute(Work::BytesScanned, total as u64);
        let mut ok = posted.is_ok();
        let mut at = 0;
        for &(d0, d1) in ranges {
            let (p0, p1) = phys_range(d0, d1);
            ok = ok && buf.absorb(d0, d1, &raw[at..at + p1 - p0]).is_ok();
            at += p1 - p0;
        }
        buf.raw = raw;
        posted?;
        Ok(ok && buf.validate().is_ok())
    }

    /// READs slots `lo .. lo + n` of a leaf until the READ validates.
    pub(crate) async fn read_slots<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        lo: usize,
        n: usize,
    ) -> IndexResult<PooledLeaf<'_>> {
        if n >= self.leaf.span {
            return self.read_whole(c, leaf).await;
        }
        let mut attempts = Attempts::new();
        loop {
            let mut buf = self.leaf_buf(c);
            let ranges = buf.ranges(lo, n);
            if self.read_into(c, leaf, &mut buf, &ranges).await? {
                return Ok(buf);
            }
            attempts.failed(leaf, "leaf slots' versions")?;
            self.retry();
        }
    }

    /// READs a whole leaf until the READ validates: one READ, decoded by the tree's whole-leaf
    /// plan into a pooled buffer (no clearing first: every byte is overwritten).
    async fn read_whole<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<PooledLeaf<'_>> {
        let mut attempts = Attempts::new();
        loop {
            if let Some(buf) = self.read_whole_once(c, leaf).await? {
                return Ok(buf);
            }
            attempts.failed(leaf, "whole leaf's versions")?;
            self.retry();
        }
    }

    /// [`Tree::read_whole`] for a client that holds no lock on the leaf (a sorted leaf's search
    /// or scan): a leaf that stays torn for a lease of this client's clock is one a writer left
    /// part written (paused, or dead after a prefix of its pieces landed), and the reader
    /// [`Tree::unstick`]s it, which waits for the live one or repairs after the dead one.
    pub(crate) async fn read_whole_unlocked<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<PooledLeaf<'_>> {
        let (mut attempts, mut since) = (Attempts::new(), None);
        loop {
            if let Some(buf) = self.read_whole_once(c, leaf).await? {
                return Ok(buf);
            }
            attempts.failed(leaf, "whole leaf's versions")?;
            self.retry();
            if Tree::overdue(c, &mut since) {
                Box::pin(self.unstick(c, leaf)).await?;
            }
        }
    }

    /// One READ of a whole leaf; `None` if it did not validate.
    async fn read_whole_once<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<Option<PooledLeaf<'_>>> {
        let plan = &self.whole_plan;
        let mut buf = self.leaf_buf(c);
        let mut raw = std::mem::take(&mut buf.raw);
        at_least(&mut raw, plan.raw_len + SLACK);
        let read = c.read(leaf, &mut raw[..plan.raw_len]).await;
        c.compute(Work::BytesScanned, plan.raw_len as u64);
        let whole = &raw[..plan.raw_len + SLACK];
        let ok = read.is_ok() && buf.absorb_whole(whole, plan).is_ok() && buf.validate().is_ok();
        buf.raw = raw;
        read?;
        Ok(ok.then_some(buf))
    }

    /// A neighbourhood window for home `h` of this tree's leaves, to be READ by
    /// [`await_neighbourhood!`]. Make it once per operation: it lives in the operation's
    /// state and is never moved.
    pub(crate) fn neighbourhood(&self, h: usize) -> Neighbourhood<'_> {
        Neighbourhood::new(self.leaf, &self.plans[h])
    }

    /// READs entry `slot` of a leaf alone into `nb` (a speculative read); `false` if the READ
    /// was torn.
    pub(crate) async fn read_entry<'t, T: Transport>(
        &'t self,
        c: &Client<T>,
        leaf: GlobalAddr,
        slot: usize,
        nb: &mut Neighbourhood<'t>,
    ) -> IndexResult<bool> {
        nb.reset(&self.entry_plans[slot]);
        let pieces = nb.plan().reads.iter().map(|&(p0, n)| (p0 as usize, n as usize));
        read_pieces(c, leaf, pieces, nb.raw_mut()).await?;
        c.compute(Work::BytesScanned, nb.plan().raw_len as u64);
        Ok(nb.absorb().is_ok())
    }

    /// READs a leaf's inclusive upper bound (big-endian, at the rear).
    pub(super) async fn read_bound<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<u64> {
        let w = c.read_word(leaf.add(self.leaf.bound_offset() as u64)).await?;
        Ok(u64::from_be_bytes(w.to_le_bytes()))
    }

    /// Encodes slots `lo .. lo + n` (circular) of `view` into `out`, with the unlocking lock
    /// word `lw` last: what [`Tree::write_pieces`] WRITEs, in the order of
    /// [`LeafLayout::write_ranges`](crate::layout::LeafLayout::write_ranges) (a wrapped run's
    /// part from slot 0 first: a prefix of the doorbell never loses a moved key). `out` holds at
    /// least the physical bytes of the slots plus the pad and the lock word.
    pub(super) fn write_plan(
        &self,
        view: &impl LeafView,
        lo: usize,
        n: usize,
        lw: LockWord,
        out: &mut [u8],
    ) -> WritePlan {
        let mut pieces = WritePlan::new();
        let mut len = 0;
        for (d0, d1) in self.leaf.write_ranges(lo, n) {
            let written = view.encode(d0, d1, &mut out[len..]);
            pieces.push((phys_range(d0, d1).0, len..len + written));
            len += written;
        }
        let word = lw.encode(&self.leaf).to_le_bytes();
        let lock_at = self.leaf.lock_offset();
        let (at, range) = pieces.last().cloned().expect("at least one range");
        if at + range.len() == self.leaf.physical() {
            // The last range ends where the pad before the lock word begins: one WRITE.
            let pad_end = range.start + lock_at - at;
            out[len..pad_end].fill(0);
            out[pad_end..pad_end + 8].copy_from_slice(&word);
            pieces.last_mut().expect("at least one range").1 = range.start..pad_end + 8;
        } else {
            out[len..len + 8].copy_from_slice(&word);
            pieces.push((lock_at, len..len + 8));
        }
        pieces
    }

    /// WRITEs a [`Tree::write_plan`] encoded in `out` (the last piece carries the unlocking
    /// lock word) to locked leaf `leaf` in order, as one doorbell batch, releasing the leaf.
    pub(super) async fn write_pieces<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        out: &[u8],
        plan: &WritePlan,
    ) -> IndexResult<()> {
        let mut writes = ArrayVec::<BatchOp<'_>, 3>::new();
        for (at, r) in plan {
            writes.push(BatchOp::Write { addr: leaf.addr.add(*at as u64), data: &out[r.clone()] });
        }
        leaf.held.released_by(doorbell::post(c, &mut writes).await)
    }

    /// Encodes slots `lo .. lo + n` of `view` with the unlocking lock word `lw` and WRITEs them
    /// to locked leaf `leaf`, releasing it, through a stack buffer (up to a neighbourhood's
    /// worth of slots).
    pub(super) async fn write_back<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        view: &impl LeafView,
        (lo, n): (usize, usize),
        lw: LockWord,
    ) -> IndexResult<()> {
        let mut out = [0u8; read_plan::RAW + 16];
        let plan = self.write_plan(view, lo, n, lw, &mut out);
        self.write_pieces(c, leaf, &out, &plan).await
    }

    /// [`Tree::write_back`] from a whole-leaf buffer, encoding into its scratch.
    pub(super) async fn write_back_buf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        buf: &mut LeafBuf,
        (lo, n): (usize, usize),
        lw: LockWord,
    ) -> IndexResult<()> {
        let mut out = std::mem::take(&mut buf.raw);
        at_least(&mut out, self.leaf.lock_offset() + 8);
        let plan = self.write_plan(buf, lo, n, lw, &mut out);
        let written = self.write_pieces(c, leaf, &out, &plan).await;
        buf.raw = out;
        written
    }

    /// Rewrites entry `i` of locked leaf `leaf` (READ into `view`: a neighbourhood or a whole
    /// leaf) as (k, v) with its entry-level version bumped, unlocking the leaf in the same WRITE.
    pub(crate) async fn update_in_place<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        view: &mut impl LeafView,
        i: usize,
        k: u64,
        v: [u8; 8],
    ) -> IndexResult<()> {
        view.set_entry(i, k, v);
        view.bump_ev(i);
        let lw = leaf.lw;
        self.write_back(c, leaf, view, (i, 1), lw).await
    }

    /// WRITEs a split's halves, each a whole-leaf image (lock word `lw`, upper bound `bound`)
    /// encoded into its buffer's READ scratch: the new right sibling at `right_addr` first, then
    /// the left half over locked leaf `leaf`, whose image unlocks it ([`write_split`]: one
    /// doorbell when both live on one memory node). The local slot goes before the parent's is
    /// taken.
    pub(crate) async fn write_halves<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'_>,
        (right_addr, right, right_lw, right_bound): (GlobalAddr, &mut LeafBuf, LockWord, u64),
        (left, left_lw, left_bound): (&mut LeafBuf, LockWord, u64),
    ) -> IndexResult<()> {
        let (mut right_img, mut left_img) =
            (std::mem::take(&mut right.raw), std::mem::take(&mut left.raw));
        self.leaf_image_into(right, right_lw, right_bound, &mut right_img);
        self.leaf_image_into(left, left_lw, left_bound, &mut left_img);
        let written = write_split(c, (right_addr, &right_img), (leaf.addr, &left_img)).await;
        (right.raw, left.raw) = (right_img, left_img);
        leaf.held.released_by(written)
    }

    /// The physical image of a whole leaf: versioned bytes, pad, lock word, upper bound.
    pub(crate) fn leaf_image(&self, buf: &LeafBuf, lw: LockWord, bound: u64) -> Vec<u8> {
        let mut out = Vec::new();
        self.leaf_image_into(buf, lw, bound, &mut out);
        out
    }

    /// [`Tree::leaf_image`] into `out` (cleared first; a reused scratch allocates nothing).
    pub(crate) fn leaf_image_into(
        &self,
        buf: &LeafBuf,
        lw: LockWord,
        bound: u64,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        cacheline::encode(&self.leaf, &buf.bytes, 0, self.leaf.decoded(), out);
        out.resize(self.leaf.lock_offset(), 0);
        out.extend_from_slice(&lw.encode(&self.leaf).to_le_bytes());
        out.extend_from_slice(&bound.to_be_bytes());
    }
}

/// Grows scratch `raw` to at least `n` bytes and never shrinks it: a pooled buffer is zeroed
/// only when it first grows, not on every READ and WRITE (what is read or written of it is
/// always overwritten first).
pub(super) fn at_least(raw: &mut Vec<u8>, n: usize) {
    if raw.len() < n {
        raw.resize(n, 0);
    }
}

/// Pieces of a leaf to WRITE in order: (physical offset, bytes in the buffer's scratch). At most
/// two entry ranges (one wraps) and the lock word.
pub(crate) type WritePlan = ArrayVec<(usize, std::ops::Range<usize>), 3>;

/// A leaf buffer borrowed from a compute node's pool (see [`Tree::leaf_buf`]).
pub(crate) type PooledLeaf<'t> = Pooled<'t, LeafBuf>;

/// READs of a leaf's physical `pieces` (offset, length), landing back to back in `raw`: one
/// doorbell (a lone piece is posted as a plain READ).
pub(crate) async fn read_pieces<T: Transport>(
    c: &Client<T>,
    leaf: GlobalAddr,
    pieces: impl ExactSizeIterator<Item = (usize, usize)>,
    raw: &mut [u8],
) -> IndexResult<()> {
    if pieces.len() == 1 {
        // One piece (most neighbourhoods and most inserts' READs): the READ itself. Going
        // through doorbell::post's own one-verb case costs ~250 instructions a search more
        // (callgrind).
        let (p0, n) = pieces.into_iter().next().expect("one piece");
        return Ok(c.read(leaf.add(p0 as u64), &mut raw[..n]).await?);
    }
    let mut reads: ArrayVec<BatchOp<'_>, 3> = ArrayVec::new();
    let mut rest = raw;
    for (p0, n) in pieces {
        let (piece, tail) = rest.split_at_mut(n);
        reads.push(BatchOp::Read { addr: leaf.add(p0 as u64), buf: piece });
        rest = tail;
    }
    doorbell::post(c, &mut reads).await
}
