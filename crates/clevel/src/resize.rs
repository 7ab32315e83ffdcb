//! Growing the table (a new top level) and draining the bottom level (the rehash), and the
//! waits on both.
//!
//! # Who drains
//!
//! The paper runs the rehash on a background thread: [`CLevel::rehasher`], a client of its own
//! that polls the context word and drains whenever more than two levels are listed. With
//! `rehash=inline` the client that grew the table drains instead, if the rehash lock is free
//! when it has published the new level (one CAS); if it is held, its holder goes on to the new
//! bottom when it has dropped the old one. Either way an insert that finds no room at
//! `max_levels` levels waits for the lock and drains itself once it has it; a writer that finds
//! a frozen entry waits for the move and, once the wait has lasted, judges the lock's holder by
//! its lease and takes the rehash over if it died. The rehasher itself may add levels past
//! `max_levels` (up to [`MAX_LEVELS`]) when a copy finds no room: it needs the room to finish.
//!
//! # Draining (the rehash lock held)
//!
//! For each bucket of the bottom level (READ 16 at a time), its used slots in one doorbell of
//! CASes:
//! * tentative: aborted (CAS to 0): its insert starts again under the new context;
//! * committed: frozen (CAS to the frozen word; a lost CAS saw an update or a delete, and that
//!   slot is looked at again on its own).
//!
//! Then each frozen entry: its key READ, its buckets above READ, the same word CAS'd into an
//! empty slot of the highest level with room there (unless the word is already there: a copy a
//! dead rehasher made), and its slot CAS'd to 0.
//!
//! Then a context without the bottom level is written and the context word CAS'd to it (a
//! grower may have added a level meanwhile: then the newer context, without the bottom). Every
//! step can be done again, so a rehash taken over from a dead holder starts from the first
//! bucket. Round trips: 4 per entry moved (key, buckets, copy, clear), 1 per bucket (freeze),
//! 1 per 16 buckets (READ), 3 per level dropped (WRITE the context, CAS, READ the word for the
//! next round). The port's rehash READs each key and CASes it into the top (its bucket READ
//! included, 3 per entry) and never freezes or clears.

use dmindex_fabric::verbs::AtomicOp;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::backoff::Backoff;
use dmindex_prim::counter::bump;
use dmindex_prim::doorbell;
use dmindex_prim::lease::{self, Verdict, WaitWatch, Watch};
use dmindex_prim::lock::{self, holder};
use smallvec::SmallVec;

use crate::image::Image;
use crate::layout::{
    self, entry, is_frozen, is_tentative, words, Hashes, BUCKET, FROZEN, MAX_LEVELS, SLOTS,
};
use crate::{CLevel, Cached};

/// Buckets of the bottom level one READ of a drain takes.
const DRAIN_BUCKETS: u64 = 16;

/// The idle rehasher's pause between two READs of the context word: a few round trips, so a
/// new level waits little for its drain while the polls stay a small share of a memory node's
/// READs (one 8-byte READ per 10 µs against millions a second).
pub const IDLE_POLL_NS: u64 = 10_000;

/// A wait on a frozen entry's move: the backoff between looks, and the watch over the rehash
/// lock's holder once the wait has lasted.
#[derive(Debug, Default)]
pub(crate) struct MoveWait {
    backoff: Backoff,
    wait: WaitWatch,
}

impl CLevel {
    /// One failed look at a key the rehasher is moving: judges the rehasher when the wait has
    /// lasted (taking the rehash over if it is dead), then backs off.
    pub(crate) async fn wait_move<T: Transport>(
        &self,
        c: &Client<T>,
        w: &mut MoveWait,
    ) -> IndexResult<()> {
        bump(&self.counters.retries);
        let lock = self.header.add(layout::REHASH_LOCK);
        if w.wait.due(c) {
            lease::renew_if_due(c).await?;
            let word = c.read_word(lock).await?;
            if word == 0 {
                // A frozen entry and no rehasher: one stopped on an error (no room, no memory)
                // and let go. Finish the move (every step can be done again).
                let mine = lock::next_held_word(c).await?;
                if c.cas(lock, 0, mine).await? == 0 {
                    self.drain_and_release(c).await?;
                }
            } else if let Some(member) = holder(word) {
                if w.wait.watch.look(c, word, member).await? == Verdict::Fenced {
                    w.wait.watch = Watch::new();
                    let mine = lock::next_held_word(c).await?;
                    if c.cas(lock, word, mine).await? == word {
                        bump(&self.counters.rehash_takeovers);
                        self.drain_and_release(c).await?;
                    }
                }
            }
        }
        w.backoff.failed(c, lock, "a frozen entry's move").await
    }

    /// An insert found no empty slot for its key under `seen`: adds a level on top (unless
    /// another client changed the context meanwhile), then drains if no one is; at the most
    /// levels, waits for the rehash instead (and runs it once it holds the lock).
    pub(crate) async fn grow<T: Transport>(&self, c: &Client<T>, seen: Cached) -> IndexResult<()> {
        if seen.ctx.count >= self.max_levels {
            let held = lock::acquire_whole(c, self.header.add(layout::REHASH_LOCK), || {
                bump(&self.counters.retries)
            })
            .await?;
            let drained = self.drain(c, &|| false).await;
            held.unlock_with(c, 0).await?;
            return drained;
        }
        let held = lock::acquire_whole(c, self.header.add(layout::RESIZE_LOCK), || {
            bump(&self.counters.retries)
        })
        .await?;
        let grew = self.grow_locked(c, seen, self.max_levels).await;
        held.unlock_with(c, 0).await?;
        if grew? && self.inline_rehash {
            let lock = self.header.add(layout::REHASH_LOCK);
            let mine = lock::next_held_word(c).await?;
            if c.cas(lock, 0, mine).await? == 0 {
                self.drain_and_release(c).await?;
            }
        }
        Ok(())
    }

    /// Adds a level on top of the context `seen`, holding the resize lock; `false` if the
    /// context word no longer names `seen` (someone grew the table first) or the table has
    /// `limit` levels.
    async fn grow_locked<T: Transport>(
        &self,
        c: &Client<T>,
        seen: Cached,
        limit: usize,
    ) -> IndexResult<bool> {
        let word_at = self.header.add(layout::CONTEXT_WORD);
        let now = c.read_word(word_at).await?;
        if now != seen.addr.raw() {
            self.refresh(c, now).await?;
            return Ok(false);
        }
        let mut cur = seen;
        let top = Self::new_level(c, cur.ctx.top().log2 + 1, cur.ctx.generation + 1).await?;
        // Ends when the CAS wins; a lost one saw the rehasher drop the bottom (the top is the
        // same: only a grower adds one, and it holds the lock), which a table drops at most
        // MAX_LEVELS - 2 times before it has two levels.
        loop {
            if cur.ctx.count >= limit || cur.ctx.top().log2 + 1 != top.log2 {
                return Ok(false);
            }
            let next = cur.ctx.grown(top);
            let at = Self::write_context(c, &next).await?;
            let old = c.cas(word_at, cur.addr.raw(), at.raw()).await?;
            if old == cur.addr.raw() {
                bump(&self.counters.resizes);
                self.remember(Cached { addr: at, ctx: next });
                return Ok(true);
            }
            cur = self.refresh(c, old).await?;
        }
    }

    /// Drains holding the rehash lock this client just took by CAS, then frees it; and again
    /// if a rehash is due once it is free: a grower whose CAS of the lock failed while this
    /// client held it, after its own READ of the context, left its new level to this client.
    async fn drain_and_release<T: Transport>(&self, c: &Client<T>) -> IndexResult<()> {
        let lock = self.header.add(layout::REHASH_LOCK);
        // Ends when no rehash is due after a release, or another client holds the lock (and
        // looks again after its own release); each round drops at least one level.
        loop {
            let drained = self.drain(c, &|| false).await;
            c.write(lock, &0u64.to_le_bytes()).await?;
            drained?;
            if !self.reload(c).await?.ctx.rehashing() {
                return Ok(());
            }
            let mine = lock::next_held_word(c).await?;
            if c.cas(lock, 0, mine).await? != 0 {
                return Ok(());
            }
        }
    }

    /// The background rehasher: until `stop()`, drains whenever a rehash is due (taking the
    /// rehash lock, and over from a holder found dead), and otherwise polls the context word
    /// every [`IDLE_POLL_NS`].
    pub(crate) async fn rehasher<T: Transport>(
        &self,
        c: &Client<T>,
        stop: &dyn Fn() -> bool,
    ) -> IndexResult<()> {
        // Ends when `stop()` turns true; a drain in progress checks it between entries.
        while !stop() {
            let cur = self.reload(c).await?;
            if !cur.ctx.rehashing() {
                c.pause(IDLE_POLL_NS).await;
                continue;
            }
            let held = lock::acquire_whole(c, self.header.add(layout::REHASH_LOCK), || {
                bump(&self.counters.retries)
            })
            .await?;
            let drained = self.drain(c, stop).await;
            held.unlock_with(c, 0).await?;
            drained?;
        }
        Ok(())
    }

    /// Drains bottom levels until the context has two (or `stop()`, checked between entries:
    /// a drain left there is taken up again from its first bucket), holding the rehash lock.
    async fn drain<T: Transport>(&self, c: &Client<T>, stop: &dyn Fn() -> bool) -> IndexResult<()> {
        let mut buf = vec![0u8; (DRAIN_BUCKETS * BUCKET) as usize];
        // Ends when the context has two levels; each round drops one, and growers add at most
        // MAX_LEVELS - 2.
        loop {
            let mut cur = self.reload(c).await?;
            if !cur.ctx.rehashing() {
                return Ok(());
            }
            let bottom = cur.ctx.bottom();
            let mut b = 0;
            while b < bottom.buckets() {
                let k = DRAIN_BUCKETS.min(bottom.buckets() - b);
                lease::renew_if_due(c).await?;
                let part = &mut buf[..(k * BUCKET) as usize];
                c.read(bottom.bucket(b), part).await?;
                for (j, line) in part.chunks_exact(BUCKET as usize).enumerate() {
                    if stop() {
                        return Ok(());
                    }
                    self.drain_bucket(c, &mut cur, bottom.bucket(b + j as u64), line).await?;
                }
                b += k;
            }
            // Every slot of the bottom is empty: drop it.
            let word_at = self.header.add(layout::CONTEXT_WORD);
            loop {
                if cur.ctx.bottom() != bottom {
                    return Err(IndexError::Corrupt(format!(
                        "the clevel bottom level at {} left the context while drained",
                        bottom.addr
                    )));
                }
                let next = cur.ctx.drained();
                let at = Self::write_context(c, &next).await?;
                let old = c.cas(word_at, cur.addr.raw(), at.raw()).await?;
                if old == cur.addr.raw() {
                    bump(&self.counters.rehashes);
                    self.remember(Cached { addr: at, ctx: next });
                    break;
                }
                // A grower added a level meanwhile.
                cur = self.refresh(c, old).await?;
            }
        }
    }

    /// Empties the bottom bucket at `at`, READ as `line`: its used slots frozen (committed) or
    /// aborted (tentative) in one doorbell, then each frozen entry copied up and its slot
    /// cleared ([`CLevel::move_slot`], which also takes a slot whose CAS lost: a writer changed
    /// it since the READ). Each slot is cleared right after its copy: the shorter the time a key
    /// has two committed entries, the sooner its writers go on.
    async fn drain_bucket<T: Transport>(
        &self,
        c: &Client<T>,
        cur: &mut Cached,
        at: GlobalAddr,
        line: &[u8],
    ) -> IndexResult<()> {
        let mut seen = [0u64; SLOTS];
        for (s, w) in seen.iter_mut().zip(words(line)) {
            *s = w;
        }
        let want = |w: u64| match w {
            0 => None,
            w if is_frozen(w) => None,
            w if is_tentative(w) => Some(0),
            w => Some(w | FROZEN),
        };
        let mut ops: SmallVec<[BatchOp<'_>; SLOTS]> = SmallVec::new();
        let mut which: SmallVec<[usize; SLOTS]> = SmallVec::new();
        for (i, &w) in seen.iter().enumerate() {
            if let Some(new) = want(w) {
                let op = AtomicOp::Cas { expected: w, new };
                ops.push(BatchOp::Atomic { addr: at.add(8 * i as u64), op, old: 0 });
                which.push(i);
            }
        }
        doorbell::post(c, &mut ops).await?;
        // Each slot's word after the doorbell, as far as this client knows.
        let mut now = seen;
        for (op, &i) in ops.iter().zip(&which) {
            let BatchOp::Atomic { old, op: AtomicOp::Cas { expected, new }, .. } = *op else {
                unreachable!("only CASes were posted")
            };
            now[i] = if old == expected { new } else { old };
            if old == expected && is_tentative(expected) {
                bump(&self.counters.tentative_aborts);
            }
        }
        drop(ops);
        for (i, &w) in now.iter().enumerate() {
            if w != 0 {
                // Frozen here (or by a rehasher that died): copied and cleared; changed under
                // us: looked at again, alone.
                self.move_slot(c, cur, at.add(8 * i as u64), w).await?;
            }
        }
        Ok(())
    }

    /// Copies committed entry `e` into the levels above the bottom (its key READ for its hash).
    pub(crate) async fn copy_up<T: Transport>(
        &self,
        c: &Client<T>,
        cur: &mut Cached,
        e: u64,
    ) -> IndexResult<()> {
        let block = layout::slot_block(e);
        if !Self::fits(c, block, (dmindex_prim::kv_block::HEADER + self.config.max_key) as u64) {
            return Err(IndexError::Corrupt(format!("clevel slot names a block at {block}")));
        }
        let h = self.blocks.with_key(c, block, Hashes::of).await?;
        self.place_copy(c, cur, &h, e).await
    }

    /// Moves the entry at bottom slot `slot`, last seen as `w`, out of the bottom (module docs).
    async fn move_slot<T: Transport>(
        &self,
        c: &Client<T>,
        cur: &mut Cached,
        slot: GlobalAddr,
        mut w: u64,
    ) -> IndexResult<()> {
        // Ends at an empty slot; a lost CAS saw a writer's change of the slot (each writer's
        // CAS of it succeeds at most once per entry it placed or replaced).
        loop {
            if w == 0 {
                return Ok(());
            }
            if is_tentative(w) {
                let old = c.cas(slot, w, 0).await?;
                if old == w {
                    bump(&self.counters.tentative_aborts);
                    return Ok(());
                }
                w = old;
                continue;
            }
            if !is_frozen(w) {
                let old = c.cas(slot, w, w | FROZEN).await?;
                if old != w {
                    w = old;
                    continue;
                }
                w |= FROZEN;
            }
            self.copy_up(c, cur, entry(w)).await?;
            let old = c.cas(slot, w, 0).await?;
            if old != w {
                return Err(IndexError::Corrupt(format!(
                    "clevel frozen slot at {slot} changed under the rehash lock"
                )));
            }
            bump(&self.counters.moved_entries);
            return Ok(());
        }
    }

    /// Puts entry `e` (hashes `h`) in an empty slot of its buckets above the bottom, unless it
    /// is there already; grows the table if it has no room there.
    async fn place_copy<T: Transport>(
        &self,
        c: &Client<T>,
        cur: &mut Cached,
        h: &Hashes,
        e: u64,
    ) -> IndexResult<()> {
        // Ends when the word is placed or found; a lost CAS saw an insert take the slot, and
        // a full set of buckets grows the table (at most MAX_LEVELS - 2 times).
        loop {
            let mut img = Image::above_bottom(*cur, h);
            self.read_image(c, &mut img, None).await?;
            if img.find(e).is_some() {
                return Ok(());
            }
            if let Some(at) = img.empty_slot() {
                if c.cas(img.slot_addr(at), 0, e).await? == 0 {
                    return Ok(());
                }
                continue;
            }
            // The rehasher may go past `max_levels` (where inserts stop and wait for it): it
            // needs the room to finish, or nothing would ever drop a level again.
            if cur.ctx.count >= MAX_LEVELS {
                return Err(IndexError::Full(format!(
                    "clevel: a key's buckets above the bottom are full at {} levels",
                    cur.ctx.count
                )));
            }
            let held = lock::acquire_whole(c, self.header.add(layout::RESIZE_LOCK), || {
                bump(&self.counters.retries)
            })
            .await?;
            let grew = self.grow_locked(c, *cur, MAX_LEVELS).await;
            held.unlock_with(c, 0).await?;
            grew?;
            *cur = self.reload(c).await?;
        }
    }

    /// Used slots (committed entries) and all slots of the current context's levels: one READ
    /// of up to 64 KB at a time.
    pub(crate) async fn count_entries<T: Transport>(
        &self,
        c: &Client<T>,
    ) -> IndexResult<(u64, u64)> {
        let cur = self.reload(c).await?;
        let mut buf = vec![0u8; 64 << 10];
        let (mut used, mut slots) = (0, 0);
        for l in cur.ctx.levels() {
            slots += l.buckets() * layout::SLOTS as u64;
            let mut off = 0;
            while off < l.bytes() {
                let n = (buf.len() as u64).min(l.bytes() - off) as usize;
                c.read(l.addr.add(off), &mut buf[..n]).await?;
                used += words(&buf[..n]).filter(|&w| w != 0 && !is_tentative(w)).count() as u64;
                off += n as u64;
            }
        }
        Ok((used, slots))
    }
}
