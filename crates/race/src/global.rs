//! `race-sephash`: RACE's resize as the SepHash authors implemented and measured it.
//!
//! The RACE paper has no public code; the SepHash paper's RACE line was measured on the
//! authors' own implementation, whose resize differs from `race`'s (`crate::split`) in ways
//! that decide the paper's headline (RACE flat from 64 clients, 80× more resizes at 128 clients
//! than at 1). This module is that resize on the shared table code: bucket layout, search,
//! insert, update and delete are `race`'s.
//!
//! # What differs from `race`
//!
//! * **One lock word for the whole table** (directory +0), taken by CAS for the locked part of
//!   every split. A client that fails to take it re-reads the directory and goes back to its
//!   insert, which finds its buckets still full and tries again: every such try is a *split
//!   attempt* (the `split_attempts` counter; `splits` counts splits done).
//! * **24-B directory entries** {split flag, segment, local depth} (drawn in [`crate::layout`]).
//! * **Whole-directory refresh**: READ the global depth, then every entry (`24 × 2^depth` bytes),
//!   and replace the handle's cache with it. On every split-lock failure, on every split that
//!   finds its entry flagged, stale or of another depth, inside every split's locked section,
//!   and on every insert whose buckets' local depth differs from its cached entry's (or whose
//!   headers exclude its key). Searches, updates and deletes refresh as `race` does, except that
//!   a refresh is this whole-directory READ.
//! * **Entries moved one by one, outside the lock**.
//!
//! # A split of segment S (local depth L, suffix s) into S and N (suffix s + 2^L)
//!
//! 1. CAS the lock word 0 → this client's held word. Failed: re-read the directory, return (the
//!    insert retries).
//! 2. READ the global depth, then the key's entry. If the depth differs from the cached one, or
//!    the entry is flagged, or no longer names S at depth L: unlock, re-read the directory,
//!    return.
//! 3. WRITE N whole, every bucket *closed* (a header no key matches), on S's memory node; its
//!    meta line names this client, S and the split.
//! 4. Re-read the directory (the table record `S | PUBLISHING` WRITTEN in the doorbell of its
//!    first READ). WRITE S's meta line: *moving*, naming this client, N and the split.
//! 5. Local split (L < G): one awaited WRITE per entry aliasing s: {flag, S or N, L + 1}.
//!    Global split (L = G): WRITE S's entry, WRITE the upper half (a copy of the lower one with
//!    N at s + 2^G: `24 × 2^G` bytes), WRITE the depth G + 1.
//! 6. Unlock (a doorbell: WRITE the table record 0, CAS the held word → 0).
//! 7. Move, bucket by bucket b, one awaited verb at a time:
//!    * WRITE S's header b to (L + 1, s) (the *switch*; in one doorbell with the opening of N's
//!      bucket b − 1, same memory node), then READ S's bucket b;
//!    * per used slot, READ its KV block; if the key belongs to S and has bit L set, CAS the
//!      S slot to its *frozen* form (a failed CAS saw a change since the READ: an update,
//!      upsert, commit, abort or delete that read the old header; the new word is examined
//!      again), then one doorbell: CAS the word into N's slot at the same position, WRITE S's
//!      slot 0;
//!    * WRITE N's header b to (L + 1, s + 2^L) (the *open*).
//! 8. Spin on the lock word (CAS 0 → held), READ the global depth (the table record `S |
//!    CLEARING` WRITTEN in the same doorbell), WRITE 0 over the split flag of every entry
//!    aliasing s (one awaited WRITE each), clear N's and S's meta lines (one doorbell), unlock.
//!
//! # Races the authors' protocol leaves open, and how they are closed here
//!
//! The authors publish N (with open headers) before the move, so from step 6 on a key whose
//! entry is still in S is missing for clients that go to N, an insert into N can make a second
//! copy of it, and an update that lands in S after its bucket's move is lost. Our model exposes
//! all three (a client may stall between any two verbs; a READ overlapping a WRITE sees mixed
//! lines). Closed while keeping the cost structure (whole-directory re-reads, the global lock,
//! one CAS per move):
//!
//! * **N is born closed and opened bucket by bucket** after S's bucket at the same index is
//!   moved. A key's N buckets (its two combined buckets) are all open only after all its S
//!   buckets have been switched and emptied of its entry, so nobody reads or writes a moving
//!   key in N before its entry is there, and a key is never live in both segments. A client
//!   that meets a closed bucket has the right directory entry: it re-reads the bucket, not the
//!   directory (the authors' clients would have inserted there without a re-read either).
//! * **Switch before READ**: S's bucket b is switched before it is READ, so that READ (one
//!   line, one instant) shows every entry placed before the switch. From the switch on, no
//!   image shows a moving key beside a matching header, so the moving keys are unreadable from
//!   their first switched bucket until their last N bucket opens (their clients re-read the
//!   directory until then; the authors' clients would have gone to N and found nothing).
//! * **The freeze**: an update, upsert, commit or delete that read S before the switch may
//!   CAS S's slot after it; our freezing CAS from the word we read fails, and the new word (or
//!   its absence) is what moves. Once frozen, the slot fails every such CAS, and those clients
//!   re-read and follow the key to N. So every write that lands in S reaches N, in order; none
//!   is lost. (The authors' protocol empties the slot with its second CAS instead; freezing
//!   first and emptying with a WRITE in the doorbell that copies makes a half-done move
//!   readable from memory alone, for the repair of a dead mover: one verb more per moved
//!   entry, no round trip.)
//! * **Orphans**: an insert that read S's old header may CAS its entry into a switched bucket
//!   after our READ of it. No image shows it with a matching header; its inserter waits until
//!   S's meta word is no longer *moving* and takes it back (as after `race`'s second pass, see
//!   `ops`). An orphan our READ did see is moved like any entry, and its inserter follows it.
//!   Hence step 4's and step 8's meta WRITEs, which the authors do not have.
//! * **Inserts check local depth** as the authors' do (a stricter test than `race`'s suffix
//!   check), so inserts of keys of S's staying half also wait, with directory re-reads, until
//!   their buckets are switched: the authors' behaviour, kept for its cost.
//!
//! Costs of the closing, in round trips per split: 2 for the *moving* marks (set in step 4,
//! cleared in step 8), 1 for the last N bucket's opening (the others ride in the next switch's
//! doorbell), 1 READ of the global depth before clearing the flags (the authors clear from
//! their cache, plus a margin). What it costs operations: keys of N wait for their buckets to open
//! instead of inserting into N at once, re-reading their buckets (one doorbell each time)
//! meanwhile.
//!
//! # A crash
//!
//! A mover that dies leaves the lock word held (steps 2–6 or 8) or S and N marked (from step
//! 4 until step 8): every word that can keep a client waiting names it, and the waiters judge
//! it and repair what it left (`crate::global_repair`). Nothing acknowledged is lost: an
//! entry leaves S only frozen and after its copy is in N.

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::{doorbell, lease, lock};

use crate::bucket::Snap;
use crate::layout::{
    self, global_entry, global_entry_addr, global_entry_parts, low_mask, Hashes, CLEARING, FROZEN,
    GLOBAL_DEPTH_WORD, GLOBAL_ENTRY, PUBLISHING, SLOTS, TABLE_RECORD,
};
use crate::recover::SplitWait;
use crate::{bump, Race};

/// The global depth word of a `race-sephash` directory, checked.
pub(crate) fn depth_of(word: u64, max_depth: usize) -> IndexResult<u32> {
    if word > max_depth as u64 {
        return Err(IndexError::Corrupt(format!("race-sephash global depth {word:#x}")));
    }
    Ok(word as u32)
}

/// READs the global depth, then every entry below it: 2 round trips, `8 + 24 × 2^depth` bytes.
async fn read_raw<T: Transport>(
    c: &Client<T>,
    dir: GlobalAddr,
    max_depth: usize,
    raw: &mut Vec<u8>,
) -> IndexResult<()> {
    let g = depth_of(c.read_word(dir.add(GLOBAL_DEPTH_WORD)).await?, max_depth)?;
    raw.clear();
    raw.resize((GLOBAL_ENTRY as usize) << g, 0);
    c.read(global_entry_addr(dir, 0), raw).await?;
    Ok(())
}

/// The 8-B cache words of the 24-B entries `raw` into `out` (replaced); `out` is untouched when
/// an entry is not one a directory can hold.
fn parse(raw: &[u8], max_depth: usize, out: &mut Vec<u64>) -> IndexResult<()> {
    for (i, e) in raw.chunks_exact(GLOBAL_ENTRY as usize).enumerate() {
        let (flag, seg, depth) = global_entry_parts(e);
        if flag > 1 || seg == 0 || seg & 63 != 0 || depth > max_depth as u64 {
            return Err(IndexError::Corrupt(format!(
                "race-sephash directory entry {i}: flag {flag:#x}, segment {seg:#x}, depth {depth:#x}"
            )));
        }
    }
    out.clear();
    out.extend(raw.chunks_exact(GLOBAL_ENTRY as usize).map(|e| {
        let (_, seg, depth) = global_entry_parts(e);
        layout::dir_entry(GlobalAddr::from_raw(seg), depth as u32)
    }));
    Ok(())
}

/// READs the whole directory into `out` as 8-B cache words (a new handle's cache).
pub(crate) async fn read_directory<T: Transport>(
    c: &Client<T>,
    dir: GlobalAddr,
    max_depth: usize,
    out: &mut Vec<u64>,
) -> IndexResult<()> {
    let mut raw = Vec::new();
    read_raw(c, dir, max_depth, &mut raw).await?;
    parse(&raw, max_depth, out)
}

impl Race {
    /// The SepHash authors' directory refresh: READ the global depth and every entry, replace
    /// the cache with them; the entry of `h1`. The READ lands in the client's pooled buffer:
    /// under contention every failed split lock refreshes, so this is a hot path.
    pub(crate) async fn reread_directory<T: Transport>(
        &self,
        c: &Client<T>,
        h1: u64,
    ) -> IndexResult<u64> {
        let mut raw = self.directory_reads.get(c, Vec::new);
        read_raw(c, self.dir, self.shape.max_depth, &mut raw).await?;
        self.install(c, &raw, h1)
    }

    fn install<T: Transport>(&self, c: &Client<T>, raw: &[u8], h1: u64) -> IndexResult<u64> {
        bump(&self.counters.refreshes, 1);
        bump(&self.counters.refresh_bytes, 8 + raw.len() as u64);
        // Copied into the cache entry by entry, as the authors' client does.
        c.compute(Work::BytesScanned, raw.len() as u64);
        let mut cache = self.cache.write().expect("directory cache");
        parse(raw, self.shape.max_depth, &mut cache)?;
        Ok(cache[(h1 & (cache.len() as u64 - 1)) as usize])
    }

    /// Frees the table's lock word, held as `held`: a CAS, after a WRITE clearing the table
    /// record if one was written (one doorbell: both on the directory's node).
    pub(crate) async fn unlock_table<T: Transport>(
        &self,
        c: &Client<T>,
        held: u64,
        recorded: bool,
    ) -> IndexResult<()> {
        let zero = [0u8; 8];
        let mut ops = [
            BatchOp::Write { addr: self.dir.add(TABLE_RECORD), data: &zero },
            BatchOp::atomic(self.dir, AtomicOp::Cas { expected: held, new: 0 }),
        ];
        let first = usize::from(!recorded);
        doorbell::post(c, &mut ops[first..]).await?;
        let BatchOp::Atomic { old: was, .. } = ops[1] else { unreachable!("an atomic") };
        if was != held {
            return Err(IndexError::Corrupt(format!("race-sephash lock word {was:#x} while held")));
        }
        Ok(())
    }

    /// Takes the table's lock word, waiting while another client holds it (judging the holder,
    /// and repairing what a dead one left: [`Race::repair_table`]). Returns the held word.
    pub(crate) async fn lock_table<T: Transport>(&self, c: &Client<T>) -> IndexResult<u64> {
        let held = lock::next_held_word(c).await?;
        let mut wait = SplitWait::default();
        // Ends when the CAS finds the word free; a live holder frees it after a split's locked
        // section, a dead one is judged and its lock repaired.
        loop {
            let was = c.cas(self.dir, 0, held).await?;
            if was == 0 {
                return Ok(held);
            }
            bump(&self.counters.retries, 1);
            self.wait_table(c, was, &mut wait).await?;
        }
    }

    /// WRITEs the table record `record` and READs the global depth: one doorbell, under the
    /// lock, before the holder's first change to the directory.
    async fn record_and_depth<T: Transport>(&self, c: &Client<T>, record: u64) -> IndexResult<u32> {
        let rec = record.to_le_bytes();
        let mut depth = [0u8; 8];
        c.batch(&mut [
            BatchOp::Write { addr: self.dir.add(TABLE_RECORD), data: &rec },
            BatchOp::Read { addr: self.dir.add(GLOBAL_DEPTH_WORD), buf: &mut depth },
        ])
        .await?;
        depth_of(u64::from_le_bytes(depth), self.shape.max_depth)
    }

    /// One split attempt on the segment of `snap` (local depth `depth`), whose key `h` found both
    /// combined buckets full. Returns when the insert should look again: after a failed lock or
    /// check (with the directory re-read), or after a whole split.
    pub(crate) async fn split_global<T: Transport>(
        &self,
        c: &Client<T>,
        snap: &Snap,
        h: &Hashes,
        depth: u32,
        wait: &mut SplitWait,
    ) -> IndexResult<()> {
        bump(&self.counters.split_attempts, 1);
        let dir = self.dir;
        let held = lock::next_held_word(c).await?;
        let was = c.cas(dir, 0, held).await?;
        if was != 0 {
            bump(&self.counters.retries, 1);
            self.wait_table(c, was, wait).await?;
            self.reread_directory(c, h.h1).await?;
            return Ok(());
        }
        // Locked. On an error the lock word stays held, as after a crash (and is repaired the
        // same way).
        let cached_g = self.cache.read().expect("directory cache").len().trailing_zeros();
        let g = depth_of(c.read_word(dir.add(GLOBAL_DEPTH_WORD)).await?, self.shape.max_depth)?;
        let mut e = [0u8; GLOBAL_ENTRY as usize];
        c.read(global_entry_addr(dir, h.h1 & low_mask(g)), &mut e).await?;
        let (flag, seg, ld) = global_entry_parts(&e);
        if g != cached_g || flag != 0 || seg != snap.seg.raw() || ld != u64::from(depth) {
            // Another split is moving this segment, or finished one the cache has not seen.
            self.unlock_table(c, held, false).await?;
            bump(&self.counters.retries, 1);
            if flag != 0 {
                self.wait_split(c, GlobalAddr::from_raw(seg), None, wait).await?;
            }
            self.reread_directory(c, h.h1).await?;
            return Ok(());
        }
        let old = snap.seg;
        let s = h.h1 & low_mask(depth);
        let seg_bytes = self.segment_bytes();
        let new = c.alloc_on(old.node(), seg_bytes, 64).await?;
        let mut image = vec![0u8; seg_bytes as usize];
        image[..24].copy_from_slice(&mark_line(held, old, layout::split_info(depth + 1, s, true)));
        let closed = layout::closed_header(depth + 1, s | 1 << depth).to_le_bytes();
        for b in 0..3 * self.shape.groups {
            let at = layout::bucket_offset(b) as usize;
            image[at..at + 8].copy_from_slice(&closed);
        }
        c.write(new, &image).await?;
        let g = self.record_and_depth(c, old.raw() | PUBLISHING).await?;
        let mut raw = vec![0u8; (GLOBAL_ENTRY as usize) << g];
        c.read(global_entry_addr(dir, 0), &mut raw).await?;
        self.install(c, &raw, h.h1)?;
        c.write(old, &mark_line(held, new, layout::split_info(depth + 1, s, false))).await?;
        let (e_old, e_new) =
            (global_entry(true, old, depth + 1), global_entry(true, new, depth + 1));
        if depth == g {
            c.write(global_entry_addr(dir, s), &e_old).await?;
            let mut upper = raw;
            let at = (s * GLOBAL_ENTRY) as usize;
            upper[at..at + GLOBAL_ENTRY as usize].copy_from_slice(&e_new);
            c.write(global_entry_addr(dir, 1 << g), &upper).await?;
            c.write(dir.add(GLOBAL_DEPTH_WORD), &u64::from(g + 1).to_le_bytes()).await?;
        } else {
            let mut i = s;
            while i < 1 << g {
                let e = if i >> depth & 1 == 1 { &e_new } else { &e_old };
                c.write(global_entry_addr(dir, i), e).await?;
                i += 1 << depth;
            }
        }
        self.unlock_table(c, held, true).await?;
        let moved = self.move_entries(c, old, new, depth, s).await?;
        self.finish_split(c, old, new, depth, s, None).await?;
        bump(&self.counters.splits, 1);
        bump(&self.counters.moved, moved);
        Ok(())
    }

    /// Step 8: under the table's lock, clears the split flag of every entry aliasing `s`
    /// (depth `depth`), then both segments' marks, then frees the lock.
    /// With `mark`, only if S's mark still holds it (a repairer's check: a repair of the lock
    /// word may have finished the split meanwhile).
    pub(crate) async fn finish_split<T: Transport>(
        &self,
        c: &Client<T>,
        old: GlobalAddr,
        new: GlobalAddr,
        depth: u32,
        s: u64,
        mark: Option<u64>,
    ) -> IndexResult<()> {
        let held = self.lock_table(c).await?;
        if let Some(mark) = mark {
            if c.read_word(old).await? != mark {
                return self.unlock_table(c, held, false).await;
            }
        }
        let g = self.record_and_depth(c, old.raw() | CLEARING).await?;
        self.clear_flags(c, depth, s, g).await?;
        self.clear_marks(c, old, new).await?;
        self.unlock_table(c, held, true).await
    }

    /// WRITEs 0 over the split flag of every entry aliasing `s` at depth `depth` (one awaited
    /// WRITE each, as the authors'), global depth `g`.
    pub(crate) async fn clear_flags<T: Transport>(
        &self,
        c: &Client<T>,
        depth: u32,
        s: u64,
        g: u32,
    ) -> IndexResult<()> {
        let mut i = s;
        while i < 1 << g {
            c.write(global_entry_addr(self.dir, i), &0u64.to_le_bytes()).await?;
            i += 1 << depth;
        }
        Ok(())
    }

    /// Clears the marks of a split's two segments (one doorbell: they share a memory node; the
    /// new one first, so a cleared old mark implies a cleared new one).
    pub(crate) async fn clear_marks<T: Transport>(
        &self,
        c: &Client<T>,
        old: GlobalAddr,
        new: GlobalAddr,
    ) -> IndexResult<()> {
        let zero = [0u8; 24];
        doorbell::post(
            c,
            &mut [
                BatchOp::Write { addr: new, data: &zero },
                BatchOp::Write { addr: old, data: &zero },
            ],
        )
        .await
    }

    /// Step 7: moves S's entries whose hash bit `depth` is 1 to N, bucket by bucket; returns
    /// how many moved.
    async fn move_entries<T: Transport>(
        &self,
        c: &Client<T>,
        old: GlobalAddr,
        new: GlobalAddr,
        depth: u32,
        s: u64,
    ) -> IndexResult<u64> {
        let switched = layout::header(depth + 1, s).to_le_bytes();
        let opened = layout::header(depth + 1, s | 1 << depth).to_le_bytes();
        let buckets = 3 * self.shape.groups;
        let mut moved = 0;
        for b in 0..buckets {
            // A move reads a block per used slot: long enough to need the lease renewed.
            lease::renew_if_due(c).await?;
            let at = layout::bucket_offset(b);
            if b == 0 {
                c.write(old.add(at), &switched).await?;
            } else {
                let prev = new.add(layout::bucket_offset(b - 1));
                doorbell::post(
                    c,
                    &mut [
                        BatchOp::Write { addr: prev, data: &opened },
                        BatchOp::Write { addr: old.add(at), data: &switched },
                    ],
                )
                .await?;
            }
            let mut line = [0u8; layout::BUCKET as usize];
            c.read(old.add(at), &mut line).await?;
            let word = |i: usize| u64::from_le_bytes(line[8 * i..8 * i + 8].try_into().expect("8"));
            if word(0) != u64::from_le_bytes(switched) {
                return Err(IndexError::Corrupt(format!("bucket header {:#x} at {old}", word(0))));
            }
            for j in 0..SLOTS {
                let off = at + 8 + 8 * j as u64;
                if self.move_slot(c, old.add(off), new.add(off), word(j + 1), depth, s).await? {
                    moved += 1;
                }
            }
        }
        c.write(new.add(layout::bucket_offset(buckets - 1)), &opened).await?;
        Ok(moved)
    }

    /// Moves the entry `w` READ at `from` to `to` (N's slot, closed, holding 0) if its key moves:
    /// a CAS freezing it at `from` (retried on the word a failed one finds: an update, upsert,
    /// commit, abort or delete that read the old header landed first), then one doorbell that
    /// CASes the copy into `to` and WRITEs `from` empty. Whether an entry moved.
    pub(crate) async fn move_slot<T: Transport>(
        &self,
        c: &Client<T>,
        from: GlobalAddr,
        to: GlobalAddr,
        mut w: u64,
        depth: u32,
        s: u64,
    ) -> IndexResult<bool> {
        // Ends when the word is empty, staying, or frozen by our CAS: each failed CAS saw
        // another client's write, and a slot changes only as often as clients write it.
        loop {
            if w == 0 || layout::is_frozen(w) {
                return Ok(false);
            }
            let kh = self.blocks.with_key(c, layout::slot_block(w), Hashes::of).await?;
            if kh.h1 & low_mask(depth) != s || !kh.bit(depth) {
                // Stays (or an orphan of an older split, left to its inserter).
                return Ok(false);
            }
            let seen = c.cas(from, w, w | FROZEN).await?;
            if seen == w {
                break;
            }
            w = seen;
        }
        copy_out(c, from, to, w, 0).await?;
        Ok(true)
    }
}

/// The first 24 B of a segment's meta line while a split marks it: `held` (the mover), the
/// other segment, the split info.
pub(crate) fn mark_line(held: u64, other: GlobalAddr, info: u64) -> [u8; 24] {
    let mut line = [0u8; 24];
    line[..8].copy_from_slice(&held.to_le_bytes());
    line[8..16].copy_from_slice(&other.raw().to_le_bytes());
    line[16..].copy_from_slice(&info.to_le_bytes());
    line
}

/// The last step of moving frozen entry `w` from `from` to `to` (closed, holding `copy`, 0 or
/// `w`): one doorbell (S and N share a memory node) that CASes `w` into `to` and WRITEs
/// `from` empty. Only the mover writes a closed bucket, so the CAS cannot fail unless memory is
/// corrupt.
pub(crate) async fn copy_out<T: Transport>(
    c: &Client<T>,
    from: GlobalAddr,
    to: GlobalAddr,
    w: u64,
    copy: u64,
) -> IndexResult<()> {
    let zero = [0u8; 8];
    let mut ops = [
        BatchOp::atomic(to, AtomicOp::Cas { expected: copy, new: w }),
        BatchOp::Write { addr: from, data: &zero },
    ];
    doorbell::post(c, &mut ops).await?;
    let BatchOp::Atomic { old: was, .. } = ops[0] else { unreachable!("an atomic") };
    if was != copy {
        return Err(IndexError::Corrupt(format!("closed slot at {to} holds {was:#x}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::{IndexConfig, PointIndex};

    use super::*;
    use crate::RaceSepHash;

    fn stat(t: &Race, name: &str) -> u64 {
        t.table_stats().extra.iter().find(|(k, _)| *k == name).map(|&(_, v)| v).unwrap()
    }

    /// The cost shape the SepHash paper's RACE numbers rest on: a failed split-lock attempt
    /// READs the whole directory (24 B an entry), and a split moves each entry with one CAS
    /// into the new segment and one emptying the old slot, one at a time.
    #[test]
    fn a_failed_attempt_reads_the_directory_and_a_split_moves_by_cas() {
        let f =
            LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
        let c = f.client(0).unwrap();
        let config = IndexConfig {
            extra: vec![
                ("groups".into(), "1".into()),
                ("depth".into(), "2".into()),
                ("max_depth".into(), "8".into()),
            ],
            ..IndexConfig::default()
        };
        run_tasks([async {
            let idx = RaceSepHash::create(&c, &config, 0).await.unwrap();
            let t = idx.table();
            let keys: Vec<[u8; 8]> = (0..24u64).map(|k| k.to_be_bytes()).collect();
            for k in &keys {
                idx.insert(&c, k, k).await.unwrap();
            }
            assert_eq!(stat(t, "split_attempts"), 0, "24 keys over 4 segments of 21 slots");
            let h = Hashes::of(&keys[0]);
            let mut snap = Snap::default();
            t.locate(&c, &h, true, &mut 0, &mut snap).await.unwrap();
            let depth = layout::header_parts(snap.buckets[0].header).0;
            assert_eq!(depth, 2);

            // Another client holds the table's lock word: the attempt fails and re-reads.
            // (This client joins the cluster first: once per client, a READ and a CAS.)
            dmindex_prim::lease::join(&c).await.unwrap();
            c.write(t.dir, &1u64.to_le_bytes()).await.unwrap();
            let before = c.counts();
            t.split_global(&c, &snap, &h, depth, &mut SplitWait::default()).await.unwrap();
            let d = c.counts();
            let dir_bytes = 8 + (GLOBAL_ENTRY << 2);
            assert_eq!((d.cas - before.cas, d.cas_failures - before.cas_failures), (1, 1));
            assert_eq!(d.reads - before.reads, 2, "the global depth, then every entry");
            assert_eq!(d.bytes_read - before.bytes_read, 8 + dir_bytes, "CAS result + directory");
            assert_eq!(d.round_trips - before.round_trips, 3);
            assert_eq!((stat(t, "split_attempts"), stat(t, "splits")), (1, 0));
            assert_eq!(stat(t, "directory_refresh_bytes"), dir_bytes);

            // Lock free: the split goes through, moving each entry with two CASes.
            c.write(t.dir, &0u64.to_le_bytes()).await.unwrap();
            let s = h.h1 & low_mask(depth);
            let in_s = |k: &&[u8; 8]| Hashes::of(&k[..]).h1 & low_mask(depth) == s;
            let used = keys.iter().filter(in_s).count() as u64;
            let moving =
                keys.iter().filter(in_s).filter(|k| Hashes::of(&k[..]).bit(depth)).count() as u64;
            assert!(moving > 0 && used > moving, "{moving} of {used}: pick other keys");
            let before = c.counts();
            t.split_global(&c, &snap, &h, depth, &mut SplitWait::default()).await.unwrap();
            let d = c.counts();
            assert_eq!(stat(t, "splits"), 1);
            assert_eq!(stat(t, "split_moved_entries"), moving);
            // Lock, unlock, lock again, unlock; per moving entry one CAS into the new segment
            // and one emptying the old slot.
            assert_eq!(d.cas - before.cas, 4 + 2 * moving);
            assert_eq!(d.cas_failures - before.cas_failures, 0);
            // Depth + entry, the directory re-read (2), per bucket one READ, per used slot its
            // KV block, the depth before clearing the flags.
            assert_eq!(d.reads - before.reads, 2 + 2 + 3 + used + 1);
            // L = G = 2: a global split, the directory doubled, no entry left flagged.
            let g = c.read_word(t.dir.add(GLOBAL_DEPTH_WORD)).await.unwrap();
            assert_eq!(g, 3);
            let raw = c.read_vec(global_entry_addr(t.dir, 0), 24 << g).await.unwrap();
            let entries: Vec<_> = raw.chunks_exact(24).map(global_entry_parts).collect();
            assert!(entries.iter().all(|e| e.0 == 0), "{entries:?}");
            let named = |i: u64| (entries[i as usize].1, entries[i as usize].2);
            assert_eq!(named(s), (snap.seg.raw(), 3));
            assert_ne!(named(s | 4).0, snap.seg.raw());
            assert_eq!(named(s | 4).1, 3);
            for k in &keys {
                assert_eq!(idx.search(&c, k).await.unwrap(), Some(k.to_vec()));
                assert_eq!(t.slots_holding(&c, k).await.unwrap(), 1);
            }
            // Inserts go on past global splits (the directory doubles).
            for k in 24..400u64 {
                idx.insert(&c, &k.to_be_bytes(), &k.to_be_bytes()).await.unwrap();
            }
            for k in 0..400u64 {
                let k = k.to_be_bytes();
                assert_eq!(idx.search(&c, &k).await.unwrap(), Some(k.to_vec()));
            }
            assert!(stat(t, "directory_depth") > 2);
            assert!(stat(t, "split_attempts") >= stat(t, "splits"));
        }]);
    }
}
