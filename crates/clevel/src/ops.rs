//! Search, insert (upsert), update and delete.
//!
//! # Insert of an absent key: place, re-read, commit
//!
//! 1. CAS an empty slot from 0 to our entry with the tentative bit set (in the highest level
//!    with room, never in a bottom level being drained).
//! 2. Re-read the key's buckets and, in the last round, the context word. Then:
//!    * the context word changed: withdraw ours (CAS to 0) and start again under the new one;
//!    * ours is gone (another insert of the key or the rehasher aborted it): start again;
//!    * otherwise [`dmindex_prim::tentative`]'s rule, which RACE shares: a frozen entry of the
//!      key (the rehasher is moving it) is waited on; another committed entry means the key is
//!      present (withdraw ours, start again: an upsert of that entry); a lower-addressed
//!      tentative entry goes first (aborted after [`PATIENCE`] unchanged re-reads: its client
//!      probably stopped); higher ones are aborted; then ours is committed by CAS. The insert
//!      takes effect there.
//!
//! Two inserts of one absent key that both commit would need each one's deciding re-read to
//! miss the other's entry. The one that placed later re-read the key's buckets after both were
//! placed: under a context that lists the other's level too (levels leave a context only from
//! the bottom, after a rehash aborted every tentative entry there), so it saw the other entry
//! and waited, withdrew or aborted it; a CAS decides every abort against a commit.
//!
//! # Why one committed entry makes stale images harmless
//!
//! * A reader returns a committed entry it saw: at the instant its line was READ that entry was
//!   the key's only committed one (or a moving entry's copy, with the same word): the value then.
//! * Writers CAS the committed entry they saw; the CAS succeeds only if it is still the value.
//!   A writer that sees a frozen entry of the key anywhere, or two committed ones (a copy, and
//!   its original READ before it was frozen), waits for the move, so it never changes a copy
//!   while the original it was copied from can still be READ.
//! * A reader that saw no committed entry confirms its context (crate docs).

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::counter::{add, bump};
use dmindex_prim::kv_slot;
use dmindex_prim::tentative::{self, Settle, Waiting};
use smallvec::SmallVec;

use crate::image::{At, Image, Seen};
use crate::layout::{self, entry, is_frozen, is_tentative, Hashes, TENTATIVE};
use crate::resize::MoveWait;
use crate::CLevel;

pub use dmindex_prim::tentative::PATIENCE;

/// What an image holds of a key.
pub(crate) enum Found {
    /// A committed entry, not frozen, and no frozen one.
    Live(Seen),
    /// A frozen entry: the rehasher is moving the key.
    Moving,
    Absent,
}

impl CLevel {
    /// Whether the entry `w` is of `key` (`mine`: our own entry's word, known without a READ).
    async fn holds<T: Transport>(
        &self,
        c: &Client<T>,
        w: u64,
        key: &[u8],
        mine: u64,
    ) -> IndexResult<bool> {
        if mine != 0 && entry(w) == mine {
            return Ok(true);
        }
        // `w` is from an image, whose every used slot `read_image` checked names a block.
        self.blocks.holds_key(c, layout::slot_block(w), key).await
    }

    /// The key's committed entry in `img`, unless the image shows it moving: a frozen entry of
    /// the key, or two committed ones (the rehasher's copy above, and the original, READ in the
    /// bottom before the rehasher froze it: a CAS of the copy would change the key while the
    /// frozen original can still be READ).
    pub(crate) async fn committed<T: Transport>(
        &self,
        c: &Client<T>,
        img: &Image,
        key: &[u8],
        h: &Hashes,
    ) -> IndexResult<Found> {
        let mut live = None;
        for cand in img.candidates(h.fp()).filter(|x| !is_tentative(x.word)) {
            if self.holds(c, cand.word, key, 0).await? {
                if is_frozen(cand.word) || live.is_some() {
                    return Ok(Found::Moving);
                }
                live = Some(cand);
            }
        }
        Ok(live.map_or(Found::Absent, Found::Live))
    }

    /// Whether the context word still names `img`'s context (one READ, after the image's):
    /// if not, the new context is cached for the next attempt.
    async fn confirm<T: Transport>(&self, c: &Client<T>, img: &Image) -> IndexResult<bool> {
        let word = c.read_word(self.header.add(layout::CONTEXT_WORD)).await?;
        if word == img.cached.addr.raw() {
            return Ok(true);
        }
        bump(&self.counters.retries);
        self.refresh(c, word).await?;
        Ok(false)
    }

    /// The key's buckets as an operation first READs them: under the cached context, one
    /// doorbell a round (`read_image`), or, with `reads=levels`, as the SepHash port does: the
    /// context word (the context too if it changed), then level after level.
    async fn first_image<T: Transport>(&self, c: &Client<T>, h: &Hashes) -> IndexResult<Image> {
        if self.port_reads {
            let mut img = Image::new(self.reload(c).await?, h);
            self.read_image_by_level(c, &mut img).await?;
            return Ok(img);
        }
        let mut img = Image::new(self.cached(), h);
        self.read_image(c, &mut img, None).await?;
        Ok(img)
    }

    pub(crate) async fn search_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        out.clear();
        let h = Hashes::of(key);
        c.compute(Work::KeyHash, 2);
        bump(&self.counters.searches);
        let mut attempts = Attempts::new();
        // Ends at a committed entry of the key, or at an absence its context confirms; a
        // context that keeps changing under it ends in `Attempts`' bound.
        'fresh: loop {
            let img = self.first_image(c, &h).await?;
            add(&self.counters.search_buckets, img.n as u64);
            add(&self.counters.search_levels, img.cached.ctx.count as u64);
            for cand in img.candidates(h.fp()).filter(|x| !is_tentative(x.word)) {
                // Checked by `read_image`: the slot names a block on a memory node.
                let block = layout::slot_block(cand.word);
                let copy = self.kv_cache.as_ref().and_then(|k| k.value_into(c, block, key, out));
                if copy == Some(true) {
                    bump(&self.counters.kv_cache_hits);
                }
                let found = match copy {
                    Some(found) => found,
                    None => self.blocks.value_into(c, block, Some(key), out).await?,
                };
                if found {
                    // A committed entry is the key's value when READ (module docs); the port
                    // re-READs its directory after every search all the same, and starts
                    // again if it changed.
                    if self.port_reads && !self.confirm(c, &img).await? {
                        attempts.failed(self.header, "context word")?;
                        continue 'fresh;
                    }
                    return Ok(true);
                }
            }
            if self.confirm(c, &img).await? {
                return Ok(false);
            }
            attempts.failed(self.header, "context word")?;
        }
    }

    /// Keeps a copy of the block `c` just published, if clients keep them (`kv_cache`).
    fn keep<T: Transport>(&self, c: &Client<T>, block: GlobalAddr, key: &[u8], value: &[u8]) {
        if let Some(k) = &self.kv_cache {
            k.keep(c, block, key, value);
        }
    }

    /// The committed slot word of `key`'s block of `value` at `block`.
    fn word(&self, h: &Hashes, key: &[u8], value: &[u8], block: GlobalAddr) -> u64 {
        kv_slot::for_block(h.fp(), key.len(), value.len(), self.config.max_key, block)
    }

    pub(crate) async fn insert_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<()> {
        let h = Hashes::of(key);
        c.compute(Work::KeyHash, 2);
        // Written and awaited before any CAS publishes it: blocks and levels may be on
        // different memory nodes.
        let block = self.blocks.write(c, key, value).await?;
        let word = self.word(&h, key, value, block);
        let tentative = word | TENTATIVE;
        let mut wait = MoveWait::default();
        let mut attempts = Attempts::new();
        // Ends at a CAS that upserts the key's entry or commits ours; every other way round
        // (a lost CAS, a withdrawal, a move waited on, a grown table) saw another client's
        // progress, and a context that keeps changing ends in `Attempts`' bound.
        'fresh: loop {
            let img = self.first_image(c, &h).await?;
            let cached = img.cached;
            add(&self.counters.insert_levels, cached.ctx.count as u64);
            match self.committed(c, &img, key, &h).await? {
                Found::Live(live) => {
                    if c.cas(live.addr, live.word, word).await? == live.word {
                        self.keep(c, block, key, value);
                        return Ok(());
                    }
                    bump(&self.counters.retries);
                    continue;
                }
                Found::Moving => {
                    self.wait_move(c, &mut wait).await?;
                    continue;
                }
                Found::Absent => {}
            }
            let Some(at) = img.empty_slot() else {
                self.grow(c, cached).await?;
                attempts.failed(self.header, "a table that grows")?;
                continue;
            };
            let addr = img.slot_addr(at);
            if c.cas(addr, 0, tentative).await? != 0 {
                bump(&self.counters.retries);
                continue;
            }
            let mut waiting = Waiting::default();
            loop {
                let mut re = Image::new(cached, &h);
                let mut ctx_word = 0;
                self.read_image(c, &mut re, Some(&mut ctx_word)).await?;
                if ctx_word != cached.addr.raw() {
                    if c.cas(addr, tentative, 0).await? == tentative {
                        bump(&self.counters.insert_withdrawals);
                    }
                    self.refresh(c, ctx_word).await?;
                    attempts.failed(self.header, "context word")?;
                    continue 'fresh;
                }
                if re.word(at) != tentative {
                    // Aborted by another insert of the key or by the rehasher.
                    continue 'fresh;
                }
                match self.settle(c, &re, at, key, &h, word, &mut waiting).await? {
                    Settle::Committed => {
                        self.keep(c, block, key, value);
                        return Ok(());
                    }
                    Settle::Restart => continue 'fresh,
                    Settle::Wait => bump(&self.counters.retries),
                    Settle::Moving => self.wait_move(c, &mut wait).await?,
                }
            }
        }
    }

    /// One decision after a re-read `re` that shows our tentative entry at `at` under the
    /// current context ([`dmindex_prim::tentative`] gives the rule).
    #[allow(clippy::too_many_arguments)]
    async fn settle<T: Transport>(
        &self,
        c: &Client<T>,
        re: &Image,
        at: At,
        key: &[u8],
        h: &Hashes,
        word: u64,
        waiting: &mut Waiting,
    ) -> IndexResult<Settle> {
        let mut copies = SmallVec::<[Seen; 8]>::new();
        for cand in re.candidates(h.fp()) {
            if self.holds(c, cand.word, key, word).await? {
                copies.push(cand);
            }
        }
        let ours = Seen { addr: re.slot_addr(at), word };
        let settled = tentative::settle(c, &copies, ours, waiting).await?;
        add(&self.counters.tentative_aborts, settled.aborted);
        if settled.decision == Settle::Restart {
            bump(&self.counters.insert_withdrawals);
        }
        Ok(settled.decision)
    }

    /// Update (`value` given) or delete: CAS the key's committed entry to a new block's entry
    /// or to 0. Whether the key was present.
    pub(crate) async fn change_key<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> IndexResult<bool> {
        let h = Hashes::of(key);
        c.compute(Work::KeyHash, 2);
        let mut word = 0;
        let mut block = GlobalAddr::new(0, 0);
        let mut wait = MoveWait::default();
        let mut attempts = Attempts::new();
        // Ends at a CAS that wins, or at an absence its context confirms; a lost CAS saw
        // another writer, a frozen entry the rehasher, which is waited on.
        loop {
            let img = self.first_image(c, &h).await?;
            match self.committed(c, &img, key, &h).await? {
                Found::Live(live) => {
                    if let (Some(value), 0) = (value, word) {
                        block = self.blocks.write(c, key, value).await?;
                        word = self.word(&h, key, value, block);
                    }
                    if c.cas(live.addr, live.word, word).await? == live.word {
                        if let Some(value) = value {
                            self.keep(c, block, key, value);
                        }
                        return Ok(true);
                    }
                    bump(&self.counters.retries);
                }
                Found::Moving => self.wait_move(c, &mut wait).await?,
                Found::Absent => {
                    if self.confirm(c, &img).await? {
                        return Ok(false);
                    }
                    attempts.failed(self.header, "context word")?;
                }
            }
        }
    }
}
