//! Spear's side record: who may have counted in a Spear word.
//!
//! A Spear word has no room for its holders, so each memory node keeps an *intent table*
//! ([`dmindex_fabric::layout::intent_slot`]): one 8-byte word per member slot ([`crate::lease`]),
//! written only by the client that holds that member slot, naming the Spear word on that node
//! that the client may have a share of (`+1`, a claim, or both) in.
//!
//! ```text
//!  63   62                    45 44                                         0
//! +----+------------------------+--------------------------------------------+
//! | in | seq (18 bits)          | the Spear word's byte offset / 8 (45 bits) |
//! +----+------------------------+--------------------------------------------+
//!  in = 1: the client may hold a share of that word;  in = 0 (done): it holds none
//!  seq: the client's entries on this memory node, counted (wrapping); 0 after it joined
//! ```
//!
//! # The rule every share keeps
//!
//! *A client's share of a Spear word is only ever in the word while its intent word on that
//! node says `in` for that word with the share's `seq`.* An entry writes the intent (`in`, next
//! `seq`) in the doorbell of its first FAA, before it (one connection to one memory node: the
//! WRITE has landed when the FAA executes); the doorbell of its last FAA writes the same word
//! with `in` clear after it. A doorbell that stops part way (the client crashed) leaves at worst
//! an intent that names a word the client has no share of; never a share with no intent. So once
//! every client whose intent names a word is fenced, the word holds only fenced clients' shares
//! and the shares of clients that were not counted in it at all: [`super::recover`] uses that to
//! set the word right, without ever needing to know whether a dead client's FAA landed.
//!
//! `seq` makes each entry's intent a word of its own, so a reader that sees the same value twice
//! knows the client did not enter anything on that node in between (the window a recount reads
//! is one doorbell, far shorter than 2¹⁸ round trips), and one that sees `seq + 1` knows it
//! entered exactly once.

use dmindex_fabric::layout::intent_slot;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;

use crate::lease;

/// The `in` bit.
pub const IN: u64 = 1 << 63;
/// Bits of `seq`.
pub const SEQ_BITS: u32 = 18;
const SEQ_SHIFT: u32 = 45;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const AT_MASK: u64 = (1 << SEQ_SHIFT) - 1;

/// An intent word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intent(pub u64);

impl Intent {
    /// The intent of entry `seq` on the Spear word at `word`.
    pub const fn of(word: GlobalAddr, seq: u32) -> Intent {
        Intent(IN | (seq as u64 & SEQ_MASK) << SEQ_SHIFT | (word.offset() >> 3) & AT_MASK)
    }

    /// Whether the client may hold a share of the word it names.
    pub const fn is_in(self) -> bool {
        self.0 & IN != 0
    }

    pub const fn seq(self) -> u32 {
        ((self.0 >> SEQ_SHIFT) & SEQ_MASK) as u32
    }

    /// Whether it names the Spear word at `word` (on the intent's own node), `in` or done.
    pub const fn names(self, word: GlobalAddr) -> bool {
        self.0 & AT_MASK == (word.offset() >> 3) & AT_MASK
    }

    /// Whether the client may hold a share of the word at `word`.
    pub const fn holds(self, word: GlobalAddr) -> bool {
        self.is_in() && self.names(word)
    }

    /// The same entry, done.
    pub const fn done(self) -> Intent {
        Intent(self.0 & !IN)
    }

    /// Whether `later` can follow this word with no entry on the node in between other than
    /// its own: the same entry done, or exactly one entry after it.
    pub const fn followed_by(self, later: Intent) -> bool {
        let same_entry = later.0 == self.done().0;
        let next = later.seq() as u64 == (self.seq() as u64 + 1) & SEQ_MASK;
        same_entry || next
    }
}

/// This client's intent word on one memory node, as it is about to write it: for the `in`
/// WRITE ahead of its first FAA, then for the done WRITE after its last.
#[derive(Debug)]
pub struct Mine {
    slot: GlobalAddr,
    bytes: [u8; 8],
}

impl Mine {
    /// The intent of this client's next entry on the Spear word at `word`: joins the cluster
    /// first if it has not, and renews its lease if due (no round trip after the first).
    pub async fn enter<T: Transport>(c: &Client<T>, word: GlobalAddr) -> IndexResult<Mine> {
        let member = lease::renew_if_due(c).await?;
        let node = word.node();
        let last = &c.membership().intents[node as usize];
        let intent = Intent::of(word, Intent(last.get()).seq().wrapping_add(1));
        last.set(intent.0);
        let (slot, _) = lease::parse_member(member);
        Ok(Mine { slot: intent_slot(node, slot), bytes: intent.0.to_le_bytes() })
    }

    /// The WRITE of this intent.
    pub fn write(&self) -> BatchOp<'_> {
        BatchOp::Write { addr: self.slot, data: &self.bytes }
    }

    /// The intent as written.
    pub fn intent(&self) -> Intent {
        Intent(u64::from_le_bytes(self.bytes))
    }

    /// The same entry, done: what the doorbell of the last FAA writes after it.
    pub fn done<T: Transport>(self, c: &Client<T>) -> Mine {
        let done = self.intent().done();
        let last = &c.membership().intents[self.slot.node() as usize];
        if last.get() == self.intent().0 {
            last.set(done.0);
        }
        Mine { slot: self.slot, bytes: done.0.to_le_bytes() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intent_word_is_pinned() {
        let word = GlobalAddr::new(3, 0x1_0048);
        let i = Intent::of(word, 5);
        assert_eq!(i.0, 1 << 63 | 5 << 45 | 0x1_0048 >> 3);
        assert!(i.is_in() && i.holds(word) && i.names(word));
        assert!(!i.holds(word.add(8)), "another word of the node");
        assert_eq!(i.seq(), 5);
        let d = i.done();
        assert!(!d.is_in() && d.names(word) && !d.holds(word));
        assert_eq!(Intent::of(word, (1 << SEQ_BITS) + 2).seq(), 2, "seq wraps in 18 bits");
        // A word follows another when it is the same entry done, or the next entry.
        let other = GlobalAddr::new(3, 0x2000);
        assert!(i.followed_by(d) && i.followed_by(Intent::of(other, 6)));
        assert!(d.followed_by(Intent::of(other, 6)));
        assert!(!i.followed_by(Intent::of(other, 7)), "two entries in between");
        assert!(!i.followed_by(Intent::of(other, 5).done()), "not the same entry");
        assert!(Intent::of(word, (1 << SEQ_BITS) - 1).followed_by(Intent::of(other, 0)));
        assert!(Intent(0).followed_by(Intent::of(other, 1)), "the first entry after joining");
    }
}
