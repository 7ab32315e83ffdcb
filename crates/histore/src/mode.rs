//! HiStore and the four baselines of its paper (§5.1), as configurations of one store.

/// Which structures a group's replicas keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A hash table on the primary, skiplists on two backups (the paper's design).
    HiStore = 0,
    /// Hash tables on all three replicas; no SCAN.
    AllHashtable = 1,
    /// Skiplists on all three replicas; GET and SCAN by request to a random replica.
    AllSkiplist = 2,
    /// One hash table, no replication; no SCAN.
    SingleHashtable = 3,
    /// One skiplist, no replication; GET and SCAN by request.
    SingleSkiplist = 4,
}

impl Mode {
    pub fn decode(b: u8) -> Option<Mode> {
        [
            Mode::HiStore,
            Mode::AllHashtable,
            Mode::AllSkiplist,
            Mode::SingleHashtable,
            Mode::SingleSkiplist,
        ]
        .get(b as usize)
        .copied()
    }

    /// Replicas per group.
    pub fn replicas(self) -> usize {
        match self {
            Mode::SingleHashtable | Mode::SingleSkiplist => 1,
            _ => 3,
        }
    }

    /// Whether replica `r` keeps a hash table (else a skiplist).
    pub fn table_at(self, r: usize) -> bool {
        match self {
            Mode::HiStore => r == 0,
            Mode::AllHashtable | Mode::SingleHashtable => true,
            Mode::AllSkiplist | Mode::SingleSkiplist => false,
        }
    }

    /// Replicas that answer SCAN and LOOKUP requests: those with skiplists.
    pub fn sorted_replicas(self) -> impl Iterator<Item = usize> {
        (0..self.replicas()).filter(move |&r| !self.table_at(r))
    }

    /// Whether the store answers scans.
    pub fn scans(self) -> bool {
        self.sorted_replicas().next().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_places_its_structures() {
        let sorted = |m: Mode| m.sorted_replicas().collect::<Vec<_>>();
        assert_eq!(sorted(Mode::HiStore), [1, 2]);
        assert_eq!(sorted(Mode::AllSkiplist), [0, 1, 2]);
        assert_eq!(sorted(Mode::SingleSkiplist), [0]);
        assert!(!Mode::AllHashtable.scans() && !Mode::SingleHashtable.scans());
        assert!(Mode::HiStore.table_at(0) && !Mode::AllSkiplist.table_at(0));
        for b in 0..5 {
            assert_eq!(Mode::decode(b).map(|m| m as u8), Some(b));
        }
        assert_eq!(Mode::decode(5), None);
    }
}
