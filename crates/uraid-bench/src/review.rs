//! The reviewers' suite on one or more targets: the timed tests of the
//! chosen sets (CrystalDiskMark, Iometer, AS SSD), the ATTO sweep and the
//! linear surface, per target, with everything a report needs.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use uraid_core::{Result, Volume};

use crate::machine::{machine, shared_warnings, Busy, BusyProbe, Machine, MemberInfo};
use crate::profile::{Dir, Set, ASSSD_4K, ASSSD_4K_64, ASSSD_SEQ};
use crate::stats::Stat;
use crate::suite::{run_suite, Progress, SuiteOptions, TestResult};
use crate::sweep::{atto, surface, Atto, AttoOptions, Surface, SurfaceOptions, SweepProgress};

/// What to run on every target.
#[derive(Debug, Clone)]
pub struct ReviewOptions {
    /// The sets asked for (for the report).
    pub sets: Vec<Set>,
    /// The timed tests and their timing.
    pub suite: SuiteOptions,
    /// The ATTO sweep, if asked for.
    pub atto: Option<AttoOptions>,
    /// Linear surface passes (read, and write when allowed), in order.
    pub surfaces: Vec<SurfaceOptions>,
    /// The headline statistic.
    pub stat: Stat,
}

/// The AS SSD score and its parts (MB/s; access times in ms).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AsSsdScore {
    /// Seq read, MB/s.
    pub seq_read: f64,
    /// Seq write, MB/s.
    pub seq_write: f64,
    /// 4K read, MB/s.
    pub k4_read: f64,
    /// 4K write, MB/s.
    pub k4_write: f64,
    /// 4K-64Thrd read, MB/s.
    pub k4_64_read: f64,
    /// 4K-64Thrd write, MB/s.
    pub k4_64_write: f64,
    /// 0.1 Seq read + 2 x 4K read + 1.5 x 4K-64 read.
    pub read: f64,
    /// 0.15 Seq write + 4K write + 4K-64 write.
    pub write: f64,
    /// read + write.
    pub total: f64,
}

/// The AS SSD score from the tests, or None when one of its six is missing.
/// Figures are MB/s under `stat`.
pub fn asssd_score(tests: &[TestResult], stat: Stat) -> Option<AsSsdScore> {
    let get = |p, d| tests.iter().find(|t| t.test.profile == p && t.test.dir == d).map(|t| t.run_for(stat).mbps);
    let seq_read = get(ASSSD_SEQ, Dir::Read)?;
    let seq_write = get(ASSSD_SEQ, Dir::Write)?;
    let k4_read = get(ASSSD_4K, Dir::Read)?;
    let k4_write = get(ASSSD_4K, Dir::Write)?;
    let k4_64_read = get(ASSSD_4K_64, Dir::Read)?;
    let k4_64_write = get(ASSSD_4K_64, Dir::Write)?;
    Some(score_of(seq_read, seq_write, k4_read, k4_write, k4_64_read, k4_64_write))
}

/// AS SSD's formula: 0.15 SeqW + 0.1 SeqR + 2 x 4K R + 4K W + 4K-64 W +
/// 1.5 x 4K-64 R (all MB/s).
pub fn score_of(seq_read: f64, seq_write: f64, k4_read: f64, k4_write: f64, k4_64_read: f64, k4_64_write: f64) -> AsSsdScore {
    let read = 0.1 * seq_read + 2.0 * k4_read + 1.5 * k4_64_read;
    let write = 0.15 * seq_write + k4_write + k4_64_write;
    AsSsdScore { seq_read, seq_write, k4_read, k4_write, k4_64_read, k4_64_write, read, write, total: read + write }
}

/// Everything measured on one target.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// Label in tables and charts.
    pub label: String,
    /// What it is.
    pub description: String,
    /// Usable bytes.
    pub capacity: u64,
    /// Its members, traced to the hardware.
    pub members: Vec<MemberInfo>,
    /// Warnings about this target (shared devices, unequal members).
    pub warnings: Vec<String>,
    /// The timed tests.
    pub tests: Vec<TestResult>,
    /// The AS SSD score, when the asssd set ran.
    pub asssd: Option<AsSsdScore>,
    /// The ATTO sweep.
    pub atto: Option<Atto>,
    /// Linear surface passes.
    pub surfaces: Vec<Surface>,
    /// Wall time spent on this target, seconds.
    pub secs: f64,
    /// How busy the machine was meanwhile.
    pub busy: Busy,
}

/// A whole report: the machine and every target.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// When the run started (seconds since 1970).
    pub started_unix: u64,
    /// The headline statistic.
    pub stat: Stat,
    /// Sets run.
    pub sets: Vec<Set>,
    /// Runs per test, seconds per run, warm-up seconds, test area bytes.
    pub runs: usize,
    /// Seconds per timed run.
    pub run_secs: f64,
    /// Seconds of discarded warm-up per test.
    pub warmup_secs: f64,
    /// Test area in bytes.
    pub area: u64,
    /// Data pattern written.
    pub fill: String,
    /// The targets, the first being the baseline of the comparisons.
    pub targets: Vec<TargetReport>,
}

impl Report {
    /// An empty report for `opts`, with the machine read now.
    pub fn new(opts: &ReviewOptions) -> Report {
        Report {
            machine: machine(),
            started_unix: uraid_core::control::superblock::unix_now(),
            stat: opts.stat,
            sets: opts.sets.clone(),
            runs: opts.suite.runs,
            run_secs: opts.suite.duration.as_secs_f64(),
            warmup_secs: opts.suite.warmup.as_secs_f64(),
            area: opts.suite.area,
            fill: opts.suite.fill.to_string(),
            targets: Vec::new(),
        }
    }

    /// Every warning of every target.
    pub fn warnings(&self) -> Vec<String> {
        self.targets.iter().flat_map(|t| t.warnings.iter().map(move |w| format!("{}: {w}", t.label))).collect()
    }
}

/// What the suite is doing, for a progress display.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A timed test (see [`Progress`]).
    Timed(Progress<'a>),
    /// A sweep (ATTO or linear).
    Sweep(SweepProgress),
}

/// Runs everything in `opts` on `vol`, labelled `label`.
///
/// Errors: the first I/O error, or options the target cannot take.
pub fn run_target(
    vol: &Arc<Volume>,
    label: &str,
    description: &str,
    members: Vec<MemberInfo>,
    mut warnings: Vec<String>,
    opts: &ReviewOptions,
    progress: &mut dyn FnMut(Event),
) -> Result<TargetReport> {
    let started = Instant::now();
    let probe = BusyProbe::start();
    warnings.extend(shared_warnings(&members));
    let tests = if opts.suite.tests.is_empty() { Vec::new() } else { run_suite(vol, &opts.suite, &mut |p| progress(Event::Timed(p)))? };
    let atto = match &opts.atto {
        Some(a) => Some(atto(vol, a, &mut |p| progress(Event::Sweep(p)))?),
        None => None,
    };
    let mut surfaces = Vec::new();
    for s in &opts.surfaces {
        surfaces.push(surface(vol, s, &mut |p| progress(Event::Sweep(p)))?);
    }
    let busy = probe.finish();
    warnings.extend(busy.warning(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)));
    Ok(TargetReport {
        label: label.to_string(),
        description: description.to_string(),
        capacity: vol.capacity(),
        members,
        warnings,
        asssd: asssd_score(&tests, opts.stat),
        tests,
        atto,
        surfaces,
        secs: started.elapsed().as_secs_f64(),
        busy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asssd_formula() {
        // 0.15 SeqW + 0.1 SeqR + 2 x 4K R + 4K W + 4K-64 W + 1.5 x 4K-64 R
        let s = score_of(1000.0, 800.0, 50.0, 100.0, 400.0, 300.0);
        assert!((s.read - (100.0 + 100.0 + 600.0)).abs() < 1e-9);
        assert!((s.write - (120.0 + 100.0 + 300.0)).abs() < 1e-9);
        assert!((s.total - 1320.0).abs() < 1e-9);
    }
}
