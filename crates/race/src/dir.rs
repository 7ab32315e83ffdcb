//! The directory: building it, the compute node's cache of it, and publishing a split.
//!
//! # Cache
//!
//! Each handle keeps `2^depth` entries as it last read them. A key's entry is `h1 mod 2^depth`.
//! The cache is only a hint: every bucket image carries a header, and a header that does not
//! match the key's suffix sends the client to [`Race::refresh`], which READs the global depth and
//! then the key's entry (2 round trips) and grows the cache when the directory has doubled.
//!
//! # Publishing a split (under the directory lock)
//!
//! The directory lock is bit 63 of the header word, taken by a masked CAS that leaves the global
//! depth alone and names the holder in the other bits ([`layout::dir_lock_word`]), and released
//! by the WRITE of the new header word. Under it the splitter WRITEs the publish record
//! (zero-wait, before its first change), doubles the directory when the split segment was at the
//! global depth (READ entries `0..2^G`, WRITE them at `2^G..2^(G+1)`), rewrites every entry
//! aliasing the two halves, and last WRITEs the new global depth with the lock and the record
//! clear. (`race-sephash` has its own directory and refresh:
//! [`crate::global`].) Entries are 8-B aligned words, so a client reading one while
//! it is rewritten sees the old or the new entry, both of which lead it to a segment whose
//! headers it then checks. All directory verbs go to the directory's memory node, in order.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::lock;

use crate::layout::{
    self, dir_entry, dir_entry_addr, dir_lock_word, Hashes, Shape, DIR_HEADER, LOCK,
};
use crate::recover::{free_dir_line, SplitWait};
use crate::{bump, global, Race, Resize};

/// Builds the directory at global depth `depth` with its segments, in `resize`'s layout;
/// returns its address.
pub(crate) async fn create<T: Transport>(
    c: &Client<T>,
    shape: &Shape,
    depth: u32,
    resize: Resize,
) -> IndexResult<GlobalAddr> {
    let entry_bytes = match resize {
        Resize::SegmentLock => 8,
        Resize::GlobalLock => layout::GLOBAL_ENTRY,
    };
    let dir = c.alloc(DIR_HEADER + (entry_bytes << shape.max_depth), 64).await?;
    let seg_bytes = layout::segment_bytes(shape.groups);
    let mut entries = Vec::with_capacity((entry_bytes as usize) << depth);
    let mut image = vec![0u8; seg_bytes as usize];
    for i in 0..1u64 << depth {
        let seg = c.alloc(seg_bytes, 64).await?;
        for b in 0..3 * shape.groups {
            let at = layout::bucket_offset(b) as usize;
            image[at..at + 8].copy_from_slice(&layout::header(depth, i).to_le_bytes());
        }
        c.write(seg, &image).await?;
        match resize {
            Resize::SegmentLock => entries.extend_from_slice(&dir_entry(seg, depth).to_le_bytes()),
            Resize::GlobalLock => {
                entries.extend_from_slice(&layout::global_entry(false, seg, depth))
            }
        }
    }
    match resize {
        Resize::SegmentLock => {
            c.write(dir_entry_addr(dir, 0), &entries).await?;
            c.write(dir, &(depth as u64).to_le_bytes()).await?;
        }
        Resize::GlobalLock => {
            c.write(layout::global_entry_addr(dir, 0), &entries).await?;
            c.write(dir.add(layout::GLOBAL_DEPTH_WORD), &(depth as u64).to_le_bytes()).await?;
        }
    }
    Ok(dir)
}

/// The global depth in a header word, checked against the largest.
pub(crate) fn global_depth(word: u64, max_depth: usize) -> IndexResult<u32> {
    let g = (word & 0xFF) as u32;
    if g as usize > max_depth {
        return Err(IndexError::Corrupt(format!("directory header {word:#x}")));
    }
    Ok(g)
}

/// READs the whole directory (a new handle's cache), as 8-B entry words.
pub(crate) async fn load<T: Transport>(
    c: &Client<T>,
    dir: GlobalAddr,
    max_depth: usize,
    resize: Resize,
) -> IndexResult<Vec<u64>> {
    match resize {
        Resize::SegmentLock => {
            let g = global_depth(c.read_word(dir).await?, max_depth)?;
            let raw = c.read_vec(dir_entry_addr(dir, 0), 8 << g).await?;
            Ok(words(&raw))
        }
        Resize::GlobalLock => {
            let mut out = Vec::new();
            global::read_directory(c, dir, max_depth, &mut out).await?;
            Ok(out)
        }
    }
}

fn words(raw: &[u8]) -> Vec<u64> {
    raw.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect()
}

impl Race {
    /// The cached entry for first hash `h1`.
    pub(crate) fn cached(&self, h1: u64) -> u64 {
        let cache = self.cache.read().expect("directory cache");
        cache[(h1 & (cache.len() as u64 - 1)) as usize]
    }

    /// The entry of `h1` READ afresh into the cache, by the table's policy: `race` READs the
    /// global depth and the one entry (2 round trips), `race-sephash` the whole directory
    /// ([`Race::reread_directory`]).
    pub(crate) async fn refresh<T: Transport>(&self, c: &Client<T>, h1: u64) -> IndexResult<u64> {
        if self.resize == Resize::GlobalLock {
            return self.reread_directory(c, h1).await;
        }
        bump(&self.counters.refreshes, 1);
        bump(&self.counters.refresh_bytes, 16);
        let g = global_depth(c.read_word(self.dir).await?, self.shape.max_depth)?;
        let i = h1 & layout::low_mask(g);
        let entry = c.read_word(dir_entry_addr(self.dir, i)).await?;
        if entry == 0 {
            return Err(IndexError::Corrupt(format!("directory entry {i} is empty")));
        }
        let mut cache = self.cache.write().expect("directory cache");
        let want = 1usize << g;
        if cache.len() < want {
            // The directory doubled: new entries start as copies of their lower aliases, as the
            // remote doubling made them.
            while cache.len() < want {
                cache.extend_from_within(..);
            }
        }
        cache[i as usize] = entry;
        Ok(entry)
    }

    /// Publishes the split of `old` (depth `depth`, suffix `suffix`) into `old` and `new` at
    /// depth `depth + 1`: under the directory lock, doubling first if needed. The lock word
    /// names this client while held, and the publish record (WRITTEN before the first change)
    /// names the split, so that a waiter can finish it if this client dies
    /// ([`crate::recover`]).
    pub(crate) async fn publish_split<T: Transport>(
        &self,
        c: &Client<T>,
        old: GlobalAddr,
        new: GlobalAddr,
        depth: u32,
        suffix: u64,
    ) -> IndexResult<()> {
        let dir = self.dir;
        let held = lock::next_held_word(c).await?;
        let mut wait = SplitWait::default();
        // Ends when this client holds the lock: found free, or taken over from a dead holder.
        // A live holder lets go after its few doorbells.
        let g = loop {
            let w = c.masked_cas(dir, 0, LOCK, dir_lock_word(held, 0), !0xFF).await?;
            if w & LOCK == 0 {
                break global_depth(w, self.shape.max_depth)?;
            }
            bump(&self.counters.retries, 1);
            if let Some(g) = self.judge_dir(c, w, &mut wait).await? {
                break g;
            }
        };
        let g2 = self.publish_entries(c, old, new, depth, suffix, g, true).await?;
        c.write(dir, &free_dir_line(g2)).await?;
        Ok(())
    }

    /// Every segment the directory names, once each, in address order.
    async fn segments<T: Transport>(&self, c: &Client<T>) -> IndexResult<Vec<GlobalAddr>> {
        let entries = load(c, self.dir, self.shape.max_depth, self.resize).await?;
        let mut segs: Vec<GlobalAddr> =
            entries.iter().map(|&e| layout::dir_entry_parts(e).0).collect();
        segs.sort_unstable();
        segs.dedup();
        Ok(segs)
    }

    /// An audit for tests and tools, not an operation: how many slots of the whole table (frozen
    /// or not, whatever their bucket's header says) point to a block holding `key`. READs every
    /// segment and every fingerprint-matching block; meant for a quiescent table.
    pub async fn slots_holding<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
    ) -> IndexResult<usize> {
        let fp = Hashes::of(key).fp();
        let mut n = 0;
        for seg in self.segments(c).await? {
            let raw = c.read_vec(seg, self.segment_bytes() as usize).await?;
            for b in 0..3 * self.shape.groups {
                let at = layout::bucket_offset(b) as usize;
                for w in words(&raw[at + 8..at + 64]) {
                    if w != 0
                        && layout::slot_fp(w) == fp
                        && self.blocks.holds_key(c, layout::slot_block(w), key).await?
                    {
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }

    /// Used and total slots over every segment (READs the directory and each segment once).
    pub(crate) async fn count_slots<T: Transport>(&self, c: &Client<T>) -> IndexResult<(u64, u64)> {
        let (mut used, mut slots) = (0, 0);
        for seg in self.segments(c).await? {
            let raw = c.read_vec(seg, self.segment_bytes() as usize).await?;
            for b in 0..3 * self.shape.groups {
                let at = layout::bucket_offset(b) as usize;
                for w in words(&raw[at + 8..at + 64]) {
                    slots += 1;
                    used += u64::from(w != 0 && !layout::is_frozen(w));
                }
            }
        }
        Ok((used, slots))
    }
}
