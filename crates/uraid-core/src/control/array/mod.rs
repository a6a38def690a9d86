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
//! [`Volume`](crate::Volume) per entry of the superblock's volume table (Intel Matrix-style
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
//! role (`add`, `replace`, `remove`, a spare taking over): [`Volume`](crate::Volume)s taken
//! with [`Array::volume`] before such a change still refer to the old
//! devices, so take them again afterwards.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::raid::bitmap::{Bitmap, BitmapDaemon};
use crate::raid::geometry::DEFAULT_CHUNK;
use crate::raid::health::Health;
use crate::io::member::{check_distinct, Member, MemberSpec, OpenMode};
use crate::control::superblock::{fmt_uuid, DecodeError, Superblock};
use crate::{bail, Error, ErrorKind, Result};

mod assemble;
mod config;
mod create;
mod examine;
mod grow;
mod maintenance;
mod membership;
mod meta;
mod spare_space;
mod status;
mod survival;
mod volumes;

pub use assemble::*;
pub use config::*;
pub use create::*;
pub use examine::*;
pub use membership::Replacement;
pub use grow::{grow, resize, GrowOptions, GrowReport, LiveChange, LiveGrow, NewSize, ResizePlan, ResizeReport};
pub use spare_space::SpareUse;
pub use status::*;
use meta::{placeholder, read_superblock, write_superblock, Meta};
use volumes::VolumeSet;
use membership::{Membership, Released};
use survival::volume_survives;

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
    /// Declustered volumes (draid5, draid6): data chunks per group (D);
    /// `None`: [`default_data`](crate::raid::level::default_data).
    pub data: Option<u32>,
    /// Declustered volumes: distributed spares (S); `None`:
    /// [`default_spares`](crate::raid::level::default_spares).
    pub spares: Option<u32>,
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
            data: None,
            spares: None,
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
    /// The volumes, their journals, whether those were replayed.
    vols: VolumeSet,
    warnings: Vec<String>,
    /// Opened with `inspect`: never activated.
    inspect: bool,
    /// Devices given that are no longer members (removed or replaced),
    /// left out of an array opened with `inspect`.
    pub(super) stale: Vec<String>,
    /// A reshape of the served array is under way ([`Array::grow_live`]):
    /// this array writes no superblock; the reshape's are the truth.
    frozen: bool,
    /// The membership rules, and the faulty devices whose role a spare
    /// took over (listed until [`remove`](Self::remove)d).
    membership: Membership,
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

impl Array {
    fn new(
        meta: Meta,
        health: Arc<Health>,
        bitmap: Option<Arc<Bitmap>>,
        warnings: Vec<String>,
        journals: Vec<Arc<crate::cache::journal::Journal>>,
        inspect: bool,
    ) -> Result<Array> {
        debug_assert_eq!(health.members(), meta.n(), "one member state per role");
        let meta = Arc::new(Mutex::new(meta));
        let hook_meta = Arc::downgrade(&meta);
        health.set_on_change(move |h, _role| match hook_meta.upgrade() {
            Some(m) => m.lock().unwrap_or_else(|e| e.into_inner()).persist(h),
            None => Ok(()),
        });
        let mut a = Array { meta, health, bitmap, daemon: None, vols: VolumeSet::new(journals), warnings, inspect, stale: Vec::new(), frozen: false, membership: Membership::new() };
        for j in a.vols.journals() {
            a.watch_journal(j);
        }
        a.build_volumes()?;
        a.load_spare_space();
        Ok(a)
    }

    fn meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
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
        self.membership.released_index(&id).map(|i| (total + i) as u32)
    }

    /// The slot (role or spare) whose device `spec` names, if any.
    pub(super) fn held_slot_of(&self, spec: &MemberSpec) -> Option<u32> {
        let id = spec.identity().ok()?;
        let m = self.meta();
        m.specs.iter().position(|s| s.as_ref().and_then(|s| s.identity().ok()).as_ref() == Some(&id)).map(|s| s as u32)
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
    use crate::raid::geometry::{Geometry, Level};

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
