//! Segment split: the old segment S (local depth L, suffix s) keeps the keys whose hash bit L is
//! 0 and a new segment N (suffix s + 2^L) takes the others, at the same positions.
//!
//! # Steps (the splitter holds S's split lock throughout)
//!
//! 1. **Lock**: CAS S's meta word from 0 to this client's held word (naming it). A client that
//!    finds it held goes back to its insert (re-reading its buckets), so waiting is never spent
//!    spinning on the lock alone.
//! 2. **Freeze** (pass 1): READ S whole; for each used slot READ its block (RACE keeps no hash
//!    bits in the slot) and, if the key belongs to S and has bit L set, CAS the slot to its frozen
//!    form. A CAS that fails saw an update or delete: the new word is examined again.
//! 3. **Copy**: WRITE N whole: headers (L + 1, s + 2^L) and the frozen entries, unfrozen, at
//!    their positions. N is not reachable yet, so plain WRITEs.
//! 4. **Switch**: WRITE the split record (N, L + 1) into S's meta line (zero-wait: it lands
//!    before the next verbs to S's node), then each S header to (L + 1, s), 8 B each, doorbell
//!    batches. From a bucket's
//!    switch on, its images exclude moving keys, whose clients re-read the directory (and wait
//!    until step 6 has published N).
//! 5. **Second pass**: READ S again and freeze every moving entry it shows that is not frozen
//!    yet, copying it to N as in 2–3: entries inserted between the two READs (their inserters saw
//!    the old headers), and entries pass 1 saw leave and come back (an insert whose tentative
//!    entry was aborted may place the same word in the same slot again). A word pass 1 found
//!    staying is not read again: the same word is the same block, so the same key. An entry
//!    CAS'd into a switched bucket after this READ is an orphan no client can see; its inserter
//!    takes it back (see `ops`).
//! 6. **Publish**: under the directory lock, double the directory if L was the global depth and
//!    point every entry aliasing s + 2^L at N (depth L + 1), those aliasing s at S.
//! 7. **Clean**: WRITE 0 over every slot frozen in 2 and 5 (no CAS ever expects a frozen word),
//!    then WRITE the lock word free and the split record clear (one 16-B WRITE).
//!
//! # Why concurrent operations stay linearizable
//!
//! * A moving key's entry is frozen before N is written and stays in S, frozen, until N is
//!   published: between its freeze and its bucket's switch it is the key's value in S (nothing can
//!   change it); after the switch no client uses S for the key, and before the publish no client
//!   can reach N, so the key is unreadable for that window rather than stale.
//! * Clients reach N only through the directory, written after every S header is switched: no
//!   write to N can be made while an S image with the old headers could still be served.
//! * An update or delete that races a freeze loses its CAS (the word is frozen) and retries in N.
//! * An insert that lands before its bucket's switch is found by the second pass; one that lands
//!   after is an orphan no image with a matching header shows, taken back by its own inserter
//!   once the split lock is free. A commit or upsert CAS needs its entry present and unfrozen,
//!   so one landing after the second READ would need an entry that READ showed unfrozen and
//!   moving — which the second pass freezes, failing the CAS.
//! * Entries that do not belong to S at all (orphans of an earlier split awaiting their
//!   inserter) are neither frozen nor copied.
//!
//! # A crash
//!
//! A splitter that stops anywhere leaves S locked, its lock word naming it; before step 7 it
//! also leaves the moving entries frozen (their updates and deletes wait) and, between steps 4
//! and 6, the moving keys unreachable (their operations wait). No acknowledged write is lost:
//! every entry stays in S until N holds a copy and is published. The waiters judge the
//! splitter and, once it is fenced, one of them finishes the split if N was published and
//! undoes it if not ([`crate::recover`]). For that, step 4 WRITEs the *split record* (N and
//! L + 1, in S's meta line) before the first switch, and step 6 a publish record in the
//! directory before its first change, both zero-wait; the lock's release clears both.

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::doorbell;

use dmindex_prim::{lease, lock};

use crate::bucket::Snap;
use crate::layout::{self, is_frozen, low_mask, Hashes, FROZEN, SLOTS};
use crate::recover::SplitWait;
use crate::{bump, Race, Resize};

/// Slot `k` (bucket `k / 7`, slot `k % 7`) of a segment image.
pub(crate) fn slot_at(image: &[u8], k: usize) -> u64 {
    let at = slot_offset(k) as usize;
    u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn slot_offset(k: usize) -> u64 {
    layout::bucket_offset(k / SLOTS) + 8 + 8 * (k % SLOTS) as u64
}

/// WRITEs of 8-B `words` at `addrs`, in doorbell batches.
pub(crate) async fn write_words<T: Transport>(
    c: &Client<T>,
    writes: &[(GlobalAddr, [u8; 8])],
) -> IndexResult<()> {
    for chunk in writes.chunks(MAX_BATCH) {
        let mut ops: Vec<BatchOp<'_>> =
            chunk.iter().map(|(a, d)| BatchOp::Write { addr: *a, data: d }).collect();
        doorbell::post(c, &mut ops).await?;
    }
    Ok(())
}

impl Race {
    /// The key's buckets in `snap` are full: split their segment unless someone else is.
    pub(crate) async fn split_full<T: Transport>(
        &self,
        c: &Client<T>,
        snap: &Snap,
        h: &Hashes,
        wait: &mut SplitWait,
    ) -> IndexResult<()> {
        let depth = layout::header_parts(snap.buckets[0].header).0;
        if snap.buckets.iter().any(|b| layout::header_parts(b.header).0 != depth) {
            // A split of this segment is switching headers: wait for it.
            bump(&self.counters.retries, 1);
            return self.wait_split(c, snap.seg, None, wait).await;
        }
        if depth as usize >= self.shape.max_depth {
            return Err(IndexError::Full(format!(
                "segment at the maximum depth {} has both buckets of a key full",
                self.shape.max_depth
            )));
        }
        if self.resize == Resize::GlobalLock {
            return self.split_global(c, snap, h, depth, wait).await;
        }
        let seg = snap.seg;
        bump(&self.counters.split_attempts, 1);
        let held = lock::next_held_word(c).await?;
        let old = c.cas(seg, 0, held).await?;
        if old != 0 {
            bump(&self.counters.retries, 1);
            return self.wait_split(c, seg, Some(old), wait).await;
        }
        // On an error the segment stays locked, as after a crash (and is repaired the same way).
        self.split_locked(c, seg, depth, h.h1 & low_mask(depth)).await?;
        // Frees the lock and clears the split record.
        c.write(seg, &[0u8; 16]).await?;
        Ok(())
    }

    /// If slot `k` of `seg` holds an entry of a key that belongs to the segment (suffix
    /// `suffix` at `depth`) and moves (bit `depth` set), freezes it and returns its word. A word
    /// found staying is recorded in `stays[k]`, so that the second pass need not read its block.
    #[allow(clippy::too_many_arguments)]
    async fn freeze<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        k: usize,
        mut w: u64,
        depth: u32,
        suffix: u64,
        stays: &mut [u64],
    ) -> IndexResult<Option<u64>> {
        // Ends when the word is empty, frozen, staying, or frozen by our CAS: each failed CAS
        // saw another client's change, and a slot changes only as often as clients write it.
        loop {
            if w == 0 || is_frozen(w) || stays[k] == w {
                return Ok(None);
            }
            // A split reads a block per used slot: long enough to need the lease renewed.
            lease::renew_if_due(c).await?;
            let kh = self.blocks.with_key(c, layout::slot_block(w), Hashes::of).await?;
            if kh.h1 & low_mask(depth) != suffix || !kh.bit(depth) {
                stays[k] = w;
                return Ok(None);
            }
            let old = c.cas(seg.add(slot_offset(k)), w, w | FROZEN).await?;
            if old == w {
                return Ok(Some(w));
            }
            w = old;
        }
    }

    async fn split_locked<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        depth: u32,
        suffix: u64,
    ) -> IndexResult<()> {
        let bytes = self.segment_bytes() as usize;
        let buckets = 3 * self.shape.groups;
        let old_header = layout::header(depth, suffix);
        let first = c.read_vec(seg, bytes).await?;
        for b in 0..buckets {
            let at = layout::bucket_offset(b) as usize;
            let hd = u64::from_le_bytes(first[at..at + 8].try_into().expect("8 bytes"));
            if hd != old_header {
                // Split by someone else between our READ and our lock.
                return Ok(());
            }
        }
        // 2. Freeze.
        let mut moved: Vec<(usize, u64)> = Vec::new();
        let mut stays = vec![0u64; buckets * SLOTS];
        for k in 0..buckets * SLOTS {
            let w = slot_at(&first, k);
            if let Some(w) = self.freeze(c, seg, k, w, depth, suffix, &mut stays).await? {
                moved.push((k, w));
            }
        }
        // 3. Copy.
        let new_suffix = suffix | 1 << depth;
        let mut image = vec![0u8; bytes];
        for b in 0..buckets {
            let at = layout::bucket_offset(b) as usize;
            image[at..at + 8].copy_from_slice(&layout::header(depth + 1, new_suffix).to_le_bytes());
        }
        for &(k, w) in &moved {
            let at = slot_offset(k) as usize;
            image[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
        let new = c.alloc(bytes as u64, 64).await?;
        c.write(new, &image).await?;
        // 4. Switch, the split record first: a zero-wait WRITE, which lands before the switches
        // (RC order on S's node) and adds no round trip.
        let switched = layout::header(depth + 1, suffix).to_le_bytes();
        c.write_zero_wait(seg.add(8), &layout::split_record(new, depth + 1).to_le_bytes())?;
        let headers: Vec<(GlobalAddr, [u8; 8])> =
            (0..buckets).map(|b| (seg.add(layout::bucket_offset(b)), switched)).collect();
        write_words(c, &headers).await?;
        // 5. Second pass.
        let second = c.read_vec(seg, bytes).await?;
        let mut late = Vec::new();
        for k in 0..buckets * SLOTS {
            let w = slot_at(&second, k);
            if let Some(w) = self.freeze(c, seg, k, w, depth, suffix, &mut stays).await? {
                late.push((new.add(slot_offset(k)), w.to_le_bytes()));
                moved.push((k, w));
            }
        }
        write_words(c, &late).await?;
        // 6. Publish.
        self.publish_split(c, seg, new, depth, suffix).await?;
        // 7. Clean.
        let cleared: Vec<(GlobalAddr, [u8; 8])> =
            moved.iter().map(|&(k, _)| (seg.add(slot_offset(k)), [0; 8])).collect();
        write_words(c, &cleared).await?;
        bump(&self.counters.splits, 1);
        bump(&self.counters.moved, moved.len() as u64);
        Ok(())
    }
}
