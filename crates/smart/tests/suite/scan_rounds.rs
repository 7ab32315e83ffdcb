//! A scan's round trips: the cached path along the start READ afresh in one round, then each
//! level of the range in one round (every doorbell rung before any is awaited), so a 100-pair
//! scan of dense keys under a warm cache costs two round trips, three when it crosses into the
//! next bottom node; on one memory node or four. (The depth-first scan before this read each
//! inner node in a round of its own and each memory node's leaves in turn: 8 to 13.)

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{IndexConfig, PointIndex, RangeIndex};
use dmindex_smart::Smart;

fn key(n: u64) -> [u8; 8] {
    (0x0100_0000_0000_0000 + n).to_be_bytes()
}

fn rounds_on(memory_nodes: u16) -> Vec<u64> {
    let f = LocalFabric::new(LocalConfig { memory_nodes, ..LocalConfig::default() }).unwrap();
    let c = f.client(0).unwrap();
    let mut rounds = Vec::new();
    run_tasks([async {
        let ix = <Smart as PointIndex<_>>::create(&c, &IndexConfig::default(), 0).await.unwrap();
        let n = 20_000u64;
        for x in 0..n {
            ix.insert(&c, &key(x), &x.to_le_bytes()).await.unwrap();
        }
        let mut out = Vec::new();
        for start in (0..n - 100).step_by(397) {
            out.clear();
            let rt = c.counts().round_trips;
            ix.scan(&c, &key(start), 100, &mut out).await.unwrap();
            rounds.push(c.counts().round_trips - rt);
            let want: Vec<_> =
                (start..start + 100).map(|x| (key(x).to_vec(), x.to_le_bytes().to_vec())).collect();
            assert_eq!(out, want, "100 pairs from {start}");
        }
        // The last pairs, and a range ending early.
        out.clear();
        ix.scan(&c, &key(n - 10), 100, &mut out).await.unwrap();
        assert_eq!(out.len(), 10);
        let mut buf = dmindex_index::ScanBuf::new();
        ix.scan_range_into(&c, &key(50), &key(60), &mut buf).await.unwrap();
        assert_eq!(buf.len(), 10);
    }]);
    rounds
}

#[test]
fn a_hundred_pairs_in_two_or_three_rounds() {
    for nodes in [1, 4] {
        let rounds = rounds_on(nodes);
        let crossing = rounds.iter().filter(|&&r| r == 3).count();
        assert!(
            rounds.iter().all(|&r| r == 2 || r == 3),
            "{nodes} memory node(s): round trips per scan {rounds:?}"
        );
        // 100 of a bottom node's 256 keys: about two scans in five cross into the next.
        assert!(
            (crossing as f64) < 0.6 * rounds.len() as f64,
            "{nodes} memory node(s): {crossing} of {} scans took three",
            rounds.len()
        );
    }
}
