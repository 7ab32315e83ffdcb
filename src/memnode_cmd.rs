//! `dmindex memnode`: serve a memory node over OpenUCX.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address for the TCP control port (bootstrap and two-sided requests).
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,
    /// Pool size in bytes (suffixes k, m, g accepted, e.g. 4g).
    #[arg(long, value_parser = parse_size)]
    size: u64,
    /// File holding the token clients must present.
    #[arg(long)]
    token_file: PathBuf,
    /// This memory node's id (clients list memnodes in id order).
    #[arg(long, default_value_t = 0)]
    id: u16,
    /// Cores answering two-sided requests.
    #[arg(long, default_value_t = 1)]
    cores: usize,
    /// Also run the memory-node services of this index (see `dmindex indexes`).
    #[arg(long, value_parser = crate::bench_cmd::parse_index)]
    index: Option<String>,
    /// Every memnode of the cluster, HOST:PORT in id order, this one included (comma-separated
    /// or repeated): links for services that call other memnodes (`--index histore` ships its
    /// log to the backups' memnodes). They are reached with the same token.
    #[arg(long = "peers", value_name = "HOST:PORT", value_delimiter = ',')]
    peers: Vec<String>,
    /// How long a call to a peer may take before the peer counts as down (ms).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    peer_timeout_ms: u64,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some(b'm') => (&t[..t.len() - 1], 1 << 20),
        Some(b'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t.as_str(), 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{s}' is not a positive size (e.g. 1073741824, 512m, 4g)"))
}

/// Everything `memnode` checks of its flags before it serves (or finds it cannot: a build
/// without UCX).
pub fn validate(a: &Args) -> anyhow::Result<()> {
    crate::limits::count("--cores", a.cores, crate::limits::MAX_THREADS)?;
    if let Some(machine) = crate::limits::machine_bytes().filter(|&m| a.size > m) {
        anyhow::bail!(
            "--size {}: a pool of {} GiB is more than this machine's {} GiB of memory",
            a.size,
            a.size >> 30,
            machine >> 30
        );
    }
    Ok(())
}

#[cfg(feature = "ucx")]
pub fn run(a: &Args) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    validate(a)?;
    let token = dmindex_ucx::proto::read_token_file(&a.token_file).map_err(anyhow::Error::msg)?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let id = a.id;
    ctrlc::set_handler(move || {
        eprintln!("memnode[{id}]: signal received, stopping");
        s.store(true, Ordering::Relaxed);
    })?;
    let services = match &a.index {
        Some(name) => {
            let entry = dmindex_catalog::find(name)?;
            if entry.survives_mn_crash && a.peers.is_empty() {
                anyhow::bail!(
                    "--index {name} replicates across memnodes, whose services call each other: \
                     give --peers with every memnode, HOST:PORT in id order, this one included"
                );
            }
            Some(entry.memnode_services(a.cores)?)
        }
        None => None,
    };
    let cfg = dmindex_ucx::server::MemnodeConfig {
        listen: a.listen.clone(),
        size: a.size,
        token,
        id: a.id,
        cores: a.cores,
        services,
        peers: a.peers.clone(),
        peer_timeout: std::time::Duration::from_millis(a.peer_timeout_ms),
    };
    dmindex_ucx::server::serve(&cfg, stop, |addr| println!("memnode {} ready on {addr}", cfg.id))
        .map_err(anyhow::Error::msg)
}

#[cfg(not(feature = "ucx"))]
pub fn run(a: &Args) -> anyhow::Result<()> {
    validate(a)?;
    anyhow::bail!(dmindex_ucx::NOT_BUILT)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_with_suffixes_and_refuse_nonsense() {
        assert_eq!(super::parse_size("4096"), Ok(4096));
        assert_eq!(super::parse_size("512m"), Ok(512 << 20));
        assert_eq!(super::parse_size("4G"), Ok(4 << 30));
        assert_eq!(super::parse_size("2k"), Ok(2048));
        assert!(super::parse_size("0").is_err());
        assert!(super::parse_size("lots").is_err());
    }
}
