//! Segment merge and split (§4.2.2), run by the client whose CAS closed the segment.
//!
//! # Merge
//!
//! The client that closed the segment and won its merge record merges it ([`crate::layout`]).
//! The closed segment takes no appends (every slot is taken and the meta is closed), so its
//! slots and MainSegment `M` are stable. One doorbell READs the header, the slots and `M`'s
//! header, a second `M`'s entries. Entries are grouped by (fp, fp2); only groups with more than
//! one entry have their keys READ from their blocks (doorbells per memory node). Per key the
//! newest entry wins (a later slot over an earlier one, any slot over `M`); a tombstone
//! removes its key. The survivors, sorted by fingerprint, become a fresh MainSegment `M'`
//! (record points in its header), WRITTEN and awaited; then one doorbell rewrites the filter
//! lines (tagged with the new meta, positions clear) and writes the meta open with `M'` and the
//! sign flipped, which empties the CurSegment at once. Readers of the meta see either the closed
//! meta with `M` and the full slots, or the open meta with `M'`; a search, which reads a filter
//! line's tag instead, may see the new tag a little earlier, when `M'` is complete already.
//!
//! # Split
//!
//! When `M'` would exceed `main_ratio` × slots entries and the segment is shallower than
//! `max_depth`, its entries are dealt by hash bit `l` (the local depth), which is bit `l mod 4`
//! of each entry's depth bits; when `l + 1` starts a new round of 4, every key is READ to fill
//! in the new round's bits. Then, in this order, each step awaited (they may be on different
//! memory nodes):
//!
//! 1. the new segment B (suffix + 2^l, depth l + 1) and its MainSegment, B *closed*, its filter
//!    lines tagged with the meta it will open with;
//! 2. B's directory entry (and the global depth, by CAS, if it grew);
//! 3. the old segment A: its MainSegment, the filter lines rewritten, the meta open with depth
//!    l + 1;
//! 4. B's meta open.
//!
//! Until 3, clients reaching A read the old content (A closed); from 2, clients reaching B read
//! the same content through B (closed, empty slots, B's MainSegment); so no client can see a
//! write to one half that the other half misses, and nothing is written until both are in
//! place. B is born with a merge record naming the splitter, so a client waiting on B judges
//! who must open it. A client stopped between steps leaves a half closed: reads go on, writes
//! to that half wait until the waiters judge it dead, and then one of them merges (or splits)
//! in its place ([`crate::recover`]). No acknowledged write is ever lost: the old slots and
//! MainSegment are never changed, only replaced.

use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::kv_block::HEADER;
use smallvec::SmallVec;

use dmindex_prim::lease;
use dmindex_prim::lock::{self, holder};

use crate::fptable;
use crate::layout::{
    decode_entries, encode_main, Entry, KeyHash, MainHeader, Meta, Point, EDITIONS, RECORD,
};
use crate::search::word;
use crate::{bump, SepHash};

/// A segment this client closed, as its merge read it.
struct Held<'a> {
    seg: GlobalAddr,
    closed: Meta,
    suffix: u64,
    /// The merge record this client holds it with.
    record: u64,
    /// Whether this client took the merge over from a dead one (a split may be half done).
    repairing: bool,
    old_main: MainHeader,
    slots: &'a [u8],
}

impl SepHash {
    /// Merges `seg` (suffix `suffix`), which this client holds closed as `closed` with merge
    /// record `record`; `repairing`: taken over from a dead merger, whose split may be half
    /// done ([`crate::recover`]).
    pub(crate) async fn merge<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        suffix: u64,
        closed: Meta,
        record: u64,
        repairing: bool,
    ) -> IndexResult<()> {
        bump(&self.counters.merges, 1);
        let node = seg.node();
        let n = self.shape.cur.n;
        let mut head = [0u8; 16];
        let mut slots = vec![0u8; 8 * n];
        let mut mhead = [0u8; 8];
        let main_at = GlobalAddr::new(node, closed.main());
        {
            let mut ops = vec![
                BatchOp::Read { addr: seg, buf: &mut head },
                BatchOp::Read { addr: seg.add(self.shape.cur.slot(0)), buf: &mut slots },
            ];
            if closed.main() != 0 {
                ops.push(BatchOp::Read { addr: main_at, buf: &mut mhead });
            }
            c.batch(&mut ops).await?;
        }
        if word(&head, 0) != closed.0 || word(&head, 8) != record {
            return Err(IndexError::Corrupt(format!(
                "segment {seg} changed while closed by this client"
            )));
        }
        let mh = MainHeader::decode(&mhead);
        let mut old = vec![0u8; 8 * mh.entries as usize];
        if !old.is_empty() {
            c.read(main_at.add(mh.entries_at()), &mut old).await?;
        }
        bump(&self.counters.resize_bytes, (16 + slots.len() + 8 + old.len()) as u64);

        // Every entry with its age: slot i is newer than slot i - 1, any slot newer than M.
        let mut all: Vec<(Entry, u32)> = decode_entries(&slots)
            .take_while(|&e| closed.holds(e))
            .enumerate()
            .map(|(i, e)| (e, i as u32 + 1))
            .chain(decode_entries(&old).map(|e| (e, 0)))
            .collect();
        all.sort_unstable_by_key(|&(e, age)| (e.fps(), std::cmp::Reverse(age)));
        let survivors = self.newest_per_key(c, &all).await?;

        let depth = closed.depth();
        if survivors.len() <= self.shape.main_limit() || depth >= self.shape.max_depth {
            let (m, h, points) = self.write_main(c, node, &survivors, &mut Vec::new()).await?;
            let open = Meta::new(!closed.sign(), false, depth, closed.next_edition(), m);
            self.reopen(c, seg, open, &slots).await?;
            self.cache.learn_main(seg, open.main_id(), h, &points);
            self.free_main(main_at, &mh);
            return Ok(());
        }
        let held = Held { seg, closed, suffix, record, repairing, old_main: mh, slots: &slots };
        self.split(c, held, survivors).await
    }

    /// The newest entry of each key among `all` (sorted by fingerprints, newest first within),
    /// without tombstones, with sign 0, in fingerprint order.
    async fn newest_per_key<T: Transport>(
        &self,
        c: &Client<T>,
        all: &[(Entry, u32)],
    ) -> IndexResult<Vec<Entry>> {
        // MainSegment entries are distinct keys already: keys are read only in groups of equal
        // fingerprints that hold a CurSegment entry and some other entry.
        let groups = || {
            let mut i = 0;
            std::iter::from_fn(move || {
                let fps = all.get(i)?.0.fps();
                let j = i + all[i..].iter().take_while(|(e, _)| e.fps() == fps).count();
                let g = i..j;
                i = j;
                Some(g)
            })
        };
        let needs_keys = |g: &std::ops::Range<usize>| g.len() > 1 && all[g.start].1 > 0;
        let shared: Vec<Entry> =
            groups().filter(needs_keys).flat_map(|g| all[g].iter().map(|&(e, _)| e)).collect();
        let keys = self.read_keys(c, &shared).await?;
        let mut out = Vec::with_capacity(all.len());
        let mut k = 0;
        for g in groups() {
            if !needs_keys(&g) {
                // One entry, or MainSegment entries only (newest first puts CurSegment entries,
                // which have ages > 0, at the front).
                out.extend(
                    all[g].iter().filter(|(e, _)| !e.tombstone()).map(|(e, _)| e.with_sign(false)),
                );
                continue;
            }
            let k0 = k;
            k += g.len();
            for (x, &(e, _)) in all[g].iter().enumerate() {
                let newer = (0..x).any(|y| keys.key(k0 + y) == keys.key(k0 + x));
                if !newer && !e.tombstone() {
                    out.push(e.with_sign(false));
                }
            }
        }
        Ok(out)
    }

    /// READs the keys of `entries`' blocks, in doorbells of up to 16 per memory node, into one
    /// buffer (a merge reads many: two allocations for all of them, not two each).
    async fn read_keys<T: Transport>(&self, c: &Client<T>, entries: &[Entry]) -> IndexResult<Keys> {
        bump(&self.counters.merge_key_reads, entries.len() as u64);
        let stride = HEADER + self.shape.max_key;
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].block().node());
        // Entry `order[j]`'s block lands at `flat[j * stride ..]`.
        let mut flat = vec![0u8; stride * entries.len()];
        let mut chunks = flat.chunks_exact_mut(stride);
        let mut j = 0;
        while j < order.len() {
            let node = entries[order[j]].block().node();
            let end = j + order[j..]
                .iter()
                .take(MAX_BATCH)
                .take_while(|&&i| entries[i].block().node() == node)
                .count();
            let mut ops: SmallVec<[BatchOp<'_>; MAX_BATCH]> = chunks
                .by_ref()
                .take(end - j)
                .zip(&order[j..end])
                .map(|(b, &i)| BatchOp::Read { addr: entries[i].block(), buf: b })
                .collect();
            c.batch(&mut ops).await?;
            j = end;
        }
        bump(&self.counters.resize_bytes, (stride * entries.len()) as u64);
        let mut at = vec![(0usize, 0usize); entries.len()];
        for (j, &i) in order.iter().enumerate() {
            let b = &flat[j * stride..(j + 1) * stride];
            let a = entries[i].block();
            // The blocks' own parser checks the header (both lengths); the READ covered the
            // longest key, so a key it accepts is in `b`. An empty key is no SepHash key.
            let klen = match self.blocks.parse_key(a, b)? {
                Some(key) if !key.is_empty() => key.len(),
                _ => return Err(IndexError::Corrupt(format!("block at {a} holds no key"))),
            };
            at[i] = (j * stride + HEADER, klen);
        }
        Ok(Keys { flat, at })
    }

    /// WRITEs a fresh MainSegment of `entries` on `node`; returns its offset, header and points.
    async fn write_main<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        entries: &[Entry],
        buf: &mut Vec<u8>,
    ) -> IndexResult<(u64, MainHeader, Vec<Point>)> {
        let mut points = Vec::new();
        fptable::build(entries.iter().map(|e| e.fp()), entries.len() as u32, &mut points);
        encode_main(entries, &points, buf);
        let at = self.alloc_main(c, node, buf.len() as u64).await?;
        c.write(at, buf).await?;
        bump(&self.counters.resize_bytes, buf.len() as u64);
        let h = MainHeader { entries: entries.len() as u32, points: points.len() as u16 };
        Ok((at.offset(), h, points))
    }

    /// Memory for a MainSegment of `bytes` on `node`: a replaced one of the same size class if
    /// this node has one, else fresh memory of the whole class.
    ///
    /// Classes are powers of two: a merge's MainSegment is always larger than the one it
    /// replaces, so memory of exactly the replaced size would fit almost no later merge and
    /// garbage would pile up (100 M keys overflowed a 14 GB memory node that way); with classes
    /// every merge of a segment between half and full size (all of them, with the default
    /// shape) takes a replaced one back. At most half of a class is slack.
    async fn alloc_main<T: Transport>(
        &self,
        c: &Client<T>,
        node: u16,
        bytes: u64,
    ) -> IndexResult<GlobalAddr> {
        let class = main_class(bytes);
        let reused =
            self.free_mains.lock().expect("free list").get_mut(&(node, class)).and_then(Vec::pop);
        if let Some(at) = reused {
            bump(&self.counters.mains_reused, 1);
            return Ok(at);
        }
        Ok(c.alloc_on(node, 1 << class, 64).await?)
    }

    /// Hands the replaced MainSegment at `at` to later merges on this node. Safe because
    /// readers check the meta after they read a MainSegment, and a segment's meta words do not
    /// repeat within 2^20 of its merges (the edition).
    fn free_main(&self, at: GlobalAddr, h: &MainHeader) {
        if at.offset() != 0 {
            let key = (at.node(), main_class(h.bytes()));
            self.free_mains.lock().expect("free list").entry(key).or_default().push(at);
        }
    }

    /// Rewrites `seg`'s filter lines, cleared and tagged `open`, then writes its meta `open`:
    /// one doorbell. Without the paper's entry layout (no sign bit) a merge must also rewrite
    /// every slot to empty it: that WRITE is charged (of the slots' own bytes, so that
    /// correctness still rests on the sign).
    async fn reopen<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        open: Meta,
        slots: &[u8],
    ) -> IndexResult<()> {
        let mut lines = Vec::new();
        self.shape.cur.encode_filter(open, &mut lines);
        let meta = open.0.to_le_bytes();
        let mut ops = Vec::with_capacity(3);
        if !self.shape.entry_layout {
            ops.push(BatchOp::Write { addr: seg.add(self.shape.cur.slot(0)), data: slots });
        }
        if !lines.is_empty() {
            let at = seg.add(self.shape.cur.filter_lines());
            ops.push(BatchOp::Write { addr: at, data: &lines });
        }
        ops.push(BatchOp::Write { addr: seg, data: &meta });
        c.batch(&mut ops).await?;
        Ok(())
    }

    /// Writes a new segment's filter lines tagged `open`, then its meta `meta` (open or
    /// closed) and merge record `record`: one doorbell, before anything names the segment.
    pub(crate) async fn write_head<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        meta: Meta,
        open: Meta,
        record: u64,
    ) -> IndexResult<()> {
        let mut lines = Vec::new();
        self.shape.cur.encode_filter(open, &mut lines);
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&meta.0.to_le_bytes());
        head[8..].copy_from_slice(&record.to_le_bytes());
        let mut ops = Vec::with_capacity(2);
        if !lines.is_empty() {
            let at = seg.add(self.shape.cur.filter_lines());
            ops.push(BatchOp::Write { addr: at, data: &lines });
        }
        ops.push(BatchOp::Write { addr: seg, data: &head });
        c.batch(&mut ops).await?;
        Ok(())
    }

    async fn split<T: Transport>(
        &self,
        c: &Client<T>,
        held: Held<'_>,
        entries: Vec<Entry>,
    ) -> IndexResult<()> {
        let Held { seg, closed, suffix, record, repairing, old_main, slots } = held;
        bump(&self.counters.splits, 1);
        lease::renew_if_due(c).await?;
        let l = closed.depth();
        let b_suffix = suffix | 1 << l;
        // A dead merger may have created B already (its directory entry is written once B is
        // whole): then B is taken as it is, and only A is redone.
        let existing = if repairing { c.read_word(self.dir_entry(b_suffix)).await? } else { 0 };
        // Hash bit l is bit l mod 4 of the depth bits each entry carries (round l / 4).
        let (mut a, mut b): (Vec<Entry>, Vec<Entry>) =
            entries.iter().partition(|e| (e.dep() >> (l % 4)) & 1 == 0);
        if existing != 0 {
            b.clear();
        }
        if !self.shape.entry_layout {
            // Without depth bits every split reads every key (the result is the same).
            self.read_keys(c, &entries).await?;
        }
        if (l + 1) % 4 == 0 {
            // The round is used up: read the keys for the next round's bits (the paper's one
            // KV read per entry every fourth split).
            for half in [&mut a, &mut b] {
                let keys = self.read_keys(c, half).await?;
                for (i, e) in half.iter_mut().enumerate() {
                    let kh = KeyHash::of(keys.key(i));
                    debug_assert_eq!(kh.dep(l) >> (l % 4) & 1, e.dep() >> (l % 4) & 1);
                    *e = e.with_dep(kh.dep(l + 1));
                }
            }
        }
        // B is born closed, its record naming this client (tagged the edition before B's
        // first), so that a client waiting on B judges who must open it.
        let member = holder(record).expect("a merge record names its holder");
        let born = lock::held_word(member, EDITIONS as u32);
        let mut buf = Vec::new();
        let (b_seg, b_open, b_view) = if existing != 0 {
            let b_seg = GlobalAddr::from_raw(existing);
            let mut head = [0u8; 16];
            c.read(b_seg, &mut head).await?;
            let b_meta = Meta(word(&head, 0));
            if !b_meta.closed() {
                return Err(IndexError::Corrupt(format!(
                    "segment {b_seg} is open while the split that makes it is not done"
                )));
            }
            // Only holders of A's record write B's while A is not split: the record names a
            // fenced predecessor of this client.
            c.cas(b_seg.add(RECORD), word(&head, 8), born).await?;
            (b_seg, b_meta.open(), None)
        } else {
            let b_node = (b_suffix % c.info().nodes() as u64) as u16;
            let b_seg = c.alloc_on(b_node, self.shape.cur.bytes(), 64).await?;
            // 1. B and its MainSegment, B closed.
            let (mb, hb, pb) = self.write_main(c, b_node, &b, &mut buf).await?;
            let b_open = Meta::new(true, false, l + 1, 0, mb);
            self.write_head(c, b_seg, b_open.close(), b_open, born).await?;
            // 2. B's directory entry.
            c.write(self.dir_entry(b_suffix), &b_seg.raw().to_le_bytes()).await?;
            (b_seg, b_open, Some((hb, pb)))
        };
        // 2. The global depth if it grew.
        let mut gd = c.read_word(self.dir).await?;
        // Ends when the depth word is deep enough: each failed CAS saw another split deepen it.
        while gd < (l + 1) as u64 {
            let seen = c.cas(self.dir, gd, (l + 1) as u64).await?;
            if seen == gd {
                break;
            }
            gd = seen;
        }
        // 3. A: its MainSegment, then reopened one level deeper.
        let (ma, ha, pa) = self.write_main(c, seg.node(), &a, &mut buf).await?;
        let a_open = Meta::new(!closed.sign(), false, l + 1, closed.next_edition(), ma);
        self.reopen(c, seg, a_open, slots).await?;
        // 4. B open.
        c.write(b_seg, &b_open.0.to_le_bytes()).await?;
        self.cache.learn_entry(b_suffix as usize, b_seg.raw());
        self.cache.learn_main(seg, a_open.main_id(), ha, &pa);
        self.free_main(GlobalAddr::new(seg.node(), closed.main()), &old_main);
        if let Some((hb, pb)) = b_view {
            self.cache.learn_main(b_seg, b_open.main_id(), hb, &pb);
        }
        Ok(())
    }
}

/// The size class (log2 of the bytes allocated) of a MainSegment of `bytes`.
fn main_class(bytes: u64) -> u32 {
    bytes.max(64).next_power_of_two().trailing_zeros()
}

/// Keys read from blocks, in one buffer: key `i` is `flat[at[i].0 ..][.. at[i].1]`.
struct Keys {
    flat: Vec<u8>,
    at: Vec<(usize, usize)>,
}

impl Keys {
    fn key(&self, i: usize) -> &[u8] {
        let (at, len) = self.at[i];
        &self.flat[at..at + len]
    }
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
    use dmindex_index::{IndexConfig, PointIndex};

    use super::*;

    /// A merge reads keys from blocks through the blocks' one parser: a block whose header
    /// claims a value longer than the index holds is no block (a stray pointer), and a merge
    /// must refuse it as corrupt rather than take its key and carry the entry into the new
    /// MainSegment, where only a later search would find out. Keys from one byte to the
    /// longest, next to the longest value, are read whole; an empty key is no SepHash key.
    #[test]
    fn merges_read_keys_through_the_block_parser() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        let cfg = IndexConfig { max_key: 16, max_value: 32, ..IndexConfig::default() };
        run_tasks([async {
            let idx = SepHash::create(&c, &cfg, 0).await.unwrap();
            let entry = |block| Entry::new(false, 0, 0, 0, false, block);
            // A block as written by hand: key length, value length, key, zeroed value.
            let raw = |klen: u32, vlen: u32, key: &[u8]| {
                let mut b = klen.to_le_bytes().to_vec();
                b.extend_from_slice(&vlen.to_le_bytes());
                b.extend_from_slice(key);
                b.resize(HEADER + 16 + 32, 0);
                b
            };
            for klen in [1, 8, 16] {
                let key = vec![b'k'; klen];
                let a = idx.blocks.write(&c, &key, &[7; 32]).await.unwrap();
                let keys = idx.read_keys(&c, &[entry(a)]).await.unwrap();
                assert_eq!(keys.key(0), key, "a {klen}-byte key next to the longest value");
            }
            for (what, block) in [
                ("a value longer than the index holds", raw(3, 33, b"abc")),
                ("a value length no block has", raw(3, u32::MAX, b"abc")),
                ("a key longer than the index holds", raw(17, 1, &[b'k'; 17])),
                ("an empty key", raw(0, 1, b"")),
            ] {
                let a = c.alloc(block.len() as u64, 64).await.unwrap();
                c.write(a, &block).await.unwrap();
                let got = idx.read_keys(&c, &[entry(a)]).await.map(|k| k.key(0).to_vec());
                assert!(matches!(got, Err(IndexError::Corrupt(_))), "{what}: {got:?}");
            }
        }]);
    }
}
