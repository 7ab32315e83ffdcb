//! B-link internal nodes on disaggregated memory, shared by the B+ tree designs (CHIME, Sherman,
//! Marlin): the node ([`node::Internal`], drawn in [`layout`]), the CN cache of them, and the
//! tree's internal levels ([`tree::Blink`]: root word, descent, separator insertion).
//!
//! # Why B-link
//!
//! A split writes its new right sibling before the split node points to it, and only then puts
//! the separator into the parent. Between the two the tree is in a *half split*: a key above the
//! split node's high fence is reached by moving right along the sibling pointer, so readers never
//! lock and a crashed splitter leaves a tree that is still searchable (the separator is missing,
//! nothing is lost). The leaf is the design's own; it validates against the expectation the
//! descent hands it ([`tree::Located`]: the leaf's expected sibling, the cached parent).

pub mod layout;
pub mod node;
pub mod tree;

pub use layout::InternalLayout;
pub use node::{Internal, NodeCache, Routes};
pub use tree::{parse_root, root_word, write_split, Accounting, Blink, Located};
