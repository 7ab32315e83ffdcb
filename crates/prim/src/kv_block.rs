//! Out-of-place key-value blocks: a pair written once to fresh memory and reached through an
//! 8-byte pointer (CHIME's indirect values and long keys; the blocks hash tables and radix trees
//! point to).
//!
//! # Layout
//!
//! ```text
//! 64-B aligned ([`Blocks::aligned`]: 8-B aligned, packed)
//! +0              +4                +8               +8 + klen
//! | key length    | value length    | key [klen]     | value [vlen] | zero padding
//! | u32 LE        | u32 LE          |                |              |
//! ```
//!
//! A block is allocated at least [`HEADER`] + `max_key` bytes long, so a key probe of up to
//! `max_key` bytes ([`Blocks::holds_key`]) never reads past its end.
//!
//! # Protocol
//!
//! * **Write** ([`Blocks::write`]): allocate, then one WRITE of the whole block; only then is the
//!   address published (in an entry, by a CAS, under a lock). Blocks are immutable once
//!   published, so they need no versions: any READ of a published block sees it whole. Replaced
//!   blocks are not reclaimed (remote memory is never reused).
//! * **Read** ([`Blocks::read`]): one READ of the longest block these blocks hold (header, the
//!   longest key and value, at most [`MAX_FIRST_READ`] bytes), and a second READ of the rest only
//!   when the block is longer. An index configured with the size it stores (as `bench` configures
//!   every index, and as the papers' codes fix theirs at compile time) reads every block in one
//!   READ; one configured far above what it stores reads up to the maximum (at most 4 KB) each
//!   time. Each READ stops at the end of the block's node's region.
//!   Lengths beyond the configured maxima are [`IndexError::Corrupt`] (the pointer was not to a
//!   block), checked by the one parser every read goes through.

use std::ops::Range;

use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};

/// Bytes before the key: key length u32 LE, value length u32 LE.
pub const HEADER: usize = 8;
/// Bytes of the stack buffer a block's first READ lands in when it fits (two cache lines).
pub const GUESS: usize = 128;

/// Blocks [`Blocks::first_holding_key`] gathers on the stack: a leaf's entries sharing one
/// 8-byte prefix (CHIME's default span is 64); more spill to the heap.
pub const CANDIDATES: usize = 64;

/// Most bytes the first READ of a block asks for: an InfiniBand MTU. A longer block (values of
/// kilobytes) costs a second READ; a shorter cap would cost one to every item past it (at 128,
/// every item whose key and value passed 120 bytes took two).
pub const MAX_FIRST_READ: usize = 4096;

/// A block's parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// The blocks of one index: the longest key and value they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks {
    pub max_key: usize,
    pub max_value: usize,
    /// Alignment of a block: 64 (one cache line for short pairs) unless chosen
    /// ([`Blocks::aligned`]); at least 8.
    pub align: u64,
}

impl Blocks {
    /// Blocks holding keys of up to `max_key` bytes (0 for value-only blocks still pads to
    /// [`HEADER`]) and values of up to `max_value`.
    pub const fn new(max_key: usize, max_value: usize) -> Blocks {
        Blocks { max_key, max_value, align: 64 }
    }

    /// The same blocks aligned to `align` (a power of two, at least 8): small items packed
    /// densely, as designs that count memory-side bytes per item lay them out.
    pub const fn aligned(self, align: u64) -> Blocks {
        assert!(align.is_power_of_two() && align >= 8, "blocks are at least word-aligned");
        Blocks { align, ..self }
    }

    /// Writes a fresh block holding `key` (empty for a value-only block) and `value`: one
    /// allocation and one WRITE. Returns its address, to be published by the caller.
    pub async fn write<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<GlobalAddr> {
        let (block, size) = self.encode(key, value)?;
        let a = c.alloc(size, self.align).await?;
        c.write(a, &block).await?;
        Ok(a)
    }

    /// Writes a fresh block holding `key` and `value` on memory node `node`: one allocation and
    /// one WRITE, awaited. Returns its address and the bytes allocated for it.
    pub async fn write_on<T: Transport>(
        &self,
        c: &Client<T>,
        node: dmindex_fabric::NodeId,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<(GlobalAddr, u64)> {
        let (block, size) = self.encode(key, value)?;
        let a = c.alloc_on(node, size, self.align).await?;
        c.write(a, &block).await?;
        Ok((a, size))
    }

    /// Posts a fresh block holding `key` and `value` on memory node `node` without waiting
    /// (a zero-wait WRITE): the caller's later verbs to `node` execute after it, so a CAS there
    /// may publish the address at once; publishing it on another node needs
    /// [`Client::flush`] first. Returns the address.
    pub async fn post_on<T: Transport>(
        &self,
        c: &Client<T>,
        node: dmindex_fabric::NodeId,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<GlobalAddr> {
        let (block, size) = self.encode(key, value)?;
        let a = c.alloc_on(node, size, self.align).await?;
        c.write_zero_wait(a, &block)?;
        Ok(a)
    }

    /// The block holding `key` and `value` (on the stack up to 256 bytes) and the bytes to
    /// allocate for it; keys and values longer than the maxima are refused.
    fn encode(
        &self,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<(smallvec::SmallVec<[u8; 256]>, u64)> {
        if key.len() > self.max_key {
            return Err(IndexError::KeyTooLong { len: key.len(), max: self.max_key });
        }
        if value.len() > self.max_value {
            return Err(IndexError::ValueTooLong { len: value.len(), max: self.max_value });
        }
        let mut block = smallvec::SmallVec::new();
        block.extend_from_slice(&(key.len() as u32).to_le_bytes());
        block.extend_from_slice(&(value.len() as u32).to_le_bytes());
        block.extend_from_slice(key);
        block.extend_from_slice(value);
        let size = block.len().max(HEADER + self.max_key) as u64;
        Ok((block, size))
    }

    /// Bytes the first READ of a block takes (header, the longest key and value, at most
    /// [`MAX_FIRST_READ`]); a caller batching block READs reads this much of each.
    pub fn first_read(&self) -> usize {
        (HEADER + self.max_key + self.max_value).min(MAX_FIRST_READ)
    }

    /// [`Blocks::first_read`] of the block at `a`, cut at the end of its node's region: a short
    /// block near the end is read to the end and no further (a READ past it is refused). What a
    /// caller batching block READs reads of each.
    pub fn first_read_at<T: Transport>(&self, c: &Client<T>, a: GlobalAddr) -> usize {
        c.info().within_region(a, self.first_read())
    }

    /// The header and the longest key of the block at `a`, cut at the end of its node's region:
    /// what a caller READs of many blocks at once to learn their keys ([`Blocks::parse_key`]).
    pub fn key_read_at<T: Transport>(&self, c: &Client<T>, a: GlobalAddr) -> usize {
        c.info().within_region(a, HEADER + self.max_key)
    }

    /// The keys of blocks READ end to end into `buf`, in order: `pieces` gives each block's
    /// address and the bytes READ of it ([`Blocks::key_read_at`]). A key longer than its piece
    /// is a corrupt block, since a piece holds the header and the longest key or runs to the
    /// end of the block's region; so is a `buf` shorter than the pieces.
    pub fn keys_of<'b>(
        &'b self,
        pieces: &'b [(GlobalAddr, usize)],
        buf: &'b [u8],
    ) -> impl Iterator<Item = IndexResult<&'b [u8]>> + 'b {
        let mut at = 0;
        pieces.iter().map(move |&(a, len)| {
            let piece = buf.get(at..at + len);
            at += len;
            match piece.map(|p| self.parse_key(a, p)).transpose()?.flatten() {
                Some(key) => Ok(key),
                None => Err(IndexError::Corrupt(format!("block at {a} runs past its region"))),
            }
        })
    }

    /// The key and value of the block at `a` whose first bytes are `b`; `None` if the block is
    /// longer than `b` (READ the rest, or use [`Blocks::value_into`]).
    pub fn parse<'b>(
        &self,
        a: GlobalAddr,
        b: &'b [u8],
    ) -> IndexResult<Option<(&'b [u8], &'b [u8])>> {
        let (klen, vlen) = self.lengths(a, b)?;
        let total = HEADER + klen + vlen;
        Ok((total <= b.len()).then(|| (&b[HEADER..HEADER + klen], &b[HEADER + klen..total])))
    }

    /// The key of the block at `a` whose first bytes are `b` (at least [`HEADER`] of them);
    /// `None` if the key is longer than `b`. For callers that READ the keys of many blocks in
    /// doorbells and parse them after (a hash index's merge).
    pub fn parse_key<'b>(&self, a: GlobalAddr, b: &'b [u8]) -> IndexResult<Option<&'b [u8]>> {
        let (klen, _) = self.lengths(a, b)?;
        Ok(b.get(HEADER..HEADER + klen))
    }

    /// Reads the block at `a`: one READ of up to [`Blocks::first_read`] bytes, a second only if
    /// longer.
    pub async fn read<T: Transport>(&self, c: &Client<T>, a: GlobalAddr) -> IndexResult<Block> {
        let mut b = Vec::new();
        let (key, value) = self.read_into(c, a, &mut b).await?;
        Ok(Block { key: b[key].to_vec(), value: b[value].to_vec() })
    }

    /// Reads the block at `a` into `buf` (cleared first; the whole block, header included) and
    /// returns where in it its key and its value are: the READs of [`Blocks::read`], nothing
    /// allocated once `buf` has grown (a scan's blocks, one after another into one buffer).
    pub async fn read_into<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        buf: &mut Vec<u8>,
    ) -> IndexResult<(Range<usize>, Range<usize>)> {
        let guess = self.first_read_at(c, a);
        buf.clear();
        buf.resize(guess, 0);
        c.read(a, buf).await?;
        let (klen, vlen) = self.lengths(a, buf)?;
        let total = HEADER + klen + vlen;
        self.read_rest(c, a, buf, total).await?;
        Ok((HEADER..HEADER + klen, HEADER + klen..total))
    }

    /// The value of the block at `a` if it holds `key` (search paths): the same READs as
    /// [`Blocks::read`], into a stack buffer, so the only allocation is the value returned.
    pub async fn value_if_key<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        key: &[u8],
    ) -> IndexResult<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.value_into(c, a, Some(key), &mut out).await?.then_some(out))
    }

    /// The value of the block at `a` into `out` (cleared first), if the block holds `key`
    /// (`None`: any key): whether it did. One READ of up to [`Blocks::first_read`] bytes (into a
    /// stack buffer up to [`GUESS`], else into `out`), a second only for a longer block; nothing
    /// allocated once `out` has grown.
    pub async fn value_into<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        key: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        out.clear();
        let guess = self.first_read_at(c, a);
        if guess > GUESS {
            return self.long_value_into(c, a, guess, key, out).await;
        }
        let mut head = [0u8; GUESS];
        c.read(a, &mut head[..guess]).await?;
        let Some((klen, total)) = self.first_holds(c, a, &head[..guess], key)? else {
            return Ok(false);
        };
        // Up to [`GUESS`] the first READ is the longest block these blocks hold, so a block
        // longer than it was cut by the end of its node's region: not a block.
        if total > guess {
            return Err(IndexError::Corrupt(format!("block at {a} runs past its node's region")));
        }
        out.extend_from_slice(&head[HEADER + klen..total]);
        Ok(true)
    }

    /// [`Blocks::value_into`] for blocks that may be longer than [`GUESS`]: the first READ, of
    /// `guess` bytes, lands in `out` itself, and the header and key are dropped from its front.
    async fn long_value_into<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        guess: usize,
        key: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> IndexResult<bool> {
        out.resize(guess, 0);
        c.read(a, out).await?;
        let Some((klen, total)) = self.first_holds(c, a, out, key)? else {
            out.clear();
            return Ok(false);
        };
        self.read_rest(c, a, out, total).await?;
        if total > guess {
            c.compute(Work::BytesScanned, (total - guess) as u64);
            if key.is_some_and(|key| key != &out[HEADER..HEADER + klen]) {
                out.clear();
                return Ok(false);
            }
        }
        out.drain(..HEADER + klen);
        Ok(true)
    }

    /// What the first READ `first` of the block at `a` says, its work charged: `None` if the
    /// block cannot hold `key` (its key's length differs, or the key came whole and differs),
    /// else its key's length and the block's. The key is checked here when the first READ
    /// brought it whole, so that a block of another key costs no second READ.
    fn first_holds<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        first: &[u8],
        key: Option<&[u8]>,
    ) -> IndexResult<Option<(usize, usize)>> {
        let (klen, vlen) = self.lengths(a, first)?;
        let total = HEADER + klen + vlen;
        c.compute(Work::BytesScanned, total.min(first.len()) as u64);
        c.compute(Work::KeyCompare, u64::from(key.is_some()));
        let differs = key.is_some_and(|key| {
            klen != key.len() || first.get(HEADER..HEADER + klen).is_some_and(|k| k != key)
        });
        Ok((!differs).then_some((klen, total)))
    }

    /// `f` of the key of the block at `a`: one READ of the header and the longest key, onto the
    /// stack (what a split or a merge needs to place an entry: the key's hash).
    pub async fn with_key<T: Transport, R>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        f: impl FnOnce(&[u8]) -> R,
    ) -> IndexResult<R> {
        let mut b = smallvec::SmallVec::<[u8; 256]>::from_elem(0, HEADER + self.max_key);
        c.read(a, &mut b).await?;
        let (klen, _) = self.lengths(a, &b)?;
        Ok(f(&b[HEADER..HEADER + klen]))
    }

    /// Whether the block at `a` holds key `key`: one READ of the header and `key.len()` bytes.
    pub async fn holds_key<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        key: &[u8],
    ) -> IndexResult<bool> {
        let n = HEADER + key.len();
        let mut b = smallvec::SmallVec::<[u8; GUESS]>::from_elem(0, n);
        c.read(a, &mut b).await?;
        c.compute(Work::BytesScanned, n as u64);
        c.compute(Work::KeyCompare, 1);
        let (klen, _) = self.lengths(a, &b)?;
        Ok(klen == key.len() && &b[HEADER..] == key)
    }

    /// The first of the blocks at `addrs` that holds key `key`: the header and `key.len()` bytes
    /// of every block READ at once ([`crate::doorbell::read_per_node`]: one round trip for up to
    /// [`crate::doorbell::ROUND_READS`] blocks on one memory node), where [`Self::holds_key`]
    /// block after block takes a round trip each. Blocks are immutable once published, so
    /// READing them together sees what READing them one by one would. More bytes when an early
    /// block holds the key; the same when none does (every block must then be read anyway).
    ///
    /// With `value` (a search), each block's first READ ([`Self::first_read_at`]: cut at the end
    /// of its node's region) is taken instead, into `value` itself, and `value` is left holding
    /// the holder's value (empty if none holds the key): the block is not READ again for it,
    /// and nothing is allocated once `value` has grown. A block longer than its first READ has
    /// its rest READ by itself.
    pub async fn first_holding_key<T: Transport>(
        &self,
        c: &Client<T>,
        addrs: &[GlobalAddr],
        key: &[u8],
        value: Option<&mut Vec<u8>>,
    ) -> IndexResult<Option<usize>> {
        let Some(out) = value else { return self.first_holding_key_only(c, addrs, key).await };
        let mut pieces = smallvec::SmallVec::<[(GlobalAddr, usize); CANDIDATES]>::new();
        pieces.extend(addrs.iter().map(|&a| (a, self.first_read_at(c, a))));
        out.clear();
        out.resize(pieces.iter().map(|p| p.1).sum(), 0);
        crate::doorbell::read_per_node(c, &pieces, out).await?;
        c.compute(Work::BytesScanned, out.len() as u64);
        let mut from = 0;
        for (i, &(a, len)) in pieces.iter().enumerate() {
            let block = &out[from..from + len];
            from += len;
            c.compute(Work::KeyCompare, 1);
            let (klen, vlen) = self.lengths(a, block)?;
            if klen != key.len() || block.get(HEADER..HEADER + klen) != Some(key) {
                continue;
            }
            // The holder's bytes to the front, completed if its first READ cut it short, then
            // its value to the front.
            out.copy_within(from - len..from, 0);
            out.truncate(len);
            self.read_rest(c, a, out, HEADER + klen + vlen).await?;
            out.copy_within(HEADER + klen..HEADER + klen + vlen, 0);
            out.truncate(vlen);
            return Ok(Some(i));
        }
        out.clear();
        Ok(None)
    }

    /// [`Self::first_holding_key`] without a value: each block's header and key only.
    async fn first_holding_key_only<T: Transport>(
        &self,
        c: &Client<T>,
        addrs: &[GlobalAddr],
        key: &[u8],
    ) -> IndexResult<Option<usize>> {
        let n = HEADER + key.len();
        let mut b = smallvec::SmallVec::<[u8; 4 * GUESS]>::from_elem(0, n * addrs.len());
        let mut pieces = smallvec::SmallVec::<[(GlobalAddr, usize); CANDIDATES]>::new();
        pieces.extend(addrs.iter().map(|&a| (a, n)));
        crate::doorbell::read_per_node(c, &pieces, &mut b).await?;
        c.compute(Work::BytesScanned, b.len() as u64);
        for (i, (&a, block)) in addrs.iter().zip(b.chunks_exact(n)).enumerate() {
            c.compute(Work::KeyCompare, 1);
            let (klen, _) = self.lengths(a, block)?;
            if klen == key.len() && &block[HEADER..] == key {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The block at `a` whose first READ gave `first`, shorter than the block: `first` copied
    /// into `buf` (cleared first) and the rest READ after it, one READ; where its key and its
    /// value are in `buf` (a scan that READ many blocks' first bytes together).
    pub async fn rest_into<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        first: &[u8],
        buf: &mut Vec<u8>,
    ) -> IndexResult<(Range<usize>, Range<usize>)> {
        let (klen, vlen) = self.lengths(a, first)?;
        let total = HEADER + klen + vlen;
        buf.clear();
        buf.extend_from_slice(first);
        self.read_rest(c, a, buf, total).await?;
        Ok((HEADER..HEADER + klen, HEADER + klen..total))
    }

    /// `buf` holds the first bytes of the block at `a`, which is `total` bytes long: the rest
    /// READ after them, if any (one READ), and `buf` cut to the block.
    async fn read_rest<T: Transport>(
        &self,
        c: &Client<T>,
        a: GlobalAddr,
        buf: &mut Vec<u8>,
        total: usize,
    ) -> IndexResult<()> {
        let have = buf.len();
        if total > have {
            buf.resize(total, 0);
            c.read(a.add(have as u64), &mut buf[have..]).await?;
        }
        buf.truncate(total);
        Ok(())
    }

    /// The key and value lengths in the header `b` starts with, checked against the maxima.
    fn lengths(&self, a: GlobalAddr, b: &[u8]) -> IndexResult<(usize, usize)> {
        if b.len() < HEADER {
            return Err(IndexError::Corrupt(format!("block at {a} ends its node's region")));
        }
        let klen = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
        let vlen = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) as usize;
        if klen > self.max_key || vlen > self.max_value {
            return Err(IndexError::Corrupt(format!("block at {a} claims {klen}+{vlen} bytes")));
        }
        Ok((klen, vlen))
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;

    /// Keys sharing a prefix: the first block holding the key, found in one round trip
    /// whatever its position, none when no block holds it, the header's length checked (a
    /// block of a longer key that starts with it does not hold it).
    #[test]
    fn first_holding_key_reads_every_block_in_one_round_trip() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let blocks = Blocks::new(24, 8);
        run_tasks([async {
            let keys: Vec<Vec<u8>> =
                (0..20).map(|i| format!("user6542{i:03}").into_bytes()).collect();
            let mut addrs = Vec::new();
            for k in &keys {
                addrs.push(blocks.write(&c, k, b"v").await.unwrap());
            }
            addrs.push(blocks.write(&c, b"user6542000x", b"v").await.unwrap());
            for (i, k) in keys.iter().enumerate() {
                let before = c.counts().round_trips;
                assert_eq!(blocks.first_holding_key(&c, &addrs, k, None).await.unwrap(), Some(i));
                assert_eq!(c.counts().round_trips - before, 1, "key {i}");
            }
            let before = c.counts().round_trips;
            let absent = blocks.first_holding_key(&c, &addrs, b"user6542999", None).await.unwrap();
            assert_eq!((absent, c.counts().round_trips - before), (None, 1));
            assert_eq!(
                blocks.first_holding_key(&c, &addrs[1..], b"user6542000", None).await.unwrap(),
                None
            );
            assert_eq!(
                blocks.first_holding_key(&c, &addrs[3..], b"user6542000x", None).await.unwrap(),
                Some(17)
            );
            // With a value: each block's first READ takes it, still one round trip.
            let mut valued = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                valued.push(blocks.write(&c, k, &[i as u8; 8]).await.unwrap());
            }
            let mut out = vec![9; 3];
            for (i, k) in keys.iter().enumerate() {
                let before = c.counts().round_trips;
                let at = blocks.first_holding_key(&c, &valued, k, Some(&mut out)).await.unwrap();
                assert_eq!((at, out.as_slice()), (Some(i), &[i as u8; 8][..]));
                assert_eq!(c.counts().round_trips - before, 1, "key {i} and its value");
            }
            let absent = blocks.first_holding_key(&c, &valued, b"user6542999", Some(&mut out));
            assert_eq!(absent.await.unwrap(), None);
            // A value past the first READ: the rest READ as `value_into` reads it.
            let huge = Blocks::new(24, 3 * MAX_FIRST_READ);
            let big = [
                huge.write(&c, &keys[0], b"v").await.unwrap(),
                huge.write(&c, &keys[1], &[4; 2 * MAX_FIRST_READ]).await.unwrap(),
            ];
            let before = c.counts().round_trips;
            let at = huge.first_holding_key(&c, &big, &keys[1], Some(&mut out)).await.unwrap();
            assert_eq!((at, out.len(), out[0]), (Some(1), 2 * MAX_FIRST_READ, 4));
            assert!(c.counts().round_trips - before > 1, "the long block READ again");
            // A scan's rest: the first READ's bytes, then the rest of the block by itself.
            let first = c.read_vec(big[1], huge.first_read()).await.unwrap();
            let mut whole = Vec::new();
            let before = c.counts().round_trips;
            let (k, v) = huge.rest_into(&c, big[1], &first, &mut whole).await.unwrap();
            assert_eq!(c.counts().round_trips - before, 1);
            assert_eq!((&whole[k], whole[v].len()), (&keys[1][..], 2 * MAX_FIRST_READ));
            let first = c.read_vec(big[0], huge.first_read_at(&c, big[0])).await.unwrap();
            let (k, v) = huge.rest_into(&c, big[0], &first, &mut whole).await.unwrap();
            assert_eq!((&whole[k], &whole[v]), (&keys[0][..], &b"v"[..]));
            // A key held twice: the first block in the order given.
            let again = [addrs[5], addrs[2], addrs[2]];
            assert_eq!(
                blocks.first_holding_key(&c, &again, &keys[2], None).await.unwrap(),
                Some(1)
            );
        }]);
    }

    #[test]
    fn layout_is_pinned_and_reads_take_one_or_two_reads() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let blocks = Blocks::new(16, 200);
        run_tasks([async {
            let a = blocks.write(&c, b"key", b"value").await.unwrap();
            assert!(a.is_aligned(64));
            let raw = c.read_vec(a, HEADER + 16).await.unwrap();
            assert_eq!(&raw[..16], b"\x03\0\0\0\x05\0\0\0keyvalue");
            assert!(raw[16..].iter().all(|&x| x == 0), "padded to header + max_key, zeroed");
            let before = c.counts().round_trips;
            let b = blocks.read(&c, a).await.unwrap();
            assert_eq!((b.key.as_slice(), b.value.as_slice()), (&b"key"[..], &b"value"[..]));
            assert_eq!(c.counts().round_trips - before, 1, "a short block is one READ");
            let long = blocks.write(&c, b"k", &[7; 200]).await.unwrap();
            let before = c.counts().round_trips;
            assert_eq!(blocks.read(&c, long).await.unwrap().value, vec![7; 200]);
            assert_eq!(c.counts().round_trips - before, 1, "past two lines, still one READ");
            let mut out = Vec::new();
            assert!(blocks.value_into(&c, long, Some(b"k"), &mut out).await.unwrap());
            assert_eq!((out.as_slice(), c.counts().round_trips - before), (&[7; 200][..], 2));
            // Past MAX_FIRST_READ, a second READ of the rest.
            let huge = Blocks::new(16, 3 * MAX_FIRST_READ);
            let h = huge.write(&c, b"big", &[3; 2 * MAX_FIRST_READ]).await.unwrap();
            let before = c.counts().round_trips;
            assert_eq!(huge.read(&c, h).await.unwrap().value, vec![3; 2 * MAX_FIRST_READ]);
            assert!(huge.value_into(&c, h, Some(b"big"), &mut out).await.unwrap());
            assert_eq!(out, vec![3; 2 * MAX_FIRST_READ]);
            assert_eq!(c.counts().round_trips - before, 2 + 2, "a block past the cap: two READs");
            let before = c.counts().round_trips;
            assert!(!huge.value_into(&c, h, Some(b"bag"), &mut out).await.unwrap());
            assert!(!huge.value_into(&c, h, Some(b"bi"), &mut out).await.unwrap());
            assert!(out.is_empty());
            assert_eq!(c.counts().round_trips - before, 2, "another key: no second READ");
            let small = huge.write(&c, b"small", b"v").await.unwrap();
            let before = c.counts().round_trips;
            assert!(huge.value_into(&c, small, None, &mut out).await.unwrap());
            assert_eq!(out, b"v", "a short block among long ones: trimmed");
            assert_eq!(c.counts().round_trips - before, 1, "and one READ");
            assert!(blocks.holds_key(&c, a, b"key").await.unwrap());
            assert!(!blocks.holds_key(&c, a, b"kez").await.unwrap());
            assert!(!blocks.holds_key(&c, a, b"ke").await.unwrap());
            // value_if_key: the same READs, the value only for the key.
            let before = c.counts().round_trips;
            assert_eq!(blocks.value_if_key(&c, a, b"key").await.unwrap(), Some(b"value".to_vec()));
            assert_eq!(blocks.value_if_key(&c, a, b"kez").await.unwrap(), None);
            assert_eq!(blocks.value_if_key(&c, a, b"keyy").await.unwrap(), None);
            assert_eq!(c.counts().round_trips - before, 3);
            assert_eq!(blocks.value_if_key(&c, long, b"k").await.unwrap(), Some(vec![7; 200]));
            assert_eq!(blocks.value_if_key(&c, long, b"x").await.unwrap(), None);
            let long_key = Blocks::new(140, 8);
            let lk = long_key.write(&c, &[5; 140], b"v").await.unwrap();
            assert_eq!(
                long_key.value_if_key(&c, lk, &[5; 140]).await.unwrap(),
                Some(b"v".to_vec())
            );
            let mut other = [5; 140];
            other[139] = 6;
            assert_eq!(long_key.value_if_key(&c, lk, &other).await.unwrap(), None);
            // value_into: any key with None, into one reused buffer (left empty on a miss).
            let mut out = vec![9; 3];
            assert!(blocks.value_into(&c, long, None, &mut out).await.unwrap());
            assert_eq!(out, vec![7; 200]);
            assert!(blocks.value_into(&c, a, None, &mut out).await.unwrap());
            assert_eq!(out, b"value");
            assert!(!long_key.value_into(&c, lk, Some(&other), &mut out).await.unwrap());
            assert!(out.is_empty());
            // with_key: the key alone, one READ.
            let before = c.counts().round_trips;
            assert_eq!(blocks.with_key(&c, a, |k| k.to_vec()).await.unwrap(), b"key");
            assert_eq!(long_key.with_key(&c, lk, |k| k.len()).await.unwrap(), 140);
            assert_eq!(c.counts().round_trips - before, 2);
        }]);
    }

    /// A first READ longer than a block stops at the end of its node's region.
    #[test]
    fn a_block_at_the_end_of_the_region_is_read_to_the_end_and_no_further() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let blocks = Blocks::new(16, 1000);
        let size = c.info().node_size(0).unwrap();
        run_tasks([async {
            let a = GlobalAddr::new(0, size - 64);
            c.write(a, b"\x03\0\0\0\x02\0\0\0keyv2").await.unwrap();
            assert!(blocks.first_read() > 64);
            let mut out = Vec::new();
            assert!(blocks.value_into(&c, a, Some(b"key"), &mut out).await.unwrap());
            assert_eq!(out, b"v2");
            let b = blocks.read(&c, a).await.unwrap();
            assert_eq!((b.key.as_slice(), b.value.as_slice()), (&b"key"[..], &b"v2"[..]));
            // Far enough from the end for the long path (a first READ of 200 bytes, past GUESS).
            let near = GlobalAddr::new(0, size - 200);
            c.write(near, b"\x03\0\0\0\x04\0\0\0keyv200").await.unwrap();
            let before = c.counts().round_trips;
            assert!(blocks.value_into(&c, near, Some(b"key"), &mut out).await.unwrap());
            assert_eq!((out.as_slice(), c.counts().round_trips - before), (&b"v200"[..], 1));
            assert!(!blocks.value_into(&c, near, Some(b"kex"), &mut out).await.unwrap());
            // Told apart from another block with a value buffer: each READ cut at the end too.
            let at = blocks.first_holding_key(&c, &[near, a], b"key", Some(&mut out)).await;
            assert_eq!((at.unwrap(), out.as_slice()), (Some(0), &b"v200"[..]));
            let at = blocks.first_holding_key(&c, &[a], b"key", Some(&mut out)).await;
            assert_eq!((at.unwrap(), out.as_slice()), (Some(0), &b"v2"[..]));
            let at = blocks.first_holding_key(&c, &[near, a], b"kez", Some(&mut out)).await;
            assert_eq!((at.unwrap(), out.len()), (None, 0), "no holder: the buffer left empty");
            let last = GlobalAddr::new(0, size - 4);
            assert!(matches!(blocks.read(&c, last).await, Err(IndexError::Corrupt(_))));
            let e = blocks.value_into(&c, last, None, &mut out).await;
            assert!(matches!(e, Err(IndexError::Corrupt(_))), "{e:?}");
            let e = Blocks::new(8, 40).value_into(&c, last, None, &mut out).await;
            assert!(matches!(e, Err(IndexError::Corrupt(_))), "fewer than a header: {e:?}");
            // A short-block index reads from the stack; a block cut by the region's end is
            // refused, not read past it.
            let small = Blocks::new(8, 40);
            let cut = GlobalAddr::new(0, size - 32);
            c.write(cut, b"\x03\0\0\0\x28\0\0\0key").await.unwrap();
            let e = small.value_into(&c, cut, Some(b"key"), &mut out).await;
            assert!(matches!(e, Err(IndexError::Corrupt(_))), "{e:?}");
            c.write(cut, b"\x03\0\0\0\x02\0\0\0keyv2").await.unwrap();
            assert!(small.value_into(&c, cut, Some(b"key"), &mut out).await.unwrap());
            assert_eq!(out, b"v2");
        }]);
    }

    #[test]
    fn nonsense_is_refused() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let blocks = Blocks::new(8, 8);
        run_tasks([async {
            assert!(matches!(
                blocks.write(&c, b"k", &[0; 9]).await,
                Err(IndexError::ValueTooLong { len: 9, max: 8 })
            ));
            assert!(matches!(
                blocks.write(&c, &[1; 9], b"v").await,
                Err(IndexError::KeyTooLong { len: 9, max: 8 })
            ));
            let junk = c.alloc(64, 64).await.unwrap();
            c.write(junk, &[0xFF; 16]).await.unwrap();
            assert!(matches!(blocks.read(&c, junk).await, Err(IndexError::Corrupt(_))));
            assert!(matches!(blocks.holds_key(&c, junk, b"k").await, Err(IndexError::Corrupt(_))));
            // A header with a short key but a value longer than any block's is not a block.
            let bad_value = [1, 0, 0, 0, 9, 0, 0, 0, b'k'];
            assert!(matches!(blocks.parse_key(junk, &bad_value), Err(IndexError::Corrupt(_))));
        }]);
    }

    #[test]
    fn word_aligned_blocks_pack_densely() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let items = Blocks::new(8, 8).aligned(8);
        run_tasks([async {
            let a = items.post_on(&c, 0, &7u64.to_be_bytes(), b"value 01").await.unwrap();
            let b = items.post_on(&c, 0, &8u64.to_be_bytes(), b"value 02").await.unwrap();
            c.flush().await.unwrap();
            assert_eq!(b.offset() - a.offset(), 24, "8 + 8-byte key + 8-byte value");
            let mut out = Vec::new();
            assert!(items.value_into(&c, b, Some(&8u64.to_be_bytes()), &mut out).await.unwrap());
            assert_eq!(out, b"value 02");
            assert!(!items.value_into(&c, a, Some(&8u64.to_be_bytes()), &mut out).await.unwrap());
            let first = c.read_vec(a, items.first_read()).await.unwrap();
            assert_eq!(first.len(), 24);
            let parsed = items.parse(a, &first).unwrap();
            assert_eq!(parsed, Some((&7u64.to_be_bytes()[..], &b"value 01"[..])));
            assert_eq!(items.parse(a, &first[..20]).unwrap(), None, "longer than the bytes");
            assert_eq!(items.parse_key(a, &first[..16]).unwrap(), Some(&7u64.to_be_bytes()[..]));
            assert_eq!(
                items.parse_key(a, &first[..15]).unwrap(),
                None,
                "key longer than the bytes"
            );
            // Keys READ end to end, as a merge or a group's forming READs them.
            let pieces = [(b, 16), (a, 16)];
            let mut buf = c.read_vec(b, 16).await.unwrap();
            buf.extend(c.read_vec(a, 16).await.unwrap());
            let keys: Vec<_> = items.keys_of(&pieces, &buf).map(Result::unwrap).collect();
            assert_eq!(keys, [&8u64.to_be_bytes()[..], &7u64.to_be_bytes()[..]]);
            let cut = [(b, 16), (a, 15)];
            let mut keys = items.keys_of(&cut, &buf[..31]);
            assert!(keys.next().unwrap().is_ok());
            assert!(matches!(keys.next(), Some(Err(IndexError::Corrupt(_)))), "a cut key");
            let short = items.keys_of(&pieces, &buf[..20]).nth(1);
            assert!(matches!(short, Some(Err(IndexError::Corrupt(_)))), "buf shorter than pieces");
        }]);
    }
}
