//! A benchmark session in CrystalDiskMark's manner: prepare the test area,
//! then for each test a discarded warm-up and `runs` timed runs; keep the
//! best run (CrystalDiskMark's figure), the median, the worst and the
//! spread (see [`crate::stats`]).

use std::time::Duration;

use serde::Serialize;
use uraid_core::{BlockDevice, Result};

use crate::loadgen::{self, Fill, RunResult};
use crate::profile::Test;
use crate::stats::{Metric, Stat, Summary};

/// How to run a suite.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// The tests, in order.
    pub tests: Vec<Test>,
    /// Test area in bytes (CrystalDiskMark's test size; 1 GiB by default).
    pub area: u64,
    /// Timed runs per test.
    pub runs: usize,
    /// Length of each run.
    pub duration: Duration,
    /// Length of the discarded warm-up run (zero: none).
    pub warmup: Duration,
    /// Data written.
    pub fill: Fill,
    /// Write the test area once before the first read test.
    pub prepare: bool,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        SuiteOptions {
            tests: crate::profile::default_tests(),
            area: 1 << 30,
            runs: 5,
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(2),
            fill: Fill::Random,
            prepare: true,
        }
    }
}

/// The result of one test over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct TestResult {
    /// The test.
    pub test: Test,
    /// Every timed run, in order.
    pub runs: Vec<RunResult>,
    /// The run with the most bytes per second (CrystalDiskMark's figure).
    pub best: RunResult,
    /// The median run by bytes per second.
    pub median: RunResult,
    /// The run with the fewest bytes per second.
    pub worst: RunResult,
    /// (max - min) / median of MB/s over the runs, in percent.
    pub spread_pct: f64,
    /// The figure this test is judged by (MB/s, IOPS or access time).
    pub metric: Metric,
    /// That figure over the runs: median, min, max, spread.
    pub summary: Summary,
    /// Process CPU seconds per wall second over the runs (median).
    pub cpu_per_sec: f64,
    /// Process CPU seconds per GB (10^9 bytes) moved (median).
    pub cpu_secs_per_gb: f64,
}

impl TestResult {
    /// Summarises `runs` (at least one).
    pub fn from_runs(test: Test, runs: Vec<RunResult>) -> TestResult {
        let mut sorted = runs.clone();
        sorted.sort_by(|a, b| a.mbps.total_cmp(&b.mbps));
        let median = sorted[sorted.len() / 2];
        let best = *sorted.last().expect("at least one run");
        let worst = sorted[0];
        let spread_pct = if median.mbps > 0.0 { (best.mbps - worst.mbps) / median.mbps * 100.0 } else { 0.0 };
        let metric = Metric::of(&test);
        let values: Vec<f64> = runs.iter().map(|r| metric.value(r)).collect();
        let summary = Summary::of(&values, metric.higher_is_better());
        let cpu_per_sec = Summary::of(&runs.iter().map(|r| r.cpu_per_sec).collect::<Vec<_>>(), false).median;
        let cpu_secs_per_gb = Summary::of(&runs.iter().map(|r| r.cpu_secs_per_gb).collect::<Vec<_>>(), false).median;
        TestResult { test, runs, best, median, worst, spread_pct, metric, summary, cpu_per_sec, cpu_secs_per_gb }
    }

    /// The headline figure under `stat`, in [`Self::metric`]'s unit.
    pub fn headline(&self, stat: Stat) -> f64 {
        self.summary.pick(stat)
    }

    /// The run that `stat` picks (median or best by bytes per second).
    pub fn run_for(&self, stat: Stat) -> &RunResult {
        match stat {
            Stat::Median => &self.median,
            Stat::Best => &self.best,
        }
    }
}

/// What the suite is doing, for a progress display.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Writing the test area.
    Preparing(u64),
    /// Test `index` of `count`, run `run` of `runs` (0 = warm-up).
    Running {
        /// The test.
        test: &'a Test,
        /// Its place in the suite (0-based).
        index: usize,
        /// Tests in the suite.
        count: usize,
        /// The run (0: the warm-up).
        run: usize,
        /// Runs per test.
        runs: usize,
    },
}

/// Runs the suite on `vol` (a volume in process or an NBD export),
/// calling `progress` as it goes.
///
/// Errors: the first I/O error, or a test area too small for a profile.
pub fn run_suite<D: BlockDevice>(vol: &D, opts: &SuiteOptions, progress: &mut dyn FnMut(Progress)) -> Result<Vec<TestResult>> {
    for t in &opts.tests {
        loadgen::test_area(vol, t, opts.area)?;
    }
    if opts.prepare && opts.tests.iter().any(|t| t.dir.reads()) {
        progress(Progress::Preparing(opts.area.min(vol.capacity())));
        loadgen::prepare(vol, opts.area, opts.fill)?;
    }
    let mut results = Vec::with_capacity(opts.tests.len());
    for (i, t) in opts.tests.iter().enumerate() {
        let seed = 0x9e37_79b9 ^ i as u64;
        // The warm-up flows straight into the timed runs (see
        // loadgen::run_windows); its window is dropped.
        let warm = !opts.warmup.is_zero();
        let runs = opts.runs.max(1);
        let mut windows = Vec::with_capacity(runs + 1);
        if warm {
            windows.push(opts.warmup);
        }
        windows.extend(std::iter::repeat_n(opts.duration, runs));
        let count = opts.tests.len();
        let mut measured = loadgen::run_windows(vol, *t, opts.area, &windows, opts.fill, seed, &mut |w| {
            let run = if warm { w } else { w + 1 };
            progress(Progress::Running { test: t, index: i, count, run, runs: opts.runs });
        })?;
        if warm {
            measured.remove(0);
        }
        results.push(TestResult::from_runs(*t, measured));
    }
    Ok(results)
}
