//! The Dolphin leaf: a B+ leaf with separate key and value arrays, covering `[lo, hi]` inside
//! one 7-byte prefix, rewritten in place only by SMOs.
//!
//! # Layout (64-B aligned; every word little-endian)
//!
//! ```text
//! line 0: header
//!  off  0  rev    u64  the slot that published the leaf (a hint: only the cache trusts it)
//!  off  8  spear  u64  the Spear word (prim::spear): FAA only, no WRITE ever covers 8..16
//!  off 16  lo     u64  lowest key covered (inclusive)
//!  off 24  hi     u64  highest key covered (inclusive); lo and hi share their first 7 bytes
//!  off 32  meta   u64  bits 0..32 nv, the leaf epoch (>= 1) | bits 32..48 S, the slots
//!  off 40  born   u64  a leaf born claimed: the member word (prim::lease) of the split that
//!                      made it, until its release clears it; 0 otherwise (prim::spear's born
//!                      record: who holds the leaf's claim with no intent naming it)
//!  off 48  redo   u64  while an SMO rewrites a leaf longer than a packet: where its rewrite's
//!                      copy is (crate::smo_redo); 0 otherwise
//!  off 56..64          zero
//! key line i (i < K = ceil(S / 28)), at 64 + 64 i
//!  +0        ver   u64  the epoch of the creation or SMO that last wrote the line
//!  +8 + 8 w  keys 28 i + 4 w .. + 3, a 16-bit field each (w < 7; field f at bits 16 f):
//!            used << 8 | the key's last byte (its first 7 bytes are lo's); 0 = free; set once
//!            per epoch by masked CAS 0 -> used
//! value lines, from 64 (1 + K)
//!  W <= 56 (W = the value size rounded up to 8): n = 56 / W cells a line (7 for 8-byte values)
//!   cell j in line j / n, position p = j % n
//!   +0          H     u64  the line head (below): epoch and the n cells' states
//!   +8 + W p    value W bytes
//!  W > 56: one multi-line cell per 1 + ceil((W - 56) / 63) lines, n = 1
//!   line 0   +0 H u64 | +8 value bytes 0 .. 56
//!   line t   +0 cl u8 (= cv & 0xFF) | +1 value bytes 56 + 63 (t - 1) .. (63 each)
//! ```
//!
//! The line head, the only per-slot state, sits in the same cache line as the values it
//! describes:
//!
//! ```text
//!  63            48 47 46 45                           32 31                      0
//! +----------------+--+--+-------------------------------+-------------------------+
//! | cv             |0 |L | st6 st5 st4 st3 st2 st1 st0   | nv: the leaf epoch      |
//! +----------------+--+--+-------------------------------+-------------------------+
//!  multi-line cell, locked (one cell, so bits 34..45 are free for its holder):
//! +----------------+--+--+-----------------------+-------+-------------------------+
//! | cv             |0 |1 |T| holder: member slot | st0   | nv                      |
//! +----------------+--+--+-----------------------+-------+-------------------------+
//!  63            48 47 46 45 44               34 33  32 31                      0
//!  T: flipped by each takeover of the lock from a dead holder (crate::redo)
//!  st p (bits 32 + 2p .. 34 + 2p): 0 EMPTY (a key CAS'd into a slot whose cell is EMPTY is a
//!      pending insert: invisible), 1 LIVE, 2 DELETED; only forward within an epoch, so a
//!      deleted cell stays dead until an SMO and a re-insert of its key takes a free slot
//!  L, cv: multi-line cells only (0 otherwise): the writer lock, and the cell version that
//!      every line's cl byte repeats when the cell is whole; while L is set, bits 34..45 name
//!      the holder's member slot (`prim::lease`), whose redo record says what it writes
//!      (`crate::redo`)
//! ```
//!
//! Default shape (84 slots, 8-byte values): K = 3 key lines, 12 value lines of 7 cells,
//! 1024 bytes. 100-byte values, 36 slots: K = 2, 36 cells of 2 lines, 4800 bytes.
//!
//! # Why each word is where it is
//!
//! * Keys are set alone, by masked CAS on their field: the paper's reason for separate arrays.
//!   Every key of a leaf shares `lo`'s 7-byte prefix, so a key needs only its last byte and a
//!   used bit (byte 0 is a key): 28 keys and the epoch in a line, not 7.
//! * A READ returns each cache line as of one instant but different lines from different
//!   instants, so a slot's state must share its line with the value it describes: it is in the
//!   line head. Several cells share the head, so writers change one cell's state bits by masked
//!   CAS and never WRITE the head; a value is written by a WRITE posted before that CAS in the
//!   same doorbell (one connection: the WRITE has landed when the CAS executes).
//! * An SMO rewrites the leaf in place (new epoch in `meta`, in every key line's `ver`, in every
//!   line head); an image is accepted only if all of them agree ([`LeafImage::check`]), so a READ torn
//!   across an SMO is detected, whatever mix of lines it returned.
//! * The Spear word is inside line 0 but outside every WRITE (`[0, 8)` and `[16, ..)` are
//!   written separately), so a rewrite never erases a concurrent FAA.
//! * Zeroed memory never checks: `nv >= 1` and a well-formed `[lo, hi]` are required.
//!
//! # Multi-line cells
//!
//! A value longer than a line cannot be written atomically, so its lines carry the cell version:
//! a reader takes the cell only when every line's cl byte equals `H.cv` ([`LeafImage::cell_whole`]),
//! else it READs again. Writers serialise on `H.L` (`crate::sync` says how) and write the other
//! lines first and line 0, with `H` unlocked at `cv + 1`, last in the same doorbell: a reader
//! sees either every line of one version or a mismatch. An SMO rewriting a leaf in place gives
//! each cell `cv + 2` of the cell it overwrites (a crashed writer may have left lines at `cv + 1`),
//! a fresh leaf `cv = 1` (zeroed lines have cl 0), so no line of the old epoch matches a cell of
//! the new one. The check is a byte: a READ would have to span 256 versions of one cell (or 128
//! rewrites of its leaf) to be fooled, as with FaRM's cache-line versions.

use dmindex_index::{IndexError, IndexResult};

mod head;

pub use head::{LineHead, State, LOCK};

/// Bytes in a cache line.
pub const LINE: usize = 64;
/// Keys per key line: 16-bit fields in the 7 words after the line's epoch word.
pub const KEYS_PER_LINE: usize = 7 * KEYS_PER_WORD;
/// Keys per key word.
pub const KEYS_PER_WORD: usize = 4;
/// Offset of the Spear word.
pub const SPEAR: usize = 8;
/// Offset of `lo` (the first byte an SMO's header WRITE covers).
pub const LO: usize = 16;
/// Offset of `hi`.
pub const HI: usize = 24;
/// Offset of the meta word.
pub const META: usize = 32;
/// Offset of the born record.
pub const BORN: usize = 40;
/// Offset of the redo word of an SMO's rewrite in progress ([`crate::smo_redo`]).
pub const REDO: usize = 48;
/// Value bytes in a line after its head.
pub const LINE_VALUE: usize = LINE - 8;
/// Most cells one line head describes (7 8-byte values).
pub const MAX_PER_LINE: usize = LINE_VALUE / 8;
/// Largest value (a multi-line cell beyond [`LINE_VALUE`]).
pub const MAX_VALUE: usize = 4096;
/// Value bytes in each line of a multi-line cell after the first (one byte is the cl byte).
const TAIL_VALUE: usize = LINE - 1;
/// Bytes of the largest cell (a [`MAX_VALUE`]-byte value's).
pub const MAX_CELL: usize = LINE * (1 + (MAX_VALUE - LINE_VALUE).div_ceil(TAIL_VALUE));
/// Most slots a leaf may have.
pub const MAX_SLOTS: usize = 256;

/// The key field of `key` (its last byte, and the used bit; its prefix is the leaf's).
pub const fn key_field(key: u64) -> u64 {
    1 << 8 | (key & 0xFF)
}

/// The bits of a key word that hold key field `f` (`f < KEYS_PER_WORD`).
pub const fn field_mask(f: usize) -> u64 {
    0xFFFF << (16 * f)
}

/// The sizes of one configuration's leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Slots (keys) per leaf.
    pub slots: usize,
    /// Value bytes as configured.
    pub value: usize,
    /// Bytes a value takes in its line: `value` rounded up to 8 (one-line cells), or `value`.
    pub width: usize,
    /// Cells per value line head: `56 / width`, 1 for multi-line cells.
    pub per_line: usize,
    /// Bytes of a group of cells under one head: a line, or a whole multi-line cell.
    pub cell: usize,
    /// Key lines.
    pub key_lines: usize,
    /// Offset of the first value line.
    pub cells_at: usize,
    /// Bytes of the leaf.
    pub bytes: usize,
}

impl Shape {
    /// The shape for `slots` slots of `value`-byte values.
    pub fn new(slots: usize, value: usize) -> IndexResult<Shape> {
        if !(2..=MAX_SLOTS).contains(&slots) {
            return Err(IndexError::Config(format!(
                "dolphin: slots={slots} is outside 2..={MAX_SLOTS}"
            )));
        }
        if !(1..=MAX_VALUE).contains(&value) {
            return Err(IndexError::Config(format!(
                "dolphin: values of {value} bytes are not supported (1..={MAX_VALUE})"
            )));
        }
        let (width, per_line, cell) = if value <= LINE_VALUE {
            let w = value.next_multiple_of(8);
            (w, LINE_VALUE / w, LINE)
        } else {
            (value, 1, LINE * (1 + (value - LINE_VALUE).div_ceil(TAIL_VALUE)))
        };
        let key_lines = slots.div_ceil(KEYS_PER_LINE);
        let cells_at = LINE * (1 + key_lines);
        let bytes = cells_at + slots.div_ceil(per_line) * cell;
        Ok(Shape { slots, value, width, per_line, cell, key_lines, cells_at, bytes })
    }

    /// The shape with the most slots whose leaf takes at most `bytes` (at least 2 slots, which
    /// take more than `bytes` only with values of hundreds of bytes).
    pub fn fitting(bytes: usize, value: usize) -> IndexResult<Shape> {
        let mut best = Shape::new(2, value)?;
        for slots in 3..=MAX_SLOTS {
            let s = Shape::new(slots, value)?;
            if s.bytes > bytes {
                break;
            }
            best = s;
        }
        Ok(best)
    }

    /// Offset of the word holding key `j`.
    pub const fn key_at(&self, j: usize) -> usize {
        let i = j % KEYS_PER_LINE;
        LINE * (1 + j / KEYS_PER_LINE) + 8 * (1 + i / KEYS_PER_WORD)
    }

    /// Key `j`'s field in its word.
    pub const fn key_field_of(&self, j: usize) -> usize {
        j % KEYS_PER_WORD
    }

    /// Offset of the head word describing cell `j` (a multi-line cell's start).
    pub const fn head_at(&self, j: usize) -> usize {
        self.cells_at + self.cell * (j / self.per_line)
    }

    /// Cell `j`'s position under its head.
    pub const fn pos(&self, j: usize) -> usize {
        j % self.per_line
    }

    /// Offset of cell `j`'s value (its first bytes, for a multi-line cell).
    pub const fn value_at(&self, j: usize) -> usize {
        self.head_at(j) + 8 + self.width * self.pos(j)
    }

    /// Whether a cell spans several lines (values over 56 bytes).
    pub const fn multi_line(&self) -> bool {
        self.cell > LINE
    }

    /// Value line heads.
    const fn heads(&self) -> usize {
        self.slots.div_ceil(self.per_line)
    }

    /// The cells under head `h` (the last head may describe fewer than `per_line`).
    const fn under(&self, h: usize) -> usize {
        let rest = self.slots - h * self.per_line;
        if rest < self.per_line {
            rest
        } else {
            self.per_line
        }
    }

    /// The cell version an SMO gives cell `j` when it writes a leaf over `old` (the versions of
    /// the cells it overwrites in place, empty for fresh memory): see the module docs.
    fn next_cv(&self, old: &[u16], j: usize) -> u16 {
        match (self.multi_line(), old.get(j)) {
            (false, _) => 0,
            (true, Some(cv)) => cv.wrapping_add(2),
            (true, None) => 1,
        }
    }
}

/// The 7-byte prefix a key's leaf is named by in the radix levels.
pub const fn prefix(key: u64) -> u64 {
    key >> 8
}

/// Where a key stands against a leaf's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judge {
    /// `lo <= key <= hi`: this leaf decides.
    Here,
    /// Same prefix, above `hi`: the leaf split since the link to it was read.
    Right,
    /// Same prefix, below `lo`.
    Left,
    /// Another 7-byte prefix (a hidden-prefix leaf reached for a key it does not hold).
    OtherPrefix,
}

fn word(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

fn put(out: &mut [u8], at: usize, w: u64) {
    out[at..at + 8].copy_from_slice(&w.to_le_bytes());
}

/// A leaf image as one READ returned it.
#[derive(Clone, Copy, Debug)]
pub struct LeafImage<'b> {
    shape: &'b Shape,
    buf: &'b [u8],
}

/// Why an image was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Lines from more than one epoch: READ again.
    Torn,
    /// Not a leaf (unwritten memory, or a wrong address).
    NotALeaf,
}

impl<'b> LeafImage<'b> {
    /// Checks a READ of a whole leaf: every line of one epoch, a well-formed range.
    pub fn check(shape: &'b Shape, buf: &'b [u8]) -> Result<LeafImage<'b>, Refused> {
        Self::verify(shape, buf)?;
        Ok(LeafImage { shape, buf })
    }

    /// [`LeafImage::check`] without keeping the image (for a READ loop that goes on reading
    /// into the same buffer until it checks).
    pub fn verify(shape: &Shape, buf: &[u8]) -> Result<(), Refused> {
        if buf.len() < shape.bytes {
            return Err(Refused::NotALeaf);
        }
        let meta = word(buf, META);
        let nv = meta as u32;
        let (lo, hi) = (word(buf, LO), word(buf, HI));
        if nv == 0 || (meta >> 32) as usize != shape.slots || lo > hi || prefix(lo) != prefix(hi) {
            // A rewrite lands line by line: a half-written header is a torn image, not a
            // corrupt leaf, as long as some other line says the leaf exists.
            return Err(if word(buf, LINE) != 0 { Refused::Torn } else { Refused::NotALeaf });
        }
        // Every key line and every head carries the epoch; key fields are free or used.
        let line_ok = |i: usize| word(buf, LINE * (1 + i)) == u64::from(nv);
        let key_ok = |j: usize| {
            let f = word(buf, shape.key_at(j)) >> (16 * shape.key_field_of(j)) & 0xFFFF;
            f & !0x1FF == 0 && (f & 1 << 8 != 0 || f == 0)
        };
        let head_ok = |h: usize| {
            let head = LineHead(word(buf, shape.cells_at + shape.cell * h));
            head.nv() == nv && head.well_formed(shape.under(h), shape.multi_line())
        };
        let ok = (0..shape.key_lines).all(line_ok)
            && (0..shape.slots).all(key_ok)
            && (0..shape.heads()).all(head_ok);
        if !ok {
            return Err(Refused::Torn);
        }
        Ok(())
    }

    /// The image of a buffer that [`LeafImage::verify`] accepted and nothing wrote since.
    pub(crate) fn verified(shape: &'b Shape, buf: &'b [u8]) -> LeafImage<'b> {
        debug_assert_eq!(Self::verify(shape, buf), Ok(()));
        LeafImage { shape, buf }
    }

    pub fn shape(&self) -> &Shape {
        self.shape
    }

    pub fn bytes(&self) -> &'b [u8] {
        &self.buf[..self.shape.bytes]
    }

    pub fn rev(&self) -> u64 {
        word(self.buf, 0)
    }

    /// The Spear word as the READ saw it.
    pub fn spear(&self) -> u64 {
        word(self.buf, SPEAR)
    }

    pub fn lo(&self) -> u64 {
        word(self.buf, LO)
    }

    pub fn hi(&self) -> u64 {
        word(self.buf, HI)
    }

    /// The born record: the member that holds the leaf's claim since it made it (0: none).
    pub fn born(&self) -> u64 {
        word(self.buf, BORN)
    }

    /// The leaf epoch.
    pub fn nv(&self) -> u32 {
        word(self.buf, META) as u32
    }

    /// Key `j` (0: free).
    pub fn key(&self, j: usize) -> u64 {
        let f = word(self.buf, self.shape.key_at(j)) >> (16 * self.shape.key_field_of(j));
        if f & 1 << 8 == 0 {
            return 0;
        }
        self.lo() & !0xFF | f & 0xFF
    }

    /// The head word describing cell `j`.
    pub fn head(&self, j: usize) -> LineHead {
        LineHead(word(self.buf, self.shape.head_at(j)))
    }

    /// Cell `j`'s state.
    pub fn state(&self, j: usize) -> State {
        self.head(j).state(self.shape.pos(j)).expect("a checked image")
    }

    /// Appends cell `j`'s value bytes to `out` (whole only if [`LeafImage::cell_whole`]).
    pub fn value_into(&self, j: usize, out: &mut Vec<u8>) {
        let (at, w) = (self.shape.value_at(j), self.shape.value);
        out.extend_from_slice(&self.buf[at..at + w.min(LINE_VALUE)]);
        let mut rest = w.saturating_sub(LINE_VALUE);
        let mut line = self.shape.head_at(j) + LINE;
        while rest > 0 {
            let n = rest.min(TAIL_VALUE);
            out.extend_from_slice(&self.buf[line + 1..line + 1 + n]);
            (rest, line) = (rest - n, line + LINE);
        }
    }

    /// Whether cell `j` is of one version: always for one-line cells; for a multi-line cell,
    /// when every line's cl byte repeats `H.cv` (a writer's lines may be landing otherwise).
    pub fn cell_whole(&self, j: usize) -> bool {
        if !self.shape.multi_line() {
            return true;
        }
        let at = self.shape.head_at(j);
        let cl = self.head(j).cv() as u8;
        (LINE..self.shape.cell).step_by(LINE).all(|t| self.buf[at + t] == cl)
    }

    /// Whether every live cell is whole (see [`LeafImage::cell_whole`]).
    pub fn live_whole(&self) -> bool {
        !self.shape.multi_line() || self.live().all(|(_, j)| self.cell_whole(j))
    }

    /// The versions of every cell (for an SMO that rewrites this leaf in place); none for
    /// one-line cells, which have no version.
    pub fn cvs(&self) -> Vec<u16> {
        if !self.shape.multi_line() {
            return Vec::new();
        }
        (0..self.shape.slots).map(|j| self.head(j).cv()).collect()
    }

    pub fn judge(&self, key: u64) -> Judge {
        match key {
            k if prefix(k) != prefix(self.lo()) => Judge::OtherPrefix,
            k if k < self.lo() => Judge::Left,
            k if k > self.hi() => Judge::Right,
            _ => Judge::Here,
        }
    }

    /// The slot of `key` that is not DELETED (a LIVE one if the image shows two: a READ may
    /// see a slot LIVE just before a delete and the re-insert's slot after it), or `None`.
    /// Outside an SMO's window a key has at most one such slot per epoch.
    pub fn find(&self, key: u64) -> Option<usize> {
        let mut pending = None;
        for j in (0..self.shape.slots).filter(|&j| self.key(j) == key) {
            match self.state(j) {
                State::Live => return Some(j),
                State::Empty => pending = pending.or(Some(j)),
                State::Deleted => {}
            }
        }
        pending
    }

    /// [`LeafImage::find`], the keys it compared reported to `c` (cells are unsorted: every
    /// one up to the key's live slot, or all of them).
    pub fn find_reported<T: dmindex_fabric::Transport>(
        &self,
        c: &dmindex_fabric::Client<T>,
        key: u64,
    ) -> Option<usize> {
        let found = self.find(key);
        let compared = match found {
            Some(j) if self.state(j) == State::Live => j + 1,
            _ => self.shape.slots,
        };
        c.compute(dmindex_fabric::Work::KeyCompare, compared as u64);
        found
    }

    /// The first free slot at or after `from`.
    pub fn free_from(&self, from: usize) -> Option<usize> {
        (from..self.shape.slots).find(|&j| self.key(j) == 0)
    }

    /// Live pairs (key, slot) inside `[lo, hi]`, in slot order.
    pub fn live(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let (lo, hi) = (self.lo(), self.hi());
        (0..self.shape.slots).filter_map(move |j| {
            let k = self.key(j);
            let live = k != 0 && (lo..=hi).contains(&k) && self.state(j) == State::Live;
            live.then_some((k, j))
        })
    }
}

/// Writes a whole leaf of `shape` into `out` (which it resizes): header (with `spear`), keys
/// and cells of epoch `nv`. `pairs` are (key, value) put in slots 0, 1, … as `state`. `over`:
/// the cell versions of the leaf this image overwrites in place (empty for fresh memory).
#[allow(clippy::too_many_arguments)]
pub fn encode<'v>(
    shape: &Shape,
    rev: u64,
    spear: u64,
    lo: u64,
    hi: u64,
    nv: u32,
    over: &[u16],
    pairs: impl IntoIterator<Item = (u64, &'v [u8], State)>,
    out: &mut Vec<u8>,
) {
    debug_assert!(nv != 0 && lo <= hi && prefix(lo) == prefix(hi));
    out.clear();
    out.resize(shape.bytes, 0);
    put(out, 0, rev);
    put(out, SPEAR, spear);
    put(out, LO, lo);
    put(out, HI, hi);
    put(out, META, (shape.slots as u64) << 32 | u64::from(nv));
    for i in 0..shape.key_lines {
        put(out, LINE * (1 + i), u64::from(nv));
    }
    for h in 0..shape.heads() {
        let head = LineHead::versioned(State::Empty, nv, shape.next_cv(over, h));
        encode_cell(shape, head, &[], &mut out[shape.cells_at + shape.cell * h..][..shape.cell]);
    }
    let mut pairs = pairs.into_iter();
    for (j, (k, v, state)) in (0..shape.slots).zip(pairs.by_ref()) {
        debug_assert!(k != 0 && prefix(k) == prefix(lo) && v.len() == shape.value);
        let at = shape.key_at(j);
        let keys = word(out, at) | key_field(k) << (16 * shape.key_field_of(j));
        put(out, at, keys);
        let at = shape.head_at(j);
        let head = LineHead(word(out, at)).with(shape.pos(j), state);
        if shape.multi_line() {
            encode_cell(shape, head, v, &mut out[at..at + shape.cell]);
        } else {
            put(out, at, head.0);
            out[shape.value_at(j)..][..v.len()].copy_from_slice(v);
        }
    }
    assert!(pairs.next().is_none(), "more pairs than slots");
}

/// The bytes of one multi-line cell (head word, value, and every line's cl byte `head.cv`),
/// padded to the cell: what a multi-line writer WRITEs. `value` may be empty (an empty cell).
/// For a one-line shape, the head and the value of the line's first cell.
pub fn encode_cell(shape: &Shape, head: LineHead, value: &[u8], out: &mut [u8]) {
    let out = &mut out[..shape.cell];
    out.fill(0);
    out[..8].copy_from_slice(&head.0.to_le_bytes());
    let first = value.len().min(LINE_VALUE);
    out[8..8 + first].copy_from_slice(&value[..first]);
    for (t, line) in out.chunks_exact_mut(LINE).enumerate().skip(1) {
        line[0] = head.cv() as u8;
        let from = (LINE_VALUE + TAIL_VALUE * (t - 1)).min(value.len());
        let n = (value.len() - from).min(TAIL_VALUE);
        line[1..1 + n].copy_from_slice(&value[from..from + n]);
    }
}

/// The line holding cell `j`'s head in a leaf image made by [`encode`], with cell `j` turned
/// LIVE, and its offset: the one WRITE that makes a pending cell of a leaf nobody else writes
/// (a split's new leaf, born claimed) visible, its other lines being in place already.
pub fn live_head(shape: &Shape, image: &[u8], j: usize) -> (usize, [u8; LINE]) {
    let at = shape.head_at(j);
    let mut line: [u8; LINE] = image[at..at + LINE].try_into().expect("a line");
    let head = LineHead(word(&line, 0)).with(shape.pos(j), State::Live);
    line[..8].copy_from_slice(&head.0.to_le_bytes());
    (at, line)
}

/// Where an SMO of a leaf holding `live` pairs (sorted by key) splits: `None` to compact in
/// place (at most three quarters of the slots live), else the index of the first pair that moves
/// to the new leaf (an even split, as the paper's).
pub fn split_at(shape: &Shape, live: usize) -> Option<usize> {
    (live * 4 > shape.slots * 3).then_some(live / 2)
}

#[cfg(test)]
mod tests;
