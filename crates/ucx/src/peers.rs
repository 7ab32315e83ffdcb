//! A memnode's links to the other memnodes: the fabric's [`Peers`] over control connections, so
//! a service can call its peers' services (HiStore's primary ships its log to its backups).
//!
//! Each peer has a pool of idle connections; a call takes one (or bootstraps a new one with the
//! cluster's token) and gives it back once answered, so calls from several of the memnode's
//! threads go out at once, each on its own connection. [`Peers::call_all`] writes every request
//! before it reads any reply: the peers work in parallel, one round trip in all. A peer that does
//! not answer within the timeout (dead, partitioned) is reported [`FabricError::Unavailable`] and
//! its connection dropped; the next call bootstraps afresh, reaching whatever process serves
//! that address by then.

use std::time::{Duration, Instant};

use dmindex_fabric::service::Peers;
use dmindex_fabric::{FabricError, NodeId, ServiceId};

use crate::control::{reply_result, unanswered, ConnPool, ControlConn};

/// Idle connections kept per peer beyond those in use.
const IDLE_PER_PEER: usize = 16;

/// The other memnodes of a cluster, by memory-node id.
pub struct TcpPeers {
    addrs: Vec<String>,
    token: Vec<u8>,
    timeout: Duration,
    idle: Vec<ConnPool>,
}

impl TcpPeers {
    /// Peers at `addrs` (HOST:PORT, indexed by memory-node id), reached with `token`; every
    /// connection and call must finish within `timeout`.
    pub fn new(addrs: Vec<String>, token: Vec<u8>, timeout: Duration) -> TcpPeers {
        let idle = addrs.iter().map(|_| ConnPool::new(IDLE_PER_PEER)).collect();
        TcpPeers { addrs, token, timeout, idle }
    }

    fn unknown(&self, node: NodeId) -> FabricError {
        FabricError::UnknownNode { node, nodes: self.addrs.len() as u16 }
    }

    /// An idle connection to `node`, or a new one.
    fn take(&self, node: NodeId) -> Result<ControlConn, FabricError> {
        let pool = self.idle.get(node as usize).ok_or_else(|| self.unknown(node))?;
        if let Some(c) = pool.take(|_| true) {
            return Ok(c);
        }
        let addr = &self.addrs[node as usize];
        let (c, welcome) = ControlConn::connect(addr, &self.token, self.timeout)
            .map_err(|reason| FabricError::Unavailable { node, reason })?;
        if welcome.mn_id != node {
            return Err(FabricError::Unavailable {
                node,
                reason: format!("{addr} is memory node {}, not {node}", welcome.mn_id),
            });
        }
        Ok(c)
    }
}

impl Peers for TcpPeers {
    fn call_all(
        &self,
        service: ServiceId,
        calls: &[(NodeId, &[u8])],
    ) -> Vec<Result<Vec<u8>, FabricError>> {
        let deadline = Instant::now() + self.timeout;
        // Every request out first, each on a connection of its own.
        let sent: Vec<Result<ControlConn, FabricError>> = calls
            .iter()
            .map(|&(node, request)| {
                let mut c = self.take(node)?;
                c.send(service.0, request, self.timeout)
                    .map_err(|e| unanswered(node, &self.addrs[node as usize], service, e))?;
                Ok(c)
            })
            .collect();
        let mut answers = Vec::with_capacity(calls.len());
        for (c, &(node, _)) in sent.into_iter().zip(calls) {
            let mut c = match c {
                Ok(c) => c,
                Err(e) => {
                    answers.push(Err(e));
                    continue;
                }
            };
            match c.receive(deadline, self.timeout) {
                Ok(reply) => {
                    answers.push(reply_result(node, service, reply));
                    self.idle[node as usize].give_back(c);
                }
                Err(e) => {
                    answers.push(Err(unanswered(node, &self.addrs[node as usize], service, e)))
                }
            }
        }
        answers
    }
}
