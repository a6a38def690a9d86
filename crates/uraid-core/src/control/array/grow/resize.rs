//! `grow --size`: the last volume grows into the room past it on every
//! member; the new area is zeroed first, then the volume table says so.
//! No data moves.

use std::sync::Arc;

use crate::control::array::{open, Array};
use crate::control::superblock::{State, DATA_OFFSET};
use crate::io::member::{Member, MemberSpec};
use crate::raid::bitmap::Bitmap;
use crate::raid::geometry::Level;
use crate::raid::health::MemberState;
use crate::units::fmt_size;
use crate::{bail, Error, IoBuf, Result};

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
        if sb.state != State::Clean && !self.vols.replayed() {
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
        Level::from_number(v.level)?;
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
        let cap = |m: u64| crate::control::superblock::VolumeEntry { member_size: m, ..v.clone() }.geometry(n).map(|g| g.capacity()).unwrap_or(0);
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
        // With a live-data map, the regions not live may hold anything:
        // zero them (marking them live) before the new bitmap counts every
        // region as written.
        if let Some(b) = self.bitmap.as_ref().filter(|b| b.live_map()) {
            b.start_write(DATA_OFFSET, b.data_end() - DATA_OFFSET)?;
            b.end_write(DATA_OFFSET, b.data_end() - DATA_OFFSET);
        }
        let (name, v, region, sb) = {
            let mut m = self.meta();
            m.sb.volumes[plan.volume].member_size = plan.member_size.1;
            (m.sb.name.clone(), m.sb.volumes[plan.volume].clone(), m.sb.bitmap_region, m.sb.clone())
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
            self.bitmap = Some(Arc::new(b.with_live_map_areas(sb.live_map, sb.redundant_areas())));
            if self.daemon.take().is_some() {
                self.start_daemon();
            }
        }
        let over = self.over();
        self.vols.rebuild(&over, Some(plan.volume))?;
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
