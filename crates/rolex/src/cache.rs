//! The compute node's cache: the directory of models and, per model, its leaf table (fetched on
//! first use) and the first synonym leaf of each base leaf as last seen (a hint that lets a
//! READ of a base leaf and its synonym share one doorbell). A table's hints are allocated when
//! the first synonym of any of its leaves is seen: a model without synonym leaves (every model
//! of an index trained once and only read, as the CHIME paper measures ROLEX's cache) costs 8
//! bytes a leaf, the paper's leaf table, not 16.
//!
//! **The budget** (the index configuration's `cache_bytes`, per compute node): the models are
//! always cached (a client cannot find a leaf without them: 48 bytes a model); leaf tables are
//! evicted oldest-fetched first when fetching one takes the cache over its budget, and fetched
//! again (one READ) on their next use. A client that holds an evicted table goes on with it:
//! its leaf addresses stay right for the model's whole life. The budget is checked when a table
//! is fetched: a table's hints, allocated at its first synonym, count from then on but make
//! room only at the next fetch.
//!
//! The cache is never validated on its own: a model that was retrained has every leaf retired
//! before anyone can tell, so an operation that READs a retired leaf refreshes the directory
//! ([`Cache::refresh`]: one READ of the root word, one of the top array, one of each page it has
//! not seen) and starts over. A retrain retires leaves every client of the node may be reading,
//! so many find it at once: one of them READs the new directory and the others, having read the
//! same root word, wait for it and take its copy (about one directory read a node a retrain,
//! where every client read its own).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use arc_swap::ArcSwapOption;

use dmindex_fabric::{Client, GlobalAddr, NodeId, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::root::RootSlot;

use crate::layout::{parse_root, DirEntry, DIR_ENTRY, PAGE_MODELS, TABLE_HEADER, TOP_ENTRY};

/// A model's leaf table as cached.
pub struct Table {
    /// Base leaf addresses.
    pub leaves: Box<[GlobalAddr]>,
    /// Per base leaf, its first synonym leaf as last seen (raw address; 0 = none seen),
    /// allocated at the first synonym seen.
    hints: OnceLock<Box<[AtomicU64]>>,
    /// The bytes of every live table of the compute node, which this one's are part of until
    /// it drops.
    counted: Arc<AtomicU64>,
}

impl Table {
    /// A table of `leaves` with no synonym seen, its bytes added to `counted`.
    pub fn new(leaves: Box<[GlobalAddr]>, counted: Arc<AtomicU64>) -> Table {
        counted.fetch_add(8 * leaves.len() as u64, Ordering::Relaxed);
        Table { leaves, hints: OnceLock::new(), counted }
    }

    /// Base leaf `i`'s first synonym leaf as last seen (raw address; 0 = none seen).
    pub fn hint(&self, i: usize) -> u64 {
        self.hints.get().map_or(0, |h| h[i].load(Ordering::Relaxed))
    }

    /// Records `next` (raw; 0 = none) as base leaf `i`'s first synonym leaf.
    pub fn set_hint(&self, i: usize, next: u64) {
        let hints = match self.hints.get() {
            Some(h) => h,
            // Nothing to record until some leaf of the table has a synonym.
            None if next == 0 => return,
            None => self.hints.get_or_init(|| {
                self.counted.fetch_add(8 * self.leaves.len() as u64, Ordering::Relaxed);
                self.leaves.iter().map(|_| AtomicU64::new(0)).collect()
            }),
        };
        hints[i].store(next, Ordering::Relaxed);
    }

    /// Bytes cached: 8 per base leaf, and 8 more per base leaf once a synonym was seen.
    pub fn bytes(&self) -> u64 {
        let per_leaf = if self.hints.get().is_some() { 16 } else { 8 };
        per_leaf * self.leaves.len() as u64
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        self.counted.fetch_sub(self.bytes(), Ordering::Relaxed);
    }
}

/// Where a model's leaf table is cached: empty until fetched, and again once evicted.
pub type TableSlot = ArcSwapOption<Table>;

/// One model of a cached directory.
pub struct Model {
    pub e: DirEntry,
    /// Shared by every directory this compute node caches that still holds the model.
    pub table: Arc<TableSlot>,
}

impl Model {
    /// The memory node of the model's leaves.
    pub fn node(&self) -> NodeId {
        self.e.table.node()
    }

    /// The base leaves `[lo, hi]` whose chains may hold `k` (crate docs: the range argument).
    pub fn range(&self, k: u64, eps: u64) -> (usize, usize) {
        let e = &self.e;
        let p = crate::pla::predict(e.anchor, e.slope, e.intercept, k);
        let per = e.per_leaf as f64;
        let last = e.leaves as usize - 1;
        let leaf = |pos: f64| ((pos / per).floor().max(0.0) as usize).min(last);
        let (lo, hi) = (leaf(p - eps as f64 - 1.0), leaf(p + eps as f64 + 1.0));
        (lo, hi)
    }
}

/// A directory page as cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    pub low: u64,
    /// The page's array word (its address and number of models).
    pub word: u64,
    /// Its first model's position in [`Dir::models`].
    pub first: usize,
}

/// A directory as cached: the root word it was read under, its pages and its models by `low`.
pub struct Dir {
    pub root: u64,
    pub pages: Box<[Page]>,
    pub models: Box<[Model]>,
}

impl Dir {
    /// The model covering `k`: the last whose `low` is at most `k` (the first's is 0).
    pub fn find(&self, k: u64) -> usize {
        self.models.partition_point(|m| m.e.low <= k).saturating_sub(1)
    }

    /// The position of model `e` (same `low`, same leaf table), if the directory holds it.
    pub fn position(&self, e: &DirEntry) -> Option<usize> {
        let i = self.find(e.low);
        (self.models[i].e.low == e.low && self.models[i].e.table == e.table).then_some(i)
    }

    /// The page holding model `i`.
    pub fn page_of(&self, i: usize) -> usize {
        self.pages.partition_point(|p| p.first <= i) - 1
    }
}

/// The compute node's cache.
pub struct Cache {
    dir: RwLock<Arc<Dir>>,
    root: RootSlot,
    /// Bytes the cache may hold (the models are held whatever their size).
    budget: u64,
    /// Bytes of the live leaf tables.
    table_bytes: Arc<AtomicU64>,
    /// Slots of fetched tables, oldest first: the eviction order.
    fetched: Mutex<VecDeque<Weak<TableSlot>>>,
    /// Held by the client READing a new directory; the node's other clients wait on it.
    reading: futures::lock::Mutex<()>,
    /// Directory READs after the first.
    pub refreshes: AtomicU64,
    /// Leaf tables evicted to keep the budget.
    pub evictions: AtomicU64,
}

impl Cache {
    /// A cache holding `dir`, read from `root`, of at most `budget` bytes.
    pub fn new(root: RootSlot, dir: Dir, budget: u64) -> Cache {
        Cache {
            dir: RwLock::new(Arc::new(dir)),
            root,
            budget,
            table_bytes: Arc::new(AtomicU64::new(0)),
            fetched: Mutex::new(VecDeque::new()),
            reading: futures::lock::Mutex::new(()),
            refreshes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The directory as cached now.
    pub fn current(&self) -> Arc<Dir> {
        self.dir.read().expect("no panics under the lock").clone()
    }

    /// READs the root word and, if it names another directory than the cached one, that
    /// directory, which is cached and returned: a directory the root word named during the call.
    ///
    /// One client of the node READs a directory at a time. A client that finds, once its turn
    /// comes, the directory of the root word it read already cached (read by the client before
    /// it) takes that one. Any other cached directory may be older than its root word, so it
    /// READs its own.
    pub async fn refresh<T: Transport>(&self, c: &Client<T>) -> IndexResult<Arc<Dir>> {
        let root = self.root.load(c).await?;
        let old = self.current();
        if root == old.root {
            return Ok(old);
        }
        let _turn = self.reading.lock().await;
        let now = self.current();
        if now.root == root {
            return Ok(now);
        }
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        let dir = Arc::new(read_dir(c, root, Some(&now)).await?);
        *self.dir.write().expect("no panics under the lock") = dir.clone();
        Ok(dir)
    }

    /// The leaf table of `m`, READ on first use (and after an eviction).
    pub async fn table<T: Transport>(&self, c: &Client<T>, m: &Model) -> IndexResult<Arc<Table>> {
        if let Some(t) = m.table.load_full() {
            return Ok(t);
        }
        let n = m.e.leaves as usize;
        let mut b = vec![0u8; n * 8];
        c.read(m.e.table.add(TABLE_HEADER), &mut b).await?;
        let leaves: Box<[GlobalAddr]> = b
            .chunks_exact(8)
            .map(|w| GlobalAddr::from_raw(u64::from_le_bytes(w.try_into().expect("8 bytes"))))
            .collect();
        if leaves.iter().any(|a| a.is_null() || a.node() != m.node() || !a.is_aligned(64)) {
            return Err(IndexError::Corrupt(format!("leaf table at {} names no leaf", m.e.table)));
        }
        let fresh = Arc::new(Table::new(leaves, self.table_bytes.clone()));
        // Another client of this node may have fetched it meanwhile: keep the first.
        let prev = m.table.compare_and_swap(&None::<Arc<Table>>, Some(fresh.clone()));
        if let Some(t) = prev.as_ref() {
            return Ok(t.clone());
        }
        {
            let mut fetched = self.fetched.lock().expect("no panics under the lock");
            fetched.push_back(Arc::downgrade(&m.table));
            // Slots of models retrained away die without an eviction: drop them whenever the
            // queue reaches another power of two, so it stays within twice the live tables.
            if fetched.len() >= 64 && fetched.len().is_power_of_two() {
                fetched.retain(|w| w.strong_count() > 0);
            }
        }
        self.keep_budget(&m.table);
        Ok(fresh)
    }

    /// Evicts the oldest-fetched tables but `kept` until the cache is within its budget (or
    /// holds no other table). A table a client still holds counts until that client drops it,
    /// so the bytes to free are counted from the tables taken out, not read again.
    fn keep_budget(&self, kept: &Arc<TableSlot>) {
        let over = self.bytes().saturating_sub(self.budget);
        let mut fetched = self.fetched.lock().expect("no panics under the lock");
        let mut freed = 0;
        // Ends when enough is freed or every slot fetched before was looked at once.
        let mut left = fetched.len();
        while freed < over && left > 0 {
            left -= 1;
            let Some(slot) = fetched.pop_front() else { break };
            let Some(slot) = slot.upgrade() else { continue };
            if Arc::ptr_eq(&slot, kept) {
                fetched.push_back(Arc::downgrade(&slot));
                continue;
            }
            if let Some(t) = slot.swap(None) {
                freed += t.bytes();
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Bytes cached: 48 per model, and each live leaf table's ([`Table::bytes`]).
    pub fn bytes(&self) -> u64 {
        let models = self.current().models.len() as u64;
        DIR_ENTRY as u64 * models + self.table_bytes.load(Ordering::Relaxed)
    }
}

/// READs the directory root word `root` names: its top array, then each page `old` does not
/// hold already (pages are immutable, so a page word seen before names the same models, which
/// keep their cached tables).
pub async fn read_dir<T: Transport>(
    c: &Client<T>,
    root: u64,
    old: Option<&Dir>,
) -> IndexResult<Dir> {
    let (at, n) = parse_root(root);
    let corrupt = || IndexError::Corrupt(format!("no rolex directory at {at} ({n} pages)"));
    if n == 0 {
        return Err(corrupt());
    }
    let mut top = vec![0u8; n * TOP_ENTRY];
    c.read(at, &mut top).await?;
    let mut pages = Vec::with_capacity(n);
    let mut models: Vec<Model> = Vec::new();
    let mut b = Vec::new();
    for entry in top.chunks_exact(TOP_ENTRY) {
        let low = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
        let word = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
        let (page, count) = parse_root(word);
        if count == 0 || count > PAGE_MODELS {
            return Err(corrupt());
        }
        let first = models.len();
        pages.push(Page { low, word, first });
        // The same page has the same `low`: found by bisection, not a scan.
        let known = old.and_then(|o| {
            let i = o.pages.partition_point(|p| p.low <= low).checked_sub(1)?;
            (o.pages[i].word == word).then(|| &o.models[o.pages[i].first..][..count])
        });
        if let Some(known) = known {
            models.extend(known.iter().map(|m| Model { e: m.e, table: m.table.clone() }));
        } else {
            b.resize(count * DIR_ENTRY, 0);
            c.read(page, &mut b).await?;
            for chunk in b.chunks_exact(DIR_ENTRY) {
                let Some(e) = DirEntry::decode(chunk) else { return Err(corrupt()) };
                let table = match old.and_then(|o| o.position(&e).map(|i| &o.models[i])) {
                    Some(m) if m.e == e => m.table.clone(),
                    _ => Arc::new(TableSlot::empty()),
                };
                models.push(Model { e, table });
            }
        }
        // Sorted models, each page starting at its low, the first at 0.
        let sorted = models[first.saturating_sub(1)..].windows(2).all(|w| w[0].e.low < w[1].e.low);
        if !sorted || models[first].e.low != low || (first == 0 && low != 0) {
            return Err(corrupt());
        }
    }
    Ok(Dir { root, pages: pages.into_boxed_slice(), models: models.into_boxed_slice() })
}
