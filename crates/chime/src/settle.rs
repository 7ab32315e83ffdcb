//! Settling a hopscotch leaf that a writer left with only a prefix of its doorbell in place.
//!
//! A leaf write is one WRITE per run of slots, and a run that wraps around the leaf is two: the
//! part from slot 0 first, then the part from the run's start to the leaf's end, which carries
//! the unlocking lock word ([`LeafLayout::write_ranges`](crate::layout::LeafLayout::write_ranges)).
//! Each fits one packet, so a writer that dies after posting lands none, the first, or both.
//! A hop moves keys forward along the run, away from their homes:
//!
//! ```text
//!  16 slots, H = 2; insert k (home 14)   slot 14  15 | 0    the run 14 ..= 0 wraps:
//!    before                                    a   b  | -    WRITE [0], then [14, 15] + unlock
//!    after (b hops to 0, k goes to 15)         a   k  | b    (a homed at 14, b at 15)
//!    the first WRITE alone                     a   b  | b    b twice, no key lost
//! ```
//!
//! So after the first WRITE alone every key the leaf held is there, some twice (each copy with
//! the same value slot), and hop bitmaps on either side may not match the keys, which readers
//! take for a hop in flight and retry. [`LeafBuf::settle`] is what the repair under the
//! taken-over lock does about it.

use crate::leaf::{home, LeafBuf, Modified};
use crate::view::{wrap, LeafView};

impl LeafBuf {
    /// Makes whole (all loaded) a hopscotch leaf that a writer which died mid-doorbell left
    /// with a prefix of its WRITEs in place: a key a hop copied to its new slot and did not yet
    /// clear from its old one is kept in the new slot only (the copies carry the same value
    /// slot, and both lie in the key's neighbourhood), and every home's hop bitmap is rebuilt
    /// from the keys. The entries changed get their entry-level version bumped, so a READ that
    /// overlaps their WRITE is caught; returns them (ascending). A leaf with nothing to settle is
    /// left as it is, so settling twice changes nothing the second time.
    pub fn settle(&mut self) -> Modified {
        let l = self.l;
        let (s, hh) = (l.span, l.h);
        let mut changed = Modified::new();
        for i in 0..s {
            let (k, v) = (self.key(i), self.value(i));
            if k == 0 {
                continue;
            }
            let h = home(k, s);
            // A copy further from the home: where a hop moved it to (hops move keys away from
            // their homes, within their neighbourhoods).
            let later = (l.dist(h, i) + 1..hh).map(|d| wrap(h + d, s));
            if later.clone().any(|j| self.key(j) == k && self.value(j) == v) {
                self.set_entry(i, 0, [0; 8]);
                changed.push(i);
            }
        }
        let want = self.bitmaps();
        for (h, &b) in want.iter().enumerate() {
            if self.bitmap(h) != b {
                self.set_bitmap(h, b);
                changed.push(h);
            }
        }
        changed.sort_unstable();
        changed.dedup();
        for &i in &changed {
            self.bump_ev(i);
        }
        changed
    }
}
