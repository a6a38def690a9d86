//! Tables: one target's results, one drive against arrays, and every table
//! of a suite report. A table is a [`Grid`] (title, header, rows of text)
//! so the terminal and the HTML report show exactly the same tables.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde::Serialize;
use uraid_core::units::fmt_size;

use crate::profile::{CDM_DEFAULT, CDM_NVME, RND4K_Q32T1, SEQ1M_Q8T1};
use crate::review::{Report, TargetReport};
use crate::stats::{verdict, Metric, Stat};
use crate::suite::TestResult;

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

/// Formats the headline figure of a test in one run: MB/s for sequential,
/// IOPS for random profiles, ms for the access time.
pub fn headline(r: &TestResult, v: &crate::RunResult) -> String {
    r.metric.fmt(r.metric.value(v))
}

/// The table `uraid bench` prints: one row per test.
pub fn bench_table(results: &[TestResult]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "test", "MB/s", "IOPS", "mean µs", "p99 µs", "CPU %", "median MB/s", "min MB/s", "max MB/s", "spread %", "CPU s/GB",
    ]);
    for r in results {
        let b = &r.best;
        t.add_row(vec![
            Cell::new(r.test.to_string()),
            right(format!("{:.1}", b.mbps)),
            right(format!("{:.0}", b.iops)),
            right(format!("{:.1}", b.lat_mean_us)),
            right(format!("{:.1}", b.lat_p99_us)),
            right(format!("{:.0}", b.cpu_pct)),
            right(format!("{:.1}", r.median.mbps)),
            right(format!("{:.1}", r.worst.mbps)),
            right(format!("{:.1}", r.best.mbps)),
            right(format!("{:.1}", r.spread_pct)),
            right(format!("{:.2}", r.cpu_secs_per_gb)),
        ]);
    }
    t
}

/// One configuration of a comparison: a single drive or an array.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Column label, e.g. `1 drive` or `RAID 0 x4 128K`.
    pub label: String,
    /// Members used.
    pub drives: usize,
    /// Chunk size in bytes, for arrays.
    pub chunk: Option<u64>,
    /// Results per test, in the suite's order.
    pub results: Vec<TestResult>,
}

/// A comparison of one drive against arrays, as `uraid compare` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// What the members were (for the reader).
    pub members: String,
    /// The single drive first, then each array.
    pub configs: Vec<Config>,
}

/// One figure of one array against the single drive.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Gain {
    /// Difference to the single drive in percent (+100 = twice as fast).
    pub diff_pct: f64,
    /// Share of the ideal (drives x single drive) reached, in percent.
    pub of_ideal_pct: f64,
    /// The difference is inside the measured spread (at least 3%).
    pub same: bool,
}

impl Comparison {
    /// The gain of config `c` on test `i` over the single drive (config 0),
    /// on the best runs (CrystalDiskMark's figure).
    pub fn gain(&self, c: usize, i: usize) -> Option<Gain> {
        let base = self.configs.first()?.results.get(i)?;
        let r = self.configs.get(c)?.results.get(i)?;
        let v = verdict(&base.summary, &r.summary, Stat::Best)?;
        let b = base.headline(Stat::Best);
        let ideal = b * self.configs[c].drives as f64 / self.configs[0].drives as f64;
        Some(Gain { diff_pct: v.diff_pct, of_ideal_pct: r.headline(Stat::Best) / ideal * 100.0, same: v.same })
    }

    /// The table: a row per test; single drive, then per array its figure,
    /// the difference in percent ("same" inside the noise) and the share of
    /// the ideal it reached.
    pub fn table(&self) -> Table {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec![Cell::new("test")];
        for (i, c) in self.configs.iter().enumerate() {
            header.push(Cell::new(&c.label));
            if i > 0 {
                header.push(Cell::new("diff"));
                header.push(Cell::new(format!("of {}x", c.drives)));
            }
        }
        t.set_header(header);
        let n = self.configs.first().map(|c| c.results.len()).unwrap_or(0);
        for i in 0..n {
            let base = &self.configs[0].results[i];
            let mut row = vec![Cell::new(base.test.to_string())];
            for (c, cfg) in self.configs.iter().enumerate() {
                let r = &cfg.results[i];
                row.push(right(headline(r, &r.best)));
                if c > 0 {
                    match self.gain(c, i) {
                        Some(g) => {
                            row.push(right(if g.same { "same".into() } else { format!("{:+.0}%", g.diff_pct) }));
                            row.push(right(format!("{:.0}%", g.of_ideal_pct)));
                        }
                        None => {
                            row.push(right("-".into()));
                            row.push(right("-".into()));
                        }
                    }
                }
            }
            t.add_row(row);
        }
        t
    }
}

/// A table as text: what both the terminal and the HTML report show.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Grid {
    /// Short identifier (`results`, `atto`).
    pub id: String,
    /// Title above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// A line under the table (units, how to read it).
    pub note: String,
}

impl Grid {
    /// The table for a terminal (first column left, the rest right).
    pub fn to_table(&self) -> Table {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(self.header.clone());
        for r in &self.rows {
            t.add_row(r.iter().enumerate().map(|(i, c)| if i == 0 { Cell::new(c) } else { right(c.clone()) }).collect::<Vec<_>>());
        }
        t
    }
}

fn test_value<'a>(t: &'a TargetReport, test: &crate::Test) -> Option<&'a TestResult> {
    t.tests.iter().find(|r| r.test == *test)
}

/// Whether `t` is one of CrystalDiskMark 8's tests (its default or NVMe SSD
/// settings): the tests the report's first table holds.
fn is_cdm(t: &crate::Test) -> bool {
    !matches!(t.dir, crate::Dir::Mix(_)) && CDM_DEFAULT.iter().chain(CDM_NVME.iter()).any(|p| *p == t.profile)
}

/// The first target's CrystalDiskMark tests in CrystalDiskMark's order
/// (default settings' rows, then the NVMe settings' other rows; read
/// before write).
fn cdm_tests(first: &TargetReport) -> Vec<&TestResult> {
    let mut order: Vec<_> = CDM_DEFAULT.to_vec();
    order.extend(CDM_NVME.iter().filter(|p| !CDM_DEFAULT.contains(p)));
    let mut out = Vec::new();
    for p in order {
        for dir in [crate::Dir::Read, crate::Dir::Write] {
            out.extend(first.tests.iter().filter(|t| t.test.profile == p && t.test.dir == dir));
        }
    }
    out
}

/// The first table of a report, CrystalDiskMark's: a row per test (its 8:
/// four profiles, read and write), a column per target, each later target's
/// figure followed by how many times the first target's it is. None when no
/// CrystalDiskMark test ran.
fn cdm_grid(r: &Report, first: &TargetReport) -> Option<Grid> {
    let tests = cdm_tests(first);
    if tests.is_empty() {
        return None;
    }
    let mut header = vec!["test".to_string(), "unit".to_string()];
    header.extend(r.targets.iter().map(|t| t.label.clone()));
    let rows = tests
        .iter()
        .map(|base| {
            let mut row = vec![base.test.to_string(), base.metric.unit().to_string()];
            for (i, t) in r.targets.iter().enumerate() {
                let cell = match test_value(t, &base.test) {
                    Some(x) if i > 0 => format!("{} ({})", fmt_value(x.metric, x.headline(r.stat)), times(base, x, r.stat)),
                    Some(x) => fmt_value(x.metric, x.headline(r.stat)),
                    None => "-".into(),
                };
                row.push(cell);
            }
            row
        })
        .collect();
    Some(Grid {
        id: "cdm".into(),
        title: format!("CrystalDiskMark: {} of {} runs", r.stat, r.runs),
        header,
        rows,
        note: if r.targets.len() > 1 {
            format!("MB/s = 10^6 bytes/s. In brackets: times {}'s figure.", first.label)
        } else {
            "MB/s = 10^6 bytes/s.".into()
        },
    })
}

/// `x`'s figure over `base`'s as "3.9x" (lower is better for a latency,
/// so its inverse), or "-" when `base` has none.
fn times(base: &TestResult, x: &TestResult, stat: Stat) -> String {
    let (b, v) = (base.headline(stat), x.headline(stat));
    let ratio = if base.metric == Metric::LatencyMs { b / v } else { v / b };
    if ratio.is_finite() && b > 0.0 {
        format!("{ratio:.1}x")
    } else {
        "-".into()
    }
}

/// The report's summary in one line per later target, e.g. "RAID 0 x4:
/// 3.9x one drive on RND4K Q32T1 read, 2.1x on SEQ1M Q8T1 read", on
/// CrystalDiskMark's peak tests (SEQ1M Q8T1 and RND4K Q32T1, read, or
/// its first test when those did not run); with one target, its figures
/// on those tests. Empty when no CrystalDiskMark test ran.
pub fn summary(r: &Report) -> Vec<String> {
    let Some(first) = r.targets.first() else { return Vec::new() };
    let all = cdm_tests(first);
    let mut heads: Vec<&TestResult> = all
        .iter()
        .copied()
        .filter(|t| t.test.dir == crate::Dir::Read && (t.test.profile == RND4K_Q32T1 || t.test.profile == SEQ1M_Q8T1))
        .collect();
    heads.sort_by_key(|t| t.test.profile != RND4K_Q32T1);
    if heads.is_empty() {
        heads.extend(all.first());
    }
    if heads.is_empty() {
        return Vec::new();
    }
    if r.targets.len() == 1 {
        let parts: Vec<String> =
            heads.iter().map(|t| format!("{} {} on {}", fmt_value(t.metric, t.headline(r.stat)), t.metric.unit(), t.test)).collect();
        return vec![format!("{}: {}", first.label, parts.join(", "))];
    }
    r.targets[1..]
        .iter()
        .map(|t| {
            let parts: Vec<String> = heads
                .iter()
                .enumerate()
                .map(|(i, base)| {
                    let x = test_value(t, &base.test).map(|x| times(base, x, r.stat)).unwrap_or_else(|| "-".into());
                    if i == 0 {
                        format!("{x} {} on {}", first.label, base.test)
                    } else {
                        format!("{x} on {}", base.test)
                    }
                })
                .collect();
            format!("{}: {}", t.label, parts.join(", "))
        })
        .collect()
}

/// Every table of a report, in order: CrystalDiskMark's, the other tests
/// side by side, per-target run statistics and CPU, ATTO, AS SSD, linear
/// surface, machine, members.
pub fn report_grids(r: &Report) -> Vec<Grid> {
    let mut grids = Vec::new();
    let Some(first) = r.targets.first() else { return grids };
    if !first.tests.is_empty() {
        grids.extend(cdm_grid(r, first));
        if first.tests.iter().any(|t| !is_cdm(&t.test)) {
            grids.push(results_grid(r, first));
        }
        grids.extend(r.targets.iter().enumerate().map(|(i, t)| runs_grid(r, i, t)));
    }
    grids.extend(atto_grid(r));
    grids.extend(asssd_grid(r));
    grids.extend(linear_grid(r));
    grids.push(machine_grid(r));
    grids.push(members_grid(r));
    grids
}

/// The results of every target side by side, each against the first.
fn results_grid(r: &Report, first: &TargetReport) -> Grid {
    let stat = r.stat;
    let mut header = vec!["test".to_string(), "unit".to_string()];
    for (i, t) in r.targets.iter().enumerate() {
        header.push(t.label.clone());
        if i > 0 {
            header.push(format!("vs {}", first.label));
        }
    }
    let mut rows = Vec::new();
    for base in first.tests.iter().filter(|t| !is_cdm(&t.test)) {
        let mut row = vec![base.test.to_string(), base.metric.unit().to_string()];
        for (i, t) in r.targets.iter().enumerate() {
            let res = test_value(t, &base.test);
            row.push(res.map(|x| fmt_value(x.metric, x.headline(stat))).unwrap_or_else(|| "-".into()));
            if i > 0 {
                let v = res.and_then(|x| verdict(&base.summary, &x.summary, stat));
                row.push(v.map(|v| v.to_string()).unwrap_or_else(|| "-".into()));
            }
        }
        rows.push(row);
    }
    Grid {
        id: "results".into(),
        title: format!("Other tests: {} of {} runs", stat, r.runs),
        header,
        rows,
        note: format!(
            "MB/s = 10^6 bytes/s. 'same' = the difference is smaller than the larger spread of the two (at least {}%).{}",
            crate::stats::SAME_MIN_PCT,
            if r.targets.len() > 1 { format!(" Differences are against {}.", first.label) } else { String::new() }
        ),
    }
}

/// Target `i`'s runs: the statistics over them and the CPU they took.
fn runs_grid(r: &Report, i: usize, t: &TargetReport) -> Grid {
    let stat = r.stat;
    let rows = t
        .tests
        .iter()
        .map(|x| {
            let s = &x.summary;
            let run = x.run_for(stat);
            vec![
                x.test.to_string(),
                x.metric.unit().to_string(),
                fmt_value(x.metric, s.median),
                fmt_value(x.metric, s.min),
                fmt_value(x.metric, s.max),
                format!("{:.1}", s.spread_pct),
                format!("{:.1}", run.mbps),
                format!("{:.0}", run.iops),
                format!("{:.1}", run.lat.mean),
                format!("{:.1}", run.lat.p99),
                format!("{:.1}", run.lat.p9999),
                format!("{:.2}", x.cpu_per_sec),
                format!("{:.2}", x.cpu_secs_per_gb),
            ]
        })
        .collect();
    Grid {
        id: format!("runs-{}", i + 1),
        title: format!("{}: runs and CPU", t.label),
        header: [
            "test", "unit", "median", "min", "max", "spread %", "MB/s", "IOPS", "mean µs", "p99 µs", "p99.99 µs", "CPU s/s",
            "CPU s/GB",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: format!(
            "{} runs of {:.1} s after a discarded {:.1} s warm-up. MB/s, IOPS and latency are of the {stat} run. \
             CPU s/s = process CPU seconds per wall second (1 = one core busy); CPU s/GB = per 10^9 bytes moved.",
            r.runs, r.run_secs, r.warmup_secs
        ),
    }
}

/// ATTO: transfer rates per block size of the targets that ran it.
fn atto_grid(r: &Report) -> Option<Grid> {
    let atto: Vec<&TargetReport> = r.targets.iter().filter(|t| t.atto.is_some()).collect();
    let a0 = atto.first().and_then(|t| t.atto.as_ref())?;
    let mut header = vec!["size".to_string()];
    for t in &atto {
        for h in ["write MB/s", "read MB/s", "write IOPS", "read IOPS"] {
            header.push(format!("{} {h}", t.label));
        }
    }
    let sizes: Vec<usize> = a0.points.iter().map(|p| p.size).collect();
    let rows = sizes
        .iter()
        .map(|&size| {
            let mut row = vec![fmt_size(size as u64)];
            for t in &atto {
                let p = t.atto.as_ref().and_then(|a| a.points.iter().find(|p| p.size == size));
                let f = |x: Option<crate::sweep::Transfer>, mb: bool| {
                    x.map(|x| {
                        let v = if mb { format!("{:.1}", x.mbps) } else { format!("{:.0}", x.iops) };
                        if x.capped { format!("{v}*") } else { v }
                    })
                    .unwrap_or_else(|| "-".into())
                };
                row.push(f(p.and_then(|p| p.write), true));
                row.push(f(p.and_then(|p| p.read), true));
                row.push(f(p.and_then(|p| p.write), false));
                row.push(f(p.and_then(|p| p.read), false));
            }
            row
        })
        .collect();
    let skipped: Vec<String> = a0.skipped.iter().map(|s| fmt_size(*s as u64)).collect();
    Some(Grid {
        id: "atto".into(),
        title: format!("ATTO: QD{}, {} per size, write then read", a0.qd, fmt_size(a0.area)),
        header,
        rows,
        note: format!(
            "* = the pass hit its time cap and is measured over what it moved.{}",
            if skipped.is_empty() { String::new() } else { format!(" Skipped (below the block size): {}.", skipped.join(", ")) }
        ),
    })
}

/// AS SSD: its tests and scores for the targets that ran it.
fn asssd_grid(r: &Report) -> Option<Grid> {
    let stat = r.stat;
    let asssd: Vec<&TargetReport> = r.targets.iter().filter(|t| t.asssd.is_some()).collect();
    if asssd.is_empty() {
        return None;
    }
    let mut header = vec!["AS SSD".to_string()];
    for t in &asssd {
        header.push(format!("{} read", t.label));
        header.push(format!("{} write", t.label));
    }
    let find = |t: &TargetReport, name: &str, dir: crate::Dir| {
        t.tests.iter().find(|x| x.test.profile.name == name && x.test.dir == dir).map(|x| fmt_value(x.metric, x.headline(stat)))
    };
    let mut rows = Vec::new();
    for (label, name) in [
        ("Seq (MB/s)", "AS SSD Seq"),
        ("4K (MB/s)", "AS SSD 4K"),
        ("4K-64Thrd (MB/s)", "AS SSD 4K-64Thrd"),
        ("Acc.time (ms)", "AS SSD Acc.time"),
    ] {
        let mut row = vec![label.to_string()];
        for t in &asssd {
            row.push(find(t, name, crate::Dir::Read).unwrap_or_else(|| "-".into()));
            row.push(find(t, name, crate::Dir::Write).unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    let mut row = vec!["Score (read / write)".to_string()];
    for t in &asssd {
        let s = t.asssd.expect("filtered");
        row.push(format!("{:.0}", s.read));
        row.push(format!("{:.0}", s.write));
    }
    rows.push(row);
    let mut row = vec!["Total score".to_string()];
    for t in &asssd {
        row.push(format!("{:.0}", t.asssd.expect("filtered").total));
        row.push(String::new());
    }
    rows.push(row);
    Some(Grid {
        id: "asssd".into(),
        title: "AS SSD".into(),
        header,
        rows,
        note: "Score = 0.15 SeqW + 0.1 SeqR + 2 x 4K R + 4K W + 4K-64 W + 1.5 x 4K-64 R (MB/s).".into(),
    })
}

/// The linear surfaces (read and write passes over the whole target).
fn linear_grid(r: &Report) -> Option<Grid> {
    let surf: Vec<(&TargetReport, &crate::sweep::Surface)> = r.targets.iter().flat_map(|t| t.surfaces.iter().map(move |s| (t, s))).collect();
    if surf.is_empty() {
        return None;
    }
    Some(Grid {
        id: "linear".into(),
        title: "Linear surface".into(),
        header: ["target", "pass", "covered", "average MB/s", "min MB/s", "max MB/s", "seconds", "CPU s/GB"].map(String::from).to_vec(),
        rows: surf
            .iter()
            .map(|(t, s)| {
                vec![
                    t.label.clone(),
                    s.dir.to_string(),
                    fmt_size(s.len),
                    format!("{:.1}", s.total.mbps),
                    format!("{:.1}", s.min_mbps),
                    format!("{:.1}", s.max_mbps),
                    format!("{:.1}", s.total.secs),
                    format!("{:.2}", s.total.cpu_secs_per_gb),
                ]
            })
            .collect(),
        note: format!("{} MiB blocks at QD1 from the start to the end; min and max over equal slices.", surf[0].1.block >> 20),
    })
}

/// The machine the report was made on.
fn machine_grid(r: &Report) -> Grid {
    let m = &r.machine;
    Grid {
        id: "machine".into(),
        title: "Machine".into(),
        header: vec!["".into(), "".into()],
        rows: vec![
            vec!["CPU".into(), format!("{} ({} logical CPUs)", m.cpu, m.cpus)],
            vec!["kernel".into(), m.kernel.clone()],
            vec!["OS".into(), m.os.clone()],
            vec!["memory".into(), fmt_size(m.memory)],
            vec!["host".into(), m.hostname.clone()],
        ],
        note: String::new(),
    }
}

/// The targets' members: kind, model, size and what each sits on.
fn members_grid(r: &Report) -> Grid {
    let mut rows = Vec::new();
    for t in &r.targets {
        for mi in &t.members {
            rows.push(vec![
                t.label.clone(),
                mi.name.clone(),
                mi.kind.clone(),
                mi.model.clone(),
                format!("{} ({} bytes)", fmt_size(mi.size), mi.size),
                match mi.rotational {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "unknown".into(),
                },
                format!("{}{}", mi.sits_on.join(" -> "), if mi.direct { "" } else { " (buffered I/O)" }),
            ]);
        }
    }
    Grid {
        id: "members".into(),
        title: "Targets and members".into(),
        header: ["target", "member", "kind", "model", "size", "rotational", "sits on"].map(String::from).to_vec(),
        rows,
        note: String::new(),
    }
}

fn fmt_value(m: Metric, v: f64) -> String {
    match m {
        Metric::Mbps => format!("{v:.1}"),
        Metric::Iops => format!("{v:.0}"),
        Metric::LatencyMs => format!("{v:.3}"),
    }
}
