//! Migrations, all under the top group's lock: a full top bucket sends its group's entries one
//! level down, a group that lists its most runs sends its own down first, and the deepest
//! level compacts in place (crate docs).
//!
//! Every step copies before it clears: runs are appended below (run WRITE, then the WRITE of
//! the descriptor line that lists it, one doorbell on the group's node) before the group above
//! is cleared or reset. A writer that stops anywhere leaves copies, never a gap.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::counter::{add, bump};
use dmindex_prim::doorbell;
use dmindex_prim::lease;
use smallvec::SmallVec;

use crate::layout::{
    entry_block, is_deleted, run_word, words, Desc, Hashes, Record, DESC, FANOUT, GROUP,
    GROUP_CHILDREN, MAX_RUN, TOP_BUCKETS, TOP_CHILDREN,
};
use crate::Plush;

/// An entry on its way down, with its key (to merge versions) and the key's hashes (to place
/// it and fill a filter).
struct Item {
    h: Hashes,
    entry: u64,
    key: SmallVec<[u8; 24]>,
}

/// Zeros to clear a top group's buckets with (16 buckets of at most 16 entries).
static ZEROS: [u8; FANOUT * 16 * 8] = [0; FANOUT * 16 * 8];

/// One list of items per child digit.
type Lists = Vec<Vec<Item>>;

/// A migration step that may recurse one level down.
type Step<'a> = Pin<Box<dyn Future<Output = IndexResult<()>> + 'a>>;

/// The children words of a group, from the 128 bytes at its children array.
fn children(b: &[u8]) -> [u64; FANOUT] {
    let mut out = [0u64; FANOUT];
    for (o, w) in out.iter_mut().zip(words(b)) {
        *o = w;
    }
    out
}

/// The newest item of each key, from items oldest first (a later one replaces an earlier).
fn newest_per_key(items: Vec<Item>) -> Vec<Item> {
    let mut at: HashMap<SmallVec<[u8; 24]>, usize> = HashMap::with_capacity(items.len());
    let mut out: Vec<Item> = Vec::with_capacity(items.len());
    for it in items {
        match at.get(&it.key) {
            Some(&i) => out[i] = it,
            None => {
                at.insert(it.key.clone(), out.len());
                out.push(it);
            }
        }
    }
    out
}

impl Plush {
    /// Moves every entry of the top group at `top` to level 1 and clears its buckets.
    pub(crate) async fn migrate_top<T: Transport>(
        &self,
        c: &Client<T>,
        top: GlobalAddr,
    ) -> IndexResult<()> {
        bump(&self.counters.top_migrations);
        let buckets = FANOUT * self.shape.bucket_bytes();
        let mut image = vec![0u8; (TOP_BUCKETS - TOP_CHILDREN) as usize + buckets];
        c.read(top.add(TOP_CHILDREN), &mut image).await?;
        let (kids, slots) = image.split_at((TOP_BUCKETS - TOP_CHILDREN) as usize);
        // A top group holds one entry per key (one bucket per key, one slot per key in it).
        let entries: Vec<u64> = words(slots).filter(|&e| e != 0).collect();
        let items = self.items(c, &entries).await?;
        add(&self.counters.migrated_entries, items.len() as u64);
        let lists = self.split(items, 1);
        self.publish(c, top.node(), top.add(TOP_CHILDREN), children(kids), 1, lists).await?;
        c.write(top.add(TOP_BUCKETS), &ZEROS[..buckets]).await?;
        Ok(())
    }

    /// Items with keys for `entries`: one READ of each block's header and longest key, rung
    /// together per memory node.
    async fn items<T: Transport>(&self, c: &Client<T>, entries: &[u64]) -> IndexResult<Vec<Item>> {
        let mut pieces = Vec::with_capacity(entries.len());
        for &e in entries {
            self.check_entry(c, e)?;
            let a = entry_block(e);
            pieces.push((a, self.blocks.key_read_at(c, a)));
        }
        let mut buf = vec![0u8; pieces.iter().map(|p| p.1).sum()];
        if self.keys_each {
            let mut rest = &mut buf[..];
            for &(a, len) in &pieces {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
                c.read(a, piece).await?;
                rest = tail;
                // A long migration holds the lock for many round trips: keep the lease.
                lease::renew_if_due(c).await?;
            }
        } else {
            doorbell::read_per_node(c, &pieces, &mut buf).await?;
        }
        let mut items = Vec::with_capacity(entries.len());
        for (&e, key) in entries.iter().zip(self.blocks.keys_of(&pieces, &buf)) {
            let key = key?;
            items.push(Item { h: Hashes::of(key), entry: e, key: SmallVec::from_slice(key) });
        }
        c.compute(Work::KeyHash, items.len() as u64);
        c.compute(Work::BytesScanned, buf.len() as u64);
        Ok(items)
    }

    /// `items` split by their digit at `level`.
    fn split(&self, items: Vec<Item>, level: usize) -> Lists {
        let mut lists: Lists = (0..self.shape.fanout()).map(|_| Vec::new()).collect();
        for it in items {
            lists[it.h.digit(level, self.shape.fanout_bits)].push(it);
        }
        lists
    }

    /// Appends each non-empty list as a new run of the level-`level` child of its digit (the
    /// children array at `children_at`, holding `kids`), creating the child if there is none.
    /// Tombstones bound for a child created here are dropped: nothing lies below it.
    ///
    /// The children's descriptors are READ in one round trip and their runs published in
    /// another (a child that must migrate first does so on its own); with `key_reads=each`, as
    /// the SepHash port's bulk insert does, one child after another ([`Self::publish_each`]).
    fn publish<'a, T: Transport>(
        &'a self,
        c: &'a Client<T>,
        node: u16,
        children_at: GlobalAddr,
        kids: [u64; FANOUT],
        level: usize,
        mut lists: Lists,
    ) -> Step<'a> {
        Box::pin(async move {
            if self.keys_each {
                return self.publish_each(c, node, children_at, kids, level, lists).await;
            }
            // Each child costs round trips under the lock (and may cascade): keep the lease,
            // so that waiters do not judge this holder dead.
            lease::renew_if_due(c).await?;
            for (d, list) in lists.iter_mut().enumerate() {
                let group = GlobalAddr::from_raw(kids[d]);
                if group.is_null() {
                    let before = list.len();
                    list.retain(|it| !is_deleted(it.entry));
                    add(&self.counters.tombstones_dropped, (before - list.len()) as u64);
                } else if !list.is_empty() && !Self::fits(c, group, GROUP, Some(node)) {
                    return Err(IndexError::Corrupt(format!("plush group at {group}")));
                }
            }
            let descs = self.children_descs(c, &kids, &lists).await?;
            let mut appends: Vec<Append> = Vec::new();
            let mut pointers: Vec<(GlobalAddr, [u8; 8])> = Vec::new();
            for (d, list) in lists.into_iter().enumerate() {
                if list.is_empty() {
                    continue;
                }
                let (group, desc) = match descs[d] {
                    Some(desc) => (GlobalAddr::from_raw(kids[d]), desc),
                    None => {
                        // Zeroed memory: epoch 0, no runs, no children; its pointer is written
                        // with its first run (write_appends says why in any order).
                        let group = c.alloc_on(node, GROUP, 64).await?;
                        pointers.push((children_at.add(8 * d as u64), group.raw().to_le_bytes()));
                        (group, Desc::default())
                    }
                };
                if self.size(group, &desc)? >= self.shape.runs {
                    // The child migrates (or compacts) first, on its own round trips.
                    self.append_run(c, node, group, level, desc, list).await?;
                    lease::renew_if_due(c).await?;
                } else if let Some(a) = self.prepare_append(c, node, group, desc, &list).await? {
                    appends.push(a);
                }
            }
            write_appends(c, &appends, &pointers).await
        })
    }

    /// [`Self::publish`] as the SepHash port's bulk insert runs (`key_reads=each`): one child
    /// after another, its descriptor READ and then its run appended, two round trips each.
    async fn publish_each<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        children_at: GlobalAddr,
        kids: [u64; FANOUT],
        level: usize,
        lists: Lists,
    ) -> IndexResult<()> {
        for (d, mut list) in lists.into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            lease::renew_if_due(c).await?;
            let mut group = GlobalAddr::from_raw(kids[d]);
            let desc = if group.is_null() {
                let before = list.len();
                list.retain(|it| !is_deleted(it.entry));
                add(&self.counters.tombstones_dropped, (before - list.len()) as u64);
                if list.is_empty() {
                    continue;
                }
                // Zeroed memory: epoch 0, no runs, no children.
                group = c.alloc_on(node, GROUP, 64).await?;
                c.write(children_at.add(8 * d as u64), &group.raw().to_le_bytes()).await?;
                Desc::default()
            } else {
                if !Self::fits(c, group, GROUP, Some(node)) {
                    return Err(IndexError::Corrupt(format!("plush group at {group}")));
                }
                self.read_desc(c, group, None).await?.0
            };
            self.append_run(c, node, group, level, desc, list).await?;
        }
        Ok(())
    }

    /// The descriptors of the children that lists go to (`None` for a child not made yet), one
    /// round trip for all of them.
    async fn children_descs<T: Transport>(
        &self,
        c: &Client<T>,
        kids: &[u64; FANOUT],
        lists: &Lists,
    ) -> IndexResult<[Option<Desc>; FANOUT]> {
        let mut out = [None; FANOUT];
        let wanted: SmallVec<[usize; FANOUT]> =
            (0..lists.len()).filter(|&d| kids[d] != 0 && !lists[d].is_empty()).collect();
        let pieces: SmallVec<[(GlobalAddr, usize); FANOUT]> =
            wanted.iter().map(|&d| (GlobalAddr::from_raw(kids[d]), DESC as usize)).collect();
        let mut images = vec![0u8; DESC as usize * pieces.len()];
        doorbell::read_per_node(c, &pieces, &mut images).await?;
        for (&d, image) in wanted.iter().zip(images.chunks_exact(DESC as usize)) {
            out[d] = Some(self.decode_desc(c, GlobalAddr::from_raw(kids[d]), image)?);
        }
        Ok(out)
    }

    /// Appends `list` (newer than everything in the group) to the group at `group` as a run;
    /// a group that lists its most runs migrates first, or at the deepest level compacts with
    /// it.
    async fn append_run<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        group: GlobalAddr,
        level: usize,
        mut desc: Desc,
        list: Vec<Item>,
    ) -> IndexResult<()> {
        if self.size(group, &desc)? >= self.shape.runs {
            if level == self.shape.levels {
                return self.compact(c, node, group, desc, list).await;
            }
            self.migrate_group(c, node, group, level, &desc).await?;
            desc = desc.next_epoch(None);
        }
        match self.prepare_append(c, node, group, desc, &list).await? {
            Some(a) => write_appends(c, &[a], &[]).await,
            None => Ok(()),
        }
    }

    /// The run of `list` allocated and the descriptor line of the group at `group` (image
    /// `desc`, with room) that lists it: what [`write_appends`] WRITEs.
    async fn prepare_append<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        group: GlobalAddr,
        mut desc: Desc,
        list: &[Item],
    ) -> IndexResult<Option<Append>> {
        let Some((record, at)) = self.new_run(c, node, list).await? else {
            return Ok(None);
        };
        let n = self.size(group, &desc)?;
        desc.records[n] = record;
        desc.valid |= 1 << n;
        let line_at = group.add(64 * (n / 2) as u64);
        Ok(Some(Append::new(at, list, line_at, desc.line(n / 2))))
    }

    /// The runs a writer's image of the group at `group` lists (its valid records must be a
    /// prefix: a writer holds the lock).
    fn size(&self, group: GlobalAddr, desc: &Desc) -> IndexResult<usize> {
        match desc.size() {
            Some(n) if n <= self.shape.runs => Ok(n),
            _ => Err(IndexError::Corrupt(format!(
                "plush group at {group}: runs {:#b} listed",
                desc.valid
            ))),
        }
    }

    /// Allocates a run for `list` on `node` and returns its record (filter and run word) and
    /// address, `None` for an empty list; [`write_appends`] writes it.
    async fn new_run<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        list: &[Item],
    ) -> IndexResult<Option<(Record, GlobalAddr)>> {
        if list.is_empty() {
            return Ok(None);
        }
        if list.len() > MAX_RUN {
            return Err(IndexError::Full(format!(
                "a plush run of {} entries (at most {MAX_RUN}: the deepest level holds at most \
                 that many keys a group)",
                list.len()
            )));
        }
        let mut filter = [0u64; 2];
        for it in list {
            let f = it.h.filter();
            filter = [filter[0] | f[0], filter[1] | f[1]];
        }
        let run = c.alloc_on(node, 8 * list.len() as u64, 64).await?;
        Ok(Some((Record { filter, run: run_word(list.len(), run) }, run)))
    }

    /// Every entry the runs of `desc` list, oldest first, with keys.
    async fn run_items<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        desc: &Desc,
    ) -> IndexResult<Vec<Item>> {
        let n = desc.valid.count_ones() as usize;
        let mut pieces = Vec::with_capacity(n);
        for r in &desc.records[..n] {
            pieces.push(self.run_range(c, r.run, node)?);
        }
        let mut runs = vec![0u8; pieces.iter().map(|p| p.1).sum()];
        doorbell::read_per_node(c, &pieces, &mut runs).await?;
        let entries: Vec<u64> = words(&runs).collect();
        if entries.contains(&0) {
            return Err(IndexError::Corrupt("plush run with an empty entry".into()));
        }
        self.items(c, &entries).await
    }

    /// Sends the group at `group` (level `level`, above the deepest) down: its runs merged,
    /// the newest entry of each key kept, appended to its children, then its descriptor reset
    /// to no runs.
    async fn migrate_group<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        group: GlobalAddr,
        level: usize,
        desc: &Desc,
    ) -> IndexResult<()> {
        bump(&self.counters.group_migrations);
        let items = newest_per_key(self.run_items(c, node, desc).await?);
        add(&self.counters.migrated_entries, items.len() as u64);
        let mut kids = [0u8; 8 * FANOUT];
        c.read(group.add(GROUP_CHILDREN), &mut kids).await?;
        let lists = self.split(items, level + 1);
        self.publish(c, node, group.add(GROUP_CHILDREN), children(&kids), level + 1, lists).await?;
        // Line 0 alone, with the next epoch: every run the group listed drops out at once.
        c.write(group, &desc.next_epoch(None).line(0)).await?;
        Ok(())
    }

    /// The deepest level's migration: the group's runs and `incoming` (newer) merged into one
    /// run, tombstones dropped (nothing lies below).
    async fn compact<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        group: GlobalAddr,
        desc: Desc,
        incoming: Vec<Item>,
    ) -> IndexResult<()> {
        bump(&self.counters.compactions);
        let mut items = self.run_items(c, node, &desc).await?;
        items.extend(incoming);
        let mut merged = newest_per_key(items);
        let before = merged.len();
        merged.retain(|it| !is_deleted(it.entry));
        add(&self.counters.tombstones_dropped, (before - merged.len()) as u64);
        let run = self.new_run(c, node, &merged).await?;
        let line = desc.next_epoch(run.map(|(r, _)| r)).line(0);
        match run {
            Some((_, at)) => write_appends(c, &[Append::new(at, &merged, group, line)], &[]).await,
            None => {
                c.write(group, &line).await?;
                Ok(())
            }
        }
    }
}

/// A run to append: its entries to WRITE at `at`, then `line`, the descriptor line that lists
/// it, at `line_at`.
struct Append {
    at: GlobalAddr,
    data: Vec<u8>,
    line_at: GlobalAddr,
    line: [u8; 64],
}

impl Append {
    fn new(at: GlobalAddr, list: &[Item], line_at: GlobalAddr, line: [u8; 64]) -> Append {
        let mut data = Vec::with_capacity(8 * list.len());
        for it in list {
            data.extend_from_slice(&it.entry.to_le_bytes());
        }
        Append { at, data, line_at, line }
    }
}

/// WRITEs each append's run and then its line, and then the `pointers` to new children, all
/// on the group's node in one round trip. The line is one cache line, written whole even if this
/// client stops in the WRITE. A run lands before its line: the two are adjacent in one doorbell
/// (doorbells of [`MAX_BATCH`] verbs, an even number, so no pair is split), and a doorbell's
/// verbs execute in order. Doorbells in flight together promise no order among them, and need
/// none: each line lists only its own run, and a new child is zeroed memory, empty to a reader
/// that follows its pointer before its line lands.
async fn write_appends<T: Transport>(
    c: &Client<T>,
    appends: &[Append],
    pointers: &[(GlobalAddr, [u8; 8])],
) -> IndexResult<()> {
    let mut ops: Vec<BatchOp<'_>> = Vec::with_capacity(2 * appends.len() + pointers.len());
    for a in appends {
        ops.push(BatchOp::Write { addr: a.at, data: &a.data });
        ops.push(BatchOp::Write { addr: a.line_at, data: &a.line });
    }
    for (at, word) in pointers {
        ops.push(BatchOp::Write { addr: *at, data: word });
    }
    if ops.len() <= MAX_BATCH {
        // One doorbell (or, across nodes, one verb after another in order).
        doorbell::post(c, &mut ops).await
    } else {
        doorbell::post_per_node(c, &mut ops).await
    }
}

const _: () = assert!(MAX_BATCH % 2 == 0, "a run and its line never straddle two doorbells");
