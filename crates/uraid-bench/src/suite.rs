//! A benchmark session in CrystalDiskMark's manner: prepare the test area,
//! then for each test a discarded warm-up and `runs` timed runs; report the
//! best run (CrystalDiskMark's figure), the median, and the spread.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use uraid_core::{Result, Volume};

use crate::loadgen::{self, Fill, RunResult};
use crate::profile::{Dir, Test};

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
    /// (max - min) / median of MB/s over the runs, in percent.
    pub spread_pct: f64,
}

impl TestResult {
    /// Summarises `runs` (at least one).
    pub fn from_runs(test: Test, runs: Vec<RunResult>) -> TestResult {
        let mut sorted = runs.clone();
        sorted.sort_by(|a, b| a.mbps.total_cmp(&b.mbps));
        let median = sorted[sorted.len() / 2];
        let best = *sorted.last().expect("at least one run");
        let min = sorted[0];
        let spread_pct = if median.mbps > 0.0 { (best.mbps - min.mbps) / median.mbps * 100.0 } else { 0.0 };
        TestResult { test, runs, best, median, spread_pct }
    }
}

/// What the suite is doing, for a progress display.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Writing the test area.
    Preparing(u64),
    /// Test `index` of `count`, run `run` of `runs` (0 = warm-up).
    Running { test: &'a Test, index: usize, count: usize, run: usize, runs: usize },
}

/// Runs the suite on `vol`, calling `progress` as it goes.
///
/// Errors: the first I/O error, or a test area too small for a profile.
pub fn run_suite(vol: &Arc<Volume>, opts: &SuiteOptions, progress: &mut dyn FnMut(Progress)) -> Result<Vec<TestResult>> {
    for t in &opts.tests {
        loadgen::test_area(vol, t, opts.area)?;
    }
    if opts.prepare && opts.tests.iter().any(|t| t.dir == Dir::Read) {
        progress(Progress::Preparing(opts.area.min(vol.capacity())));
        loadgen::prepare(vol, opts.area, opts.fill)?;
    }
    let mut results = Vec::with_capacity(opts.tests.len());
    for (i, t) in opts.tests.iter().enumerate() {
        let seed = 0x9e37_79b9 ^ i as u64;
        if !opts.warmup.is_zero() {
            progress(Progress::Running { test: t, index: i, count: opts.tests.len(), run: 0, runs: opts.runs });
            loadgen::run(vol, *t, opts.area, opts.warmup, opts.fill, seed)?;
        }
        let mut runs = Vec::with_capacity(opts.runs);
        for r in 0..opts.runs.max(1) {
            progress(Progress::Running { test: t, index: i, count: opts.tests.len(), run: r + 1, runs: opts.runs });
            runs.push(loadgen::run(vol, *t, opts.area, opts.duration, opts.fill, seed.wrapping_add(r as u64 + 1))?);
        }
        results.push(TestResult::from_runs(*t, runs));
    }
    Ok(results)
}
