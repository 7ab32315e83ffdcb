//! What a simulation measured, in virtual time.

use serde::Serialize;

use crate::world::{Nic, World, PS_PER_NS};

/// Utilisation of one NIC over the run: busy time of each server over elapsed time.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NicUtilisation {
    /// `cn<N>` or `mn<N>`.
    pub nic: String,
    /// Messages handled.
    pub messages: u64,
    /// Fraction of time the message engine was busy.
    pub engine: f64,
    /// Fraction of time the outgoing link was busy.
    pub tx: f64,
    /// Fraction of time the incoming link was busy.
    pub rx: f64,
}

/// Throughput, verb latency and NIC utilisation of a simulation so far.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimReport {
    /// Virtual time elapsed, ns.
    pub elapsed_ns: u64,
    /// Events processed.
    pub events: u64,
    /// Completed verbs and requests.
    pub verbs: u64,
    /// Completed READs, WRITEs, atomics, requests.
    pub reads: u64,
    pub writes: u64,
    pub atomics: u64,
    pub rpcs: u64,
    /// Payload bytes read and written.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Verbs per virtual second.
    pub verbs_per_sec: f64,
    /// Verb round-trip latency percentiles, ns.
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    pub latency_p999_ns: u64,
    /// Per-NIC utilisation.
    pub nics: Vec<NicUtilisation>,
}

fn util(nic: &Nic, name: String, elapsed_ps: u64) -> NicUtilisation {
    let f = |busy: u64| if elapsed_ps == 0 { 0.0 } else { busy as f64 / elapsed_ps as f64 };
    NicUtilisation {
        nic: name,
        messages: nic.msgs,
        engine: f(nic.engine_busy_ps),
        tx: f(nic.tx.busy_ps),
        rx: f(nic.rx.busy_ps),
    }
}

impl SimReport {
    pub(crate) fn from_world(w: &World) -> SimReport {
        let c = &w.counters;
        let verbs = c.reads + c.writes + c.atomics + c.rpcs;
        let elapsed_ps = w.now;
        let mut nics: Vec<NicUtilisation> = w
            .cn_nics
            .iter()
            .enumerate()
            .map(|(i, n)| util(n, format!("cn{i}"), elapsed_ps))
            .collect();
        nics.extend(
            w.mn_nics.iter().enumerate().map(|(i, n)| util(n, format!("mn{i}"), elapsed_ps)),
        );
        let q =
            |p: f64| if w.latency_ns.is_empty() { 0 } else { w.latency_ns.value_at_quantile(p) };
        SimReport {
            elapsed_ns: elapsed_ps / PS_PER_NS,
            events: w.events_processed,
            verbs,
            reads: c.reads,
            writes: c.writes,
            atomics: c.atomics,
            rpcs: c.rpcs,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            verbs_per_sec: if elapsed_ps == 0 {
                0.0
            } else {
                verbs as f64 * 1e12 / elapsed_ps as f64
            },
            latency_p50_ns: q(0.5),
            latency_p99_ns: q(0.99),
            latency_p999_ns: q(0.999),
            nics,
        }
    }

    /// A human-readable summary.
    pub fn table(&self) -> String {
        let mut s = format!(
            "virtual time {:.3} ms, {} verbs ({} R / {} W / {} atomic / {} rpc), {:.2} Mverbs/s\n\
             verb latency p50 {:.2} us, p99 {:.2} us, p999 {:.2} us\n",
            self.elapsed_ns as f64 / 1e6,
            self.verbs,
            self.reads,
            self.writes,
            self.atomics,
            self.rpcs,
            self.verbs_per_sec / 1e6,
            self.latency_p50_ns as f64 / 1e3,
            self.latency_p99_ns as f64 / 1e3,
            self.latency_p999_ns as f64 / 1e3,
        );
        s.push_str(&format!(
            "{:<6} {:>12} {:>8} {:>8} {:>8}\n",
            "nic", "messages", "engine", "tx", "rx"
        ));
        for n in &self.nics {
            s.push_str(&format!(
                "{:<6} {:>12} {:>7.1}% {:>7.1}% {:>7.1}%\n",
                n.nic,
                n.messages,
                n.engine * 100.0,
                n.tx * 100.0,
                n.rx * 100.0
            ));
        }
        s
    }
}
