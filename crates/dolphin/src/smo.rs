//! Structure changes of a full leaf: claimed through Spear, planned from the drained image,
//! written in place with the next epoch and released in the same doorbell.
//!
//! # Plan
//!
//! An insert that found no free slot still holds its `+1` on the leaf. It claims the leaf
//! (`[FAA +2³², READ leaf]`, then polls until it is the only operation in flight), so the image
//! it holds is final: nothing changes the leaf until the release. From it, the live pairs inside
//! `[lo, hi]` plus the new one, sorted by key:
//!
//! * at most three quarters of the slots live: **compaction** — the leaf is rewritten with just
//!   them (deleted keys and pending inserts whose inserter crashed are dropped: with no operation
//!   in flight, a pending slot's inserter is gone and its insert never took effect);
//! * more: a **split** at the middle pair ([`crate::leaf::split_at`]), which needs the new leaf
//!   published in the radix levels before the old one shrinks.
//!
//! # Compaction: one doorbell
//!
//! `[WRITE leaf[16..] (lo, hi, meta with nv + 1, key lines, cells), FAA −(2³²+1), WRITE intent
//! done]`. The WRITE never
//! covers the Spear word; every line gets the new epoch, so a search whose READ mixes old and new
//! lines refuses the image and reads again. With the claim: 2 round trips after the insert's own
//! (one more per poll while other operations are in flight).

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::spear::{self, Claim, Claimed, Held, Panel};

use crate::leaf::{encode, live_head, split_at, LeafImage, Shape, State, BORN, LINE};
use crate::redo;
use crate::smo_redo;
use crate::sync::Cells;
use arrayvec::ArrayVec;

/// The live pairs of a drained image and one more, sorted by key (values in one buffer).
#[derive(Debug, Default)]
pub struct Pairs {
    keys: Vec<(u64, usize)>,
    values: Vec<u8>,
}

impl Pairs {
    /// Gathers `img`'s live pairs and `(key, value)` (a key the image does not hold); `None`
    /// if a live cell is not whole, which a drained image never has.
    pub fn gather(img: &LeafImage<'_>, key: u64, value: &[u8]) -> Option<Pairs> {
        let mut p = Pairs::default();
        for (k, j) in img.live() {
            if !img.cell_whole(j) {
                return None;
            }
            p.keys.push((k, p.values.len()));
            img.value_into(j, &mut p.values);
        }
        p.keys.push((key, p.values.len()));
        p.values.extend_from_slice(value);
        p.keys.sort_unstable_by_key(|&(k, _)| k);
        Some(p)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Pair `i` in key order.
    pub fn get(&self, i: usize, w: usize) -> (u64, &[u8]) {
        let (k, at) = self.keys[i];
        (k, &self.values[at..at + w])
    }
}

/// The header of a drained image, and its cell versions: what a split keeps or changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub rev: u64,
    pub lo: u64,
    pub hi: u64,
    pub nv: u32,
    pub cvs: Vec<u16>,
}

/// How an SMO attempt ended.
#[derive(Debug)]
pub enum Smo {
    /// Compacted, with the new pair in; the claim is released and the insert done.
    Compacted,
    /// Too many live pairs: the leaf must split. Still claimed; the pairs are the leaf's live
    /// ones and the new one, sorted, `at` the first that moves to the new leaf, and `frame`
    /// the drained image's header.
    Split { claimed: Claimed, pairs: Pairs, at: usize, frame: Frame },
    /// Another SMO held the leaf (its claim waited out): start the insert over.
    Again,
    /// Operations stayed in flight through the whole drain (a crashed or stalled client's
    /// count): the claim is dropped; wait unclaimed ([`spear::wait_drain`]), then start over.
    GaveUp,
}

/// Claims the leaf at `leaf` (the insert's `held`) and compacts it with `(key, value)` in, or
/// reports that it must split. `buf` holds a leaf; `panel` judges counts that never leave,
/// across the insert's attempts; `rec` repairs what dead SMOs left.
#[allow(clippy::too_many_arguments)]
pub async fn compact_or_split<T: Transport, R: Cells<T>>(
    c: &Client<T>,
    shape: &Shape,
    leaf: GlobalAddr,
    held: Held,
    key: u64,
    value: &[u8],
    buf: &mut [u8],
    polls: u32,
    panel: &mut Panel,
    rec: &R,
) -> IndexResult<Smo> {
    let claim = spear::claim(c, held, leaf, &mut buf[..shape.bytes], polls, panel, rec).await?;
    let claimed = match claim {
        Claim::Held(c) => c,
        Claim::Lost => return Ok(Smo::Again),
        Claim::GaveUp => return Ok(Smo::GaveUp),
    };
    // Drained and claimed, the leaf cannot be torn, nor any cell of it mid-write, but for a
    // multi-line cell a dead writer left locked: its record finishes it here.
    redo::patch(c, rec.redo(), shape, leaf, &mut buf[..shape.bytes]).await?;
    let drained = LeafImage::check(shape, buf).ok().and_then(|img| {
        let pairs = Pairs::gather(&img, key, value)?;
        Some((img, pairs))
    });
    let Some((img, pairs)) = drained else {
        c.batch(&mut claimed.release(c).ops()).await?;
        return Err(IndexError::Corrupt(format!("dolphin leaf at {leaf:?} does not check")));
    };
    if let Some(at) = split_at(shape, pairs.len()) {
        let (rev, lo, hi, nv, cvs) = (img.rev(), img.lo(), img.hi(), img.nv(), img.cvs());
        let frame = Frame { rev, lo, hi, nv, cvs };
        return Ok(Smo::Split { claimed, pairs, at, frame });
    }
    let mut out = Vec::with_capacity(shape.bytes);
    let w = shape.value;
    encode(
        shape,
        img.rev(),
        0,
        img.lo(),
        img.hi(),
        next_epoch(img.nv()),
        &img.cvs(),
        (0..pairs.len()).map(|i| {
            let (k, v) = pairs.get(i, w);
            (k, v, State::Live)
        }),
        &mut out,
    );
    // A rewrite longer than a packet goes out of place first (`smo_redo`).
    let area = match rec.smo_scratch() {
        Some(s) => Some(s.area(c, shape, leaf.node()).await?),
        None => None,
    };
    let named = area.map(|a| smo_redo::name(&mut out, a));
    let release = claimed.release(c);
    let [faa, done] = release.ops();
    let mut ops = smo_redo::rewrite(leaf, &out, area.zip(named.as_ref()));
    let mut ops: ArrayVec<BatchOp<'_>, 6> = ops.drain(..).chain([faa, done]).collect();
    c.batch(&mut ops).await?;
    Ok(Smo::Compacted)
}

/// The epoch after `nv` (never 0, which no leaf has).
pub fn next_epoch(nv: u32) -> u32 {
    nv.wrapping_add(1).max(1)
}

/// A split's two images: the old leaf's rewrite (keys below the split key, `hi` lowered, the
/// next epoch) and the new leaf's first image (born claimed, its born record naming the
/// splitter, epoch 1). The inserted key, if it
/// moves to the new leaf, is written there pending (its cell EMPTY) and turned live by the
/// split's last doorbell ([`SplitImages::new_cell`]), so no reader sees it in the new leaf while
/// another can still read the old leaf's image without it.
pub struct SplitImages {
    /// The split key: the new leaf's `lo`.
    pub at_key: u64,
    /// The old leaf's rewrite, whole (its first 16 bytes are not written).
    pub old: Vec<u8>,
    /// The new leaf, whole.
    pub new: Vec<u8>,
    /// The line of the new leaf that turns the inserted key's cell LIVE (its offset, and the
    /// line with its head's state bits set: the value and any other lines are in `new`
    /// already), if the key moved. The new leaf is claimed, so no one else writes that line.
    pub new_cell: Option<(usize, [u8; LINE])>,
}

impl SplitImages {
    /// Plans the split of a leaf with header `frame` into pairs `..at` and `at..` of `pairs`;
    /// `key` is the inserted key, `born` the splitter's member word, the new leaf's born record.
    pub fn plan(
        shape: &Shape,
        frame: &Frame,
        pairs: &Pairs,
        at: usize,
        key: u64,
        born: u64,
    ) -> SplitImages {
        let w = shape.value;
        let at_key = pairs.get(at, w).0;
        let mut old = Vec::with_capacity(shape.bytes);
        let mut new = Vec::with_capacity(shape.bytes);
        let live = |i: usize| {
            let (k, v) = pairs.get(i, w);
            (k, v, State::Live)
        };
        let (lo, hi, nv) = (frame.lo, at_key - 1, next_epoch(frame.nv));
        encode(shape, frame.rev, 0, lo, hi, nv, &frame.cvs, (0..at).map(live), &mut old);
        let moved = (at..pairs.len()).map(|i| {
            let (k, v) = pairs.get(i, w);
            (k, v, if k == key { State::Empty } else { State::Live })
        });
        encode(shape, 0, spear::BORN_CLAIMED, at_key, frame.hi, 1, &[], moved, &mut new);
        new[BORN..BORN + 8].copy_from_slice(&born.to_le_bytes());
        let new_cell = (at..pairs.len())
            .find(|&i| pairs.get(i, w).0 == key)
            .map(|i| live_head(shape, &new, i - at));
        SplitImages { at_key, old, new, new_cell }
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::local::LocalTransport;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;
    use crate::leaf::SPEAR;
    use crate::sync::{self, search_image, SyncCounters, Write};
    use dmindex_prim::spear::WholeRewrites;

    const LO_KEY: u64 = 0x0A0B_0C0D_0E0F_1000;

    /// A new empty leaf covering `LO_KEY`'s prefix (rev 7, epoch 1), and a buffer for it.
    async fn empty_leaf(c: &Client<LocalTransport>, shape: &Shape) -> (GlobalAddr, Vec<u8>) {
        let leaf = c.alloc(shape.bytes as u64, 64).await.unwrap();
        let mut img = Vec::new();
        encode(shape, 7, 0, LO_KEY, LO_KEY | 0xFF, 1, &[], std::iter::empty(), &mut img);
        c.write(leaf, &img).await.unwrap();
        (leaf, vec![0u8; shape.bytes])
    }

    #[test]
    fn a_full_leaf_with_deleted_slots_compacts_in_one_doorbell() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let shape = Shape::new(16, 8).unwrap();
        let k = SyncCounters::default();
        run_tasks([async {
            let (leaf, mut buf) = empty_leaf(&c, &shape).await;
            let put = |key: u64| (key, key.to_le_bytes());
            for n in 1..=16 {
                let (key, v) = put(LO_KEY + n);
                let w = sync::upsert(&c, &shape, leaf, key, &v, &mut buf, &k, &WholeRewrites)
                    .await
                    .unwrap();
                assert!(matches!(w, Write::Done(())));
            }
            for n in (2..=16).step_by(2) {
                let w = sync::delete(&c, &shape, leaf, LO_KEY + n, &mut buf, &k, &WholeRewrites)
                    .await
                    .unwrap();
                assert!(matches!(w, Write::Done(true)));
            }
            let (key, v) = put(LO_KEY + 0x80);
            let Write::Full(held) =
                sync::upsert(&c, &shape, leaf, key, &v, &mut buf, &k, &WholeRewrites)
                    .await
                    .unwrap()
            else {
                panic!("16 slots taken")
            };
            let rt = c.counts().round_trips;
            let smo = compact_or_split(
                &c,
                &shape,
                leaf,
                held,
                key,
                &v,
                &mut buf,
                8,
                &mut Panel::new(),
                &WholeRewrites,
            )
            .await;
            assert!(matches!(smo.unwrap(), Smo::Compacted));
            assert_eq!(c.counts().round_trips - rt, 2, "claim with READ, rewrite with release");
            let img = sync::read(&c, &shape, leaf, &mut buf, &k).await.unwrap();
            assert_eq!((img.nv(), img.rev(), img.spear()), (2, 7, 0));
            let live: Vec<u64> = img.live().map(|(k, _)| k - LO_KEY).collect();
            assert_eq!(live, [1, 3, 5, 7, 9, 11, 13, 15, 0x80], "sorted, deleted keys gone");
            let mut out = Vec::new();
            assert!(search_image(&img, key, &mut out) == Some(true) && out == v);
            assert_eq!(img.free_from(0), Some(9));
            assert_eq!(c.read_word(leaf.add(SPEAR as u64)).await.unwrap(), 0);
            // A leaf with more than three quarters live must split: still claimed.
            for n in 0x90..0x97 {
                let (key, v) = put(LO_KEY + n);
                let w = sync::upsert(&c, &shape, leaf, key, &v, &mut buf, &k, &WholeRewrites)
                    .await
                    .unwrap();
                assert!(matches!(w, Write::Done(())));
            }
            let (key, v) = put(LO_KEY + 0xA0);
            let Write::Full(held) =
                sync::upsert(&c, &shape, leaf, key, &v, &mut buf, &k, &WholeRewrites)
                    .await
                    .unwrap()
            else {
                panic!("full again")
            };
            let Smo::Split { claimed, pairs, at, .. } = compact_or_split(
                &c,
                &shape,
                leaf,
                held,
                key,
                &v,
                &mut buf,
                8,
                &mut Panel::new(),
                &WholeRewrites,
            )
            .await
            .unwrap() else {
                panic!("17 live pairs in 16 slots")
            };
            assert_eq!((pairs.len(), at), (17, 8));
            let keys: Vec<u64> = (0..pairs.len()).map(|i| pairs.get(i, 8).0).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted pairs");
            assert_eq!(pairs.get(16, 8), (key, &v[..]), "the new pair with its own value");
            assert_eq!(c.read_word(claimed.word()).await.unwrap(), (1 << 32) + 1);
            c.batch(&mut claimed.release(&c).ops()).await.unwrap();
        }]);
    }

    #[test]
    fn a_split_that_gives_up_waits_without_its_claim() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let shape = Shape::new(4, 8).unwrap();
        let k = SyncCounters::default();
        run_tasks([async {
            let (leaf, mut buf) = empty_leaf(&c, &shape).await;
            for n in 1..=4 {
                let v = [n as u8; 8];
                let w =
                    sync::upsert(&c, &shape, leaf, LO_KEY + n, &v, &mut buf, &k, &WholeRewrites)
                        .await;
                assert!(matches!(w.unwrap(), Write::Done(())));
            }
            // A client that entered and stopped: its count never leaves.
            let word = leaf.add(SPEAR as u64);
            c.faa(word, 1).await.unwrap();
            let v = [9u8; 8];
            let Write::Full(held) =
                sync::upsert(&c, &shape, leaf, LO_KEY + 9, &v, &mut buf, &k, &WholeRewrites)
                    .await
                    .unwrap()
            else {
                panic!("4 slots taken")
            };
            let mut panel = Panel::new();
            let (p, r) = (&mut panel, &WholeRewrites);
            let smo = compact_or_split(&c, &shape, leaf, held, LO_KEY + 9, &v, &mut buf, 3, p, r);
            assert!(matches!(smo.await.unwrap(), Smo::GaveUp));
            assert_eq!(c.read_word(word).await.unwrap(), 1, "claim and own count dropped");
            let rt = c.counts().round_trips;
            spear::wait_drain(&c, word, leaf, 3, &mut Panel::new(), &WholeRewrites).await.unwrap();
            assert_eq!(c.counts().round_trips - rt, 3, "three looks, the count never left");
            // Unclaimed, the leaf's other writers go on meanwhile.
            let w = sync::update(&c, &shape, leaf, LO_KEY + 2, &v, &mut buf, &k, &WholeRewrites)
                .await
                .unwrap();
            assert!(matches!(w, Write::Done(true)));
            c.faa(word, 1u64.wrapping_neg()).await.unwrap();
            spear::wait_drain(&c, word, leaf, 3, &mut Panel::new(), &WholeRewrites).await.unwrap();
            assert_eq!(c.counts().round_trips - rt, 3 + 2 + 1 + 1, "gone: one look");
        }]);
    }
}
