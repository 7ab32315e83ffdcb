//! Point operations: the lock-free READ of a key's chain, and writes under the base leaf's lock.
//!
//! # Reading a chain
//!
//! The model predicts base leaves `[lo, hi]`; one doorbell READs them, each followed by its
//! first synonym leaf when the cache knows it. The key's leaf is the last base whose fence is
//! at most the key; its chain is followed by `next` pointers, a READ for each synonym the
//! doorbell did not bring. A key is in at most one leaf of its chain at any instant and never
//! moves between leaves (a delete and a later insert are two operations), and chains only grow
//! at the tail, so a chain READ leaf after leaf in order (one doorbell executes in order on its
//! memory node, and a model's leaves are all on one node) sees the key where it is at the instant
//! it READs that leaf, or sees it absent at an instant in between (the crate docs give the
//! argument).
//!
//! # Staleness
//!
//! A leaf whose lock word says RETIRED belongs to a replaced model: the directory is refreshed
//! and the operation starts over. A base leaf whose word says RETIRING is being retrained: what
//! was read is current unless the retrain was published, so one READ of the root word decides.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::doorbell::{self, read_per_node};
use dmindex_prim::lock::unlocked;

use crate::build::Pair;
use crate::cache::{Dir, Table};
use crate::layout::{self, Refused, BASE, RETIRED, RETIRING, SYNONYM};
use crate::recover::LeafRepair;
use crate::Rolex;

/// Working memory of one operation, pooled per compute node.
#[derive(Default)]
pub struct Scratch {
    /// Leaves READ, in order.
    pub addrs: Vec<GlobalAddr>,
    pieces: Vec<(GlobalAddr, usize)>,
    phys: Vec<u8>,
    /// Decoded leaves, one per address.
    pub dec: Vec<u8>,
    /// Lock words, one per address.
    pub words: Vec<u64>,
    /// Encoded leaf data being written (room for two leaves).
    pub enc: Vec<u8>,
    pub enc2: Vec<u8>,
    /// The chain being worked on: indices into `addrs`.
    pub chain: Vec<usize>,
    /// A scan's pairs of one batch of chains.
    pub pairs: Vec<Pair>,
    /// A new synonym leaf, decoded.
    pairs_leaf: Vec<u8>,
    /// A value block's value.
    pub value: Vec<u8>,
}

/// Synonym leaves one chain may grow to before its model is retrained (with retraining on):
/// each costs a search that has no hint for it one more READ, and inserts of increasing keys
/// all go to the last leaf's chain, which the model-wide bound alone would let grow to a
/// quarter of the model's leaves.
pub const MAX_CHAIN_SYNONYMS: usize = 4;

/// Longest chain followed before the pointers are taken for garbage (a cycle).
const MAX_CHAIN: usize = 1 << 16;

/// How a pass over a key's chain ended.
pub enum Pass<R> {
    /// The model was replaced: refresh the directory and start over.
    Stale,
    Done(R),
}

/// A point write.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Insert([u8; 8]),
    Update([u8; 8]),
    Delete,
}

/// Leaves a scratch buffer has room for before it grows: a search's or a scan's doorbell
/// (bases and hinted synonyms) and a few more synonyms.
const ROOM: usize = 32;

impl Scratch {
    /// Buffers with room for 32 leaves of layout `l` (and a scan's pairs of as many), so
    /// that operations after the first rarely grow them.
    pub fn new(l: &layout::LeafLayout) -> Scratch {
        Scratch {
            addrs: Vec::with_capacity(ROOM),
            pieces: Vec::with_capacity(ROOM),
            phys: Vec::with_capacity(ROOM * l.read_len),
            dec: Vec::with_capacity(ROOM * l.decoded),
            words: Vec::with_capacity(ROOM),
            enc: Vec::with_capacity(l.data),
            enc2: Vec::with_capacity(l.data),
            chain: Vec::with_capacity(ROOM),
            pairs: Vec::with_capacity(ROOM * l.span),
            pairs_leaf: Vec::with_capacity(l.decoded),
            value: Vec::new(),
        }
    }

    pub fn leaf(&self, decoded: usize, i: usize) -> &[u8] {
        &self.dec[i * decoded..(i + 1) * decoded]
    }

    pub fn leaf_mut(&mut self, decoded: usize, i: usize) -> &mut [u8] {
        &mut self.dec[i * decoded..(i + 1) * decoded]
    }
}

impl Rolex {
    /// READs `s.addrs[from..]` (per memory node, doorbells in order) and decodes them, again
    /// while any is torn.
    pub(crate) async fn read_from<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut Scratch,
        from: usize,
        attempts: &mut Attempts,
    ) -> IndexResult<()> {
        let l = &self.layout;
        let n = s.addrs.len();
        s.dec.resize(n * l.decoded, 0);
        s.words.resize(n, 0);
        // Ends when every leaf decodes, or past the bound on failed validations.
        loop {
            s.pieces.clear();
            s.pieces.extend(s.addrs[from..].iter().map(|&a| (a, l.read_len)));
            s.phys.resize((n - from) * l.read_len, 0);
            read_per_node(c, &s.pieces, &mut s.phys).await?;
            c.compute(Work::BytesScanned, ((n - from) * l.read_len) as u64);
            let mut torn = None;
            for i in from..n {
                let phys = &s.phys[(i - from) * l.read_len..(i - from + 1) * l.read_len];
                match layout::decode(l, phys, &mut s.dec[i * l.decoded..(i + 1) * l.decoded]) {
                    Ok(w) => s.words[i] = w,
                    Err(Refused::Torn) => {
                        torn = Some(s.addrs[i]);
                        break;
                    }
                    Err(Refused::NotALeaf) => {
                        return Err(IndexError::Corrupt(format!("no rolex leaf at {}", s.addrs[i])))
                    }
                }
            }
            let Some(at) = torn else { return Ok(()) };
            crate::bump(&self.counters.torn_reads);
            attempts.failed(at, "leaf versions")?;
        }
    }

    /// Pushes base leaves `[lo, hi]` of `t`, each followed by its hinted first synonym if
    /// `hints`.
    fn push_bases(&self, s: &mut Scratch, t: &Table, lo: usize, hi: usize, hints: bool) {
        s.addrs.clear();
        for i in lo..=hi {
            s.addrs.push(t.leaves[i]);
            match t.hint(i) {
                h if hints && h != 0 => s.addrs.push(GlobalAddr::from_raw(h)),
                _ => {}
            }
        }
    }

    /// The index in `s.addrs` of the base leaf whose chain holds `k`, and its leaf number.
    fn target(&self, s: &Scratch, lo: usize, k: u64) -> IndexResult<(usize, usize)> {
        let d = self.layout.decoded;
        let mut found = None;
        let mut leaf = lo;
        for i in 0..s.addrs.len() {
            let img = s.leaf(d, i);
            if layout::kind(img) != BASE {
                continue;
            }
            if layout::fence(img) > k {
                break;
            }
            found = Some((i, leaf));
            leaf += 1;
        }
        found.ok_or_else(|| {
            IndexError::Corrupt(format!("the model predicted leaves above key {k:#x}"))
        })
    }

    /// Follows the chain from base `b` into `s.chain`, READing the synonyms the doorbell did
    /// not bring; `Stale` if one is retired (and `retired_ok` is false: under the base's lock
    /// none can be).
    pub(crate) async fn walk<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut Scratch,
        b: usize,
        attempts: &mut Attempts,
    ) -> IndexResult<Pass<()>> {
        let d = self.layout.decoded;
        s.chain.clear();
        s.chain.push(b);
        let mut cur = b;
        // Ends at the chain's tail; a chain longer than MAX_CHAIN is a cycle of garbage.
        while let Some(next) = layout::next(s.leaf(d, cur)) {
            if s.chain.len() >= MAX_CHAIN {
                return Err(IndexError::Corrupt(format!(
                    "synonym chain from {} loops",
                    s.addrs[b]
                )));
            }
            cur = match s.addrs[cur + 1..].iter().position(|&a| a == next) {
                Some(i) => cur + 1 + i,
                None => {
                    s.addrs.push(next);
                    let at = s.addrs.len() - 1;
                    self.read_from(c, s, at, attempts).await?;
                    at
                }
            };
            if layout::kind(s.leaf(d, cur)) != SYNONYM {
                return Err(IndexError::Corrupt(format!("{next} is not a synonym leaf")));
            }
            if s.words[cur] & RETIRED != 0 {
                return Ok(Pass::Stale);
            }
            s.chain.push(cur);
        }
        Ok(Pass::Done(()))
    }

    /// The chain leaf and slot holding `k`, if any.
    fn find_in_chain(&self, s: &Scratch, k: u64) -> Option<(usize, usize)> {
        let d = self.layout.decoded;
        s.chain.iter().find_map(|&i| layout::find(s.leaf(d, i), k).ok().map(|slot| (i, slot)))
    }

    /// One lock-free pass of a search for `k` under `dir`: its value slot, if present.
    pub(crate) async fn look<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
        k: u64,
        s: &mut Scratch,
        attempts: &mut Attempts,
    ) -> IndexResult<Pass<Option<[u8; 8]>>> {
        let m = &dir.models[dir.find(k)];
        let t = self.cache.table(c, m).await?;
        let (lo, hi) = m.range(k, self.shape.eps);
        self.push_bases(s, &t, lo, hi, true);
        self.read_from(c, s, 0, attempts).await?;
        if s.words.iter().any(|w| w & RETIRED != 0) {
            return Ok(Pass::Stale);
        }
        let (b, leaf) = self.target(s, lo, k)?;
        if let Pass::Stale = self.walk(c, s, b, attempts).await? {
            return Ok(Pass::Stale);
        }
        let next = layout::next(s.leaf(self.layout.decoded, b)).map_or(0, |a| a.raw());
        t.set_hint(leaf, next);
        c.compute(Work::KeyCompare, s.chain.len() as u64 * 4);
        let found = self
            .find_in_chain(s, k)
            .map(|(i, slot)| layout::value(s.leaf(self.layout.decoded, i), slot));
        if s.words[b] & RETIRING != 0 && self.root_moved(c, dir).await? {
            return Ok(Pass::Stale);
        }
        Ok(Pass::Done(found))
    }

    /// Whether the root word names another directory than `dir` (a retrain was published).
    pub(crate) async fn root_moved<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
    ) -> IndexResult<bool> {
        crate::bump(&self.counters.retiring_checks);
        Ok(self.root.load(c).await? != dir.root)
    }

    /// One pass of write `op` on `k` under `dir`: READ the predicted bases, lock the key's
    /// base leaf, READ its chain again, change one leaf and unlock in one doorbell. Whether the
    /// key existed.
    pub(crate) async fn write_pass<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
        k: u64,
        op: Op,
        s: &mut Scratch,
        attempts: &mut Attempts,
    ) -> IndexResult<Pass<bool>> {
        let d = self.layout.decoded;
        let j = dir.find(k);
        let m = &dir.models[j];
        let t = self.cache.table(c, m).await?;
        let (lo, hi) = m.range(k, self.shape.eps);
        self.push_bases(s, &t, lo, hi, false);
        self.read_from(c, s, 0, attempts).await?;
        if s.words.iter().any(|w| w & RETIRED != 0) {
            return Ok(Pass::Stale);
        }
        let (b, leaf) = self.target(s, lo, k)?;
        let base = s.addrs[b];
        let repair = LeafRepair { rolex: self, table: m.e.table };
        let retried = || crate::bump(&self.counters.lock_retries);
        let lock = self.layout.lock_addr(base);
        let held = self.locks.acquire_keeping(c, lock, retried, &repair).await?;
        if held.word() & RETIRED != 0 {
            // Retired while we waited: the model is stale (the word stays retired).
            let w = held.word();
            held.unlock_with(c, w).await?;
            return Ok(Pass::Stale);
        }
        // Under the lock the chain cannot change: READ it again (the first READ may be old).
        self.push_bases(s, &t, leaf, leaf, true);
        self.read_from(c, s, 0, attempts).await?;
        if let Pass::Stale = self.walk(c, s, 0, attempts).await? {
            return Err(IndexError::Corrupt(format!("a retired synonym under locked {base}")));
        }
        let next = layout::next(s.leaf(d, 0)).map_or(0, |a| a.raw());
        t.set_hint(leaf, next);
        let found = self.find_in_chain(s, k);
        let (i, existed) = match (op, found) {
            (Op::Insert(v) | Op::Update(v), Some((i, slot))) => {
                layout::set_value(s.leaf_mut(d, i), slot, v);
                (i, true)
            }
            (Op::Delete, Some((i, slot))) => {
                layout::remove_at(s.leaf_mut(d, i), slot);
                (i, true)
            }
            (Op::Update(_) | Op::Delete, None) => {
                let w = held.word();
                held.unlock_with(c, w).await?;
                return Ok(Pass::Done(false));
            }
            (Op::Insert(v), None) => {
                let room = s
                    .chain
                    .iter()
                    .copied()
                    .find(|&i| layout::count(s.leaf(d, i)) < self.shape.span);
                let Some(i) = room else {
                    let synonyms = s.chain.len();
                    let at = self.append_synonym(c, s, k, v, held, base).await?;
                    if synonyms == 1 {
                        t.set_hint(leaf, at.raw());
                    }
                    self.synonym_added(c, dir, j, synonyms).await?;
                    return Ok(Pass::Done(false));
                };
                let img = s.leaf_mut(d, i);
                let slot = layout::find(img, k).expect_err("absent");
                layout::insert_at(img, slot, k, v);
                (i, false)
            }
        };
        layout::bump(s.leaf_mut(d, i));
        layout::encode(&self.layout, &s.dec[i * d..(i + 1) * d], &mut s.enc);
        let unlock = unlocked(held.word()).to_le_bytes();
        let mut ops = [
            BatchOp::Write { addr: s.addrs[i], data: &s.enc },
            BatchOp::Write { addr: self.layout.lock_addr(base), data: &unlock },
        ];
        held.released_by(doorbell::post(c, &mut ops).await)?;
        Ok(Pass::Done(existed))
    }

    /// Inserts `(k, v)` into a new synonym leaf at the tail of the chain in `s` (every leaf
    /// full): one doorbell WRITEs the new leaf, then the tail with `next` naming it, then the
    /// unlocking word, in order on the chain's memory node, so a reader that sees the pointer
    /// sees the leaf. Returns the new leaf, after the unlock.
    async fn append_synonym<T: Transport>(
        &self,
        c: &Client<T>,
        s: &mut Scratch,
        k: u64,
        v: [u8; 8],
        held: dmindex_prim::lock::Held<'_>,
        base: GlobalAddr,
    ) -> IndexResult<GlobalAddr> {
        let l = &self.layout;
        let d = l.decoded;
        let tail = *s.chain.last().expect("a chain has its base");
        let at = match c.alloc_on(base.node(), l.stride as u64, 64).await {
            Ok(a) => a,
            Err(e) => {
                let w = held.word();
                held.unlock_with(c, w).await?;
                return Err(e.into());
            }
        };
        let fence = layout::fence(s.leaf(d, 0));
        let mut fresh = std::mem::take(&mut s.pairs_leaf);
        fresh.resize(d, 0);
        layout::init(l, SYNONYM, fence, &mut fresh);
        layout::insert_at(&mut fresh, 0, k, v);
        layout::encode(l, &fresh, &mut s.enc2);
        s.pairs_leaf = fresh;
        let img = s.leaf_mut(d, tail);
        layout::set_next(img, at);
        layout::bump(img);
        layout::encode(l, &s.dec[tail * d..(tail + 1) * d], &mut s.enc);
        let unlock = unlocked(held.word()).to_le_bytes();
        let mut ops = [
            BatchOp::Write { addr: at, data: &s.enc2 },
            BatchOp::Write { addr: s.addrs[tail], data: &s.enc },
            BatchOp::Write { addr: l.lock_addr(base), data: &unlock },
        ];
        held.released_by(doorbell::post(c, &mut ops).await)?;
        crate::bump(&self.counters.synonyms);
        Ok(at)
    }

    /// Counts a synonym leaf in model `j`'s leaf table (one FAA) and retrains the model once
    /// its synonyms reach the bound, or the chain just grown (now `chain` synonyms long) does.
    async fn synonym_added<T: Transport>(
        &self,
        c: &Client<T>,
        dir: &Dir,
        j: usize,
        chain: usize,
    ) -> IndexResult<()> {
        let m = &dir.models[j];
        let before = c.faa(m.e.table.add(crate::layout::TABLE_SYNONYMS), 1).await?;
        let pct = self.shape.retrain_pct as u64;
        let model_full = (before + 1) * 100 >= u64::from(m.e.leaves) * pct;
        if pct > 0 && (model_full || chain >= MAX_CHAIN_SYNONYMS) {
            self.retrain(c, dir, j).await?;
        }
        Ok(())
    }
}
