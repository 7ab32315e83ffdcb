//! Search: the key's top bucket, then one level after another its group's descriptor and the
//! runs whose filters do not rule the key out, newest first; the first entry of the key found
//! is its newest (crate docs: why this needs no lock).

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport, Work};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::counter::{add, bump};
use dmindex_prim::doorbell;
use dmindex_prim::kv_block::HEADER;
use smallvec::SmallVec;

use crate::layout::{
    entry_block, entry_fp, in_filter, is_deleted, run_parts, words, Desc, Hashes, DESC, GROUP,
    GROUP_CHILDREN, MAX_RUNS, TOP_CHILDREN,
};
use crate::Plush;

/// What a search found of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No entry of the key.
    Absent,
    /// The key's newest entry holds a value.
    Live,
    /// The key's newest entry is a tombstone.
    Deleted,
}

/// What a search under the lock saw of the key's top bucket: its image and the key's slot in
/// it, if there was one.
pub(crate) struct Seen {
    pub image: [u8; 128],
    pub slot: Option<usize>,
}

impl Default for Seen {
    fn default() -> Seen {
        Seen { image: [0; 128], slot: None }
    }
}

/// Bytes of runs a search READs on the stack (a run holds about 16 entries; more spill).
const RUN_BYTES: usize = 4096;

impl Plush {
    /// The key's newest entry, from the top down; `out` gets the value if it is [`Found::Live`]
    /// (cleared otherwise). Round trips: the top bucket with the child word, then per level a
    /// descriptor with the next child word, the runs its filters admit, and a block per
    /// fingerprint match.
    pub(crate) async fn lookup<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<Found> {
        self.lookup_seeing(c, key, out, None).await
    }

    /// [`Plush::lookup`] that also leaves in `seen` the key's top bucket as READ and the slot
    /// holding the key there, if it does (a writer holding the lock then places its entry
    /// without reading the bucket again).
    pub(crate) async fn lookup_seeing<T: Transport>(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
        mut seen: Option<&mut Seen>,
    ) -> IndexResult<Found> {
        out.clear();
        bump(&self.counters.searches);
        let h = Hashes::of(key);
        c.compute(Work::KeyHash, 1);
        let (fp, fb, mine) = (h.fp(), self.shape.fanout_bits, h.filter());
        let top = self.tops[h.top_group(self.shape.groups)];
        let mut bucket = [0u8; 128];
        let bucket = &mut bucket[..self.shape.bucket_bytes()];
        let mut child = [0u8; 8];
        let child_at = top.add(TOP_CHILDREN + 8 * h.digit(1, fb) as u64);
        doorbell::post(
            c,
            &mut [
                BatchOp::Read { addr: self.shape.bucket_addr(top, h.top_bucket()), buf: bucket },
                BatchOp::Read { addr: child_at, buf: &mut child },
            ],
        )
        .await?;
        bump(&self.counters.search_buckets);
        c.compute(Work::BytesScanned, bucket.len() as u64);
        if let Some(seen) = seen.as_deref_mut() {
            seen.image[..bucket.len()].copy_from_slice(bucket);
        }
        for (i, e) in words(bucket).enumerate() {
            if e == 0 {
                continue;
            }
            self.check_entry(c, e)?;
            if entry_fp(e) == fp {
                if let Some(found) = self.try_entry(c, e, key, out).await? {
                    if let Some(seen) = seen {
                        seen.slot = Some(i);
                    }
                    return Ok(found);
                }
            }
        }
        let mut group = GlobalAddr::from_raw(u64::from_le_bytes(child));
        // Ends at the deepest level, or where the key's path has no group yet.
        for level in 1..=self.shape.levels {
            if group.is_null() {
                return Ok(Found::Absent);
            }
            if !Self::fits(c, group, GROUP, Some(top.node())) {
                return Err(IndexError::Corrupt(format!("plush group at {group} is out of range")));
            }
            add(&self.counters.search_levels, 1);
            let next_at = (level < self.shape.levels)
                .then(|| group.add(GROUP_CHILDREN + 8 * h.digit(level + 1, fb) as u64));
            let (desc, next) = self.read_desc(c, group, next_at).await?;
            // The runs the filters admit, newest first.
            let mut pieces = SmallVec::<[(GlobalAddr, usize); MAX_RUNS]>::new();
            for i in (0..MAX_RUNS).rev().filter(|i| desc.valid & (1 << i) != 0) {
                let r = &desc.records[i];
                if !self.filters || in_filter(mine, r.filter) {
                    pieces.push(self.run_range(c, r.run, top.node())?);
                }
            }
            c.compute(Work::TableProbe, u64::from(desc.valid.count_ones()));
            if !pieces.is_empty() {
                let total = pieces.iter().map(|p| p.1).sum();
                let mut runs = SmallVec::<[u8; RUN_BYTES]>::from_elem(0, total);
                doorbell::read_per_node(c, &pieces, &mut runs).await?;
                add(&self.counters.search_buckets, pieces.len() as u64);
                c.compute(Work::BytesScanned, total as u64);
                for e in words(&runs) {
                    // A run has no empty entries.
                    self.check_entry(c, e)?;
                    if entry_fp(e) == fp {
                        if let Some(found) = self.try_entry(c, e, key, out).await? {
                            return Ok(found);
                        }
                    }
                }
            }
            group = next;
        }
        Ok(Found::Absent)
    }

    /// What entry `e` (its fingerprint matched) says of `key`: `None` if its block holds
    /// another key.
    async fn try_entry<T: Transport>(
        &self,
        c: &Client<T>,
        e: u64,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<Option<Found>> {
        if !self.blocks.value_into(c, entry_block(e), Some(key), out).await? {
            return Ok(None);
        }
        if is_deleted(e) {
            out.clear();
            return Ok(Some(Found::Deleted));
        }
        Ok(Some(Found::Live))
    }

    /// Refuses an entry whose block is not on a memory node or longer than a block of this
    /// index can be (garbage in a bucket or a run).
    pub(crate) fn check_entry<T: Transport>(&self, c: &Client<T>, e: u64) -> IndexResult<()> {
        let (a, len) = (entry_block(e), crate::layout::entry_len(e));
        let longest = (HEADER + self.config.max_key + self.config.max_value).div_ceil(64) * 64;
        if len == 0 || len > longest || !Self::fits(c, a, HEADER as u64, None) {
            return Err(IndexError::Corrupt(format!("plush entry {e:#x} names no block")));
        }
        Ok(())
    }

    /// The address and bytes of the run a run word names, refused if it is not on `node`.
    pub(crate) fn run_range<T: Transport>(
        &self,
        c: &Client<T>,
        run: u64,
        node: u16,
    ) -> IndexResult<(GlobalAddr, usize)> {
        let (n, at) = run_parts(run);
        if n == 0 || !Self::fits(c, at, 8 * n as u64, Some(node)) {
            return Err(IndexError::Corrupt(format!("plush run word {run:#x}")));
        }
        Ok((at, 8 * n))
    }

    /// The descriptor of the group at `group` as a reader takes it (its valid records, whatever
    /// mix of lines the READ sampled: `layout` docs) and, if `next_at` is given, the child word
    /// there (READ after it, in one doorbell). More valid records than the shape allows are
    /// garbage.
    pub(crate) async fn read_desc<T: Transport>(
        &self,
        c: &Client<T>,
        group: GlobalAddr,
        next_at: Option<GlobalAddr>,
    ) -> IndexResult<(Desc, GlobalAddr)> {
        let mut image = [0u8; DESC as usize];
        let mut next = [0u8; 8];
        match next_at {
            Some(at) => {
                doorbell::post(
                    c,
                    &mut [
                        BatchOp::Read { addr: group, buf: &mut image },
                        BatchOp::Read { addr: at, buf: &mut next },
                    ],
                )
                .await?
            }
            None => c.read(group, &mut image).await?,
        }
        let d = self.decode_desc(c, group, &image)?;
        Ok((d, GlobalAddr::from_raw(u64::from_le_bytes(next))))
    }

    /// The descriptor of the group at `group` from its READ `image`, checked: at most `runs`
    /// runs listed.
    pub(crate) fn decode_desc<T: Transport>(
        &self,
        c: &Client<T>,
        group: GlobalAddr,
        image: &[u8],
    ) -> IndexResult<Desc> {
        c.compute(Work::BytesScanned, DESC);
        let d = Desc::decode(image);
        if d.valid.count_ones() as usize > self.shape.runs {
            return Err(IndexError::Corrupt(format!(
                "plush group at {group} lists {} runs",
                d.valid.count_ones()
            )));
        }
        Ok(d)
    }
}
