//! The reshape's mover: the windows of a restripe in order, each read from
//! the old layout (a reader thread reads ahead), written through the new
//! one, flushed, and only then recorded as the position in every
//! superblock; the members the data paths failed meanwhile are recorded,
//! and the reshape goes on degraded while both layouts survive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use super::backup::{read_backup, spread_backup, write_backup};
use super::{persist_all, GrowReport};
use crate::control::array::volume_survives;
use crate::control::superblock::{ReshapeBackup, State, Superblock};
use crate::io::member::Member;
use crate::raid::geometry::Geometry;
use crate::raid::health::{Health, MemberState};
use crate::raid::reshape::ReshapeState;
use crate::{bail, BlockQueue, Error, ErrorKind, IoBuf, Request, Result, Volume};

/// Windows read ahead of the one being written (besides the one being
/// read), so that the reads go on while a window is flushed and recorded.
const READ_AHEAD: usize = 2;

/// Most logical bytes one window of the reshape moves.
const WINDOW: u64 = 64 << 20;

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
pub(super) fn unit(g: &Geometry) -> (u64, u64) {
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
pub(super) fn windows(old: &Geometry, new: &Geometry, start: u64, max_units: u64, spread: Option<u64>) -> impl Iterator<Item = (u64, u64, bool)> {
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

/// What the reshape of a served array shares with the export.
pub(super) struct Served<'a> {
    /// The position, and the range being moved, that route the users'
    /// requests.
    pub(super) state: &'a ReshapeState,
    /// Set to stop at the end of the next window (a command waits, or the
    /// service stops).
    pub(super) stop: &'a AtomicBool,
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
pub(super) fn run(
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
    let mv = Mover::new(devs, sb, new_vol, health, served);
    let (old_g, new_g) = (*old_vol.raid().geometry(), *new_vol.raid().geometry());
    let (old_cap, new_cap) = (old_g.capacity(), new_g.capacity());
    let mut report = first_report(sb, (old_cap, new_cap));
    // A window that was being written from the backup: write it again.
    mv.rewrite_backup(sb, &mut report)?;
    let max_units = (if served.is_some() { SERVED_WINDOW } else { WINDOW } / mv.unit.0).max(1);
    let start = sb.reshape.expect("recorded").position;
    // The windows, in order: (logical start, length, through the backup).
    let spread = spread_backup(sb).map(|(_, room)| room);
    let windows = move || windows(&old_g, &new_g, start, max_units, spread);
    let mut paced = 0u64;
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
        scope.spawn(move || read_ahead(old_vol, windows(), state, &go_rx, &tx));
        for (window, (pos, len, critical)) in windows().enumerate() {
            if served.is_some() {
                let _ = go_tx.send(());
            }
            let (at, data) = rx.recv().map_err(|_| Error::new(ErrorKind::Interrupted, "the reshape's reader thread ended early"))??;
            debug_assert_eq!((at, data.len() as u64), (pos, len));
            debug_assert!(pos + len <= new_cap, "a reshape window ends inside the new layout");
            report.bytes_read += old_cap.saturating_sub(pos).min(len);
            mv.write_window(sb, window as u64, pos, data, critical, &mut report)?;
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
    if served.is_none() {
        end_volume(devs, sb)?;
    }
    Ok(report)
}

/// The report of a run of the reshape `sb` records, before it moves
/// anything: the volume's usable bytes before and after (`capacity`).
fn first_report(sb: &Superblock, capacity: (u64, u64)) -> GrowReport {
    let r = sb.reshape.expect("a reshape is recorded");
    GrowReport {
        array: sb.name.clone(),
        level: sb.volumes[r.volume as usize].level,
        members: (r.old_members, sb.member_count),
        volumes: 1,
        capacity,
        started_at: r.position,
        bytes_read: 0,
        bytes_written: 0,
        backed_up_rows: 0,
        seconds: 0.0,
    }
}

/// The reader thread of [`run`]: reads each window of `windows` from the
/// old layout `old_vol` (its bytes past the old capacity are zeros) and
/// hands it over `tx`; with a served array's `state`, each only once `go`
/// says so, locked against the users from then on. Ends after the last
/// window, after a read error (handed over), or when the writer is gone.
fn read_ahead(
    old_vol: &Arc<Volume>,
    windows: impl Iterator<Item = (u64, u64, bool)>,
    state: Option<&ReshapeState>,
    go: &Receiver<()>,
    tx: &SyncSender<Result<(u64, Vec<u8>)>>,
) {
    let old_cap = old_vol.raid().geometry().capacity();
    let wo = unit(old_vol.raid().geometry()).0;
    for (pos, len, _) in windows {
        if let Some(st) = state {
            if go.recv().is_err() {
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
}

/// What the writing side of one [`run`] works with.
struct Mover<'a> {
    /// Every device, in slot order.
    devs: &'a [Member],
    /// The new layout.
    new_vol: &'a Arc<Volume>,
    /// The member states of the old layout and of the new one.
    health: [&'a Health; 2],
    served: Option<&'a Served<'a>>,
    /// The new layout's unit (see [`unit`]): (logical bytes, member bytes).
    unit: (u64, u64),
    /// Roles in the new layout.
    members: usize,
    /// Roles in the old layout (the first new member's role).
    old_n: usize,
    /// The end of the volume's area on each member, in bytes.
    area_end: u64,
    /// The new layout's chunk, in bytes.
    chunk: u64,
}

impl<'a> Mover<'a> {
    fn new(devs: &'a [Member], sb: &Superblock, new_vol: &'a Arc<Volume>, health: [&'a Health; 2], served: Option<&'a Served<'a>>) -> Self {
        let r = sb.reshape.expect("a reshape is recorded");
        let v = &sb.volumes[r.volume as usize];
        let g = new_vol.raid().geometry();
        Mover {
            devs,
            new_vol,
            health,
            served,
            unit: unit(g),
            members: sb.member_count as usize,
            old_n: r.old_members as usize,
            area_end: v.member_start + v.member_size,
            chunk: g.chunk(),
        }
    }

    /// Member bytes (data and parity) written for `bytes` logical bytes of
    /// the new layout.
    fn written_for(&self, bytes: u64) -> u64 {
        bytes / self.unit.0 * self.unit.1 * self.members as u64
    }

    /// Where on the first new member the backup of a window of `len`
    /// bytes goes: the last whole chunks of its area, which the new
    /// layout writes last.
    fn backup_at(&self, len: u64) -> u64 {
        self.area_end - len.div_ceil(self.chunk) * self.chunk
    }

    /// The window that was being written from the backup when the reshape
    /// stopped (if the record keeps one): written again from it, and the
    /// position moved past it.
    fn rewrite_backup(&self, sb: &mut Superblock, report: &mut GrowReport) -> Result<()> {
        let r = sb.reshape.expect("a reshape is recorded");
        let Some(k) = r.backup else { return Ok(()) };
        let buf = read_backup(self.devs, sb, &k)?;
        if let Some(l) = self.served {
            l.state.lock_to(r.position + k.len);
        }
        self.new_vol.write_at(r.position, &buf)?;
        self.new_vol.flush()?;
        report.bytes_read += k.len;
        report.bytes_written += self.written_for(k.len);
        set_position(self.devs, sb, r.position + k.len, None)?;
        if let Some(l) = self.served {
            l.state.advance(r.position + k.len, false);
        }
        Ok(())
    }

    /// Writes window number `window`, `data` from logical byte `pos`,
    /// through the new layout: to the backup area first when `critical`
    /// (md's critical section, recorded with the position), then in place,
    /// flushed; the members the data paths failed meanwhile are recorded,
    /// then the position past the window (a served array's users go to the
    /// new layout there from then on).
    fn write_window(&self, sb: &mut Superblock, window: u64, pos: u64, mut data: Vec<u8>, critical: bool, report: &mut GrowReport) -> Result<()> {
        let crash = crate::io::fault::reshape_crash_point;
        let (len, wn) = (data.len() as u64, self.unit.0);
        if critical {
            // md's critical section: the bytes go to the backup area first.
            let k = write_backup(self.devs, sb, self.health, &data, self.old_n, |len| self.backup_at(len))?;
            report.bytes_written += len;
            report.backed_up_rows += len / wn;
            set_position(self.devs, sb, pos, Some(k))?;
            crash(window, "backed-up");
        }
        // In two halves, so that the crash tests can stop between them:
        // whole rows (full stripes) when the window has several, else
        // half a row (whole 512-byte blocks).
        let half = if len >= 2 * wn { len / wn / 2 * wn } else { (len / 2) & !511 };
        move_window(self.new_vol, true, pos, &mut data[..half as usize], wn)?;
        crash(window, "half");
        move_window(self.new_vol, true, pos + half, &mut data[half as usize..], wn)?;
        self.new_vol.flush()?;
        crash(window, "written");
        report.bytes_written += self.written_for(len);
        // A member the data paths failed meanwhile: the window was
        // written without it (degraded), and the superblocks say so.
        note_failures(sb, self.health)?;
        set_position(self.devs, sb, pos + len, None)?;
        if let Some(l) = self.served {
            l.state.advance(pos + len, false);
        }
        Ok(())
    }
}

/// The end of a stopped array's run over a volume: the next volume's
/// restripe recorded (a Matrix array), or the record dropped and the
/// array clean; active after a served array's reshape that a crash cut
/// (users' writes may have been cut too: the assemble that follows
/// resyncs).
fn end_volume(devs: &[Member], sb: &mut Superblock) -> Result<()> {
    let live = sb.reshape.expect("recorded").live;
    if next_volume(devs, sb)? {
        return Ok(());
    }
    sb.reshape = None;
    sb.state = if live { State::Active } else { State::Clean };
    persist_all(devs, sb)
}

/// A Matrix array whose reshape `sb` records at the end of a volume that
/// is not the last: records (in every superblock of `devs`) that the next
/// volume's restripe starts, and returns true; false for the last volume.
pub(super) fn next_volume(devs: &[Member], sb: &mut Superblock) -> Result<bool> {
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
pub(super) fn note_failures(sb: &mut Superblock, health: [&Health; 2]) -> Result<()> {
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
pub(super) fn down_roles_of(sb: &Superblock) -> Vec<bool> {
    sb.roles().iter().map(|s| matches!(s.state, MemberState::Faulty | MemberState::Missing)).collect()
}

/// Whether both layouts of the reshape `sb` records keep every byte with
/// the roles flagged in `down` unavailable.
pub(super) fn layouts_survive(sb: &Superblock, down: &[bool]) -> bool {
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
    debug_assert!(position >= r.position, "the reshape position moves forward only");
    r.position = position;
    r.backup = backup;
    persist_all(devs, sb)
}
