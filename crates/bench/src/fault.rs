//! A memory node that fails during the run phase (the simulator only): when it crashes, when it
//! restarts empty, the monitor client that rebuilds it, and what the report says about it (the
//! HiStore paper's recovery time and degraded throughput, Fig. 13 and 14).
//!
//! The monitor is one more client, on a thread of its own: it reconnects to the node (a
//! heartbeat each round trip) until the node stops answering, then until it answers again, then
//! rebuilds it through the index ([`dmindex_index::PointIndex::recover_memory_node`]) while the
//! workload's clients go on. The rebuild's real time on this machine is its CPU work (snapshot,
//! transfer through the in-process fabric, building the structure); its virtual time is the
//! fabric's share.

use serde::Serialize;

/// A crash of memory node `node` during the run phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MnFault {
    pub node: u16,
    /// When it crashes, ns into the run phase.
    pub crash_ns: u64,
    /// When it restarts empty, ns after its crash (`None`: it stays down).
    pub restart_ns: Option<u64>,
}

/// What happened to the failed node, in ns into the run phase.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Recovery {
    pub node: u16,
    pub crashed_ns: u64,
    /// When it restarted (empty).
    pub restarted_ns: Option<u64>,
    /// When the monitor reached it again and began the rebuild.
    pub rebuild_start_ns: Option<u64>,
    /// When the rebuild finished: every replica it held serves again.
    pub rebuild_end_ns: Option<u64>,
    /// Real seconds the rebuild took on this machine.
    pub rebuild_wall_s: Option<f64>,
}

/// Operations completed in each interval of the run phase.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Timeline {
    pub interval_ns: u64,
    pub ops: Vec<u64>,
}

impl Recovery {
    /// The report's lines about it.
    pub fn table(&self) -> String {
        let us = |ns: u64| ns as f64 / 1e3;
        let mut s = format!("memory node {} crashed at {:.1} us", self.node, us(self.crashed_ns));
        if let Some(r) = self.restarted_ns {
            s += &format!(", restarted at {:.1} us", us(r));
        }
        match (self.rebuild_start_ns, self.rebuild_end_ns, self.rebuild_wall_s) {
            (Some(a), Some(b), Some(w)) => {
                s += &format!(
                    ", rebuilt from {:.1} to {:.1} us ({:.1} us virtual, {:.3} s real)",
                    us(a),
                    us(b),
                    us(b - a),
                    w
                )
            }
            (Some(a), _, _) => s += &format!(", rebuild began at {:.1} us", us(a)),
            _ => {}
        }
        s + "\n"
    }
}
