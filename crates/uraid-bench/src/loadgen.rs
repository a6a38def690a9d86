//! The load generator: runs one [`Test`] on a [`Volume`] for a fixed time.
//!
//! Each thread has its own engine [`uraid_core::Queue`] (its own io_uring)
//! and keeps `qd` requests in flight: a completion is answered at once by
//! the next request, as fio and CrystalDiskMark (DiskSpd) do. Random offsets
//! are uniform over the test area and block-aligned (fio's `norandommap`);
//! sequential threads each sweep their own slice of the area.
//! Figures: MB/s = 10^6 bytes/s (CrystalDiskMark, fio `bw_bytes`/1e6),
//! latency from submission to completion in µs, CPU = this process's user +
//! system time (getrusage), so work the kernel does in its own threads
//! (loop devices, the block layer's workers) is not counted, as in fio.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;
use uraid_core::member::now_ns;
use uraid_core::{bail, Completion, Error, IoBuf, Op, Request, Result, Volume};

use crate::profile::{Dir, Pattern, Test};

/// What written blocks contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fill {
    /// Random bytes (incompressible), the default, as CrystalDiskMark.
    Random,
    /// All 0x00 (CrystalDiskMark's "All 0x00" option).
    Zero,
}

/// The figures of one timed run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RunResult {
    /// Bytes moved in the measured window.
    pub bytes: u64,
    /// Requests completed in the window.
    pub ios: u64,
    /// Length of the window in seconds.
    pub secs: f64,
    /// MB/s (10^6 bytes per second).
    pub mbps: f64,
    /// I/O operations per second.
    pub iops: f64,
    /// Mean latency in µs.
    pub lat_mean_us: f64,
    /// 99th percentile latency in µs.
    pub lat_p99_us: f64,
    /// Process CPU time (user + system) in seconds.
    pub cpu_secs: f64,
    /// CPU use in percent of one core (100 = one core busy).
    pub cpu_pct: f64,
    /// CPU seconds per GB (10^9 bytes) moved.
    pub cpu_secs_per_gb: f64,
}

fn cpu_time() -> f64 {
    // SAFETY: getrusage writes one rusage struct through the pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF covers every thread of the process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Fills `buf` according to `fill` (random bytes from `rng`).
pub fn fill_buf(buf: &mut [u8], fill: Fill, rng: &mut SmallRng) {
    match fill {
        Fill::Random => rng.fill_bytes(buf),
        Fill::Zero => buf.fill(0),
    }
}

/// The usable test area: `area` clamped to the volume and rounded down to
/// whole blocks. Errors: `InvalidInput` when not one block per thread fits.
pub fn test_area(vol: &Volume, test: &Test, area: u64) -> Result<u64> {
    let p = &test.profile;
    let bs = vol.block_size() as usize;
    if p.block % bs != 0 {
        bail!(InvalidInput, "{} uses {} byte blocks, but the target's block size is {bs} bytes", p.name, p.block);
    }
    let a = area.min(vol.capacity()) / p.block as u64 * p.block as u64;
    if a < (p.block * p.threads) as u64 {
        bail!(
            InvalidInput,
            "the test area ({area} bytes, target {} bytes) is too small for {}: it needs {} bytes",
            vol.capacity(),
            p.name,
            p.block * p.threads
        );
    }
    Ok(a)
}

struct ThreadOut {
    bytes: u64,
    ios: u64,
    hist: Histogram<u64>,
}

/// Runs `test` on `vol` for `duration` over the first `area` bytes.
///
/// Errors: the first I/O error (the run stops), or `InvalidInput` for an
/// area too small for the profile.
pub fn run(vol: &Arc<Volume>, test: Test, area: u64, duration: Duration, fill: Fill, seed: u64) -> Result<RunResult> {
    let area = test_area(vol, &test, area)?;
    let p = test.profile;
    let barrier = Barrier::new(p.threads + 1);
    let dur_ns = duration.as_nanos() as u64;
    let (outs, wall, cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || thread_main(vol, test, area, t, dur_ns, fill, seed.wrapping_add(t as u64 * 7919), barrier))
            })
            .collect();
        barrier.wait();
        let c0 = cpu_time();
        let t0 = now_ns();
        let outs: Vec<Result<ThreadOut>> = handles.into_iter().map(|h| h.join().expect("load thread panicked")).collect();
        (outs, (now_ns() - t0) as f64 / 1e9, cpu_time() - c0)
    });
    let _ = wall;
    let mut bytes = 0;
    let mut ios = 0;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid bounds");
    for o in outs {
        let o = o?;
        bytes += o.bytes;
        ios += o.ios;
        hist.add(&o.hist).expect("same bounds");
    }
    let secs = duration.as_secs_f64();
    Ok(RunResult {
        bytes,
        ios,
        secs,
        mbps: bytes as f64 / secs / 1e6,
        iops: ios as f64 / secs,
        lat_mean_us: hist.mean() / 1000.0,
        lat_p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
        cpu_secs: cpu,
        cpu_pct: cpu / secs * 100.0,
        cpu_secs_per_gb: if bytes > 0 { cpu / (bytes as f64 / 1e9) } else { 0.0 },
    })
}

#[allow(clippy::too_many_arguments)]
fn thread_main(
    vol: &Arc<Volume>,
    test: Test,
    area: u64,
    t: usize,
    dur_ns: u64,
    fill: Fill,
    seed: u64,
    barrier: &Barrier,
) -> Result<ThreadOut> {
    let p = test.profile;
    let setup = || -> Result<_> {
        let q = vol.queue(p.qd)?;
        let mut rng = SmallRng::seed_from_u64(seed);
        let bufs: Vec<IoBuf> = (0..p.qd)
            .map(|_| {
                let mut b = IoBuf::new(p.block);
                if test.dir == Dir::Write {
                    fill_buf(&mut b, fill, &mut rng);
                }
                b
            })
            .collect();
        Ok((q, rng, bufs))
    };
    let setup = setup();
    barrier.wait();
    let (mut q, mut rng, mut bufs) = setup?;
    let block = p.block as u64;
    // Sequential threads each own a slice; random ones roam the whole area.
    let (start, len) = match p.pattern {
        Pattern::Seq => {
            let slice = area / p.threads as u64 / block * block;
            (slice * t as u64, slice)
        }
        Pattern::Rand => (0, area),
    };
    let blocks = len / block;
    let mut next = 0u64;
    let op = match test.dir {
        Dir::Read => Op::Read,
        Dir::Write => Op::Write,
    };
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid bounds");
    let mut sub_at = vec![0u64; p.qd];
    let mut out: Vec<Completion> = Vec::with_capacity(p.qd);
    let mut bytes = 0u64;
    let mut ios = 0u64;
    let mut error: Option<Error> = None;
    let t0 = now_ns();
    let deadline = t0 + dur_ns;
    let mut offset_of = |rng: &mut SmallRng| {
        let idx = match p.pattern {
            Pattern::Seq => {
                let i = next % blocks;
                next += 1;
                i
            }
            Pattern::Rand => rng.random_range(0..blocks),
        };
        start + idx * block
    };
    for tag in 0..p.qd {
        let buf = bufs.pop().expect("qd buffers");
        sub_at[tag] = now_ns();
        let offset = offset_of(&mut rng);
        if let Err(r) = q.push(Request { op, offset, len: p.block, buf: Some(buf), tag: tag as u64, fua: false }) {
            return Err(r.error);
        }
    }
    while q.in_flight() > 0 {
        out.clear();
        q.wait(1, &mut out);
        let now = now_ns();
        for c in out.drain(..) {
            let tag = c.tag as usize;
            if let Err(e) = c.result {
                error.get_or_insert(e);
                continue;
            }
            if now <= deadline {
                bytes += block;
                ios += 1;
                let _ = hist.record((now - sub_at[tag]).max(1));
            }
            if now < deadline && error.is_none() {
                sub_at[tag] = now;
                let offset = offset_of(&mut rng);
                if let Err(r) = q.push(Request { op, offset, len: p.block, buf: c.buf, tag: tag as u64, fua: false }) {
                    error.get_or_insert(r.error);
                }
            }
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(ThreadOut { bytes, ios, hist }),
    }
}

/// Writes the first `area` bytes of `vol` once, sequentially with 1 MiB
/// requests at QD8, then flushes, so that read tests read real data (as
/// CrystalDiskMark writes its test file first).
pub fn prepare(vol: &Arc<Volume>, area: u64, fill: Fill) -> Result<()> {
    let block = (1usize << 20).min(area as usize) / vol.block_size() as usize * vol.block_size() as usize;
    let area = area.min(vol.capacity());
    let mut q = vol.queue(8)?;
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut free: Vec<IoBuf> = (0..8)
        .map(|_| {
            let mut b = IoBuf::new(block);
            fill_buf(&mut b, fill, &mut rng);
            b
        })
        .collect();
    let mut pos = 0u64;
    let mut out = Vec::new();
    let mut error = None;
    loop {
        while pos < area && error.is_none() {
            let Some(buf) = free.pop() else { break };
            let len = (area - pos).min(block as u64) as usize / vol.block_size() as usize * vol.block_size() as usize;
            if len == 0 {
                pos = area;
                free.push(buf);
                break;
            }
            if let Err(r) = q.push(Request { op: Op::Write, offset: pos, len, buf: Some(buf), tag: 0, fua: false }) {
                return Err(r.error);
            }
            pos += len as u64;
        }
        if q.in_flight() == 0 {
            break;
        }
        q.wait(1, &mut out);
        for c in out.drain(..) {
            if let Err(e) = c.result {
                error.get_or_insert(e);
            }
            free.extend(c.buf);
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    drop(q);
    vol.flush()
}
