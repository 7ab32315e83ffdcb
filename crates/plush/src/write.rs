//! Writes: every insert, update and delete puts the key's newest entry in its top bucket,
//! holding the top group's lock (crate docs).

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::counter::bump;
use dmindex_prim::doorbell;
use dmindex_prim::kv_block;
use dmindex_prim::lock::{Held, NoMetadata};

use crate::layout::{entry, entry_block, entry_fp, words, Hashes};
use crate::search::{Found, Seen};
use crate::Plush;

impl Plush {
    /// Insert or overwrite: the block first (awaited: it may be on another memory node than
    /// the bucket), then under the lock the entry into the key's slot or an empty one.
    pub(crate) async fn upsert<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<()> {
        let h = Hashes::of(key);
        c.compute(Work::KeyHash, 1);
        let e = self.write_block(c, h, key, value, false).await?;
        let held = self.lock(c, h).await?;
        self.place_and_unlock(c, held, h, key, e, None).await
    }

    /// Update (`Some(value)`) or delete (`None`) of a key that must exist: under the lock, a
    /// search says whether it does; if so, its new entry (a tombstone for a delete) goes in
    /// its top bucket.
    pub(crate) async fn change<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> IndexResult<bool> {
        let h = Hashes::of(key);
        c.compute(Work::KeyHash, 1);
        let held = self.lock(c, h).await?;
        let mut old = self.values.get(c, Vec::new);
        let mut seen = Seen::default();
        let found = match self.lookup_seeing(c, key, &mut old, Some(&mut seen)).await {
            Ok(found) => found,
            Err(e) => return Err(self.abandon(c, held, e).await),
        };
        if found != Found::Live {
            held.unlock_with(c, 0).await?;
            return Ok(false);
        }
        let e = match self.write_block(c, h, key, value.unwrap_or(&[]), value.is_none()).await {
            Ok(e) => e,
            Err(e) => return Err(self.abandon(c, held, e).await),
        };
        self.place_and_unlock(c, held, h, key, e, Some(&seen)).await?;
        Ok(true)
    }

    /// The top group's lock for key hash `h` (its first word).
    async fn lock<T: Transport>(&self, c: &Client<T>, h: Hashes) -> IndexResult<Held<'_>> {
        let top = self.tops[h.top_group(self.shape.groups)];
        self.locks.acquire(c, top, || bump(&self.counters.retries), &NoMetadata).await
    }

    /// Releases `held` after a failure and returns the failure: every state a writer leaves is
    /// one readers accept, so the lock is freed as is (if the fabric still lets this client).
    async fn abandon<T: Transport>(
        &self,
        c: &Client<T>,
        held: Held<'_>,
        e: IndexError,
    ) -> IndexError {
        // The first failure is the one to report; a failed unlock leaves the lock to the
        // lease-based take-over, as a crash would.
        let _ = held.unlock_with(c, 0).await;
        e
    }

    /// A fresh block for `key` and `value` (a tombstone's: no value) and its entry.
    async fn write_block<T: Transport>(
        &self,
        c: &Client<T>,
        h: Hashes,
        key: &[u8],
        value: &[u8],
        deleted: bool,
    ) -> IndexResult<u64> {
        let at = self.blocks.write(c, key, value).await?;
        let len = (kv_block::HEADER + key.len() + value.len())
            .max(kv_block::HEADER + self.config.max_key);
        Ok(entry(h.fp(), deleted, len, at))
    }

    /// Puts entry `e` of `key` in its top bucket and frees the lock with the same doorbell
    /// (the entry's WRITE lands first); `seen`, the bucket as a search under this lock READ
    /// it.
    async fn place_and_unlock<T: Transport>(
        &self,
        c: &Client<T>,
        held: Held<'_>,
        h: Hashes,
        key: &[u8],
        e: u64,
        seen: Option<&Seen>,
    ) -> IndexResult<()> {
        let top = self.tops[h.top_group(self.shape.groups)];
        let slot = match self.slot(c, h, key, seen).await {
            Ok(slot) => slot,
            Err(err) => return Err(self.abandon(c, held, err).await),
        };
        let (word, free) = (e.to_le_bytes(), 0u64.to_le_bytes());
        let mut ops =
            [BatchOp::Write { addr: slot, data: &word }, BatchOp::Write { addr: top, data: &free }];
        held.released_by(doorbell::post(c, &mut ops).await)
    }

    /// The slot of `key`'s top bucket that holds it, else an empty one; a full bucket first
    /// migrates its group, which empties it (held lock: nothing else writes the bucket).
    /// `seen`: what a search under this lock found there (the key's slot, or that no slot
    /// holds it), so the first pass reads nothing.
    async fn slot<T: Transport>(
        &self,
        c: &Client<T>,
        h: Hashes,
        key: &[u8],
        seen: Option<&Seen>,
    ) -> IndexResult<GlobalAddr> {
        let top = self.tops[h.top_group(self.shape.groups)];
        let at = self.shape.bucket_addr(top, h.top_bucket());
        let len = self.shape.bucket_bytes();
        if let Some(seen) = seen {
            let empty = words(&seen.image[..len]).position(|e| e == 0);
            if let Some(i) = seen.slot.or(empty) {
                return Ok(at.add(8 * i as u64));
            }
            self.migrate_top(c, top).await?;
            return Ok(at);
        }
        // Two passes: the second follows the migration that emptied the bucket.
        for pass in 0..2 {
            let mut image = [0u8; 128];
            let image = &mut image[..len];
            c.read(at, image).await?;
            c.compute(Work::BytesScanned, image.len() as u64);
            let mut empty = None;
            for (i, e) in words(image).enumerate() {
                if e == 0 {
                    empty.get_or_insert(i);
                    continue;
                }
                self.check_entry(c, e)?;
                if entry_fp(e) == h.fp() && self.blocks.holds_key(c, entry_block(e), key).await? {
                    return Ok(at.add(8 * i as u64));
                }
            }
            if let Some(i) = empty {
                return Ok(at.add(8 * i as u64));
            }
            if pass == 0 {
                self.migrate_top(c, top).await?;
            }
        }
        Err(IndexError::Corrupt(format!(
            "plush top bucket at {at} is still full after its group migrated"
        )))
    }
}
