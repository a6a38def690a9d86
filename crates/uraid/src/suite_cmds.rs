//! `uraid suite`, `uraid tune` and `uraid profiles`: the reviewers'
//! benchmark suite, the chunk-size advisor and the profile table.
//! Argument parsing and printing only; the work is in uraid-bench.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use uraid_bench::chart::{report_charts, write_charts, Chart};
use uraid_bench::profile::{self, Dir, Set, Test, CDM_MIX_READ_PCT, SETS};
use uraid_bench::report::report_grids;
use uraid_bench::review::{run_target, Event, Report, ReviewOptions};
use uraid_bench::stats::Stat;
use uraid_bench::suite::{Progress, SuiteOptions};
use uraid_bench::sweep::{AttoOptions, SurfaceOptions};
use uraid_bench::target::{self, OpenOptions, TargetSpec};
use uraid_bench::tune::{all_chunks, tune, TuneOptions};
use uraid_bench::Fill;
use uraid_core::control::array;
use uraid_core::units::{fmt_size, parse_size};

/// Options every suite command shares: what to run and how long.
#[derive(Args, Clone, Debug)]
pub(crate) struct RunArgs {
    /// Test sets (comma-separated): cdm, nvme, peak, peak-nvme, realworld, mix, iometer, asssd, atto, linear, all, or none (only --profile).
    #[arg(long, value_delimiter = ',', default_value = "cdm")]
    sets: Vec<String>,
    /// Extra profiles, CrystalDiskMark-style (SEQ1M-Q8T1, RND4K-Q32T16, SEQ256K-Q4T1, ...), read and write.
    #[arg(long, value_delimiter = ',')]
    profile: Vec<String>,
    /// Run only read tests (nothing is written).
    #[arg(long, conflicts_with = "write_only")]
    read_only: bool,
    /// Run only write tests.
    #[arg(long)]
    write_only: bool,
    /// Test area of the timed tests (CrystalDiskMark's test size).
    #[arg(long, default_value = "1G")]
    size: String,
    /// Timed runs per test after the warm-up.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    time: f64,
    /// Seconds of discarded warm-up before each test.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Headline = the best run (CrystalDiskMark) instead of the median.
    #[arg(long)]
    best: bool,
    /// Data written: random (incompressible), zero, or compressible:PCT (compresses to PCT% of its size).
    #[arg(long, default_value = "random")]
    fill: String,
    /// Read share of the mix set in percent (CrystalDiskMark: 70).
    #[arg(long, default_value_t = CDM_MIX_READ_PCT)]
    mix_read: u8,
    /// Allow writing over a filesystem, a partition table or a uraid superblock.
    #[arg(long)]
    overwrite: bool,
    /// Write the HTML report, the charts (PNG and SVG) and results.json into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// No progress display and no notes on stderr.
    #[arg(long)]
    quiet: bool,
}

/// `uraid suite`.
#[derive(Args, Debug)]
pub(crate) struct SuiteCmdArgs {
    #[command(flatten)]
    run: RunArgs,
    /// ATTO: bytes moved per transfer size and direction.
    #[arg(long, default_value = "256M")]
    atto_size: String,
    /// ATTO: smallest transfer size.
    #[arg(long, default_value = "512")]
    atto_min: String,
    /// ATTO: largest transfer size.
    #[arg(long, default_value = "64M")]
    atto_max: String,
    /// ATTO: requests in flight.
    #[arg(long, default_value_t = 4)]
    atto_qd: usize,
    /// ATTO: most seconds one pass may take (a pass cut short is measured over what it moved, marked *).
    #[arg(long, default_value_t = 60.0)]
    atto_cap: f64,
    /// Linear: also write the whole target (DESTROYS ITS DATA; needs --overwrite on a target that holds data).
    #[arg(long)]
    linear_write: bool,
    /// Linear: cover only this many bytes from the start (default: the whole target).
    #[arg(long)]
    linear_size: Option<String>,
    /// Linear: points on the surface chart.
    #[arg(long, default_value_t = 100)]
    linear_points: usize,
    /// Chunk of the temporary RAID 0 made for a target of several raw drives.
    #[arg(long, default_value = "128K")]
    chunk: String,
    /// Treat drives as raw even when they carry a uraid superblock.
    #[arg(long)]
    raw: bool,
    /// Targets, compared side by side against the first: [LABEL=]PATH (a drive, a file on any
    /// filesystem, an md device, mem:SIZE,...) or [LABEL=]PATH+PATH+... (an array: assembled if
    /// the drives carry uraid superblocks, else a temporary RAID 0).
    #[arg(required = true)]
    targets: Vec<String>,
}

/// `uraid tune`.
#[derive(Args, Debug)]
pub(crate) struct TuneArgs {
    #[command(flatten)]
    run: RunArgs,
    /// RAID level of the arrays built.
    #[arg(long, default_value_t = 0)]
    level: u32,
    /// Chunk sizes to try (default: every one from 4K to 1M).
    #[arg(long, value_delimiter = ',')]
    chunks: Vec<String>,
    /// The members (two or more; their data areas are overwritten by write tests).
    #[arg(required = true)]
    members: Vec<String>,
}

/// `uraid profiles`.
#[derive(Args, Debug)]
pub(crate) struct ProfilesArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_sets(names: &[String]) -> Result<Vec<Set>> {
    let mut v = Vec::new();
    for n in names {
        if n.eq_ignore_ascii_case("none") {
            continue;
        }
        if n.eq_ignore_ascii_case("all") {
            for s in SETS {
                if !v.contains(&s) {
                    v.push(s);
                }
            }
            continue;
        }
        let s = Set::parse(n).with_context(|| {
            format!("unknown set '{n}'; known: {}, all, none", SETS.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "))
        })?;
        if !v.contains(&s) {
            v.push(s);
        }
    }
    Ok(v)
}

struct Plan {
    sets: Vec<Set>,
    suite: SuiteOptions,
    stat: Stat,
}

fn plan(a: &RunArgs, allow_sweeps: bool) -> Result<Plan> {
    let sets = parse_sets(&a.sets)?;
    if !allow_sweeps {
        if let Some(s) = sets.iter().find(|s| matches!(s, Set::Atto | Set::Linear)) {
            bail!("the {} set is a sweep, not a timed test; `uraid tune` runs timed tests only (use `uraid suite`)", s.name());
        }
    }
    if !(1..=99).contains(&a.mix_read) {
        bail!("--mix-read must be from 1 to 99 percent, not {}", a.mix_read);
    }
    let mut tests = profile::tests_of(&sets, a.mix_read);
    for n in &a.profile {
        let p = profile::by_name(n).with_context(|| {
            format!(
                "unknown profile '{n}'; write it as CrystalDiskMark does: SEQ<size>Q<depth>T<threads> or \
                 RND<size>Q<depth>T<threads> (e.g. SEQ1M-Q8T1, RND4K-Q32T16), or a named one: {}",
                profile::NAMED.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            )
        })?;
        for dir in [Dir::Read, Dir::Write] {
            let t = Test { profile: p, dir };
            if !tests.contains(&t) {
                tests.push(t);
            }
        }
    }
    tests.retain(|t| {
        if a.read_only {
            t.dir == Dir::Read
        } else if a.write_only {
            t.dir == Dir::Write
        } else {
            true
        }
    });
    let time_ok = a.time > 0.0 && a.time <= 3600.0;
    if !time_ok || !(0.0..=3600.0).contains(&a.warmup) {
        bail!("--time must be above 0 and at most 3600 seconds, --warmup from 0 to 3600");
    }
    if a.runs == 0 || a.runs > 100 {
        bail!("--runs must be from 1 to 100");
    }
    let fill: Fill = a.fill.parse()?;
    let area = parse_size(&a.size, "test size")?;
    if area == 0 {
        bail!("--size must be above zero");
    }
    Ok(Plan {
        sets,
        suite: SuiteOptions {
            tests,
            area,
            runs: a.runs,
            duration: Duration::from_secs_f64(a.time),
            warmup: Duration::from_secs_f64(a.warmup),
            fill,
            prepare: !a.read_only,
        },
        stat: if a.best { Stat::Best } else { Stat::Median },
    })
}

/// The progress display of the suite commands: one bar that counts timed
/// runs, and the bytes of a sweep while one runs (hidden with --quiet or
/// --json, and when stderr is not a terminal).
struct Bar {
    bar: ProgressBar,
    runs_total: u64,
    runs_done: u64,
    in_sweep: bool,
}

impl Bar {
    fn new(runs_total: u64, hidden: bool) -> Bar {
        let bar = if hidden { ProgressBar::hidden() } else { ProgressBar::new(runs_total.max(1)) };
        let b = Bar { bar, runs_total: runs_total.max(1), runs_done: 0, in_sweep: false };
        b.runs_style();
        b
    }
    fn runs_style(&self) {
        self.bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs {msg}").expect("valid template").progress_chars("=> "),
        );
    }
    fn timed(&mut self, label: &str, p: Progress) {
        if self.in_sweep {
            self.in_sweep = false;
            self.runs_style();
            self.bar.set_length(self.runs_total);
            self.bar.set_position(self.runs_done);
        }
        match p {
            Progress::Preparing(bytes) => self.bar.set_message(format!("{label}: writing the {} test area", fmt_size(bytes))),
            Progress::Running { test, run, runs, .. } => {
                if run == 0 {
                    self.bar.set_message(format!("{label}: {test} warm-up"));
                } else {
                    self.runs_done += 1;
                    self.bar.set_position(self.runs_done);
                    self.bar.set_message(format!("{label}: {test} run {run}/{runs}"));
                }
            }
        }
    }
    fn sweep(&mut self, label: &str, p: uraid_bench::sweep::SweepProgress) {
        if !self.in_sweep {
            self.in_sweep = true;
            self.bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
        }
        self.bar.set_length(p.total.max(1));
        self.bar.set_position(p.done);
        self.bar.set_message(format!("{label}: {} {}", p.what, fmt_size(p.block as u64)));
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn write_out(dir: &Path, html: &str, json: &serde_json::Value, charts: &[Chart]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the report directory {}", dir.display()))?;
    let mut files = write_charts(charts, dir)?;
    let h = dir.join("report.html");
    std::fs::write(&h, html).with_context(|| format!("cannot write {}", h.display()))?;
    let j = dir.join("results.json");
    std::fs::write(&j, serde_json::to_string_pretty(json)?).with_context(|| format!("cannot write {}", j.display()))?;
    files.insert(0, j);
    files.insert(0, h);
    Ok(files)
}

/// `uraid suite TARGET...`.
pub(crate) fn run_suite_cmd(a: SuiteCmdArgs) -> Result<()> {
    let started = Instant::now();
    let p = plan(&a.run, true)?;
    let chunk = parse_size(&a.chunk, "chunk size")?;
    uraid_core::raid::geometry::check_chunk(chunk)?;
    let specs: Vec<TargetSpec> = a.targets.iter().map(|t| t.parse()).collect::<Result<_, _>>()?;
    let mut labels: Vec<String> = Vec::new();
    for s in &specs {
        if let Some(l) = &s.label {
            if labels.contains(l) {
                bail!("two targets are labelled '{l}'; give each a different label");
            }
            labels.push(l.clone());
        }
    }
    let atto = atto_options(&a, &p)?;
    let surfaces = surfaces(&a, &p)?;
    if p.suite.tests.is_empty() && atto.is_none() && surfaces.is_empty() {
        bail!("nothing to run: the sets and --read-only/--write-only leave no test");
    }
    let writes = p.suite.tests.iter().any(|t| t.dir.writes())
        || p.suite.prepare && p.suite.tests.iter().any(|t| t.dir.reads())
        || atto.as_ref().is_some_and(|x| x.write)
        || surfaces.iter().any(|s| s.dir == Dir::Write);
    let opts = ReviewOptions { sets: p.sets.clone(), suite: p.suite.clone(), atto, surfaces, stat: p.stat };
    let quiet = a.run.quiet || a.run.json;
    let runs_per_target = (opts.suite.tests.len() * opts.suite.runs) as u64;
    let mut bar = Bar::new(runs_per_target * specs.len() as u64, quiet);
    let mut report = Report::new(&opts);
    let o = OpenOptions { chunk, raw: a.raw, writes, overwrite: a.run.overwrite };
    // Targets are opened one at a time: a drive may be in two targets (an
    // array and one of its members), and each takes its drives exclusively.
    for (i, spec) in specs.iter().enumerate() {
        let t = target::open(spec, i, o).with_context(|| format!("target '{}'", spec.text))?;
        if !quiet {
            bar.bar.suspend(|| eprintln!("target {}: {}", t.label, t.description));
        }
        let label = t.label.clone();
        let r = run_target(&t.vol, &t.label, &t.description, t.members.clone(), t.warnings.clone(), &opts, &mut |e| match e {
            Event::Timed(p) => bar.timed(&label, p),
            Event::Sweep(p) => bar.sweep(&label, p),
        });
        let closed = t.close();
        let r = r.with_context(|| format!("target '{label}'"))?;
        closed?;
        report.targets.push(r);
    }
    bar.finish();
    let mut written = Vec::new();
    if let Some(dir) = &a.run.out {
        let charts = report_charts(&report.targets, report.stat)?;
        let html = uraid_bench::html::render(&report, &charts, "uraid benchmark report");
        written = write_out(dir, &html, &serde_json::to_value(&report)?, &charts)?;
    }
    print_report(&a, &report, &written)?;
    if !a.run.quiet && !a.run.json {
        eprintln!("suite took {:.0} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The ATTO set's options from `a`, when `p` runs it. Errors: a size
/// that does not parse, a cap out of range.
fn atto_options(a: &SuiteCmdArgs, p: &Plan) -> Result<Option<AttoOptions>> {
    if !p.sets.contains(&Set::Atto) {
        return Ok(None);
    }
    if !(a.atto_cap > 0.0 && a.atto_cap <= 3600.0) {
        bail!("--atto-cap must be above 0 and at most 3600 seconds");
    }
    Ok(Some(AttoOptions {
        min: parse_size(&a.atto_min, "ATTO smallest size")? as usize,
        max: parse_size(&a.atto_max, "ATTO largest size")? as usize,
        qd: a.atto_qd,
        area: parse_size(&a.atto_size, "ATTO size")?,
        cap: Duration::from_secs_f64(a.atto_cap),
        fill: p.suite.fill,
        write: !a.run.read_only,
        read: !a.run.write_only,
    }))
}

/// The linear set's surfaces (read, and write with `--linear-write`),
/// when `p` runs it. Errors: `--linear-write` without the set or with
/// `--read-only`, a point count or size out of range.
fn surfaces(a: &SuiteCmdArgs, p: &Plan) -> Result<Vec<SurfaceOptions>> {
    let mut surfaces = Vec::new();
    if a.linear_write && !p.sets.contains(&Set::Linear) {
        bail!("--linear-write needs the linear set: add --sets ...,linear");
    }
    if a.linear_write && a.run.read_only {
        bail!("--linear-write writes; it cannot be combined with --read-only");
    }
    if p.sets.contains(&Set::Linear) {
        if a.linear_points == 0 || a.linear_points > 10_000 {
            bail!("--linear-points must be from 1 to 10000");
        }
        let len = a.linear_size.as_deref().map(|s| parse_size(s, "linear size")).transpose()?;
        let mk = |dir| SurfaceOptions { block: 1 << 20, points: a.linear_points, len, dir, fill: p.suite.fill };
        if !a.run.write_only {
            surfaces.push(mk(Dir::Read));
        }
        if a.linear_write {
            surfaces.push(mk(Dir::Write));
        }
    }
    Ok(surfaces)
}

/// Prints the suite's `report` (JSON with `--json`, else its warnings
/// and tables) and where the files `written` went.
fn print_report(a: &SuiteCmdArgs, report: &Report, written: &[std::path::PathBuf]) -> Result<()> {
    if a.run.json {
        let mut v = serde_json::to_value(report)?;
        v["files"] = serde_json::json!(written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>());
        v["summary"] = serde_json::json!(uraid_bench::report::summary(report));
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for line in uraid_bench::report::summary(report) {
        println!("{line}");
    }
    for w in report.warnings() {
        println!("WARNING: {w}");
    }
    for g in report_grids(report) {
        println!("{}", g.title);
        println!("{}", g.to_table());
        if !g.note.is_empty() {
            println!("{}", g.note);
        }
        println!();
    }
    if !written.is_empty() {
        println!("report: {} ({} files in {})", written[0].display(), written.len(), a.run.out.as_ref().expect("out").display());
    } else if !a.run.quiet {
        eprintln!("(add --out DIR for the HTML report and the PNG/SVG charts)");
    }
    Ok(())
}

/// `uraid tune MEMBER...`.
pub(crate) fn run_tune_cmd(a: TuneArgs) -> Result<()> {
    let p = plan(&a.run, false)?;
    if p.suite.tests.is_empty() {
        bail!("no tests to run: the sets and --read-only/--write-only leave none");
    }
    uraid_core::Level::from_number(a.level)?;
    let chunks = if a.chunks.is_empty() {
        all_chunks()
    } else {
        a.chunks.iter().map(|c| parse_size(c, "chunk size").map_err(Into::into)).collect::<Result<Vec<_>>>()?
    };
    for &c in &chunks {
        uraid_core::raid::geometry::check_chunk(c)?;
    }
    if a.members.len() < 2 {
        bail!("give at least two members: the chunk size spreads data over several drives");
    }
    let specs = crate::common::specs(&a.members)?;
    let writes = p.suite.tests.iter().any(|t| t.dir.writes()) || p.suite.prepare;
    let members = array::open_members(&specs, writes, true)?;
    if writes && !a.run.overwrite {
        for m in &members {
            if let Some(sig) = array::probe(m)? {
                bail!(
                    "{} holds {sig}; the write tests would destroy it. Nothing was written. \
                     Use --read-only, or --overwrite if you mean it",
                    m.name()
                );
            }
        }
    }
    let infos: Vec<_> = members.iter().map(uraid_core::io::facts::member_info).collect();
    let warnings = uraid_core::io::facts::shared_warnings(&infos);
    let quiet = a.run.quiet || a.run.json;
    let mut bar = Bar::new(((chunks.len() + 1) * p.suite.tests.len() * p.suite.runs) as u64, quiet);
    let opts = TuneOptions { level: a.level, chunks, suite: p.suite.clone(), stat: p.stat };
    let r = tune(&members, &opts, &mut |(label, pr)| bar.timed(label, pr));
    bar.finish();
    let t = r?;
    drop(members);
    let grid = t.grid();
    let mut written = Vec::new();
    if let Some(dir) = &a.run.out {
        let charts = t.charts()?;
        let m = uraid_bench::machine::machine();
        let intro = format!(
            "<p class=\"sub\">{}</p>\n<p><b>Recommended chunk size: {}</b>. {}</p>\n",
            uraid_bench::html::machine_line(&m),
            fmt_size(t.recommended),
            uraid_bench::html::escape(&t.reason)
        );
        let mut member_rows = Vec::new();
        for mi in &infos {
            member_rows.push(vec![mi.name.clone(), mi.kind.clone(), mi.model.clone(), fmt_size(mi.size), format!("{:?}", mi.rotational), mi.sits_on.join(" -> ")]);
        }
        let members_grid = uraid_bench::report::Grid {
            id: "members".into(),
            title: "Members".into(),
            header: ["member", "kind", "model", "size", "rotational", "sits on"].map(String::from).to_vec(),
            rows: member_rows,
            note: String::new(),
        };
        let html = uraid_bench::html::page("uraid tune: chunk size", &intro, &warnings, &charts, &[grid.clone(), members_grid]);
        let json = serde_json::json!({"tuning": &t, "machine": m, "members": infos, "warnings": warnings});
        written = write_out(dir, &html, &json, &charts)?;
    }
    if a.run.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "recommended": t.recommended, "candidates": t.candidates, "reason": t.reason,
                "tuning": &t, "members": infos, "warnings": warnings,
                "files": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            }))?
        );
        return Ok(());
    }
    for w in &warnings {
        println!("WARNING: {w}");
    }
    println!("{}", grid.title);
    println!("{}", grid.to_table());
    println!("{}", grid.note);
    println!();
    println!("Recommended chunk size: {}", fmt_size(t.recommended));
    println!("{}", t.reason);
    if !written.is_empty() {
        println!("report: {}", written[0].display());
    }
    Ok(())
}

/// `uraid profiles`.
pub(crate) fn run_profiles_cmd(a: ProfilesArgs) -> Result<()> {
    let atto = AttoOptions::default();
    let surface = SurfaceOptions::default();
    let sets: Vec<serde_json::Value> = SETS
        .iter()
        .map(|s| {
            let tests: Vec<serde_json::Value> = s
                .tests(CDM_MIX_READ_PCT)
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "name": t.to_string(), "profile": t.profile.name, "block": t.profile.block,
                        "qd": t.profile.qd, "threads": t.profile.threads, "pattern": t.profile.pattern,
                        "dir": t.dir,
                        "read_pct": match t.dir { Dir::Read => 100, Dir::Write => 0, Dir::Mix(r) => r },
                    })
                })
                .collect();
            serde_json::json!({"set": s.name(), "about": s.about(), "tests": tests})
        })
        .collect();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "sets": sets,
                "atto": {"min": atto.min, "max": atto.max, "qd": atto.qd, "area": atto.area, "order": ["write", "read"],
                          "passes_per_size_and_direction": 1, "cap_secs": atto.cap.as_secs_f64()},
                "linear": {"block": surface.block, "qd": 1, "points": surface.points, "covers": "the whole target",
                            "default": "read", "write_flag": "--linear-write"},
                "timed": {"area": 1u64 << 30, "runs": 5, "run_secs": 5.0, "warmup_secs": 2.0},
            }))?
        );
        return Ok(());
    }
    let mut t: Vec<Vec<String>> = Vec::new();
    for s in SETS {
        let tests = s.tests(CDM_MIX_READ_PCT);
        if tests.is_empty() {
            t.push(vec![s.name().to_string(), s.about().to_string(), String::new(), String::new(), String::new(), String::new()]);
        }
        for (i, x) in tests.iter().enumerate() {
            t.push(vec![
                if i == 0 { s.name().to_string() } else { String::new() },
                x.to_string(),
                fmt_size(x.profile.block as u64),
                x.profile.qd.to_string(),
                x.profile.threads.to_string(),
                format!("{:?}", x.profile.pattern),
            ]);
        }
    }
    let g = uraid_bench::report::Grid {
        id: "profiles".into(),
        title: "Profiles".into(),
        header: ["set", "test", "block", "QD", "threads", "pattern"].map(String::from).to_vec(),
        rows: t,
        note: String::new(),
    };
    println!("{}", g.to_table());
    for s in SETS {
        println!("{:<10} {}", s.name(), s.about());
    }
    Ok(())
}
