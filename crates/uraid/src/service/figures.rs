//! Live I/O figures of a served volume: the export's counters
//! ([`uraid_core::export::StatsSnapshot`]) sampled once a second into a window of
//! the last [`KEPT_SECONDS`], from which `uraid status` takes the figures
//! over the last [`STATUS_SECONDS`] and the metrics endpoint the latest
//! counters.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

use uraid_core::export::StatsSnapshot;

use super::proto::IoFigures;

/// Seconds of samples kept (one a second).
pub(crate) const KEPT_SECONDS: usize = 300;

/// Seconds `uraid status` reports over.
pub(crate) const STATUS_SECONDS: f64 = 5.0;

/// The samples of one export.
#[derive(Default)]
pub(crate) struct Window {
    samples: Mutex<VecDeque<(Instant, StatsSnapshot)>>,
}

impl Window {
    /// Adds a sample taken now.
    pub(crate) fn push(&self, s: StatsSnapshot) {
        let mut q = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == KEPT_SECONDS + 1 {
            q.pop_front();
        }
        q.push_back((Instant::now(), s));
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
}
