//! A store's replicas all served in process on node 0, for tests that drive the server's
//! requests by hand: every peer call is answered at once by the same [`Server`], the SHIPs a
//! primary sends are counted, and a hook can run once inside the window between the backups'
//! SHIP answers and the primary's apply.

use std::cell::{Cell, RefCell};

use dmindex_fabric::memory::Region;
use dmindex_fabric::service::{MnContext, Peers, Service};
use dmindex_fabric::{FabricError, NodeId, ServiceId};
use dmindex_histore::mode::Mode;
use dmindex_histore::proto::{self, Head};
use dmindex_histore::replica::Setup;
use dmindex_histore::server::{setup_request, Server};

/// What runs inside the window.
pub type Hook<'a> = Box<dyn FnOnce(&dyn Peers) + 'a>;

/// Peers on one node: every replica of every store is `server`'s, over `memory`.
pub struct OneNode<'a> {
    pub server: &'a Server,
    pub memory: &'a Region,
    /// Run once, after the first batch of calls that includes a SHIP has been answered.
    pub hook: RefCell<Option<Hook<'a>>>,
    /// SHIP requests sent so far.
    pub ships: Cell<u32>,
}

impl Peers for OneNode<'_> {
    fn call_all(
        &self,
        service: ServiceId,
        calls: &[(NodeId, &[u8])],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        let replies: Vec<_> = calls
            .iter()
            .map(|&(node, request)| {
                if request[0] == proto::SHIP {
                    self.ships.set(self.ships.get() + 1);
                }
                let ctx = MnContext::new(node, self.memory).with_peers(self);
                self.server.handle(&ctx, request).map_err(|e| e.into_fabric(node, service))
            })
            .collect();
        if calls.iter().any(|(_, r)| r[0] == proto::SHIP) {
            if let Some(hook) = self.hook.borrow_mut().take() {
                hook(self);
            }
        }
        replies
    }
}

impl<'a> OneNode<'a> {
    pub fn new(server: &'a Server, memory: &'a Region) -> OneNode<'a> {
        OneNode { server, memory, hook: RefCell::new(None), ships: Cell::new(0) }
    }

    /// Sets up store `store`'s one group of three replicas in `mode`, all on this node, with
    /// `partitions` partitions and `buckets` buckets.
    pub fn group(&self, mode: Mode, store: u16, partitions: u8, buckets: u64) {
        let setup = Setup {
            mode,
            store,
            group: 0,
            replica: 0,
            groups: 1,
            partitions,
            nodes: [0, 0, 0],
            buckets,
        };
        for replica in 0..3 {
            let m = setup_request(&Setup { replica, ..setup });
            self.call(0, dmindex_histore::SERVICE, &m).unwrap();
        }
    }
}

/// A request head for `replica` of `store`'s one group, in the first epoch.
pub fn head(op: u8, replica: u8, store: u16) -> Head {
    Head { op, replica, group: 0, store, epoch: 1 }
}
