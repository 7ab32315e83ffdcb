//! # dmindex-dolphin: Dolphin, a hybrid index of radix inner nodes over B+ leaves
//!
//! Dolphin (MSST '24) keeps the upper levels of an adaptive radix tree over key bytes 0–6
//! (the shared `dmindex_prim::radix` machinery) and stores keys in B+ leaves that each cover a
//! range `[lo, hi]` inside one 7-byte prefix. A leaf that splits hangs, with its new siblings,
//! from a *special* radix node at depth 7 whose slots name each leaf by the last byte of its
//! `lo` and are searched by floor ([`dmindex_prim::radix::NodeImage::floor`]). Writers share a
//! leaf through Spear ([`dmindex_prim::spear`]), the FAA-only lock whose FAA rides in the same
//! doorbell as the leaf READ; structure changes claim the leaf exclusively.
//!
//! # Status
//!
//! This crate is being built in steps and is **not yet an index** (it is in no catalog):
//!
//! | part | state |
//! |---|---|
//! | leaf layout, epochs in every line, cell meta words, split point ([`leaf`]) | done, pinned |
//! | Spear, atomics in doorbells, floor lookup in radix nodes | done (in `prim` and `fabric`) |
//! | search, insert, update, delete inside one leaf, under Spear ([`sync`]) | done, tested |
//! | SMO claim and in-place compaction of a full leaf; split planning ([`smo`]) | done, tested under torn reads |
//! | split publication in the special node, pathfinding with backtracking, scans, the index | to do |
//!
//! # Races the paper leaves open, and how the leaf layout closes them
//!
//! * **Two inserts of one key take two slots.** Key words are written once per leaf epoch, by a
//!   CAS from 0, and an insert takes the *first* free slot of its image; a failed CAS returns the
//!   word, which the inserter treats as a read. So a key holds at most one slot per epoch, and
//!   only an SMO (which Spear keeps away from every insert) rewrites keys. No extra round trip.
//! * **An update writes after a delete and a re-insert reused the slot.** A delete keeps the key
//!   and turns the cell's meta word to DELETED by CAS; an update never writes the meta word; a
//!   slot goes to another key only through an SMO's compaction, which Spear excludes. No extra
//!   round trip.
//! * **A reader sees a key whose value is not written yet.** The cell meta word, in the value's
//!   cache line, is EMPTY until the value WRITE makes it LIVE: a key in an EMPTY cell is a
//!   pending insert and invisible. 8 bytes per slot, no round trip.
//! * **A READ torn across an SMO's in-place rewrite.** Every line carries the leaf epoch; an
//!   image is accepted only if all agree ([`leaf::LeafImage::check`]). One more READ when a
//!   search overlaps a split.

pub mod leaf;
pub mod smo;
pub mod sync;
