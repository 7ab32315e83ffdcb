//! # dmindex over OpenUCX: the `ucx` transport and the memnode server
//!
//! Memory nodes run `dmindex memnode`: a pool allocated by UCX, a progress loop, and a TCP
//! control port ([`proto`]). Compute nodes connect with `transport::UcxFabric` and issue
//! verbs as UCX RMA and atomics (RDMA verbs on real NICs; TCP or shared memory here).
//!
//! Where UCX would emulate RMA on the memnode's CPU (TCP), verbs travel as active messages the
//! memnode executes itself ([`message_verbs`]).
//!
//! Only [`admission`], [`auth`], [`tls`], [`proto`], [`control`], [`peers`], [`testhosts`],
//! [`message_verbs`], [`envelope`] and [`sessions`] (wire formats, TCP) build without the `ucx`
//! cargo feature; the rest links libucp (Debian's libucx-dev 1.13.1, found with pkg-config). So
//! do, on Linux, the guard over UCX's own TCP listener ([`ucx_guard`]) and its parts
//! ([`descriptors`], [`own_sockets`], [`syn_gate`], [`ucx_caps`]), which need no UCX call. See `docs/ucx.md`.

/// What commands that need UCX say in a build without the `ucx` feature.
pub const NOT_BUILT: &str = "this dmindex was built without UCX: rebuild with \
     `cargo build --release --features ucx` (needs libucx-dev)";

pub mod admission;
pub mod auth;
pub mod control;
pub mod envelope;
pub mod message_verbs;
pub mod peers;
pub mod proto;
pub mod sessions;
pub mod testhosts;
pub mod tls;

#[cfg(target_os = "linux")]
pub mod descriptors;
#[cfg(target_os = "linux")]
pub mod own_sockets;
#[cfg(target_os = "linux")]
pub mod syn_gate;
#[cfg(target_os = "linux")]
pub mod ucx_caps;
#[cfg(target_os = "linux")]
pub mod ucx_guard;

#[cfg(feature = "ucx")]
pub mod server;
#[cfg(feature = "ucx")]
pub mod sys;
#[cfg(feature = "ucx")]
pub mod transport;
#[cfg(feature = "ucx")]
pub mod ucp;
