//! # dmindex-conformance: the index conformance kit
//!
//! The counterpart of `dmindex_fabric::conformance` for indexes: what every index must pass,
//! written once and called from each index's own tests in a few lines. It is a crate of its own
//! so that the contract (`dmindex-index`) depends on the fabric and `dmindex-check` only: the
//! simulator, `proptest` and the seeded generators the kit runs on are compiled for tests, not
//! into an index's production build. An index crate takes it as a dev-dependency:
//!
//! ```toml
//! [dev-dependencies]
//! dmindex-conformance = { path = "../conformance" }
//! ```
//!
//! (The catalog takes it as a normal dependency: its `check` entry runs the suite for
//! `dmindex check`.)
//!
//! * [`model`]: random sequences of every operation from one client against `BTreeMap`
//!   (ordered indexes) or `HashMap` (point indexes), on the in-process fabric.
//! * [`linearizable`]: many clients on the simulator with torn reads, delays and crashes; every
//!   history checked per key, stuck clients with no crash to explain them fail the seed, and
//!   every summary states operations checked / requested.
//! * [`threads`]: real threads on the in-process fabric, every history checked.
//! * [`allocs`]: heap allocations per operation, for a test that installs the counting
//!   allocator to pin.
//! * [`garbage`]: garbage written over the nodes an operation READs; the operation must report
//!   a corrupt index within a time bound, not spin.
//!
//! ```ignore
//! use dmindex_conformance::{model_test, suite, CheckConfig, ModelConfig};
//! use dmindex_index::{IndexConfig, Ordered};
//!
//! #[test]
//! fn model() {
//!     model_test::<MyIndex, Ordered>(&ModelConfig::new(IndexConfig::default(), 300, 24));
//! }
//! #[test]
//! fn linearizable() {
//!     suite::<MyIndex, Ordered>("linearizable", &CheckConfig::default(), 0..100);
//! }
//! ```

pub mod allocs;
pub mod garbage;
pub mod killed;
pub mod linearizable;
pub mod model;
pub mod threads;

pub use garbage::{garbage_test, GarbageConfig, Garble, Op, Traced};
pub use linearizable::{
    check_seed, not_runnable, suite, CheckConfig, CrashClock, Crashes, NotRunnable, Recovery,
    SeedReport, Summary,
};
pub use model::{model_test, run_model, ModelConfig, Step};
pub use threads::on_local_threads;
