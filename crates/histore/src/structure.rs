//! The index structures a replica applies its log to, one per partition: the hash table
//! (primary; in memory-node memory, read one-sided by clients) or a skiplist (backups; in the
//! index server's own memory, searched by its CPU).
//!
//! # Hash table
//!
//! Buckets and slots as drawn in [`crate::layout`]. The table is shared by the replica's
//! partitions, so slots are claimed with a CAS from zero and chains grown with a CAS on the last
//! bucket's next pointer; a partition only ever changes the slots of its own keys. Slots hold a
//! one-byte signature, not the key, so the CPU keeps each partition's key → slot map (the *key
//! shadow*) in its own memory rather than read items back from the data servers.
//!
//! # Skiplist
//!
//! `crossbeam-skiplist`'s skip map from key to slot word: the paper's "basic skiplist". Each log
//! entry is applied in one search of it: a held key's word is overwritten in place (the map's
//! values are atomic words), so an overwrite neither searches again nor replaces the key's node.
//! The map's own lock freedom is not relied on: a partition's structure is changed only through
//! `&mut` (under its partition's lock), so no reader runs while an entry is applied.
//!
//! # CPU
//!
//! Every operation charges what it costs the index server's CPU ([`crate::cpu`]) to the request
//! it serves, by structure and partition size.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_skiplist::SkipMap;
use dmindex_fabric::service::{alloc_local, MnContext, MnMemory, ServiceError};
use dmindex_fabric::AtomicOp;

use crate::cpu;
use crate::layout::{self, BUCKET, SLOTS};
use crate::proto::{Entry, Kind};

/// Where a replica's hash table lies on its node.
#[derive(Clone, Copy, Debug)]
pub struct TableAt {
    pub node: dmindex_fabric::NodeId,
    pub offset: u64,
    pub buckets: u64,
}

/// One partition's structure.
pub enum Structure {
    /// The partition's keys in the replica's hash table: key → byte offset of its slot.
    Table { at: TableAt, shadow: HashMap<Box<[u8]>, u64> },
    /// The partition's skiplist: key → slot word (atomic so that an overwrite is a store into
    /// the key's node; `Relaxed` suffices, as every access is ordered by the partition's lock).
    Sorted(Box<SkipMap<Box<[u8]>, AtomicU64>>),
}

impl Structure {
    pub fn table(at: TableAt) -> Structure {
        Structure::Table { at, shadow: HashMap::new() }
    }

    pub fn sorted() -> Structure {
        Structure::Sorted(Box::default())
    }

    /// Applies one log entry (its key moves into the structure); returns whether its key was
    /// present before.
    pub fn apply(
        &mut self,
        ctx: &MnContext<'_>,
        bucket: u64,
        e: Entry,
    ) -> Result<bool, ServiceError> {
        let (memory, n) = (ctx.memory, self.len());
        match self {
            Structure::Sorted(map) => {
                ctx.charge(cpu::SKIPLIST_INSERT.at(n));
                // One search per entry, whatever its kind.
                let word = e.word;
                let existed = match e.kind {
                    Kind::Upsert => {
                        // Under `&mut self` no one else inserts, so the closure runs exactly
                        // when this call adds the key.
                        let mut added = false;
                        let held = map.get_or_insert_with(e.key, || {
                            added = true;
                            AtomicU64::new(word)
                        });
                        if !added {
                            held.value().store(word, Ordering::Relaxed);
                        }
                        !added
                    }
                    Kind::Update => match map.get(&e.key) {
                        Some(held) => {
                            held.value().store(word, Ordering::Relaxed);
                            true
                        }
                        None => false,
                    },
                    Kind::Delete => map.remove(&e.key).is_some(),
                };
                Ok(existed)
            }
            Structure::Table { at, shadow } => {
                let slot = shadow.get(&e.key).copied();
                let curve = if slot.is_some() { cpu::TABLE_UPDATE } else { cpu::TABLE_INSERT };
                ctx.charge(curve.at(n));
                match (e.kind, slot) {
                    (Kind::Upsert | Kind::Update, Some(s)) => {
                        store(memory, s, e.word);
                        Ok(true)
                    }
                    (Kind::Delete, Some(s)) => {
                        store(memory, s, 0);
                        shadow.remove(&e.key);
                        Ok(true)
                    }
                    (Kind::Upsert, None) => {
                        let s = claim(memory, at, bucket, e.word)?;
                        shadow.insert(e.key, s);
                        Ok(false)
                    }
                    (Kind::Update | Kind::Delete, None) => Ok(false),
                }
            }
        }
    }

    /// Adds `key` → `word` from a snapshot (the key is not held yet).
    pub fn insert(
        &mut self,
        ctx: &MnContext<'_>,
        bucket: u64,
        key: Box<[u8]>,
        word: u64,
    ) -> Result<(), ServiceError> {
        let n = self.len();
        match self {
            Structure::Sorted(map) => {
                ctx.charge(cpu::SKIPLIST_INSERT.at(n));
                map.insert(key, AtomicU64::new(word));
            }
            Structure::Table { at, shadow } => {
                ctx.charge(cpu::TABLE_INSERT.at(n));
                let s = claim(ctx.memory, at, bucket, word)?;
                shadow.insert(key, s);
            }
        }
        Ok(())
    }

    /// Every (key, slot word) held, in no particular order: a snapshot.
    pub fn pairs(&self, ctx: &MnContext<'_>) -> Vec<(Box<[u8]>, u64)> {
        let n = self.len();
        ctx.charge(cpu::RANGE_ITEM.at(n).saturating_mul(n as u64));
        let memory = ctx.memory;
        match self {
            Structure::Sorted(map) => {
                map.iter().map(|e| (e.key().clone(), e.value().load(Ordering::Relaxed))).collect()
            }
            Structure::Table { shadow, .. } => {
                shadow.iter().map(|(k, &s)| (k.clone(), load(memory, s))).collect()
            }
        }
    }

    /// The slot word of `key`, if present.
    pub fn get(&self, ctx: &MnContext<'_>, key: &[u8]) -> Option<u64> {
        let n = self.len();
        match self {
            Structure::Sorted(map) => {
                ctx.charge(cpu::SKIPLIST_GET.at(n));
                map.get(key).map(|e| e.value().load(Ordering::Relaxed))
            }
            Structure::Table { shadow, .. } => {
                ctx.charge(cpu::TABLE_GET.at(n));
                shadow.get(key).map(|&s| load(ctx.memory, s))
            }
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        match self {
            Structure::Sorted(map) => map.len(),
            Structure::Table { shadow, .. } => shadow.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Gives `emit` up to `count` pairs (key, slot word) with `lo` ≤ key < `hi` from the
/// skiplists `parts` (whose keys are disjoint), ascending: a merge that walks each skiplist only
/// as far as its pairs are taken, so a SCAN of `count` pairs over `P` partitions walks `count`
/// pairs and `P` seeks, not `P · count` pairs. `None` if a part is a hash table.
pub fn merged_range(
    ctx: &MnContext<'_>,
    parts: &[&Structure],
    lo: &[u8],
    hi: Option<&[u8]>,
    count: usize,
    mut emit: impl FnMut(&[u8], u64),
) -> Option<()> {
    let from = (std::ops::Bound::Included(lo), std::ops::Bound::Unbounded);
    // Per part: its walk, the pair at its head, what each pair walked costs.
    let mut walks = Vec::with_capacity(parts.len());
    for part in parts {
        let Structure::Sorted(map) = part else { return None };
        let n = map.len();
        ctx.charge(cpu::SKIPLIST_GET.at(n));
        let mut walk = map.range::<[u8], _>(from);
        let head = walk.next();
        walks.push((walk, head, cpu::RANGE_ITEM.at(n)));
    }
    for _ in 0..count {
        let mut least: Option<usize> = None;
        for (i, (_, head, _)) in walks.iter().enumerate() {
            let Some(e) = head else { continue };
            if least.is_none_or(|j| walks[j].1.as_ref().is_some_and(|l| e.key() < l.key())) {
                least = Some(i);
            }
        }
        let Some(i) = least else { break };
        let (walk, head, item_ns) = &mut walks[i];
        let e = head.take().expect("the least head");
        if hi.is_some_and(|hi| &e.key()[..] >= hi) {
            break;
        }
        ctx.charge(*item_ns);
        emit(e.key(), e.value().load(Ordering::Relaxed));
        *head = walk.next();
    }
    Some(())
}

fn load(memory: &dyn MnMemory, offset: u64) -> u64 {
    memory.atomic(offset, AtomicOp::Faa { delta: 0 })
}

/// Sets a slot this partition owns, in one atomic swap (a masked CAS that compares nothing):
/// no one else writes it, so there is nothing to compare against.
fn store(memory: &dyn MnMemory, offset: u64, word: u64) {
    let swap = AtomicOp::MaskedCas { compare: 0, compare_mask: 0, swap: word, swap_mask: !0 };
    memory.atomic(offset, swap);
}

/// Claims a free slot for `word` in the chain of bucket `bucket`, growing the chain by one
/// bucket when it is full; returns the slot's offset.
fn claim(memory: &dyn MnMemory, at: &TableAt, bucket: u64, word: u64) -> Result<u64, ServiceError> {
    let mut b = at.offset + bucket * BUCKET;
    loop {
        for i in 0..SLOTS {
            let s = b + layout::slot_offset(i);
            if load(memory, s) == 0
                && memory.atomic(s, AtomicOp::Cas { expected: 0, new: word }) == 0
            {
                return Ok(s);
            }
        }
        let next = load(memory, b + layout::NEXT);
        if next != 0 {
            b = dmindex_fabric::GlobalAddr::from_raw(next).offset();
            continue;
        }
        // A fresh bucket holding the slot, linked last: readers never see it half made.
        let fresh = alloc_local(memory, BUCKET, BUCKET)?;
        memory.write(fresh, &word.to_le_bytes());
        let link = dmindex_fabric::GlobalAddr::new(at.node, fresh).raw();
        if memory.atomic(b + layout::NEXT, AtomicOp::Cas { expected: 0, new: link }) == 0 {
            return Ok(fresh);
        }
        // Another partition linked first: our bucket is dropped (64 bytes), theirs searched.
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use dmindex_fabric::memory::Region;

    use super::*;

    fn entry(kind: Kind, key: u8, word: u64) -> Entry {
        Entry { kind, writer: 1, seq: 0, key: vec![b'k', key].into(), word }
    }

    /// What the skiplist must answer per entry: whether the key was held, and what is held after.
    #[test]
    fn a_skiplist_applies_each_kind_to_new_and_held_keys_as_a_map_would() {
        let region = Region::new(dmindex_fabric::layout::MIN_REGION);
        let ctx = MnContext::new(0, &region);
        let mut s = Structure::sorted();
        let mut apply = |e| s.apply(&ctx, 0, e).unwrap();
        assert!(!apply(entry(Kind::Update, 1, 10)), "an update of a new key");
        assert!(!apply(entry(Kind::Upsert, 1, 11)), "an upsert of a new key adds it");
        assert!(apply(entry(Kind::Upsert, 1, 12)), "an upsert of a held key");
        assert!(apply(entry(Kind::Update, 1, 13)), "an update of a held key");
        assert!(!apply(entry(Kind::Delete, 2, 0)), "a delete of a new key");
        assert!(!apply(entry(Kind::Upsert, 2, 20)));
        assert!(apply(entry(Kind::Delete, 2, 0)), "a delete of a held key");
        assert!(!apply(entry(Kind::Update, 2, 21)), "an update after the delete adds nothing");
        assert_eq!(s.len(), 1, "overwrites add no entries");
        assert_eq!(s.get(&ctx, b"k\x01"), Some(13), "the last overwrite is held");
        assert_eq!(s.get(&ctx, b"k\x02"), None);
    }

    /// A random log against a `BTreeMap`: every answer, the count after every entry, and what
    /// a snapshot and a range walk see at the end.
    #[test]
    fn a_skiplist_agrees_with_a_map_over_a_random_log() {
        let region = Region::new(dmindex_fabric::layout::MIN_REGION);
        let ctx = MnContext::new(0, &region);
        let (mut s, mut model) = (Structure::sorted(), BTreeMap::<Box<[u8]>, u64>::new());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 1..=4000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let kind = [Kind::Upsert, Kind::Upsert, Kind::Update, Kind::Delete][(x % 4) as usize];
            let e = entry(kind, (x >> 8) as u8 % 64, i);
            let held = model.contains_key(&e.key);
            match kind {
                Kind::Upsert => drop(model.insert(e.key.clone(), i)),
                Kind::Update if held => drop(model.insert(e.key.clone(), i)),
                Kind::Update => {}
                Kind::Delete => drop(model.remove(&e.key)),
            }
            assert_eq!(s.apply(&ctx, 0, e).unwrap(), held, "entry {i}");
            assert_eq!(s.len(), model.len(), "entry {i}");
        }
        let want: Vec<(Box<[u8]>, u64)> = model.into_iter().collect();
        let mut pairs = s.pairs(&ctx);
        pairs.sort();
        assert_eq!(pairs, want);
        let mut walked: Vec<(Box<[u8]>, u64)> = Vec::new();
        merged_range(&ctx, &[&s], b"", None, usize::MAX, |k: &[u8], v| walked.push((k.into(), v)))
            .unwrap();
        assert_eq!(walked, want);
    }
}
