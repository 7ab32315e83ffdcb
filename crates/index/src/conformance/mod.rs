//! # The index conformance kit
//!
//! The counterpart of `dmindex_fabric::conformance` for indexes: what every index must pass,
//! written once and called from each index's own crate in a few lines.
//!
//! * [`model`]: random sequences of every operation from one client against `BTreeMap`
//!   (ordered indexes) or `HashMap` (point indexes), on the in-process fabric.
//! * [`linearizable`]: many clients on the simulator with torn reads, delays and crashes; every
//!   history checked per key, stuck clients with no crash to explain them fail the seed, and
//!   every summary states operations checked / requested.
//! * [`threads`]: real threads on the in-process fabric, every history checked.
//! * [`allocs`]: heap allocations per operation, for a test that installs the counting
//!   allocator to pin.
//!
//! ```ignore
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
pub mod linearizable;
pub mod model;
pub mod threads;

pub use linearizable::{
    check_seed, not_runnable, suite, CheckConfig, Crashes, NotRunnable, SeedReport, Summary,
};
pub use model::{model_test, run_model, ModelConfig, Step};
pub use threads::on_local_threads;
