//! Statistics over repeated runs, and the reviewers' "same" verdict.
//!
//! Each test runs N times after a discarded warm-up. The headline is the
//! median (robust to one disturbed run on a shared machine); CrystalDiskMark
//! reports the best run, which [`Stat::Best`] selects. The spread is
//! (max - min) / median. Two figures whose difference is smaller than the
//! larger of both spreads, and never less than [`SAME_MIN_PCT`], are shown
//! as "same", as the reviews did: a difference inside the noise is no
//! difference.

use serde::Serialize;

use crate::loadgen::RunResult;
use crate::profile::Test;

/// The smallest difference, in percent, that is ever called a difference.
pub const SAME_MIN_PCT: f64 = 3.0;

/// Which run statistic is the headline figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum Stat {
    /// The median of the runs (the default).
    #[default]
    Median,
    /// The best run (CrystalDiskMark's figure).
    Best,
}

impl std::fmt::Display for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stat::Median => "median",
            Stat::Best => "best",
        })
    }
}

/// Median, extremes and spread of one figure over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Summary {
    /// Number of runs.
    pub n: usize,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// (max - min) / median, in percent (0 for one run).
    pub spread_pct: f64,
    /// True when a larger value is better (MB/s, IOPS); false for latency.
    pub higher_is_better: bool,
}

impl Summary {
    /// Summarises `values` (NaN-free). An empty slice gives all zeros.
    pub fn of(values: &[f64], higher_is_better: bool) -> Summary {
        if values.is_empty() {
            return Summary { higher_is_better, ..Summary::default() };
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let (min, max) = (v[0], v[n - 1]);
        let spread_pct = if median > 0.0 { (max - min) / median * 100.0 } else { 0.0 };
        Summary { n, median, min, max, mean: v.iter().sum::<f64>() / n as f64, spread_pct, higher_is_better }
    }

    /// The headline value under `stat` (best = max, or min for latency).
    pub fn pick(&self, stat: Stat) -> f64 {
        match stat {
            Stat::Median => self.median,
            Stat::Best if self.higher_is_better => self.max,
            Stat::Best => self.min,
        }
    }
}

/// How a figure compares with a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Verdict {
    /// (other / base - 1) in percent.
    pub diff_pct: f64,
    /// The difference is inside the noise: shown as "same".
    pub same: bool,
    /// The threshold used, in percent: max(both spreads, [`SAME_MIN_PCT`]).
    pub threshold_pct: f64,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.same {
            f.write_str("same")
        } else {
            write!(f, "{:+.0}%", self.diff_pct)
        }
    }
}

/// Compares `other` with `base` under `stat`. `None` when the baseline is
/// zero (no comparison possible).
pub fn verdict(base: &Summary, other: &Summary, stat: Stat) -> Option<Verdict> {
    let b = base.pick(stat);
    if b <= 0.0 || !b.is_finite() {
        return None;
    }
    let diff_pct = (other.pick(stat) / b - 1.0) * 100.0;
    let threshold_pct = base.spread_pct.max(other.spread_pct).max(SAME_MIN_PCT);
    Some(Verdict { diff_pct, same: diff_pct.abs() < threshold_pct, threshold_pct })
}

/// The figure a test is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Metric {
    /// MB/s (10^6 bytes/s): sequential tests, and every AS SSD transfer.
    Mbps,
    /// I/O operations per second: random tests.
    Iops,
    /// Mean latency in ms: the AS SSD access time.
    LatencyMs,
}

impl Metric {
    /// The headline metric of `test`.
    pub fn of(test: &Test) -> Metric {
        if test.is_access_time() {
            Metric::LatencyMs
        } else if test.profile.is_seq() || test.profile.name.starts_with("AS SSD") {
            Metric::Mbps
        } else {
            Metric::Iops
        }
    }
    /// This metric's value in one run.
    pub fn value(self, r: &RunResult) -> f64 {
        match self {
            Metric::Mbps => r.mbps,
            Metric::Iops => r.iops,
            Metric::LatencyMs => r.lat.mean / 1000.0,
        }
    }
    /// The unit, as printed.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Mbps => "MB/s",
            Metric::Iops => "IOPS",
            Metric::LatencyMs => "ms",
        }
    }
    /// True when larger is better.
    pub fn higher_is_better(self) -> bool {
        self != Metric::LatencyMs
    }
    /// `v` formatted with this metric's precision and unit.
    pub fn fmt(self, v: f64) -> String {
        match self {
            Metric::Mbps => format!("{v:.1} MB/s"),
            Metric::Iops => format!("{v:.0} IOPS"),
            Metric::LatencyMs => format!("{v:.3} ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_runs() {
        let s = Summary::of(&[100.0, 90.0, 110.0, 105.0, 95.0], true);
        assert_eq!((s.n, s.median, s.min, s.max, s.mean), (5, 100.0, 90.0, 110.0, 100.0));
        assert!((s.spread_pct - 20.0).abs() < 1e-9);
        assert_eq!(s.pick(Stat::Median), 100.0);
        assert_eq!(s.pick(Stat::Best), 110.0);
        let even = Summary::of(&[1.0, 2.0, 3.0, 4.0], true);
        assert_eq!(even.median, 2.5);
        let lat = Summary::of(&[2.0, 1.0, 3.0], false);
        assert_eq!(lat.pick(Stat::Best), 1.0);
        let one = Summary::of(&[7.0], true);
        assert_eq!((one.median, one.spread_pct), (7.0, 0.0));
        assert_eq!(Summary::of(&[], true).n, 0);
    }

    #[test]
    fn same_inside_the_noise() {
        let quiet = Summary::of(&[100.0, 100.5, 99.5], true); // 1% spread
        let close = Summary::of(&[102.0, 102.0, 102.0], true);
        let far = Summary::of(&[110.0, 110.0, 110.0], true);
        // 2% apart, both spreads under 3%: the 3% floor calls it the same.
        let v = verdict(&quiet, &close, Stat::Median).unwrap();
        assert!(v.same && v.threshold_pct == SAME_MIN_PCT, "{v:?}");
        assert_eq!(v.to_string(), "same");
        let v = verdict(&quiet, &far, Stat::Median).unwrap();
        assert!(!v.same && (v.diff_pct - 10.0).abs() < 1e-9);
        assert_eq!(v.to_string(), "+10%");
        // A noisy baseline (20% spread) swallows a 10% difference.
        let noisy = Summary::of(&[90.0, 100.0, 110.0], true);
        let v = verdict(&noisy, &far, Stat::Median).unwrap();
        assert!(v.same && (v.threshold_pct - 20.0).abs() < 1e-9, "{v:?}");
        assert!(verdict(&Summary::of(&[0.0], true), &far, Stat::Median).is_none());
        let slower = Summary::of(&[50.0], true);
        assert_eq!(verdict(&quiet, &slower, Stat::Median).unwrap().to_string(), "-50%");
    }
}
