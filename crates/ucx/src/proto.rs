//! The memnode's TCP control protocol: bootstrap and two-sided requests. Pure Rust (no UCX), so
//! it builds and is tested without the `ucx` feature.
//!
//! # Frames (all integers little-endian)
//!
//! ```text
//! client → server   hello:     magic "DMIUCX04" | client nonce [32]
//! server → client   challenge: magic "DMIUCX04" | server nonce [32] | server proof [32]
//! client → server   response:  client proof [32]
//! server → client   welcome:   status u8 (0 = ok) | then, if ok:
//!                              mn id u16 | incarnation u64 | pool base u64 | pool length u64 |
//!                              sealed verb key [16] |
//!                              rkey length u32 | packed rkey | worker address length u32 | address
//!                              if not ok: message length u32 | UTF-8 message
//! client → server   call:      service u16 | request length u32 | request
//! server → client   reply:     status u8 | length u32 | body
//!                              status 0: body = reply
//!                              status 1: body = requested u64 | available u64 (out of memory)
//!                              status 2: body = UTF-8 message (any other refusal)
//!                              status 3: body empty (no such service)
//! ```
//!
//! The proofs and the sealing of the verb key are [`crate::auth`]'s: each side proves it holds
//! the cluster's token without sending it, and the client checks the memnode's proof before it
//! trusts anything else the memnode says. The magic's last two digits are the protocol's
//! version; a peer speaking another version, or not a dmindex peer at all (an HTTP server, say),
//! is told apart by it and named in the error.
//!
//! Lengths are capped ([`MAX_FRAME`] for calls, [`MAX_KEY`] for a welcome's parts, [`MAX_TEXT`]
//! for a refusal) so a malformed or hostile peer cannot make either side allocate without bound;
//! the welcome is checked whole (a pool that does not fit the address space, an empty worker
//! address) before anything is handed to UCX.
//!
//! The incarnation is a random number a memnode process draws when it starts: a memnode
//! restarted on the same address is a new server with an empty pool, and clients tell the two
//! apart by it (see `transport`'s "Restarts").

use std::io::{self, Read, Write};

use crate::auth::{NONCE, PROOF, VERB_KEY};

/// The handshake's magic: "DMIUCX" and the protocol version.
pub const MAGIC: [u8; 8] = *b"DMIUCX04";
/// Largest request or reply body accepted.
pub const MAX_FRAME: u32 = 1 << 20;
/// Largest packed rkey or worker address a welcome may carry.
pub const MAX_KEY: u32 = 4096;
/// Longest refusal message.
pub const MAX_TEXT: u32 = 4096;

/// What a memnode tells a client that proved it holds the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub mn_id: u16,
    /// Drawn at random when the memnode process starts.
    pub incarnation: u64,
    pub base: u64,
    pub length: u64,
    /// The key memnode-executed verbs must carry (sealed on the wire: [`crate::auth::seal`]).
    pub verb_key: [u8; VERB_KEY],
    pub rkey: Vec<u8>,
    pub worker_address: Vec<u8>,
}

/// The memnode's answer to a hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub nonce: [u8; NONCE],
    pub proof: [u8; PROOF],
}

/// A reply to a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok(Vec<u8>),
    OutOfMemory { requested: u64, available: u64 },
    Refused(String),
    UnknownService,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

fn read_u16(r: &mut impl Read) -> io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// A length-prefixed byte string of at most `max` bytes.
fn read_bytes(r: &mut impl Read, what: &str, max: u32) -> io::Result<Vec<u8>> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    let n = u32::from_le_bytes(b);
    if n > max {
        return Err(bad(format!("{what} of {n} bytes exceeds the {max}-byte limit")));
    }
    let mut v = vec![0u8; n as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// Up to 16 bytes, printable, for naming what a stranger sent.
fn shown(b: &[u8]) -> String {
    b.iter()
        .take(16)
        .map(|&c| if c.is_ascii_graphic() || c == b' ' { c as char } else { '.' })
        .collect()
}

/// Reads a magic; `who` names the peer in the error for a stranger or another version.
fn read_magic(r: &mut impl Read, who: &str) -> io::Result<()> {
    let m: [u8; 8] = read_array(r)?;
    if m == MAGIC {
        return Ok(());
    }
    if m[..6] == MAGIC[..6] {
        return Err(bad(format!(
            "{who} speaks dmindex protocol version {}, this one speaks {}",
            shown(&m[6..]),
            shown(&MAGIC[6..])
        )));
    }
    Err(bad(format!("not a dmindex {who} (it sent \"{}\")", shown(&m))))
}

/// Sends the hello.
pub fn write_hello(w: &mut impl Write, nonce: &[u8; NONCE]) -> io::Result<()> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(nonce);
    w.write_all(&out)?;
    w.flush()
}

/// Reads a hello; the client's nonce.
pub fn read_hello(r: &mut impl Read) -> io::Result<[u8; NONCE]> {
    read_magic(r, "client")?;
    read_array(r)
}

/// Sends the challenge.
pub fn write_challenge(w: &mut impl Write, c: &Challenge) -> io::Result<()> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&c.nonce);
    out.extend_from_slice(&c.proof);
    w.write_all(&out)?;
    w.flush()
}

/// Reads a challenge.
pub fn read_challenge(r: &mut impl Read) -> io::Result<Challenge> {
    read_magic(r, "memnode")?;
    Ok(Challenge { nonce: read_array(r)?, proof: read_array(r)? })
}

/// Sends the client's proof.
pub fn write_response(w: &mut impl Write, proof: &[u8; PROOF]) -> io::Result<()> {
    w.write_all(proof)?;
    w.flush()
}

/// Reads the client's proof.
pub fn read_response(r: &mut impl Read) -> io::Result<[u8; PROOF]> {
    read_array(r)
}

/// Sends a welcome, or a refusal with `Err(message)`.
pub fn write_welcome(w: &mut impl Write, welcome: Result<&Welcome, &str>) -> io::Result<()> {
    let mut out = Vec::new();
    match welcome {
        Ok(x) => {
            out.push(0);
            out.extend_from_slice(&x.mn_id.to_le_bytes());
            out.extend_from_slice(&x.incarnation.to_le_bytes());
            out.extend_from_slice(&x.base.to_le_bytes());
            out.extend_from_slice(&x.length.to_le_bytes());
            out.extend_from_slice(&x.verb_key);
            put_bytes(&mut out, &x.rkey);
            put_bytes(&mut out, &x.worker_address);
        }
        Err(msg) => {
            out.push(1);
            put_bytes(&mut out, &msg.as_bytes()[..msg.len().min(MAX_TEXT as usize)]);
        }
    }
    w.write_all(&out)?;
    w.flush()
}

/// Reads a welcome, checked whole; `Ok(Err(message))` if the memnode refused.
pub fn read_welcome(r: &mut impl Read) -> io::Result<Result<Welcome, String>> {
    match read_u8(r)? {
        0 => {}
        1 => {
            let msg = read_bytes(r, "refusal", MAX_TEXT)?;
            return Ok(Err(String::from_utf8_lossy(&msg).into_owned()));
        }
        s => return Err(bad(format!("welcome status {s}"))),
    }
    let w = Welcome {
        mn_id: read_u16(r)?,
        incarnation: read_u64(r)?,
        base: read_u64(r)?,
        length: read_u64(r)?,
        verb_key: read_array(r)?,
        rkey: read_bytes(r, "rkey", MAX_KEY)?,
        worker_address: read_bytes(r, "worker address", MAX_KEY)?,
    };
    if w.length == 0 || w.base.checked_add(w.length).is_none() {
        return Err(bad(format!("a pool of {} bytes at {:#x} does not fit", w.length, w.base)));
    }
    if w.worker_address.is_empty() {
        return Err(bad("an empty worker address"));
    }
    Ok(Ok(w))
}

/// Sends a call.
pub fn write_call(w: &mut impl Write, service: u16, request: &[u8]) -> io::Result<()> {
    w.write_all(&service.to_le_bytes())?;
    w.write_all(&(request.len() as u32).to_le_bytes())?;
    w.write_all(request)?;
    w.flush()
}

/// Reads a call, or `None` at a clean end of stream.
pub fn read_call(r: &mut impl Read) -> io::Result<Option<(u16, Vec<u8>)>> {
    let mut b = [0u8; 2];
    match r.read_exact(&mut b) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    Ok(Some((u16::from_le_bytes(b), read_bytes(r, "request", MAX_FRAME)?)))
}

/// Sends a reply.
pub fn write_reply(w: &mut impl Write, reply: &Reply) -> io::Result<()> {
    let mut out = Vec::new();
    match reply {
        Reply::Ok(b) => {
            out.push(0);
            put_bytes(&mut out, b);
        }
        Reply::OutOfMemory { requested, available } => {
            out.push(1);
            let mut body = requested.to_le_bytes().to_vec();
            body.extend_from_slice(&available.to_le_bytes());
            put_bytes(&mut out, &body);
        }
        Reply::Refused(m) => {
            out.push(2);
            put_bytes(&mut out, m.as_bytes());
        }
        Reply::UnknownService => {
            out.push(3);
            put_bytes(&mut out, &[]);
        }
    }
    w.write_all(&out)?;
    w.flush()
}

/// The length of the reply frame at the start of `buf`, once `buf` holds all of it (`None`
/// while it does not); an error if its length field is over [`MAX_FRAME`].
pub fn reply_frame_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(len) = buf.get(1..5) else { return Ok(None) };
    let n = u32::from_le_bytes(len.try_into().expect("4 bytes"));
    if n > MAX_FRAME {
        return Err(bad(format!("reply of {n} bytes exceeds the {MAX_FRAME}-byte limit")));
    }
    let total = 5 + n as usize;
    Ok((buf.len() >= total).then_some(total))
}

/// Reads a reply.
pub fn read_reply(r: &mut impl Read) -> io::Result<Reply> {
    let status = read_u8(r)?;
    let body = read_bytes(r, "reply", MAX_FRAME)?;
    match status {
        0 => Ok(Reply::Ok(body)),
        1 if body.len() == 16 => Ok(Reply::OutOfMemory {
            requested: u64::from_le_bytes(body[..8].try_into().expect("8 bytes")),
            available: u64::from_le_bytes(body[8..].try_into().expect("8 bytes")),
        }),
        2 => Ok(Reply::Refused(String::from_utf8_lossy(&body).into_owned())),
        3 => Ok(Reply::UnknownService),
        s => Err(bad(format!("reply status {s} with {} bytes", body.len()))),
    }
}

/// Reads a token file: its contents without surrounding whitespace, which must not be empty.
pub fn read_token_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let raw = std::fs::read(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
    let t = raw.trim_ascii().to_vec();
    if t.is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_are_pinned() {
        let mut b = Vec::new();
        write_hello(&mut b, &[7; NONCE]).unwrap();
        assert_eq!(b, [&b"DMIUCX04"[..], &[7; NONCE]].concat());
        assert_eq!(read_hello(&mut &b[..]).unwrap(), [7; NONCE]);
        let c = Challenge { nonce: [1; NONCE], proof: [2; PROOF] };
        let mut b = Vec::new();
        write_challenge(&mut b, &c).unwrap();
        assert_eq!(b, [&MAGIC[..], &[1; NONCE], &[2; PROOF]].concat());
        assert_eq!(read_challenge(&mut &b[..]).unwrap(), c);
        let mut b = Vec::new();
        write_response(&mut b, &[3; PROOF]).unwrap();
        assert_eq!(read_response(&mut &b[..]).unwrap(), [3; PROOF]);

        let w = Welcome {
            mn_id: 3,
            incarnation: 0x0123_4567_89ab_cdef,
            base: 0x7f00_0000_0000,
            length: 1 << 30,
            verb_key: [0xAB; VERB_KEY],
            rkey: vec![1, 2, 3],
            worker_address: vec![9; 5],
        };
        let mut b = Vec::new();
        write_welcome(&mut b, Ok(&w)).unwrap();
        assert_eq!(b.len(), 1 + 2 + 8 + 8 + 8 + 16 + 4 + 3 + 4 + 5);
        assert_eq!(b[3..11], 0x0123_4567_89ab_cdefu64.to_le_bytes());
        assert_eq!(b[27..43], [0xAB; VERB_KEY]);
        assert_eq!(read_welcome(&mut &b[..]).unwrap(), Ok(w));
        let mut b = Vec::new();
        write_welcome(&mut b, Err("wrong token")).unwrap();
        assert_eq!(read_welcome(&mut &b[..]).unwrap(), Err("wrong token".into()));

        let mut b = Vec::new();
        write_call(&mut b, 7, &[1, 2]).unwrap();
        assert_eq!(b, [7, 0, 2, 0, 0, 0, 1, 2]);
        assert_eq!(read_call(&mut &b[..]).unwrap(), Some((7, vec![1, 2])));
        assert_eq!(read_call(&mut &[][..]).unwrap(), None);

        let mut b = Vec::new();
        write_reply(&mut b, &Reply::Ok(vec![5; 3])).unwrap();
        assert_eq!(reply_frame_len(&b[..7]).unwrap(), None);
        assert_eq!(reply_frame_len(&[b.clone(), vec![1]].concat()).unwrap(), Some(8));
        assert!(reply_frame_len(&[0, 255, 255, 255, 255]).is_err());
        for r in [
            Reply::Ok(vec![5; 16]),
            Reply::OutOfMemory { requested: 10, available: 3 },
            Reply::Refused("no".into()),
            Reply::UnknownService,
        ] {
            let mut b = Vec::new();
            write_reply(&mut b, &r).unwrap();
            assert_eq!(read_reply(&mut &b[..]).unwrap(), r);
        }
    }

    #[test]
    fn strangers_other_versions_and_malformed_input_are_refused_not_trusted() {
        let e = read_challenge(&mut &b"HTTP/1.1 400 Bad Request\r\n"[..]).unwrap_err();
        assert!(e.to_string().contains("not a dmindex memnode (it sent \"HTTP/1.1\")"), "{e}");
        let e = read_hello(&mut &b"GET / HTTP/1.1\r\n"[..]).unwrap_err();
        assert!(e.to_string().contains("not a dmindex client"), "{e}");
        let old = [&b"DMIUCX03"[..], &[0; 40]].concat();
        let e = read_hello(&mut &old[..]).unwrap_err();
        assert!(
            e.to_string().contains("speaks dmindex protocol version 03, this one speaks 04"),
            "{e}"
        );
        // Truncated frames are errors, not hangs or panics.
        assert!(read_hello(&mut &MAGIC[..]).is_err());
        assert!(read_welcome(&mut &[0u8, 1][..]).is_err());
        assert!(read_reply(&mut &[9u8, 0, 0, 0, 0][..]).is_err());
        // A welcome whose parts are absurd is refused before anything uses them.
        let w = Welcome {
            mn_id: 0,
            incarnation: 1,
            base: u64::MAX - 10,
            length: 1 << 20,
            verb_key: [0; VERB_KEY],
            rkey: vec![],
            worker_address: vec![1],
        };
        let mut b = Vec::new();
        write_welcome(&mut b, Ok(&w)).unwrap();
        assert!(read_welcome(&mut &b[..]).unwrap_err().to_string().contains("does not fit"));
        let mut b = vec![0u8; 1 + 2 + 8 + 8 + 8 + 16];
        b[19..27].copy_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_welcome(&mut &b[..]).unwrap_err().to_string().contains("exceeds"));
        assert!(read_welcome(&mut &[7u8][..]).unwrap_err().to_string().contains("status 7"));
    }
}
