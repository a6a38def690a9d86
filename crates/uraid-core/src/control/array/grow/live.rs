//! A served array's reshape: [`Array::grow_live`] checks and records it,
//! freezes the array and hands a [`LiveGrow`] whose volume routes users
//! by the position (`raid/reshape.rs`) while [`LiveGrow::step`] moves the
//! windows; [`LiveGrow::finish`] makes the array whole again.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::backup::check_backup_rooms;
use super::plan::{plan, reshape_superblock, Change};
use super::window::{next_volume, run, Served};
use super::{layouts, open_added, persist_all, record_geometries, slot_order, stopped, GrowOptions, GrowReport};
use crate::control::array::{Array, Meta};
use crate::control::superblock::{State, Superblock};
use crate::io::member::{Member, MemberSpec};
use crate::raid::bitmap::Bitmap;
use crate::raid::engine::Shared;
use crate::raid::health::{Health, MemberState};
use crate::raid::reshape::ReshapeState;
use crate::{bail, ErrorKind, Result, Volume};

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
pub(super) fn array_over(devs: &[Member], specs: Vec<Option<MemberSpec>>, sb: &Superblock) -> Result<Array> {
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
        region => Some(Arc::new(Bitmap::load(meta.roles.clone(), health.clone(), region, sb.data_end())?.with_live_map_areas(sb.live_map, sb.redundant_areas()))),
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
    /// in sync, or the array is not activated; as `plan`; as [`grow`](super::grow)
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
        if cached.is_some() || !self.vols.journals().is_empty() {
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
        let old_raid = self.vols.all()[0].raid().clone();
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
}
