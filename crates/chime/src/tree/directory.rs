//! Directories: a collision group past a page's records, as a tree of directory nodes over
//! pages ([`crate::collision`] has the layouts and why each step is safe). Here: the descent
//! to a key's page, the writes (an append in place; a page split, a page copied or emptied,
//! each posting new pages and a new copy of every directory node on the path, bottom up, that
//! the leaf entry then names), and scans' walk along the pages in key order.
//!
//! Every directory node is immutable once posted; only pages change, by appends and value
//! slots. A writer holds the leaf's lock, so the path it READ is the current one.

use dmindex_fabric::{Client, GlobalAddr, NodeId, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::doorbell;
use smallvec::SmallVec;

use super::groups::block_at;
use super::{InLeaf, Resolved, Tree};
use crate::collision::page::{self, Gathered, Page};
use crate::collision::{self, Group, PageShape, MOST_LEVELS};

/// A child of a directory node, as its parent names it: its lowest key and its word (a page's
/// address at level 1; a directory's value slot above).
type Child<'k> = (&'k [u8], [u8; 8]);

// A split page's records and the key fit the split's inline buffer, and a directory node's
// records with a child split in place of one fit its copy's.
const _: () = assert!(page::MOST_RECORDS < 36 && 64 + 4 <= 96);

/// New nodes (pages or directory nodes) in the place of one: a split makes two, and a
/// directory made of a large group a few.
type Nodes<'k> = SmallVec<[Child<'k>; 4]>;

/// One directory node on a key's path: where its bytes start in the path's buffer, its
/// address, and the record the key goes down.
#[derive(Clone, Copy, Debug)]
struct Step {
    at: usize,
    addr: GlobalAddr,
    j: usize,
}

/// The path to a key's page, READ into one buffer: each level's node, root first, then the
/// page at `page_at`.
#[derive(Debug)]
struct Path {
    steps: SmallVec<[Step; 8]>,
    page: GlobalAddr,
    page_at: usize,
}

/// Record `j`'s child of directory node `d`: a directory a level down (its address and the
/// bytes its first READ takes) or, at level 1, a page (its address).
fn child(d: &Group<'_>, j: usize) -> (GlobalAddr, Option<usize>) {
    let slot = d.record(j).slot;
    match collision::group_of(slot) {
        Some((a, first)) => (a, Some(first)),
        None => (block_at(slot), None),
    }
}

/// Directory node `addr` in `bytes` from `at` on, checked: a directory (never empty:
/// [`Group::parse`]) of the tree's record `stride` (so its keys fit the copies a writer
/// makes), one level below `above` (the parent's level) when there is a parent.
fn node_at(
    (addr, bytes, at): (GlobalAddr, &[u8], usize),
    stride: usize,
    above: Option<u8>,
) -> IndexResult<Group<'_>> {
    let Some(b) = bytes.get(at..) else {
        return Err(IndexError::Corrupt(format!("directory at {addr} runs past what was read")));
    };
    let d = Group::parse(addr, b)?;
    let level_ok = above.is_none_or(|l| d.level() + 1 == l);
    if !d.is_directory() || !level_ok || d.stride() != stride {
        return Err(IndexError::Corrupt(format!(
            "directory at {addr}: level {} with {} records under level {above:?}",
            d.level(),
            d.count()
        )));
    }
    Ok(d)
}

/// One step of a descent: a directory node, the record the key goes down, and its child.
struct Down {
    step: Step,
    /// Where the node's bytes end in the buffer.
    next: usize,
    level: u8,
    /// The child: a node a level down (its address and the bytes of its first READ) or, at
    /// level 1, a page (no length).
    child: GlobalAddr,
    first: Option<usize>,
    /// Keys compared to choose the record.
    compared: u64,
}

/// One step of a descent towards `key`: the directory node at `addr`, whose bytes start at
/// `at` in `bytes`, one level below `above` (its parent's level).
fn step_at(
    (addr, bytes, at): (GlobalAddr, &[u8], usize),
    (stride, above): (usize, Option<u8>),
    key: &[u8],
) -> IndexResult<Down> {
    let d = node_at((addr, bytes, at), stride, above)?;
    let j = d.page_for(key);
    let (step, next) = (Step { at, addr, j }, at + collision::group_len(d.count(), d.stride()));
    let compared = u64::from(d.count().ilog2() + 1);
    match (d.level(), child(&d, j)) {
        (1, (child, None)) => Ok(Down { step, next, level: 1, child, first: None, compared }),
        (level @ 2.., (child, Some(first))) => {
            Ok(Down { step, next, level, child, first: Some(first), compared })
        }
        _ => Err(IndexError::Corrupt(format!(
            "directory at {addr}: record {j} names a child of the wrong kind"
        ))),
    }
}

/// The path to `full`'s page through the directory at `a`, as `bytes` holds it (the root,
/// each node below on the way, the page: what [`Tree::descend_directory`] READ).
fn path_in(a: GlobalAddr, bytes: &[u8], full: &[u8], stride: usize) -> IndexResult<Path> {
    let (mut at, mut addr, mut above, mut steps) = (0, a, None, SmallVec::new());
    // Each step goes a level down; `node_at` refuses a level that does not fall.
    loop {
        let down = step_at((addr, bytes, at), (stride, above), full)?;
        steps.push(down.step);
        if down.level == 1 {
            return Ok(Path { steps, page: down.child, page_at: down.next });
        }
        (at, addr, above) = (down.next, down.child, Some(down.level));
    }
}

impl Tree {
    /// The shape of this tree's pages ([`crate::collision::page`]).
    pub(crate) fn page_shape(&self) -> PageShape {
        PageShape::for_keys(self.blocks.max_key)
    }

    /// The record stride of this tree's groups and directory nodes.
    pub(crate) fn stride(&self) -> usize {
        collision::stride(self.blocks.max_key)
    }

    /// Where key `full` is in the directory at `a` (entry `entry`), its root READ into
    /// `scratch`: the nodes below on the key's path and its page are READ after it, into
    /// `scratch` (a writer finds the path there, [`Tree::write_in_directory`]).
    pub(crate) async fn resolve_in_page<T: Transport>(
        &self,
        c: &Client<T>,
        entry: usize,
        a: GlobalAddr,
        full: &[u8],
        scratch: &mut Vec<u8>,
    ) -> IndexResult<Resolved> {
        let path = self.descend_directory(c, a, full, scratch).await?;
        let mut keys = self.group_bufs.get(c, Vec::new);
        let got = self.read_page(c, path.page, scratch, path.page_at, &mut keys).await?;
        c.compute(Work::KeyCompare, got.held.len() as u64);
        let page = path.page;
        Ok(match got.held.iter().find(|h| &keys[h.key.clone()] == full) {
            Some(h) => {
                Resolved::InGroup { entry, slot_at: page.add(h.slot_at as u64), slot: h.slot }
            }
            None => Resolved::Absent { group: Some(entry), plain: 0 },
        })
    }

    /// READs the directory nodes below the root at `a` (READ into `buf`) on `full`'s path,
    /// each after the last in `buf`: the path to its page (not READ).
    async fn descend_directory<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        full: &[u8],
        buf: &mut Vec<u8>,
    ) -> IndexResult<Path> {
        let (mut at, mut addr, mut above, mut steps) = (0, a, None, SmallVec::new());
        // Each step goes a level down; `node_at` refuses a level that does not fall.
        loop {
            let down = step_at((addr, buf, at), (self.stride(), above), full)?;
            c.compute(Work::KeyCompare, down.compared);
            steps.push(down.step);
            match down.first {
                None => return Ok(Path { steps, page: down.child, page_at: down.next }),
                Some(first) => self.read_group_at(c, down.child, first, buf, down.next).await?,
            }
            (at, addr, above) = (down.next, down.child, Some(down.level));
        }
    }

    /// READs the page at `page` into `buf` from offset `at` on (`buf` cut there first) and
    /// gathers its records' keys into `keys` (a record seen torn is an append in flight, not
    /// there yet: [`crate::collision::page`]).
    async fn read_page<T: Transport>(
        &self,
        c: &Client<T>,
        page: GlobalAddr,
        buf: &mut Vec<u8>,
        at: usize,
        keys: &mut Vec<u8>,
    ) -> IndexResult<Gathered> {
        let shape = self.page_shape();
        if c.info().within_region(page, shape.bytes()) < shape.bytes() {
            return Err(IndexError::Corrupt(format!("page at {page} runs past its region")));
        }
        buf.truncate(at);
        buf.resize(at + shape.bytes(), 0);
        c.read(page, &mut buf[at..]).await?;
        c.compute(Work::BytesScanned, shape.bytes() as u64);
        Page::parse(page, &buf[at..], shape)?.gather(page, keys)
    }

    /// The remote half of an insert (`Some(v)`) or a delete (`None`) of long key `full` in the
    /// directory that entry `entry` names (value slot `slot`), the leaf at `leaf` locked:
    /// `bytes` holds the key's path and page, as [`Tree::resolve_long`] READ them. An insert
    /// appends the key's record to its page in place when the page has room (unawaited when
    /// the page lives on the leaf's memory node, whose unlock comes after it on that
    /// connection; awaited first otherwise). A full page is split; a delete copies its page
    /// without the key, or drops it when it held only the key; then every node on the path is
    /// copied with the change, bottom up ([`Tree::copy_path`]), and the leaf entry will name
    /// the new root.
    pub(crate) async fn write_in_directory<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        (entry, slot, bytes): (usize, [u8; 8], &[u8]),
        full: &[u8],
        v: Option<[u8; 8]>,
    ) -> IndexResult<InLeaf> {
        let shape = self.page_shape();
        let a = collision::group_of(slot).map_or(GlobalAddr::NULL, |g| g.0);
        let path = path_in(a, bytes, full, self.stride())?;
        let Some(page_bytes) = bytes.get(path.page_at..) else {
            return Err(IndexError::Corrupt(format!("directory at {a}: no page read")));
        };
        let mut keys = self.group_bufs.get(c, Vec::new);
        let got = Page::parse(path.page, page_bytes, shape)?.gather(path.page, &mut keys)?;
        let held = |h: &page::Held| (&keys[h.key.clone()], h.slot);
        let at = got.held.iter().position(|h| &keys[h.key.clone()] == full);
        let node = leaf.node();
        let pages: Nodes<'_> = match (at, v, got.first_empty) {
            (None, Some(v), Some(r)) => {
                let mut rec = [0u8; 5 * page::LINE];
                let rec = &mut rec[..shape.record_len()];
                page::encode_record(shape, full, v, rec);
                let to = path.page.add(shape.record_at(r) as u64);
                match to.node() == node {
                    true => c.write_zero_wait(to, rec)?,
                    false => c.write(to, rec).await?,
                }
                return Ok(InLeaf::Nothing);
            }
            (None, Some(v), None) => {
                let mut records: SmallVec<[Child<'_>; 36]> = got.held.iter().map(held).collect();
                records.push((full, v));
                records.sort_unstable_by(|x, y| x.0.cmp(y.0));
                c.compute(Work::KeyCompare, (records.len() * 5) as u64);
                self.post_pages(c, node, &records).await?
            }
            (Some(i), None, _) => {
                let kept: SmallVec<[Child<'_>; page::MOST_RECORDS]> = got
                    .held
                    .iter()
                    .enumerate()
                    .filter(|&(h, _)| h != i)
                    .map(|(_, h)| held(h))
                    .collect();
                match kept.is_empty() {
                    true => SmallVec::new(),
                    false => SmallVec::from_iter([self.post_one_page(c, node, &kept).await?]),
                }
            }
            (Some(_), Some(_), _) | (None, None, _) => {
                return Err(IndexError::Corrupt(format!("directory at {a} changed under the lock")))
            }
        };
        let root = self.copy_path(c, node, bytes, &path, pages).await?;
        Ok(root.map_or(InLeaf::Drop(entry), |root| InLeaf::Name(entry, root)))
    }

    /// Copies every directory node of `path` (READ into `bytes`), bottom up, with the key's
    /// page replaced by `repl` (none: the page leaves), on memory node `node`, unawaited: a
    /// node past [`collision::fanout`] records splits, one left empty leaves its parent, and a
    /// root that splits gets a new root above it. The new root's value slot, or `None` when
    /// the directory is left empty.
    async fn copy_path<'k, T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        bytes: &'k [u8],
        path: &Path,
        mut repl: Nodes<'k>,
    ) -> IndexResult<Option<[u8; 8]>> {
        let mut level = 1;
        for step in path.steps.iter().rev() {
            let d = Group::parse(step.addr, &bytes[step.at..])?;
            level = d.level();
            // The first in the key's place keeps its place's key, or its own when lower (a
            // first child takes keys below its record's: the records stay in order).
            if let Some(first) = repl.first_mut() {
                first.0 = first.0.min(d.record(step.j).key);
            }
            let record = |i| {
                let r = d.record(i);
                (r.key, r.slot)
            };
            let around = (0..step.j).map(record).chain(repl.drain(..));
            let records: SmallVec<[Child<'k>; 96]> =
                around.chain((step.j + 1..d.count()).map(record)).collect();
            repl = self.post_nodes(c, node, level, &records).await?;
        }
        self.post_above(c, node, repl, level + 1).await
    }

    /// Directory nodes of `level` over `children` (in key order), at most
    /// [`collision::fanout`] children each and as even as that allows, posted unawaited on
    /// memory node `node`: each node as its parent names it. None when there is no child.
    async fn post_nodes<'k, T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        level: u8,
        children: &[Child<'k>],
    ) -> IndexResult<Nodes<'k>> {
        debug_assert!(children.windows(2).all(|w| w[0].0 < w[1].0), "children in key order");
        let stride = self.stride();
        let n = children.len();
        let parts = n.div_ceil(collision::fanout(stride));
        let mut out = self.group_bufs.get(c, Vec::new);
        let mut nodes = Nodes::new();
        for p in 0..parts {
            let part = &children[p * n / parts..(p + 1) * n / parts];
            collision::encode_directory(stride, level, part.iter().copied(), &mut out);
            c.compute(Work::BytesScanned, out.len() as u64);
            nodes.push((part[0].0, self.post_group(c, node, &out, false).await?));
        }
        Ok(nodes)
    }

    /// The root over `children` (directory nodes of `level` − 1, or pages when `level` is 1),
    /// with as many levels from `level` up as it takes: its value slot (`None`: no child).
    /// Each pass posts nodes of at most [`collision::fanout`] (at least 2) children over the
    /// last pass's, so their count falls until one node is left, the root.
    async fn post_above<'k, T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        mut children: Nodes<'k>,
        mut level: u8,
    ) -> IndexResult<Option<[u8; 8]>> {
        loop {
            match children.len() {
                0 => return Ok(None),
                1 if level > 1 => return Ok(Some(children[0].1)),
                _ if level > MOST_LEVELS => {
                    return Err(IndexError::Corrupt(format!("a directory of {level} levels")))
                }
                _ => {}
            }
            children = self.post_nodes(c, node, level, &children).await?;
            level += 1;
        }
    }

    /// Pages holding `records` (in key order, no key twice), as evenly as pages of at most
    /// half a page's records and one allow (a full page and a key: two pages), written
    /// unawaited on memory node `node`: each page as its directory names it.
    async fn post_pages<'k, T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        records: &[Child<'k>],
    ) -> IndexResult<Nodes<'k>> {
        let per = self.page_shape().records / 2 + 1;
        let (n, mut pages) = (records.len(), SmallVec::new());
        let parts = n.div_ceil(per);
        for p in 0..parts {
            pages.push(
                self.post_one_page(c, node, &records[p * n / parts..(p + 1) * n / parts]).await?,
            );
        }
        Ok(pages)
    }

    /// One page holding `records` (at least one, at most a page's), posted unawaited on
    /// memory node `node`, as its directory names it.
    async fn post_one_page<'k, T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        records: &[Child<'k>],
    ) -> IndexResult<Child<'k>> {
        let shape = self.page_shape();
        let mut out = self.group_bufs.get(c, Vec::new);
        page::encode(shape, records.iter().copied(), &mut out);
        let a = c.alloc_on(node, shape.bytes() as u64, 64).await?;
        c.write_zero_wait(a, &out)?;
        Ok((records[0].0, a.raw().to_le_bytes()))
    }

    /// A small group's records past a page's worth (`records`, in key order) as a new
    /// directory posted unawaited on memory node `node`: its value slot.
    pub(crate) async fn post_directory<T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        records: &[Child<'_>],
    ) -> IndexResult<[u8; 8]> {
        let pages = self.post_pages(c, node, records).await?;
        match self.post_above(c, node, pages, 1).await? {
            Some(root) => Ok(root),
            None => Err(IndexError::Corrupt("a directory of no key".into())),
        }
    }

    /// A scan's keys in the directory at `a` (its root `root`, READ): from the page of `from`
    /// on, in key order, as many as `left` of those `keep` takes, their value slots pushed to
    /// `grouped` (as `(0, slot)`); how many. Pages are READ a few at a time (one doorbell: as
    /// many as `left` keys need at half a page's records each, up to a round's READs; the
    /// directory nodes on the way are READ as the walk reaches them), each page's records
    /// sorted, as they are appended in no order. A page after the first whose record's key is
    /// not taken (a key above `from`: past the scan's end) ends it; a node's first record's
    /// key bounds nothing and ends nothing ([`crate::collision`]).
    pub(crate) async fn scan_directory<T: Transport>(
        &self,
        c: &Client<T>,
        (a, root): (GlobalAddr, &[u8]),
        (from, keep): (&[u8], &impl Fn(&[u8]) -> bool),
        left: usize,
        grouped: &mut Vec<(u64, [u8; 8])>,
    ) -> IndexResult<usize> {
        let shape = self.page_shape();
        let mut walk = Walk { nodes: self.group_bufs.get(c, Vec::new), stack: SmallVec::new() };
        walk.nodes.clear();
        walk.nodes.extend_from_slice(root);
        walk.stack = self.descend_directory(c, a, from, &mut walk.nodes).await?.steps;
        let (mut buf, mut keys) =
            (self.group_bufs.get(c, Vec::new), self.group_bufs.get(c, Vec::new));
        let mut pieces = SmallVec::<[(GlobalAddr, usize); doorbell::ROUND_READS]>::new();
        let (mut taken, mut first, mut ended) = (0, true, false);
        // Each round READs a page at least, or ends: the pages are finite.
        while taken < left && !ended {
            let want = (left - taken).div_ceil((shape.records / 2).max(1));
            pieces.clear();
            while pieces.len() < want.clamp(1, doorbell::ROUND_READS) {
                match self.next_page(c, &mut walk, keep).await? {
                    Some((_, false)) if !first => ended = true,
                    Some((page, _)) => pieces.push((page, shape.bytes())),
                    None => ended = true,
                }
                first = false;
                if ended {
                    break;
                }
            }
            if pieces.iter().any(|p| c.info().within_region(p.0, p.1) < p.1) {
                return Err(IndexError::Corrupt(format!("a page of {a} runs past its region")));
            }
            buf.clear();
            buf.resize(pieces.len() * shape.bytes(), 0);
            doorbell::read_per_node(c, &pieces, &mut buf).await?;
            c.compute(Work::BytesScanned, buf.len() as u64);
            for (i, &(page, len)) in pieces.iter().enumerate() {
                let got = Page::parse(page, &buf[i * len..(i + 1) * len], shape)?
                    .gather(page, &mut keys)?;
                let mut order: SmallVec<[usize; page::MOST_RECORDS]> =
                    (0..got.held.len()).collect();
                order.sort_unstable_by(|&x, &y| {
                    keys[got.held[x].key.clone()].cmp(&keys[got.held[y].key.clone()])
                });
                c.compute(
                    Work::KeyCompare,
                    (order.len() * order.len().max(1).ilog2() as usize) as u64,
                );
                for h in order.iter().map(|&x| &got.held[x]) {
                    if taken == left {
                        return Ok(taken);
                    }
                    if keep(&keys[h.key.clone()]) {
                        grouped.push((0, h.slot));
                        taken += 1;
                    }
                }
            }
        }
        Ok(taken)
    }

    /// The next page of `walk` and whether `keep` takes its lowest key; `None` past the last.
    /// A node done with is left for its parent's next child, whose nodes down to its first
    /// page are READ.
    async fn next_page<T: Transport>(
        &self,
        c: &Client<T>,
        walk: &mut Walk<'_>,
        keep: &impl Fn(&[u8]) -> bool,
    ) -> IndexResult<Option<(GlobalAddr, bool)>> {
        // Each pass returns, goes down a level, or leaves one: the stack's depth is bounded
        // and each node's children are finite.
        loop {
            let Some(&Step { at, addr, j }) = walk.stack.last() else { return Ok(None) };
            let (count, level) = {
                let d = Group::parse(addr, &walk.nodes[at..])?;
                (d.count(), d.level())
            };
            if j >= count {
                walk.stack.pop();
                walk.nodes.truncate(at);
                if let Some(parent) = walk.stack.last_mut() {
                    parent.j += 1;
                }
                continue;
            }
            let (low_kept, (down, first)) = {
                let d = Group::parse(addr, &walk.nodes[at..])?;
                // A first record's key bounds nothing (module docs): never an end.
                (j == 0 || keep(d.record(j).key), child(&d, j))
            };
            if level == 1 {
                walk.stack.last_mut().expect("a node").j += 1;
                return Ok(Some((down, low_kept)));
            }
            let Some(first) = first else {
                return Err(IndexError::Corrupt(format!(
                    "directory at {addr}: a page above level 1"
                )));
            };
            let next = walk.nodes.len();
            self.read_group_at(c, down, first, &mut walk.nodes, next).await?;
            node_at((down, &walk.nodes, next), self.stride(), Some(level))?;
            walk.stack.push(Step { at: next, addr: down, j: 0 });
        }
    }
}

/// A scan's place among a directory's pages: the nodes from the root to a level-1 node, each
/// READ after its parent in `nodes`, and in each the record it is at (at level 1, the next
/// page to take).
struct Walk<'p> {
    nodes: dmindex_prim::pool::Pooled<'p, Vec<u8>>,
    stack: SmallVec<[Step; 8]>,
}
