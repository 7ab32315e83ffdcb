//! # dmindex-catalog: the one list of indexes and of each paper's figures
//!
//! `bench`, `check`, `experiment`, `memnode` and the CLI's help read names, descriptions, kinds
//! and services from here; the harness is generic and instantiated once per line below, so
//! **adding an index = its crate + one line in [`INDEXES`]** (and a dependency in this crate's
//! manifest, and a row in the README's list at the same position, which a test checks; see
//! `docs/adding-an-index.md`). Paper figures live in [`papers`], one table per paper.
//!
//! # Example
//!
//! What an index is and how `bench` runs it, by name. A library uses the index's own type
//! instead (the catalog's line names it): `dmindex_chime::ChimeRdwc` for `chime`, which `bench`
//! runs behind RDWC ([`RdwcPolicy::On`], the type [`dmindex_prim::rdwc::Rdwc`] around the
//! index; each index crate names its wrapped type, e.g. `dmindex_smart::SmartRdwc`), or
//! `dmindex_sephash::SepHash` for `sephash`.
//!
//! ```
//! use dmindex_catalog::{find, RdwcPolicy};
//! use dmindex_index::IndexKind;
//!
//! let chime = find("chime")?;
//! assert_eq!((chime.kind, chime.rdwc), (IndexKind::Ordered, RdwcPolicy::On));
//! let sephash = find("sephash")?;
//! assert_eq!((sephash.kind, sephash.rdwc), (IndexKind::Point, RdwcPolicy::None));
//! assert!(find("btree").is_err()); // the error lists the known names
//! print!("{}", dmindex_catalog::table()); // what `dmindex indexes` prints
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod papers;

use std::fmt::Write;

use dmindex_bench::{BenchConfig, BenchReport, Runnable, RunnableScans};
use dmindex_conformance::{CheckConfig, SeedReport};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::Services;
use dmindex_index::{
    mn_services, IndexConfig, IndexKind, MnService, Ordered, PointIndex, PointOnly, Scans,
};
use dmindex_prim::rdwc::Rdwc;

/// Whether compute nodes combine concurrent operations on one key (read delegation and write
/// combining, [`dmindex_prim::rdwc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdwcPolicy {
    /// Not used.
    None,
    /// On by default; `--option rdwc=0` turns it off.
    On,
}

/// The key space an index is measured on when no experiment names one (`dmindex perf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySpace {
    /// YCSB's hashed 64-bit keys, as `bench` draws them by default.
    Hashed,
    /// Keys folded into a space twice the items ([`dmindex_bench::Keys::folded`]): the Dolphin
    /// paper's. Dolphin's leaves hold the keys of one 7-byte prefix, so on hashed keys every
    /// key has a leaf of its own and a scan visits one leaf per pair.
    Folded,
}

impl KeySpace {
    /// The name `perf` prints.
    pub fn name(self) -> &'static str {
        match self {
            KeySpace::Hashed => "hashed",
            KeySpace::Folded => "folded",
        }
    }
}

/// One index: what the CLI shows and how the harness runs it.
pub struct IndexEntry {
    pub name: &'static str,
    /// One line for `--help` and `dmindex indexes`.
    pub about: &'static str,
    pub kind: IndexKind,
    pub rdwc: RdwcPolicy,
    /// Services it installs on every memory node.
    pub services: &'static [MnService],
    /// Survives a memory-node crash ([`PointIndex::SURVIVES_MN_CRASH`]).
    pub survives_mn_crash: bool,
    /// Whether it recovers from client crashes when built with a configuration
    /// ([`PointIndex::recovers_client_crashes`]).
    pub recovers_client_crashes: fn(&IndexConfig) -> bool,
    /// The key space it is measured on when none is named.
    pub keys: KeySpace,
    /// `dmindex bench` on it.
    pub bench: fn(&BenchConfig) -> anyhow::Result<BenchReport>,
    /// One seed of `dmindex check` on it.
    pub check: fn(&CheckConfig, u64) -> anyhow::Result<SeedReport>,
}

impl IndexEntry {
    /// Built-in memory-node services on `cores` cores plus this index's.
    pub fn memnode_services(&self, cores: usize) -> anyhow::Result<Services> {
        Ok(mn_services(cores, self.services)?)
    }
}

/// A catalog line for index type `$ty` with scan access `$scans`, optionally behind RDWC.
/// `folded` marks an index measured on [`KeySpace::Folded`] keys.
macro_rules! index {
    ($name:literal, $about:literal, $ty:ty, $scans:ty, rdwc, folded) => {
        index!(@entry $name, $about, Rdwc<$ty>, $scans, RdwcPolicy::On, KeySpace::Folded)
    };
    ($name:literal, $about:literal, $ty:ty, $scans:ty, rdwc) => {
        index!(@entry $name, $about, Rdwc<$ty>, $scans, RdwcPolicy::On, KeySpace::Hashed)
    };
    ($name:literal, $about:literal, $ty:ty, $scans:ty) => {
        index!(@entry $name, $about, $ty, $scans, RdwcPolicy::None, KeySpace::Hashed)
    };
    (@entry $name:literal, $about:literal, $ty:ty, $scans:ty, $rdwc:expr, $keys:expr) => {
        IndexEntry {
            name: $name,
            about: $about,
            kind: <$scans as Scans<LocalTransport, $ty>>::KIND,
            rdwc: $rdwc,
            services: <$ty as PointIndex<LocalTransport>>::SERVICES,
            survives_mn_crash: <$ty as PointIndex<LocalTransport>>::SURVIVES_MN_CRASH,
            recovers_client_crashes: <$ty as PointIndex<LocalTransport>>::recovers_client_crashes,
            keys: $keys,
            bench: run::<$ty, $scans>,
            check: dmindex_conformance::check_seed::<$ty, $scans>,
        }
    };
}

fn run<I: Runnable, S: RunnableScans<I>>(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    dmindex_bench::run::<I, S>(cfg)
}

/// Every index dmindex has, in the order `dmindex indexes` lists them.
pub static INDEXES: &[IndexEntry] = &[
    index!(
        "chime",
        "CHIME (SOSP '24): B+ tree with hopscotch leaves, 3-level optimistic sync",
        dmindex_chime::Chime,
        Ordered,
        rdwc
    ),
    index!(
        "sherman",
        "Sherman (SIGMOD '22, CHIME's enhanced baseline): sorted leaves read whole",
        dmindex_chime::Sherman,
        Ordered,
        rdwc
    ),
    index!(
        "sephash",
        "SepHash (VLDB '24): write-optimised hash, separate Cur/Main segments, append writes",
        dmindex_sephash::SepHash,
        PointOnly
    ),
    index!(
        "race",
        "RACE (ATC '21): one-sided extendible hashing, combined buckets, lock-free reads",
        dmindex_race::Race,
        PointOnly
    ),
    index!(
        "race-sephash",
        "RACE as the SepHash authors ran it: one table-wide split lock, whole-directory re-reads, one-by-one moves",
        dmindex_race::RaceSepHash,
        PointOnly
    ),
    index!(
        "clevel",
        "CLevel (ATC '20) as the SepHash paper ported it: lock-free level hashing, bottom level rehashed upward",
        dmindex_clevel::CLevel,
        PointOnly
    ),
    index!(
        "plush",
        "Plush (PVLDB '22) as the SepHash paper ported it: log-structured leveled hash, runs migrated down by 16",
        dmindex_plush::Plush,
        PointOnly
    ),
    index!(
        "smart",
        "SMART (OSDI '23): adaptive radix tree, lock-free inner nodes, one item per leaf",
        dmindex_smart::Smart,
        Ordered,
        rdwc
    ),
    index!(
        "smart-opt",
        "SMART-Opt: SMART with an unlimited radix cache (the paper's upper bound)",
        dmindex_smart::SmartOpt,
        Ordered,
        rdwc
    ),
    index!(
        "rolex",
        "ROLEX (FAST '23): learned models over fixed-size leaves, synonym chains, one-sided retraining",
        dmindex_rolex::Rolex,
        Ordered,
        rdwc
    ),
    index!(
        "dolphin",
        "Dolphin (MSST '24): radix inner nodes over key bytes 0-6, B+ leaves, Spear, MS-RNIC writes",
        dmindex_dolphin::Dolphin,
        Ordered,
        rdwc,
        folded
    ),
    index!(
        "marlin",
        "Marlin (ICPP '23, Dolphin's baseline): B-link tree, unsorted {key, item pointer} leaves, Spear",
        dmindex_marlin::Marlin,
        Ordered,
        rdwc
    ),
    index!(
        "histore",
        "HiStore (arXiv '22): replicated KV store, hash table on the primary, skiplists on two backups",
        dmindex_histore::HiStore,
        Ordered
    ),
    index!(
        "all-hashtable",
        "HiStore's baseline: three hash tables per group, no scans",
        dmindex_histore::AllHashtable,
        PointOnly
    ),
    index!(
        "all-skiplist",
        "HiStore's baseline: three skiplists per group, GET and SCAN by request",
        dmindex_histore::AllSkiplist,
        Ordered
    ),
    index!(
        "single-hashtable",
        "HiStore's baseline: one unreplicated hash table, no scans",
        dmindex_histore::SingleHashtable,
        PointOnly
    ),
    index!(
        "single-skiplist",
        "HiStore's baseline: one unreplicated skiplist, GET and SCAN by request",
        dmindex_histore::SingleSkiplist,
        Ordered
    ),
    index!(
        "ref",
        "reference: sorted shards behind one remote lock each (the harness's yardstick)",
        dmindex_reference::LockedShards,
        Ordered
    ),
];

/// The index `bench` and `check` run when none is named (a run's default, which the tests
/// check names a catalog line).
pub use dmindex_bench::DEFAULT_INDEX;

/// Index names, in catalog order.
pub fn names() -> Vec<&'static str> {
    INDEXES.iter().map(|e| e.name).collect()
}

/// The index called `name`; the error names the known ones.
pub fn find(name: &str) -> anyhow::Result<&'static IndexEntry> {
    INDEXES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| anyhow::anyhow!("unknown index '{name}' (known: {})", names().join(", ")))
}

/// Runs `dmindex bench` on the index `cfg.index` names.
pub fn bench(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    (find(&cfg.index.name)?.bench)(cfg)
}

/// `--index` help: every name with its one-line description.
pub fn index_help() -> String {
    let mut s = String::from("Index to run:");
    for e in INDEXES {
        let _ = write!(s, "\n  {} — {}", e.name, e.about);
    }
    s
}

/// The table `dmindex indexes` prints.
pub fn table() -> String {
    let w = INDEXES.iter().map(|e| e.name.len()).max().unwrap_or(4);
    let mut s = format!("{:<w$} {:<8} {:<26} {:<9} about\n", "name", "kind", "rdwc", "services");
    for e in INDEXES {
        let rdwc = match e.rdwc {
            RdwcPolicy::None => "-",
            RdwcPolicy::On => "on (--option rdwc=0: off)",
        };
        let services = if e.services.is_empty() {
            "-".to_string()
        } else {
            e.services.iter().map(|m| m.name).collect::<Vec<_>>().join(",")
        };
        let _ =
            writeln!(s, "{:<w$} {:<8} {rdwc:<26} {services:<9} {}", e.name, e.kind.name(), e.about);
    }
    s
}
