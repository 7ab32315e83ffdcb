//! Fabric parameters: what each means, its physical range, and how a run overrides one.
//!
//! The named presets and the source of every number are in [`crate::presets`].

use serde::{Deserialize, Serialize};

pub use crate::presets::{DEFAULT_PRESET, PRESETS};

/// The fabric model's parameters. Times in virtual nanoseconds.
///
/// A verb's path through them is drawn in [`crate::world`]; the presets and the measurement
/// behind each value are in [`crate::presets`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetParams {
    /// One-way delay between the two NICs (wire, switch, both NICs' pipelines and PCIe
    /// latency), each direction, beyond the queues the model keeps.
    pub one_way_ns: u64,
    /// Uniform random extra one-way delay in `[0, jitter_ns]`.
    pub jitter_ns: u64,
    /// Per-direction link bandwidth of every NIC, in Gbit/s.
    pub link_gbps: f64,
    /// Largest payload of one packet: a longer message is cut into packets, each with its own
    /// headers, and the packets of different messages interleave on a link.
    pub mtu_bytes: u64,
    /// Wire bytes of one packet beyond its payload (headers, trailers, framing).
    pub header_bytes: u64,
    /// Message rate of a compute node's NIC sending requests (millions of verbs per second).
    pub nic_mops: f64,
    /// Rate at which a memory node's NIC serves READ requests (millions per second).
    pub read_mops: f64,
    /// Rate at which a memory node's NIC serves WRITE requests (millions per second).
    pub write_mops: f64,
    /// Rate at which a memory node's NIC serves atomics on distinct words (millions per second).
    pub atomic_mops: f64,
    /// Minimum spacing of atomics to the same 8-byte word at one NIC.
    pub same_addr_atomic_ns: u64,
    /// A memory node's PCIe bandwidth per direction, in Gbit/s of TLP bytes.
    pub pcie_gbps: f64,
    /// PCIe bytes of one TLP beyond its payload (header, sequence number, LCRC, framing).
    pub pcie_tlp_bytes: u64,
    /// Largest payload of one PCIe TLP (max payload size): DMA is cut into TLPs of this size.
    pub pcie_payload_bytes: u64,
    /// Client CPU time to build one work request.
    pub post_ns: u64,
    /// Client CPU time to ring one doorbell (one per verb, or one per doorbell batch).
    pub doorbell_ns: u64,
    /// Client CPU time to poll one completion (one per awaited verb or batch).
    pub poll_ns: u64,
    /// CPU cores of each compute node that client threads share (0: a core per thread).
    pub cn_cores: usize,
    /// Client CPU time of one compute-side cache lookup (`Work::CacheLookup`).
    pub cache_lookup_ns: f64,
    /// Client CPU time of one radix-cache copy looked up (`Work::RadixStep`).
    pub radix_step_ns: f64,
    /// Client CPU time of one probe of a directly indexed table (`Work::TableProbe`).
    pub table_probe_ns: f64,
    /// Client CPU time of one key compared (`Work::KeyCompare`).
    pub key_compare_ns: f64,
    /// Client CPU time of one key hashed (`Work::KeyHash`).
    pub key_hash_ns: f64,
    /// Client CPU time per byte decoded or checked after a READ (`Work::BytesScanned`).
    pub byte_scanned_ns: f64,
    /// MN CPU time to serve one two-sided request.
    pub rpc_ns: u64,
    /// MN CPU cores serving two-sided requests.
    pub mn_cores: usize,
    /// MN CPU cores that only do work a service left for after its reply
    /// (`MnContext::after_reply`); 0: that work runs on the request's own core.
    #[serde(default)]
    pub mn_workers: usize,
}

/// One parameter, borrowed for reading or setting.
enum Field<'a> {
    Int(&'a mut u64),
    Real(&'a mut f64),
    Count(&'a mut usize),
}

impl NetParams {
    /// The named preset, or an error listing the names.
    pub fn preset(name: &str) -> Result<NetParams, String> {
        crate::presets::named(name).ok_or_else(|| {
            format!("unknown fabric preset '{name}' (known: {})", PRESETS.join(", "))
        })
    }

    /// Every parameter by name, in [`RANGES`] order.
    fn fields(&mut self) -> [(&'static str, Field<'_>); 26] {
        use Field::{Count, Int, Real};
        [
            ("one_way_ns", Int(&mut self.one_way_ns)),
            ("jitter_ns", Int(&mut self.jitter_ns)),
            ("link_gbps", Real(&mut self.link_gbps)),
            ("mtu_bytes", Int(&mut self.mtu_bytes)),
            ("header_bytes", Int(&mut self.header_bytes)),
            ("nic_mops", Real(&mut self.nic_mops)),
            ("read_mops", Real(&mut self.read_mops)),
            ("write_mops", Real(&mut self.write_mops)),
            ("atomic_mops", Real(&mut self.atomic_mops)),
            ("same_addr_atomic_ns", Int(&mut self.same_addr_atomic_ns)),
            ("pcie_gbps", Real(&mut self.pcie_gbps)),
            ("pcie_tlp_bytes", Int(&mut self.pcie_tlp_bytes)),
            ("pcie_payload_bytes", Int(&mut self.pcie_payload_bytes)),
            ("post_ns", Int(&mut self.post_ns)),
            ("doorbell_ns", Int(&mut self.doorbell_ns)),
            ("poll_ns", Int(&mut self.poll_ns)),
            ("cn_cores", Count(&mut self.cn_cores)),
            ("cache_lookup_ns", Real(&mut self.cache_lookup_ns)),
            ("radix_step_ns", Real(&mut self.radix_step_ns)),
            ("table_probe_ns", Real(&mut self.table_probe_ns)),
            ("key_compare_ns", Real(&mut self.key_compare_ns)),
            ("key_hash_ns", Real(&mut self.key_hash_ns)),
            ("byte_scanned_ns", Real(&mut self.byte_scanned_ns)),
            ("rpc_ns", Int(&mut self.rpc_ns)),
            ("mn_cores", Count(&mut self.mn_cores)),
            ("mn_workers", Count(&mut self.mn_workers)),
        ]
    }

    /// Every parameter with its value, as a number.
    pub fn values(&self) -> Vec<(&'static str, f64)> {
        let mut copy = self.clone();
        copy.fields()
            .into_iter()
            .map(|(name, f)| {
                let v = match f {
                    Field::Int(v) => *v as f64,
                    Field::Real(v) => *v,
                    Field::Count(v) => *v as f64,
                };
                (name, v)
            })
            .collect()
    }

    /// Checks that every parameter is in its physical range ([`RANGES`]).
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in self.values() {
            let shown = if v != 0.0 && !(1e-3..1e12).contains(&v.abs()) {
                format!("{v:e}")
            } else {
                format!("{v}")
            };
            in_range(name, v, &shown)?;
        }
        Ok(())
    }

    /// Overrides one parameter from `name=value`, which must be in its physical range.
    pub fn set(&mut self, assignment: &str) -> Result<(), String> {
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| format!("fabric override '{assignment}' is not name=value"))?;
        let (name, raw) = (name.trim(), value.trim());
        let mut next = self.clone();
        let mut fields = next.fields();
        let Some((_, field)) = fields.iter_mut().find(|(n, _)| *n == name) else {
            return Err(format!("unknown fabric parameter '{name}'"));
        };
        let v = match field {
            Field::Int(_) | Field::Count(_) => raw
                .parse::<u64>()
                .map(|x| x as f64)
                .map_err(|_| format!("'{raw}' is not a whole number for {name}"))?,
            Field::Real(_) => match raw.parse::<f64>() {
                Ok(x) if x.is_finite() => x,
                _ => return Err(format!("'{raw}' is not a number for {name}")),
            },
        };
        in_range(name, v, raw)?;
        match field {
            Field::Int(slot) => **slot = v as u64,
            Field::Count(slot) => **slot = v as usize,
            Field::Real(slot) => **slot = v,
        }
        next.check()?;
        *self = next;
        Ok(())
    }

    /// Wire bytes of a message carrying `payload` bytes: the payload and each packet's headers.
    pub fn wire_bytes(&self, payload: u64) -> u64 {
        payload + self.packets(payload) * self.header_bytes
    }

    /// Packets a message of `payload` bytes is cut into (at least one).
    pub fn packets(&self, payload: u64) -> u64 {
        payload.div_ceil(self.mtu_bytes).max(1)
    }

    /// Picoseconds to move `bytes` over one link direction.
    pub fn wire_ps(&self, bytes: u64) -> u64 {
        // Gbit/s = bits per ns; ps = bytes * 8 / gbps * 1000.
        (bytes as f64 * 8000.0 / self.link_gbps).round() as u64
    }

    /// TLPs a DMA of `payload` bytes is cut into (at least one).
    pub(crate) fn tlps(&self, payload: u64) -> u64 {
        payload.div_ceil(self.pcie_payload_bytes).max(1)
    }

    /// Picoseconds of a memory node's PCIe to move `payload` bytes of DMA (in TLPs).
    pub(crate) fn pcie_ps(&self, payload: u64) -> u64 {
        let bytes = payload + self.tlps(payload) * self.pcie_tlp_bytes;
        (bytes as f64 * 8000.0 / self.pcie_gbps).round() as u64
    }

    /// Picoseconds one message takes a compute node's NIC.
    pub(crate) fn msg_ps(&self) -> u64 {
        rate_ps(self.nic_mops)
    }

    /// Picoseconds a CPU spends on `count` units of work costing `ns` each.
    pub(crate) fn cpu_ps(ns: f64, count: u64) -> u64 {
        (ns * 1000.0 * count as f64).round() as u64
    }
}

/// Picoseconds per message at `mops` million messages per second.
pub(crate) fn rate_ps(mops: f64) -> u64 {
    (1e6 / mops).round() as u64
}

/// The range each fabric parameter may take, and its unit: wide enough for any network, from a
/// slow WAN to a fabric far faster than today's, and narrow enough that no run's virtual time
/// (picoseconds in a `u64`: 213 days) can overflow — the slowest verb at these bounds takes
/// about a second.
pub const RANGES: [(&str, f64, f64, &str); 26] = [
    ("one_way_ns", 0.0, 1e9, "ns one way"),
    ("jitter_ns", 0.0, 1e9, "ns"),
    ("link_gbps", 1e-3, 1e4, "Gbit/s per link"),
    ("mtu_bytes", 64.0, 65536.0, "payload bytes per packet"),
    ("header_bytes", 0.0, 65536.0, "bytes per packet"),
    ("nic_mops", 1e-3, 1e4, "million messages/s per CN NIC"),
    ("read_mops", 1e-3, 1e4, "million READs/s per MN NIC"),
    ("write_mops", 1e-3, 1e4, "million WRITEs/s per MN NIC"),
    ("atomic_mops", 1e-3, 1e4, "million atomics/s per MN NIC"),
    ("same_addr_atomic_ns", 0.0, 1e9, "ns"),
    ("pcie_gbps", 1e-3, 1e5, "Gbit/s per direction"),
    ("pcie_tlp_bytes", 0.0, 4096.0, "bytes per TLP"),
    ("pcie_payload_bytes", 64.0, 4096.0, "payload bytes per TLP"),
    ("post_ns", 0.0, 1e9, "ns of CPU per work request"),
    ("doorbell_ns", 0.0, 1e9, "ns of CPU per doorbell"),
    ("poll_ns", 0.0, 1e9, "ns of CPU per completion"),
    ("cn_cores", 0.0, 1e6, "cores per compute node (0: one per thread)"),
    ("cache_lookup_ns", 0.0, 1e6, "ns of CPU per cache lookup"),
    ("radix_step_ns", 0.0, 1e6, "ns of CPU per radix-cache copy looked up"),
    ("table_probe_ns", 0.0, 1e6, "ns of CPU per table probe"),
    ("key_compare_ns", 0.0, 1e6, "ns of CPU per key compared"),
    ("key_hash_ns", 0.0, 1e6, "ns of CPU per key hashed"),
    ("byte_scanned_ns", 0.0, 1e3, "ns of CPU per byte scanned"),
    ("rpc_ns", 0.0, 1e9, "ns of CPU per request"),
    ("mn_cores", 1.0, 1024.0, "cores per memory node"),
    ("mn_workers", 0.0, 1024.0, "worker cores per memory node"),
];

/// Refuses `name`'s value `v` (as the user wrote it: `shown`) outside its range.
fn in_range(name: &str, v: f64, shown: &str) -> Result<(), String> {
    let (_, lo, hi, unit) =
        RANGES.iter().find(|r| r.0 == name).expect("every parameter has a range");
    if !(v >= *lo && v <= *hi) {
        return Err(format!("{name}={shown} is outside {lo}..={hi} ({unit})"));
    }
    Ok(())
}

/// Seed-controlled faults (BUGGIFY-style).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Faults {
    /// Probability that a verb is delayed by a uniform extra `[0, delay_max_ns]` on its way to the
    /// memory node, and (independently, same probability) that its data phase is stretched by as
    /// much, which widens the window for torn reads.
    pub delay_prob: f64,
    /// Largest injected delay.
    pub delay_max_ns: u64,
    /// Probability that a client crashes at a verb boundary, an awaited post (a verb or a
    /// doorbell batch): its task is dropped mid-operation and never wakes. Half the time (a
    /// coin from the seed) it dies before ringing the doorbell and the post never goes out; the
    /// other half just after, as when the process dies with work requests in its send queue:
    /// the requester's NIC executes them in order until the kernel tears the queue pair down,
    /// so a prefix of uniform length `1..=n` of an `n`-verb post lands and the rest never does.
    /// The last verb of that prefix, if a WRITE of more than one packet, may be cut short: a
    /// responder places an RC WRITE packet by packet, so a uniform `1..=all` of its whole
    /// `mtu_bytes` packets land, from its start (InfiniBand's path MTU is one of 256, 512,
    /// 1024, 2048 and 4096 bytes, per the IBA Specification vol. 1). Zero-wait WRITEs posted
    /// earlier land as usual. The `world::crash` module has the details.
    pub crash_prob: f64,
    /// At most this many clients crash in one run.
    pub max_crashes: u32,
    /// Probability that a client stalls before it posts a verb (or a doorbell) it waits for:
    /// the post goes out a uniform `[0, stall_max_ns]` later, as when the client's thread is
    /// descheduled or the client is slow, and then the client goes on. Stalls are long (up to
    /// milliseconds) where delays are short, so a stalled client can resume in a structure
    /// other clients changed many times over.
    #[serde(default)]
    pub stall_prob: f64,
    /// Longest stall.
    #[serde(default)]
    pub stall_max_ns: u64,
}

impl Faults {
    /// No faults.
    pub fn none() -> Faults {
        Faults::default()
    }

    /// Frequent delays, no crashes.
    pub fn delays() -> Faults {
        Faults { delay_prob: 0.05, delay_max_ns: 20_000, ..Faults::none() }
    }
}

/// Everything a simulation run depends on, besides the workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The one seed every random choice derives from.
    pub seed: u64,
    /// Fabric model.
    pub net: NetParams,
    /// Injected faults.
    pub faults: Faults,
    /// Number of memory nodes.
    pub memory_nodes: u16,
    /// Bytes per memory node.
    pub node_size: u64,
    /// Size of the chunks clients carve allocations from.
    pub chunk_size: u64,
}

impl SimConfig {
    /// The CHIME testbed with one memory node of `node_size` bytes, no faults.
    pub fn new(seed: u64, net: NetParams) -> SimConfig {
        SimConfig {
            seed,
            net,
            faults: Faults::none(),
            memory_nodes: 1,
            node_size: 256 << 20,
            chunk_size: 4 << 20,
        }
    }

    /// What the crash and lock-repair tests run on: the slow `stress` network with injected
    /// delays, one 16 MiB memory node carved in 1 MiB chunks.
    pub fn stress_with_delays(seed: u64) -> SimConfig {
        SimConfig {
            node_size: 16 << 20,
            chunk_size: 1 << 20,
            faults: Faults::delays(),
            ..SimConfig::new(seed, NetParams::stress())
        }
    }

    /// Checks the configuration, naming the first problem.
    pub fn validate(&self) -> Result<(), String> {
        self.net.check()?;
        let f = &self.faults;
        let probabilities = [
            ("delay_prob", f.delay_prob),
            ("crash_prob", f.crash_prob),
            ("stall_prob", f.stall_prob),
        ];
        for (name, p) in probabilities {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} must be a probability in [0, 1], got {p}"));
            }
        }
        dmindex_fabric::LocalConfig {
            memory_nodes: self.memory_nodes,
            node_size: self.node_size,
            chunk_size: self.chunk_size,
            ..Default::default()
        }
        .validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_overrides() {
        let mut p = NetParams::preset("chime-testbed").unwrap();
        assert_eq!(p.wire_ps(125), 10_000, "125 B at 100 Gb/s is 10 ns");
        assert_eq!(p.msg_ps(), 9009, "111 M messages/s");
        p.set("link_gbps=25").unwrap();
        p.set(" one_way_ns = 100").unwrap();
        p.set("cn_cores=8").unwrap();
        p.set("key_hash_ns=0.5").unwrap();
        assert_eq!((p.link_gbps, p.one_way_ns, p.cn_cores, p.key_hash_ns), (25.0, 100, 8, 0.5));
        // Every parameter stays in a physical range; a refused value changes nothing.
        for (set, msg) in [
            ("link_gbps=0", "link_gbps=0 is outside 0.001..=10000"),
            ("atomic_mops=1e-12", "atomic_mops=1e-12 is outside 0.001..=10000"),
            ("one_way_ns=18446744073709551615", "=18446744073709551615 is outside 0..=1000000000"),
            ("link_gbps=1e-300", "link_gbps=1e-300 is outside"),
            ("link_gbps=inf", "'inf' is not a number for link_gbps"),
            ("post_ns=18446744073709551615", "post_ns"),
            ("post_ns=1.5", "'1.5' is not a whole number for post_ns"),
            ("mn_cores=0", "mn_cores=0 is outside 1..=1024"),
            ("header_bytes=1000000", "header_bytes"),
            ("mtu_bytes=1", "mtu_bytes=1 is outside 64..=65536"),
            ("cache_lookup_ns=-1", "cache_lookup_ns=-1 is outside"),
        ] {
            let before = p.clone();
            assert!(p.set(set).unwrap_err().contains(msg), "{set}: {}", p.set(set).unwrap_err());
            assert_eq!(p, before, "{set}");
        }
        for name in PRESETS {
            NetParams::preset(name).unwrap().check().unwrap();
        }
        assert_eq!(
            NetParams::preset("chime").unwrap().values().len(),
            RANGES.len(),
            "every parameter has a range"
        );
        assert!(p.set("bogus=1").unwrap_err().contains("unknown fabric parameter 'bogus'"));
        assert!(p.set("one_way_ns").unwrap_err().contains("name=value"));
        assert!(NetParams::preset("nope").unwrap_err().contains(
            "chime-testbed, sephash-testbed, dolphin-testbed, histore-testbed, smart-bench, stress"
        ));
        let h = NetParams::preset("histore-testbed").unwrap();
        assert_eq!((h.mn_cores, h.mn_workers, h.rpc_ns, h.cn_cores), (4, 4, 100, 20));
        assert_eq!(h.one_way_ns, NetParams::sephash_testbed().one_way_ns);
        let d = NetParams::preset("dolphin-testbed").unwrap();
        assert_eq!((d.header_bytes, d.mtu_bytes, d.pcie_gbps, d.cn_cores), (36, 4096, 126.0, 20));
        let c = NetParams::preset("chime-testbed").unwrap();
        assert_eq!((c.header_bytes, c.mtu_bytes, c.cn_cores, c.mn_cores), (88, 1024, 72, 1));
    }

    #[test]
    fn messages_are_cut_into_packets_and_dma_into_tlps() {
        let c = NetParams::chime_testbed();
        assert_eq!(c.wire_bytes(0), 88, "a READ request: one packet of headers");
        assert_eq!(c.wire_bytes(1024), 1024 + 88, "one full packet");
        assert_eq!(c.wire_bytes(1025), 1025 + 2 * 88, "a byte more is a second packet");
        // 64 B in one TLP of 24 B overhead at 252 Gb/s: 88 * 8000 / 252 ps.
        assert_eq!(c.pcie_ps(64), (88.0f64 * 8000.0 / 252.0).round() as u64);
        assert_eq!(c.pcie_ps(512), ((512.0f64 + 48.0) * 8000.0 / 252.0).round() as u64);
    }

    #[test]
    fn validation_names_the_problem() {
        let mut c = SimConfig::new(1, NetParams::stress());
        assert!(c.validate().is_ok());
        c.faults.crash_prob = 2.0;
        assert!(c.validate().unwrap_err().contains("crash_prob"));
        c.faults.crash_prob = 0.0;
        c.faults.stall_prob = -0.5;
        assert!(c.validate().unwrap_err().contains("stall_prob"));
        c.faults.stall_prob = 0.0;
        c.memory_nodes = 0;
        assert!(c.validate().unwrap_err().contains("memory_nodes"));
    }
}
