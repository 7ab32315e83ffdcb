//! CHIME's operations over remote nodes; see the crate docs for the protocol.
//!
//! Here: the [`Tree`] (remote shape and CN-side state: node cache, CN-local lock table,
//! hotspot buffer, counters), its root word, what operations hand each other, and the
//! operations' entry points, which choose the hopscotch or the sorted-leaf paths in one place
//! ([`Tree::paths`]). Each role has its own module:
//!
//! * `descent` — from the root word to a key's leaf, and sibling validation (or fence keys) of
//!   the leaf reached, which tells a stale cached parent from a half split;
//! * `leaf_io` — neighbourhood READs, the leaf lock that carries the vacancy bitmap, WRITEs back;
//! * `hopscotch` — search, insert by hop, update and delete in a hopscotch leaf;
//! * `smo` — leaf and internal splits: half split first, then the separator goes up (how a
//!   leaf's entries divide is [`crate::split`]);
//! * `scan` — whole leaves along the sibling chain;
//! * `fine_scan` — CHIME's scans: whole leaves only where the scan covers them, else the
//!   neighbourhoods of the keys it wants;
//! * `groups`, `directory` — long keys sharing a prefix: collision groups, and past a page of
//!   keys, directories of pages;
//! * `sorted_write` — Sherman's sorted leaf rewritten in pieces a dying writer cannot tear into
//!   a lost key, and the repair of what one left.
//!
//! Sherman's sorted leaf has its own paths in [`crate::sorted`].

#[cfg(test)]
mod cut_short;
mod descent;
mod directory;
mod fine_scan;
mod groups;
mod hopscotch;
mod leaf_io;
mod scan;
pub(crate) mod smo;
pub(crate) mod sorted_write;

use std::future::Future;
use std::sync::atomic::AtomicU64;

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::blink::{root_word, Blink, Located};
use dmindex_prim::kv_block::Blocks;
use dmindex_prim::pool::Pool;
use futures::future::Either;

use crate::hotspot::Hotspots;
use crate::layout::{LeafLayout, LockWord};
use crate::leaf::LeafBuf;
use crate::read_plan::ReadPlan;
use crate::view::{home, LeafView, SlotValue};

pub(crate) use descent::Where;
pub(crate) use fine_scan::Trimmed;
pub(crate) use groups::{InLeaf, Resolved};
pub(crate) use leaf_io::LockedLeaf;
pub(crate) use scan::{ScanScratch, MOST_RESERVED};

/// The tree's remote shape and CN-side state.
pub(crate) struct Tree {
    pub leaf: LeafLayout,
    /// The internal levels: root word (the descriptor is in the next slot), node cache, the
    /// CN-local lock table (leaf locks queue on it too) and the retry count.
    pub blink: Blink,
    /// Vacancy-bitmap piggybacking: off, the bitmap is READ separately after locking.
    pub vacancy: bool,
    /// Indirect values and long keys.
    pub blocks: Blocks,
    /// The hotspot buffer, when speculative reads are on.
    pub hotspots: Option<Hotspots>,
    /// The read plan of every home's neighbourhood (hopscotch leaves), and of every entry
    /// alone (speculative reads), indexed by slot.
    pub plans: Box<[ReadPlan]>,
    pub entry_plans: Box<[ReadPlan]>,
    /// The read plan of every home's insert when a free slot is near
    /// ([`ReadPlan::every_insert`]), indexed by home.
    pub insert_plans: Box<[Option<ReadPlan>]>,
    /// The read plan of a whole leaf (scans, splits, sorted leaves).
    pub whole_plan: ReadPlan,
    /// A sorted leaf's versioned part cut into WRITEs that each land whole
    /// ([`sorted_write::pieces`]); empty when the leaf fits one.
    pub sorted_pieces: Box<[(usize, usize)]>,
    /// Fine-grained scans: how many slots one READ may span when it takes two runs of wanted
    /// slots and the gap between them (greedy; 0: never across a gap).
    pub greedy_slots: usize,
    /// Leaf buffers for READs, reused across operations (see `Tree::leaf_buf`).
    pub bufs: Pool<LeafBuf>,
    /// Scans' working vectors, reused across scans ([`ScanScratch`]).
    pub scans: Pool<ScanScratch>,
    /// Long keys: buffers for a group's bytes and a group's copy, reused across operations.
    pub group_bufs: Pool<Vec<u8>>,
    /// Leaf splits by this CN.
    pub splits: AtomicU64,
    /// Moves right along the leaf chain (half splits crossed, [`Tree::walk_on`]).
    pub moves_right: AtomicU64,
    /// Keys the leaves held when they split (hopscotch leaves: when the hop failed).
    pub keys_at_split: AtomicU64,
    /// Half splits crossed under a parent read afresh ([`smo::HalfSplits`]).
    pub half_splits: smo::HalfSplits,
    /// Half splits this CN finished for a splitter that did not ([`Tree::crossed_half_split`]).
    pub half_splits_finished: AtomicU64,
    /// Collision groups this CN formed ([`crate::collision`]).
    pub groups_formed: AtomicU64,
}

/// Leaf buffers each compute node's pool keeps (more operations in flight allocate).
pub(crate) const LEAF_BUFS: usize = 256;

/// Scans' working vectors each compute node's pool keeps.
pub(crate) const SCAN_SCRATCH: usize = 64;

/// How an operation recognises its key among entries whose 8-byte key field matches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Probe<'a> {
    /// The 8-byte field is the whole key.
    Exact,
    /// The field is the key's first 8 bytes; the full key is in the block the value slot points
    /// to (`[key length u32][value length u32][key][value]`).
    Full(&'a [u8]),
}

/// What an insert attempt on one leaf did.
pub(crate) enum Attempt {
    /// The key is in place.
    Done,
    /// The key is in place, in the collision group its insert formed, whose entry shadows the
    /// plain entries of its prefix until they are cleared ([`Tree::tidy_group`]).
    Grouped,
    /// Move right to this leaf (half split: the key is beyond this leaf's bound).
    Right(GlobalAddr),
    /// Start over from the root (stale cache, or a split that did not place the key).
    Restart,
}

/// What a hopscotch leaf's update path does to the key it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Rewrite its value slot.
    Update([u8; 8]),
    /// Remove it.
    Delete,
    /// Clear the plain entries its prefix's collision group shadows (long keys).
    Tidy,
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
    /// The home slot of `k` in this tree's leaves, its hash reported to `c`.
    #[inline]
    pub(crate) fn home_of<T: Transport>(&self, c: &Client<T>, k: u64) -> usize {
        c.compute(Work::KeyHash, 1);
        home(k, self.leaf.span)
    }

    /// `view.find(h, k)` ([`LeafView::find`]), the keys it compared reported to `c`: those
    /// from the home to the hit, or the whole neighbourhood on a miss.
    #[inline]
    pub(crate) fn find_near<T: Transport>(
        &self,
        c: &Client<T>,
        view: &impl LeafView,
        h: usize,
        k: u64,
    ) -> Option<usize> {
        let found = view.find(h, k);
        let compared = found.map_or(self.leaf.h, |i| self.leaf.dist(h, i) + 1);
        c.compute(Work::KeyCompare, compared as u64);
        found
    }

    /// A sorted leaf's binary search for `k` in `buf` (whole), the keys it compared reported.
    #[inline]
    pub(crate) fn sorted_find<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &LeafBuf,
        k: u64,
    ) -> Option<usize> {
        let (found, compared) = buf.sorted_search_compares(k);
        c.compute(Work::KeyCompare, compared);
        found.ok()
    }

    /// Counts one retry (a validation that failed, a lock found taken, a move right).
    fn retry(&self) {
        self.blink.retry();
    }

    /// Creates the first (root) leaf and publishes it.
    pub(crate) async fn create_root<T: Transport>(&self, c: &Client<T>) -> IndexResult<()> {
        let buf = LeafBuf::empty(self.leaf);
        let a = c.alloc(self.leaf.alloc() as u64, 64).await?;
        c.write(a, &self.leaf_image(&buf, LockWord { full: 0, argmax: 0 }, u64::MAX)).await?;
        self.blink.root.claim(c, root_word(1, a)).await
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

    /// Search: the value slot of the probed key, if present, and whether its value is already
    /// in `value` (a long key's: the block READ that told the key apart took it too).
    pub(crate) fn search<'a, T: Transport>(
        &'a self,
        c: &'a Client<T>,
        k: u64,
        probe: Probe<'a>,
        value: &'a mut Vec<u8>,
    ) -> impl Future<Output = IndexResult<Option<(SlotValue, bool)>>> + 'a {
        // The leaf kind's own future, not a layer that awaits it.
        match self.paths() {
            LeafPaths::Hopscotch => Either::Left(self.hopscotch_search(c, k, probe, value)),
            LeafPaths::Sorted => Either::Right(self.sorted_search(c, k, probe, value)),
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
        let mut restarts = Attempts::new();
        'outer: loop {
            let loc = match self.blink.cached(c, k) {
                Some(loc) => loc,
                None => self.blink.descend(c, k).await?,
            };
            let ins = Insert { k, v, probe, loc };
            let (mut cur, mut moves) = (ins.loc.leaf, Attempts::new());
            loop {
                let attempt = match self.paths() {
                    LeafPaths::Hopscotch => self.hopscotch_insert_at(c, &ins, cur).await?,
                    LeafPaths::Sorted => self.sorted_insert_at(c, &ins, cur).await?,
                };
                match attempt {
                    Attempt::Done => return Ok(()),
                    Attempt::Grouped => {
                        self.groups_formed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return self.tidy_group(c, k, probe).await;
                    }
                    Attempt::Right(next) if self.walk_on(c, &ins.loc, next, &mut moves).await? => {
                        cur = next
                    }
                    Attempt::Right(_) | Attempt::Restart => {
                        restarts.failed(cur, "leaf sibling or fences")?;
                        continue 'outer;
                    }
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
            LeafPaths::Hopscotch => {
                let change = v.map_or(Change::Delete, Change::Update);
                self.hopscotch_modify(c, k, change, probe).await
            }
            LeafPaths::Sorted => self.sorted_modify(c, k, v, probe).await,
        }
    }

    /// Clears the plain entries of long key `probe`'s prefix `k` that the collision group an
    /// insert of it just formed shadows ([`Attempt::Grouped`]): a hopscotch leaf's later
    /// write under its lock ([`crate::collision`]). A client that dies first leaves them to
    /// the next write of the prefix in that leaf; the group wins over them meanwhile.
    async fn tidy_group<T: Transport>(
        &self,
        c: &Client<T>,
        k: u64,
        probe: Probe<'_>,
    ) -> IndexResult<()> {
        self.hopscotch_modify(c, k, Change::Tidy, probe).await.map(|_| ())
    }
}
