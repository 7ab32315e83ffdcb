//! Search, insert (upsert), update and delete.
//!
//! # The key's value
//!
//! A key's copies are the used slots of its buckets whose block holds the key; positions are
//! ordered by (bucket index, slot index), the same in every segment the key lives in (a split
//! copies an entry to the same position). The lowest copy is the key's value; a frozen copy
//! beside headers that still match the key is a value too (the split has not switched yet).
//!
//! # Insert, after its CAS into position p (the re-read)
//!
//! * every header matches: settle the key's duplicates — the lowest copy stays and every other
//!   copy is cleared by a CAS expecting the word seen (ours too, if a lower copy exists: our
//!   insert is then linearized just before the lower copy's insert, which our first READ did not
//!   see and so came after it). A frozen copy means a split is moving the key: wait, and settle
//!   in the new segment, where copies keep their positions. Updates clear the higher copies
//!   their snapshot showed as well, so racing inserts of one key leave one slot;
//! * p's bucket has switched and p still holds our word: we are either an entry the split will
//!   still freeze (CAS'd before the switch, visible) or an orphan (CAS'd after the split READ
//!   it, never visible to anyone, since every image of it carries a header that excludes the
//!   key). We wait until the segment's split lock is free — then every split that switched the
//!   bucket has finished its second pass, so an entry still unfrozen is an orphan — and take it
//!   back by CAS (or find it frozen, and follow it), then insert again;
//! * otherwise (frozen and moved, or changed by others) follow the key to its segment and
//!   settle there.

use dmindex_fabric::{Client, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::kv_block;

use crate::bucket::{Copy, Snap};
use crate::layout::{self, dir_entry_parts, is_frozen, Hashes};
use crate::{bump, Race};

impl Race {
    /// The key's buckets in the segment whose headers all match it: the cached entry first, the
    /// directory re-read on a mismatch. Counts the snapshots read in `reads`.
    pub(crate) async fn locate<T: Transport>(
        &self,
        c: &Client<T>,
        h: &Hashes,
        reads: &mut u64,
    ) -> IndexResult<Snap> {
        let mut entry = self.cached(h.h1);
        loop {
            let snap = self.read_snap(c, dir_entry_parts(entry).0, h).await?;
            *reads += 1;
            if snap.matches(h) {
                return Ok(snap);
            }
            bump(&self.counters.retries, 1);
            entry = self.refresh(c, h.h1).await?;
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
        let mut reads = 0;
        let snap = self.locate(c, &h, &mut reads).await?;
        bump(&self.counters.searches, 1);
        bump(&self.counters.search_buckets, 2 * reads);
        for cand in snap.candidates(h.fp()) {
            let block = layout::slot_block(cand.word);
            if self.blocks.value_into(c, block, Some(key), out).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The slot word of a block of `len` bytes at `block` for a key with hashes `h`.
    fn word(&self, h: &Hashes, key: &[u8], value: &[u8], block: dmindex_fabric::GlobalAddr) -> u64 {
        let len =
            (kv_block::HEADER + key.len() + value.len()).max(kv_block::HEADER + self.shape.max_key);
        layout::slot(h.fp(), layout::units(len), block)
    }

    pub(crate) async fn insert_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<()> {
        let h = Hashes::of(key);
        // Written and awaited before any CAS publishes it: the block may be on another memory
        // node than the segment.
        let block = self.blocks.write(c, key, value).await?;
        let word = self.word(&h, key, value, block);
        let mut reads = 0;
        'fresh: loop {
            let snap = self.locate(c, &h, &mut reads).await?;
            let copies = self.copies(c, &snap, key, &h, 0).await?;
            if let Some(low) = copies.first() {
                // An update of the lowest copy; a frozen copy waits for its split.
                if !copies.iter().any(|x| is_frozen(x.word))
                    && c.cas(snap.addr(low.at), low.word, word).await? == low.word
                {
                    self.clear_higher(c, &snap, &copies).await?;
                    return Ok(());
                }
                bump(&self.counters.retries, 1);
                continue;
            }
            let Some(at) = snap.empty_slot(h.mains(self.shape.groups)) else {
                self.split_full(c, &snap, &h).await?;
                continue;
            };
            if c.cas(snap.addr(at), 0, word).await? != 0 {
                bump(&self.counters.retries, 1);
                continue;
            }
            // The re-read: duplicates, and splits that raced the CAS.
            let mut seg = snap.seg;
            loop {
                let re = self.read_snap(c, seg, &h).await?;
                let now = re.word(at);
                if re.matches(&h) {
                    if self.dedup(c, &re, key, &h, word).await? {
                        return Ok(());
                    }
                    bump(&self.counters.retries, 1);
                    continue;
                }
                bump(&self.counters.retries, 1);
                if now == word {
                    if h.matches(re.buckets[at.b].header) {
                        // CAS'd before the switch: the split will freeze it.
                        continue;
                    }
                    // Frozen later, or an orphan once the split lock is free.
                    if c.read_word(seg).await? & layout::LOCK != 0 {
                        continue;
                    }
                    if c.cas(re.addr(at), word, 0).await? == word {
                        continue 'fresh;
                    }
                    continue;
                }
                // Moved (frozen, or already cleared after the move) or changed by others:
                // follow the key and settle its duplicates there (ours, if still there, is at
                // the same position).
                seg = self.locate(c, &h, &mut reads).await?.seg;
            }
        }
    }

    /// Settles the key's duplicates in `re` after our insert: the lowest copy is the value and
    /// every other copy is cleared, each by a CAS expecting the word seen (ours among them if a
    /// lower copy exists; `word` is ours, recognised without reading its block). Returns false
    /// when the re-read must be repeated: a copy is frozen (a split is moving the key: the
    /// duplicates are settled in the new segment, where they keep their positions) or a
    /// clearing CAS failed.
    async fn dedup<T: Transport>(
        &self,
        c: &Client<T>,
        re: &Snap,
        key: &[u8],
        h: &Hashes,
        word: u64,
    ) -> IndexResult<bool> {
        let copies = self.copies(c, re, key, h, word).await?;
        if copies.iter().any(|x| is_frozen(x.word)) {
            return Ok(false);
        }
        self.clear_higher(c, re, &copies).await
    }

    /// Clears every copy but the lowest (non-lowest copies are not the key's value, so this
    /// changes no value); true if every clearing CAS succeeded.
    async fn clear_higher<T: Transport>(
        &self,
        c: &Client<T>,
        snap: &Snap,
        copies: &[Copy],
    ) -> IndexResult<bool> {
        let mut settled = true;
        for x in copies.iter().skip(1) {
            if c.cas(snap.addr(x.at), x.word, 0).await? == x.word {
                bump(&self.counters.dedup, 1);
            } else {
                settled = false;
            }
        }
        Ok(settled)
    }

    pub(crate) async fn update_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool> {
        let h = Hashes::of(key);
        let mut word = 0;
        let mut reads = 0;
        loop {
            let snap = self.locate(c, &h, &mut reads).await?;
            let copies = self.copies(c, &snap, key, &h, 0).await?;
            let Some(low) = copies.first() else { return Ok(false) };
            if !copies.iter().any(|x| is_frozen(x.word)) {
                if word == 0 {
                    let block = self.blocks.write(c, key, value).await?;
                    word = self.word(&h, key, value, block);
                }
                if c.cas(snap.addr(low.at), low.word, word).await? == low.word {
                    self.clear_higher(c, &snap, &copies).await?;
                    return Ok(true);
                }
            }
            bump(&self.counters.retries, 1);
        }
    }

    pub(crate) async fn delete_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
    ) -> IndexResult<bool> {
        let h = Hashes::of(key);
        let mut reads = 0;
        loop {
            let snap = self.locate(c, &h, &mut reads).await?;
            let copies = self.copies(c, &snap, key, &h, 0).await?;
            let Some(low) = copies.first() else { return Ok(false) };
            if !copies.iter().any(|x| is_frozen(x.word)) {
                // Higher copies (duplicates left by racing or crashed inserts) first, so that
                // none resurfaces once the lowest is gone.
                for x in copies.iter().skip(1).rev() {
                    if c.cas(snap.addr(x.at), x.word, 0).await? == x.word {
                        bump(&self.counters.dedup, 1);
                    }
                }
                if c.cas(snap.addr(low.at), low.word, 0).await? == low.word {
                    return Ok(true);
                }
            }
            bump(&self.counters.retries, 1);
        }
    }
}
