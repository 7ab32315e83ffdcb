//! `race-sephash`: repairing what a split's mover left when it died.
//!
//! # What names the mover
//!
//! * The table's lock word holds the holder's held word; the table record (+16) says which
//!   split it is publishing or clearing ([`crate::layout`]), WRITTEN before its first change.
//! * S's and N's meta lines hold the mover's held word, the other segment and the split info,
//!   from before the first entry changes until after the flags are cleared (both cleared under
//!   the table's lock). So every wait a dead mover can cause leads to a word naming it: a split
//!   attempt to the lock word or, through a flagged entry, to a mark; a closed bucket of N to
//!   N's line and through it to S's mark; an orphan, and headers that exclude a key while the
//!   directory names their segment, to S's mark. The mark judged is always S's: its holder is
//!   the one mover of the split ([`Race::wait_move`]).
//!
//! # Repairing the table's lock ([`Race::repair_table`])
//!
//! Taken over by CAS from the dead holder's exact word. Table record 0: nothing was changed
//! (the holder died before step 4, or between two splits' sections): free it. `S | PUBLISHING`:
//! if S's line names N (step 4's WRITE landed), the entries may be half rewritten, so they are
//! rewritten whole for the split (flags set) and the depth doubled if due
//! ([`Race::publish_global`]: idempotent, from S's line alone); else nothing changed. `S |
//! CLEARING`: the flags are cleared and the marks too (idempotent). Then the lock is freed.
//!
//! # Repairing a move ([`Race::repair_move`])
//!
//! S's mark is taken over by CAS from the dead mover's exact word (one repairer; if it dies,
//! the next judges it). Under the table's lock, if S's mark is still its own (a repair of the
//! lock word may have finished the split and cleared it), the repairer publishes the split
//! unless S's entry already names S at depth L + 1. Then it redoes step 7 from bucket 0,
//! skipping the buckets of N already open (a bucket opens only once its entries are moved):
//! for each other bucket b it READs N's bucket b, (re)switches S's header and READs S's bucket
//! b (one doorbell), and settles each slot from what the two show. A frozen S slot is the mover's (no client CAS expects a
//! frozen word): its copy goes into N if N's slot does not hold it yet, and S's slot is
//! emptied. An unfrozen moving entry in S beside an empty N slot is moved as step 7 moves it.
//! An S entry beside a used N slot arrived after that slot's move (a staying key, or an orphan
//! its inserter takes back): left. Then N's bucket b opens. Last, step 8 (flags, then marks,
//! under the table's lock, again only if S's mark is still its own: a repair of the lock word
//! finishes step 8 of a mover that died in it, and S may be split anew after). Every step can be redone by a later repairer: rewriting entries and
//! headers is idempotent, and slots are settled from their state, not from a log.
//!
//! No key is lost or duplicated: an entry leaves S only frozen, after which no client can
//! change it, and only after its copy is in N; a key's N bucket opens only after its S bucket
//! was switched and settled, as in the live protocol.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::lease::{self, Verdict, Watch};
use dmindex_prim::lock::{self, holder};

use crate::global::{copy_out, depth_of};
use crate::layout::{
    self, global_entry, global_entry_addr, global_entry_parts, is_frozen, split_info_parts,
    CLEARING, FROZEN, GLOBAL_DEPTH_WORD, GLOBAL_ENTRY, PUBLISHING, SLOTS, TABLE_RECORD,
};
use crate::recover::{word_at, SplitWait};
use crate::{bump, Race};

/// A split as a segment's meta line describes it.
#[derive(Clone, Copy, Debug)]
struct Split {
    old: GlobalAddr,
    new: GlobalAddr,
    /// The old segment's local depth (the halves get `depth + 1`).
    depth: u32,
    suffix: u64,
}

/// The split S's meta line `line` (24 B) describes, if it describes one.
fn split_of(old: GlobalAddr, line: &[u8]) -> Option<Split> {
    let new = word_at(line, 8);
    let (d, suffix, is_new) = split_info_parts(word_at(line, 16));
    (new != 0 && d > 0 && !is_new).then(|| Split {
        old,
        new: GlobalAddr::from_raw(new),
        depth: d - 1,
        suffix,
    })
}

impl Race {
    /// One failed look at the table's lock word, held as `word`: judges the holder when the
    /// wait has lasted, and repairs the lock when it is dead.
    pub(crate) async fn wait_table<T: Transport>(
        &self,
        c: &Client<T>,
        word: u64,
        w: &mut SplitWait,
    ) -> IndexResult<()> {
        if !w.due(c) {
            return Ok(());
        }
        lease::renew_if_due(c).await?;
        let Some(member) = holder(word) else { return Ok(()) };
        if w.watch.look(c, word, member).await? == Verdict::Fenced {
            self.repair_table(c, word).await?;
            w.watch = Watch::new();
        }
        Ok(())
    }

    /// One failed look at segment `seg`, which a split marks (or whose bucket is closed):
    /// finds S's mark (through N's line if `seg` is the new half), judges its holder, and
    /// repairs the move when it is dead.
    pub(crate) async fn wait_move<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        w: &mut SplitWait,
    ) -> IndexResult<()> {
        let mut line = [0u8; 24];
        c.read(seg, &mut line).await?;
        let old = if split_info_parts(word_at(&line, 16)).2 {
            let old = GlobalAddr::from_raw(word_at(&line, 8));
            if old.raw() == 0 {
                return Ok(());
            }
            c.read(old, &mut line[..8]).await?;
            old
        } else {
            seg
        };
        let mark = word_at(&line, 0);
        let Some(member) = holder(mark) else { return Ok(()) };
        if w.watch.look(c, mark, member).await? == Verdict::Fenced {
            self.repair_move(c, old, mark).await?;
            w.watch = Watch::new();
        }
        Ok(())
    }

    /// Repairs the table's lock word, which a fenced member left as `dead` (module docs).
    pub(crate) async fn repair_table<T: Transport>(
        &self,
        c: &Client<T>,
        dead: u64,
    ) -> IndexResult<()> {
        let held = lock::next_held_word(c).await?;
        if c.cas(self.dir, dead, held).await? != dead {
            return Ok(());
        }
        bump(&self.counters.repairs, 1);
        let record = c.read_word(self.dir.add(TABLE_RECORD)).await?;
        let old = GlobalAddr::from_raw(record & !63);
        if old.raw() != 0 {
            let mut line = [0u8; 24];
            c.read(old, &mut line).await?;
            if let Some(split) = split_of(old, &line) {
                match record & 63 {
                    PUBLISHING => self.publish_global(c, &split).await?,
                    CLEARING => {
                        let g = self.global_depth(c).await?;
                        self.clear_split(c, &split, g).await?;
                    }
                    other => {
                        return Err(IndexError::Corrupt(format!(
                            "race-sephash table record {record:#x} (phase {other})"
                        )))
                    }
                }
            }
        }
        self.unlock_table(c, held, true).await
    }

    /// Repairs the move out of `old`, whose mark a fenced member left as `dead` (module docs).
    pub(crate) async fn repair_move<T: Transport>(
        &self,
        c: &Client<T>,
        old: GlobalAddr,
        dead: u64,
    ) -> IndexResult<()> {
        let mine = lock::next_held_word(c).await?;
        if c.cas(old, dead, mine).await? != dead {
            return Ok(());
        }
        bump(&self.counters.repairs, 1);
        let mut line = [0u8; 24];
        c.read(old, &mut line).await?;
        let Some(split) = split_of(old, &line) else {
            return Err(IndexError::Corrupt(format!("race-sephash mark at {old} names no split")));
        };
        // Published under the table's lock, unless it already is.
        let held = self.lock_table(c).await?;
        if c.read_word(old).await? != mine {
            // Finished meanwhile by a repair of the lock word (which clears the marks).
            return self.unlock_table(c, held, false).await;
        }
        let mut e = [0u8; GLOBAL_ENTRY as usize];
        c.read(global_entry_addr(self.dir, split.suffix), &mut e).await?;
        let (_, seg, d) = global_entry_parts(&e);
        let published = seg == old.raw() && d == u64::from(split.depth + 1);
        if !published {
            c.write(self.dir.add(TABLE_RECORD), &(old.raw() | PUBLISHING).to_le_bytes()).await?;
            self.publish_global(c, &split).await?;
        }
        self.unlock_table(c, held, !published).await?;
        self.resume_move(c, &split).await?;
        self.finish_split(c, split.old, split.new, split.depth, split.suffix, Some(mine)).await
    }

    /// The global depth word, checked.
    async fn global_depth<T: Transport>(&self, c: &Client<T>) -> IndexResult<u32> {
        depth_of(c.read_word(self.dir.add(GLOBAL_DEPTH_WORD)).await?, self.shape.max_depth)
    }

    /// Under the table's lock: step 5 of `split` done whole, from whatever part of it was done
    /// (idempotent). Every entry aliasing S's suffix gets {flag, S or N, depth + 1}; if S was at
    /// the global depth, the directory is doubled first (the upper half a copy of the lower
    /// one) and the global depth WRITTEN last.
    async fn publish_global<T: Transport>(&self, c: &Client<T>, split: &Split) -> IndexResult<()> {
        let dir = self.dir;
        let g = self.global_depth(c).await?;
        let (d, s) = (split.depth, split.suffix);
        let (e_old, e_new) =
            (global_entry(true, split.old, d + 1), global_entry(true, split.new, d + 1));
        if g == d {
            let mut raw =
                c.read_vec(global_entry_addr(dir, 0), (GLOBAL_ENTRY as usize) << g).await?;
            let at = (s * GLOBAL_ENTRY) as usize;
            raw[at..at + GLOBAL_ENTRY as usize].copy_from_slice(&e_old);
            c.write(global_entry_addr(dir, s), &e_old).await?;
            raw[at..at + GLOBAL_ENTRY as usize].copy_from_slice(&e_new);
            c.write(global_entry_addr(dir, 1 << g), &raw).await?;
            c.write(dir.add(GLOBAL_DEPTH_WORD), &u64::from(g + 1).to_le_bytes()).await?;
            return Ok(());
        }
        let mut i = s;
        while i < 1 << g {
            let e = if i >> d & 1 == 1 { &e_new } else { &e_old };
            c.write(global_entry_addr(dir, i), e).await?;
            i += 1 << d;
        }
        Ok(())
    }

    /// Under the table's lock: step 8 of `split` (flags, then marks), from whatever part of it
    /// was done.
    async fn clear_split<T: Transport>(
        &self,
        c: &Client<T>,
        split: &Split,
        g: u32,
    ) -> IndexResult<()> {
        self.clear_flags(c, split.depth, split.suffix, g).await?;
        self.clear_marks(c, split.old, split.new).await
    }

    /// Step 7 redone from bucket 0 by the holder of S's mark (module docs): buckets of N already
    /// open are skipped, the others settled slot by slot from S's and N's images.
    async fn resume_move<T: Transport>(&self, c: &Client<T>, split: &Split) -> IndexResult<()> {
        let (old, new, d, s) = (split.old, split.new, split.depth, split.suffix);
        let switched = layout::header(d + 1, s).to_le_bytes();
        let opened = layout::header(d + 1, s | 1 << d);
        let mut mine = [0u8; 64];
        let mut theirs = [0u8; 64];
        for b in 0..3 * self.shape.groups {
            lease::renew_if_due(c).await?;
            let at = layout::bucket_offset(b);
            c.read(new.add(at), &mut theirs).await?;
            if word_at(&theirs, 0) == opened {
                // Moved whole. (Once every bucket is open the flags may be cleared and S split
                // again: S's headers are then no longer this split's to write.)
                continue;
            }
            // Switched before it is READ, as step 7 does: the READ shows every entry placed
            // before the switch.
            c.batch(&mut [
                BatchOp::Write { addr: old.add(at), data: &switched },
                BatchOp::Read { addr: old.add(at), buf: &mut mine },
            ])
            .await?;
            for j in 0..SLOTS {
                let off = at + 8 + 8 * j as u64;
                let (sw, nw) = (word_at(&mine, 8 + 8 * j), word_at(&theirs, 8 + 8 * j));
                if is_frozen(sw) {
                    let w = sw & !FROZEN;
                    if nw != 0 && nw != w {
                        return Err(IndexError::Corrupt(format!(
                            "closed slot at {} holds {nw:#x}, not the frozen {w:#x}",
                            new.add(off)
                        )));
                    }
                    copy_out(c, old.add(off), new.add(off), w, nw).await?;
                } else if sw != 0 && nw == 0 {
                    self.move_slot(c, old.add(off), new.add(off), sw, d, s).await?;
                }
            }
            c.write(new.add(at), &opened.to_le_bytes()).await?;
        }
        Ok(())
    }
}
