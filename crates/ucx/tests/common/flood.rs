//! Floods of raw TCP connections to UCX's listener, and a memnode process under a small
//! descriptor limit to aim them at.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

/// The descriptor limit (soft and hard) of a flooded memnode: the 1024.
pub const MEMNODE_FD_LIMIT: u64 = 1024;

/// Runs `cmd` (a memnode) with at most [`MEMNODE_FD_LIMIT`] descriptors, hard limit included,
/// so that it cannot raise its way out of the test.
pub fn with_fd_limit(cmd: &mut Command) -> &mut Command {
    let limit = libc::rlimit { rlim_cur: MEMNODE_FD_LIMIT, rlim_max: MEMNODE_FD_LIMIT };
    // SAFETY: the closure runs in the child between fork and exec and only calls setrlimit,
    // which is async-signal-safe, on a value copied into it.
    unsafe {
        cmd.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        })
    }
}

/// UCX's listening address from a memnode's start-up line ("UCX listens on ADDR; ...").
pub fn ucx_listener_in(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("UCX listens on ")? + "UCX listens on ".len()..];
    rest.split([';', ',']).next()?.trim().parse().ok()
}

/// The TCP listeners of process `pid` (IPv4), other than `control`: UCX's. Read from the
/// kernel's table of its network namespace, kept to the sockets among the process's
/// descriptors.
pub fn ucx_listeners_of(pid: u32, control: SocketAddr) -> Vec<SocketAddr> {
    let mine: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| Some(l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_string()))
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local address, state (0A: listening), inode
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            if *state != "0A" || !mine.contains(*inode) {
                return None;
            }
            let (ip, port) = local.split_once(':')?;
            let ip = u32::from_str_radix(ip, 16).ok()?;
            let addr = SocketAddr::from((ip.to_ne_bytes(), u16::from_str_radix(port, 16).ok()?));
            (addr != control).then_some(addr)
        })
        .collect()
}

/// How many descriptors process `pid` has open (`None` once it is gone).
pub fn fd_count(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The most descriptors process `pid` had open, sampled every few milliseconds until dropped.
pub struct FdPeak {
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FdPeak {
    pub fn watch(pid: u32) -> FdPeak {
        let (peak, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (p, s) = (Arc::clone(&peak), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(n) = fd_count(pid) {
                    p.fetch_max(n, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        FdPeak { peak, stop, thread: Some(thread) }
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for FdPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Raw TCP connections that never send a byte, opened without waiting (the kernel goes on
/// with their handshakes, and retries those whose requests were dropped).
pub struct Flood {
    conns: Vec<Conn>,
}

struct Conn {
    socket: Socket,
    opened: Instant,
    /// When the server ended it (end of stream or reset), once seen.
    ended: Option<Instant>,
}

impl Flood {
    /// `n` connections from `from` (an address of this host, port 0) to `to`. This process
    /// needs `n` descriptors more than it has: its soft limit is raised first.
    pub fn open(from: SocketAddr, to: SocketAddr, n: usize) -> Flood {
        dmindex_ucx::descriptors::Budget::raise();
        let conns = (0..n)
            .map(|_| {
                let socket = Socket::new(Domain::for_address(to), Type::STREAM, None).unwrap();
                socket.set_nonblocking(true).unwrap();
                socket.bind(&from.into()).unwrap();
                match socket.connect(&to.into()) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                    Err(e) => panic!("connect to {to}: {e}"),
                }
                Conn { socket, opened: Instant::now(), ended: None }
            })
            .collect();
        Flood { conns }
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Waits until every connection is established, or `within` has passed; how many are.
    pub fn established(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let up = self.conns.iter().filter(|c| c.socket.peer_addr().is_ok()).count();
            if up == self.conns.len() || Instant::now() >= deadline {
                return up;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Looks, until `until`, for connections the server ended, noting when.
    pub fn watch_ends(&mut self, until: Instant) {
        loop {
            let mut polled: Vec<libc::pollfd> = self
                .conns
                .iter()
                .map(|c| libc::pollfd {
                    fd: c.socket.as_raw_fd(),
                    events: if c.ended.is_some() { 0 } else { libc::POLLIN | libc::POLLRDHUP },
                    revents: 0,
                })
                .collect();
            let left = until.saturating_duration_since(Instant::now());
            // SAFETY: `polled` is a valid array of pollfd for the call.
            unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 10) };
            let now = Instant::now();
            let hung = libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
            for (c, p) in self.conns.iter_mut().zip(&polled) {
                // Nothing is ever sent to these connections: readable means ended.
                if c.ended.is_none() && p.revents & hung != 0 {
                    c.ended = Some(now);
                }
            }
            if left.is_zero() {
                return;
            }
        }
    }

    /// How long after its opening each connection that the server ended was ended.
    pub fn lifetimes(&self) -> Vec<Duration> {
        self.conns.iter().filter_map(|c| c.ended.map(|e| e - c.opened)).collect()
    }
}

/// Runs a memnode on `listen` (UCX over TCP) as this process's only work, printing
/// `DMX MEMNODE READY <addr>` once it serves; the process ends when its standard input does
/// (the test that started it closed it, or died).
pub fn memnode_until_stdin_closes(listen: &str) {
    use dmindex_ucx::server::{serve, MemnodeConfig};
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let cfg = MemnodeConfig {
        listen: listen.into(),
        size: 32 << 20,
        token: super::TOKEN.to_vec(),
        id: 0,
        cores: 2,
        services: None,
        peers: Vec::new(),
        peer_timeout: Duration::from_secs(2),
    };
    let stop = Arc::new(AtomicBool::new(false));
    serve(&cfg, stop, |a| println!("DMX MEMNODE READY {a}")).unwrap();
}

/// A client connects to the memnode at `addr`, writes `word` and reads it back.
pub fn client_is_served(addr: &str, word: u64) -> Result<(), String> {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::Fabric;
    let f = dmindex_ucx::transport::UcxFabric::connect(&[addr.to_string()], super::TOKEN, 1 << 20)?;
    let c = f.client(0).map_err(|e| e.to_string())?;
    let a = run_tasks([c.alloc(64, 64)]).remove(0).map_err(|e| e.to_string())?;
    run_tasks([c.write(a, &word.to_le_bytes())]).remove(0).map_err(|e| e.to_string())?;
    match run_tasks([c.read_word(a)]).remove(0).map_err(|e| e.to_string())? {
        w if w == word => Ok(()),
        w => Err(format!("wrote {word}, read {w}")),
    }
}
