//! Tests of the parity module: the field, known answers, every kernel
//! against the scalar kernel, against a byte-at-a-time model written from
//! the definitions (sums of g^i * D_i, no Horner), and against an
//! independent implementation (the `rusty_erasure` crate, a Rust remake of
//! ISA-L's `pq_gen`, and its own GF(2^8) tables); delta updates against
//! regeneration; every recovery case against the original bytes.

use super::*;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn kernels() -> Vec<Kernel> {
    Kernel::available().collect()
}

/// Shift-and-add multiplication, the textbook definition.
fn slow_mul(mut a: u8, mut b: u8) -> u8 {
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= 0x1d;
        }
        b >>= 1;
    }
    r
}

/// P and Q from the definitions, one byte at a time, with our tables.
fn model_pq(data: &[&[u8]], len: usize) -> (Vec<u8>, Vec<u8>) {
    let mut p = vec![0u8; len];
    let mut q = vec![0u8; len];
    for (i, d) in data.iter().enumerate() {
        let c = gf::exp(i);
        for j in 0..len {
            p[j] ^= d[j];
            q[j] ^= gf::mul(c, d[j]);
        }
    }
    (p, q)
}

/// P and Q with the independent crate's field (coefficient g^i built by
/// repeated multiplication by 2 there), and its own `pq_gen` / `xor_gen`
/// (which need at least 2 sources).
fn independent_pq(data: &[&[u8]], len: usize) -> (Vec<u8>, Vec<u8>) {
    let mut p = vec![0u8; len];
    let mut q = vec![0u8; len];
    let mut c = 1u8;
    for d in data {
        for j in 0..len {
            p[j] ^= d[j];
            q[j] ^= rusty_erasure::gf::mul(c, d[j]);
        }
        c = rusty_erasure::gf::mul(c, 2);
    }
    if data.len() >= 2 {
        let (mut p2, mut q2) = (vec![0u8; len], vec![0u8; len]);
        rusty_erasure::raid::pq_gen(data, &mut p2, &mut q2).expect("valid shapes");
        assert_eq!(
            (&p, &q),
            (&p2, &q2),
            "the independent crate disagrees with itself"
        );
        rusty_erasure::raid::xor_gen(data, &mut p2).expect("valid shapes");
        assert_eq!(p, p2);
    }
    (p, q)
}

/// A stripe of `n` blocks of `len` bytes, each at a random offset (0..64)
/// into its own buffer so that no alignment is assumed.
struct Stripe {
    bufs: Vec<Vec<u8>>,
    offs: Vec<usize>,
    len: usize,
}

impl Stripe {
    /// `kind` 0: random bytes; 1: bytes from {0, 1, 0x7f, 0x80, 0xff}
    /// (the high bit matters for * 2); 2: all 0xff.
    fn new(n: usize, len: usize, seed: u64, kind: u8) -> Stripe {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut bufs = Vec::new();
        let mut offs = Vec::new();
        for _ in 0..n {
            let off = rng.random_range(0..64);
            let mut b = vec![0u8; len + off];
            match kind {
                0 => rng.fill(&mut b[..]),
                1 => {
                    const PICK: [u8; 5] = [0, 1, 0x7f, 0x80, 0xff];
                    b.iter_mut().for_each(|x| *x = PICK[rng.random_range(0..5)]);
                }
                _ => b.fill(0xff),
            }
            bufs.push(b);
            offs.push(off);
        }
        Stripe { bufs, offs, len }
    }

    fn blocks(&self) -> Vec<&[u8]> {
        self.bufs
            .iter()
            .zip(&self.offs)
            .map(|(b, &o)| &b[o..o + self.len])
            .collect()
    }
}

/// A zeroed output of `len` bytes at an odd offset of a larger buffer.
fn out(len: usize) -> Vec<u8> {
    vec![0u8; len + 3]
}

fn lens() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..=260,
        3 => (1usize..=40, 0usize..=2).prop_map(|(k, d)| k * 64 + d - 1),
        2 => 260usize..5000,
        1 => 60_000usize..70_000,
    ]
}

// ---------------------------------------------------------------- the field

#[test]
fn field_tables_match_definition_and_independent_crate() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            let m = gf::mul(a, b);
            assert_eq!(m, slow_mul(a, b), "{a} * {b}");
            assert_eq!(m, rusty_erasure::gf::mul(a, b), "{a} * {b}");
        }
        assert_eq!(gf::mul2(a), gf::mul(a, 2));
        if a != 0 {
            assert_eq!(gf::mul(a, gf::inv(a)), 1);
            assert_eq!(gf::exp(gf::log(a) as usize), a);
            assert_eq!(gf::div(gf::mul(a, 0x53), 0x53), a);
        }
    }
    let mut seen = [false; 256];
    for i in 0..255 {
        let g = gf::exp(i);
        assert!(!seen[g as usize], "g is a generator: g^{i} repeats");
        seen[g as usize] = true;
    }
}

#[test]
fn field_known_values() {
    assert_eq!(gf::exp(0), 1);
    assert_eq!(gf::exp(1), 2);
    assert_eq!(gf::exp(7), 0x80);
    assert_eq!(gf::exp(8), 0x1d);
    assert_eq!(gf::exp(255), 1);
    assert_eq!(gf::mul(0x80, 2), 0x1d);
    assert_eq!(gf::inv(2), 0x8e); // 2 * 0x8e = 0x11c ^ 0x11d = 1
    assert_eq!(gf::mul(3, 7), 9); // (x+1)(x^2+x+1) = x^3+1
}

/// Emulates `gf2p8affineqb` as Intel defines it, on one byte.
fn affine_byte(m: u64, x: u8) -> u8 {
    let mut r = 0u8;
    for i in 0..8 {
        let row = (m >> (8 * (7 - i))) as u8;
        r |= (((row & x).count_ones() & 1) as u8) << i;
    }
    r
}

#[test]
fn multiply_by_constant_tables() {
    for c in 0..=255u8 {
        let m = gf::affine_matrix(c);
        let (lo, hi) = gf::nibble_tables(c);
        for x in 0..=255u8 {
            let want = gf::mul(c, x);
            assert_eq!(affine_byte(m, x), want, "affine {c} * {x}");
            assert_eq!(
                lo[(x & 15) as usize] ^ hi[(x >> 4) as usize],
                want,
                "nibbles {c} * {x}"
            );
        }
    }
}

/// Every nonzero constant is some g^i, so `update_pq` from zero with every
/// index tests each kernel's multiply-by-constant on every byte value, in
/// every lane (lengths cover the vector body and the tails).
#[test]
fn every_kernel_multiplies_by_every_constant() {
    let len = 256 * 3 + 37;
    let new: Vec<u8> = (0..len).map(|i| (i * 7 + i / 256) as u8).collect();
    let old = vec![0u8; len];
    for k in kernels() {
        for index in 0..MAX_DATA {
            let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
            k.update_pq(index, &old, &new, &mut p, &mut q);
            let c = gf::exp(index);
            assert_eq!(p, new, "{k}");
            for j in 0..len {
                assert_eq!(q[j], gf::mul(c, new[j]), "{k}: g^{index} * {}", new[j]);
            }
        }
    }
}

// ------------------------------------------------------------ known answers

#[test]
fn known_answer_vectors() {
    for k in kernels() {
        let pq = |data: &[&[u8]]| {
            let len = data[0].len();
            let (mut p, mut q) = (vec![0; len], vec![0; len]);
            k.gen_pq(data, &mut p, &mut q);
            (p, q)
        };
        // Anvin's definitions by hand.
        assert_eq!(pq(&[&[1], &[1]]), (vec![0], vec![3]), "{k}");
        assert_eq!(
            pq(&[&[1], &[2], &[4]]),
            (vec![7], vec![1 ^ 4 ^ 0x10]),
            "{k}"
        );
        assert_eq!(pq(&[&[0x80], &[0]]), (vec![0x80], vec![0x80]), "{k}");
        assert_eq!(pq(&[&[0], &[0x80]]), (vec![0x80], vec![0x1d]), "{k}");
        // One block at index 8 holding 1: Q = g^8 = 0x1D.
        let mut nine: Vec<&[u8]> = vec![&[0u8]; 9];
        nine[8] = &[1];
        assert_eq!(pq(&nine), (vec![1], vec![0x1d]), "{k}");
        // Block i holding 1 everywhere, 300 bytes so every kernel's vector
        // path runs: Q = sum of g^i = g^0 ^ ... ^ g^(n-1).
        for n in [1usize, 2, 3, 8, 16, 32] {
            let ones = vec![1u8; 300];
            let data: Vec<&[u8]> = vec![&ones; n];
            let want_q = (0..n).fold(0u8, |a, i| a ^ gf::exp(i));
            let want_p = if n % 2 == 1 { 1 } else { 0 };
            assert_eq!(
                pq(&data),
                (vec![want_p; 300], vec![want_q; 300]),
                "{k} n={n}"
            );
        }
        // 0xff in each of 4 blocks: Q = 0xff * (1 ^ 2 ^ 4 ^ 8). By hand:
        // 0xff*2 = 0xfe^0x1d = 0xe3, *4 = 0xc6^0x1d = 0xdb, *8 = 0xb6^0x1d =
        // 0xab; 0xff ^ 0xe3 ^ 0xdb ^ 0xab = 0x6c.
        let ff = vec![0xffu8; 129];
        let (p, q) = pq(&[&ff, &ff, &ff, &ff]);
        assert_eq!((p, q), (vec![0; 129], vec![0x6c; 129]), "{k}");
    }
}

#[test]
fn zero_blocks_and_zero_length() {
    for k in kernels() {
        let mut p = vec![0xaa; 100];
        k.gen_p(&[], &mut p);
        assert_eq!(p, vec![0; 100], "{k}: P of no data is zero");
        let (mut p, mut q) = (vec![0xaa; 100], vec![0xbb; 100]);
        k.gen_pq(&[], &mut p, &mut q);
        assert_eq!((p, q), (vec![0; 100], vec![0; 100]), "{k}");
        let (mut p, mut q) = (vec![], vec![]);
        k.gen_pq(&[&[], &[], &[]], &mut p, &mut q);
        k.update_pq(3, &[], &[], &mut p, &mut q);
        k.recover_two_data(&[&[], &[], &[]], 0, 2, &[], &[], &mut [], &mut []);
    }
}

// ------------------------------------------------- generation, every kernel

fn check_generation(n: usize, len: usize, seed: u64, kind: u8) {
    let s = Stripe::new(n, len, seed, kind);
    let data = s.blocks();
    let (mp, mq) = model_pq(&data, len);
    let (ip, iq) = independent_pq(&data, len);
    assert_eq!(mp, ip, "P: model and independent crate differ");
    assert_eq!(mq, iq, "Q: model and independent crate differ");
    for k in kernels() {
        let (mut p, mut q, mut p2) = (out(len), out(len), out(len));
        k.gen_pq(&data, &mut p[3..], &mut q[3..]);
        k.gen_p(&data, &mut p2[3..]);
        assert!(p[3..] == mp[..], "{k}: P differs (n={n} len={len})");
        assert!(q[3..] == mq[..], "{k}: Q differs (n={n} len={len})");
        assert!(p2[3..] == mp[..], "{k}: gen_p differs (n={n} len={len})");
        assert_eq!(&p[..3], &[0, 0, 0], "{k}: wrote before P");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn generation_matches_model_and_independent(
        n in 1usize..=32, len in lens(), seed in any::<u64>(), kind in 0u8..3,
    ) {
        check_generation(n, len, seed, kind);
    }

    #[test]
    fn p_of_any_number_of_blocks(n in 0usize..=40, len in lens(), seed in any::<u64>()) {
        let s = Stripe::new(n, len, seed, 0);
        let data = s.blocks();
        let (mp, _) = model_pq(&data, len);
        for k in kernels() {
            let mut p = vec![0x5a; len];
            k.gen_p(&data, &mut p);
            prop_assert!(p == mp, "{} n={} len={}", k, n, len);
        }
    }

    #[test]
    fn delta_update_equals_regeneration(
        n in 1usize..=32, len in lens(), seed in any::<u64>(), which in any::<prop::sample::Index>(),
    ) {
        let s = Stripe::new(n + 1, len, seed, 0);
        let blocks = s.blocks();
        let (data, new) = (&blocks[..n], blocks[n]);
        let index = which.index(n);
        let mut changed = data.to_vec();
        changed[index] = new;
        let (want_p, want_q) = model_pq(&changed, len);
        for k in kernels() {
            let (mut p, mut q) = (vec![0; len], vec![0; len]);
            k.gen_pq(data, &mut p, &mut q);
            let mut p5 = p.clone();
            k.update_pq(index, data[index], new, &mut p, &mut q);
            k.update_p(data[index], new, &mut p5);
            prop_assert!(p == want_p && q == want_q, "{} update_pq n={} len={} index={}", k, n, len, index);
            prop_assert!(p5 == want_p, "{} update_p", k);
        }
    }

    #[test]
    fn random_two_data_recovery_wide(
        n in 2usize..=32, len in lens(), seed in any::<u64>(),
        a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>(),
    ) {
        let x = a.index(n);
        let y = (x + 1 + b.index(n - 1)) % n;
        let s = Stripe::new(n, len, seed, 0);
        let data = s.blocks();
        let (p, q) = model_pq(&data, len);
        let mut holed = data.clone();
        holed[x] = &[];
        holed[y] = &[1, 2, 3];
        let (mut holed_x, mut holed_y) = (data.clone(), data.clone());
        holed_x[x] = &[9];
        holed_y[y] = &[];
        for k in kernels() {
            let (mut dx, mut dy) = (vec![0; len], vec![0; len]);
            k.recover_two_data(&holed, x, y, &p, &q, &mut dx, &mut dy);
            prop_assert!(dx == data[x] && dy == data[y], "{} n={} len={} x={} y={}", k, n, len, x, y);
            let (mut dx, mut p2) = (vec![0; len], vec![0; len]);
            k.recover_data_and_p(&holed_x, x, &q, &mut dx, &mut p2);
            prop_assert!(dx == data[x] && p2 == p, "{} data+P", k);
            let mut q2 = vec![0; len];
            k.recover_data_and_q(&holed_y, y, &p, &mut dx, &mut q2);
            prop_assert!(dx == data[y] && q2 == q, "{} data+Q", k);
            k.recover_one(&holed_x, x, &p, &mut dx);
            prop_assert!(dx == data[x], "{} one", k);
        }
    }
}

#[test]
fn large_and_awkward_lengths() {
    for (n, len) in [
        (8, (1 << 20) + 37),
        (3, 4096),
        (5, 4095),
        (2, 63),
        (2, 65),
        (17, 257),
        (32, 33),
    ] {
        check_generation(n, len, len as u64, 0);
    }
}

#[test]
fn most_data_blocks() {
    let len = 300;
    let s = Stripe::new(MAX_DATA, len, 7, 0);
    let data = s.blocks();
    check_generation(MAX_DATA, len, 7, 1);
    let (p, q) = model_pq(&data, len);
    for k in kernels() {
        let (mut dx, mut dy) = (vec![0; len], vec![0; len]);
        k.recover_two_data(&data, 0, MAX_DATA - 1, &p, &q, &mut dx, &mut dy);
        assert!(dx == data[0] && dy == data[MAX_DATA - 1], "{k}");
    }
}

// ----------------------------------------------- recovery, every loss case

/// Rebuilds the lost blocks of a copy of `full` in place and compares.
fn check_in_place(k: Kernel, full: &[Vec<u8>], lost: &[usize], raid6: bool) {
    let mut broken: Vec<Vec<u8>> = full.to_vec();
    for &l in lost {
        broken[l].iter_mut().for_each(|b| *b ^= 0x5c); // garbage, not zero
    }
    let mut stripe: Vec<&mut [u8]> = broken.iter_mut().map(|b| &mut b[..]).collect();
    if raid6 {
        k.recover_raid6(&mut stripe, lost);
    } else {
        k.recover_raid5(&mut stripe, lost[0]);
    }
    for (i, (got, want)) in broken.iter().zip(full).enumerate() {
        assert!(
            got == want,
            "{k}: lost {lost:?} of {} blocks: block {i} differs (len {})",
            full.len(),
            want.len()
        );
    }
}

fn full_stripe(n: usize, len: usize, seed: u64, q: bool) -> Vec<Vec<u8>> {
    let s = Stripe::new(n, len, seed, 0);
    let data = s.blocks();
    let (p, qq) = model_pq(&data, len);
    let mut full: Vec<Vec<u8>> = data.iter().map(|d| d.to_vec()).collect();
    full.push(p);
    if q {
        full.push(qq);
    }
    full
}

#[test]
fn raid5_every_single_loss() {
    for n in 1..=8 {
        for len in [0, 1, 31, 100, 4096 + 77] {
            let full = full_stripe(n, len, (n * 1000 + len) as u64, false);
            for k in kernels() {
                for lost in 0..=n {
                    check_in_place(k, &full, &[lost], false);
                }
            }
        }
    }
}

#[test]
fn raid6_every_single_and_double_loss() {
    for n in 1..=8 {
        for len in [1, 33, 300, 4096 + 77] {
            let full = full_stripe(n, len, (n * 1000 + len) as u64, true);
            for k in kernels() {
                check_in_place(k, &full, &[], true);
                for a in 0..n + 2 {
                    check_in_place(k, &full, &[a], true);
                    for b in 0..n + 2 {
                        if a != b {
                            check_in_place(k, &full, &[a, b], true);
                        }
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn raid6_random_losses_random_lengths(
        n in 2usize..=8, len in lens(), seed in any::<u64>(),
        a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>(),
    ) {
        let full = full_stripe(n, len, seed, true);
        let x = a.index(n + 2);
        let y = (x + 1 + b.index(n + 1)) % (n + 2);
        for k in kernels() {
            check_in_place(k, &full, &[x, y], true);
            check_in_place(k, &full, &[x], true);
        }
    }
}

// ------------------------------------------------------- kernels and misuse

#[test]
fn detection() {
    let best = Kernel::detect();
    assert!(best.is_available());
    assert_eq!(Kernel::detect(), best, "cached");
    assert!(Kernel::Scalar.is_available());
    assert_eq!(Kernel::available().next(), Some(Kernel::Scalar));
    let names: std::collections::HashSet<_> = Kernel::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(names.len(), Kernel::ALL.len());
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(
            Kernel::Avx2.is_available(),
            std::arch::is_x86_feature_detected!("avx2")
        );
        if std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("gfni")
        {
            assert_eq!(best, Kernel::Avx512Gfni);
        }
    }
    // The free functions use the detected kernel.
    let (a, b) = ([1u8, 2, 3], [4u8, 5, 6]);
    let (mut p, mut q) = ([0u8; 3], [0u8; 3]);
    gen_pq(&[&a, &b], &mut p, &mut q);
    let (mut p2, mut q2) = ([0u8; 3], [0u8; 3]);
    Kernel::Scalar.gen_pq(&[&a, &b], &mut p2, &mut q2);
    assert_eq!((p, q), (p2, q2));
}

#[test]
fn unavailable_kernel_panics() {
    for k in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
        let r = std::panic::catch_unwind(|| k.gen_p(&[&[1u8][..]], &mut [0u8]));
        assert!(r.is_err(), "{k} is unavailable and must panic");
    }
}

#[test]
#[should_panic(expected = "data block 1 has 3 bytes, expected 4")]
fn length_mismatch_panics() {
    gen_p(&[&[0u8; 4], &[0u8; 3]], &mut [0u8; 4]);
}

#[test]
#[should_panic(expected = "q has 3 bytes")]
fn q_length_mismatch_panics() {
    gen_pq(&[&[0u8; 4]], &mut [0u8; 4], &mut [0u8; 3]);
}

#[test]
#[should_panic(expected = "listed twice")]
fn repeated_loss_panics() {
    let mut bufs = [[0u8; 4]; 4];
    let mut stripe: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    recover_raid6(&mut stripe, &[1, 1]);
}

#[test]
#[should_panic(expected = "at most 2 lost blocks")]
fn three_losses_panic() {
    let mut bufs = [[0u8; 4]; 5];
    let mut stripe: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    recover_raid6(&mut stripe, &[0, 1, 2]);
}

#[test]
#[should_panic(expected = "at most 255")]
fn too_many_blocks_for_q_panics() {
    let data = vec![&[0u8][..]; MAX_DATA + 1];
    gen_pq(&data, &mut [0], &mut [0]);
}
