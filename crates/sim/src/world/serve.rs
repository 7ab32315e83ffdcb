//! Two-sided requests at a memory node's cores: queued for a core, served alone or, when the
//! service says queued requests may share the work, as a batch of those waiting together
//! (`Service::batch_key`: HiStore's writes to one log, shipped in one message per backup).

use dmindex_fabric::memory::Region;
use dmindex_fabric::service::Services;

use super::{mix, EventKind, Lost, OpKind, World, MN_TIMEOUT_NS, PS_PER_NS};
use crate::peers::Servers;

impl World {
    /// Request `i` reaches its memory node's core queue now: a free core serves it at once.
    pub(super) fn request_arrives(&mut self, i: u32, regions: &[Region], services: &Services) {
        let op = &mut self.ops[i as usize];
        op.arrived = self.now;
        let node = op.addr.node() as usize;
        if self.now >= self.dead_at[node] {
            return self.time_out(i, Lost::Crashed);
        }
        let OpKind::Rpc(service) = op.kind else { unreachable!("request event on a verb") };
        // Which batch it may join, decided once, while it is still the request.
        op.batch_key = services.batch_key(service, &op.buf);
        let free = self.cores.borrow_mut().free_at(node, self.now);
        match free {
            Some(core) => self.start_rpc(vec![i], core, regions, services),
            None => self.core_queues[node].push_back(i),
        }
    }

    /// A core of `node` may have freed up: it takes the queue's head, and with it the queued
    /// requests that may share its batch.
    pub(super) fn core_frees(&mut self, node: usize, regions: &[Region], services: &Services) {
        if self.now >= self.dead_at[node] {
            while let Some(i) = self.core_queues[node].pop_front() {
                self.time_out(i, Lost::Crashed);
            }
            return;
        }
        if self.core_queues[node].is_empty() {
            return;
        }
        let free = self.cores.borrow_mut().free_at(node, self.now);
        let Some(core) = free else { return };
        let head = self.core_queues[node].pop_front().expect("non-empty");
        let mut batch = vec![head];
        let (kind, key) = (self.ops[head as usize].kind, self.ops[head as usize].batch_key);
        if let (OpKind::Rpc(service), Some(key)) = (kind, key) {
            let limit = services.batch_limit(service);
            let ops = &self.ops;
            let queue = &mut self.core_queues[node];
            // Bounded by the queue's length: each request is looked at once.
            let mut k = 0;
            while k < queue.len() && batch.len() < limit {
                let o = &ops[queue[k] as usize];
                if matches!(o.kind, OpKind::Rpc(s) if s == service) && o.batch_key == Some(key) {
                    batch.push(queue.remove(k).expect("in range"));
                } else {
                    k += 1;
                }
            }
        }
        self.start_rpc(batch, core, regions, services);
    }

    /// Serves the requests of `batch` (one, or several that waited together with one batch
    /// key) on `core` now and sends their replies when the batch is done.
    fn start_rpc(&mut self, batch: Vec<u32>, core: usize, regions: &[Region], services: &Services) {
        let first = &self.ops[batch[0] as usize];
        let OpKind::Rpc(service) = first.kind else { unreachable!("rpc event on non-rpc") };
        let node = first.addr.node();
        let requests: Vec<Vec<u8>> =
            batch.iter().map(|&i| std::mem::take(&mut self.ops[i as usize].buf)).collect();
        let servers = Servers {
            services,
            regions,
            cores: &self.cores,
            frees: &self.frees,
            rpc_ps: self.net.rpc_ns * PS_PER_NS,
            one_way_ps: self.net.one_way_ns * PS_PER_NS,
            dead_at: &self.dead_at,
            timeout_ps: MN_TIMEOUT_NS * PS_PER_NS,
        };
        let (replies, done_ps, cpu_ps) = if let [request] = requests.as_slice() {
            let served = servers.serve(self.now, node, core, service, request);
            (vec![served.reply], served.done_ps, served.cpu_ps)
        } else {
            let views: Vec<&[u8]> = requests.iter().map(Vec::as_slice).collect();
            let served = servers.serve_batch(self.now, node, core, service, &views);
            (served.replies, served.done_ps, served.cpu_ps)
        };
        self.trace_hash = mix(mix(self.trace_hash, done_ps), batch.len() as u64);
        let frees = std::mem::take(&mut *self.frees.borrow_mut());
        for (t, n, c) in frees {
            self.schedule(t, EventKind::CoreFree, n as u32, c);
        }
        for (&i, reply) in batch.iter().zip(replies) {
            let arrived = self.ops[i as usize].arrived;
            self.phases.served(node as usize, self.now - arrived, cpu_ps, done_ps - cpu_ps);
            if self.now + done_ps >= self.dead_at[node as usize] {
                // The node crashed before the reply left: what it did stays done, the reply is
                // lost.
                self.time_out(i, Lost::Crashed);
                continue;
            }
            let op = &mut self.ops[i as usize];
            match reply {
                Ok(reply) => {
                    self.trace_hash = mix(self.trace_hash, reply.len() as u64);
                    op.buf = reply;
                }
                Err(e) => op.result = Err(e),
            }
            // The reply goes on the wire when it leaves, not now: a request that waits on
            // peers must not hold the client's receive link ahead of replies that leave first.
            self.schedule(self.now + done_ps, EventKind::Reply, i, 0);
        }
    }
}
