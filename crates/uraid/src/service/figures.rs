//! Live I/O figures of a served volume: the export's counters
//! ([`uraid_core::export::StatsSnapshot`]) sampled once a second into a window of
//! the last [`KEPT_SECONDS`], from which `uraid status` takes the figures
//! over the last [`STATUS_SECONDS`] and the metrics endpoint the latest
//! counters; and the history of the last [`HISTORY_SECONDS`] at one
//! point a second ([`Point`]), which the console's charts show (a page
//! opened later shows what happened before).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

use uraid_core::export::StatsSnapshot;

use super::proto::IoFigures;

/// Seconds of samples kept (one a second).
pub(crate) const KEPT_SECONDS: usize = 300;

/// Seconds `uraid status` reports over.
pub(crate) const STATUS_SECONDS: f64 = 5.0;

/// Seconds of history kept, one [`Point`] a second: an hour. Its memory
/// is bounded: `HISTORY_SECONDS` points of [`POINT_BYTES`], 144,000 bytes
/// (141 KiB) an export, allocated once.
pub(crate) const HISTORY_SECONDS: usize = 3600;

/// The I/O of one second, as the console's charts draw it: compact (f32
/// rates, [`POINT_BYTES`]) so that an hour of them costs little.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Point {
    /// When the second ended, ms since the Unix epoch (UTC).
    pub unix_ms: u64,
    /// Reads and writes per second.
    pub iops: [f32; 2],
    /// Read and write MB/s (10^6 bytes/s).
    pub mb_s: [f32; 2],
    /// Mean and p99 read latency, µs.
    pub read_us: [f32; 2],
    /// Mean and p99 write latency, µs.
    pub write_us: [f32; 2],
}

/// Bytes one [`Point`] takes in the history.
pub(crate) const POINT_BYTES: usize = std::mem::size_of::<Point>();

/// The samples of one export.
#[derive(Default)]
pub(crate) struct Window {
    samples: Mutex<VecDeque<(Instant, StatsSnapshot)>>,
    history: Mutex<VecDeque<Point>>,
}

impl Window {
    /// Adds a sample taken now.
    pub(crate) fn push(&self, s: StatsSnapshot) {
        let unix_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.push_at(Instant::now(), unix_ms, s);
    }

    /// Adds a sample taken at `t`, `unix_ms` ms since the epoch; the
    /// second since the previous sample becomes a [`Point`] of the history.
    fn push_at(&self, t: Instant, unix_ms: u64, s: StatsSnapshot) {
        let mut q = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t0, prev)) = q.back() {
            let f = figures_between(prev, &s, t.duration_since(*t0).as_secs_f64());
            let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
            if h.capacity() < HISTORY_SECONDS {
                h.reserve_exact(HISTORY_SECONDS);
            }
            if h.len() == HISTORY_SECONDS {
                h.pop_front();
            }
            h.push_back(Point {
                unix_ms,
                iops: [f.read_iops as f32, f.write_iops as f32],
                mb_s: [f.read_mb_s as f32, f.write_mb_s as f32],
                read_us: [f.read_mean_us as f32, f.read_p99_us as f32],
                write_us: [f.write_mean_us as f32, f.write_p99_us as f32],
            });
        }
        if q.len() == KEPT_SECONDS + 1 {
            q.pop_front();
        }
        q.push_back((t, s));
    }

    /// The points of the last `seconds` (at most [`HISTORY_SECONDS`]),
    /// oldest first: those less than `seconds` s older than the newest.
    pub(crate) fn history(&self, seconds: u64) -> Vec<Point> {
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = h.back() else { return Vec::new() };
        let from = last.unix_ms.saturating_sub(seconds.min(HISTORY_SECONDS as u64) * 1000);
        h.iter().filter(|p| p.unix_ms > from).copied().collect()
    }

    /// The latest counters (all zero before the first sample).
    pub(crate) fn latest(&self) -> StatsSnapshot {
        self.samples.lock().unwrap_or_else(|p| p.into_inner()).back().map(|(_, s)| s.clone()).unwrap_or_default()
    }

    /// The figures between the latest sample and the one about `seconds`
    /// before it (or the oldest kept).
    pub(crate) fn figures(&self, seconds: f64) -> IoFigures {
        let q = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let Some((t1, last)) = q.back() else { return IoFigures::default() };
        let (t0, first) = q
            .iter()
            .rev()
            .find(|(t, _)| t1.duration_since(*t).as_secs_f64() >= seconds - 0.5)
            .or(q.front())
            .expect("not empty");
        figures_between(first, last, t1.duration_since(*t0).as_secs_f64())
    }
}

/// The figures of what happened between snapshots `a` and `b`, `secs`
/// apart.
pub(crate) fn figures_between(a: &StatsSnapshot, b: &StatsSnapshot, secs: f64) -> IoFigures {
    let d = b.delta(a);
    let per = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    IoFigures {
        seconds: secs,
        read_iops: per(d.reads),
        write_iops: per(d.writes),
        read_mb_s: per(d.read_bytes) / 1e6,
        write_mb_s: per(d.write_bytes) / 1e6,
        read_mean_us: d.read_latency.mean_us(),
        read_p99_us: d.read_latency.quantile_us(0.99),
        write_mean_us: d.write_latency.mean_us(),
        write_p99_us: d.write_latency.quantile_us(0.99),
        in_flight: b.in_flight,
        connections: b.connections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_rates_over_the_window() {
        let w = Window::default();
        assert_eq!(w.figures(5.0), IoFigures::default());
        let a = StatsSnapshot { reads: 100, read_bytes: 100 * 4096, ..Default::default() };
        let b = StatsSnapshot { reads: 1100, read_bytes: 1100 * 4096, in_flight: 3, connections: 1, ..Default::default() };
        let f = figures_between(&a, &b, 2.0);
        assert_eq!((f.read_iops, f.write_iops, f.in_flight, f.connections), (500.0, 0.0, 3, 1));
        assert!((f.read_mb_s - 500.0 * 4096.0 / 1e6).abs() < 1e-9);
        w.push(a);
        w.push(b.clone());
        assert_eq!(w.latest(), b);
    }

    #[test]
    fn the_history_keeps_an_hour_a_point_a_second() {
        let w = Window::default();
        let t0 = Instant::now();
        let ms0 = 1_700_000_000_000;
        // Two hours of samples, 10 reads of 4 KiB a second.
        for i in 0..=7200u64 {
            let s = StatsSnapshot { reads: 10 * i, read_bytes: 10 * i * 4096, ..Default::default() };
            w.push_at(t0 + std::time::Duration::from_secs(i), ms0 + i * 1000, s);
        }
        let all = w.history(u64::MAX);
        assert_eq!(all.len(), HISTORY_SECONDS);
        assert_eq!(all.last().unwrap().unix_ms, ms0 + 7200 * 1000);
        assert_eq!(all[0].unix_ms, ms0 + (7200 - 3599) * 1000);
        assert!(all.iter().all(|p| p.iops == [10.0, 0.0]), "{:?}", all[0]);
        let last_minute = w.history(60);
        assert_eq!(last_minute.len(), 60);
        assert_eq!(last_minute[0].unix_ms, ms0 + 7141 * 1000);
        assert!(w.history.lock().unwrap().capacity() < 2 * HISTORY_SECONDS);
        assert_eq!(POINT_BYTES, 40);
    }
}
