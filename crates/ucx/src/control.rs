//! A control connection to a memnode: the TCP bootstrap (token, then the welcome) and two-sided
//! calls on it, each under a deadline. Clients use it for their calls, memnodes to reach their
//! peers' services. Pure Rust (no UCX), so it builds and is tested without the `ucx` feature.
//!
//! # Deadlines
//!
//! Connecting, the bootstrap and every call (written and answered) must finish within the
//! timeout given. A memnode that does not — dead without a reset, cut off by a partition, or
//! stalled — is reported as not answering, and the connection must then be dropped: a late
//! reply would otherwise be taken for the next call's. The call may still have run on the
//! memnode, so whoever retries must make a repeat harmless (HiStore's writers carry sequence
//! numbers that replicas deduplicate).
//!
//! # Blocking and asynchronous calls
//!
//! [`ControlConn::call`] blocks its thread (a memnode's service calling a peer runs on a thread
//! of its own). [`ControlConn::call_async`] polls a non-blocking socket and yields between polls,
//! so a client thread's other tasks go on while one waits for its reply.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use dmindex_fabric::exec::yield_now;
use dmindex_fabric::{FabricError, NodeId, ServiceId};

use crate::auth::{self, NONCE};
use crate::proto::{self, Challenge, Reply, Welcome};

/// A bootstrapped connection to one memnode.
pub struct ControlConn {
    stream: TcpStream,
    /// Bytes received and not yet taken.
    inbox: Vec<u8>,
    nonblocking: bool,
    /// The incarnation of the memnode process this connection reached.
    pub incarnation: u64,
}

/// A call's frame, to be written whole (the request is copied once, into it).
fn call_frame(service: u16, request: &[u8]) -> io::Result<Vec<u8>> {
    let mut frame = Vec::with_capacity(6 + request.len());
    proto::write_call(&mut frame, service, request)?;
    Ok(frame)
}

fn timed_out(timeout: Duration) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {timeout:?}"))
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the memnode closed the connection")
}

impl ControlConn {
    /// Connects to the memnode at `addr` (HOST:PORT), authenticates both ways on `token` (which
    /// is never sent: [`crate::auth`]) and reads the memnode's welcome, all within `timeout`.
    /// Errors name the memnode and what failed: unreachable, not a dmindex memnode, another
    /// protocol version, a memnode without this token, a refusal, silence.
    pub fn connect(
        addr: &str,
        token: &[u8],
        timeout: Duration,
    ) -> Result<(ControlConn, Welcome), String> {
        let deadline = Instant::now() + timeout;
        let sock = addr
            .to_socket_addrs()
            .map_err(|e| format!("memnode {addr}: bad address: {e}"))?
            .next()
            .ok_or_else(|| format!("memnode {addr}: address resolves to nothing"))?;
        let stream = TcpStream::connect_timeout(&sock, timeout)
            .map_err(|e| format!("cannot reach memnode at {addr}: {e}"))?;
        let io = |e: io::Error| format!("memnode {addr}: {e}");
        let failed = |e: io::Error| format!("memnode {addr} did not complete the bootstrap: {e}");
        stream.set_nodelay(true).map_err(io)?;
        let mut c = ControlConn { stream, inbox: Vec::new(), nonblocking: false, incarnation: 0 };
        let cn = auth::random::<NONCE>();
        let mut out = Vec::new();
        proto::write_hello(&mut out, &cn).map_err(io)?;
        c.write_blocking(&out, deadline, timeout).map_err(io)?;
        let challenge =
            c.read_frame(|r| proto::read_challenge(r), deadline, timeout).map_err(failed)?;
        let sn = challenge.nonce;
        if !auth::server_proof_ok(token, &cn, &sn, &challenge.proof) {
            return Err(format!(
                "memnode {addr} and this client hold different tokens (its proof of the token \
                 does not match this one's): check --token-file; nothing was sent to it"
            ));
        }
        out.clear();
        proto::write_response(&mut out, &auth::client_proof(token, &cn, &sn)).map_err(io)?;
        c.write_blocking(&out, deadline, timeout).map_err(io)?;
        let welcome =
            c.read_frame(|r| proto::read_welcome(r), deadline, timeout).map_err(failed)?;
        let mut welcome =
            welcome.map_err(|m| format!("memnode {addr} refused the connection: {m}"))?;
        welcome.verb_key = auth::seal(token, &cn, &sn, welcome.verb_key);
        c.incarnation = welcome.incarnation;
        Ok((c, welcome))
    }

    /// Reads one frame with `parse`, waiting for more bytes until it has them all.
    fn read_frame<T>(
        &mut self,
        parse: impl Fn(&mut &[u8]) -> io::Result<T>,
        deadline: Instant,
        timeout: Duration,
    ) -> io::Result<T> {
        loop {
            let mut rest = &self.inbox[..];
            match parse(&mut rest) {
                Ok(x) => {
                    let used = self.inbox.len() - rest.len();
                    self.inbox.drain(..used);
                    return Ok(x);
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
                Err(e) => return Err(e),
            }
            self.fill_blocking(deadline, timeout)?;
        }
    }

    /// Calls `service` with `request` and waits for the reply, blocking this thread, within
    /// `timeout`. After an error the connection is unusable.
    pub fn call(&mut self, service: u16, request: &[u8], timeout: Duration) -> io::Result<Reply> {
        let deadline = Instant::now() + timeout;
        self.send(service, request, timeout)?;
        self.receive(deadline, timeout)
    }

    /// The first half of [`ControlConn::call`]: sends the request (blocking, within `timeout`).
    pub fn send(&mut self, service: u16, request: &[u8], timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        self.set_nonblocking(false)?;
        self.write_blocking(&call_frame(service, request)?, deadline, timeout)
    }

    /// The second half of [`ControlConn::call`]: waits for the reply (blocking) until
    /// `deadline`, the end of a call of `timeout`.
    pub fn receive(&mut self, deadline: Instant, timeout: Duration) -> io::Result<Reply> {
        self.set_nonblocking(false)?;
        loop {
            if let Some(reply) = self.take_reply()? {
                return Ok(reply);
            }
            self.fill_blocking(deadline, timeout)?;
        }
    }

    /// [`ControlConn::call`] that yields to the thread's other tasks while it waits.
    pub async fn call_async(
        &mut self,
        service: u16,
        request: &[u8],
        timeout: Duration,
    ) -> io::Result<Reply> {
        let deadline = Instant::now() + timeout;
        self.set_nonblocking(true)?;
        let frame = call_frame(service, request)?;
        let mut sent = 0;
        while sent < frame.len() {
            match self.stream.write(&frame[sent..]) {
                Ok(0) => return Err(closed()),
                Ok(n) => sent += n,
                // A full send buffer (rare: requests are small) is waited out by yielding.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(timed_out(timeout));
                    }
                    yield_now().await
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut b = [0u8; 4096];
        loop {
            if let Some(reply) = self.take_reply()? {
                return Ok(reply);
            }
            match self.stream.read(&mut b) {
                Ok(0) => return Err(closed()),
                Ok(n) => self.inbox.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(deadline, timeout).await?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether the connection is still open and idle, as one kept for later calls must be: a
    /// memnode that died or restarted since has closed it (its end reads as closed), and a
    /// connection with unread bytes is out of step. Costs one non-blocking read.
    pub fn is_open(&mut self) -> bool {
        if !self.inbox.is_empty() || self.set_nonblocking(true).is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        matches!(self.stream.peek(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Waits until the connection may have something to read (or a nap passed), unless
    /// `deadline` passed.
    async fn wait(&self, deadline: Instant, timeout: Duration) -> io::Result<()> {
        if Instant::now() >= deadline {
            return Err(timed_out(timeout));
        }
        dmindex_fabric::exec::block::readable(self.stream.as_raw_fd()).await;
        Ok(())
    }

    fn set_nonblocking(&mut self, on: bool) -> io::Result<()> {
        if self.nonblocking != on {
            self.stream.set_nonblocking(on)?;
            self.nonblocking = on;
        }
        Ok(())
    }

    /// The reply at the head of the inbox, once it is all there.
    fn take_reply(&mut self) -> io::Result<Option<Reply>> {
        let Some(len) = proto::reply_frame_len(&self.inbox)? else { return Ok(None) };
        let reply = proto::read_reply(&mut &self.inbox[..len])?;
        self.inbox.drain(..len);
        Ok(Some(reply))
    }

    fn write_blocking(&mut self, b: &[u8], deadline: Instant, timeout: Duration) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(timeout));
        }
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write_all(b).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(timeout),
            _ => e,
        })
    }

    /// Reads what has arrived (at least a byte) into the inbox, blocking until `deadline`.
    fn fill_blocking(&mut self, deadline: Instant, timeout: Duration) -> io::Result<()> {
        let mut b = [0u8; 4096];
        let late = || timed_out(timeout);
        let mut r = DeadlineReader { stream: &self.stream, deadline, late: &late };
        loop {
            match r.read(&mut b) {
                Ok(0) => return Err(closed()),
                Ok(n) => {
                    self.inbox.extend_from_slice(&b[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Idle connections to one memnode, kept for later calls (a client's or a peer's).
pub struct ConnPool {
    idle: std::sync::Mutex<Vec<ControlConn>>,
    max: usize,
}

impl ConnPool {
    /// A pool keeping at most `max` idle connections.
    pub fn new(max: usize) -> ConnPool {
        ConnPool { idle: std::sync::Mutex::new(Vec::new()), max }
    }

    /// An idle connection that `fits` and is still open, if there is one. A memnode that died
    /// or restarted since has closed its end: such a connection would fail the call, so it is
    /// dropped here.
    pub fn take(&self, fits: impl Fn(&ControlConn) -> bool) -> Option<ControlConn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(i) = idle.iter().rposition(&fits) {
            let mut c = idle.swap_remove(i);
            if c.is_open() {
                return Some(c);
            }
        }
        None
    }

    /// Keeps `c` (answered, so in step) for a later call, unless the pool is full.
    pub fn give_back(&self, c: ControlConn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max {
            idle.push(c);
        }
    }
}

/// The memnode's side of the bootstrap on `stream`: reads the hello, proves it holds `token`,
/// checks the client's proof and sends `welcome` (its verb key sealed for this handshake) — or
/// a refusal, for a wrong proof. Everything must arrive by `deadline`, however slowly the
/// client trickles it. Errors say what the client did wrong, for the memnode's log.
pub fn accept(
    stream: &TcpStream,
    token: &[u8],
    welcome: &Welcome,
    deadline: Instant,
) -> Result<(), String> {
    let late = || io::Error::new(io::ErrorKind::TimedOut, "the bootstrap took too long");
    let mut r = DeadlineReader { stream, deadline, late: &late };
    let mut w = stream;
    let cn = proto::read_hello(&mut r).map_err(|e| format!("malformed bootstrap: {e}"))?;
    let sn = auth::random::<NONCE>();
    let challenge = Challenge { nonce: sn, proof: auth::server_proof(token, &cn, &sn) };
    proto::write_challenge(&mut w, &challenge)
        .map_err(|e| format!("sending the challenge: {e}"))?;
    let proof = proto::read_response(&mut r).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "refused: the client left after the challenge (it holds another token)".to_string()
        }
        _ => format!("malformed bootstrap: {e}"),
    })?;
    if !auth::client_proof_ok(token, &cn, &sn, &proof) {
        let _ = proto::write_welcome(&mut w, Err("wrong token"));
        return Err("refused: wrong token".into());
    }
    let sealed =
        Welcome { verb_key: auth::seal(token, &cn, &sn, welcome.verb_key), ..welcome.clone() };
    proto::write_welcome(&mut w, Ok(&sealed)).map_err(|e| format!("sending the welcome: {e}"))
}

/// Reads from a stream until a deadline for the whole exchange, not per read; past it, the
/// error `late` makes.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
    late: &'a dyn Fn() -> io::Error,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((self.late)());
        }
        self.stream.set_read_timeout(Some(left))?;
        match (&*self.stream).read(buf) {
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err((self.late)())
            }
            r => r,
        }
    }
}

/// What a call's reply means to the fabric: the body, or the error the memnode reported.
pub fn reply_result(
    node: NodeId,
    service: ServiceId,
    reply: Reply,
) -> Result<Vec<u8>, FabricError> {
    match reply {
        Reply::Ok(b) => Ok(b),
        Reply::OutOfMemory { requested, available } => {
            Err(FabricError::OutOfMemory { node, requested, available })
        }
        Reply::Refused(message) => Err(FabricError::Service { node, service, message }),
        Reply::UnknownService => Err(FabricError::UnknownService { node, service }),
    }
}

/// A call that got no reply: the memnode is unavailable, saying who and why.
pub fn unanswered(node: NodeId, addr: &str, service: ServiceId, e: io::Error) -> FabricError {
    FabricError::Unavailable {
        node,
        reason: format!("memnode {addr}: call to service {service}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that answers the bootstrap on each connection, then `answer`s each call (an
    /// `Ok` echoes the request; `None` never answers).
    fn server(answer: Option<Reply>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let (s, answer) = (s.unwrap(), answer.clone());
                std::thread::spawn(move || serve_one(s, answer));
            }
        });
        addr
    }

    /// What the test servers welcome clients with.
    fn welcome() -> Welcome {
        Welcome {
            mn_id: 2,
            incarnation: 77,
            base: 0,
            length: 1 << 20,
            verb_key: [5; auth::VERB_KEY],
            rkey: vec![],
            worker_address: vec![1],
        }
    }

    fn serve_one(s: TcpStream, answer: Option<Reply>) {
        if accept(&s, b"tok", &welcome(), Instant::now() + Duration::from_secs(5)).is_err() {
            return;
        }
        let mut r = io::BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        while let Ok(Some((_, req))) = proto::read_call(&mut r) {
            match &answer {
                Some(Reply::Ok(_)) => proto::write_reply(&mut w, &Reply::Ok(req)).unwrap(),
                Some(a) => proto::write_reply(&mut w, a).unwrap(),
                None => {}
            }
        }
    }

    #[test]
    fn calls_are_answered_blocking_and_async() {
        let addr = server(Some(Reply::Ok(vec![])));
        let (mut c, w) = ControlConn::connect(&addr, b"tok", Duration::from_secs(5)).unwrap();
        assert_eq!((w.mn_id, c.incarnation), (2, 77));
        let big = vec![7u8; 300_000];
        assert_eq!(c.call(16, &big, Duration::from_secs(5)).unwrap(), Reply::Ok(big.clone()));
        let r = dmindex_fabric::exec::run_tasks([c.call_async(16, b"hi", Duration::from_secs(5))]);
        assert_eq!(r.into_iter().next().unwrap().unwrap(), Reply::Ok(b"hi".to_vec()));
        assert_eq!(
            c.call(16, b"again", Duration::from_secs(5)).unwrap(),
            Reply::Ok(b"again".into())
        );
    }

    #[test]
    fn silence_times_out_and_names_the_wait() {
        let addr = server(None);
        let (mut c, _) = ControlConn::connect(&addr, b"tok", Duration::from_secs(5)).unwrap();
        let t0 = Instant::now();
        let e = c.call(16, b"x", Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("no answer within 100ms"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        let (mut c, _) = ControlConn::connect(&addr, b"tok", Duration::from_secs(5)).unwrap();
        let r =
            dmindex_fabric::exec::run_tasks([c.call_async(16, b"x", Duration::from_millis(50))]);
        assert_eq!(r.into_iter().next().unwrap().unwrap_err().kind(), io::ErrorKind::TimedOut);
    }

    /// Each side proves it holds the token; neither sends it, and a mismatch is named.
    #[test]
    fn a_memnode_and_a_client_with_different_tokens_refuse_each_other() {
        let addr = server(Some(Reply::Ok(vec![])));
        let e = ControlConn::connect(&addr, b"other", Duration::from_secs(5)).err().unwrap();
        assert!(e.contains("hold different tokens"), "{e}");
        // The memnode's side: a client that proves another token is refused.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            accept(&s, b"tok", &welcome(), Instant::now() + Duration::from_secs(5))
        });
        let mut s = TcpStream::connect(&addr).unwrap();
        let cn = [1u8; NONCE];
        proto::write_hello(&mut s, &cn).unwrap();
        let c = proto::read_challenge(&mut s).unwrap();
        assert!(auth::server_proof_ok(b"tok", &cn, &c.nonce, &c.proof));
        proto::write_response(&mut s, &auth::client_proof(b"bad", &cn, &c.nonce)).unwrap();
        assert_eq!(proto::read_welcome(&mut s).unwrap(), Err("wrong token".into()));
        assert_eq!(t.join().unwrap(), Err("refused: wrong token".into()));
    }

    /// The whole bootstrap has a deadline: a client that sends a byte now and then is dropped.
    #[test]
    fn a_slow_bootstrap_is_cut_off() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let t0 = Instant::now();
            let r = accept(&s, b"tok", &welcome(), t0 + Duration::from_millis(300));
            (r, t0.elapsed())
        });
        let mut s = TcpStream::connect(&addr).unwrap();
        for b in proto::MAGIC {
            if s.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (r, took) = t.join().unwrap();
        assert!(r.unwrap_err().contains("took too long"));
        assert!(took < Duration::from_millis(600), "{took:?}");
    }

    #[test]
    fn refusals_and_strangers_are_errors() {
        let e = ControlConn::connect("127.0.0.1:1", b"tok", Duration::from_secs(1)).err().unwrap();
        assert!(e.contains("cannot reach memnode at 127.0.0.1:1"), "{e}");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 15];
            let _ = s.read_exact(&mut b);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        });
        let e = ControlConn::connect(&addr, b"tok", Duration::from_secs(2)).err().unwrap();
        assert!(e.contains("did not complete the bootstrap"), "{e}");
        t.join().unwrap();
        assert_eq!(
            reply_result(1, ServiceId(16), Reply::Refused("no".into())).unwrap_err(),
            FabricError::Service { node: 1, service: ServiceId(16), message: "no".into() }
        );
    }
}
