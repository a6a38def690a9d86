//! Page-aligned I/O buffers, as O_DIRECT and io_uring need them.
//!
//! Buffers of [`HUGE_MIN`] bytes or more are their own anonymous mappings,
//! aligned to 2 MiB and advised as transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`, which works when the kernel's THP mode is
//! `always` or `madvise`). A 1 MiB O_DIRECT transfer into one huge page is
//! a few physically contiguous segments instead of 256 separate 4 KiB
//! pages: the block layer then need not split the bio (a loop device takes
//! 128 segments), and io_uring, which may not split a request it issues
//! without blocking, does not hand it to a worker thread. On an unthrottled
//! loop device that took uraid's SEQ1M Q8T1 read from the io_uring worker
//! path (one extra kernel thread at ~35% of a core) to the inline one.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every [`IoBuf`], in bytes (one page; enough for O_DIRECT on
/// any logical block size up to 4 KiB).
pub const BUF_ALIGN: usize = 4096;

/// Buffers this large (bytes) or larger are backed by huge pages where
/// the kernel allows it (see the module doc).
pub const HUGE_MIN: usize = 1 << 20;
/// The huge page size the large buffers are aligned to (x86-64 and arm64
/// with 4 KiB pages: 2 MiB).
const HUGE: usize = 2 << 20;

/// A heap buffer aligned to [`BUF_ALIGN`] bytes, zero-filled when made.
///
/// Moving an `IoBuf` moves a pointer, never the bytes, so a buffer handed to
/// the engine stays at the same address until its I/O completes.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Length of its own mapping (a huge-page buffer), 0 for a heap one.
    mapped: usize,
}

// SAFETY: IoBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for IoBuf {}
// SAFETY: shared references only allow reads of the owned bytes.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// Allocates `len` zero bytes (at least one page is reserved so the
    /// pointer is never dangling). Panics only when memory is exhausted,
    /// like `Vec`.
    pub fn new(len: usize) -> IoBuf {
        match Self::alloc(len) {
            Ok(b) => b,
            Err(Some(layout)) => std::alloc::handle_alloc_error(layout),
            Err(None) => panic!("an I/O buffer of {len} bytes cannot exist (its size overflows)"),
        }
    }

    /// Allocates `len` zero bytes, or says why not: for sizes that come
    /// from outside (a length read from a disk or a socket).
    ///
    /// Errors: `OutOfRange` when `len`, rounded up to whole pages, does not
    /// fit the address space (more than `isize::MAX`), or the memory
    /// cannot be had; never a panic, never an abort.
    pub fn try_new(len: usize) -> crate::Result<IoBuf> {
        Self::alloc(len).map_err(|l| {
            let why = if l.is_some() { "not enough memory" } else { "larger than any buffer can be" };
            crate::Error::new(crate::ErrorKind::OutOfRange, format!("an I/O buffer of {len} bytes: {why}"))
        })
    }

    /// The allocation behind `new` and `try_new`: Err(None) when the size
    /// overflows, Err(Some(layout)) when the allocator refused it.
    fn alloc(len: usize) -> std::result::Result<IoBuf, Option<Layout>> {
        let layout = Self::layout(len).ok_or(None)?;
        if len >= HUGE_MIN {
            if let Some(b) = Self::new_huge(len) {
                return Ok(b);
            }
        }
        // SAFETY: the layout has a non-zero size (at least BUF_ALIGN).
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Some(layout))?;
        debug_assert!((ptr.as_ptr() as usize).is_multiple_of(BUF_ALIGN), "the allocator broke the layout's alignment");
        Ok(IoBuf { ptr, len, mapped: 0 })
    }

    /// A buffer in its own 2 MiB-aligned anonymous mapping (zero-filled by
    /// the kernel) advised as huge pages; `None` when the mapping fails
    /// (the caller falls back to the heap).
    fn new_huge(len: usize) -> Option<IoBuf> {
        let size = len.checked_next_multiple_of(HUGE)?;
        let map = size.checked_add(HUGE)?;
        // SAFETY: a new private anonymous mapping; no existing memory is
        // named.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), map, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(HUGE);
        let (head, tail) = (aligned - start, start + map - (aligned + size));
        // SAFETY: the head and tail ranges lie inside the mapping made above
        // and outside the part kept; unmapping them touches nothing else.
        // madvise only advises on the kept part.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((aligned + size) as *mut libc::c_void, tail);
            }
            libc::madvise(aligned as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
        }
        // Fault every page in now (zeroing it, and compacting memory for a
        // huge page if the kernel must), so that the first transfer into
        // the buffer, often a timed one, does not pay for it.
        for off in (0..size).step_by(BUF_ALIGN) {
            // SAFETY: off < size, inside the mapping kept above; the bytes
            // are zero already and stay zero.
            unsafe { std::ptr::write_volatile((aligned + off) as *mut u8, 0) };
        }
        Some(IoBuf { ptr: NonNull::new(aligned as *mut u8)?, len, mapped: size })
    }

    /// The heap layout of a buffer of `len` bytes (whole pages, page
    /// aligned); None when it overflows.
    fn layout(len: usize) -> Option<Layout> {
        let size = len.max(1).checked_next_multiple_of(BUF_ALIGN)?;
        Layout::from_size_align(size, BUF_ALIGN).ok()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to the first byte, for the kernel.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if self.mapped > 0 {
            // SAFETY: the mapping of `mapped` bytes at ptr was made in
            // `new_huge` and is owned by this buffer alone.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
            return;
        }
        // A heap buffer was allocated with this layout, so it exists.
        let Some(layout) = Self::layout(self.len) else { return };
        // SAFETY: allocated in `alloc` with the same layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_that_cannot_be_held_are_refused_not_wrapped() {
        // The crafted journal record length of issue 14, and the largest.
        for len in [0xFFFF_FFFF_FFFF_FE00usize, usize::MAX, usize::MAX - 4095, isize::MAX as usize] {
            let e = IoBuf::try_new(len).expect_err("an impossible size");
            assert!(e.to_string().contains(&format!("{len} bytes")), "{e}");
        }
        assert_eq!(IoBuf::try_new(8192).unwrap().len(), 8192);
        assert!(std::panic::catch_unwind(|| IoBuf::new(usize::MAX - 100)).is_err(), "new must panic, not wrap");
    }

    use super::*;

    #[test]
    fn small_and_large_buffers_are_aligned_zeroed_and_usable() {
        for len in [1, 4096, 128 << 10, HUGE_MIN - 4096, HUGE_MIN, HUGE_MIN + 512, 3 << 20, 64 << 20] {
            let mut b = IoBuf::new(len);
            assert_eq!(b.len(), len);
            let addr = b.as_mut_ptr() as usize;
            assert_eq!(addr % BUF_ALIGN, 0, "{len} bytes at {addr:#x}");
            if len >= HUGE_MIN {
                assert_eq!(addr % HUGE, 0, "a large buffer starts on a huge page: {len} bytes at {addr:#x}");
            }
            assert!(b.iter().all(|&x| x == 0), "{len} bytes not zeroed");
            b[len - 1] = 7;
            b[0] = 9;
            assert_eq!((b[0], b[len - 1]), (9, if len == 1 { 9 } else { 7 }));
        }
    }
}
