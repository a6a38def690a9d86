//! The load generator: runs one [`Test`] on a [`BlockDevice`] (a volume in
//! process, or an NBD export through `uraid_nbd::client`) for a fixed time.
//!
//! Each thread has its own queue (an engine [`uraid_core::Queue`] with its
//! own io_uring, or its own NBD connection)
//! and keeps `qd` requests in flight: a completion is answered at once by
//! the next request, handed to the kernel before the next completion is
//! looked at, as fio (`iodepth_batch_submit=1`, its default) and
//! CrystalDiskMark (DiskSpd, one overlapped call per completion) do. Handing
//! a whole batch of replacements over in the wait that follows it saves
//! system calls, but the drive then waits for the batch, and the thread
//! sleeps more: on one unthrottled testbed drive (a loop device over RAM,
//! 2 vCPUs whose idle is a halt) RND4K Q32T1 read reached 84% of fio's IOPS
//! that way and 100-105% this way (medians of 6 alternating runs each). At
//! QD1 the one request goes with the wait, in one system call. One case
//! goes as a batch: when a wait hands back at least half the queue depth
//! at once, the drive finished faster than this thread could answer (the
//! thread is the bottleneck, as over `null:` members, whose I/O completes
//! as it is submitted), and a system call per request would only slow the
//! thread down; those replacements go with the next wait, in one call. Random offsets
//! are uniform over the test area and block-aligned (fio's `norandommap`);
//! sequential threads each sweep their own slice of the area.
//! Figures: MB/s = 10^6 bytes/s (CrystalDiskMark, fio `bw_bytes`/1e6),
//! latency from submission to completion in µs, CPU = this process's user +
//! system time (getrusage), so work the kernel does in its own threads
//! (loop devices, the block layer's workers) is not counted, as in fio;
//! through an NBD export it is the client's alone (the server's is its
//! own process's).
//!
//! Mixed tests draw each request's direction at random with the read share
//! of [`Dir::Mix`]; a buffer is filled once, when the thread starts, with
//! the [`Fill`] pattern (a mixed test's buffers then carry whatever was last
//! read, which is the same pattern: the area was written with it first).

use std::sync::Barrier;
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;
use uraid_core::io::member::now_ns;
use uraid_core::{bail, BlockDevice, BlockQueue, Completion, Error, IoBuf, Op, Request, Result};

use crate::profile::{Dir, Pattern, Test};

/// What written blocks contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fill {
    /// Random bytes (incompressible), the default, as CrystalDiskMark.
    Random,
    /// All 0x00 (CrystalDiskMark's "All 0x00" option).
    Zero,
    /// Compressible to this percentage of its size (0..=100): each 4 KiB
    /// piece starts with that share of random bytes and ends in zeros, as
    /// fio's `buffer_compress_percentage` = 100 - this value does. 100 is
    /// [`Fill::Random`], 0 is [`Fill::Zero`].
    Compressible(u8),
}

/// Size of the pieces a compressible fill is made of, in bytes.
pub const COMPRESS_PIECE: usize = 4096;

impl std::fmt::Display for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fill::Random => f.write_str("random (incompressible)"),
            Fill::Zero => f.write_str("all zeros"),
            Fill::Compressible(p) => write!(f, "compressible to {p}%"),
        }
    }
}

impl std::str::FromStr for Fill {
    type Err = Error;

    /// Parses `random`, `zero` or `compressible:PCT` (PCT from 0 to 100:
    /// the share of the data left after compression).
    fn from_str(s: &str) -> Result<Fill> {
        let l = s.trim().to_ascii_lowercase();
        match l.as_str() {
            "random" | "incompressible" => return Ok(Fill::Random),
            "zero" | "zeros" | "zeroes" => return Ok(Fill::Zero),
            _ => {}
        }
        if let Some(p) = l.strip_prefix("compressible:").or_else(|| l.strip_prefix("compressible=")) {
            let p = p.trim_end_matches('%');
            if let Ok(v) = p.parse::<u8>() {
                if v <= 100 {
                    return Ok(Fill::Compressible(v));
                }
            }
        }
        bail!(
            InvalidInput,
            "unknown data pattern '{s}': use random, zero, or compressible:PCT with PCT from 0 to 100 \
             (the share of the data left after compression, e.g. compressible:50)"
        )
    }
}

/// Latency percentiles of one run, in µs (submission to completion).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    /// Fastest request.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Slowest request.
    pub max: f64,
}

/// The percentiles [`Latency`] holds, as (label, quantile) pairs.
pub const PERCENTILES: [(&str, f64); 5] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999), ("p99.99", 0.9999)];

impl Latency {
    /// Percentiles of a histogram of nanoseconds (zeros when it is empty).
    pub fn from_hist(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
        Latency {
            min: h.min() as f64 / 1000.0,
            mean: h.mean() / 1000.0,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max() as f64 / 1000.0,
        }
    }

    /// The values of [`PERCENTILES`], in order.
    pub fn percentiles(&self) -> [f64; 5] {
        [self.p50, self.p90, self.p99, self.p999, self.p9999]
    }
}

/// A latency histogram from 1 ns to one hour at 2 significant digits.
pub fn new_hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid bounds")
}

/// The figures of one timed run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RunResult {
    /// Bytes moved in the measured window.
    pub bytes: u64,
    /// Requests completed in the window.
    pub ios: u64,
    /// Length of the measured window in seconds: from the start to the
    /// last completion counted (at most the run's duration, unless nothing
    /// completed within it).
    pub secs: f64,
    /// MB/s (10^6 bytes per second).
    pub mbps: f64,
    /// I/O operations per second.
    pub iops: f64,
    /// Mean latency in µs.
    pub lat_mean_us: f64,
    /// 99th percentile latency in µs.
    pub lat_p99_us: f64,
    /// Latency percentiles in µs.
    pub lat: Latency,
    /// Reads completed in the window (mixed tests: the read share).
    pub read_ios: u64,
    /// Writes completed in the window.
    pub write_ios: u64,
    /// Process CPU time (user + system) in seconds.
    pub cpu_secs: f64,
    /// Process CPU seconds per wall-clock second (1.0 = one core busy).
    pub cpu_per_sec: f64,
    /// CPU use in percent of one core (100 = one core busy).
    pub cpu_pct: f64,
    /// CPU seconds per GB (10^9 bytes) moved.
    pub cpu_secs_per_gb: f64,
}

/// CPU seconds (user + system) this process has used so far, every thread.
pub fn cpu_time() -> f64 {
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
        Fill::Random | Fill::Compressible(100) => rng.fill_bytes(buf),
        Fill::Zero | Fill::Compressible(0) => buf.fill(0),
        Fill::Compressible(pct) => {
            for piece in buf.chunks_mut(COMPRESS_PIECE) {
                let random = (piece.len() * pct.min(100) as usize).div_ceil(100);
                rng.fill_bytes(&mut piece[..random]);
                piece[random..].fill(0);
            }
        }
    }
}

/// Most bytes of I/O buffers one test may hold (block x QD x threads).
pub const MAX_BUFFERS: u64 = 1 << 30;

/// The usable test area: `area` clamped to the volume and rounded down to
/// whole blocks. Errors: `InvalidInput` when not one block per thread fits.
pub fn test_area<D: BlockDevice>(vol: &D, test: &Test, area: u64) -> Result<u64> {
    let p = &test.profile;
    let bs = vol.block_size() as usize;
    if !p.block.is_multiple_of(bs) {
        bail!(InvalidInput, "{} uses {} byte blocks, but the target's block size is {bs} bytes", p.name, p.block);
    }
    let buffers = p.block as u64 * p.qd as u64 * p.threads as u64;
    if buffers > MAX_BUFFERS {
        bail!(
            InvalidInput,
            "{} keeps {} requests of {} bytes in flight, {buffers} bytes of buffers; the most is {MAX_BUFFERS} \
             (1 GiB): use fewer threads, a lower queue depth or smaller blocks",
            p.name,
            p.qd * p.threads,
            p.block
        );
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

/// What one thread measured in one window, sent to the coordinator.
struct WindowOut {
    window: usize,
    bytes: u64,
    ios: u64,
    read_ios: u64,
    /// now_ns() of the last completion counted (0: none).
    last_ns: u64,
    hist: Histogram<u64>,
}

impl WindowOut {
    /// Nothing counted yet in window `window`.
    fn new(window: usize) -> WindowOut {
        WindowOut { window, bytes: 0, ios: 0, read_ios: 0, last_ns: 0, hist: new_hist() }
    }

    /// Counts one request of `block` bytes that completed at `now` (ns)
    /// after `lat_ns`.
    #[inline]
    fn record(&mut self, block: u64, is_read: bool, now: u64, lat_ns: u64) {
        self.bytes += block;
        self.ios += 1;
        self.read_ios += u64::from(is_read);
        self.last_ns = now;
        let _ = self.hist.record(lat_ns.max(1));
    }
}

/// Runs `test` on `vol` for `duration` over the first `area` bytes (one
/// window; see [`run_windows`]).
///
/// Errors: the first I/O error (the run stops), or `InvalidInput` for an
/// area too small for the profile.
pub fn run<D: BlockDevice>(vol: &D, test: Test, area: u64, duration: Duration, fill: Fill, seed: u64) -> Result<RunResult> {
    let mut r = run_windows(vol, test, area, &[duration], fill, seed, &mut |_| {})?;
    Ok(r.remove(0))
}

/// Runs `test` on `vol` without pause for the sum of `windows`, and
/// measures each window apart: a warm-up followed by the timed runs flows
/// straight into them, as fio's ramp does, so no run starts on a drive
/// that has just been idle (a token-bucket throttle would give it a burst).
///
/// A completion belongs to the window it arrives in. A window's rates are
/// over the time from the last completion of the window before (the start,
/// for the first) to its own last completion: exact for a drive serving
/// one request at a time, where cutting at the window's edge would drop
/// the request in progress (up to 7% of a 16 MiB QD1 test at 250 MB/s in
/// 1 s). A window in which nothing completed takes the figures of the
/// next one; if the last is empty, the requests still in flight when it
/// ends are counted in it, so no run reads zero. CPU is sampled at the
/// window edges. `on_window(i)` is called as window `i` starts.
///
/// Errors: the first I/O error (the run stops), or `InvalidInput` for an
/// area too small for the profile or an empty or zero-length window.
pub fn run_windows<D: BlockDevice>(
    vol: &D,
    test: Test,
    area: u64,
    windows: &[Duration],
    fill: Fill,
    seed: u64,
    on_window: &mut dyn FnMut(usize),
) -> Result<Vec<RunResult>> {
    let area = test_area(vol, &test, area)?;
    if let Dir::Mix(r) = test.dir {
        if !(1..=99).contains(&r) {
            bail!(InvalidInput, "a mixed test needs a read share from 1 to 99 percent, not {r}");
        }
    }
    if windows.is_empty() || windows.iter().any(|d| d.is_zero()) {
        bail!(InvalidInput, "a timed run needs a duration above zero");
    }
    let nwin = windows.len();
    // Window ends, ns from the start.
    let mut ends = Vec::with_capacity(nwin);
    let mut acc = 0u64;
    for d in windows {
        acc += d.as_nanos() as u64;
        ends.push(acc);
    }
    let run = Run { vol, test, area, ends: &ends, fill, seed };
    let (mut per_window, cpu_at, t0) = run.drive(on_window)?;
    if per_window[nwin - 1].ios == 0 {
        let late = per_window.pop().expect("late slot");
        let last = &mut per_window[nwin - 1];
        last.bytes = late.bytes;
        last.ios = late.ios;
        last.read_ios = late.read_ios;
        last.last_ns = late.last_ns;
        last.hist = late.hist;
    }
    let out = window_results(&per_window, windows, &cpu_at, t0);
    // Only possible when a thread failed before its first completion.
    if out.iter().any(Option::is_none) {
        bail!(Io, "{test}: no request completed");
    }
    Ok(out.into_iter().map(|r| r.expect("checked")).collect())
}

/// What every load thread of one timed run shares.
struct Run<'a, D> {
    vol: &'a D,
    test: Test,
    /// Bytes of the volume the run covers.
    area: u64,
    /// Window ends, ns from the start.
    ends: &'a [u64],
    fill: Fill,
    seed: u64,
}

impl<D: BlockDevice> Run<'_, D> {
    /// Starts the load threads, samples CPU at each window edge (calling
    /// `on_window`) and collects what each window counted, one more slot
    /// for the requests that ended after the last. Returns those, the CPU
    /// seconds at each edge and the start (ns). Errors: a thread's first.
    fn drive(&self, on_window: &mut dyn FnMut(usize)) -> Result<(Vec<WindowOut>, Vec<f64>, u64)> {
        let (p, nwin) = (self.test.profile, self.ends.len());
        let barrier = Barrier::new(p.threads + 1);
        let (tx, rx) = std::sync::mpsc::channel::<WindowOut>();
        // One more slot for the requests that ended after the last window.
        let mut per_window: Vec<WindowOut> = (0..=nwin).map(WindowOut::new).collect();
        let mut cpu_at = vec![0f64; nwin + 1];
        let mut t0 = 0u64;
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..p.threads)
                .map(|t| {
                    let barrier = &barrier;
                    let tx = tx.clone();
                    std::thread::Builder::new()
                        .name(format!("uraid-load{t}"))
                        .stack_size(256 << 10)
                        .spawn_scoped(s, move || self.thread_main(t, self.seed.wrapping_add(t as u64 * 7919), barrier, &tx))
                        .expect("cannot start a load thread")
                })
                .collect();
            drop(tx);
            barrier.wait();
            cpu_at[0] = cpu_time();
            t0 = now_ns();
            on_window(0);
            // Sample CPU at each window edge and tell the caller.
            for (w, &end) in self.ends.iter().enumerate() {
                loop {
                    let now = now_ns();
                    if now >= t0 + end {
                        break;
                    }
                    match rx.recv_timeout(Duration::from_nanos(t0 + end - now)) {
                        Ok(o) => merge(&mut per_window, o),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        // Every thread is gone (an error): stop waiting.
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                cpu_at[w + 1] = cpu_time();
                if w + 1 < nwin {
                    on_window(w + 1);
                }
            }
            let r = handles.into_iter().map(|h| h.join().expect("load thread panicked")).collect();
            for o in rx.try_iter() {
                merge(&mut per_window, o);
            }
            r
        });
        for r in results {
            r?;
        }
        Ok((per_window, cpu_at, t0))
    }
}

/// The figures of each window (`None` for none completed in it or any
/// after it); an empty window takes those of the next non-empty one.
fn window_results(per_window: &[WindowOut], windows: &[Duration], cpu_at: &[f64], t0: u64) -> Vec<Option<RunResult>> {
    let nwin = windows.len();
    let mut out: Vec<Option<RunResult>> = vec![None; nwin];
    let mut prev_end = t0;
    let mut pending: Vec<usize> = Vec::new();
    for w in 0..nwin {
        let win = &per_window[w];
        let wall = windows[w].as_secs_f64();
        let cpu = cpu_at[w + 1] - cpu_at[w];
        if win.ios == 0 {
            pending.push(w);
            continue;
        }
        let secs = (win.last_ns.saturating_sub(prev_end)).max(1) as f64 / 1e9;
        prev_end = win.last_ns;
        let lat = Latency::from_hist(&win.hist);
        let r = RunResult {
            bytes: win.bytes,
            ios: win.ios,
            secs,
            mbps: win.bytes as f64 / secs / 1e6,
            iops: win.ios as f64 / secs,
            lat_mean_us: lat.mean,
            lat_p99_us: lat.p99,
            lat,
            read_ios: win.read_ios,
            write_ios: win.ios - win.read_ios,
            cpu_secs: cpu,
            cpu_per_sec: cpu / wall,
            cpu_pct: cpu / wall * 100.0,
            cpu_secs_per_gb: cpu / (win.bytes as f64 / 1e9).max(1e-12),
        };
        for &e in &pending {
            out[e] = Some(r);
        }
        pending.clear();
        out[w] = Some(r);
    }
    out
}

fn merge(per_window: &mut [WindowOut], o: WindowOut) {
    let w = &mut per_window[o.window];
    w.bytes += o.bytes;
    w.ios += o.ios;
    w.read_ios += o.read_ios;
    w.last_ns = w.last_ns.max(o.last_ns);
    w.hist.add(&o.hist).expect("same bounds");
}

/// Where and what a load thread's next request is: its slice of the
/// area (sequential: one per thread; random: the whole area) and the
/// read share of a mixed test.
struct Picker {
    pattern: Pattern,
    dir: Dir,
    /// First byte of the slice.
    start: u64,
    /// Request size in bytes.
    block: u64,
    /// Blocks in the slice.
    blocks: u64,
    /// The next block of a sequential slice (wraps).
    next: u64,
    /// Reads out of 2^32 for a mixed test.
    read_below: u64,
}

impl Picker {
    /// Thread `t`'s picker for `test` over `area` bytes.
    fn new(test: &Test, area: u64, t: usize) -> Picker {
        let p = test.profile;
        let block = p.block as u64;
        // Sequential threads each own a slice; random ones roam the whole area.
        let (start, len) = match p.pattern {
            Pattern::Seq => {
                let slice = area / p.threads as u64 / block * block;
                (slice * t as u64, slice)
            }
            Pattern::Rand => (0, area),
        };
        let read_below: u64 = match test.dir {
            Dir::Read => 1 << 32,
            Dir::Write => 0,
            Dir::Mix(r) => (u64::from(r) << 32) / 100,
        };
        Picker { pattern: p.pattern, dir: test.dir, start, block, blocks: len / block, next: 0, read_below }
    }

    /// The next request's direction.
    #[inline]
    fn op(&self, rng: &mut SmallRng) -> Op {
        match self.dir {
            Dir::Read => Op::Read,
            Dir::Write => Op::Write,
            Dir::Mix(_) => {
                if u64::from(rng.next_u32()) < self.read_below {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        }
    }

    /// The next request's byte offset.
    #[inline]
    fn offset(&mut self, rng: &mut SmallRng) -> u64 {
        let idx = match self.pattern {
            Pattern::Seq => {
                let i = self.next % self.blocks;
                self.next += 1;
                i
            }
            Pattern::Rand => rng.random_range(0..self.blocks),
        };
        self.start + idx * self.block
    }
}

impl<D: BlockDevice> Run<'_, D> {
    /// The queue, random source and buffers of a load thread seeded `seed`.
    fn setup(&self, seed: u64) -> Result<(D::Queue, SmallRng, Vec<IoBuf>)> {
        let p = self.test.profile;
        let q = self.vol.open_queue(p.qd)?;
        let mut rng = SmallRng::seed_from_u64(seed);
        let bufs: Vec<IoBuf> = (0..p.qd)
            .map(|_| {
                let mut b = IoBuf::new(p.block);
                if self.test.dir.writes() {
                    fill_buf(&mut b, self.fill, &mut rng);
                }
                b
            })
            .collect();
        Ok((q, rng, bufs))
    }

    /// Load thread `t`: keeps QD requests in flight until the last window
    /// ends, sending what each window counted on `tx` as it closes.
    fn thread_main(&self, t: usize, seed: u64, barrier: &Barrier, tx: &std::sync::mpsc::Sender<WindowOut>) -> Result<()> {
        let p = self.test.profile;
        let setup = self.setup(seed);
        barrier.wait();
        let (mut q, mut rng, mut bufs) = setup?;
        let block = p.block as u64;
        let mut pick = Picker::new(&self.test, self.area, t);
        let mut sub_at = vec![0u64; p.qd];
        let mut is_read = vec![false; p.qd];
        let mut out: Vec<Completion> = Vec::with_capacity(p.qd);
        let mut error: Option<Error> = None;
        // Each replacement goes to the kernel at once (see the module docs).
        let submit_each = p.qd > 1;
        let t0 = now_ns();
        let ends = self.ends;
        let nwin = ends.len();
        let deadline = t0 + ends[nwin - 1];
        let mut win = 0usize;
        let mut cur = WindowOut::new(0);
        let mut late = WindowOut::new(nwin);
        for tag in 0..p.qd {
            let buf = bufs.pop().expect("qd buffers");
            sub_at[tag] = now_ns();
            let offset = pick.offset(&mut rng);
            let op = pick.op(&mut rng);
            is_read[tag] = op == Op::Read;
            if let Err(r) = q.push(Request { op, offset, len: p.block, buf: Some(buf), tag: tag as u64, fua: false }) {
                return Err(r.error);
            }
        }
        while q.in_flight() > 0 {
            out.clear();
            q.wait(1, &mut out);
            // Half the queue or more came back at once: this thread, not
            // the drive, is the bottleneck; the replacements go together
            // (see the module docs).
            let each = submit_each && out.len() * 2 < p.qd;
            let now = now_ns();
            // Close the windows that have ended.
            while win + 1 < nwin && now >= t0 + ends[win] {
                let _ = tx.send(std::mem::replace(&mut cur, WindowOut::new(win + 1)));
                win += 1;
            }
            for c in out.drain(..) {
                let tag = c.tag as usize;
                if let Err(e) = c.result {
                    error.get_or_insert(e);
                    continue;
                }
                if now <= deadline {
                    cur.record(block, is_read[tag], now, now - sub_at[tag]);
                } else if late.ios == 0 {
                    // The first request to end after the last window: counted
                    // only if no thread completed anything in that window.
                    late.record(block, is_read[tag], now, now - sub_at[tag]);
                }
                if now < deadline && error.is_none() {
                    sub_at[tag] = now;
                    let offset = pick.offset(&mut rng);
                    let op = pick.op(&mut rng);
                    is_read[tag] = op == Op::Read;
                    if let Err(r) = q.push(Request { op, offset, len: p.block, buf: c.buf, tag: tag as u64, fua: false }) {
                        error.get_or_insert(r.error);
                    } else if each {
                        q.submit();
                    }
                }
            }
        }
        let _ = tx.send(cur);
        if late.ios > 0 {
            let _ = tx.send(late);
        }
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Writes the first `area` bytes of `vol` once, sequentially with 1 MiB
/// requests at QD8, then flushes, so that read tests read real data (as
/// CrystalDiskMark writes its test file first).
pub fn prepare<D: BlockDevice>(vol: &D, area: u64, fill: Fill) -> Result<()> {
    let block = (1usize << 20).min(area as usize) / vol.block_size() as usize * vol.block_size() as usize;
    let area = area.min(vol.capacity());
    let mut q = vol.open_queue(8)?;
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
