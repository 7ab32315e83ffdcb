//! Search, insert, update and delete.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::radix::header::MAX_PREFIX;
use dmindex_prim::radix::node::{slot_addr, Lookup};
use dmindex_prim::radix::slot::{Child, MAX_LEAF};
use dmindex_prim::radix::{At, Header, Kind, NodeImage, Partial, Pos, Slot};

use crate::leaf::{self, LeafView, State, Status, LEAF_HEADER};
use crate::{bump, SmartIndex, Variant, ROOT_KIND};

/// A live leaf holding the key, and the slot it was reached through.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub addr: GlobalAddr,
    pub len: usize,
    pub rev: GlobalAddr,
    /// The slot (address, word as seen) naming the first leaf of the chain that led here.
    pub slot: Option<(GlobalAddr, Slot)>,
}

/// What following a leaf slot found.
enum Leaf {
    Live(Item),
    /// The chain ended in a deleted leaf of this key.
    Deleted,
    /// The leaf holds another key (live, or deleted: `deleted`).
    Other {
        item: Item,
        deleted: bool,
        key_at: usize,
    },
}

enum Outcome {
    Done,
    Retry,
}

impl<V: Variant> SmartIndex<V> {
    /// READs the leaf of `len` bytes at `addr` until it checks (an in-place update may tear it).
    pub(crate) async fn read_leaf<'b, T: Transport>(
        &self,
        c: &Client<T>,
        addr: GlobalAddr,
        len: usize,
        buf: &'b mut [u8; MAX_LEAF],
    ) -> IndexResult<LeafView<'b>> {
        let mut attempts = Attempts::new();
        loop {
            c.read(addr, &mut buf[..len]).await?;
            // The checksum walks the leaf's body; its header is decoded.
            c.compute(Work::BytesScanned, len as u64);
            if LeafView::decode(&buf[..len]).is_ok() {
                break;
            }
            attempts.failed(addr, "leaf checksum")?;
            bump(&self.counters.torn_leaves);
        }
        LeafView::decode(&buf[..len])
            .map_err(|_| IndexError::Corrupt(format!("smart leaf at {addr:?} does not check")))
    }

    /// Follows the leaf named by `s` (and its moves) for `key`; `value` receives a live item's
    /// value.
    async fn follow<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        slot: Option<(GlobalAddr, Slot)>,
        mut s: Slot,
        value: Option<&mut Vec<u8>>,
    ) -> IndexResult<Leaf> {
        let mut buf = [0u8; MAX_LEAF];
        // Moves followed: a chain of moved leaves that does not end is garbage.
        let mut moves = Attempts::new();
        loop {
            let Some(Child::Leaf { addr, len }) = s.child() else {
                return Err(IndexError::Corrupt("a smart leaf slot names no leaf".into()));
            };
            let v = self.read_leaf(c, addr, len, &mut buf).await?;
            // A move is followed whatever key the leaf holds: the leaf it names holds the same
            // key, and only the end of the chain says whether that key is live. (Taking a
            // moved leaf of another key for a deleted one let an insert overwrite its slot
            // and lose the item.)
            let live = match v.status.state() {
                State::Moved(t) => {
                    moves.failed(addr, "chain of moved leaves")?;
                    s = t;
                    continue;
                }
                State::Live { .. } => true,
                State::Deleted => false,
                State::Invalid => {
                    return Err(IndexError::Corrupt(format!(
                        "smart leaf at {addr:?} has no status"
                    )))
                }
            };
            let item = Item { addr, len, rev: v.rev, slot };
            if v.key != key {
                let key_at = key.iter().zip(v.key).take_while(|(a, b)| a == b).count();
                return Ok(Leaf::Other { item, deleted: !live, key_at });
            }
            if !live {
                return Ok(Leaf::Deleted);
            }
            if let Some(out) = value {
                out.clear();
                out.extend_from_slice(v.value);
            }
            return Ok(Leaf::Live(item));
        }
    }

    /// The live leaf of `key`, if any (its value into `value`).
    pub(crate) async fn find<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        mut value: Option<&mut Vec<u8>>,
    ) -> IndexResult<Option<Item>> {
        // Fast path: a leaf slot in the deepest cached copy.
        let w = self.cache.walk(self.root, ROOT_KIND, key);
        c.compute(Work::RadixStep, w.probes);
        if let Some((i, s)) = w.slot {
            if !s.is_frozen() && !s.is_tombstone() && matches!(s.child(), Some(Child::Leaf { .. }))
            {
                let slot = Some((slot_addr(w.node, i), s));
                if let Leaf::Live(item) = self.follow(c, key, slot, s, value.as_deref_mut()).await?
                {
                    self.counters.cache_hits.bump(c.ordinal());
                    return Ok(Some(item));
                }
            }
        }
        let pos = self.tree().locate(c, key, true).await?;
        match pos.at {
            At::Slot(Lookup::Found(i, s)) if !s.is_tombstone() => {
                let slot = Some((slot_addr(pos.node, i), s));
                match self.follow(c, key, slot, s, value).await? {
                    Leaf::Live(item) => Ok(Some(item)),
                    Leaf::Deleted | Leaf::Other { .. } => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }

    /// The value of `key` into `out` (cleared first): whether the key is present.
    pub(crate) async fn search_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        self.counters.searches.bump(c.ordinal());
        out.clear();
        // `find` writes `out` only for the live item it returns.
        Ok(self.find(c, key, Some(out)).await?.is_some())
    }

    /// Writes a new leaf on memory node `near`'s side, without waiting; the slot CAS that
    /// publishes it must go to the same memory node (and so executes after it).
    async fn post_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        near: GlobalAddr,
        rev: GlobalAddr,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<(GlobalAddr, usize)> {
        let mut buf = [0u8; MAX_LEAF];
        let len = leaf::encode(rev, key, value, &mut buf);
        let at = c.alloc_on(near.node(), len as u64, 64).await?;
        c.write_zero_wait(at, &buf[..len])?;
        Ok((at, len))
    }

    /// CASes slot `i` of `pos.node` from `old` to a new leaf for the item.
    async fn publish_leaf<T: Transport>(
        &self,
        c: &Client<T>,
        pos: &Pos,
        i: usize,
        old: Slot,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool> {
        let at = slot_addr(pos.node, i);
        let (leaf, len) = self.post_leaf(c, pos.node, at, key, value).await?;
        let new = leaf::slot(Partial::of(key, pos.depth()), leaf, len);
        Ok(c.cas(at, old.0, new.0).await? == old.0)
    }

    pub(crate) async fn insert_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<()> {
        loop {
            let pos = self.tree().locate(c, key, true).await?;
            let done = match pos.at {
                At::Mismatch(j) => self.path_split(c, &pos, j, key, value).await?,
                At::Slot(Lookup::Absent(Some(i))) => {
                    self.publish_leaf(c, &pos, i, Slot::EMPTY, key, value).await?
                }
                At::Slot(Lookup::Absent(None)) => {
                    let link = pos.link.ok_or_else(|| {
                        IndexError::Corrupt("the smart root has no free slot".into())
                    })?;
                    self.tree().switch(c, &link, pos.node, &pos.img).await?;
                    false
                }
                At::Slot(Lookup::Found(i, s)) if s.is_tombstone() => {
                    self.publish_leaf(c, &pos, i, s, key, value).await?
                }
                At::Slot(Lookup::Found(i, s)) => {
                    let at = slot_addr(pos.node, i);
                    match self.follow(c, key, Some((at, s)), s, None).await? {
                        Leaf::Live(item) => {
                            matches!(self.update_item(c, &item, key, value).await?, Outcome::Done)
                        }
                        Leaf::Deleted | Leaf::Other { deleted: true, .. } => {
                            self.publish_leaf(c, &pos, i, s, key, value).await?
                        }
                        Leaf::Other { item, key_at, .. } => {
                            self.push_down(c, &pos, i, s, &item, key_at, key, value).await?
                        }
                    }
                }
            };
            if done {
                return Ok(());
            }
            bump(&self.counters.retries);
        }
    }

    /// The key leaves `pos.node`'s prefix at `j`: a new node at depth `j` above it, holding it
    /// and the new leaf, replaces it in its parent's slot.
    async fn path_split<T: Transport>(
        &self,
        c: &Client<T>,
        pos: &Pos,
        j: usize,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool> {
        let link = pos.link.expect("a mismatch below the root");
        // Both new objects on the parent's memory node, whose slot the CAS changes: posted
        // there first, they are in place before it.
        let near = link.slot;
        let m = c.alloc_on(near.node(), Kind::N4.alloc_bytes(), 64).await?;
        let (leaf, leaf_len) = self.post_leaf(c, near, slot_addr(m, 1), key, value).await?;
        let child = leaf::slot(Partial::of(key, j), leaf, leaf_len);
        let won = self.tree().path_split(c, pos, j, key, m, child).await?;
        if won {
            bump(&self.counters.path_splits);
        }
        Ok(won)
    }

    /// Slot `i` of `pos.node` holds another key's leaf (`other`, which agrees with the key on
    /// its first `key_at` bytes): a chain of new nodes down to where the two keys part holds
    /// both leaves.
    #[allow(clippy::too_many_arguments)]
    async fn push_down<T: Transport>(
        &self,
        c: &Client<T>,
        pos: &Pos,
        i: usize,
        s: Slot,
        other: &Item,
        key_at: usize,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool> {
        let mut buf = [0u8; MAX_LEAF];
        let other_key = {
            let v = self.read_leaf(c, other.addr, other.len, &mut buf).await?;
            v.key.to_vec()
        };
        let d = pos.depth();
        // Where the keys part: a byte differs, or one of them ends.
        let j = key_at.max(d + 1);
        if j >= key.len() && j >= other_key.len() {
            return Err(IndexError::Corrupt("a smart push-down of equal keys".into()));
        }
        let near = pos.node;
        let mut nodes: Vec<(GlobalAddr, Header, Vec<Slot>)> = Vec::new();
        let bottom = c.alloc_on(near.node(), Kind::N4.alloc_bytes(), 64).await?;
        let len = (j - (d + 1)).min(MAX_PREFIX);
        let (leaf, leaf_len) = self.post_leaf(c, near, slot_addr(bottom, 1), key, value).await?;
        let other_slot = leaf::slot(Partial::of(&other_key, j), other.addr, other.len);
        nodes.push((
            bottom,
            Header::new(Kind::N4, j, key, len),
            vec![other_slot, leaf::slot(Partial::of(key, j), leaf, leaf_len)],
        ));
        // One-child nodes above it while the shared path is longer than a prefix.
        let mut top = j - len;
        while top > d + 1 {
            let t = top - 1;
            let len = (t - (d + 1)).min(MAX_PREFIX);
            let at = c.alloc_on(near.node(), Kind::N4.alloc_bytes(), 64).await?;
            let below = nodes.last().expect("the bottom node").0;
            nodes.push((
                at,
                Header::new(Kind::N4, t, key, len),
                vec![Slot::inner(Partial::Byte(key[t]), below, Kind::N4)],
            ));
            top = t - len;
        }
        let mut enc = Vec::with_capacity(Kind::N4.bytes());
        for (k, (at, h, children)) in nodes.iter().enumerate() {
            let rev = match nodes.get(k + 1) {
                Some((parent, ..)) => slot_addr(*parent, 0),
                None => slot_addr(pos.node, i),
            };
            NodeImage::encode_new(rev, h, children, &mut enc);
            c.write_zero_wait(*at, &enc)?;
        }
        let head = nodes.last().expect("the bottom node").0;
        let new = Slot::inner(s.partial(), head, Kind::N4);
        if c.cas(slot_addr(pos.node, i), s.0, new.0).await? != s.0 {
            return Ok(false);
        }
        bump(&self.counters.push_downs);
        c.write_zero_wait(other.addr, &slot_addr(bottom, 0).raw().to_le_bytes())?;
        Ok(true)
    }

    /// Sets the item's value: in place under its lock when it fits, else in a new leaf that the
    /// old one's status names.
    async fn update_item<T: Transport>(
        &self,
        c: &Client<T>,
        item: &Item,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<Outcome> {
        let status = item.addr.add(8);
        if LEAF_HEADER + key.len() + value.len() <= item.len {
            let held = Self::next_held(c).await?;
            if !self.claim(c, item, held).await? {
                return Ok(Outcome::Retry);
            }
            let mut body = [0u8; MAX_LEAF];
            let n = leaf::encode_body(key, value, &mut body);
            let unlock = Status::LIVE.0.to_le_bytes();
            // One doorbell to the leaf's node: the item, then the unlocking status (a holder
            // that stops between them is repaired: `crate::lock`).
            let mut ops = [
                BatchOp::Write { addr: item.addr.add(16), data: &body[16..16 + n] },
                BatchOp::Write { addr: status, data: &unlock },
            ];
            c.batch(&mut ops).await?;
            return Ok(Outcome::Done);
        }
        let (to, len) = self.post_leaf(c, item.addr, item.rev, key, value).await?;
        let target = leaf::slot(Partial::Byte(0), to, len);
        if !self.claim(c, item, Status::moved(target)).await? {
            return Ok(Outcome::Retry);
        }
        bump(&self.counters.moves);
        if let Some((at, s)) = item.slot {
            if s.addr() == Some(item.addr) {
                // Point the slot at the new leaf (others do it too when they meet the move).
                c.cas(at, s.0, leaf::slot(s.partial(), to, len).0).await?;
            }
        }
        Ok(Outcome::Done)
    }

    pub(crate) async fn update_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool> {
        loop {
            let Some(item) = self.find(c, key, None).await? else { return Ok(false) };
            if let Outcome::Done = self.update_item(c, &item, key, value).await? {
                return Ok(true);
            }
            bump(&self.counters.retries);
        }
    }

    pub(crate) async fn delete_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
    ) -> IndexResult<bool> {
        loop {
            let Some(item) = self.find(c, key, None).await? else { return Ok(false) };
            if self.claim(c, &item, Status::DELETED).await? {
                if let Some((at, s)) = item.slot {
                    // Best effort: a reader of the slot already finds the leaf deleted.
                    c.cas(at, s.0, s.tombstone().0).await?;
                }
                return Ok(true);
            }
            bump(&self.counters.retries);
        }
    }
}
