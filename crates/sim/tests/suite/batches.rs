//! A memory node's core takes the requests queued with one batch key together: one
//! `handle_batch` for all of them, up to the service's limit; requests of another key make a
//! batch of their own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dmindex_fabric::service::{MnContext, Service, ServiceError};
use dmindex_fabric::{ServiceId, Services};
use dmindex_sim::{NetParams, Sim, SimConfig, Task};

const GROUPED: ServiceId = ServiceId(17);

/// Charges 2 µs a request; batches by the request's first byte; counts its batches.
#[derive(Default)]
struct Grouped {
    batches: AtomicU64,
    largest: AtomicU64,
}

impl Service for Grouped {
    fn name(&self) -> &str {
        "grouped"
    }
    fn handle(&self, ctx: &MnContext<'_>, request: &[u8]) -> Result<Vec<u8>, ServiceError> {
        ctx.charge(2_000);
        Ok(request.to_vec())
    }
    fn batch_limit(&self) -> usize {
        8
    }
    fn batch_key(&self, request: &[u8]) -> Option<u64> {
        request.first().map(|&k| k as u64)
    }
    fn handle_batch(
        &self,
        ctx: &MnContext<'_>,
        requests: &[&[u8]],
    ) -> Vec<Result<Vec<u8>, ServiceError>> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.largest.fetch_max(requests.len() as u64, Ordering::Relaxed);
        requests.iter().map(|r| self.handle(ctx, r)).collect()
    }
}

/// One request per key in `keys`, all at once, on a one-core node: the first is served alone,
/// the others queue behind it. Returns the batches served and the largest (each request's reply
/// is checked to be its own).
fn run(keys: &[u8]) -> (u64, u64) {
    let net = NetParams { mn_cores: 1, jitter_ns: 0, ..NetParams::chime_testbed() };
    let service = Arc::new(Grouped::default());
    let mut services = Services::new(net.mn_cores);
    services.register(GROUPED, service.clone()).unwrap();
    let sim = Sim::with_services(SimConfig::new(3, net), services).unwrap();
    let clients: Vec<_> = keys.iter().map(|_| sim.client_on_own_thread(1)).collect();
    let tasks = clients.iter().zip(keys).enumerate().map(|(i, (c, &k))| {
        Box::pin(async move {
            let request = [k, i as u8];
            let reply = c.call(0, GROUPED, &request).await.unwrap();
            assert_eq!(reply, request, "each request gets its own reply");
        }) as Task
    });
    assert!(sim.run(tasks).all_finished());
    (service.batches.load(Ordering::Relaxed), service.largest.load(Ordering::Relaxed))
}

#[test]
fn queued_requests_of_one_key_are_served_as_one_batch() {
    // The first request finds the core free and is served alone (not a batch); the seven that
    // queue behind it share a key and make one batch.
    assert_eq!(run(&[1; 8]), (1, 7));
    // Two keys: a batch each for the queued ones.
    assert_eq!(run(&[1, 1, 2, 1, 2, 1, 2, 2]), (2, 4));
    // More than the limit: the queue's head takes eight, the rest a batch of their own.
    assert_eq!(run(&[5; 12]), (2, 8));
}
