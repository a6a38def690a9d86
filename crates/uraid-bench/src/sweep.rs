//! Sweeps: ATTO Disk Benchmark's transfer-size sweep and AIDA64's linear
//! surface test. Both move a fixed amount of data sequentially instead of
//! running for a fixed time.
//!
//! ATTO: for each transfer size from 512 B to 64 MiB in powers of two, one
//! pass writes the 256 MiB test area at QD4, then one pass reads it back at
//! QD4, as ATTO Disk Benchmark does (no warm-up, no repeats); MB/s and IOPS
//! per size. A pass that has not finished when its time cap (60 s by
//! default) runs out stops issuing there and is measured over what
//! completed, so a slow drive cannot hold the sweep for hours (a hard disk
//! at 200 IOPS would take 44 minutes per 512 B pass; a drive at 25,000 IOPS
//! finishes it in 21 s, under the cap). Sizes below the target's block size
//! are skipped and listed.
//!
//! Linear: the whole device in 1 MiB blocks at QD1, reads by default; the
//! MB/s of each of `points` equal slices, against position. The write
//! variant destroys the data on the target and needs an explicit flag.

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;
use uraid_core::io::member::now_ns;
use uraid_core::{bail, BlockQueue, IoBuf, Op, Request, Result, Volume};

use crate::loadgen::{cpu_time, fill_buf, new_hist, Fill, Latency};
use crate::profile::Dir;

/// Figures of one sequential pass.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Transfer {
    /// Bytes moved.
    pub bytes: u64,
    /// Requests completed.
    pub ios: u64,
    /// Seconds from the first submission to the last completion.
    pub secs: f64,
    /// MB/s (10^6 bytes per second).
    pub mbps: f64,
    /// I/O operations per second.
    pub iops: f64,
    /// Latency percentiles in µs.
    pub lat: Latency,
    /// Process CPU seconds per wall second.
    pub cpu_per_sec: f64,
    /// Process CPU seconds per GB (10^9 bytes) moved.
    pub cpu_secs_per_gb: f64,
    /// True when the time cap stopped the pass before the end of its range.
    pub capped: bool,
}

/// What a sweep is doing, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct SweepProgress {
    /// Short description of the pass (`ATTO 4K write`, `linear read`).
    pub what: &'static str,
    /// Transfer size of this pass in bytes.
    pub block: usize,
    /// Direction of this pass.
    pub dir: Dir,
    /// Bytes done in this pass.
    pub done: u64,
    /// Bytes this pass will move if not capped.
    pub total: u64,
}

struct Pass {
    transfer: Transfer,
    /// (end offset relative to the pass start, completion time in ns since
    /// the pass started), per completion, when sampling.
    samples: Vec<(u64, u64)>,
}

/// One sequential pass over `[start, start + len)` in `block` requests with
/// `qd` in flight. Stops issuing at `cap` (if any). The last request is
/// shortened to the end of the range.
#[allow(clippy::too_many_arguments)]
fn pass(
    vol: &Arc<Volume>,
    op: Op,
    block: usize,
    qd: usize,
    start: u64,
    len: u64,
    cap: Option<Duration>,
    fill: Fill,
    sample: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<Pass> {
    let bs = vol.block_size() as u64;
    let mut q = vol.queue(qd)?;
    let mut free = pass_buffers(op, block, qd, fill);
    let mut sub_at = vec![0u64; qd];
    let mut tag_free: Vec<u64> = (0..qd as u64).rev().collect();
    let mut ends = vec![0u64; qd];
    let mut hist = new_hist();
    let mut samples = Vec::new();
    let mut out = Vec::with_capacity(qd);
    let mut pos = 0u64;
    let (mut bytes, mut ios) = (0u64, 0u64);
    let mut error = None;
    let mut capped = false;
    let step = (len / 200).max(1);
    let mut next_report = step;
    let c0 = cpu_time();
    let t0 = now_ns();
    let deadline = cap.map(|c| t0 + c.as_nanos() as u64);
    let mut last = t0;
    loop {
        while pos < len && error.is_none() {
            if deadline.is_some_and(|d| now_ns() >= d) {
                capped = true;
                break;
            }
            let (Some(buf), Some(tag)) = (free.pop(), tag_free.pop()) else { break };
            let n = ((len - pos).min(block as u64) / bs * bs) as usize;
            if n == 0 {
                free.push(buf);
                tag_free.push(tag);
                pos = len;
                break;
            }
            sub_at[tag as usize] = now_ns();
            ends[tag as usize] = pos + n as u64;
            if let Err(r) = q.push(Request { op, offset: start + pos, len: n, buf: Some(buf), tag, fua: false }) {
                return Err(r.error);
            }
            // To the kernel at once, as the load generator does (see
            // crate::loadgen); a lone request goes with the wait.
            if qd > 1 {
                q.submit();
            }
            pos += n as u64;
        }
        if q.in_flight() == 0 {
            break;
        }
        out.clear();
        q.wait(1, &mut out);
        let now = now_ns();
        for c in out.drain(..) {
            let tag = c.tag as usize;
            match c.result {
                Ok(n) => {
                    bytes += n as u64;
                    ios += 1;
                    let _ = hist.record((now - sub_at[tag]).max(1));
                    if sample {
                        samples.push((ends[tag], now - t0));
                    }
                }
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
            free.extend(c.buf);
            tag_free.push(c.tag);
            last = now;
        }
        if bytes >= next_report {
            progress(bytes);
            next_report = bytes + step;
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    progress(bytes);
    let cpu = cpu_time() - c0;
    let secs = ((last - t0) as f64 / 1e9).max(1e-9);
    Ok(Pass { transfer: Transfer::of(bytes, ios, secs, &hist, cpu, capped), samples })
}

/// The `qd` buffers of `block` bytes of a pass (filled for a write, the
/// same for every pass of that size).
fn pass_buffers(op: Op, block: usize, qd: usize, fill: Fill) -> Vec<IoBuf> {
    let mut rng = SmallRng::seed_from_u64(0xa770 ^ block as u64);
    (0..qd)
        .map(|_| {
            let mut b = IoBuf::new(block);
            if op == Op::Write {
                fill_buf(&mut b, fill, &mut rng);
            }
            b
        })
        .collect()
}

impl Transfer {
    /// The figures of `bytes` moved in `ios` requests over `secs` s, with
    /// latencies `hist` (ns) and `cpu` s of process CPU.
    fn of(bytes: u64, ios: u64, secs: f64, hist: &Histogram<u64>, cpu: f64, capped: bool) -> Transfer {
        Transfer {
            bytes,
            ios,
            secs,
            mbps: bytes as f64 / secs / 1e6,
            iops: ios as f64 / secs,
            lat: Latency::from_hist(hist),
            cpu_per_sec: cpu / secs,
            cpu_secs_per_gb: if bytes > 0 { cpu / (bytes as f64 / 1e9) } else { 0.0 },
            capped,
        }
    }
}

/// How to run the ATTO sweep.
#[derive(Debug, Clone, Serialize)]
pub struct AttoOptions {
    /// Smallest transfer size in bytes (512).
    pub min: usize,
    /// Largest transfer size in bytes (64 MiB).
    pub max: usize,
    /// Requests in flight (ATTO's "overlapped I/O" queue depth, 4).
    pub qd: usize,
    /// Bytes moved per size and direction (ATTO's total length, 256 MiB).
    pub area: u64,
    /// Most time one pass may take before it stops issuing (60 s).
    pub cap: Duration,
    /// Data written.
    pub fill: Fill,
    /// Run the write passes.
    pub write: bool,
    /// Run the read passes.
    pub read: bool,
}

impl Default for AttoOptions {
    fn default() -> Self {
        AttoOptions {
            min: 512,
            max: 64 << 20,
            qd: 4,
            area: 256 << 20,
            cap: Duration::from_secs(60),
            fill: Fill::Random,
            write: true,
            read: true,
        }
    }
}

/// One transfer size of the ATTO sweep.
#[derive(Debug, Clone, Serialize)]
pub struct AttoPoint {
    /// Transfer size in bytes.
    pub size: usize,
    /// The write pass, if run.
    pub write: Option<Transfer>,
    /// The read pass, if run.
    pub read: Option<Transfer>,
}

/// The ATTO sweep of one target.
#[derive(Debug, Clone, Serialize)]
pub struct Atto {
    /// Requests in flight.
    pub qd: usize,
    /// Bytes per pass.
    pub area: u64,
    /// Per-size results, smallest first.
    pub points: Vec<AttoPoint>,
    /// Sizes skipped because they are below the target's block size.
    pub skipped: Vec<usize>,
}

/// The transfer sizes of a sweep from `min` to `max`: powers of two.
pub fn atto_sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = min.max(1).next_power_of_two();
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

/// Runs the ATTO sweep on `vol`: per size, a write pass then a read pass.
///
/// Errors: `InvalidInput` for bad options or a target smaller than the
/// largest transfer; the first I/O error.
pub fn atto(vol: &Arc<Volume>, opts: &AttoOptions, progress: &mut dyn FnMut(SweepProgress)) -> Result<Atto> {
    if opts.min == 0 || opts.max < opts.min || opts.max > uraid_core::io::request::MAX_REQUEST {
        bail!(InvalidInput, "ATTO transfer sizes must run from 512 bytes up to at most 64M, smallest first");
    }
    if opts.qd == 0 || opts.qd > 256 {
        bail!(InvalidInput, "the ATTO queue depth must be from 1 to 256, not {}", opts.qd);
    }
    if (opts.max as u64).saturating_mul(opts.qd as u64) > crate::loadgen::MAX_BUFFERS {
        bail!(
            InvalidInput,
            "ATTO at QD{} with {} byte transfers needs more than 1 GiB of buffers; lower --atto-qd or --atto-max",
            opts.qd,
            opts.max
        );
    }
    let area = opts.area.min(vol.capacity());
    if area < opts.max as u64 {
        bail!(
            InvalidInput,
            "the ATTO area ({area} bytes on this target) is smaller than its largest transfer ({} bytes); \
             give a larger --atto-size or a smaller --atto-max",
            opts.max
        );
    }
    let bs = vol.block_size() as usize;
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    for size in atto_sizes(opts.min, opts.max) {
        if size < bs {
            skipped.push(size);
            continue;
        }
        let mut one = |op: Op, dir: Dir| -> Result<Transfer> {
            let what = if dir == Dir::Write { "ATTO write" } else { "ATTO read" };
            let p = pass(vol, op, size, opts.qd, 0, area, Some(opts.cap), opts.fill, false, &mut |done| {
                progress(SweepProgress { what, block: size, dir, done, total: area })
            })?;
            Ok(p.transfer)
        };
        let write = if opts.write { Some(one(Op::Write, Dir::Write)?) } else { None };
        let read = if opts.read { Some(one(Op::Read, Dir::Read)?) } else { None };
        points.push(AttoPoint { size, write, read });
    }
    if opts.write {
        vol.flush()?;
    }
    Ok(Atto { qd: opts.qd, area, points, skipped })
}

/// How to run a linear surface test.
#[derive(Debug, Clone, Serialize)]
pub struct SurfaceOptions {
    /// Request size in bytes (1 MiB).
    pub block: usize,
    /// Number of slices the device is cut into for the chart.
    pub points: usize,
    /// Bytes to cover from the start (None: the whole device).
    pub len: Option<u64>,
    /// Read or write (write destroys the target's data).
    pub dir: Dir,
    /// Data written.
    pub fill: Fill,
}

impl Default for SurfaceOptions {
    fn default() -> Self {
        SurfaceOptions { block: 1 << 20, points: 100, len: None, dir: Dir::Read, fill: Fill::Random }
    }
}

/// One slice of a surface test.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SurfacePoint {
    /// Start of the slice, bytes from the start of the target.
    pub pos: u64,
    /// MB/s over the slice.
    pub mbps: f64,
}

/// A linear surface test of one target.
#[derive(Debug, Clone, Serialize)]
pub struct Surface {
    /// Read or write.
    pub dir: Dir,
    /// Bytes covered.
    pub len: u64,
    /// Request size in bytes.
    pub block: usize,
    /// The pass as a whole (average MB/s etc.).
    pub total: Transfer,
    /// MB/s per slice, in position order.
    pub points: Vec<SurfacePoint>,
    /// Slowest slice, MB/s.
    pub min_mbps: f64,
    /// Fastest slice, MB/s.
    pub max_mbps: f64,
}

/// Reads (or writes) the whole target sequentially at QD1 and reports MB/s
/// against position.
///
/// Errors: `InvalidInput` for bad options; the first I/O error.
pub fn surface(vol: &Arc<Volume>, opts: &SurfaceOptions, progress: &mut dyn FnMut(SweepProgress)) -> Result<Surface> {
    let bs = vol.block_size() as u64;
    let len = opts.len.unwrap_or(u64::MAX).min(vol.capacity()) / bs * bs;
    if opts.block == 0 || !(opts.block as u64).is_multiple_of(bs) || opts.block > uraid_core::io::request::MAX_REQUEST {
        bail!(InvalidInput, "the surface block size must be a multiple of {bs} bytes up to 64M");
    }
    if len < opts.block as u64 {
        bail!(InvalidInput, "the target ({len} bytes) is smaller than one surface block ({} bytes)", opts.block);
    }
    let op = match opts.dir {
        Dir::Read => Op::Read,
        Dir::Write => Op::Write,
        Dir::Mix(_) => bail!(InvalidInput, "the surface test reads or writes, it does not mix"),
    };
    let what = if op == Op::Read { "linear read" } else { "linear write" };
    let p = pass(vol, op, opts.block, 1, 0, len, None, opts.fill, true, &mut |done| {
        progress(SweepProgress { what, block: opts.block, dir: opts.dir, done, total: len })
    })?;
    if op == Op::Write {
        vol.flush()?;
    }
    let n = opts.points.clamp(1, 10_000).min((len / opts.block as u64).max(1) as usize);
    let slice = len.div_ceil(n as u64);
    // At QD1 completions come in position order: the last completion in
    // each slice closes it, and the slice's speed is the bytes since the
    // previous slice's close over the time since then.
    let mut last_in: Vec<Option<(u64, u64)>> = vec![None; n];
    for &(end, t) in &p.samples {
        let b = (((end - 1) / slice) as usize).min(n - 1);
        last_in[b] = Some((end, t));
    }
    let mut points = Vec::with_capacity(n);
    let (mut prev_end, mut prev_t) = (0u64, 0u64);
    for (end, t) in last_in.into_iter().flatten() {
        let dt = t.saturating_sub(prev_t).max(1) as f64 / 1e9;
        points.push(SurfacePoint { pos: prev_end, mbps: (end - prev_end) as f64 / dt / 1e6 });
        prev_end = end;
        prev_t = t;
    }
    let min_mbps = points.iter().map(|p| p.mbps).fold(f64::INFINITY, f64::min);
    let max_mbps = points.iter().map(|p| p.mbps).fold(0.0, f64::max);
    Ok(Surface { dir: opts.dir, len, block: opts.block, total: p.transfer, points, min_mbps, max_mbps })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atto_sizes_are_powers_of_two() {
        let s = atto_sizes(512, 64 << 20);
        assert_eq!(s.len(), 18);
        assert_eq!((s[0], s[17]), (512, 64 << 20));
        assert!(s.windows(2).all(|w| w[1] == 2 * w[0]));
        assert_eq!(atto_sizes(4096, 4096), vec![4096]);
    }
}
