//! The `ucx` transport over shared memory (the pool is UCX-allocated, so truly one-sided).
#![cfg(feature = "ucx")]

mod common;

#[test]
fn conformance_over_shared_memory() {
    common::use_tls("sm,self");
    common::conformance_suite(true);
}

#[test]
fn conformance_over_shared_memory_through_ucx_rma() {
    common::use_tls("sm,self");
    common::conformance_suite_with(true, false);
}

#[test]
fn bad_connections_over_shared_memory() {
    common::use_tls("sm,self");
    common::bad_connections_are_refused();
}

#[test]
fn abandoned_verbs_over_shared_memory() {
    common::use_tls("sm,self");
    common::abandoned_verbs_do_not_confuse_later_ones();
}

#[test]
fn fencing_over_shared_memory() {
    common::use_tls("sm,self");
    common::fence::a_one_sided_member_cannot_be_fenced();
}
