//! The integration tests of this crate, one module a file, linked as one test binary: each
//! binary links the whole dependency graph again, and linking dominated the test build.
//! Tests that install a counting global allocator stay binaries of their own.

mod compute;
mod fine_scan;
mod garbage;
mod groups;
mod linearizable;
mod load;
mod model;
mod recovery;
mod settle;
mod stale_scan;
