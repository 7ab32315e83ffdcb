//! The `ucx` transport over TCP: no one-sided lane, so verbs are messages the memnode executes.
#![cfg(feature = "ucx")]

mod common;

#[test]
fn conformance_over_tcp() {
    common::use_tls("tcp");
    common::conformance_suite(false);
}

#[test]
fn bad_connections_over_tcp() {
    common::use_tls("tcp");
    common::bad_connections_are_refused();
}

#[test]
fn abandoned_verbs_over_tcp() {
    common::use_tls("tcp");
    common::abandoned_verbs_do_not_confuse_later_ones();
}

#[test]
fn lost_memnode_over_tcp() {
    common::use_tls("tcp");
    common::lost_memnode_is_an_error();
}

#[test]
fn index_services_over_tcp() {
    common::use_tls("tcp");
    common::index_services_are_served();
}

#[test]
fn peers_over_tcp() {
    common::use_tls("tcp");
    common::memnodes_call_their_peers();
}

#[test]
fn restart_over_tcp() {
    common::use_tls("tcp");
    common::restarted_memnode_needs_reconnect();
}

#[test]
fn timeouts_over_tcp() {
    common::use_tls("tcp");
    common::slow_calls_time_out();
}

#[test]
fn forged_verbs_over_tcp() {
    common::use_tls("tcp");
    common::forged_verbs_are_refused();
}
