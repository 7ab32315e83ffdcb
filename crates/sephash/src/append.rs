//! Writes as appends: insert (an upsert), update and delete (a tombstone), §4.3.
//!
//! # The append
//!
//! 1. Post the KV block (zero-wait WRITE on the segment's memory node; it lands before the
//!    CAS below, which goes to the same node on the same connection).
//! 2. One doorbell: the meta, the slots from the sliding offset (one slot before it, to prove
//!    the offset is not past the first free slot), the meta again. Equal metas prove the slots
//!    were read within one generation (a meta does not repeat within 2^20 merges).
//! 3. Post the filter position (zero-wait, same node: it lands before the CAS and after the
//!    read that saw this generation open, so no merge's clearing can undo it).
//! 4. CAS the first free slot from the free word read to the entry. Taken slots are a prefix
//!    (every CAS goes to the first free slot, and a CAS on a slot of an ended generation fails
//!    because ending one takes every slot, and block addresses never repeat), so a key's
//!    newest entry is its last one. A failed CAS moves to the next slot read free.
//!
//! Insert = 2 round trips after the block is posted. The client that takes the last slot
//! closes the segment (a doorbell: the merge record's masked CAS, then the meta's CAS) and, if
//! it won the record, merges it.
//!
//! # Update and delete
//!
//! They must say whether the key existed when they took effect. Step 2 reads every slot from
//! 0 and the key's MainSegment range; the key's state is decided from the entries below the
//! first free slot `p` and the MainSegment (candidate blocks READ: one more round trip). The
//! CAS of slot `p` succeeds only if `p` is still free in the same generation, so nothing was
//! appended and nothing merged since the read: the state decided is the state at the CAS. An
//! absent key is reported without writing (linearised at the read). A CAS lost to another
//! client's entry whose fingerprints match the key starts over. 3 round trips.
//!
//! # Blind updates and deletes (`update=upsert`)
//!
//! The paper's: an update is an insert of the new value and a delete an insert of a tombstone,
//! 2 round trips, linearised at the CAS like an insert. The newest entry of a key is its last
//! slot (searches scan the taken slots newest first) and merges keep it (entries are sorted by
//! fingerprints and age, a slot newer than the one before it and than any MainSegment entry), so
//! a search never returns a superseded copy. An update of an absent key inserts it; a tombstone
//! for an absent key is dropped by the next merge.

use dmindex_fabric::{AtomicOp, BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::IndexResult;
use dmindex_prim::attempts::Attempts;
use dmindex_prim::backoff::Backoff;
use dmindex_prim::lease::{self, WaitWatch};
use dmindex_prim::lock;
use smallvec::SmallVec;

use crate::layout::{decode_entries, Entry, KeyHash, Meta, EDITIONS, RECORD};
use crate::search::{word, SlotWords, Words};
use crate::{bump, Retry, SepHash};

/// What an append does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Insert or overwrite.
    Upsert,
    /// Overwrite if present.
    Update,
    /// Remove if present (a tombstone).
    Delete,
    /// Remove, present or not: a tombstone appended blind (`update=upsert`).
    Tombstone,
}

impl SepHash {
    pub(crate) async fn append<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
        kind: Kind,
    ) -> IndexResult<bool> {
        let kh = KeyHash::of(key);
        c.compute(Work::KeyHash, 1);
        let n = self.shape.cur.n;
        let mut block: Option<GlobalAddr> = None;
        let mut slots: SlotWords = SmallVec::new();
        let mut main: Words = SmallVec::new();
        // Metas that did not own the key or changed during the READs, stale MainSegments and
        // offsets (not merges waited out, nor CASes lost to other appends).
        let mut attempts = Attempts::new();
        'op: loop {
            let t = self.target(c, kh).await?;
            let node = t.seg.node();
            let conditional = matches!(kind, Kind::Update | Kind::Delete);
            let offset = (t.offset as usize).min(n);
            let from = if conditional { 0 } else { offset.saturating_sub(1) };
            let to = (offset.max(from) + self.shape.window).min(n);
            slots.clear();
            slots.resize(8 * (to - from), 0);
            main.clear();
            if conditional {
                main.resize(8 * (t.main.hi - t.main.lo) as usize, 0);
            }
            let (mut head, mut after) = ([0u8; 16], [0u8; 8]);
            {
                let mut ops: SmallVec<[BatchOp<'_>; 4]> = SmallVec::new();
                ops.push(BatchOp::Read { addr: t.seg, buf: &mut head });
                ops.push(BatchOp::Read {
                    addr: t.seg.add(self.shape.cur.slot(from)),
                    buf: &mut slots,
                });
                if !main.is_empty() {
                    ops.push(BatchOp::Read { addr: t.main.range_addr(node), buf: &mut main });
                }
                // Last: an unchanged meta proves the slots (and the MainSegment, whose memory is
                // reused once replaced) were read within one generation.
                ops.push(BatchOp::Read { addr: t.seg, buf: &mut after });
                c.batch(&mut ops).await?;
            }
            let meta = Meta(word(&head, 0));
            if word(&after, 0) != meta.0 {
                attempts.failed(t.seg, "segment meta around the slots' READ")?;
                self.counters.retry(Retry::MetaMoved);
                continue;
            }
            if !meta.owns(t.suffix, kh.h) {
                attempts.failed(t.seg, "segment meta's depth and suffix")?;
                self.counters.retry(Retry::ForeignSegment);
                self.refresh_dir(c, kh).await?;
                continue;
            }
            if conditional && meta.main_id() != t.main.id {
                attempts.failed(t.seg, "segment meta's MainSegment")?;
                self.counters.retry(Retry::StaleMain);
                self.refresh_main(c, t.seg, meta).await?;
                continue;
            }
            if meta.closed() {
                // A merge holds the segment: wait for it to reopen, reading only the meta, with
                // backoff between READs (a merge takes a few doorbells; a waiter that READ at
                // network pace took memory-node and CPU time from the merger). One count per
                // wait and one for its READs: a counter bumped per READ is a shared cache line
                // every waiting client writes. A wait that lasts judges the merger, and repairs
                // what it left if it died ([`crate::recover`]).
                let mut backoff = Backoff::new();
                let mut watch = WaitWatch::new();
                // Ends when the meta changes: the merge reopened the segment (its merger's, or
                // a repairer's once the merger was judged dead).
                while c.read_word(t.seg).await? == meta.0 {
                    backoff.failed(c, t.seg, "closed segment meta").await?;
                    self.judge_closed(c, t.seg, t.suffix, meta, &mut watch).await?;
                }
                bump(&self.counters.closed_waits, 1);
                bump(&self.counters.closed_wait_reads, u64::from(backoff.looks()) + 1);
                continue;
            }
            let read = |j: usize| Entry(word(&slots, 8 * j));
            if from > 0 && !meta.holds(read(0)) {
                // The offset is past the first free slot (the segment was merged since).
                attempts.failed(t.seg, "slot before the sliding offset")?;
                self.cache.set_offset(t.seg, 0);
                self.counters.retry(Retry::OffsetPastFree);
                continue;
            }
            let Some(first) = decode_entries(&slots).position(|e| !meta.holds(e)) else {
                if to == n {
                    self.close_and_merge(c, t.seg, t.suffix, meta).await?;
                } else {
                    self.cache.set_offset(t.seg, to as u32);
                }
                continue;
            };
            let mut p = from + first;
            if conditional && !self.present(c, key, kh, &slots[..8 * first], &main).await? {
                return Ok(false);
            }
            let at = match block {
                Some(b) if b.node() == node => b,
                Some(b) => {
                    // Published on another node than it was posted to: wait until it landed.
                    c.flush().await?;
                    b
                }
                None => {
                    let b = self.blocks.post_on(c, node, key, value).await?;
                    if !self.shape.zero_wait {
                        c.flush().await?;
                    }
                    block = Some(b);
                    b
                }
            };
            let entry = Entry::new(
                meta.sign(),
                kh.dep(meta.depth()),
                kh.fp(),
                kh.fp2(),
                matches!(kind, Kind::Delete | Kind::Tombstone),
                at,
            );
            if self.shape.cur.positions > 0 {
                let f = t.seg.add(self.shape.cur.filter(kh.filter(self.shape.cur.positions)));
                if self.shape.zero_wait {
                    c.write_zero_wait(f, &[1])?;
                } else {
                    c.write(f, &[1]).await?;
                }
            }
            loop {
                let expected = read(p - from);
                let old =
                    Entry(c.cas(t.seg.add(self.shape.cur.slot(p)), expected.0, entry.0).await?);
                if old == expected {
                    self.cache.set_offset(t.seg, (p + 1) as u32);
                    if p + 1 == n {
                        // Took the last slot: this client merges (the paper's rule).
                        self.close_and_merge(c, t.seg, t.suffix, meta).await?;
                    }
                    return Ok(true);
                }
                self.counters.retry(Retry::CasLost);
                if !meta.holds(old) || (conditional && kh.matches(old)) || p + 1 >= to {
                    self.cache.set_offset(t.seg, (p + 1).min(n) as u32);
                    continue 'op;
                }
                p += 1;
            }
        }
    }

    /// Whether `key` is present given the CurSegment entries `prefix` (oldest first) and the
    /// MainSegment entries `main` that may hold it: the newest entry with the key decides.
    async fn present<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        kh: KeyHash,
        prefix: &[u8],
        main: &[u8],
    ) -> IndexResult<bool> {
        // The CurSegment's entries before the first free slot, newest first.
        let cur = decode_entries(prefix).rev().filter(|&e| kh.matches(e));
        for e in cur.chain(decode_entries(main).filter(|&e| kh.matches(e))) {
            if self.blocks.holds_key(c, e.block(), key).await? {
                return Ok(!e.tombstone());
            }
        }
        Ok(false)
    }

    /// Closes the open segment `seg` (suffix `suffix`) whose meta was `meta` and, if this
    /// client won the generation's merge record, merges it. One doorbell: the masked CAS that
    /// claims the record (its tag must still be the previous edition), then the CAS that closes
    /// the meta; the record's winner merges whoever's CAS closed it (see [`crate::layout`]).
    pub(crate) async fn close_and_merge<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        suffix: u64,
        meta: Meta,
    ) -> IndexResult<()> {
        let member = lease::renew_if_due(c).await?;
        let mine = lock::held_word(member, meta.edition());
        let prev = u64::from(meta.prev_edition());
        let mut ops = [
            BatchOp::atomic(
                seg.add(RECORD),
                AtomicOp::MaskedCas {
                    compare: prev,
                    compare_mask: EDITIONS,
                    swap: mine,
                    swap_mask: u64::MAX,
                },
            ),
            BatchOp::atomic(seg, AtomicOp::Cas { expected: meta.0, new: meta.close().0 }),
        ];
        c.batch(&mut ops).await?;
        let BatchOp::Atomic { old: record, .. } = ops[0] else { unreachable!("an atomic") };
        if record & EDITIONS == prev {
            self.merge(c, seg, suffix, meta.close(), mine, false).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use dmindex_index::{IndexConfig, PointIndex};
    use dmindex_prim::backoff::CAP_NS;
    use dmindex_sim::{NetParams, Sim, SimConfig, Task};

    use super::*;

    /// A writer that finds its segment closed waits for the merge with backoff: over 2 ms of
    /// virtual time it READs the meta a few dozen times (one READ per round trip would be
    /// ~800), writes nothing, and its insert lands once the segment reopens.
    #[test]
    fn a_closed_segment_is_waited_on_with_backoff() {
        let sim = Sim::new(SimConfig {
            node_size: 64 << 20,
            chunk_size: 1 << 20,
            ..SimConfig::new(5, NetParams::chime_testbed())
        })
        .unwrap();
        let (writer, merger) = (sim.client_on_own_thread(0), sim.client_on_own_thread(0));
        let idx = sim
            .block_on(async { SepHash::create(&writer, &IndexConfig::default(), 0).await })
            .unwrap();
        let key = 7u64.to_le_bytes();
        let seg = sim.block_on(async { idx.target(&writer, KeyHash::of(&key)).await.unwrap().seg });
        let open = sim.block_on(async { merger.read_word(seg).await.unwrap() });
        sim.block_on(async { merger.write(seg, &Meta(open).close().0.to_le_bytes()).await })
            .unwrap();
        let before = writer.counts();
        let (reopened_at, inserted_at) = (Cell::new(0), Cell::new(0));
        let out = sim.run([
            Box::pin(async {
                idx.insert(&writer, &key, &[1; 8]).await.unwrap();
                inserted_at.set(sim.now_ns());
            }) as Task,
            Box::pin(async {
                // The "merge": the segment stays closed for 2 ms, then reopens as it was.
                merger.pause(2_000_000).await;
                merger.write(seg, &open.to_le_bytes()).await.unwrap();
                reopened_at.set(sim.now_ns());
            }),
        ]);
        assert!(out.all_finished(), "{out:?}");
        let d = writer.counts() - before;
        let waits = idx.counters.closed_wait_reads.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(idx.counters.closed_waits.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!((25..=60).contains(&waits), "{waits} READs of the closed meta in 2 ms");
        assert!(d.pauses + 5 >= waits, "every look after the first few paused: {d:?}");
        // Seen within one pause (plus a round trip) of the reopening.
        let late = inserted_at.get() - reopened_at.get();
        assert!(late < CAP_NS + 30_000, "insert done {late} ns after the segment reopened");
        let got = sim.block_on(async { idx.search(&writer, &key).await.unwrap() });
        assert_eq!(got.as_deref(), Some(&[1u8; 8][..]));
    }
}
