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
//!  off 40..64          zero
//! key line i (i < K = ceil(S / 7)), at 64 + 64 i
//!  +0   ver   u64  the epoch of the creation or SMO that last wrote the line
//!  +8   keys 7i .. 7i + 6, one u64 each: 0 = free; set once per epoch by CAS 0 -> key
//! value region, at 64 (1 + K): cell j at 64 (1 + K) + C j
//!  W <= 56: C in {16, 32, 64} (C | 64), one line
//!   +0   M     u64  the cell meta word (below)
//!   +8   value W bytes (the configured value size rounded up to 8)
//!  W > 56: a multi-line cell, C = 64 (1 + ceil((W - 56) / 63)), 64-aligned
//!   line 0   +0 M u64 | +8 value bytes 0 .. 56
//!   line t   +0 cl u8 (= cv & 0xFF) | +1 value bytes 56 + 63 (t - 1) .. (63 each)
//! ```
//!
//! The cell meta word, the only per-slot state, sits in the same cache line as the value:
//!
//! ```text
//!  63            48 47          35 34 33  32 31                      0
//! +----------------+--------------+--+------+-------------------------+
//! | cv             | 0            |L |  st  | nv: the leaf epoch      |
//! +----------------+--------------+--+------+-------------------------+
//!  st: 0 EMPTY (a key CAS'd into a slot whose cell is EMPTY is a pending insert: invisible),
//!      1 LIVE, 2 DELETED
//!  L, cv: multi-line cells only (0 otherwise): the writer lock, and the cell version that
//!      every line's cl byte repeats when the cell is whole
//! ```
//!
//! Default shape (36 slots, 8-byte values): K = 6 key lines, C = 16, 9 value lines, 1024 bytes.
//! 100-byte values: C = 128, 72 value lines, 5056 bytes.
//!
//! # Why each word is where it is
//!
//! * Keys are aligned words, CAS'd alone: the paper's reason for separate arrays.
//! * A READ may return lines from different instants, so a slot's state must share its line
//!   with the value it describes: a separate bitmap could be seen with another value.
//! * An SMO rewrites the leaf in place (new epoch in `meta`, in every key line's `ver`, in every
//!   cell's `M`); an image is accepted only if all of them agree ([`LeafImage::check`]), so a
//!   READ torn across an SMO is detected, whatever mix of lines it returned.
//! * The Spear word is inside line 0 but outside every WRITE (`[0, 8)` and `[16, ..)` are
//!   written separately), so a rewrite never erases a concurrent FAA.
//! * Zeroed memory never checks: `nv >= 1` and a well-formed `[lo, hi]` are required.
//!
//! # Multi-line cells
//!
//! A value longer than a line cannot be written atomically, so its lines carry the cell version:
//! a reader takes the cell only when every line's cl byte equals `M.cv` ([`LeafImage::cell_whole`]),
//! else it READs again. Writers serialise on `M.L` (`crate::sync` says how) and write the other
//! lines first and line 0, with `M` unlocked at `cv + 1`, last in the same doorbell: a reader
//! sees either every line of one version or a mismatch. An SMO rewriting a leaf in place gives
//! each cell `cv + 2` of the cell it overwrites (a crashed writer may have left lines at `cv + 1`),
//! a fresh leaf `cv = 1` (zeroed lines have cl 0), so no line of the old epoch matches a cell of
//! the new one. The check is a byte: a READ would have to span 256 versions of one cell (or 128
//! rewrites of its leaf) to be fooled, as with FaRM's cache-line versions.

use dmindex_index::{IndexError, IndexResult};

/// Bytes in a cache line.
pub const LINE: usize = 64;
/// Keys per key line (the first word of a line is its epoch).
pub const KEYS_PER_LINE: usize = 7;
/// Offset of the Spear word.
pub const SPEAR: usize = 8;
/// Offset of `lo` (the first byte an SMO's header WRITE covers).
pub const LO: usize = 16;
/// Offset of `hi`.
pub const HI: usize = 24;
/// Offset of the meta word.
pub const META: usize = 32;
/// Largest value a cell holds in one cache line (with its meta word).
pub const LINE_VALUE: usize = LINE - 8;
/// Largest value (a multi-line cell beyond [`LINE_VALUE`]).
pub const MAX_VALUE: usize = 4096;
/// Value bytes in each line of a multi-line cell after the first (one byte is the cl byte).
const TAIL_VALUE: usize = LINE - 1;
/// Bytes of the largest cell (a [`MAX_VALUE`]-byte value's).
pub const MAX_CELL: usize = LINE * (1 + (MAX_VALUE - LINE_VALUE).div_ceil(TAIL_VALUE));
/// Most slots a leaf may have.
pub const MAX_SLOTS: usize = 256;

/// A cell's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Nothing written this epoch: a key in the slot is a pending insert.
    Empty,
    Live,
    Deleted,
}

/// A cell meta word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellMeta(pub u64);

/// The writer lock bit of a multi-line cell.
const LOCK: u64 = 1 << 34;
/// Bits no writer sets.
const UNUSED: u64 = ((1 << 48) - 1) & !((1 << 35) - 1);

impl CellMeta {
    pub const fn new(state: State, nv: u32) -> CellMeta {
        CellMeta::versioned(state, nv, 0)
    }

    /// A multi-line cell's word at version `cv`, unlocked.
    pub const fn versioned(state: State, nv: u32, cv: u16) -> CellMeta {
        let st = match state {
            State::Empty => 0,
            State::Live => 1,
            State::Deleted => 2,
        };
        CellMeta((cv as u64) << 48 | (st << 32) | nv as u64)
    }

    pub const fn nv(self) -> u32 {
        self.0 as u32
    }

    /// The cell version (multi-line cells).
    pub const fn cv(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// Whether a writer holds the cell (multi-line cells).
    pub const fn locked(self) -> bool {
        self.0 & LOCK != 0
    }

    /// This word with the writer lock set.
    pub const fn lock(self) -> CellMeta {
        CellMeta(self.0 | LOCK)
    }

    /// This word in `state`, version and epoch kept, unlocked.
    pub fn with_state(self, state: State) -> CellMeta {
        CellMeta::versioned(state, self.nv(), self.cv())
    }

    /// The state, or `None` for a word no writer produces.
    pub const fn state(self) -> Option<State> {
        if self.0 & UNUSED != 0 {
            return None;
        }
        match (self.0 >> 32) & 3 {
            0 => Some(State::Empty),
            1 => Some(State::Live),
            2 => Some(State::Deleted),
            _ => None,
        }
    }
}

/// The sizes of one configuration's leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Slots (keys) per leaf.
    pub slots: usize,
    /// Value bytes as configured.
    pub value: usize,
    /// Bytes of a cell: meta word and value, a power of two dividing 64, or whole lines for a
    /// multi-line cell.
    pub cell: usize,
    /// Key lines.
    pub key_lines: usize,
    /// Offset of cell 0.
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
        let cell = if value <= LINE_VALUE {
            (8 + value.next_multiple_of(8)).next_power_of_two().max(16)
        } else {
            LINE * (1 + (value - LINE_VALUE).div_ceil(TAIL_VALUE))
        };
        let key_lines = slots.div_ceil(KEYS_PER_LINE);
        let cells_at = LINE * (1 + key_lines);
        let bytes = cells_at + (slots * cell).next_multiple_of(LINE);
        Ok(Shape { slots, value, cell, key_lines, cells_at, bytes })
    }

    /// Offset of key `j`.
    pub const fn key_at(&self, j: usize) -> usize {
        LINE * (1 + j / KEYS_PER_LINE) + 8 + 8 * (j % KEYS_PER_LINE)
    }

    /// Offset of cell `j` (its meta word; the value follows).
    pub const fn cell_at(&self, j: usize) -> usize {
        self.cells_at + self.cell * j
    }

    /// Whether a cell spans several lines (values over 56 bytes).
    pub const fn multi_line(&self) -> bool {
        self.cell > LINE
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
        let torn = (0..shape.key_lines).any(|i| word(buf, LINE * (1 + i)) as u32 != nv)
            || (0..shape.slots).any(|j| {
                let m = CellMeta(word(buf, shape.cell_at(j)));
                m.nv() != nv || m.state().is_none()
            });
        if torn {
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

    /// The leaf epoch.
    pub fn nv(&self) -> u32 {
        word(self.buf, META) as u32
    }

    /// Key `j` (0: free).
    pub fn key(&self, j: usize) -> u64 {
        word(self.buf, self.shape.key_at(j))
    }

    pub fn meta(&self, j: usize) -> CellMeta {
        CellMeta(word(self.buf, self.shape.cell_at(j)))
    }

    /// Appends cell `j`'s value bytes to `out` (whole only if [`LeafImage::cell_whole`]).
    pub fn value_into(&self, j: usize, out: &mut Vec<u8>) {
        let (at, w) = (self.shape.cell_at(j), self.shape.value);
        out.extend_from_slice(&self.buf[at + 8..at + 8 + w.min(LINE_VALUE)]);
        let mut rest = w.saturating_sub(LINE_VALUE);
        let mut line = at + LINE;
        while rest > 0 {
            let n = rest.min(TAIL_VALUE);
            out.extend_from_slice(&self.buf[line + 1..line + 1 + n]);
            (rest, line) = (rest - n, line + LINE);
        }
    }

    /// Whether cell `j` is of one version: always for one-line cells; for a multi-line cell,
    /// when every line's cl byte repeats `M.cv` (a writer's lines may be landing otherwise).
    pub fn cell_whole(&self, j: usize) -> bool {
        let at = self.shape.cell_at(j);
        let cl = self.meta(j).cv() as u8;
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
        (0..self.shape.slots).map(|j| self.meta(j).cv()).collect()
    }

    pub fn judge(&self, key: u64) -> Judge {
        match key {
            k if prefix(k) != prefix(self.lo()) => Judge::OtherPrefix,
            k if k < self.lo() => Judge::Left,
            k if k > self.hi() => Judge::Right,
            _ => Judge::Here,
        }
    }

    /// The slot holding `key` (any state). A key occupies at most one slot per epoch.
    pub fn find(&self, key: u64) -> Option<usize> {
        (0..self.shape.slots).find(|&j| self.key(j) == key)
    }

    /// [`LeafImage::find`], the keys it compared reported to `c` (cells are unsorted: every
    /// one up to the key's, or all of them).
    pub fn find_reported<T: dmindex_fabric::Transport>(
        &self,
        c: &dmindex_fabric::Client<T>,
        key: u64,
    ) -> Option<usize> {
        let found = self.find(key);
        let compared = found.map_or(self.shape.slots, |j| j + 1);
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
            let live =
                k != 0 && (lo..=hi).contains(&k) && self.meta(j).state() == Some(State::Live);
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
    let put =
        |out: &mut Vec<u8>, at: usize, w: u64| out[at..at + 8].copy_from_slice(&w.to_le_bytes());
    put(out, 0, rev);
    put(out, SPEAR, spear);
    put(out, LO, lo);
    put(out, HI, hi);
    put(out, META, (shape.slots as u64) << 32 | u64::from(nv));
    for i in 0..shape.key_lines {
        put(out, LINE * (1 + i), u64::from(nv));
    }
    let mut pairs = pairs.into_iter();
    for j in 0..shape.slots {
        let (meta, value) = match pairs.next() {
            Some((k, v, state)) => {
                debug_assert!(k != 0 && v.len() == shape.value);
                put(out, shape.key_at(j), k);
                (CellMeta::versioned(state, nv, shape.next_cv(over, j)), v)
            }
            None => (CellMeta::versioned(State::Empty, nv, shape.next_cv(over, j)), &[][..]),
        };
        let at = shape.cell_at(j);
        encode_cell(shape, meta, value, &mut out[at..at + shape.cell]);
    }
    assert!(pairs.next().is_none(), "more pairs than slots");
}

/// The bytes of one cell (meta word, value, and for a multi-line cell every line's cl byte
/// `meta.cv`), padded to the cell: what an insert or an upsert WRITEs. `value` may be empty (an
/// empty cell).
pub fn encode_cell(shape: &Shape, meta: CellMeta, value: &[u8], out: &mut [u8]) {
    let out = &mut out[..shape.cell];
    out.fill(0);
    out[..8].copy_from_slice(&meta.0.to_le_bytes());
    let head = value.len().min(LINE_VALUE);
    out[8..8 + head].copy_from_slice(&value[..head]);
    for (t, line) in out.chunks_exact_mut(LINE).enumerate().skip(1) {
        line[0] = meta.cv() as u8;
        let from = (LINE_VALUE + TAIL_VALUE * (t - 1)).min(value.len());
        let n = (value.len() - from).min(TAIL_VALUE);
        line[1..1 + n].copy_from_slice(&value[from..from + n]);
    }
}

/// The first line of cell `j` of a leaf image made by [`encode`] (the whole cell if it fits a
/// line), with its meta word turned LIVE: the one WRITE that makes a pending cell's value
/// visible, the rest of its lines being in place already.
pub fn live_head(shape: &Shape, image: &[u8], j: usize) -> [u8; LINE] {
    let at = shape.cell_at(j);
    let mut line = [0u8; LINE];
    line[..shape.cell.min(LINE)].copy_from_slice(&image[at..at + shape.cell.min(LINE)]);
    let meta = CellMeta(word(&line, 0)).with_state(State::Live);
    line[..8].copy_from_slice(&meta.0.to_le_bytes());
    line
}

/// Where an SMO of a leaf holding `live` pairs (sorted by key) splits: `None` to compact in
/// place (at most three quarters of the slots live), else the index of the first pair that moves
/// to the new leaf (an even split, as the paper's).
pub fn split_at(shape: &Shape, live: usize) -> Option<usize> {
    (live * 4 > shape.slots * 3).then_some(live / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape::new(36, 8).unwrap()
    }

    #[test]
    fn layout_is_pinned() {
        let s = shape();
        assert_eq!((s.key_lines, s.cell, s.cells_at, s.bytes), (6, 16, 448, 1024));
        let keys: Vec<usize> = [0, 6, 7, 35].iter().map(|&j| s.key_at(j)).collect();
        assert_eq!(keys, [72, 120, 136, 392]);
        assert_eq!((s.cell_at(0), s.cell_at(35)), (448, 1008));
        let sizes: Vec<(usize, usize)> = [24, 32, 56]
            .iter()
            .map(|&w| {
                let s = Shape::new(36, w).unwrap();
                (s.cell, s.bytes)
            })
            .collect();
        assert_eq!(sizes, [(32, 1600), (64, 2752), (64, 2752)]);
        assert_eq!(Shape::new(7, 8).unwrap().bytes, 64 * (1 + 1 + 2));
        assert!(Shape::new(1, 8).is_err() && Shape::new(36, 4097).is_err());
        // Multi-line cells: 100-byte values take two lines, 56 + 63 value bytes.
        let m = Shape::new(36, 100).unwrap();
        assert_eq!((m.cell, m.bytes, m.multi_line()), (128, 5056, true));
        assert_eq!(
            (Shape::new(36, 57).unwrap().cell, Shape::new(36, 120).unwrap().cell),
            (128, 192)
        );
        assert_eq!(CellMeta::versioned(State::Live, 7, 0x1234).0, 0x1234 << 48 | 1 << 32 | 7);
        assert_eq!(CellMeta::new(State::Live, 7).lock().0, 1 << 34 | 1 << 32 | 7);
        assert_eq!(CellMeta(1 << 40).state(), None, "bits 35..48 are never set");
        assert!(Shape::new(36, 0).is_err() && Shape::new(257, 8).is_err());
        assert_eq!(CellMeta::new(State::Live, 7).0, 1 << 32 | 7);
        assert_eq!(CellMeta::new(State::Deleted, 1).0, 2 << 32 | 1);
        assert_eq!(CellMeta(3 << 32).state(), None);
    }

    #[test]
    fn encode_then_check_then_read() {
        let s = shape();
        let lo = 0x0102_0304_0506_0700;
        let hi = lo | 0xFF;
        let mut out = Vec::new();
        let pairs = [(lo + 5, [5u8; 8]), (lo + 1, [1; 8]), (lo + 9, [9; 8])];
        encode(
            &s,
            0xAB,
            3,
            lo,
            hi,
            4,
            &[],
            pairs
                .iter()
                .enumerate()
                .map(|(i, (k, v))| (*k, &v[..], if i == 1 { State::Deleted } else { State::Live })),
            &mut out,
        );
        assert_eq!(out.len(), 1024);
        assert_eq!(word(&out, 72), lo + 5, "key 0 at its pinned offset");
        assert_eq!(word(&out, 448), CellMeta::new(State::Live, 4).0);
        assert_eq!(&out[456..464], &[5; 8]);
        let img = LeafImage::check(&s, &out).expect("a whole image checks");
        assert_eq!((img.rev(), img.spear(), img.nv()), (0xAB, 3, 4));
        assert_eq!(img.find(lo + 1), Some(1));
        assert_eq!(img.meta(1).state(), Some(State::Deleted));
        let mut v = Vec::new();
        img.value_into(2, &mut v);
        assert_eq!((v, img.cell_whole(2), img.live_whole()), (vec![9; 8], true, true));
        assert_eq!(img.free_from(0), Some(3));
        assert_eq!(img.live().collect::<Vec<_>>(), [(lo + 5, 0), (lo + 9, 2)]);
        assert_eq!(img.judge(lo), Judge::Here);
        assert_eq!(img.judge(hi + 1), Judge::OtherPrefix);
        let narrow = {
            let mut o = out.clone();
            o[HI..HI + 8].copy_from_slice(&(lo + 6).to_le_bytes());
            o
        };
        let n = LeafImage::check(&s, &narrow).unwrap();
        assert_eq!((n.judge(lo + 7), n.live().count()), (Judge::Right, 1));
    }

    #[test]
    fn torn_and_unwritten_images_are_refused() {
        let s = shape();
        let lo = 0x0A00;
        let (mut old, mut new) = (Vec::new(), Vec::new());
        let v = [7u8; 8];
        encode(&s, 0, 0, lo, lo | 0xFF, 1, &[], [(lo + 1, &v[..], State::Live)], &mut old);
        encode(&s, 0, 0, lo, lo + 0x7F, 2, &[], [(lo + 2, &v[..], State::Live)], &mut new);
        // Every mix of whole lines from two epochs other than all-old and all-new is refused.
        let lines = s.bytes / LINE;
        for mask in 1..(1u32 << lines) - 1 {
            let mut mix = old.clone();
            for l in (0..lines).filter(|l| mask >> l & 1 == 1) {
                mix[l * LINE..(l + 1) * LINE].copy_from_slice(&new[l * LINE..(l + 1) * LINE]);
            }
            assert_eq!(LeafImage::check(&s, &mix).err(), Some(Refused::Torn), "mask {mask:#x}");
        }
        assert!(LeafImage::check(&s, &old).is_ok() && LeafImage::check(&s, &new).is_ok());
        assert_eq!(LeafImage::check(&s, &vec![0; s.bytes]).err(), Some(Refused::NotALeaf));
        assert_eq!(LeafImage::check(&s, &old[..512]).err(), Some(Refused::NotALeaf));
    }

    #[test]
    fn multi_line_cells_carry_their_version_on_every_line() {
        let s = Shape::new(8, 150).unwrap();
        assert_eq!(s.cell, 192, "56 + 63 + 63 >= 150: three lines");
        let lo = 0x0A00;
        let v: Vec<u8> = (0..150).map(|i| i as u8 + 1).collect();
        let mut img = Vec::new();
        encode(&s, 0, 0, lo, lo | 0xFF, 3, &[], [(lo + 1, &v[..], State::Live)], &mut img);
        let at = s.cell_at(0);
        // Fresh memory: version 1 everywhere; line t starts with its cl byte.
        assert_eq!(word(&img, at), CellMeta::versioned(State::Live, 3, 1).0);
        assert_eq!((img[at + 64], img[at + 128]), (1, 1));
        assert_eq!((img[at + 8], img[at + 63], img[at + 65], img[at + 128 + 31]), (1, 56, 57, 150));
        let leaf = LeafImage::check(&s, &img).unwrap();
        let mut got = Vec::new();
        leaf.value_into(0, &mut got);
        assert_eq!((got, leaf.cell_whole(0)), (v.clone(), true));
        // A rewrite in place: every cell at its old version + 2.
        let mut again = Vec::new();
        encode(
            &s,
            0,
            0,
            lo,
            lo | 0xFF,
            4,
            &leaf.cvs(),
            [(lo + 1, &v[..], State::Live)],
            &mut again,
        );
        assert_eq!(LeafImage::check(&s, &again).unwrap().meta(5).cv(), 3);
        // A writer's version 2 landing line by line: any mix of its lines with version 1's is
        // refused, the whole of either taken.
        let mut next = [0u8; 192];
        let w: Vec<u8> = v.iter().map(|b| b ^ 0xFF).collect();
        encode_cell(&s, CellMeta::versioned(State::Live, 3, 2), &w, &mut next);
        for mask in 0..8u32 {
            let mut mix = img.clone();
            for l in (0..3).filter(|l| mask >> l & 1 == 1) {
                mix[at + 64 * l..at + 64 * (l + 1)].copy_from_slice(&next[64 * l..64 * (l + 1)]);
            }
            let m = LeafImage::check(&s, &mix).unwrap();
            assert_eq!(m.cell_whole(0), mask == 0 || mask == 7, "mask {mask:#b}");
            assert_eq!(m.live_whole(), mask == 0 || mask == 7);
        }
    }

    #[test]
    fn split_or_compact() {
        let s = shape();
        assert_eq!(split_at(&s, 36), Some(18));
        assert_eq!(split_at(&s, 28), Some(14));
        assert_eq!(split_at(&s, 27), None, "three quarters live: compact in place");
        let mut cell = [0xEEu8; 16];
        encode_cell(&s, CellMeta::new(State::Live, 9), &[1, 2, 3, 4, 5, 6, 7, 8], &mut cell);
        assert_eq!(cell[..8], CellMeta::new(State::Live, 9).0.to_le_bytes());
        assert_eq!(cell[8..], [1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
