//! Errors of the verb API and the memory-node services.

use crate::addr::{GlobalAddr, NodeId};
use crate::ids::ServiceId;

/// Result of a fabric operation.
pub type Result<T, E = FabricError> = std::result::Result<T, E>;

/// What went wrong with a verb, a batch or a two-sided request.
///
/// Every variant names the offending address, node or service, so that a bad configuration or a
/// corrupt pointer read from remote memory is reported, never turned into a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    /// The address names a memory node the cluster does not have.
    #[error("unknown memory node {node} (the cluster has {nodes})")]
    UnknownNode { node: NodeId, nodes: u16 },
    /// The access does not fit in the node's region.
    #[error("access of {len} bytes at {addr} is outside memory node {node}'s region of {size} bytes", node = addr.node())]
    OutOfBounds { addr: GlobalAddr, len: u64, size: u64 },
    /// An atomic verb on an address that is not 8-byte aligned.
    #[error("atomic verb at {addr} needs {required}-byte alignment")]
    Misaligned { addr: GlobalAddr, required: u64 },
    /// A doorbell batch with no verbs.
    #[error("empty doorbell batch")]
    EmptyBatch,
    /// A doorbell batch with more verbs than one doorbell carries.
    #[error("doorbell batch of {len} verbs exceeds the limit of {max}")]
    BatchTooLarge { len: usize, max: usize },
    /// A doorbell batch whose verbs target more than one memory node.
    #[error("doorbell batch mixes memory nodes {first} and {other}; a batch goes to one node")]
    MixedNodesInBatch { first: NodeId, other: NodeId },
    /// A two-sided request to a service the memory node does not run.
    #[error("memory node {node} has no service {service}")]
    UnknownService { node: NodeId, service: ServiceId },
    /// The service ran and refused the request.
    #[error("service {service} on memory node {node} failed: {message}")]
    Service { node: NodeId, service: ServiceId, message: String },
    /// The memory node has no room for the requested allocation.
    #[error("memory node {node} is out of memory (asked for {requested} bytes, {available} left)")]
    OutOfMemory { node: NodeId, requested: u64, available: u64 },
    /// The transport lost its connection or could not reach the node.
    #[error("memory node {node} unavailable: {reason}")]
    Unavailable { node: NodeId, reason: String },
    /// The memory node refused the verb: this client's membership was fenced (judged dead and
    /// repaired by another client). A fenced client must join again before it writes.
    #[error("memory node {node} refused the verb: this client was fenced as dead")]
    Fenced { node: NodeId },
    /// The transport cannot do what was asked (e.g. fencing a client).
    #[error("the transport cannot {0}")]
    Unsupported(&'static str),
}
