//! Finding a key's segment: the directory cache, its repair, and the cached MainSegment views.

use arrayvec::ArrayVec;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::doorbell;

use crate::cache::MainRange;
use crate::layout::{decode_points, low_mask, KeyHash, MainHeader, Meta, Point, POINT_BYTES};
use crate::{bump, SepHash};

/// Record points read with a MainSegment's header in the first READ.
const POINTS_GUESS: usize = 64;

/// Where a key's operation goes, as this compute node knows it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub seg: GlobalAddr,
    /// The segment's suffix: the directory index it was found at.
    pub suffix: u64,
    pub main: MainRange,
    /// Slot this node's clients append from.
    pub offset: u32,
}

/// What [`SepHash::utilisation`] counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Utilisation {
    pub segments: u64,
    /// The deepest segment's local depth.
    pub depth: u32,
    /// CurSegment slots and MainSegment entries.
    pub entries: u64,
    /// Of which hold an entry.
    pub entries_used: u64,
    pub main_entries: u64,
    pub cur_used: u64,
    /// Bytes of segments (CurSegments with their filters, MainSegments) and the directory.
    pub bytes: u64,
}

impl SepHash {
    /// The key's segment and its MainSegment view, repairing the cache where it knows nothing.
    ///
    /// Each MainSegment refresh can be undone by a merge or a split that other clients finish
    /// meanwhile (the cache is shared, and a descheduled client may see many), so this loops
    /// until the cache answers; only a directory that names no segment for the key at all, even
    /// right after it was read, is an error, and so is a MainSegment whose header never
    /// parses ([`Attempts`]: a refresh that caches nothing, over and over).
    pub(crate) async fn target<T: Transport>(
        &self,
        c: &Client<T>,
        kh: KeyHash,
    ) -> IndexResult<Target> {
        let mut dir_read = false;
        let mut attempts = Attempts::new();
        loop {
            // The directory cache, then the segment's FPTable: a table probe each.
            c.compute(Work::TableProbe, 1);
            let Some((seg, suffix)) = self.cache.locate(kh.h) else {
                if dir_read {
                    return Err(IndexError::Corrupt(format!(
                        "no directory entry for hash {:#x}",
                        kh.h
                    )));
                }
                self.refresh_dir(c, kh).await?;
                dir_read = true;
                continue;
            };
            c.compute(Work::TableProbe, 1);
            if let Some((mut main, offset)) = self.cache.main_range(seg, kh.fp(), kh.fp2()) {
                if !self.shape.fptable {
                    (main.lo, main.hi) = (0, main.entries);
                }
                if !self.shape.fptable {
                    (main.wlo, main.whi) = (main.lo, main.hi);
                }
                return Ok(Target { seg, suffix, main, offset });
            }
            let meta = Meta(c.read_word(seg).await?);
            if !self.refresh_main(c, seg, meta).await? {
                attempts.failed(seg, "MainSegment header")?;
            }
        }
    }

    /// Reads the directory entries a key's hash can be under (`h mod 2^d` for every depth `d`
    /// from the initial one to the deepest): one doorbell per 16.
    pub(crate) async fn refresh_dir<T: Transport>(
        &self,
        c: &Client<T>,
        kh: KeyHash,
    ) -> IndexResult<()> {
        bump(&self.counters.dir_refreshes, 1);
        let mut idx: ArrayVec<u64, 40> = ArrayVec::new();
        for d in self.shape.depth..=self.shape.max_depth {
            let i = kh.h & low_mask(d);
            if idx.last() != Some(&i) {
                idx.push(i);
            }
        }
        let mut words = [[0u8; 8]; 40];
        {
            let mut ops: ArrayVec<BatchOp<'_>, 40> = ArrayVec::new();
            for (&i, w) in idx.iter().zip(words.iter_mut()) {
                ops.push(BatchOp::Read { addr: self.dir_entry(i), buf: w });
            }
            for chunk in ops.chunks_mut(MAX_BATCH) {
                doorbell::post(c, chunk).await?;
            }
        }
        for (&i, w) in idx.iter().zip(words.iter()) {
            let raw = u64::from_le_bytes(*w);
            if raw != 0 {
                self.cache.learn_entry(i as usize, raw);
            }
        }
        Ok(())
    }

    /// Reads the header and record points of the MainSegment `meta` names into the cache;
    /// whether it did (`false`: the header did not parse). Usually one READ. A MainSegment
    /// replaced (and its memory reused) since `meta` was read leaves a cache entry under an
    /// identity no meta shows again within 2^20 merges.
    pub(crate) async fn refresh_main<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        meta: Meta,
    ) -> IndexResult<bool> {
        bump(&self.counters.fptable_refreshes, 1);
        let main = meta.main();
        if main == 0 {
            self.cache.learn_main(seg, meta.main_id(), MainHeader { entries: 0, points: 0 }, &[]);
            return Ok(true);
        }
        let at = GlobalAddr::new(seg.node(), main);
        let mut b = [0u8; 8 + POINT_BYTES as usize * POINTS_GUESS];
        c.read(at, &mut b).await?;
        let h = MainHeader::decode(&b);
        if h.points as usize > crate::fptable::N {
            // Reused since the meta was read (or not SepHash's): cache nothing; the caller
            // reads the meta again.
            return Ok(false);
        }
        let mut points: Vec<Point> = decode_points(&b[8..], h.points as usize).collect();
        if h.points as usize > POINTS_GUESS {
            let rest = c
                .read_vec(
                    at.add(b.len() as u64),
                    POINT_BYTES as usize * (h.points as usize - POINTS_GUESS),
                )
                .await?;
            points.extend(decode_points(&rest, h.points as usize - POINTS_GUESS));
        }
        self.cache.learn_main(seg, meta.main_id(), h, &points);
        Ok(true)
    }

    /// Walks every segment: entry utilisation (the load factor) and space. Not a hot path.
    pub async fn utilisation<T: Transport>(&self, c: &Client<T>) -> IndexResult<Utilisation> {
        let n = self.shape.cur.n;
        let mut u =
            Utilisation { bytes: 8 + (8u64 << self.shape.max_depth), ..Utilisation::default() };
        let total = 1u64 << self.shape.max_depth;
        const CHUNK: u64 = 8192;
        let mut slots = vec![0u8; 16 + 8 * n];
        for start in (0..total).step_by(CHUNK as usize) {
            let len = CHUNK.min(total - start);
            let dir = c.read_vec(self.dir_entry(start), 8 * len as usize).await?;
            for w in dir.chunks_exact(8) {
                let raw = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                if raw == 0 {
                    continue;
                }
                let seg = GlobalAddr::from_raw(raw);
                c.read(seg, &mut slots).await?;
                let meta = Meta(u64::from_le_bytes(slots[..8].try_into().expect("8 bytes")));
                let used = crate::layout::decode_entries(&slots[16..])
                    .filter(|&e| meta.holds(e))
                    .count() as u64;
                let main = if meta.main() == 0 {
                    MainHeader { entries: 0, points: 0 }
                } else {
                    MainHeader::decode(
                        &c.read_vec(GlobalAddr::new(seg.node(), meta.main()), 8).await?,
                    )
                };
                u.segments += 1;
                u.depth = u.depth.max(meta.depth());
                u.cur_used += used;
                u.main_entries += main.entries as u64;
                u.entries += n as u64 + main.entries as u64;
                u.entries_used += used + main.entries as u64;
                u.bytes += self.shape.cur.bytes() + if meta.main() == 0 { 0 } else { main.bytes() };
            }
        }
        Ok(u)
    }
}
