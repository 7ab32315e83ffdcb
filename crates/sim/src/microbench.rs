//! Verb microbenchmarks on the model, as published NIC characterisations run them.
//!
//! Each of `threads` client threads on each of `cns` compute nodes posts `depth` verbs of one
//! kind (each with its own doorbell), waits for all of them, and repeats — the synchronous mode
//! of the SMART (ASPLOS '24) microbenchmarks whose numbers calibrate the model
//! ([`crate::presets`]). Verbs go to one memory node, to distinct 8-byte-aligned addresses (or
//! all to one word, for atomics on one address). `dmindex experiment testbed/verbs` puts the
//! results next to the published values; the tests pin them.

use dmindex_fabric::AtomicOp;
use futures::future::join_all;

use crate::{NetParams, Sim, SimConfig, Task};

/// The verb a microbenchmark floods with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Read,
    Write,
    /// Compare-and-swap (failing or not: the NIC does the same work).
    Cas,
}

/// One microbenchmark point.
#[derive(Clone, Debug)]
pub struct VerbBench {
    pub verb: Verb,
    /// Payload bytes per READ or WRITE.
    pub bytes: usize,
    pub cns: u16,
    /// Client threads per compute node.
    pub threads: usize,
    /// Verbs each thread posts before it waits for them.
    pub depth: usize,
    /// Rounds of `depth` verbs per thread.
    pub rounds: usize,
    /// Every verb to one 8-byte word (atomics on one address).
    pub one_word: bool,
    /// A metadata READ each verb comes with (CHIME Fig. 4a/4b: a vacancy bitmap or a leaf
    /// header next to the data); `mops` still counts the verbs it accompanies.
    pub meta: Option<Meta>,
}

/// A READ of metadata that goes with each verb of a [`VerbBench`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Bytes read, just before the verb's own bytes.
    pub bytes: usize,
    /// The verb waits for it (its address or size depends on what it says: a vacancy bitmap
    /// before a hop range); otherwise both are posted together (a leaf header beside a
    /// neighbourhood).
    pub first: bool,
}

/// What a microbenchmark measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Verbs per virtual second, in millions.
    pub mops: f64,
    /// Mean virtual time of one round (post `depth`, wait for them all), in ns.
    pub round_ns: f64,
}

/// Runs `bench` on a fresh simulation of `net` (no jitter-free shortcut: the preset as it is).
pub fn run(net: &NetParams, bench: &VerbBench) -> Result<Measured, String> {
    let clients = bench.cns as usize * bench.threads;
    if clients == 0 || bench.depth == 0 || bench.rounds == 0 {
        return Err("a microbenchmark needs clients, depth and rounds".into());
    }
    let meta_len = bench.meta.map_or(0, |m| m.bytes.next_multiple_of(8));
    let span = ((meta_len + bench.bytes.max(8)) as u64).next_multiple_of(64);
    let region = span * (clients * bench.depth) as u64;
    let sim = Sim::new(SimConfig {
        node_size: (region + (64 << 20)).next_power_of_two(),
        chunk_size: 1 << 20,
        ..SimConfig::new(1, net.clone())
    })?;
    let setup = sim.client_on_own_thread(0);
    let base = sim.block_on(async { setup.alloc(region, 64).await }).map_err(|e| e.to_string())?;
    let cs: Vec<_> = (0..bench.cns)
        .flat_map(|cn| (0..bench.threads).map(move |t| (cn, t)))
        .map(|(cn, t)| sim.client_on(cn, cn as usize * bench.threads + t))
        .collect();
    let start = sim.now_ns();
    let tasks = cs.iter().enumerate().map(|(i, c)| {
        Box::pin(async move {
            let payload = vec![0u8; bench.bytes];
            for _ in 0..bench.rounds {
                let verbs = (0..bench.depth).map(|d| {
                    let slot = (i * bench.depth + d) as u64;
                    let at = if bench.one_word { base } else { base.add(slot * span) };
                    let payload = &payload;
                    async move {
                        // The metadata first in the slot, the verb's bytes after it.
                        let (meta_at, at) = (at, at.add(meta_len as u64));
                        let meta = async {
                            if let Some(m) = bench.meta {
                                let mut buf = vec![0u8; m.bytes];
                                c.read(meta_at, &mut buf).await.expect("metadata READ");
                            }
                        };
                        let verb = async {
                            match bench.verb {
                                Verb::Read => {
                                    let mut buf = vec![0u8; bench.bytes];
                                    c.read(at, &mut buf).await
                                }
                                Verb::Write => c.write(at, payload).await,
                                Verb::Cas => c
                                    .atomic(at, AtomicOp::Cas { expected: 0, new: 0 })
                                    .await
                                    .map(drop),
                            }
                        };
                        let r = if bench.meta.is_some_and(|m| m.first) {
                            meta.await;
                            verb.await
                        } else {
                            futures::join!(meta, verb).1
                        };
                        r.expect("microbenchmark verb")
                    }
                });
                join_all(verbs).await;
            }
        }) as Task
    });
    let out = sim.run(tasks);
    if !out.all_finished() {
        return Err(format!("microbenchmark did not finish: {out:?}"));
    }
    let elapsed = (sim.now_ns() - start) as f64;
    let verbs = (clients * bench.depth * bench.rounds) as f64;
    Ok(Measured { mops: verbs / elapsed * 1e3, round_ns: elapsed / bench.rounds as f64 })
}
