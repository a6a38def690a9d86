//! `uraid grow`: add members to an array and restripe its volume onto all
//! of them (RAID 0, 5, 6 and 10; a RAID 1 gains copies), crash-safe
//! and resumable; the reshape itself is `uraid_core::control::array::grow`.
//! A served array's reshape is started through its control socket and
//! runs in the background in `uraid serve` (`service::Manager`).

use anyhow::{bail, Context, Result};
use clap::Args;
use uraid_core::control::array::{self, GrowOptions};
use uraid_core::units::fmt_size;
use uraid_core::MemberSpec;

use crate::common::specs;
use crate::manage::{bytes_bar, rate, ArrayMembers};

#[derive(Args)]
pub(crate) struct GrowArgs {
    /// A drive that becomes a member; give --add once per drive. The
    /// volume is restriped onto every member (RAID 0, 5, 6 and 10), or a
    /// RAID 1 gains a copy on it.
    #[arg(long, value_name = "NEWDEV", required_unless_present_any = ["size", "level", "chunk"], conflicts_with = "size")]
    add: Vec<String>,
    /// Convert the volume to this RAID level (stopped or served):
    /// RAID 1 <-> 10 over 2 members; RAID 1 over 2 to RAID 5 or 10 over
    /// more (give the new members with --add: the volume is restriped);
    /// RAID 0 -> 10 with as many new members (--add), each rebuilt as the
    /// copy of one; RAID 0 -> 5 and RAID 5 -> 6 with one new member (--add)
    /// that keeps the new parity (md's parity-last layouts: no data moves).
    /// A conversion that would drop redundancy is refused.
    #[arg(long, value_name = "LEVEL", conflicts_with = "size")]
    level: Option<u32>,
    /// Restripe to this chunk size (4K to 1M, a power of two), over the
    /// same members or while the volume is restriped onto new ones
    /// (--add); stopped or served. It must divide the volume's size on
    /// each member. Over the same members every window goes through a
    /// backup kept past the bitmap on every member, so a change far from
    /// the current chunk over many members may not fit (it says so).
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["size", "level"])]
    chunk: Option<String>,
    /// Grow the (last) volume into the room past it on every member
    /// instead: its usable size (100G, 1T; rounded up to whole rows), or
    /// `max` for all the room (mdadm's --size=max, after every member was
    /// replaced by a larger one). A served array goes on meanwhile.
    #[arg(long, value_name = "SIZE|max")]
    size: Option<String>,
    /// Overwrite a new drive that holds a filesystem or another array.
    #[arg(long)]
    force: bool,
    /// Reshape rate limit in MB/s (10^6 bytes/s) of data moved; a plain
    /// number is MB/s, or give units (250M). Default: as fast as the
    /// members go for a stopped array, 100 MB/s for a served one.
    #[arg(long)]
    rate: Option<String>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// For a served array: wait until the reshape has ended (it runs in
    /// the background otherwise).
    #[arg(long)]
    wait: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    array: ArrayMembers,
}

/// After a grow that added `added` to array `name`: when the
/// configuration file lists the array's members (`members = [...]`) without
/// them, says to add them there (mdadm's `--grow` leaves mdadm.conf as it
/// is too): the next `uraid serve NAME` would assemble without them.
fn config_note(name: &str, added: &[String]) {
    let Ok(cfg) = crate::conf::load() else { return };
    let Some(members) = cfg.array(name).and_then(|a| a.members.as_ref()) else { return };
    let same = |a: &str, b: &str| a == b || std::fs::canonicalize(a).ok().zip(std::fs::canonicalize(b).ok()).is_some_and(|(x, y)| x == y);
    let missing: Vec<&String> = added.iter().filter(|d| !members.iter().any(|m| same(m, d))).collect();
    if !missing.is_empty() {
        eprintln!(
            "uraid: note: {} lists the members of array '{name}' without {}: add {} to its members = [...] (or leave the \
             list out: the members are then found by UUID), else the next 'uraid serve {name}' assembles without them",
            crate::conf::path().display(),
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            if missing.len() == 1 { "it" } else { "them" }
        );
    }
}

/// `uraid grow`.
pub(crate) fn cmd_grow(a: GrowArgs) -> Result<()> {
    if let Some(size) = &a.size {
        return grow_size(&a, size);
    }
    if let Some(c) = crate::service::client::find(&a.array.members) {
        if a.json {
            bail!("--json is for a stopped array's reshape; a served array's reshape runs in the background ('uraid status --json NAME' shows it)");
        }
        let rate = rate(&a.rate).context("--rate")?;
        let chunk = a.chunk.as_deref().map(|c| uraid_core::units::parse_size(c, "--chunk")).transpose()?;
        let name = c.name.clone();
        crate::live_cmds::grow(c, &a.add, a.force, rate, chunk, a.level, a.wait)?;
        config_note(&name, &a.add);
        return Ok(());
    }
    let add: Vec<MemberSpec> = a.add.iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
    let chunk = a.chunk.as_deref().map(|c| uraid_core::units::parse_size(c, "--chunk")).transpose()?;
    let opts = GrowOptions { add, force: a.force, rate: rate(&a.rate).context("--rate")?, level: a.level, chunk };
    let specs = specs(&a.array.members)?;
    let Some(rep) = with_bar(&a, "reshaping", |p| array::grow(&specs, &opts, p))? else { return Ok(()) };
    config_note(&rep.array, &a.add);
    if a.level.is_some() && rep.members.0 == rep.members.1 {
        println!("array '{}': its volume is RAID {} now, over the same {} members; no data moved", rep.array, rep.level, rep.members.1);
        return Ok(());
    }
    if a.level.is_some() && rep.capacity.0 == rep.capacity.1 {
        println!(
            "array '{}': its volume is RAID {} over {} members now; the new member(s) were rebuilt in {:.1} s ({} written), \
             no data moved",
            rep.array,
            rep.level,
            rep.members.1,
            rep.seconds,
            fmt_size(rep.bytes_written)
        );
        return Ok(());
    }
    if rep.members.0 == rep.members.1 {
        println!(
            "array '{}': its RAID {} volume was restriped to {} chunks over the same {} members in {:.1} s (read {}, wrote {} \
             with the backups)",
            rep.array,
            rep.level,
            a.chunk.as_deref().unwrap_or("new"),
            rep.members.1,
            rep.seconds,
            fmt_size(rep.bytes_read),
            fmt_size(rep.bytes_written)
        );
        return Ok(());
    }
    if uraid_core::Level::from_number(rep.level).is_ok_and(|l| !l.desc().has_stripes()) {
        println!(
            "array '{}' grew from {} to {} members: RAID {} keeps {} copies now; the new members were rebuilt in {:.1} s ({} written)",
            rep.array,
            rep.members.0,
            rep.members.1,
            rep.level,
            rep.members.1,
            rep.seconds,
            fmt_size(rep.bytes_written)
        );
        return Ok(());
    }
    // A Matrix array: every volume, together.
    let what = match rep.volumes {
        1 => format!("RAID {} volume", rep.level),
        k => format!("its {k} volumes were restriped onto them, together"),
    };
    println!(
        "array '{}' grew from {} to {} members: {what} from {} to {} ({} bytes); reshaped in {:.1} s \
         (read {}, wrote {}; {} row(s) through the backup area)",
        rep.array,
        rep.members.0,
        rep.members.1,
        fmt_size(rep.capacity.0),
        fmt_size(rep.capacity.1),
        rep.capacity.1,
        rep.seconds,
        fmt_size(rep.bytes_read),
        fmt_size(rep.bytes_written),
        rep.backed_up_rows
    );
    let fs = if rep.volumes > 1 { "filesystems on them once they are" } else { "filesystem on it once it is" };
    println!("grow the {fs} served again: resize2fs (ext4) or xfs_growfs (xfs)");
    Ok(())
}

/// Runs `f` with a progress bar named `label` (none with --quiet or
/// --json); prints its report as JSON with --json (then `None`).
fn with_bar<R: serde::Serialize>(
    a: &GrowArgs,
    label: &str,
    f: impl FnOnce(&mut dyn FnMut(u64, u64)) -> uraid_core::Result<R>,
) -> Result<Option<R>> {
    let bar = bytes_bar(a.quiet || a.json, label);
    let r = f(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let rep = r?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
        return Ok(None);
    }
    Ok(Some(rep))
}

/// `uraid grow --size`: the last volume of a stopped array grows into the
/// room past it.
fn grow_size(a: &GrowArgs, size: &str) -> Result<()> {
    if let Some(c) = crate::service::client::find(&a.array.members) {
        if a.json {
            bail!("--json is for a stopped array's growth; 'uraid status --json NAME' shows the served array's size");
        }
        let bytes = if size == "max" { size.to_string() } else { uraid_core::units::parse_size(size, "--size")?.to_string() };
        return crate::live_cmds::grow_size(c, &bytes);
    }
    let size = if size == "max" {
        array::NewSize::Max
    } else {
        array::NewSize::Bytes(uraid_core::units::parse_size(size, "--size")?)
    };
    let specs = specs(&a.array.members)?;
    let Some(rep) = with_bar(a, "zeroing the new area", |p| array::resize(&specs, size, p))? else { return Ok(()) };
    println!(
        "volume '{}' of array '{}' (RAID {}) grew from {} to {} ({} bytes); {} of zeros written in {:.1} s",
        rep.volume,
        rep.array,
        rep.level,
        fmt_size(rep.capacity.0),
        fmt_size(rep.capacity.1),
        rep.capacity.1,
        fmt_size(rep.bytes_zeroed),
        rep.seconds
    );
    println!("grow the filesystem on it once it is served again: resize2fs (ext4) or xfs_growfs (xfs)");
    Ok(())
}
