//! Memnode processes on this machine, started, killed and restarted by the harness: a cluster
//! for `bench --transport ucx --spawn-memnodes`, where a memory-node crash is a `kill -9` of its
//! process and a restart is a new process on the same address (an empty pool, a new
//! incarnation).
//!
//! Each memnode listens on a loopback port of its own, knows every other as a peer, runs the
//! index's services, and shares a token drawn at random and kept in a file of the cluster's own
//! directory (removed with the cluster). Its output goes to `mnN.log` there; a memnode that does
//! not come up is an error quoting the end of its log.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};

/// How long a memnode may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnSpec {
    /// The `dmindex` executable (it runs `memnode`).
    pub exe: PathBuf,
    pub nodes: u16,
    /// Pool bytes per memnode.
    pub bytes: u64,
    /// The index whose memory-node services the memnodes run.
    pub index: String,
    /// Cores answering two-sided requests on each memnode.
    pub cores: usize,
}

/// Memnode processes, killed when dropped.
pub struct Cluster {
    spec: SpawnSpec,
    dir: PathBuf,
    token: Vec<u8>,
    addrs: Vec<String>,
    children: Mutex<Vec<Option<Child>>>,
}

/// A loopback port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A token nobody can guess: 32 hex digits from the operating system's randomness.
fn draw_token() -> Vec<u8> {
    let bytes: [u8; 16] = dmindex_ucx::auth::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect::<String>().into_bytes()
}

impl Cluster {
    /// Starts `spec.nodes` memnodes and waits until each serves.
    pub fn start(spec: &SpawnSpec) -> anyhow::Result<Cluster> {
        if spec.nodes == 0 {
            bail!("a cluster needs at least one memnode");
        }
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dmindex-cluster-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let token = draw_token();
        std::fs::write(dir.join("token"), &token).context("writing the cluster's token")?;
        let addrs = (0..spec.nodes)
            .map(|_| Ok(format!("127.0.0.1:{}", free_port()?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let c = Cluster {
            spec: spec.clone(),
            dir,
            token,
            addrs,
            children: Mutex::new((0..spec.nodes).map(|_| None).collect()),
        };
        for node in 0..spec.nodes {
            c.spawn(node)?;
        }
        Ok(c)
    }

    /// The memnodes' addresses, in id order.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// Their token.
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// Where each memnode's output goes.
    pub fn log(&self, node: u16) -> PathBuf {
        self.dir.join(format!("mn{node}.log"))
    }

    fn spawn(&self, node: u16) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(node))
            .context("opening a memnode's log")?;
        let mut child = Command::new(&self.spec.exe)
            .arg("memnode")
            .args(["--listen", &self.addrs[node as usize]])
            .args(["--size", &self.spec.bytes.to_string()])
            .arg("--token-file")
            .arg(self.dir.join("token"))
            .args(["--id", &node.to_string()])
            .args(["--cores", &self.spec.cores.to_string()])
            .args(["--index", &self.spec.index])
            .args(["--peers", &self.addrs.join(",")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} memnode", self.spec.exe.display()))?;
        // The memnode says it is ready on its standard output.
        let out = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(out).lines();
            let ready = lines.next().and_then(Result::ok).is_some_and(|l| l.contains("ready"));
            let _ = tx.send(ready);
            // Keep draining so the memnode never blocks on a full pipe.
            for _ in lines {}
        });
        let ready = rx.recv_timeout(START_TIMEOUT).unwrap_or(false);
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "memnode {node} did not start on {}: {}",
                self.addrs[node as usize],
                tail(&self.log(node))
            );
        }
        self.children.lock().unwrap_or_else(|e| e.into_inner())[node as usize] = Some(child);
        Ok(())
    }

    /// Kills memnode `node` with SIGKILL (a crash: nothing is flushed, nothing said).
    pub fn kill(&self, node: u16) -> anyhow::Result<()> {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut c) = children.get_mut(node as usize).and_then(Option::take) else {
            bail!("memnode {node} is not running");
        };
        c.kill().with_context(|| format!("killing memnode {node}"))?;
        c.wait().with_context(|| format!("reaping memnode {node}"))?;
        Ok(())
    }

    /// Starts memnode `node` again on its address: a new process with an empty pool.
    pub fn restart(&self, node: u16) -> anyhow::Result<()> {
        if self.children.lock().unwrap_or_else(|e| e.into_inner())[node as usize].is_some() {
            bail!("memnode {node} is still running");
        }
        self.spawn(node)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.get_mut().unwrap_or_else(|e| e.into_inner()).iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The last lines of a log, for an error message.
fn tail(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(5);
    match lines[start..].join(" | ") {
        s if s.is_empty() => "(no output)".into(),
        s => s,
    }
}
