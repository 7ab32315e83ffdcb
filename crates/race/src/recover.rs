//! Client-crash recovery: a wait on another client's split that judges the splitter, and the
//! repair of a split whose splitter died (`race`; `race-sephash`'s is in [`crate::global`]).
//!
//! # Who waits, and on what
//!
//! Every place an operation waits for a split ends in [`Race::wait_split`] with the segment it
//! waits on: a split lock it failed to take, buckets of mixed depths, a frozen entry, an entry
//! placed before a switch, an orphan, headers that exclude the key while the directory still
//! names the segment, and (`race-sephash`) a closed bucket or a flagged directory entry. The
//! wait looks at the holder only once it has lasted half a lease, then once a quarter lease
//! ([`SplitWait`]): a split that ends normally costs its waiters nothing more, and a dead
//! splitter is judged by [`lease::Watch`] (three leases without a renewal) and fenced, after
//! which the waiter repairs. The directory lock's waiters judge its holder the same way
//! ([`Race::judge_dir`]).
//!
//! # Repairing a `race` split (the old segment S, local depth L, suffix s; new segment N)
//!
//! The repairer takes S's lock over by CAS from the exact held word the dead splitter left to
//! its own (one repairer wins; if it dies too, the next one judges it and starts over). Then it
//! READs S whole. What it finds decides, and every step is idempotent:
//!
//! * **No split record** (+8 of S's meta line): no header was switched, so no client ever left
//!   S for N, which is unreachable garbage. Undo: every frozen entry is CAS'd back to its
//!   unfrozen word (no client CAS expects a frozen word, so these CASes cannot fail).
//! * **A split record** names N and L + 1. The directory decides whether N was published:
//!   first a publish left half done is finished ([`Race::settle_publish`]: the directory lock,
//!   if a dead member holds it, is taken over and the split its publish record names is
//!   published whole, from the record alone); then S's own entry `s` names S at depth L + 1
//!   exactly when S's split was published (an earlier split of S left it at depth L, and no one
//!   can split S again while its lock is held).
//!   * Published: N holds a copy of every frozen entry (the first pass's in N's image, the
//!     second pass's WRITTEN and awaited before the publish), so finish: WRITE 0 over every
//!     frozen slot of S.
//!   * Not published: N was never reachable, so undo: unfreeze every frozen entry (CAS), and
//!     WRITE every header back to (L, s). Entries inserted into switched buckets meanwhile
//!     were visible to no one and become ordinary entries again: a tentative one is settled by
//!     its inserter (which was waiting for the lock and now sees a matching header), and no
//!     committed one can have been made there (a commit needs an image whose headers all match).
//!
//! Last, one 16-B WRITE frees the lock and clears the record. A key is never lost or
//! duplicated: undone, every entry is where it was before the split began and N is garbage;
//! finished, every moving entry is in N and cleared from S, as the splitter would have left it.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lease::{self, Verdict, WaitWatch, Watch};
use dmindex_prim::lock::{self, holder};

use crate::dir::global_depth;
use crate::layout::{
    self, dir_entry, dir_entry_addr, dir_entry_parts, dir_lock_word, is_frozen, FROZEN, LOCK, SLOTS,
};
use crate::split::{slot_at, slot_offset, write_words};
use crate::{bump, Race, Resize};

/// A wait on a split another client runs (one per operation, or per retry loop): the holder
/// is looked at only once the wait has lasted ([`WaitWatch`]).
pub(crate) type SplitWait = WaitWatch;

/// The little-endian word at byte `at` of `b`.
pub(crate) fn word_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Race {
    /// One failed look at segment `seg`, which a split holds (`seen`: its lock word, if the
    /// failed verb returned it). Judges the holder when the wait has lasted; repairs the split
    /// when the holder is dead. The caller looks again either way.
    pub(crate) async fn wait_split<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        seen: Option<u64>,
        w: &mut SplitWait,
    ) -> IndexResult<()> {
        if !w.due(c) {
            return Ok(());
        }
        lease::renew_if_due(c).await?;
        if self.resize == Resize::GlobalLock {
            return self.wait_move(c, seg, w).await;
        }
        let word = match seen {
            Some(x) => x,
            None => c.read_word(seg).await?,
        };
        let Some(member) = holder(word) else { return Ok(()) };
        if w.watch.look(c, word, member).await? == Verdict::Fenced {
            self.repair_split(c, seg, word).await?;
            w.watch = Watch::new();
        }
        Ok(())
    }

    /// Repairs the split of `seg` whose lock the fenced member left as `dead` (module docs).
    pub(crate) async fn repair_split<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        dead: u64,
    ) -> IndexResult<()> {
        let mine = lock::next_held_word(c).await?;
        if c.cas(seg, dead, mine).await? != dead {
            // Another waiter repaired it (or is repairing it under its own word).
            return Ok(());
        }
        bump(&self.counters.repairs, 1);
        let buckets = 3 * self.shape.groups;
        let image = c.read_vec(seg, self.segment_bytes() as usize).await?;
        let record = word_at(&image, 8);
        let frozen: Vec<(usize, u64)> = (0..buckets * SLOTS)
            .map(|k| (k, slot_at(&image, k)))
            .filter(|&(_, w)| is_frozen(w))
            .collect();
        let mut headers = None;
        let published = if record == 0 {
            false
        } else {
            let depth = dir_entry_parts(record).1 - 1;
            let first = word_at(&image, layout::bucket_offset(0) as usize);
            let suffix = layout::header_parts(first).1 & layout::low_mask(depth);
            headers = Some(layout::header(depth, suffix));
            let dead_member = holder(dead).expect("a named holder was judged");
            self.settle_publish(c, dead_member, seg).await?;
            let g = global_depth(c.read_word(self.dir).await?, self.shape.max_depth)?;
            g > depth
                && c.read_word(dir_entry_addr(self.dir, suffix)).await? == dir_entry(seg, depth + 1)
        };
        if published {
            let cleared: Vec<(GlobalAddr, [u8; 8])> =
                frozen.iter().map(|&(k, _)| (seg.add(slot_offset(k)), [0; 8])).collect();
            write_words(c, &cleared).await?;
        } else {
            for &(k, w) in &frozen {
                // Only the lock holder changes a frozen word: this CAS cannot fail.
                c.cas(seg.add(slot_offset(k)), w, w & !FROZEN).await?;
            }
            if let Some(h) = headers {
                let back = h.to_le_bytes();
                let writes: Vec<(GlobalAddr, [u8; 8])> =
                    (0..buckets).map(|b| (seg.add(layout::bucket_offset(b)), back)).collect();
                write_words(c, &writes).await?;
            }
        }
        c.write(seg, &[0u8; 16]).await?;
        Ok(())
    }

    /// Makes sure no publish of `seg`'s split is left half done: while the directory's publish
    /// record names `seg`, its lock holder is finishing it (waited on and judged), or is the
    /// fenced member `dead` (taken over at once, the record published whole, the lock freed).
    async fn settle_publish<T: Transport>(
        &self,
        c: &Client<T>,
        dead: u64,
        seg: GlobalAddr,
    ) -> IndexResult<()> {
        let mut w = SplitWait::default();
        // Ends when the directory is free, or busy with another split's publish: this one's is
        // then whole or never began. Each round either waits for a live holder (judged, so a
        // dead one is taken over) or takes the lock over from a dead one.
        loop {
            let mut line = [0u8; 16];
            c.read(self.dir, &mut line).await?;
            let (head, record) = (word_at(&line, 0), word_at(&line, 8));
            let Some(member) = holder(head) else { return Ok(()) };
            if member == dead {
                self.take_dir(c, head, true).await?;
                continue;
            }
            if dir_entry_parts(record).0 != seg {
                return Ok(());
            }
            if w.due(c) && w.watch.look(c, head, member).await? == Verdict::Fenced {
                self.take_dir(c, head, true).await?;
                w.watch = Watch::new();
            }
            lease::renew_if_due(c).await?;
            c.pause(1_000).await;
        }
    }

    /// One failed look at the directory lock, held as `head`: judges the holder when the wait
    /// has lasted, and takes the lock over from a dead one, finishing the publish it recorded.
    /// `Some(global depth)` when this client now holds the lock.
    pub(crate) async fn judge_dir<T: Transport>(
        &self,
        c: &Client<T>,
        head: u64,
        w: &mut SplitWait,
    ) -> IndexResult<Option<u32>> {
        if !w.due(c) {
            return Ok(None);
        }
        lease::renew_if_due(c).await?;
        let Some(member) = holder(head) else { return Ok(None) };
        if w.watch.look(c, head, member).await? == Verdict::Wait {
            return Ok(None);
        }
        w.watch = Watch::new();
        self.take_dir(c, head, false).await
    }

    /// Takes the directory lock over from `dead` (its exact word) and publishes the split its
    /// record names; frees it after if `release`. `Some(global depth)` while this client holds
    /// it, `None` if it released it or another client took it over first.
    async fn take_dir<T: Transport>(
        &self,
        c: &Client<T>,
        dead: u64,
        release: bool,
    ) -> IndexResult<Option<u32>> {
        let held = lock::next_held_word(c).await?;
        let g = global_depth(dead, self.shape.max_depth)?;
        if c.cas(self.dir, dead, dir_lock_word(held, g)).await? != dead {
            return Ok(None);
        }
        bump(&self.counters.repairs, 1);
        let mut rec = [0u8; 24];
        c.read(self.dir.add(8), &mut rec).await?;
        let (old, d) = dir_entry_parts(word_at(&rec, 0));
        let g = if old.raw() == 0 {
            g
        } else {
            let new = GlobalAddr::from_raw(word_at(&rec, 8));
            self.publish_entries(c, old, new, d - 1, word_at(&rec, 16), g, false).await?
        };
        let head = if release { g as u64 } else { dir_lock_word(held, g) };
        let mut line = [0u8; 32];
        line[..8].copy_from_slice(&head.to_le_bytes());
        c.write(self.dir, &line).await?;
        Ok((!release).then_some(g))
    }

    /// Under the directory lock at global depth `g`: points every entry aliasing `suffix`
    /// (depth `depth`) at `old` and those aliasing `suffix + 2^depth` at `new`, both at depth
    /// `depth + 1`, doubling the directory first if `depth` is the global depth; with `record`,
    /// the publish record goes first (zero-wait: it lands before the next verbs to the
    /// directory's node). Returns the new global depth (the caller WRITEs it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn publish_entries<T: Transport>(
        &self,
        c: &Client<T>,
        old: GlobalAddr,
        new: GlobalAddr,
        depth: u32,
        suffix: u64,
        g: u32,
        record: bool,
    ) -> IndexResult<u32> {
        let dir = self.dir;
        let mut rec = [0u8; 24];
        rec[..8].copy_from_slice(&dir_entry(old, depth + 1).to_le_bytes());
        rec[8..16].copy_from_slice(&new.raw().to_le_bytes());
        rec[16..].copy_from_slice(&suffix.to_le_bytes());
        if record {
            c.write_zero_wait(dir.add(8), &rec)?;
        }
        let g2 = g.max(depth + 1);
        if g2 > g {
            let lower = c.read_vec(dir_entry_addr(dir, 0), 8 << g).await?;
            c.write(dir_entry_addr(dir, 1 << g), &lower).await?;
        }
        let stride = 1u64 << (depth + 1);
        let (b_old, b_new) =
            (dir_entry(old, depth + 1).to_le_bytes(), dir_entry(new, depth + 1).to_le_bytes());
        let mut writes: Vec<BatchOp<'_>> = Vec::with_capacity(dmindex_fabric::verbs::MAX_BATCH);
        let mut i = suffix;
        while i < 1 << g2 {
            writes.push(BatchOp::Write { addr: dir_entry_addr(dir, i), data: &b_old });
            writes.push(BatchOp::Write { addr: dir_entry_addr(dir, i | 1 << depth), data: &b_new });
            if writes.len() + 2 > dmindex_fabric::verbs::MAX_BATCH {
                dmindex_prim::doorbell::post(c, &mut writes).await?;
                writes.clear();
            }
            i += stride;
        }
        dmindex_prim::doorbell::post(c, &mut writes).await?;
        Ok(g2)
    }
}

/// The directory header line that frees the lock at global depth `g` and clears the publish
/// record: one 32-B WRITE.
pub(crate) fn free_dir_line(g: u32) -> [u8; 32] {
    let mut line = [0u8; 32];
    line[..8].copy_from_slice(&(g as u64).to_le_bytes());
    line
}

const _: () = assert!(LOCK == lock::LOCK_BIT);
