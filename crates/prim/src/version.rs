//! Version bytes: a node-level version (NV) and an entry-level version (EV) in one byte.
//!
//! # Layout
//!
//! Every object of a versioned node (header, metadata replica, entry) starts with one byte:
//!
//! ```text
//!   bit 7 .. 4   bit 3 .. 0
//! +------------+------------+
//! |     EV     |     NV     |      each wraps at 16
//! +------------+------------+
//! ```
//!
//! # Protocol
//!
//! * A **node write** (one that may move entries: a split, a shift) bumps the node's NV and
//!   stamps every object with it ([`bump_nv`], [`with_nv`]). A reader that finds objects with
//!   different NVs ([`nv`]) saw a node write in flight and reads again.
//! * An **entry write** bumps only that entry's EV ([`bump_ev`]), leaving NV alone, so writing
//!   one entry does not invalidate readers of the others. Cache-line versions
//!   ([`crate::cacheline`]) copy the whole byte, so a reader still sees a half-written entry as
//!   torn.

/// Node-level version.
#[inline]
pub fn nv(v: u8) -> u8 {
    v & 0x0F
}

/// Whether objects carry more than one NV, given `differ`: the or of every object's version
/// byte xored with one of them's (a load, an xor and an or an object, then this one test; their
/// EVs may differ).
#[inline]
pub fn nv_mixed(differ: u8) -> bool {
    nv(differ) != 0
}

/// `v` with NV incremented (EV kept).
#[inline]
pub fn bump_nv(v: u8) -> u8 {
    (v & 0xF0) | (v.wrapping_add(1) & 0x0F)
}

/// `v` with EV incremented (NV kept).
#[inline]
pub fn bump_ev(v: u8) -> u8 {
    v.wrapping_add(0x10)
}

/// `v` with its NV replaced (EV kept).
#[inline]
pub fn with_nv(v: u8, nv: u8) -> u8 {
    (v & 0xF0) | (nv & 0x0F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_wrap_per_nibble() {
        assert_eq!(bump_nv(0x3F), 0x30);
        assert_eq!(bump_ev(0xF3), 0x03);
        assert_eq!(nv(0xA7), 7);
        assert_eq!(with_nv(0xA7, 2), 0xA2);
    }

    #[test]
    fn xor_folds_see_nvs_not_evs() {
        for v in 0..=255u8 {
            assert!(!nv_mixed(v ^ bump_ev(v)), "{v:#x}");
            assert!(nv_mixed(v ^ bump_nv(v)), "{v:#x}");
            assert!(nv_mixed((v ^ v) | (v ^ bump_ev(bump_nv(v)))), "{v:#x}");
        }
    }

    #[test]
    fn nv_and_ev_do_not_disturb_each_other() {
        for v in 0..=255u8 {
            assert_eq!(nv(bump_ev(v)), nv(v));
            assert_eq!(bump_nv(v) & 0xF0, v & 0xF0);
            assert_eq!(nv(bump_nv(v)), (nv(v) + 1) % 16);
        }
    }
}
