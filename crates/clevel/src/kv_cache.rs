//! The SepHash port's client KV cache (option `kv_cache`, in MiB a client; 0, the default, is
//! none).
//!
//! Each client of the port keeps a copy of every block it published (by an insert's or an
//! update's CAS), by the block's address, until its copies reach a byte budget (40 MiB in the
//! port), and never evicts. A search whose fingerprint matches an entry naming a block the
//! client holds compares the key in the copy instead of READing the block: one round trip
//! fewer, when the client itself wrote the key's current value. With searches spread over keys
//! that many clients inserted, a client holds a searched key about once in as many tries as
//! there are clients; at one client, every time.
//!
//! Blocks are written once to fresh memory before their address is published, and remote memory
//! is never reused (`dmindex_prim::kv_block`), so a copy is what a READ of its address returns
//! at any instant: the cache changes no argument of the crate docs, only where the bytes come
//! from.
//!
//! Clients are told apart by [`Client::ordinal`]; two clients that share an ordinal share a
//! cache, which can only add hits, all of them right. Copies live in one growing buffer per
//! client (amortised growth, no allocation per block). A client's copies stay with the handle
//! after the client ends, and count in its cache bytes: the simulator's harness keeps its
//! clients from the load to the run, as the port's coroutines do, while the harness on threads
//! (in process, UCX) opens new clients for the run, whose searches then find none of the
//! load's copies.
//!
//! Remote memory is never reused while the table lives. A memory node that restarted empty
//! would break that; CLevel does not rebuild lost memory nodes, so its handles end with it.

use std::collections::HashMap;
use std::sync::Mutex;

use crossbeam_utils::CachePadded;
use dmindex_fabric::{Client, GlobalAddr, Transport, Work};
use dmindex_prim::hash::AddrHash;

/// Shards of the clients' caches, so that clients on different threads seldom share a lock;
/// each on its own cache line, as `dmindex_prim::pool`'s, since every search of a client that
/// keeps copies takes its shard's lock.
const SHARDS: usize = 64;

/// What the port charges a copy against the budget: its block, a 16-byte header (the lengths)
/// and the key and value.
fn charge(key: &[u8], value: &[u8]) -> usize {
    16 + key.len() + value.len()
}

/// One client's copies.
#[derive(Default)]
struct Copies {
    /// Block address → (start in `bytes`, key length, value length).
    at: HashMap<GlobalAddr, (usize, u32, u32), AddrHash>,
    /// The copies' keys and values, one after another.
    bytes: Vec<u8>,
    /// Bytes charged against the budget.
    charged: usize,
}

/// The copies of the clients whose ordinals share a shard, by ordinal.
type Shard = Mutex<HashMap<u32, Copies>>;

/// The clients' caches of one compute node's handle.
pub(crate) struct KvCache {
    /// Bytes a client may charge.
    budget: usize,
    shards: Box<[CachePadded<Shard>]>,
}

impl KvCache {
    /// Caches of `mib` MiB a client.
    pub(crate) fn new(mib: usize) -> KvCache {
        KvCache {
            budget: mib << 20,
            shards: (0..SHARDS).map(|_| CachePadded::new(Mutex::new(HashMap::new()))).collect(),
        }
    }

    fn shard<T: Transport>(&self, c: &Client<T>) -> &Shard {
        &self.shards[c.ordinal() as usize % SHARDS]
    }

    /// Keeps a copy of the block at `block`, which `c` just published, unless `c`'s copies
    /// have reached the budget (then nothing is evicted: the port's rule).
    pub(crate) fn keep<T: Transport>(
        &self,
        c: &Client<T>,
        block: GlobalAddr,
        key: &[u8],
        value: &[u8],
    ) {
        let mut shard = self.shard(c).lock().unwrap_or_else(|e| e.into_inner());
        let own = shard.entry(c.ordinal()).or_default();
        let cost = charge(key, value);
        if own.charged + cost > self.budget || own.at.contains_key(&block) {
            return;
        }
        let start = own.bytes.len();
        own.bytes.extend_from_slice(key);
        own.bytes.extend_from_slice(value);
        own.at.insert(block, (start, key.len() as u32, value.len() as u32));
        own.charged += cost;
    }

    /// If `c` holds a copy of the block at `block`: whether it is `key`'s, with its value in
    /// `out` if so. `None`: no copy, READ the block.
    pub(crate) fn value_into<T: Transport>(
        &self,
        c: &Client<T>,
        block: GlobalAddr,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<bool> {
        c.compute(Work::TableProbe, 1);
        let shard = self.shard(c).lock().unwrap_or_else(|e| e.into_inner());
        let own = shard.get(&c.ordinal())?;
        let &(start, klen, vlen) = own.at.get(&block)?;
        let (klen, vlen) = (klen as usize, vlen as usize);
        if &own.bytes[start..start + klen] != key {
            return Some(false);
        }
        out.clear();
        out.extend_from_slice(&own.bytes[start + klen..start + klen + vlen]);
        Some(true)
    }

    /// Bytes charged by every client of this handle.
    pub(crate) fn bytes(&self) -> u64 {
        let shards = self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
        shards.map(|s| s.values().map(|o| o.charged as u64).sum::<u64>()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    #[test]
    fn copies_are_per_client_and_stop_at_the_budget() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let (a, b) = (f.client(0).unwrap(), f.client(0).unwrap());
        assert_ne!(a.ordinal(), b.ordinal());
        let cache = KvCache::new(1);
        let at = |i: u64| GlobalAddr::new(0, 64 * (i + 1));
        let mut out = Vec::new();
        cache.keep(&a, at(0), b"key0", b"value0");
        assert_eq!(cache.value_into(&a, at(0), b"key0", &mut out), Some(true));
        assert_eq!(out, b"value0");
        assert_eq!(cache.value_into(&a, at(0), b"key1", &mut out), Some(false), "another key");
        assert_eq!(cache.value_into(&b, at(0), b"key0", &mut out), None, "b's cache is its own");
        assert_eq!(cache.value_into(&a, at(1), b"key0", &mut out), None, "another block");
        assert_eq!(cache.bytes(), 16 + 4 + 6);
        // 1 MiB of 16 + 8 + 1000 bytes a copy: 1 024 copies fit, the rest are not kept.
        let value = vec![7u8; 1000];
        for i in 1..2000u64 {
            cache.keep(&a, at(i), &i.to_le_bytes(), &value);
        }
        let kept = (1..2000u64)
            .filter(|&i| cache.value_into(&a, at(i), &i.to_le_bytes(), &mut out).is_some())
            .count();
        assert_eq!(kept, ((1 << 20) - 26) / 1024);
        assert!(cache.bytes() <= 1 << 20);
        assert_eq!(cache.value_into(&a, at(0), b"key0", &mut out), Some(true), "never evicted");
    }
}
