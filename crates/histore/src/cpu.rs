//! What an index server's CPU spends on a request beyond receiving and answering it.
//!
//! Every request pays the fabric's per-request cost (`rpc_ns` of the simulator's preset: eRPC's
//! receive, dispatch and reply). Whatever else the service does it charges through
//! `MnContext::charge`, and the simulator keeps the core busy for it; the other transports run
//! the code for real and ignore the charge.
//!
//! # Costs, and where they come from
//!
//! | work | charge | source |
//! |---|---|---|
//! | a message to another index server (a SHIP to each backup, a WATERMARK or SNAPSHOT ask) | [`SEND_NS`] | eRPC (NSDI '19): one core handles 10 M small RPCs per second |
//! | one log entry taken in (appended on the primary, or logged from a SHIP on a backup) | [`LOG_NS`] | *estimated*: a deque push and a writer-table update, the work of a hash-table update on a partition that fits the caches (measured: 100 ns at 2^14 keys) |
//! | one entry applied to, or one key looked up in, a partition of `n` keys | [`Curve::at`] of [`SKIPLIST_INSERT`], [`SKIPLIST_GET`], [`TABLE_INSERT`], [`TABLE_UPDATE`], [`TABLE_GET`] | measured |
//! | one pair a range walk or a snapshot passes | [`RANGE_ITEM`] at the partition's size | measured |
//!
//! *Measured* means `cargo run --release -p dmindex-histore --example cpu-costs` on the machine
//! that built these tables (2 cores, nothing else running), the median of three runs, each the
//! median of five passes of up to 100 000 operations on random 16-byte keys, at partitions of
//! 2^14, 2^16, …, 2^22 keys, on this crate's own structures (`crossbeam-skiplist`, whose keys
//! sit behind a pointer; the hash table in memory-node memory with its key shadow). A cost grows
//! with the partition because a larger one misses more caches; between the measured sizes it is
//! interpolated linearly in log2 n, and past 2^22 (the paper's 100 M keys are 2^24.6 per
//! partition) extended along the last segment.
//!
//! Costs the paper's threads would also pay but that are not charged: copying request bytes
//! (inside eRPC's per-request figure) and the server's bookkeeping of views and learners (not
//! per operation).

/// A message sent to another index server (and its reply taken in).
pub const SEND_NS: u64 = 100;
/// One log entry taken in.
pub const LOG_NS: u64 = 100;

/// A cost measured at partitions of 2^14, 2^16, 2^18, 2^20 and 2^22 keys (ns).
#[derive(Clone, Copy, Debug)]
pub struct Curve(pub [u64; 5]);

/// log2 of the first measured size, and the step between sizes.
const FIRST_SHIFT: f64 = 14.0;
const STEP: f64 = 2.0;

impl Curve {
    /// The cost at a partition of `n` keys.
    pub fn at(&self, n: usize) -> u64 {
        let x = ((n.max(1) as f64).log2() - FIRST_SHIFT) / STEP;
        let last = self.0.len() - 1;
        if x <= 0.0 {
            return self.0[0];
        }
        let i = (x.floor() as usize).min(last - 1);
        let (a, b) = (self.0[i] as f64, self.0[i + 1] as f64);
        (a + (b - a) * (x - i as f64)).max(0.0).round() as u64
    }
}

/// A key looked up in a skiplist partition.
pub const SKIPLIST_GET: Curve = Curve([305, 664, 1579, 2834, 3750]);
/// An entry applied to a skiplist partition (insert, overwrite or remove).
pub const SKIPLIST_INSERT: Curve = Curve([594, 947, 1860, 2977, 3719]);
/// A new key claimed in the hash table (slot CAS, key shadow insert).
pub const TABLE_INSERT: Curve = Curve([311, 375, 384, 451, 481]);
/// A held key's slot overwritten or cleared (key shadow lookup, slot CAS).
pub const TABLE_UPDATE: Curve = Curve([114, 460, 702, 912, 1091]);
/// A key looked up through the key shadow.
pub const TABLE_GET: Curve = Curve([80, 450, 601, 752, 1052]);
/// One pair a range walk passes or a snapshot copies.
pub const RANGE_ITEM: Curve = Curve([40, 74, 191, 241, 283]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_is_its_points_interpolated_in_log2_n_and_extended_past_them() {
        let c = Curve([100, 200, 400, 800, 1000]);
        assert_eq!(c.at(0), 100);
        assert_eq!(c.at(1 << 10), 100, "below the first point: the first point");
        assert_eq!(c.at(1 << 14), 100);
        assert_eq!(c.at(1 << 15), 150, "halfway in log2 n");
        assert_eq!(c.at(1 << 18), 400);
        assert_eq!(c.at(1 << 21), 900);
        assert_eq!(c.at(1 << 22), 1000);
        assert_eq!(c.at(1 << 24), 1200, "past the last point, along the last segment");
    }

    #[test]
    fn measured_costs_grow_with_the_partition_where_caches_run_out() {
        for c in [SKIPLIST_GET, SKIPLIST_INSERT, TABLE_GET, RANGE_ITEM] {
            assert!(c.at(1 << 22) > c.at(1 << 14), "{c:?}");
        }
        // A skiplist costs more than the hash table at every size: the paper's premise.
        for shift in 14..=24 {
            let n = 1 << shift;
            assert!(SKIPLIST_GET.at(n) > TABLE_GET.at(n));
            assert!(SKIPLIST_INSERT.at(n) > TABLE_INSERT.at(n).max(TABLE_UPDATE.at(n)));
        }
    }
}
