//! `dmindex sim-bench`: a mixed READ/WRITE/CAS load on the simulator, reporting the virtual-time
//! results (throughput, verb latency, NIC utilisation) and how fast the simulator itself runs.

use std::time::Instant;

use anyhow::{bail, Context};
use dmindex_fabric::{Client, GlobalAddr};
use dmindex_sim::{Faults, NetParams, Sim, SimConfig, SimTransport, Task};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long, default_value = dmindex_sim::DEFAULT_PRESET,
          help = format!("Simulator fabric preset: {}", dmindex_sim::PRESETS.join(", ")))]
    preset: String,
    /// Override a fabric parameter, e.g. --set link_gbps=25 (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    overrides: Vec<String>,
    /// Compute nodes.
    #[arg(long, default_value_t = 10)]
    cns: u16,
    /// Clients per compute node.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Verbs per client.
    #[arg(long, default_value_t = 2_000)]
    verbs: u64,
    /// Bytes per READ and WRITE.
    #[arg(long, default_value_t = 64)]
    bytes: u64,
    /// Percent of verbs that are READs; the rest split 60/40 between WRITEs and CAS.
    #[arg(long, default_value_t = 50)]
    read_pct: u64,
    /// Inject random delays.
    #[arg(long)]
    delays: bool,
    /// The seed (a run replays exactly with the same seed and flags).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Everything `sim-bench` checks before it runs: the fabric it would simulate.
pub fn validate(args: &Args) -> anyhow::Result<NetParams> {
    if args.cns == 0 || args.clients == 0 || args.verbs == 0 || args.bytes == 0 {
        bail!("--cns, --clients, --verbs and --bytes must be positive");
    }
    if args.read_pct > 100 {
        bail!("--read-pct must be at most 100, got {}", args.read_pct);
    }
    if args.bytes > SPAN / 2 {
        bail!(
            "--bytes {} is more than {} (half the {SPAN}-byte span the clients share)",
            args.bytes,
            SPAN / 2
        );
    }
    crate::limits::count("--cns", args.cns as usize, crate::limits::MAX_CNS as usize)?;
    let tasks = (args.cns as usize).saturating_mul(args.clients);
    crate::limits::count("client tasks (--cns × --clients)", tasks, crate::limits::MAX_TASKS)?;
    crate::limits::total("--verbs", args.verbs, tasks as u64, crate::limits::MAX_OPS)?;
    let mut net = NetParams::preset(&args.preset).map_err(anyhow::Error::msg)?;
    for o in &args.overrides {
        net.set(o).map_err(anyhow::Error::msg)?;
    }
    Ok(net)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let net = validate(args)?;
    let span = SPAN;
    let sim = Sim::new(SimConfig {
        faults: if args.delays { Faults::delays() } else { Faults::none() },
        node_size: (span * 4).max(64 << 20),
        chunk_size: 1 << 20,
        ..SimConfig::new(args.seed, net)
    })
    .map_err(anyhow::Error::msg)
    .context("building the simulator")?;
    let setup = sim.client_on_own_thread(0);
    let base = sim.block_on(async { setup.alloc(span, 4096).await })?;
    let clients: Vec<Client<SimTransport>> = (0..args.cns)
        .flat_map(|cn| (0..args.clients).map(move |t| (cn, t)))
        .map(|(cn, t)| sim.client_on(cn, cn as usize * args.clients + t))
        .collect();
    let seeds: Vec<u64> = clients.iter().map(|_| sim.random_u64()).collect();
    let start_ns = sim.now_ns();
    let wall = Instant::now();
    let failure = std::cell::RefCell::new(None);
    let outcome = sim.run(clients.iter().zip(seeds).map(|(c, seed)| {
        let failure = &failure;
        Box::pin(async move {
            if let Err(e) =
                client_loop(c, base, span, args.bytes, args.verbs, args.read_pct, seed).await
            {
                failure.borrow_mut().get_or_insert(e);
            }
        }) as Task
    }));
    if let Some(e) = failure.into_inner() {
        return Err(e.context("a verb failed during the simulation"));
    }
    let real = wall.elapsed().as_secs_f64();
    if !outcome.all_finished() {
        bail!("simulation did not finish: {outcome:?}");
    }
    let report = sim.report();
    let verbs = (clients.len() as u64 * args.verbs) as f64;
    let sim_speed = verbs / real;
    let virtual_rate = verbs * 1e9 / (sim.now_ns() - start_ns) as f64;
    if args.json {
        let v = serde_json::json!({
            "transport": "sim",
            "preset": args.preset,
            "seed": args.seed,
            "trace_hash": format!("{:016x}", sim.trace_hash()),
            "verbs": verbs as u64,
            "real_seconds": real,
            "simulated_verbs_per_real_second": sim_speed,
            "throughput_verbs_per_virtual_second": virtual_rate,
            "report": report,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", report.table());
        println!(
            "run: {} verbs, {:.2} Mverbs/s virtual; simulator speed {:.2} M verbs per real second ({:.2} s); trace {:016x}",
            verbs as u64,
            virtual_rate / 1e6,
            sim_speed / 1e6,
            real,
            sim.trace_hash()
        );
    }
    Ok(())
}

/// Bytes of remote memory the clients' verbs land in.
const SPAN: u64 = 1 << 20;

/// xorshift64*: cheap per-client choices, seeded from the simulation's RNG.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

async fn client_loop(
    c: &Client<SimTransport>,
    base: GlobalAddr,
    span: u64,
    bytes: u64,
    verbs: u64,
    read_pct: u64,
    seed: u64,
) -> anyhow::Result<()> {
    let mut state = seed | 1;
    let mut buf = vec![0u8; bytes as usize];
    let stride = bytes.next_power_of_two().max(64);
    let slot_mask = (span / stride).max(1).next_power_of_two() / 2 - 1;
    for _ in 0..verbs {
        let r = next(&mut state);
        let a = base.add(((r >> 20) & slot_mask) * stride);
        let pick = r % 100;
        if pick < read_pct {
            c.read(a, &mut buf).await?;
        } else if pick < read_pct + (100 - read_pct) * 6 / 10 {
            c.write(a, &buf).await?;
        } else {
            c.cas(a, 0, r).await?;
        }
    }
    Ok(())
}
