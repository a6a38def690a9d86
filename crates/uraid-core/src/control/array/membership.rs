//! The array's membership: [`Membership`], the rules of who holds which
//! slot (roles, then spares) and what each change may do to which slot
//! (fail, remove, add, replace, spares taking over failed roles), with
//! the faulty devices released from their roles as its own state; and the
//! [`Array`] operations that apply its decisions (the devices, the
//! superblocks, the volumes over the new members, the start of a
//! rebuild), and which slot a member's name or number means (`resolve`).
//! Each change is checked in full before anything is written, and each
//! bumps the event counter and rewrites the superblocks.

use std::sync::{Arc, Mutex, MutexGuard};

use super::create::{open_free, refuse_signature, zero_volumes};
use super::meta::read_superblock;
use super::survival::{describe_volume, down_roles, level_tolerance, lost_volumes};
use super::{Added, Array};
use crate::control::superblock::{self, Slot, VolumeEntry, MAX_SPARES};
use crate::io::member::{Identity, Member, MemberSpec};
use crate::raid::health::MemberState;
use crate::units::fmt_size;
use crate::{bail, Result};

/// How [`Array::replace`] puts the new device into the role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// Into the role at once, rebuilt there (a stopped array: nobody
    /// uses its volumes).
    InPlace,
    /// As a spare, the role failed: a served array's manager moves the
    /// spare in (`attach_spares`, then `start_rebuilding`) once every user
    /// runs on the volumes over it.
    AsSpare,
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

/// The slot table as the membership rules read it: the array's name (for
/// messages), each role's state, and how many spare slots follow the
/// roles. A snapshot: the caller takes it under the array's state and acts
/// on the answer before anything changes.
#[derive(Debug, Clone)]
pub(super) struct Slots {
    /// The array's name.
    pub(super) name: String,
    /// The state of each role (`0 .. roles`).
    pub(super) states: Vec<MemberState>,
    /// Spare slots, numbered after the roles.
    pub(super) spares: u32,
    /// Whether each role holds a device.
    pub(super) held: Vec<bool>,
}

impl Slots {
    /// Number of roles.
    fn roles(&self) -> u32 {
        self.states.len() as u32
    }

    /// Slots: roles, then spares.
    fn total(&self) -> u32 {
        self.roles() + self.spares
    }

    /// The state of role `role` (below [`roles`](Self::roles)).
    fn state(&self, role: u32) -> MemberState {
        self.states[role as usize]
    }
}

/// What `remove` of a slot takes out (see [`Membership::removal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// The listing of a faulty device a spare took over (index in the
    /// released list): nothing else changes.
    Released(usize),
    /// A spare slot: dropped.
    Spare,
    /// A faulty role's device: the role becomes missing.
    Role,
    /// The old device of a role a distributed spare holds: the role stays
    /// held.
    SparedDevice,
}

/// The array's membership rules and the faulty devices released from
/// their roles (md's `(F)`, ZFS's FAULTED: listed until removed, so that
/// the administrator knows which drive to pull). [`Array`] holds one and
/// asks it before every membership change; it answers from a [`Slots`]
/// snapshot and writes nothing.
#[derive(Debug, Default)]
pub(super) struct Membership {
    /// Faulty devices whose role a spare took over; shared with
    /// [`StatusSource`](super::StatusSource).
    released: Arc<Mutex<Vec<Released>>>,
}

impl Membership {
    /// No device released yet.
    pub(super) fn new() -> Membership {
        Membership::default()
    }

    /// The released devices, shared (for a status taken later).
    pub(super) fn shared_released(&self) -> Arc<Mutex<Vec<Released>>> {
        self.released.clone()
    }

    fn released(&self) -> MutexGuard<'_, Vec<Released>> {
        self.released.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Index in the released list of the device whose identity is `id`.
    pub(super) fn released_index(&self, id: &Identity) -> Option<usize> {
        self.released().iter().position(|r| r.spec.as_ref().and_then(|s| s.identity().ok()).as_ref() == Some(id))
    }

    /// Lists a faulty device released from its role.
    pub(super) fn release(&self, r: Released) {
        self.released().push(r);
    }

    /// A released device comes back (given to `add` or `replace`): it is
    /// no longer a leftover to pull.
    pub(super) fn forget(&self, id: &Identity) {
        self.released().retain(|r| r.spec.as_ref().and_then(|s| s.identity().ok()).as_ref() != Some(id));
    }

    /// Checks that `role` is a role of the array. Errors: `InvalidInput`.
    pub(super) fn check_role(s: &Slots, role: u32) -> Result<()> {
        if role >= s.roles() {
            bail!(InvalidInput, "array '{}' has no role {role}: its roles are 0 to {}", s.name, s.roles() - 1);
        }
        Ok(())
    }

    /// Checks that `role` may be failed: a role (not a spare's slot)
    /// that is active, rebuilding, or held by a distributed spare (which
    /// it then loses). Errors: `InvalidInput`.
    pub(super) fn check_fail(s: &Slots, role: u32) -> Result<()> {
        if role >= s.roles() && role < s.total() {
            bail!(
                InvalidInput,
                "slot {role} of array '{}' is a spare: it holds no data to fail; take it out with 'uraid remove'",
                s.name
            );
        }
        Self::check_role(s, role)?;
        match s.state(role) {
            MemberState::Active | MemberState::Rebuilding | MemberState::Spared => Ok(()),
            st => bail!(InvalidInput, "role {role} of array '{}' is already {}; nothing to fail", s.name, st.name()),
        }
    }

    /// What `remove` of `slot` takes out: a released device's listing
    /// (numbered after the spares), a spare, or a faulty role's device.
    /// Errors: `InvalidInput` (no such slot; an active or rebuilding
    /// member: fail it first or use replace; a role without a device).
    pub(super) fn removal(&self, s: &Slots, slot: u32) -> Result<Removal> {
        let (n, total) = (s.roles(), s.total());
        let released = self.released().len() as u32;
        if slot >= total && slot < total + released {
            return Ok(Removal::Released((slot - total) as usize));
        }
        if slot >= total {
            bail!(
                InvalidInput,
                "array '{}' has no slot {slot}: roles 0 to {}{}{}",
                s.name,
                n - 1,
                if total > n { format!(", spares {} to {}", n, total - 1) } else { String::new() },
                if released > 0 { format!(", faulty devices replaced by a spare {} to {}", total, total + released - 1) } else { String::new() }
            );
        }
        if slot >= n {
            return Ok(Removal::Spare);
        }
        match s.state(slot) {
            MemberState::Faulty => Ok(Removal::Role),
            MemberState::Spared if s.held.get(slot as usize).copied().unwrap_or(false) => Ok(Removal::SparedDevice),
            MemberState::Missing => bail!(InvalidInput, "role {slot} of array '{}' has no member to remove", s.name),
            st => bail!(
                InvalidInput,
                "role {slot} of array '{}' is {}; only faulty members and spares can be removed. Fail it first \
                 ('uraid fail'), or use 'uraid replace' to swap it for another drive",
                s.name,
                st.name()
            ),
        }
    }

    /// Removes the listing `i` of a released device.
    pub(super) fn drop_released(&self, i: usize) {
        self.released().remove(i);
    }

    /// The role a new device goes into: the first without a member
    /// (missing), else the first a distributed spare holds (its chunks
    /// move back: the rebalance); `None`: it becomes a spare.
    pub(super) fn role_for_new(s: &Slots) -> Option<u32> {
        let first = |want: MemberState| s.states.iter().position(|&st| st == want).map(|r| r as u32);
        first(MemberState::Missing).or_else(|| first(MemberState::Spared))
    }

    /// Checks that the array has room for one more spare. Errors:
    /// `InvalidInput` when it holds [`MAX_SPARES`].
    pub(super) fn check_spare_room(s: &Slots) -> Result<()> {
        if s.spares as usize >= MAX_SPARES {
            bail!(InvalidInput, "array '{}' already has {MAX_SPARES} spares, the most it can hold", s.name);
        }
        Ok(())
    }

    /// The roles that get a spare, in order, each taking the first spare
    /// left: the faulty and missing roles, as long as spares last.
    pub(super) fn spare_moves(s: &Slots) -> Vec<u32> {
        let down = (0..s.roles()).filter(|&r| matches!(s.state(r), MemberState::Faulty | MemberState::Missing));
        let spared = (0..s.roles()).filter(|&r| s.state(r) == MemberState::Spared);
        down.chain(spared).take(s.spares as usize).collect()
    }

    /// Checks that `role` may be replaced `how`: a role (not a spare's
    /// slot). Errors: `InvalidInput`.
    pub(super) fn check_replace(s: &Slots, role: u32, how: Replacement) -> Result<()> {
        match how {
            Replacement::InPlace => Self::check_role(s, role),
            Replacement::AsSpare if role >= s.roles() => bail!(InvalidInput, "slot {role} is a spare, not a role: nothing to replace"),
            Replacement::AsSpare => Ok(()),
        }
    }
}

impl Array {
    /// The slot table now, for the membership rules.
    pub(super) fn slots(&self) -> Slots {
        let m = self.meta();
        let held = (0..m.n()).map(|r| m.devices[r].is_some()).collect();
        Slots { name: m.sb.name.clone(), states: self.health.states(), spares: (m.sb.slots.len() - m.n()) as u32, held }
    }

    /// Checks that `role` is a role of the array. Errors: `InvalidInput`.
    pub(super) fn check_role(&self, role: u32) -> Result<()> {
        Membership::check_role(&self.slots(), role)
    }

    /// The volumes that would lose data if `role` went down as well.
    pub(super) fn lost_if_down(&self, role: u32) -> Vec<VolumeEntry> {
        let mut down = down_roles(&self.health);
        down[role as usize] = true;
        let m = self.meta();
        lost_volumes(&m.sb, &down).into_iter().map(|i| m.sb.volumes[i].clone()).collect()
    }

    pub(super) fn refuse_past_tolerance(&self, role: u32, what: &str) -> Result<()> {
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
        self.not_frozen()?;
        Membership::check_fail(&self.slots(), role)?;
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
    /// becomes missing (ready for `add`), a spare's slot is dropped, a
    /// faulty device a spare took over (numbered after the spares) is no
    /// longer listed. The other superblocks record it (event counter + 1).
    ///
    /// Errors: `InvalidInput` (no such slot; an active or rebuilding member:
    /// fail it first or use replace; a role without a device).
    pub fn remove(&mut self, slot: u32) -> Result<()> {
        self.not_frozen()?;
        match self.membership.removal(&self.slots(), slot)? {
            Removal::Released(i) => {
                // A faulty device a spare took over: only its listing goes.
                self.membership.drop_released(i);
                return self.persist();
            }
            Removal::Spare => {
                let mut m = self.meta();
                m.sb.slots.remove(slot as usize);
                m.devices.remove(slot as usize);
                m.specs.remove(slot as usize);
                drop(m);
                return self.persist();
            }
            Removal::Role => {}
            Removal::SparedDevice => {
                let mut m = self.meta();
                m.devices[slot as usize] = None;
                m.specs[slot as usize] = None;
                drop(m);
                self.rebuild_after_membership_change()?;
                return self.persist();
            }
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
    pub(super) fn open_new(&self, spec: &MemberSpec, force: bool) -> Result<Member> {
        if let Some(s) = self.held_slot_of(spec) {
            bail!(InvalidInput, "{spec} is already slot {s} of array '{}'", self.name());
        }
        let m = open_free(spec, false)?;
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
        let ours = match read_superblock(&m)? {
            Ok(sb) if sb.array_uuid == uuid => Some(sb.member_uuid),
            _ => None,
        };
        // A device of this array given again, not among the devices the
        // array was opened with: its superblock says which slot it holds.
        // Only a role that lost its device (missing) takes it back (see
        // `returning_role`); anything else would be a second slot for
        // one drive.
        if let Some(member) = ours.filter(|u| *u != [0; 16]) {
            let g = self.meta();
            if let Some(s) = g.sb.slots.iter().position(|sl| sl.uuid == member) {
                let missing = s < g.n() && self.health.state(s as u32) == MemberState::Missing;
                if !missing {
                    let what = if s < g.n() { format!("role {s} ({})", self.health.state(s as u32).name()) } else { format!("spare slot {s}") };
                    bail!(
                        InvalidInput,
                        "{} is already {what} of array '{name}' (its superblock says so): nothing was added. Give it \
                         with the array's other devices to use it, or 'uraid remove' it first",
                        m.name()
                    );
                }
            }
        }
        if !force && ours.is_none() {
            refuse_signature(&m)?;
        }
        // A faulty device listed since a spare took its role over comes
        // back: it is no longer a leftover to pull.
        if let Ok(id) = spec.identity() {
            self.membership.forget(&id);
        }
        Ok(m)
    }

    /// Puts a freshly opened, checked device into role `role` as
    /// rebuilding (recovery offset 0) and copies the bitmap onto it. A new
    /// device gets a new UUID and its volume areas zeroed (so that regions
    /// the rebuild skips read as zeros, like on every other member); a
    /// `returning` one (see [`returning_role`](Self::returning_role)) keeps
    /// both and is resynced from the bitmap.
    ///
    /// The role turns rebuilding only once the volumes are made again over
    /// the new device and no cache flusher pass runs on the old ones (the
    /// caches' flushers retargeted: [`crate::Volume::adopt_cache`]): such a
    /// pass writes to the role's old device when the role is writable, and
    /// that device's errors would fail the role, new device and all (found
    /// by the simulation, seed 5635165694676429584).
    pub(super) fn install(&mut self, role: u32, m: Member, spec: &MemberSpec, returning: bool) -> Result<()> {
        if !returning {
            let live_map = self.meta().sb.live_map;
            zero_volumes(&m, &self.volume_entries(), live_map)?;
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
        self.rebuild_after_membership_change()?;
        self.hand_over(role);
        self.health.set_state(role, MemberState::Rebuilding);
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
        self.not_frozen()?;
        let m = self.open_new(spec, force)?;
        if let Some(role) = self.returning_role(&m)? {
            self.install(role, m, spec, true)?;
            self.persist()?;
            return Ok(Added::ReAdded(role));
        }
        let added = if let Some(role) = Membership::role_for_new(&self.slots()) {
            self.install(role, m, spec, false)?;
            Added::Role(role)
        } else {
            Added::Spare(self.push_spare(m, spec)?)
        };
        self.promote_spares()?;
        self.persist()?;
        Ok(added)
    }

    /// Adds a device as a spare and nothing more (no spare moves into a
    /// role): for a live array, where a spare takes over a role only once
    /// the users of the volumes have moved to new volumes over it (see
    /// [`attach_spares`](Self::attach_spares)). The superblocks record it
    /// (event counter + 1). Returns its slot.
    ///
    /// Errors, before anything is written: as [`add`](Self::add).
    pub fn add_spare(&mut self, spec: &MemberSpec, force: bool) -> Result<u32> {
        self.not_frozen()?;
        let m = self.open_new(spec, force)?;
        let slot = self.push_spare(m, spec)?;
        self.persist()?;
        Ok(slot)
    }

    /// Zeroes the volume areas (see `create::zero_volumes`) of a checked new device and appends it as
    /// a spare slot (not persisted). Errors: `InvalidInput` when the array
    /// holds the most spares it can; `Io` from the zeroing.
    fn push_spare(&mut self, m: Member, spec: &MemberSpec) -> Result<u32> {
        Membership::check_spare_room(&self.slots())?;
        let live_map = self.meta().sb.live_map;
        zero_volumes(&m, &self.volume_entries(), live_map)?;
        let mut g = self.meta();
        g.sb.slots.push(Slot { uuid: superblock::new_uuid(), state: MemberState::Spare, resync_from_bitmap: false, recovery_offset: None });
        g.devices.push(Some(m));
        g.specs.push(Some(spec.clone()));
        Ok(g.sb.slots.len() as u32 - 1)
    }

    /// The role `m` held before it was removed, when it can be taken back
    /// with a resync from the bitmap (md's re-add): its superblock names
    /// this array and the member UUID that a missing role still records,
    /// and the array has a bitmap. Nobody else has held the role since
    /// (that would have recorded another UUID), so the array has been
    /// degraded ever since and its bitmap kept every region written
    /// meanwhile dirty.
    pub(super) fn returning_role(&self, m: &Member) -> Result<Option<u32>> {
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

    /// The role or slot `m` names (`uraid fail --member`, `remove`,
    /// `replace --old`, and the same commands on a served array): a
    /// number, taken as it is (the operation checks it), or the path of
    /// one of the array's devices (see [`slot_of`](Self::slot_of)).
    ///
    /// Errors: `InvalidInput` when `m` is neither a number nor a device
    /// of the array (the message says what to give instead), or is not a
    /// valid member spec.
    pub fn resolve(&self, m: &str) -> Result<u32> {
        if let Ok(n) = m.trim().parse::<u32>() {
            return Ok(n);
        }
        let spec: MemberSpec = m.parse()?;
        match self.slot_of(&spec) {
            Some(s) => Ok(s),
            None => bail!(
                InvalidInput,
                "{m} is not a member of array '{}'; give a role number (see 'uraid status') or the path of one of \
                 its members",
                self.name()
            ),
        }
    }

    /// Replaces the member in `role` with a new device (`uraid replace`),
    /// in one of two ways (see [`Replacement`]): `InPlace` on a stopped
    /// array (the old device is released, its superblock not written, and
    /// the new one is rebuilt in its place), `AsSpare` on a served one
    /// (the new device becomes a spare and the role, when it is still
    /// active or rebuilding, is failed: the service's takeover moves the
    /// spare in once its users run on the new volumes). The array runs
    /// without the role while it rebuilds (md's hot-replace, which keeps
    /// the old member in service until the new one is in sync, is not done
    /// here). Returns the slot the new device holds: `role` (`InPlace`) or
    /// its spare slot (`AsSpare`).
    ///
    /// Errors, before anything is written (`AsSpare`: a spare added before
    /// a refused fail is taken out again): as [`add`](Self::add), and
    /// `InvalidInput` (no such role; a spare's slot), `WouldDestroy`
    /// (taking an active member out would lose a volume's data and `force`
    /// is off).
    pub fn replace(&mut self, role: u32, spec: &MemberSpec, force: bool, how: Replacement) -> Result<u32> {
        self.not_frozen()?;
        Membership::check_replace(&self.slots(), role, how)?;
        match how {
            Replacement::InPlace => {
                if !force && self.health.state(role) == MemberState::Active {
                    self.refuse_past_tolerance(role, "replacing")?;
                }
                let m = self.open_new(spec, force)?;
                self.install(role, m, spec, false)?;
                self.persist()?;
                Ok(role)
            }
            Replacement::AsSpare => {
                let slot = self.add_spare(spec, force)?;
                if matches!(self.health.state(role), MemberState::Active | MemberState::Rebuilding) {
                    if let Err(e) = self.fail(role, force) {
                        // Nothing else changes: the new drive goes again.
                        let _ = self.remove(slot);
                        return Err(e);
                    }
                }
                Ok(slot)
            }
        }
    }

    /// Moves spares into faulty or missing roles (faulty devices are
    /// released), where they are rebuilt, as md does on its own. Returns
    /// the roles that got a spare; persists when there were any.
    pub fn promote_spares(&mut self) -> Result<Vec<u32>> {
        self.not_frozen()?;
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
        self.not_frozen()?;
        let attached = Membership::spare_moves(&self.slots());
        for &role in &attached {
            let mut g = self.meta();
            let n = g.n();
            let slot = g.sb.slots.remove(n);
            let dev = g.devices.remove(n);
            let spec = g.specs.remove(n);
            let r = role as usize;
            if let (MemberState::Faulty, Some(old)) = (self.health.state(role), &g.devices[r]) {
                // Listed as faulty until removed: the drive to pull.
                let gone = Released { role, name: old.name().to_string(), uuid: g.sb.slots[r].uuid, spec: g.specs[r].clone() };
                self.membership.release(gone);
            }
            g.sb.slots[r].uuid = slot.uuid;
            g.sb.slots[r].resync_from_bitmap = false;
            g.devices[r] = dev;
            g.specs[r] = spec;
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
        self.not_frozen()?;
        for &r in roles {
            self.check_role(r)?;
            self.lose_journals_on(r)?;
            self.hand_over(r);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemberState::{Active, Faulty, Missing, Rebuilding};

    fn slots(states: &[MemberState], spares: u32) -> Slots {
        Slots { name: "a".into(), states: states.to_vec(), spares, held: vec![true; states.len()] }
    }

    fn released(m: &Membership, role: u32) {
        m.release(Released { role, name: format!("d{role}"), uuid: [role as u8; 16], spec: None });
    }

    /// The rules the array's changes ask, from slot tables alone: which
    /// slots may be failed, removed, replaced; where a new device goes;
    /// which roles get a spare.
    #[test]
    fn membership_rules_on_slot_tables() {
        let s = slots(&[Active, Rebuilding, Faulty, Missing], 2);
        assert!(Membership::check_fail(&s, 0).is_ok() && Membership::check_fail(&s, 1).is_ok());
        for (role, says) in [(2, "already faulty"), (3, "already missing"), (4, "is a spare"), (6, "has no role 6")] {
            let e = Membership::check_fail(&s, role).unwrap_err().to_string();
            assert!(e.contains(says), "fail {role}: {e}");
        }
        let m = Membership::new();
        released(&m, 2);
        assert_eq!(m.removal(&s, 2).unwrap(), Removal::Role);
        assert_eq!(m.removal(&s, 4).unwrap(), Removal::Spare);
        assert_eq!(m.removal(&s, 6).unwrap(), Removal::Released(0));
        assert!(m.removal(&s, 0).unwrap_err().to_string().contains("only faulty members and spares"));
        assert!(m.removal(&s, 3).unwrap_err().to_string().contains("no member to remove"));
        let e = m.removal(&s, 7).unwrap_err().to_string();
        assert!(e.contains("roles 0 to 3, spares 4 to 5, faulty devices replaced by a spare 6 to 6"), "{e}");
        m.drop_released(0);
        assert!(m.removal(&s, 6).is_err());
        assert_eq!(Membership::role_for_new(&s), Some(3));
        assert_eq!(Membership::role_for_new(&slots(&[Active, Faulty], 0)), None);
        assert_eq!(Membership::spare_moves(&s), vec![2, 3]);
        assert_eq!(Membership::spare_moves(&slots(&[Faulty, Active, Missing], 1)), vec![0]);
        assert!(Membership::spare_moves(&slots(&[Faulty], 0)).is_empty());
        assert!(Membership::check_spare_room(&s).is_ok());
        assert!(Membership::check_spare_room(&slots(&[Active], MAX_SPARES as u32)).is_err());
        assert!(Membership::check_replace(&s, 4, Replacement::AsSpare).unwrap_err().to_string().contains("is a spare"));
        assert!(Membership::check_replace(&s, 4, Replacement::InPlace).unwrap_err().to_string().contains("has no role 4"));
        assert!(Membership::check_replace(&s, 0, Replacement::AsSpare).is_ok());
    }

    /// `install` (here through `replace`) turns the role rebuilding only
    /// once no cache flusher pass runs on the old volume: a pass writing
    /// back while the role is faulty never reaches the role's old device,
    /// which has failed for good (every I/O fails). Before, the role
    /// turned rebuilding first, and the pass's members' flush went to the
    /// old device too, whose error failed the role, new device and all
    /// (the simulation's seed 5635165694676429584). The pass is slow here
    /// (8 MiB written back at 16 MB/s), and the role is replaced while it
    /// runs.
    #[test]
    fn a_flusher_pass_on_the_old_volume_never_writes_to_the_replaced_device() {
        use crate::cache::{CacheConfig, CacheMode};
        let slow: MemberSpec = "mem:48M,wbw=16M".parse().unwrap();
        let opts = super::super::CreateOptions { level: 1, name: "hot".into(), bitmap_region: Some(0), ..Default::default() };
        let mut a = super::super::create(&[slow.clone(), slow], &opts).unwrap();
        // A fault plan on role 1's device, under every handle of it.
        let faults = Arc::new(crate::io::fault::Faults::new());
        faults.attach(a.meta().devices[1].as_mut().unwrap());
        a.rebuild_after_membership_change().unwrap();
        a.set_cache(None, &CacheConfig { mode: CacheMode::WriteBack, size: 16 << 20, dirty_limit: 16 << 20 }).unwrap();
        a.renew_volume(0).unwrap();
        a.fail(1, false).unwrap();
        faults.vanish();
        let old = a.volume().clone();
        let data = vec![0x5au8; 1 << 20];
        for i in 0..8u64 {
            old.write_at(i << 20, &data).unwrap();
        }
        // A flush makes the flusher write the 8 MiB back, then flush the
        // members.
        let flusher = {
            let v = old.clone();
            std::thread::spawn(move || v.flush())
        };
        let cache = old.cache().unwrap().clone();
        while cache.stats().writebacks == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let left = cache.stats().dirty_bytes;
        a.replace(1, &"mem:48M".parse().unwrap(), false, Replacement::InPlace).unwrap();
        let flushed = flusher.join().unwrap();
        eprintln!("the role was replaced with {} MiB of the pass's 8 left to write; the flush: {flushed:?}", left >> 20);
        assert_eq!(faults.injected(), 0, "I/O went to the replaced device of role 1 after it was failed");
        assert_eq!(a.health().state(1), MemberState::Rebuilding, "the new device's role was failed");
        flushed.unwrap();
    }
}
