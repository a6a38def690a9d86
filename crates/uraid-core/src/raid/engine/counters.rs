//! Per-member I/O counters of the engine (`uraid iostat`, `status`,
//! metrics): reads, writes, bytes, errors by kind and a latency histogram
//! per member, counted where a member I/O completes.
//!
//! Counting costs no shared write per I/O: each [`RaidQueue`](super::RaidQueue)
//! (one per engine thread) takes a `Slab` of its own from the volume's
//! `Registry` and is the only thread that writes it, with a plain load
//! and store (no locked instruction, no cache line bounced between
//! threads). A reader sums every slab of the volume (`Registry::snapshot`).
//! A queue that goes away hands its slab back and the next queue carries
//! on counting in it, so the totals never go backwards and the slabs are
//! as many as queues ever ran at once.
//!
//! Latency is from the piece's first submission (a clock read where the
//! queue pushes it) to the reap of its completion (one clock read per reap
//! pass, shared by the completions it takes), in log2 buckets of
//! nanoseconds: no allocation per I/O. Only one member I/O in
//! [`TIME_EVERY`] of each member on each queue is timed (the first, then
//! every 32nd): two clock reads per I/O cost a third of the engine's time
//! per I/O on `null:` members; the mean and the p99 of a sample are those
//! of the whole for any run long enough to matter. Counts, bytes and
//! errors are exact.
//!
//! The hooks: the queue asks its `QueueCounters` whether to time a piece
//! it pushes for the first time (`time_this`), starts each reap pass with
//! `new_pass`, and `piece::progress`, which every member I/O's completion
//! goes through (plain and stripe pieces alike), is handed the queue's
//! counters and calls `piece_done` when a piece is finished. No thread-local
//! state: the counters are a field of the queue, passed down (an earlier
//! version found them through thread-locals at every submission and
//! completion, which cost about 5% of the engine's time per I/O on `null:`
//! members).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::io::request::Op;

/// Latency buckets: bucket `i` counts latencies of `2^i` to `2^(i+1) - 1`
/// ns (bucket 0 also 0 ns; the last everything longer, 2^39 ns = 550 s).
pub const BUCKETS: usize = 40;

/// A counter that only one thread writes (a plain load and store).
#[derive(Default)]
struct Count(AtomicU64);

impl Count {
    #[inline(always)]
    fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    #[inline(always)]
    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// One direction's counters in a slab.
struct Dir {
    ops: Count,
    bytes: Count,
    /// Sum of the timed ops' latencies (ns).
    lat_sum: Count,
    lat: [Count; BUCKETS],
}

impl Default for Dir {
    fn default() -> Dir {
        Dir { ops: Count::default(), bytes: Count::default(), lat_sum: Count::default(), lat: std::array::from_fn(|_| Count::default()) }
    }
}

/// One member I/O in this many (per member and queue) is timed.
pub const TIME_EVERY: u64 = 32;

/// Error kinds, in [`IoErrors`]'s order.
const ERROR_KINDS: usize = 5;

/// One member's counters in a slab (aligned so that no two slabs share a
/// cache line).
#[derive(Default)]
#[repr(align(128))]
struct Cells {
    read: Dir,
    write: Dir,
    errors: [Count; ERROR_KINDS],
    /// Member I/Os this slab's queue pushed for the first time, modulo
    /// [`TIME_EVERY`] (which to time).
    tick: Count,
}

/// One queue's counters, one [`Cells`] per member; written by the queue
/// that holds it only.
pub(super) struct Slab {
    members: Box<[Cells]>,
    busy: AtomicBool,
}

/// Every slab of a volume.
#[derive(Debug)]
pub(super) struct Registry {
    members: usize,
    slabs: Mutex<Vec<Arc<Slab>>>,
}

impl std::fmt::Debug for Slab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "counters of {} members", self.members.len())
    }
}

impl Registry {
    /// Counters for a volume of `members` members.
    pub(super) fn new(members: usize) -> Registry {
        Registry { members, slabs: Mutex::new(Vec::new()) }
    }

    /// A slab for a new queue: a free one, else a new one.
    pub(super) fn take(&self) -> QueueCounters {
        let mut slabs = self.slabs.lock().unwrap_or_else(|e| e.into_inner());
        for s in slabs.iter() {
            if s.busy.compare_exchange(false, true, std::sync::atomic::Ordering::Acquire, Relaxed).is_ok() {
                return QueueCounters { slab: s.clone(), now: 0 };
            }
        }
        let s = Arc::new(Slab { members: (0..self.members).map(|_| Cells::default()).collect(), busy: AtomicBool::new(true) });
        slabs.push(s.clone());
        QueueCounters { slab: s, now: 0 }
    }

    /// The sums over every slab, one per member (in role order).
    pub(super) fn snapshot(&self) -> Vec<MemberIo> {
        let slabs = self.slabs.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = vec![MemberIo::default(); self.members];
        for s in slabs.iter() {
            for (o, c) in out.iter_mut().zip(s.members.iter()) {
                o.reads += c.read.ops.get();
                o.writes += c.write.ops.get();
                o.read_bytes += c.read.bytes.get();
                o.written_bytes += c.write.bytes.get();
                let e = &c.errors;
                o.errors.read += e[0].get();
                o.errors.write += e[1].get();
                o.errors.vanished += e[2].get();
                o.errors.timeout += e[3].get();
                o.errors.other += e[4].get();
                o.read_latency.add_dir(&c.read);
                o.write_latency.add_dir(&c.write);
            }
        }
        for o in &mut out {
            o.fill_summary();
        }
        out
    }
}

/// A queue's hold on its slab; the slab goes back to the registry when it
/// is dropped. `now`: the current reap pass's clock (ns; 0 until a timed
/// completion of the pass reads it).
pub(super) struct QueueCounters {
    slab: Arc<Slab>,
    now: u64,
}

impl Drop for QueueCounters {
    fn drop(&mut self) {
        self.slab.busy.store(false, std::sync::atomic::Ordering::Release);
    }
}

impl QueueCounters {
    /// Whether the member I/O this queue pushes to `member` for the first
    /// time is to be timed (see [`TIME_EVERY`]).
    #[inline(always)]
    pub(super) fn time_this(&self, member: u32) -> bool {
        match self.slab.members.get(member as usize) {
            Some(c) => {
                let n = c.tick.get();
                c.tick.0.store(if n + 1 >= TIME_EVERY { 0 } else { n + 1 }, Relaxed);
                n == 0
            }
            None => false,
        }
    }

    /// A reap pass starts: the completions it takes share one clock read.
    #[inline(always)]
    pub(super) fn new_pass(&mut self) {
        self.now = 0;
    }

    /// Accounts member I/O `op` on `member` finished: `bytes` transferred,
    /// `started` when it was first submitted (ns on the engine clock, 0:
    /// never reached the kernel, not timed), `errno` its error (0: none,
    /// -1: an error without one).
    #[inline]
    pub(super) fn piece_done(&mut self, member: u32, op: Op, bytes: usize, started: u64, errno: i32) {
        let Some(c) = self.slab.members.get(member as usize) else { return };
        if errno != 0 {
            c.errors[error_kind(op, errno)].add(1);
        }
        let d = match op {
            Op::Read => &c.read,
            Op::Write => &c.write,
            _ => return,
        };
        d.ops.add(1);
        d.bytes.add(bytes as u64);
        if started != 0 {
            if self.now == 0 {
                self.now = crate::clock::now_ns();
            }
            let ns = self.now.saturating_sub(started);
            d.lat_sum.add(ns);
            d.lat[bucket(ns)].add(1);
        }
    }
}

/// The histogram bucket of a latency of `ns` nanoseconds.
#[inline(always)]
fn bucket(ns: u64) -> usize {
    ((63 - (ns | 1).leading_zeros()) as usize).min(BUCKETS - 1)
}

/// Index of the error kind of `errno` (-1: an error without one) on `op`
/// in [`IoErrors`]'s order: read, write, vanished, timeout, other.
fn error_kind(op: Op, errno: i32) -> usize {
    match errno {
        libc::ENXIO | libc::ENODEV | libc::ESHUTDOWN | libc::ENOLINK => 2,
        libc::ETIMEDOUT => 3,
        libc::EIO | libc::EILSEQ | libc::ENODATA | libc::EBADMSG | libc::EREMOTEIO => match op {
            Op::Read => 0,
            _ => 1,
        },
        _ => 4,
    }
}

/// Member I/O errors by kind (counts).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoErrors {
    /// Reads that failed with a medium or I/O error (EIO, EILSEQ, ENODATA, EBADMSG).
    pub read: u64,
    /// Writes, flushes, discards and zeroings that failed so.
    pub write: u64,
    /// I/Os that found the device gone (ENXIO, ENODEV, ESHUTDOWN).
    pub vanished: u64,
    /// I/Os that timed out (ETIMEDOUT).
    pub timeout: u64,
    /// Any other error (a short transfer at the device's end, ...).
    pub other: u64,
}

impl IoErrors {
    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.read + self.write + self.vanished + self.timeout + self.other
    }

    /// The kinds with their names, as metrics label them.
    pub fn by_kind(&self) -> [(&'static str, u64); ERROR_KINDS] {
        [("read", self.read), ("write", self.write), ("vanished", self.vanished), ("timeout", self.timeout), ("other", self.other)]
    }
}

/// A latency histogram of member I/Os.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    /// I/Os timed (one in [`TIME_EVERY`] of those that reached the kernel).
    pub count: u64,
    /// Sum of their latencies, ns.
    pub sum_ns: u64,
    /// Counts per log2 bucket: entry `i` counts latencies from `2^i` to
    /// `2^(i+1) - 1` ns ([`BUCKETS`] entries; fewer when the last are 0).
    pub buckets: Vec<u64>,
}

impl Latency {
    fn add_dir(&mut self, d: &Dir) {
        if self.buckets.len() < BUCKETS {
            self.buckets.resize(BUCKETS, 0);
        }
        for (b, c) in self.buckets.iter_mut().zip(d.lat.iter()) {
            let n = c.get();
            *b += n;
            self.count += n;
        }
        self.sum_ns += d.lat_sum.get();
    }

    /// The mean latency, µs (0 when nothing was timed).
    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum_ns as f64 / self.count as f64 / 1e3
    }

    /// The latency that a fraction `q` (0 to 1) of the I/Os did not
    /// exceed, µs: the upper end of the bucket it falls in (so within a
    /// factor of 2 above); 0 when nothing was timed.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let want = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return (1u64 << (i + 1)) as f64 / 1e3;
            }
        }
        (1u64 << BUCKETS) as f64 / 1e3
    }

    /// What was counted after `earlier` (a snapshot taken before).
    pub fn delta(&self, earlier: &Latency) -> Latency {
        let buckets = self.buckets.iter().enumerate().map(|(i, &n)| n.saturating_sub(earlier.buckets.get(i).copied().unwrap_or(0))).collect();
        Latency { count: self.count.saturating_sub(earlier.count), sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns), buckets }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Latency) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (b, n) in self.buckets.iter_mut().zip(&other.buckets) {
            *b += n;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
    }
}

/// One member's I/O counters, summed over the engine threads, since the
/// volume was brought up.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemberIo {
    /// Member reads completed (each a member I/O, which may serve several
    /// requests or part of one).
    pub reads: u64,
    /// Member writes completed.
    pub writes: u64,
    /// Bytes read from the member.
    pub read_bytes: u64,
    /// Bytes written to the member.
    pub written_bytes: u64,
    /// Member I/O errors by kind.
    pub errors: IoErrors,
    /// Mean read latency, µs (from `read_latency`).
    #[serde(default)]
    pub read_await_us: f64,
    /// Mean write latency, µs.
    #[serde(default)]
    pub write_await_us: f64,
    /// 99th percentile of the read and write latencies, µs (the upper end
    /// of its log2 bucket).
    #[serde(default)]
    pub p99_us: f64,
    /// Read latencies.
    pub read_latency: Latency,
    /// Write latencies.
    pub write_latency: Latency,
}

impl MemberIo {
    /// Fills the mean and p99 fields from the histograms.
    pub fn fill_summary(&mut self) {
        self.read_await_us = self.read_latency.mean_us();
        self.write_await_us = self.write_latency.mean_us();
        let mut both = self.read_latency.clone();
        both.add(&self.write_latency);
        self.p99_us = both.quantile_us(0.99);
    }

    /// What was counted after `earlier` (a snapshot taken before).
    pub fn delta(&self, earlier: &MemberIo) -> MemberIo {
        let e = &earlier.errors;
        let mut d = MemberIo {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            written_bytes: self.written_bytes.saturating_sub(earlier.written_bytes),
            errors: IoErrors {
                read: self.errors.read.saturating_sub(e.read),
                write: self.errors.write.saturating_sub(e.write),
                vanished: self.errors.vanished.saturating_sub(e.vanished),
                timeout: self.errors.timeout.saturating_sub(e.timeout),
                other: self.errors.other.saturating_sub(e.other),
            },
            read_latency: self.read_latency.delta(&earlier.read_latency),
            write_latency: self.write_latency.delta(&earlier.write_latency),
            ..MemberIo::default()
        };
        d.fill_summary();
        d
    }

    /// Adds `other`'s counts to these (the summary fields are filled again).
    pub fn add(&mut self, other: &MemberIo) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.read_bytes += other.read_bytes;
        self.written_bytes += other.written_bytes;
        self.errors.read += other.errors.read;
        self.errors.write += other.errors.write;
        self.errors.vanished += other.errors.vanished;
        self.errors.timeout += other.errors.timeout;
        self.errors.other += other.errors.other;
        self.read_latency.add(&other.read_latency);
        self.write_latency.add(&other.write_latency);
        self.fill_summary();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(1023), 9);
        assert_eq!(bucket(1024), 10);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        let mut l = Latency { count: 100, sum_ns: 0, buckets: vec![0; BUCKETS] };
        l.buckets[10] = 98; // 1.024-2.047 µs
        l.buckets[20] = 2; // about 1 ms
        assert_eq!(l.quantile_us(0.5), 2.048);
        assert_eq!(l.quantile_us(0.99), (1u64 << 21) as f64 / 1e3);
        assert_eq!(error_kind(Op::Read, libc::EIO), 0);
        assert_eq!(error_kind(Op::Write, libc::EIO), 1);
        assert_eq!(error_kind(Op::Flush, libc::ENXIO), 2);
        assert_eq!(error_kind(Op::Read, -1), 4);
    }
}
