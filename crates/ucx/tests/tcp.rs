//! The `ucx` transport over TCP (software RMA and atomics progressed by the memnode).
#![cfg(feature = "ucx")]

mod common;

#[test]
fn conformance_over_tcp() {
    common::use_tls("tcp");
    common::conformance_suite();
}

#[test]
fn bad_connections_over_tcp() {
    common::use_tls("tcp");
    common::bad_connections_are_refused();
}
