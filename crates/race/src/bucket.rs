//! A key's buckets as one doorbell READ saw them, and the copies of the key among their slots.
//!
//! Each bucket is one cache line, so each image is one instant's header and slots together; the
//! images of different buckets may be of different instants.

use arrayvec::ArrayVec;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::doorbell;

use crate::layout::{self, Hashes, BUCKET, SLOTS};
use crate::Race;

/// One bucket's image.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    /// Index in the segment.
    pub idx: usize,
    pub header: u64,
    pub slots: [u64; SLOTS],
}

/// A key's three or four distinct buckets in one segment, by index (= position order). Filled in
/// place by [`Race::read_snap`]: an operation keeps one or two for its whole life, so the ~300
/// bytes are not copied out of each READ's future and again out of each caller's.
#[derive(Clone, Debug, Default)]
pub(crate) struct Snap {
    pub seg: GlobalAddr,
    pub buckets: ArrayVec<Bucket, 4>,
}

/// A slot of a snapshot: `(bucket index in the snapshot, slot index)`; ordered as positions are
/// (the snapshot's buckets are in segment order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct At {
    pub b: usize,
    pub j: usize,
}

/// A copy of the key: where, and the word seen there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Copy {
    pub at: At,
    pub word: u64,
}

fn decode(idx: usize, line: &[u8]) -> Bucket {
    let w = |i: usize| u64::from_le_bytes(line[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let mut slots = [0u64; SLOTS];
    for (j, s) in slots.iter_mut().enumerate() {
        *s = w(j + 1);
    }
    Bucket { idx, header: w(0), slots }
}

impl Snap {
    /// Whether every bucket's header says it holds keys with hash `h`.
    pub fn matches(&self, h: &Hashes) -> bool {
        self.buckets.iter().all(|b| h.matches(b.header))
    }

    pub fn word(&self, at: At) -> u64 {
        self.buckets[at.b].slots[at.j]
    }

    /// The slot's remote address.
    pub fn addr(&self, at: At) -> GlobalAddr {
        let idx = self.buckets[at.b].idx;
        self.seg.add(layout::bucket_offset(idx) + 8 + 8 * at.j as u64)
    }

    /// The snapshot position of segment bucket `idx`.
    fn pos(&self, idx: usize) -> usize {
        self.buckets.iter().position(|b| b.idx == idx).expect("a bucket of the key")
    }

    /// Used slots of the combined bucket of main bucket `m`.
    fn used(&self, m: usize) -> usize {
        let count = |idx| self.buckets[self.pos(idx)].slots.iter().filter(|&&w| w != 0).count();
        count(layout::main_bucket(m)) + count(layout::overflow_bucket(m))
    }

    /// An empty slot in the less loaded of the two combined buckets (main before overflow), or
    /// in the other one.
    pub fn empty_slot(&self, mains: [usize; 2]) -> Option<At> {
        let [a, b] = mains;
        let order = if self.used(b) < self.used(a) { [b, a] } else { [a, b] };
        order.iter().find_map(|&m| {
            [layout::main_bucket(m), layout::overflow_bucket(m)].iter().find_map(|&idx| {
                let bi = self.pos(idx);
                let j = self.buckets[bi].slots.iter().position(|&w| w == 0)?;
                Some(At { b: bi, j })
            })
        })
    }

    /// Slots whose fingerprint is `fp`, in position order.
    pub fn candidates(&self, fp: u8) -> impl Iterator<Item = Copy> + '_ {
        self.buckets.iter().enumerate().flat_map(move |(b, bucket)| {
            bucket.slots.iter().enumerate().filter_map(move |(j, &w)| {
                (w != 0 && layout::slot_fp(w) == fp).then_some(Copy { at: At { b, j }, word: w })
            })
        })
    }
}

impl Race {
    /// One doorbell READ of the key's two combined buckets in `seg` (one READ of the whole group
    /// when both mains are in one group), into `snap`.
    pub(crate) async fn read_snap<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        h: &Hashes,
        snap: &mut Snap,
    ) -> IndexResult<()> {
        let [m1, m2] = h.mains(self.shape.groups);
        let (g1, g2) = (m1 / 2, m2 / 2);
        snap.seg = seg;
        let buckets = &mut snap.buckets;
        buckets.clear();
        if g1 == g2 {
            let mut buf = [0u8; 3 * BUCKET as usize];
            c.read(seg.add(layout::bucket_offset(3 * g1)), &mut buf).await?;
            for (k, line) in buf.chunks_exact(BUCKET as usize).enumerate() {
                buckets.push(decode(3 * g1 + k, line));
            }
        } else {
            // A combined bucket: side 0 is (main, overflow), side 1 is (overflow, main). The two
            // groups differ, so the buckets are in segment order once the lower group is first.
            let first = |m: usize| 3 * (m / 2) + m % 2;
            let (f1, f2) = (first(m1).min(first(m2)), first(m1).max(first(m2)));
            let (mut x, mut y) = ([0u8; 2 * BUCKET as usize], [0u8; 2 * BUCKET as usize]);
            doorbell::post(
                c,
                &mut [
                    BatchOp::Read { addr: seg.add(layout::bucket_offset(f1)), buf: &mut x },
                    BatchOp::Read { addr: seg.add(layout::bucket_offset(f2)), buf: &mut y },
                ],
            )
            .await?;
            for (f, buf) in [(f1, &x), (f2, &y)] {
                for (k, line) in buf.chunks_exact(BUCKET as usize).enumerate() {
                    buckets.push(decode(f + k, line));
                }
            }
        }
        debug_assert!(buckets.windows(2).all(|w| w[0].idx < w[1].idx), "segment order");
        // Every bucket line READ is decoded, and each of its slots' fingerprints is then
        // checked once against the key's ([`Snap::candidates`]).
        let slots: usize = buckets.iter().map(|b| b.slots.len()).sum();
        c.compute(Work::BytesScanned, buckets.len() as u64 * BUCKET);
        c.compute(Work::KeyCompare, slots as u64);
        Ok(())
    }

    /// Whether the block of slot word `w` holds `key` (one READ; our own entry `mine`, committed
    /// form, is known without it).
    pub(crate) async fn holds<T: Transport>(
        &self,
        c: &Client<T>,
        w: u64,
        key: &[u8],
        mine: u64,
    ) -> IndexResult<bool> {
        if mine != 0 && layout::entry(w) == mine {
            return Ok(true);
        }
        self.blocks.holds_key(c, layout::slot_block(w), key).await
    }

    /// Every entry of `key` in the snapshot (committed or tentative, frozen or not), in position
    /// order.
    pub(crate) async fn copies<T: Transport>(
        &self,
        c: &Client<T>,
        snap: &Snap,
        key: &[u8],
        h: &Hashes,
        mine: u64,
    ) -> IndexResult<ArrayVec<Copy, { 4 * SLOTS }>> {
        let mut out = ArrayVec::new();
        for cand in snap.candidates(h.fp()) {
            if self.holds(c, cand.word, key, mine).await? {
                out.push(cand);
            }
        }
        Ok(out)
    }
}
