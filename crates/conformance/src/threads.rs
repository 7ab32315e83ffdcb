//! Real threads on the `local` transport (line-atomic memory, hardware atomics): hot keys, two
//! compute nodes × four threads × coroutines, every history checked. Timestamps come from one
//! monotonic clock, so real-time order is observed order.

use dmindex_check::History;
use dmindex_fabric::exec::{run_on_threads, run_tasks};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use dmindex_index::recorded::Recorder;
use dmindex_index::{mn_services, IndexConfig, IndexKind, PointIndex, ScanBuf, Scans};

/// `rounds` runs of 2 CNs × 4 coroutines × 600 operations over 64 keys on `cfg`; panics with the
/// round and the violation when a history is not linearizable.
pub fn on_local_threads<I, S>(cfg: &IndexConfig, rounds: u64)
where
    I: PointIndex<LocalTransport> + Sync,
    S: Scans<LocalTransport, I>,
{
    for round in 0..rounds {
        let services = mn_services(4, I::SERVICES).expect("index services");
        let f = LocalFabric::with_services(
            LocalConfig {
                node_size: 64 << 20,
                chunk_size: 1 << 20,
                yield_per_verb: true,
                ..LocalConfig::default()
            },
            services,
        )
        .expect("fabric");
        let setup = f.client(0).expect("client");
        run_tasks([I::create(&setup, cfg, 0)]).remove(0).expect("create");
        let handles: Vec<I> = (0..2)
            .map(|cn| run_tasks([I::open(&setup, cfg, cn)]).remove(0).expect("open"))
            .collect();
        let history = History::new();
        let start = std::time::Instant::now();
        let now = move || start.elapsed().as_nanos() as u64;
        let ordered = S::KIND == IndexKind::Ordered;
        run_on_threads(2, 4, |t, task| {
            let (c, idx, history) = (f.client(t as u16).expect("client"), &handles[t], &history);
            async move {
                let rec = Recorder {
                    now: &now,
                    history: Some(history),
                    client: (t * 4 + task) as u32,
                    value_size: cfg.max_value,
                };
                let mut rng = ChaCha8Rng::seed_from_u64(round * 100 + (t * 4 + task) as u64);
                let mut buf = ScanBuf::new();
                for seq in 0..600u64 {
                    let r = rng.next_u64();
                    let k = (1 + (r >> 8) % 64).to_be_bytes();
                    let v = rec.value(seq);
                    match (r % 10, ordered) {
                        (0..=3, _) | (9, false) => drop(rec.search(idx, &c, &k).await.unwrap()),
                        (4..=6, _) => rec.insert(idx, &c, &k, &v).await.unwrap(),
                        (7, _) => drop(rec.update(idx, &c, &k, &v).await.unwrap()),
                        (8, _) => drop(rec.delete(idx, &c, &k).await.unwrap()),
                        _ => {
                            let n = 1 + (r >> 40) as usize % 8;
                            rec.scan_into::<_, _, S>(idx, &c, &k, n, &mut buf).await.unwrap();
                        }
                    }
                }
            }
        });
        if let Err(v) = history.check() {
            panic!("round {round}: {v}");
        }
    }
}
