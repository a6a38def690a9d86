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

use crate::raid::bitmap::{Bitmap, BitmapDaemon};
use crate::raid::engine::Shared;
use crate::raid::geometry::{check_chunk, Geometry, Level, DEFAULT_CHUNK, MAX_MEMBERS};
use crate::raid::health::{Health, MemberState};
use crate::io::member::{check_distinct, Limits, MemSpec, Member, MemberSpec, OpenMode};
use crate::control::signature::{detect, PROBE_LEN};
use crate::control::superblock::{
    self, fmt_uuid, DecodeError, Slot, State, Superblock, VolumeEntry, DATA_OFFSET, MAX_SPARES, MAX_VOLUMES, SB_SIZE,
};
use crate::units::fmt_size;
use crate::{bail, Error, ErrorKind, IoBuf, Result, Volume};

mod assemble;
mod config;
mod create;
mod grow;
mod membership;
mod status;

pub use assemble::*;
pub use config::*;
pub use create::*;
pub use membership::Replacement;
pub use grow::{grow, resize, GrowOptions, GrowReport, LiveChange, LiveGrow, NewSize, ResizePlan, ResizeReport};
pub use status::*;

/// Opens a member of an array (or one to become one): [`Member::open`],
/// with the fault plans of the `URAID_FAILPOINT_*` variables stacked over
/// it when the `failpoints` feature is on (see [`crate::io::fault::failpoints`]).
fn open_member(spec: &MemberSpec, mode: OpenMode) -> Result<Member> {
    let mut m = Member::open(spec, mode)?;
    crate::io::fault::failpoints(&mut m);
    Ok(m)
}

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
            self.sb.next_event()?;
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
    /// Devices given that are no longer members (removed or replaced),
    /// left out of an array opened with `inspect`.
    pub(super) stale: Vec<String>,
    /// The journal devices given (journal cache mode), each named by a
    /// volume entry's journal UUID.
    journals: Vec<Arc<crate::cache::journal::Journal>>,
    /// The journals were replayed (by [`activate`](Self::activate), or the
    /// array is new): their records are all in the caches now.
    replayed: bool,
    /// A reshape of the served array is under way ([`Array::grow_live`]):
    /// this array writes no superblock; the reshape's are the truth.
    frozen: bool,
    /// Faulty devices whose role a spare took over: still listed (md's
    /// `(F)`, ZFS's FAULTED) until [`remove`](Self::remove)d, so that the
    /// administrator knows which drive to pull. Shared with
    /// [`StatusSource`].
    released: Arc<Mutex<Vec<Released>>>,
}

/// A faulty device released from its role when a spare took it over,
/// listed as faulty until it is removed.
#[derive(Debug, Clone)]
pub(super) struct Released {
    /// The role it held.
    pub(super) role: u32,
    /// The device as named when it was opened.
    pub(super) name: String,
    /// Its member UUID.
    pub(super) uuid: [u8; 16],
    /// How it was given, to find it again by path.
    pub(super) spec: Option<MemberSpec>,
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
    specs.iter().map(|s| open_member(s, OpenMode { write, exclusive })).collect()
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
    open_member(
        &MemberSpec::Mem(MemSpec { size, limits: Limits::default() }),
        OpenMode { write: true, exclusive: false },
    )
}

/// Looks at one member without taking it: its superblock, or what else is
/// there. Errors: `Io` when it cannot be opened or read.
pub fn examine(spec: &MemberSpec) -> Result<Examination> {
    let m = open_member(spec, OpenMode { write: false, exclusive: false })?;
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
    /// (a superblock) or a journal ([`crate::cache::journal`]).
    pub fn is_array_device(&self) -> bool {
        match self {
            Examination::Member(_) => true,
            Examination::Foreign(sig) => *sig == crate::control::signature::JOURNAL,
            _ => false,
        }
    }
}

/// True when `specs` are the devices of an array, as the commands that
/// assemble one take them: at least one carries a uraid superblock and
/// every other one does or is a journal ([`crate::cache::journal`]). A device
/// that cannot be read counts as neither.
pub fn are_array_devices(specs: &[MemberSpec]) -> bool {
    let found: Vec<Option<Examination>> = specs.iter().map(|s| examine(s).ok()).collect();
    found.iter().any(|e| matches!(e, Some(Examination::Member(_)))) && found.iter().all(|e| e.as_ref().is_some_and(Examination::is_array_device))
}

/// Roles that do not hold valid data everywhere (faulty, missing,
/// rebuilding, spare), as a flag per role.
fn down_roles(health: &Health) -> Vec<bool> {
    health.states().into_iter().map(|s| s != MemberState::Active).collect()
}

/// True when volume `v` over `n` members still has every logical byte with
/// the roles flagged in `down` unavailable: the level's rule
/// ([`Geometry::survival`]) on the volume's layout, so RAID 10's
/// neighbouring pairs count. False for an entry this build cannot lay out.
fn volume_survives(v: &VolumeEntry, n: usize, down: &[bool]) -> bool {
    let Ok(level) = Level::from_number(v.level) else { return false };
    let Ok(g) = Geometry::new(level, n, v.chunk, v.member_size) else { return false };
    g.survival(crate::raid::level::mask_of(down)).survives
}

/// Indexes of the volumes of `sb` that lose data with the roles in `down`
/// unavailable.
fn lost_volumes(sb: &Superblock, down: &[bool]) -> Vec<usize> {
    (0..sb.volumes.len()).filter(|&i| !volume_survives(&sb.volumes[i], sb.member_count as usize, down)).collect()
}

/// The descriptor of `v`'s level; `None` for a number this build does not
/// know.
fn level_of(v: &VolumeEntry) -> Option<&'static crate::raid::level::Descriptor> {
    Level::from_number(v.level).ok().map(Level::desc)
}

fn is_redundant(v: &VolumeEntry) -> bool {
    v.redundant()
}

fn has_parity(v: &VolumeEntry) -> bool {
    level_of(v).is_some_and(|d| d.parity > 0)
}

fn level_tolerance(v: &VolumeEntry, n: usize) -> usize {
    level_of(v).map_or(0, |d| d.fault_tolerance(n))
}

fn describe_volume(v: &VolumeEntry) -> String {
    format!("volume '{}' (RAID {})", v.name, v.level)
}

impl Array {
    fn new(
        meta: Meta,
        health: Arc<Health>,
        bitmap: Option<Arc<Bitmap>>,
        warnings: Vec<String>,
        journals: Vec<Arc<crate::cache::journal::Journal>>,
        inspect: bool,
    ) -> Result<Array> {
        let meta = Arc::new(Mutex::new(meta));
        let hook_meta = Arc::downgrade(&meta);
        health.set_on_change(move |h, _role| match hook_meta.upgrade() {
            Some(m) => m.lock().unwrap_or_else(|e| e.into_inner()).persist(h),
            None => Ok(()),
        });
        let mut a = Array { meta, health, bitmap, daemon: None, volumes: Vec::new(), warnings, inspect, journals, replayed: false, stale: Vec::new(), frozen: false, released: Arc::new(Mutex::new(Vec::new())) };
        for j in &a.journals {
            a.watch_journal(j);
        }
        a.build_volumes()?;
        Ok(a)
    }

    /// A journal device of its own that a write fails is lost for good:
    /// once the cache has written back and flushed what it held (and
    /// before anything written after the loss is acknowledged: see
    /// [`crate::cache::journal::Journal::drained_after_loss`]), its volume entry
    /// says so (`journal_lost`, persisted then), so that no later assemble
    /// replays its records, stale from then on (the volume's writes go to
    /// the members without it). A journal on a member is lost with its
    /// member, which [`Health`] records.
    fn watch_journal(&self, j: &Arc<crate::cache::journal::Journal>) {
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
        // Volumes made again over new members keep their caches (and the
        // dirty data in them).
        let old = std::mem::take(&mut self.volumes);
        let n = self.meta().sb.volumes.len();
        self.volumes = (0..n).map(|i| self.make_volume(i, old.get(i))).collect::<Result<_>>()?;
        Ok(())
    }

    /// Volume `i` of the volume table over the current members, with the
    /// cache of `old` (adopted, dirty data and all) or else the one its
    /// entry says.
    fn make_volume(&self, i: usize, old: Option<&Arc<Volume>>) -> Result<Arc<Volume>> {
        let (roles, v) = {
            let m = self.meta();
            (m.roles.clone(), m.sb.volumes[i].clone())
        };
        let shared = Shared { health: self.health.clone(), bitmap: self.bitmap.clone() };
        let variant = crate::raid::layout::Variant::from_u8(v.layout).unwrap_or_default();
        let g = Geometry::new(Level::from_number(v.level)?, roles.len(), v.chunk, v.member_size)?.with_variant(variant)?;
        let vol = Volume::with_state(roles, g, v.member_start, shared)?;
        let cfg = v.cache_config()?;
        match old.and_then(|o| o.cache().map(|c| (o, c.clone()))) {
            Some((o, c)) => vol.adopt_cache(c, o)?,
            None if cfg.mode == crate::cache::CacheMode::Journal => match self.journal_of(&v) {
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
    }

    /// Makes volume `i` anew over the same members with a fresh cache of
    /// the mode its entry says now (nothing of the old cache is kept): the
    /// second half of a cache mode change on a served array. Before it,
    /// [`set_cache`](Self::set_cache); the users of the old volume paused
    /// and its cache closed ([`Volume::close_cache`], which writes back
    /// what it holds); after it, the users take [`volumes`](Self::volumes)`[i]`.
    ///
    /// Errors: `InvalidInput` for no such volume; from the cache's setup.
    pub fn renew_volume(&mut self, i: usize) -> Result<()> {
        if i >= self.volumes.len() {
            bail!(InvalidInput, "array '{}' has no volume {i}", self.name());
        }
        self.volumes[i] = self.make_volume(i, None)?;
        Ok(())
    }

    /// Replays the journal of volume `i` if it has one (its records not yet
    /// retired: acknowledged writes and whole lines written when the array
    /// stopped) onto the members, then empties it; a warning says how much.
    fn replay_journal(&mut self, i: usize) -> Result<()> {
        let vol = &self.volumes[i];
        if let Some(j) = vol.cache().and_then(|c| c.journal()) {
            let (n, bytes) = j.replay(vol.raid(), crate::cache::Cache::line_for(vol))?;
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
    fn journal_of(&self, v: &VolumeEntry) -> Option<Arc<crate::cache::journal::Journal>> {
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

    /// Refuses a change while a reshape of the served array is under way.
    fn not_frozen(&self) -> Result<()> {
        if self.frozen {
            bail!(Membership, "array '{}' is being reshaped; its membership and settings cannot change until the reshape ends. Nothing was written", self.name());
        }
        Ok(())
    }

    fn persist(&self) -> Result<()> {
        if self.frozen {
            bail!(Membership, "array '{}' is being reshaped; its membership cannot change until the reshape ends", self.name());
        }
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
    /// device, compared by device and inode), if it is part of the array;
    /// a faulty device a spare took over (see [`ArrayStatus::members`])
    /// counts, numbered after the spares, so that `remove` finds it.
    pub fn slot_of(&self, spec: &MemberSpec) -> Option<u32> {
        if let Some(s) = self.held_slot_of(spec) {
            return Some(s);
        }
        let id = spec.identity().ok()?;
        let total = self.meta().sb.slots.len();
        let released = self.released.lock().unwrap_or_else(|e| e.into_inner());
        released
            .iter()
            .position(|r| r.spec.as_ref().and_then(|s| s.identity().ok()).as_ref() == Some(&id))
            .map(|i| (total + i) as u32)
    }

    /// The slot (role or spare) whose device `spec` names, if any.
    pub(super) fn held_slot_of(&self, spec: &MemberSpec) -> Option<u32> {
        let id = spec.identity().ok()?;
        let m = self.meta();
        m.specs.iter().position(|s| s.as_ref().and_then(|s| s.identity().ok()).as_ref() == Some(&id)).map(|s| s as u32)
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
                    let (bytes, report) = crate::control::maint::resync_report(vol, &mine)?;
                    let what = match &self.bitmap {
                        Some(_) => "the regions its write-intent bitmap marked dirty were resynced",
                        None => "it has no write-intent bitmap, so all of it was resynced",
                    };
                    self.warnings.push(format!(
                        "{} was not stopped cleanly: {what} ({} of each member): {} stripe(s) compared, {} of them \
                         disagreed and were rewritten",
                        describe_volume(v),
                        fmt_size(bytes),
                        report.stripes_checked,
                        report.mismatches
                    ));
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

    /// For a stopped array that only a rebuild writes (no users: `uraid
    /// rebuild`, the new members of `uraid grow`): [`activate`](Self::activate),
    /// then the superblocks say clean again (event counter + 1), as md
    /// marks an array clean while no write of its users is in flight. A
    /// crash during the rebuild then leaves nothing to resync: the rebuild
    /// writes only the members it rebuilds, past their recorded recovery
    /// offsets, and goes on from there. Without this, a degraded parity
    /// array left active by such a crash is refused at the next assemble
    /// (the write hole, which no user write opened).
    ///
    /// Errors: as [`activate`](Self::activate); `Io` from the superblock writes.
    pub fn activate_for_rebuild(&mut self) -> Result<()> {
        self.activate()?;
        self.meta().sb.state = State::Clean;
        self.persist()
    }

    /// Lets go of the members without writing anything.
    pub fn release(self) {}

    /// Flushes the members, stops the bitmap daemon, clears the bitmap,
    /// marks the array clean in every superblock (event counter + 1) and
    /// releases the members. Writes through other handles on the volumes
    /// must have completed. Errors: `Io` from the flush or the superblock
    /// writes, and `Io` when an engine thread was given up with writes in
    /// flight ([`Health::unclean`](crate::raid::health::Health::unclean)): the
    /// members are flushed but the array is left unclean, for a resync.
    pub fn stop(mut self) -> Result<()> {
        if self.frozen {
            // A reshape took over (LiveGrow::stop records where it is).
            return Ok(());
        }
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
    ) -> Result<Vec<crate::control::maint::RebuildReport>> {
        self.rebuild_until(rate, None, progress)
    }

    /// [`rebuild`](Self::rebuild) that also stops, at its next checkpoint
    /// (every [`CHECKPOINT_BYTES`](crate::control::maint::CHECKPOINT_BYTES) of
    /// progress, after persisting it), once `stop` is set: for a rebuild in
    /// the background of `uraid serve`, which the next assemble resumes.
    ///
    /// Errors: as `rebuild`, and `Interrupted` when stopped.
    pub fn rebuild_until(
        &mut self,
        rate: Option<u64>,
        stop: Option<&std::sync::atomic::AtomicBool>,
        progress: &mut dyn FnMut(u32, u64, u64),
    ) -> Result<Vec<crate::control::maint::RebuildReport>> {
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
            let opts = crate::control::maint::RebuildOptions { rate, checkpoint: &checkpoint, only_dirty };
            let report = crate::control::maint::rebuild(&self.volumes, role, &opts, &mut |d, t| progress(role, d, t))?;
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
    ) -> Result<crate::control::maint::CheckReport> {
        let mut report = crate::control::maint::CheckReport::default();
        self.check_part(index, repair, &Default::default(), &mut report, progress)?;
        Ok(report)
    }

    /// [`check`](Self::check) that resumes, limits its rate and stops on a
    /// flag: see [`maint::check_part`](crate::control::maint::check_part)
    /// (returns where it stopped, `None` at the end). Same errors.
    pub fn check_part(
        &self,
        index: usize,
        repair: bool,
        opts: &crate::control::maint::CheckOptions<'_>,
        report: &mut crate::control::maint::CheckReport,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Option<u64>> {
        let entries = self.volume_entries();
        let Some(v) = entries.get(index) else {
            bail!(InvalidInput, "array '{}' has no volume {index}", self.name());
        };
        if !is_redundant(v) {
            bail!(InvalidInput, "{} has no redundancy to check", describe_volume(v));
        }
        crate::control::maint::check_part(&self.volumes[index], repair, opts, report, progress)
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
        VolumeEntry { name: "v".into(), uuid: [0; 16], level, chunk, member_start: DATA_OFFSET, member_size, cache_mode: 0, cache_size_mib: 0, dirty_limit_mib: 0, journal_uuid: [0; 16], journal_lost: false, journal_region: None, layout: 0 }
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
