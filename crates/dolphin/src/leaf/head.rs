//! The value line head: the epoch and the states of the cells a line holds, and for a
//! multi-line cell its lock, its holder and its version (the layout is drawn in [`super`]).

/// A cell's state; within an epoch it only moves forward, EMPTY → LIVE → DELETED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Nothing written this epoch: a key in the slot is a pending insert.
    Empty,
    Live,
    /// Final for the epoch: a re-insert of the key takes a free slot.
    Deleted,
}

impl State {
    const fn bits(self) -> u64 {
        match self {
            State::Empty => 0,
            State::Live => 1,
            State::Deleted => 2,
        }
    }
}

/// A value line's head word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineHead(pub u64);

/// The writer lock bit of a multi-line cell.
pub const LOCK: u64 = 1 << 46;
/// Where a locked multi-line cell's head names its holder's member slot (11 bits).
const HOLDER_SHIFT: u32 = 34;
/// The holder's slot bits of a locked multi-line cell's head.
const SLOT: u64 = 0x7FF << HOLDER_SHIFT;
/// Flipped by each takeover of a lock, so a takeover always changes the word (a repairer may
/// hold the dead holder's slot itself).
const TAKEOVER: u64 = 1 << 45;
/// The holder bits of a locked multi-line cell's head.
const HOLDER: u64 = SLOT | TAKEOVER;

impl LineHead {
    /// A head of epoch `nv`, every cell EMPTY.
    pub const fn new(nv: u32) -> LineHead {
        LineHead(nv as u64)
    }

    /// A multi-line cell's head (its one cell in `state`) at version `cv`, unlocked.
    pub const fn versioned(state: State, nv: u32, cv: u16) -> LineHead {
        LineHead((cv as u64) << 48 | state.bits() << 32 | nv as u64)
    }

    /// The bits of cell `p`'s state.
    pub const fn mask(p: usize) -> u64 {
        3 << (32 + 2 * p)
    }

    /// Cell `p`'s state bits set to `state` (the others 0).
    pub const fn bits(p: usize, state: State) -> u64 {
        state.bits() << (32 + 2 * p)
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

    /// This (unlocked) word locked by the member in slot `slot`.
    pub const fn locked_by(self, slot: u32) -> LineHead {
        LineHead(self.0 & !HOLDER | LOCK | ((slot as u64) << HOLDER_SHIFT) & HOLDER)
    }

    /// This locked word taken over by the member in slot `slot` (its takeover bit flipped).
    pub const fn taken_over_by(self, slot: u32) -> LineHead {
        let flipped = self.0 & TAKEOVER ^ TAKEOVER;
        LineHead(self.0 & !HOLDER | LOCK | ((slot as u64) << HOLDER_SHIFT) & SLOT | flipped)
    }

    /// The member slot of a locked multi-line cell's holder.
    pub const fn holder(self) -> Option<u32> {
        if self.locked() {
            Some(((self.0 & SLOT) >> HOLDER_SHIFT) as u32)
        } else {
            None
        }
    }

    /// This word with cell `p` in `state`.
    pub const fn with(self, p: usize, state: State) -> LineHead {
        LineHead(self.0 & !Self::mask(p) | Self::bits(p, state))
    }

    /// Cell `p`'s state, or `None` for bits no writer produces.
    pub const fn state(self, p: usize) -> Option<State> {
        match (self.0 >> (32 + 2 * p)) & 3 {
            0 => Some(State::Empty),
            1 => Some(State::Live),
            2 => Some(State::Deleted),
            _ => None,
        }
    }

    /// Whether a writer could have produced this head for a line of `n` cells (`multi`: a
    /// multi-line cell's, which may carry a lock and a version).
    pub(super) const fn well_formed(self, n: usize, multi: bool) -> bool {
        let used = ((1u64 << (2 * n)) - 1) << 32;
        let extra = if multi { LOCK | 0xFFFF << 48 } else { 0 };
        // Holder bits only with the lock (a multi-line cell's head describes one cell).
        let holder = if multi && self.locked() { HOLDER } else { 0 };
        if self.0 & !(0xFFFF_FFFF | used | extra | holder) != 0 {
            return false;
        }
        let mut p = 0;
        while p < n {
            if self.state(p).is_none() {
                return false;
            }
            p += 1;
        }
        true
    }
}
