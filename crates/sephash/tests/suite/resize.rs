//! Merges, splits and space: what the structure looks like after many writes.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_sephash::SepHash;

/// An index configuration for keys and values up to `max_key` and `max_value` bytes, with
/// SepHash options `extra`.
fn config(max_key: usize, max_value: usize, extra: &[(&str, &str)]) -> IndexConfig {
    IndexConfig {
        max_key,
        max_value,
        extra: extra.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        ..IndexConfig::default()
    }
}

fn stat(idx: &SepHash, name: &str) -> u64 {
    let s = <SepHash as PointIndex<dmindex_fabric::local::LocalTransport>>::stats(idx);
    s.extra.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

/// 20 000 inserts into tiny segments, then updates and deletes of some: every key found with
/// its newest value, deleted keys gone, merges and splits (with key reads every fourth depth)
/// happened, and superseded entries and tombstones were dropped by merges.
#[test]
fn many_writes_merge_split_and_reclaim() {
    let f = LocalFabric::new(LocalConfig {
        node_size: 256 << 20,
        memory_nodes: 3,
        ..Default::default()
    })
    .unwrap();
    let c = f.client(0).unwrap();
    let cfg = config(16, 32, &[("cur", "272"), ("main_ratio", "4"), ("depth", "2")]);
    const N: u64 = 20_000;
    run_tasks([async {
        let idx = SepHash::create(&c, &cfg, 0).await.unwrap();
        for k in 0..N {
            idx.insert(&c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
        for k in (0..N).step_by(3) {
            assert!(idx.update(&c, &k.to_be_bytes(), b"updated").await.unwrap());
        }
        for k in (0..N).step_by(5) {
            assert!(idx.delete(&c, &k.to_be_bytes()).await.unwrap());
        }
        assert!(!idx.delete(&c, &5u64.to_be_bytes()).await.unwrap(), "deleted twice");
        assert!(!idx.update(&c, &10u64.to_be_bytes(), b"x").await.unwrap(), "updated after delete");
        assert!(!idx.update(&c, &(N + 1).to_be_bytes(), b"x").await.unwrap(), "never inserted");
        let other = SepHash::open(&c, &cfg, 1).await.unwrap();
        for k in 0..N {
            let want: Option<Vec<u8>> = if k % 5 == 0 {
                None
            } else if k % 3 == 0 {
                Some(b"updated".to_vec())
            } else {
                Some(k.to_le_bytes().to_vec())
            };
            assert_eq!(idx.search(&c, &k.to_be_bytes()).await.unwrap(), want, "key {k}");
            assert_eq!(
                other.search(&c, &k.to_be_bytes()).await.unwrap(),
                want,
                "cold handle, key {k}"
            );
        }
        let live = N - N.div_ceil(5);
        let u = idx.utilisation(&c).await.unwrap();
        let (merges, splits) = (stat(&idx, "merges"), stat(&idx, "splits"));
        assert!(merges > 100 && splits > 50, "merges {merges}, splits {splits}");
        assert!(stat(&idx, "merge_key_reads") > 0, "a fourth-depth split reads keys");
        // 32 slots per CurSegment; MainSegments hold one entry per live key.
        // A key has at most one MainSegment entry (tombstones are dropped there; a deletion
        // still in a CurSegment leaves the key's older MainSegment entry for now).
        assert!(u.main_entries <= N, "{u:?}: a key twice in MainSegments");
        assert!(u.main_entries + u.cur_used >= live, "{u:?}: lost keys");
        assert!(u.entries_used < live + 32 * u.segments, "{u:?}: superseded entries kept");
        assert!(u.segments >= 64, "{u:?}: the directory deepened");
    }]);
}

/// Space stays proportional to what is live: replaced MainSegments are reused by later merges.
/// Each merge writes a MainSegment larger than the one it replaces, so before size classes
/// few were reused and 100 M keys overflowed a 14 GB memory node; here, after 60 000 inserts
/// through ~1 800 merges, remote memory beyond the KV blocks is within 2.5× of the live index
/// (directory, CurSegments, MainSegments; 1.8× measured, 8× before), and ≥ 90 % of merges
/// reused memory (98 %, 67 % before).
#[test]
fn replaced_main_segments_are_reused() {
    let f = LocalFabric::new(LocalConfig {
        node_size: 256 << 20,
        memory_nodes: 1,
        chunk_size: 64 << 10,
        ..Default::default()
    })
    .unwrap();
    let c = f.client(0).unwrap();
    let extra = [("cur", "272"), ("main_ratio", "32"), ("depth", "2"), ("max_depth", "12")];
    let cfg = config(8, 8, &extra);
    const N: u64 = 60_000;
    run_tasks([async {
        let idx = SepHash::create(&c, &cfg, 0).await.unwrap();
        for k in 0..N {
            idx.insert(&c, &k.to_be_bytes(), &k.to_le_bytes()).await.unwrap();
        }
        let u = idx.utilisation(&c).await.unwrap();
        // Every block takes one 64-B line (header 8 + key 8 + value 8).
        let index_bytes = f.allocated_bytes() - 64 * N;
        let (merges, reused) = (stat(&idx, "merges"), stat(&idx, "mains_reused"));
        assert!(merges > 1000, "merges {merges}");
        assert!(reused * 10 >= merges * 9, "{reused} of {merges} merges reused a MainSegment");
        assert!(
            index_bytes < u.bytes * 5 / 2,
            "{index_bytes} B allocated for an index of {} B live ({u:?})",
            u.bytes
        );
    }]);
}

/// A segment's meta word does not come back within 4 096 of its merges (the protocol counts on
/// 2^20, see `docs/sephash.md`). One compute node merging one segment reuses two MainSegments
/// in turn, so only the edition tells its metas apart: with an 8-bit edition the meta repeated
/// after 256 merges, and a search paused between its two doorbells for that long took a
/// MainSegment and slots of different generations for one (an acknowledged insert was read
/// back as the value before it).
#[test]
fn a_segments_meta_words_do_not_repeat() {
    let f = LocalFabric::new(LocalConfig { memory_nodes: 1, ..Default::default() }).unwrap();
    let c = f.client(0).unwrap();
    // One segment of 8 slots that never splits.
    let extra = [("cur", "80"), ("main_ratio", "255"), ("depth", "0"), ("max_depth", "1")];
    let cfg = config(8, 8, &extra);
    const MERGES: usize = 4096;
    run_tasks([async {
        let idx = SepHash::create(&c, &cfg, 0).await.unwrap();
        let root = dmindex_prim::root::RootSlot::with_descriptor(cfg.root_slot).unwrap();
        let dir = dmindex_fabric::GlobalAddr::from_raw(root.load(&c).await.unwrap());
        let seg = dmindex_fabric::GlobalAddr::from_raw(c.read_word(dir.add(8)).await.unwrap());
        let mut seen = std::collections::HashMap::new();
        let mut last = c.read_word(seg).await.unwrap();
        let mut i = 0u64;
        while seen.len() < MERGES {
            idx.insert(&c, &(i % 4 + 1).to_be_bytes(), &i.to_le_bytes()).await.unwrap();
            i += 1;
            let meta = c.read_word(seg).await.unwrap();
            if meta != last {
                last = meta;
                if let Some(first) = seen.insert(meta, seen.len()) {
                    let n = seen.len();
                    panic!("meta {meta:#x} after merge {n} was also the meta after merge {first}");
                }
            }
        }
        assert_eq!(stat(&idx, "splits"), 0);
        assert!(stat(&idx, "mains_reused") as usize >= MERGES - 2);
    }]);
}
