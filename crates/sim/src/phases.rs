//! Where clients' time goes, per memory node: how long they wait on its verbs and requests, and,
//! for its requests, how that splits into queueing for a core, the core's CPU and waits on the
//! node's own calls to peers. Latency breakdowns (HiStore's Fig. 11) divide these by the
//! operations of a run.
//!
//! A client's wait on a node counts once however many of its verbs to that node overlap (a
//! doorbell batch of sixteen READs is one wait): each completion adds only the part of its
//! interval, from posting to completion, that the client's earlier completions on that node did
//! not already cover.

use serde::{Deserialize, Serialize};

/// Time clients spent on one memory node (ns, summed over clients).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePhases {
    /// Client-observed time waiting on this node's verbs and requests (overlaps counted once
    /// per client).
    pub wait_ns: u64,
    /// Requests this node served.
    pub requests: u64,
    /// Time those requests waited for a core.
    pub queue_ns: u64,
    /// CPU time of those requests (the per-request cost and what their services charged
    /// before replying).
    pub cpu_ns: u64,
    /// Time those requests waited on the node's calls to its peers.
    pub peer_ns: u64,
}

/// The accounting of a whole simulation, in picoseconds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Phases {
    nodes: Vec<Ps>,
    /// Per client and node, the latest completion already counted.
    covered: Vec<Vec<u64>>,
}

#[derive(Clone, Debug, Default)]
struct Ps {
    wait: u64,
    requests: u64,
    queue: u64,
    cpu: u64,
    peer: u64,
}

impl Phases {
    pub(crate) fn new(nodes: u16) -> Phases {
        Phases { nodes: vec![Ps::default(); nodes as usize], covered: Vec::new() }
    }

    /// Client `client`'s op on `node`, posted at `posted`, completed at `now`.
    pub(crate) fn completed(&mut self, client: usize, node: usize, posted: u64, now: u64) {
        if self.covered.len() <= client {
            self.covered.resize(client + 1, Vec::new());
        }
        let cover = &mut self.covered[client];
        if cover.len() <= node {
            cover.resize(node + 1, 0);
        }
        let from = posted.max(cover[node]);
        if now > from {
            self.nodes[node].wait += now - from;
            cover[node] = now;
        }
    }

    /// A request `node` served after `queue` in its FIFO, with `cpu` of CPU and `peer` of
    /// waits on peers.
    pub(crate) fn served(&mut self, node: usize, queue: u64, cpu: u64, peer: u64) {
        let p = &mut self.nodes[node];
        p.requests += 1;
        p.queue += queue;
        p.cpu += cpu;
        p.peer += peer;
    }

    /// The totals so far (ns), and a fresh start.
    pub(crate) fn take(&mut self, ps_per_ns: u64) -> Vec<NodePhases> {
        let out = self
            .nodes
            .iter()
            .map(|p| NodePhases {
                wait_ns: p.wait / ps_per_ns,
                requests: p.requests,
                queue_ns: p.queue / ps_per_ns,
                cpu_ns: p.cpu / ps_per_ns,
                peer_ns: p.peer / ps_per_ns,
            })
            .collect();
        for p in &mut self.nodes {
            *p = Ps::default();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_waits_of_one_client_on_one_node_count_once() {
        let mut p = Phases::new(2);
        // A batch of three READs to node 1 posted at 10, done at 30, 31 and 32.
        for done in [30, 31, 32] {
            p.completed(0, 1, 10, done);
        }
        // Another client's overlapping wait counts for itself; a later op counts whole.
        p.completed(1, 1, 12, 20);
        p.completed(0, 1, 40, 50);
        p.completed(0, 0, 10, 15);
        p.served(1, 3, 4, 5);
        let t = p.take(1);
        assert_eq!(t[1].wait_ns, 22 + 8 + 10);
        assert_eq!(t[0].wait_ns, 5);
        assert_eq!((t[1].requests, t[1].queue_ns, t[1].cpu_ns, t[1].peer_ns), (1, 3, 4, 5));
        assert_eq!(p.take(1)[1], NodePhases::default(), "taking starts afresh");
    }
}
