//! Service ids: the names memory-node services go by.
//!
//! A leaf module: it uses nothing else from this crate, so the error type, the verbs and the
//! service table can all name a service without depending on one another. The public paths are
//! [`crate::ServiceId`] and [`crate::service`]'s re-exports.

use std::fmt;

/// Identifies a service on a memory node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub u16);

impl fmt::Display for ServiceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Chunk allocation: a bump allocator over the node's heap.
pub const ALLOC_CHUNK: ServiceId = ServiceId(0);
/// The node's superblock.
pub const NODE_INFO: ServiceId = ServiceId(1);
/// First id free for index-specific services.
pub const FIRST_USER_SERVICE: u16 = 16;
