//! Which connections to UCX's own TCP listener the memnode ends, and whom the listener
//! refuses: the rules of [`crate::ucx_guard`], apart from the sockets they are applied to.
//!
//! * A connection that has not sent UCX's handshake (its magic number and connection request)
//!   within the deadline is ended: a client's UCX sends it as soon as it connects, so such a
//!   connection is not a client (the attack: raw connections that never send a byte).
//! * One source address holds at most `per_source` connections, and all sources together at
//!   most `total`; the excess is ended, those without a handshake first, then the youngest
//!   (older connections are more likely the clients that were there before a flood), taken
//!   from the sources that hold the most.
//! * A source at its cap gets no new connection, nor anyone once the total is reached
//!   ([`Gate`]), so between two looks of the guard the count cannot run far past the caps.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use crate::syn_gate::Gate;

/// The limits on UCX's connections.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub total: usize,
    pub per_source: usize,
    /// How long a connection may go without sending UCX's handshake.
    pub handshake_within: Duration,
}

/// A connection accepted on UCX's listener, as the guard last saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Which connection (its socket's inode).
    pub key: u64,
    /// Canonical (an IPv4-mapped IPv6 address as IPv4).
    pub source: IpAddr,
    /// Since the guard first saw it.
    pub age: Duration,
    /// Whether it has sent UCX's handshake.
    pub handshaken: bool,
    /// Already ended by the guard, and not yet closed by UCX: it still holds a descriptor, so
    /// it counts for the gate, but is not ended again.
    pub ending: bool,
}

/// Why a connection is ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Why {
    /// No UCX handshake within the deadline.
    Silent,
    /// Its source holds more than its share.
    SourceFull,
    /// All sources together hold more than the total.
    Full,
}

/// What to do now.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Connections to end, and why.
    pub cut: Vec<(u64, Why)>,
    /// Whom the listener refuses from now on.
    pub gate: Gate,
}

/// The verdict on `conns` under `caps`.
pub fn judge(conns: &[Seen], caps: &Caps) -> Verdict {
    let mut cut = Vec::new();
    // The connections that stay, per source, in the order they would be ended.
    let mut staying: HashMap<IpAddr, Vec<&Seen>> = HashMap::new();
    for c in conns.iter().filter(|c| !c.ending) {
        if !c.handshaken && c.age >= caps.handshake_within {
            cut.push((c.key, Why::Silent));
        } else {
            staying.entry(c.source).or_default().push(c);
        }
    }
    for list in staying.values_mut() {
        // The last in the list is ended first: without a handshake, then the youngest.
        list.sort_by_key(|c| std::cmp::Reverse((c.handshaken, c.age)));
        while list.len() > caps.per_source {
            let Some(c) = list.pop() else { break };
            cut.push((c.key, Why::SourceFull));
        }
    }
    let mut left: usize = staying.values().map(Vec::len).sum();
    while left > caps.total {
        let Some(c) = staying.values_mut().max_by_key(|l| l.len()).and_then(|l| l.pop()) else {
            break;
        };
        cut.push((c.key, Why::Full));
        left -= 1;
    }
    // Descriptors are what the gate protects: connections being ended still hold theirs.
    let mut held: HashMap<IpAddr, usize> = HashMap::new();
    for c in conns {
        *held.entry(c.source).or_default() += 1;
    }
    let gate = match conns.len() >= caps.total {
        true => Gate::Closed,
        false => Gate::closed_to(
            held.into_iter().filter(|&(_, n)| n >= caps.per_source).map(|(s, _)| s).collect(),
        ),
    };
    Verdict { cut, gate }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps { total: 8, per_source: 4, handshake_within: Duration::from_secs(5) };

    fn conn(key: u64, source: u8, age_ms: u64, handshaken: bool) -> Seen {
        Seen {
            key,
            source: IpAddr::from([10, 0, 0, source]),
            age: Duration::from_millis(age_ms),
            handshaken,
            ending: false,
        }
    }

    fn cut_keys(v: &Verdict, why: Why) -> Vec<u64> {
        let mut k: Vec<u64> = v.cut.iter().filter(|c| c.1 == why).map(|c| c.0).collect();
        k.sort();
        k
    }

    /// Clients within the caps that have sent their handshake are never ended, however old.
    #[test]
    fn clients_within_the_caps_stay() {
        let conns: Vec<Seen> = (0..8).map(|i| conn(i, i as u8 % 2, 3_600_000, true)).collect();
        let v = judge(&conns, &CAPS);
        assert!(v.cut.is_empty(), "{v:?}");
        assert_eq!(v.gate, Gate::Closed, "the total is reached: no one more");
        let v = judge(&conns[..3], &CAPS);
        assert!(v.cut.is_empty() && v.gate == Gate::Open, "{v:?}");
    }

    /// A connection without a handshake is ended at the deadline, not before.
    #[test]
    fn silence_past_the_deadline_is_ended() {
        let conns = [conn(1, 1, 4_999, false), conn(2, 1, 5_000, false), conn(3, 1, 9_000, true)];
        let v = judge(&conns, &CAPS);
        assert_eq!(cut_keys(&v, Why::Silent), [2]);
        assert_eq!(v.cut.len(), 1);
    }

    /// Past a source's cap, its connections without a handshake go first, then its youngest;
    /// the source is refused new connections, and the others are not.
    #[test]
    fn a_source_past_its_cap_loses_its_newest_silent_connections() {
        let mut conns = vec![conn(1, 1, 9_000, true), conn(2, 1, 8_000, true)];
        conns.extend((10..14).map(|k| conn(k, 1, 100 * k, false)));
        conns.push(conn(20, 2, 10, false));
        let v = judge(&conns, &CAPS);
        // 6 from source 1, 4 may stay: the two youngest silent ones go.
        assert_eq!(cut_keys(&v, Why::SourceFull), [10, 11]);
        assert_eq!(v.cut.len(), 2);
        assert_eq!(v.gate, Gate::ClosedTo(vec![IpAddr::from([10, 0, 0, 1])]));
    }

    /// Past the total, connections are taken from the sources that hold the most.
    #[test]
    fn past_the_total_the_largest_sources_give_way() {
        let caps = Caps { total: 6, ..CAPS };
        let mut conns: Vec<Seen> = (0..4).map(|k| conn(k, 1, 1_000 + k, true)).collect();
        conns.extend((10..13).map(|k| conn(k, 2, 1_000, true)));
        conns.push(conn(20, 3, 1_000, true));
        let v = judge(&conns, &caps);
        let full = cut_keys(&v, Why::Full);
        assert_eq!(full.len(), 2, "{v:?}");
        assert!(full.contains(&0), "source 1's youngest goes first: {v:?}");
        assert!(!full.contains(&20), "the smallest source keeps its one: {v:?}");
        assert_eq!(v.gate, Gate::Closed);
    }

    /// Connections being ended count for the gate but are not ended twice.
    #[test]
    fn ending_connections_hold_the_gate_only() {
        let mut conns: Vec<Seen> = (0..4).map(|k| conn(k, 1, 60_000, false)).collect();
        for c in &mut conns {
            c.ending = true;
        }
        let v = judge(&conns, &CAPS);
        assert!(v.cut.is_empty());
        assert_eq!(v.gate, Gate::ClosedTo(vec![IpAddr::from([10, 0, 0, 1])]));
        assert_eq!(judge(&[], &CAPS).gate, Gate::Open);
    }
}
