//! CHIME's operations over remote nodes. See the crate docs for the protocol.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::{layout as mn, BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::cacheline::{self, phys_range};
use dmindex_index::hash::mix64;
use dmindex_index::{IndexError, IndexResult};

use crate::hotspot::Hotspots;
use crate::internal::{Internal, NodeCache};
use crate::layout::{InternalLayout, LeafLayout, LockWord, LOCK_BIT};
use crate::leaf::{home, Hop, LeafBuf};

/// Where a key's leaf was found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Located {
    pub leaf: GlobalAddr,
    /// The leaf's sibling as its parent knows it (null for the rightmost leaf).
    pub expected: GlobalAddr,
    /// The cached parent that produced it, if it came from the cache: (low fence, address).
    pub cached: Option<(u64, GlobalAddr)>,
    /// The parent's address, when known.
    pub parent: Option<GlobalAddr>,
}

/// Root word in the root-table slot: height (levels, 1 = the root is a leaf) in the top byte,
/// then the root's memory node (8 bits) and offset (48 bits).
pub(crate) fn root_word(height: u8, a: GlobalAddr) -> u64 {
    (height as u64) << 56 | (a.node() as u64) << 48 | a.offset()
}

/// The height and root address a root word holds.
pub(crate) fn parse_root(w: u64) -> (u8, GlobalAddr) {
    ((w >> 56) as u8, GlobalAddr::new(((w >> 48) & 0xFF) as u16, w & ((1 << 48) - 1)))
}

/// The tree's remote shape and CN-side state.
pub(crate) struct Tree {
    pub leaf: LeafLayout,
    pub inner: InternalLayout,
    pub root_slot: GlobalAddr,
    /// Vacancy-bitmap piggybacking: off, the bitmap is READ separately after locking.
    pub vacancy: bool,
    pub cache: NodeCache,
    /// The CN-local lock table.
    pub local_locks: Box<[futures::lock::Mutex<()>]>,
    /// The hotspot buffer, when speculative reads are on.
    pub hotspots: Option<Hotspots>,
    pub retries: AtomicU64,
    /// Leaf splits by this CN.
    pub splits: AtomicU64,
    /// Keys the leaves held when they split (hopscotch leaves: when the hop failed).
    pub keys_at_split: AtomicU64,
}

/// A held slot of the CN-local lock table.
pub(crate) type LocalGuard<'a> = futures::lock::MutexGuard<'a, ()>;

/// A leaf under this client's lock: its address, the lock word the locking CAS returned
/// (vacancy bitmap and argmax), and the slot of the CN-local lock table held with it, released
/// when this is dropped (right after the remote unlock).
pub(crate) struct LockedLeaf<'t> {
    pub addr: GlobalAddr,
    pub lw: LockWord,
    pub guard: LocalGuard<'t>,
}

/// Slots in each compute node's local lock table.
pub(crate) const LOCAL_LOCKS: usize = 4096;

/// How an operation recognises its key among entries whose 8-byte key field matches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Probe<'a> {
    /// The 8-byte field is the whole key.
    Exact,
    /// The field is the key's first 8 bytes; the full key is in the block the value slot points
    /// to (`[key length u32][value length u32][key][value]`).
    Full(&'a [u8]),
}

/// Where a validated READ of a leaf that lacks the key says the key lives.
pub(crate) enum Where {
    /// Nowhere: the leaf covers the key.
    Absent,
    /// Further right (half split).
    Right(GlobalAddr),
    /// The path was stale: drop the cached parent and start over.
    Stale,
}

/// What an insert attempt on one leaf did.
pub(crate) enum Attempt {
    /// The key is in place.
    Done,
    /// Move right to this leaf (half split: the key is beyond this leaf's bound).
    Right(GlobalAddr),
    /// Start over from the root (stale cache, or a split that did not place the key).
    Restart,
}

/// One insert (upsert) as a descent found it: the key's 8-byte field and probe, the value slot
/// to write, and where its leaf was found. Each attempt on a leaf, and a split, reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Insert<'p> {
    pub k: u64,
    pub v: [u8; 8],
    pub probe: Probe<'p>,
    pub loc: Located,
}

impl Tree {
    fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    fn lock_addr(&self, leaf: GlobalAddr) -> GlobalAddr {
        leaf.add(self.leaf.lock_offset() as u64)
    }

    /// This compute node's local lock for remote lock word `a` (Sherman's local lock table):
    /// clients of one CN queue here, so at most one of them spins on the remote word.
    fn local_lock(&self, a: GlobalAddr) -> &futures::lock::Mutex<()> {
        &self.local_locks[(mix64(a.raw()) % self.local_locks.len() as u64) as usize]
    }

    /// Acquires a leaf's lock with one masked CAS that also returns the vacancy bitmap and argmax.
    /// The returned [`LockedLeaf`] holds the CN-local lock: drop it right after the remote
    /// unlock, and never hold it while taking another lock (table slots are shared by hashing).
    pub(crate) async fn lock_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<LockedLeaf<'_>> {
        let guard = self.local_lock(self.lock_addr(leaf)).lock().await;
        loop {
            let old = c.masked_cas(self.lock_addr(leaf), 0, LOCK_BIT, LOCK_BIT, LOCK_BIT).await?;
            if old & LOCK_BIT == 0 {
                let lw = LockWord::decode(&self.leaf, old);
                return Ok(LockedLeaf { addr: leaf, lw, guard });
            }
            self.retry();
        }
    }

    /// Locks a hopscotch leaf ([`Tree::lock_leaf`]) and gets its vacancy bitmap: from the lock
    /// CAS, or without vacancy-bitmap piggybacking from a READ of its own right after it.
    async fn lock_hopscotch_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
    ) -> IndexResult<LockedLeaf<'_>> {
        let mut locked = self.lock_leaf(c, leaf).await?;
        if !self.vacancy {
            // Without piggybacking the lock CAS is used as a plain lock and the vacancy
            // bitmap costs its own READ (it shares the word here; the cost is the same).
            let w = c.read_word(self.lock_addr(leaf)).await? & !LOCK_BIT;
            locked.lw = LockWord::decode(&self.leaf, w);
        }
        Ok(locked)
    }

    /// Releases a leaf's remote lock: one WRITE of lock word `lw` (vacancy bitmap and argmax)
    /// with the lock bit clear.
    pub(crate) async fn unlock_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        lw: LockWord,
    ) -> IndexResult<()> {
        let w = LockWord { locked: false, ..lw }.encode(&self.leaf);
        Ok(c.write(self.lock_addr(leaf), &w.to_le_bytes()).await?)
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
        let mut bufs: Vec<Vec<u8>> = ranges
            .iter()
            .map(|&(d0, d1)| {
                let (p0, p1) = phys_range(d0, d1);
                vec![0u8; p1 - p0]
            })
            .collect();
        if bufs.len() == 1 {
            let (p0, _) = phys_range(ranges[0].0, ranges[0].1);
            c.read(leaf.add(p0 as u64), &mut bufs[0]).await?;
        } else {
            let mut ops: Vec<BatchOp<'_>> = ranges
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(d0, d1), b)| BatchOp::Read {
                    addr: leaf.add(phys_range(d0, d1).0 as u64),
                    buf: b,
                })
                .collect();
            c.batch(&mut ops).await?;
        }
        for (&(d0, d1), b) in ranges.iter().zip(&bufs) {
            if buf.absorb(d0, d1, b).is_err() {
                return Ok(false);
            }
        }
        Ok(buf.validate().is_ok())
    }

    /// READs slots `lo .. lo + n` of a leaf until the READ validates.
    pub(crate) async fn read_slots<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        lo: usize,
        n: usize,
    ) -> IndexResult<LeafBuf> {
        loop {
            let mut buf = LeafBuf::new(self.leaf);
            let ranges = buf.ranges(lo, n);
            if self.read_into(c, leaf, &mut buf, &ranges).await? {
                return Ok(buf);
            }
            self.retry();
        }
    }

    /// Reads the root word.
    async fn root<T: Transport>(&self, c: &Client<T>) -> IndexResult<(u8, GlobalAddr)> {
        let w = c.read_word(self.root_slot).await?;
        let (h, a) = parse_root(w);
        if h == 0 || a.is_null() {
            return Err(IndexError::Corrupt(format!("root word {w:#x}")));
        }
        Ok((h, a))
    }

    /// READs an internal node until it validates, and caches it.
    async fn read_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<Internal> {
        let mut b = vec![0u8; self.inner.physical()];
        for _ in 0..1_000_000 {
            c.read(addr, &mut b).await?;
            if let Ok(n) = Internal::decode(&self.inner, &b) {
                if n.level == 0 {
                    return Err(IndexError::Corrupt(format!(
                        "internal node at {addr} has level 0"
                    )));
                }
                self.cache.insert(addr, n.clone());
                return Ok(n);
            }
            self.retry();
        }
        Err(IndexError::Corrupt(format!("internal node at {addr} never read consistently")))
    }

    /// Finds the leaf for `k`: the cached parent if any, else a remote traversal from the deepest
    /// cached node above (or the root).
    pub(crate) async fn locate<T: Transport>(&self, c: &Client<T>, k: u64) -> IndexResult<Located> {
        if let Some(p) = self.cache.lookup(1, k) {
            let (leaf, expected) = p.node.child_for(k);
            return Ok(Located {
                leaf,
                expected,
                cached: Some((p.node.low, p.addr)),
                parent: Some(p.addr),
            });
        }
        let mut from_cache = self.cache.deepest(k).filter(|n| n.node.level >= 2);
        'restart: loop {
            let mut addr = match from_cache.take() {
                Some(n) => n.node.child_for(k).0,
                None => {
                    let (height, root) = self.root(c).await?;
                    if height == 1 {
                        return Ok(Located {
                            leaf: root,
                            expected: GlobalAddr::NULL,
                            cached: None,
                            parent: None,
                        });
                    }
                    root
                }
            };
            loop {
                let n = self.read_internal(c, addr).await?;
                if k > n.high && !n.sibling.is_null() {
                    addr = n.sibling;
                    continue;
                }
                if k < n.low {
                    self.retry();
                    continue 'restart;
                }
                let (child, expected) = n.child_for(k);
                if n.level == 1 {
                    return Ok(Located { leaf: child, expected, cached: None, parent: Some(addr) });
                }
                addr = child;
            }
        }
    }

    /// Where `k`, absent from validated READ `buf` of a leaf reached through `loc`, lives:
    /// sibling-based validation compares the sibling with the one the parent expects; with
    /// fence keys (sibling-based validation off) the key must lie within them.
    pub(crate) fn judge(&self, loc: &Located, buf: &LeafBuf, k: u64) -> Where {
        let (sib, _) = buf.meta().expect("validated read has a replica");
        if self.leaf.kind.fenced {
            let (low, high) = buf.fences().expect("validated read has a replica");
            return if (low..=high).contains(&k) {
                Where::Absent
            } else if loc.cached.is_none() && k > high && !sib.is_null() {
                Where::Right(sib)
            } else {
                Where::Stale
            };
        }
        if sib == loc.expected {
            Where::Absent
        } else if loc.cached.is_some() {
            Where::Stale
        } else if sib.is_null() {
            Where::Absent
        } else {
            Where::Right(sib)
        }
    }

    /// Drops the cached parent that led to a stale leaf, if it came from the cache, and counts
    /// a retry.
    pub(crate) fn invalidate(&self, loc: &Located) {
        if let Some((low, addr)) = loc.cached {
            self.cache.invalidate(1, low, addr);
        }
        self.retry();
    }

    /// The slot of the probed key in home `h`'s neighbourhood of hopscotch leaf `buf` (loaded).
    async fn resolve<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &LeafBuf,
        h: usize,
        k: u64,
        probe: Probe<'_>,
    ) -> IndexResult<Option<usize>> {
        let Probe::Full(full) = probe else { return Ok(buf.find(h, k)) };
        let span = self.leaf.span;
        self.resolve_long(c, buf, (0..self.leaf.h).map(|d| (h + d) % span), k, full).await
    }

    /// Long keys: the slot among `slots` (loaded) whose entry holds prefix `k` and whose block
    /// holds the full key. The blocks of entries sharing the prefix are read (immutable once
    /// published, so any READ of them is consistent with the validated leaf READ that named
    /// them).
    pub(crate) async fn resolve_long<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &LeafBuf,
        slots: impl IntoIterator<Item = usize>,
        k: u64,
        full: &[u8],
    ) -> IndexResult<Option<usize>> {
        for i in slots {
            if buf.key(i) != k {
                continue;
            }
            let block = GlobalAddr::from_raw(u64::from_le_bytes(buf.value(i)));
            let b = c.read_vec(block, 8 + full.len()).await?;
            let klen = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
            if klen == full.len() && &b[8..] == full {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Hotness-aware speculative read: READ only the hottest buffered slot of k's neighbourhood
    /// whose fingerprint matches; a whole entry holding k is k's value at that instant (see
    /// [`crate::hotspot`]). Long keys are not speculated on (their blocks would need reading).
    async fn speculate<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        h: usize,
        k: u64,
        probe: Probe<'_>,
    ) -> IndexResult<Option<[u8; 8]>> {
        let (Some(hs), Probe::Exact) = (&self.hotspots, probe) else { return Ok(None) };
        let Some(slot) = hs.best(leaf, (0..self.leaf.h).map(|d| (h + d) % self.leaf.span), k)
        else {
            return Ok(None);
        };
        hs.attempts.fetch_add(1, Ordering::Relaxed);
        let d0 = self.leaf.entry(slot);
        let d1 = d0 + self.leaf.entry_len;
        let (p0, p1) = phys_range(d0, d1);
        let raw = c.read_vec(leaf.add(p0 as u64), p1 - p0).await?;
        let mut buf = LeafBuf::new(self.leaf);
        if buf.absorb(d0, d1, &raw).is_ok() && buf.key(slot) == k {
            hs.hits.fetch_add(1, Ordering::Relaxed);
            hs.touch(leaf, slot, k);
            return Ok(Some(buf.value(slot)));
        }
        hs.forget(leaf, slot);
        Ok(None)
    }

    /// Search: neighbourhood READ, three-level validation, sibling-based validation.
    async fn hopscotch_search<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        probe: Probe<'_>,
    ) -> IndexResult<Option<[u8; 8]>> {
        let (s, hh) = (self.leaf.span, self.leaf.h);
        let h = home(k, s);
        'outer: loop {
            let loc = self.locate(c, k).await?;
            let mut cur = loc.leaf;
            if let Some(v) = self.speculate(c, cur, h, k, probe).await? {
                return Ok(Some(v));
            }
            loop {
                let buf = self.read_slots(c, cur, h, hh).await?;
                if let Some(i) = self.resolve(c, &buf, h, k, probe).await? {
                    if let Some(hs) = &self.hotspots {
                        hs.touch(cur, i, k);
                    }
                    return Ok(Some(buf.value(i)));
                }
                if buf.status(h) != buf.bitmap(h) {
                    // A hop is in flight: what we read is an intermediate state.
                    self.retry();
                    continue;
                }
                match self.judge(&loc, &buf, k) {
                    Where::Absent => return Ok(None),
                    Where::Stale => {
                        self.invalidate(&loc);
                        continue 'outer;
                    }
                    // Half split: the key may have moved right.
                    Where::Right(sib) => cur = sib,
                }
            }
        }
    }

    /// With fence keys: `None` if insert `ins`'s key lies within the fences of `leaf` (locked,
    /// READ into `buf`), else what to do next (the leaf is unlocked).
    pub(crate) async fn outside_fences<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: &LockedLeaf<'_>,
        buf: &LeafBuf,
    ) -> IndexResult<Option<Attempt>> {
        let next = match self.judge(&ins.loc, buf, ins.k) {
            Where::Absent => return Ok(None),
            Where::Right(sib) => {
                self.retry();
                Attempt::Right(sib)
            }
            Where::Stale => {
                self.invalidate(&ins.loc);
                Attempt::Restart
            }
        };
        self.unlock_leaf(c, leaf.addr, leaf.lw).await?;
        Ok(Some(next))
    }

    /// Whether `k` belongs to locked leaf `leaf` (READ into `buf`) although its sibling is not
    /// the expected one: yes if it is at most a key the leaf holds (argmax, when read) or at
    /// most its upper bound.
    async fn belongs<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: &LockedLeaf<'_>,
        buf: &LeafBuf,
        k: u64,
    ) -> IndexResult<bool> {
        let lw = &leaf.lw;
        if lw.argmax < self.leaf.span && buf.is_loaded(lw.argmax) {
            let m = buf.key(lw.argmax);
            if m != 0 && k <= m {
                return Ok(true);
            }
        }
        Ok(k <= self.read_bound(c, leaf.addr).await?)
    }

    /// READs a leaf's inclusive upper bound (big-endian, at the rear).
    async fn read_bound<T: Transport>(&self, c: &Client<T>, leaf: GlobalAddr) -> IndexResult<u64> {
        let b = c.read_vec(leaf.add(self.leaf.bound_offset() as u64), 8).await?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    /// Physical bytes and addresses to WRITE for slots `lo .. lo + n`, plus the unlocking lock
    /// word, as (offset, bytes) pieces in write order. The lock word joins the last piece when
    /// it ends at the leaf's last slot.
    pub(crate) fn write_plan(
        &self,
        buf: &LeafBuf,
        lo: usize,
        n: usize,
        lw: LockWord,
    ) -> Vec<(usize, Vec<u8>)> {
        let mut pieces = Vec::new();
        for (d0, d1) in buf.write_ranges(lo, n) {
            let mut out = Vec::new();
            cacheline::encode(&self.leaf, &buf.bytes, d0, d1, &mut out);
            pieces.push((phys_range(d0, d1).0, out));
        }
        let word = LockWord { locked: false, ..lw }.encode(&self.leaf).to_le_bytes();
        let lock_at = self.leaf.lock_offset();
        let last = pieces.last_mut().expect("at least one range");
        if last.0 + last.1.len() == self.leaf.physical() {
            last.1.resize(lock_at - last.0, 0);
            last.1.extend_from_slice(&word);
        } else {
            pieces.push((lock_at, word.to_vec()));
        }
        pieces
    }

    /// Rewrites entry `i` of locked leaf `leaf` (READ into `buf`) as (k, v) with its
    /// entry-level version bumped, unlocking the leaf in the same WRITE.
    pub(crate) async fn update_in_place<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: &LockedLeaf<'_>,
        buf: &mut LeafBuf,
        i: usize,
        k: u64,
        v: [u8; 8],
    ) -> IndexResult<()> {
        buf.set_entry(i, k, v);
        buf.bump_ev(i);
        let pieces = self.write_plan(buf, i, 1, leaf.lw);
        self.write_pieces(c, leaf.addr, &pieces).await
    }

    /// A new leaf for splitting locked leaf `cur`; out of memory leaves `cur` as it was,
    /// unlocked, and reports.
    pub(crate) async fn alloc_split_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        cur: GlobalAddr,
        lw: LockWord,
    ) -> IndexResult<GlobalAddr> {
        match c.alloc(self.leaf.alloc() as u64, 64).await {
            Ok(a) => Ok(a),
            Err(e) => {
                self.unlock_leaf(c, cur, lw).await?;
                Err(e.into())
            }
        }
    }

    /// WRITEs pieces to a leaf in order, as one doorbell batch.
    pub(crate) async fn write_pieces<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        pieces: &[(usize, Vec<u8>)],
    ) -> IndexResult<()> {
        if pieces.len() == 1 {
            c.write(leaf.add(pieces[0].0 as u64), &pieces[0].1).await?;
        } else {
            let mut ops: Vec<BatchOp<'_>> = pieces
                .iter()
                .map(|(o, b)| BatchOp::Write { addr: leaf.add(*o as u64), data: b })
                .collect();
            c.batch(&mut ops).await?;
        }
        Ok(())
    }

    /// The slots `modified` (all within `h ..` circularly) as (lo, n).
    fn span_of(&self, buf: &LeafBuf, h: usize, modified: &[usize]) -> (usize, usize) {
        let first = modified.iter().map(|&i| buf.dist(h, i)).min().expect("non-empty");
        let last = modified.iter().map(|&i| buf.dist(h, i)).max().expect("non-empty");
        ((h + first) % buf.span(), last - first + 1)
    }

    /// One insert attempt on hopscotch leaf `cur`: lock, READ from k's home bucket to the first
    /// bucket with a vacancy, validate, then update in place, hop the key in, or split.
    async fn hopscotch_insert_at<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        cur: GlobalAddr,
    ) -> IndexResult<Attempt> {
        let (s, hh) = (self.leaf.span, self.leaf.h);
        let Insert { k, v, probe, .. } = *ins;
        let loc = &ins.loc;
        let h = home(k, s);
        let leaf = self.lock_hopscotch_leaf(c, cur).await?;
        let lw = leaf.lw;
        // Read whole buckets from h's bucket to the first bucket with a vacancy, at least the
        // neighbourhood; everything if no bucket has one.
        let lo = self.leaf.bucket_slots(self.leaf.bucket(h)).0;
        let plan = LeafBuf::new(self.leaf);
        let n = match plan.first_vacant_bucket_slot(lw.full, h) {
            None => s,
            Some(e) => {
                let last = self.leaf.bucket_slots(self.leaf.bucket(e)).1;
                plan.dist(lo, h) + (plan.dist(h, last) + 1).max(hh)
            }
        };
        let mut buf = self.read_slots(c, cur, lo, n).await?;
        let (sib, _) = buf.meta().expect("validated read has a replica");
        if self.leaf.kind.fenced {
            if let Some(a) = self.outside_fences(c, ins, &leaf, &buf).await? {
                return Ok(a);
            }
        } else if sib != loc.expected {
            if loc.cached.is_some() {
                self.unlock_leaf(c, cur, lw).await?;
                self.invalidate(loc);
                return Ok(Attempt::Restart);
            }
            if !sib.is_null() && !self.belongs(c, &leaf, &buf, k).await? {
                self.unlock_leaf(c, cur, lw).await?;
                self.retry();
                return Ok(Attempt::Right(sib));
            }
        }
        if let Some(i) = self.resolve(c, &buf, h, k, probe).await? {
            self.update_in_place(c, &leaf, &mut buf, i, k, v).await?;
            return Ok(Attempt::Done);
        }
        let am_key = (lw.argmax < s && buf.is_loaded(lw.argmax)).then(|| buf.key(lw.argmax));
        let mut outcome = buf.hop_insert(k, v);
        if outcome == Hop::NoEmpty && n < s {
            buf = self.read_slots(c, cur, 0, s).await?;
            outcome = buf.hop_insert(k, v);
        }
        match outcome {
            Hop::Done(modified) => {
                // Lazy argmax: the new key if larger (or the slot was empty); follow a hopped max.
                let argmax = match am_key {
                    Some(m) if m == 0 || k > m => buf.find(h, k).expect("just inserted"),
                    Some(m) if buf.key(lw.argmax) != m => {
                        buf.find(home(m, s), m).unwrap_or(lw.argmax)
                    }
                    _ => lw.argmax,
                };
                let new = LockWord { locked: false, full: buf.vacancy(lw.full), argmax };
                let (wlo, wn) = self.span_of(&buf, h, &modified);
                let pieces = self.write_plan(&buf, wlo, wn, new);
                self.write_pieces(c, cur, &pieces).await?;
                Ok(Attempt::Done)
            }
            Hop::NoEmpty | Hop::NoHop => {
                if !buf.all_loaded() {
                    buf = self.read_slots(c, cur, 0, s).await?;
                }
                let placed = self.split_leaf(c, ins, leaf, buf).await?;
                Ok(if placed { Attempt::Done } else { Attempt::Restart })
            }
        }
    }

    /// Writes a split's new right node, then the split node that points to it (and whose
    /// image unlocks it): one doorbell when both live on one memory node.
    pub(crate) async fn write_split<T: Transport>(
        &self,
        c: &Client<T>,
        (right, right_img): (GlobalAddr, &[u8]),
        (left, left_img): (GlobalAddr, &[u8]),
    ) -> IndexResult<()> {
        if right.node() == left.node() {
            c.batch(&mut [
                BatchOp::Write { addr: right, data: right_img },
                BatchOp::Write { addr: left, data: left_img },
            ])
            .await?;
        } else {
            c.write(right, right_img).await?;
            c.write(left, left_img).await?;
        }
        Ok(())
    }

    /// The physical image of a whole leaf: versioned bytes, pad, lock word, upper bound.
    pub(crate) fn leaf_image(&self, buf: &LeafBuf, lw: LockWord, bound: u64) -> Vec<u8> {
        let mut out = Vec::new();
        cacheline::encode(&self.leaf, &buf.bytes, 0, self.leaf.decoded(), &mut out);
        out.resize(self.leaf.lock_offset(), 0);
        out.extend_from_slice(&LockWord { locked: false, ..lw }.encode(&self.leaf).to_le_bytes());
        out.extend_from_slice(&bound.to_be_bytes());
        out
    }

    /// Splits locked leaf `leaf` (wholly read in `buf`) and tries to place `k` on the proper side.
    /// The split key is the median of the critical keys — the run of keys from k's home to the
    /// first empty slot, which the hop could not get past — together with k. Keys above the left
    /// half's maximum move to a new right sibling at the same slots. Returns whether k was placed.
    async fn split_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        ins: &Insert<'_>,
        leaf: LockedLeaf<'_>,
        mut buf: LeafBuf,
    ) -> IndexResult<bool> {
        let Insert { k, v, .. } = *ins;
        let LockedLeaf { addr: cur, lw, guard } = leaf;
        let s = self.leaf.span;
        let h = home(k, s);
        let mut crit: Vec<u64> =
            (0..s).map(|d| buf.key((h + d) % s)).take_while(|&x| x != 0).collect();
        let all: Vec<u64> = (0..s).map(|i| buf.key(i)).filter(|&x| x != 0).collect();
        if crit.len() < 2 {
            crit = all.clone();
        }
        crit.push(k);
        crit.sort_unstable();
        let mut split = crit[crit.len() / 2];
        if !all.iter().any(|&x| x < split) {
            let mut sorted = all.clone();
            sorted.sort_unstable();
            split = sorted[sorted.len() / 2].max(sorted[0] + 1);
        }
        let left_max =
            all.iter().copied().filter(|&x| x < split).max().expect("left half is not empty");
        if k <= left_max && all.iter().all(|&x| x <= left_max) {
            // Nothing can move: every key shares k's side, so only duplicate 8-byte prefixes
            // (long keys) can be crowding the neighbourhood, and splits cannot separate them.
            self.unlock_leaf(c, cur, lw).await?;
            return Err(IndexError::Full(format!(
                "more than {} keys of one leaf share the 8-byte prefix {k:016x}; CHIME cannot \
                 separate them (paper §4.5)",
                self.leaf.h
            )));
        }
        self.splits.fetch_add(1, Ordering::Relaxed);
        self.keys_at_split.fetch_add(all.len() as u64, Ordering::Relaxed);
        let (old_sib, _) = buf.meta().expect("whole leaf");
        let (low, old_bound) = match buf.fences() {
            Some(f) => f,
            None => (0, self.read_bound(c, cur).await?),
        };
        let right_addr = self.alloc_split_leaf(c, cur, lw).await?;
        let mut right = LeafBuf::empty(self.leaf);
        for i in 0..s {
            let x = buf.key(i);
            if x > left_max {
                right.set_entry(i, x, buf.value(i));
                buf.set_entry(i, 0, [0; 8]);
            }
        }
        buf.rebuild_bitmaps();
        right.rebuild_bitmaps();
        right.set_sibling(old_sib);
        buf.set_sibling(right_addr);
        if self.leaf.kind.fenced {
            right.set_fences(left_max + 1, old_bound);
            buf.set_fences(low, left_max);
        }
        buf.bump_node_version();
        let placed = if k <= left_max { buf.hop_insert(k, v) } else { right.hop_insert(k, v) };
        let lock_of = |b: &LeafBuf| LockWord {
            locked: false,
            full: b.vacancy(0),
            argmax: b.argmax().unwrap_or(0),
        };
        let right_img = self.leaf_image(&right, lock_of(&right), old_bound);
        let left_img = self.leaf_image(&buf, lock_of(&buf), left_max);
        self.write_split(c, (right_addr, &right_img), (cur, &left_img)).await?;
        // The leaf is unlocked: release the local lock before taking the parent's.
        drop(guard);
        self.insert_internal(c, 1, left_max + 1, right_addr, ins.loc.parent).await?;
        Ok(matches!(placed, Hop::Done(_)))
    }

    async fn lock_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<LocalGuard<'_>> {
        let lock = addr.add(self.inner.lock_offset() as u64);
        let guard = self.local_lock(lock).lock().await;
        while c.masked_cas(lock, 0, LOCK_BIT, LOCK_BIT, LOCK_BIT).await? & LOCK_BIT != 0 {
            self.retry();
        }
        Ok(guard)
    }

    async fn unlock_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<()> {
        Ok(c.write(addr.add(self.inner.lock_offset() as u64), &0u64.to_le_bytes()).await?)
    }

    /// The node at `level` whose range holds `key`, or the root word if the tree is not that tall.
    async fn find_level<T: Transport>(
        &self,
        c: &Client<T>,
        level: u8,
        key: u64,
    ) -> IndexResult<Result<GlobalAddr, (u8, GlobalAddr)>> {
        let (height, root) = self.root(c).await?;
        if height <= level {
            return Ok(Err((height, root)));
        }
        let mut addr = root;
        loop {
            let n = self.read_internal(c, addr).await?;
            if key > n.high && !n.sibling.is_null() {
                addr = n.sibling;
            } else if n.level == level {
                return Ok(Ok(addr));
            } else {
                addr = n.child_for(key).0;
            }
        }
    }

    /// Inserts separator `pivot` → `child` at `level` (Sherman-style up-propagation: lock, read,
    /// move right past a concurrent split, insert, split in turn if full, grow the root by CAS).
    pub(crate) async fn insert_internal<T: Transport>(
        &self,
        c: &Client<T>,
        mut level: u8,
        mut pivot: u64,
        mut child: GlobalAddr,
        mut hint: Option<GlobalAddr>,
    ) -> IndexResult<()> {
        loop {
            let addr = match hint.take() {
                Some(a) => a,
                None => match self.find_level(c, level, pivot).await? {
                    Ok(a) => a,
                    Err((height, root)) => {
                        let new_root = Internal {
                            version: 0,
                            level,
                            valid: true,
                            sibling: GlobalAddr::NULL,
                            leftmost: root,
                            sibling_leftmost: GlobalAddr::NULL,
                            low: 0,
                            high: u64::MAX,
                            entries: vec![(pivot, child)],
                        };
                        let a = c.alloc(self.inner.alloc() as u64, 64).await?;
                        c.write(a, &new_root.physical_with_lock(&self.inner)).await?;
                        let old = root_word(height, root);
                        if c.cas(self.root_slot, old, root_word(height + 1, a)).await? == old {
                            self.cache.insert(a, new_root);
                            return Ok(());
                        }
                        self.retry();
                        continue;
                    }
                },
            };
            let _guard = self.lock_internal(c, addr).await?;
            let node = self.read_internal(c, addr).await?;
            if node.level != level || pivot < node.low {
                self.unlock_internal(c, addr).await?;
                self.retry();
                continue;
            }
            if pivot > node.high {
                self.unlock_internal(c, addr).await?;
                hint = (!node.sibling.is_null()).then_some(node.sibling);
                continue;
            }
            if node.entries.iter().any(|&(p, _)| p == pivot) {
                self.unlock_internal(c, addr).await?;
                return Ok(());
            }
            let mut node = node.bumped();
            let at = node.entries.partition_point(|&(p, _)| p < pivot);
            node.entries.insert(at, (pivot, child));
            if node.entries.len() <= self.inner.span {
                c.write(addr, &node.physical_with_lock(&self.inner)).await?;
                self.cache.insert(addr, node);
                return Ok(());
            }
            let m = node.entries.len() / 2;
            let (sep, mid) = node.entries[m];
            let right = Internal {
                version: 0,
                level,
                valid: true,
                sibling: node.sibling,
                leftmost: mid,
                sibling_leftmost: node.sibling_leftmost,
                low: sep,
                high: node.high,
                entries: node.entries[m + 1..].to_vec(),
            };
            let right_addr = match c.alloc(self.inner.alloc() as u64, 64).await {
                Ok(a) => a,
                Err(e) => {
                    self.unlock_internal(c, addr).await?;
                    return Err(e.into());
                }
            };
            node.entries.truncate(m);
            node.high = sep - 1;
            node.sibling = right_addr;
            node.sibling_leftmost = mid;
            let (ri, li) =
                (right.physical_with_lock(&self.inner), node.physical_with_lock(&self.inner));
            self.write_split(c, (right_addr, &ri), (addr, &li)).await?;
            self.cache.insert(right_addr, right);
            self.cache.insert(addr, node);
            level += 1;
            pivot = sep;
            child = right_addr;
        }
    }

    /// Update (`Some(v)`: the entry rewritten in place) or delete (`None`: the entry, its home's
    /// hop bit and its vacancy bit cleared) under the leaf's lock; returns whether the key
    /// existed.
    async fn hopscotch_modify<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        v: Option<[u8; 8]>,
        probe: Probe<'_>,
    ) -> IndexResult<bool> {
        let (s, hh) = (self.leaf.span, self.leaf.h);
        let h = home(k, s);
        'outer: loop {
            let loc = self.locate(c, k).await?;
            let mut cur = loc.leaf;
            loop {
                let leaf = self.lock_hopscotch_leaf(c, cur).await?;
                let mut buf = self.read_slots(c, cur, h, hh).await?;
                if let Some(i) = self.resolve(c, &buf, h, k, probe).await? {
                    if let (Some(hs), Some(_)) = (&self.hotspots, v) {
                        hs.touch(cur, i, k);
                    }
                    match v {
                        Some(v) => self.update_in_place(c, &leaf, &mut buf, i, k, v).await?,
                        None => {
                            let modified = buf.remove(h, i);
                            let full = leaf.lw.full & !(1 << self.leaf.bucket(i));
                            let (wlo, wn) = self.span_of(&buf, h, &modified);
                            let lw = LockWord { full, ..leaf.lw };
                            let pieces = self.write_plan(&buf, wlo, wn, lw);
                            self.write_pieces(c, cur, &pieces).await?;
                        }
                    }
                    return Ok(true);
                }
                self.unlock_leaf(c, cur, leaf.lw).await?;
                match self.judge(&loc, &buf, k) {
                    Where::Absent => return Ok(false),
                    Where::Stale => {
                        self.invalidate(&loc);
                        continue 'outer;
                    }
                    Where::Right(sib) => {
                        self.retry();
                        cur = sib;
                    }
                }
            }
        }
    }

    /// READs whole leaves (one doorbell when they share a memory node, else one READ each),
    /// re-reading each until it validates and no hop is in flight in it.
    async fn read_leaves<T: Transport>(
        &self,
        c: &Client<T>,
        leaves: &[GlobalAddr],
    ) -> IndexResult<Vec<LeafBuf>> {
        let whole = self.leaf.physical();
        let mut raw: Vec<Vec<u8>> = leaves.iter().map(|_| vec![0u8; whole]).collect();
        if leaves.len() > 1 && leaves.iter().all(|a| a.node() == leaves[0].node()) {
            let mut ops: Vec<BatchOp<'_>> = leaves
                .iter()
                .zip(raw.iter_mut())
                .map(|(a, b)| BatchOp::Read { addr: *a, buf: b })
                .collect();
            c.batch(&mut ops).await?;
        } else {
            for (a, b) in leaves.iter().zip(raw.iter_mut()) {
                c.read(*a, b).await?;
            }
        }
        let mut out = Vec::with_capacity(leaves.len());
        for (a, r) in leaves.iter().zip(&raw) {
            let mut buf = LeafBuf::new(self.leaf);
            if buf.absorb(0, self.leaf.decoded(), r).is_ok()
                && buf.validate().is_ok()
                && buf.hops_settled()
            {
                out.push(buf);
            } else {
                self.retry();
                loop {
                    let b = self.read_slots(c, *a, 0, self.leaf.span).await?;
                    if b.hops_settled() {
                        out.push(b);
                        break;
                    }
                    self.retry();
                }
            }
        }
        Ok(out)
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
        let loc = self.locate(c, from).await?;
        let mut ahead: VecDeque<GlobalAddr> =
            match loc.parent.and_then(|p| self.cache.lookup(1, from).filter(|n| n.addr == p)) {
                Some(p) => p.node.children_from(from).into_iter().skip(1).collect(),
                None => VecDeque::new(),
            };
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
        let (height, mut addr) = self.root(c).await?;
        for _ in 1..height {
            addr = self.read_internal(c, addr).await?.leftmost;
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

    /// Creates the first (root) leaf and publishes it.
    pub(crate) async fn create_root<T: Transport>(&self, c: &Client<T>) -> IndexResult<()> {
        let buf = LeafBuf::empty(self.leaf);
        let a = c.alloc(self.leaf.alloc() as u64, 64).await?;
        c.write(
            a,
            &self.leaf_image(&buf, LockWord { locked: false, full: 0, argmax: 0 }, u64::MAX),
        )
        .await?;
        if c.cas(self.root_slot, 0, root_word(1, a)).await? != 0 {
            return Err(IndexError::Config(format!(
                "root slot {} is already in use",
                (self.root_slot.offset() - mn::ROOT_TABLE_OFFSET) / 8
            )));
        }
        Ok(())
    }
}

/// Which paths a tree's operations take, by the kind of its leaves
/// ([`LeafKind::hopscotch`](crate::layout::LeafKind::hopscotch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeafPaths {
    /// CHIME's hopscotch leaf: neighbourhood READs, hops, the vacancy bitmap.
    Hopscotch,
    /// Sherman's sorted leaf, read whole ([`crate::sorted`]).
    Sorted,
}

/// The leaf-kind dispatch: the operations' entry points, and the only place that asks which
/// kind of leaf the tree has. Everything below them is either shared or belongs to one kind.
impl Tree {
    /// The paths this tree's leaves take.
    pub(crate) fn paths(&self) -> LeafPaths {
        if self.leaf.kind.hopscotch {
            LeafPaths::Hopscotch
        } else {
            LeafPaths::Sorted
        }
    }

    /// Search: the value slot of the probed key, if present.
    pub(crate) async fn search<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        probe: Probe<'_>,
    ) -> IndexResult<Option<[u8; 8]>> {
        match self.paths() {
            LeafPaths::Hopscotch => self.hopscotch_search(c, k, probe).await,
            LeafPaths::Sorted => self.sorted_search(c, k, probe).await,
        }
    }

    /// Insert (upsert): descend, then attempt the leaf found, moving right past half splits
    /// and starting over when the path was stale or a split did not place the key.
    pub(crate) async fn insert<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        v: [u8; 8],
        probe: Probe<'_>,
    ) -> IndexResult<()> {
        'outer: loop {
            let ins = Insert { k, v, probe, loc: self.locate(c, k).await? };
            let mut cur = ins.loc.leaf;
            loop {
                let attempt = match self.paths() {
                    LeafPaths::Hopscotch => self.hopscotch_insert_at(c, &ins, cur).await?,
                    LeafPaths::Sorted => self.sorted_insert_at(c, &ins, cur).await?,
                };
                match attempt {
                    Attempt::Done => return Ok(()),
                    Attempt::Right(next) => cur = next,
                    Attempt::Restart => continue 'outer,
                }
            }
        }
    }

    /// Update (`Some(v)`) or delete (`None`); returns whether the key existed.
    pub(crate) async fn modify<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        v: Option<[u8; 8]>,
        probe: Probe<'_>,
    ) -> IndexResult<bool> {
        match self.paths() {
            LeafPaths::Hopscotch => self.hopscotch_modify(c, k, v, probe).await,
            LeafPaths::Sorted => self.sorted_modify(c, k, v, probe).await,
        }
    }
}
