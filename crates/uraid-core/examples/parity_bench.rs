//! Parity throughput per core: RAID 5 P, RAID 6 P+Q and RAID 6 recovery of
//! two lost data blocks, for every parity kernel this CPU has and for an
//! independent implementation (`rusty_erasure`, a Rust remake of ISA-L's
//! `xor_gen` / `pq_gen`), on one thread.
//!
//! The figure is bytes of DATA per second (the data blocks read, not the
//! parity written), in GB/s = 10^9 bytes/s, as md's boot-time RAID 6
//! benchmark counts it; each figure is the best of `--reps` runs of at least
//! `--ms` milliseconds (the machine's cores are shared), and the ratio is to
//! the scalar kernel on the same shape in the same run ("x scalar") and to
//! the independent implementation ("x peer", where it has the operation).
//! Implementations take turns (one run each per round), so that all of them
//! sample the same moments of a shared machine.
//!
//! Usage: `cargo run --release -p uraid-core --example parity_bench -- [--reps N] [--ms MS] [--quick]
//! [--shape DATAxBYTES]...` (e.g. `--shape 8x131072`: 8 data blocks of 128 KiB).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uraid_core::raid::parity::Kernel;

struct Opts {
    reps: usize,
    min_time: Duration,
    quick: bool,
    shapes: Vec<(usize, usize)>,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        reps: 15,
        min_time: Duration::from_millis(30),
        quick: false,
        shapes: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match a.as_str() {
            "--reps" => o.reps = num("--reps").max(1) as usize,
            "--ms" => o.min_time = Duration::from_millis(num("--ms").max(1)),
            "--quick" => o.quick = true,
            "--shape" => {
                let v = args.next().unwrap_or_default();
                let parsed = v
                    .split_once('x')
                    .and_then(|(n, l)| Some((n.parse().ok()?, l.parse().ok()?)));
                match parsed {
                    Some((n, l)) if n >= 2 => o.shapes.push((n, l)),
                    _ => panic!(
                        "--shape wants DATAxBYTES with at least 2 data blocks, e.g. 8x131072"
                    ),
                }
            }
            "-h" | "--help" => {
                println!("parity_bench [--reps N (15)] [--ms MS per run (30)] [--quick: fewer shapes] [--shape DATAxBYTES]...");
                std::process::exit(0);
            }
            _ => panic!("unknown argument {a:?}; try --help"),
        }
    }
    o
}

/// Data rate (bytes/s) of one run: `f` repeated for at least `min_time`,
/// `f` processing `bytes` bytes of data per call.
fn measure_once(min_time: Duration, bytes: usize, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        f();
        calls += 1;
        let t = start.elapsed();
        if t >= min_time {
            return bytes as f64 * calls as f64 / t.as_secs_f64();
        }
    }
}

/// The buffers of one shape.
struct Bufs<'a> {
    data: Vec<&'a [u8]>,
    p: Vec<u8>,
    q: Vec<u8>,
    dx: Vec<u8>,
    dy: Vec<u8>,
}

/// One call of `op` with `imp`.
fn run(imp: Impl, op: Op, b: &mut Bufs) {
    let n = b.data.len();
    let data = black_box(&b.data[..]);
    match (imp, op) {
        (Impl::Ours(k), Op::P) => k.gen_p(data, &mut b.p),
        (Impl::Ours(k), Op::Pq) => k.gen_pq(data, &mut b.p, &mut b.q),
        (Impl::Ours(k), Op::Recover2) => {
            k.recover_two_data(data, 1, n - 2, &b.p, &b.q, &mut b.dx, &mut b.dy)
        }
        (Impl::RustyErasure, Op::P) => {
            rusty_erasure::raid::xor_gen(data, &mut b.p).expect("shapes")
        }
        (Impl::RustyErasure, _) => {
            rusty_erasure::raid::pq_gen(data, &mut b.p, &mut b.q).expect("shapes")
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    P,
    Pq,
    Recover2,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::P => "P (raid5)",
            Op::Pq => "P+Q (raid6)",
            Op::Recover2 => "2 data lost (raid6)",
        }
    }
}

#[derive(Clone, Copy)]
enum Impl {
    Ours(Kernel),
    RustyErasure,
}

impl Impl {
    fn name(self) -> String {
        match self {
            Impl::Ours(k) => k.name().to_string(),
            Impl::RustyErasure => "rusty_erasure".to_string(),
        }
    }
}

fn main() {
    let o = parse_args();
    let shapes: &[(usize, usize)] = if !o.shapes.is_empty() {
        &o.shapes
    } else if o.quick {
        &[(8, 128 << 10), (8, 1 << 20)]
    } else {
        // md's boot benchmark uses 4 KiB pages over 16 data disks (cache
        // resident); a 128 KiB chunk (uraid's default) and 1 MiB over 8
        // data members; 16 MiB per member does not fit in any cache.
        &[(16, 4 << 10), (8, 128 << 10), (8, 1 << 20), (8, 16 << 20)]
    };
    let kernels: Vec<Kernel> = Kernel::available().collect();
    println!(
        "parity throughput, one thread, GB/s of data (10^9 bytes/s); best of {} runs of >= {} ms",
        o.reps,
        o.min_time.as_millis()
    );
    println!(
        "kernels available: {} (detected best: {})",
        names(&kernels),
        Kernel::detect()
    );
    println!();
    println!(
        "{:<14} {:<20} {:<14} {:>9} {:>10} {:>10}",
        "shape", "operation", "kernel", "GB/s", "x scalar", "x peer"
    );
    let mut rng = SmallRng::seed_from_u64(1);
    for &(n, len) in shapes {
        let data: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let mut b = vec![0u8; len];
                rng.fill(&mut b[..]);
                b
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        Kernel::Scalar.gen_pq(&refs, &mut p, &mut q);
        let (dx, dy) = (vec![0u8; len], vec![0u8; len]);
        let shape = format!("{n} x {}", size(len));
        let mut bufs = Bufs {
            data: refs,
            p,
            q,
            dx,
            dy,
        };
        for op in [Op::P, Op::Pq, Op::Recover2] {
            let mut impls: Vec<Impl> = kernels.iter().map(|&k| Impl::Ours(k)).collect();
            if op != Op::Recover2 {
                impls.push(Impl::RustyErasure);
            }
            // Rounds: each implementation runs once per round, so that all of
            // them sample the same moments of a shared machine; the best run
            // of each counts.
            let bytes = n * len;
            let mut best = vec![0f64; impls.len()];
            for &imp in &impls {
                run(imp, op, &mut bufs); // warm up: page faults, caches
            }
            for _ in 0..o.reps {
                for (i, &imp) in impls.iter().enumerate() {
                    let rate = measure_once(o.min_time, bytes, || run(imp, op, &mut bufs));
                    best[i] = best[i].max(rate);
                }
            }
            let scalar = best[0];
            let peer = impls
                .iter()
                .position(|i| matches!(i, Impl::RustyErasure))
                .map(|i| best[i]);
            for (&imp, &rate) in impls.iter().zip(&best) {
                // Every implementation must still give the right answer.
                run(imp, op, &mut bufs);
                verify(op, &bufs);
                let vs_peer = peer.map_or("-".to_string(), |p| format!("{:.2}", rate / p));
                println!(
                    "{:<14} {:<20} {:<14} {:>9.2} {:>10.2} {:>10}",
                    shape,
                    op.name(),
                    imp.name(),
                    rate / 1e9,
                    rate / scalar,
                    vs_peer
                );
            }
        }
    }
}

fn verify(op: Op, b: &Bufs) {
    let (data, p, q, dx, dy) = (&b.data[..], &b.p[..], &b.q[..], &b.dx[..], &b.dy[..]);
    let len = p.len();
    let (mut p2, mut q2) = (vec![0u8; len], vec![0u8; len]);
    Kernel::Scalar.gen_pq(data, &mut p2, &mut q2);
    assert!(p == p2, "P is wrong");
    if op != Op::P {
        assert!(q == q2, "Q is wrong");
    }
    if op == Op::Recover2 {
        assert!(
            dx == data[1] && dy == data[data.len() - 2],
            "recovery is wrong"
        );
    }
}

fn names(k: &[Kernel]) -> String {
    k.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
}

fn size(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}
