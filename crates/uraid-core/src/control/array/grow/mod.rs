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
//! degraded where both layouts survive without it ([`note_failures`]).
//!
//! A chunk change over the same members ([`plan`]) has as much data per
//! member byte in both layouts: every window overwrites its own old place,
//! so every window goes through a backup, spread over every member that
//! is up in the room past the write-intent bitmap ([`spare_room`],
//! [`write_backup`]; md keeps such a backup in a file or moves the data
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

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::control::superblock::{Reshape, ReshapeBackup};
use crate::raid::reshape::ReshapeState;
use crate::{BlockQueue, Request};

/// Windows read ahead of the one being written (besides the one being
/// read), so that the reads go on while a window is flushed and recorded.
const READ_AHEAD: usize = 2;

/// Most logical bytes one window of the reshape moves.
const WINDOW: u64 = 64 << 20;

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

/// Requests in flight when a window is read or written: pieces of about
/// [`PIECE`] bytes, whole rows (full stripes) each.
const DEPTH: usize = 16;
/// About how many bytes each request of a window moves.
const PIECE: u64 = 1 << 20;

/// Reads (`write` false) or writes the logical bytes `[pos, pos +
/// data.len())` of `vol` from or into `data`, in pieces of whole rows of
/// `row` bytes, [`DEPTH`] at a time (one request would keep too few member
/// I/Os in flight to use the drives' bandwidth). Errors: the first failed
/// request's.
fn move_window(vol: &Arc<Volume>, write: bool, pos: u64, data: &mut [u8], row: u64) -> Result<()> {
    let piece = PIECE.div_ceil(row) * row;
    let mut q = vol.queue(DEPTH)?;
    let mut next = 0u64;
    let total = data.len() as u64;
    let mut out = Vec::with_capacity(DEPTH);
    let mut first_err = None;
    while next < total || q.in_flight() > 0 {
        while next < total && q.has_room() && first_err.is_none() {
            let len = piece.min(total - next) as usize;
            let mut buf = IoBuf::new(len);
            let req = if write {
                buf.copy_from_slice(&data[next as usize..next as usize + len]);
                Request::write(pos + next, len, buf, next)
            } else {
                Request::read(pos + next, len, buf, next)
            };
            if let Err(r) = q.push(req) {
                first_err.get_or_insert(r.error);
                break;
            }
            next += len as u64;
        }
        if q.in_flight() == 0 {
            break;
        }
        out.clear();
        q.wait(1, &mut out);
        for c in out.drain(..) {
            match (c.result, c.buf) {
                (Ok(_), Some(b)) if !write => data[c.tag as usize..c.tag as usize + b.len()].copy_from_slice(&b),
                (Ok(_), _) => {}
                (Err(e), _) => {
                    first_err.get_or_insert(e);
                }
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A unit of layout `g`: the fewest chunk-sized rows (on every member)
/// that hold whole chunks of data, as (logical bytes, member bytes): one
/// row, or two for RAID 10 over an odd member count (whose copy pairs
/// straddle rows).
fn unit(g: &Geometry) -> (u64, u64) {
    let rows = g.level().desc().unit_rows(g.members());
    let data = Geometry::new(g.level(), g.members(), g.chunk(), rows * g.chunk()).map_or(0, |u| u.capacity());
    (data, rows * g.chunk())
}

/// Most new units one critical window spans (a smaller chunk than the old
/// one: the units that together overwrite whole old rows).
const MAX_CRITICAL_UNITS: u64 = 1024;

/// The windows of a reshape from layout `old` to `new` (the new one holds
/// more data per member byte, or as much: a chunk change over the same
/// members) from logical byte `start` (a multiple of the new unit's data)
/// to the new capacity, in order: (logical start, length, through the
/// backup), each at most `max_units` new units when written in place.
///
/// New unit `u` is written over member bytes `[u un, (u+1) un)`, where the
/// old layout keeps logical bytes from `floor(pos / wo) uo` on: the units
/// below that may be written in place, their old contents being moved
/// already. When none may (the first units: md's critical section), the
/// window is the fewest units whose overwritten old units hold nothing
/// past the window's end, and it goes through the backup area. With as
/// much data per member byte in both layouts, every window is such a one;
/// with `spread` (the logical bytes the backup area holds), each is then
/// as many of those as the backup holds.
fn windows(old: &Geometry, new: &Geometry, start: u64, max_units: u64, spread: Option<u64>) -> impl Iterator<Item = (u64, u64, bool)> {
    let ((wo, uo), (wn, un)) = (unit(old), unit(new));
    let new_cap = new.capacity();
    let mut pos = start;
    std::iter::from_fn(move || {
        if pos >= new_cap {
            return None;
        }
        let first = pos / wn;
        let safe = (pos / wo * uo / un).saturating_sub(first);
        let (units, critical) = if safe > 0 {
            (safe.min(max_units), false)
        } else {
            // The old units that writing `k` new units overwrites (in part)
            // hold logical bytes up to `((end - 1) / uo + 1) wo`.
            let mut k = 1;
            while (((first + k) * un - 1) / uo + 1) * wo > pos + k * wn && k < MAX_CRITICAL_UNITS {
                k += 1;
            }
            let times = spread.map_or(1, |room| (room / (k * wn)).clamp(1, max_units.div_ceil(k)));
            (k * times, true)
        };
        let w = (pos, (units * wn).min(new_cap - pos), critical);
        pos += w.1;
        Some(w)
    })
}

/// The backup room of a chunk change over the same members: on every
/// member, the end of the bitmap area that the bitmap does not use, as
/// (absolute offset, bytes), 4 KiB aligned.
fn spare_room(sb: &Superblock) -> (u64, u64) {
    let start = crate::raid::bitmap::area_end(sb.bitmap_region, sb.data_end()).next_multiple_of(4096);
    let end = sb.volumes.iter().map(|v| v.member_start).min().unwrap_or(crate::raid::DATA_OFFSET).min(crate::raid::DATA_OFFSET);
    (start, end.saturating_sub(start) / 4096 * 4096)
}

/// The role of a [`ReshapeBackup`] spread over every role that is up (a
/// chunk change over the same members: [`spread_backup`]).
const SPREAD: u32 = u32::MAX;

/// For the reshape `sb` records, when it keeps the members it had (a
/// chunk change): the roles that hold a piece of a backup (those up, in
/// role order) and the logical bytes the backup holds at most (a piece of
/// [`spare_room`] on each); `None` when the reshape adds members (the
/// backup is then on the first new member).
fn spread_backup(sb: &Superblock) -> Option<(Vec<u32>, u64)> {
    let r = sb.reshape.as_ref()?;
    if r.old_members != sb.member_count {
        return None;
    }
    let down = down_roles_of(sb);
    let holders: Vec<u32> = (0..sb.member_count).filter(|&role| !down[role as usize]).collect();
    let room = spare_room(sb).1 * holders.len() as u64;
    Some((holders, room))
}

/// The piece of a spread backup of `len` bytes over `holders` roles:
/// bytes each holds (4 KiB multiples; the last holds the rest).
fn spread_piece(len: u64, holders: usize) -> u64 {
    len.div_ceil(holders.max(1) as u64).next_multiple_of(4096)
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

/// What a `grow` of a one-volume array does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// The volume is restriped from the first layout to the second (more
    /// members, perhaps another chunk, or RAID 1 over 2 read as RAID 5 or
    /// 10 over 2), window by window through the reshape record.
    Restripe(Geometry, Geometry),
    /// No data moves: the superblocks change, and new roles (if any) are
    /// rebuilt.
    Takeover(Takeover),
}

/// A change of the volume in which no data moves (md's level takeovers,
/// and a RAID 1's new copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takeover {
    /// RAID 1 <-> 10 over 2 members: the same bytes at the same places;
    /// only the level in the volume table changes (to this one).
    Relabel(u32),
    /// The new devices become roles after the others, rebuilt from their
    /// start, and the volume becomes this level (RAID 1's new copies: 1;
    /// RAID 0 -> 5 and RAID 5 -> 6 with the new parity on the new member:
    /// 5 or 6, parity-last).
    Rebuilt(u32),
    /// RAID 0 over `n` members to RAID 10 over `2n`: member `i` becomes
    /// role `2i`, new member `i` role `2i + 1` (its copy, rebuilt).
    Mirror,
}

/// What `opts` asks of the volume of `sb` (one volume), checked before
/// anything is written:
///
/// - `add` alone: RAID 0, 5, 6 and 10 are restriped onto the new members
///   (with `chunk`: to that chunk size too); a RAID 1 gains copies.
/// - `level`, as md's takeovers where no byte has to move:
///   - RAID 1 over 2 members and RAID 10 over 2 members store the same
///     bytes at the same places (RAID 10's two copies of chunk `c` are row
///     `c` of both members): only the volume table changes. With new
///     members (`add`), RAID 1 over 2 is restriped as RAID 5 or 10 over
///     them all, read as the RAID 5 or 10 over 2 it equals (RAID 5's parity
///     of one data chunk is its copy; md's raid1 -> raid5 takeover).
///   - RAID 0 over `n` members becomes RAID 10 over `2n` with `n` new
///     members: member `i` becomes role `2i`, whose chunks RAID 10 keeps
///     where RAID 0 kept them, and new member `i` role `2i + 1`, its copy,
///     rebuilt (md's raid0 -> raid10 takeover).
///   - RAID 0 over `n` becomes RAID 5 over `n + 1`, and RAID 5 over `n`
///     RAID 6 over `n + 1`, with one new member that keeps the new parity
///     (P, or Q), rebuilt: the volume's layout becomes parity-last
///     ([`crate::raid::layout::Variant::ParityLast`], md's
///     `ALGORITHM_PARITY_N` and `ALGORITHM_LEFT_SYMMETRIC_6`), which keeps
///     every data chunk where it was.
///
/// Errors: `WouldDestroy` for a conversion that drops redundancy (the
/// message says what would be lost); `Unsupported` for one not there yet;
/// `InvalidInput` for nothing to do, the wrong number of new members,
/// more than [`MAX_MEMBERS`], or a chunk that does not fit.
fn plan(sb: &Superblock, opts: &GrowOptions) -> Result<Change> {
    let name = &sb.name;
    if sb.volumes.len() > 1 {
        return plan_matrix(sb, opts);
    }
    let v = &sb.volumes[0];
    let from = v.level;
    let level = Level::from_number(from)?;
    let n = sb.member_count as usize;
    let add = opts.add.len();
    if n + add > MAX_MEMBERS {
        bail!(InvalidInput, "array '{name}' has {n} members; {add} more would pass the most, {MAX_MEMBERS}. Nothing was written");
    }
    let chunk = opts.chunk.filter(|&c| c != v.chunk);
    let to = opts.level.unwrap_or(from);
    let geometry = |l: Level, count: usize| Geometry::new(l, count, v.chunk, v.member_size);
    if to == from {
        if add == 0 && chunk.is_none() {
            bail!(InvalidInput, "volume '{}' is RAID {from} already; nothing to do", v.name);
        }
        if !level.desc().has_stripes() {
            if chunk.is_some() {
                bail!(InvalidInput, "RAID {from} has no stripes: its chunk only cuts requests; nothing to restripe. Nothing was written");
            }
            return Ok(Change::Takeover(Takeover::Rebuilt(from)));
        }
        // A parity-last volume (after a takeover) is restriped into md's
        // rotating layout.
        let variant = crate::raid::layout::Variant::from_u8(v.layout).unwrap_or_default();
        if add == 0 && variant != crate::raid::layout::Variant::Standard {
            bail!(
                Unsupported,
                "volume '{}' keeps its parity on its last member; a chunk change over the same members is not there yet for \
                 that layout: add a member with it (--add), which restripes it into the rotating layout. Nothing was written",
                v.name
            );
        }
        let new_g = match chunk {
            Some(c) => rechunked(level, n + add, v, c)?,
            None => geometry(level, n + add)?,
        };
        return Ok(Change::Restripe(geometry(level, n)?.with_variant(variant)?, new_g));
    }
    if chunk.is_some() {
        bail!(InvalidInput, "--chunk goes with --add alone: change the level first, then the chunk. Nothing was written");
    }
    let target = Level::from_number(to)?;
    let cap = |l: Level, count: usize| geometry(l, count).map(|g| g.capacity());
    if n == 2 && add == 0 && matches!((from, to), (1, 10) | (10, 1)) {
        if cap(target, 2)? != cap(level, 2)? {
            bail!(
                Unsupported,
                "volume '{}' has {} per member, not a whole number of {} chunks, so RAID {to} would hold less than it does; \
                 nothing was written",
                v.name,
                fmt_size(v.member_size),
                fmt_size(v.chunk)
            );
        }
        return Ok(Change::Takeover(Takeover::Relabel(to)));
    }
    if n == 2 && matches!((from, to), (1, 5) | (1, 10)) {
        if to == 5 && add == 0 {
            bail!(InvalidInput, "RAID 5 needs 3 members or more: give the new one(s) with --add. Nothing was written");
        }
        // RAID 1 over 2 members reads as RAID 5 or 10 over 2 would: the
        // reshape reads it as RAID 1 and writes the new level over more.
        return Ok(Change::Restripe(geometry(Level::Raid1, 2)?, geometry(target, 2 + add)?));
    }
    if matches!((from, to), (0, 5) | (5, 6)) {
        let what = if to == 5 { "P" } else { "Q" };
        if add != 1 {
            bail!(
                InvalidInput,
                "RAID {from} over {n} members becomes RAID {to} over {}: give one new device with --add (it keeps the {what} \
                 parity; gave {add}). Nothing was written",
                n + 1
            );
        }
        if v.layout != 0 {
            bail!(Unsupported, "volume '{}' keeps its parity on its last member already; RAID {to} from it is not there yet. Nothing was written", v.name);
        }
        geometry(target, n + 1)?;
        return Ok(Change::Takeover(Takeover::Rebuilt(to)));
    }
    if (from, to) == (0, 10) {
        if add != n {
            bail!(
                InvalidInput,
                "RAID 0 over {n} members becomes RAID 10 over {}: give {n} new device(s) with --add, each the copy of one \
                 member (gave {add}). Nothing was written",
                2 * n
            );
        }
        return Ok(Change::Takeover(Takeover::Mirror));
    }
    let lost = match (from, to) {
        (10, 0) | (1, 0) => Some("its copies: every chunk would be kept once, and the array would not survive a failed member"),
        (5, 0) | (6, 0) => Some("its parity: the array would not survive a failed member"),
        (6, 5) => Some("its second parity (Q): it would survive one failed member instead of two"),
        _ => None,
    };
    if let Some(what) = lost {
        bail!(
            WouldDestroy,
            "converting volume '{}' from RAID {from} to RAID {to} would drop {what}. Nothing was written; a conversion that \
             loses redundancy is not offered",
            v.name
        );
    }
    bail!(
        Unsupported,
        "converting volume '{}' from RAID {from} over {n} members to RAID {to} is not there yet; there are RAID 1 <-> 10 \
         over 2 members, RAID 1 over 2 to RAID 5 or 10 over more (--add), RAID 0 -> 10 with as many new members, and \
         RAID 0 -> 5 and RAID 5 -> 6 with one new member. Nothing was written",
        v.name
    )
}

/// [`plan`] for an array with several (Matrix) volumes: new members
/// only, every volume restriped onto them in turn (volume 0 first), as
/// Intel's Matrix RAID migrates both volumes of a set. Errors:
/// `Unsupported` for a level or chunk change, or a volume that is RAID 1
/// or parity-last; `InvalidInput` for no new member.
fn plan_matrix(sb: &Superblock, opts: &GrowOptions) -> Result<Change> {
    let name = &sb.name;
    let n = sb.member_count as usize;
    let add = opts.add.len();
    if opts.level.is_some() || opts.chunk.is_some() {
        bail!(
            Unsupported,
            "array '{name}' holds {} volumes; a level or chunk change of an array with several (Matrix) volumes is not there \
             yet (adding members is). Nothing was written",
            sb.volumes.len()
        );
    }
    if add == 0 {
        bail!(InvalidInput, "grow needs --add DEVICE...: the devices that become members. Nothing was written");
    }
    if n + add > MAX_MEMBERS {
        bail!(InvalidInput, "array '{name}' has {n} members; {add} more would pass the most, {MAX_MEMBERS}. Nothing was written");
    }
    for v in &sb.volumes {
        if !matches!(v.level, 0 | 5 | 6 | 10) || v.layout != 0 {
            bail!(
                Unsupported,
                "volume '{}' of array '{name}' is RAID {}{}: adding members to a Matrix array with such a volume is not there \
                 yet (RAID 0, 5, 6 and 10 volumes are restriped). Nothing was written",
                v.name,
                v.level,
                if v.layout != 0 { " with its parity on its last member" } else { "" }
            );
        }
    }
    let (old_g, new_g) = volume_geometries(sb, 0, n, n + add)?;
    Ok(Change::Restripe(old_g, new_g))
}

/// Volume `i` of `sb` over `old_n` and over `n` members, as it is.
/// Errors: as [`Geometry::new`].
fn volume_geometries(sb: &Superblock, i: usize, old_n: usize, n: usize) -> Result<(Geometry, Geometry)> {
    let v = &sb.volumes[i];
    let level = Level::from_number(v.level)?;
    Ok((Geometry::new(level, old_n, v.chunk, v.member_size)?, Geometry::new(level, n, v.chunk, v.member_size)?))
}

/// The superblock of a reshape of `sb`'s volume from layout `old_g` onto
/// `k` more members in layout `new_g` (the new roles active), recorded at
/// position 0 with the old level and chunk where they change (`live`: the
/// array is served), the array active.
fn reshape_superblock(sb: &Superblock, k: usize, old_g: &Geometry, new_g: &Geometry, live: bool) -> Superblock {
    let mut new_sb = with_new_roles(sb, k, MemberState::Active, None);
    new_sb.state = State::Active;
    new_sb.volumes[0].level = new_g.level().number();
    new_sb.volumes[0].chunk = new_g.chunk();
    let old_level = (old_g.level() != new_g.level()).then(|| old_g.level().number());
    let old_chunk = (old_g.chunk() != new_g.chunk()).then_some(old_g.chunk());
    let old_parity_last = old_g.layout().is_some_and(|l| l.variant() == crate::raid::layout::Variant::ParityLast);
    // The new layout is always md's rotating one.
    new_sb.volumes[0].layout = 0;
    new_sb.reshape = Some(Reshape { old_members: sb.member_count, position: 0, backup: None, live, old_level, old_chunk, old_parity_last, volume: 0 });
    new_sb
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

/// The devices (slot order) and the superblock (not yet written) of
/// takeover `t` of the opened, checked array `a` (superblock `sb`) with
/// the new devices `added`: the new roles rebuilding from their start.
fn takeover(a: &Array, sb: &Superblock, t: &Takeover, added: &[NewMember]) -> Result<(Vec<Member>, Vec<Option<MemberSpec>>, Superblock)> {
    let n = sb.member_count as usize;
    let specs = a.meta().specs.clone();
    let new_specs = || specs[..n].iter().cloned().chain(added.iter().map(|(s, _)| Some(s.clone()))).chain(specs[n..].iter().cloned()).collect();
    match *t {
        Takeover::Relabel(to) => {
            let mut new_sb = sb.clone();
            new_sb.volumes[0].level = to;
            Ok((slot_order(a, n, &[])?, specs.clone(), new_sb))
        }
        Takeover::Rebuilt(to) => {
            let mut new_sb = with_new_roles(sb, added.len(), MemberState::Rebuilding, Some(0));
            if to != sb.volumes[0].level {
                new_sb.volumes[0].level = to;
                new_sb.volumes[0].layout = crate::raid::layout::Variant::ParityLast.to_u8();
            }
            Ok((slot_order(a, n, added)?, new_specs(), new_sb))
        }
        Takeover::Mirror => {
            let mut old = slot_order(a, n, &[])?;
            let spare_devs = old.split_off(n);
            let spares: Vec<Slot> = sb.spares().to_vec();
            let mut devs = Vec::with_capacity(2 * n + spare_devs.len());
            let mut slots = Vec::with_capacity(2 * n + spares.len());
            let mut names = Vec::with_capacity(2 * n + spares.len());
            for (i, (m, (spec, new))) in old.into_iter().zip(added).enumerate() {
                devs.push(m);
                devs.push(new.try_clone()?);
                names.push(specs[i].clone());
                names.push(Some(spec.clone()));
                slots.push(sb.slots[i]);
                slots.push(Slot { uuid: superblock::new_uuid(), state: MemberState::Rebuilding, resync_from_bitmap: false, recovery_offset: Some(0) });
            }
            devs.extend(spare_devs);
            slots.extend(spares);
            names.extend(specs[n..].iter().cloned());
            let mut new_sb = sb.clone();
            new_sb.slots = slots;
            new_sb.member_count = (2 * n) as u32;
            new_sb.volumes[0].level = 10;
            Ok((devs, names, new_sb))
        }
    }
}

/// The end of a growth that adds copies (RAID 1's more copies, RAID 0 ->
/// 10, the parity of RAID 0 -> 5 and 5 -> 6): the array over `specs` and
/// `added`, whose new roles the
/// superblocks record as rebuilding, is assembled and rebuilt, then
/// stopped. Errors: from the assemble or the rebuild (the rebuild goes on
/// from its checkpoint at the next assemble).
#[allow(clippy::too_many_arguments)]
fn rebuild_copies(
    specs: &[MemberSpec],
    added: Vec<NewMember>,
    name: &str,
    level: u32,
    before: u32,
    opts: &GrowOptions,
    progress: &mut dyn FnMut(u64, u64),
    t0: std::time::Instant,
) -> Result<GrowReport> {
    let all: Vec<MemberSpec> = specs.iter().cloned().chain(added.into_iter().map(|(s, _)| s)).collect();
    let mut arr = open(&all)?;
    arr.activate_for_rebuild()?;
    let capacity = arr.volume().raid().capacity();
    let members = arr.member_count();
    let reports = arr.rebuild(opts.rate, &mut |_, done, total| progress(done, total))?;
    arr.stop()?;
    let written: u64 = reports.iter().map(|r| r.bytes_written).sum();
    Ok(GrowReport {
        array: name.to_string(),
        level,
        members: (before, members),
        volumes: 1,
        capacity: (capacity, capacity),
        started_at: 0,
        bytes_read: written,
        bytes_written: written,
        backed_up_rows: 0,
        seconds: crate::clock::since(t0).as_secs_f64(),
    })
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

/// The layout of volume `v` at `level` over `members` with chunk size
/// `chunk` (bytes) instead of its own (`grow --chunk`). Errors:
/// `InvalidInput` for a chunk that is not a power of two from 4 KiB to 1
/// MiB, or that does not divide the volume's size on each member.
fn rechunked(level: Level, members: usize, v: &VolumeEntry, chunk: u64) -> Result<Geometry> {
    check_chunk(chunk)?;
    if !v.member_size.is_multiple_of(chunk) {
        bail!(
            InvalidInput,
            "volume '{}' has {} on each member, not a whole number of {} chunks; choose a chunk that divides it. \
             Nothing was written",
            v.name,
            fmt_size(v.member_size),
            fmt_size(chunk)
        );
    }
    Geometry::new(level, members, chunk, v.member_size)
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

/// Finishes the reshape the superblocks of `specs` record, if any: the
/// members are opened, the window that was being written is written again
/// (from the backup when it was one of the critical section's) and the
/// reshape goes on to the end; degraded when members failed or are not
/// given and both layouts survive without them (they are then recorded as
/// missing: rebuild them afterwards). `Ok(None)` when no reshape is
/// recorded.
///
/// Errors: as [`open`] for the members; `Membership` when more members
/// are missing than the layouts survive, or the one with the backup of the
/// window being written (the reshape waits for them: nothing is written); `Superblock`
/// when the backup does not match its checksum; an I/O error stops the
/// reshape where it is, as in [`grow`].
pub fn resume(specs: &[MemberSpec], progress: &mut dyn FnMut(u64, u64)) -> Result<Option<GrowReport>> {
    let mut found = Vec::new();
    for m in open_members(specs, true, true)? {
        if let Ok(sb) = read_superblock(&m)? {
            found.push((m, sb));
        }
    }
    let Some(auth) = found.iter().map(|(_, sb)| sb).max_by_key(|sb| sb.events).cloned() else {
        bail!(Superblock, "none of the devices given holds a uraid superblock");
    };
    if auth.reshape.is_none() {
        return Ok(None);
    }
    let mut by_slot: Vec<Option<Member>> = (0..auth.slots.len()).map(|_| None).collect();
    for (m, sb) in found {
        if sb.array_uuid != auth.array_uuid {
            continue;
        }
        if let Some(s) = auth.slots.iter().position(|s| s.uuid == sb.member_uuid) {
            by_slot[s] = Some(m);
        }
    }
    let n = auth.member_count as usize;
    let mut sb = auth;
    check_record(&sb)?;
    // The roles that hold pieces of a spread backup (a chunk change).
    let holders = spread_backup(&sb).map(|(h, _)| h).unwrap_or_default();
    // Roles that failed or were not given are left out (placeholders that
    // are never read or written), when both layouts survive without them:
    // the reshape goes on degraded.
    let is_down = |s: &Slot| matches!(s.state, MemberState::Faulty | MemberState::Missing);
    let mut devs = Vec::with_capacity(by_slot.len());
    for (slot, m) in by_slot.into_iter().enumerate() {
        match m {
            Some(m) if slot >= n || !is_down(&sb.slots[slot]) => devs.push(m),
            _ => {
                if slot < n && !is_down(&sb.slots[slot]) {
                    sb.slots[slot].state = MemberState::Missing;
                }
                devs.push(placeholder(sb.used_end())?);
            }
        }
    }
    let r = sb.reshape.expect("a reshape is recorded");
    let down = down_roles_of(&sb);
    let backup_lost = r.backup.is_some_and(|k| match k.role {
        SPREAD => holders.iter().any(|&h| down[h as usize]),
        role => down[role as usize],
    });
    if backup_lost || !layouts_survive(&sb, &down) {
        let roles: Vec<String> = (0..n).filter(|&r| down[r]).map(|r| format!("{r} (member UUID {})", fmt_uuid(&sb.slots[r].uuid))).collect();
        bail!(
            Membership,
            "array '{}' is in the middle of a reshape, and role(s) {} are missing or failed: {}. Give the members; nothing \
             was written",
            sb.name,
            roles.join(", "),
            if backup_lost { "one keeps the backup of the window being written" } else { "the array would lose data without them" }
        );
    }
    run_all(&devs, &mut sb, None, progress).map(Some).map_err(stopped)
}

/// Refuses a reshape record `grow` would not write (it comes from the
/// members' bytes): a wider layout of a restriped level, a position on a
/// row of the new layout, a backup of one row at most on a member.
///
/// Errors: `Superblock`, naming the record.
fn check_record(sb: &Superblock) -> Result<()> {
    let r = sb.reshape.expect("a reshape is recorded");
    let v = &sb.volumes[r.volume as usize];
    let level = Level::from_number(v.level)?;
    let n = sb.member_count as usize;
    // A level change: RAID 1 over 2 members restriped as RAID 5 or 10.
    let old_level_ok = match r.old_level {
        None => true,
        Some(l) => l == 1 && r.old_members == 2 && matches!(level, Level::Raid5 | Level::Raid10),
    };
    // The backup, when there is one, holds exactly the critical window
    // that starts at the position (so its length, read back, is bounded).
    let ok = level.desc().has_stripes()
        // Several volumes: members added, nothing else changes.
        && (sb.volumes.len() == 1
            || (r.old_level.is_none() && r.old_chunk.is_none() && !r.old_parity_last && r.old_members < sb.member_count && r.backup.is_none_or(|k| k.role != SPREAD)))
        && v.layout == 0
        && old_level_ok
        && (!r.old_parity_last || (level.desc().parity > 0 && r.old_level.is_none()))
        && match record_geometries(sb) {
            Ok((old_g, new_g)) => {
                let ((wo, uo), (wn, un)) = (unit(&old_g), unit(&new_g));
                let window = windows(&old_g, &new_g, r.position, 1, None).next();
                let backup_ok = |k: ReshapeBackup| match spread_backup(sb) {
                    // Over the same members: whole windows, as many as the
                    // room holds (or the rest of the volume).
                    Some((_, room)) => {
                        let least = window.map_or(0, |w| w.1);
                        k.role == SPREAD
                            && k.len > 0
                            && k.len <= room
                            && (k.len.is_multiple_of(least.max(1)) || r.position + k.len == new_g.capacity())
                    }
                    None => window == Some((r.position, k.len, true)) && (k.role as usize) < n,
                };
                let denser = if r.old_members == sb.member_count { r.old_chunk.is_some() && wn * uo == wo * un } else { wn * uo > wo * un };
                denser
                    && (r.position >= new_g.capacity() || r.position.is_multiple_of(wn))
                    && r.backup.is_none_or(backup_ok)
            }
            _ => false,
        };
    if !ok {
        bail!(
            Superblock,
            "array '{}': the superblocks record a reshape this uraid did not write (RAID {} from {} to {n} members, at byte \
             {}); nothing was written. Check the members with 'uraid examine'",
            sb.name,
            v.level,
            r.old_members,
            r.position
        );
    }
    Ok(())
}

/// Refuses members too small to keep the backup area apart from the
/// critical section (the backup lies in the last member bytes of the
/// first new member, which the new layout writes last), and a chunk
/// change over the same members whose windows do not fit the backup room
/// ([`spare_room`] on every member). `sb` is the reshape's superblock.
fn check_backup_room(sb: &Superblock, old_g: &Geometry, new_g: &Geometry) -> Result<()> {
    let name = &sb.name;
    if let Some((holders, room)) = spread_backup(sb) {
        let least = windows(old_g, new_g, 0, 1, None).next().map_or(0, |w| w.1);
        if least > room {
            bail!(
                TooSmall,
                "array '{name}': restriping its volume from {} to {} chunks over the same members moves windows of {} \
                 that must be kept in a backup first, and the room for it ({} past the bitmap on each of {} members) holds \
                 {}. Choose a chunk size closer to the current one, or grow onto a new member (--add) and change the chunk \
                 then. Nothing was written",
                fmt_size(old_g.chunk()),
                fmt_size(new_g.chunk()),
                fmt_size(least),
                fmt_size(spare_room(sb).1),
                holders.len(),
                fmt_size(room)
            );
        }
        return Ok(());
    }
    let (wn, un) = unit(new_g);
    // The critical windows: their member bytes, and the largest backup.
    let (mut end, mut backup) = (0u64, 0u64);
    for (pos, len, critical) in windows(old_g, new_g, 0, 1, None) {
        if !critical {
            break;
        }
        end = (pos + len).div_ceil(wn) * un;
        backup = backup.max(len.div_ceil(new_g.chunk()) * new_g.chunk());
    }
    if end + backup > new_g.member_size() {
        bail!(
            TooSmall,
            "array '{name}': its volume has {} on each member, too little for a reshape that must keep its first {} in a \
             backup area of {} apart from them. Nothing was written",
            fmt_size(new_g.member_size()),
            fmt_size(end),
            fmt_size(backup)
        );
    }
    Ok(())
}

/// [`check_backup_room`] for every volume the reshape of `sb` into
/// `new_sb` restripes: the first from `old_g` to `new_g`, the others (a
/// Matrix array) onto the new member count as they are.
fn check_backup_rooms(sb: &Superblock, new_sb: &Superblock, old_g: &Geometry, new_g: &Geometry) -> Result<()> {
    check_backup_room(new_sb, old_g, new_g)?;
    for i in 1..sb.volumes.len() {
        let (o, g) = volume_geometries(sb, i, sb.member_count as usize, new_sb.member_count as usize)?;
        check_backup_room(new_sb, &o, &g)?;
    }
    Ok(())
}

/// Writes `sb` (event counter + 1) to every device of `devs` (given in
/// slot order), then flushes them all. The last slots are written first:
/// when the reshape is first recorded, the new members hold it before the
/// old ones do, so a crash in between leaves no new member without a
/// superblock (the freshest superblock, on a new member, speaks).
fn persist_all(devs: &[Member], sb: &mut Superblock) -> Result<()> {
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

/// What the reshape of a served array shares with the export.
struct Served<'a> {
    /// The position, and the range being moved, that route the users'
    /// requests.
    state: &'a ReshapeState,
    /// Set to stop at the end of the next window (a command waits, or the
    /// service stops).
    stop: &'a AtomicBool,
}

/// Most logical bytes one window moves while the array is served: users'
/// requests to a window wait until it is written.
const SERVED_WINDOW: u64 = 8 << 20;

/// Runs the reshape `sb` records, over `devs` (every device in slot
/// order) from `old_vol`'s layout to `new_vol`'s; see the module's
/// documentation. With `served`, windows are locked against the users'
/// requests while they move, and the run stops (`Interrupted`) at the end
/// of a window once the stop flag is set; at the end the record is left
/// in place (with the position at the end) for [`LiveGrow::finish`].
#[allow(clippy::too_many_arguments)]
fn run(
    devs: &[Member],
    sb: &mut Superblock,
    old_vol: &Arc<Volume>,
    new_vol: &Arc<Volume>,
    health: [&Health; 2],
    rate: Option<u64>,
    progress: &mut dyn FnMut(u64, u64),
    served: Option<&Served>,
) -> Result<GrowReport> {
    let t0 = crate::clock::now();
    let r = sb.reshape.expect("a reshape is recorded");
    let v = sb.volumes[r.volume as usize].clone();
    let n = sb.member_count as usize;
    let old_n = r.old_members as usize;
    let (old_g, new_g) = (*old_vol.geometry(), *new_vol.geometry());
    let ((wo, _), (wn, un)) = (unit(&old_g), unit(&new_g));
    let (old_cap, new_cap) = (old_g.capacity(), new_g.capacity());
    let mut report = GrowReport {
        array: sb.name.clone(),
        level: v.level,
        members: (r.old_members, n as u32),
        volumes: 1,
        capacity: (old_cap, new_cap),
        started_at: r.position,
        bytes_read: 0,
        bytes_written: 0,
        backed_up_rows: 0,
        seconds: 0.0,
    };
    let data_per_row = |bytes: u64| bytes / wn * un * n as u64;
    // A window that was being written from the backup: write it again.
    if let Some(k) = r.backup {
        let buf = read_backup(devs, sb, &k)?;
        if let Some(l) = served {
            l.state.lock_to(r.position + k.len);
        }
        new_vol.write_at(r.position, &buf)?;
        new_vol.flush()?;
        report.bytes_read += k.len;
        report.bytes_written += data_per_row(k.len);
        set_position(devs, sb, r.position + k.len, None)?;
        if let Some(l) = served {
            l.state.advance(r.position + k.len, false);
        }
    }
    let backup_at = |len: u64| v.member_start + v.member_size - len.div_ceil(new_g.chunk()) * new_g.chunk();
    let max_units = (if served.is_some() { SERVED_WINDOW } else { WINDOW } / wn).max(1);
    let start = sb.reshape.expect("recorded").position;
    // The windows, in order: (logical start, length, through the backup).
    let spread = spread_backup(sb).map(|(_, room)| room);
    let windows = move || windows(&old_g, &new_g, start, max_units, spread);
    let mut paced = 0u64;
    let crash = crate::io::fault::reshape_crash_point;
    // A reader thread reads the next window from the old layout while this
    // one writes the current one through the new layout: the next window's
    // sources are old rows past every row the current one writes (see the
    // module's documentation), and nothing read ahead is recorded before
    // it is written.
    //
    // A served array's reshape reads no window ahead: a window is locked
    // against the users from its read to its record, so it is read only
    // when the one before is done and the rate's pause is over (`go`).
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(u64, Vec<u8>)>>(if served.is_some() { 1 } else { READ_AHEAD });
    let (go_tx, go_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let state = served.map(|l| l.state);
    let outcome = std::thread::scope(|scope| -> Result<()> {
        // Owned here: dropped when this returns, early or not, so that a
        // reader waiting to hand over a window ends before the scope joins it.
        let (rx, go_tx) = (rx, go_tx);
        let old_vol = &old_vol;
        scope.spawn(move || {
            for (pos, len, _) in windows() {
                if let Some(st) = state {
                    if go_rx.recv().is_err() {
                        return;
                    }
                    // Users' requests to the window wait from now on, and
                    // those under way end first.
                    st.lock_to(pos + len);
                }
                let mut data = vec![0u8; len as usize];
                if pos < old_cap {
                    let have = (old_cap - pos).min(len) as usize;
                    if let Err(e) = move_window(old_vol, false, pos, &mut data[..have], wo) {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
                if tx.send(Ok((pos, data))).is_err() {
                    return;
                }
            }
        });
        for (window, (pos, len, critical)) in windows().enumerate() {
            let window = window as u64;
            if served.is_some() {
                let _ = go_tx.send(());
            }
            let (at, mut data) = rx.recv().map_err(|_| Error::new(ErrorKind::Interrupted, "the reshape's reader thread ended early"))??;
            debug_assert_eq!((at, data.len() as u64), (pos, len));
            report.bytes_read += old_cap.saturating_sub(pos).min(len);
            if critical {
                // md's critical section: the bytes go to the backup area first.
                let k = write_backup(devs, sb, health, &data, old_n, backup_at)?;
                report.bytes_written += len;
                report.backed_up_rows += len / wn;
                set_position(devs, sb, pos, Some(k))?;
                crash(window, "backed-up");
            }
            // In two halves, so that the crash tests can stop between them:
            // whole rows (full stripes) when the window has several, else
            // half a row (whole 512-byte blocks).
            let half = if len >= 2 * wn { len / wn / 2 * wn } else { (len / 2) & !511 };
            move_window(new_vol, true, pos, &mut data[..half as usize], wn)?;
            crash(window, "half");
            move_window(new_vol, true, pos + half, &mut data[half as usize..], wn)?;
            new_vol.flush()?;
            crash(window, "written");
            report.bytes_written += data_per_row(len);
            // A member the data paths failed meanwhile: the window was
            // written without it (degraded), and the superblocks say so.
            note_failures(sb, health)?;
            set_position(devs, sb, pos + len, None)?;
            if let Some(st) = state {
                st.advance(pos + len, false);
            }
            progress(pos + len, new_cap);
            paced += len;
            crate::control::maint::pace(t0, paced, rate);
            if served.is_some_and(|l| l.stop.load(Ordering::Relaxed)) && pos + len < new_cap {
                bail!(Interrupted, "the reshape was paused at byte {}", pos + len);
            }
        }
        Ok(())
    });
    if let Some(st) = state {
        // Windows read ahead and not written are no longer locked.
        st.advance(sb.reshape.expect("recorded").position, true);
    }
    outcome?;
    report.seconds = crate::clock::since(t0).as_secs_f64();
    if served.is_some() {
        return Ok(report);
    }
    let live = sb.reshape.expect("recorded").live;
    if next_volume(devs, sb)? {
        return Ok(report);
    }
    sb.reshape = None;
    // A reshape of a served array that a crash cut: users' writes may
    // have been cut too; the assemble that follows resyncs.
    sb.state = if live { State::Active } else { State::Clean };
    persist_all(devs, sb)?;
    Ok(report)
}

/// Writes the window `data` to the backup area and flushes it: on role
/// `old_n` (the first new member) at `backup_at(len)`, or, for a chunk
/// change over the same members, spread over every role that is up (the
/// failures the data paths saw recorded in `sb` first), a piece of
/// [`spread_piece`] bytes on each at [`spare_room`]. Returns the record.
/// Errors: `Membership` when the first new member failed; `Io`.
fn write_backup(
    devs: &[Member],
    sb: &mut Superblock,
    health: [&Health; 2],
    data: &[u8],
    old_n: usize,
    backup_at: impl Fn(u64) -> u64,
) -> Result<ReshapeBackup> {
    let len = data.len() as u64;
    let crc = crc32c::crc32c(data);
    let flush = |dev: &Member| dev.file().sync_data().map_err(|e| Error::io("cannot flush the reshape's backup on", std::path::Path::new(dev.name()), e));
    let write = |dev: &Member, bytes: &[u8], offset: u64| -> Result<()> {
        let mut buf = IoBuf::new(bytes.len().next_multiple_of(4096));
        buf[..bytes.len()].copy_from_slice(bytes);
        dev.write_all_at(&buf, offset)
    };
    if spread_backup(sb).is_some() {
        note_failures(sb, health)?;
        let (holders, _) = spread_backup(sb).expect("a chunk change");
        let piece = spread_piece(len, holders.len()) as usize;
        let (at, room) = spare_room(sb);
        if piece as u64 > room {
            bail!(
                Membership,
                "a member failed during the reshape, and the window of {} no longer fits the backup room of the others",
                fmt_size(len)
            );
        }
        for (chunk, &role) in data.chunks(piece).zip(&holders) {
            write(&devs[role as usize], chunk, at)?;
        }
        for &role in &holders {
            flush(&devs[role as usize])?;
        }
        return Ok(ReshapeBackup { len, crc, role: SPREAD, offset: at });
    }
    let role = old_n as u32;
    if !health[1].writable(role) {
        bail!(Membership, "role {role}, which keeps the reshape's backup area, failed before the critical section was done");
    }
    let dev = &devs[role as usize];
    let offset = backup_at(len);
    write(dev, data, offset)?;
    flush(dev)?;
    Ok(ReshapeBackup { len, crc, role, offset })
}

/// Reads back the window the backup record `k` of `sb` keeps (see
/// [`write_backup`]). Errors: `Superblock` when it does not match its
/// checksum; `Io`.
fn read_backup(devs: &[Member], sb: &Superblock, k: &ReshapeBackup) -> Result<IoBuf> {
    let mut buf = IoBuf::new(k.len as usize);
    let (places, piece): (Vec<u32>, u64) = match (k.role, spread_backup(sb)) {
        (SPREAD, Some((holders, _))) => {
            let piece = spread_piece(k.len, holders.len());
            (holders, piece)
        }
        (role, _) => (vec![role], k.len),
    };
    for (i, &role) in places.iter().enumerate() {
        let from = i as u64 * piece;
        if from >= k.len {
            break;
        }
        let part = piece.min(k.len - from) as usize;
        let mut b = IoBuf::new(part.next_multiple_of(4096));
        devs[role as usize].read_exact_at(&mut b, k.offset)?;
        buf[from as usize..from as usize + part].copy_from_slice(&b[..part]);
    }
    if crc32c::crc32c(&buf) != k.crc {
        let on: Vec<&str> = places.iter().map(|&r| devs[r as usize].name()).collect();
        bail!(
            Superblock,
            "array '{}': the reshape's backup on {} (bytes {}+{}) does not match its checksum; the reshape cannot go on \
             safely. Nothing was written",
            sb.name,
            on.join(", "),
            k.offset,
            k.len
        );
    }
    Ok(buf)
}

/// A Matrix array whose reshape `sb` records at the end of a volume that
/// is not the last: records (in every superblock of `devs`) that the next
/// volume's restripe starts, and returns true; false for the last volume.
fn next_volume(devs: &[Member], sb: &mut Superblock) -> Result<bool> {
    let count = sb.volumes.len();
    let Some(r) = sb.reshape.as_mut().filter(|r| (r.volume as usize) + 1 < count) else { return Ok(false) };
    r.volume += 1;
    r.position = 0;
    r.backup = None;
    persist_all(devs, sb)?;
    Ok(true)
}

/// Records in `sb` the roles the data paths of either layout failed (both
/// layouts then leave them out: the reshape goes on degraded), as md does
/// when a member fails during a reshape. Errors: `Membership` when either
/// layout would then lose data (RAID 0, or past RAID 5, 6 or 10's
/// tolerance): the reshape stops where it is.
fn note_failures(sb: &mut Superblock, health: [&Health; 2]) -> Result<()> {
    let n = sb.member_count as usize;
    for role in 0..n as u32 {
        let failed = health.iter().any(|h| (role as usize) < h.members() && !h.writable(role));
        if !failed {
            continue;
        }
        for h in health {
            if (role as usize) < h.members() {
                let _ = h.fail(role);
            }
        }
        if sb.slots[role as usize].state == MemberState::Active {
            sb.slots[role as usize].state = MemberState::Faulty;
        }
    }
    let down = down_roles_of(sb);
    if !layouts_survive(sb, &down) {
        let r = sb.reshape.expect("a reshape is recorded");
        let roles: Vec<usize> = (0..n).filter(|&r| down[r]).collect();
        bail!(
            Membership,
            "role(s) {roles:?} failed during the reshape, more than RAID {} over {} or RAID {} over {n} survives",
            r.old_level.unwrap_or(sb.volumes[r.volume as usize].level),
            r.old_members,
            sb.volumes[r.volume as usize].level
        );
    }
    Ok(())
}

/// Per role of `sb`, whether it is down (faulty or missing).
fn down_roles_of(sb: &Superblock) -> Vec<bool> {
    sb.roles().iter().map(|s| matches!(s.state, MemberState::Faulty | MemberState::Missing)).collect()
}

/// Whether both layouts of the reshape `sb` records keep every byte with
/// the roles flagged in `down` unavailable.
fn layouts_survive(sb: &Superblock, down: &[bool]) -> bool {
    let r = sb.reshape.expect("a reshape is recorded");
    let old_n = r.old_members as usize;
    // The volumes before the one being restriped are in the new layout,
    // those after it in the old one, and it in both.
    sb.volumes.iter().enumerate().all(|(i, v)| {
        let mut old_v = v.clone();
        old_v.level = r.old_level.unwrap_or(old_v.level);
        let at = r.volume as usize;
        (i < at || volume_survives(&old_v, old_n, &down[..old_n])) && (i > at || volume_survives(v, sb.member_count as usize, down))
    })
}

/// Records in every superblock that the logical bytes below `position` are
/// in the new layout, and `backup` (the window from `position` kept in
/// the backup area, or none).
fn set_position(devs: &[Member], sb: &mut Superblock, position: u64, backup: Option<ReshapeBackup>) -> Result<()> {
    let r = sb.reshape.as_mut().expect("a reshape is recorded");
    r.position = position;
    r.backup = backup;
    persist_all(devs, sb)
}

/// A reshape of a served array under way (`uraid grow` while `uraid
/// serve` runs it), made by [`Array::grow_live`]: users go on through
/// [`volume`](Self::volume), whose requests go to the old or the new
/// layout by the position; [`step`](Self::step) moves windows until the
/// end or a pause; [`finish`](Self::finish) makes the array whole again
/// over every member; [`stop`](Self::stop) leaves it recorded for the
/// next assemble.
///
/// While it lasts, the array it came from is frozen: it writes no
/// superblock (the reshape's own are the truth), its bitmap daemon is
/// stopped, and every region of the volume is held dirty in its bitmap,
/// so that a crash is followed by a resync once the reshape has ended.
pub struct LiveGrow {
    /// Every device, in slot order (the roles, the new roles, the spares).
    devs: Vec<Member>,
    /// How each was named.
    specs: Vec<Option<MemberSpec>>,
    sb: Superblock,
    state: Arc<ReshapeState>,
    volume: Arc<Volume>,
    old: Arc<Volume>,
    new: Arc<Volume>,
    health: [Arc<Health>; 2],
    /// The bitmap, held dirty over `[.1, .2)` (absolute member bytes).
    held: Option<(Arc<Bitmap>, u64, u64)>,
    report: GrowReport,
    t0: std::time::Instant,
}

impl LiveGrow {
    /// The volume the users go through while the reshape runs (the old
    /// size; the new one is the array's after [`finish`](Self::finish)).
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }

    /// Logical bytes in the new layout, and the new layout's capacity.
    pub fn position(&self) -> (u64, u64) {
        (self.state.position(), self.new.capacity())
    }

    /// The superblock the reshape keeps (the new members, the record).
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The new roles (past the old member count) that a data path failed
    /// during the reshape, with their devices' names (failures of the old
    /// roles show in the array's own member states).
    pub fn failed_new_roles(&self) -> Vec<(u32, String)> {
        let old_n = self.sb.reshape.map_or(self.sb.member_count, |r| r.old_members);
        (old_n..self.sb.member_count).filter(|&r| !self.health[1].writable(r)).map(|r| (r, self.devs[r as usize].name().to_string())).collect()
    }

    /// Moves windows at most `rate` bytes/s until the end (`Ok(true)`) or
    /// until `stop` is set (`Ok(false)`, at the end of a window: call it
    /// again to go on); `progress(done, total)` after each window, in
    /// logical bytes of the new layout.
    ///
    /// Errors: an I/O error, or a member that a data path failed
    /// (`Membership`): the reshape stops where it is (the superblocks
    /// record the position) and users go on through
    /// [`volume`](Self::volume); stop the array, and the next assemble
    /// with every member goes on from there.
    ///
    /// A Matrix array's volumes after the first (which no user reaches
    /// while it is served: the export is the first volume's) are
    /// restriped after it, in turn, without routing; `progress` then counts
    /// each volume on its own.
    pub fn step(&mut self, rate: Option<u64>, stop: &AtomicBool, progress: &mut dyn FnMut(u64, u64)) -> Result<bool> {
        loop {
            let r = self.sb.reshape.expect("a reshape is recorded");
            let at = r.volume as usize;
            let res = if at == 0 {
                let served = Served { state: &self.state, stop };
                run(&self.devs, &mut self.sb, &self.old, &self.new, [&self.health[0], &self.health[1]], rate, progress, Some(&served))
            } else {
                // No users: a routing state of its own, for the stop flag.
                let (old, new, health) = layouts(&self.devs, &self.sb)?;
                let state = ReshapeState::new(r.position);
                let served = Served { state: &state, stop };
                run(&self.devs, &mut self.sb, &old, &new, [&health[0], &health[1]], rate, progress, Some(&served))
            };
            match res {
                // The first volume's capacities are in the report already.
                Ok(r) if at > 0 => self.report.add_volume(&GrowReport { seconds: 0.0, ..r }),
                Ok(r) => {
                    self.report.bytes_read += r.bytes_read;
                    self.report.bytes_written += r.bytes_written;
                    self.report.backed_up_rows += r.backed_up_rows;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(false),
                Err(e) => return Err(stopped(e)),
            }
            if !next_volume(&self.devs, &mut self.sb).map_err(stopped)? {
                return Ok(true);
            }
        }
    }

    /// Ends a reshape that [`step`](Self::step) finished: the members are
    /// flushed, the superblocks say the array is clean without a reshape,
    /// and `arr` (the frozen array this came from) becomes the array over
    /// every member, activated, with one volume of the new size. The
    /// users of [`volume`](Self::volume) must be quiet (paused, nothing in
    /// flight) and take `arr.volume()` afterwards.
    ///
    /// Errors: `InvalidInput` when the reshape has not ended; `Io` from the
    /// flush or the superblock writes (the array is then left frozen and
    /// the record in place: the next assemble finishes it).
    pub fn finish(mut self, arr: &mut Array) -> Result<GrowReport> {
        let r = self.sb.reshape.expect("a reshape is recorded");
        let last = (r.volume as usize + 1 == self.sb.volumes.len()) && record_geometries(&self.sb).is_ok_and(|(_, g)| r.position >= g.capacity());
        if self.state.position() < self.new.capacity() || !last {
            bail!(InvalidInput, "the reshape has not ended: it is at byte {} of volume {}", r.position, r.volume);
        }
        self.new.flush()?;
        if let Some((b, s, e)) = &self.held {
            b.end_write(*s, e - s);
        }
        self.sb.reshape = None;
        self.sb.state = State::Clean;
        persist_all(&self.devs, &mut self.sb)?;
        let fresh = array_over(&self.devs, self.specs.clone(), &self.sb)?;
        self.report.capacity.1 = fresh.volume().capacity();
        self.report.seconds = crate::clock::since(self.t0).as_secs_f64();
        *arr = fresh;
        Ok(self.report)
    }

    /// Leaves the reshape where it is for the next assemble (the service
    /// stops): the members are flushed and, when that worked, the
    /// superblocks say the array is clean, so the assemble that finishes
    /// the reshape does not resync. The users must be quiet.
    pub fn stop(mut self) -> Result<()> {
        self.new.flush()?;
        if let Some(r) = self.sb.reshape.as_mut() {
            r.live = false;
        }
        self.sb.state = State::Clean;
        persist_all(&self.devs, &mut self.sb)
    }
}

/// The array over `devs` (every device, in slot order, named by `specs`)
/// that the superblock `sb` (written to them) describes, as an assemble
/// would make it, activated: member states and recovery offsets from the
/// slot table, the bitmap loaded. Errors: from loading the bitmap, making
/// the volumes and activating (superblock writes).
fn array_over(devs: &[Member], specs: Vec<Option<MemberSpec>>, sb: &Superblock) -> Result<Array> {
    let n = sb.member_count as usize;
    let devices: Vec<Option<Member>> = devs.iter().map(|d| d.try_clone().map(Some)).collect::<Result<_>>()?;
    let mut meta = Meta { sb: sb.clone(), devices, specs, roles: Arc::new(Vec::new()) };
    meta.rebuild_roles()?;
    let health = Arc::new(Health::new(n));
    for (role, slot) in sb.roles().iter().enumerate() {
        if slot.state != MemberState::Active {
            health.set_state(role as u32, slot.state);
        }
        if let (MemberState::Rebuilding, Some(o)) = (slot.state, slot.recovery_offset) {
            health.set_recovery(role as u32, o);
        }
    }
    let bitmap = match sb.bitmap_region {
        0 => None,
        region => Some(Arc::new(Bitmap::load(meta.roles.clone(), health.clone(), region, sb.data_end())?)),
    };
    let mut fresh = Array::new(meta, health, bitmap, Vec::new(), Vec::new(), false)?;
    fresh.activate()?;
    Ok(fresh)
}

/// What [`Array::grow_live`] started.
pub enum LiveChange {
    /// A reshape that runs while users go on (more members, another chunk,
    /// RAID 1 over 2 restriped as RAID 5 or 10).
    Reshape(Box<LiveGrow>),
    /// A change in which no data moves, done already (md's takeovers, a
    /// RAID 1's new copies): the array is the new one, whose new roles (if
    /// any) are rebuilding; move the users to its volume and rebuild it.
    Converted(GrowReport),
}

impl Array {
    /// Changes this served array as `opts` asks (see `plan` in this module), while its
    /// users go on:
    ///
    /// - a restripe (more members, another chunk, RAID 1 over 2 as RAID 5
    ///   or 10 over more): the new superblocks are written (the reshape
    ///   recorded at position 0, as served), and the array is frozen for
    ///   the reshape's length (see [`LiveGrow`]). Move the users to
    ///   [`LiveGrow::volume`], then run [`LiveGrow::step`].
    /// - a takeover (RAID 1's new copies, 1 <-> 10 over 2, 0 -> 5, 5 -> 6,
    ///   0 -> 10): `quiet` is called to pause the users until nothing of
    ///   theirs is in flight; the volume is flushed, the new superblocks
    ///   written, and this array becomes the new one (its new roles
    ///   rebuilding): move the users to its volume and resume them, then
    ///   [`rebuild`](Self::rebuild_until) it.
    ///
    /// Errors, before anything is written (the array is then as it was):
    /// `Unsupported` for several volumes, a cache on the volume (set it
    /// off first) or a journal; `Membership` when a role is not active and
    /// in sync, or the array is not activated; as `plan`; as [`grow`]
    /// for the new devices; `quiet`'s error. An `Io` error while the
    /// takeover's superblocks are written leaves the members disagreeing:
    /// stop the array and assemble it.
    pub fn grow_live(&mut self, opts: &GrowOptions, quiet: &mut dyn FnMut() -> Result<()>) -> Result<LiveChange> {
        let t0 = crate::clock::now();
        let sb = self.superblock();
        let name = sb.name.clone();
        if self.inspect || self.frozen {
            bail!(Membership, "array '{name}' is not running (or a reshape is under way); nothing was written");
        }
        let v = sb.volumes[0].clone();
        let cached = sb.volumes.iter().find(|v| v.cache_mode != crate::cache::CacheMode::Off.to_u8());
        if cached.is_some() || !self.journals.is_empty() {
            let v = cached.unwrap_or(&v);
            bail!(
                Unsupported,
                "volume '{}' has a cache ({}); a served array is reshaped with its cache off: 'uraid config {name} --cache \
                 off', grow, then set the cache again. Nothing was written",
                v.name,
                crate::cache::CacheMode::from_u8(v.cache_mode).map(|m| m.name()).unwrap_or("unknown")
            );
        }
        if let Some(r) = (0..self.member_count()).find(|&r| self.health.state(r) != MemberState::Active) {
            bail!(
                Membership,
                "role {r} of array '{name}' is {}; a reshape needs every member present and in sync. Let the rebuild end \
                 first. Nothing was written",
                self.health.state(r).name()
            );
        }
        let n = sb.member_count as usize;
        let k = opts.add.len();
        let (old_g, new_g) = match plan(&sb, opts)? {
            Change::Restripe(old_g, new_g) => (old_g, new_g),
            Change::Takeover(t) => return self.takeover_live(&sb, &t, opts, quiet, t0).map(LiveChange::Converted),
        };
        let added = open_added(self, opts)?;
        let mut new_sb = reshape_superblock(&sb, k, &old_g, &new_g, true);
        check_backup_rooms(&sb, &new_sb, &old_g, &new_g)?;
        let devs = slot_order(self, n, &added)?;
        let specs: Vec<Option<MemberSpec>> = {
            let m = self.meta();
            m.specs[..n].iter().cloned().chain(added.iter().map(|(s, _)| Some(s.clone()))).chain(m.specs[n..].iter().cloned()).collect()
        };
        let new_health = Arc::new(Health::new(n + k));
        let new_roles: Arc<Vec<Member>> = Arc::new(devs[..n + k].iter().map(Member::try_clone).collect::<Result<_>>()?);
        let shared = Shared { health: new_health.clone(), bitmap: self.bitmap.clone() };
        let new_raid = crate::raid::engine::RaidVolume::with_state(new_roles, new_g, v.member_start, shared)?;
        // Every region of the volume dirty until the reshape ends: a crash
        // is followed by a resync (the users' writes in either layout).
        // (A Matrix array's: every volume's area.)
        let (area_start, area_end) = (v.member_start, sb.data_end());
        let held = match &self.bitmap {
            Some(b) => {
                b.start_write(area_start, area_end - area_start)?;
                Some((b.clone(), area_start, area_end))
            }
            None => None,
        };
        if let Err(e) = persist_all(&devs, &mut new_sb) {
            if let Some((b, s, e)) = &held {
                b.end_write(*s, e - s);
            }
            return Err(e);
        }
        // Frozen: from here the reshape's superblocks are the truth.
        self.frozen = true;
        self.health.set_on_change(|_, _| Ok(()));
        self.daemon = None;
        let old_raid = self.volumes[0].raid().clone();
        let state = ReshapeState::new(0);
        let volume = Volume::reshaping(old_raid.clone(), new_raid.clone(), state.clone());
        let report = GrowReport {
            array: name,
            level: new_g.level().number(),
            members: (n as u32, (n + k) as u32),
            volumes: 1,
            capacity: (old_g.capacity(), new_g.capacity()),
            started_at: 0,
            bytes_read: 0,
            bytes_written: 0,
            backed_up_rows: 0,
            seconds: 0.0,
        };
        Ok(LiveChange::Reshape(Box::new(LiveGrow {
            devs,
            specs,
            sb: new_sb,
            state,
            volume,
            old: Volume::over(old_raid),
            new: Volume::over(new_raid),
            health: [self.health.clone(), new_health],
            held,
            report,
            t0,
        })))
    }

    /// Takeover `t` of this served array (see [`Array::grow_live`]).
    fn takeover_live(
        &mut self,
        sb: &Superblock,
        t: &Takeover,
        opts: &GrowOptions,
        quiet: &mut dyn FnMut() -> Result<()>,
        t0: std::time::Instant,
    ) -> Result<GrowReport> {
        let added = open_added(self, opts)?;
        let (devs, specs, mut new_sb) = takeover(self, sb, t, &added)?;
        quiet()?;
        for v in &self.volumes {
            v.flush()?;
        }
        // The users are quiet and their writes on the members: the new
        // array starts clean (activate marks it active).
        self.daemon = None;
        new_sb.state = State::Clean;
        if let Err(e) = persist_all(&devs, &mut new_sb) {
            self.start_daemon();
            return Err(e);
        }
        self.frozen = true;
        self.health.set_on_change(|_, _| Ok(()));
        *self = array_over(&devs, specs, &new_sb)?;
        let capacity = self.volume().capacity();
        Ok(GrowReport::unmoved(sb.name.clone(), new_sb.volumes[0].level, (sb.member_count, new_sb.member_count), capacity, crate::clock::since(t0).as_secs_f64()))
    }
}

/// The size `grow --size` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewSize {
    /// At least this many usable bytes (rounded up to whole rows).
    Bytes(u64),
    /// All the room the members have past the volume (mdadm's
    /// `--size=max`, after every member was replaced by a larger one).
    Max,
}

/// What `grow --size` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ResizeReport {
    /// The array's name.
    pub array: String,
    /// The grown volume's name.
    pub volume: String,
    /// Its RAID level number.
    pub level: u32,
    /// Its usable bytes before and after.
    pub capacity: (u64, u64),
    /// Its bytes on each member before and after.
    pub member_size: (u64, u64),
    /// Bytes of zeros written to the members (the new area, so that its
    /// copies and parity agree from the start).
    pub bytes_zeroed: u64,
    /// Seconds it took.
    pub seconds: f64,
}

/// Grows the last volume of the stopped array of `specs` into the room
/// past it on every member (`uraid grow --size`, md's `--grow --size`):
/// [`Array::plan_resize`], [`Array::zero_new_area`] and
/// [`Array::apply_resize`] on the opened array. The rows the volume had
/// keep their place: no data moves. `progress(done, total)` in bytes
/// zeroed.
///
/// Errors: as [`open`], and as the three steps.
pub fn resize(specs: &[MemberSpec], size: NewSize, progress: &mut dyn FnMut(u64, u64)) -> Result<ResizeReport> {
    let t0 = crate::clock::now();
    let mut a = open(specs)?;
    let plan = a.plan_resize(size)?;
    a.zero_new_area(&plan, progress)?;
    let mut rep = a.apply_resize(&plan)?;
    a.release();
    rep.seconds = crate::clock::since(t0).as_secs_f64();
    Ok(rep)
}

/// A volume growth [`Array::plan_resize`] checked, for
/// [`Array::zero_new_area`] and [`Array::apply_resize`].
#[derive(Debug, Clone)]
pub struct ResizePlan {
    /// Index of the volume in the volume table (the last).
    pub volume: usize,
    /// Its bytes per member before and after.
    pub member_size: (u64, u64),
    /// Its usable bytes before and after.
    pub capacity: (u64, u64),
}

impl Array {
    /// Checks growing the last volume to `size` (see [`resize`]) and says
    /// what it takes; writes nothing.
    ///
    /// Errors: `Membership` for a reshape under way, an array opened only
    /// and not stopped cleanly, or a role not active; `InvalidInput` for a
    /// size not larger than the volume's (shrinking is not offered: it
    /// would drop data) or past the room the members have (the message
    /// says how much they have), a journal region on a member past the
    /// volume, or a bitmap that would need more regions than its area
    /// holds.
    pub fn plan_resize(&self, size: NewSize) -> Result<ResizePlan> {
        self.not_frozen()?;
        let sb = self.superblock();
        let name = sb.name.clone();
        if sb.reshape.is_some() {
            bail!(Membership, "array '{name}' is in the middle of a reshape; assemble it (which finishes it), then grow it. Nothing was written");
        }
        if sb.state != State::Clean && !self.replayed {
            bail!(Membership, "array '{name}' was not stopped cleanly; assemble it (which resyncs it) and stop it, then grow. Nothing was written");
        }
        if let Some(r) = (0..self.member_count()).find(|&r| self.health.state(r) != MemberState::Active) {
            bail!(
                Membership,
                "role {r} of array '{name}' is {}; growing a volume needs every member present and in sync. Nothing was written",
                self.health.state(r).name()
            );
        }
        let i = sb.volumes.len() - 1;
        let v = sb.volumes[i].clone();
        let level = Level::from_number(v.level)?;
        let n = sb.member_count as usize;
        if let Some(r) = sb.volumes.iter().filter_map(|v| v.journal_region).next() {
            bail!(
                InvalidInput,
                "array '{name}' keeps a write journal on role {} past its volumes (bytes {}..{}); a volume cannot grow into it. \
                 Nothing was written",
                r.role,
                r.start,
                r.end()
            );
        }
        // The room: the smallest device held.
        let smallest = self.meta().devices.iter().flatten().map(Member::size).min().unwrap_or(0);
        let room = smallest.saturating_sub(v.member_start) / v.chunk * v.chunk;
        let cap = |m: u64| Geometry::new(level, n, v.chunk, m).map(|g| g.capacity()).unwrap_or(0);
        let new_size = match size {
            NewSize::Max => room,
            NewSize::Bytes(want) => {
                // The least whole number of chunks per member that holds `want`.
                let (mut lo, mut hi) = (v.member_size / v.chunk, room / v.chunk + 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if cap(mid * v.chunk) >= want {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                lo * v.chunk
            }
        };
        let old_cap = cap(v.member_size);
        if new_size > room {
            bail!(
                InvalidInput,
                "volume '{}' of array '{name}' can hold at most {} ({} bytes) on these members (the smallest has {}); nothing was written",
                v.name,
                fmt_size(cap(room)),
                cap(room),
                fmt_size(smallest)
            );
        }
        if cap(new_size) <= old_cap {
            bail!(
                InvalidInput,
                "volume '{}' of array '{name}' holds {} ({old_cap} bytes) already, and the members have no more room past it{}; \
                 nothing was written (a volume is not shrunk: that would drop data)",
                v.name,
                fmt_size(old_cap),
                if size == NewSize::Max { "" } else { " for more than that" }
            );
        }
        let new_end = v.member_start + new_size;
        if sb.bitmap_region > 0 && (new_end - DATA_OFFSET).div_ceil(sb.bitmap_region) > crate::raid::bitmap::MAX_REGIONS {
            bail!(
                InvalidInput,
                "array '{name}': its write-intent bitmap of {} regions cannot cover {}; create the array with a larger \
                 --bitmap-region. Nothing was written",
                fmt_size(sb.bitmap_region),
                fmt_size(new_end - DATA_OFFSET)
            );
        }
        Ok(ResizePlan { volume: i, member_size: (v.member_size, new_size), capacity: (old_cap, cap(new_size)) })
    }

    /// Writes zeros over the area `plan` adds, on every member, and
    /// flushes them (copies and parity of zeros agree). Nothing uses that
    /// area yet: a served array goes on meanwhile. `progress(done,
    /// total)` in bytes.
    ///
    /// Errors: `Io` from the writes or the flush (nothing else changed).
    pub fn zero_new_area(&self, plan: &ResizePlan, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let (start, n) = {
            let m = self.meta();
            (m.sb.volumes[plan.volume].member_start, m.n())
        };
        let roles: Vec<Member> = self.meta().devices[..n].iter().flatten().map(Member::try_clone).collect::<Result<_>>()?;
        let (from, len) = (start + plan.member_size.0, plan.member_size.1 - plan.member_size.0);
        let zeros = IoBuf::new(1 << 20);
        let total = len * roles.len() as u64;
        let mut done = 0u64;
        for m in &roles {
            let mut at = 0u64;
            while at < len {
                let k = (len - at).min(1 << 20) as usize;
                m.write_all_at(&zeros[..k], from + at)?;
                at += k as u64;
                done += k as u64;
                progress(done, total);
            }
            m.file().sync_data().map_err(|e| Error::io("cannot flush", std::path::Path::new(m.name()), e))?;
        }
        Ok(())
    }

    /// Makes the volume of `plan` larger, once [`zero_new_area`](Self::zero_new_area)
    /// has run: the volume table says so (every superblock; the event
    /// counter goes up by one), the write-intent bitmap is made again over the larger data
    /// area (every region counted as written, so a later rebuild skips
    /// nothing), and the volumes are made again (take them again; a
    /// grown volume's cache starts empty, so close it first: its dirty
    /// data is written back then). Users of the volumes must be quiet.
    ///
    /// Errors: `Io` from the superblock or bitmap writes.
    pub fn apply_resize(&mut self, plan: &ResizePlan) -> Result<ResizeReport> {
        let (name, v, region) = {
            let mut m = self.meta();
            m.sb.volumes[plan.volume].member_size = plan.member_size.1;
            (m.sb.name.clone(), m.sb.volumes[plan.volume].clone(), m.sb.bitmap_region)
        };
        self.persist()?;
        if region > 0 {
            let end = v.member_end();
            let roles = self.meta().roles.clone();
            let b = Bitmap::create(roles, self.health.clone(), region, end)?;
            // Every region written: a rebuild skips regions never written,
            // and the old bitmap's record of them is gone with it.
            b.start_write(DATA_OFFSET, end - DATA_OFFSET)?;
            b.end_write(DATA_OFFSET, end - DATA_OFFSET);
            self.bitmap = Some(Arc::new(b));
            if self.daemon.take().is_some() {
                self.start_daemon();
            }
        }
        let old = std::mem::take(&mut self.volumes);
        let count = self.meta().sb.volumes.len();
        self.volumes = (0..count).map(|j| self.make_volume(j, if j == plan.volume { None } else { old.get(j) })).collect::<Result<_>>()?;
        Ok(ResizeReport {
            array: name,
            volume: v.name,
            level: v.level,
            capacity: plan.capacity,
            member_size: plan.member_size,
            bytes_zeroed: (plan.member_size.1 - plan.member_size.0) * self.member_count() as u64,
            seconds: 0.0,
        })
    }
}
