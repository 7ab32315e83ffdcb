//! # dmindex-fabric: remote memory as the indexes see it
//!
//! Disaggregated memory splits a cluster into compute nodes (CNs), which run many clients, and
//! memory nodes (MNs), which hold the data and have almost no CPU. Clients reach MN memory only
//! through one-sided verbs — READ, WRITE, CAS, masked CAS, FAA — as over RDMA. This crate is that
//! world, behind one API, for every index in dmindex.
//!
//! # Example
//!
//! An in-process memory node, one client, and a few verbs on remote memory it allocated (an
//! index does this for you: see `dmindex-index` and the workspace's `examples/`):
//!
//! ```
//! use dmindex_fabric::exec::block_on;
//! use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
//!
//! // One memory node of 64 MiB in this process (the `local` transport).
//! let fabric = LocalFabric::new(LocalConfig { node_size: 64 << 20, ..LocalConfig::default() })?;
//! // A client on compute node 0; it belongs to one task. Verbs are futures, not `Send`.
//! let c = fabric.client(0)?;
//! block_on(async {
//!     let addr = c.alloc(64, 64).await?; // 64 bytes, cache-line aligned
//!     c.write(addr, &7u64.to_le_bytes()).await?; // one round trip
//!     assert_eq!(c.read_word(addr).await?, 7);
//!     let old = c.cas(addr, 7, 8).await?; // returns the old word: it succeeded
//!     assert_eq!((old, c.read_word(addr).await?), (7, 8));
//!     Ok::<(), dmindex_fabric::FabricError>(())
//! })?;
//! assert_eq!(c.stats().cost().round_trips, 5); // alloc, write, read, cas, read
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Pieces
//!
//! * [`GlobalAddr`] — a memory-node id and byte offset packed in 64 bits.
//! * [`Client`] — what index code holds: the async verbs, doorbell batches, zero-wait writes,
//!   two-sided requests, chunked remote allocation, and per-client [`ClientStats`].
//! * [`Transport`] — the raw verbs a transport implements; [`Fabric`] makes clients of one.
//! * [`memory::Region`] — one MN's bytes with RDMA's guarantees: aligned words atomic, cache lines
//!   read and written whole, nothing more.
//! * [`layout`] — every MN's fixed layout: superblock, root table (CAS-updated root pointers),
//!   heap. [`service`] — the two-sided services an MN's few cores run (chunk allocation first).
//! * [`local`] — the in-process transport: real atomics, many threads, no lock or allocation per
//!   verb. [`exec`] — running many client tasks per thread.
//! * [`conformance`] — the verb-semantics suite every transport must pass.
//!
//! ## Counting
//!
//! One round trip is one awaited verb, one doorbell batch (to one MN), or one two-sided request.
//! Zero-wait writes are verbs but not round trips. See [`stats`].
//!
//! ## Rules for index code
//!
//! Index code is generic over `T: Transport`, holds a `&Client<T>`, and never touches a runtime, a
//! clock or an OS thread. It must stay correct when any multi-line READ is torn at cache-line
//! granularity and when a client stops between any two verbs.

pub mod addr;
pub mod alloc_count;
pub mod client;
pub mod conformance;
mod dma_window;
pub mod error;
pub mod exec;
mod ids;
mod join;
pub mod layout;
pub mod local;
pub mod memory;
pub mod service;
pub mod stats;
pub mod verbs;
pub mod words;
pub mod work;
mod zeroed;

pub use addr::{GlobalAddr, NodeId};
pub use client::{Client, Fabric};
pub use error::{FabricError, Result};
pub use local::{LocalConfig, LocalFabric};
pub use service::{ServiceId, Services};
pub use stats::{ClientStats, OpCost, VerbCounts};
pub use verbs::{AtomicOp, BatchOp, ClusterInfo, Transport};
pub use work::Work;
