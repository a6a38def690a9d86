//! Page-aligned I/O buffers, as O_DIRECT and io_uring need them.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every [`IoBuf`], in bytes (one page; enough for O_DIRECT on
/// any logical block size up to 4 KiB).
pub const BUF_ALIGN: usize = 4096;

/// A heap buffer aligned to [`BUF_ALIGN`] bytes, zero-filled when made.
///
/// Moving an `IoBuf` moves a pointer, never the bytes, so a buffer handed to
/// the engine stays at the same address until its I/O completes.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
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
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (at least BUF_ALIGN).
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        IoBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        let size = len.max(1).next_multiple_of(BUF_ALIGN);
        Layout::from_size_align(size, BUF_ALIGN).expect("buffer size overflows")
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
        // SAFETY: allocated in `new` with the same layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes)", self.len)
    }
}
