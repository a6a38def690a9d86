//! Arithmetic in GF(2^8) as RAID 6 uses it.
//!
//! The field is the one of H. Peter Anvin's "The mathematics of RAID-6" and
//! of Linux md (`lib/raid6`): polynomial x^8 + x^4 + x^3 + x^2 + 1
//! ([`POLY`] = 0x11D), generator g = 2 ([`GENERATOR`]). Addition is XOR.
//! Every nonzero element is a power of g, so multiplication goes through a
//! log table and an exp table, both built at compile time by `const fn`.
//!
//! The SIMD kernels multiply whole vectors by a constant; this module also
//! builds what they need for that ([`nibble_tables`] for `pshufb`-style
//! lookups, [`affine_matrix`] for the x86 GFNI `gf2p8affine` instruction).

/// The field polynomial, x^8 + x^4 + x^3 + x^2 + 1, as a bit mask (0x11D).
pub const POLY: u16 = 0x11d;

/// The generator g of the multiplicative group, and the coefficient base of
/// Q: data block `i` is multiplied by g^i.
pub const GENERATOR: u8 = 2;

/// Number of nonzero elements, the order of g: g^255 = 1.
pub const ORDER: usize = 255;

/// Multiplies by g = 2: shift left, and fold the bit that falls out back in
/// with the low byte of the polynomial (0x1D).
#[inline]
pub const fn mul2(a: u8) -> u8 {
    (a << 1)
        ^ if a & 0x80 != 0 {
            (POLY & 0xff) as u8
        } else {
            0
        }
}

/// g^i for i in 0..510 (the second half repeats the first), so that
/// `EXP[LOG[a] + LOG[b]]` needs no reduction modulo 255.
const EXP: [u8; 2 * ORDER] = {
    let mut t = [0u8; 2 * ORDER];
    let mut x: u8 = 1;
    let mut i = 0;
    while i < ORDER {
        t[i] = x;
        t[i + ORDER] = x;
        x = mul2(x);
        i += 1;
    }
    t
};

/// LOG[a] = i such that g^i = a, for a != 0. LOG[0] is unused (0).
const LOG: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < ORDER {
        t[EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Product of two field elements.
#[inline]
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// g^n for any n (reduced modulo 255, since g^255 = 1).
#[inline]
pub const fn exp(n: usize) -> u8 {
    EXP[n % ORDER]
}

/// Discrete logarithm: the i in 0..255 with g^i = a.
///
/// Panics if `a` is 0 (zero is no power of g).
#[inline]
pub const fn log(a: u8) -> u8 {
    assert!(a != 0, "log(0) is undefined in GF(2^8)");
    LOG[a as usize]
}

/// Multiplicative inverse.
///
/// Panics if `a` is 0.
#[inline]
pub const fn inv(a: u8) -> u8 {
    assert!(a != 0, "0 has no inverse in GF(2^8)");
    EXP[ORDER - LOG[a as usize] as usize]
}

/// Quotient a / b.
///
/// Panics if `b` is 0.
#[inline]
pub const fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// The two 16-entry tables that multiply by `c` one nibble at a time:
/// `c * x = lo[x & 15] ^ hi[x >> 4]` (multiplication distributes over XOR).
/// This is the layout `pshufb` / `vpshufb` look up in, as md's RAID 6
/// recovery code does.
#[inline]
pub const fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    // c * 2^j for j in 0..8, then each entry as the XOR of the powers its
    // bits select (entry i = entry (i without its top bit) ^ that bit's).
    let cols = columns(c);
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    let mut i = 1;
    while i < 16 {
        let top = 31 - (i as u32).leading_zeros();
        let rest = i & !(1 << top);
        lo[i] = lo[rest] ^ cols[top as usize];
        hi[i] = hi[rest] ^ cols[top as usize + 4];
        i += 1;
    }
    (lo, hi)
}

/// `c * 2^j` for j in 0..8: the images of the bits of a byte.
#[inline]
const fn columns(c: u8) -> [u8; 8] {
    let mut cols = [0u8; 8];
    let mut x = c;
    let mut j = 0;
    while j < 8 {
        cols[j] = x;
        x = mul2(x);
        j += 1;
    }
    cols
}

/// The 8x8 bit matrix, in the layout of the x86 GFNI instruction
/// `gf2p8affineqb`, that multiplies a byte by `c` in this field.
///
/// `gf2p8mulb` cannot be used: it reduces by the AES polynomial 0x11B. But
/// multiplication by a constant is linear over GF(2) in any field, so an
/// affine transform with zero offset does it. The instruction computes
/// output bit i as the parity of `x AND matrix.byte[7 - i]`; output bit i of
/// `c * x` is the XOR over the set bits j of x of bit i of `c * 2^j`.
#[inline]
pub const fn affine_matrix(c: u8) -> u64 {
    let cols = columns(c);
    let mut m = 0u64;
    let mut i = 0;
    while i < 8 {
        let mut row = 0u64;
        let mut j = 0;
        while j < 8 {
            row |= (((cols[j] >> i) & 1) as u64) << j;
            j += 1;
        }
        m |= row << (8 * (7 - i));
        i += 1;
    }
    m
}
