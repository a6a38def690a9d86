//! `create`: lays the volumes out over the members, checks everything a
//! user can get wrong before the first byte is written, then writes the
//! superblocks (and zeroes the volume areas); `temporary` arrays for the
//! benchmarks.

use std::sync::Arc;

use super::meta::Meta;
use super::survival::is_redundant;
use super::{check_member_journal_size, open_member, probe, Array, CreateOptions, VolumeSpec, VOLUME_ALIGN};
use crate::control::superblock::{self, DraidEntry, Slot, State, Superblock, VolumeEntry, DATA_OFFSET, MAX_VOLUMES};
use crate::io::member::{check_distinct, Member, MemberSpec, OpenMode};
use crate::raid::bitmap::Bitmap;
use crate::raid::geometry::{check_chunk, Geometry, Level, MAX_MEMBERS};
use crate::raid::health::{Health, MemberState};
use crate::units::fmt_size;
use crate::{bail, Error, ErrorKind, Result, Volume};

/// Builds an array that lives only in this process (no superblock is
/// written): RAID 0 over `members` with `chunk`, data from 1 MiB on, as a
/// created array would have it. Used by `bench`, `compare` and `demo`.
pub fn temporary(members: Vec<Member>, chunk: u64) -> Result<(Arc<Volume>, Option<String>)> {
    let (data_size, warning) = data_size(&members, chunk)?;
    let geometry = Geometry::raid0(members.len(), chunk, data_size)?;
    Ok((Volume::new(Arc::new(members), geometry, DATA_OFFSET)?, warning))
}

/// As [`temporary`], at RAID `level` (0, 1, 10, 5, 6) instead of 0: a
/// volume over `members` with no superblock, no bitmap and no cache (the
/// benchmarks' scaling model and `uraid bench --level`), its data from
/// byte 1 MiB of each member. Errors: as [`temporary`], and as
/// [`Geometry::new`] for a level the member count cannot hold.
pub fn temporary_at(members: Vec<Member>, level: Level, chunk: u64) -> Result<(Arc<Volume>, Option<String>)> {
    if level.redundant().is_none() {
        return temporary(members, chunk);
    }
    let (data_size, warning) = data_size(&members, chunk)?;
    let geometry = Geometry::new(level, members.len(), chunk, data_size)?;
    Ok((Volume::new(Arc::new(members), geometry, DATA_OFFSET)?, warning))
}

pub(super) fn too_small(m: &Member, need: u64, why: &str) -> Error {
    Error::new(
        ErrorKind::TooSmall,
        format!(
            "member {} is too small: it has {} bytes, {why} needs at least {need} (1 MiB for the superblock \
             and bitmap area plus the volumes)",
            m.name(),
            m.size()
        ),
    )
}

pub(super) fn data_size(members: &[Member], chunk: u64) -> Result<(u64, Option<String>)> {
    let need = DATA_OFFSET + chunk;
    for m in members {
        if m.size() < need {
            return Err(too_small(m, need, &format!("an array with {} chunks", fmt_size(chunk))));
        }
    }
    let min = members.iter().map(Member::size).min().unwrap_or(0);
    let max = members.iter().map(Member::size).max().unwrap_or(0);
    let size = (min - DATA_OFFSET) / chunk * chunk;
    let warning = (max != min).then(|| {
        let lost: u64 = members.iter().map(|m| m.size() - min).sum();
        format!(
            "members differ in size: capacity is {} x the smallest ({} bytes), so {} bytes ({}) on the larger members stay unused",
            members.len(),
            min,
            lost,
            fmt_size(lost)
        )
    });
    Ok((size, warning))
}

/// Bytes of every member a volume of `level` over `n` members needs for
/// `capacity` usable bytes, in whole chunks. Errors: `InvalidInput` for a
/// size of 0 or one too large to lay out.
pub(super) fn member_size_for(name: &str, level: Level, n: usize, chunk: u64, capacity: u64) -> Result<u64> {
    if capacity == 0 {
        bail!(InvalidInput, "volume '{name}' has size 0; give a size like 1G, or leave it out on the last volume to use the rest");
    }
    let rows = level.desc().rows_for(n, capacity.div_ceil(chunk));
    match rows.and_then(|r| r.checked_mul(chunk)) {
        Some(s) => Ok(s),
        None => bail!(InvalidInput, "volume '{name}' size {capacity} bytes is too large"),
    }
}

/// The geometry of a new volume of `level` (with `opts`' D and S when it
/// is declustered, recorded in the entry's [`DraidEntry`]). Errors: as
/// [`Geometry::new`] and [`Geometry::with_draid`].
fn draid_geometry(opts: &CreateOptions, level: Level, n: usize, chunk: u64, member_size: u64) -> Result<(Geometry, Option<DraidEntry>)> {
    let g = Geometry::new(level, n, chunk, member_size)?;
    let Some(map) = g.layout().and_then(|l| l.draid()).copied() else { return Ok((g, None)) };
    let spares = opts.spares.unwrap_or(map.spares());
    let data = opts.data.unwrap_or_else(|| crate::raid::level::default_data(n as u32, map.parity(), spares));
    let g = g.with_draid(data, spares)?;
    Ok((g, Some(DraidEntry { version: crate::raid::level::LAYOUT_VERSION, data, spares, held: [0; crate::raid::spare::MAX_HELD] })))
}

/// Bytes of every member that a declustered volume of `capacity` bytes
/// needs (whole rows of whole groups).
fn draid_member_size_for(opts: &CreateOptions, level: Level, n: usize, chunk: u64, capacity: u64) -> Result<u64> {
    let (g, _) = draid_geometry(opts, level, n, chunk, chunk)?;
    let map = g.layout().and_then(|l| l.draid()).copied().expect("a declustered layout");
    let per_row = map.per_row() as u64 * map.data() as u64 * chunk;
    match capacity.div_ceil(per_row).checked_mul(chunk) {
        Some(s) => Ok(s),
        None => bail!(InvalidInput, "volume size {capacity} bytes is too large"),
    }
}

/// Zeroes the areas of `volumes` on `m` that need it (durably): every
/// volume's without a live-data map, so that it reads as zeros and its
/// parity agrees from the start; with the map (`live_map`) only the
/// RAID 0 volumes', since a redundant volume's regions not live read as
/// zeros without member I/O and are zeroed at their first write (see
/// `raid::bitmap`). Errors: `Io` from the zeroing.
pub(super) fn zero_volumes(m: &Member, volumes: &[VolumeEntry], live_map: bool) -> Result<()> {
    for v in volumes.iter().filter(|v| !(live_map && v.redundant())) {
        crate::raid::bitmap::zero_range(m, v.member_start, v.member_size)?;
    }
    Ok(())
}

/// Opens the device `spec` names to make it a member (of a new array, a
/// spare, a replacement), after checking that it is free: the one check
/// `create`, `add`, `replace` and the web console's actions share.
///
/// For a block device, first what the kernel lists, so that the error
/// says what holds it: mounts of the device or of one of its partitions
/// (`/proc/self/mountinfo`), swap on them (`/proc/swaps`), devices built on
/// them (`holders` in sysfs: device-mapper/LVM, md). Then it is opened for
/// writing and taken for this process ([`OpenMode::exclusive`]: `O_EXCL`,
/// which the kernel refuses while anything else claims the device, and the
/// members' lock, which another uraid process holds). With `signatures`,
/// its first bytes must hold nothing known ([`detect`](crate::control::signature::detect): a filesystem, a
/// partition table, an LVM physical volume, swap, a uraid or md superblock).
///
/// Errors: `Busy` (mounted, swap, held, in use; the message names where or
/// by what), `WouldDestroy` (a signature, named), `InvalidInput` (neither
/// a file nor a block device), `Io`.
pub fn open_free(spec: &MemberSpec, signatures: bool) -> Result<Member> {
    if let MemberSpec::Path(p) = spec {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let md = std::fs::metadata(p).map_err(|e| Error::io("cannot open member", p, e))?;
        if md.file_type().is_block_device() {
            let name = p.display();
            for (dev, what) in device_and_partitions(md.rdev()) {
                if let Some(at) = mount_point_of(&dev) {
                    bail!(
                        Busy,
                        "{name}{what} is mounted at {at}: using it would destroy that filesystem. Nothing was written; \
                         unmount it first, or pick another device"
                    );
                }
                if swap_in_use(&dev) {
                    bail!(Busy, "{name}{what} is in use as swap: nothing was written; swapoff it first, or pick another device");
                }
                let held = holders_of(&dev);
                if !held.is_empty() {
                    bail!(
                        Busy,
                        "{name}{what} is in use by {} (a device-mapper/LVM, md or other device is built on it): nothing \
                         was written; stop that device first, or pick another device",
                        held.join(", ")
                    );
                }
            }
        }
    }
    let m = open_member(spec, OpenMode { write: true, exclusive: true })?;
    if signatures {
        refuse_signature(&m)?;
    }
    Ok(m)
}

/// `WouldDestroy` when the first bytes of `m` hold something known.
pub(super) fn refuse_signature(m: &Member) -> Result<()> {
    if let Some(sig) = probe(m)? {
        bail!(
            WouldDestroy,
            "{} holds {sig}; making it a member would destroy it. Nothing was written. Check the device name, \
             or add --force to overwrite it",
            m.name()
        );
    }
    Ok(())
}

/// `major:minor` of a `st_rdev`, as sysfs and /proc/self/mountinfo write it.
fn dev_numbers(rdev: u64) -> String {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    format!("{major}:{minor}")
}

/// The block device `rdev` (`""`) and its partitions (`" (partition
/// sda1)"`), each as `major:minor`, as sysfs lists them.
fn device_and_partitions(rdev: u64) -> Vec<(String, String)> {
    let me = dev_numbers(rdev);
    let mut out = vec![(me.clone(), String::new())];
    let dir = std::path::PathBuf::from(format!("/sys/dev/block/{me}"));
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.join("partition").is_file() {
                if let Ok(d) = std::fs::read_to_string(p.join("dev")) {
                    out.push((d.trim().to_string(), format!(" (partition {})", e.file_name().to_string_lossy())));
                }
            }
        }
    }
    out
}

/// Where `dev` (`major:minor`) is mounted, if it is (the first mount
/// point /proc/self/mountinfo lists, its octal escapes kept).
fn mount_point_of(dev: &str) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() > 4 && f[2] == dev).then(|| f[4].to_string())
    })
}

/// Whether a swap area /proc/swaps lists is the block device `dev`.
fn swap_in_use(dev: &str) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(swaps) = std::fs::read_to_string("/proc/swaps") else { return false };
    swaps.lines().skip(1).filter_map(|l| l.split_whitespace().next()).any(|p| {
        std::fs::metadata(p).is_ok_and(|md| md.file_type().is_block_device() && dev_numbers(md.rdev()) == dev)
    })
}

/// The devices built on `dev` (`major:minor`): sysfs's `holders`.
fn holders_of(dev: &str) -> Vec<String> {
    std::fs::read_dir(format!("/sys/dev/block/{dev}/holders"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Lays out the requested volumes over members of at least `min_size`
/// bytes: the first at [`DATA_OFFSET`], each next one at the following
/// 1 MiB boundary. Errors, naming the volume: `InvalidInput` (names,
/// levels, chunks, sizes, member counts) and `TooSmall` (they do not fit;
/// `members` names the member that is too small).
pub(super) fn plan_volumes(opts: &CreateOptions, members: &[Member]) -> Result<Vec<VolumeEntry>> {
    let n = members.len();
    let specs: Vec<VolumeSpec> = if opts.volumes.is_empty() {
        vec![VolumeSpec { name: opts.name.clone(), level: opts.level, size: None, chunk: None }]
    } else {
        opts.volumes.clone()
    };
    if specs.len() > MAX_VOLUMES {
        bail!(InvalidInput, "{} volumes requested; an array holds at most {MAX_VOLUMES}", specs.len());
    }
    if (opts.data.is_some() || opts.spares.is_some()) && !specs.iter().any(|v| Level::from_number(v.level).is_ok_and(|l| l.declustered())) {
        bail!(InvalidInput, "--data and --spares are for the declustered levels (draid5, draid6); give --level draid5 or draid6, or leave them out");
    }
    let mut plan = Vec::with_capacity(specs.len());
    let mut start = DATA_OFFSET;
    // What each member must hold, for the error message.
    let mut need = DATA_OFFSET;
    let mut sized = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        superblock::check_name_of("volume", &s.name)?;
        if specs[..i].iter().any(|o| o.name == s.name) {
            bail!(InvalidInput, "two volumes are named '{}'; give each volume its own name", s.name);
        }
        let level = Level::from_number(s.level)?;
        let chunk = s.chunk.unwrap_or(opts.chunk);
        check_chunk(chunk)?;
        if n < level.min_members() || n > MAX_MEMBERS {
            let what = if opts.volumes.is_empty() { String::new() } else { format!(" (volume '{}')", s.name) };
            bail!(
                InvalidInput,
                "{}{what} needs {} to {MAX_MEMBERS} members, {n} given; add members or choose another level",
                level.title(),
                level.min_members()
            );
        }
        let size = match s.size {
            Some(cap) if level.declustered() => Some(draid_member_size_for(opts, level, n, chunk, cap)?),
            Some(cap) => Some(member_size_for(&s.name, level, n, chunk, cap)?),
            None if i + 1 == specs.len() => None,
            None => bail!(InvalidInput, "volume '{}' has no size; only the last volume may leave it out (to use the rest)", s.name),
        };
        start = start.next_multiple_of(VOLUME_ALIGN.max(chunk));
        need = start + size.unwrap_or(chunk);
        sized.push((start, size, level, chunk));
        start += size.unwrap_or(0);
    }
    // Room for a journal on a member, at the end, 1 MiB aligned.
    let reserve = match opts.journal_reserve {
        0 => 0,
        r => check_member_journal_size(r)?.next_multiple_of(VOLUME_ALIGN),
    };
    if reserve > 0 {
        need = need.next_multiple_of(VOLUME_ALIGN).saturating_add(reserve);
    }
    let min = members.iter().map(Member::size).min().unwrap_or(0);
    if let Some(m) = members.iter().find(|m| m.size() < need) {
        let mut what = if specs.len() == 1 && specs[0].size.is_none() {
            format!("an array with {} chunks", fmt_size(specs[0].chunk.unwrap_or(opts.chunk)))
        } else {
            format!("the volumes asked for ({})", specs.iter().map(|s| format!("'{}'", s.name)).collect::<Vec<_>>().join(", "))
        };
        if reserve > 0 {
            what += &format!(" and a journal of {}", fmt_size(opts.journal_reserve));
        }
        return Err(too_small(m, need, &what));
    }
    // What the last volume may use: up to the journal's room, or all.
    let room = if reserve > 0 { (min - reserve) / VOLUME_ALIGN * VOLUME_ALIGN } else { min };
    for ((start, size, level, chunk), s) in sized.into_iter().zip(&specs) {
        let member_size = size.unwrap_or((room - start) / chunk * chunk);
        // Geometry checks the layout once more (and rounds as md does).
        let (g, draid) = draid_geometry(opts, level, n, chunk, member_size)?;
        plan.push(VolumeEntry {
            name: s.name.clone(),
            uuid: superblock::new_uuid(),
            level: level.number(),
            chunk,
            member_start: start,
            member_size: g.member_size(),
            cache_mode: 0,
            cache_size_mib: 0,
            dirty_limit_mib: 0,
            journal_uuid: [0; 16],
            journal_lost: false,
            journal_region: None,
            layout: 0,
            draid,
        });
    }
    Ok(plan)
}

/// The checks [`create`] makes before it writes anything, without writing:
/// the request, each member opened as `create` opens it (and let go), the
/// volumes planned and the bitmap region checked. Returns the volumes the
/// array would get (each with its member area: `member_start` and
/// `member_size` in bytes, which `create` zeroes on every member). The web
/// console's create wizard shows these before it asks to confirm.
///
/// Errors: those of [`create`], as `create` would report them.
pub fn check_create(specs: &[MemberSpec], opts: &CreateOptions) -> Result<Vec<VolumeEntry>> {
    check_request(specs, opts)?;
    check_distinct(specs)?;
    let members = specs.iter().map(|s| open_free(s, !opts.force)).collect::<Result<Vec<_>>>()?;
    let volumes = plan_volumes(opts, &members)?;
    bitmap_region_for(opts, volumes.iter().any(is_redundant))?;
    Ok(volumes)
}

/// Creates an array on `specs` (in role order) and returns it assembled
/// and active (call [`Array::stop`] to mark it clean).
///
/// The write-intent bitmap is created when a volume is redundant, with
/// the live-data map (every region not live: nothing to sync, reads give
/// zeros); the RAID 0 volumes' areas are zeroed on every member; then the
/// superblocks are written (event counter 1).
///
/// Errors, all before anything is written: `InvalidInput` (chunk, level,
/// names, member count below the level's minimum, volume sizes, bitmap
/// region, a drive named twice), `Busy` (member in use), `WouldDestroy` (a
/// member holds a superblock or filesystem and `force` is off), `TooSmall`.
pub fn create(specs: &[MemberSpec], opts: &CreateOptions) -> Result<Array> {
    // Check what needs no device first, so that a bad level or size is
    // reported before a missing or busy member.
    check_request(specs, opts)?;
    check_distinct(specs)?;
    let members = specs.iter().map(|s| open_free(s, !opts.force)).collect::<Result<Vec<_>>>()?;
    let volumes = plan_volumes(opts, &members)?;
    let bitmap_region = bitmap_region_for(opts, volumes.iter().any(is_redundant))?;
    let warnings = size_warnings(&members);
    let sb = first_superblock(opts, members.len(), bitmap_region, volumes);
    let health = Arc::new(Health::new(members.len()));
    let specs_kept = specs.iter().cloned().map(Some).collect();
    let mut meta = Meta { sb, devices: members.into_iter().map(Some).collect(), specs: specs_kept, roles: Arc::new(Vec::new()) };
    meta.rebuild_roles()?;
    let end = meta.sb.data_end();
    // First write: the bitmap area (it checks the region size against the
    // room it has before writing).
    let bitmap = if bitmap_region > 0 {
        Some(Arc::new(Bitmap::create(meta.roles.clone(), health.clone(), bitmap_region, end)?.with_live_map_areas(meta.sb.live_map, meta.sb.redundant_areas())))
    } else {
        None
    };
    for m in meta.roles.iter() {
        zero_volumes(m, &meta.sb.volumes, meta.sb.live_map)?;
    }
    meta.persist(&health)?;
    let mut arr = Array::new(meta, health, bitmap, warnings, Vec::new(), false)?;
    arr.vols.set_replayed();
    arr.start_daemon();
    Ok(arr)
}

/// The checks of `create` that need no device: chunk, level, names, the
/// member count and each volume's level against it, a declustered volume
/// beside others. Errors:
/// `InvalidInput`, as [`create`].
fn check_request(specs: &[MemberSpec], opts: &CreateOptions) -> Result<()> {
    check_chunk(opts.chunk)?;
    Level::from_number(opts.level)?;
    superblock::check_name(&opts.name)?;
    if specs.is_empty() || specs.len() > MAX_MEMBERS {
        bail!(InvalidInput, "an array needs 1 to {MAX_MEMBERS} members, {} given", specs.len());
    }
    if opts.volumes.len() > 1 {
        if let Some(v) = opts.volumes.iter().find(|v| Level::from_number(v.level).is_ok_and(|l| l.declustered())) {
            bail!(
                InvalidInput,
                "volume '{}' is declustered, and a declustered volume must be its array's only volume: its \
                 distributed spares take a failed member's whole role, which the other volumes' part of that \
                 member would need too; make the declustered volume an array of its own",
                v.name
            );
        }
    }
    for v in &opts.volumes {
        superblock::check_name_of("volume", &v.name)?;
        let l = Level::from_number(v.level)?;
        check_chunk(v.chunk.unwrap_or(opts.chunk))?;
        if specs.len() < l.min_members() {
            bail!(
                InvalidInput,
                "{} (volume '{}') needs at least {} members, {} given; add members or choose another level",
                l.title(),
                v.name,
                l.min_members(),
                specs.len()
            );
        }
    }
    if opts.volumes.is_empty() {
        let l = Level::from_number(opts.level)?;
        if specs.len() < l.min_members() {
            bail!(
                InvalidInput,
                "{} needs at least {} members, {} given; add members or choose another level",
                l.title(),
                l.min_members(),
                specs.len()
            );
        }
    }
    Ok(())
}

/// The write-intent bitmap's region size in bytes for `opts` (0: no
/// bitmap), `redundant` telling whether a volume is. Errors:
/// `InvalidInput` for a bitmap without a redundant volume, or a region
/// that is not a power of two of at least 4 KiB.
fn bitmap_region_for(opts: &CreateOptions, redundant: bool) -> Result<u64> {
    Ok(match opts.bitmap_region {
        None if redundant => crate::raid::bitmap::DEFAULT_REGION,
        None | Some(0) => 0,
        Some(_) if !redundant => bail!(
            InvalidInput,
            "a write-intent bitmap only serves redundant volumes (RAID 1, 10, 5, 6) and this array has none; \
             leave out --bitmap-region"
        ),
        Some(r) if !r.is_power_of_two() || r < 4096 => bail!(
            InvalidInput,
            "bitmap region size {r} bytes is not valid: it must be a power of two of at least 4K (default 64M)"
        ),
        Some(r) => r,
    })
}

/// The warning for members of unequal sizes (the larger ones are used up
/// to the smallest), if they are.
fn size_warnings(members: &[Member]) -> Vec<String> {
    let min = members.iter().map(Member::size).min().unwrap_or(0);
    let max = members.iter().map(Member::size).max().unwrap_or(0);
    let mut warnings = Vec::new();
    if max != min {
        let lost: u64 = members.iter().map(|m| m.size() - min).sum();
        warnings.push(format!(
            "members differ in size: every member is used up to the smallest ({} bytes), so {} bytes ({}) on the \
             larger members stay unused",
            min,
            lost,
            fmt_size(lost)
        ));
    }
    warnings
}

/// The superblock of a new array of `n` members (each active, with a new
/// UUID) holding `volumes`, active, event counter 0 (the first write
/// makes it 1).
fn first_superblock(opts: &CreateOptions, n: usize, bitmap_region: u64, volumes: Vec<VolumeEntry>) -> Superblock {
    let array_uuid = superblock::new_uuid();
    let now = superblock::unix_now();
    let slots: Vec<Slot> = (0..n)
        .map(|_| Slot { uuid: superblock::new_uuid(), state: MemberState::Active, resync_from_bitmap: false, recovery_offset: None })
        .collect();
    Superblock {
        array_uuid,
        member_uuid: slots[0].uuid,
        name: opts.name.clone(),
        member_count: n as u32,
        slot: 0,
        ctime: now,
        utime: now,
        events: 0,
        state: State::Active,
        bitmap_region,
        // Every array with a bitmap gets the live-data map.
        live_map: bitmap_region > 0,
        slots,
        volumes,
        reshape: None,
    }
}
