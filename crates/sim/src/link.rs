//! One direction of a link, carrying the packets of many messages at once.
//!
//! A NIC cuts a message into MTU-sized packets and the packets of messages on different
//! connections take turns on the wire (round robin), so a small response queued behind long ones
//! waits for one packet of each, not for all of them. The model keeps, per direction, when the
//! bytes already accepted will have left (the backlog), the part of it that long (multi-packet)
//! messages hold, and when each long message still on the wire finishes. A new message of `k`
//! packets waits for the short messages ahead of it (one packet each: round robin is FIFO
//! among them) and for at most `k` packets of each long one:
//!
//! ```text
//! done = at + wire + min(backlog, short backlog + min(long backlog, n_long · k · packet))
//! ```
//!
//! Equal messages so come out in arrival order at the link's bandwidth, and a short one
//! overtakes long ones. The backlog grows by the whole message either way, so the link never
//! carries more than its bandwidth over time. (Messages already on the wire are not pushed back
//! by a newcomer's packets: each can finish up to one packet time per newcomer early — the price
//! of a few numbers per link, and a heap entry per long message only, instead of an event per
//! packet.)

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One direction of a link.
#[derive(Clone, Debug, Default)]
pub(crate) struct Link {
    /// When the bytes accepted so far will have left.
    free: u64,
    /// When the bytes of long messages accepted so far would have left on their own.
    long_free: u64,
    /// When each long message still on the wire finishes.
    long_on_wire: BinaryHeap<Reverse<u64>>,
    /// Time spent carrying bytes (for utilisation).
    pub(crate) busy_ps: u64,
}

impl Link {
    /// Sends a message of `wire` picoseconds in `packets` packets, ready at `at`, where one
    /// full packet takes `packet_ps`; returns when its last packet has left.
    pub(crate) fn send(&mut self, at: u64, wire: u64, packets: u64, packet_ps: u64) -> u64 {
        let backlog = self.free.saturating_sub(at);
        self.free = self.free.max(at) + wire;
        self.busy_ps += wire;
        if self.long_on_wire.is_empty() && packets == 1 {
            // The common case: nothing long on the wire, so round robin is FIFO.
            return at + wire + backlog;
        }
        while self.long_on_wire.peek().is_some_and(|&Reverse(t)| t <= at) {
            self.long_on_wire.pop();
        }
        let long = self.long_free.saturating_sub(at).min(backlog);
        let long_wait = long.min(self.long_on_wire.len() as u64 * packets * packet_ps);
        let done = at + wire + (backlog - long) + long_wait;
        if packets > 1 {
            self.long_free = self.long_free.max(at) + wire;
            self.long_on_wire.push(Reverse(done));
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_message_waits_for_one_packet_of_each_long_one_not_for_all_of_them() {
        let mut l = Link::default();
        // Two 10-packet messages from 0: the second is behind the first's bytes.
        assert_eq!(l.send(0, 1000, 10, 100), 1000);
        assert_eq!(l.send(0, 1000, 10, 100), 2000);
        // A 1-packet message at 50 waits out one packet of each.
        assert_eq!(l.send(50, 30, 1, 100), 50 + 30 + 200);
        // The backlog still holds all three: a message at 2030 finds the link idle.
        assert_eq!(l.send(2030, 30, 1, 100), 2060);
        assert_eq!(l.busy_ps, 2060);
    }

    #[test]
    fn a_flood_of_equal_messages_leaves_at_the_links_bandwidth() {
        let mut l = Link::default();
        // 100 four-packet messages ready at once: the last leaves after all 100.
        let last = (0..100).map(|_| l.send(0, 400, 4, 100)).max().unwrap();
        assert_eq!(last, 100 * 400);
    }
}
