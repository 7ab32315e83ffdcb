//! The guard over UCX's own TCP listener: a thread that bounds the connections UCX accepts, as
//! the control port bounds its own ([`crate::admission`]).
//!
//! UCX 1.13's TCP transport has no option to cap or time out the connections its listener
//! accepts, and it closes that listener for good on the first `accept` that fails for want of
//! a descriptor (`uct_tcp_iface_connect_handler`): 1100 raw connections at a limit of 1024 left
//! a memnode that no client could reach until it restarted, which empties its pool. So the
//! memnode raises its descriptor limit ([`Budget`]) and this thread, every 100 ms and as soon as
//! connections arrive (at most every 2 ms), looks at the sockets of this process that UCX's
//! listeners accepted and
//!
//! * ends those that sent no UCX handshake within 5 s, and those past the caps per source and
//!   in all ([`crate::ucx_caps`]), with `shutdown`: never `close`, the descriptor is UCX's, and
//!   UCX sees the connection end and closes it itself;
//! * closes the listener's gate to sources at their cap, or to everyone at the total
//!   ([`crate::syn_gate`]), so that the count cannot run far past the caps between two looks,
//!   and shortens the listener's queue of connections not yet accepted (at most 128).
//!
//! UCX's listeners are the listening sockets that appear while the memnode makes its worker
//! ([`listeners_made_by`]); memnodes of one process make theirs one at a time.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::admission::often;
use crate::descriptors::Budget;
use crate::own_sockets::{self, Descriptors, Held};
use crate::syn_gate::Gate;
use crate::ucx_caps::{self, Caps, Seen, Why};

/// How long a connection to UCX's listener may go without sending UCX's handshake: as long as
/// a control connection has for its bootstrap.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client's UCX sends first on a connection to `listener` (UCX 1.13's TCP transport):
/// the magic number (8 bytes), an active-message header (5) and the connection request (13,
/// then the client's address: a 16-byte `sockaddr_in`, or a 28-byte `sockaddr_in6`). A
/// connection that has sent less has not sent its handshake.
pub fn handshake_bytes(listener: SocketAddr) -> u64 {
    8 + 5 + 13 + if listener.is_ipv4() { 16 } else { 28 }
}

/// The guard looks at least this often (the deadline's precision)...
const PERIOD: Duration = Duration::from_millis(100);
/// ...and at most this often, while connections keep arriving: the gate closes at most this
/// long after a burst begins (plus a look's own time, about a millisecond per thousand
/// descriptors).
const GAP: Duration = Duration::from_millis(2);

/// The longest queue of connections that UCX has not accepted yet that the guard leaves its
/// listener (UCX asks for the system's maximum, 4096 here): connections in it get descriptors
/// when UCX takes them, gate or not.
const MAX_BACKLOG: usize = 128;

/// One of UCX's listening sockets.
#[derive(Clone, Debug)]
pub struct Listener {
    pub fd: RawFd,
    pub inode: u64,
    pub addr: SocketAddr,
}

impl Listener {
    /// Whether a socket bound to `local` was accepted on this listener (or is it).
    fn owns(&self, local: SocketAddr) -> bool {
        local.port() == self.addr.port()
            && (local.ip() == self.addr.ip() || self.addr.ip().is_unspecified())
    }
}

/// Runs `make` (which makes a UCX worker), and finds the listening TCP sockets that appeared in
/// this process meanwhile: UCX's. Memnodes of one process make their workers one at a time
/// through here; a listener that other code of the process opens at that moment would be taken
/// for UCX's too (tests only: a memnode process opens nothing else then).
pub fn listeners_made_by<T>(make: impl FnOnce() -> T) -> (T, Vec<Listener>) {
    static MAKING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let Ok(mut fds) = Descriptors::open() else {
        eprintln!("cannot list this process's descriptors: UCX's listener is not guarded");
        return (make(), Vec::new());
    };
    let before: HashSet<u64> = listening(&mut fds).map(|s| s.inode).collect();
    let made = make();
    let listeners = listening(&mut fds)
        .filter(|s| !before.contains(&s.inode))
        .map(|s| Listener { fd: s.fd, inode: s.inode, addr: s.local })
        .collect();
    (made, listeners)
}

fn listening(fds: &mut Descriptors) -> impl Iterator<Item = own_sockets::TcpSocket> {
    let list = fds.list();
    list.into_iter().filter_map(own_sockets::tcp_socket).filter(|s| s.listening)
}

/// The running guard; dropping it stops the thread (and opens the gate).
pub struct UcxGuard {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UcxGuard {
    /// Raises the descriptor limit, says what memnode `id`'s UCX listens on and within what
    /// bounds, and guards `listeners` (with none, over transports without a listener, it only
    /// raises the limit).
    pub fn start(id: u16, listeners: Vec<Listener>) -> UcxGuard {
        let budget = Budget::raise();
        let caps = Caps {
            total: budget.ucx_total,
            per_source: budget.ucx_per_source,
            handshake_within: HANDSHAKE_TIMEOUT,
        };
        let stop = Arc::new(AtomicBool::new(false));
        if listeners.is_empty() {
            eprintln!("memnode[{id}]: UCX has no TCP listener; descriptor limit {}", budget.limit);
            return UcxGuard { stop, thread: None };
        }
        let addrs: Vec<String> = listeners.iter().map(|l| l.addr.to_string()).collect();
        eprintln!(
            "memnode[{id}]: UCX listens on {}; {}; a connection to it without UCX's handshake \
             within {:?} is closed",
            addrs.join(", "),
            budget.describe(),
            HANDSHAKE_TIMEOUT
        );
        let backlog = caps.per_source.min(MAX_BACKLOG) as libc::c_int;
        for l in &listeners {
            if let Some(held) = Held::take(l.fd, l.inode) {
                // SAFETY: `held` is a descriptor of UCX's listening socket; listen() on a
                // listening socket only sets its queue's length.
                unsafe { libc::listen(held.as_raw_fd(), backlog) };
            }
        }
        UcxGuard::spawn(Guard::new(id, listeners, caps, budget.limit), stop)
    }

    /// Runs `guard` on a thread of its own until `stop` is set.
    fn spawn(mut guard: Guard, stop: Arc<AtomicBool>) -> UcxGuard {
        let id = guard.id;
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("ucx-guard-{id}"))
            .spawn(move || guard.run(&s))
            .map_err(|e| eprintln!("memnode[{id}]: UCX's listener is not guarded: {e}"))
            .ok();
        UcxGuard { stop, thread }
    }
}

impl Drop for UcxGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The guard thread's state.
struct Guard {
    id: u16,
    listeners: Vec<Listener>,
    /// Inodes of the listeners still listening.
    alive: HashSet<u64>,
    caps: Caps,
    limit: u64,
    /// When each connection was first seen.
    first_seen: HashMap<u64, Instant>,
    /// Connections this guard ended, until UCX closes them.
    ending: HashSet<u64>,
    gate: Gate,
    log: Log,
}

/// How often each kind of event happened, for logs that stay short under a flood.
#[derive(Default)]
struct Log {
    ended: HashMap<Why, u64>,
    batches: HashMap<Why, u64>,
    gates: u64,
}

impl Guard {
    fn new(id: u16, listeners: Vec<Listener>, caps: Caps, limit: u64) -> Guard {
        let alive = listeners.iter().map(|l| l.inode).collect();
        Guard {
            id,
            listeners,
            alive,
            caps,
            limit,
            first_seen: HashMap::new(),
            ending: HashSet::new(),
            gate: Gate::Open,
            log: Log::default(),
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        let mut fds = match Descriptors::open() {
            Ok(fds) => fds,
            Err(e) => {
                let id = self.id;
                eprintln!(
                    "memnode[{id}]: cannot list descriptors ({e}): UCX's listener is not guarded"
                );
                return;
            }
        };
        while !stop.load(Ordering::Relaxed) {
            self.wait_for_connections();
            if stop.load(Ordering::Relaxed) {
                break;
            }
            self.look(&mut fds);
            std::thread::sleep(GAP);
        }
        // The listeners may outlive the guard (a test process's memnode): leave them open.
        self.set_gate(Gate::Open, 0, &mut fds);
    }

    /// Sleeps until a listener has connections waiting to be accepted, or for a period.
    fn wait_for_connections(&self) {
        let mut polled: Vec<libc::pollfd> = self
            .listeners
            .iter()
            .filter(|l| self.alive.contains(&l.inode))
            .map(|l| libc::pollfd { fd: l.fd, events: libc::POLLIN, revents: 0 })
            .collect();
        if polled.is_empty() {
            std::thread::sleep(PERIOD);
            return;
        }
        // SAFETY: `polled` is a valid array for the call; poll only reads the descriptors'
        // readiness (a number UCX closed and reused is harmless: it only ends the wait early).
        unsafe {
            libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, PERIOD.as_millis() as i32)
        };
    }

    /// One look at UCX's connections: ends what must end, and sets the gate.
    fn look(&mut self, fds: &mut Descriptors) {
        let now = Instant::now();
        let mut found: Vec<(RawFd, Seen)> = Vec::new();
        let mut listening = HashSet::new();
        for fd in fds.list() {
            let Some(local) = own_sockets::local_addr(fd) else { continue };
            let Some(listener) = self.listeners.iter().find(|l| l.owns(local)) else { continue };
            let handshake = handshake_bytes(listener.addr);
            let Some(s) = own_sockets::tcp_socket_at(fd, local) else { continue };
            if s.listening {
                listening.insert(s.inode);
                continue;
            }
            // A connection that already ended has no peer; UCX is closing it.
            let Some(peer) = s.peer else { continue };
            let first = *self.first_seen.entry(s.inode).or_insert(now);
            found.push((
                fd,
                Seen {
                    key: s.inode,
                    source: peer.ip().to_canonical(),
                    age: now - first,
                    // Where the kernel does not count bytes, no connection counts as silent.
                    handshaken: s.bytes_received.is_none_or(|b| b >= handshake),
                    ending: self.ending.contains(&s.inode),
                },
            ));
        }
        let present: HashSet<u64> = found.iter().map(|(_, s)| s.key).collect();
        self.first_seen.retain(|k, _| present.contains(k));
        self.ending.retain(|k| present.contains(k));
        self.check_listeners(&listening);
        let seen: Vec<Seen> = found.iter().map(|(_, s)| s.clone()).collect();
        let verdict = ucx_caps::judge(&seen, &self.caps);
        // The gate first: while connections are being ended, more may be arriving.
        self.set_gate(verdict.gate, seen.len(), fds);
        let by_key: HashMap<u64, (RawFd, IpAddr)> =
            found.iter().map(|(fd, s)| (s.key, (*fd, s.source))).collect();
        let mut ended: HashMap<Why, (u64, Option<IpAddr>)> = HashMap::new();
        for (key, why) in verdict.cut {
            let Some(&(fd, source)) = by_key.get(&key) else { continue };
            let Some(held) = Held::take(fd, key) else { continue };
            if held.shutdown().is_ok() {
                self.ending.insert(key);
                let e = ended.entry(why).or_insert((0, None));
                e.0 += 1;
                e.1 = Some(source);
            }
        }
        self.log_ended(ended);
    }

    /// Says, once, that a listener is gone (UCX closed it: it takes no client any more).
    fn check_listeners(&mut self, listening: &HashSet<u64>) {
        for l in &self.listeners {
            if self.alive.contains(&l.inode) && !listening.contains(&l.inode) {
                eprintln!(
                    "memnode[{}]: UCX's listener on {} is gone: new clients cannot reach this \
                     memnode over TCP until it restarts",
                    self.id, l.addr
                );
                self.alive.remove(&l.inode);
            }
        }
    }

    fn set_gate(&mut self, gate: Gate, held: usize, fds: &mut Descriptors) {
        if gate == self.gate {
            return;
        }
        for l in self.listeners.iter().filter(|l| self.alive.contains(&l.inode)) {
            let applied = match Held::take(l.fd, l.inode) {
                Some(h) => gate.apply(h.as_raw_fd()),
                None => Err(std::io::Error::other("no descriptor left to reach it")),
            };
            if let Err(e) = applied {
                eprintln!(
                    "memnode[{}]: cannot set the gate of UCX's listener on {}: {e}",
                    self.id, l.addr
                );
            }
        }
        self.log.gates += 1;
        if often(self.log.gates) {
            let whom = match &gate {
                Gate::Open => "refuses no one".to_string(),
                Gate::Closed => "refuses every new connection".to_string(),
                Gate::ClosedTo(s) => {
                    let s: Vec<String> = s.iter().map(IpAddr::to_string).collect();
                    format!("refuses new connections from {}", s.join(", "))
                }
            };
            eprintln!(
                "memnode[{}]: UCX's listener {whom} ({held} connections to it, {} of {} \
                 descriptors open; gate change {})",
                self.id,
                fds.count(),
                self.limit,
                self.log.gates
            );
        }
        self.gate = gate;
    }

    fn log_ended(&mut self, ended: HashMap<Why, (u64, Option<IpAddr>)>) {
        for (why, (n, source)) in ended {
            let total = self.log.ended.entry(why).or_default();
            *total += n;
            let total = *total;
            let batch = self.log.batches.entry(why).or_default();
            *batch += 1;
            if !often(*batch) {
                continue;
            }
            let reason = match why {
                Why::Silent => {
                    format!("sent no UCX handshake within {:?}", self.caps.handshake_within)
                }
                Why::SourceFull => {
                    format!("were past {} from one address", self.caps.per_source)
                }
                Why::Full => format!("were past {} in all", self.caps.total),
            };
            let from = source.map(|s| format!(", the last from {s}")).unwrap_or_default();
            eprintln!(
                "memnode[{}]: closed {n} connections to UCX's listener that {reason}{from} \
                 ({total} so far)",
                self.id
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Socket, Type};
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// Stands in for UCX: accepts every connection to `l` and closes each once its peer or
    /// the guard ends it.
    fn accept_all(l: TcpListener, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
        l.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                while let Ok((s, _)) = l.accept() {
                    s.set_nonblocking(true).unwrap();
                    held.push(s);
                }
                held.retain(|mut s| {
                    let mut b = [0u8; 256];
                    loop {
                        match s.read(&mut b) {
                            Ok(0) => return false,
                            Ok(_) => continue,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                            Err(_) => return false,
                        }
                    }
                });
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    }

    fn connect(from: &str, to: SocketAddr) -> Option<Socket> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&from.parse::<SocketAddr>().unwrap().into()).unwrap();
        s.connect_timeout(&to.into(), Duration::from_millis(300)).ok().map(|()| s)
    }

    /// Whether the other end ended `s` within `within`.
    fn ended(s: &Socket, within: Duration) -> bool {
        s.set_read_timeout(Some(within)).unwrap();
        let mut b = [std::mem::MaybeUninit::new(0u8); 8];
        match s.recv(&mut b) {
            Ok(0) => true,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            Ok(_) => false,
        }
    }

    /// The guard over a plain listener: it finds the listener made in `listeners_made_by`,
    /// ends a silent connection at its deadline but not one that sent a handshake's worth of
    /// bytes, ends a source's connections past its cap, refuses that source's new ones while
    /// letting others in, and opens the gate when stopped.
    #[test]
    fn the_guard_ends_silence_and_excess_and_gates_a_full_source() {
        let (l, found) = listeners_made_by(|| TcpListener::bind("127.0.0.1:0").unwrap());
        let to = l.local_addr().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].addr, found[0].fd), (to, l.as_raw_fd()));
        let stop_acceptor = Arc::new(AtomicBool::new(false));
        let acceptor = accept_all(l, Arc::clone(&stop_acceptor));
        let talking = |from: &str| {
            let s = connect(from, to).unwrap();
            (&s).write_all(&[7u8; 64]).unwrap();
            s
        };
        // Before the guard looks: one source past its cap of 3, and two connections from
        // another, one of them silent.
        let full: Vec<Socket> = (0..5).map(|_| talking("127.0.0.3:0")).collect();
        let silent = connect("127.0.0.2:0", to).unwrap();
        let talker = talking("127.0.0.2:0");
        std::thread::sleep(Duration::from_millis(50));
        let caps = Caps { total: 8, per_source: 3, handshake_within: Duration::from_millis(400) };
        let guard =
            UcxGuard::spawn(Guard::new(0, found, caps, 1024), Arc::new(AtomicBool::new(false)));
        assert!(!ended(&silent, Duration::from_millis(150)), "ended before its deadline");
        let gone = full.iter().filter(|s| ended(s, Duration::from_millis(300))).count();
        assert_eq!(gone, 2, "the connections past the source's cap are ended");
        assert!(ended(&silent, Duration::from_secs(2)), "a silent connection is ended");
        assert!(!ended(&talker, Duration::from_millis(100)), "a talking one stays");
        assert!(connect("127.0.0.3:0", to).is_none(), "a full source is refused");
        assert!(connect("127.0.0.4:0", to).is_some(), "another source gets in");
        drop(guard);
        assert!(connect("127.0.0.3:0", to).is_some(), "a stopped guard refuses no one");
        stop_acceptor.store(true, Ordering::Relaxed);
        acceptor.join().unwrap();
    }
}
