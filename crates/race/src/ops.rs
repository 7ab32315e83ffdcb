//! Search, insert (upsert), update and delete.
//!
//! # One committed entry per key
//!
//! A key's entries are the used slots of its buckets whose block holds the key. At most one of
//! them is *committed* at any instant; that one is the key's value, and a frozen committed entry
//! beside headers that still match the key is the value too (its split has not switched yet).
//! Every other entry of the key is *tentative*: an insert's placement, no value, skipped by
//! readers.
//!
//! Why not RACE's rule ("duplicates may exist, the lowest is the value, whoever sees one clears
//! the higher copies"): a READ of several lines samples each line at its own instant, so an image
//! of a key's buckets can show a copy that was deleted before another was made. An insert that
//! trusted such an image cleared the only live copy, keeping a lower one that no longer existed,
//! and an acknowledged write was gone (found on real threads, where a READ can be preempted
//! between its lines). With one committed entry, nothing is ever cleared on the strength of
//! another entry's presence, so a stale line costs a retry, never a value.
//!
//! # Insert of an absent key: place, re-read, commit
//!
//! The rule CLevel shares, in [`dmindex_prim::tentative`]:
//!
//! 1. CAS an empty slot from 0 to our entry with the tentative bit set.
//! 2. Re-read the key's buckets (every header must still match), then:
//!    * another *committed* entry: the key is present. Withdraw ours (CAS to 0) and start again,
//!      which upserts that entry;
//!    * a *lower* tentative entry: its insert goes first; re-read until it commits or goes. One
//!      that stays unchanged for [`PATIENCE`](dmindex_prim::tentative::PATIENCE) re-reads is
//!      presumed to belong to a stopped client and is aborted (CAS to 0; if its client was only
//!      slow, its commit fails and it starts again);
//!    * *higher* tentative entries: abort them (a failed abort means it committed or moved:
//!      re-read);
//!    * then commit: CAS ours from tentative to committed. The insert takes effect there.
//!
//! Two inserts of an absent key that both commit would need each one's deciding re-read to miss
//! the other's entry. The one that placed its entry later re-read every line after both entries
//! were placed, so it sees the other's entry (tentative or committed) unless that one was already
//! withdrawn or aborted, and then backs off, waits or aborts it. A CAS decides every abort against
//! a commit. So committed entries never overlap in time.
//!
//! # Why a stale image is harmless
//!
//! * A search returns a committed entry it saw; at the instant its line was read that entry was
//!   the key's only committed one, so the value then.
//! * Seeing no committed entry: every line was read at an instant with no committed entry in it.
//!   The key's committed entries follow one another with a gap between two different slots (they
//!   never overlap), so if the key had been present throughout the READ, one entry would have
//!   covered all of it and its line would have shown it. So the key was absent at some instant of
//!   the READ.
//! * Updates, deletes and upserts CAS the committed entry they saw; the CAS succeeds only if it is
//!   still the key's value.
//!
//! # Splits during an insert (after our CAS)
//!
//! * every header matches and our entry is frozen: a split is moving it; re-read until the switch;
//! * our bucket has switched and our entry is still there, unfrozen: either the split will freeze
//!   it (placed before the switch) or it is an orphan (placed after the split's second READ,
//!   visible to no one, since every image of it carries a header that excludes the key). We wait
//!   until the segment's split lock is free — then every split that switched the bucket has done
//!   its second pass, which freezes every moving entry present — take it back by CAS (or find it
//!   frozen, and follow it), then insert again. An orphan is never committed: we commit only
//!   after an image whose headers all match;
//! * otherwise (frozen and moved, or cleared after the move) follow the key to its segment, where
//!   the entry keeps its position, and settle there.
//!
//! Round trips: an insert of an absent key costs one more than RACE's (the commit CAS): block
//! WRITE, bucket READ, CAS, re-read, commit CAS = 5. Upserts, updates and deletes cost what
//! RACE's do and never clear duplicates.

use arrayvec::ArrayVec;
use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::kv_slot;
use dmindex_prim::tentative::{self, Settle, Waiting};

use crate::bucket::{At, Copy, Snap};
use crate::layout::{
    self, dir_entry_parts, is_frozen, is_tentative, slot_fp, Hashes, FROZEN, TENTATIVE,
};
use crate::recover::SplitWait;
use crate::{bump, Race, Resize};

impl Race {
    /// The key's buckets in the segment whose headers all match it, into `snap`: the cached entry
    /// first, the directory re-read on a mismatch. Counts the snapshots read in `reads`. Headers
    /// that never match (garbage in a bucket) end in a corrupt index ([`Attempts`]).
    ///
    /// For an insert into `race-sephash` a header must also carry the cached entry's local
    /// depth, as the SepHash authors' insert checks: a depth mismatch re-reads the directory
    /// even when the key still belongs to the bucket.
    pub(crate) async fn locate<T: Transport>(
        &self,
        c: &Client<T>,
        h: &Hashes,
        insert: bool,
        reads: &mut u64,
        snap: &mut Snap,
    ) -> IndexResult<()> {
        c.compute(Work::TableProbe, 1);
        let depth_check = insert && self.resize == Resize::GlobalLock;
        let mut entry = self.cached(h.h1);
        let mut attempts = Attempts::new();
        let mut wait = SplitWait::default();
        // Ends when the headers match; a split in the way is waited on (its splitter judged,
        // and its split repaired if it died), garbage headers end in `Attempts`' bound.
        loop {
            let (seg, depth) = dir_entry_parts(entry);
            self.read_snap(c, seg, h, snap).await?;
            *reads += 1;
            if snap.matches(h)
                && (!depth_check
                    || snap.buckets.iter().all(|b| layout::header_parts(b.header).0 == depth))
            {
                return Ok(());
            }
            attempts.failed(snap.seg, "bucket headers")?;
            bump(&self.counters.retries, 1);
            if snap.buckets.iter().any(|b| layout::is_closed(b.header)) {
                // A race-sephash split is moving entries into this segment: the directory is
                // right, the bucket opens once its entries are in; re-read the bucket only.
                self.wait_split(c, snap.seg, None, &mut wait).await?;
                continue;
            }
            entry = self.refresh(c, h.h1).await?;
            if dir_entry_parts(entry).0 == snap.seg {
                // The directory still names the segment whose headers exclude the key: a split
                // of it is between its switch and its publish.
                self.wait_split(c, snap.seg, None, &mut wait).await?;
            }
        }
    }

    /// The value of `key` into `out` (cleared first): whether the key is present.
    pub(crate) async fn search_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        out.clear();
        let h = Hashes::of(key);
        // RACE's two hash functions, one per bucket choice.
        c.compute(Work::KeyHash, 2);
        let (mut reads, mut snap) = (0, Snap::default());
        self.locate(c, &h, false, &mut reads, &mut snap).await?;
        self.counters.searches.bump(c.ordinal());
        self.counters.search_buckets.add(c.ordinal(), 2 * reads);
        for cand in snap.candidates(h.fp()).filter(|x| !is_tentative(x.word)) {
            let block = layout::slot_block(cand.word);
            if self.blocks.value_into(c, block, Some(key), out).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The committed slot word of a block of `len` bytes at `block` for a key with hashes `h`.
    fn word(&self, h: &Hashes, key: &[u8], value: &[u8], block: GlobalAddr) -> u64 {
        kv_slot::for_block(h.fp(), key.len(), value.len(), self.shape.max_key, block)
    }

    pub(crate) async fn insert_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<()> {
        let h = Hashes::of(key);
        // RACE's two hash functions, one per bucket choice.
        c.compute(Work::KeyHash, 2);
        // Written and awaited before any CAS publishes it: the block may be on another memory
        // node than the segment.
        let block = self.blocks.write(c, key, value).await?;
        let word = self.word(&h, key, value, block);
        let tentative = word | TENTATIVE;
        let (mut reads, mut snap, mut re) = (0, Snap::default(), Snap::default());
        let mut wait = SplitWait::default();
        'fresh: loop {
            self.locate(c, &h, true, &mut reads, &mut snap).await?;
            match self.committed(c, &snap, key, &h).await? {
                // Present: an upsert of its committed entry (done, as an update is, when it
                // loses to a later write of the key).
                (Some(live), _) => {
                    let seen = c.cas(snap.addr(live.at), live.word, word).await?;
                    if seen == live.word || self.superseded(c, seen, key, &h).await? {
                        return Ok(());
                    }
                    bump(&self.counters.retries, 1);
                    continue;
                }
                // A split is moving the key: wait for it.
                (None, true) => {
                    bump(&self.counters.retries, 1);
                    self.wait_split(c, snap.seg, None, &mut wait).await?;
                    continue;
                }
                // Absent (other inserts' tentative entries are no value): place ours.
                (None, false) => {}
            }
            let Some(at) = snap.empty_slot(h.mains(self.shape.groups)) else {
                self.split_full(c, &snap, &h, &mut wait).await?;
                continue;
            };
            if c.cas(snap.addr(at), 0, tentative).await? != 0 {
                bump(&self.counters.retries, 1);
                continue;
            }
            // The re-read: other inserts of the key, and splits that raced the CAS.
            let mut seg = snap.seg;
            let mut waiting = Waiting::default();
            loop {
                self.read_snap(c, seg, &h, &mut re).await?;
                let now = re.word(at);
                if re.matches(&h) {
                    if now == tentative {
                        match self.settle(c, &re, at, key, &h, word, &mut waiting).await? {
                            Settle::Committed => return Ok(()),
                            Settle::Restart => continue 'fresh,
                            Settle::Wait => {
                                bump(&self.counters.retries, 1);
                                continue;
                            }
                            Settle::Moving => {
                                bump(&self.counters.retries, 1);
                                self.wait_split(c, seg, None, &mut wait).await?;
                                continue;
                            }
                        }
                    }
                    if now == tentative | FROZEN {
                        // A split is moving it: wait for the switch, then follow it.
                        bump(&self.counters.retries, 1);
                        self.wait_split(c, seg, None, &mut wait).await?;
                        continue;
                    }
                    // Aborted by another insert of the key.
                    continue 'fresh;
                }
                bump(&self.counters.retries, 1);
                if now == tentative {
                    if h.matches(re.buckets[at.b].header) {
                        // Placed before the switch: the split will freeze it.
                        self.wait_split(c, seg, None, &mut wait).await?;
                        continue;
                    }
                    // Frozen later, or an orphan once the split lock (race-sephash: the moving
                    // mark) is free.
                    let lock = c.read_word(seg).await?;
                    if lock & layout::LOCK != 0 {
                        self.wait_split(c, seg, Some(lock), &mut wait).await?;
                        continue;
                    }
                    if c.cas(re.addr(at), tentative, 0).await? == tentative {
                        continue 'fresh;
                    }
                    continue;
                }
                // Moved (frozen, or already cleared after the move) or aborted: follow the key
                // (ours, if still there, is at the same position).
                self.locate(c, &h, true, &mut reads, &mut re).await?;
                seg = re.seg;
            }
        }
    }

    /// One decision after a re-read `re` whose headers match and which shows our tentative entry
    /// at `at` ([`dmindex_prim::tentative`] gives the rule; a snapshot's slots are in address
    /// order, so its lower entries are the lower positions).
    #[allow(clippy::too_many_arguments)]
    async fn settle<T: Transport>(
        &self,
        c: &Client<T>,
        re: &Snap,
        at: At,
        key: &[u8],
        h: &Hashes,
        word: u64,
        waiting: &mut Waiting,
    ) -> IndexResult<Settle> {
        let copies = self.copies(c, re, key, h, word).await?;
        let seen = |x: &Copy| tentative::Seen { addr: re.addr(x.at), word: x.word };
        let copies: ArrayVec<tentative::Seen, { 4 * layout::SLOTS }> =
            copies.iter().map(seen).collect();
        let ours = tentative::Seen { addr: re.addr(at), word };
        let settled = tentative::settle(c, &copies, ours, waiting).await?;
        bump(&self.counters.aborted, settled.aborted);
        if settled.decision == Settle::Restart {
            bump(&self.counters.withdrawn, 1);
        }
        Ok(settled.decision)
    }

    /// The key's committed entry in `snap` that is not frozen, if any; else whether a frozen one
    /// was seen (a split is moving the key).
    async fn committed<T: Transport>(
        &self,
        c: &Client<T>,
        snap: &Snap,
        key: &[u8],
        h: &Hashes,
    ) -> IndexResult<(Option<Copy>, bool)> {
        let mut frozen = false;
        for cand in snap.candidates(h.fp()).filter(|x| !is_tentative(x.word)) {
            if self.holds(c, cand.word, key, 0).await? {
                if !is_frozen(cand.word) {
                    return Ok((Some(cand), false));
                }
                frozen = true;
            }
        }
        Ok((None, frozen))
    }

    pub(crate) async fn update_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool> {
        let h = Hashes::of(key);
        // RACE's two hash functions, one per bucket choice.
        c.compute(Work::KeyHash, 2);
        let mut word = 0;
        let (mut reads, mut snap) = (0, Snap::default());
        let mut wait = SplitWait::default();
        // Ends at a CAS that wins, at a lost CAS that found a later write of the key, or at an
        // image without the key; another lost CAS saw a delete or a split (a frozen entry,
        // waited on) and starts over.
        loop {
            self.locate(c, &h, false, &mut reads, &mut snap).await?;
            match self.committed(c, &snap, key, &h).await? {
                (None, false) => return Ok(false),
                (Some(live), _) => {
                    if word == 0 {
                        let block = self.blocks.write(c, key, value).await?;
                        word = self.word(&h, key, value, block);
                    }
                    let seen = c.cas(snap.addr(live.at), live.word, word).await?;
                    if seen == live.word || self.superseded(c, seen, key, &h).await? {
                        return Ok(true);
                    }
                }
                // Frozen: a split is moving the key.
                (None, true) => self.wait_split(c, snap.seg, None, &mut wait).await?,
            }
            bump(&self.counters.retries, 1);
        }
    }

    /// Whether a lost update (or upsert) CAS found, in place of the entry it read, a committed
    /// entry of its own key (one READ of that entry's block). Then another write of the key
    /// landed after the update's READ and before its CAS, both inside the update, and the
    /// update takes effect just before that write, its value overwritten at once: it is done,
    /// with no second search. Blocks are never reused, so a word once replaced never returns; a
    /// split freezes an entry before it moves, and leaves no committed entry of a moved key
    /// behind (`crate::split`), so such an entry is the key's own later write in this segment.
    /// Not for deletes: an update that found the key cannot follow a delete that removed it.
    async fn superseded<T: Transport>(
        &self,
        c: &Client<T>,
        seen: u64,
        key: &[u8],
        h: &Hashes,
    ) -> IndexResult<bool> {
        if seen == 0 || is_tentative(seen) || is_frozen(seen) || slot_fp(seen) != h.fp() {
            return Ok(false);
        }
        let mine = self.holds(c, seen, key, 0).await?;
        if mine {
            bump(&self.counters.superseded, 1);
        }
        Ok(mine)
    }

    pub(crate) async fn delete_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
    ) -> IndexResult<bool> {
        let h = Hashes::of(key);
        // RACE's two hash functions, one per bucket choice.
        c.compute(Work::KeyHash, 2);
        let (mut reads, mut snap) = (0, Snap::default());
        let mut wait = SplitWait::default();
        // Ends as update's loop does.
        loop {
            self.locate(c, &h, false, &mut reads, &mut snap).await?;
            match self.committed(c, &snap, key, &h).await? {
                (None, false) => return Ok(false),
                (Some(live), _) => {
                    if c.cas(snap.addr(live.at), live.word, 0).await? == live.word {
                        return Ok(true);
                    }
                }
                // Frozen: a split is moving the key.
                (None, true) => self.wait_split(c, snap.seg, None, &mut wait).await?,
            }
            bump(&self.counters.retries, 1);
        }
    }
}
