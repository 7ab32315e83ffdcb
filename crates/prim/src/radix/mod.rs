//! Radix-tree machinery on disaggregated memory: adaptive inner nodes whose child slots change by
//! CAS, shared by the radix designs (SMART, Dolphin's inner levels).
//!
//! # Inner node
//!
//! ```text
//! offset 0      8        16       24             16 + 8·N
//!        +------+--------+--------+---- ... ----+
//!        | rev  | header | slot 0 | slot 1 …    |     N = 4, 16, 48 or 257 (the kind)
//!        +------+--------+--------+---- ... ----+
//! ```
//!
//! * **rev** — the reverse pointer: the address of the slot that published this node. A node
//!   reached through a cached parent whose slot address differs was re-parented since the copy
//!   was taken (a path split or a type switch above it), so the cached parent is dropped.
//! * **header** ([`header::Header`]) — depth, kind and the compressed prefix (up to 6 bytes);
//!   written once when the node is made and never changed.
//! * **slots** ([`slot::Slot`]) — one 8-byte word per child, changed only by CAS. A child is
//!   named by its *partial key*: the key byte at the node's depth, or *end of key* for the key
//!   that ends exactly there (so variable-length keys need no terminator byte). Slots are filled
//!   in order, first empty one first, and never emptied (a deleted leaf leaves a tombstone with
//!   its partial key), which is what keeps partial keys unique in a node without a lock: see
//!   [`node`].
//!
//! # Type switch
//!
//! A node with no empty slot grows into the next kind ([`node::Kind::grow`]): every slot is
//! *frozen* (CAS to itself with the frozen bit, so no later CAS on it can succeed), the live ones
//! are copied into a new node and the parent's slot is CAS'd to it. Anyone meeting a frozen slot
//! can finish the switch ([`switch::grow`]), so a crashed switcher blocks nobody; frozen values
//! are still current for readers, since the new node starts with exactly them.
//!
//! # CN-side cache
//!
//! [`cache::RadixCache`] keeps copies of inner nodes by address within a byte budget, charged
//! 9 + 8·N bytes a node as SMART charges it; a lookup walks copies from the root.

pub mod cache;
pub mod descend;
pub mod header;
pub mod node;
pub mod slot;
pub mod switch;

pub use cache::RadixCache;
pub use descend::{At, DescentCounters, Link, Pos, Tree};
pub use header::Header;
pub use node::{Kind, NodeImage};
pub use slot::{Partial, Slot};
