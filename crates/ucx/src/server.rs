//! The memnode server: a UCX-allocated pool, a progress loop, and a TCP control port for the
//! bootstrap and the fabric's two-sided requests.
//!
//! # Threads
//!
//! The main thread owns the worker: it progresses it and accepts control connections. Progress
//! executes the verbs of clients that cannot reach the pool one-sidedly (TCP), which arrive as
//! active messages ([`crate::message_verbs`]); a client that dies meanwhile only loses its
//! replies. Each control connection gets a thread
//! that checks the client's token, sends the welcome, then answers calls (chunk allocation,
//! node info, index services) on the memnode's CPU. A client that disconnects, even mid-call,
//! only ends its thread; the pool and everything in it stay.

use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dmindex_fabric::layout::{self, MIN_REGION};
use dmindex_fabric::service::{MnContext, MnMemory, Services};
use dmindex_fabric::verbs::AtomicOp;
use dmindex_fabric::FabricError;

use crate::message_verbs::{self, Request, REPLY_AM, REPLY_LEN, REQUEST_AM};
use crate::proto::{self, Reply, Welcome};
use crate::ucp::{ReplyEndpoint, Worker};

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
}

/// The pool as the memnode's CPU sees it.
struct PoolMemory {
    base: *mut u8,
    len: u64,
}

// SAFETY: the pointer is to the UCX pool, alive for the server's lifetime; accesses are copies
// and 8-byte atomics, as remote verbs are.
unsafe impl Sync for PoolMemory {}
// SAFETY: as above.
unsafe impl Send for PoolMemory {}

impl MnMemory for PoolMemory {
    fn size(&self) -> u64 {
        self.len
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        assert!(offset + buf.len() as u64 <= self.len, "service read out of bounds");
        // SAFETY: in bounds (checked); concurrent remote writes may tear the copy, which the
        // fabric's semantics allow.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.add(offset as usize),
                buf.as_mut_ptr(),
                buf.len(),
            )
        }
    }
    fn write(&self, offset: u64, data: &[u8]) {
        assert!(offset + data.len() as u64 <= self.len, "service write out of bounds");
        // SAFETY: in bounds (checked); see read.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset as usize), data.len())
        }
    }
    fn atomic(&self, offset: u64, op: AtomicOp) -> u64 {
        assert!(
            offset % 8 == 0 && offset + 8 <= self.len,
            "service atomic misaligned or out of bounds"
        );
        // SAFETY: aligned, in bounds, and the pool lives as long as the server.
        op.apply_to(unsafe { AtomicU64::from_ptr(self.base.add(offset as usize) as *mut u64) })
    }
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
    let mut worker = Worker::new().map_err(|e| format!("UCX setup failed: {e}"))?;
    let pool = worker.map_pool(size).map_err(|e| format!("cannot allocate the pool: {e}"))?;
    let pool = Arc::new(pool);
    let mem = Arc::new(PoolMemory { base: pool.base, len: pool.len as u64 });
    // The pool comes from anonymous or shared memory, so it is zero; write the superblock.
    layout::format(&*mem, cfg.id);
    let (verbs_mem, id) = (Arc::clone(&mem), cfg.id);
    let mut malformed = 0u64;
    worker
        .on_message(
            REQUEST_AM,
            Box::new(move |header, payload, reply| {
                let ok = execute_message(&verbs_mem, header, payload, reply);
                if !ok {
                    malformed += 1;
                    if malformed <= 10 || malformed.is_power_of_two() {
                        eprintln!(
                            "memnode[{id}]: dropped a malformed verb message ({malformed} so far)"
                        );
                    }
                }
            }),
        )
        .map_err(|e| format!("UCX setup failed: {e}"))?;
    let welcome = Arc::new(Welcome {
        mn_id: cfg.id,
        base: pool.base as u64,
        length: mem.len,
        rkey: pool.rkey.clone(),
        worker_address: worker.address().map_err(|e| format!("worker address: {e}"))?,
    });
    let services = Arc::new(cfg.services.clone().unwrap_or_else(|| Services::new(cfg.cores)));
    let token: Arc<[u8]> = cfg.token.clone().into();
    eprintln!(
        "memnode[{}]: listening on {local}, pool {} bytes at {:#x}",
        cfg.id, mem.len, welcome.base
    );
    ready(local);
    let mut next_client = 0u64;
    // Spin (yielding the core) while there is traffic; sleep once it has been quiet a while.
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let mut busy = worker.progress();
        match listener.accept() {
            Ok((stream, peer)) => {
                busy = true;
                next_client += 1;
                let (welcome, services, token, mem) = (
                    Arc::clone(&welcome),
                    Arc::clone(&services),
                    Arc::clone(&token),
                    Arc::clone(&mem),
                );
                let id = cfg.id;
                let n = next_client;
                std::thread::spawn(move || {
                    let r = control(stream, &welcome, &services, &token, &mem, id);
                    match r {
                        Ok(calls) => eprintln!(
                            "memnode[{id}]: client {n} ({peer}) disconnected after {calls} calls"
                        ),
                        Err(e) => eprintln!("memnode[{id}]: client {n} ({peer}): {e}"),
                    }
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => eprintln!("memnode[{}]: accept failed: {e}", cfg.id),
        }
        idle = if busy { 0 } else { idle.saturating_add(1) };
        if idle > 100_000 {
            std::thread::sleep(Duration::from_micros(200));
        } else if idle > 0 {
            std::thread::yield_now();
        }
    }
    eprintln!("memnode[{}]: shutting down", cfg.id);
    drop(mem);
    // The pool goes before the worker whose context mapped it.
    drop(pool);
    drop(worker);
    Ok(())
}

/// Executes one verb message and replies to it; false if it was malformed (then it is dropped).
fn execute_message(
    mem: &PoolMemory,
    header: &[u8],
    payload: &[u8],
    reply: Option<ReplyEndpoint>,
) -> bool {
    let Some(req) = Request::decode(header) else { return false };
    // The reply header goes in front of the READ bytes once it is known.
    let mut message = vec![0u8; REPLY_LEN];
    let answer = message_verbs::execute(mem, &req, payload, &mut message);
    if req.tag == 0 {
        return true;
    }
    let Some(ep) = reply else { return false };
    message[..REPLY_LEN].copy_from_slice(&answer.encode());
    ep.send(REPLY_AM, message, REPLY_LEN);
    true
}

/// One control connection: token check, welcome, then calls until the client goes away.
fn control(
    stream: TcpStream,
    welcome: &Welcome,
    services: &Services,
    token: &[u8],
    mem: &PoolMemory,
    id: u16,
) -> Result<u64, String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut w = BufWriter::new(stream);
    let got = proto::read_hello(&mut r).map_err(|e| format!("malformed bootstrap: {e}"))?;
    if !proto::token_matches(token, &got) {
        let _ = proto::write_welcome(&mut w, Err("wrong token"));
        return Err("refused: wrong token".into());
    }
    proto::write_welcome(&mut w, Ok(welcome)).map_err(|e| format!("sending welcome: {e}"))?;
    r.get_ref().set_read_timeout(None).map_err(|e| e.to_string())?;
    let ctx = MnContext::new(id, mem);
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
