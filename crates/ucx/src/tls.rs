//! Which of UCX's transports a memnode lets reach its pool one-sidedly.
//!
//! Where a transport has no one-sided operations of its own (TCP), UCX 1.13 emulates RMA and
//! atomics with active messages that the target's worker executes on its CPU: the request
//! carries a raw address, and the handler reads or writes it without checking any remote key
//! (nor whether the address is mapped). A memnode whose context enables UCX's RMA and atomic
//! features installs those handlers, so any host that reaches its worker could read and write
//! the pool, or crash the memnode with one GET. dmindex's own verb messages (which carry the
//! memnode's verb key and are checked against the pool's bounds) cover every verb over such a
//! transport, so the memnode enables RMA and atomics only where every transport it may use has
//! real one-sided access (shared memory, RDMA), and there the pool's packed key is the
//! capability, as in RDMA. It cannot be told per transport: with TCP among `UCX_TLS` (or with
//! `UCX_TLS` unset, which means every transport), the memnode enables neither, and clients
//! of every transport reach it by verb messages.

/// Transports that UCX lets through `UCX_TLS` and that have no one-sided operations of their
/// own: with one of them possible, a memnode enables no RMA.
const EMULATED: [&str; 2] = ["tcp", "all"];

/// Whether a memnode whose environment sets `UCX_TLS` to `tls` (`None`: unset) may enable
/// UCX's RMA and atomics: only when `tls` lists the transports to use (not `^` the ones to
/// leave out) and none of them is emulated.
pub fn one_sided_allowed(tls: Option<&str>) -> bool {
    let Some(tls) = tls.map(str::trim).filter(|t| !t.is_empty()) else { return false };
    if tls.starts_with('^') {
        return false;
    }
    tls.split(',').map(|t| t.trim().to_ascii_lowercase()).all(|t| {
        let name = t.trim_start_matches('\\');
        !name.is_empty() && !EMULATED.contains(&name)
    })
}

#[cfg(test)]
mod tests {
    use super::one_sided_allowed;

    #[test]
    fn rma_only_where_no_transport_emulates_it() {
        for tls in ["sm,self", "rc_x,sm,self", "rc_verbs", "dc_x, sm", "posix,cma,self", "SM"] {
            assert!(one_sided_allowed(Some(tls)), "{tls}");
        }
        let emulated = [
            None,
            Some(""),
            Some("  "),
            Some("tcp"),
            Some("sm,self,tcp"),
            Some("TCP"),
            Some("all"),
            Some("^ud"),
            Some("^tcp"),
            Some("sm,,self"),
            Some("rc_x, tcp"),
            Some("\\tcp"),
        ];
        for tls in emulated {
            assert!(!one_sided_allowed(tls), "{tls:?}");
        }
    }
}
