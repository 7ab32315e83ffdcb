//! Views: epoch-fenced membership of a replica set, kept in one word of memory-node memory.
//!
//! # The word
//!
//! ```text
//! bit 0        8        16       17                32                               64
//!     | members | leader | changing | 0 (15 bits)    | epoch (u32)                    |
//! ```
//!
//! `members` is a bitmask of member slots (at most [`MAX_MEMBERS`]); `leader` is the slot that
//! leads (the primary); `epoch` grows by one with every change. What a slot stands for (a
//! replica on a memory node, a compute node) is the user's business.
//!
//! # Protocol
//!
//! * **Detection** is the user's: a member is suspected when a verb or request to it fails (a
//!   timeout). Suspicion may be wrong (a partition, a slow node); safety never depends on it.
//! * **Change**: whoever suspects member `m` in view `v` CASes the word from `v` to
//!   [`View::without`]`(m)`: epoch + 1, `changing` set. Only one change from `v` wins; the others
//!   see the winner and follow it.
//! * **Fencing**: the new view is then *adopted* by every member it names (each refuses anything
//!   carrying another epoch from then on), the leader is activated (it brings the members' state
//!   level), and the word is CASed from changing to stable, same epoch. Any client can drive a
//!   changing view to the end (each step is idempotent), so a driver that stops halfway leaves
//!   nothing stuck; a member that fails while a change is under way is removed by the next one.
//!   A replacement that caught up joins the same way ([`View::with`]): the change adds it.
//! * **Reading under a view**: a member removed by a change may be alive and still reachable
//!   by some clients. A write cannot complete there (it needs acknowledgements from members that
//!   adopted the new epoch and refuse the old one); a read there can, so a reader *validates*:
//!   it reads the word after its read of member state, and keeps the result only if the word is
//!   still the view it used. The word changes before any member serves the new view, so a read
//!   that validates happened before the change took effect.
//!
//! Leases (time-bounded promises) would let readers skip the validation, at the price of clock
//! assumptions; this design needs no clock, and costs a reader one 8-byte READ, which joins a
//! doorbell the reader sends to the word's memory node anyway when it can.

use dmindex_fabric::{Client, GlobalAddr, Result, Transport};

/// Most member slots a view can name.
pub const MAX_MEMBERS: usize = 8;

/// One view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub epoch: u32,
    /// Bit `i`: slot `i` is a member.
    pub members: u8,
    /// The leading slot (a member, unless the view is empty).
    pub leader: u8,
    /// A change to this view is under way: members may not have adopted it yet.
    pub changing: bool,
}

impl View {
    /// The first view: every slot in `members` serves, `leader` leads, epoch 1.
    pub fn initial(members: u8, leader: u8) -> View {
        View { epoch: 1, members, leader, changing: false }
    }

    pub fn word(self) -> u64 {
        (self.epoch as u64) << 32
            | (self.changing as u64) << 16
            | (self.leader as u64) << 8
            | self.members as u64
    }

    pub fn decode(w: u64) -> View {
        View {
            epoch: (w >> 32) as u32,
            members: w as u8,
            leader: (w >> 8) as u8,
            changing: (w >> 16) & 1 == 1,
        }
    }

    /// Whether slot `s` is a member.
    pub fn has(self, s: usize) -> bool {
        s < MAX_MEMBERS && self.members >> s & 1 == 1
    }

    /// Member slots, in order.
    pub fn slots(self) -> impl Iterator<Item = usize> {
        (0..MAX_MEMBERS).filter(move |&s| self.has(s))
    }

    /// The change that removes the slots in mask `gone`: next epoch, changing, the leader kept
    /// if it stays, else the lowest member left.
    pub fn without(self, gone: u8) -> View {
        let members = self.members & !gone;
        let leader = if members >> self.leader & 1 == 1 {
            self.leader
        } else {
            members.trailing_zeros().min(MAX_MEMBERS as u32) as u8
        };
        View { epoch: self.epoch.wrapping_add(1), members, leader, changing: true }
    }

    /// The change that adds slot `slot` (a replacement that caught up) and makes `leader` lead:
    /// next epoch, changing.
    ///
    /// # Panics
    /// If `slot` or `leader` is not below [`MAX_MEMBERS`], or `leader` is not a member then.
    pub fn with(self, slot: usize, leader: u8) -> View {
        assert!(slot < MAX_MEMBERS, "slot {slot} out of range");
        let members = self.members | 1 << slot;
        assert!((leader as usize) < MAX_MEMBERS && members >> leader & 1 == 1, "leader {leader}");
        View { epoch: self.epoch.wrapping_add(1), members, leader, changing: true }
    }

    /// The same view, settled.
    pub fn stable(self) -> View {
        View { changing: false, ..self }
    }
}

/// A view word in memory-node memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewWord {
    pub at: GlobalAddr,
}

impl ViewWord {
    pub async fn load<T: Transport>(&self, c: &Client<T>) -> Result<View> {
        Ok(View::decode(c.read_word(self.at).await?))
    }

    /// CAS from `from` to `to`; the view the word holds afterwards (`to` if this CAS won).
    pub async fn change<T: Transport>(&self, c: &Client<T>, from: View, to: View) -> Result<View> {
        let old = c.cas(self.at, from.word(), to.word()).await?;
        Ok(if old == from.word() { to } else { View::decode(old) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_is_pinned() {
        let v = View { epoch: 0x0102_0304, members: 0b101, leader: 2, changing: true };
        assert_eq!(v.word(), 0x0102_0304_0001_0205);
        assert_eq!(View::decode(v.word()), v);
        assert_eq!(View::initial(0b111, 0).word(), 0x1_0000_0007);
    }

    #[test]
    fn removing_the_leader_moves_it_to_the_lowest_member_left() {
        let v = View::initial(0b111, 0);
        let w = v.without(0b001);
        assert_eq!(w, View { epoch: 2, members: 0b110, leader: 1, changing: true });
        assert_eq!(w.slots().collect::<Vec<_>>(), [1, 2]);
        let x = w.stable().without(0b100);
        assert_eq!((x.members, x.leader, x.epoch), (0b010, 1, 3), "leader kept");
        assert!(!x.has(8) && !x.has(2) && x.has(1));
        assert_eq!(x.without(0b010).members, 0, "an empty view");
    }

    #[test]
    fn adding_a_slot_is_the_next_epoch_and_may_move_the_leader() {
        let v = View::initial(0b111, 0).without(0b001).stable();
        let w = v.with(0, 0);
        assert_eq!(w, View { epoch: 3, members: 0b111, leader: 0, changing: true });
        assert_eq!(v.with(0, 1).leader, 1, "leader kept");
        assert!(std::panic::catch_unwind(|| v.with(0, 5)).is_err(), "a leader outside the view");
    }
}
