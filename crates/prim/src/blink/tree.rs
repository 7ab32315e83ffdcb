//! The internal levels of a B-link tree on remote memory: the root word, the descent from it
//! (or from the deepest cached node) to a key's leaf, and separator insertion. Leaves are the
//! design's own; this module only names them by address.
//!
//! # Descent
//!
//! A level-1 node in the CN cache names the leaf at once (zero round trips above the leaf).
//! Otherwise the descent READs internal nodes from the deepest cached node at level ≥ 2 (or the
//! root), moving right along siblings when the key is above a node's high fence (a half split
//! not yet in the parent) and starting over when it is below a node's low fence (a stale cached
//! start). Every internal node READ is decoded with its cache-line versions and re-READ until it
//! validates, then cached. Re-READs, restarts and moves right are bounded ([`crate::attempts`]):
//! garbage in a node, or a sibling chain that never reaches the key, ends in a corrupt index.
//!
//! # Separator insertion
//!
//! Sherman's up-propagation: lock the node at the level (queueing on the CN-local lock table),
//! READ it, move right past a concurrent split, insert the separator; a full node splits in turn,
//! writing its new right sibling before itself (one doorbell when both are on one memory node)
//! and carrying the middle separator a level up; above the root, a new root is published by CAS
//! on the root word.

use std::sync::atomic::{AtomicU64, Ordering};

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use super::layout::InternalLayout;
use super::node::{Internal, NodeCache, Routes};
use crate::attempts::Attempts;
use crate::doorbell;
use crate::lock::{Held, LocalLocks};
use crate::node_cache::Charge;
use crate::root::RootSlot;
use crate::work::{bisect_compares, Work};

/// Root word in the root-table slot: height (levels, 1 = the root is a leaf) in the top byte,
/// then the root's memory node (8 bits) and offset (48 bits).
pub fn root_word(height: u8, a: GlobalAddr) -> u64 {
    (height as u64) << 56 | (a.node() as u64) << 48 | a.offset()
}

/// The height and root address a root word holds.
pub fn parse_root(w: u64) -> (u8, GlobalAddr) {
    ((w >> 56) as u8, GlobalAddr::new(((w >> 48) & 0xFF) as u16, w & ((1 << 48) - 1)))
}

/// Where a key's leaf was found.
#[derive(Clone, Copy, Debug)]
pub struct Located {
    pub leaf: GlobalAddr,
    /// The leaf's sibling as its parent knows it (null for the rightmost leaf).
    pub expected: GlobalAddr,
    /// The cached parent that produced it, if it came from the cache: (low fence, address).
    pub cached: Option<(u64, GlobalAddr)>,
    /// The parent's address, when known.
    pub parent: Option<GlobalAddr>,
}

/// Moves right between checks of the root word, on a walk from a leaf reached with no parent.
const RECHECK_MOVES: u32 = 8;

/// How a compute node's cache is charged for an internal node it holds. The papers differ:
/// CHIME's enhanced Sherman counts the entries a node holds; the original Sherman and Marlin,
/// as the Dolphin paper counts them, cache whole internal pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Accounting {
    #[default]
    PerEntry,
    PerPage,
}

impl Accounting {
    /// The option's words, in [`Accounting`]'s order (`cache_charge=entry|page`).
    pub const WORDS: &'static [&'static str] = &["entry", "page"];

    /// The accounting named by the option's word at `i` of [`Accounting::WORDS`].
    pub fn from_choice(i: usize) -> Accounting {
        match i {
            0 => Accounting::PerEntry,
            _ => Accounting::PerPage,
        }
    }
}

/// A B-link tree's internal levels and the CN-side state that goes with them.
pub struct Blink {
    pub inner: InternalLayout,
    /// The root word's slot.
    pub root: RootSlot,
    /// Cached internal nodes, by level and low fence.
    pub cache: NodeCache,
    /// The CN-local lock table (internal nodes here; the design's leaves may share it).
    pub locks: LocalLocks,
    /// Validations that failed, locks found taken, moves right: here and in the design's leaves.
    pub retries: AtomicU64,
}

impl Blink {
    /// The internal levels of the tree whose root word is in `root`, with span `span` and a
    /// node cache of `cache_bytes`, charged as `accounting` says.
    pub fn new(span: usize, root: RootSlot, cache_bytes: u64, accounting: Accounting) -> Blink {
        let inner = InternalLayout { span };
        let charge = match accounting {
            Accounting::PerEntry => Charge::Entries,
            Accounting::PerPage => Charge::Page(inner.alloc() as u64),
        };
        Blink {
            inner,
            root,
            cache: NodeCache::charged(cache_bytes, charge),
            locks: LocalLocks::default(),
            retries: AtomicU64::new(0),
        }
    }

    /// Counts one retry.
    pub fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a walk right along the leaf chain should go on (`false`: descend again).
    ///
    /// A leaf reached with a parent is at most a few half splits left of the key. A leaf
    /// reached with none was the root when the descent read the root word, and a walk from it
    /// can be as long as the tree has leaves: a client that queued for the root leaf's lock
    /// while many clients loaded the tree walked right thousands of times (6 moves per insert
    /// over a 300 k load at 10 CNs × 64 × 2 on the simulator). So every `RECHECK_MOVES` moves
    /// such a walk reads the root word again and starts over from the root once the tree has
    /// grown — one READ per that many moves. If it has not (the split that should grow it is
    /// still in flight, or its client crashed), the walk goes on. `moves` counts the walk's
    /// moves (one guard per walk, made where it starts at `loc.leaf`): a chain that has not
    /// reached the key after [`crate::attempts::BOUND`] of them is garbage, and the walk ends in
    /// a corrupt index.
    pub async fn walk_on<T: Transport>(
        &self,
        c: &Client<T>,
        loc: &Located,
        moves: &mut Attempts,
    ) -> IndexResult<bool> {
        moves.failed(loc.leaf, "leaf chain walked right from the leaf")?;
        if loc.parent.is_some() || loc.cached.is_some() || moves.count() % RECHECK_MOVES != 0 {
            return Ok(true);
        }
        let (height, _) = self.root(c).await?;
        Ok(height == 1)
    }

    /// Reads the root word.
    pub async fn root<T: Transport>(&self, c: &Client<T>) -> IndexResult<(u8, GlobalAddr)> {
        let w = c.read_word(self.root.addr()).await?;
        let (h, a) = parse_root(w);
        if h == 0 || a.is_null() {
            return Err(IndexError::Corrupt(format!("root word {w:#x}")));
        }
        Ok((h, a))
    }

    /// READs an internal node until it validates, and caches it.
    pub async fn read_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<Internal> {
        let n = self.fetch_internal(c, addr).await?;
        self.cache.insert(addr, n.clone());
        Ok(n)
    }

    /// READs an internal node until it validates (the caller caches what it keeps).
    async fn fetch_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<Internal> {
        let mut b = vec![0u8; self.inner.physical()];
        let mut attempts = Attempts::new();
        loop {
            c.read(addr, &mut b).await?;
            // Decoding walks the whole node: every line's version, every entry copied out.
            c.compute(Work::BytesScanned, b.len() as u64);
            if let Ok(n) = Internal::decode(&self.inner, &b) {
                if n.level == 0 {
                    return Err(IndexError::Corrupt(format!(
                        "internal node at {addr} has level 0"
                    )));
                }
                return Ok(n);
            }
            attempts.failed(addr, "internal node versions")?;
            self.retry();
        }
    }

    /// The leaf for `k` through its cached parent, if the cache has one: [`Blink::locate`]
    /// without a round trip. A hot path calls this first and awaits [`Blink::descend`] only when
    /// it misses, so that a hit makes no future (`docs/perf.md`, eleventh round). One cache
    /// lookup, hit or miss, reported to `c`.
    #[inline]
    pub fn cached<T: Transport>(&self, c: &Client<T>, k: u64) -> Option<Located> {
        c.compute(Work::CacheLookup, 1);
        self.cache.with(1, &k, |p| {
            let (leaf, expected) = p.node.child_for(k);
            Located { leaf, expected, cached: Some((p.node.low, p.addr)), parent: Some(p.addr) }
        })
    }

    /// Finds the leaf for `k`: the cached parent if any, else a remote traversal from the deepest
    /// cached node above (or the root).
    pub async fn locate<T: Transport>(&self, c: &Client<T>, k: u64) -> IndexResult<Located> {
        match self.cached(c, k) {
            Some(loc) => Ok(loc),
            None => self.descend(c, k).await,
        }
    }

    /// The leaf for `k` by a remote traversal from the deepest cached node above level 1 (or
    /// the root): [`Blink::locate`] once [`Blink::cached`] has missed.
    pub async fn descend<T: Transport>(&self, c: &Client<T>, k: u64) -> IndexResult<Located> {
        let (from_cache, probes) = self.cache.deepest_with(2, &k, |n| n.node.child_for(k).0);
        c.compute(Work::CacheLookup, probes);
        let mut from_cache = from_cache;
        // Restarts and moves right: fences that do not hold the key.
        let mut attempts = Attempts::new();
        'restart: loop {
            let mut addr = match from_cache.take() {
                Some(child) => child,
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
                    attempts.failed(addr, "internal node's high fence")?;
                    addr = n.sibling;
                    continue;
                }
                if k < n.low {
                    attempts.failed(addr, "internal node's low fence")?;
                    self.retry();
                    continue 'restart;
                }
                let (child, expected) = n.child_for(k);
                c.compute(Work::KeyCompare, bisect_compares(n.routes.len()));
                if n.level == 1 {
                    return Ok(Located { leaf: child, expected, cached: None, parent: Some(addr) });
                }
                addr = child;
            }
        }
    }

    /// Drops the cached parent that led to a stale leaf, if it came from the cache, and counts
    /// a retry.
    pub fn invalidate(&self, loc: &Located) {
        if let Some((low, addr)) = loc.cached {
            self.cache.invalidate(1, &low, addr);
        }
        self.retry();
    }

    /// Inserts separator `pivot` → `child` at `level` (Sherman-style up-propagation: lock, read,
    /// move right past a concurrent split, insert, split in turn if full, grow the root by CAS).
    /// `hint` is the node at `level` believed to cover `pivot` (the split leaf's parent).
    pub async fn insert_internal<T: Transport>(
        &self,
        c: &Client<T>,
        mut level: u8,
        mut pivot: u64,
        mut child: GlobalAddr,
        mut hint: Option<GlobalAddr>,
    ) -> IndexResult<()> {
        // Nodes locked that turned out not to cover the separator.
        let mut attempts = Attempts::new();
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
                            routes: Routes::new(&[pivot], &[child]),
                        };
                        let a = c.alloc(self.inner.alloc() as u64, 64).await?;
                        c.write(a, &new_root.physical_with_lock(&self.inner)).await?;
                        let old = root_word(height, root);
                        if c.cas(self.root.addr(), old, root_word(height + 1, a)).await? == old {
                            self.cache.insert(a, new_root);
                            return Ok(());
                        }
                        self.retry();
                        continue;
                    }
                },
            };
            let held = self.lock_internal(c, addr).await?;
            // Cached as written below, or as read where the separator does not go in here
            // (an error or a failed allocation caches nothing: the cache is only a hint).
            let node = self.fetch_internal(c, addr).await?;
            if node.level != level || pivot < node.low {
                held.unlock_with(c, 0).await?;
                self.cache.insert(addr, node);
                attempts.failed(addr, "internal node's level or low fence")?;
                self.retry();
                continue;
            }
            if pivot > node.high {
                held.unlock_with(c, 0).await?;
                attempts.failed(addr, "internal node's high fence")?;
                hint = (!node.sibling.is_null()).then_some(node.sibling);
                self.cache.insert(addr, node);
                continue;
            }
            if node.routes.pivots().contains(&pivot) {
                held.unlock_with(c, 0).await?;
                self.cache.insert(addr, node);
                return Ok(());
            }
            let mut node = node.bumped();
            node.routes.insert(pivot, child);
            if node.routes.len() <= self.inner.span {
                // The image ends with the lock word, unlocked.
                held.released_by(c.write(addr, &node.physical_with_lock(&self.inner)).await)?;
                self.cache.insert(addr, node);
                return Ok(());
            }
            let m = node.routes.len() / 2;
            let (sep, mid, routes) = node.routes.split_at(m);
            let right = Internal {
                version: 0,
                level,
                valid: true,
                sibling: node.sibling,
                leftmost: mid,
                sibling_leftmost: node.sibling_leftmost,
                low: sep,
                high: node.high,
                routes,
            };
            let right_addr = match c.alloc(self.inner.alloc() as u64, 64).await {
                Ok(a) => a,
                Err(e) => {
                    held.unlock_with(c, 0).await?;
                    return Err(e.into());
                }
            };
            node.high = sep - 1;
            node.sibling = right_addr;
            node.sibling_leftmost = mid;
            let (ri, li) =
                (right.physical_with_lock(&self.inner), node.physical_with_lock(&self.inner));
            held.released_by(write_split(c, (right_addr, &ri), (addr, &li)).await)?;
            self.cache.insert(right_addr, right);
            self.cache.insert(addr, node);
            level += 1;
            pivot = sep;
            child = right_addr;
        }
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
        let mut moves = Attempts::new();
        loop {
            let n = self.read_internal(c, addr).await?;
            if key > n.high && !n.sibling.is_null() {
                moves.failed(addr, "internal node's high fence")?;
                addr = n.sibling;
            } else if n.level == level {
                return Ok(Ok(addr));
            } else {
                addr = n.child_for(key).0;
                c.compute(Work::KeyCompare, bisect_compares(n.routes.len()));
            }
        }
    }

    /// Locks the internal node at `addr` (its lock word holds only the lock bit) after queueing
    /// on the CN-local lock table; released by a WRITE of 0 or of the node's image.
    async fn lock_internal<T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
    ) -> IndexResult<Held<'_>> {
        let lock = addr.add(self.inner.lock_offset() as u64);
        self.locks.acquire(c, lock, || self.retry(), &crate::lock::NoMetadata).await
    }
}

/// Writes a split's new right node, then the split node that points to it (and whose image may
/// unlock it): one doorbell when both live on one memory node, in that order otherwise.
pub async fn write_split<T: Transport>(
    c: &Client<T>,
    (right, right_img): (GlobalAddr, &[u8]),
    (left, left_img): (GlobalAddr, &[u8]),
) -> IndexResult<()> {
    let mut writes = [
        BatchOp::Write { addr: right, data: right_img },
        BatchOp::Write { addr: left, data: left_img },
    ];
    doorbell::post(c, &mut writes).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_word_is_pinned() {
        let a = GlobalAddr::new(3, 0x1234_5678_9ab8);
        let w = root_word(2, a);
        assert_eq!(w, 0x0203_1234_5678_9ab8);
        assert_eq!(parse_root(w), (2, a));
    }
}
