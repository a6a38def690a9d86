//! `uraid create`, `examine` and `assemble`: the array lifecycle commands
//! that need no running array.


use anyhow::{bail, Result};
use clap::Args;
use uraid_core::control::array::{self, CreateOptions, Examination};
use uraid_core::control::superblock::{fmt_uuid, Superblock};
use uraid_core::units::{fmt_size, parse_size};

use crate::common::specs;

#[derive(Args)]
pub(crate) struct CreateArgs {
    /// RAID level: 0, 1, 10, 5, 6, or declustered parity draid5 / draid6 (ZFS's draid1 / draid2) (of the one volume, or of volumes that name none).
    #[arg(long, default_value = "0")]
    level: String,
    /// Declustered levels: data chunks per group, D (default: the largest D up to 8 whose group of D + parity fills
    /// the members less the spares exactly, else the most up to 8 that fit).
    #[arg(long, value_name = "D")]
    data: Option<u32>,
    /// Declustered levels: distributed spares, S: each row keeps S spare chunks, spread over every member
    /// (default 1, or 0 when the members hold only 2 data chunks and the parity). Needs members >= D + parity + S.
    #[arg(long, value_name = "S")]
    spares: Option<u32>,
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
    /// Members: files, block devices, `mem:SIZE[,bw=B/s][,iops=N][,lat=µs]` or `null:SIZE` (reads zeros, loses writes).
    #[arg(required = true)]
    members: Vec<String>,
}

#[derive(Args)]
pub(crate) struct ExamineArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Members to look at.
    #[arg(required = true)]
    members: Vec<String>,
}

#[derive(Args)]
pub(crate) struct AssembleArgs {
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

pub(crate) fn cmd_create(a: CreateArgs) -> Result<()> {
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
    // A number or a level's name (`draid5`, ...); parsed here, not by clap,
    // so that a bad level fails as every other bad argument does (status 1).
    let level = uraid_core::Level::parse(&a.level)?.number();
    let opts = CreateOptions { level, chunk, name: a.name, force: a.force, bitmap_region, volumes, journal_reserve, data: a.data, spares: a.spares };
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
            "created array '{}' ({}): {} over {} members, chunk {}, capacity {} bytes ({})",
            arr.name(),
            arr.uuid(),
            level_text(&entries[0]),
            n,
            fmt_size(v.raid().geometry().chunk()),
            v.capacity(),
            fmt_size(v.capacity())
        );
    } else {
        println!("created array '{}' ({}) over {} members with {} volumes:", arr.name(), arr.uuid(), n, entries.len());
        for (e, v) in entries.iter().zip(arr.volumes()) {
            println!(
                "  volume '{}': {}, chunk {}, capacity {} bytes ({}), member bytes {}..{}",
                e.name,
                level_text(e),
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

/// A volume's level as status and examine show it: `RAID 5`, or
/// `draid5 (4d+1p, 1 spare, layout 1)` for a declustered one.
pub(crate) fn level_text(v: &uraid_core::control::superblock::VolumeEntry) -> String {
    match (uraid_core::Level::from_number(v.level), v.draid) {
        (Ok(l), Some(d)) => format!("{l} ({}d+{}p, {} distributed spare{}, layout {})", d.data, l.desc().parity, d.spares, if d.spares == 1 { "" } else { "s" }, d.version),
        _ => format!("RAID {}", v.level),
    }
}

fn print_superblock(name: &str, sb: &Superblock) {
    println!("{}:", crate::conf::quote(name));
    println!("          magic : uraid superblock, version {}", uraid_core::control::superblock::VERSION);
    println!("     array uuid : {}", fmt_uuid(&sb.array_uuid));
    println!("           name : {}", sb.name);
    println!("        members : {}", sb.member_count);
    if sb.is_spare() {
        println!("    this member : spare, slot {} ({})", sb.slot, fmt_uuid(&sb.member_uuid));
    } else {
        println!("    this member : role {} ({})", sb.slot, fmt_uuid(&sb.member_uuid));
    }
    println!("  creation time : {}", crate::common::local_iso8601(sb.ctime as i64));
    println!("    update time : {}", crate::common::local_iso8601(sb.utime as i64));
    println!("         events : {}", sb.events);
    println!("          state : {:?}", sb.state);
    if sb.bitmap_region == 0 {
        println!("         bitmap : none");
    } else {
        let map = if sb.live_map { ", with the live-data map" } else { "" };
        println!("         bitmap : {} regions{map}", fmt_size(sb.bitmap_region));
    }
    println!("      data ends : byte {} of every member", sb.data_end());
    for (i, v) in sb.volumes.iter().enumerate() {
        let cap = v.capacity(sb.member_count as usize);
        println!(
            "       volume {i} : '{}' {}, chunk {}{}, capacity {} bytes ({}), member bytes {}..{}, cache {}, uuid {}",
            v.name,
            match v.draid {
                Some(_) => level_text(v),
                None => format!("raid{}", v.level),
            },
            fmt_size(v.chunk),
            match uraid_core::control::array::layout_name(v) {
                "" => String::new(),
                l => format!(", layout {l}"),
            },
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

pub(crate) fn cmd_examine(a: ExamineArgs) -> Result<()> {
    let mut json = Vec::new();
    let mut bad = 0;
    // An array's NAME stands for its devices: each is shown by its path.
    let names = crate::scan::member_args(&a.members)?;
    for (name, spec) in names.iter().zip(specs(&names)?) {
        let ex = array::examine(&spec)?;
        // Who the drive is (None for files and stacked devices).
        let identity = uraid_core::io::identity::identity_of_path(std::path::Path::new(name));
        if a.json {
            let mut v = match &ex {
                Examination::Member(sb) => serde_json::json!({"member": name, "superblock": sb}),
                Examination::Corrupt(why) => serde_json::json!({"member": name, "error": why}),
                Examination::Foreign(sig) => serde_json::json!({"member": name, "holds": sig}),
                Examination::Empty => serde_json::json!({"member": name, "holds": null}),
            };
            if let Some(id) = &identity {
                v["identity"] = serde_json::to_value(id)?;
            }
            json.push(v);
            if matches!(ex, Examination::Corrupt(_)) {
                bad += 1;
            }
            continue;
        }
        let shown = crate::conf::quote(name);
        if let Some(id) = &identity {
            print_identity(&shown, id);
        }
        match ex {
            Examination::Member(sb) => print_superblock(name, &sb),
            Examination::Corrupt(why) => {
                println!("{shown}: damaged uraid superblock: {why}");
                bad += 1;
            }
            Examination::Foreign(sig) => println!("{shown}: no uraid superblock; holds {sig}"),
            Examination::Empty => println!("{shown}: no uraid superblock, no known signature"),
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

/// The drive's identity as `examine` prints it, before its superblock:
/// `/dev/nvme0n1: drive Samsung SSD 990 PRO, serial S6Z..., firmware ...`
/// and its WWID, by-id name, sizes and PCIe link when known.
fn print_identity(shown: &str, id: &uraid_core::io::identity::Identity) {
    println!("{shown}: drive {}", id.summary());
    let mut more = Vec::new();
    if let Some(w) = &id.wwid {
        more.push(format!("wwid {w}"));
    }
    if let Some(b) = &id.by_id {
        more.push(b.clone());
    }
    more.push(format!("{} bytes, sectors {}/{} (logical/physical)", id.capacity, id.logical_block_size, id.physical_block_size));
    if let Some(l) = &id.link {
        let max = match (&l.max_speed, l.max_width) {
            (Some(s), Some(w)) => format!(" (max {s} x{w})"),
            _ => String::new(),
        };
        more.push(format!("PCI {}{max}{}", l.address, l.upstream.as_deref().map(|u| format!(" behind port {u}")).unwrap_or_default()));
    }
    println!("  {}", more.join("; "));
}

pub(crate) fn cmd_assemble(a: AssembleArgs) -> Result<()> {
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
                "name": arr.name(), "uuid": arr.uuid(), "level": v.raid().geometry().level().number(),
                "chunk": v.raid().geometry().chunk(), "capacity": v.capacity(), "events": arr.events(),
                "members": members, "volumes": st.volumes,
            }))?
        );
    } else {
        println!(
            "assembled array '{}' ({}): RAID {}, chunk {}, capacity {} bytes ({}), events {}",
            arr.name(),
            arr.uuid(),
            v.raid().geometry().level().number(),
            fmt_size(v.raid().geometry().chunk()),
            v.capacity(),
            fmt_size(v.capacity()),
            arr.events()
        );
        for m in &st.members {
            match (m.role, m.former_role) {
                (Some(r), _) => println!("  role {r}: {} {}", crate::conf::quote(m.device.as_deref().unwrap_or("-")), m.state),
                (None, Some(r)) => println!("  faulty {}: {} (F) was role {r}, replaced by a spare", m.slot, crate::conf::quote(m.device.as_deref().unwrap_or("-"))),
                (None, None) => println!("  spare {}: {} {}", m.slot, crate::conf::quote(m.device.as_deref().unwrap_or("-")), m.state),
            }
        }
        if st.volumes.len() > 1 {
            for vs in &st.volumes {
                println!("  volume '{}': {} {} bytes, chunk {}, {}", vs.name, crate::common::level_name(vs.level), vs.capacity, fmt_size(vs.chunk), vs.state);
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

