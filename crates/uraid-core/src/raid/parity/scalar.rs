//! The portable kernel: 8 bytes at a time in a `u64` ("SIMD within a
//! register", as md's `int64` code), then single bytes for the tail. It is
//! the reference the SIMD kernels are tested against, and the only kernel on
//! CPUs other than x86-64.

use super::generic::{self, Finish, Lanes};
use super::gf;

/// One byte.
#[derive(Clone, Copy)]
pub(crate) struct Byte(u8);

impl Lanes for Byte {
    const WIDTH: usize = 1;
    type MulC = u8;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: `p` is valid for 1 byte (contract of `load`).
        Byte(unsafe { p.read() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: `p` is valid for 1 byte (contract of `store`).
        unsafe { p.write(self.0) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Byte(0)
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        Byte(self.0 ^ o.0)
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        Byte(gf::mul2(self.0))
    }
    #[inline(always)]
    unsafe fn prep(c: u8) -> u8 {
        c
    }
    #[inline(always)]
    unsafe fn mulc(self, c: &u8) -> Self {
        Byte(gf::mul(self.0, *c))
    }
}

/// Eight bytes in a `u64`.
#[derive(Clone, Copy)]
pub(crate) struct Swar64(u64);

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;

impl Lanes for Swar64 {
    const WIDTH: usize = 8;
    type MulC = ([u8; 16], [u8; 16]);
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: `p` is valid for 8 bytes (contract of `load`).
        Swar64(unsafe { p.cast::<u64>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: `p` is valid for 8 bytes (contract of `store`).
        unsafe { p.cast::<u64>().write_unaligned(self.0) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Swar64(0)
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        Swar64(self.0 ^ o.0)
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // Shift each byte left without carrying into the next one, then XOR
        // 0x1D into the bytes whose top bit fell out: (top bit >> 7) * 0x1D
        // is 0x1D or 0 in each byte, with no carry between bytes.
        let x = self.0;
        Swar64(((x & LOW7) << 1) ^ (((x & HIGH) >> 7) * 0x1d))
    }
    #[inline(always)]
    unsafe fn prep(c: u8) -> Self::MulC {
        gf::nibble_tables(c)
    }
    #[inline(always)]
    unsafe fn mulc(self, c: &Self::MulC) -> Self {
        let mut b = self.0.to_le_bytes();
        for x in b.iter_mut() {
            *x = c.0[(*x & 15) as usize] ^ c.1[(*x >> 4) as usize];
        }
        Swar64(u64::from_le_bytes(b))
    }
}

/// A stripe pass over `len` bytes with the scalar kernel.
///
/// # Safety
/// Every data block that is not a hole of `fin`, and every buffer of `fin`,
/// is valid for `len` bytes.
pub(crate) unsafe fn stripe<F: Finish>(data: &[&[u8]], len: usize, fin: &F) {
    // SAFETY: these lanes need no CPU extension; buffers: our contract.
    unsafe {
        let off = generic::stripe::<Swar64, 4, F>(data, 0, len, fin);
        let off = generic::stripe::<Swar64, 1, F>(data, off, len, fin);
        generic::stripe::<Byte, 1, F>(data, off, len, fin);
    }
}

/// A delta update over `len` bytes with the scalar kernel.
///
/// # Safety
/// `old`, `new`, `p` (and `q` if `Q`) are valid for `len` bytes.
pub(crate) unsafe fn update<const Q: bool>(
    old: *const u8,
    new: *const u8,
    p: *mut u8,
    q: *mut u8,
    c: u8,
    len: usize,
) {
    // SAFETY: these lanes need no CPU extension; buffers: our contract.
    unsafe {
        let off = generic::update::<Swar64, 4, Q>(old, new, p, q, c, 0, len);
        let off = generic::update::<Swar64, 1, Q>(old, new, p, q, c, off, len);
        generic::update::<Byte, 1, Q>(old, new, p, q, c, off, len);
    }
}
