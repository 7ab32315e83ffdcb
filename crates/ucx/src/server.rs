//! The memnode server: a UCX-allocated pool, a progress loop, and a TCP control port for the
//! bootstrap and the fabric's two-sided requests.
//!
//! # Threads
//!
//! The main thread owns the worker: it progresses it and accepts control connections. Progress
//! executes the verbs of clients that cannot reach the pool one-sidedly (TCP), which arrive as
//! active messages ([`crate::message_verbs`]), one at a time; a client that dies meanwhile only
//! loses its replies. The same thread keeps the clients' sessions and fences them
//! ([`crate::sessions`]), which is why a fence needs no handshake with verbs in progress: none
//! is while it runs. Each control connection gets a thread
//! that checks the client's token, sends the welcome, then answers calls (chunk allocation,
//! node info, index services) on the memnode's CPU. A client that disconnects, even mid-call,
//! only ends its thread; the pool and everything in it stay. A guard thread bounds the
//! connections to UCX's own TCP listener ([`crate::ucx_guard`]).
//!
//! # Peers
//!
//! With `peers` (every memnode of the cluster, in id order) a service can call the services of
//! other memnodes ([`crate::peers::TcpPeers`]); without, such calls are refused.

use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dmindex_fabric::exec::spin::SpinPolicy;
use dmindex_fabric::layout::{self, MIN_REGION};
use dmindex_fabric::service::{MnContext, NoPeers, Peers, Services};
use dmindex_fabric::words::SharedWords;
use dmindex_fabric::FabricError;

use crate::admission::{often, BootstrapSlots, Slot};
use crate::auth::{self, VERB_KEY};
use crate::control;
use crate::envelope;
use crate::message_verbs::{self, Request, Status, Verb, REPLY_AM, REPLY_LEN, REQUEST_AM};
use crate::peers::TcpPeers;
use crate::proto::{self, Reply, Welcome};
use crate::sessions::Sessions;
use crate::ucp::{ReplyEndpoint, Worker};
use crate::ucx_guard::{self, UcxGuard};

/// How long a client has from its connection to the end of its bootstrap.
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections allowed in their bootstrap at once; more are closed at once.
const MAX_BOOTSTRAPPING: usize = 64;

/// Of those, the most one source address may hold, so that a quarter stay for the others
/// however fast one host opens connections (a bench's client threads bootstrap in a few ms
/// each, far below this even when dozens start together).
const MAX_BOOTSTRAPPING_PER_SOURCE: usize = 48;

/// While verbs keep it busy, how often the progress loop looks for new control connections
/// (once quiet, it blocks on the listener too, and accepts as soon as one comes).
const ACCEPT_EVERY: Duration = Duration::from_millis(1);

/// The longest the progress loop blocks before it looks at the stop flag again (a signal also
/// ends the block).
const NAP_MS: std::ffi::c_int = 50;

/// What `dmindex memnode` takes.
#[derive(Clone, Debug)]
pub struct MemnodeConfig {
    pub listen: String,
    pub size: u64,
    pub token: Vec<u8>,
    pub id: u16,
    /// Cores answering two-sided requests (at most this many at once).
    pub cores: usize,
    /// The services to run, built for `cores` cores (the built-in ones and an index's); `None`:
    /// the built-in ones.
    pub services: Option<Services>,
    /// Every memnode of the cluster (HOST:PORT in id order, this one included), for services
    /// that call their peers; empty: no peer links.
    pub peers: Vec<String>,
    /// How long a call to a peer may take before the peer counts as unavailable.
    pub peer_timeout: Duration,
}

/// A number no other memnode process draws: told to clients in the welcome, so that they can
/// tell a restarted memnode (a new, empty pool) from the one they knew.
fn draw_incarnation() -> u64 {
    u64::from_le_bytes(auth::random())
}

/// The network interface that holds `ip`, for UCX to listen on it alone; `None` for a wildcard
/// address (every interface).
fn interface_of(ip: std::net::IpAddr) -> Result<Option<String>, String> {
    if ip.is_unspecified() {
        return Ok(None);
    }
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we only read and free once below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(format!("cannot list network interfaces: {}", std::io::Error::last_os_error()));
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, alive until freeifaddrs.
        let a = unsafe { &*at };
        at = a.ifa_next;
        if a.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr whose family says which struct it is.
        let addr = unsafe {
            match (*a.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let v4 = &*(a.ifa_addr as *const libc::sockaddr_in);
                    Some(std::net::IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    let v6 = &*(a.ifa_addr as *const libc::sockaddr_in6);
                    Some(std::net::IpAddr::from(v6.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if addr == Some(ip) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(a.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: the list came from getifaddrs and is freed once; nothing refers to it now.
    unsafe { libc::freeifaddrs(list) };
    found.map(Some).ok_or_else(|| format!("no network interface holds {ip} (--listen)"))
}

/// Runs a memnode until `stop` is set. `ready` hears the bound address once clients may
/// connect. Errors name what failed (bind, UCX setup).
pub fn serve(
    cfg: &MemnodeConfig,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    if cfg.size < MIN_REGION {
        return Err(format!("--size {} is below the minimum of {MIN_REGION} bytes", cfg.size));
    }
    let size =
        usize::try_from(cfg.size).map_err(|_| format!("--size {} is too large", cfg.size))?;
    let listener = TcpListener::bind(&cfg.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    listener.set_nonblocking(true).map_err(|e| format!("listener: {e}"))?;
    let local = listener.local_addr().map_err(|e| format!("listener: {e}"))?;
    // UCX listens on the interface of --listen only (on every interface for a wildcard),
    // unless UCX_NET_DEVICES says otherwise (an RDMA NIC must be named there, with it).
    let devices = match std::env::var_os("UCX_NET_DEVICES") {
        Some(_) => None,
        None => interface_of(local.ip())?,
    };
    // UCX's RMA and atomics only where no transport would emulate them on this CPU, with no
    // key check ([`crate::tls`]): elsewhere every verb is a keyed verb message.
    let tls = std::env::var("UCX_TLS").ok();
    let one_sided = crate::tls::one_sided_allowed(tls.as_deref());
    let (worker, ucx_listeners) =
        ucx_guard::listeners_made_by(|| Worker::waking(devices.as_deref(), one_sided));
    let mut worker = worker.map_err(|e| format!("UCX setup failed: {e}"))?;
    let pool = worker.map_pool(size).map_err(|e| format!("cannot allocate the pool: {e}"))?;
    let pool = Arc::new(pool);
    // Served in whole cache lines (a --size that is not one loses its last few bytes).
    // SAFETY: the pool outlives every use of `mem` (it is dropped after `mem` and every call
    // that holds it, or never); this process reaches it only through SharedWords (atomic) and
    // UCX.
    let mem = unsafe { SharedWords::from_raw(pool.base, pool.len & !63) }
        .ok_or("UCX allocated the pool off an 8-byte boundary")?;
    let mem: Arc<SharedWords<'static>> = Arc::new(mem);
    // The pool comes from anonymous or shared memory, so it is zero; write the superblock.
    layout::format(&*mem, cfg.id);
    let (verbs_mem, id) = (Arc::clone(&mem), cfg.id);
    let verb_key = auth::random::<VERB_KEY>();
    let (mut malformed, mut refused, mut fenced, mut fences) = (0u64, 0u64, 0u64, 0u64);
    // Owned by the progress thread, which alone runs verb messages: see crate::sessions.
    let mut sessions = Sessions::new(verb_key);
    worker
        .on_message(
            REQUEST_AM,
            Box::new(move |header, payload, reply| {
                let mut note = |handled| match handled {
                    Handled::Done => {}
                    Handled::Fence { member, sessions, status } => {
                        fences += 1;
                        if often(fences) {
                            eprintln!(
                                "memnode[{id}]: fenced member {member:#x}: {sessions} sessions \
                                 ({status:?}; {fences} fences so far)"
                            );
                        }
                    }
                    Handled::Fenced => {
                        fenced += 1;
                        if often(fenced) {
                            eprintln!(
                                "memnode[{id}]: refused a verb message of a fenced member \
                                 ({fenced} so far)"
                            );
                        }
                    }
                    Handled::Malformed => {
                        malformed += 1;
                        if often(malformed) {
                            eprintln!(
                                "memnode[{id}]: dropped a malformed verb message ({malformed} so far)"
                            );
                        }
                    }
                    Handled::Refused => {
                        refused += 1;
                        if often(refused) {
                            eprintln!(
                                "memnode[{id}]: refused a verb message without this memnode's \
                                 verb key ({refused} so far): a client of another incarnation, \
                                 or one that never authenticated"
                            );
                        }
                    }
                };
                match header.len() {
                    envelope::ENVELOPE_LEN => {
                        execute_envelope(&verbs_mem, &mut sessions, header, payload, reply, note)
                    }
                    _ => note(execute_message(&verbs_mem, &mut sessions, header, payload, reply)),
                }
            }),
        )
        .map_err(|e| format!("UCX setup failed: {e}"))?;
    let welcome = Arc::new(Welcome {
        mn_id: cfg.id,
        incarnation: draw_incarnation(),
        base: pool.base as u64,
        length: mem.len(),
        verb_key,
        rkey: pool.rkey.clone(),
        worker_address: worker.address().map_err(|e| format!("worker address: {e}"))?,
    });
    let services = Arc::new(cfg.services.clone().unwrap_or_else(|| Services::new(cfg.cores)));
    if !cfg.peers.is_empty() && cfg.peers.len() <= cfg.id as usize {
        return Err(format!(
            "--peers lists {} memnodes, so it has no memory node {} (list every memnode in id order, this one included)",
            cfg.peers.len(),
            cfg.id
        ));
    }
    let peers: Arc<dyn Peers + Send + Sync> = match cfg.peers.is_empty() {
        true => Arc::new(NoPeers),
        false => Arc::new(TcpPeers::new(cfg.peers.clone(), cfg.token.clone(), cfg.peer_timeout)),
    };
    let token: Arc<[u8]> = cfg.token.clone().into();
    eprintln!(
        "memnode[{}]: listening on {local}, pool {} bytes at {:#x}, {}",
        cfg.id,
        mem.len(),
        welcome.base,
        match one_sided {
            true => "one-sided access for clients of UCX_TLS's transports",
            false => "every verb a keyed message (UCX_TLS unset or with tcp: no UCX RMA)",
        }
    );
    // UCX's own TCP listener, bounded as the control port is; stopped before the worker goes.
    let ucx_guard = UcxGuard::start(cfg.id, ucx_listeners);
    ready(local);
    let mut port = ControlPort {
        id: cfg.id,
        listener,
        next_client: 0,
        bootstrapping: BootstrapSlots::new(MAX_BOOTSTRAPPING, MAX_BOOTSTRAPPING_PER_SOURCE),
        turned_away: 0,
        accept_failures: 0,
        live: Arc::default(),
        welcome,
        services,
        token,
        mem: Arc::clone(&mem),
        peers,
    };
    let listen_fd = std::os::fd::AsRawFd::as_raw_fd(&port.listener);
    // Progress while there is traffic; once quiet for a spin, block until the worker or the
    // listener has something (a memnode has almost no CPU to spare: on a small host a spinning
    // memnode takes the core its clients need). A client's next verb usually follows its last
    // reply within a few µs, so the loop spins up to SPIN while that costs nobody, and not at
    // all while it keeps being preempted (the executor's policy). Accepts only when the
    // listener is readable.
    let mut spinning = SpinPolicy::new();
    let mut spin = spinning.limit();
    let mut quiet_since = Instant::now();
    let mut accepted_at = quiet_since;
    while !stop.load(Ordering::Relaxed) {
        let mut accept = false;
        if worker.progress() {
            quiet_since = Instant::now();
            if quiet_since.duration_since(accepted_at) >= ACCEPT_EVERY {
                accept = readable(listen_fd);
                accepted_at = quiet_since;
            }
        } else if quiet_since.elapsed() < spin {
            std::hint::spin_loop();
        } else {
            accept = match worker.sleep(listen_fd, NAP_MS) {
                Ok(readable) => readable,
                Err(e) => {
                    eprintln!("memnode[{}]: cannot wait for events ({e}); polling", cfg.id);
                    std::thread::sleep(Duration::from_micros(200));
                    true
                }
            };
            quiet_since = Instant::now();
            spin = spinning.limit();
        }
        if accept {
            port.accept_all();
        }
    }
    let live = Arc::clone(&port.live);
    drop(port);
    eprintln!("memnode[{}]: shutting down", cfg.id);
    drop(ucx_guard);
    // End every control connection, and wait for calls under way to finish, before the pool
    // goes: their threads use it.
    for (_, s) in lock(&live).iter() {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    let patience = Instant::now() + cfg.peer_timeout + Duration::from_secs(2);
    while !lock(&live).is_empty() && Instant::now() < patience {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !lock(&live).is_empty() {
        eprintln!("memnode[{}]: calls still running; the pool is left mapped", cfg.id);
        std::mem::forget(pool);
        std::mem::forget(worker);
        return Ok(());
    }
    drop(mem);
    // The pool goes before the worker whose context mapped it.
    drop(pool);
    drop(worker);
    Ok(())
}

/// Whether `fd` can be read now (a listener: a connection waits to be accepted).
fn readable(fd: std::ffi::c_int) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the call's duration; zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// The control port: its listener, the connections in their bootstrap, and what their threads
/// serve.
struct ControlPort {
    id: u16,
    listener: TcpListener,
    next_client: u64,
    /// Connections between accept and the end of their bootstrap: bounded, in all and per
    /// source address, so that a flood of idle or slow connections holds a bounded number of
    /// threads and bytes and leaves room for other hosts' clients.
    bootstrapping: Arc<BootstrapSlots>,
    turned_away: u64,
    accept_failures: u64,
    /// Every control connection being served, so that shutting down can end them.
    live: Arc<Mutex<Vec<(u64, TcpStream)>>>,
    welcome: Arc<Welcome>,
    services: Arc<Services>,
    token: Arc<[u8]>,
    mem: Arc<SharedWords<'static>>,
    peers: Arc<dyn Peers + Send + Sync>,
}

impl ControlPort {
    /// Accepts every connection waiting, each on a thread of its own.
    fn accept_all(&mut self) {
        // Ends when no connection waits (or accept fails), at most a backlog's worth a turn.
        for _ in 0..1024 {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // Out of descriptors, say: the connection stays queued and the listener
                    // readable, so back off a little instead of failing every turn.
                    self.accept_failures += 1;
                    let n = self.accept_failures;
                    if often(n) {
                        eprintln!("memnode[{}]: accept failed: {e} ({n} so far)", self.id);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    return;
                }
            }
        }
    }

    /// Starts serving one control connection, if a bootstrap slot is free for it.
    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        let id = self.id;
        self.next_client += 1;
        let slot = match self.bootstrapping.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                self.turned_away += 1;
                let n = self.turned_away;
                if often(n) {
                    eprintln!("memnode[{id}]: turned away {peer}: {why} ({n} turned away so far)");
                }
                return;
            }
        };
        let deadline = Instant::now() + BOOTSTRAP_TIMEOUT;
        let (welcome, services, token, mem, peers) = (
            Arc::clone(&self.welcome),
            Arc::clone(&self.services),
            Arc::clone(&self.token),
            Arc::clone(&self.mem),
            Arc::clone(&self.peers),
        );
        let n = self.next_client;
        let Ok(mine) = stream.try_clone() else {
            // Dropping the slot gives it back (this path once leaked it).
            eprintln!("memnode[{id}]: client {n} ({peer}): cannot track its connection");
            return;
        };
        lock(&self.live).push((n, mine));
        let live_here = Arc::clone(&self.live);
        let spawned = std::thread::Builder::new().spawn(move || {
            let node = Node { id, mem: &mem, services: &services, peers: &*peers };
            let r = control(stream, &welcome, &token, node, (deadline, slot));
            lock(&live_here).retain(|(m, _)| *m != n);
            match r {
                Ok(calls) => {
                    eprintln!("memnode[{id}]: client {n} ({peer}) disconnected after {calls} calls")
                }
                Err(e) => eprintln!("memnode[{id}]: client {n} ({peer}): {e}"),
            }
        });
        if let Err(e) = spawned {
            eprintln!("memnode[{id}]: client {n} ({peer}) refused: no thread for it: {e}");
            // The closure, and the slot in it, were dropped with the failed spawn.
            lock(&self.live).retain(|(m, _)| *m != n);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What became of a verb message.
enum Handled {
    Done,
    /// A FENCE, answered: for the log.
    Fence {
        member: u64,
        sessions: u64,
        status: Status,
    },
    /// Not executed: its session was fenced.
    Fenced,
    /// Dropped: not a request.
    Malformed,
    /// Not executed: it lacked this memnode's verb key.
    Refused,
}

/// Executes one verb message whose session may act ([`Sessions::admit`]), and replies to it.
fn execute_message(
    mem: &SharedWords<'_>,
    sessions: &mut Sessions,
    header: &[u8],
    payload: &[u8],
    reply: Option<ReplyEndpoint>,
) -> Handled {
    let Some(req) = Request::decode(header) else { return Handled::Malformed };
    // The reply header goes in front of the READ bytes once it is known.
    let mut message = vec![0u8; REPLY_LEN];
    let Some(answer) = message_verbs::execute(mem, sessions, &req, payload, &mut message) else {
        return Handled::Malformed;
    };
    let done = handled(Some((&req, &answer)));
    if req.tag == 0 {
        return done;
    }
    let Some(ep) = reply else { return Handled::Malformed };
    message[..REPLY_LEN].copy_from_slice(&answer.encode());
    ep.send(REPLY_AM, message, REPLY_LEN);
    done
}

/// Executes an envelope's verb messages in order and replies to those that ask for it in one
/// envelope ([`envelope::execute`]); `note` hears what became of each.
fn execute_envelope(
    mem: &SharedWords<'_>,
    sessions: &mut Sessions,
    header: &[u8],
    payload: &[u8],
    reply: Option<ReplyEndpoint>,
    mut note: impl FnMut(Handled),
) {
    let answered = envelope::execute(mem, sessions, header, payload, |r| note(handled(r)));
    match (answered, reply) {
        (Some(message), Some(ep)) => ep.send(REPLY_AM, message, envelope::ENVELOPE_LEN),
        (Some(_), None) => note(Handled::Malformed),
        (None, _) => {}
    }
}

/// What became of a request, from its reply (`None`: it did not parse).
fn handled(executed: Option<(&Request, &message_verbs::Reply)>) -> Handled {
    let Some((req, answer)) = executed else { return Handled::Malformed };
    match (answer.status, req.verb) {
        (Status::Refused, _) => Handled::Refused,
        (Status::Fenced, Verb::Register { .. }) => Handled::Done,
        (Status::Fenced, _) => Handled::Fenced,
        (status, Verb::Fence { member }) => {
            Handled::Fence { member, sessions: answer.value, status }
        }
        _ => Handled::Done,
    }
}

/// What a control connection's calls run on.
struct Node<'a> {
    id: u16,
    mem: &'a SharedWords<'a>,
    services: &'a Services,
    peers: &'a dyn Peers,
}

/// One control connection: the bootstrap (mutual authentication, welcome) by `deadline`, then
/// calls until the client goes away. `slot` is its place among the connections not
/// authenticated yet, given back once its bootstrap ends either way.
fn control(
    stream: TcpStream,
    welcome: &Welcome,
    token: &[u8],
    node: Node<'_>,
    (deadline, slot): (Instant, Slot),
) -> Result<u64, String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let authenticated = control::accept(&stream, token, welcome, deadline);
    drop(slot);
    authenticated?;
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut w = BufWriter::new(stream);
    let Node { id, mem, services, peers } = node;
    let ctx = MnContext::new(id, mem).with_peers(peers);
    let mut calls = 0u64;
    loop {
        let Some((service, request)) =
            proto::read_call(&mut r).map_err(|e| format!("malformed call: {e}"))?
        else {
            return Ok(calls);
        };
        calls += 1;
        let reply = match services.dispatch(&ctx, dmindex_fabric::ServiceId(service), &request) {
            Ok(b) => Reply::Ok(b),
            Err(FabricError::OutOfMemory { requested, available, .. }) => {
                Reply::OutOfMemory { requested, available }
            }
            Err(FabricError::UnknownService { .. }) => Reply::UnknownService,
            Err(e) => Reply::Refused(e.to_string()),
        };
        proto::write_reply(&mut w, &reply).map_err(|e| format!("sending reply: {e}"))?;
    }
}
