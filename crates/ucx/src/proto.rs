//! The memnode's TCP control protocol: bootstrap and two-sided requests. Pure Rust (no UCX), so
//! it builds and is tested without the `ucx` feature.
//!
//! # Frames (all integers little-endian)
//!
//! ```text
//! client → server   hello:   magic "DMIUCX01" | token length u32 | token
//! server → client   welcome: status u8 (0 = ok) | then, if ok:
//!                            mn id u16 | incarnation u64 | pool base u64 | pool length u64 |
//!                            rkey length u32 | packed rkey | worker address length u32 | address
//!                            if not ok: message length u32 | UTF-8 message
//! client → server   call:    service u16 | request length u32 | request
//! server → client   reply:   status u8 | length u32 | body
//!                            status 0: body = reply
//!                            status 1: body = requested u64 | available u64 (out of memory)
//!                            status 2: body = UTF-8 message (any other refusal)
//!                            status 3: body empty (no such service)
//! ```
//!
//! Lengths are capped ([`MAX_FRAME`]) so a malformed or hostile peer cannot make either side
//! allocate without bound.
//!
//! The incarnation is a random number a memnode process draws when it starts: a memnode
//! restarted on the same address is a new server with an empty pool, and clients tell the two
//! apart by it (see `transport`'s "Restarts").

use std::io::{self, Read, Write};

/// The hello's magic.
pub const MAGIC: [u8; 8] = *b"DMIUCX01";
/// Largest token, rkey, address or request body accepted.
pub const MAX_FRAME: u32 = 1 << 20;

/// What a memnode tells a client that presented the right token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub mn_id: u16,
    /// Drawn at random when the memnode process starts.
    pub incarnation: u64,
    pub base: u64,
    pub length: u64,
    pub rkey: Vec<u8>,
    pub worker_address: Vec<u8>,
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

/// A length-prefixed byte string of at most [`MAX_FRAME`] bytes.
fn read_bytes(r: &mut impl Read, what: &str) -> io::Result<Vec<u8>> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    let n = u32::from_le_bytes(b);
    if n > MAX_FRAME {
        return Err(bad(format!("{what} of {n} bytes exceeds the {MAX_FRAME}-byte limit")));
    }
    let mut v = vec![0u8; n as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Sends the hello.
pub fn write_hello(w: &mut impl Write, token: &[u8]) -> io::Result<()> {
    let mut out = MAGIC.to_vec();
    put_bytes(&mut out, token);
    w.write_all(&out)?;
    w.flush()
}

/// Reads a hello; the token it carries.
pub fn read_hello(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut m = [0u8; 8];
    r.read_exact(&mut m)?;
    if m != MAGIC {
        return Err(bad("not a dmindex client (bad magic)"));
    }
    read_bytes(r, "token")
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
            put_bytes(&mut out, &x.rkey);
            put_bytes(&mut out, &x.worker_address);
        }
        Err(msg) => {
            out.push(1);
            put_bytes(&mut out, msg.as_bytes());
        }
    }
    w.write_all(&out)?;
    w.flush()
}

/// Reads a welcome; `Ok(Err(message))` if the memnode refused.
pub fn read_welcome(r: &mut impl Read) -> io::Result<Result<Welcome, String>> {
    if read_u8(r)? != 0 {
        let msg = read_bytes(r, "refusal")?;
        return Ok(Err(String::from_utf8_lossy(&msg).into_owned()));
    }
    Ok(Ok(Welcome {
        mn_id: read_u16(r)?,
        incarnation: read_u64(r)?,
        base: read_u64(r)?,
        length: read_u64(r)?,
        rkey: read_bytes(r, "rkey")?,
        worker_address: read_bytes(r, "worker address")?,
    }))
}

/// Sends a call.
pub fn write_call(w: &mut impl Write, service: u16, request: &[u8]) -> io::Result<()> {
    let mut out = service.to_le_bytes().to_vec();
    put_bytes(&mut out, request);
    w.write_all(&out)?;
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
    Ok(Some((u16::from_le_bytes(b), read_bytes(r, "request")?)))
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
    let body = read_bytes(r, "reply")?;
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

/// Compares tokens in time independent of where they differ.
pub fn token_matches(expected: &[u8], got: &[u8]) -> bool {
    expected.len() == got.len() && expected.iter().zip(got).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0
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
        write_hello(&mut b, b"tok").unwrap();
        assert_eq!(b, [&MAGIC[..], &3u32.to_le_bytes(), b"tok"].concat());
        assert_eq!(read_hello(&mut &b[..]).unwrap(), b"tok");

        let w = Welcome {
            mn_id: 3,
            incarnation: 0x0123_4567_89ab_cdef,
            base: 0x7f00_0000_0000,
            length: 1 << 30,
            rkey: vec![1, 2, 3],
            worker_address: vec![9; 5],
        };
        let mut b = Vec::new();
        write_welcome(&mut b, Ok(&w)).unwrap();
        assert_eq!(b.len(), 1 + 2 + 8 + 8 + 8 + 4 + 3 + 4 + 5);
        assert_eq!(b[3..11], 0x0123_4567_89ab_cdefu64.to_le_bytes());
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
    fn malformed_input_is_refused_not_trusted() {
        assert!(read_hello(&mut &b"GET / HTTP/1.1\r\n"[..])
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_hello(&mut &huge[..]).unwrap_err().to_string().contains("exceeds"));
        // Truncated frames are errors, not hangs or panics.
        assert!(read_welcome(&mut &[0u8, 1][..]).is_err());
        assert!(read_reply(&mut &[9u8, 0, 0, 0, 0][..]).is_err());
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abc", b"abd") && !token_matches(b"abc", b"ab"));
    }
}
