//! # dmindex-prim: the disaggregated-memory primitives every index shares
//!
//! Between the contract (`dmindex-index`: traits, configuration, errors) and the designs (CHIME,
//! Sherman, the reference index, and the hash tables, radix trees and learned indexes to come):
//! each primitive a design on one-sided verbs needs is implemented once, here, one role a module.
//!
//! | module | primitive |
//! |---|---|
//! | [`attempts`] | bounded retries: a loop that keeps failing validation reports a corrupt index |
//! | [`backoff`] | waiting for what another client holds: pauses that double to a cap, a bound on no progress |
//! | [`counter`] | index counters: relaxed atomics bumped on slow paths (striped on fast ones), read by `stats` |
//! | [`cacheline`] | cache-line versions: encoding a node so that a torn READ is detected |
//! | [`lease`] | cluster membership with leases: judging a lock's holder dead, fencing it |
//! | [`lock`] | remote lock words (masked CAS, unlocking WRITE) and the CN-local lock table |
//! | [`version`] | node-level and entry-level versions in one byte |
//! | [`hash`] | the key hash and 16-bit fingerprints |
//! | [`divisor`] | division by a layout constant as a multiply and a shift |
//! | [`key`] | fixed 8-byte keys: the stored word, scan bounds rounded to keys |
//! | [`kv_block`] | out-of-place key-value blocks: one writer, one parser |
//! | [`root`] | root-table slots: claiming one, the descriptor word, refusing a foreign index |
//! | [`node_cache`] | the CN-side cache of nodes by level and key range, within a byte budget |
//! | [`options`] | typed `name=value` options with the errors every index gives |
//! | [`doorbell`] | verbs to one memory node posted as one doorbell batch |
//! | [`rdwc`] | read delegation and write combining on a compute node |
//! | [`pool`] | reusable buffers per compute node, sharded by client |
//! | [`spear`] | Spear: the FAA-only ternary lock (operations in flight vs. an SMO claim), its intent table, and the recovery of dead clients' shares and claims |
//! | [`blink`] | B-link internal nodes: layout, CN cache, root word, descent, separator insertion |
//! | [`radix`] | adaptive radix inner nodes: header, CAS'd child slots, type switch, CN radix cache |
//! | [`view`] | epoch-fenced membership of a replica set in one remote word: change, fence, validate |
//! | [`work`] | counting the compute-side work a primitive does (key compares of a bisection) for the client |

pub mod attempts;
pub mod backoff;
pub mod blink;
pub mod cacheline;
pub mod counter;
pub mod divisor;
pub mod doorbell;
pub mod hash;
pub mod key;
pub mod kv_block;
pub mod kv_slot;
pub mod lease;
pub mod lock;
pub mod names;
pub mod node_cache;
pub mod options;
pub mod pool;
pub mod radix;
pub mod rdwc;
pub mod root;
pub mod spear;
pub mod tentative;
pub mod version;
pub mod view;
pub mod work;
