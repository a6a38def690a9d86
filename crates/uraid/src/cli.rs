//! Argument parsing and output of every subcommand.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use uraid_bench::compare::{compare, default_counts, CompareOptions};
use uraid_bench::profile::{self, Dir, Test};
use uraid_bench::report::{bench_table, Comparison};
use uraid_bench::suite::{run_suite, Progress, SuiteOptions};
use uraid_bench::target::{describe, TargetKind};
use uraid_bench::{Fill, TestResult};
use uraid_core::array::{self, CreateOptions, Examination};
use uraid_core::superblock::{fmt_uuid, Superblock};
use uraid_core::units::{fmt_size, parse_size};
use uraid_core::{Geometry, Member, MemberSpec, Volume};

/// uraid: software RAID for NVMe drives in user space, with the reviewers'
/// benchmark suite built in.
#[derive(Parser)]
#[command(name = "uraid", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create an array: write a superblock on every member.
    Create(CreateArgs),
    /// Show the superblock (or other signature) on each member.
    Examine(ExamineArgs),
    /// Check that the members form an array, bring it up to date (resync after a crash), stop it cleanly.
    Assemble(AssembleArgs),
    /// Each volume's level, size, chunk and state, each member's role and state (like /proc/mdstat).
    Status(crate::manage::StatusArgs),
    /// Mark a member faulty (it is no longer read or written).
    Fail(crate::manage::FailArgs),
    /// Take a faulty member or a spare out of the array.
    Remove(crate::manage::RemoveArgs),
    /// Add a drive: it fills a missing role (and is rebuilt) or waits as a spare.
    Add(crate::manage::AddArgs),
    /// Put a new drive in place of a member and rebuild it.
    Replace(crate::manage::ReplaceArgs),
    /// Rebuild the members being rebuilt (resumes where it stopped).
    Rebuild(crate::manage::RebuildArgs),
    /// Change a volume's cache (off, writethrough, writeback) in the superblocks; used from the next assemble.
    Config(crate::manage::ConfigArgs),
    /// Scrub: read every stripe and count where copies or parity disagree.
    Check(crate::manage::CheckArgs),
    /// Scrub and rewrite copies or parity where they disagree.
    Repair(crate::manage::CheckArgs),
    /// Run the CrystalDiskMark profiles on a drive, a file or an array.
    Bench(BenchArgs),
    /// One drive alone against RAID 0 arrays of N such drives.
    Compare(CompareArgs),
    /// Compare 1, 2 and 4 emulated NVMe drives (no hardware needed).
    Demo(DemoArgs),
    /// Export the array over NBD (unix socket by default) until SIGINT/SIGTERM.
    Serve(crate::serve::ServeArgs),
    /// The reviewers' suite (CrystalDiskMark, ATTO, Iometer, AS SSD, linear) on targets side by side; HTML report and charts.
    Suite(crate::suite_cmds::SuiteCmdArgs),
    /// Which chunk size? Runs the tests on arrays at every chunk size and recommends one.
    Tune(crate::suite_cmds::TuneArgs),
    /// List the test sets and their parameters.
    Profiles(crate::suite_cmds::ProfilesArgs),
}

#[derive(Args)]
struct CreateArgs {
    /// RAID level: 0, 1, 10, 5 or 6 (of the one volume, or of volumes that name none).
    #[arg(long, default_value_t = 0)]
    level: u32,
    /// Chunk (stripe unit, "stripe size" in Windows): a power of two from 4K to 1M.
    #[arg(long, default_value = "128K")]
    chunk: String,
    /// Array name (letters, digits, - _ .; up to 32).
    #[arg(long)]
    name: String,
    /// Overwrite members that hold a filesystem or another array.
    #[arg(long)]
    force: bool,
    /// Write-intent bitmap region size (default 64M when a volume is redundant).
    #[arg(long, conflicts_with = "no_bitmap")]
    bitmap_region: Option<String>,
    /// No write-intent bitmap (a crash then resyncs whole redundant volumes).
    #[arg(long)]
    no_bitmap: bool,
    /// A Matrix volume: NAME,level=L,size=SIZE[,chunk=C]; repeat for several, in order; the last may leave out size (= the rest). Default: one volume named like the array over all the space.
    #[arg(long = "volume", value_name = "NAME,level=L,size=SIZE[,chunk=C]")]
    volumes: Vec<String>,
    #[command(flatten)]
    cache: crate::manage::CacheFlags,
    /// Members: files, block devices or mem:SIZE[,bw=B/s][,iops=N][,lat=µs].
    #[arg(required = true)]
    members: Vec<String>,
}

#[derive(Args)]
struct ExamineArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Members to look at.
    #[arg(required = true)]
    members: Vec<String>,
}

#[derive(Args)]
struct AssembleArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Take stale members back (rebuilt in full), start a degraded RAID 5/6 volume that was not stopped cleanly,
    /// or one whose journal on a member cannot be read (its records are lost).
    #[arg(long)]
    force: bool,
    /// Start without a journal device of its own that is gone (the records it held are lost).
    #[arg(long)]
    without_journal: bool,
    /// Every member of the array, in any order.
    #[arg(required = true)]
    members: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum FillArg {
    /// Incompressible random data.
    Random,
    /// All 0x00.
    Zero,
}

#[derive(Args, Clone)]
struct SuiteArgs {
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
struct BenchArgs {
    #[command(flatten)]
    suite: SuiteArgs,
    /// Treat targets as raw drives even if they hold a uraid superblock.
    #[arg(long)]
    raw: bool,
    /// Chunk of the temporary RAID 0 made when several raw targets are given.
    #[arg(long, default_value = "128K")]
    chunk: String,
    /// The volume of the array to run on (Matrix volumes; default: the first).
    #[arg(long)]
    volume: Option<String>,
    /// A file, block device or mem: drive; several uraid members = their array;
    /// several raw drives = a temporary RAID 0 over them (nothing persisted).
    #[arg(required = true)]
    targets: Vec<String>,
}

#[derive(Args)]
struct CompareArgs {
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

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Use sparse files under this directory (real storage) instead of RAM.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
}

/// Entry point of the CLI.
pub fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Create(a) => cmd_create(a),
        Cmd::Examine(a) => cmd_examine(a),
        Cmd::Assemble(a) => cmd_assemble(a),
        Cmd::Status(a) => crate::manage::cmd_status(a),
        Cmd::Fail(a) => crate::manage::cmd_fail(a),
        Cmd::Remove(a) => crate::manage::cmd_remove(a),
        Cmd::Add(a) => crate::manage::cmd_add(a),
        Cmd::Replace(a) => crate::manage::cmd_replace(a),
        Cmd::Rebuild(a) => crate::manage::cmd_rebuild(a),
        Cmd::Config(a) => crate::manage::cmd_config(a),
        Cmd::Check(a) => crate::manage::cmd_check(a, false),
        Cmd::Repair(a) => crate::manage::cmd_check(a, true),
        Cmd::Bench(a) => cmd_bench(a),
        Cmd::Compare(a) => cmd_compare(a),
        Cmd::Demo(a) => crate::demo::run(a),
        Cmd::Serve(a) => crate::serve::run(a),
        Cmd::Suite(a) => crate::suite_cmds::run_suite_cmd(a),
        Cmd::Tune(a) => crate::suite_cmds::run_tune_cmd(a),
        Cmd::Profiles(a) => crate::suite_cmds::run_profiles_cmd(a),
    }
}

pub(crate) fn specs(names: &[String]) -> Result<Vec<MemberSpec>> {
    names.iter().map(|n| n.parse::<MemberSpec>().map_err(Into::into)).collect()
}

fn cmd_create(a: CreateArgs) -> Result<()> {
    let chunk = parse_size(&a.chunk, "chunk size")?;
    let bitmap_region = match (&a.bitmap_region, a.no_bitmap) {
        (_, true) => Some(0),
        (Some(r), false) => Some(parse_size(r, "bitmap region size")?),
        (None, false) => None,
    };
    let volumes = a.volumes.iter().map(|v| crate::manage::parse_volume(v)).collect::<Result<Vec<_>>>()?;
    let specs = specs(&a.members)?;
    let cache = a.cache.config()?;
    let journal_reserve = a.cache.journal_reserve(&specs)?;
    // Checked before anything is written.
    if let (Some(cfg), Some(j)) = (&cache, &a.cache.journal) {
        if cfg.mode == uraid_core::cache::CacheMode::Journal && volumes.len() > 1 {
            bail!(
                "a journal serves one volume and this array gets {}; create it without --cache, then give each \
                 volume its journal with 'uraid config --volume NAME --cache journal --journal DEVICE' (a journal on \
                 a member needs free room at the members' end: give every volume a size)",
                volumes.len()
            );
        }
        if journal_reserve == 0 {
            if a.cache.journal_size.is_some() {
                bail!("--journal-size is for a journal on a member; {j} is not one of the members (a device of its own is a journal whole)");
            }
            drop(array::open_journal_device(&j.parse()?, a.force)?);
        }
    }
    let opts = CreateOptions { level: a.level, chunk, name: a.name, force: a.force, bitmap_region, volumes, journal_reserve };
    let mut arr = array::create(&specs, &opts)?;
    if let Some(cfg) = &cache {
        let names = a.cache.apply(&mut arr, None, cfg, a.force)?;
        crate::manage::print_cache(&names, cfg);
    }
    for w in arr.warnings() {
        eprintln!("uraid: warning: {w}");
    }
    let entries = arr.volume_entries();
    let n = arr.member_count();
    if entries.len() == 1 {
        let v = arr.volume().clone();
        println!(
            "created array '{}' ({}): RAID {} over {} members, chunk {}, capacity {} bytes ({})",
            arr.name(),
            arr.uuid(),
            v.geometry().level().number(),
            n,
            fmt_size(v.geometry().chunk()),
            v.capacity(),
            fmt_size(v.capacity())
        );
    } else {
        println!("created array '{}' ({}) over {} members with {} volumes:", arr.name(), arr.uuid(), n, entries.len());
        for (e, v) in entries.iter().zip(arr.volumes()) {
            println!(
                "  volume '{}': RAID {}, chunk {}, capacity {} bytes ({}), member bytes {}..{}",
                e.name,
                e.level,
                fmt_size(e.chunk),
                v.capacity(),
                fmt_size(v.capacity()),
                e.member_start,
                e.member_end()
            );
        }
    }
    arr.stop()?;
    Ok(())
}

fn print_superblock(name: &str, sb: &Superblock) {
    println!("{name}:");
    println!("          magic : uraid superblock, version {}", uraid_core::superblock::VERSION);
    println!("     array uuid : {}", fmt_uuid(&sb.array_uuid));
    println!("           name : {}", sb.name);
    println!("        members : {}", sb.member_count);
    if sb.is_spare() {
        println!("    this member : spare, slot {} ({})", sb.slot, fmt_uuid(&sb.member_uuid));
    } else {
        println!("    this member : role {} ({})", sb.slot, fmt_uuid(&sb.member_uuid));
    }
    println!("  creation time : {} (unix)", sb.ctime);
    println!("    update time : {} (unix)", sb.utime);
    println!("         events : {}", sb.events);
    println!("          state : {:?}", sb.state);
    if sb.bitmap_region == 0 {
        println!("         bitmap : none");
    } else {
        println!("         bitmap : {} regions", fmt_size(sb.bitmap_region));
    }
    println!("      data ends : byte {} of every member", sb.data_end());
    for (i, v) in sb.volumes.iter().enumerate() {
        let cap = v.capacity(sb.member_count as usize);
        println!(
            "       volume {i} : '{}' raid{}, chunk {}, capacity {} bytes ({}), member bytes {}..{}, cache {}, uuid {}",
            v.name,
            v.level,
            fmt_size(v.chunk),
            cap,
            fmt_size(cap),
            v.member_start,
            v.member_end(),
            uraid_core::cache::CacheMode::from_u8(v.cache_mode).map(|m| m.name().to_string()).unwrap_or_else(|_| v.cache_mode.to_string()),
            fmt_uuid(&v.uuid)
        );
        if let Some(r) = v.journal_region {
            println!(
                "                 journal on role {} at member bytes {}..{} ({}), uuid {}",
                r.role,
                r.start,
                r.end(),
                fmt_size(r.size),
                fmt_uuid(&v.journal_uuid)
            );
        }
    }
    for (i, s) in sb.slots.iter().enumerate() {
        let what = if i < sb.member_count as usize { format!("role {i}") } else { format!("spare {i}") };
        let uuid = if s.is_empty() { "-".to_string() } else { fmt_uuid(&s.uuid) };
        match s.recovery_offset {
            Some(o) => println!("{what:>15} : {} {uuid} (rebuilt up to byte {o})", s.state.name()),
            None => println!("{what:>15} : {} {uuid}", s.state.name()),
        }
    }
}

fn cmd_examine(a: ExamineArgs) -> Result<()> {
    let mut json = Vec::new();
    let mut bad = 0;
    for (name, spec) in a.members.iter().zip(specs(&a.members)?) {
        let ex = array::examine(&spec)?;
        if a.json {
            json.push(match &ex {
                Examination::Member(sb) => serde_json::json!({"member": name, "superblock": sb}),
                Examination::Corrupt(why) => serde_json::json!({"member": name, "error": why}),
                Examination::Foreign(sig) => serde_json::json!({"member": name, "holds": sig}),
                Examination::Empty => serde_json::json!({"member": name, "holds": null}),
            });
            if matches!(ex, Examination::Corrupt(_)) {
                bad += 1;
            }
            continue;
        }
        match ex {
            Examination::Member(sb) => print_superblock(name, &sb),
            Examination::Corrupt(why) => {
                println!("{name}: damaged uraid superblock: {why}");
                bad += 1;
            }
            Examination::Foreign(sig) => println!("{name}: no uraid superblock; holds {sig}"),
            Examination::Empty => println!("{name}: no uraid superblock, no known signature"),
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    }
    if bad > 0 {
        bail!("{bad} member(s) have a damaged superblock");
    }
    Ok(())
}

fn cmd_assemble(a: AssembleArgs) -> Result<()> {
    let arr = array::assemble_with(&specs(&a.members)?, &array::AssembleOptions { force: a.force, without_journal: a.without_journal, ..Default::default() })?;
    for w in arr.warnings() {
        eprintln!("uraid: warning: {w}");
    }
    let v = arr.volume().clone();
    let st = arr.status();
    if a.json {
        let members: Vec<_> = st
            .members
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "slot": m.slot, "member": m.device, "state": m.state}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "name": arr.name(), "uuid": arr.uuid(), "level": v.geometry().level().number(),
                "chunk": v.geometry().chunk(), "capacity": v.capacity(), "events": arr.events(),
                "members": members, "volumes": st.volumes,
            }))?
        );
    } else {
        println!(
            "assembled array '{}' ({}): RAID {}, chunk {}, capacity {} bytes ({}), events {}",
            arr.name(),
            arr.uuid(),
            v.geometry().level().number(),
            fmt_size(v.geometry().chunk()),
            v.capacity(),
            fmt_size(v.capacity()),
            arr.events()
        );
        for m in &st.members {
            match m.role {
                Some(r) => println!("  role {r}: {} {}", m.device.as_deref().unwrap_or("-"), m.state),
                None => println!("  spare {}: {} {}", m.slot, m.device.as_deref().unwrap_or("-"), m.state),
            }
        }
        if st.volumes.len() > 1 {
            for vs in &st.volumes {
                println!("  volume '{}': raid{} {} bytes, chunk {}, {}", vs.name, vs.level, vs.capacity, fmt_size(vs.chunk), vs.state);
            }
        }
        let pending = arr.rebuilding();
        if !pending.is_empty() {
            println!("  role(s) {pending:?} need a rebuild: run 'uraid rebuild'");
        }
    }
    drop(v);
    arr.stop()?;
    Ok(())
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

/// Refuses write tests on a target that holds something, unless allowed.
fn guard_writes(opts: &SuiteOptions, overwrite: bool, what: &str, found: Option<&str>) -> Result<()> {
    let writes = opts.prepare || opts.tests.iter().any(|t| t.dir == Dir::Write);
    if let (true, false, Some(sig)) = (writes, overwrite, found) {
        bail!(
            "{what} holds {sig}; the write tests would destroy it. Nothing was written. \
             Use --read-only, or --overwrite if you mean it"
        );
    }
    Ok(())
}

fn cmd_bench(a: BenchArgs) -> Result<()> {
    let opts = suite_options(&a.suite)?;
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
            let head = v.read_at(0, (uraid_core::signature::PROBE_LEN as u64).min(v.capacity()) as usize & !4095)?;
            guard_writes(&opts, a.suite.overwrite, &format!("array '{}'", arr.name()), uraid_core::signature::detect(&head))?;
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
                let (v, warn) = array::temporary(members, chunk)?;
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
    print_bench(&vol, &kind, &results, a.suite.json)?;
    drop(vol);
    match assembled {
        Some(arr) if a.suite.read_only => arr.release(),
        Some(arr) => arr.stop()?,
        None => {}
    }
    Ok(())
}

/// Prints the results of `uraid bench` on `vol`: the table (or JSON), then
/// the counters of the volume's cache when it has one (also in the JSON, as
/// `cache`, null without one).
fn print_bench(vol: &Volume, kind: &TargetKind, results: &[TestResult], json: bool) -> Result<()> {
    let cache = vol.cache().map(|c| (c.config(), c.stats()));
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "target": describe(vol, kind), "capacity": vol.capacity(), "results": results,
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

fn cmd_compare(a: CompareArgs) -> Result<()> {
    let suite = suite_options(&a.suite)?;
    let specs = specs(&a.members)?;
    let members = array::open_members(&specs, !a.suite.read_only, true)?;
    for m in &members {
        guard_writes(&suite, a.suite.overwrite, m.name(), array::probe(m)?)?;
    }
    let counts = if a.counts.is_empty() { default_counts(members.len()) } else { a.counts.clone() };
    let chunks = a.chunk.iter().map(|c| parse_size(c, "chunk size")).collect::<Result<Vec<_>, _>>()?;
    for &c in &chunks {
        uraid_core::geometry::check_chunk(c)?;
    }
    let opts = CompareOptions { counts, chunks, suite };
    let c = run_compare(&members, &opts, a.suite.quiet || a.suite.json)?;
    print_comparison(&c, a.suite.json)
}
