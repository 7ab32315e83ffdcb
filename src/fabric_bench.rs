//! `dmindex fabric-bench`: nanoseconds per verb on the `local` transport, or on memnodes over
//! UCX (`--transport ucx`, with a `--features ucx` build).
//!
//! Each client task works on its own 64 KiB of remote memory and issues one kind of verb in a
//! loop; a run reports the wall time per verb as seen by one thread (`ns_per_verb`) and the
//! aggregate rate over all threads (`mverbs_per_s`).

use anyhow::{bail, Context};
use dmindex_bench::clock::WallClock;
use dmindex_fabric::exec::run_on_threads;
use dmindex_fabric::{BatchOp, Fabric, LocalConfig, LocalFabric};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Verbs per task per measurement.
    #[arg(long, default_value_t = 2_000_000)]
    ops: u64,
    /// Thread counts to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Client tasks (coroutines) per thread.
    #[arg(long, default_value_t = 1)]
    tasks: usize,
    /// Yield to the thread's other tasks on every verb, as a coroutine would.
    #[arg(long)]
    yield_per_verb: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Transport: local, or ucx (memnodes given with --memnode and --token-file).
    #[arg(long, value_enum, default_value_t = VerbTransport::Local)]
    transport: VerbTransport,
    /// Memnodes for --transport ucx, HOST:PORT in id order.
    #[arg(long = "memnode", value_name = "HOST:PORT", value_delimiter = ',')]
    memnodes: Vec<String>,
    /// The memnodes' token file (--transport ucx).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// The transports whose verbs `fabric-bench` times (the simulator's are `sim-bench`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerbTransport {
    Local,
    Ucx,
}

#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verb {
    Read8,
    Read256,
    Write8,
    Write256,
    Cas,
    MaskedCas,
    /// Masked CAS in the lock-acquire pattern (set bit 63 if clear).
    LockCas,
    Faa,
    Batch2,
}

const VERBS: [Verb; 9] = [
    Verb::Read8,
    Verb::Read256,
    Verb::Write8,
    Verb::Write256,
    Verb::Cas,
    Verb::MaskedCas,
    Verb::LockCas,
    Verb::Faa,
    Verb::Batch2,
];

#[derive(Serialize)]
pub(crate) struct Row {
    verb: Verb,
    threads: usize,
    tasks_per_thread: usize,
    verbs: u64,
    seconds: f64,
    pub(crate) ns_per_verb: f64,
    mverbs_per_s: f64,
}

/// Remote memory each task walks.
pub(crate) const SPAN: u64 = 64 << 10;

/// Everything `fabric-bench` checks before it runs.
pub fn validate(args: &Args) -> anyhow::Result<()> {
    if args.ops == 0 || args.tasks == 0 || args.threads.contains(&0) {
        bail!("--ops, --tasks and every --threads value must be positive");
    }
    for &t in &args.threads {
        crate::limits::threads_and_tasks(t, args.tasks)?;
        let tasks = (t * args.tasks) as u64;
        crate::limits::total("--ops", args.ops, tasks, crate::limits::MAX_OPS)?;
    }
    if args.threads.len() > 64 {
        bail!("--threads lists {} counts; at most 64 rows of each verb", args.threads.len());
    }
    if args.transport != VerbTransport::Ucx
        && (!args.memnodes.is_empty() || args.token_file.is_some())
    {
        bail!("--memnode and --token-file go with --transport ucx");
    }
    Ok(())
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    validate(args)?;
    if args.transport == VerbTransport::Ucx {
        return run_ucx(args);
    }
    // Every measured row makes fresh clients, each taking its span (clients' chunks are the
    // span itself, so nothing else is taken); the node holds every row's.
    let clients: u64 =
        args.threads.iter().map(|&t| (t * args.tasks) as u64).sum::<u64>() * VERBS.len() as u64;
    let fabric = LocalFabric::new(LocalConfig {
        node_size: (clients * SPAN + (64 << 20)).min(dmindex_fabric::addr::OFFSET_LIMIT),
        chunk_size: SPAN,
        yield_per_verb: args.yield_per_verb,
        ..LocalConfig::default()
    })
    .map_err(anyhow::Error::msg)
    .context("building the local fabric")?;
    report(args, "local", &fabric)
}

#[cfg(feature = "ucx")]
fn run_ucx(args: &Args) -> anyhow::Result<()> {
    let Some(tf) = &args.token_file else { bail!("--transport ucx needs --token-file") };
    let token = dmindex_ucx::proto::read_token_file(tf).map_err(anyhow::Error::msg)?;
    let fabric = dmindex_ucx::transport::UcxFabric::connect(&args.memnodes, &token, SPAN)
        .map_err(anyhow::Error::msg)?;
    report(args, "ucx", &fabric)
}

#[cfg(not(feature = "ucx"))]
fn run_ucx(_: &Args) -> anyhow::Result<()> {
    bail!(dmindex_ucx::NOT_BUILT)
}

fn report<F: Fabric + Sync>(args: &Args, transport: &str, fabric: &F) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for &threads in &args.threads {
        for verb in VERBS {
            rows.push(measure(fabric, verb, threads, args.tasks, args.ops)?);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "transport": transport, "rows": rows })
            )?
        );
    } else {
        println!(
            "{:<11} {:>7} {:>6} {:>12} {:>12} {:>13}",
            "verb", "threads", "tasks", "verbs", "ns/verb", "Mverbs/s"
        );
        for r in &rows {
            println!(
                "{:<11} {:>7} {:>6} {:>12} {:>12.1} {:>13.1}",
                serde_json::to_value(r.verb)?.as_str().unwrap_or("?"),
                r.threads,
                r.tasks_per_thread,
                r.verbs,
                r.ns_per_verb,
                r.mverbs_per_s
            );
        }
    }
    Ok(())
}

/// Runs `ops` verbs of one kind on each of `threads × tasks` tasks, timed on the clock the
/// benchmark's run phases are timed on.
pub(crate) fn measure<F: Fabric + Sync>(
    fabric: &F,
    verb: Verb,
    threads: usize,
    tasks: usize,
    ops: u64,
) -> anyhow::Result<Row> {
    let clock = WallClock::new();
    let results = run_on_threads(threads, tasks, |t, _| {
        let c = fabric.client(t as u16);
        async move {
            let c = c?;
            let base = c.alloc(SPAN, 4096).await?;
            let mut buf = [0u8; 256];
            let mut buf2 = [0u8; 8];
            let data = [7u8; 256];
            for i in 0..ops {
                // Walk the task's span in 256-byte steps.
                let a = base.add((i * 256) % SPAN);
                match verb {
                    Verb::Read8 => c.read(a, &mut buf[..8]).await?,
                    Verb::Read256 => c.read(a, &mut buf).await?,
                    Verb::Write8 => c.write(a, &data[..8]).await?,
                    Verb::Write256 => c.write(a, &data).await?,
                    Verb::Cas => {
                        c.cas(a, i, i + 1).await?;
                    }
                    Verb::MaskedCas => {
                        c.masked_cas(a, 0, 1 << 63, u64::MAX, u64::MAX).await?;
                    }
                    Verb::LockCas => {
                        c.masked_cas(a, 0, 1 << 63, 1 << 63, 1 << 63).await?;
                    }
                    Verb::Faa => {
                        c.faa(a, 1).await?;
                    }
                    Verb::Batch2 => {
                        c.batch(&mut [
                            BatchOp::Read { addr: a, buf: &mut buf[..8] },
                            BatchOp::Read { addr: a.add(128), buf: &mut buf2 },
                        ])
                        .await?
                    }
                }
            }
            std::hint::black_box(&buf);
            Ok::<u64, dmindex_fabric::FabricError>(c.counts().round_trips)
        }
    });
    let seconds = clock.now_ns() as f64 / 1e9;
    let mut verbs = 0;
    for r in results {
        let rts = r.context("verb failed during the benchmark")?;
        verbs += rts - 1; // minus the chunk allocation request
    }
    Ok(Row {
        verb,
        threads,
        tasks_per_thread: tasks,
        verbs,
        seconds,
        ns_per_verb: seconds * 1e9 * threads as f64 / verbs as f64,
        mverbs_per_s: verbs as f64 / seconds / 1e6,
    })
}
