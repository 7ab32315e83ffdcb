//! # dmindex-ycsb: workloads as YCSB 0.17 makes them
//!
//! * [`generators`]: `fnvhash64`, Zipfian (Gray et al.), ScrambledZipfian (ζ for 10^10 items),
//!   SkewedLatest, the acknowledged insert counter — the same constants and arithmetic as YCSB's
//!   Java, pinned by YCSB's own test vectors.
//! * [`workload`]: LOAD and A–F with YCSB's proportions (one uniform draw against the normalised
//!   weights), E's scan lengths uniform in 1..=100, F's read-modify-write, hashed or ordered insert
//!   order; keys as 8-byte integers, fixed-size `user…` strings, or exactly YCSB's own
//!   ([`KeyFormat::ycsb`]).
//! * [`trace`]: replay of real YCSB output and of the compact `OP key [len]` traces of the
//!   CHIME/SMART pipeline, and the keys of a YCSB load ([`trace::read_load`]); malformed lines
//!   are errors naming file and line.

pub mod generators;
pub mod trace;
pub mod twitter;
pub mod twitter_standin;
pub mod workload;

pub use workload::{
    ClientStream, Distribution, KeyFormat, KeyStyle, Op, OpKind, PlannedOp, Shared, WorkloadSpec,
    YCSB_MAX_KEY_LEN,
};
