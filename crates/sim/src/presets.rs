//! The named fabric presets, and where every number comes from.
//!
//! No preset parameter is fitted to an index figure of any paper: the papers' index figures are
//! held-out checks of the model (`docs/sim.md`, `dmindex experiment testbed/verbs`). Every value
//! is one of:
//!
//! * **measured** on RDMA hardware and published, with the source named below;
//! * **derived** by arithmetic from measured values or from a specification (header sizes);
//! * **measured here**: the compute-side CPU cost of an index's own work, timed on this
//!   machine's CPU with the indexes' own code (`dmindex cpu-costs`, method in `docs/sim.md`);
//! * **assumed**, where no measurement was found: marked so, and its effect reported.
//!
//! # The NIC: one measurement, every ConnectX-5/6 preset
//!
//! The one published characterisation of a ConnectX-6 serving one-sided verbs that could be
//! checked number by number is the raw data behind Figs. 3, 4 and 13 of Ren et al., "Scaling Up
//! Memory Disaggregated Applications with SMART" (ASPLOS '24; ConnectX-6 200 Gb/s InfiniBand,
//! Xeon Gold 6240R, 8-byte verbs, one compute node's threads against one memory node, each
//! thread posting `depth` verbs and then waiting for them all). From it:
//!
//! | parameter | value | how |
//! |---|---|---|
//! | `read_mops`, `nic_mops` | 111 | 8-byte READs plateau at 111.2 M/s with 96 threads × 8 in flight (Fig. 3a, per-thread doorbells; the same plateau at 48 × 24 and 60 × 16, Fig. 13b). One compute node drives it, so it bounds both the requester's and the responder's rate from below; no separate responder figure was found |
//! | `write_mops` | 90.6 | 8-byte WRITEs plateau at 90.6 M/s the same way (Fig. 3b): READs and WRITEs are not served at one rate |
//! | `doorbell_ns + post_ns` | 296 | one thread with 8 in flight runs 1.81 M READs/s (4.42 µs per round of 8) and twelve threads with 1 in flight 5.10 M/s (2.35 µs per round). A round posts its verbs one after another and then waits for the last: 8p + R = 4.42 µs and p + R = 2.35 µs give p = 296 ns of CPU to post a verb and R = 2.05 µs from the last post to its completion polled. The split of p is *assumed*: 60 ns to build a work request, 236 ns to ring its doorbell (an uncached MMIO write, the part a doorbell batch saves) |
//! | `poll_ns` | 100 | *assumed*: inside R, not separable in these runs; it matters only when a core is shared |
//! | `one_way_ns` | 950 | R less the poll and the model's own queues at idle (two NIC engines, wire time of two small packets, PCIe): about 0.95 µs each way, switch and NIC pipelines and the responder's DMA latency included |
//! | `same_addr_atomic_ns` | 490 | atomics on one word in host memory: 2.04 M CAS/s on a ConnectX-6 (a microbenchmark published with public DM code, weakly sourced; its 8.65 M/s on the NIC's on-chip memory matches the ≈ 4× gap Sherman (SIGMOD '22) reports between the two) |
//! | `atomic_mops` | 40 | *assumed*: no measurement of atomics on distinct words for ConnectX-5/6 was found. The SepHash paper says CAS has a lower ceiling than READ and WRITE (§5.6.3). Its effect is reported with the SepHash figures |
//! | `rpc_ns` | 1500 | *assumed*: one two-sided request served by a memory node's single wimpy core (the CHIME and SepHash papers limit the MN to one core and give no per-request figure). It prices only chunk allocation there, never an index operation; HiStore's servers use eRPC's measured 100 ns instead |
//! | `mn_cores` | 1 | the papers' memory nodes: "1 CPU core" (CHIME §5), "limited to a single CPU core" (SepHash §5.1) |
//! | `jitter_ns` | 40 | not a hardware figure: a uniform 0–40 ns one-way noise so that seeds explore different interleavings; it moves an idle round trip by 20 ns on average |
//!
//! PCIe (Neugebauer et al., "Understanding PCIe performance for end host networking",
//! SIGCOMM '18, and the PCIe specification): 24 bytes of framing, DLL and header per TLP with a
//! 64-bit address (`pcie_tlp_bytes`), 256-byte max payload as ConnectX-5/6 hosts configure it
//! (`pcie_payload_bytes`), Gen3 × 16 = 126 Gb/s raw per direction for ConnectX-5, Gen4 × 16 =
//! 252 Gb/s for ConnectX-6 (`pcie_gbps`).
//!
//! Wire (IBTA specification; RoCEv2 adds Ethernet, IP and UDP): an InfiniBand packet carries
//! LRH 8 + BTH 12 + RETH 16 or AETH 4 + ICRC 4 + VCRC 2 = 30–42 bytes beyond its payload
//! (`header_bytes` 36, their middle); a RoCEv2 packet adds Ethernet 14 + IPv4 20 + UDP 8 + FCS 4
//! and the preamble and gap 20 to BTH, RETH/AETH and ICRC: 82–94 bytes (`header_bytes` 88). The
//! path MTU is 4096 bytes on InfiniBand and 1024 on RoCE with a 1500-byte Ethernet MTU.
//!
//! # The papers' testbeds
//!
//! | preset | paper's testbed | what differs |
//! |---|---|---|
//! | `chime-testbed` | CHIME (SOSP '24, §5): 10 CNs + 1 MN on CloudLab, one 100 Gb/s ConnectX-6 each behind a 100 Gb/s Ethernet switch (RoCE), two 36-core Xeons per CN with 64 clients, 1 MN core | RoCE headers and MTU, PCIe Gen4, `cn_cores` 72 |
//! | `sephash-testbed` | SepHash (VLDB '24, §5.1): 100 Gb/s ConnectX-5 InfiniBand, two 26-core Xeon Gold 5218R per CN, 1 MN core | IB headers and MTU, PCIe Gen3, `cn_cores` 52 |
//! | `dolphin-testbed` | Dolphin (MSST '24, §IV-A): 4 CNs + 4 MNs, 100 Gb/s ConnectX-5 InfiniBand, two 10-core Xeon E5-2640 per CN, 18 threads per CN | as SepHash's, `cn_cores` 20 |
//! | `histore-testbed` | HiStore (§5.1): 100 Gb/s ConnectX-5 InfiniBand, one client machine with two 10-core Xeon Gold 5215 running up to 64 client threads; index servers with 4 RPC and 4 worker threads on eRPC | as SepHash's, `cn_cores` 20, `rpc_ns` 100 (eRPC: 10 M small RPCs/s per core, NSDI '19), `mn_cores` 4, `mn_workers` 4 |
//! | `smart-bench` | the SMART (ASPLOS '24) microbenchmark machine: ConnectX-6 200 Gb/s InfiniBand, 48 cores (96 hardware threads) on the compute node | 200 Gb/s, IB, `cn_cores` 48 |
//! | `stress` | none: a slow, jittery fabric that makes torn reads and reorderings common in correctness tests | everything |
//!
//! Cores are physical cores: more client threads than cores share them.
//!
//! The compute-side costs of an index's own work (`cache_lookup_ns`, `radix_step_ns`,
//! `table_probe_ns`, `key_compare_ns`, `key_hash_ns`, `byte_scanned_ns`) are measured on this
//! machine with the indexes' own code ([`CACHE_LOOKUP_NS`] and the constants after it;
//! `docs/sim.md`); a paper's Xeon of 2016–2021 is taken as this machine's equal.

use crate::config::NetParams;

/// Names accepted by [`NetParams::preset`].
pub const PRESETS: &[&str] = &[
    "chime-testbed",
    "sephash-testbed",
    "dolphin-testbed",
    "histore-testbed",
    "smart-bench",
    "stress",
];

/// The preset runs use when none is named: the RDMA testbed of the CHIME paper (the first of
/// [`PRESETS`]).
pub const DEFAULT_PRESET: &str = PRESETS[0];

/// The preset called `name` (short names without `-testbed` too).
pub(crate) fn named(name: &str) -> Option<NetParams> {
    match name {
        "chime-testbed" | "chime" => Some(NetParams::chime_testbed()),
        "sephash-testbed" | "sephash" => Some(NetParams::sephash_testbed()),
        "dolphin-testbed" | "dolphin" => Some(NetParams::dolphin_testbed()),
        "histore-testbed" | "histore" => Some(NetParams::histore_testbed()),
        "smart-bench" => Some(NetParams::smart_bench()),
        "stress" => Some(NetParams::stress()),
        _ => None,
    }
}

/// Compute-side CPU costs per unit of an index's own work, measured on this machine with the
/// indexes' own code (`dmindex cpu-costs`; `docs/sim.md` gives the method and the runs). A
/// cache lookup's cost depends on the cache's size (it misses the CPU's caches more as the
/// cache grows: 235–270 ns at 25 k internal nodes, 438 at 100 k, 883 at 400 k, 1.3–2.2 µs at
/// 1 M), so each testbed charges it at the size its paper's caches had: CHIME's and Sherman's
/// at 60 M items (≈ 24 MB, 25 k nodes), Dolphin's Table II caches (320–460 MB, ≈ 400 k nodes).
pub const CACHE_LOOKUP_NS: f64 = 250.0;
/// One cache lookup in a cache of ≈ 400 k nodes (the Dolphin paper's).
pub const LARGE_CACHE_LOOKUP_NS: f64 = 880.0;
/// One radix-cache copy looked up, in a cache of ≈ 25 k copies (101–124 ns).
pub const RADIX_STEP_NS: f64 = 110.0;
/// One radix-cache copy looked up in a cache of the Dolphin paper's size (≈ 400 k: 336 ns).
pub const LARGE_RADIX_STEP_NS: f64 = 336.0;
/// One probe of a directly indexed table (CHIME's hotspot buffer at its size beside a
/// 25 k-node cache: 95–97 ns).
pub const TABLE_PROBE_NS: f64 = 96.0;
/// One table probe beside caches of the Dolphin paper's size (140 ns).
pub const LARGE_TABLE_PROBE_NS: f64 = 140.0;
/// One key compared in a sorted leaf.
pub const KEY_COMPARE_NS: f64 = 8.0;
/// One 8-byte key hashed.
pub const KEY_HASH_NS: f64 = 1.2;
/// One byte decoded or checked after a READ.
pub const BYTE_SCANNED_NS: f64 = 0.15;

impl NetParams {
    /// The ConnectX-6 of the SMART microbenchmarks on InfiniBand at `gbps` (module docs).
    fn connectx(gbps: f64) -> NetParams {
        NetParams {
            one_way_ns: 950,
            jitter_ns: 40,
            link_gbps: gbps,
            mtu_bytes: 4096,
            header_bytes: 36,
            nic_mops: 111.0,
            read_mops: 111.0,
            write_mops: 90.6,
            atomic_mops: 40.0,
            same_addr_atomic_ns: 490,
            pcie_gbps: 252.0,
            pcie_tlp_bytes: 24,
            pcie_payload_bytes: 256,
            post_ns: 60,
            doorbell_ns: 236,
            poll_ns: 100,
            cn_cores: 0,
            cache_lookup_ns: CACHE_LOOKUP_NS,
            radix_step_ns: RADIX_STEP_NS,
            table_probe_ns: TABLE_PROBE_NS,
            key_compare_ns: KEY_COMPARE_NS,
            key_hash_ns: KEY_HASH_NS,
            byte_scanned_ns: BYTE_SCANNED_NS,
            rpc_ns: 1500,
            mn_cores: 1,
            mn_workers: 0,
        }
    }

    /// The machine of the SMART microbenchmarks: ConnectX-6 200 Gb/s InfiniBand, 48 cores.
    pub fn smart_bench() -> NetParams {
        NetParams { cn_cores: 48, ..NetParams::connectx(200.0) }
    }

    /// The CHIME testbed: 100 Gb/s ConnectX-6 on RoCE, 72-core CNs, one MN core.
    pub fn chime_testbed() -> NetParams {
        NetParams { mtu_bytes: 1024, header_bytes: 88, cn_cores: 72, ..NetParams::connectx(100.0) }
    }

    /// The SepHash testbed: 100 Gb/s ConnectX-5 InfiniBand on PCIe Gen3, 52-core CNs, one MN
    /// core.
    pub fn sephash_testbed() -> NetParams {
        NetParams { pcie_gbps: 126.0, cn_cores: 52, ..NetParams::connectx(100.0) }
    }

    /// The Dolphin testbed: the SepHash testbed's NIC and fabric, 20-core CNs, caches of the
    /// paper's hundreds of MB.
    pub fn dolphin_testbed() -> NetParams {
        NetParams {
            cn_cores: 20,
            cache_lookup_ns: LARGE_CACHE_LOOKUP_NS,
            radix_step_ns: LARGE_RADIX_STEP_NS,
            table_probe_ns: LARGE_TABLE_PROBE_NS,
            ..NetParams::sephash_testbed()
        }
    }

    /// The HiStore testbed: the SepHash testbed's NIC and fabric, a 20-core client machine,
    /// index servers with four request cores and four worker cores on eRPC.
    pub fn histore_testbed() -> NetParams {
        NetParams {
            cn_cores: 20,
            mn_cores: 4,
            mn_workers: 4,
            rpc_ns: 100,
            ..NetParams::sephash_testbed()
        }
    }

    /// A slow, jittery fabric for correctness tests: long and variable service intervals make
    /// torn reads and reordered arrivals common.
    pub fn stress() -> NetParams {
        NetParams {
            one_way_ns: 500,
            jitter_ns: 2000,
            link_gbps: 0.5,
            mtu_bytes: 4096,
            header_bytes: 16,
            nic_mops: 20.0,
            read_mops: 20.0,
            write_mops: 20.0,
            atomic_mops: 10.0,
            same_addr_atomic_ns: 50,
            pcie_gbps: 1000.0,
            pcie_tlp_bytes: 0,
            pcie_payload_bytes: 4096,
            post_ns: 10,
            doorbell_ns: 0,
            poll_ns: 0,
            cn_cores: 0,
            cache_lookup_ns: 0.0,
            radix_step_ns: 0.0,
            table_probe_ns: 0.0,
            key_compare_ns: 0.0,
            key_hash_ns: 0.0,
            byte_scanned_ns: 0.0,
            rpc_ns: 500,
            mn_cores: 2,
            mn_workers: 0,
        }
    }
}
