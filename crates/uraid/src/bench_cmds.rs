//! `uraid bench` and `uraid compare`: the CrystalDiskMark profiles on one
//! target, and one drive against RAID 0 arrays of N such drives (also used
//! by `uraid demo`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use uraid_bench::compare::{compare, default_counts, CompareOptions};
use uraid_bench::profile::{self, Dir, Test};
use uraid_bench::report::{bench_table, Comparison};
use uraid_bench::suite::{run_suite, Progress, SuiteOptions};
use uraid_bench::target::{describe, TargetKind};
use uraid_bench::{Fill, TestResult};
use uraid_core::control::array::{self};
use uraid_core::units::{fmt_size, parse_size};
use uraid_core::{BlockDevice, BlockQueue, Geometry, Member, Volume};
use uraid_nbd::client::{NbdDevice, NbdUri};

use crate::common::specs;

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum FillArg {
    /// Incompressible random data.
    Random,
    /// All 0x00.
    Zero,
}

#[derive(Args, Clone)]
pub(crate) struct SuiteArgs {
    /// Profiles to run (comma-separated): SEQ1M-Q8T1, SEQ1M-Q1T1, RND4K-Q32T1, RND4K-Q1T1.
    #[arg(long, value_delimiter = ',')]
    profile: Vec<String>,
    /// Run only read tests (nothing is written).
    #[arg(long, conflicts_with = "write_only")]
    read_only: bool,
    /// Run only write tests.
    #[arg(long)]
    write_only: bool,
    /// Test area (CrystalDiskMark's test size).
    #[arg(long, default_value = "1G")]
    size: String,
    /// Timed runs per test; the best is the headline, the median and spread are shown too.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    time: f64,
    /// Seconds of discarded warm-up before each test.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Data written: random (incompressible) or zero.
    #[arg(long, value_enum, default_value = "random")]
    fill: FillArg,
    /// Allow writing to a target that holds a filesystem or a uraid superblock.
    #[arg(long)]
    overwrite: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress display.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Treat targets as raw drives even if they hold a uraid superblock.
    #[arg(long)]
    raw: bool,
    /// Chunk of the temporary RAID 0 made when several raw targets are given.
    #[arg(long, default_value = "128K")]
    chunk: String,
    /// RAID level of that temporary array (0, 1, 10, 5, 6): no superblock,
    /// bitmap or cache, nothing persisted (bench/scaling.py runs it over
    /// mem: drives).
    #[arg(long, default_value_t = 0)]
    level: u32,
    /// The volume of the array to run on (Matrix volumes; default: the first).
    #[arg(long)]
    volume: Option<String>,
    /// A file, block device or mem: drive; several uraid members = their array;
    /// several raw drives = a temporary RAID 0 over them (nothing persisted);
    /// or an NBD export, `nbd+unix:///NAME?socket=PATH` or `nbd://HOST[:PORT]/NAME`
    /// (any server: one connection per thread, the same tests as in process).
    #[arg(required = true)]
    targets: Vec<String>,
}

#[derive(Args)]
pub(crate) struct CompareArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Array sizes in drives (default: 1, 2, 4, ... up to the members given).
    #[arg(long, value_delimiter = ',')]
    counts: Vec<usize>,
    /// Chunk sizes of the arrays (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "128K")]
    chunk: Vec<String>,
    /// The drives (all of the same kind); the first one is the single drive.
    #[arg(required = true)]
    members: Vec<String>,
}

fn suite_options(a: &SuiteArgs) -> Result<SuiteOptions> {
    let profiles: Vec<profile::Profile> = if a.profile.is_empty() {
        profile::CDM_DEFAULT.to_vec()
    } else {
        a.profile
            .iter()
            .map(|n| {
                profile::by_name(n).with_context(|| {
                    format!("unknown profile '{n}'; known: SEQ1M-Q8T1, SEQ1M-Q1T1, RND4K-Q32T1, RND4K-Q1T1")
                })
            })
            .collect::<Result<_>>()?
    };
    let mut tests = Vec::new();
    for p in profiles {
        if !a.write_only {
            tests.push(Test { profile: p, dir: Dir::Read });
        }
        if !a.read_only {
            tests.push(Test { profile: p, dir: Dir::Write });
        }
    }
    if !(a.time > 0.0 && a.time <= 3600.0 && (0.0..=3600.0).contains(&a.warmup)) {
        bail!("--time must be from 0 to 3600 seconds (not 0) and --warmup from 0 to 3600");
    }
    if a.runs == 0 || a.runs > 100 {
        bail!("--runs must be from 1 to 100");
    }
    Ok(SuiteOptions {
        tests,
        area: parse_size(&a.size, "test size")?,
        runs: a.runs,
        duration: Duration::from_secs_f64(a.time),
        warmup: Duration::from_secs_f64(a.warmup),
        fill: match a.fill {
            FillArg::Random => Fill::Random,
            FillArg::Zero => Fill::Zero,
        },
        prepare: !a.read_only,
    })
}

/// A progress bar over every run of a suite (hidden when stderr is not a
/// terminal, or with --quiet).
pub(crate) struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub(crate) fn new(total_runs: u64, quiet: bool) -> Bar {
        let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(total_runs) };
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Bar { bar }
    }
    pub(crate) fn update(&self, label: &str, p: Progress) {
        match p {
            Progress::Preparing(bytes) => self.bar.set_message(format!("{label}: writing the {} test area", fmt_size(bytes))),
            Progress::Running { test, run, runs, .. } => {
                if run == 0 {
                    self.bar.set_message(format!("{label}: {test} warm-up"));
                } else {
                    self.bar.inc(1);
                    self.bar.set_message(format!("{label}: {test} run {run}/{runs}"));
                }
            }
        }
    }
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Whether the suite writes: its test area first, or write tests.
fn suite_writes(opts: &SuiteOptions) -> bool {
    opts.prepare || opts.tests.iter().any(|t| t.dir.writes())
}

/// Refuses write tests on a target that holds something, unless allowed.
fn guard_writes(opts: &SuiteOptions, overwrite: bool, what: &str, found: Option<&str>) -> Result<()> {
    if let (true, false, Some(sig)) = (suite_writes(opts), overwrite, found) {
        bail!(
            "{what} holds {sig}; the write tests would destroy it. Nothing was written. \
             Use --read-only, or --overwrite if you mean it"
        );
    }
    Ok(())
}

pub(crate) fn cmd_bench(a: BenchArgs) -> Result<()> {
    let opts = suite_options(&a.suite)?;
    if let Some(t) = a.targets.iter().find(|t| NbdUri::looks_like(t)) {
        if a.targets.len() > 1 {
            bail!("an NBD export is benchmarked alone: give '{t}' as the only target");
        }
        if a.volume.is_some() || a.raw {
            bail!("--volume and --raw are for local drives; the export '{t}' is what its server serves");
        }
        return bench_nbd(t, &a.suite, &opts);
    }
    let specs = specs(&a.targets)?;
    let mut assembled = None;
    let (vol, kind): (Arc<Volume>, TargetKind) = {
        // The members, and a volume's journal if its cache keeps one.
        let all_members = !a.raw && array::are_array_devices(&specs);
        if all_members {
            // Check before anything is written: assembling for real bumps
            // the event counter, which a refused or read-only run must not.
            let mut arr = array::open(&specs)?;
            let v = match &a.volume {
                None => arr.volume().clone(),
                Some(name) => arr.volumes()[arr.volume_index(name)?].clone(),
            };
            let head = v.read_at(0, (uraid_core::control::signature::PROBE_LEN as u64).min(v.capacity()) as usize & !4095)?;
            guard_writes(&opts, a.suite.overwrite, &format!("array '{}'", arr.name()), uraid_core::control::signature::detect(&head))?;
            if !a.suite.read_only {
                arr.activate()?;
            }
            let kind = TargetKind::Array(arr.name());
            assembled = Some(arr);
            (v, kind)
        } else {
            if a.volume.is_some() {
                bail!("--volume picks a volume of an array, but the targets are not the members of a uraid array");
            }
            let members = array::open_members(&specs, !a.suite.read_only, true)?;
            for m in &members {
                guard_writes(&opts, a.suite.overwrite, m.name(), array::probe(m)?)?;
            }
            if members.len() == 1 {
                let m = members.into_iter().next().expect("one");
                let size = m.size();
                (Volume::new(Arc::new(vec![m]), Geometry::single(size), 0)?, TargetKind::Raw)
            } else {
                let chunk = parse_size(&a.chunk, "chunk size")?;
                let level = uraid_core::raid::geometry::Level::from_number(a.level)?;
                let (v, warn) = array::temporary_at(members, level, chunk)?;
                if let Some(w) = warn {
                    eprintln!("uraid: warning: {w}");
                }
                (v, TargetKind::Temporary(chunk))
            }
        }
    };
    if !a.suite.json && !a.suite.quiet {
        eprintln!("target: {}", describe(&vol, &kind));
    }
    let bar = Bar::new((opts.tests.len() * opts.runs) as u64, a.suite.quiet || a.suite.json);
    let results = run_suite(&vol, &opts, &mut |p| bar.update("bench", p));
    bar.finish();
    let results = results?;
    let cache = vol.cache().map(|c| (c.config(), c.stats()));
    print_bench(&describe(&vol, &kind), vol.capacity(), cache, &results, a.suite.json)?;
    drop(vol);
    match assembled {
        Some(arr) if a.suite.read_only => arr.release(),
        Some(arr) => arr.stop()?,
        None => {}
    }
    Ok(())
}

/// `uraid bench` on an NBD export: the same suite through uraid's NBD
/// client (`uraid_nbd::client`), one connection per thread. Write tests
/// are refused, before anything is written, when the export's first bytes
/// hold a filesystem or a superblock, as for a local drive.
fn bench_nbd(uri: &str, a: &SuiteArgs, opts: &SuiteOptions) -> Result<()> {
    let uri: NbdUri = uri.parse()?;
    let dev = NbdDevice::connect(&uri)?;
    if suite_writes(opts) && dev.info().read_only() {
        bail!("the export {uri} is read-only: use --read-only (its area is then read as it is)");
    }
    let probe = (uraid_core::control::signature::PROBE_LEN as u64).min(dev.capacity()) as usize / 4096 * 4096;
    if probe > 0 {
        let head = dev.open_queue(1)?.read_at(0, probe)?;
        guard_writes(opts, a.overwrite, &format!("the export {uri}"), uraid_core::control::signature::detect(&head))?;
    }
    let description = dev.describe();
    if !a.json && !a.quiet {
        eprintln!("target: {description}");
    }
    let bar = Bar::new((opts.tests.len() * opts.runs) as u64, a.quiet || a.json);
    let results = run_suite(&dev, opts, &mut |p| bar.update("bench", p));
    bar.finish();
    print_bench(&description, dev.capacity(), None, &results?, a.json)
}

/// Prints the results of `uraid bench` on a target (`description`,
/// `capacity` bytes): the table (or JSON), then the counters of the
/// volume's cache when it has one (also in the JSON, as `cache`, null
/// without one).
fn print_bench(
    description: &str,
    capacity: u64,
    cache: Option<(uraid_core::cache::CacheConfig, uraid_core::cache::CacheStats)>,
    results: &[TestResult],
    json: bool,
) -> Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "target": description, "capacity": capacity, "results": results,
                "cache": cache.map(|(_, st)| st),
            }))?
        );
    } else {
        println!("{}", bench_table(results));
        println!("MB/s = 10^6 bytes/s; figures are the best of the runs (CrystalDiskMark), median and spread beside; CPU % of one core.");
        if let Some((cfg, st)) = cache {
            println!(
                "cache {} {}, dirty limit {}: {}, writers held at the dirty limit {} times, written around {}",
                cfg.mode.name(),
                fmt_size(cfg.size),
                fmt_size(cfg.dirty_limit),
                crate::manage::cache_counters(&st),
                st.throttled,
                st.written_around
            );
        }
    }
    Ok(())
}

pub(crate) fn print_comparison(c: &Comparison, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(c)?);
    } else {
        println!("{}", c.table());
        println!(
            "SEQ in MB/s (10^6 bytes/s), RND in IOPS; best of the runs. diff = gain over one drive; \
             of Nx = share of N times one drive (the ideal)."
        );
    }
    Ok(())
}

pub(crate) fn run_compare(members: &[Member], opts: &CompareOptions, quiet: bool) -> Result<Comparison> {
    let configs: usize = opts.counts.iter().map(|&k| if k == 1 { 1 } else { opts.chunks.len() }).sum::<usize>()
        + usize::from(!opts.counts.contains(&1));
    let bar = Bar::new((configs * opts.suite.tests.len() * opts.suite.runs) as u64, quiet);
    let r = compare(members, opts, &mut |label, p| bar.update(label, p));
    bar.finish();
    Ok(r?)
}

pub(crate) fn cmd_compare(a: CompareArgs) -> Result<()> {
    let suite = suite_options(&a.suite)?;
    let specs = specs(&a.members)?;
    let members = array::open_members(&specs, !a.suite.read_only, true)?;
    for m in &members {
        guard_writes(&suite, a.suite.overwrite, m.name(), array::probe(m)?)?;
    }
    let counts = if a.counts.is_empty() { default_counts(members.len()) } else { a.counts.clone() };
    let chunks = a.chunk.iter().map(|c| parse_size(c, "chunk size")).collect::<Result<Vec<_>, _>>()?;
    for &c in &chunks {
        uraid_core::raid::geometry::check_chunk(c)?;
    }
    let opts = CompareOptions { counts, chunks, suite };
    let c = run_compare(&members, &opts, a.suite.quiet || a.suite.json)?;
    print_comparison(&c, a.suite.json)
}
