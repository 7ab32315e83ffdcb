//! # dmindex-reference: `ref`, sorted arrays in remote memory, one remote spin lock per shard
//!
//! Simple enough to be obviously linearizable — every operation, reads included, holds its
//! shard's lock — and still a real disaggregated-memory index: all state is remote, reached by
//! verbs, and a client may crash at any verb (leaving its shard locked; there are no leases).
//! It is the harness's and checker's test subject and the yardstick the real designs are
//! compared against in model tests.
//!
//! # Layout
//!
//! ```text
//! directory (64-B aligned, address in the root-table slot)
//! +0    descriptor, 64 B: magic "DMIREF01" u64 | shard_bits u32 | entry_size u32 |
//!                         max_key u32 | max_value u32 | zero
//! +64   shard 0 header, 64 B: lock u64 (0 free, bit 63 held) | count u32 | capacity u32 |
//!                             array GlobalAddr u64 | zero
//! +128  shard 1 header ...
//!
//! array: capacity × entry, sorted by key; entry = klen u8 | vlen u8 | key[max_key] |
//!        value[max_value], padded to a multiple of 8 bytes
//! ```
//!
//! A key belongs to shard `first_two_bytes(key) >> (16 - shard_bits)`, so shards partition the
//! key space in order and a scan walks shards upwards.
//!
//! # Operations
//!
//! Lock the shard with a CAS of its lock word from 0 ([`dmindex_prim::lock::acquire_whole`]),
//! READ its header and array, act locally, then WRITE what changed and the header with the lock
//! word cleared in one doorbell batch (the header line is written whole, so the unlock and the
//! new count appear together). The directory's address is published in the root-table slot by
//! CAS from 0 ([`dmindex_prim::root`]); the descriptor lives in the directory, not in the next
//! slot. A full array is copied into
//! a new one of twice the capacity before the header is switched to it, and a shifted one (an
//! insert or delete before the end) into a new one of the same capacity, so that a writer that
//! dies between its two WRITEs leaves the shard as it was; old arrays are not reclaimed.

use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::{
    IndexConfig, IndexError, IndexResult, IndexStats, Pair, PointIndex, RangeIndex, ScanBuf,
};
use dmindex_prim::doorbell;
use dmindex_prim::lock::{self, Held};
use dmindex_prim::root::{Magic, RootSlot};

const MAGIC: u64 = u64::from_le_bytes(*b"DMIREF01");

/// What the root table's descriptor word says of a reference index.
const ROOT: Magic = Magic { name: "ref index", value: 0x5245, bits: 16 };
const HEADER: u64 = 64;
const INITIAL_CAPACITY: u32 = 16;

/// The reference index's per-CN handle: where the directory is and how entries are laid out.
#[derive(Clone, Debug)]
pub struct LockedShards {
    dir: GlobalAddr,
    shard_bits: u32,
    entry_size: usize,
    config: IndexConfig,
}

#[derive(Clone, Copy, Debug)]
struct ShardHeader {
    count: u32,
    capacity: u32,
    array: GlobalAddr,
}

impl ShardHeader {
    fn decode(b: &[u8]) -> ShardHeader {
        ShardHeader {
            count: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            capacity: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            array: GlobalAddr::from_raw(u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"))),
        }
    }

    /// The header line with the lock word cleared: WRITTEN, it releases the shard's lock.
    fn encode_unlocked(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&lock::unlocked(0).to_le_bytes());
        b[8..12].copy_from_slice(&self.count.to_le_bytes());
        b[12..16].copy_from_slice(&self.capacity.to_le_bytes());
        b[16..24].copy_from_slice(&self.array.raw().to_le_bytes());
        b
    }
}

/// A shard's contents, decoded.
struct Shard {
    header: ShardHeader,
    entries: Vec<Pair>,
}

fn entry_size(config: &IndexConfig) -> usize {
    (2 + config.max_key + config.max_value).div_ceil(8) * 8
}

impl LockedShards {
    fn shard_of(&self, key: &[u8]) -> u32 {
        let prefix = u16::from_be_bytes([
            key.first().copied().unwrap_or(0),
            key.get(1).copied().unwrap_or(0),
        ]);
        (prefix as u32) >> (16 - self.shard_bits)
    }

    fn header_addr(&self, shard: u32) -> GlobalAddr {
        self.dir.add(HEADER + HEADER * shard as u64)
    }

    fn encode_entry(&self, key: &[u8], value: &[u8], out: &mut [u8]) {
        out.fill(0);
        out[0] = key.len() as u8;
        out[1] = value.len() as u8;
        out[2..2 + key.len()].copy_from_slice(key);
        let v = 2 + self.config.max_key;
        out[v..v + value.len()].copy_from_slice(value);
    }

    fn decode_entry(&self, b: &[u8]) -> IndexResult<Pair> {
        let (kl, vl) = (b[0] as usize, b[1] as usize);
        if kl == 0 || kl > self.config.max_key || vl > self.config.max_value {
            return Err(IndexError::Corrupt(format!(
                "entry with key length {kl}, value length {vl}"
            )));
        }
        let v = 2 + self.config.max_key;
        Ok((b[2..2 + kl].to_vec(), b[v..v + vl].to_vec()))
    }

    /// Locks `shard` (its header's first word) and reads it. The lock is released by a WRITE
    /// of 0 to it, or by [`LockedShards::write_back_and_unlock`].
    async fn lock_and_read<T: Transport>(
        &self,
        c: &Client<T>,
        shard: u32,
    ) -> IndexResult<(Held<'static>, Shard)> {
        let held = lock::acquire_whole(c, self.header_addr(shard), || {}).await?;
        let h = ShardHeader::decode(&c.read_vec(self.header_addr(shard), 24).await?);
        // The array must lie within its memory node: garbage in the header is a corrupt index,
        // not a READ (or an allocation) of whatever size it says.
        let end = h.array.offset().checked_add(h.capacity as u64 * self.entry_size as u64);
        let fits = end.is_some_and(|e| c.info().node_size(h.array.node()).is_some_and(|n| e <= n));
        if h.count > h.capacity || (h.capacity > 0 && (h.array.is_null() || !fits)) {
            return Err(IndexError::Corrupt(format!("shard {shard} header {h:?}")));
        }
        let mut entries = Vec::with_capacity(h.count as usize + 1);
        if h.count > 0 {
            let bytes = c.read_vec(h.array, h.count as usize * self.entry_size).await?;
            for e in bytes.chunks(self.entry_size) {
                entries.push(self.decode_entry(e)?);
            }
        }
        Ok((held, Shard { header: h, entries }))
    }

    /// Writes the entries in `changed` and the header, releasing the lock; a full array is first
    /// replaced by one of twice the capacity holding every entry.
    async fn write_back_and_unlock<T: Transport>(
        &self,
        c: &Client<T>,
        shard: u32,
        held: Held<'_>,
        mut s: Shard,
        changed: std::ops::Range<usize>,
    ) -> IndexResult<()> {
        let count = s.entries.len() as u32;
        let mut changed = changed.start.min(s.entries.len())..changed.end.min(s.entries.len());
        // A shift (an insert or delete before the end) is written to a new array: in place, a
        // writer that dies after its array WRITE landed and before the header's would leave
        // the old count over shifted entries (one key lost, or one twice).
        let shifted = count != s.header.count && changed.start < s.header.count as usize;
        if count > s.header.capacity || shifted {
            let grow = if count > s.header.capacity { 2 } else { 1 };
            let capacity = (s.header.capacity * grow).max(INITIAL_CAPACITY).max(count);
            s.header.array = c.alloc(capacity as u64 * self.entry_size as u64, 64).await?;
            s.header.capacity = capacity;
            changed = 0..s.entries.len();
        }
        s.header.count = count;
        let from = changed.start;
        let mut bytes = vec![0u8; changed.len() * self.entry_size];
        for (i, (k, v)) in s.entries[changed].iter().enumerate() {
            self.encode_entry(k, v, &mut bytes[i * self.entry_size..(i + 1) * self.entry_size]);
        }
        let header = s.header.encode_unlocked();
        let array_at = s.header.array.add((from * self.entry_size) as u64);
        let mut writes = [
            BatchOp::Write { addr: array_at, data: &bytes },
            BatchOp::Write { addr: self.header_addr(shard), data: &header },
        ];
        let writes = if bytes.is_empty() { &mut writes[1..] } else { &mut writes[..] };
        held.released_by(doorbell::post(c, writes).await)
    }

    fn find(entries: &[Pair], key: &[u8]) -> Result<usize, usize> {
        entries.binary_search_by(|(k, _)| k.as_slice().cmp(key))
    }
}

impl<T: Transport> PointIndex<T> for LockedShards {
    /// Shard locks name their holder and are freed when it dies: a shard's entries are written
    /// before its header, which unlocks, so a dead writer leaves the old header in place.
    const RECOVERS_CLIENT_CRASHES: bool = true;

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        if config.max_key == 0 || config.max_key > 255 || config.max_value > 255 {
            return Err(IndexError::Config(format!(
                "ref index keys must be 1..=255 bytes and values 0..=255 bytes (got {} and {})",
                config.max_key, config.max_value
            )));
        }
        let root = RootSlot::with_descriptor(config.root_slot)?;
        let shards = (config.expected_items / 256).clamp(1, 4096).next_power_of_two();
        let shard_bits = shards.trailing_zeros().max(1);
        let dir = c.alloc(HEADER + HEADER * (1u64 << shard_bits), 64).await?;
        let mut d = [0u8; 24];
        d[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        d[8..12].copy_from_slice(&shard_bits.to_le_bytes());
        d[12..16].copy_from_slice(&(entry_size(config) as u32).to_le_bytes());
        d[16..20].copy_from_slice(&(config.max_key as u32).to_le_bytes());
        d[20..24].copy_from_slice(&(config.max_value as u32).to_le_bytes());
        c.write(dir, &d).await?;
        root.claim(c, dir.raw()).await?;
        root.publish(c, &ROOT, 0).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        // Another kind of index at the slot is refused by its descriptor before its root word
        // is taken for an address.
        let root = RootSlot::with_descriptor(config.root_slot)?;
        root.check(c, &ROOT, 0).await?;
        let dir = GlobalAddr::from_raw(root.load(c).await?);
        let d = c.read_vec(dir, 24).await?;
        let word = |i: usize| u32::from_le_bytes(d[i..i + 4].try_into().expect("4 bytes"));
        if u64::from_le_bytes(d[0..8].try_into().expect("8 bytes")) != MAGIC {
            return Err(IndexError::Corrupt(format!("no ref index at {dir}")));
        }
        let (shard_bits, esz, max_key, max_value) = (word(8), word(12), word(16), word(20));
        if max_key as usize != config.max_key || max_value as usize != config.max_value {
            return Err(IndexError::Config(format!(
                "index was created for {max_key}-byte keys and {max_value}-byte values"
            )));
        }
        if !(1..=16).contains(&shard_bits) || esz as usize != entry_size(config) {
            return Err(IndexError::Corrupt(format!("bad descriptor at {dir}")));
        }
        Ok(LockedShards { dir, shard_bits, entry_size: esz as usize, config: config.clone() })
    }

    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        out.clear();
        self.config.check_kv(key, None)?;
        let shard = self.shard_of(key);
        let (held, s) = self.lock_and_read(c, shard).await?;
        held.unlock_with(c, 0).await?;
        let found = Self::find(&s.entries, key).ok();
        if let Some(i) = found {
            out.extend_from_slice(&s.entries[i].1);
        }
        Ok(found.is_some())
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        self.config.check_kv(key, Some(value))?;
        let shard = self.shard_of(key);
        let (held, mut s) = self.lock_and_read(c, shard).await?;
        let changed = match Self::find(&s.entries, key) {
            Ok(i) => {
                s.entries[i].1 = value.to_vec();
                i..i + 1
            }
            Err(i) => {
                s.entries.insert(i, (key.to_vec(), value.to_vec()));
                i..s.entries.len()
            }
        };
        self.write_back_and_unlock(c, shard, held, s, changed).await
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, Some(value))?;
        let shard = self.shard_of(key);
        let (held, mut s) = self.lock_and_read(c, shard).await?;
        match Self::find(&s.entries, key) {
            Ok(i) => {
                s.entries[i].1 = value.to_vec();
                self.write_back_and_unlock(c, shard, held, s, i..i + 1).await?;
                Ok(true)
            }
            Err(_) => {
                held.unlock_with(c, 0).await?;
                Ok(false)
            }
        }
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.config.check_kv(key, None)?;
        let shard = self.shard_of(key);
        let (held, mut s) = self.lock_and_read(c, shard).await?;
        match Self::find(&s.entries, key) {
            Ok(i) => {
                s.entries.remove(i);
                let end = s.entries.len();
                self.write_back_and_unlock(c, shard, held, s, i..end).await?;
                Ok(true)
            }
            Err(_) => {
                held.unlock_with(c, 0).await?;
                Ok(false)
            }
        }
    }

    fn stats(&self) -> IndexStats {
        IndexStats::default()
    }
}

impl<T: Transport> RangeIndex<T> for LockedShards {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        out.clear();
        self.config.check_kv(from, None)?;
        let mut shard = self.shard_of(from);
        while out.len() < count && shard < (1 << self.shard_bits) {
            let (held, s) = self.lock_and_read(c, shard).await?;
            held.unlock_with(c, 0).await?;
            let start = Self::find(&s.entries, from).unwrap_or_else(|i| i);
            for (k, v) in s.entries.iter().skip(start).take(count - out.len()) {
                out.push(k, v);
            }
            shard += 1;
        }
        Ok(())
    }
}
