//! Merges, splits and space: what the structure looks like after many writes.

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex};
use dmindex_sephash::SepHash;

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
    let extra = [("cur", "272"), ("main_ratio", "4"), ("depth", "2")];
    let cfg = IndexConfig {
        max_key: 16,
        max_value: 32,
        extra: extra.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        ..IndexConfig::default()
    };
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
