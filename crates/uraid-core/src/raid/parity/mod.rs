//! Parity for RAID 5 (P) and RAID 6 (P and Q): generation, delta update for
//! read-modify-write, and recovery of lost members.
//!
//! # The math
//!
//! For one stripe of `n` data blocks `D0 .. D(n-1)` (the chunks of one
//! stripe, all the same length; every byte position is independent):
//!
//! - `P = D0 ^ D1 ^ ... ^ D(n-1)` (RAID 5 and RAID 6);
//! - `Q = g^0*D0 ^ g^1*D1 ^ ... ^ g^(n-1)*D(n-1)` (RAID 6), in GF(2^8) with
//!   polynomial 0x11D and generator g = 2 (see [`gf`]).
//!
//! This is H. Peter Anvin's "The mathematics of RAID-6" and Linux md's
//! `lib/raid6` (and ISA-L's `pq_gen`), byte for byte, so arrays can be
//! checked against md's. The index of a data block in Q is its position in
//! the stripe's data (0-based, P and Q not counted), not its member number.
//! Q needs distinct coefficients, so a stripe has at most [`MAX_DATA`] = 255
//! data blocks for RAID 6.
//!
//! # Shapes and units
//!
//! A stripe's data is passed as `data: &[&[u8]]`, block `i` at `data[i]`.
//! Lengths are in bytes, any length (0 included); every block, P and Q of one
//! call have the same length, and no alignment is needed. The recovery
//! functions take the whole data array with the lost blocks in it as
//! "holes": `data[x]` of a lost block is not read and may be any slice (an
//! empty one, say); the rebuilt bytes go to separate output slices.
//! [`recover_raid5`] and [`recover_raid6`] instead take the stripe as one
//! array of mutable blocks (data, then P, then Q) and rebuild the lost ones
//! in place. Misuse (lengths that differ, an index out of range, too many
//! data blocks) panics, as slice indexing does.
//!
//! # Kernels
//!
//! A [`Kernel`] is one implementation of all the operations: a portable
//! scalar one (the reference, 8 bytes at a time in a `u64`) and SIMD ones
//! for x86-64 (AVX2 and AVX-512BW, each with or without GFNI for the
//! multiplications). The free functions use [`Kernel::detect`], the best
//! kernel of the running CPU, found once; the methods of [`Kernel`] force
//! one. Q generation follows md's `avx2x4`: walk the data blocks from the
//! highest index down with `Q = Q * 2 ^ D`, several vectors at a time,
//! `* 2` being a byte add plus `0x1D` into the bytes that overflowed (or one
//! GFNI affine instruction). Recovery makes a single pass over the
//! survivors and writes the lost blocks at the end of it.
//!
//! # Example
//!
//! ```
//! use uraid_core::raid::parity;
//!
//! let (d0, d1, d2) = (vec![1u8; 4096], vec![2u8; 4096], vec![3u8; 4096]);
//! let (mut p, mut q) = (vec![0u8; 4096], vec![0u8; 4096]);
//! parity::gen_pq(&[&d0, &d1, &d2], &mut p, &mut q);
//!
//! // Data blocks 0 and 2 are lost: rebuild them from block 1, P and Q.
//! let (mut r0, mut r2) = (vec![0u8; 4096], vec![0u8; 4096]);
//! parity::recover_two_data(&[&[], &d1, &[]], 0, 2, &p, &q, &mut r0, &mut r2);
//! assert!(r0 == d0 && r2 == d2);
//!
//! // Block 1 is rewritten (read-modify-write): update P and Q by the delta.
//! let new1 = vec![7u8; 4096];
//! parity::update_pq(1, &d1, &new1, &mut p, &mut q);
//! let (mut p2, mut q2) = (vec![0u8; 4096], vec![0u8; 4096]);
//! parity::gen_pq(&[&d0, &new1, &d2], &mut p2, &mut q2);
//! assert!(p == p2 && q == q2);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod generic;
pub mod gf;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::atomic::{AtomicU8, Ordering};

use generic::{Finish, GenP, GenPq, GenQ, RecoverDataP, RecoverDataQ, RecoverOne, RecoverTwo};

/// Most data blocks in a RAID 6 stripe (and in the in-place
/// [`recover_raid5`] / [`recover_raid6`]): the coefficients g^i of Q are
/// distinct only for i < 255.
pub const MAX_DATA: usize = 255;

/// One implementation of the parity operations.
///
/// All kernels give the same bytes. Which exist on the running CPU is told
/// by [`Kernel::is_available`]; using a kernel that is not available panics
/// (it never executes an unsupported instruction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Portable: 8 bytes at a time in a `u64`. Always available.
    Scalar,
    /// x86-64 AVX2, 32 bytes a vector, 128 bytes a step; multiplication by
    /// constants with `vpshufb` nibble tables.
    Avx2,
    /// x86-64 AVX2 with GFNI (`gf2p8affineqb` for multiplications).
    Avx2Gfni,
    /// x86-64 AVX-512F and AVX-512BW, 64 bytes a vector, 512 bytes a step.
    Avx512,
    /// x86-64 AVX-512F, AVX-512BW and GFNI.
    Avx512Gfni,
}

/// Bit 7: computed; bit `k`: `Kernel::ALL[k]` is available.
static AVAILABLE: AtomicU8 = AtomicU8::new(0);
/// 0: not yet detected; else 1 + index in `Kernel::ALL` of the best kernel.
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// The kernels in the order [`Kernel::detect`] prefers them. On an AMD Zen 4
/// (which has all of them) AVX-512 with GFNI was the fastest for P+Q and
/// recovery in `examples/parity_bench.rs`; P alone is bound by memory with
/// every kernel. CPUs with both AVX-512 and GFNI have all four x86 kernels,
/// so the order of the middle two only matters on CPUs that lack one.
const PREFERENCE: [Kernel; 5] = [
    Kernel::Avx512Gfni,
    Kernel::Avx512,
    Kernel::Avx2Gfni,
    Kernel::Avx2,
    Kernel::Scalar,
];

fn available_mask() -> u8 {
    let m = AVAILABLE.load(Ordering::Relaxed);
    if m != 0 {
        return m;
    }
    #[allow(unused_mut)]
    let mut m = 0x80 | 1 << Kernel::Scalar as u8;
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        let gfni = std::arch::is_x86_feature_detected!("gfni");
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw");
        for (k, on) in [
            (Kernel::Avx2, avx2),
            (Kernel::Avx2Gfni, avx2 && gfni),
            (Kernel::Avx512, avx2 && avx512),
            (Kernel::Avx512Gfni, avx2 && avx512 && gfni),
        ] {
            if on {
                m |= 1 << k as u8;
            }
        }
    }
    AVAILABLE.store(m, Ordering::Relaxed);
    m
}

impl Kernel {
    /// Every kernel, available here or not.
    pub const ALL: [Kernel; 5] = [
        Kernel::Scalar,
        Kernel::Avx2,
        Kernel::Avx2Gfni,
        Kernel::Avx512,
        Kernel::Avx512Gfni,
    ];

    /// Short lowercase name, as printed by the benchmark: `scalar`, `avx2`,
    /// `avx2+gfni`, `avx512`, `avx512+gfni`.
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Avx2 => "avx2",
            Kernel::Avx2Gfni => "avx2+gfni",
            Kernel::Avx512 => "avx512",
            Kernel::Avx512Gfni => "avx512+gfni",
        }
    }

    /// Whether the running CPU has what this kernel needs (checked once with
    /// `is_x86_feature_detected!`, then cached).
    pub fn is_available(self) -> bool {
        available_mask() & (1 << self as u8) != 0
    }

    /// The kernels available on the running CPU, in the order of
    /// [`Kernel::ALL`] (scalar first).
    pub fn available() -> impl Iterator<Item = Kernel> {
        Self::ALL.into_iter().filter(|k| k.is_available())
    }

    /// The best kernel for the running CPU (found once, then cached):
    /// AVX-512 with GFNI, AVX-512, AVX2 with GFNI, AVX2, scalar, the first
    /// that is available.
    pub fn detect() -> Kernel {
        let d = DETECTED.load(Ordering::Relaxed);
        if d != 0 {
            return Self::ALL[d as usize - 1];
        }
        let k = PREFERENCE
            .into_iter()
            .find(|k| k.is_available())
            .unwrap_or(Kernel::Scalar);
        DETECTED.store(k as u8 + 1, Ordering::Relaxed);
        k
    }

    #[track_caller]
    fn check_available(self) {
        assert!(
            self.is_available(),
            "parity kernel {} is not available on this CPU; use Kernel::detect()",
            self.name()
        );
    }

    /// Runs a stripe pass of `len` bytes with this kernel.
    ///
    /// # Safety
    /// Every data block that is not a hole of `fin`, and every buffer of
    /// `fin`, is valid for `len` bytes; outputs do not overlap inputs.
    #[track_caller]
    unsafe fn stripe<F: Finish>(self, data: &[&[u8]], len: usize, fin: &F) {
        self.check_available();
        // SAFETY: the kernel is available (checked above), so the CPU has its
        // features; buffers: our contract.
        unsafe {
            match self {
                Kernel::Scalar => scalar::stripe(data, len, fin),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => x86::stripe_avx2(data, len, fin),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2Gfni => x86::stripe_avx2_gfni(data, len, fin),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512 => x86::stripe_avx512(data, len, fin),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512Gfni => x86::stripe_avx512_gfni(data, len, fin),
                #[cfg(not(target_arch = "x86_64"))]
                _ => unreachable!("only the scalar kernel is available off x86-64"),
            }
        }
    }

    /// Runs a delta update of `len` bytes with this kernel.
    ///
    /// # Safety
    /// `old`, `new`, `p` (and `q` if `Q`) are valid for `len` bytes; `p` and
    /// `q` overlap nothing else.
    #[track_caller]
    unsafe fn update<const Q: bool>(
        self,
        old: *const u8,
        new: *const u8,
        p: *mut u8,
        q: *mut u8,
        c: u8,
        len: usize,
    ) {
        self.check_available();
        // SAFETY: the kernel is available (checked above), so the CPU has its
        // features; buffers: our contract.
        unsafe {
            match self {
                Kernel::Scalar => scalar::update::<Q>(old, new, p, q, c, len),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => x86::update_avx2::<Q>(old, new, p, q, c, len),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2Gfni => x86::update_avx2_gfni::<Q>(old, new, p, q, c, len),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512 => x86::update_avx512::<Q>(old, new, p, q, c, len),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512Gfni => x86::update_avx512_gfni::<Q>(old, new, p, q, c, len),
                #[cfg(not(target_arch = "x86_64"))]
                _ => unreachable!("only the scalar kernel is available off x86-64"),
            }
        }
    }

    /// RAID 5 parity: `p = data[0] ^ data[1] ^ ...` (all zero for no data).
    ///
    /// Panics if a block's length differs from `p`'s, or if the kernel is
    /// not available.
    #[track_caller]
    pub fn gen_p(self, data: &[&[u8]], p: &mut [u8]) {
        check_data(data, p.len(), [usize::MAX; 2], usize::MAX);
        let fin = GenP { p: p.as_mut_ptr() };
        // SAFETY: every block has p's length (checked); `p` is exclusive.
        unsafe { self.stripe(data, p.len(), &fin) }
    }

    /// RAID 6 parity: P as [`Kernel::gen_p`] and
    /// `q = g^0*data[0] ^ g^1*data[1] ^ ...`.
    ///
    /// Panics if lengths differ, if there are more than [`MAX_DATA`] data
    /// blocks, or if the kernel is not available.
    #[track_caller]
    pub fn gen_pq(self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        check_data(data, p.len(), [usize::MAX; 2], MAX_DATA);
        check_len("q", q.len(), p.len());
        let fin = GenPq {
            p: p.as_mut_ptr(),
            q: q.as_mut_ptr(),
        };
        // SAFETY: every buffer has p's length (checked); outputs exclusive.
        unsafe { self.stripe(data, p.len(), &fin) }
    }

    /// Q alone (P already intact).
    #[track_caller]
    fn gen_q(self, data: &[&[u8]], q: &mut [u8]) {
        check_data(data, q.len(), [usize::MAX; 2], MAX_DATA);
        let fin = GenQ { q: q.as_mut_ptr() };
        // SAFETY: every block has q's length (checked); `q` is exclusive.
        unsafe { self.stripe(data, q.len(), &fin) }
    }

    /// RAID 5 read-modify-write: a data block changes from `old` to `new`;
    /// `p ^= old ^ new`.
    ///
    /// Panics if lengths differ or if the kernel is not available.
    #[track_caller]
    pub fn update_p(self, old: &[u8], new: &[u8], p: &mut [u8]) {
        check_len("old", old.len(), p.len());
        check_len("new", new.len(), p.len());
        // SAFETY: all three have p's length; `p` is exclusive.
        unsafe {
            self.update::<false>(
                old.as_ptr(),
                new.as_ptr(),
                p.as_mut_ptr(),
                std::ptr::null_mut(),
                0,
                p.len(),
            )
        }
    }

    /// RAID 6 read-modify-write: data block `index` (its position in the
    /// stripe's data) changes from `old` to `new`; `p ^= old ^ new` and
    /// `q ^= g^index * (old ^ new)`.
    ///
    /// Panics if lengths differ, if `index >= MAX_DATA`, or if the kernel is
    /// not available.
    #[track_caller]
    pub fn update_pq(self, index: usize, old: &[u8], new: &[u8], p: &mut [u8], q: &mut [u8]) {
        assert!(
            index < MAX_DATA,
            "data block index {index} is out of range (at most {MAX_DATA} data blocks)"
        );
        check_len("old", old.len(), p.len());
        check_len("new", new.len(), p.len());
        check_len("q", q.len(), p.len());
        // SAFETY: all four have p's length; `p` and `q` are exclusive.
        unsafe {
            self.update::<true>(
                old.as_ptr(),
                new.as_ptr(),
                p.as_mut_ptr(),
                q.as_mut_ptr(),
                gf::exp(index),
                p.len(),
            )
        }
    }

    /// Rebuilds one lost data block `x` from P and the other data blocks:
    /// `dx = p ^ (XOR of data[i], i != x)`. This is RAID 5 recovery, and
    /// RAID 6 recovery of one data block (Q is not needed). `data[x]` is not
    /// read. (A lost P is rebuilt with [`Kernel::gen_p`].)
    ///
    /// Panics if `x >= data.len()`, if lengths differ, or if the kernel is
    /// not available.
    #[track_caller]
    pub fn recover_one(self, data: &[&[u8]], x: usize, p: &[u8], dx: &mut [u8]) {
        assert!(
            x < data.len(),
            "lost block {x} is out of range ({} data blocks)",
            data.len()
        );
        check_data(data, p.len(), [x, usize::MAX], usize::MAX);
        check_len("dx", dx.len(), p.len());
        let fin = RecoverOne {
            x,
            p: p.as_ptr(),
            dx: dx.as_mut_ptr(),
        };
        // SAFETY: every buffer read or written has p's length (checked);
        // `dx` is exclusive.
        unsafe { self.stripe(data, p.len(), &fin) }
    }

    /// RAID 6: rebuilds two lost data blocks `x` and `y` (x != y, any order)
    /// from P, Q and the other data blocks, into `dx` and `dy`.
    /// `data[x]` and `data[y]` are not read.
    ///
    /// Panics if `x == y`, if either is out of range, if there are more
    /// than [`MAX_DATA`] data blocks, if lengths differ, or if the kernel is
    /// not available.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn recover_two_data(
        self,
        data: &[&[u8]],
        x: usize,
        y: usize,
        p: &[u8],
        q: &[u8],
        dx: &mut [u8],
        dy: &mut [u8],
    ) {
        assert!(x != y, "the two lost blocks must differ (both are {x})");
        assert!(
            x < data.len() && y < data.len(),
            "lost blocks {x} and {y}: out of range ({} data blocks)",
            data.len()
        );
        check_data(data, p.len(), [x, y], MAX_DATA);
        check_len("q", q.len(), p.len());
        check_len("dx", dx.len(), p.len());
        check_len("dy", dy.len(), p.len());
        let fin = RecoverTwo {
            x,
            y,
            p: p.as_ptr(),
            q: q.as_ptr(),
            dx: dx.as_mut_ptr(),
            dy: dy.as_mut_ptr(),
        };
        // SAFETY: every buffer read or written has p's length (checked);
        // outputs are exclusive.
        unsafe { self.stripe(data, p.len(), &fin) }
    }

    /// RAID 6: rebuilds lost data block `x` from Q (`Dx = (Q ^ Q') / g^x`,
    /// Q' of the surviving data) into `dx`, and the lost P into `p`.
    /// `data[x]` is not read.
    ///
    /// Panics if `x` is out of range, if there are more than [`MAX_DATA`]
    /// data blocks, if lengths differ, or if the kernel is not available.
    #[track_caller]
    pub fn recover_data_and_p(
        self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        dx: &mut [u8],
        p: &mut [u8],
    ) {
        assert!(
            x < data.len(),
            "lost block {x} is out of range ({} data blocks)",
            data.len()
        );
        check_data(data, q.len(), [x, usize::MAX], MAX_DATA);
        check_len("dx", dx.len(), q.len());
        check_len("p", p.len(), q.len());
        let fin = RecoverDataP {
            x,
            q: q.as_ptr(),
            dx: dx.as_mut_ptr(),
            p_out: p.as_mut_ptr(),
        };
        // SAFETY: every buffer read or written has q's length (checked);
        // outputs are exclusive.
        unsafe { self.stripe(data, q.len(), &fin) }
    }

    /// RAID 6: rebuilds lost data block `x` from P into `dx`, and the lost
    /// Q into `q`. `data[x]` is not read.
    ///
    /// Panics if `x` is out of range, if there are more than [`MAX_DATA`]
    /// data blocks, if lengths differ, or if the kernel is not available.
    #[track_caller]
    pub fn recover_data_and_q(
        self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        dx: &mut [u8],
        q: &mut [u8],
    ) {
        assert!(
            x < data.len(),
            "lost block {x} is out of range ({} data blocks)",
            data.len()
        );
        check_data(data, p.len(), [x, usize::MAX], MAX_DATA);
        check_len("dx", dx.len(), p.len());
        check_len("q", q.len(), p.len());
        let fin = RecoverDataQ {
            x,
            p: p.as_ptr(),
            dx: dx.as_mut_ptr(),
            q_out: q.as_mut_ptr(),
        };
        // SAFETY: every buffer read or written has p's length (checked);
        // outputs are exclusive.
        unsafe { self.stripe(data, p.len(), &fin) }
    }

    /// RAID 5, in place: `stripe` is the data blocks then P (`n + 1`
    /// blocks, `n <= MAX_DATA`); block `lost` (a data block, or `n` for P)
    /// is rebuilt from the others, which are only read.
    ///
    /// Panics if `stripe` is empty, if `lost` is out of range, if lengths
    /// differ, or if the kernel is not available.
    #[track_caller]
    pub fn recover_raid5(self, stripe: &mut [&mut [u8]], lost: usize) {
        assert!(!stripe.is_empty(), "a RAID 5 stripe has at least P");
        let n = stripe.len() - 1;
        assert!(n <= MAX_DATA, "{n} data blocks: at most {MAX_DATA}");
        assert!(
            lost <= n,
            "lost block {lost} is out of range ({} blocks)",
            n + 1
        );
        let (data, parity) = stripe.split_at_mut(n);
        let p: &mut [u8] = &mut *parity[0];
        let mut view: [&[u8]; MAX_DATA] = [&[]; MAX_DATA];
        let (dx, _) = split_holes(data, [lost, usize::MAX], &mut view);
        match dx {
            Some(dx) => self.recover_one(&view[..n], lost, p, dx),
            None => self.gen_p(&view[..n], p),
        }
    }

    /// RAID 6, in place: `stripe` is the data blocks, then P, then Q
    /// (`n + 2` blocks, `n <= MAX_DATA`); the blocks listed in `lost` (at
    /// most two distinct indices into `stripe`: `n` is P, `n + 1` is Q) are
    /// rebuilt from the others, which are only read. Every combination is
    /// handled: one or two data blocks, a data block and P, a data block
    /// and Q, P, Q, P and Q.
    ///
    /// Panics if `stripe` has fewer than 2 blocks, if `lost` has more than 2
    /// entries, a repeated one or one out of range, if lengths differ, or
    /// if the kernel is not available.
    #[track_caller]
    pub fn recover_raid6(self, stripe: &mut [&mut [u8]], lost: &[usize]) {
        assert!(stripe.len() >= 2, "a RAID 6 stripe has at least P and Q");
        let n = stripe.len() - 2;
        assert!(n <= MAX_DATA, "{n} data blocks: at most {MAX_DATA}");
        let (a, b) = match *lost {
            [] => return,
            [a] => (a, usize::MAX),
            [a, b] => {
                assert!(a != b, "lost block {a} is listed twice");
                (a.min(b), a.max(b))
            }
            _ => panic!("RAID 6 survives at most 2 lost blocks, not {}", lost.len()),
        };
        assert!(
            a < n + 2 && (b == usize::MAX || b < n + 2),
            "lost blocks {lost:?}: out of range ({} blocks)",
            n + 2
        );
        let (data, parity) = stripe.split_at_mut(n);
        let (p, q) = parity.split_at_mut(1);
        let (p, q): (&mut [u8], &mut [u8]) = (&mut *p[0], &mut *q[0]);
        let mut view: [&[u8]; MAX_DATA] = [&[]; MAX_DATA];
        let (dx, dy) = split_holes(data, [a, b], &mut view);
        let view = &view[..n];
        let (lost_p, lost_q) = (a == n || b == n, a == n + 1 || b == n + 1);
        match (dx, dy) {
            (Some(dx), Some(dy)) => self.recover_two_data(view, a, b, p, q, dx, dy),
            (Some(dx), None) if lost_p => self.recover_data_and_p(view, a, q, dx, p),
            (Some(dx), None) if lost_q => self.recover_data_and_q(view, a, p, dx, q),
            (Some(dx), None) => self.recover_one(view, a, p, dx),
            (None, _) if lost_p && lost_q => self.gen_pq(view, p, q),
            (None, _) if lost_p => {
                check_len("q", q.len(), p.len());
                self.gen_p(view, p)
            }
            (None, _) => {
                check_len("p", p.len(), q.len());
                self.gen_q(view, q)
            }
        }
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Splits the data blocks of an in-place stripe into a read-only view (the
/// holes left empty) and the lost blocks among `holes` (in that order).
fn split_holes<'a>(
    data: &'a mut [&mut [u8]],
    holes: [usize; 2],
    view: &mut [&'a [u8]; MAX_DATA],
) -> (Option<&'a mut [u8]>, Option<&'a mut [u8]>) {
    let (mut first, mut second) = (None, None);
    for (i, d) in data.iter_mut().enumerate() {
        if i == holes[0] {
            first = Some(&mut **d);
        } else if i == holes[1] {
            second = Some(&mut **d);
        } else {
            view[i] = &**d;
        }
    }
    (first, second)
}

#[track_caller]
fn check_len(what: &str, got: usize, want: usize) {
    assert!(got == want, "parity: {what} has {got} bytes, expected {want} (all blocks of a stripe have the same length)");
}

#[track_caller]
fn check_data(data: &[&[u8]], len: usize, holes: [usize; 2], max: usize) {
    assert!(
        data.len() <= max,
        "{} data blocks: at most {max}",
        data.len()
    );
    for (i, d) in data.iter().enumerate() {
        if i != holes[0] && i != holes[1] && d.len() != len {
            panic!("parity: data block {i} has {} bytes, expected {len} (all blocks of a stripe have the same length)", d.len());
        }
    }
}

/// RAID 5 parity with the best kernel: see [`Kernel::gen_p`].
#[track_caller]
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) {
    Kernel::detect().gen_p(data, p)
}

/// RAID 6 parity with the best kernel: see [`Kernel::gen_pq`].
#[track_caller]
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    Kernel::detect().gen_pq(data, p, q)
}

/// RAID 5 delta update with the best kernel: see [`Kernel::update_p`].
#[track_caller]
pub fn update_p(old: &[u8], new: &[u8], p: &mut [u8]) {
    Kernel::detect().update_p(old, new, p)
}

/// RAID 6 delta update with the best kernel: see [`Kernel::update_pq`].
#[track_caller]
pub fn update_pq(index: usize, old: &[u8], new: &[u8], p: &mut [u8], q: &mut [u8]) {
    Kernel::detect().update_pq(index, old, new, p, q)
}

/// One lost data block from P, with the best kernel: see
/// [`Kernel::recover_one`].
#[track_caller]
pub fn recover_one(data: &[&[u8]], x: usize, p: &[u8], dx: &mut [u8]) {
    Kernel::detect().recover_one(data, x, p, dx)
}

/// Two lost data blocks, with the best kernel: see
/// [`Kernel::recover_two_data`].
#[track_caller]
pub fn recover_two_data(
    data: &[&[u8]],
    x: usize,
    y: usize,
    p: &[u8],
    q: &[u8],
    dx: &mut [u8],
    dy: &mut [u8],
) {
    Kernel::detect().recover_two_data(data, x, y, p, q, dx, dy)
}

/// A lost data block and lost P, with the best kernel: see
/// [`Kernel::recover_data_and_p`].
#[track_caller]
pub fn recover_data_and_p(data: &[&[u8]], x: usize, q: &[u8], dx: &mut [u8], p: &mut [u8]) {
    Kernel::detect().recover_data_and_p(data, x, q, dx, p)
}

/// A lost data block and lost Q, with the best kernel: see
/// [`Kernel::recover_data_and_q`].
#[track_caller]
pub fn recover_data_and_q(data: &[&[u8]], x: usize, p: &[u8], dx: &mut [u8], q: &mut [u8]) {
    Kernel::detect().recover_data_and_q(data, x, p, dx, q)
}

/// RAID 5 in-place recovery with the best kernel: see
/// [`Kernel::recover_raid5`].
#[track_caller]
pub fn recover_raid5(stripe: &mut [&mut [u8]], lost: usize) {
    Kernel::detect().recover_raid5(stripe, lost)
}

/// RAID 6 in-place recovery with the best kernel: see
/// [`Kernel::recover_raid6`].
#[track_caller]
pub fn recover_raid6(stripe: &mut [&mut [u8]], lost: &[usize]) {
    Kernel::detect().recover_raid6(stripe, lost)
}
