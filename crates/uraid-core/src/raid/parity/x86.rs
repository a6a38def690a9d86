//! The x86-64 kernels: AVX2 and AVX-512BW, each with two ways to multiply by
//! a constant.
//!
//! Without GFNI, Q is computed as md's `raid6_avx2x4` does it: times 2 is a
//! byte add (shift left) plus `0x1D` XORed into the bytes whose top bit was
//! set (found with a signed compare against zero, or `vpmovb2m` on
//! AVX-512), and a general constant is two `vpshufb` nibble lookups.
//!
//! With GFNI, both are one `gf2p8affineqb` with an 8x8 bit matrix
//! ([`gf::affine_matrix`]). `gf2p8mulb` is not usable: it reduces by the
//! AES polynomial 0x11B, not RAID 6's 0x11D.
//!
//! Entry points are `#[target_feature]` functions; callers check the CPU
//! first (see `Kernel::is_available`).

use core::arch::x86_64::*;

use super::generic::{self, Finish, Lanes};
use super::gf;
use super::scalar::{Byte, Swar64};

/// The GFNI matrix for multiplication by 2.
const MUL2_MATRIX: i64 = gf::affine_matrix(2) as i64;

/// Broadcasts a 16-byte table to both 128-bit halves of a `__m256i`.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn table256(t: &[u8; 16]) -> __m256i {
    // SAFETY: AVX2 per the contract; `t` is 16 readable bytes.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) }
}

/// Broadcasts a 16-byte table to the four 128-bit lanes of a `__m512i`.
///
/// # Safety
/// The CPU supports AVX-512F.
#[inline(always)]
unsafe fn table512(t: &[u8; 16]) -> __m512i {
    // SAFETY: AVX-512F per the contract; `t` is 16 readable bytes.
    unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr().cast())) }
}

/// 32 bytes in an AVX2 register; constants by `vpshufb` nibble tables.
#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256i);

impl Lanes for Avx2 {
    const WIDTH: usize = 32;
    type MulC = (__m256i, __m256i);
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX2 and 32 readable bytes at `p` (contract of `load`).
        Avx2(unsafe { _mm256_loadu_si256(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: AVX2 and 32 writable bytes at `p` (contract of `store`).
        unsafe { _mm256_storeu_si256(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX2 (contract of the trait).
        Avx2(unsafe { _mm256_setzero_si256() })
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: AVX2 (contract of the trait).
        Avx2(unsafe { _mm256_xor_si256(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: AVX2 (contract of the trait).
        unsafe {
            let x = self.0;
            let top = _mm256_cmpgt_epi8(_mm256_setzero_si256(), x);
            let x2 = _mm256_add_epi8(x, x);
            Avx2(_mm256_xor_si256(
                x2,
                _mm256_and_si256(top, _mm256_set1_epi8(0x1d)),
            ))
        }
    }
    #[inline(always)]
    unsafe fn prep(c: u8) -> Self::MulC {
        let (lo, hi) = gf::nibble_tables(c);
        // SAFETY: AVX2 (contract of the trait).
        unsafe { (table256(&lo), table256(&hi)) }
    }
    #[inline(always)]
    unsafe fn mulc(self, c: &Self::MulC) -> Self {
        // SAFETY: AVX2 (contract of the trait).
        unsafe {
            let m = _mm256_set1_epi8(0x0f);
            let lo = _mm256_and_si256(self.0, m);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(self.0), m);
            Avx2(_mm256_xor_si256(
                _mm256_shuffle_epi8(c.0, lo),
                _mm256_shuffle_epi8(c.1, hi),
            ))
        }
    }
}

/// 32 bytes in an AVX2 register; constants by GFNI affine matrices.
#[derive(Clone, Copy)]
pub(crate) struct Avx2Gfni(__m256i);

impl Lanes for Avx2Gfni {
    const WIDTH: usize = 32;
    type MulC = __m256i;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX2 and 32 readable bytes at `p` (contract of `load`).
        Avx2Gfni(unsafe { _mm256_loadu_si256(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: AVX2 and 32 writable bytes at `p` (contract of `store`).
        unsafe { _mm256_storeu_si256(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX2 (contract of the trait).
        Avx2Gfni(unsafe { _mm256_setzero_si256() })
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: AVX2 (contract of the trait).
        Avx2Gfni(unsafe { _mm256_xor_si256(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: AVX2 and GFNI (contract of the trait).
        Avx2Gfni(unsafe {
            _mm256_gf2p8affine_epi64_epi8::<0>(self.0, _mm256_set1_epi64x(MUL2_MATRIX))
        })
    }
    #[inline(always)]
    unsafe fn prep(c: u8) -> Self::MulC {
        // SAFETY: AVX2 (contract of the trait).
        unsafe { _mm256_set1_epi64x(gf::affine_matrix(c) as i64) }
    }
    #[inline(always)]
    unsafe fn mulc(self, c: &Self::MulC) -> Self {
        // SAFETY: AVX2 and GFNI (contract of the trait).
        Avx2Gfni(unsafe { _mm256_gf2p8affine_epi64_epi8::<0>(self.0, *c) })
    }
}

/// `a ^ b ^ c` in one `vpternlogq`.
///
/// # Safety
/// The CPU supports AVX-512F.
#[inline(always)]
unsafe fn xor3_512(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    // SAFETY: AVX-512F per the contract.
    unsafe { _mm512_ternarylogic_epi64::<0x96>(a, b, c) }
}

/// 64 bytes in an AVX-512 register; constants by `vpshufb` nibble tables.
#[derive(Clone, Copy)]
pub(crate) struct Avx512(__m512i);

impl Lanes for Avx512 {
    const WIDTH: usize = 64;
    type MulC = (__m512i, __m512i);
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX-512F and 64 readable bytes at `p` (contract of `load`).
        Avx512(unsafe { _mm512_loadu_si512(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: AVX-512F and 64 writable bytes at `p` (contract of `store`).
        unsafe { _mm512_storeu_si512(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX-512F (contract of the trait).
        Avx512(unsafe { _mm512_setzero_si512() })
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: AVX-512F (contract of the trait).
        Avx512(unsafe { _mm512_xor_si512(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn xor3(self, b: Self, c: Self) -> Self {
        // SAFETY: AVX-512F (contract of the trait).
        Avx512(unsafe { xor3_512(self.0, b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: AVX-512F and BW (contract of the trait).
        unsafe {
            let x = self.0;
            let top = _mm512_movepi8_mask(x);
            let x2 = _mm512_add_epi8(x, x);
            Avx512(_mm512_xor_si512(
                x2,
                _mm512_maskz_mov_epi8(top, _mm512_set1_epi8(0x1d)),
            ))
        }
    }
    #[inline(always)]
    unsafe fn mul2_xor(self, d: Self) -> Self {
        // SAFETY: AVX-512F and BW (contract of the trait).
        unsafe {
            let x = self.0;
            let top = _mm512_movepi8_mask(x);
            let x2 = _mm512_add_epi8(x, x);
            let poly = _mm512_maskz_mov_epi8(top, _mm512_set1_epi8(0x1d));
            Avx512(xor3_512(x2, poly, d.0))
        }
    }
    #[inline(always)]
    unsafe fn prep(c: u8) -> Self::MulC {
        let (lo, hi) = gf::nibble_tables(c);
        // SAFETY: AVX-512F (contract of the trait).
        unsafe { (table512(&lo), table512(&hi)) }
    }
    #[inline(always)]
    unsafe fn mulc(self, c: &Self::MulC) -> Self {
        // SAFETY: AVX-512F and BW (contract of the trait).
        unsafe {
            let m = _mm512_set1_epi8(0x0f);
            let lo = _mm512_and_si512(self.0, m);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(self.0), m);
            Avx512(_mm512_xor_si512(
                _mm512_shuffle_epi8(c.0, lo),
                _mm512_shuffle_epi8(c.1, hi),
            ))
        }
    }
}

/// 64 bytes in an AVX-512 register; constants by GFNI affine matrices.
#[derive(Clone, Copy)]
pub(crate) struct Avx512Gfni(__m512i);

impl Lanes for Avx512Gfni {
    const WIDTH: usize = 64;
    type MulC = __m512i;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX-512F and 64 readable bytes at `p` (contract of `load`).
        Avx512Gfni(unsafe { _mm512_loadu_si512(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: AVX-512F and 64 writable bytes at `p` (contract of `store`).
        unsafe { _mm512_storeu_si512(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX-512F (contract of the trait).
        Avx512Gfni(unsafe { _mm512_setzero_si512() })
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: AVX-512F (contract of the trait).
        Avx512Gfni(unsafe { _mm512_xor_si512(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn xor3(self, b: Self, c: Self) -> Self {
        // SAFETY: AVX-512F (contract of the trait).
        Avx512Gfni(unsafe { xor3_512(self.0, b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: AVX-512F and GFNI (contract of the trait).
        Avx512Gfni(unsafe {
            _mm512_gf2p8affine_epi64_epi8::<0>(self.0, _mm512_set1_epi64(MUL2_MATRIX))
        })
    }
    #[inline(always)]
    unsafe fn prep(c: u8) -> Self::MulC {
        // SAFETY: AVX-512F (contract of the trait).
        unsafe { _mm512_set1_epi64(gf::affine_matrix(c) as i64) }
    }
    #[inline(always)]
    unsafe fn mulc(self, c: &Self::MulC) -> Self {
        // SAFETY: AVX-512F and GFNI (contract of the trait).
        Avx512Gfni(unsafe { _mm512_gf2p8affine_epi64_epi8::<0>(self.0, *c) })
    }
}

/// Defines the `#[target_feature]` entry points of one kernel: a stripe pass
/// and a delta update over `len` bytes, with `$main` lanes `$u` vectors at a
/// time, then one, then `$half` lanes (a narrower vector), then 8 bytes,
/// then single bytes for the tail.
///
/// `$u` is 4 for AVX2 (8 accumulators of P and Q out of 16 registers, as
/// md's `avx2x4`) and 8 for AVX-512 (16 out of 32).
macro_rules! entry {
    ($stripe:ident, $update:ident, $features:literal, $main:ty, $u:literal, $half:ty) => {
        /// A stripe pass over `len` bytes.
        ///
        /// # Safety
        #[doc = concat!("The CPU supports ", $features, "; every data block that is")]
        /// not a hole of `fin`, and every buffer of `fin`, is valid for
        /// `len` bytes.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $stripe<F: Finish>(data: &[&[u8]], len: usize, fin: &F) {
            // SAFETY: the CPU features of every lane type used here are
            // enabled on this function; buffers: our contract.
            unsafe {
                let off = generic::stripe::<$main, $u, F>(data, 0, len, fin);
                let off = generic::stripe::<$main, 1, F>(data, off, len, fin);
                let off = generic::stripe::<$half, 1, F>(data, off, len, fin);
                let off = generic::stripe::<Swar64, 1, F>(data, off, len, fin);
                generic::stripe::<Byte, 1, F>(data, off, len, fin);
            }
        }

        /// A delta update over `len` bytes.
        ///
        /// # Safety
        #[doc = concat!("The CPU supports ", $features, "; `old`, `new`, `p` (and `q`")]
        /// if `Q`) are valid for `len` bytes.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $update<const Q: bool>(
            old: *const u8,
            new: *const u8,
            p: *mut u8,
            q: *mut u8,
            c: u8,
            len: usize,
        ) {
            // SAFETY: the CPU features of every lane type used here are
            // enabled on this function; buffers: our contract.
            unsafe {
                let off = generic::update::<$main, $u, Q>(old, new, p, q, c, 0, len);
                let off = generic::update::<$main, 1, Q>(old, new, p, q, c, off, len);
                let off = generic::update::<$half, 1, Q>(old, new, p, q, c, off, len);
                let off = generic::update::<Swar64, 1, Q>(old, new, p, q, c, off, len);
                generic::update::<Byte, 1, Q>(old, new, p, q, c, off, len);
            }
        }
    };
}

entry!(stripe_avx2, update_avx2, "avx2", Avx2, 4, Avx2);
entry!(
    stripe_avx2_gfni,
    update_avx2_gfni,
    "avx2,gfni",
    Avx2Gfni,
    4,
    Avx2Gfni
);
entry!(
    stripe_avx512,
    update_avx512,
    "avx2,avx512f,avx512bw",
    Avx512,
    8,
    Avx2
);
entry!(
    stripe_avx512_gfni,
    update_avx512_gfni,
    "avx2,avx512f,avx512bw,gfni",
    Avx512Gfni,
    8,
    Avx2Gfni
);
