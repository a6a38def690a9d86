//! The membership and maintenance subcommands: `status`, `fail`, `remove`,
//! `add`, `replace`, `rebuild`, `check` and `repair`, and the parsing of
//! `create --volume`. The RAID logic lives in `uraid_core::control::array::Array`.
//!
//! `status`, `fail`, `remove`, `add` and `replace` open the array without
//! writing (`array::open`), so that a refused request leaves every member
//! as it was; an accepted change persists itself (event counter + 1). When
//! a member is left rebuilding, the array is activated and the rebuild runs
//! in the foreground with a progress bar (unless `--no-rebuild`), then the
//! array is stopped cleanly. `rebuild`, `check` and `repair` assemble the
//! array (resync after a crash included), work, and stop it cleanly.
//!
//! While `uraid serve` holds the members, `status` reads their superblocks
//! without taking them and shows the live cache counters that `serve`
//! publishes ([`crate::runstate`]).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use uraid_core::control::array::{self, Added, Array, ArrayStatus, VolumeSpec};
use uraid_core::units::{fmt_size, parse_size};
use uraid_core::MemberSpec;
use uraid_core::io::identity::identity_of_path;

use crate::common::specs;

#[derive(Args)]
pub(crate) struct ArrayMembers {
    /// The array: its NAME or UUID (served, in the config, or found by a
    /// scan), or its members (and spares) in any order.
    #[arg(required = true, value_name = "NAME|MEMBER")]
    pub(crate) members: Vec<String>,
}

#[derive(Args)]
pub(crate) struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

#[derive(Args)]
pub(crate) struct FailArgs {
    /// The member to mark faulty: its role number or its path.
    #[arg(long)]
    pub(crate) member: String,
    /// Fail it even when a volume then loses data (it stops taking writes).
    #[arg(long)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) rebuild: RebuildFlags,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

#[derive(Args)]
pub(crate) struct RemoveArgs {
    /// The faulty member or spare to remove: its slot number or its path.
    #[arg(long)]
    pub(crate) member: String,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

#[derive(Args)]
pub(crate) struct AddArgs {
    /// The new drive: it fills a missing role (and is rebuilt), or waits as a spare.
    #[arg(long, value_name = "NEWDEV")]
    pub(crate) spare: String,
    /// Overwrite a new drive that holds a filesystem or another array.
    #[arg(long)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) rebuild: RebuildFlags,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

#[derive(Args)]
pub(crate) struct ReplaceArgs {
    /// The member to replace: its role number or its path.
    #[arg(long)]
    pub(crate) old: String,
    /// The drive that takes its place (it is rebuilt).
    #[arg(long, value_name = "NEWDEV")]
    pub(crate) new: String,
    /// Replace an active member even when a volume has no redundancy left
    /// while the new one rebuilds, and overwrite a new drive that holds data.
    #[arg(long)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) rebuild: RebuildFlags,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

#[derive(Args)]
pub(crate) struct RebuildRun {
    /// Rebuild rate limit in MB/s (10^6 bytes/s); a plain number is MB/s, or give units (250M).
    #[arg(long)]
    pub(crate) rate: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub(crate) quiet: bool,
}

#[derive(Args)]
pub(crate) struct RebuildFlags {
    /// Do not start the rebuild now (it starts with 'uraid rebuild' or the next command that rebuilds).
    #[arg(long)]
    pub(crate) no_rebuild: bool,
    #[command(flatten)]
    pub(crate) run: RebuildRun,
}

#[derive(Args)]
pub(crate) struct RebuildArgs {
    /// Print JSON: one object per rebuilt role with its report (bytes
    /// written, bytes skipped as never written, seconds), and the status.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) run: RebuildRun,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

#[derive(Args)]
pub(crate) struct CheckArgs {
    /// Only this volume (default: every redundant volume).
    #[arg(long)]
    pub(crate) volume: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bar.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// On a served array: stop the check or repair it is running.
    #[arg(long)]
    pub(crate) stop: bool,
    /// Scrub rate limit in MB/s of the volume (10^6 bytes/s; a plain
    /// number is MB/s, or give units). Default: none on a stopped array,
    /// the service's --scrub-rate on a served one.
    #[arg(long)]
    pub(crate) rate: Option<String>,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

/// Parses `NAME,level=L[,size=SIZE][,chunk=C]` (the `create --volume`
/// syntax; SIZE and C in powers of 1024).
pub(crate) fn parse_volume(s: &str) -> Result<VolumeSpec> {
    let mut parts = s.split(',');
    let name = parts.next().unwrap_or("").trim().to_string();
    if name.is_empty() || name.contains('=') {
        bail!("--volume '{s}' must start with the volume's name: NAME,level=L,size=SIZE[,chunk=C]");
    }
    let (mut level, mut size, mut chunk) = (None, None, None);
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            bail!("'{p}' in --volume '{s}' is not KEY=VALUE; use level=5, size=10G or chunk=64K");
        };
        match k.trim() {
            "level" => {
                // A number goes to create as it is (which names the levels
                // it knows); a name must be one of the levels.
                level = Some(match v.trim().parse::<u32>() {
                    Ok(n) => n,
                    Err(_) => uraid_core::Level::parse(v)
                        .map_err(|_| anyhow!("level '{v}' in --volume '{s}' is not a level; use 0, 1, 10, 5, 6, draid5 or draid6"))?
                        .number(),
                })
            }
            "size" => size = Some(parse_size(v, "volume size")?),
            "chunk" => chunk = Some(parse_size(v, "chunk size")?),
            _ => bail!("unknown key '{k}' in --volume '{s}'; known: level, size, chunk"),
        }
    }
    let level = level.ok_or_else(|| anyhow!("--volume '{s}' has no level; add level=0, 1, 10, 5 or 6"))?;
    Ok(VolumeSpec { name, level, size, chunk })
}

/// A `--rate` flag in bytes/s ([`conf::parse_rate`](crate::conf::parse_rate):
/// a plain number is MB/s); `None` when not given.
pub(crate) fn rate(r: &Option<String>) -> Result<Option<u64>> {
    r.as_deref().map(crate::conf::parse_rate).transpose()
}

/// Opens the array without writing anything.
fn open(members: &[String]) -> Result<Array> {
    let mut arr = array::open(&specs(members)?)?;
    warn(&mut arr);
    Ok(arr)
}

/// Prints the warnings `arr` has not printed yet.
fn warn(arr: &mut Array) {
    for w in arr.take_warnings() {
        eprintln!("uraid: warning: {w}");
    }
}

pub(crate) fn bytes_bar(quiet: bool, what: &str) -> ProgressBar {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {percent:>3}% {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Runs the rebuild of every rebuilding role with a progress bar.
fn run_rebuild(arr: &mut Array, rate: Option<u64>, quiet: bool) -> Result<()> {
    for (role, rep) in rebuild_reports(arr, rate, quiet)? {
        println!("rebuilt role {role}: {}", compact(&rep));
    }
    Ok(())
}

/// Rebuilds every rebuilding role (progress bar unless `quiet`); returns
/// each role with its report as JSON.
fn rebuild_reports(arr: &mut Array, rate: Option<u64>, quiet: bool) -> Result<Vec<(u32, serde_json::Value)>> {
    let roles = arr.rebuilding();
    if roles.is_empty() {
        return Ok(Vec::new());
    }
    let bar = bytes_bar(quiet, "");
    let r = arr.rebuild(rate, &mut |role, done, total| {
        bar.set_message(format!("rebuilding role {role}"));
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let reports = r.context("rebuild stopped; its progress is kept: 'uraid rebuild' resumes it")?;
    let mut out = Vec::new();
    for (role, rep) in roles.iter().zip(&reports) {
        out.push(((*role), serde_json::to_value(rep)?));
    }
    Ok(out)
}

/// After a change on an opened array: rebuild in the foreground when a
/// member is left rebuilding (and `flags` allow it), then stop cleanly;
/// otherwise let go without writing more.
fn after_change(mut arr: Array, flags: Option<&RebuildFlags>) -> Result<()> {
    warn(&mut arr);
    let pending = arr.rebuilding();
    match flags {
        Some(f) if !f.no_rebuild && !pending.is_empty() => {
            let r = rate(&f.run.rate)?;
            arr.activate_for_rebuild()?;
            warn(&mut arr);
            let done = run_rebuild(&mut arr, r, f.run.quiet);
            print_status(&arr.status());
            let stopped = arr.stop();
            done?;
            stopped?;
        }
        _ => {
            if !pending.is_empty() {
                println!("role(s) {pending:?} need a rebuild: run 'uraid rebuild'");
            }
            print_status(&arr.status());
            arr.release();
        }
    }
    Ok(())
}

/// `uraid status`. While `uraid serve` holds the members (their locks make
/// the normal open fail with `Busy`), the status is read from the members'
/// superblocks without taking them, with the live cache counters the
/// serving process publishes (see [`crate::runstate`]); without a live
/// publication of this array the `Busy` error stands.
pub(crate) fn cmd_status(a: StatusArgs) -> Result<()> {
    let specs = specs(&a.array.members)?;
    let (st, served) = match array::open_with(&specs, &array::AssembleOptions { inspect: true, ..Default::default() }) {
        Ok(arr) => {
            for w in arr.warnings() {
                eprintln!("uraid: warning: {w}");
            }
            let st = arr.status();
            arr.release();
            (st, None)
        }
        Err(e) if e.kind() == uraid_core::ErrorKind::Busy => match served_status(&crate::scan::member_args(&a.array.members)?, &specs) {
            Some(x) => x,
            None => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    };
    if a.json {
        let mut v = serde_json::to_value(&st)?;
        v["served_by"] = match &served {
            Some(r) => serde_json::json!({
                "pid": r.pid,
                "updated_unix_ms": r.updated_unix_ms,
                "age_seconds": r.age_seconds(),
                "state_file": crate::runstate::state_path(&r.uuid),
            }),
            None => serde_json::Value::Null,
        };
        if let Some(ms) = v["members"].as_array_mut() {
            for m in ms {
                let id = m["device"].as_str().and_then(|d| identity_of_path(std::path::Path::new(d)));
                m["identity"] = serde_json::to_value(id)?;
            }
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_status_from(&st, served.as_ref());
    }
    Ok(())
}

/// The status of an array that a running `uraid serve` holds: its members'
/// superblocks read without taking the members (the slot states are the
/// ones the serving process persisted), and the cache counters it
/// published. `None` when a member is not a readable member of one array,
/// or no live `serve` of that array published its state.
fn served_status(names: &[String], specs: &[MemberSpec]) -> Option<(ArrayStatus, Option<crate::runstate::RunState>)> {
    let mut sbs = Vec::with_capacity(specs.len());
    for (name, spec) in names.iter().zip(specs) {
        match array::examine(spec).ok()? {
            array::Examination::Member(sb) => sbs.push((name.clone(), *sb)),
            _ => return None,
        }
    }
    let (_, auth) = sbs.iter().max_by_key(|(_, sb)| sb.events)?;
    if sbs.iter().any(|(_, sb)| sb.array_uuid != auth.array_uuid) {
        return None;
    }
    let live = crate::runstate::read_live(&uraid_core::control::superblock::fmt_uuid(&auth.array_uuid))?;
    let devices: Vec<(String, [u8; 16])> = sbs.iter().map(|(name, sb)| (name.clone(), sb.member_uuid)).collect();
    let mut st = array::recorded_status(auth, &devices);
    for v in &mut st.volumes {
        v.cache_stats = live.cache_of(&v.name);
        if v.cache_stats.is_some_and(|c| c.journal_lost) {
            v.journal_lost = true;
            v.cache_warning = Some(array::JOURNAL_LOST_WARNING.to_string());
        }
    }
    Some((st, Some(live)))
}

/// Prints the status the /proc/mdstat way: per volume its level, size,
/// chunk, state, `[roles/in sync] [U_U]` and rebuild progress; then every
/// member and spare with its role and state.
pub(crate) fn print_status(st: &ArrayStatus) {
    print_status_from(st, None);
}

/// [`print_status`] of an array that the running `uraid serve` described
/// by `served` holds: says so, and that the cache counters are its live
/// ones.
fn print_status_from(st: &ArrayStatus, served: Option<&crate::runstate::RunState>) {
    let n = st.member_count as usize;
    let up = st.members.iter().take(n).filter(|m| m.state == "active").count();
    let map: String = st.members.iter().take(n).map(|m| if m.state == "active" { 'U' } else { '_' }).collect();
    let bitmap = match (st.bitmap_region, served) {
        (0, _) => "none".to_string(),
        (r, Some(_)) => format!("{} regions", fmt_size(r)),
        (r, None) => format!("{} regions, {} dirty", fmt_size(r), fmt_size(st.bitmap_dirty_bytes)),
    };
    println!("array '{}' ({}): {} members, {}, events {}, bitmap {bitmap}", st.name, st.uuid, n, st.state, st.events);
    let source = served.map(|r| format!(" (live from uraid serve, pid {}, updated {:.1} s ago)", r.pid, r.age_seconds()));
    if let Some(r) = served {
        println!(
            "  served by uraid serve (pid {}), which holds the members: states as their superblocks record them",
            r.pid
        );
    }
    for v in &st.volumes {
        println!(
            "  volume '{}': {} {} ({} bytes), chunk {}{}, {} [{n}/{up}] [{map}]",
            v.name,
            crate::common::level_name(v.level),
            fmt_size(v.capacity),
            v.capacity,
            fmt_size(v.chunk),
            if v.layout.is_empty() { String::new() } else { format!(", {}", v.layout) },
            v.state
        );
        if let Some(p) = v.rebuild_percent {
            println!("      rebuild = {p:.1}%");
        }
        if let Some(b) = v.live_bytes.filter(|&b| v.redundant() && b < v.capacity) {
            println!("      live data {} ({b} bytes): the rest was never written (reads as zeros, skipped by rebuild and check)", fmt_size(b));
        }
        if v.cache.mode != uraid_core::cache::CacheMode::Off {
            println!("      cache {} {}, dirty limit {}", v.cache.mode.name(), fmt_size(v.cache.size), fmt_size(v.cache.dirty_limit));
            if let Some(r) = &v.journal_region {
                println!(
                    "      journal on role {} at byte {} ({}){}",
                    r.role,
                    r.start,
                    fmt_size(r.size),
                    if v.journal_lost { ": LOST" } else { "" }
                );
            }
            if let Some(c) = &v.cache_stats {
                println!("      cache {}{}", cache_counters(c), source.as_deref().unwrap_or(""));
            }
        }
        if let Some(w) = &v.cache_warning {
            println!("      WARNING: {w}");
        }
    }
    for d in &st.stale_members {
        println!("  stale: {} (no longer a member: removed or replaced; left out)", crate::conf::quote(d));
    }
    for m in &st.members {
        let dev = crate::conf::quote(m.device.as_deref().unwrap_or("-"));
        // Who the drive is (model, serial, by-id), so the right one is pulled.
        let who = m.device.as_deref().and_then(|d| identity_of_path(std::path::Path::new(d))).map(|id| format!("\n      {}", id.summary_and_name()));
        let who = who.as_deref().unwrap_or("");
        if let (None, Some(r)) = (m.role, m.former_role) {
            // md's (F): the drive a spare replaced, still to be pulled.
            println!("  faulty {}: {dev} (F) was role {r}, replaced by a spare; pull it, then 'uraid remove {} --member {dev}'{who}", m.slot, st.name);
            continue;
        }
        let what = match m.role {
            Some(r) => format!("role {r}"),
            None => format!("spare {}", m.slot),
        };
        // Read errors repaired from redundancy (and any that failed a read).
        let errs = match (m.read_errors_corrected, m.read_errors_uncorrected) {
            (0, 0) => String::new(),
            (c, 0) => format!(", {c} read errors corrected"),
            (c, u) => format!(", {c} read errors corrected, {u} uncorrected"),
        };
        // A role a declustered volume's distributed spare holds (spared),
        // or whose device is filled from the spare that still holds the
        // rest (a rebalance).
        let held = m.role.and_then(|r| st.distributed_spares.iter().find(|u| u.role == r));
        let state = match held {
            Some(u) if u.rebalanced_to.is_none() => format!("{} in distributed spare {}", m.state, u.spare),
            _ => m.state.clone(),
        };
        let from = held
            .filter(|u| u.rebalanced_to.is_some())
            .map(|u| format!(", copied from distributed spare {} which holds the rest", u.spare))
            .unwrap_or_default();
        match m.recovery_offset {
            Some(o) => println!("  {what}: {dev} {state} (rebuilt up to byte {o}{}{from}){errs}{who}", rebuilt_share(st, o)),
            None => println!("  {what}: {dev} {state}{errs}{who}"),
        }
        if let Some(io) = &m.io {
            println!("      {}", crate::iostat::member_io_line(io));
        }
    }
}

/// `, 26.2%`: how much of the redundant volumes' member area lies below
/// recovery offset `o` (absolute member bytes), with the same rounding
/// as the volumes' `rebuild` line; empty without a redundant volume.
fn rebuilt_share(st: &ArrayStatus, o: u64) -> String {
    let vols: Vec<_> = st.volumes.iter().filter(|v| v.redundant() && v.member_size > 0).collect();
    let total: u64 = vols.iter().map(|v| v.member_size).sum();
    if total == 0 {
        return String::new();
    }
    let done: u64 = vols.iter().map(|v| o.saturating_sub(v.member_start).min(v.member_size)).sum();
    format!(", {:.1}%", (done as f64 * 1000.0 / total as f64).floor() / 10.0)
}

/// A cache's counters in one line: `dirty 1M, hit ratio 12.5%, writes 8,
/// merged 2, written back 6 (4 whole stripes)` (dirty bytes in powers of
/// 1024; whole stripes: write-backs of a whole line, full stripes on
/// RAID 5/6); in journal mode also `, journal records 9 (1 whole
/// stripes)` (records of writes, and of lines recorded whole before their
/// member writes).
pub(crate) fn cache_counters(c: &uraid_core::cache::CacheStats) -> String {
    let mut s = format!(
        "dirty {}, hit ratio {:.1}%, writes {}, merged {}, written back {} ({} whole stripes)",
        fmt_size(c.dirty_bytes),
        c.hit_ratio * 100.0,
        c.writes,
        c.merged,
        c.writebacks,
        c.full_lines
    );
    if c.mode == uraid_core::cache::CacheMode::Journal {
        s += &format!(
            ", journal records {} ({} whole stripes, {} stripe rows)",
            c.journal_records + c.stripe_records + c.rows_records,
            c.stripe_records,
            c.rows_records
        );
    }
    s
}

/// `uraid fail`.
pub(crate) fn cmd_fail(a: FailArgs) -> Result<()> {
    let mut arr = open(&a.array.members)?;
    let role = arr.resolve(&a.member)?;
    arr.fail(role, a.force)?;
    println!("role {role} of array '{}' marked faulty (events {})", arr.name(), arr.events());
    let promoted = arr.promote_spares()?;
    for r in &promoted {
        println!("a spare takes over role {r}");
    }
    // A declustered volume's free distributed spare takes it at once, as a
    // dedicated spare does (rebuilt now unless --no-rebuild).
    for r in arr.take_distributed_spares()? {
        println!("distributed spare space takes over role {r}");
    }
    after_change(arr, Some(&a.rebuild))
}

/// `uraid remove`.
pub(crate) fn cmd_remove(a: RemoveArgs) -> Result<()> {
    let mut arr = open(&a.array.members)?;
    let slot = arr.resolve(&a.member)?;
    arr.remove(slot)?;
    println!("slot {slot} removed from array '{}' (events {})", arr.name(), arr.events());
    after_change(arr, None)
}

/// `uraid add`.
pub(crate) fn cmd_add(a: AddArgs) -> Result<()> {
    let mut arr = open(&a.array.members)?;
    let spec: MemberSpec = a.spare.parse()?;
    match arr.add(&spec, a.force)? {
        Added::Role(r) => println!("{} added to array '{}' in role {r}, to be rebuilt", a.spare, arr.name()),
        Added::ReAdded(r) => println!(
            "{} re-added to array '{}' in role {r}, which it held before: only the regions written since it left \
             (the write-intent bitmap's dirty regions) are resynced",
            a.spare,
            arr.name()
        ),
        Added::Spare(s) => {
            // A spare may have been moved into a faulty role at once.
            let now = arr.slot_of(&spec).unwrap_or(s);
            if now < arr.member_count() {
                println!("{} added to array '{}'; it takes over role {now}, to be rebuilt", a.spare, arr.name());
            } else {
                println!("{} added to array '{}' as a spare (slot {now})", a.spare, arr.name());
            }
        }
    }
    after_change(arr, Some(&a.rebuild))
}

/// `uraid replace`.
pub(crate) fn cmd_replace(a: ReplaceArgs) -> Result<()> {
    let mut arr = open(&a.array.members)?;
    let role = arr.resolve(&a.old)?;
    let spec: MemberSpec = a.new.parse()?;
    arr.replace(role, &spec, a.force, array::Replacement::InPlace)?;
    println!("{} replaces role {role} of array '{}', to be rebuilt", a.new, arr.name());
    after_change(arr, Some(&a.rebuild))
}

/// `uraid rebuild`.
pub(crate) fn cmd_rebuild(a: RebuildArgs) -> Result<()> {
    let rate = rate(&a.run.rate)?;
    let mut arr = open(&a.array.members)?;
    if arr.rebuilding().is_empty() && arr.superblock().spares().is_empty() && !arr.distributed_spare_due() {
        println!("array '{}': nothing to rebuild", arr.name());
        print_status(&arr.status());
        arr.release();
        return Ok(());
    }
    // Activation also moves spares into failed roles (dedicated ones
    // first, then a declustered volume's distributed spares).
    arr.activate_for_rebuild()?;
    if a.json {
        let done = rebuild_reports(&mut arr, rate, true);
        let status = serde_json::to_value(arr.status())?;
        let stopped = arr.stop();
        let reports: Vec<serde_json::Value> =
            done?.into_iter().map(|(role, rep)| serde_json::json!({"role": role, "report": rep})).collect();
        stopped?;
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"rebuilt": reports, "status": status}))?);
        return Ok(());
    }
    let done = run_rebuild(&mut arr, rate, a.run.quiet);
    print_status(&arr.status());
    let stopped = arr.stop();
    done?;
    stopped?;
    Ok(())
}

fn compact(v: &serde_json::Value) -> String {
    match v.as_object() {
        Some(o) => o.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
        None => v.to_string(),
    }
}

/// `uraid check` (`repair` = true: `uraid repair`).
pub(crate) fn cmd_check(a: CheckArgs, repair: bool) -> Result<()> {
    if a.stop {
        bail!("--stop stops the check of a served array, and no uraid serve holds this one");
    }
    let scrub_rate = rate(&a.rate).context("--rate")?;
    let mut arr = open(&a.array.members)?;
    let entries = arr.volume_entries();
    let chosen: Vec<usize> = match &a.volume {
        Some(name) => vec![arr.volume_index(name)?],
        None => (0..entries.len()).filter(|&i| entries[i].redundant()).collect(),
    };
    if chosen.is_empty() {
        bail!("array '{}' has no redundant volume to check (RAID 0 keeps no copies or parity)", arr.name());
    }
    arr.activate()?;
    let mut out = Vec::new();
    for i in chosen {
        let bar = bytes_bar(a.quiet || a.json, &format!("{} '{}'", if repair { "repairing" } else { "checking" }, entries[i].name));
        let mut report = uraid_core::control::maint::CheckReport::default();
        let opts = uraid_core::control::maint::CheckOptions { rate: scrub_rate, ..Default::default() };
        let r = arr
            .check_part(i, repair, &opts, &mut report, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })
            .map(|_| report);
        bar.finish_and_clear();
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let _ = arr.stop();
                return Err(e.into());
            }
        };
        let report = serde_json::to_value(r)?;
        if !a.json {
            println!("volume '{}' ({}): {}", entries[i].name, crate::common::level_name(entries[i].level), compact(&report));
        }
        out.push(serde_json::json!({"volume": entries[i].name, "level": entries[i].level, "repair": repair, "report": report}));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    arr.stop()?;
    Ok(())
}

/// The cache flags of `create` and `config`.
#[derive(Args, Clone)]
pub(crate) struct CacheFlags {
    /// Volume cache: off, writethrough (reads cached), writeback (writes
    /// acknowledged from memory; those not yet flushed are LOST on power
    /// loss or a crash) or journal (write-back that records every write on
    /// the --journal device first: nothing acknowledged is lost).
    #[arg(long, value_name = "MODE")]
    pub cache: Option<String>,
    /// Where `--cache journal` keeps its journal (formatted): a device of
    /// its own (give it with the members at every assemble), or one of the
    /// members (a region at its end, past the volumes).
    #[arg(long, value_name = "DEVICE")]
    pub journal: Option<String>,
    /// Size of a journal on a member (default 256M; at least 64M + 4K).
    #[arg(long, value_name = "SIZE")]
    pub journal_size: Option<String>,
    /// Cache size (default 256M).
    #[arg(long, value_name = "SIZE")]
    pub cache_size: Option<String>,
    /// Most dirty bytes before writers wait (default 64M).
    #[arg(long, value_name = "SIZE")]
    pub dirty_limit: Option<String>,
}

impl CacheFlags {
    /// The configuration the flags ask for, if any flag was given.
    pub(crate) fn config(&self) -> Result<Option<uraid_core::cache::CacheConfig>> {
        if self.cache.is_none()
            && self.cache_size.is_none()
            && self.dirty_limit.is_none()
            && self.journal.is_none()
            && self.journal_size.is_none()
        {
            return Ok(None);
        }
        let Some(mode) = &self.cache else { bail!("--cache-size, --dirty-limit, --journal and --journal-size need --cache MODE") };
        let d = uraid_core::cache::CacheConfig::default();
        let size = match &self.cache_size {
            Some(s) => parse_size(s, "cache size")?,
            None => d.size,
        };
        let dirty_limit = match &self.dirty_limit {
            Some(s) => parse_size(s, "dirty limit")?,
            None => d.dirty_limit.min(size),
        };
        let mode: uraid_core::cache::CacheMode = mode.parse()?;
        match (mode, &self.journal) {
            (uraid_core::cache::CacheMode::Journal, None) => bail!(
                "--cache journal needs --journal DEVICE (a device of its own, at least 64 MiB, or one of the members)"
            ),
            (m, Some(_)) if m != uraid_core::cache::CacheMode::Journal => bail!("--journal goes with --cache journal only"),
            _ => {}
        }
        if self.journal_size.is_some() && self.journal.is_none() {
            bail!("--journal-size goes with --journal (a journal on a member)");
        }
        if let Some(size) = self.journal_size()? {
            uraid_core::control::array::check_member_journal_size(size)?;
        }
        Ok(Some(uraid_core::cache::CacheConfig { mode, size, dirty_limit }))
    }

    /// Applies `cfg` (from [`config`](Self::config)) to `arr`: the journal
    /// mode formats the journal device (`force`: even when it holds
    /// something). Returns the volumes changed.
    pub(crate) fn apply(
        &self,
        arr: &mut uraid_core::control::array::Array,
        volume: Option<&str>,
        cfg: &uraid_core::cache::CacheConfig,
        force: bool,
    ) -> Result<Vec<String>> {
        match &self.journal {
            Some(j) => {
                let spec: uraid_core::MemberSpec = j.parse()?;
                Ok(vec![arr.set_journal(volume, &spec, cfg, self.journal_size()?, force)?])
            }
            None => Ok(arr.set_cache(volume, cfg)?),
        }
    }

    /// `--journal-size` in bytes, if given.
    pub(crate) fn journal_size(&self) -> Result<Option<u64>> {
        Ok(self.journal_size.as_deref().map(|s| parse_size(s, "journal size")).transpose()?)
    }

    /// Bytes to keep free at the end of the members of a new array whose
    /// `--journal` is one of `members` (0 otherwise).
    pub(crate) fn journal_reserve(&self, members: &[uraid_core::MemberSpec]) -> Result<u64> {
        let Some(j) = &self.journal else { return Ok(0) };
        let spec: uraid_core::MemberSpec = j.parse()?;
        let id = spec.identity().ok();
        if id.is_none() || !members.iter().any(|m| m.identity().ok() == id) {
            return Ok(0);
        }
        Ok(self.journal_size()?.unwrap_or(uraid_core::control::array::DEFAULT_MEMBER_JOURNAL))
    }
}

#[derive(Args)]
pub(crate) struct ConfigArgs {
    #[command(flatten)]
    pub(crate) cache: CacheFlags,
    /// Only this volume (default: every volume).
    #[arg(long)]
    pub(crate) volume: Option<String>,
    /// Format the --journal device even when it holds something.
    #[arg(long)]
    pub(crate) force: bool,
    /// Open the array without its journal device of its own, which is
    /// gone (the records it held are lost), to leave or move the journal.
    #[arg(long)]
    pub(crate) without_journal: bool,
    #[command(flatten)]
    pub(crate) array: ArrayMembers,
}

/// Prints what the cache of `names` is now, and the write-back warning.
pub(crate) fn print_cache(names: &[String], cfg: &uraid_core::cache::CacheConfig) {
    for n in names {
        println!(
            "volume '{n}': cache {} {}, dirty limit {} (from the next assemble)",
            cfg.mode.name(),
            fmt_size(cfg.size),
            fmt_size(cfg.dirty_limit)
        );
    }
    if cfg.mode == uraid_core::cache::CacheMode::WriteBack {
        eprintln!("uraid: warning: {}", uraid_core::control::array::WRITEBACK_WARNING);
    }
}

/// `uraid config`.
pub(crate) fn cmd_config(a: ConfigArgs) -> Result<()> {
    let Some(cfg) = a.cache.config()? else { bail!("nothing to change: give --cache MODE (off, writethrough, writeback, journal)") };
    let opts = array::AssembleOptions { without_journal: a.without_journal, ..Default::default() };
    let mut arr = array::open_with(&specs(&a.array.members)?, &opts)?;
    warn(&mut arr);
    let names = a.cache.apply(&mut arr, a.volume.as_deref(), &cfg, a.force)?;
    warn(&mut arr);
    print_cache(&names, &cfg);
    arr.release();
    Ok(())
}
