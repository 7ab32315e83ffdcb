//! A key's buckets as READ under one context: the image every operation decides from.
//!
//! Levels are READ bottom first. Under a context with a rehash due, the bottom level's buckets
//! are one round trip and the levels above the next, so that an entry the rehasher moves out of
//! the bottom after the first is READ above in the second (crate docs). Otherwise every bucket
//! is one round trip. The context word can ride with the last READs (an insert's re-read).
//! With `reads=levels` an operation's first read is the SepHash port's: a level at a time, bottom
//! first.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::{doorbell, kv_block};
use smallvec::SmallVec;

use crate::layout::{self, Hashes, BUCKET, MAX_LEVELS, SLOTS};
use crate::{CLevel, Cached};

/// Most buckets of one key: two per level.
pub(crate) const MAX_BUCKETS: usize = 2 * MAX_LEVELS;

/// The READs of one round, on the stack.
type Ops<'a> = SmallVec<[BatchOp<'a>; MAX_BUCKETS + 1]>;

/// Where a slot is: bucket `b` of the image, slot `s` of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct At {
    pub b: usize,
    pub s: usize,
}

/// A slot seen in an image: where, and the word there.
pub(crate) use dmindex_prim::tentative::Seen;

/// A key's buckets under `cached`: for each, its level (0 = bottom) and address, and its slots.
#[derive(Clone, Debug)]
pub(crate) struct Image {
    pub cached: Cached,
    pub n: usize,
    pub level: [u8; MAX_BUCKETS],
    pub addr: [GlobalAddr; MAX_BUCKETS],
    pub lines: [[u8; BUCKET as usize]; MAX_BUCKETS],
}

impl Image {
    /// The key's buckets under `cached`, bottom level first (a level whose two choices agree
    /// has one), not yet READ.
    pub fn new(cached: Cached, h: &Hashes) -> Image {
        Self::from_level(cached, h, 0)
    }

    /// The key's buckets in every level but the bottom (where the rehasher puts a copy).
    pub fn above_bottom(cached: Cached, h: &Hashes) -> Image {
        Self::from_level(cached, h, 1)
    }

    fn from_level(cached: Cached, h: &Hashes, lowest: usize) -> Image {
        let mut img = Image {
            cached,
            n: 0,
            level: [0; MAX_BUCKETS],
            addr: [GlobalAddr::new(0, 0); MAX_BUCKETS],
            lines: [[0; BUCKET as usize]; MAX_BUCKETS],
        };
        for (i, l) in cached.ctx.levels().iter().enumerate().skip(lowest) {
            let pair = h.buckets(l.log2);
            let distinct = if pair[0] == pair[1] { 1 } else { 2 };
            for &b in &pair[..distinct] {
                img.level[img.n] = i as u8;
                img.addr[img.n] = l.bucket(b);
                img.n += 1;
            }
        }
        img
    }

    /// The word of slot `at`.
    pub fn word(&self, at: At) -> u64 {
        let b = &self.lines[at.b][8 * at.s..8 * at.s + 8];
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    }

    /// The address of slot `at`.
    pub fn slot_addr(&self, at: At) -> GlobalAddr {
        self.addr[at.b].add(8 * at.s as u64)
    }

    /// Every used slot, bottom level first.
    pub fn used(&self) -> impl Iterator<Item = Seen> + '_ {
        (0..self.n).flat_map(move |b| {
            (0..SLOTS).filter_map(move |s| {
                let at = At { b, s };
                let word = self.word(at);
                (word != 0).then(|| Seen { addr: self.slot_addr(at), word })
            })
        })
    }

    /// Used slots whose fingerprint is `fp`.
    pub fn candidates(&self, fp: u8) -> impl Iterator<Item = Seen> + '_ {
        self.used().filter(move |x| layout::slot_fp(x.word) == fp)
    }

    /// The slot holding exactly `word`, if any.
    pub fn find(&self, word: u64) -> Option<Seen> {
        self.used().find(|x| x.word == word)
    }

    /// An empty slot for a new entry: in the top level first, down to the lowest level a new
    /// entry may go to (not the bottom while a rehash is due).
    pub fn empty_slot(&self) -> Option<At> {
        let lowest = u8::from(self.cached.ctx.rehashing());
        (0..self.n)
            .rev()
            .filter(|&b| self.level[b] >= lowest)
            .find_map(|b| (0..SLOTS).map(|s| At { b, s }).find(|&at| self.word(at) == 0))
    }

    /// Buckets of the bottom level (the first ones).
    fn bottom_buckets(&self) -> usize {
        (0..self.n).take_while(|&b| self.level[b] == 0).count()
    }
}

impl CLevel {
    /// Whether used slot word `w` can be an entry of this table: a block length these blocks
    /// have, a block on a memory node, not both frozen and tentative.
    pub(crate) fn valid_slot<T: Transport>(&self, c: &Client<T>, w: u64) -> bool {
        let units = layout::slot_units(w);
        let shortest = layout::units(kv_block::HEADER + self.config.max_key);
        let longest = layout::units(kv_block::HEADER + self.config.max_key + self.config.max_value);
        let block = layout::slot_block(w);
        (shortest..=longest).contains(&units)
            && !(layout::is_frozen(w) && layout::is_tentative(w))
            && Self::fits(c, block, 64 * u64::from(units))
    }

    /// READs `img`'s buckets (and the context word into `ctx_word` if given, with the last
    /// round): one round trip, or two while a rehash is due (bottom first).
    pub(crate) async fn read_image<T: Transport>(
        &self,
        c: &Client<T>,
        img: &mut Image,
        ctx_word: Option<&mut u64>,
    ) -> IndexResult<()> {
        let split = if img.cached.ctx.rehashing() { img.bottom_buckets() } else { 0 };
        let n = img.n;
        let (first, rest) = img.lines[..n].split_at_mut(split);
        if !first.is_empty() {
            let mut ops = Ops::new();
            for (i, line) in first.iter_mut().enumerate() {
                ops.push(BatchOp::Read { addr: img.addr[i], buf: line });
            }
            doorbell::post_per_node(c, &mut ops).await?;
        }
        let mut word = [0u8; 8];
        let mut ops = Ops::new();
        for (i, line) in rest.iter_mut().enumerate() {
            ops.push(BatchOp::Read { addr: img.addr[split + i], buf: line });
        }
        if ctx_word.is_some() {
            ops.push(BatchOp::Read { addr: self.header.add(layout::CONTEXT_WORD), buf: &mut word });
        }
        doorbell::post_per_node(c, &mut ops).await?;
        drop(ops);
        if let Some(w) = ctx_word {
            *w = u64::from_le_bytes(word);
        }
        self.check_image(c, img)
    }

    /// READs `img`'s buckets as the SepHash port does (option `reads=levels`): level
    /// after level from the bottom, two round trips each, the level's word in the context (the
    /// port's level header: capacity and the next level up) and then the level's buckets. Bottom
    /// first, so an entry moved up during the READs is READ above after it left the bottom, as
    /// with [`Self::read_image`]'s two rounds.
    pub(crate) async fn read_image_by_level<T: Transport>(
        &self,
        c: &Client<T>,
        img: &mut Image,
    ) -> IndexResult<()> {
        let n = img.n;
        let mut first = 0;
        // Ends after the top level: `end` grows past `first` every round.
        while first < n {
            let level = usize::from(img.level[first]);
            let end = (first..n).find(|&b| usize::from(img.level[b]) != level).unwrap_or(n);
            let at = img.cached.addr.add(layout::Context::level_word_at(level));
            let word = c.read_word(at).await?;
            if word != img.cached.ctx.levels[level].word() {
                // Contexts are written once, before they are published.
                return Err(IndexError::Corrupt(format!(
                    "clevel context word at {at} changed to {word:#x}"
                )));
            }
            let mut ops = Ops::new();
            for (i, line) in img.lines[first..end].iter_mut().enumerate() {
                ops.push(BatchOp::Read { addr: img.addr[first + i], buf: line });
            }
            doorbell::post_per_node(c, &mut ops).await?;
            first = end;
        }
        self.check_image(c, img)
    }

    /// Checks every used slot of a READ image names a block, and charges the scan of its
    /// buckets.
    fn check_image<T: Transport>(&self, c: &Client<T>, img: &Image) -> IndexResult<()> {
        if let Some(bad) = img.used().find(|x| !self.valid_slot(c, x.word)) {
            return Err(IndexError::Corrupt(format!(
                "clevel slot at {} holds {:#x}, no entry",
                bad.addr, bad.word
            )));
        }
        c.compute(dmindex_fabric::Work::BytesScanned, BUCKET * img.n as u64);
        Ok(())
    }
}
