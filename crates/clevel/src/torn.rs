//! Torn images of a moving key, built by hand: what a writer decides from READs that straddle
//! the rehasher's steps. The simulator's delays make these interleavings rare; here each is
//! made exactly.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Client, Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};

use crate::image::Image;
use crate::layout::{self, Hashes, FROZEN};
use crate::ops::Found;
use crate::CLevel;

/// A table with a rehash due (three levels, no background client) and a key whose entry is
/// in the bottom level: the key and its slot's address and word.
async fn table_with_a_key_in_the_bottom(
    c: &Client<LocalTransport>,
) -> (CLevel, Vec<u8>, dmindex_fabric::GlobalAddr, u64) {
    let config = IndexConfig::with_options(&[("log2_buckets", "1")]);
    let idx = CLevel::create(c, &config, 0).await.unwrap();
    let mut k = 0u64;
    while !idx.cached().ctx.rehashing() {
        k += 1;
        idx.insert(c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
    }
    for key in 1..=k {
        let key = key.to_be_bytes();
        let h = Hashes::of(&key);
        let mut img = Image::new(idx.cached(), &h);
        idx.read_image(c, &mut img, None).await.unwrap();
        if let Found::Live(live) = idx.committed(c, &img, &key, &h).await.unwrap() {
            if in_bottom(&img, live.addr) {
                return (idx, key.to_vec(), live.addr, live.word);
            }
        }
    }
    panic!("no key in the bottom level");
}

/// Whether `slot` is in one of the image's bottom-level buckets.
fn in_bottom(img: &Image, slot: dmindex_fabric::GlobalAddr) -> bool {
    (0..img.n).any(|b| {
        img.level[b] == 0
            && slot.node() == img.addr[b].node()
            && (img.addr[b].offset()..img.addr[b].offset() + layout::BUCKET)
                .contains(&slot.offset())
    })
}

/// A writer READ the bottom before the rehasher froze the key's entry and the levels above
/// after its copy landed: two committed entries of the key, neither frozen. It must wait
/// (`Moving`): CASing the copy would change the key while the frozen original can still be READ.
#[test]
fn original_before_the_freeze_and_copy_after_it_is_a_move() {
    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let (idx, key, slot, word) = table_with_a_key_in_the_bottom(&c).await;
        let h = Hashes::of(&key);
        let mut before = Image::new(idx.cached(), &h);
        idx.read_image(&c, &mut before, None).await.unwrap();
        // The rehasher's first two steps: freeze, copy up.
        assert_eq!(c.cas(slot, word, word | FROZEN).await.unwrap(), word);
        let mut cur = idx.cached();
        idx.copy_up(&c, &mut cur, word).await.unwrap();
        let mut after = Image::new(idx.cached(), &h);
        idx.read_image(&c, &mut after, None).await.unwrap();
        assert!(matches!(idx.committed(&c, &after, &key, &h).await.unwrap(), Found::Moving));
        // The torn image: bottom lines from before, the others from after.
        let mut torn = after.clone();
        for b in (0..torn.n).filter(|&b| torn.level[b] == 0) {
            torn.lines[b] = before.lines[b];
        }
        assert!(
            matches!(idx.committed(&c, &torn, &key, &h).await.unwrap(), Found::Moving),
            "a writer would CAS the copy while the frozen original is still there"
        );
    }]);
}

/// A rehasher stopped on an error after freezing an entry and let the rehash lock go: the next
/// writer of the key finds the entry frozen and the lock free, takes the lock and finishes the
/// drain, and its update lands.
#[test]
fn a_frozen_entry_with_no_rehasher_is_moved_by_its_writer() {
    let f = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    run_tasks([async {
        let (idx, key, slot, word) = table_with_a_key_in_the_bottom(&c).await;
        assert_eq!(c.cas(slot, word, word | FROZEN).await.unwrap(), word);
        assert!(idx.update(&c, &key, b"newvalue").await.unwrap());
        assert_eq!(idx.search(&c, &key).await.unwrap().as_deref(), Some(&b"newvalue"[..]));
        assert!(!idx.cached().ctx.rehashing(), "the writer drained the table");
        assert_eq!(c.read_word(slot).await.unwrap(), 0);
    }]);
}
