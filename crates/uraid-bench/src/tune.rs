//! `uraid tune`: which chunk (stripe) size for a workload?
//!
//! Builds a temporary array over the members at every chunk size asked for
//! (4 KiB to 1 MiB by default), runs the chosen tests on each and on the
//! first member alone, and recommends a chunk size:
//!
//! 1. each test's figure at each chunk size is divided by the best chunk's
//!    figure on that test (1.0 = best; for latency, best / figure);
//! 2. a chunk size's score is the geometric mean of those shares over the
//!    tests, so every test counts alike whatever its unit;
//! 3. the chunk sizes whose score is the same as the best one's (within the
//!    measured spread, at least 3%) are candidates; among them the one
//!    with the best worst test wins, then the one nearest uraid's default
//!    (128 KiB), then the larger.
//!
//! The reason names what the other chunk sizes lose and why: a request
//! smaller than chunk x members reaches fewer members (less parallelism at
//! low queue depth), and a request split over more members costs more
//! member I/Os (more per-I/O work at high queue depth).

use std::sync::Arc;

use serde::Serialize;
use uraid_core::raid::geometry::{check_chunk, DEFAULT_CHUNK, MAX_CHUNK, MIN_CHUNK};
use uraid_core::io::member::DATA_OFFSET;
use uraid_core::units::fmt_size;
use uraid_core::{bail, Geometry, Level, Member, Result, Volume};

use crate::chart::{render, Chart, Series, Spec, XAxis};
use crate::report::Grid;
use crate::stats::{Metric, Stat, SAME_MIN_PCT};
use crate::suite::{run_suite, Progress, SuiteOptions, TestResult};

/// Every chunk size uraid accepts, 4 KiB to 1 MiB.
pub fn all_chunks() -> Vec<u64> {
    let mut v = Vec::new();
    let mut c = MIN_CHUNK;
    while c <= MAX_CHUNK {
        v.push(c);
        c *= 2;
    }
    v
}

/// What to tune.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// RAID level of the arrays.
    pub level: u32,
    /// Chunk sizes to try, in bytes.
    pub chunks: Vec<u64>,
    /// The tests and their timing.
    pub suite: SuiteOptions,
    /// The statistic compared.
    pub stat: Stat,
}

/// The tests at one chunk size.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkResult {
    /// Chunk size in bytes.
    pub chunk: u64,
    /// Results per test, in the suite's order.
    pub results: Vec<TestResult>,
    /// Share of the best chunk size per test (1.0 = best), in the same order.
    pub shares: Vec<f64>,
    /// Geometric mean of the shares.
    pub score: f64,
    /// The smallest share.
    pub worst: f64,
}

/// The outcome of a tuning session.
#[derive(Debug, Clone, Serialize)]
pub struct Tuning {
    /// Member names.
    pub members: Vec<String>,
    /// RAID level.
    pub level: u32,
    /// The statistic compared.
    pub stat: Stat,
    /// The first member alone.
    pub baseline: Vec<TestResult>,
    /// Each chunk size, smallest first.
    pub chunks: Vec<ChunkResult>,
    /// The chunk size recommended, in bytes.
    pub recommended: u64,
    /// Chunk sizes whose score is the same as the best one's.
    pub candidates: Vec<u64>,
    /// Why, in a few sentences.
    pub reason: String,
}

fn goodness(r: &TestResult, stat: Stat) -> f64 {
    let v = r.headline(stat);
    if r.metric.higher_is_better() {
        v
    } else if v > 0.0 {
        1.0 / v
    } else {
        0.0
    }
}

/// Member I/Os one aligned request of `block` bytes becomes on `members`
/// members with `chunk` bytes per chunk (pieces on one member merge).
pub fn pieces(block: u64, chunk: u64, members: usize) -> u64 {
    block.div_ceil(chunk).clamp(1, members as u64)
}

/// Scores the chunk sizes and picks one. `chunks[i].results` must hold the
/// same tests in the same order. Returns (recommended, candidates, reason).
pub fn recommend(chunks: &mut [ChunkResult], baseline: &[TestResult], members: usize, stat: Stat) -> (u64, Vec<u64>, String) {
    if chunks.is_empty() {
        return (DEFAULT_CHUNK, vec![], "no chunk size was measured".into());
    }
    let ntests = chunks[0].results.len();
    let best: Vec<f64> = (0..ntests).map(|i| chunks.iter().map(|c| goodness(&c.results[i], stat)).fold(0.0, f64::max)).collect();
    for c in chunks.iter_mut() {
        c.shares = (0..ntests).map(|i| if best[i] > 0.0 { goodness(&c.results[i], stat) / best[i] } else { 1.0 }).collect();
        c.score = if ntests == 0 { 1.0 } else { (c.shares.iter().map(|s| s.max(1e-9).ln()).sum::<f64>() / ntests as f64).exp() };
        c.worst = c.shares.iter().copied().fold(1.0, f64::min);
    }
    let top = chunks.iter().map(|c| c.score).fold(0.0, f64::max);
    let mean_spread = |c: &ChunkResult| {
        if c.results.is_empty() {
            0.0
        } else {
            c.results.iter().map(|r| r.summary.spread_pct).sum::<f64>() / c.results.len() as f64
        }
    };
    let top_spread = chunks.iter().filter(|c| c.score == top).map(mean_spread).fold(0.0, f64::max);
    let candidates: Vec<u64> = chunks
        .iter()
        .filter(|c| (1.0 - c.score / top) * 100.0 < SAME_MIN_PCT.max(mean_spread(c)).max(top_spread))
        .map(|c| c.chunk)
        .collect();
    let dist = |c: u64| ((c as f64).log2() - (DEFAULT_CHUNK as f64).log2()).abs();
    let pick = chunks
        .iter()
        .filter(|c| candidates.contains(&c.chunk))
        .max_by(|a, b| {
            a.worst
                .total_cmp(&b.worst)
                .then(dist(b.chunk).total_cmp(&dist(a.chunk)))
                .then(a.chunk.cmp(&b.chunk))
        })
        .expect("the best chunk size is a candidate");
    let rec = pick.chunk;
    let tests: Vec<String> = pick.results.iter().map(|r| r.test.to_string()).collect();
    let mut reason = format!(
        "{} scores {:.2} (geometric mean over {} of each test's share of the best chunk size; 1.00 = best on every test), \
         and its weakest test is at {:.0}% of the best.",
        fmt_size(rec),
        pick.score,
        tests.join(", "),
        pick.worst * 100.0
    );
    if candidates.len() > 1 {
        let others: Vec<String> = candidates.iter().filter(|&&c| c != rec).map(|&c| fmt_size(c)).collect();
        reason.push_str(&format!(
            " {} measured the same (within the spread, at least {SAME_MIN_PCT}%); {} was preferred for its weakest test, \
             then for being nearest uraid's default of {}.",
            others.join(", "),
            fmt_size(rec),
            fmt_size(DEFAULT_CHUNK)
        ));
    }
    // What the others lose, and why; chunk sizes that lose the same way
    // are named together.
    let mut losses: Vec<(Vec<String>, String)> = Vec::new();
    for c in chunks.iter().filter(|c| !candidates.contains(&c.chunk)) {
        let Some((i, share)) = c.shares.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1)) else { continue };
        let test = &c.results[i].test;
        let block = test.profile.block as u64;
        let (p, q) = (pieces(block, c.chunk, members), pieces(block, rec, members));
        let share_rec = pick.shares[i];
        let why = if p < q {
            format!("a {} request reaches {p} member(s) instead of {q}", fmt_size(block))
        } else if p > q {
            format!("a {} request becomes {p} member I/Os instead of {q}", fmt_size(block))
        } else {
            "the same member I/Os, measured slower".to_string()
        };
        let what = format!("{:.0}% of the best on {test} ({why}; {} reaches {:.0}%)", share * 100.0, fmt_size(rec), share_rec * 100.0);
        match losses.last_mut() {
            Some((names, w)) if *w == what => names.push(fmt_size(c.chunk)),
            _ => losses.push((vec![fmt_size(c.chunk)], what)),
        }
    }
    if !losses.is_empty() {
        let parts: Vec<String> = losses
            .iter()
            .map(|(names, what)| format!("{} reach{} {what}", names.join(", "), if names.len() == 1 { "es" } else { "" }))
            .collect();
        reason.push_str(" Against it: ");
        reason.push_str(&parts.join("; "));
        reason.push('.');
    }
    if let Some(first) = baseline.first() {
        let _ = first;
        let gains: Vec<String> = pick
            .results
            .iter()
            .zip(baseline)
            .filter(|(_, b)| b.headline(stat) > 0.0)
            .map(|(r, b)| format!("{} {:.2}x", r.test, goodness(r, stat) / goodness(b, stat).max(1e-12)))
            .collect();
        reason.push_str(&format!(" Against one drive: {}.", gains.join(", ")));
    }
    (rec, candidates, reason)
}

/// Progress of a tuning session: the configuration's label and the suite's progress.
pub type TuneProgress<'a> = (&'a str, Progress<'a>);

/// Runs `opts` on `members[0]` alone and on an array over all members at
/// each chunk size, then recommends one. No superblock is written; the
/// members' data areas are overwritten by write tests.
///
/// Errors: `InvalidInput` for an unknown level, fewer members than the level
/// needs, a bad chunk list or fewer than two members, and any error of the suite.
pub fn tune(members: &[Member], opts: &TuneOptions, progress: &mut dyn FnMut(TuneProgress)) -> Result<Tuning> {
    let level = Level::from_number(opts.level)?;
    if members.len() < 2 {
        bail!(InvalidInput, "tuning needs at least two members (one drive alone has no chunk size)");
    }
    if members.len() < level.min_members() {
        bail!(
            InvalidInput,
            "RAID {} needs at least {} members, {} given; add members or choose another --level",
            level.number(),
            level.min_members(),
            members.len()
        );
    }
    if opts.chunks.is_empty() {
        bail!(InvalidInput, "give at least one chunk size");
    }
    for &c in &opts.chunks {
        check_chunk(c)?;
    }
    if opts.suite.tests.is_empty() {
        bail!(InvalidInput, "no tests to run: choose at least one profile");
    }
    let mut chunks = opts.chunks.clone();
    chunks.sort_unstable();
    chunks.dedup();
    let m0 = members[0].try_clone()?;
    let size = m0.size().saturating_sub(DATA_OFFSET);
    let vol = Volume::new(Arc::new(vec![m0]), Geometry::single(size), DATA_OFFSET)?;
    let baseline = run_suite(&vol, &opts.suite, &mut |p| progress(("1 drive", p)))?;
    drop(vol);
    let mut results = Vec::new();
    for &chunk in &chunks {
        let ms = members.iter().map(Member::try_clone).collect::<Result<Vec<_>>>()?;
        // A temporary array at the chosen level (no superblock, no bitmap).
        let vol = uraid_core::control::array::temporary_at(ms, level, chunk)?.0;
        let label = format!("RAID {} x{} {}", level.number(), members.len(), fmt_size(chunk));
        let r = run_suite(&vol, &opts.suite, &mut |p| progress((&label, p)))?;
        results.push(ChunkResult { chunk, results: r, shares: vec![], score: 0.0, worst: 0.0 });
    }
    let (recommended, candidates, reason) = recommend(&mut results, &baseline, members.len(), opts.stat);
    Ok(Tuning {
        members: members.iter().map(|m| m.name().to_string()).collect(),
        level: opts.level,
        stat: opts.stat,
        baseline,
        chunks: results,
        recommended,
        candidates,
        reason,
    })
}

impl Tuning {
    /// The table: a row per chunk size (and one drive), a column per test,
    /// then the score.
    pub fn grid(&self) -> Grid {
        let mut header = vec!["chunk".to_string()];
        let first = self.chunks.first().map(|c| c.results.as_slice()).unwrap_or(&[]);
        for r in first {
            header.push(format!("{} ({})", r.test, r.metric.unit()));
        }
        header.push("score".into());
        let fmt = |r: &TestResult| match r.metric {
            Metric::Mbps => format!("{:.1}", r.headline(self.stat)),
            Metric::Iops => format!("{:.0}", r.headline(self.stat)),
            Metric::LatencyMs => format!("{:.3}", r.headline(self.stat)),
        };
        let mut rows = Vec::new();
        let mut b = vec!["1 drive".to_string()];
        b.extend(self.baseline.iter().map(fmt));
        b.push("-".into());
        rows.push(b);
        for c in &self.chunks {
            let mark = if c.chunk == self.recommended { " (recommended)" } else if self.candidates.contains(&c.chunk) { " (same)" } else { "" };
            let mut row = vec![format!("{}{mark}", fmt_size(c.chunk))];
            row.extend(c.results.iter().map(fmt));
            row.push(format!("{:.2}", c.score));
            rows.push(row);
        }
        Grid {
            id: "tune".into(),
            title: format!("Chunk size against the workload ({} of the runs), RAID {} over {} members", self.stat, self.level, self.members.len()),
            header,
            rows,
            note: "score = geometric mean over the tests of each figure's share of the best chunk size (1.00 = best everywhere); \
                   (same) = within the measured spread of the best score."
                .into(),
        }
    }

    /// Chunk size against MB/s and against IOPS (log2 x axis), one line per
    /// test, the single drive as a dashed line of the same colour.
    pub fn charts(&self) -> Result<Vec<Chart>> {
        let mut out = Vec::new();
        let Some(first) = self.chunks.first() else { return Ok(out) };
        for (metric, name, title) in [
            (Metric::Mbps, "tune-mbps", "Chunk size against MB/s (dashed: one drive)"),
            (Metric::Iops, "tune-iops", "Chunk size against IOPS (dashed: one drive)"),
            (Metric::LatencyMs, "tune-latency", "Chunk size against access time, ms (dashed: one drive)"),
        ] {
            let mut series = Vec::new();
            for (i, r) in first.results.iter().enumerate() {
                if r.metric != metric {
                    continue;
                }
                let pts: Vec<(f64, f64)> = self.chunks.iter().map(|c| (c.chunk as f64, c.results[i].headline(self.stat))).collect();
                let color = series.len() / 2;
                series.push(Series { name: r.test.to_string(), points: pts.clone(), dashed: false, color });
                if let Some(b) = self.baseline.get(i) {
                    let v = b.headline(self.stat);
                    let base = vec![(pts[0].0, v), (pts[pts.len() - 1].0, v)];
                    series.push(Series { name: format!("{} one drive", r.test), points: base, dashed: true, color });
                }
            }
            if series.is_empty() {
                continue;
            }
            let spec = Spec::Lines {
                x_label: "chunk size (log scale)".into(),
                y_label: metric.unit().into(),
                x_axis: XAxis::Log2Size,
                categories: vec![],
                y_log: false,
                series,
            };
            out.push(render(name, title, spec)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::RunResult;
    use crate::profile::{Dir, Test, SEQ1M_Q1T1, SEQ1M_Q8T1};

    fn result(test: Test, mbps: f64) -> TestResult {
        let r = RunResult {
            bytes: 1,
            ios: 1,
            secs: 1.0,
            mbps,
            iops: mbps,
            lat_mean_us: 0.0,
            lat_p99_us: 0.0,
            lat: Default::default(),
            read_ios: 1,
            write_ios: 0,
            cpu_secs: 0.0,
            cpu_per_sec: 0.0,
            cpu_pct: 0.0,
            cpu_secs_per_gb: 0.0,
        };
        TestResult::from_runs(test, vec![r])
    }

    fn chunk(c: u64, v: &[f64]) -> ChunkResult {
        let tests = [Test { profile: SEQ1M_Q1T1, dir: Dir::Read }, Test { profile: SEQ1M_Q8T1, dir: Dir::Read }];
        ChunkResult { chunk: c, results: tests.iter().zip(v).map(|(t, &x)| result(*t, x)).collect(), shares: vec![], score: 0.0, worst: 0.0 }
    }

    #[test]
    fn recommends_the_best_compromise() {
        // 64K wins one test, 1M the other, 256K is near the best on both.
        let mut cs = vec![chunk(64 << 10, &[1000.0, 500.0]), chunk(256 << 10, &[950.0, 950.0]), chunk(1 << 20, &[250.0, 1000.0])];
        let base = chunk(0, &[250.0, 250.0]).results;
        let (rec, cand, reason) = recommend(&mut cs, &base, 4, Stat::Median);
        assert_eq!(rec, 256 << 10, "{reason}");
        assert_eq!(cand, vec![256 << 10]);
        assert!(reason.contains("1M reaches 25% of the best on SEQ1M Q1T1 read"), "{reason}");
        assert!(reason.contains("reaches 1 member(s) instead of 4"), "{reason}");
        assert!(reason.contains("Against one drive: SEQ1M Q1T1 read 3.80x"), "{reason}");
    }

    #[test]
    fn ties_go_to_the_default() {
        let mut cs = vec![chunk(64 << 10, &[1000.0, 1000.0]), chunk(128 << 10, &[990.0, 1000.0]), chunk(512 << 10, &[1000.0, 995.0])];
        let (rec, cand, _) = recommend(&mut cs, &[], 4, Stat::Median);
        assert_eq!(cand.len(), 3);
        // All the same: the best weakest test is 64K (1.0, 1.0).
        assert_eq!(rec, 64 << 10);
        let mut cs = vec![chunk(64 << 10, &[990.0, 1000.0]), chunk(128 << 10, &[1000.0, 990.0]), chunk(512 << 10, &[1000.0, 990.0])];
        let (rec, _, _) = recommend(&mut cs, &[], 4, Stat::Median);
        assert_eq!(rec, 128 << 10);
    }

    #[test]
    fn pieces_per_request() {
        assert_eq!(pieces(1 << 20, 4 << 10, 4), 4);
        assert_eq!(pieces(1 << 20, 512 << 10, 4), 2);
        assert_eq!(pieces(4096, 1 << 20, 4), 1);
        assert_eq!(all_chunks().len(), 9);
    }
}
