//! Group commit over a batch: writes that waited together for a core are logged first and then
//! shipped to each backup in one SHIP, and each is answered as if alone.

use dmindex_fabric::layout;
use dmindex_fabric::memory::Region;
use dmindex_fabric::service::{MnContext, Service};
use dmindex_fabric::GlobalAddr;
use dmindex_histore::layout::{Place, Slot};
use dmindex_histore::mode::Mode;
use dmindex_histore::proto::{self, Head, Kind, Put};
use dmindex_histore::server::Server;
use dmindex_prim::hash::hash_bytes;

use crate::common::one_node::OneNode;

const PARTITIONS: u8 = 2;

/// WRITE of key `k` by writer `k` (its `seq`-th write) to the primary of `store`.
fn write(store: u16, k: u32, seq: u32) -> Vec<u8> {
    let key = format!("key-{k}").into_bytes();
    let place = Place::of(hash_bytes(&key), 1, PARTITIONS as usize, 64);
    let word = Slot::new(place.signature, GlobalAddr::new(0, 1 << 20), 64).word();
    let mut w = Vec::new();
    w.head(Head { op: proto::WRITE, replica: 0, group: 0, store, epoch: 1 });
    w.entry_of(Kind::Upsert, k as u64, seq, &key, word);
    w
}

fn partition(k: u32) -> usize {
    let key = format!("key-{k}").into_bytes();
    Place::of(hash_bytes(&key), 1, PARTITIONS as usize, 64).partition
}

#[test]
fn writes_that_wait_together_ship_once_per_backup_and_partition() {
    const N: u32 = 16;
    let region = Region::new(8 << 20);
    layout::format(&region, 0);
    let server = Server::default();
    let peers = OneNode::new(&server, &region);
    let parts = (0..N).map(partition).collect::<std::collections::BTreeSet<_>>().len() as u32;
    assert_eq!(parts, PARTITIONS as u32, "the keys fall in both partitions");
    for (s, mode) in [(3, Mode::HiStore), (4, Mode::AllSkiplist)] {
        peers.group(mode, s, PARTITIONS, 64);
        let ctx = MnContext::new(0, &region).with_peers(&peers);
        let requests: Vec<Vec<u8>> = (0..N).map(|k| write(s, k, 1)).collect();
        // A core takes together the writes of one log: one key per partition, none for reads.
        for a in 0..N as usize {
            for b in 0..N as usize {
                let (ka, kb) = (server.batch_key(&requests[a]), server.batch_key(&requests[b]));
                assert!(ka.is_some() && kb.is_some());
                assert_eq!(ka == kb, partition(a as u32) == partition(b as u32), "{a}, {b}");
            }
        }
        let mut ping = Vec::new();
        ping.head(Head { op: proto::PING, replica: 0, group: 0, store: s, epoch: 1 });
        assert_eq!(server.batch_key(&ping), None);
        let refs: Vec<&[u8]> = requests.iter().map(|r| &r[..]).collect();
        peers.ships.set(0);
        let replies = server.handle_batch(&ctx, &refs);
        assert_eq!(peers.ships.get(), 2 * parts, "{mode:?}: one SHIP per backup and partition");
        assert!(replies.iter().all(|r| r.as_deref() == Ok(&[proto::DONE, 0][..])), "{replies:?}");
        let primary = server.replica(0, Head { op: 0, replica: 0, group: 0, store: s, epoch: 1 });
        assert_eq!(primary.unwrap().keys(), N as usize, "{mode:?}: every write applied");
        // The same writes again, as a batch with a retry of the last: they find their keys,
        // and the retry is answered from the first attempt without being logged again.
        let mut again: Vec<Vec<u8>> = (0..N).map(|k| write(s, k, 2)).collect();
        again.push(write(s, N - 1, 2));
        let refs: Vec<&[u8]> = again.iter().map(|r| &r[..]).collect();
        peers.ships.set(0);
        let replies = server.handle_batch(&ctx, &refs);
        assert_eq!(peers.ships.get(), 2 * parts);
        assert!(replies.iter().all(|r| r.as_deref() == Ok(&[proto::DONE, 1][..])), "{replies:?}");
        let backup = server.replica(0, Head { op: 0, replica: 1, group: 0, store: s, epoch: 1 });
        assert_eq!(backup.unwrap().logged(), 2 * N as u64, "the retry was logged once");
        // One at a time, each write ships on its own.
        peers.ships.set(0);
        for k in 0..4 {
            let reply = server.handle(&ctx, &write(s, k, 3)).unwrap();
            assert_eq!(reply, [proto::DONE, 1]);
        }
        assert_eq!(peers.ships.get(), 2 * 4);
    }
}
