//! Long keys in a leaf: told apart by their blocks, or found in their prefix's collision group,
//! and the remote half of the writes that make, copy and change groups ([`crate::collision`]
//! has the layout and why each step is safe). Both leaf kinds share it; each changes its leaf
//! its own way ([`InLeaf`]: `hopscotch`, `crate::sorted`).

use dmindex_fabric::{Client, GlobalAddr, NodeId, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::doorbell;
use dmindex_prim::kv_block::CANDIDATES;
use smallvec::SmallVec;

use super::{LockedLeaf, Tree};
use crate::collision::{self, Group};
use crate::view::LeafView;

/// Where a long key is in a leaf that was READ (and, for a writer, is locked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Entry `i`'s block holds the key.
    Entry(usize),
    /// Entry `entry` names the prefix's group, which holds the key: its record's value slot
    /// (`slot`) is the word at `slot_at`.
    InGroup { entry: usize, slot_at: GlobalAddr, slot: [u8; 8] },
    /// The key is not in the leaf. `group`: the entry naming its prefix's group, if there is
    /// one; else `plain`, how many plain entries share the prefix.
    Absent { group: Option<usize>, plain: usize },
}

impl Resolved {
    /// The prefix's group, when the leaf has one: its entry, and the address of the key's
    /// record's slot word when the group holds the key.
    pub(crate) fn group(self) -> Option<(usize, Option<GlobalAddr>)> {
        match self {
            Resolved::InGroup { entry, slot_at, .. } => Some((entry, Some(slot_at))),
            Resolved::Absent { group: Some(entry), .. } => Some((entry, None)),
            Resolved::Entry(_) | Resolved::Absent { group: None, .. } => None,
        }
    }
}

/// The address a value slot holds (a key-value block's, or a page's in a directory).
pub(super) fn block_at(slot: [u8; 8]) -> GlobalAddr {
    GlobalAddr::from_raw(u64::from_le_bytes(slot))
}

impl Tree {
    /// Long keys: where key `full` (leaf key `k`) is among `slots` (loaded) of `buf`. Entries
    /// sharing the prefix are told apart by their blocks, all READ in one round trip (blocks
    /// are immutable once published, so any READ of them is consistent with the validated leaf
    /// READ that named them); keys that share 8-byte prefixes by the dozen (YCSB's `user…`)
    /// would otherwise take a round trip per block. An entry naming the prefix's group is READ
    /// instead (one round trip) and the key looked up in it; a group wins over plain entries
    /// of its prefix (see [`crate::collision`]).
    ///
    /// `scratch` is left holding, with `value` (a search) and a block holding the key, that
    /// block's value (the block's READ took it: it is not READ again); when the prefix has a
    /// group, the group's bytes.
    pub(crate) async fn resolve_long<T: Transport>(
        &self,
        c: &Client<T>,
        buf: &impl LeafView,
        slots: impl IntoIterator<Item = usize>,
        (k, full): (u64, &[u8]),
        scratch: &mut Vec<u8>,
        value: bool,
    ) -> IndexResult<Resolved> {
        let (mut at, mut blocks) =
            (SmallVec::<[usize; CANDIDATES]>::new(), SmallVec::<[GlobalAddr; CANDIDATES]>::new());
        let mut group = None;
        for i in slots.into_iter().filter(|&i| buf.key(i) == k) {
            match collision::group_of(buf.value(i)) {
                Some(g) => {
                    group.get_or_insert((i, g));
                }
                None => {
                    at.push(i);
                    blocks.push(block_at(buf.value(i)));
                }
            }
        }
        if let Some((entry, (a, first))) = group {
            self.read_group(c, a, first, scratch).await?;
            let g = Group::parse(a, scratch)?;
            if g.is_directory() {
                return self.resolve_in_page(c, entry, a, full, scratch).await;
            }
            let (found, compared) = g.search(full);
            c.compute(Work::KeyCompare, compared);
            return Ok(match found {
                Ok(j) => {
                    let r = g.record(j);
                    Resolved::InGroup { entry, slot_at: a.add(r.slot_at as u64), slot: r.slot }
                }
                Err(_) => Resolved::Absent { group: Some(entry), plain: 0 },
            });
        }
        if blocks.is_empty() {
            return Ok(Resolved::Absent { group: None, plain: 0 });
        }
        let value = value.then_some(scratch);
        // One block is one READ alone, as `holds_key` would post it.
        Ok(match self.blocks.first_holding_key(c, &blocks, full, value).await? {
            Some(j) => Resolved::Entry(at[j]),
            None => Resolved::Absent { group: None, plain: at.len() },
        })
    }

    /// READs the group at `a` whole into `buf` (cleared first): its first READ of `first`
    /// bytes (what its value slot names, cut at the end of its node's region), and the rest
    /// after it when longer.
    pub(crate) async fn read_group<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        first: usize,
        buf: &mut Vec<u8>,
    ) -> IndexResult<()> {
        self.read_group_at(c, a, first, buf, 0).await
    }

    /// [`Tree::read_group`] into `buf` from offset `at` on (`buf` cut there first): a directory
    /// node READ after its parents on a key's path.
    pub(super) async fn read_group_at<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        first: usize,
        buf: &mut Vec<u8>,
        at: usize,
    ) -> IndexResult<()> {
        let first = c.info().within_region(a, first);
        buf.truncate(at);
        buf.resize(at + first, 0);
        c.read(a, &mut buf[at..]).await?;
        self.group_rest(c, a, buf, at).await
    }

    /// `buf` holds from offset `at` on the first bytes of the group at `a`: its rest READ
    /// after them, if any.
    async fn group_rest<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        buf: &mut Vec<u8>,
        at: usize,
    ) -> IndexResult<()> {
        let (have, len) = (buf.len() - at, collision::len_of(a, &buf[at..])?);
        c.compute(Work::BytesScanned, have.min(len) as u64);
        if len > have {
            if c.info().within_region(a, len) < len {
                return Err(IndexError::Corrupt(format!("group at {a} runs past its region")));
            }
            buf.resize(at + len, 0);
            c.read(a.add(have as u64), &mut buf[at + have..]).await?;
            c.compute(Work::BytesScanned, (len - have) as u64);
        }
        Ok(())
    }

    /// The whole group at `a` whose first READ gave `first`: `first` itself when it holds the
    /// group (most groups: the READ its slot names is the group), else `first` and the rest
    /// READ after it, in `rest` (a scan that READ many blocks' first bytes together).
    pub(crate) async fn whole_group<'b, T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        first: &'b [u8],
        rest: &'b mut Vec<u8>,
    ) -> IndexResult<&'b [u8]> {
        let len = collision::len_of(a, first)?;
        if len <= first.len() {
            c.compute(Work::BytesScanned, len as u64);
            return Ok(first);
        }
        rest.clear();
        rest.extend_from_slice(first);
        self.group_rest(c, a, rest, 0).await?;
        Ok(rest)
    }

    /// Writes group `bytes` to fresh memory on memory node `node` and returns the value slot
    /// naming it. Unawaited (`awaited` false), the caller's later verbs to `node` (the leaf
    /// entry naming it, when the leaf lives there) execute after it; awaited, it is in place
    /// before an entry anywhere names it. Allocated in whole [`collision::UNIT`]s, so the READ
    /// its slot names stays inside it.
    pub(super) async fn post_group<T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        bytes: &[u8],
        awaited: bool,
    ) -> IndexResult<[u8; 8]> {
        let size = bytes.len().next_multiple_of(collision::UNIT) as u64;
        let a = c.alloc_on(node, size, 64).await?;
        match awaited {
            true => c.write(a, bytes).await?,
            false => c.write_zero_wait(a, bytes)?,
        }
        Ok(collision::slot_of(a, bytes.len()))
    }

    /// The group of the plain entries `slots` of `view` (all holding prefix `k`, their keys in
    /// their blocks) and key `full` with value slot `v`, written on memory node `node`: one
    /// round trip READs every block's key (a doorbell), one writes the group. Returns its
    /// value slot.
    pub(crate) async fn post_new_group<T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        view: &impl LeafView,
        slots: &[usize],
        full: &[u8],
        v: [u8; 8],
    ) -> IndexResult<[u8; 8]> {
        let pieces: SmallVec<[(GlobalAddr, usize); CANDIDATES]> = slots
            .iter()
            .map(|&i| block_at(view.value(i)))
            .map(|a| (a, self.blocks.key_read_at(c, a)))
            .collect();
        // A group forms once per prefix and leaf: its buffers are not pooled.
        let mut heads = vec![0u8; pieces.iter().map(|p| p.1).sum()];
        doorbell::read_per_node(c, &pieces, &mut heads).await?;
        c.compute(Work::BytesScanned, heads.len() as u64);
        let mut records: Vec<(&[u8], [u8; 8])> = Vec::with_capacity(slots.len() + 1);
        for (&i, key) in slots.iter().zip(self.blocks.keys_of(&pieces, &heads)) {
            records.push((key?, view.value(i)));
        }
        records.push((full, v));
        records.sort_unstable_by(|x, y| x.0.cmp(y.0));
        c.compute(Work::KeyCompare, (records.len() * records.len().ilog2() as usize) as u64);
        if records.windows(2).any(|w| w[0].0 == w[1].0) {
            let k = crate::prefix_of(full);
            return Err(IndexError::Corrupt(format!(
                "two entries hold one key of prefix {k:016x}"
            )));
        }
        let mut bytes = Vec::new();
        collision::encode(self.stride(), records, &mut bytes);
        // Awaited: a hopscotch leaf takes the group's entry as any insert, which may split
        // the leaf and write the entry to another memory node.
        self.post_group(c, node, &bytes, true).await
    }

    /// The group READ into `group` (named by value slot `slot`) with key `full` added with
    /// value slot `v` (absent from it), or removed (`None`; present in it), posted on memory
    /// node `node`: its value slot, or `None` when the last key was removed (nothing posted).
    pub(crate) async fn post_regrouped<T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
        (slot, group): ([u8; 8], &[u8]),
        full: &[u8],
        v: Option<[u8; 8]>,
    ) -> IndexResult<Option<[u8; 8]>> {
        let a = collision::group_of(slot).map_or(GlobalAddr::NULL, |g| g.0);
        let g = Group::parse(a, group)?;
        let stride = g.stride();
        // A directory made of this group copies its keys into the tree's records.
        if full.len() > stride - collision::RECORD_EXTRA || stride != self.stride() {
            return Err(IndexError::Corrupt(format!("group at {a} has {stride}-B records")));
        }
        let mut out = self.group_bufs.get(c, Vec::new);
        let (n, record) = (g.count(), |i| {
            let r = g.record(i);
            (r.key, r.slot)
        });
        match (g.search(full).0, v) {
            (Err(j), Some(v)) if n >= self.page_shape().records => {
                // Past a page's worth, the group becomes a directory of pages.
                let added = (0..j).map(record).chain([(full, v)]).chain((j..n).map(record));
                let records: Vec<_> = added.collect();
                return self.post_directory(c, node, &records).await.map(Some);
            }
            (Err(j), Some(v)) => {
                let added = (0..j).map(record).chain([(full, v)]).chain((j..n).map(record));
                collision::encode(stride, added, &mut out);
            }
            (Ok(_), None) if n == 1 => return Ok(None),
            (Ok(j), None) => {
                let kept = (0..j).chain(j + 1..n).map(record);
                collision::encode(stride, kept, &mut out);
            }
            (Ok(_), Some(_)) | (Err(_), None) => {
                return Err(IndexError::Corrupt(format!("group at {a} changed under the lock")))
            }
        }
        c.compute(Work::BytesScanned, out.len() as u64);
        Ok(Some(self.post_group(c, node, &out, false).await?))
    }

    /// The remote half of a long key's write in its prefix's group, the leaf locked: entry
    /// `entry` names the group (value slot `slot`, bytes `bytes` as [`Tree::resolve_long`]
    /// READ them), which holds the key's record at `record` (its slot word's address) or not.
    /// An update of a record (`Some(v)`) writes its slot word in place, unawaited when the
    /// group lives on the leaf's memory node (RC order puts it before the unlock) and awaited
    /// when a split moved the leaf elsewhere; an insert (`Some(v)`, no record) or a delete
    /// (`None`) posts a copy of the group with the key added or removed on the leaf's node.
    /// Returns what the leaf must change before it is unlocked.
    pub(crate) async fn write_in_group<T: Transport>(
        &self,
        c: &Client<T>,
        leaf: GlobalAddr,
        (entry, slot, bytes): (usize, [u8; 8], &[u8]),
        (full, record): (&[u8], Option<GlobalAddr>),
        v: Option<[u8; 8]>,
    ) -> IndexResult<InLeaf> {
        let a = collision::group_of(slot).map_or(GlobalAddr::NULL, |g| g.0);
        match (record, v) {
            (Some(at), Some(v)) if at.node() == leaf.node() => c.write_zero_wait(at, &v)?,
            (Some(at), Some(v)) => c.write(at, &v).await?,
            (_, v) if Group::parse(a, bytes)?.is_directory() => {
                return self.write_in_directory(c, leaf, (entry, slot, bytes), full, v).await;
            }
            (_, v) => {
                let copy = self.post_regrouped(c, leaf.node(), (slot, bytes), full, v).await?;
                return Ok(match copy {
                    Some(named) => InLeaf::Name(entry, named),
                    None => InLeaf::Drop(entry),
                });
            }
        }
        Ok(InLeaf::Nothing)
    }

    /// `r`, with locked leaf `leaf` back when it is `Ok`; an error (out of memory, a corrupt
    /// group) unlocks the leaf first, so it never stays locked behind a live client.
    pub(crate) async fn or_unlock<'t, T: Transport, R>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'t>,
        r: IndexResult<R>,
    ) -> IndexResult<(R, LockedLeaf<'t>)> {
        match r {
            Ok(r) => Ok((r, leaf)),
            Err(e) => {
                self.unlock_leaf(c, leaf).await?;
                Err(e)
            }
        }
    }

    /// `change`, unless it takes a group's entry away while plain entries it shadows are still
    /// beside it (`shadowed`): the entry then names an empty group, posted (unawaited) on the
    /// leaf's memory node, and they leave in the caller's WRITE. An entry removed in a WRITE cut
    /// short could let them be read again ([`crate::collision`]).
    pub(crate) async fn keep_shadowed_silent<'t, T: Transport>(
        &self,
        c: &Client<T>,
        leaf: LockedLeaf<'t>,
        change: InLeaf,
        shadowed: bool,
    ) -> IndexResult<(InLeaf, LockedLeaf<'t>)> {
        let (InLeaf::Drop(e), true) = (change, shadowed) else { return Ok((change, leaf)) };
        let mut empty = Vec::new();
        collision::encode(self.stride(), [], &mut empty);
        let posted = self.post_group(c, leaf.addr.node(), &empty, false).await;
        let (slot, leaf) = self.or_unlock(c, leaf, posted).await?;
        Ok((InLeaf::Name(e, slot), leaf))
    }
}

/// What a write in a collision group leaves its leaf to change, with the lock held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InLeaf {
    /// Entry `.0` names the group's copy, value slot `.1`.
    Name(usize, [u8; 8]),
    /// The group's last key left: entry `.0` goes.
    Drop(usize),
    /// Nothing (a record's slot word was written in place).
    Nothing,
}
