//! Audits that walk a whole table (entry utilisation for the SepHash paper's Fig. 18): not on
//! any operation's path.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use crate::layout::{
    is_deleted, top_bytes, words, FANOUT, GROUP, GROUP_CHILDREN, MAX_RUNS, TOP_CHILDREN,
};
use crate::Plush;

impl Plush {
    /// Entries holding a value, and entry slots in all: every top bucket's slots, and every
    /// entry of every run a descriptor lists (runs have no empty slots; a tombstone or a key's
    /// older entry below a newer one holds no value of its own, but only tombstones are told
    /// apart here: an insert-only load has no older entries).
    pub async fn count_entries<T: Transport>(&self, c: &Client<T>) -> IndexResult<(u64, u64)> {
        let (mut used, mut slots) = (0u64, 0u64);
        // Each group with its node and level. The groups form a tree, so a group reached twice
        // is garbage (a child word pointing back up), and the walk stops at the deepest level.
        let mut groups: Vec<(GlobalAddr, u16, usize)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &top in &self.tops {
            let image = c.read_vec(top, top_bytes(self.shape.slots) as usize).await?;
            let kids = &image[TOP_CHILDREN as usize..TOP_CHILDREN as usize + 8 * FANOUT];
            for e in words(&image[crate::layout::TOP_BUCKETS as usize..]) {
                slots += 1;
                used += u64::from(e != 0 && !is_deleted(e));
            }
            let kids = words(kids).filter(|&w| w != 0);
            groups.extend(kids.map(|w| (GlobalAddr::from_raw(w), top.node(), 1)));
        }
        // Ends when every group down to the deepest level was read once (each at most once).
        while let Some((group, node, level)) = groups.pop() {
            if !Self::fits(c, group, GROUP, Some(node)) || !seen.insert(group) {
                return Err(IndexError::Corrupt(format!("plush group at {group}")));
            }
            let (desc, _) = self.read_desc(c, group, None).await?;
            for i in (0..MAX_RUNS).filter(|i| desc.valid & (1 << i) != 0) {
                let (at, len) = self.run_range(c, desc.records[i].run, node)?;
                let run = c.read_vec(at, len).await?;
                for e in words(&run) {
                    slots += 1;
                    used += u64::from(!is_deleted(e));
                }
            }
            if level < self.shape.levels {
                let kids = c.read_vec(group.add(GROUP_CHILDREN), 8 * FANOUT).await?;
                let kids = words(&kids).filter(|&w| w != 0);
                groups.extend(kids.map(|w| (GlobalAddr::from_raw(w), node, level + 1)));
            }
        }
        Ok((used, slots))
    }
}
