//! The one-sided verbs and the trait every transport implements.
//!
//! Index code never sees a [`Transport`] directly: it holds a [`crate::Client`], which validates
//! every verb, counts it, and forwards it here. A transport therefore only moves bytes; the
//! semantics below are the contract each one (in-process, simulated, UCX) must meet, and the
//! conformance suite in [`crate::conformance`] checks it.
//!
//! # Semantics (RDMA's, not stronger)
//!
//! * READ / WRITE move bytes; each 64-byte cache line is a unit, a multi-line access is not.
//! * CAS, masked CAS and FAA act atomically on one aligned 8-byte word and return the old word.
//! * Masked CAS (the RDMA extended atomic): only the bits in `compare_mask` are compared; on a
//!   match only the bits in `swap_mask` are replaced by those of `swap`; the whole old word is
//!   returned either way. See [`AtomicOp::apply`].
//! * A doorbell batch is a list of verbs (READ, WRITE and atomics) to one memory node, posted
//!   together and completed together: one round trip. Its verbs execute in list order: an atomic
//!   sees every earlier WRITE of the batch, and a later READ sees the atomic's effect. A failed
//!   comparison does not stop the verbs after it.
//! * Verbs that one client issues to one memory node execute in the order they are issued (like
//!   an RC queue pair); in particular a zero-wait WRITE is executed before any verb the same client
//!   issues after it to the same node.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::addr::{GlobalAddr, NodeId};
use crate::error::Result;
use crate::ids::ServiceId;

/// Most verbs one doorbell batch may carry.
pub const MAX_BATCH: usize = 16;

/// An atomic verb on one aligned 8-byte word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare-and-swap: if the word equals `expected`, it becomes `new`.
    Cas { expected: u64, new: u64 },
    /// Masked compare-and-swap (RDMA extended atomics).
    MaskedCas { compare: u64, compare_mask: u64, swap: u64, swap_mask: u64 },
    /// Fetch-and-add, wrapping.
    Faa { delta: u64 },
}

impl AtomicOp {
    /// The word after this verb acts on `old`, or `None` if the comparison fails and the word is
    /// left as it was. Every transport applies atomics through this one function.
    #[inline]
    pub const fn apply(self, old: u64) -> Option<u64> {
        match self {
            AtomicOp::Cas { expected, new } => {
                if old == expected {
                    Some(new)
                } else {
                    None
                }
            }
            AtomicOp::MaskedCas { compare, compare_mask, swap, swap_mask } => {
                if (old ^ compare) & compare_mask == 0 {
                    Some((old & !swap_mask) | (swap & swap_mask))
                } else {
                    None
                }
            }
            AtomicOp::Faa { delta } => Some(old.wrapping_add(delta)),
        }
    }

    /// Whether an atomic that returned `old` failed its comparison (always false for FAA).
    #[inline]
    pub const fn failed(self, old: u64) -> bool {
        self.apply(old).is_none()
    }

    /// Performs the verb on `word` atomically (sequentially consistent); returns the old word.
    pub fn apply_to(self, word: &AtomicU64) -> u64 {
        match self {
            AtomicOp::Cas { expected, new } => {
                match word.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(old) | Err(old) => old,
                }
            }
            AtomicOp::Faa { delta } => word.fetch_add(delta, Ordering::SeqCst),
            AtomicOp::MaskedCas { .. } => {
                let mut old = word.load(Ordering::SeqCst);
                loop {
                    let Some(new) = self.apply(old) else { return old };
                    match word.compare_exchange_weak(old, new, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => return old,
                        Err(cur) => old = cur,
                    }
                }
            }
        }
    }
}

/// One verb of a doorbell batch.
#[derive(Debug)]
pub enum BatchOp<'a> {
    /// READ `buf.len()` bytes at `addr` into `buf`.
    Read { addr: GlobalAddr, buf: &'a mut [u8] },
    /// WRITE `data` at `addr`.
    Write { addr: GlobalAddr, data: &'a [u8] },
    /// An atomic on the aligned word at `addr`; the transport stores the old word in `old`.
    Atomic { addr: GlobalAddr, op: AtomicOp, old: u64 },
}

impl BatchOp<'_> {
    /// Target address.
    pub fn addr(&self) -> GlobalAddr {
        match self {
            BatchOp::Read { addr, .. }
            | BatchOp::Write { addr, .. }
            | BatchOp::Atomic { addr, .. } => *addr,
        }
    }

    /// Bytes moved.
    pub fn len(&self) -> usize {
        match self {
            BatchOp::Read { buf, .. } => buf.len(),
            BatchOp::Write { data, .. } => data.len(),
            BatchOp::Atomic { .. } => 8,
        }
    }

    /// An atomic verb, its old word to be filled in by the batch.
    pub fn atomic(addr: GlobalAddr, op: AtomicOp) -> Self {
        BatchOp::Atomic { addr, op, old: 0 }
    }

    /// The old word an atomic of a completed batch returned (`None` for READ and WRITE).
    pub fn old(&self) -> Option<u64> {
        match self {
            BatchOp::Atomic { old, .. } => Some(*old),
            _ => None,
        }
    }

    /// Whether the verb moves no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Sizes of the memory nodes a client can reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    /// Region size in bytes of each memory node, indexed by node id.
    pub node_sizes: Vec<u64>,
}

impl ClusterInfo {
    /// Number of memory nodes.
    pub fn nodes(&self) -> u16 {
        self.node_sizes.len() as u16
    }

    /// Region size of `node`, if it exists.
    pub fn node_size(&self, node: NodeId) -> Option<u64> {
        self.node_sizes.get(node as usize).copied()
    }

    /// Bytes of a READ of `want` bytes at `a` that stay inside its node's region: `want`, or
    /// fewer near the region's end (none from past it, or on a node that does not exist). What
    /// a reader of objects whose length it learns from their first bytes asks for, since a READ
    /// past the region is refused.
    pub fn within_region(&self, a: GlobalAddr, want: usize) -> usize {
        let room = self.node_size(a.node()).map_or(0, |size| size.saturating_sub(a.offset()));
        want.min(usize::try_from(room).unwrap_or(usize::MAX))
    }
}

/// A client's connection to every memory node: the raw verbs of one transport.
///
/// Arguments arrive validated by [`crate::Client`] (node exists, range inside the region, atomics
/// aligned, batch non-empty and on one node). Futures need not be `Send`: a client is driven by a
/// single-threaded executor, many clients per thread.
pub trait Transport {
    /// READ `buf.len()` bytes at `addr`.
    fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> impl Future<Output = Result<()>>;
    /// WRITE `data` at `addr` and wait for completion.
    fn write(&self, addr: GlobalAddr, data: &[u8]) -> impl Future<Output = Result<()>>;
    /// Post a WRITE without waiting ("zero-wait", unsignalled). The transport owns any copy it
    /// needs; `data` may be reused as soon as this returns. Completion is awaited by
    /// [`Transport::quiesce`].
    fn post_write(&self, addr: GlobalAddr, data: &[u8]) -> Result<()>;
    /// Wait until every posted zero-wait WRITE of this client has completed.
    fn quiesce(&self) -> impl Future<Output = Result<()>>;
    /// An atomic verb on the aligned word at `addr`; returns the old word.
    fn atomic(&self, addr: GlobalAddr, op: AtomicOp) -> impl Future<Output = Result<u64>>;
    /// A doorbell batch of verbs to `node`, executed in order, one round trip; each atomic's old
    /// word is stored in its `old`.
    fn batch(&self, node: NodeId, ops: &mut [BatchOp<'_>]) -> impl Future<Output = Result<()>>;
    /// A two-sided request to `service` on `node`, answered by the memory node's CPU.
    fn call(
        &self,
        node: NodeId,
        service: ServiceId,
        request: &[u8],
    ) -> impl Future<Output = Result<Vec<u8>>>;
    /// Connects to `node` afresh. A memory node that crashed and restarted is a new server: a
    /// connection made before its restart fails every verb ([`crate::FabricError::Unavailable`])
    /// until the client reconnects, as an RDMA queue pair and remote keys die with the process
    /// that registered them. One round trip; fails if the node does not answer.
    fn reconnect(&self, node: NodeId) -> impl Future<Output = Result<()>>;
    /// Waits about `ns` nanoseconds before the client's next verb, with nothing on the network:
    /// a retry's backoff. On a real fabric the thread runs its other tasks or sleeps
    /// ([`crate::exec::sleep`]); the simulator advances the client's virtual time.
    fn pause(&self, ns: u64) -> impl Future<Output = ()> {
        crate::exec::sleep(std::time::Duration::from_nanos(ns))
    }
    /// Compute-side CPU work the index did ([`crate::work`]): on a real fabric its time has
    /// already passed, so nothing happens; a simulated fabric charges it to the client's core.
    fn compute(&self, _work: crate::Work, _count: u64) {}
    /// The client's own clock, in nanoseconds from an arbitrary origin: monotonic, never
    /// compared with another client's. What lease renewal and a waiter's judgement of a holder
    /// read; the simulator gives the client's virtual time.
    fn now_ns(&self) -> u64 {
        crate::exec::monotonic_ns()
    }
    /// The lease period of this fabric's cluster members, ns: a member renews within half of
    /// it, and a waiter judges a lock's holder dead only after seeing it renew nothing for
    /// three. Long enough that a live client on this fabric is not judged dead for being slow:
    /// 250 ms on a real fabric, where a thread may wait for a core or a verb on a loaded host
    /// for tens of milliseconds (ShiftLock's recovery build uses 10 ms on dedicated RDMA hosts).
    fn lease_ns(&self) -> u64 {
        250_000_000
    }
    /// Tells every memory node that this connection speaks for cluster member `member` (an
    /// opaque non-zero word: a membership slot and its incarnation), so that
    /// [`Transport::fence`] can name it. Once per client: on RDMA the mapping is made when the
    /// queue pairs connect; over UCX it is one message to each memory node.
    fn register_member(&self, _member: u64) -> impl Future<Output = Result<()>> {
        std::future::ready(Ok(()))
    }
    /// Asks memory node `node` to refuse every verb from connections registered as `member`,
    /// and answers once no verb of theirs is executing there (a verb already executed stays
    /// executed): what makes repairing a dead client's locks and writes safe against that client
    /// coming back (paused, not dead). One round trip through the node's control path.
    fn fence(&self, _node: NodeId, _member: u64) -> impl Future<Output = Result<()>> {
        std::future::ready(Err(crate::FabricError::Unsupported("fence a client")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_read_is_cut_at_its_regions_end() {
        let info = ClusterInfo { node_sizes: vec![4096, 1 << 20] };
        assert_eq!(info.within_region(GlobalAddr::new(0, 0), 128), 128);
        assert_eq!(info.within_region(GlobalAddr::new(0, 4000), 128), 96);
        assert_eq!(info.within_region(GlobalAddr::new(0, 4096), 128), 0);
        assert_eq!(info.within_region(GlobalAddr::new(0, 9000), 128), 0);
        assert_eq!(info.within_region(GlobalAddr::new(1, 4000), 128), 128);
        assert_eq!(info.within_region(GlobalAddr::new(2, 0), 128), 0, "no such node");
    }

    proptest! {
        /// Masked CAS, bit by bit: success iff every compared bit matches; on success each
        /// swapped bit comes from `swap` and every other bit stays.
        #[test]
        fn masked_cas_bitwise(old: u64, compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) {
            let op = AtomicOp::MaskedCas { compare, compare_mask, swap, swap_mask };
            let matches = (0..64).all(|i| (compare_mask >> i) & 1 == 0 || (old >> i) & 1 == (compare >> i) & 1);
            match op.apply(old) {
                None => prop_assert!(!matches),
                Some(new) => {
                    prop_assert!(matches);
                    for i in 0..64 {
                        let want = if (swap_mask >> i) & 1 == 1 { (swap >> i) & 1 } else { (old >> i) & 1 };
                        prop_assert_eq!((new >> i) & 1, want, "bit {}", i);
                    }
                }
            }
        }

        #[test]
        fn cas_and_faa(old: u64, expected: u64, new: u64) {
            let cas = AtomicOp::Cas { expected, new };
            prop_assert_eq!(cas.apply(old), (old == expected).then_some(new));
            prop_assert_eq!(cas.failed(old), old != expected);
            prop_assert_eq!(AtomicOp::Faa { delta: new }.apply(old), Some(old.wrapping_add(new)));
        }
    }
}
