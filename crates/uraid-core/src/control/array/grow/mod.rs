//! Reshape: `uraid grow --add` restripes an array's volume onto more
//! members (RAID 0, 5, 6 and 10; `--chunk` to another chunk size, onto
//! more members or the same), crash-safe and resumable, as md's
//! `mdadm --grow --raid-devices` does, stopped or served; a RAID 1 gains a
//! copy on each new member instead (recorded as rebuilding, then
//! rebuilt). `uraid grow --size` grows the last volume into the room past
//! it ([`resize`]).
//!
//! # How
//!
//! The old layout (the old member count) and the new one (all members)
//! are two [`Volume`]s over the same devices, with the same chunk and the
//! same member area. The reshape goes through the new layout's rows (one
//! chunk-sized row on every member, [`Geometry`]'s stripes) from the first:
//! it reads the logical bytes a window of new rows holds from the old
//! layout, writes them through the new one (full stripes: parity from the
//! new data alone), flushes, and only then records in every superblock
//! that the logical bytes below the window's end are in the new layout
//! ([`Reshape::position`], md's `reshape_position`). Logical bytes past
//! the old capacity (the new space) are written as zeros.
//!
//! With `Wo` and `Wn` logical bytes per row before and after (`Wn > Wo`),
//! new row `r` takes the place of old row `r`, which holds logical bytes
//! `[r Wo, (r+1) Wo)`, while the window needs bytes from `r Wn` on: old
//! rows at or past `r`. So nothing is read from a row already written,
//! and a window `[r0, r1)` may be written in place as long as its rows
//! hold no byte the window itself needs (`r1 Wo <= r0 Wn`): a crash in the
//! middle of it leaves its sources intact, and the window is done again.
//! The first rows (`r < Wo / (Wn - Wo)`) cannot meet that: each is md's
//! critical section. Its bytes are written to a backup area first (the
//! tail of the first new member's area, which the new layout writes last),
//! flushed, recorded in the superblocks with their CRC-32C
//! ([`ReshapeBackup`]), and only then written in place; after a crash the
//! row is written again from the backup.
//!
//! The superblocks say version 3 while a reshape is recorded, so an older
//! uraid refuses the array. Assemble (any command that opens the array to
//! write) finishes an interrupted reshape before anything else
//! ([`resume`]); `uraid status` shows it.
//!
//! A served array's reshape ([`Array::grow_live`], [`LiveGrow`]) moves the
//! same windows while users go on through `raid/reshape.rs`, which routes
//! each request by the position and holds those to the window being moved.
//!
//! A member that fails during a reshape (or is not given when an
//! interrupted one resumes) is recorded as faulty, and the reshape goes on
//! degraded where both layouts survive without it ([`window::note_failures`]).
//!
//! A chunk change over the same members ([`plan`]) has as much data per
//! member byte in both layouts: every window overwrites its own old place,
//! so every window goes through a backup, spread over every member that
//! is up in the room past the write-intent bitmap ([`backup::spare_room`],
//! [`backup::write_backup`]; md keeps such a backup in a file or moves the data
//! offset instead).
//!
//! Level changes where no data moves (md's takeovers: RAID 1 <-> 10 over
//! 2, RAID 0 -> 5, 5 -> 6 and 0 -> 10, a RAID 1's new copies) change the
//! superblocks only and rebuild the new roles ([`takeover`]); a served
//! array's pause its users for the switch ([`Array::grow_live`]).
//!
//! Not here yet: other level changes, restriping a parity-last volume,
//! adding members to arrays with several volumes, and starting a reshape
//! of a degraded array (every member must be present and in sync when it
//! starts).
//!
//! # Where
//!
//! - `mod.rs`: [`grow`] (a stopped array), its options and report, the
//!   restripe of a stopped array, the two layouts of a recorded reshape,
//!   and writing a reshape's superblocks ([`persist_all`]).
//! - `plan.rs`: what a grow does ([`plan`]: restripe or takeover), checked
//!   before anything is written, and the reshape's first superblock.
//! - `window.rs`: the mover ([`run`]): the windows, reading the old layout
//!   ahead, writing the new one, recording the position; failures met.
//! - `backup.rs`: md's critical section: the backup area (on the first new
//!   member, or spread over every member for a chunk change), its room.
//! - `resume.rs`: an interrupted reshape finished ([`resume`]), its record
//!   checked first.
//! - `takeover.rs`: the level changes where no data moves, stopped or
//!   served.
//! - `live.rs`: a served array's reshape ([`Array::grow_live`], [`LiveGrow`]).
//! - `resize.rs`: `grow --size` ([`resize`]).

use std::sync::Arc;

use super::{open, write_superblock, Array};
use crate::control::superblock::{self, Slot, State, Superblock};
use crate::io::member::{Member, MemberSpec};
use crate::raid::engine::Shared;
use crate::raid::geometry::{Geometry, Level};
use crate::raid::health::{Health, MemberState};
use crate::{bail, Error, ErrorKind, Result, Volume};

mod backup;
mod live;
mod plan;
mod resize;
mod resume;
mod takeover;
mod window;

use backup::check_backup_rooms;
pub use live::{LiveChange, LiveGrow};
use plan::{plan, reshape_superblock, Change};
pub use resize::{resize, NewSize, ResizePlan, ResizeReport};
pub(super) use resume::resume;
use takeover::{rebuild_copies, takeover};
use window::run;

/// What `grow` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct GrowOptions {
    /// Devices to add as members (`--add`).
    pub add: Vec<MemberSpec>,
    /// Overwrite new devices that hold a filesystem or another array.
    pub force: bool,
    /// Most bytes per second the reshape reads (and as many it writes);
    /// `None`: as fast as the members go.
    pub rate: Option<u64>,
    /// Convert the volume to this RAID level number (`--level`) first;
    /// see [`grow`] for the conversions there are.
    pub level: Option<u32>,
    /// Restripe to this chunk size in bytes (`--chunk`), with `add`.
    pub chunk: Option<u64>,
}

/// What a reshape did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrowReport {
    /// The array's name.
    pub array: String,
    /// The volume's RAID level number.
    pub level: u32,
    /// Members before and after.
    pub members: (u32, u32),
    /// Volumes restriped or converted (more than 1: a Matrix array).
    pub volumes: u32,
    /// The volume's usable bytes before and after (the sum over the
    /// volumes of a Matrix array).
    pub capacity: (u64, u64),
    /// Where this run started: logical bytes already in the new layout
    /// (0, or the position of an interrupted reshape).
    pub started_at: u64,
    /// Bytes read from the members (data of the old layout and backups).
    pub bytes_read: u64,
    /// Bytes written to the members (the new layout with its parity, and
    /// backups).
    pub bytes_written: u64,
    /// Rows that went through the backup area (md's critical section).
    pub backed_up_rows: u64,
    /// Seconds the reshape took.
    pub seconds: f64,
}

impl GrowReport {
    /// The report of a change in which no data moved (a takeover): `level`
    /// over `members` (before, after), the volume's `capacity` unchanged.
    fn unmoved(array: String, level: u32, members: (u32, u32), capacity: u64, seconds: f64) -> GrowReport {
        GrowReport {
            array,
            level,
            members,
            volumes: 1,
            capacity: (capacity, capacity),
            started_at: 0,
            bytes_read: 0,
            bytes_written: 0,
            backed_up_rows: 0,
            seconds,
        }
    }

    /// Adds the report of the next volume's restripe (a Matrix array):
    /// its bytes moved, capacities and time.
    fn add_volume(&mut self, next: &GrowReport) {
        self.volumes += 1;
        self.capacity = (self.capacity.0 + next.capacity.0, self.capacity.1 + next.capacity.1);
        self.bytes_read += next.bytes_read;
        self.bytes_written += next.bytes_written;
        self.backed_up_rows += next.backed_up_rows;
        self.seconds += next.seconds;
    }
}

/// Changes the stopped array of `specs` as `opts` asks (see `plan` in this module): adds
/// `opts.add` and restripes its volume onto every member, converts its
/// level, or restripes it to another chunk; `progress(done, total)` is
/// called after each window, in logical bytes of the new layout (or of
/// the rebuild of new roles).
///
/// Errors, before anything is written: as [`open`]; `Busy` when a process
/// holds a member (a served array: stop it first); `Unsupported` for what
/// is not here yet (several volumes, a journal on the volume); `Membership` for an array not stopped cleanly or not in sync;
/// `InvalidInput` / `WouldDestroy` / `TooSmall` for a new device that is a
/// member, holds something (without `force`) or is too small, or members
/// too small for the backup area; as `plan`. During the reshape, an I/O error stops
/// it where it is: the superblocks say how far it got, and the next
/// assemble goes on from there.
pub fn grow(specs: &[MemberSpec], opts: &GrowOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<GrowReport> {
    if opts.add.is_empty() && opts.level.is_none() && opts.chunk.is_none() {
        bail!(InvalidInput, "grow needs --add DEVICE... (the devices that become members), --level L, --chunk SIZE or --size SIZE");
    }
    let a = open(specs)?;
    let sb = a.superblock();
    let name = sb.name.clone();
    if let Some(v) = sb.volumes.iter().find(|v| v.cache_mode == crate::cache::CacheMode::Journal.to_u8()) {
        bail!(
            Unsupported,
            "volume '{}' keeps a write journal; set its cache to off or writeback first (uraid config {name} --cache off), \
             grow, then set the journal again. Nothing was written",
            v.name
        );
    }
    if sb.state != State::Clean {
        bail!(
            Membership,
            "array '{name}' was not stopped cleanly; assemble it (which resyncs it) and stop it, then grow. Nothing was written"
        );
    }
    if let Some((r, s)) = sb.roles().iter().enumerate().find(|(_, s)| s.state != MemberState::Active) {
        bail!(
            Membership,
            "role {r} of array '{name}' is {}; a reshape needs every member present and in sync. Rebuild it first. Nothing was written",
            s.state.name()
        );
    }
    match plan(&sb, opts)? {
        Change::Restripe(old_g, new_g) => {
            let added = open_added(&a, opts)?;
            restripe(a, &sb, added, &old_g, &new_g, opts, progress)
        }
        Change::Takeover(t) => {
            let t0 = crate::clock::now();
            let added = open_added(&a, opts)?;
            let (devs, _, mut new_sb) = takeover(&a, &sb, &t, &added)?;
            a.release();
            persist_all(&devs, &mut new_sb)?;
            drop(devs);
            let (n, to) = (sb.member_count, new_sb.volumes[0].level);
            if added.is_empty() {
                let v = &new_sb.volumes[0];
                let capacity = Geometry::new(Level::from_number(to)?, n as usize, v.chunk, v.member_size)?.capacity();
                return Ok(GrowReport::unmoved(name, to, (n, n), capacity, 0.0));
            }
            rebuild_copies(specs, added, &name, to, n, opts, progress, t0)
        }
    }
}

/// Restripes the volume of the opened, checked, stopped array `a`
/// (superblock `sb`) from layout `old_g` onto `added` in layout `new_g`:
/// the backup room is checked, the reshape recorded in every superblock,
/// then run to its end (see the module's documentation).
fn restripe(
    a: Array,
    sb: &Superblock,
    added: Vec<NewMember>,
    old_g: &Geometry,
    new_g: &Geometry,
    opts: &GrowOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<GrowReport> {
    let mut new_sb = reshape_superblock(sb, added.len(), old_g, new_g, false);
    check_backup_rooms(sb, &new_sb, old_g, new_g)?;
    let devs = slot_order(&a, sb.member_count as usize, &added)?;
    a.release();
    drop(added);
    persist_all(&devs, &mut new_sb)?;
    run_all(&devs, &mut new_sb, opts.rate, progress).map_err(stopped)
}

/// Runs the reshape `sb` records over `devs` (every device in slot order)
/// to its end: the volume it is at, then each volume after it (a Matrix
/// array). The report sums the volumes' bytes and capacities. Errors: as
/// [`run`].
fn run_all(devs: &[Member], sb: &mut Superblock, rate: Option<u64>, progress: &mut dyn FnMut(u64, u64)) -> Result<GrowReport> {
    let mut total: Option<GrowReport> = None;
    while sb.reshape.is_some() {
        let (old_vol, new_vol, health) = layouts(devs, sb)?;
        let rep = run(devs, sb, &old_vol, &new_vol, [&health[0], &health[1]], rate, progress, None)?;
        match total.as_mut() {
            None => total = Some(rep),
            Some(t) => t.add_volume(&rep),
        }
    }
    total.ok_or_else(|| Error::new(ErrorKind::InvalidInput, "no reshape is recorded"))
}

/// The old layout, the new one, and their member states.
type Layouts = (Arc<Volume>, Arc<Volume>, [Arc<Health>; 2]);

/// The two layouts of the reshape `sb` records, over `devs` (slot order):
/// the old member count's and the new one's, each with member states of
/// its own (the roles the superblock says are faulty or missing are down
/// in both), no bitmap.
fn layouts(devs: &[Member], sb: &Superblock) -> Result<Layouts> {
    let r = sb.reshape.expect("a reshape is recorded");
    let v = &sb.volumes[r.volume as usize];
    let (old_n, n) = (r.old_members as usize, sb.member_count as usize);
    let roles = |count: usize| -> Result<Arc<Vec<Member>>> { Ok(Arc::new(devs[..count].iter().map(Member::try_clone).collect::<Result<_>>()?)) };
    let (old_g, new_g) = record_geometries(sb)?;
    let health = [Arc::new(Health::new(old_n)), Arc::new(Health::new(n))];
    for (role, slot) in sb.roles().iter().enumerate() {
        if matches!(slot.state, MemberState::Faulty | MemberState::Missing) {
            for h in &health {
                if role < h.members() {
                    h.set_state(role as u32, MemberState::Faulty);
                }
            }
        }
    }
    let shared = |h: &Arc<Health>| Shared { health: h.clone(), bitmap: None };
    let old_vol = Volume::with_state(roles(old_n)?, old_g, v.member_start, shared(&health[0]))?;
    let new_vol = Volume::with_state(roles(n)?, new_g, v.member_start, shared(&health[1]))?;
    Ok((old_vol, new_vol, health))
}

/// The old and the new layout of the reshape `sb` records: the old member
/// count, level and chunk (the record's, else the volume's), and the
/// volume table's. Errors: as [`Geometry::new`].
fn record_geometries(sb: &Superblock) -> Result<(Geometry, Geometry)> {
    let r = sb.reshape.expect("a reshape is recorded");
    let v = &sb.volumes[r.volume as usize];
    let variant = if r.old_parity_last { crate::raid::layout::Variant::ParityLast } else { crate::raid::layout::Variant::Standard };
    let old_g = Geometry::new(Level::from_number(r.old_level.unwrap_or(v.level))?, r.old_members as usize, r.old_chunk.unwrap_or(v.chunk), v.member_size)?
        .with_variant(variant)?;
    let new_g = Geometry::new(Level::from_number(v.level)?, sb.member_count as usize, v.chunk, v.member_size)?;
    Ok((old_g, new_g))
}

/// A device to become a member: how it was named, and opened.
type NewMember = (MemberSpec, Member);

/// The devices of `opts.add` opened and checked to become members of
/// `a`. Errors: `InvalidInput` for a device given twice; as
/// [`Array::open_new`] for each device.
fn open_added(a: &Array, opts: &GrowOptions) -> Result<Vec<NewMember>> {
    let mut added: Vec<NewMember> = Vec::with_capacity(opts.add.len());
    for spec in &opts.add {
        if added.iter().any(|(s, _)| s == spec) {
            bail!(InvalidInput, "{spec} is given twice");
        }
        added.push((spec.clone(), a.open_new(spec, opts.force)?));
    }
    Ok(added)
}

/// An error of a reshape under way, saying that it can go on.
fn stopped(e: Error) -> Error {
    Error::new(
        e.kind(),
        format!("{e}. The reshape stopped there: the superblocks record how far it got, and the next assemble goes on from there"),
    )
}

/// `sb` with `k` new roles after its roles (before the spares), each with a
/// new UUID, in `state`, with `recovery_offset`.
fn with_new_roles(sb: &Superblock, k: usize, state: MemberState, recovery_offset: Option<u64>) -> Superblock {
    let mut new_sb = sb.clone();
    let n = sb.member_count as usize;
    new_sb.slots.truncate(n);
    new_sb.slots.extend((0..k).map(|_| Slot { uuid: superblock::new_uuid(), state, resync_from_bitmap: false, recovery_offset }));
    new_sb.slots.extend(sb.spares().iter().copied());
    new_sb.member_count = (n + k) as u32;
    new_sb
}

/// The devices of `a` (whose `n` roles are all held) and `added`, in the
/// slot order of the grown array: the roles, the new roles, the spares.
fn slot_order(a: &Array, n: usize, added: &[(MemberSpec, Member)]) -> Result<Vec<Member>> {
    let m = a.meta();
    let roles = m.devices.iter().take(n).map(|d| d.as_ref().expect("every role is active, so held"));
    let spares = m.devices.iter().skip(n).flatten();
    roles.chain(added.iter().map(|(_, d)| d)).chain(spares).map(Member::try_clone).collect()
}

/// Writes `sb` (event counter + 1) to every device of `devs` (given in
/// slot order), then flushes them all. The last slots are written first:
/// when the reshape is first recorded, the new members hold it before the
/// old ones do, so a crash in between leaves no new member without a
/// superblock (the freshest superblock, on a new member, speaks).
fn persist_all(devs: &[Member], sb: &mut Superblock) -> Result<()> {
    debug_assert_eq!(devs.len(), sb.slots.len(), "every device, in slot order");
    sb.next_event()?;
    // A role that failed (or is missing) keeps its old superblock.
    let up = |slot: usize| !matches!(sb.slots[slot].state, MemberState::Faulty | MemberState::Missing);
    for (slot, m) in devs.iter().enumerate().rev().filter(|(slot, _)| up(*slot)) {
        let mut s = sb.clone();
        s.slot = slot as u32;
        s.member_uuid = sb.slots[slot].uuid;
        write_superblock(m, &s)?;
    }
    for (_, m) in devs.iter().enumerate().filter(|(slot, _)| up(*slot)) {
        m.file().sync_data().map_err(|e| Error::io("cannot flush the superblock of", std::path::Path::new(m.name()), e))?;
    }
    Ok(())
}
