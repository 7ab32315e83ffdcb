//! The window the paper's SCAN falls into, opened on purpose: a backup holds a write in its log
//! while the primary, still waiting on the other backup, has not applied it. A SCAN or LOOKUP on
//! the backup then must not return it (the primary's GETs do not see it yet, and it may still be
//! lost), and once the write is acknowledged every read must.

use std::cell::RefCell;

use dmindex_fabric::layout;
use dmindex_fabric::memory::Region;
use dmindex_fabric::service::{MnContext, Peers, Service};
use dmindex_fabric::GlobalAddr;
use dmindex_histore::layout::{Place, Slot};
use dmindex_histore::mode::Mode;
use dmindex_histore::proto::{self, Kind, Put, Reader};
use dmindex_histore::server::Server;
use dmindex_prim::hash::hash_bytes;

use crate::common::one_node::{head, OneNode};

/// How many keys a SCAN on `replica` returns.
fn scan(peers: &dyn Peers, store: u16, replica: u8) -> u32 {
    let mut m = Vec::new();
    m.head(head(proto::SCAN, replica, store));
    m.u32(100);
    m.key(&[0]);
    m.u8(0);
    let reply = peers.call(0, dmindex_histore::SERVICE, &m).unwrap();
    assert_eq!(reply[0], proto::DONE);
    Reader::new(&reply[1..]).u32().unwrap()
}

/// The slot word a LOOKUP on `replica` returns.
fn lookup(peers: &dyn Peers, store: u16, replica: u8, key: &[u8]) -> u64 {
    let mut m = Vec::new();
    m.head(head(proto::LOOKUP, replica, store));
    m.key(key);
    let reply = peers.call(0, dmindex_histore::SERVICE, &m).unwrap();
    assert_eq!(reply[0], proto::DONE);
    Reader::new(&reply[1..]).u64().unwrap()
}

#[test]
fn a_backup_never_shows_a_write_the_primary_has_not_applied() {
    let region = Region::new(8 << 20);
    layout::format(&region, 0);
    let server = Server::default();
    let key = b"in-flight".to_vec();
    let place = Place::of(hash_bytes(&key), 1, 2, 16);
    let word = Slot::new(place.signature, GlobalAddr::new(0, 1 << 20), 64).word();
    for (store, mode) in [(3, Mode::HiStore), (4, Mode::AllSkiplist)] {
        let seen = RefCell::new(None);
        let window = OneNode::new(&server, &region);
        window.group(mode, store, 2, 16);
        *window.hook.borrow_mut() = Some(Box::new(|peers: &dyn Peers| {
            let backup = server.replica(0, head(0, 1, store)).unwrap();
            let primary = server.replica(0, head(0, 0, store)).unwrap();
            // The window is open: the backup logged the write, the primary has not applied it.
            assert_eq!((backup.logged(), primary.keys()), (1, 0));
            let got = (
                scan(peers, store, 1),
                scan(peers, store, 2),
                lookup(peers, store, 1, &key),
                lookup(peers, store, 2, &key),
            );
            *seen.borrow_mut() = Some(got);
        }));
        let mut w = Vec::new();
        w.head(head(proto::WRITE, 0, store));
        w.entry_of(Kind::Upsert, 1, 1, &key, word);
        assert_eq!(window.call(0, dmindex_histore::SERVICE, &w).unwrap(), [proto::DONE, 0]);
        assert_eq!(seen.take(), Some((0, 0, 0, 0)), "{mode:?}: a backup showed the write early");
        assert_eq!(window.ships.get(), 2, "both backups shipped to");
        // Acknowledged: every replica that answers reads now shows it.
        for r in mode.sorted_replicas() {
            assert_eq!(lookup(&window, store, r as u8, &key), word, "{mode:?} replica {r}");
            assert_eq!(scan(&window, store, r as u8), 1, "{mode:?} replica {r}");
        }
    }
}

/// A backup's LOOKUP and SCAN wait for the primary's WATERMARK as an eRPC continuation (the
/// core serves others meanwhile); a primary's WRITE holds its core while its backups answer,
/// as the paper's worker thread waits.
#[test]
fn only_the_cut_waits_as_a_continuation() {
    let region = Region::new(8 << 20);
    layout::format(&region, 0);
    let server = Server::default();
    let window = OneNode::new(&server, &region);
    window.group(Mode::AllSkiplist, 5, 2, 16);
    let holds = |m: &[u8]| {
        let ctx = MnContext::new(0, &region).with_peers(&window);
        let reply = server.handle(&ctx, m).unwrap();
        assert_eq!(reply[0], proto::DONE);
        ctx.waits_hold_core()
    };
    let mut w = Vec::new();
    w.head(head(proto::WRITE, 0, 5));
    let place = Place::of(hash_bytes(b"k"), 1, 2, 16);
    let word = Slot::new(place.signature, GlobalAddr::new(0, 1 << 20), 64).word();
    w.entry_of(Kind::Upsert, 1, 1, b"k", word);
    assert!(holds(&w), "a write waits for its backups on its core");
    for replica in [1, 2] {
        let mut l = Vec::new();
        l.head(head(proto::LOOKUP, replica, 5));
        l.key(b"k");
        assert!(!holds(&l), "LOOKUP on backup {replica}");
        let mut s = Vec::new();
        s.head(head(proto::SCAN, replica, 5));
        s.u32(100);
        s.key(&[0]);
        s.u8(0);
        assert!(!holds(&s), "SCAN on backup {replica}");
    }
}
