//! Rebuilding what a restarted index server held: the client that drives it. The replacement's
//! side (learning, the snapshot, joining) is in [`crate::join`].
//!
//! # Steps, per replica the node held
//!
//! 1. Settle the group's view. If it still names the replica, ask the node (PING): a node that
//!    restarted answers *down* for it, and the view drops it (a failover, [`crate::route`]); a
//!    replica that answers was rebuilt already.
//! 2. JOIN: the node sets up a replacement learning the view `v` (a fresh hash table if the
//!    replica keeps one).
//! 3. COPY, per partition: the replacement loads the snapshot of `v`'s leader and learns its log
//!    from then on.
//! 4. Write the replacement's table offset into the descriptor (the view does not name the
//!    replica, so no client reads it), then CAS the word to `v` with the replica added — with
//!    the primary role handed back to it if it keeps the group's hash table and the leader is a
//!    skiplist (a temporary primary) — and drive that change to the end like any other.
//!
//! Any miss (the view changed under the copy, a node went down) starts the replica over from
//! step 1. The paper's recovery time (Fig. 13) is steps 2 to 4.

use dmindex_fabric::{Client, NodeId, Transport};
use dmindex_index::{IndexError, IndexResult};
use dmindex_prim::view::View;

use crate::layout::Descriptor;
use crate::proto::{self, Put};
use crate::replica::Setup;
use crate::route::{status, Miss, MAX_ATTEMPTS};
use crate::{server, Store, SERVICE};

impl<const MODE: u8> Store<MODE> {
    /// Memory node `node` came back empty after a crash: rebuilds every replica it held, one
    /// group after another; the number of replicas rebuilt (0 if all were there already).
    /// Fails if the node does not answer.
    pub async fn rebuild_node<T: Transport>(
        &self,
        c: &Client<T>,
        node: NodeId,
    ) -> IndexResult<u32> {
        c.reconnect(node).await?;
        let mut rebuilt = 0;
        for g in 0..self.desc.groups.len() {
            for r in 0..self.mode.replicas() {
                if self.desc.groups[g].nodes[r] == node {
                    rebuilt += u32::from(self.rebuild_replica(c, g, r).await?);
                }
            }
        }
        Ok(rebuilt)
    }

    /// Rebuilds replica `r` of group `g` on its node unless it serves already; whether it did.
    async fn rebuild_replica<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        r: usize,
    ) -> IndexResult<bool> {
        let node = self.desc.groups[g].nodes[r];
        let mut last = None;
        for _ in 0..MAX_ATTEMPTS {
            let word = self.view_word(g).load(c).await?;
            let v = self.drive(c, g, word).await?;
            if v.has(r) {
                if last.is_some() || !self.lost(c, g, v, node).await? {
                    return Ok(last.is_some());
                }
                self.without_node(c, g, v, node).await?;
                continue;
            }
            match self.join(c, g, r, v).await {
                Ok(()) => last = Some(v),
                Err(Miss::Stale) => {}
                // (An activation's unfit member is dropped inside `drive`; JOIN and COPY report
                // none, so unfit is taken here as down.)
                Err(Miss::Down(n) | Miss::Unfit(n)) if n == node => {
                    // The node being rebuilt went down again (or its replacement broke off).
                    c.reconnect(node).await?;
                }
                Err(Miss::Down(n) | Miss::Unfit(n)) => {
                    let now = self.view_word(g).load(c).await?;
                    if now == v && n != node && self.lost(c, g, v, n).await? {
                        self.without_node(c, g, v, n).await?;
                    }
                }
                Err(Miss::Fatal(e)) => return Err(e),
            }
        }
        Err(IndexError::Fabric(dmindex_fabric::FabricError::Unavailable {
            node,
            reason: format!(
                "replica {r} of group {g} did not rejoin after {MAX_ATTEMPTS} attempts"
            ),
        }))
    }

    /// Steps 2 to 4 for replica `r` of group `g`, learning stable view `v`.
    async fn join<T: Transport>(
        &self,
        c: &Client<T>,
        g: usize,
        r: usize,
        v: View,
    ) -> Result<(), Miss> {
        let nodes = self.desc.groups[g].nodes;
        let setup = Setup {
            mode: self.mode,
            store: self.store,
            group: g as u16,
            replica: r as u8,
            groups: self.desc.groups.len() as u16,
            partitions: self.partitions,
            nodes,
            buckets: self.desc.buckets,
        };
        let corrupt = |e| Miss::Fatal(IndexError::Corrupt(format!("JOIN reply: {e:?}")));
        let reply = c.call(nodes[r], SERVICE, &server::join_request(&setup, v)).await?;
        let table = status(&reply)?.u64().map_err(corrupt)?;
        for p in 0..self.partitions {
            let mut m = Vec::with_capacity(proto::HEAD + 2);
            m.head(self.head(proto::COPY, r, g, v.epoch));
            m.u16(p as u16);
            status(&c.call(nodes[r], SERVICE, &m).await?)?;
        }
        let at = self.desc_at.add(Descriptor::tables_offset(g) + 8 * r as u64);
        c.write(at, &table.to_le_bytes()).await?;
        let leader = match self.mode.table_at(r) && !self.mode.table_at(v.leader as usize) {
            true => r as u8,
            false => v.leader,
        };
        let next = v.with(r, leader);
        if self.view_word(g).change(c, v, next).await? != next {
            return Err(Miss::Stale);
        }
        self.counters.rebuilds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.drive(c, g, next).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use dmindex_index::{mn_services, IndexConfig, PointIndex, RangeIndex};
    use dmindex_sim::{NetParams, Sim, SimConfig};

    use crate::HiStore;

    /// A replica the view dropped while its node was alive (a wrong suspicion, a healed
    /// partition) is replaced on its node by a rebuild, and serves again.
    #[test]
    fn a_replica_dropped_by_a_wrong_suspicion_rejoins() {
        let net = NetParams::preset("stress").unwrap();
        let services = mn_services(net.mn_cores, crate::SERVICES).unwrap();
        let config = SimConfig { memory_nodes: 4, node_size: 64 << 20, ..SimConfig::new(3, net) };
        let sim = Sim::with_services(config, services).unwrap();
        let c = sim.client_on_own_thread(0);
        let cfg = IndexConfig { expected_items: 500, ..IndexConfig::default() };
        let ix = sim.block_on(<HiStore as PointIndex<_>>::create(&c, &cfg, 0)).unwrap();
        let key = |n: u64| n.to_be_bytes();
        sim.block_on(async {
            for n in 1..=100u64 {
                ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
            }
            // Node 2 (backup replica 1) is suspected, wrongly: it stays up with its old state.
            let v = ix.view(0);
            let next = ix.without_node(&c, 0, v, 2).await.unwrap();
            assert!(!ix.drive(&c, 0, next).await.unwrap().has(1));
            for n in 101..=200u64 {
                ix.insert(&c, &key(n), &n.to_le_bytes()).await.unwrap();
            }
            assert_eq!(ix.rebuild_node(&c, 2).await.unwrap(), 1, "replaced and rejoined");
            assert!(ix.view(0).has(1));
        });
        // Only the rejoined replica is left to serve scans.
        sim.crash_memory_node(3, sim.now_ns()).unwrap();
        let mut out = Vec::new();
        sim.block_on(ix.scan(&c, &key(1), 1000, &mut out)).unwrap();
        assert_eq!(out.len(), 200);
        assert!(out.iter().zip(1..).all(|((k, v), n): (&(Vec<u8>, Vec<u8>), u64)| {
            k[..] == key(n) && v[..] == n.to_le_bytes()
        }));
    }
}
