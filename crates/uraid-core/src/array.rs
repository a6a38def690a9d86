//! The control path: create, examine and assemble arrays, and change their
//! membership (fail, remove, add, replace, spares, rebuild), in mdadm's
//! spirit.
//!
//! Every check a user can fail runs before the first byte is written: a
//! refused `create`, `assemble` or membership change leaves every member as
//! it was.
//!
//! An [`Array`] holds its members (and spares) exclusively, one
//! [`Health`] shared by all its volumes (the member states the data path
//! reads), the write-intent [`Bitmap`] when a volume is redundant, and one
//! [`Volume`] per entry of the superblock's volume table (Intel Matrix-style
//! volumes: each its own level, chunk and slice of every member). Every
//! state change bumps the event counter and rewrites the superblocks of all
//! present, non-faulty members and spares (as md's `md_update_sb`): so a
//! member that failed keeps an old event counter and is recognised as such
//! at the next assemble.
//!
//! Assemble follows md's rules (`mdadm/Assemble.c`, `super1.c`): the
//! superblock with the highest event counter is authoritative; a member that
//! missed events while it was active is stale and refused unless `force`
//! (it is then rebuilt in full); missing members are allowed while every
//! volume stays within its fault tolerance; an array that was not stopped
//! cleanly is resynchronised over the regions its write-intent bitmap marks
//! dirty (all of each redundant volume without a bitmap). A degraded RAID 5
//! or 6 volume that was not stopped cleanly is refused unless `force`: a
//! stripe whose write was interrupted may have data and parity that
//! disagree, and the missing member's chunk in it would then be
//! reconstructed wrong (the "write hole"); md refuses the same ("cannot
//! start dirty degraded array").
//!
//! Volumes and member handles are rebuilt when a device joins or leaves a
//! role (`add`, `replace`, `remove`, a spare taking over): [`Volume`]s taken
//! with [`Array::volume`] before such a change still refer to the old
//! devices, so take them again afterwards.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::bitmap::{Bitmap, BitmapDaemon};
use crate::engine::Shared;
use crate::geometry::{check_chunk, Geometry, Level, DEFAULT_CHUNK, MAX_MEMBERS};
use crate::health::{Health, MemberState};
use crate::member::{check_distinct, Limits, MemSpec, Member, MemberSpec, OpenMode};
use crate::signature::{detect, PROBE_LEN};
use crate::superblock::{
    self, fmt_uuid, DecodeError, Slot, State, Superblock, VolumeEntry, DATA_OFFSET, MAX_SPARES, MAX_VOLUMES, SB_SIZE,
};
use crate::units::fmt_size;
use crate::{bail, Error, ErrorKind, IoBuf, Result, Volume};

/// Alignment of volume starts on the members, in bytes (1 MiB, as md
/// aligns its data offsets).
const VOLUME_ALIGN: u64 = 1 << 20;
/// How often the bitmap daemon clears regions that saw no write lately.
const BITMAP_DAEMON_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// One volume `create` is asked to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Volume name (1 to 32 letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// RAID level number (0, 1, 10, 5, 6).
    pub level: u32,
    /// Usable size in bytes (rounded up to whole stripes); `None` for the
    /// last volume: all the space left.
    pub size: Option<u64>,
    /// Chunk size in bytes; `None`: the array's chunk.
    pub chunk: Option<u64>,
}

/// What `create` is asked to make.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// RAID level number of the default volume (used when `volumes` is
    /// empty).
    pub level: u32,
    /// Chunk size in bytes (of the default volume, and of volumes that do
    /// not name one).
    pub chunk: u64,
    /// Array name.
    pub name: String,
    /// Overwrite members that hold a superblock or a filesystem.
    pub force: bool,
    /// Write-intent bitmap region size in bytes: `None` for the default
    /// (`bitmap::DEFAULT_REGION`, 64 MiB, when a volume is redundant; no
    /// bitmap otherwise), `Some(0)` for no bitmap.
    pub bitmap_region: Option<u64>,
    /// The volumes, in member-offset order; empty: one volume named like
    /// the array, of `level` and `chunk`, over all the space.
    pub volumes: Vec<VolumeSpec>,
    /// Bytes kept free at the end of every member, past the volumes, for
    /// a journal on a member ([`Array::set_journal`] puts it there); 0:
    /// none.
    pub journal_reserve: u64,
}

impl Default for CreateOptions {
    /// RAID 0, the default chunk (128 KiB), no name (set one), no force,
    /// the default bitmap, one volume.
    fn default() -> Self {
        CreateOptions {
            level: 0,
            chunk: DEFAULT_CHUNK,
            name: String::new(),
            force: false,
            bitmap_region: None,
            volumes: Vec::new(),
            journal_reserve: 0,
        }
    }
}

/// How `assemble` treats problems it can work around.
#[derive(Debug, Clone, Copy, Default)]
pub struct AssembleOptions {
    /// Take stale members back (they are rebuilt in full when a volume is
    /// redundant), and start a degraded RAID 5/6 volume that was not
    /// stopped cleanly (accepting the write hole). `uraid assemble
    /// --force`.
    pub force: bool,
    /// Open for looking only (`uraid status`): a volume past its fault
    /// tolerance or at risk from the write hole is reported in
    /// [`Array::warnings`] instead of refused; such an array cannot be
    /// activated.
    pub inspect: bool,
    /// Run a volume whose journal device of its own was not given without
    /// it (its records, if any, are lost; writes are then acknowledged only
    /// once on the members): `assemble --without-journal`, `config
    /// --without-journal`.
    pub without_journal: bool,
}

/// Where `add` put a new device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Into role `.0`, which had no member: it is being rebuilt.
    Role(u32),
    /// Back into role `.0`, which it held before it was removed: only the
    /// regions written since (the bitmap's dirty regions) are resynced.
    ReAdded(u32),
    /// As a spare, in slot `.0` (at or above the member count).
    Spare(u32),
}

/// What `examine` found on a member.
#[derive(Debug)]
pub enum Examination {
    /// A valid uraid superblock.
    Member(Box<Superblock>),
    /// A uraid superblock that does not decode (why).
    Corrupt(String),
    /// Something else: a filesystem, a partition table (its name).
    Foreign(&'static str),
    /// Nothing known.
    Empty,
}

/// The persistent state of an array, shared with the [`Health`] hook that
/// persists member failures met by the data path.
struct Meta {
    /// The authoritative superblock: slot and volume tables, events,
    /// clean/active. `member_uuid` and `slot` are filled in per device on
    /// every write.
    sb: Superblock,
    /// The device in each slot (roles, then spares), `None` where no
    /// device is held.
    devices: Vec<Option<Member>>,
    /// How each device was named, for finding it again by path.
    specs: Vec<Option<MemberSpec>>,
    /// One member per role for the volumes: a handle on the device, or an
    /// empty placeholder (`mem:`) where no device is held, which the data
    /// path never touches (its state is faulty or missing).
    roles: Arc<Vec<Member>>,
}

impl Meta {
    fn n(&self) -> usize {
        self.sb.member_count as usize
    }

    /// Rebuilds the per-role member list after a device came or went.
    fn rebuild_roles(&mut self) -> Result<()> {
        let end = self.sb.data_end();
        let roles = (0..self.n())
            .map(|r| match &self.devices[r] {
                Some(m) => m.try_clone(),
                None => placeholder(end),
            })
            .collect::<Result<Vec<_>>>()?;
        self.roles = Arc::new(roles);
        Ok(())
    }

    /// Copies the role states of `health` into the slot table, bumps the
    /// event counter and writes the superblock of every held device that
    /// is not faulty. A role whose write fails is marked faulty (as md
    /// does) and the others are written again; the first error is
    /// returned when a device could not be written.
    fn persist(&mut self, health: &Health) -> Result<()> {
        let mut first_err = None;
        for _ in 0..=self.sb.slots.len() {
            for r in 0..self.n() {
                let state = health.state(r as u32);
                self.sb.slots[r].state = state;
                self.sb.slots[r].recovery_offset =
                    (state == MemberState::Rebuilding).then(|| health.recovery(r as u32)).filter(|&o| o != u64::MAX);
                if state != MemberState::Rebuilding {
                    self.sb.slots[r].resync_from_bitmap = false;
                }
            }
            self.sb.events += 1;
            self.sb.utime = superblock::unix_now();
            let mut failed_role = false;
            for (slot, dev) in self.devices.iter().enumerate() {
                let Some(m) = dev else { continue };
                if slot < self.n() && matches!(self.sb.slots[slot].state, MemberState::Faulty | MemberState::Missing) {
                    continue;
                }
                let mut sb = self.sb.clone();
                sb.slot = slot as u32;
                sb.member_uuid = sb.slots[slot].uuid;
                if let Err(e) = write_superblock(m, &sb) {
                    if slot < self.n() {
                        health.set_state(slot as u32, MemberState::Faulty);
                        failed_role = true;
                    }
                    first_err.get_or_insert(e);
                }
            }
            if !failed_role {
                break;
            }
        }
        // Past a volume's tolerance nothing more may be written (the
        // superblocks above still record which members are gone).
        if !lost_volumes(&self.sb, &down_roles(health)).is_empty() {
            health.stop_writes();
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// An assembled (or just created) array, its members and spares held
/// exclusively.
///
/// The membership operations ([`fail`](Self::fail),
/// [`remove`](Self::remove), [`add`](Self::add),
/// [`replace`](Self::replace), [`promote_spares`](Self::promote_spares))
/// also work on an array that was only [`open`]ed: they persist their own
/// change (event counter + 1) and leave the clean/active state as it was,
/// so a refused request writes nothing at all. Rebuild and scrub need an
/// activated array.
pub struct Array {
    meta: Arc<Mutex<Meta>>,
    health: Arc<Health>,
    bitmap: Option<Arc<Bitmap>>,
    daemon: Option<BitmapDaemon>,
    volumes: Vec<Arc<Volume>>,
    warnings: Vec<String>,
    /// Opened with `inspect`: never activated.
    inspect: bool,
    /// The journal devices given (journal cache mode), each named by a
    /// volume entry's journal UUID.
    journals: Vec<Arc<crate::journal::Journal>>,
    /// The journals were replayed (by [`activate`](Self::activate), or the
    /// array is new): their records are all in the caches now.
    replayed: bool,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array").field("superblock", &self.superblock()).field("health", &self.health).finish()
    }
}

/// Opens `specs` in order after checking that no drive is named twice.
/// `exclusive` takes each member's lock (see [`OpenMode`]).
pub fn open_members(specs: &[MemberSpec], write: bool, exclusive: bool) -> Result<Vec<Member>> {
    check_distinct(specs)?;
    specs.iter().map(|s| Member::open(s, OpenMode { write, exclusive })).collect()
}

/// Reads the first bytes of `m` and names any known signature on it.
pub fn probe(m: &Member) -> Result<Option<&'static str>> {
    let len = (PROBE_LEN as u64).min(m.size() / 4096 * 4096) as usize;
    if len == 0 {
        return Ok(None);
    }
    let mut buf = IoBuf::new(len);
    m.read_exact_at(&mut buf, 0)?;
    Ok(detect(&buf))
}

fn read_superblock(m: &Member) -> Result<std::result::Result<Superblock, DecodeError>> {
    if m.size() < SB_SIZE as u64 {
        return Ok(Err(DecodeError::NoMagic));
    }
    let mut buf = IoBuf::new(SB_SIZE);
    m.read_exact_at(&mut buf, 0)?;
    Ok(Superblock::decode(&buf))
}

fn write_superblock(m: &Member, sb: &Superblock) -> Result<()> {
    let mut buf = IoBuf::new(SB_SIZE);
    buf.copy_from_slice(&sb.encode());
    m.write_all_at(&buf, 0)
}

/// An empty stand-in for a role without a device: a sparse emulated drive
/// of `size` bytes (no memory is used until written, and the data path
/// never writes a faulty or missing member).
fn placeholder(size: u64) -> Result<Member> {
    Member::open(
        &MemberSpec::Mem(MemSpec { size, limits: Limits::default() }),
        OpenMode { write: true, exclusive: false },
    )
}

/// Looks at one member without taking it: its superblock, or what else is
/// there. Errors: `Io` when it cannot be opened or read.
pub fn examine(spec: &MemberSpec) -> Result<Examination> {
    let m = Member::open(spec, OpenMode { write: false, exclusive: false })?;
    Ok(match read_superblock(&m)? {
        Ok(sb) => Examination::Member(Box::new(sb)),
        Err(DecodeError::NoMagic) => match probe(&m)? {
            Some(sig) => Examination::Foreign(sig),
            None => Examination::Empty,
        },
        Err(e) => Examination::Corrupt(e.to_string()),
    })
}

impl Examination {
    /// True for what the commands that assemble an array take: a member
    /// (a superblock) or a journal ([`crate::journal`]).
    pub fn is_array_device(&self) -> bool {
        match self {
            Examination::Member(_) => true,
            Examination::Foreign(sig) => *sig == crate::signature::JOURNAL,
            _ => false,
        }
    }
}

/// True when `specs` are the devices of an array, as the commands that
/// assemble one take them: at least one carries a uraid superblock and
/// every other one does or is a journal ([`crate::journal`]). A device
/// that cannot be read counts as neither.
pub fn are_array_devices(specs: &[MemberSpec]) -> bool {
    let found: Vec<Option<Examination>> = specs.iter().map(|s| examine(s).ok()).collect();
    found.iter().any(|e| matches!(e, Some(Examination::Member(_)))) && found.iter().all(|e| e.as_ref().is_some_and(Examination::is_array_device))
}

/// Builds an array that lives only in this process (no superblock is
/// written): RAID 0 over `members` with `chunk`, data from 1 MiB on, as a
/// created array would have it. Used by `bench`, `compare` and `demo`.
pub fn temporary(members: Vec<Member>, chunk: u64) -> Result<(Arc<Volume>, Option<String>)> {
    let (data_size, warning) = data_size(&members, chunk)?;
    let geometry = Geometry::raid0(members.len(), chunk, data_size)?;
    Ok((Volume::new(Arc::new(members), geometry, DATA_OFFSET)?, warning))
}

fn too_small(m: &Member, need: u64, why: &str) -> Error {
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

fn data_size(members: &[Member], chunk: u64) -> Result<(u64, Option<String>)> {
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
fn member_size_for(name: &str, level: Level, n: usize, chunk: u64, capacity: u64) -> Result<u64> {
    if capacity == 0 {
        bail!(InvalidInput, "volume '{name}' has size 0; give a size like 1G, or leave it out on the last volume to use the rest");
    }
    let chunks = capacity.div_ceil(chunk);
    let n = n as u64;
    let rows = match level {
        Level::Raid0 => Some(chunks.div_ceil(n)),
        Level::Raid1 => Some(chunks),
        Level::Raid10 => chunks.checked_mul(2).map(|c| c.div_ceil(n)),
        Level::Raid5 => Some(chunks.div_ceil(n - 1)),
        Level::Raid6 => Some(chunks.div_ceil(n - 2)),
    };
    match rows.and_then(|r| r.checked_mul(chunk)) {
        Some(s) => Ok(s),
        None => bail!(InvalidInput, "volume '{name}' size {capacity} bytes is too large"),
    }
}

/// Roles that do not hold valid data everywhere (faulty, missing,
/// rebuilding, spare), as a flag per role.
fn down_roles(health: &Health) -> Vec<bool> {
    health.states().into_iter().map(|s| s != MemberState::Active).collect()
}

/// True when volume `v` over `n` members still has every logical byte with
/// the roles flagged in `down` unavailable: RAID 0 none down; RAID 5 at most
/// one, RAID 6 at most two; RAID 1 and 10 a copy of every chunk left
/// (checked on the layout itself, so RAID 10's neighbouring pairs count).
fn volume_survives(v: &VolumeEntry, n: usize, down: &[bool]) -> bool {
    let count = down.iter().filter(|&&d| d).count();
    let Ok(level) = Level::from_number(v.level) else { return false };
    match level {
        Level::Raid0 => count == 0,
        Level::Raid5 => count <= 1,
        Level::Raid6 => count <= 2,
        Level::Raid1 => count < n,
        Level::Raid10 => {
            let Ok(g) = Geometry::new(level, n, v.chunk, v.member_size) else { return false };
            let Some(l) = g.layout() else { return false };
            // The copy placement repeats every n chunks.
            (0..l.stripes().min(n as u64)).all(|c| l.data_locations(c * v.chunk).iter().any(|p| !down[p.member as usize]))
        }
    }
}

/// Indexes of the volumes of `sb` that lose data with the roles in `down`
/// unavailable.
fn lost_volumes(sb: &Superblock, down: &[bool]) -> Vec<usize> {
    (0..sb.volumes.len()).filter(|&i| !volume_survives(&sb.volumes[i], sb.member_count as usize, down)).collect()
}

fn is_redundant(v: &VolumeEntry) -> bool {
    v.level != 0
}

fn has_parity(v: &VolumeEntry) -> bool {
    v.level == 5 || v.level == 6
}

fn level_tolerance(v: &VolumeEntry, n: usize) -> usize {
    Level::from_number(v.level).map_or(0, |l| l.fault_tolerance(n))
}

fn describe_volume(v: &VolumeEntry) -> String {
    format!("volume '{}' (RAID {})", v.name, v.level)
}

/// Zeroes `[start, start+len)` of `m` (absolute bytes), so that a new
/// volume reads as zeros everywhere and its parity agrees from the start.
/// Tries `fallocate(PUNCH_HOLE | KEEP_SIZE)` (files, memfds, block devices
/// that discard with zeroing), then `fallocate(ZERO_RANGE)` (block devices:
/// BLKZEROOUT), then writes zeros; makes the result durable.
fn zero_range(m: &Member, start: u64, len: u64) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    if len == 0 {
        return Ok(());
    }
    let fd = m.file().as_raw_fd();
    let path = std::path::Path::new(m.name());
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) else {
        bail!(InvalidInput, "range {start}+{len} of {} does not fit an off_t", m.name());
    };
    for mode in [libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_ZERO_RANGE] {
        // SAFETY: fallocate on a valid open descriptor with plain integer
        // arguments; no memory is passed.
        if unsafe { libc::fallocate(fd, mode, off, l) } == 0 {
            return m.file().sync_data().map_err(|e| Error::io("cannot flush", path, e));
        }
    }
    const STEP: u64 = 1 << 20;
    let zeros = IoBuf::new(STEP as usize);
    let mut pos = start;
    while pos < start + len {
        let n = STEP.min(start + len - pos) as usize;
        m.file()
            .write_all_at(&zeros[..n], pos)
            .map_err(|e| Error::io(&format!("cannot zero {n} bytes at offset {pos} of"), path, e))?;
        pos += n as u64;
    }
    m.file().sync_data().map_err(|e| Error::io("cannot flush", path, e))
}

/// Lays out the requested volumes over members of at least `min_size`
/// bytes: the first at [`DATA_OFFSET`], each next one at the following
/// 1 MiB boundary. Errors, naming the volume: `InvalidInput` (names,
/// levels, chunks, sizes, member counts) and `TooSmall` (they do not fit;
/// `members` names the member that is too small).
fn plan_volumes(opts: &CreateOptions, members: &[Member]) -> Result<Vec<VolumeEntry>> {
    let n = members.len();
    let specs: Vec<VolumeSpec> = if opts.volumes.is_empty() {
        vec![VolumeSpec { name: opts.name.clone(), level: opts.level, size: None, chunk: None }]
    } else {
        opts.volumes.clone()
    };
    if specs.len() > MAX_VOLUMES {
        bail!(InvalidInput, "{} volumes requested; an array holds at most {MAX_VOLUMES}", specs.len());
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
                "RAID {}{what} needs {} to {MAX_MEMBERS} members, {n} given; add members or choose another level",
                level.number(),
                level.min_members()
            );
        }
        let size = match s.size {
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
        let g = Geometry::new(level, n, chunk, member_size)?;
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
        });
    }
    Ok(plan)
}

/// Creates an array on `specs` (in role order) and returns it assembled
/// and active (call [`Array::stop`] to mark it clean).
///
/// Every new volume's area is zeroed on every member (so that parity and
/// copies agree from the start and never-written regions read as zeros),
/// the write-intent bitmap is created when a volume is redundant, then the
/// superblocks are written (event counter 1).
///
/// Errors, all before anything is written: `InvalidInput` (chunk, level,
/// names, member count below the level's minimum, volume sizes, bitmap
/// region, a drive named twice), `Busy` (member in use), `WouldDestroy` (a
/// member holds a superblock or filesystem and `force` is off), `TooSmall`.
pub fn create(specs: &[MemberSpec], opts: &CreateOptions) -> Result<Array> {
    check_chunk(opts.chunk)?;
    Level::from_number(opts.level)?;
    superblock::check_name(&opts.name)?;
    if specs.is_empty() || specs.len() > MAX_MEMBERS {
        bail!(InvalidInput, "an array needs 1 to {MAX_MEMBERS} members, {} given", specs.len());
    }
    // Check what needs no device first, so that a bad level or size is
    // reported before a missing or busy member.
    for v in &opts.volumes {
        superblock::check_name_of("volume", &v.name)?;
        let l = Level::from_number(v.level)?;
        check_chunk(v.chunk.unwrap_or(opts.chunk))?;
        if specs.len() < l.min_members() {
            bail!(
                InvalidInput,
                "RAID {} (volume '{}') needs at least {} members, {} given; add members or choose another level",
                l.number(),
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
                "RAID {} needs at least {} members, {} given; add members or choose another level",
                l.number(),
                l.min_members(),
                specs.len()
            );
        }
    }
    let members = open_members(specs, true, true)?;
    if !opts.force {
        for m in &members {
            if let Some(sig) = probe(m)? {
                bail!(
                    WouldDestroy,
                    "member {} holds {sig}; creating an array would destroy it. Nothing was written. \
                     Check the device name, or add --force to overwrite it",
                    m.name()
                );
            }
        }
    }
    let volumes = plan_volumes(opts, &members)?;
    let redundant = volumes.iter().any(is_redundant);
    let bitmap_region = match opts.bitmap_region {
        None if redundant => crate::bitmap::DEFAULT_REGION,
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
    };
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
    let n = members.len();
    let array_uuid = superblock::new_uuid();
    let now = superblock::unix_now();
    let slots: Vec<Slot> = (0..n)
        .map(|_| Slot { uuid: superblock::new_uuid(), state: MemberState::Active, resync_from_bitmap: false, recovery_offset: None })
        .collect();
    let sb = Superblock {
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
        slots,
        volumes,
    };
    let health = Arc::new(Health::new(n));
    let specs_kept = specs.iter().cloned().map(Some).collect();
    let mut meta = Meta { sb, devices: members.into_iter().map(Some).collect(), specs: specs_kept, roles: Arc::new(Vec::new()) };
    meta.rebuild_roles()?;
    let end = meta.sb.data_end();
    // First write: the bitmap area (it checks the region size against the
    // room it has before writing).
    let bitmap = if bitmap_region > 0 {
        Some(Arc::new(Bitmap::create(meta.roles.clone(), health.clone(), bitmap_region, end)?))
    } else {
        None
    };
    for m in meta.roles.iter() {
        for v in &meta.sb.volumes {
            zero_range(m, v.member_start, v.member_size)?;
        }
    }
    meta.persist(&health)?;
    let mut arr = Array::new(meta, health, bitmap, warnings, Vec::new(), false)?;
    arr.replayed = true;
    arr.start_daemon();
    Ok(arr)
}

/// Assembles the array whose members are `specs`, given in any order, and
/// marks it active (event counter + 1, as md does on assemble). See
/// [`assemble_with`].
pub fn assemble(specs: &[MemberSpec]) -> Result<Array> {
    assemble_with(specs, &AssembleOptions::default())
}

/// Assembles the array whose members (and spares) are `specs`, in any
/// order: [`open_with`], then [`Array::activate`] (resync of an unclean
/// array, spares into failed roles, active, event counter + 1).
pub fn assemble_with(specs: &[MemberSpec], opts: &AssembleOptions) -> Result<Array> {
    let mut a = open_with(specs, opts)?;
    a.activate()?;
    Ok(a)
}

/// Like [`assemble`], but writes nothing: the members are checked and held
/// exclusively, the superblocks are left as they are. Use
/// [`Array::activate`] before writing data, or [`Array::release`] to let go
/// without a trace (a read-only benchmark, `uraid status`).
pub fn open(specs: &[MemberSpec]) -> Result<Array> {
    open_with(specs, &AssembleOptions::default())
}

/// [`open`] with options.
///
/// Errors, all before anything is written: `InvalidInput` (no member, a
/// drive named twice), `Busy` (in use), `Superblock` (no superblock, a
/// corrupt one, a member of another array, members that disagree on the
/// layout, a stale member without `force`, a device that is no longer a
/// member), `Membership` (two devices claiming one slot; members missing
/// beyond what a volume tolerates, naming the volume and the roles; a
/// degraded RAID 5/6 volume not stopped cleanly, without `force`),
/// `TooSmall` (a member shrank).
pub fn open_with(specs: &[MemberSpec], opts: &AssembleOptions) -> Result<Array> {
    if specs.is_empty() {
        bail!(InvalidInput, "assemble needs the members of the array");
    }
    // Journal devices (journal cache mode) may be given with the members.
    let mut members = Vec::new();
    let mut member_specs = Vec::new();
    let mut journal_devs = Vec::new();
    for (m, spec) in open_members(specs, true, true)?.into_iter().zip(specs) {
        match crate::journal::probe(&m)? {
            Some(id) => journal_devs.push((m, id)),
            None => {
                members.push(m);
                member_specs.push(spec.clone());
            }
        }
    }
    if members.is_empty() {
        bail!(InvalidInput, "only journal devices were given; give the members of the array too");
    }
    let specs = &member_specs[..];
    let mut sbs = Vec::with_capacity(members.len());
    for m in &members {
        match read_superblock(m)? {
            Ok(sb) => sbs.push(sb),
            Err(DecodeError::NoMagic) => bail!(
                Superblock,
                "{} is not a uraid member (no superblock); check the name, or run 'uraid examine {}'",
                m.name(),
                m.name()
            ),
            Err(e) => bail!(
                Superblock,
                "{} has a damaged superblock: {e}. Nothing was written; the array cannot be \
                 assembled from this member",
                m.name()
            ),
        }
    }
    for (m, sb) in members.iter().zip(&sbs).skip(1) {
        if sb.array_uuid != sbs[0].array_uuid {
            bail!(
                Superblock,
                "{} belongs to array '{}' ({}), but {} belongs to array '{}' ({}); give the members of one array",
                m.name(),
                sb.name,
                fmt_uuid(&sb.array_uuid),
                members[0].name(),
                sbs[0].name,
                fmt_uuid(&sbs[0].array_uuid)
            );
        }
    }
    // The freshest superblock speaks for the array (md: the highest event
    // counter wins).
    let fresh = (0..sbs.len()).max_by_key(|&i| sbs[i].events).expect("at least one member");
    let auth = sbs[fresh].clone();
    let n = auth.member_count as usize;
    let max_events = auth.events;
    for (m, sb) in members.iter().zip(&sbs) {
        if !sb.same_layout(&auth) {
            bail!(
                Superblock,
                "{} and {} disagree on the layout of array '{}' (member count, volume table or bitmap); one of \
                 them was changed by hand",
                m.name(),
                members[fresh].name(),
                auth.name
            );
        }
    }
    let mut journals = Vec::new();
    for (m, id) in journal_devs {
        let Some(v) = auth.volumes.iter().find(|v| journal_id(auth.array_uuid, v) == id) else {
            bail!(
                Superblock,
                "{} is a journal, but not one of array '{}' (it names array {}); give this array's journal, or leave it out",
                m.name(),
                auth.name,
                fmt_uuid(&id.array)
            );
        };
        if v.journal_lost {
            // Lost while running: stale, never replayed (see below).
            continue;
        }
        journals.push(Arc::new(crate::journal::Journal::open(m)?));
    }
    let mut warnings = Vec::new();
    // A journal device of its own not given, or lost while running.
    for v in auth.volumes.iter().filter(|v| v.cache_mode == crate::cache::CacheMode::Journal.to_u8() && v.journal_region.is_none()) {
        let id = journal_id(auth.array_uuid, v);
        if v.journal_lost {
            let name = format!("journal {}", fmt_uuid(&v.journal_uuid));
            warnings.push(format!(
                "{}: its write journal ({name}) was lost while running (a write to it failed): its records are stale \
                 and are not replayed (the writes after the loss went to the members), and the volume runs without \
                 a journal, each write acknowledged once it is on the members; set one again with 'uraid config \
                 --cache journal --journal DEVICE'",
                describe_volume(v)
            ));
            journals.push(Arc::new(crate::journal::Journal::absent(id, 0, 0, name, None)));
            continue;
        }
        if !opts.without_journal || journals.iter().any(|j| j.id() == id) {
            continue;
        }
        let name = format!("journal {}", fmt_uuid(&v.journal_uuid));
        warnings.push(format!(
            "{}: its write journal ({name}) was not given and the volume runs without it (--without-journal): records it held \
             are lost, and writes are acknowledged only once they are on the members; give it again, or move the \
             journal with 'uraid config --cache journal --journal DEVICE'",
            describe_volume(v)
        ));
        journals.push(Arc::new(crate::journal::Journal::absent(id, 0, 0, name, None)));
    }
    let mut slots = auth.slots.clone();
    let mut devices: Vec<Option<Member>> = (0..slots.len()).map(|_| None).collect();
    let mut dev_specs: Vec<Option<MemberSpec>> = vec![None; slots.len()];
    let redundant = auth.volumes.iter().any(is_redundant);
    let end = auth.data_end();
    for ((m, sb), spec) in members.into_iter().zip(&sbs).zip(specs) {
        let slot = slots.iter().position(|s| s.uuid == sb.member_uuid && s.state != MemberState::Missing);
        let Some(slot) = slot else {
            bail!(
                Superblock,
                "{} is no longer part of array '{}': it was removed or replaced (its event counter is {}, the \
                 array's is {max_events}). Leave it out, or add it back with 'uraid add'",
                m.name(),
                auth.name,
                sb.events
            );
        };
        let what = if slot < n { format!("role {slot}") } else { format!("spare slot {slot}") };
        if let Some(other) = &devices[slot] {
            bail!(
                Membership,
                "{} and {} both claim {what} of array '{}' (one is a copy of the other?); give each member once",
                other.name(),
                m.name(),
                auth.name
            );
        }
        if slot < n && sb.events < max_events && matches!(slots[slot].state, MemberState::Active | MemberState::Rebuilding) {
            if !opts.force {
                let how = if redundant {
                    "with 'uraid assemble --force' it is taken back and rebuilt in full from the others"
                } else {
                    "RAID 0 cannot repair it; 'uraid assemble --force' takes it back as it is, and data written \
                     since it fell behind is then inconsistent"
                };
                bail!(
                    Superblock,
                    "{} is stale: its event counter is {} but the others are at {max_events}; it missed changes \
                     while it was away. Nothing was written. Leave it out if the array can run without it, or: {how}",
                    m.name(),
                    sb.events
                );
            }
            if redundant {
                slots[slot].state = MemberState::Rebuilding;
                slots[slot].recovery_offset = Some(0);
                warnings.push(format!(
                    "{} was stale (event counter {} < {max_events}); --force takes it back in {what}, to be rebuilt in full",
                    m.name(),
                    sb.events
                ));
            } else {
                warnings.push(format!(
                    "{} was stale (event counter {} < {max_events}); --force takes it back as it is: data written \
                     since it fell behind may be inconsistent",
                    m.name(),
                    sb.events
                ));
            }
        }
        if m.size() < end {
            bail!(
                TooSmall,
                "{} has {} bytes but the array stores data up to byte {end}; was it truncated?",
                m.name(),
                m.size()
            );
        }
        devices[slot] = Some(m);
        dev_specs[slot] = Some(spec.clone());
    }
    // Roles without a device.
    let mut missing = Vec::new();
    for r in 0..n {
        if devices[r].is_none() && matches!(slots[r].state, MemberState::Active | MemberState::Rebuilding) {
            missing.push(r);
            slots[r].state = MemberState::Missing;
            slots[r].recovery_offset = None;
        }
    }
    let down: Vec<bool> = slots[..n].iter().map(|s| s.state != MemberState::Active).collect();
    let lost = lost_volumes(&auth, &down);
    if !lost.is_empty() {
        let missing_txt: Vec<String> = missing.iter().map(|&r| format!("role {r} (member {})", fmt_uuid(&auth.slots[r].uuid))).collect();
        let other_txt: Vec<String> = (0..n)
            .filter(|r| down[*r] && !missing.contains(r))
            .map(|r| format!("role {r} is {}", slots[r].state.name()))
            .collect();
        let vols: Vec<String> = lost
            .iter()
            .map(|&i| format!("{} tolerates {}", describe_volume(&auth.volumes[i]), level_tolerance(&auth.volumes[i], n)))
            .collect();
        let given = slots.iter().take(n).zip(&devices).filter(|(_, d)| d.is_some()).count();
        let msg = if missing_txt.is_empty() {
            format!(
                "array '{}' cannot run: {}; {}. Nothing was written. The data of that volume is lost unless a \
                 failed member still holds it",
                auth.name,
                other_txt.join(", "),
                vols.join("; ")
            )
        } else {
            format!(
                "array '{}' has {n} members but {given} were given; missing {}{}; {}: it cannot run. Nothing was \
                 written. Give every member",
                auth.name,
                missing_txt.join(", "),
                if other_txt.is_empty() { String::new() } else { format!(" ({})", other_txt.join(", ")) },
                vols.join("; ")
            )
        };
        if !opts.inspect {
            return Err(Error::new(ErrorKind::Membership, msg));
        }
        warnings.push(msg);
    }
    for &r in &missing {
        warnings.push(format!(
            "role {r} (member {}) is missing: the array runs degraded until a member is added",
            fmt_uuid(&auth.slots[r].uuid)
        ));
    }
    let health = Arc::new(Health::new(n));
    for (r, s) in slots[..n].iter().enumerate() {
        health.set_state(r as u32, s.state);
        if let (MemberState::Rebuilding, Some(o)) = (s.state, s.recovery_offset) {
            health.set_recovery(r as u32, o);
        }
    }
    let renamed = open_member_journals(&auth, &slots, &devices, &health, opts, &mut journals, &mut warnings)?;
    let mut sb = auth.clone();
    sb.slots = slots;
    for (i, uuid) in renamed {
        sb.volumes[i].journal_uuid = uuid;
    }
    let mut meta = Meta { sb, devices, specs: dev_specs, roles: Arc::new(Vec::new()) };
    meta.rebuild_roles()?;
    let bitmap = if auth.bitmap_region > 0 {
        Some(Arc::new(Bitmap::load(meta.roles.clone(), health.clone(), auth.bitmap_region, end)?))
    } else {
        None
    };
    // The write hole: an interrupted write on a parity volume may have left
    // a stripe whose parity does not match its data; with a member gone,
    // its chunk in that stripe would be rebuilt from the wrong parity.
    // Unless the volume's journal is there: every member write of a
    // journaled RAID 5/6 volume was recorded first (a line written in part
    // as its rows or whole, zeroes and discards as a range with partial
    // stripes through the cache), and the replay at activate rewrites each
    // such stripe's rows whole before anything reads them.
    if auth.state == State::Active {
        let dirty = dirty_ranges(&auth, bitmap.as_deref());
        for v in auth.volumes.iter().filter(|v| has_parity(v)) {
            let degraded = down.iter().any(|&d| d);
            let touched = dirty.iter().any(|r| r.start < v.member_end() && r.end > v.member_start);
            let id = journal_id(auth.array_uuid, v);
            let journaled = v.cache_mode == crate::cache::CacheMode::Journal.to_u8()
                && journals.iter().any(|j| j.id() == id && !j.is_lost());
            if degraded && touched && journaled {
                warnings.push(format!(
                    "{} was not stopped cleanly and is degraded: its write journal is replayed first, which rewrites \
                     the stripes written at the time of the crash whole (no write hole)",
                    describe_volume(v)
                ));
                continue;
            }
            if degraded && touched {
                if !opts.force && !opts.inspect {
                    bail!(
                        Membership,
                        "array '{}' was not stopped cleanly and is degraded: {} may hold stripes whose parity does \
                         not match their data (an interrupted write: the RAID 5/6 write hole), and the missing \
                         member's chunks in those stripes would be reconstructed wrong. Nothing was written. Give \
                         the missing member, or assemble with --force to accept the risk (then run 'uraid check')",
                        auth.name,
                        describe_volume(v)
                    );
                }
                warnings.push(format!(
                    "{} was not stopped cleanly and is degraded: stripes written at the time of the crash may read \
                     back wrong in their missing chunk (write hole, accepted with --force); run 'uraid check'",
                    describe_volume(v)
                ));
            }
        }
    }
    if !lost.is_empty() {
        health.stop_writes();
    }
    Array::new(meta, health, bitmap, warnings, journals, opts.inspect)
}

/// The identity the journal of volume entry `v` of array `array` carries
/// in its header.
fn journal_id(array: [u8; 16], v: &VolumeEntry) -> crate::journal::JournalId {
    crate::journal::JournalId { array, volume: v.uuid, journal: v.journal_uuid }
}

/// Opens `spec` to become a journal device of its own and checks it:
/// large enough (4 KiB + 64 MiB), holding nothing (no filesystem, array or
/// journal) unless `force`. Writes nothing; `create` checks the device
/// this way before it writes anything. Errors: `WouldDestroy`,
/// `TooSmall`, `Busy`, `Io`.
pub fn open_journal_device(spec: &MemberSpec, force: bool) -> Result<Member> {
    let m = Member::open(spec, OpenMode { write: true, exclusive: true })?;
    let need = crate::journal::HEADER_SIZE + crate::journal::MIN_LOG;
    if m.size() < need {
        bail!(TooSmall, "{} is too small for a journal: it has {} bytes and a journal needs at least {need} (64 MiB and 4 KiB)", m.name(), m.size());
    }
    if !force {
        if let Some(sig) = probe(&m)? {
            bail!(
                WouldDestroy,
                "{} holds {sig}; making it a journal would destroy it. Nothing was written. Check the device \
                 name, or add --force to overwrite it",
                m.name()
            );
        }
    }
    Ok(m)
}

/// Opens the journals that lie on members (`auth`'s volume entries with a
/// journal region; `slots` and `devices` as assemble found them, `health`
/// the array's). A journal whose role has no device, is faulty, or whose
/// region does not hold this volume's journal is lost: its records are out
/// of reach, and the volume runs without it ([`crate::journal::Journal::absent`],
/// a warning says so). After an unclean stop that may lose acknowledged
/// writes, so it is refused unless `force` (or `inspect`). Returns the
/// volumes whose journal, lost while its role keeps the device, gets a new
/// UUID (with the UUID).
fn open_member_journals(
    auth: &Superblock,
    slots: &[Slot],
    devices: &[Option<Member>],
    health: &Arc<Health>,
    opts: &AssembleOptions,
    journals: &mut Vec<Arc<crate::journal::Journal>>,
    warnings: &mut Vec<String>,
) -> Result<Vec<(usize, [u8; 16])>> {
    let mut renamed = Vec::new();
    for (i, v) in auth.volumes.iter().enumerate() {
        let Some(r) = v.journal_region else { continue };
        let mut id = journal_id(auth.array_uuid, v);
        let host = crate::journal::Host { health: health.clone(), role: r.role };
        let state = slots[r.role as usize].state;
        let dev = devices[r.role as usize].as_ref().filter(|_| matches!(state, MemberState::Active | MemberState::Rebuilding));
        let why = match dev {
            None => format!("role {} is {}", r.role, state.name()),
            Some(m) => match crate::journal::Journal::open_region(m.try_clone()?, r.start, r.size, Some(host.clone())) {
                Ok(j) if j.id() == id => {
                    journals.push(Arc::new(j));
                    continue;
                }
                Ok(_) => format!("the journal region of role {} ({}) holds another journal", r.role, m.name()),
                Err(e) => e.to_string(),
            },
        };
        let unclean = auth.state == State::Active;
        if unclean && !opts.force && !opts.inspect {
            let way = if state == MemberState::Missing { "Give the member, or assemble" } else { "Assemble" };
            bail!(
                Membership,
                "{} keeps its write journal on role {} and the journal cannot be read ({why}); the array was not \
                 stopped cleanly, so the journal's records may hold acknowledged writes that are not on the members. \
                 Nothing was written. {way} with --force to go on without them (then run 'uraid check')",
                describe_volume(v),
                r.role
            );
        }
        if dev.is_some() {
            // The role keeps its device: the region's records must never
            // count again (a later assemble would replay them over newer
            // data); the journal gets a new identity, written at activate.
            id.journal = superblock::new_uuid();
            renamed.push((i, id.journal));
        }
        warnings.push(format!(
            "{}: its write journal on role {} is lost ({why}){}; writes are acknowledged only once they are on the \
             members until the role has a device again (the journal is then formatted on it)",
            describe_volume(v),
            r.role,
            if unclean { ", with the records it held (accepted with --force)" } else { "" }
        ));
        let name = dev.map_or_else(|| format!("role {}", r.role), |m| m.name().to_string());
        journals.push(Arc::new(crate::journal::Journal::absent(id, r.start, r.size, name, Some(host))));
    }
    Ok(renamed)
}

/// The absolute member byte ranges a resync must cover after an unclean
/// stop: the bitmap's dirty regions, or every redundant volume's area when
/// there is no bitmap.
fn dirty_ranges(sb: &Superblock, bitmap: Option<&Bitmap>) -> Vec<Range<u64>> {
    match bitmap {
        Some(b) => b.dirty(),
        None => sb.volumes.iter().filter(|v| is_redundant(v)).map(|v| v.member_start..v.member_end()).collect(),
    }
}

/// A member of an array as `uraid status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MemberStatus {
    /// Slot: the role when below the member count, else a spare slot.
    pub slot: u32,
    /// The role, `None` for a spare.
    pub role: Option<u32>,
    /// The device as given, `None` when no device holds the slot.
    pub device: Option<String>,
    /// The device's UUID (zero when none).
    pub uuid: String,
    /// State name (active, faulty, rebuilding, spare, missing).
    pub state: &'static str,
    /// For a rebuilding member: absolute member byte offset rebuilt so far.
    pub recovery_offset: Option<u64>,
}

/// A volume as `uraid status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VolumeStatus {
    /// Name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// RAID level number.
    pub level: u32,
    /// Chunk in bytes.
    pub chunk: u64,
    /// Usable bytes.
    pub capacity: u64,
    /// Absolute byte offset of the volume's area on every member.
    pub member_start: u64,
    /// Bytes of every member the volume uses.
    pub member_size: u64,
    /// clean, degraded, rebuilding, resyncing (not stopped cleanly: the
    /// dirty regions are resynced at assemble) or failed (more members lost
    /// than it tolerates).
    pub state: &'static str,
    /// Members that may fail without data loss.
    pub tolerance: usize,
    /// Rebuild progress in percent of the volume's member area (the least
    /// advanced rebuilding member), when rebuilding.
    pub rebuild_percent: Option<f64>,
    /// Cache mode (off, writethrough, writeback), size and dirty limit in
    /// bytes as the volume table says.
    pub cache: crate::cache::CacheConfig,
    /// What the mode risks, for write-back: un-flushed writes are lost on
    /// power loss or a crash; for the journal mode, a lost journal.
    pub cache_warning: Option<&'static str>,
    /// Journal mode with the journal on a member: where it lies.
    pub journal_region: Option<superblock::JournalRegion>,
    /// Journal mode: the journal is lost (see [`JOURNAL_LOST_WARNING`]).
    pub journal_lost: bool,
    /// This process's cache counters (dirty bytes, hit ratio, merged
    /// writes), when the volume has a cache here.
    pub cache_stats: Option<crate::cache::CacheStats>,
}

/// One volume's status, from its entry `v` over `n` roles: `down[r]` when
/// role r is not active, `rebuilding` the recovery offsets (absolute member
/// bytes) of the rebuilding roles, `resyncing` when its dirty regions await
/// a resync, its usable `capacity` (bytes) and its cache's counters.
#[allow(clippy::too_many_arguments)]
fn volume_status(
    v: &VolumeEntry,
    n: usize,
    down: &[bool],
    rebuilding: &[u64],
    resyncing: bool,
    capacity: u64,
    cache_stats: Option<crate::cache::CacheStats>,
    journal_lost: bool,
) -> VolumeStatus {
    let state = if !volume_survives(v, n, down) {
        "failed"
    } else if !rebuilding.is_empty() && is_redundant(v) {
        "rebuilding"
    } else if down.iter().any(|&d| d) && is_redundant(v) {
        "degraded"
    } else if resyncing {
        "resyncing"
    } else {
        "clean"
    };
    // The least advanced rebuilding member, in percent of the volume's area.
    let rebuild_percent = rebuilding.iter().copied().min().filter(|_| is_redundant(v) && v.member_size > 0).map(|least| {
        let done = least.saturating_sub(v.member_start).min(v.member_size);
        (done as f64 * 1000.0 / v.member_size as f64).floor() / 10.0
    });
    let cache = v.cache_config().unwrap_or_default();
    VolumeStatus {
        name: v.name.clone(),
        uuid: fmt_uuid(&v.uuid),
        level: v.level,
        chunk: v.chunk,
        capacity,
        member_start: v.member_start,
        member_size: v.member_size,
        state,
        tolerance: level_tolerance(v, n),
        rebuild_percent,
        cache,
        cache_warning: match cache.mode {
            crate::cache::CacheMode::WriteBack => Some(WRITEBACK_WARNING),
            crate::cache::CacheMode::Journal if journal_lost => Some(JOURNAL_LOST_WARNING),
            _ => None,
        },
        journal_region: v.journal_region,
        journal_lost,
        cache_stats,
    }
}

/// The status the superblock `sb` records, for a process that cannot open
/// the members because another one (`uraid serve`) holds them: the role
/// states and recovery offsets as last persisted, no resync state, no
/// bitmap (0 dirty bytes) and no cache counters. `devices` are the devices
/// read, each with the member UUID its superblock carries.
pub fn recorded_status(sb: &Superblock, devices: &[(String, [u8; 16])]) -> ArrayStatus {
    let n = sb.member_count as usize;
    let roles = &sb.slots[..n.min(sb.slots.len())];
    let down: Vec<bool> = roles.iter().map(|s| s.state != MemberState::Active).collect();
    let rebuilding: Vec<u64> =
        roles.iter().filter(|s| s.state == MemberState::Rebuilding).map(|s| s.recovery_offset.unwrap_or(0)).collect();
    let volumes = sb
        .volumes
        .iter()
        .map(|v| {
            let lost = v.journal_region.is_some_and(|r| matches!(roles[r.role as usize].state, MemberState::Faulty | MemberState::Missing));
            volume_status(v, n, &down, &rebuilding, false, v.capacity(n), None, lost)
        })
        .collect();
    let members = sb
        .slots
        .iter()
        .enumerate()
        .map(|(s, slot)| MemberStatus {
            slot: s as u32,
            role: (s < n).then_some(s as u32),
            device: devices.iter().find(|(_, uuid)| !slot.is_empty() && *uuid == slot.uuid).map(|(name, _)| name.clone()),
            uuid: fmt_uuid(&slot.uuid),
            state: slot.state.name(),
            recovery_offset: if slot.state == MemberState::Rebuilding { slot.recovery_offset } else { None },
        })
        .collect();
    ArrayStatus {
        name: sb.name.clone(),
        uuid: fmt_uuid(&sb.array_uuid),
        events: sb.events,
        state: match sb.state {
            State::Clean => "clean",
            State::Active => "active",
        },
        member_count: sb.member_count,
        bitmap_region: sb.bitmap_region,
        bitmap_dirty_bytes: 0,
        volumes,
        members,
    }
}

/// What `uraid status` says of a volume whose journal is lost.
pub const JOURNAL_LOST_WARNING: &str =
    "the write journal is lost (a write to it failed, its device was not given, or the member holding it failed or \
     was replaced): each write is acknowledged only once it is on the members and flushed, and RAID 5/6 stripes \
     written in part have the write hole again, until a member takes the journal's role or 'uraid config --cache \
     journal --journal DEVICE' gives it another place";

/// A journal size asked for on a member, in whole 4 KiB. Errors:
/// `InvalidInput` below 64 MiB + 4 KiB or above 1 PiB.
pub fn check_member_journal_size(size: u64) -> Result<u64> {
    let min = crate::journal::HEADER_SIZE + crate::journal::MIN_LOG;
    if !(min..=1 << 50).contains(&size) {
        bail!(InvalidInput, "a journal of {size} bytes cannot be: give from 64M + 4K ({min} bytes) to 1P");
    }
    Ok(size.next_multiple_of(4096))
}

/// Bytes of a journal on a member when no size is given (256 MiB and the
/// 4 KiB header).
pub const DEFAULT_MEMBER_JOURNAL: u64 = (256 << 20) + crate::journal::HEADER_SIZE;

/// What `uraid status` and `create` say of a write-back cache.
pub const WRITEBACK_WARNING: &str =
    "write-back cache: writes are acknowledged from memory; those not yet flushed are lost on power loss or a crash \
     (filesystems that send FLUSH/FUA keep their own consistency)";

/// What `uraid status` shows of an array (like /proc/mdstat).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ArrayStatus {
    /// Array name.
    pub name: String,
    /// Array UUID.
    pub uuid: String,
    /// Event counter.
    pub events: u64,
    /// "clean" or "active" as the superblock says.
    pub state: &'static str,
    /// Roles (members, not spares).
    pub member_count: u32,
    /// Bitmap region size in bytes (0: no bitmap).
    pub bitmap_region: u64,
    /// Bytes of the members the bitmap marks dirty (0 without a bitmap).
    pub bitmap_dirty_bytes: u64,
    /// The volumes, in member-offset order.
    pub volumes: Vec<VolumeStatus>,
    /// Every slot: roles, then spares.
    pub members: Vec<MemberStatus>,
}

impl Array {
    fn new(
        meta: Meta,
        health: Arc<Health>,
        bitmap: Option<Arc<Bitmap>>,
        warnings: Vec<String>,
        journals: Vec<Arc<crate::journal::Journal>>,
        inspect: bool,
    ) -> Result<Array> {
        let meta = Arc::new(Mutex::new(meta));
        let hook_meta = Arc::downgrade(&meta);
        health.set_on_change(move |h, _role| match hook_meta.upgrade() {
            Some(m) => m.lock().unwrap_or_else(|e| e.into_inner()).persist(h),
            None => Ok(()),
        });
        let mut a = Array { meta, health, bitmap, daemon: None, volumes: Vec::new(), warnings, inspect, journals, replayed: false };
        for j in &a.journals {
            a.watch_journal(j);
        }
        a.build_volumes()?;
        Ok(a)
    }

    /// A journal device of its own that a write fails is lost for good:
    /// once the cache has written back and flushed what it held (and
    /// before anything written after the loss is acknowledged: see
    /// [`crate::journal::Journal::drained_after_loss`]), its volume entry
    /// says so (`journal_lost`, persisted then), so that no later assemble
    /// replays its records, stale from then on (the volume's writes go to
    /// the members without it). A journal on a member is lost with its
    /// member, which [`Health`] records.
    fn watch_journal(&self, j: &Arc<crate::journal::Journal>) {
        if j.host_role().is_some() || self.inspect {
            return;
        }
        let meta = Arc::downgrade(&self.meta);
        let health = self.health.clone();
        j.set_on_lost(move |j| {
            let Some(m) = meta.upgrade() else { return };
            let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
            let array = m.sb.array_uuid;
            let Some(v) = m.sb.volumes.iter_mut().find(|v| journal_id(array, v) == j.id()) else { return };
            v.journal_lost = true;
            if let Err(e) = m.persist(&health) {
                eprintln!("uraid: cannot record that the journal on {} is lost: {e}", j.name());
            }
        });
    }

    fn meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn build_volumes(&mut self) -> Result<()> {
        let (roles, entries) = {
            let m = self.meta();
            (m.roles.clone(), m.sb.volumes.clone())
        };
        let n = roles.len();
        let shared = Shared { health: self.health.clone(), bitmap: self.bitmap.clone() };
        // Volumes made again over new members keep their caches (and the
        // dirty data in them).
        let old = std::mem::take(&mut self.volumes);
        self.volumes = entries
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let g = Geometry::new(Level::from_number(v.level)?, n, v.chunk, v.member_size)?;
                let vol = Volume::with_state(roles.clone(), g, v.member_start, shared.clone())?;
                let cfg = v.cache_config()?;
                match old.get(i).and_then(|o| o.cache().map(|c| (o, c.clone()))) {
                    Some((o, c)) => vol.adopt_cache(c, o)?,
                    None if cfg.mode == crate::cache::CacheMode::Journal => match self.journal_of(v) {
                        Some(j) => vol.enable_journaled_cache(cfg, j)?,
                        // Looking only: reads go to the members as they are.
                        None if self.inspect => {}
                        None => bail!(
                            Membership,
                            "volume '{}' keeps a write journal (journal UUID {}) and it was not given; give the \
                             journal device with the members (its records may hold acknowledged writes). Nothing \
                             was written. If the device is gone, 'uraid assemble --without-journal' or 'uraid config \
                             --without-journal' go on without it",
                            v.name,
                            fmt_uuid(&v.journal_uuid)
                        ),
                    },
                    None => vol.enable_cache(cfg)?,
                }
                Ok(vol)
            })
            .collect::<Result<_>>()?;
        Ok(())
    }

    /// Replays the journal of volume `i` if it has one (its records not yet
    /// retired: acknowledged writes and whole lines written when the array
    /// stopped) onto the members, then empties it; a warning says how much.
    fn replay_journal(&mut self, i: usize) -> Result<()> {
        let vol = &self.volumes[i];
        if let Some(j) = vol.cache().and_then(|c| c.journal()) {
            let (n, bytes) = j.replay(vol, crate::cache::Cache::line_for(vol))?;
            if n > 0 {
                let what = describe_volume(&self.meta().sb.volumes[i]);
                self.warnings.push(format!(
                    "{what}: replayed {n} record(s) of the write journal on {} ({bytes} bytes written to the members)",
                    j.name()
                ));
            }
        }
        Ok(())
    }

    /// The journal given or opened for volume entry `v`, if any.
    fn journal_of(&self, v: &VolumeEntry) -> Option<Arc<crate::journal::Journal>> {
        let id = journal_id(self.meta().sb.array_uuid, v);
        self.journals.iter().find(|j| j.id() == id).cloned()
    }

    /// After a device joined or left a role: new member handles, bitmap
    /// (reloaded over the new members) and volumes.
    fn rebuild_after_membership_change(&mut self) -> Result<()> {
        let running = self.daemon.take().is_some();
        let (roles, region, end) = {
            let mut m = self.meta();
            m.rebuild_roles()?;
            (m.roles.clone(), m.sb.bitmap_region, m.sb.data_end())
        };
        if region > 0 {
            self.bitmap = None;
            self.bitmap = Some(Arc::new(Bitmap::load(roles, self.health.clone(), region, end)?));
        }
        self.build_volumes()?;
        if running {
            self.start_daemon();
        }
        Ok(())
    }

    fn start_daemon(&mut self) {
        if let Some(b) = &self.bitmap {
            self.daemon = Some(b.start_daemon(BITMAP_DAEMON_INTERVAL));
        }
    }

    fn persist(&self) -> Result<()> {
        self.meta().persist(&self.health)
    }

    /// The first volume (the only one of an array made without volumes).
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volumes[0]
    }
    /// Every volume, in the order of the volume table.
    pub fn volumes(&self) -> &[Arc<Volume>] {
        &self.volumes
    }
    /// The volume named `name`, if any.
    pub fn volume_named(&self, name: &str) -> Option<&Arc<Volume>> {
        let m = self.meta();
        let i = m.sb.volumes.iter().position(|v| v.name == name)?;
        self.volumes.get(i)
    }
    /// The volume table.
    pub fn volume_entries(&self) -> Vec<VolumeEntry> {
        self.meta().sb.volumes.clone()
    }
    /// Member states, shared with every volume.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }
    /// The write-intent bitmap, if the array has one.
    pub fn bitmap(&self) -> Option<&Arc<Bitmap>> {
        self.bitmap.as_ref()
    }
    /// The array's current superblock (the authoritative copy, as written
    /// to every present member, with the first slot's identity).
    pub fn superblock(&self) -> Superblock {
        self.meta().sb.clone()
    }
    /// Superblocks as written to each present device, in slot order.
    pub fn superblocks(&self) -> Vec<Superblock> {
        let m = self.meta();
        (0..m.sb.slots.len())
            .filter(|&s| m.devices[s].is_some())
            .map(|s| {
                let mut sb = m.sb.clone();
                sb.slot = s as u32;
                sb.member_uuid = sb.slots[s].uuid;
                sb
            })
            .collect()
    }
    /// Array name.
    pub fn name(&self) -> String {
        self.meta().sb.name.clone()
    }
    /// Array UUID.
    pub fn uuid(&self) -> String {
        fmt_uuid(&self.meta().sb.array_uuid)
    }
    /// Event counter.
    pub fn events(&self) -> u64 {
        self.meta().sb.events
    }
    /// Warnings to show the user (unequal members, missing or forced
    /// members).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
    /// The warnings so far, taken (the next call returns only newer ones):
    /// for a command that prints them as they come.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
    /// Number of roles (members, not counting spares).
    pub fn member_count(&self) -> u32 {
        self.meta().sb.member_count
    }

    /// The slot holding the device named by `spec` (same file or block
    /// device, compared by device and inode), if it is part of the array.
    pub fn slot_of(&self, spec: &MemberSpec) -> Option<u32> {
        let id = spec.identity().ok()?;
        let m = self.meta();
        m.specs.iter().position(|s| s.as_ref().and_then(|s| s.identity().ok()).as_ref() == Some(&id)).map(|s| s as u32)
    }

    /// Where every volume and member stands (see [`ArrayStatus`]).
    pub fn status(&self) -> ArrayStatus {
        let m = self.meta();
        let n = m.n();
        let down = down_roles(&self.health);
        let states = self.health.states();
        let dirty = match &self.bitmap {
            Some(b) => b.dirty(),
            None => Vec::new(),
        };
        let rebuilding: Vec<u64> =
            (0..n as u32).filter(|&r| states[r as usize] == MemberState::Rebuilding).map(|r| self.health.recovery(r)).collect();
        let volumes = m
            .sb
            .volumes
            .iter()
            .zip(&self.volumes)
            .map(|(v, vol)| {
                let unclean = m.sb.state == State::Active && is_redundant(v);
                let resyncing =
                    unclean && (self.bitmap.is_none() || dirty.iter().any(|r| r.start < v.member_end() && r.end > v.member_start));
                let stats = vol.cache().map(|c| c.stats()).filter(|c| c.writes + c.read_hits + c.read_misses > 0);
                let lost = vol.cache().and_then(|c| c.journal()).is_some_and(|j| j.is_lost());
                volume_status(v, n, &down, &rebuilding, resyncing, vol.capacity(), stats, lost)
            })
            .collect();
        let members = m
            .sb
            .slots
            .iter()
            .enumerate()
            .map(|(s, slot)| {
                let state = if s < n { states[s] } else { slot.state };
                MemberStatus {
                    slot: s as u32,
                    role: (s < n).then_some(s as u32),
                    device: m.devices[s].as_ref().map(|d| d.name().to_string()),
                    uuid: fmt_uuid(&slot.uuid),
                    state: state.name(),
                    recovery_offset: (state == MemberState::Rebuilding).then(|| self.health.recovery(s as u32)),
                }
            })
            .collect();
        ArrayStatus {
            name: m.sb.name.clone(),
            uuid: fmt_uuid(&m.sb.array_uuid),
            events: m.sb.events,
            state: match m.sb.state {
                State::Clean => "clean",
                State::Active => "active",
            },
            member_count: m.sb.member_count,
            bitmap_region: m.sb.bitmap_region,
            bitmap_dirty_bytes: dirty.iter().map(|r| r.end - r.start).sum(),
            volumes,
            members,
        }
    }

    /// Marks the array active and ready for writes: resynchronises the
    /// dirty regions of every redundant volume when the array was not
    /// stopped cleanly (`maint::resync`, then clears the bitmap), puts
    /// spares into failed or missing roles, marks every superblock active
    /// (event counter + 1) and starts the bitmap daemon.
    ///
    /// Errors: `Membership` for an array opened with `inspect` (it may be
    /// past its tolerance); `Io` from the resync or a superblock write.
    pub fn activate(&mut self) -> Result<()> {
        if self.inspect {
            bail!(Membership, "array '{}' was opened for inspection only and cannot be activated", self.name());
        }
        let (unclean, entries) = {
            let m = self.meta();
            (m.sb.state == State::Active, m.sb.volumes.clone())
        };
        // Journal mode: the records not yet retired hold acknowledged
        // writes and whole lines written when the array stopped.
        for i in 0..entries.len() {
            self.replay_journal(i)?;
        }
        self.replayed = true;
        if unclean {
            let ranges = {
                let m = self.meta();
                dirty_ranges(&m.sb, self.bitmap.as_deref())
            };
            for (v, vol) in entries.iter().zip(&self.volumes) {
                if !is_redundant(v) {
                    continue;
                }
                let mine: Vec<Range<u64>> = ranges
                    .iter()
                    .filter_map(|r| {
                        let (s, e) = (r.start.max(v.member_start), r.end.min(v.member_end()));
                        (s < e).then_some(s..e)
                    })
                    .collect();
                if !mine.is_empty() {
                    let (_, report) = crate::maint::resync_report(vol, &mine)?;
                    // A live journal's replay rewrote those stripes whole.
                    let journaled = vol.cache().and_then(|c| c.journal()).is_some_and(|j| !j.is_lost());
                    if report.stripes_unchecked > 0 && !journaled {
                        self.warnings.push(format!(
                            "{}: {} stripe(s) written when the array stopped uncleanly could not be resynced \
                             because a member is missing (RAID 5/6 write hole); their data in the missing \
                             member's chunks may be wrong",
                            describe_volume(v),
                            report.stripes_unchecked
                        ));
                    }
                }
            }
            if let Some(b) = &self.bitmap {
                b.clear_all()?;
            }
        }
        self.meta().sb.state = State::Active;
        self.promote_spares()?;
        self.persist()?;
        if self.daemon.is_none() {
            self.start_daemon();
        }
        Ok(())
    }

    /// Lets go of the members without writing anything.
    pub fn release(self) {}

    /// Flushes the members, stops the bitmap daemon, clears the bitmap,
    /// marks the array clean in every superblock (event counter + 1) and
    /// releases the members. Writes through other handles on the volumes
    /// must have completed. Errors: `Io` from the flush or the superblock
    /// writes, and `Io` when an engine thread was given up with writes in
    /// flight ([`Health::unclean`](crate::health::Health::unclean)): the
    /// members are flushed but the array is left unclean, for a resync.
    pub fn stop(mut self) -> Result<()> {
        if self.health.unclean() {
            // Flush what can be, keep the bitmap and the unclean state.
            for v in &self.volumes {
                let _ = v.flush();
            }
            self.daemon = None;
            bail!(
                Io,
                "array '{}' was not marked clean: an engine thread was given up with writes in flight (see the \
                 messages above); the next assemble resyncs the regions its write-intent bitmap marks",
                self.name()
            );
        }
        for v in &self.volumes {
            if !self.health.writes_stopped() {
                v.close_cache()?;
                v.flush()?;
            }
        }
        self.daemon = None;
        if let Some(b) = &self.bitmap {
            b.clear_all()?;
        }
        self.meta().sb.state = State::Clean;
        self.persist()
    }

    fn check_role(&self, role: u32) -> Result<()> {
        let n = self.member_count();
        if role >= n {
            bail!(InvalidInput, "array '{}' has no role {role}: its roles are 0 to {}", self.name(), n - 1);
        }
        Ok(())
    }

    /// The volumes that would lose data if `role` went down as well.
    fn lost_if_down(&self, role: u32) -> Vec<VolumeEntry> {
        let mut down = down_roles(&self.health);
        down[role as usize] = true;
        let m = self.meta();
        lost_volumes(&m.sb, &down).into_iter().map(|i| m.sb.volumes[i].clone()).collect()
    }

    fn refuse_past_tolerance(&self, role: u32, what: &str) -> Result<()> {
        let lost = self.lost_if_down(role);
        if lost.is_empty() {
            return Ok(());
        }
        let n = self.member_count() as usize;
        let down = down_roles(&self.health).iter().filter(|&&d| d).count() + 1;
        let vols: Vec<String> =
            lost.iter().map(|v| format!("{} (it tolerates {} of {n})", describe_volume(v), level_tolerance(v, n))).collect();
        bail!(
            WouldDestroy,
            "{what} role {role} would leave {down} of {n} members of array '{}' unavailable and lose the data of {}. \
             Nothing was changed. Add --force to do it anyway",
            self.name(),
            vols.join(", ")
        )
    }

    /// Marks role `role` faulty (`uraid fail`): it is no longer read or
    /// written, the other members' superblocks record it (event counter
    /// + 1). Past a volume's tolerance the array stops taking writes.
    ///
    /// Errors: `InvalidInput` (no such role, already faulty or missing),
    /// `WouldDestroy` (a volume would lose data and `force` is off),
    /// `Io` (superblock writes).
    pub fn fail(&mut self, role: u32, force: bool) -> Result<()> {
        let slots = self.meta().sb.slots.len() as u32;
        if role >= self.member_count() && role < slots {
            bail!(
                InvalidInput,
                "slot {role} of array '{}' is a spare: it holds no data to fail; take it out with 'uraid remove'",
                self.name()
            );
        }
        self.check_role(role)?;
        match self.health.state(role) {
            MemberState::Active | MemberState::Rebuilding => {}
            s => bail!(InvalidInput, "role {role} of array '{}' is already {}; nothing to fail", self.name(), s.name()),
        }
        if !force {
            self.refuse_past_tolerance(role, "failing")?;
        }
        // A journal on it goes: what it holds is put on the members first.
        self.lose_journals_on(role)?;
        self.health.set_state(role, MemberState::Faulty);
        self.persist()
    }

    /// Removes a faulty member or a spare (`uraid remove`): its device is
    /// released (its superblock is not written: it may be broken), a role
    /// becomes missing (ready for `add`), a spare's slot is dropped. The
    /// other superblocks record it (event counter + 1).
    ///
    /// Errors: `InvalidInput` (no such slot; an active or rebuilding member:
    /// fail it first or use replace; a role without a device).
    pub fn remove(&mut self, slot: u32) -> Result<()> {
        let (n, total) = {
            let m = self.meta();
            (m.sb.member_count, m.sb.slots.len() as u32)
        };
        if slot >= total {
            bail!(
                InvalidInput,
                "array '{}' has no slot {slot}: roles 0 to {}{}",
                self.name(),
                n - 1,
                if total > n { format!(", spares {} to {}", n, total - 1) } else { String::new() }
            );
        }
        if slot >= n {
            let mut m = self.meta();
            m.sb.slots.remove(slot as usize);
            m.devices.remove(slot as usize);
            m.specs.remove(slot as usize);
            drop(m);
            return self.persist();
        }
        match self.health.state(slot) {
            MemberState::Faulty => {}
            MemberState::Missing => bail!(InvalidInput, "role {slot} of array '{}' has no member to remove", self.name()),
            s => bail!(
                InvalidInput,
                "role {slot} of array '{}' is {}; only faulty members and spares can be removed. Fail it first \
                 ('uraid fail'), or use 'uraid replace' to swap it for another drive",
                self.name(),
                s.name()
            ),
        }
        {
            let mut m = self.meta();
            // The slot keeps the device's UUID: `add` recognises it and
            // takes it back with a resync from the bitmap.
            m.devices[slot as usize] = None;
            m.specs[slot as usize] = None;
        }
        for j in self.journals_on(slot) {
            j.mark_lost();
        }
        self.health.set_state(slot, MemberState::Missing);
        self.rebuild_after_membership_change()?;
        self.persist()
    }

    /// Opens a new device for `add` / `replace` and checks it: not already
    /// in the array, large enough, holding nothing (unless `force`; a
    /// superblock of this very array counts as nothing).
    fn open_new(&self, spec: &MemberSpec, force: bool) -> Result<Member> {
        if let Some(s) = self.slot_of(spec) {
            bail!(InvalidInput, "{spec} is already slot {s} of array '{}'", self.name());
        }
        let m = Member::open(spec, OpenMode { write: true, exclusive: true })?;
        let (end, uuid, name) = {
            let g = self.meta();
            (g.sb.used_end(), g.sb.array_uuid, g.sb.name.clone())
        };
        if m.size() < end {
            bail!(
                TooSmall,
                "{} is too small for array '{name}': it has {} bytes ({}), the volumes (and journals on members) \
                 end at byte {end} ({}) on every member. Nothing was written; use a larger drive",
                m.name(),
                m.size(),
                fmt_size(m.size()),
                fmt_size(end)
            );
        }
        if !force {
            let ours = matches!(read_superblock(&m)?, Ok(sb) if sb.array_uuid == uuid);
            if !ours {
                if let Some(sig) = probe(&m)? {
                    bail!(
                        WouldDestroy,
                        "{} holds {sig}; adding it to array '{name}' would destroy it. Nothing was written. \
                         Check the device name, or add --force to overwrite it",
                        m.name()
                    );
                }
            }
        }
        Ok(m)
    }

    /// Puts a freshly opened, checked device into role `role` as
    /// rebuilding (recovery offset 0) and copies the bitmap onto it. A new
    /// device gets a new UUID and its volume areas zeroed (so that regions
    /// the rebuild skips read as zeros, like on every other member); a
    /// `returning` one (see [`returning_role`](Self::returning_role)) keeps
    /// both and is resynced from the bitmap.
    fn install(&mut self, role: u32, m: Member, spec: &MemberSpec, returning: bool) -> Result<()> {
        if !returning {
            for v in &self.volume_entries() {
                zero_range(&m, v.member_start, v.member_size)?;
            }
        }
        self.lose_journals_on(role)?;
        {
            let mut g = self.meta();
            g.devices[role as usize] = Some(m);
            g.specs[role as usize] = Some(spec.clone());
            if !returning {
                g.sb.slots[role as usize].uuid = superblock::new_uuid();
            }
            g.sb.slots[role as usize].resync_from_bitmap = returning;
        }
        self.health.set_state(role, MemberState::Rebuilding);
        self.rebuild_after_membership_change()?;
        if let Some(b) = &self.bitmap {
            b.write_to(role)?;
        }
        self.rehome_journals_on(role)
    }

    /// Adds a device (`uraid add`): into the first role that has no member
    /// (missing), where it is rebuilt, or else as a spare. Spares then take
    /// over faulty roles (see [`promote_spares`](Self::promote_spares)).
    /// The superblocks record it (event counter + 1). Run
    /// [`rebuild`](Self::rebuild) to bring rebuilding members in sync.
    ///
    /// Errors, before anything is written: `InvalidInput` (already a member,
    /// no room for another spare), `TooSmall`, `WouldDestroy` (it holds a
    /// filesystem or another array and `force` is off), `Busy`.
    pub fn add(&mut self, spec: &MemberSpec, force: bool) -> Result<Added> {
        let m = self.open_new(spec, force)?;
        if let Some(role) = self.returning_role(&m)? {
            self.install(role, m, spec, true)?;
            self.persist()?;
            return Ok(Added::ReAdded(role));
        }
        let missing = self.health.states().iter().position(|&s| s == MemberState::Missing).map(|r| r as u32);
        let added = if let Some(role) = missing {
            self.install(role, m, spec, false)?;
            Added::Role(role)
        } else {
            let entries = self.volume_entries();
            let mut g = self.meta();
            if g.sb.spares().len() >= MAX_SPARES {
                bail!(InvalidInput, "array '{}' already has {MAX_SPARES} spares, the most it can hold", g.sb.name);
            }
            for v in &entries {
                zero_range(&m, v.member_start, v.member_size)?;
            }
            g.sb.slots.push(Slot { uuid: superblock::new_uuid(), state: MemberState::Spare, resync_from_bitmap: false, recovery_offset: None });
            g.devices.push(Some(m));
            g.specs.push(Some(spec.clone()));
            Added::Spare(g.sb.slots.len() as u32 - 1)
        };
        self.promote_spares()?;
        self.persist()?;
        Ok(added)
    }

    /// The role `m` held before it was removed, when it can be taken back
    /// with a resync from the bitmap (md's re-add): its superblock names
    /// this array and the member UUID that a missing role still records,
    /// and the array has a bitmap. Nobody else has held the role since
    /// (that would have recorded another UUID), so the array has been
    /// degraded ever since and its bitmap kept every region written
    /// meanwhile dirty.
    fn returning_role(&self, m: &Member) -> Result<Option<u32>> {
        if self.bitmap.is_none() {
            return Ok(None);
        }
        let Ok(sb) = read_superblock(m)? else { return Ok(None) };
        let g = self.meta();
        if sb.array_uuid != g.sb.array_uuid || sb.member_uuid == [0; 16] {
            return Ok(None);
        }
        Ok((0..g.n()).find(|&r| g.sb.slots[r].uuid == sb.member_uuid && self.health.state(r as u32) == MemberState::Missing).map(|r| r as u32))
    }

    /// Replaces the member in `role` with a new device (`uraid replace`):
    /// the old device is released (its superblock is not written) and the
    /// new one is rebuilt in its place. The array runs without the role
    /// while it rebuilds (md's hot-replace, which keeps the old member in
    /// service until the new one is in sync, is not done here).
    ///
    /// Errors, before anything is written: as [`add`](Self::add), and
    /// `InvalidInput` (no such role), `WouldDestroy` (taking an active
    /// member out would lose a volume's data and `force` is off).
    pub fn replace(&mut self, role: u32, spec: &MemberSpec, force: bool) -> Result<()> {
        self.check_role(role)?;
        if !force && self.health.state(role) == MemberState::Active {
            self.refuse_past_tolerance(role, "replacing")?;
        }
        let m = self.open_new(spec, force)?;
        self.install(role, m, spec, false)?;
        self.persist()
    }

    /// Moves spares into faulty or missing roles (faulty devices are
    /// released), where they are rebuilt, as md does on its own. Returns
    /// the roles that got a spare; persists when there were any.
    pub fn promote_spares(&mut self) -> Result<Vec<u32>> {
        let promoted = self.attach_spares()?;
        if !promoted.is_empty() {
            self.start_rebuilding(&promoted)?;
        }
        Ok(promoted)
    }

    /// The first half of [`promote_spares`](Self::promote_spares), for a
    /// takeover while the volumes are in use: puts spares into the slots of
    /// faulty or missing roles (the faulty devices are released) and makes
    /// new [`volumes`](Self::volumes) over them, but leaves those roles'
    /// states as they are (so nothing reads or writes them yet) and writes
    /// nothing. Move every user of the old volumes to the new ones, then
    /// call [`start_rebuilding`](Self::start_rebuilding) with the roles
    /// returned.
    pub fn attach_spares(&mut self) -> Result<Vec<u32>> {
        let mut attached = Vec::new();
        for role in 0..self.member_count() {
            if !matches!(self.health.state(role), MemberState::Faulty | MemberState::Missing) {
                continue;
            }
            let mut g = self.meta();
            let n = g.n();
            if g.sb.slots.len() == n {
                break; // no spare left
            }
            let slot = g.sb.slots.remove(n);
            let dev = g.devices.remove(n);
            let spec = g.specs.remove(n);
            let r = role as usize;
            g.sb.slots[r].uuid = slot.uuid;
            g.sb.slots[r].resync_from_bitmap = false;
            g.devices[r] = dev;
            g.specs[r] = spec;
            attached.push(role);
        }
        if !attached.is_empty() {
            self.rebuild_after_membership_change()?;
        }
        Ok(attached)
    }

    /// The second half of [`promote_spares`](Self::promote_spares): roles
    /// (from [`attach_spares`](Self::attach_spares)) become rebuilding
    /// from offset 0, get the bitmap, and the superblocks say so.
    pub fn start_rebuilding(&mut self, roles: &[u32]) -> Result<()> {
        for &r in roles {
            self.check_role(r)?;
            self.lose_journals_on(r)?;
            self.health.set_state(r, MemberState::Rebuilding);
        }
        if let Some(b) = &self.bitmap {
            for &r in roles {
                b.write_to(r)?;
            }
        }
        for &r in roles {
            self.rehome_journals_on(r)?;
        }
        self.persist()
    }

    /// Sets the cache of volume `volume` (every volume when `None`) in the
    /// volume table and the superblocks (`uraid config`, `create --cache`);
    /// it takes effect at the next assemble. A volume leaving the journal
    /// mode has its journal replayed onto the members first (so nothing
    /// it held is lost; see [`warnings`](Self::warnings)). Returns the
    /// names of the volumes changed.
    ///
    /// Errors, before anything is written: `InvalidInput` for an unknown
    /// volume or sizes that cannot hold one line (one stripe's data).
    pub fn set_cache(&mut self, volume: Option<&str>, cfg: &crate::cache::CacheConfig) -> Result<Vec<String>> {
        let entries = self.volume_entries();
        let chosen: Vec<usize> = match volume {
            Some(name) => vec![self.volume_index(name)?],
            None => (0..entries.len()).collect(),
        };
        if cfg.mode == crate::cache::CacheMode::Journal {
            bail!(InvalidInput, "the journal mode needs a journal device: give --journal DEVICE");
        }
        for &i in &chosen {
            crate::cache::Cache::check_config(&self.volumes[i], cfg)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("volume '{}': {e}", entries[i].name)))?;
        }
        // A journal left behind would take its records with it: they go to
        // the members first.
        if !self.inspect {
            for &i in &chosen {
                self.replay_journal(i)?;
            }
        }
        {
            let mut m = self.meta();
            for &i in &chosen {
                m.sb.volumes[i].set_cache_config(cfg);
            }
        }
        self.persist()?;
        Ok(chosen.iter().map(|&i| entries[i].name.clone()).collect())
    }

    /// The index of the volume named `name` in the volume table (and in
    /// [`volumes`](Self::volumes)). Errors: `InvalidInput` naming the
    /// volumes there are.
    pub fn volume_index(&self, name: &str) -> Result<usize> {
        let entries = self.volume_entries();
        match entries.iter().position(|v| v.name == name) {
            Some(i) => Ok(i),
            None => bail!(
                InvalidInput,
                "array '{}' has no volume '{name}'; its volumes: {}",
                self.name(),
                entries.iter().map(|v| format!("'{}'", v.name)).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Sets volume `volume` (by name; `None`: the only volume) to the
    /// journal cache mode with `cfg`'s sizes, and formats its journal:
    /// on `spec`, a device of its own (the whole device, see
    /// [`crate::journal`]; give it with the members at every assemble), or,
    /// when `spec` is a member of this array, in a region of `member_size`
    /// bytes (default [`DEFAULT_MEMBER_JOURNAL`]) at the end of that
    /// member past every volume ([`member_journal_start`](Self::member_journal_start)).
    /// Kept in the superblocks, used from the next assemble. A journal the
    /// volume had is replayed onto the members first. Returns the volume's
    /// name.
    ///
    /// Errors, before anything is written: `InvalidInput` (no such volume,
    /// several volumes and none named, the device is a spare of this array
    /// or a member not in service, `member_size` given for a device of its
    /// own, sizes that do not fit); `WouldDestroy` when a device of its own
    /// holds a filesystem, an array or a journal, unless `force`;
    /// `TooSmall` (a device below 64 MiB + 4 KiB; no room on the member:
    /// the volumes use it up); `Io`, `Busy`.
    pub fn set_journal(
        &mut self,
        volume: Option<&str>,
        spec: &MemberSpec,
        cfg: &crate::cache::CacheConfig,
        member_size: Option<u64>,
        force: bool,
    ) -> Result<String> {
        let entries = self.volume_entries();
        let i = match volume {
            Some(name) => self.volume_index(name)?,
            None if entries.len() == 1 => 0,
            None => bail!(InvalidInput, "a journal serves one volume and array '{}' has {}; name it with --volume", self.name(), entries.len()),
        };
        let cfg = crate::cache::CacheConfig { mode: crate::cache::CacheMode::Journal, ..*cfg };
        crate::cache::Cache::check_config(&self.volumes[i], &cfg)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("volume '{}': {e}", entries[i].name)))?;
        let id = crate::journal::JournalId { array: self.meta().sb.array_uuid, volume: entries[i].uuid, journal: superblock::new_uuid() };
        let (member, region, host) = match self.slot_of(spec) {
            Some(s) if s >= self.member_count() => {
                bail!(InvalidInput, "{spec} is a spare (slot {s}) of array '{}'; put the journal on a member or a device of its own", self.name())
            }
            Some(role) => {
                let state = self.health.state(role);
                if !matches!(state, MemberState::Active) {
                    bail!(
                        InvalidInput,
                        "{spec} (role {role}) is {}; a journal goes on a member in service. Nothing was written",
                        state.name()
                    );
                }
                let size = check_member_journal_size(member_size.unwrap_or(DEFAULT_MEMBER_JOURNAL))?;
                let start = self.member_journal_start(i, size)?;
                let m = self.meta().devices[role as usize].as_ref().expect("an active role has a device").try_clone()?;
                let host = crate::journal::Host { health: self.health.clone(), role };
                (m, Some(superblock::JournalRegion { role, start, size }), Some(host))
            }
            None => {
                if member_size.is_some() {
                    bail!(InvalidInput, "--journal-size is for a journal on a member; a device of its own is a journal whole");
                }
                (open_journal_device(spec, force)?, None, None)
            }
        };
        if !self.inspect {
            self.replay_journal(i)?;
        }
        let j = match region {
            Some(r) => crate::journal::Journal::format_region(member, r.start, r.size, id, host)?,
            None => crate::journal::Journal::format(member, id)?,
        };
        {
            let mut g = self.meta();
            g.sb.volumes[i].set_cache_config(&cfg);
            g.sb.volumes[i].journal_uuid = id.journal;
            g.sb.volumes[i].journal_region = region;
            g.sb.volumes[i].journal_lost = false;
        }
        let j = Arc::new(j);
        self.watch_journal(&j);
        self.journals.push(j);
        self.persist()?;
        Ok(entries[i].name.clone())
    }

    /// Where a journal region of `size` bytes for volume `i` goes on a
    /// member: at the end of the smallest device of the array (members and
    /// spares), below the other volumes' journal regions, 1 MiB aligned, past
    /// every volume. Errors: `TooSmall` when the volumes leave no such room.
    fn member_journal_start(&self, i: usize, size: u64) -> Result<u64> {
        let g = self.meta();
        let smallest = g.devices.iter().flatten().map(Member::size).min().unwrap_or(0);
        let limit = g
            .sb
            .volumes
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != i)
            .filter_map(|(_, v)| v.journal_region.map(|r| r.start))
            .fold(smallest, u64::min);
        let end = g.sb.data_end();
        match limit.checked_sub(size).map(|s| s / VOLUME_ALIGN * VOLUME_ALIGN) {
            Some(start) if start >= end => Ok(start),
            _ => bail!(
                TooSmall,
                "no room for a journal of {} on a member of array '{}': the volumes use the members up to byte {end} \
                 and {} is free below byte {limit}. Nothing was written. Create the array with the journal on a member \
                 (room is kept for it), give a smaller --journal-size (at least 64M + 4K), or a journal device of its own",
                fmt_size(size),
                g.sb.name,
                fmt_size(limit.saturating_sub(end))
            ),
        }
    }

    /// The journals of the volumes that lie on role `role`.
    fn journals_on(&self, role: u32) -> Vec<Arc<crate::journal::Journal>> {
        self.volumes
            .iter()
            .filter_map(|v| v.cache().and_then(|c| c.journal()).cloned())
            .filter(|j| j.host_role() == Some(role))
            .collect()
    }

    /// Role `role` is about to lose its device (failed) or get another one:
    /// every write its journals hold goes to the members first (records of
    /// a crash not yet replayed, then what the caches hold), then the
    /// journals are lost (their devices let go). Errors: from the replay
    /// or the write-back; the journals are then still in use.
    fn lose_journals_on(&mut self, role: u32) -> Result<()> {
        let on_role = |v: &Arc<Volume>| v.cache().and_then(|c| c.journal()).is_some_and(|j| j.host_role() == Some(role));
        if !self.replayed && !self.inspect {
            for i in 0..self.volumes.len() {
                if on_role(&self.volumes[i]) {
                    self.replay_journal(i)?;
                }
            }
        }
        for v in self.volumes.iter().filter(|v| on_role(v)) {
            v.cache().expect("a journal has a cache").drain()?;
        }
        for j in self.journals_on(role) {
            j.mark_lost();
        }
        // Writes that came meanwhile, recorded in the journal just lost.
        for v in self.volumes.iter().filter(|v| on_role(v)) {
            v.cache().expect("a journal has a cache").drain()?;
        }
        Ok(())
    }

    /// Role `role` holds a new device: the lost journals that lay on it are
    /// formatted in their regions there and taken back in use (a warning
    /// says so).
    fn rehome_journals_on(&mut self, role: u32) -> Result<()> {
        let journals = self.journals_on(role);
        if journals.is_empty() {
            return Ok(());
        }
        let dev = match self.meta().devices[role as usize].as_ref() {
            Some(m) => m.try_clone()?,
            None => return Ok(()),
        };
        for j in journals {
            if !j.is_lost() {
                continue;
            }
            j.rehome(dev.try_clone()?)?;
            self.warnings.push(format!(
                "the write journal on role {role} was formatted on {} (byte {}) and is in use again",
                dev.name(),
                j.base()
            ));
        }
        Ok(())
    }

    /// Roles being rebuilt.
    pub fn rebuilding(&self) -> Vec<u32> {
        (0..self.member_count()).filter(|&r| self.health.state(r) == MemberState::Rebuilding).collect()
    }

    /// Rebuilds every rebuilding role in turn with `maint::rebuild` (over
    /// all volumes; it resumes from the recovery offset and skips regions
    /// never written), persisting its progress as the recovery offset
    /// (the checkpoint), at most `rate` bytes/s. `progress(role, done,
    /// total)` is called as it goes. Each role becomes active when done.
    ///
    /// Errors: from the rebuild (a member failing during it: the states are
    /// persisted by then) and superblock writes.
    pub fn rebuild(
        &mut self,
        rate: Option<u64>,
        progress: &mut dyn FnMut(u32, u64, u64),
    ) -> Result<Vec<crate::maint::RebuildReport>> {
        self.rebuild_until(rate, None, progress)
    }

    /// [`rebuild`](Self::rebuild) that also stops, at its next checkpoint
    /// (every [`CHECKPOINT_BYTES`](crate::maint::CHECKPOINT_BYTES) of
    /// progress, after persisting it), once `stop` is set: for a rebuild in
    /// the background of `uraid serve`, which the next assemble resumes.
    ///
    /// Errors: as `rebuild`, and `Interrupted` when stopped.
    pub fn rebuild_until(
        &mut self,
        rate: Option<u64>,
        stop: Option<&std::sync::atomic::AtomicBool>,
        progress: &mut dyn FnMut(u32, u64, u64),
    ) -> Result<Vec<crate::maint::RebuildReport>> {
        let mut reports = Vec::new();
        for role in self.rebuilding() {
            let meta = self.meta.clone();
            let health = self.health.clone();
            let checkpoint = move |offset: u64| -> Result<()> {
                health.set_recovery(role, offset);
                meta.lock().unwrap_or_else(|e| e.into_inner()).persist(&health)?;
                if stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
                    bail!(Interrupted, "the rebuild of role {role} was stopped at member byte {offset}; it resumes there");
                }
                Ok(())
            };
            let only_dirty = self.meta().sb.slots[role as usize].resync_from_bitmap && self.bitmap.is_some();
            let opts = crate::maint::RebuildOptions { rate, checkpoint: &checkpoint, only_dirty };
            let report = crate::maint::rebuild(&self.volumes, role, &opts, &mut |d, t| progress(role, d, t))?;
            self.health.set_state(role, MemberState::Active);
            self.persist()?;
            reports.push(report);
        }
        Ok(reports)
    }

    /// Scrubs volume `index` (`uraid check` / `uraid repair`) with
    /// `maint::check`. Errors: `InvalidInput` for a volume that does not
    /// exist or is not redundant; from the check.
    pub fn check(
        &self,
        index: usize,
        repair: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<crate::maint::CheckReport> {
        let entries = self.volume_entries();
        let Some(v) = entries.get(index) else {
            bail!(InvalidInput, "array '{}' has no volume {index}", self.name());
        };
        if !is_redundant(v) {
            bail!(InvalidInput, "{} has no redundancy to check", describe_volume(v));
        }
        crate::maint::check(&self.volumes[index], repair, progress)
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Error {
        Error::new(ErrorKind::Superblock, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(level: u32, chunk: u64, member_size: u64) -> VolumeEntry {
        VolumeEntry { name: "v".into(), uuid: [0; 16], level, chunk, member_start: DATA_OFFSET, member_size, cache_mode: 0, cache_size_mib: 0, dirty_limit_mib: 0, journal_uuid: [0; 16], journal_lost: false, journal_region: None }
    }

    #[test]
    fn tolerance_follows_the_layout() {
        let mb = 1 << 20;
        // RAID 10 near-2 over 4: pairs (0,1) and (2,3).
        let v = entry(10, 64 << 10, mb);
        assert!(volume_survives(&v, 4, &[true, false, true, false]));
        assert!(!volume_survives(&v, 4, &[true, true, false, false]));
        // Over 3 members every neighbouring pair shares a chunk.
        assert!(!volume_survives(&v, 3, &[true, false, true]));
        assert!(volume_survives(&v, 3, &[false, true, false]));
        assert!(volume_survives(&entry(1, 4096, mb), 3, &[true, true, false]));
        assert!(!volume_survives(&entry(1, 4096, mb), 2, &[true, true]));
        assert!(volume_survives(&entry(5, 4096, mb), 3, &[false, true, false]));
        assert!(!volume_survives(&entry(5, 4096, mb), 3, &[true, true, false]));
        assert!(volume_survives(&entry(6, 4096, mb), 4, &[true, true, false, false]));
        assert!(!volume_survives(&entry(6, 4096, mb), 5, &[true, true, true, false, false]));
        assert!(!volume_survives(&entry(0, 4096, mb), 2, &[false, true]));
    }

    #[test]
    fn member_sizes_cover_the_asked_capacity() {
        for level in Level::ALL {
            for n in level.min_members()..=6 {
                for cap in [4096u64, 1 << 20, 10 << 20, (7 << 20) + 4096] {
                    let chunk = 64 << 10;
                    let ms = member_size_for("v", level, n, chunk, cap).unwrap();
                    let g = Geometry::new(level, n, chunk, ms).unwrap();
                    assert!(g.capacity() >= cap, "{level} x{n} {cap}: {}", g.capacity());
                    // Not more than a stripe row over.
                    let less = Geometry::new(level, n, chunk, ms - chunk).map(|g| g.capacity()).unwrap_or(0);
                    assert!(ms == chunk || less < cap, "{level} x{n} {cap}: {ms} is more than needed");
                }
            }
        }
        assert!(member_size_for("v", Level::Raid1, 2, 4096, 0).is_err());
    }
}
