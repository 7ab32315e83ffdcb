//! Cache-line versions: how a node's bytes are laid out so that a partial READ can be validated.
//!
//! # Layout
//!
//! A node is a sequence of *objects* (headers, metadata replicas, entries), each starting with a
//! 1-byte version. In remote memory the node's decoded bytes are interleaved with one version
//! byte per 64-byte line after the first:
//!
//! ```text
//! physical line 0:  [decoded 0 .. 64)                       (starts with object 0's version)
//! physical line n:  [CL version][decoded 64 + 63(n-1) .. 64 + 63n)
//! ```
//!
//! The CL version copies the version byte of the object that owns the line's first data byte.
//!
//! # Torn-read detection
//!
//! RDMA moves whole 64-byte lines atomically, so a reader that sees every CL version equal to its
//! owner's version, across every line boundary it read, has seen each object whole ([`decode`]
//! returns [`Torn`] otherwise). Writers always write whole objects ([`encode`]), so the CL bytes
//! they cover are always rewritten with them.

/// Bytes per cache line.
pub const LINE: usize = 64;
/// Data bytes per line after the first.
pub const DATA_PER_LINE: usize = LINE - 1;

/// Physical offset of decoded byte `d`.
#[inline]
pub const fn phys(d: usize) -> usize {
    if d < LINE {
        d
    } else {
        let x = d - LINE;
        (1 + x / DATA_PER_LINE) * LINE + 1 + x % DATA_PER_LINE
    }
}

/// Physical bytes spanned by decoded bytes `[d0, d1)` (d1 > d0), up to `phys(d1 - 1) + 1`. When
/// `d0` is the first data byte of a line, the range starts one byte earlier, at that line's CL
/// version: it belongs to the object at `d0`, and a write of the object must rewrite it.
#[inline]
pub const fn phys_range(d0: usize, d1: usize) -> (usize, usize) {
    let p0 = phys(d0);
    let p0 = if p0 >= LINE && p0 % LINE == 1 { p0 - 1 } else { p0 };
    (p0, phys(d1 - 1) + 1)
}

/// Physical size of a node of `decoded` bytes.
#[inline]
pub const fn phys_len(decoded: usize) -> usize {
    if decoded == 0 {
        0
    } else {
        phys(decoded - 1) + 1
    }
}

/// Where objects start: the decoded offset of the version byte of the object holding `d`.
pub trait Objects {
    fn object_start(&self, d: usize) -> usize;
}

/// Appends to `out` the physical bytes that decoded bytes `[d0, d1)` of `node` (the whole decoded
/// node) occupy, CL versions included; a line's data at a time.
pub fn encode<O: Objects>(objs: &O, node: &[u8], d0: usize, d1: usize, out: &mut Vec<u8>) {
    let (p0, p1) = phys_range(d0, d1);
    let start = out.len();
    out.resize(start + p1 - p0, 0);
    encode_window(objs, &node[d0..], d0, d1, &mut out[start..]);
}

/// [`encode`] from a window of the decoded node (`window[i]` is decoded byte `d0 + i`) into
/// `out` (at least the physical length of the range); returns the physical bytes written.
/// What a writer that holds only the part it READ (a neighbourhood) encodes from.
pub fn encode_window<O: Objects>(
    objs: &O,
    window: &[u8],
    d0: usize,
    d1: usize,
    out: &mut [u8],
) -> usize {
    let (p0, p1) = phys_range(d0, d1);
    let (mut p, mut d) = (p0, d0);
    while p < p1 {
        if p >= LINE && p % LINE == 0 {
            // The line's version: its first data byte's owner's (an object inside the range,
            // since writes cover whole objects).
            out[p - p0] = window[objs.object_start(d) - d0];
            p += 1;
            continue;
        }
        let n = ((p / LINE + 1) * LINE).min(p1) - p;
        copy_run(&mut out[p - p0..p - p0 + n], &window[d - d0..d - d0 + n]);
        (p, d) = (p + n, d + n);
    }
    debug_assert_eq!(d, d1);
    p1 - p0
}

/// Copies one line's data run (`dst` and `src` of one length): a whole line's 63 bytes as one
/// fixed-size move, which compiles to a few vector loads and stores instead of a call to
/// `memcpy` (most runs of a multi-line range are whole); other lengths as they come.
#[inline(always)]
fn copy_run(dst: &mut [u8], src: &[u8]) {
    match (<&mut [u8; DATA_PER_LINE]>::try_from(&mut *dst), <&[u8; DATA_PER_LINE]>::try_from(src)) {
        (Ok(d), Ok(s)) => *d = *s,
        _ => dst.copy_from_slice(src),
    }
}

/// A torn read: a CL version disagreed with its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torn;

/// Decodes physical bytes read for decoded `[d0, d1)` into `node[d0..d1]`, checking every CL
/// version against the version byte of its owner (which lies in `[d0, d1)` since reads start at
/// object boundaries). Copies a line's data at a time and allocates nothing.
pub fn decode<O: Objects>(
    objs: &O,
    phys_bytes: &[u8],
    d0: usize,
    d1: usize,
    node: &mut [u8],
) -> Result<(), Torn> {
    decode_window(objs, phys_bytes, d0, d1, &mut node[d0..d1])
}

/// [`decode`] into a window of the decoded node: `window[i]` receives decoded byte `d0 + i`
/// (`window` holds at least `d1 - d0` bytes). What a reader that keeps only the part it READ
/// (a neighbourhood, on the stack) decodes into.
pub fn decode_window<O: Objects>(
    objs: &O,
    phys_bytes: &[u8],
    d0: usize,
    d1: usize,
    window: &mut [u8],
) -> Result<(), Torn> {
    let (p0, p1) = phys_range(d0, d1);
    debug_assert_eq!(phys_bytes.len(), p1 - p0);
    // The data: runs between version bytes (physical offsets LINE, 2·LINE, …).
    let (mut p, mut d) = (p0, d0);
    while p < p1 {
        if p >= LINE && p % LINE == 0 {
            p += 1;
            continue;
        }
        let n = ((p / LINE + 1) * LINE).min(p1) - p;
        copy_run(&mut window[d - d0..d - d0 + n], &phys_bytes[p - p0..p - p0 + n]);
        (p, d) = (p + n, d + n);
    }
    // The versions: each line's must equal its first data byte's owner's, decoded above.
    let mut b = (p0.max(LINE)).div_ceil(LINE) * LINE;
    while b < p1 {
        let first = b + 1 - b / LINE;
        let owner = objs.object_start(first);
        if owner < d0 || window[owner - d0] != phys_bytes[b - p0] {
            return Err(Torn);
        }
        b += LINE;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Objects of 19 bytes, back to back.
    struct Nineteen;
    impl Objects for Nineteen {
        fn object_start(&self, d: usize) -> usize {
            d / 19 * 19
        }
    }

    #[test]
    fn mapping_is_pinned() {
        assert_eq!(phys(0), 0);
        assert_eq!(phys(63), 63);
        assert_eq!(phys(64), 65);
        assert_eq!(phys(126), 127);
        assert_eq!(phys(127), 129);
        // The CHIME leaf: 1296 decoded bytes are 1316 on the wire.
        assert_eq!(phys_len(1296), 1316);
        // The CHIME internal node: 1131 decoded, 1148 physical.
        assert_eq!(phys_len(1131), 1148);
    }

    #[test]
    fn roundtrip_and_torn_detection() {
        let mut node = vec![0u8; 19 * 20];
        for (i, b) in node.iter_mut().enumerate() {
            *b = if i % 19 == 0 { (i / 19) as u8 + 1 } else { i as u8 };
        }
        let mut phys_bytes = Vec::new();
        for (d0, d1) in [(0, node.len()), (19 * 3, 19 * 9), (19 * 7, 19 * 8)] {
            phys_bytes.clear();
            encode(&Nineteen, &node, d0, d1, &mut phys_bytes);
            let mut back = vec![0u8; node.len()];
            decode(&Nineteen, &phys_bytes, d0, d1, &mut back).unwrap();
            assert_eq!(&back[d0..d1], &node[d0..d1]);
        }
        // A range starting at a line's first data byte carries that line's CL byte.
        struct Lines;
        impl Objects for Lines {
            fn object_start(&self, d: usize) -> usize {
                if d < 64 {
                    0
                } else {
                    64 + (d - 64) / 63 * 63
                }
            }
        }
        assert_eq!(phys_range(64, 127), (64, 128));
        let mut lines = vec![1u8; 64 + 63 * 3];
        lines[64] = 7;
        phys_bytes.clear();
        encode(&Lines, &lines, 64, 127, &mut phys_bytes);
        assert_eq!(phys_bytes[0], 7, "the CL byte of line 1 is written with its object");
        let mut back = vec![0u8; lines.len()];
        back[64] = 7;
        decode(&Lines, &phys_bytes, 64, 127, &mut back).unwrap();
        // Flip the object whose second half sits on the next line: the CL byte disagrees.
        phys_bytes.clear();
        encode(&Nineteen, &node, 0, node.len(), &mut phys_bytes);
        phys_bytes[57] ^= 0x10; // object 3 (decoded 57..76) starts at physical 57; line 1 starts at 64
        let mut back = vec![0u8; node.len()];
        assert_eq!(decode(&Nineteen, &phys_bytes, 0, node.len(), &mut back), Err(Torn));
    }

    /// A window encodes to the physical image built by hand, decodes back to the node's bytes,
    /// and a torn line is caught in a window as in the whole node.
    #[test]
    fn windows_match_the_whole_node() {
        let node: Vec<u8> =
            (0..19 * 30).map(|i| if i % 19 == 0 { (i / 19) as u8 + 1 } else { i as u8 }).collect();
        for (d0, d1) in [(0, 19), (19 * 3, 19 * 4), (19 * 3, 19 * 20), (19 * 12, 19 * 30)] {
            let mut whole = Vec::new();
            encode(&Nineteen, &node, d0, d1, &mut whole);
            // Byte by byte: data in order, and at each line start the version of the object
            // that owns the line's first data byte (objects are 19 bytes here).
            let (p0, p1) = phys_range(d0, d1);
            let mut d = d0;
            let expected: Vec<u8> = (p0..p1)
                .map(|p| {
                    if p >= LINE && p % LINE == 0 {
                        node[d / 19 * 19]
                    } else {
                        d += 1;
                        node[d - 1]
                    }
                })
                .collect();
            assert_eq!(whole, expected, "encode [{d0}, {d1})");
            let mut window = [0u8; 700];
            decode_window(&Nineteen, &whole, d0, d1, &mut window).unwrap();
            assert_eq!(&window[..d1 - d0], &node[d0..d1], "decode [{d0}, {d1})");
            if let Some(b) = (0..whole.len()).find(|&b| {
                let p = phys_range(d0, d1).0 + b;
                p >= LINE && p % LINE == 0
            }) {
                let mut torn = whole.clone();
                torn[b] ^= 0x40;
                assert_eq!(decode_window(&Nineteen, &torn, d0, d1, &mut window), Err(Torn));
            }
        }
    }
}
