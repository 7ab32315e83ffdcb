//! A memory node that fails during the run phase (the simulator, or memnode processes the
//! harness started): when it crashes, when it restarts empty, the monitor client that rebuilds
//! it, and what the report says about it (the HiStore paper's recovery time and degraded
//! throughput, Fig. 13 and 14).
//!
//! The monitor is one more client, on a thread of its own: it reconnects to the node (a
//! heartbeat each round trip) until the node stops answering, then until it answers again, then
//! rebuilds it through the index ([`dmindex_index::PointIndex::recover_memory_node`]) while the
//! workload's clients go on. The rebuild's real time on this machine is its CPU work (snapshot,
//! transfer through the in-process fabric, building the structure); its virtual time is the
//! fabric's share.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use dmindex_fabric::exec::run_tasks;
use dmindex_fabric::Fabric;
use dmindex_index::PointIndex;
use serde::{Deserialize, Serialize};

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
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
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
    /// Why the rebuild failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_error: Option<String>,
}

/// The verdict on a recorded history (`--check`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checked {
    /// Operations recorded, load phase and final reads included.
    pub ops: usize,
    /// Of those, never answered (their client failed or stopped).
    pub pending: usize,
    /// Keys checked.
    pub keys: usize,
    /// Whether each key began in a state the check did not know: an attached run, whose
    /// history lacks the writes of the process that loaded the index.
    pub unknown_start: bool,
    /// The violation found, if the history is not linearizable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
}

/// Operations completed in each interval of the run phase.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
                    ", rebuilt from {:.1} to {:.1} us ({:.1} us of the run's time, {:.3} s of this machine's)",
                    us(a),
                    us(b),
                    us(b - a),
                    w
                )
            }
            (Some(a), _, _) => s += &format!(", rebuild began at {:.1} us", us(a)),
            _ => {}
        }
        if let Some(e) = &self.rebuild_error {
            s += &format!(", rebuild failed: {e}");
        }
        s + "\n"
    }
}

/// Memory nodes the harness can crash and restart in real time (memnode processes it started).
pub trait NodeControl: Sync {
    /// Crashes `node` (SIGKILL).
    fn kill(&self, node: u16) -> anyhow::Result<()>;
    /// Starts `node` again, empty, on its address.
    fn restart(&self, node: u16) -> anyhow::Result<()>;
}

impl NodeControl for crate::cluster::Cluster {
    fn kill(&self, node: u16) -> anyhow::Result<()> {
        crate::cluster::Cluster::kill(self, node)
    }
    fn restart(&self, node: u16) -> anyhow::Result<()> {
        crate::cluster::Cluster::restart(self, node)
    }
}

/// How often the monitor reconnects to the node it watches (a heartbeat).
const HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(5);

/// Real time: ns since the run phase began, from the run's clock.
pub(crate) struct RunClock<'a> {
    pub(crate) now: &'a (dyn Fn() -> u64 + Sync),
    pub(crate) t0: u64,
    /// Set when the run phase's clients are done: every thread here stops.
    pub(crate) stop: &'a AtomicBool,
}

impl RunClock<'_> {
    fn since(&self) -> u64 {
        (self.now)().saturating_sub(self.t0)
    }

    /// Sleeps until `at` ns into the run; false if the run ended first.
    fn sleep_until(&self, at: u64) -> bool {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = self.since();
            if now >= at {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_nanos(at - now).min(HEARTBEAT));
        }
    }
}

/// Crashes and restarts the node `f` names at its instants, recording them in `rec`.
pub(crate) fn inject(
    control: &dyn NodeControl,
    f: &MnFault,
    clock: &RunClock<'_>,
    rec: &Mutex<Recovery>,
) -> anyhow::Result<()> {
    if !clock.sleep_until(f.crash_ns) {
        return Ok(());
    }
    control.kill(f.node)?;
    lock(rec).crashed_ns = clock.since();
    let Some(after) = f.restart_ns else { return Ok(()) };
    if !clock.sleep_until(f.crash_ns + after) {
        return Ok(());
    }
    control.restart(f.node)?;
    lock(rec).restarted_ns = Some(clock.since());
    Ok(())
}

/// The monitor: a client on this thread reconnects to `node` every heartbeat until the node
/// stops answering, then until it answers again, then rebuilds it through `idx` while the run
/// goes on. Records what it saw in `rec` (the crash and restart instants only where nothing
/// injected them).
pub(crate) fn monitor<F, I>(
    fabric: &F,
    idx: &I,
    node: u16,
    clock: &RunClock<'_>,
    rec: &Mutex<Recovery>,
    injected: bool,
) where
    F: Fabric,
    I: PointIndex<F::Transport>,
{
    let c = match fabric.client(0) {
        Ok(c) => c,
        Err(e) => {
            lock(rec).rebuild_error = Some(format!("the monitor has no client: {e}"));
            return;
        }
    };
    let answers = || run_tasks([c.reconnect(node)]).remove(0).is_ok();
    while answers() {
        if !clock.sleep_until(clock.since() + HEARTBEAT.as_nanos() as u64) {
            return;
        }
    }
    if !injected {
        lock(rec).crashed_ns = clock.since();
    }
    loop {
        if !clock.sleep_until(clock.since() + HEARTBEAT.as_nanos() as u64) {
            return;
        }
        if answers() {
            break;
        }
    }
    let (start, wall) = (clock.since(), std::time::Instant::now());
    {
        let mut r = lock(rec);
        if !injected {
            r.restarted_ns = Some(start);
        }
        r.rebuild_start_ns = Some(start);
    }
    let done = run_tasks([idx.recover_memory_node(&c, node)]).remove(0);
    let mut r = lock(rec);
    match done {
        Ok(()) => {
            r.rebuild_end_ns = Some(clock.since());
            r.rebuild_wall_s = Some(wall.elapsed().as_secs_f64());
        }
        Err(e) => r.rebuild_error = Some(e.to_string()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
