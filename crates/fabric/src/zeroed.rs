//! Zeroed arrays of atomics that the OS commits lazily, on small or on transparent huge pages:
//! the backing store of a memory node's [`Region`](crate::memory::Region).
//!
//! # Why huge pages
//!
//! A region is large (a gigabyte by default) and an index touches it at random: a search READs
//! a few lines of one leaf among tens of thousands. On 4 KiB pages nearly every such READ misses
//! the TLB, and its page walk (two-dimensional in a virtual machine) stalls the very prefetch
//! that is meant to fetch the READ's lines in parallel — profiled on CHIME YCSB C at 1 M items,
//! most of a READ's samples sat on that prefetch. One 2 MiB page covers 512 times as much. A NIC
//! sees the same effect, which is why RDMA systems register their pools on huge pages.
//!
//! # Why not always
//!
//! A huge page is committed whole at its first touch. Clients carve their allocations from
//! chunks of 16 MiB, so a cluster of many clients that each use a little of their chunk commits
//! a huge page per chunk: the simulator at the CHIME paper's shape (1280 clients, 200 k items)
//! grew from 42 MB to 714 MB of memory. Simulated clusters therefore stay on small pages; the
//! in-process cluster, a few threads on one machine, takes huge ones.
//!
//! # How
//!
//! An anonymous private mapping, zero-filled on first touch, advised `MADV_HUGEPAGE` (kernels
//! set to grant transparent huge pages only on request, a common default, need the advice).
//! The advice is a hint: where the kernel has none to give, the mapping works on small pages.
//! Elsewhere than Linux the array comes from the allocator's `alloc_zeroed`.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Types for which all-zero bytes are a valid value and that are safe to share: what a
/// [`Zeroed`] may hold.
pub(crate) trait ZeroIsValid: Send + Sync + Sized {}
impl ZeroIsValid for AtomicU64 {}
impl ZeroIsValid for AtomicU32 {}

/// The pages an array lives on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pages {
    /// The base pages (4 KiB): memory committed in small steps.
    #[default]
    Small,
    /// Transparent huge pages (2 MiB) where the kernel grants them, small ones elsewhere.
    Huge,
}

/// Below this many bytes an array stays on small pages (a huge page would commit more than it
/// holds).
const HUGE_FROM: usize = 2 << 20;

/// `n` zeroed `T`s, owned, freed on drop.
pub(crate) struct Zeroed<T: ZeroIsValid> {
    ptr: NonNull<T>,
    n: usize,
}

// SAFETY: a `Zeroed` owns its array exclusively (like a `Box<[T]>`), and `T` is `Send + Sync`.
unsafe impl<T: ZeroIsValid> Send for Zeroed<T> {}
// SAFETY: shared access only hands out `&[T]`, and `T` is `Sync`.
unsafe impl<T: ZeroIsValid> Sync for Zeroed<T> {}

impl<T: ZeroIsValid> Zeroed<T> {
    /// `n` (> 0) zeroed `T`s on `pages`, or `None` if the machine will not give that much.
    pub(crate) fn new(n: usize, pages: Pages) -> Option<Zeroed<T>> {
        assert!(n > 0, "zero-sized array");
        let bytes = n.checked_mul(size_of::<T>())?;
        let ptr = NonNull::new(map(bytes, pages == Pages::Huge)?.cast::<T>())?;
        Some(Zeroed { ptr, n })
    }

    fn bytes(&self) -> usize {
        self.n * size_of::<T>()
    }
}

impl<T: ZeroIsValid> Deref for Zeroed<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `n` initialised `T`s (all-zero bytes are a valid `T`), aligned
        // (a page, or the allocator honoured `T`'s layout), alive until `self` drops, and
        // never handed out mutably.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.n) }
    }
}

impl<T: ZeroIsValid> Drop for Zeroed<T> {
    fn drop(&mut self) {
        unmap(self.ptr.as_ptr().cast(), self.bytes());
    }
}

#[cfg(target_os = "linux")]
fn map(bytes: usize, huge: bool) -> Option<*mut u8> {
    // SAFETY: a fresh anonymous private mapping: no file, no fixed address, so it aliases
    // nothing; the kernel zero-fills its pages on first touch.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    if huge && bytes >= HUGE_FROM {
        // SAFETY: `p .. p + bytes` is the mapping just made; the advice changes no contents.
        // Its failure only leaves the mapping on small pages.
        let _ = unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
    }
    Some(p.cast())
}

#[cfg(target_os = "linux")]
fn unmap(p: *mut u8, bytes: usize) {
    // SAFETY: `p .. p + bytes` is a mapping made by `map` and owned by the dropping `Zeroed`,
    // whose slice is gone with it.
    let _ = unsafe { libc::munmap(p.cast(), bytes) };
}

#[cfg(not(target_os = "linux"))]
fn map(bytes: usize, _huge: bool) -> Option<*mut u8> {
    let layout = std::alloc::Layout::from_size_align(bytes, 8).ok()?;
    // SAFETY: `layout` has non-zero size (callers ask for at least one element).
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    (!p.is_null()).then_some(p)
}

#[cfg(not(target_os = "linux"))]
fn unmap(p: *mut u8, bytes: usize) {
    let layout = std::alloc::Layout::from_size_align(bytes, 8).expect("layout made by map");
    // SAFETY: `p` came from `alloc_zeroed` with this very layout in `map`.
    unsafe { std::alloc::dealloc(p, layout) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Zeroed, writable, and independent arrays, small and huge.
    #[test]
    fn arrays_are_zeroed_and_writable() {
        let sizes = [2, 1000, (HUGE_FROM / 8) * 3 + 5];
        for (n, pages) in sizes.into_iter().flat_map(|n| [(n, Pages::Small), (n, Pages::Huge)]) {
            let a = Zeroed::<AtomicU64>::new(n, pages).unwrap();
            let b = Zeroed::<AtomicU32>::new(n, pages).unwrap();
            assert_eq!(a.len(), n);
            assert!(a.iter().step_by(4099).all(|w| w.load(Ordering::Relaxed) == 0));
            assert_eq!(a[n - 1].load(Ordering::Relaxed), 0);
            a[n - 1].store(7, Ordering::Relaxed);
            b[0].store(9, Ordering::Relaxed);
            assert_eq!((a[n - 1].load(Ordering::Relaxed), a[0].load(Ordering::Relaxed)), (7, 0));
            assert_eq!(b[0].load(Ordering::Relaxed), 9);
        }
    }

    /// Sizes the machine cannot map are refused, not a panic or an abort.
    #[test]
    fn absurd_sizes_are_refused() {
        for pages in [Pages::Small, Pages::Huge] {
            assert!(Zeroed::<AtomicU64>::new(usize::MAX / 4, pages).is_none());
            assert!(Zeroed::<AtomicU64>::new(1 << 50, pages).is_none());
        }
    }
}
