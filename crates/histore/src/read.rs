//! A client's reads: GET through the primary's hash table or by request to a skiplist, SCAN by
//! request to skiplists with the items read after, each validated against the group's view word
//! after it read ([`crate::route`] and `dmindex_prim::view` say why), each one attempt in one
//! view that either answers or says how it missed.

use std::ops::Range;
use std::sync::atomic::Ordering;

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult, ScanBuf};
use dmindex_prim::attempts::Attempts;
use dmindex_prim::doorbell;
use dmindex_prim::kv_block;
use dmindex_prim::view::View;
use smallvec::SmallVec;

use crate::layout::{self, Place, Slot, BUCKET};
use crate::proto::{self, Put};
use crate::route::{status, Miss};
use crate::{ScanReads, Store, SERVICE};

impl<const MODE: u8> Store<MODE> {
    /// Bytes to READ for the item `s` names: all of it, but no more than the longest item this
    /// store holds (a slot counts whole 64-byte lines).
    fn item_len(&self, s: Slot) -> usize {
        s.bytes().min(kv_block::HEADER + self.config.max_key + self.config.max_value)
    }

    /// A replica of view `v` answering requests (LOOKUP, SCAN), spread over its skiplists.
    pub(crate) fn pick(&self, g: usize, v: View) -> Result<usize, Miss> {
        // Round robin over the handle's requests. (Adding the client's ordinal, as before, made
        // clients that take turns in ordinal order all pick the same replica: a SCAN run sent
        // 98 % of its requests to one backup.)
        let n = self.counters.picks.fetch_add(1, Ordering::Relaxed);
        let count = self.mode.sorted_replicas().filter(|&r| v.has(r)).count() as u64;
        if count == 0 {
            return Err(Miss::Fatal(IndexError::Fabric(
                dmindex_fabric::FabricError::Unavailable {
                    node: self.desc.groups[g].nodes[v.leader as usize],
                    reason: format!("no skiplist replica of group {g} is left to answer"),
                },
            )));
        }
        Ok(self
            .mode
            .sorted_replicas()
            .filter(|&r| v.has(r))
            .nth((n % count) as usize)
            .expect("counted"))
    }

    /// Checks that group `g`'s view word `word` (read after the data) is still `v`.
    fn still(&self, v: View, word: &[u8; 8]) -> Result<(), Miss> {
        match View::decode(u64::from_le_bytes(*word)) == v {
            true => Ok(()),
            false => Err(Miss::Stale),
        }
    }

    /// READs the item `s` points to and, when `check`, group `g`'s view word in the same round
    /// trip (one doorbell, or two rung together if another node holds the item); whether the
    /// item holds `key` (its value then in `out`).
    async fn item_checked<T: Transport>(
        &self,
        c: &Client<T>,
        s: Slot,
        key: &[u8],
        out: &mut Vec<u8>,
        check: Option<(usize, View)>,
    ) -> Result<bool, Miss> {
        let mut buf = SmallVec::<[u8; 256]>::from_elem(0, self.item_len(s));
        let mut word = [0u8; 8];
        match check {
            None => c.read(s.item, &mut buf).await?,
            Some((g, _)) => {
                let at = self.view_word(g).at;
                // One doorbell if both are on one node, else two rung together: one round
                // trip either way.
                let mut ops = [
                    BatchOp::Read { addr: s.item, buf: &mut buf },
                    BatchOp::Read { addr: at, buf: &mut word },
                ];
                c.doorbells(&mut ops).await?;
            }
        }
        if let Some((_, v)) = check {
            self.still(v, &word)?;
        }
        let Some((k, value)) = self.items.parse(s.item, &buf)? else {
            return Err(Miss::Fatal(IndexError::Corrupt(format!(
                "item at {} is longer than its slot",
                s.item
            ))));
        };
        if k != key {
            return Ok(false);
        }
        out.extend_from_slice(value);
        Ok(true)
    }

    /// Checks group `g`'s view word alone (a read that found nothing).
    async fn view_checked<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        v: View,
    ) -> Result<(), Miss> {
        if self.validates() && self.view_word(g).load(c).await? != v {
            return Err(Miss::Stale);
        }
        Ok(())
    }

    /// GET in group `g`'s view `v`: through its primary's hash table if it keeps one, else by
    /// request to a skiplist replica; validated against the view word after the read. A chain
    /// link to another memory node than the table's, or to a misaligned bucket, or a chain that
    /// does not end ([`Attempts`]), is garbage in the table: a corrupt index.
    pub(crate) async fn get_in<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        place: Place,
        v: View,
        out: &mut Vec<u8>,
    ) -> Result<bool, Miss> {
        out.clear();
        let table = self.table(place.group, v.leader as usize);
        if table == 0 {
            return self.get_by_request(c, key, place, v, out).await;
        }
        let check = self.validates().then_some((place.group, v));
        let node = self.desc.groups[place.group].nodes[v.leader as usize];
        let mut bucket = GlobalAddr::new(node, table + place.bucket * BUCKET);
        let mut hops = Attempts::new();
        loop {
            let mut b = [0u8; BUCKET as usize];
            c.read(bucket, &mut b).await?;
            self.counters.bucket_reads.bump(c.ordinal());
            let (slots, next) = layout::bucket(&b);
            for word in slots {
                let Some(s) = Slot::decode(word).filter(|s| s.signature == place.signature) else {
                    continue;
                };
                if self.item_checked(c, s, key, out, check).await? {
                    return Ok(true);
                }
                self.counters.signature_misses.fetch_add(1, Ordering::Relaxed);
            }
            if next == 0 {
                self.view_checked(c, place.group, v).await?;
                return Ok(false);
            }
            let to = GlobalAddr::from_raw(next);
            if to.node() != node || to.offset() % BUCKET != 0 {
                return Err(Miss::Fatal(IndexError::Corrupt(format!(
                    "bucket at {bucket} chains to {to}, not a bucket of its table's node"
                ))));
            }
            hops.failed(bucket, "bucket chain")?;
            bucket = to;
            self.counters.chain_hops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// GET by request to a skiplist replica of view `v`.
    async fn get_by_request<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        place: Place,
        v: View,
        out: &mut Vec<u8>,
    ) -> Result<bool, Miss> {
        let g = place.group;
        let r = self.pick(g, v)?;
        let mut m = SmallVec::<[u8; 128]>::new();
        m.head(self.head(proto::LOOKUP, r, g, v.epoch));
        m.key(key);
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        let reply = c.call(self.desc.groups[g].nodes[r], SERVICE, &m).await?;
        let word = status(&reply)?
            .u64()
            .map_err(|e| Miss::Fatal(IndexError::Corrupt(format!("LOOKUP reply: {e:?}"))))?;
        let Some(s) = Slot::decode(word) else {
            self.view_checked(c, g, v).await?;
            return Ok(false);
        };
        if !self.item_checked(c, s, key, out, self.validates().then_some((g, v))).await? {
            return Err(Miss::Fatal(IndexError::Corrupt(format!(
                "item at {} does not hold its key",
                s.item
            ))));
        }
        Ok(true)
    }

    /// SCAN: one request per group to a skiplist replica, then the items in doorbells rung
    /// together (with the view words, which validate the replies), or one after another with
    /// [`ScanReads::Each`]; retried whole if a group missed.
    /// Into `out` (cleared first), with the working vectors from the handle's pool: nothing is
    /// allocated per pair (each request's reply is the fabric's).
    pub(crate) async fn scan_between<T: Transport>(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: Option<&[u8]>,
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        if !self.mode.scans() {
            return Err(IndexError::Unsupported(format!("scan on {:?}", self.mode)));
        }
        self.counters.scans.fetch_add(1, Ordering::Relaxed);
        let mut scratch = self.scans.get(c, ScanScratch::default);
        let mut tries = 0;
        loop {
            let groups: SmallVec<[View; 4]> =
                (0..self.desc.groups.len()).map(|g| self.view(g)).collect();
            match self.scan_in(c, (lo, hi, count), &groups, &mut scratch, out).await {
                Ok(()) => return Ok(()),
                Err((g, miss)) => {
                    out.clear();
                    self.recover(c, g, groups[g], miss, &mut tries).await?;
                }
            }
        }
    }

    /// One attempt of a SCAN of `(lo, hi, count)` in views `views`; on a miss, the group that
    /// missed.
    async fn scan_in<T: Transport>(
        &self,
        c: &Client<T>,
        (lo, hi, count): (&[u8], Option<&[u8]>, usize),
        views: &[View],
        scratch: &mut ScanScratch,
        out: &mut ScanBuf,
    ) -> Result<(), (usize, Miss)> {
        let corrupt =
            |g: usize, e| (g, Miss::Fatal(IndexError::Corrupt(format!("SCAN reply: {e:?}"))));
        let ScanScratch { request, keys, found, reads, bytes } = scratch;
        keys.clear();
        found.clear();
        for (group, &v) in views.iter().enumerate() {
            let r = self.pick(group, v).map_err(|m| (group, m))?;
            let m = &mut *request;
            m.clear();
            m.head(self.head(proto::SCAN, r, group, v.epoch));
            m.u32(count.min(u32::MAX as usize) as u32);
            m.key(lo);
            match hi {
                Some(hi) => {
                    m.u8(1);
                    m.key(hi);
                }
                None => m.u8(0),
            }
            let reply = c
                .call(self.desc.groups[group].nodes[r], SERVICE, m)
                .await
                .map_err(|e| (group, e.into()))?;
            let mut rd = status(&reply).map_err(|m| (group, m))?;
            for _ in 0..rd.u32().map_err(|e| corrupt(group, e))? {
                let k = rd.key().map_err(|e| corrupt(group, e))?;
                let s =
                    Slot::decode(rd.u64().map_err(|e| corrupt(group, e))?).ok_or_else(|| {
                        (
                            group,
                            Miss::Fatal(IndexError::Corrupt("SCAN returned an empty slot".into())),
                        )
                    })?;
                found.push((keys.len()..keys.len() + k.len(), s));
                keys.extend_from_slice(k);
            }
        }
        if views.len() > 1 {
            found.sort_unstable_by(|a, b| keys[a.0.clone()].cmp(&keys[b.0.clone()]));
            found.truncate(count);
        }
        self.counters.scan_items.fetch_add(found.len() as u64, Ordering::Relaxed);
        let checks = if self.validates() { views.len() } else { 0 };
        reads.clear();
        reads.extend(found.iter().map(|(_, s)| (s.item, self.item_len(*s))));
        let items: usize = reads.iter().map(|r| r.1).sum();
        reads.extend((0..checks).map(|g| (self.view_word(g).at, 8)));
        bytes.clear();
        bytes.resize(items + 8 * checks, 0);
        let (mut one_by_one, mut rest) = (&reads[..0], &reads[..]);
        if self.scan_reads == ScanReads::Each && !found.is_empty() {
            // The paper's client: each item READ and awaited in turn; the last rides with the
            // view words. Those must be read after the replies (the replicas' state they
            // validate), which they are; items are immutable, so any order among them will do.
            (one_by_one, rest) = reads.split_at(found.len() - 1);
        }
        let mut tail = &mut bytes[..];
        for &(addr, len) in one_by_one {
            let (piece, after) = std::mem::take(&mut tail).split_at_mut(len);
            c.read(addr, piece).await.map_err(|e| (0, e.into()))?;
            tail = after;
        }
        doorbell::read_per_node(c, rest, tail).await.map_err(|e| (0, e.into()))?;
        for (g, w) in bytes[items..].chunks_exact(8).enumerate() {
            self.still(views[g], w.try_into().expect("8 bytes")).map_err(|m| (g, m))?;
        }
        let mut at = 0;
        for ((k, s), &(_, len)) in found.iter().zip(reads.iter()) {
            let (k, buf) = (&keys[k.clone()], &bytes[at..at + len]);
            at += len;
            let fatal = |m: String| (0, Miss::Fatal(IndexError::Corrupt(m)));
            let Some((key, value)) = self.items.parse(s.item, buf).map_err(|e| (0, e.into()))?
            else {
                return Err(fatal(format!("item at {} is longer than its slot", s.item)));
            };
            if key != k {
                return Err(fatal(format!("item at {} does not hold its key", s.item)));
            }
            out.push(k, value);
        }
        Ok(())
    }
}

/// A SCAN's working vectors, kept in a per-compute-node pool (`Store::scans`).
#[derive(Default)]
pub(crate) struct ScanScratch {
    /// The request being sent.
    request: Vec<u8>,
    /// The keys the replies named, end to end, and for each where it is with its slot.
    keys: Vec<u8>,
    found: Vec<(Range<usize>, Slot)>,
    /// The items' READs (then the view words'), and what they return, end to end.
    reads: Vec<(GlobalAddr, usize)>,
    bytes: Vec<u8>,
}
