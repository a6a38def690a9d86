//! The one algorithm every kernel runs, written once over a vector type.
//!
//! A kernel is a [`Lanes`] type (a `u8`, a `u64` holding 8 bytes, an AVX2 or
//! AVX-512 register) and the generic bodies here. The x86 kernels call the
//! bodies from `#[target_feature]` functions; every [`Lanes`] method is
//! `#[inline(always)]`, so the intrinsics end up inlined into code compiled
//! for the right instruction set (the pattern `memchr` uses).
//!
//! A stripe pass walks the data blocks from the highest index down, as md's
//! `raid6_avx2x4` does, keeping P and Q of several vectors in registers:
//! `P ^= D_i` and, by Horner's rule, `Q = Q * g ^ D_i`. A lost data block
//! (a "hole") contributes zero: `Q = Q * g`. What is done with P and Q at the
//! end of the walk (store them, or combine them with the surviving parity to
//! rebuild lost blocks) is a [`Finish`].

use super::gf;

/// A vector of bytes, each an element of GF(2^8).
///
/// All methods are `unsafe`: the caller guarantees that the CPU has the
/// instruction-set extensions the implementation uses, and for `load` and
/// `store` that the pointer is valid for `WIDTH` bytes (no alignment needed).
pub(crate) trait Lanes: Copy {
    /// Bytes per vector.
    const WIDTH: usize;
    /// A constant factor prepared for [`Lanes::mulc`].
    type MulC: Copy;
    /// Loads `WIDTH` bytes from `p` (unaligned).
    unsafe fn load(p: *const u8) -> Self;
    /// Stores `WIDTH` bytes to `p` (unaligned).
    unsafe fn store(self, p: *mut u8);
    /// All zero.
    unsafe fn zero() -> Self;
    /// Bytewise XOR (field addition).
    unsafe fn xor(self, o: Self) -> Self;
    /// `self ^ b ^ c`.
    #[inline(always)]
    unsafe fn xor3(self, b: Self, c: Self) -> Self {
        // SAFETY: forwarded contract of this function.
        unsafe { self.xor(b).xor(c) }
    }
    /// Every byte times g = 2.
    unsafe fn mul2(self) -> Self;
    /// `self * 2 ^ d`, one Horner step.
    #[inline(always)]
    unsafe fn mul2_xor(self, d: Self) -> Self {
        // SAFETY: forwarded contract of this function.
        unsafe { self.mul2().xor(d) }
    }
    /// Prepares the constant `c` for [`Lanes::mulc`].
    unsafe fn prep(c: u8) -> Self::MulC;
    /// Every byte times the prepared constant.
    unsafe fn mulc(self, c: &Self::MulC) -> Self;
}

/// What a stripe pass does with P and Q of the surviving data blocks.
///
/// Implementations hold raw pointers to the buffers they read and write.
pub(crate) trait Finish {
    /// Whether Q is needed (if not, the pass computes P only).
    const NEED_Q: bool;
    /// Whether some data blocks are holes (lost: read as zero).
    const HOLES: bool;
    /// Indices of the holes (`usize::MAX` for none); used if `HOLES`.
    fn holes(&self) -> [usize; 2];
    /// Up to two constant factors used by `finish`.
    fn consts(&self) -> [u8; 2];
    /// Consumes P and Q of the survivors for the `V::WIDTH` bytes at byte
    /// offset `off` of the stripe.
    ///
    /// # Safety
    /// The CPU supports `V`; every buffer this finisher points to is valid
    /// for `off + V::WIDTH` bytes.
    unsafe fn finish<V: Lanes>(&self, k: &[V::MulC; 2], off: usize, p: V, q: V);
}

/// One stripe pass over bytes `off..` in steps of `U` vectors while a whole
/// step fits before `end`; returns where it stopped.
///
/// # Safety
/// The CPU supports `V`; every data block that is not a hole is valid for
/// `end` bytes, and so are the buffers of `fin`.
#[inline(always)]
pub(crate) unsafe fn stripe<V: Lanes, const U: usize, F: Finish>(
    data: &[&[u8]],
    mut off: usize,
    end: usize,
    fin: &F,
) -> usize {
    let step = U * V::WIDTH;
    if end.saturating_sub(off) < step {
        return off;
    }
    let [h0, h1] = fin.holes();
    let hole = |i: usize| F::HOLES && (i == h0 || i == h1);
    let top = (0..data.len()).rev().find(|&i| !hole(i));
    let [c0, c1] = fin.consts();
    // SAFETY: the CPU supports V (contract of this function).
    let k = unsafe { [V::prep(c0), V::prep(c1)] };
    while end - off >= step {
        // SAFETY: the CPU supports V; `i < data.len()`; every block read is
        // not a hole, so it is valid for `end` bytes, and
        // `off + U * WIDTH <= end`; `fin`'s buffers likewise.
        unsafe {
            let mut p = [V::zero(); U];
            let mut q = [V::zero(); U];
            if let Some(top) = top {
                let base = data.get_unchecked(top).as_ptr().add(off);
                for u in 0..U {
                    p[u] = V::load(base.add(u * V::WIDTH));
                    q[u] = p[u];
                }
                for i in (0..top).rev() {
                    if hole(i) {
                        if F::NEED_Q {
                            for qu in q.iter_mut() {
                                *qu = qu.mul2();
                            }
                        }
                        continue;
                    }
                    let base = data.get_unchecked(i).as_ptr().add(off);
                    for u in 0..U {
                        let d = V::load(base.add(u * V::WIDTH));
                        p[u] = p[u].xor(d);
                        if F::NEED_Q {
                            q[u] = q[u].mul2_xor(d);
                        }
                    }
                }
            }
            for u in 0..U {
                fin.finish::<V>(&k, off + u * V::WIDTH, p[u], q[u]);
            }
        }
        off += step;
    }
    off
}

/// Delta update for read-modify-write over bytes `off..` in steps of `U`
/// vectors while a whole step fits before `end`: `P ^= old ^ new` and, if
/// `Q`, `Q ^= c * (old ^ new)`. Returns where it stopped.
///
/// # Safety
/// The CPU supports `V`; `old`, `new`, `p` (and `q` if `Q`) are valid for
/// `end` bytes.
#[inline(always)]
pub(crate) unsafe fn update<V: Lanes, const U: usize, const Q: bool>(
    old: *const u8,
    new: *const u8,
    p: *mut u8,
    q: *mut u8,
    c: u8,
    mut off: usize,
    end: usize,
) -> usize {
    let step = U * V::WIDTH;
    if end.saturating_sub(off) < step {
        return off;
    }
    // SAFETY: the CPU supports V.
    let k = unsafe { V::prep(c) };
    while end - off >= step {
        for u in 0..U {
            let o = off + u * V::WIDTH;
            // SAFETY: the CPU supports V; `o + WIDTH <= end` and every buffer
            // is valid for `end` bytes.
            unsafe {
                let a = V::load(old.add(o));
                let b = V::load(new.add(o));
                V::load(p.add(o)).xor3(a, b).store(p.add(o));
                if Q {
                    let delta = a.xor(b).mulc(&k);
                    V::load(q.add(o)).xor(delta).store(q.add(o));
                }
            }
        }
        off += step;
    }
    off
}

/// No hole.
pub(crate) const NONE: usize = usize::MAX;

/// Stores P: RAID 5 parity generation.
pub(crate) struct GenP {
    pub p: *mut u8,
}

impl Finish for GenP {
    const NEED_Q: bool = false;
    const HOLES: bool = false;
    fn holes(&self) -> [usize; 2] {
        [NONE; 2]
    }
    fn consts(&self) -> [u8; 2] {
        [0; 2]
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, _k: &[V::MulC; 2], off: usize, p: V, _q: V) {
        // SAFETY: contract of `finish`.
        unsafe { p.store(self.p.add(off)) }
    }
}

/// Stores P and Q: RAID 6 parity generation.
pub(crate) struct GenPq {
    pub p: *mut u8,
    pub q: *mut u8,
}

impl Finish for GenPq {
    const NEED_Q: bool = true;
    const HOLES: bool = false;
    fn holes(&self) -> [usize; 2] {
        [NONE; 2]
    }
    fn consts(&self) -> [u8; 2] {
        [0; 2]
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, _k: &[V::MulC; 2], off: usize, p: V, q: V) {
        // SAFETY: contract of `finish`.
        unsafe {
            p.store(self.p.add(off));
            q.store(self.q.add(off));
        }
    }
}

/// Stores Q only (a lost Q, P intact).
pub(crate) struct GenQ {
    pub q: *mut u8,
}

impl Finish for GenQ {
    const NEED_Q: bool = true;
    const HOLES: bool = false;
    fn holes(&self) -> [usize; 2] {
        [NONE; 2]
    }
    fn consts(&self) -> [u8; 2] {
        [0; 2]
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, _k: &[V::MulC; 2], off: usize, _p: V, q: V) {
        // SAFETY: contract of `finish`.
        unsafe { q.store(self.q.add(off)) }
    }
}

/// One lost data block `x`, rebuilt from P: `Dx = P ^ P'`, where P' is the
/// XOR of the surviving data blocks.
pub(crate) struct RecoverOne {
    pub x: usize,
    pub p: *const u8,
    pub dx: *mut u8,
}

impl Finish for RecoverOne {
    const NEED_Q: bool = false;
    const HOLES: bool = true;
    fn holes(&self) -> [usize; 2] {
        [self.x, NONE]
    }
    fn consts(&self) -> [u8; 2] {
        [0; 2]
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, _k: &[V::MulC; 2], off: usize, p: V, _q: V) {
        // SAFETY: contract of `finish`.
        unsafe { V::load(self.p.add(off)).xor(p).store(self.dx.add(off)) }
    }
}

/// Two lost data blocks `x` and `y` (Anvin, section 4): with
/// `Pxy = P ^ P'` and `Qxy = Q ^ Q'` (P', Q' of the survivors),
/// `Dx = A * Pxy ^ B * Qxy` and `Dy = Pxy ^ Dx`, where
/// `A = g^(y-x) / (g^(y-x) + 1)` and `B = g^(-x) / (g^(y-x) + 1)`.
pub(crate) struct RecoverTwo {
    pub x: usize,
    pub y: usize,
    pub p: *const u8,
    pub q: *const u8,
    pub dx: *mut u8,
    pub dy: *mut u8,
}

impl Finish for RecoverTwo {
    const NEED_Q: bool = true;
    const HOLES: bool = true;
    fn holes(&self) -> [usize; 2] {
        [self.x, self.y]
    }
    fn consts(&self) -> [u8; 2] {
        two_data_coefficients(self.x, self.y)
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, k: &[V::MulC; 2], off: usize, p: V, q: V) {
        // SAFETY: contract of `finish`.
        unsafe {
            let pxy = V::load(self.p.add(off)).xor(p);
            let qxy = V::load(self.q.add(off)).xor(q);
            let dx = pxy.mulc(&k[0]).xor(qxy.mulc(&k[1]));
            dx.store(self.dx.add(off));
            pxy.xor(dx).store(self.dy.add(off));
        }
    }
}

/// The factors A and B of [`RecoverTwo`] for lost data blocks `x != y`,
/// both below 255.
pub(crate) fn two_data_coefficients(x: usize, y: usize) -> [u8; 2] {
    let gyx = gf::exp(y + gf::ORDER - x);
    let denom = gf::inv(gyx ^ 1);
    [gf::mul(gyx, denom), gf::mul(gf::exp(gf::ORDER - x), denom)]
}

/// Lost data block `x` and lost P (Anvin, section 3):
/// `Dx = (Q ^ Q') * g^(-x)`, then `P = P' ^ Dx`.
pub(crate) struct RecoverDataP {
    pub x: usize,
    pub q: *const u8,
    pub dx: *mut u8,
    pub p_out: *mut u8,
}

impl Finish for RecoverDataP {
    const NEED_Q: bool = true;
    const HOLES: bool = true;
    fn holes(&self) -> [usize; 2] {
        [self.x, NONE]
    }
    fn consts(&self) -> [u8; 2] {
        [gf::exp(gf::ORDER - self.x), 0]
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, k: &[V::MulC; 2], off: usize, p: V, q: V) {
        // SAFETY: contract of `finish`.
        unsafe {
            let dx = V::load(self.q.add(off)).xor(q).mulc(&k[0]);
            dx.store(self.dx.add(off));
            p.xor(dx).store(self.p_out.add(off));
        }
    }
}

/// Lost data block `x` and lost Q: `Dx = P ^ P'`, then
/// `Q = Q' ^ g^x * Dx` (the same as regenerating Q, in the same pass).
pub(crate) struct RecoverDataQ {
    pub x: usize,
    pub p: *const u8,
    pub dx: *mut u8,
    pub q_out: *mut u8,
}

impl Finish for RecoverDataQ {
    const NEED_Q: bool = true;
    const HOLES: bool = true;
    fn holes(&self) -> [usize; 2] {
        [self.x, NONE]
    }
    fn consts(&self) -> [u8; 2] {
        [gf::exp(self.x), 0]
    }
    #[inline(always)]
    unsafe fn finish<V: Lanes>(&self, k: &[V::MulC; 2], off: usize, p: V, q: V) {
        // SAFETY: contract of `finish`.
        unsafe {
            let dx = V::load(self.p.add(off)).xor(p);
            dx.store(self.dx.add(off));
            q.xor(dx.mulc(&k[0])).store(self.q_out.add(off));
        }
    }
}
