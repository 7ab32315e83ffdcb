//! A client's CPU: the core of its compute node its thread runs on, and what it spends there —
//! posting verbs, polling completions, and the index's own work between verbs.

use crate::config::NetParams;

use super::{World, PS_PER_NS};

impl World {
    /// Charges `ps` of CPU to the client's core from now (or from when the core frees up);
    /// returns when that work is done. The client's next post waits for it.
    pub(crate) fn charge_cpu(&mut self, client: u32, ps: u64) -> u64 {
        let c = &self.clients[client as usize];
        let free = &mut self.cpu_free[c.cn as usize][c.core];
        let done = self.now.max(*free) + ps;
        *free = done;
        done
    }

    /// Charges the CPU for posting `wqes` work requests with one doorbell; returns when the
    /// post is done.
    pub(crate) fn post_cpu(&mut self, client: u32, wqes: u64) -> u64 {
        let ps = (self.net.doorbell_ns + wqes * self.net.post_ns) * PS_PER_NS;
        self.charge_cpu(client, ps)
    }

    /// Charges the CPU for polling one completion.
    pub(crate) fn poll_cpu(&mut self, client: u32) {
        self.charge_cpu(client, self.net.poll_ns * PS_PER_NS);
    }

    /// Charges the CPU for `count` units of an index's own work ([`dmindex_fabric::Work`]).
    pub(crate) fn work_cpu(&mut self, client: u32, work: dmindex_fabric::Work, count: u64) {
        use dmindex_fabric::Work;
        let ns = match work {
            Work::CacheLookup => self.net.cache_lookup_ns,
            Work::RadixStep => self.net.radix_step_ns,
            Work::TableProbe => self.net.table_probe_ns,
            Work::KeyCompare => self.net.key_compare_ns,
            Work::KeyHash => self.net.key_hash_ns,
            Work::BytesScanned => self.net.byte_scanned_ns,
        };
        let ps = NetParams::cpu_ps(ns, count);
        if ps > 0 {
            self.charge_cpu(client, ps);
        }
    }
}
