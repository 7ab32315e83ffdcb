//! The integration tests of this crate, one module a file, linked as one test binary: each
//! binary links the whole dependency graph again, and linking dominated the test build.
//! Tests that install a counting global allocator stay binaries of their own.

mod background;
mod counters;
mod indexes;
mod papers;
mod scan_cost;
mod window;
