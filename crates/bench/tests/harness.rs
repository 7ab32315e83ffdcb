//! The harness: it refuses what an index cannot do before anything runs, and installs the
//! memory-node services an index declares.

use std::sync::Arc;

use dmindex_bench::{run, BenchConfig, TransportKind};
use dmindex_fabric::service::{MnContext, Service, ServiceError};
use dmindex_fabric::{Client, ServiceId, Transport};
use dmindex_index::{IndexConfig, IndexResult, MnService, Ordered, PointIndex, PointOnly};
use dmindex_reference::LockedShards;

#[test]
fn scans_on_a_point_index_are_refused_naming_the_index() {
    for (workload, mix) in [("e", None), ("c", Some("read=0.5,scan=0.5"))] {
        let cfg = BenchConfig {
            index: "ref".into(),
            transport: TransportKind::Sim,
            workload: workload.into(),
            mix: mix.map(String::from),
            items: 100,
            ..BenchConfig::default()
        };
        let e = run::<LockedShards, PointOnly>(&cfg).expect_err("scans on a point index");
        let msg = e.to_string();
        assert!(msg.contains("'ref' is a point index") && msg.contains("scans"), "{msg}");
        // The same index with scan access runs it.
        let r = run::<LockedShards, Ordered>(&cfg).expect("ordered index runs scans");
        assert!(r.per_op.iter().any(|o| o.op == "scan" && o.count > 0));
    }
}

/// An index whose inserts ask a memory-node service of its own to echo the key: the harness must
/// install the service on every memory node of `local` and `sim`, or every insert fails.
struct Echoing(LockedShards);

const ECHO: ServiceId = ServiceId(40);

struct Echo;

impl Service for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn handle(&self, _: &MnContext<'_>, request: &[u8]) -> Result<Vec<u8>, ServiceError> {
        Ok(request.to_vec())
    }
}

impl<T: Transport> PointIndex<T> for Echoing {
    const SERVICES: &'static [MnService] =
        &[MnService { id: ECHO, name: "echo", make: || Arc::new(Echo) }];

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Echoing(<LockedShards as PointIndex<T>>::create(c, config, cn).await?))
    }
    async fn open(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        Ok(Echoing(<LockedShards as PointIndex<T>>::open(c, config, cn).await?))
    }
    async fn search_into(&self, c: &Client<T>, key: &[u8], out: &mut Vec<u8>) -> IndexResult<bool> {
        self.0.search_into(c, key, out).await
    }
    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let node = (key[key.len() - 1] as u16) % c.info().nodes();
        assert_eq!(c.call(node, ECHO, key).await?, key, "the service echoes");
        self.0.insert(c, key, value).await
    }
    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        self.0.update(c, key, value).await
    }
    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.0.delete(c, key).await
    }
}

#[test]
fn index_services_run_on_every_memory_node_of_local_and_sim() {
    for transport in [TransportKind::Local, TransportKind::Sim] {
        let cfg = BenchConfig {
            index: "echoing".into(),
            transport,
            memory_nodes: 2,
            mn_bytes: 256 << 20,
            workload: "a".into(),
            items: 500,
            ..BenchConfig::default()
        };
        let r = run::<Echoing, PointOnly>(&cfg).expect("services installed");
        assert_eq!(r.items, 500);
    }
}
