//! Live I/O statistics of each export: requests, bytes, errors and
//! latency histograms, for `uraid status` and for metrics.
//!
//! The data path pays a few relaxed stores per request and no lock: each
//! connection counts into counters of its own (one writer, on a cache line
//! of its own, so connections do not bounce a shared line), and
//! the export's `stats` sums them. A connection that
//! ends folds its counters into its export's total, under the export's
//! lock (taken only when a connection starts or ends, and by `stats`), so
//! nothing counted is lost. The statistics belong to the export's name,
//! not to its volume: they go on across
//! [`Export::replace_volume`](super::Export::replace_volume).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};


/// Upper bounds of the latency buckets, µs; the last bucket (index
/// `LATENCY_BOUNDS_US.len()`) is +Inf. A latency equal to a bound falls in
/// that bound's bucket (Prometheus' `le`).
pub const LATENCY_BOUNDS_US: [u64; 20] = [
    10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
    5_000_000, 10_000_000, 30_000_000,
];

/// Buckets of a histogram: one per bound and +Inf.
const BUCKETS: usize = LATENCY_BOUNDS_US.len() + 1;

/// The bucket a latency of `us` microseconds falls in.
#[inline]
fn bucket(us: u64) -> usize {
    LATENCY_BOUNDS_US.partition_point(|&b| b < us)
}

/// A latency histogram.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Requests per bucket (not cumulative); `counts[i]` holds latencies
    /// in (`LATENCY_BOUNDS_US[i-1]`, `LATENCY_BOUNDS_US[i]`] µs, the last
    /// one those above 30 s. Length `LATENCY_BOUNDS_US.len() + 1`.
    pub counts: Vec<u64>,
    /// Sum of the latencies, µs.
    pub sum_us: u64,
    /// Requests counted (the sum of `counts`).
    pub count: u64,
}

impl Default for LatencyHistogram {
    /// Empty, with every bucket.
    fn default() -> Self {
        LatencyHistogram { counts: vec![0; BUCKETS], sum_us: 0, count: 0 }
    }
}

impl LatencyHistogram {
    /// Mean latency, µs; 0 when empty.
    pub fn mean_us(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.sum_us as f64 / self.count as f64 }
    }

    /// The latency (µs) below which a fraction `q` (0 to 1) of the
    /// requests fall, interpolated linearly inside its bucket (the first
    /// bucket starts at 0); in the +Inf bucket, that bucket's lower bound
    /// (30 s). 0 when empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let total: u64 = self.counts.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) } * total as f64;
        let mut below = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let lower = if i == 0 { 0 } else { LATENCY_BOUNDS_US[(i - 1).min(LATENCY_BOUNDS_US.len() - 1)] };
                let Some(&upper) = LATENCY_BOUNDS_US.get(i) else { return lower as f64 };
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return lower as f64 + (upper - lower) as f64 * within;
            }
            below += n;
        }
        0.0
    }

    /// What was counted since `earlier` (an older snapshot of the same
    /// histogram): every figure subtracted, saturating at 0.
    pub fn delta(&self, earlier: &Self) -> Self {
        self.zip(earlier, u64::saturating_sub)
    }

    /// `f` of each figure of `self` and the same one of `other` (missing
    /// buckets of `other` are 0).
    fn zip(&self, other: &Self, f: impl Fn(u64, u64) -> u64) -> Self {
        let counts = self.counts.iter().enumerate().map(|(i, &n)| f(n, other.counts.get(i).copied().unwrap_or(0))).collect();
        LatencyHistogram { counts, sum_us: f(self.sum_us, other.sum_us), count: f(self.count, other.count) }
    }
}

/// I/O statistics of one export, since the server started.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// READ requests completed (replied to, errors included).
    pub reads: u64,
    /// WRITE requests completed (replied to, errors included).
    pub writes: u64,
    /// FLUSH requests completed (replied to, errors included).
    pub flushes: u64,
    /// TRIM requests completed (replied to, errors included).
    pub trims: u64,
    /// WRITE_ZEROES requests completed (replied to, errors included).
    pub write_zeroes: u64,
    /// Bytes sent by successful READs.
    pub read_bytes: u64,
    /// Bytes written by successful WRITEs.
    pub write_bytes: u64,
    /// Requests completed with an error reply (of any command, unknown
    /// ones included).
    pub errors: u64,
    /// Requests received and not yet replied to, now (a gauge).
    pub in_flight: u64,
    /// Latency of the READs counted in `reads`: from the request's header
    /// being read from the socket to its reply being handed to it, µs.
    pub read_latency: LatencyHistogram,
    /// Latency of the WRITEs counted in `writes` (from the header being
    /// read, so the payload's transfer is in it), µs.
    pub write_latency: LatencyHistogram,
    /// Connections to this export open now (a gauge).
    pub connections: u64,
    /// Connections to this export accepted since the server started (past
    /// the handshake).
    pub connections_total: u64,
}

impl StatsSnapshot {
    /// What happened since `earlier` (an older snapshot of the same
    /// export): counters and histograms subtracted (saturating at 0), the
    /// gauges (`in_flight`, `connections`) those of `self`.
    pub fn delta(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        let mut d = self.zip(earlier, u64::saturating_sub);
        d.in_flight = self.in_flight;
        d.connections = self.connections;
        d
    }

    /// Both together: every counter, histogram and gauge added (the
    /// figures of two exports of one volume).
    pub fn sum(&self, other: &StatsSnapshot) -> StatsSnapshot {
        self.zip(other, u64::saturating_add)
    }

    /// `f` of each figure of `self` and the same one of `other`.
    fn zip(&self, o: &StatsSnapshot, f: impl Fn(u64, u64) -> u64 + Copy) -> StatsSnapshot {
        StatsSnapshot {
            reads: f(self.reads, o.reads),
            writes: f(self.writes, o.writes),
            flushes: f(self.flushes, o.flushes),
            trims: f(self.trims, o.trims),
            write_zeroes: f(self.write_zeroes, o.write_zeroes),
            read_bytes: f(self.read_bytes, o.read_bytes),
            write_bytes: f(self.write_bytes, o.write_bytes),
            errors: f(self.errors, o.errors),
            in_flight: f(self.in_flight, o.in_flight),
            read_latency: self.read_latency.zip(&o.read_latency, f),
            write_latency: self.write_latency.zip(&o.write_latency, f),
            connections: f(self.connections, o.connections),
            connections_total: f(self.connections_total, o.connections_total),
        }
    }
}

/// What a reply completes, as the counters tell requests apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A read.
    Read,
    /// A write (FUA or not).
    Write,
    /// A flush.
    Flush,
    /// A discard (NBD TRIM, ublk DISCARD).
    Trim,
    /// A write of zeros.
    WriteZeroes,
    /// An unknown command (counted in `errors` only).
    Other,
}

/// Adds `n` to a counter only one thread writes: a load and a store, no
/// locked read-modify-write.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// A histogram one connection counts into.
#[derive(Debug, Default)]
struct Buckets {
    counts: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Buckets {
    #[inline]
    fn record(&self, us: u64) {
        bump(&self.counts[bucket(us)], 1);
        bump(&self.sum_us, us);
    }

    fn load(&self) -> LatencyHistogram {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        LatencyHistogram { count: counts.iter().sum(), counts, sum_us: self.sum_us.load(Relaxed) }
    }
}

/// The counters of one connection, written by its thread alone. Aligned
/// so that no other connection's counters share its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Counters {
    /// Requests replied to, by [`Kind`].
    done: [AtomicU64; 6],
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    errors: AtomicU64,
    /// Requests whose header was read (and that will get a reply).
    received: AtomicU64,
    read_latency: Buckets,
    write_latency: Buckets,
}

impl Counters {
    /// The counters as a snapshot (in `in_flight`: received, not replied).
    fn load(&self) -> StatsSnapshot {
        // Replies first: the thread counts a request received before its
        // reply, so `received` read after them is not behind.
        let done = self.done.each_ref().map(|c| c.load(Relaxed));
        let received = self.received.load(Relaxed);
        StatsSnapshot {
            reads: done[Kind::Read as usize],
            writes: done[Kind::Write as usize],
            flushes: done[Kind::Flush as usize],
            trims: done[Kind::Trim as usize],
            write_zeroes: done[Kind::WriteZeroes as usize],
            read_bytes: self.read_bytes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            errors: self.errors.load(Relaxed),
            in_flight: received.saturating_sub(done.iter().sum()),
            read_latency: self.read_latency.load(),
            write_latency: self.write_latency.load(),
            connections: 0,
            connections_total: 0,
        }
    }
}

/// The statistics of one export: its open connections' counters and the
/// total of those that ended.
#[derive(Debug, Default)]
pub struct ExportStats {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    open: Vec<Arc<Counters>>,
    /// Everything the ended connections counted (no gauges), and
    /// `connections_total`.
    closed: StatsSnapshot,
}

impl ExportStats {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters for a connection that has just finished its handshake
    /// with this export.
    pub fn open(&self) -> ConnStats<'_> {
        let c = Arc::new(Counters::default());
        let mut inner = self.inner();
        inner.open.push(c.clone());
        inner.closed.connections_total += 1;
        ConnStats { export: self, c }
    }

    /// The export's statistics now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let inner = self.inner();
        let mut s = inner.open.iter().fold(inner.closed.clone(), |s, c| s.zip(&c.load(), u64::wrapping_add));
        s.connections = inner.open.len() as u64;
        s
    }
}

/// One connection's counters; when dropped (the connection ends, also by
/// a panic) they are folded into the export's total.
#[derive(Debug)]
pub struct ConnStats<'a> {
    export: &'a ExportStats,
    c: Arc<Counters>,
}

/// The monotonic clock in microseconds, what latencies are measured with
/// (the injected clock's: see [`crate::clock::now_us`]).
pub use crate::clock::now_us;

impl ConnStats<'_> {
    /// A request's header was read; a reply to it will follow.
    #[inline]
    pub fn received(&self) {
        bump(&self.c.received, 1);
    }

    /// A reply was handed to the socket: to a request of `kind`, an error
    /// reply or not, with `bytes` of data read or written, `latency_us`
    /// after its header was read.
    #[inline]
    pub fn replied(&self, kind: Kind, ok: bool, bytes: u64, latency_us: u64) {
        let c = &*self.c;
        bump(&c.done[kind as usize], 1);
        if !ok {
            bump(&c.errors, 1);
        }
        match kind {
            Kind::Read => {
                bump(&c.read_bytes, bytes);
                c.read_latency.record(latency_us);
            }
            Kind::Write => {
                bump(&c.write_bytes, bytes);
                c.write_latency.record(latency_us);
            }
            _ => {}
        }
    }
}

impl Drop for ConnStats<'_> {
    fn drop(&mut self) {
        let mut inner = self.export.inner();
        inner.open.retain(|c| !Arc::ptr_eq(c, &self.c));
        let mut ended = self.c.load();
        // Requests left without a reply are in flight no more.
        ended.in_flight = 0;
        inner.closed = inner.closed.zip(&ended, u64::wrapping_add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(pairs: &[(u64, u64)]) -> LatencyHistogram {
        let mut h = LatencyHistogram::default();
        for &(us, n) in pairs {
            h.counts[bucket(us)] += n;
            h.sum_us += us * n;
            h.count += n;
        }
        h
    }

    #[test]
    fn latencies_fall_in_the_bucket_whose_bound_they_do_not_exceed() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(10), 0);
        assert_eq!(bucket(11), 1);
        assert_eq!(bucket(20), 1);
        assert_eq!(bucket(21), 2);
        for (i, &b) in LATENCY_BOUNDS_US.iter().enumerate() {
            assert_eq!(bucket(b), i, "{b} µs");
            assert_eq!(bucket(b + 1), i + 1, "{} µs", b + 1);
        }
        assert_eq!(bucket(30_000_000), LATENCY_BOUNDS_US.len() - 1);
        assert_eq!(bucket(30_000_001), LATENCY_BOUNDS_US.len());
        assert_eq!(bucket(u64::MAX), LATENCY_BOUNDS_US.len());
        assert_eq!(LatencyHistogram::default().counts.len(), LATENCY_BOUNDS_US.len() + 1);
    }

    #[test]
    fn connection_counters_fill_the_buckets_and_the_sum() {
        let b = Buckets::default();
        for us in [0, 10, 11, 50, 1_000_000, 40_000_000] {
            b.record(us);
        }
        let h = b.load();
        assert_eq!(h.count, 6);
        assert_eq!(h.sum_us, 41_000_071);
        assert_eq!(h.counts[0], 2);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[2], 1);
        assert_eq!(h.counts[15], 1);
        assert_eq!(h.counts[20], 1);
    }

    #[test]
    fn mean_and_quantiles_of_an_empty_histogram_are_zero() {
        let h = LatencyHistogram::default();
        assert_eq!(h.mean_us(), 0.0);
        assert_eq!(h.quantile_us(0.5), 0.0);
        assert_eq!(h.quantile_us(0.99), 0.0);
    }

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        // 10 requests in (100, 200] µs: the median is half-way.
        let h = hist(&[(150, 10)]);
        assert_eq!(h.quantile_us(0.5), 150.0);
        assert_eq!(h.quantile_us(0.1), 110.0);
        assert_eq!(h.quantile_us(1.0), 200.0);
        assert_eq!(h.quantile_us(0.0), 100.0);
        assert_eq!(h.mean_us(), 150.0);
        // The first bucket starts at 0.
        assert_eq!(hist(&[(5, 4)]).quantile_us(0.25), 2.5);
        // 4 in (10, 20], 4 in (1000, 2000]: the 75th percentile is the
        // middle of the second bucket; the 50th the top of the first.
        let h = hist(&[(15, 4), (1_500, 4)]);
        assert_eq!(h.quantile_us(0.75), 1_500.0);
        assert_eq!(h.quantile_us(0.5), 20.0);
        assert_eq!(h.quantile_us(0.625), 1_250.0);
        // Out-of-range q is clamped.
        assert_eq!(h.quantile_us(2.0), 2_000.0);
        assert_eq!(h.quantile_us(-1.0), 10.0);
    }

    #[test]
    fn the_inf_bucket_reports_its_lower_bound() {
        let h = hist(&[(100, 1), (60_000_000, 3)]);
        assert_eq!(h.quantile_us(0.5), 30_000_000.0);
        assert_eq!(h.quantile_us(1.0), 30_000_000.0);
        assert_eq!(h.quantile_us(0.25), 100.0);
    }

    #[test]
    fn histogram_deltas_subtract_and_saturate() {
        let before = hist(&[(15, 2), (150, 1)]);
        let after = hist(&[(15, 5), (150, 1), (3_000, 2)]);
        let d = after.delta(&before);
        assert_eq!(d, hist(&[(15, 3), (3_000, 2)]));
        // The other way round: nothing below 0.
        let back = before.delta(&after);
        assert_eq!(back.count, 0);
        assert_eq!(back.sum_us, 0);
        assert!(back.counts.iter().all(|&n| n == 0));
        // An older snapshot without buckets (a Default from elsewhere).
        let none = LatencyHistogram { counts: Vec::new(), sum_us: 0, count: 0 };
        assert_eq!(after.delta(&none), after);
    }

    #[test]
    fn snapshot_deltas_subtract_counters_and_keep_gauges() {
        let earlier = StatsSnapshot { reads: 10, writes: 5, in_flight: 7, connections: 3, connections_total: 4, read_latency: hist(&[(15, 10)]), ..Default::default() };
        let now = StatsSnapshot { reads: 25, writes: 4, in_flight: 2, connections: 1, connections_total: 6, read_latency: hist(&[(15, 12), (150, 3)]), ..Default::default() };
        let d = now.delta(&earlier);
        assert_eq!((d.reads, d.writes, d.in_flight, d.connections, d.connections_total), (15, 0, 2, 1, 2));
        assert_eq!(d.read_latency, hist(&[(15, 2), (150, 3)]));
    }

    #[test]
    fn the_clock_counts_microseconds_forward() {
        let (a, t) = (now_us(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, d) = (now_us(), t.elapsed().as_micros() as u64);
        assert!(b >= a + 20_000, "{a} then {b}");
        assert!(b - a <= d + 1_000, "{} µs by now_us, {d} by Instant", b - a);
    }

    #[test]
    fn ended_connections_are_folded_into_the_total() {
        let e = ExportStats::default();
        let a = e.open();
        let b = e.open();
        for c in [&a, &b] {
            c.received();
            c.received();
            c.replied(Kind::Read, true, 4096, 15);
        }
        b.replied(Kind::Write, false, 0, 300);
        let s = e.snapshot();
        assert_eq!((s.reads, s.writes, s.errors, s.read_bytes, s.in_flight, s.connections, s.connections_total), (2, 1, 1, 8192, 1, 2, 2));
        drop(a);
        let s = e.snapshot();
        // a's unanswered request is no longer in flight; its counts stay.
        assert_eq!((s.reads, s.writes, s.errors, s.read_bytes, s.in_flight, s.connections, s.connections_total), (2, 1, 1, 8192, 0, 1, 2));
        assert_eq!(s.read_latency.count, 2);
        assert_eq!(s.write_latency.counts[bucket(300)], 1);
        drop(b);
        let s2 = e.snapshot();
        assert_eq!(s2.connections, 0);
        assert_eq!(s2.delta(&s), StatsSnapshot::default());
    }
}
