//! `assemble` and `open`: reads the superblocks, decides which is
//! authoritative and which members are stale (md's rules), opens the
//! journals, and brings an array that was not stopped cleanly back in sync.

use std::ops::Range;
use std::sync::Arc;

use super::meta::{read_superblock, Meta};
use super::survival::{describe_volume, down_slots, has_parity, is_redundant, level_tolerance, lost_volumes};
use super::{open_member, open_members, probe, Array, AssembleOptions};
use crate::cache::journal::{Journal, JournalId};
use crate::control::superblock::{self, fmt_uuid, DecodeError, Reshape, Slot, State, Superblock, VolumeEntry};
use crate::io::member::{Member, MemberSpec, OpenMode};
use crate::raid::bitmap::Bitmap;
use crate::raid::health::{Health, MemberState};
use crate::{bail, Error, ErrorKind, Result};

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
    let (members, member_specs, journal_devs) = open_devices(specs)?;
    let sbs = read_superblocks(&members)?;
    check_one_array(&members, &sbs)?;
    // The freshest superblock speaks for the array (md: the highest event
    // counter wins).
    let fresh = (0..sbs.len()).max_by_key(|&i| sbs[i].events).expect("at least one member");
    let auth = sbs[fresh].clone();
    let mut warnings = Vec::new();
    // An interrupted reshape (`uraid grow`) is finished first; looking
    // only, it is named.
    if let Some(r) = &auth.reshape {
        let note = reshape_note(&auth, r);
        if !opts.inspect {
            drop(members);
            drop(journal_devs);
            return finish_reshape(specs, opts, &auth, note);
        }
        warnings.push(format!("{note}: the next assemble (uraid assemble with every member) finishes it"));
    }
    check_layouts(&members, &sbs, fresh, &auth)?;
    let mut journals = open_journal_devices(journal_devs, &auth)?;
    absent_journals(&auth, opts, &mut journals, &mut warnings);
    debug_assert!(sbs.iter().all(|sb| sb.events <= auth.events), "no member is newer than the authoritative superblock");
    let Placed { mut slots, devices, specs: dev_specs, stale } = place_members(members, &sbs, &member_specs, &auth, opts, &mut warnings)?;
    let n = auth.member_count as usize;
    let missing = mark_missing(&mut slots, &devices, n);
    // A role a distributed spare holds in sync (or rebalances) is not down.
    let down = down_slots(&auth, &slots[..n]);
    let lost = lost_volumes(&auth, &down);
    if !lost.is_empty() {
        let msg = lost_message(&auth, &slots, &devices, &missing, &down, &lost);
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
        match (s.state, s.recovery_offset) {
            (MemberState::Rebuilding | MemberState::Spared, Some(o)) => health.set_recovery(r as u32, o),
            // A role held by a distributed spare, in sync.
            (MemberState::Spared, None) => health.set_recovery(r as u32, u64::MAX),
            _ => {}
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
        Some(Arc::new(Bitmap::load(meta.roles.clone(), health.clone(), auth.bitmap_region, auth.data_end())?.with_live_map_areas(auth.live_map, auth.redundant_areas())))
    } else {
        None
    };
    if auth.state == State::Active {
        let hole = WriteHole { auth: &auth, meta: &meta, down: &down, missing: &missing, journals: &journals };
        hole.check(bitmap.as_deref(), opts, &mut warnings)?;
    }
    if !lost.is_empty() {
        health.stop_writes();
    }
    let mut arr = Array::new(meta, health, bitmap, warnings, journals, opts.inspect)?;
    arr.stale = stale;
    Ok(arr)
}

/// Opens `specs` (exclusively, for writing) and sorts them into members
/// (with their specs) and journal devices (with the identity in their
/// header). Errors: as [`open_members`]; `InvalidInput` when only journal
/// devices were given.
#[allow(clippy::type_complexity)]
fn open_devices(specs: &[MemberSpec]) -> Result<(Vec<Member>, Vec<MemberSpec>, Vec<(Member, JournalId)>)> {
    let mut members = Vec::new();
    let mut member_specs = Vec::new();
    let mut journal_devs = Vec::new();
    for (m, spec) in open_members(specs, true, true)?.into_iter().zip(specs) {
        match crate::cache::journal::probe(&m)? {
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
    Ok((members, member_specs, journal_devs))
}

/// The superblock of each of `members`, in order. Errors: `Superblock`
/// for a device without one (not a member) or with a damaged one; `Io`.
fn read_superblocks(members: &[Member]) -> Result<Vec<Superblock>> {
    let mut sbs = Vec::with_capacity(members.len());
    for m in members {
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
    Ok(sbs)
}

/// Refuses members of different arrays (`Superblock`, naming both).
fn check_one_array(members: &[Member], sbs: &[Superblock]) -> Result<()> {
    for (m, sb) in members.iter().zip(sbs).skip(1) {
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
    Ok(())
}

/// What a warning says of the reshape `r` that `auth` records.
fn reshape_note(auth: &Superblock, r: &Reshape) -> String {
    let total = auth.volumes[0].capacity(auth.member_count as usize).max(1);
    format!(
        "array '{}' is in the middle of a reshape from {} to {} members, {:.1}% done",
        auth.name,
        r.old_members,
        auth.member_count,
        r.position as f64 * 100.0 / total as f64
    )
}

/// Finishes the interrupted reshape of the array of `specs` (whose
/// superblock `auth` records it; `note` describes it), then opens the
/// array again. Errors: from the reshape, and as [`open_with`].
fn finish_reshape(specs: &[MemberSpec], opts: &AssembleOptions, auth: &Superblock, note: String) -> Result<Array> {
    // Resume reads the same superblocks and finds the record too
    // (else it would be opened here again and again).
    let Some(rep) = super::grow::resume(specs, &mut |_, _| {})? else {
        bail!(Superblock, "array '{}': the reshape record read a moment ago is gone; nothing was written", auth.name);
    };
    let mut a = open_with(specs, opts)?;
    a.warnings.push(format!(
        "{note} when it was interrupted: it went on from there and finished in {:.1} s; the volume now holds {} bytes",
        rep.seconds, rep.capacity.1
    ));
    Ok(a)
}

/// Refuses members whose layout disagrees with the authoritative
/// superblock `auth` (that of `members[fresh]`), but for members it
/// deals with later: out of service, or behind by a reshape step or by
/// the last change only. Errors: `Superblock`.
fn check_layouts(members: &[Member], sbs: &[Superblock], fresh: usize, auth: &Superblock) -> Result<()> {
    for (m, sb) in members.iter().zip(sbs) {
        // A member the array no longer reads (faulty, or out of the slot
        // table) missed the changes made since it left: it is dealt with
        // below, whatever its layout says.
        let in_service = auth.slots.iter().any(|s| s.uuid == sb.member_uuid && matches!(s.state, MemberState::Active | MemberState::Rebuilding | MemberState::Spare));
        // In a reshape, the superblocks are written one after the other at
        // each step: one that missed the last step is rewritten when the
        // reshape goes on (only looking reaches here). And one that missed
        // only the last change (a crash between the superblock writes of a
        // change: md's one-event margin) has the superblock from before it.
        if sb.events < auth.events && (!in_service || auth.reshape.is_some() || one_behind(sb, auth)) {
            continue;
        }
        if !sb.same_layout(auth) {
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
    Ok(())
}

/// The journal devices given, opened, but for those lost while running
/// (stale: never replayed). Errors: `Superblock` for a journal of another
/// array; from opening a journal.
fn open_journal_devices(journal_devs: Vec<(Member, JournalId)>, auth: &Superblock) -> Result<Vec<Arc<Journal>>> {
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
        journals.push(Arc::new(Journal::open(m)?));
    }
    Ok(journals)
}

/// Stands an absent journal in for each journal device of its own that
/// was lost while running, or not given with `without_journal`, with a
/// warning that says what that means.
fn absent_journals(auth: &Superblock, opts: &AssembleOptions, journals: &mut Vec<Arc<Journal>>, warnings: &mut Vec<String>) {
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
            journals.push(Arc::new(Journal::absent(id, 0, 0, name, None)));
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
        journals.push(Arc::new(Journal::absent(id, 0, 0, name, None)));
    }
}

/// The members given, each in its slot.
struct Placed {
    /// The slot table, with the states assemble decided (a stale member
    /// taken back with `force` is rebuilding).
    slots: Vec<Slot>,
    /// The device in each slot, if given.
    devices: Vec<Option<Member>>,
    /// How each was named.
    specs: Vec<Option<MemberSpec>>,
    /// Devices given that are no longer members (looking only).
    stale: Vec<String>,
}

/// Puts each of `members` (superblocks `sbs`, named by `specs`) into the
/// slot `auth` gives its member UUID, with md's rules for one that missed
/// changes. Errors: `Superblock` for a device no longer a member or stale
/// (without `force`); `Membership` for two devices claiming one slot;
/// `TooSmall` for a member that shrank.
fn place_members(
    members: Vec<Member>,
    sbs: &[Superblock],
    specs: &[MemberSpec],
    auth: &Superblock,
    opts: &AssembleOptions,
    warnings: &mut Vec<String>,
) -> Result<Placed> {
    let mut slots = auth.slots.clone();
    let mut devices: Vec<Option<Member>> = (0..slots.len()).map(|_| None).collect();
    let mut dev_specs: Vec<Option<MemberSpec>> = vec![None; slots.len()];
    let mut stale = Vec::new();
    for ((m, sb), spec) in members.into_iter().zip(sbs).zip(specs) {
        let slot = slots.iter().position(|s| s.uuid == sb.member_uuid && s.state != MemberState::Missing);
        let Some(slot) = slot else {
            if opts.inspect {
                // Looking only: show the array, and name the stale device.
                warnings.push(format!(
                    "{} is stale: no longer part of array '{}' (removed or replaced; its event counter is {}, the array's is {}); it is left out",
                    m.name(),
                    auth.name,
                    sb.events,
                    auth.events
                ));
                stale.push(m.name().to_string());
                continue;
            }
            bail!(
                Superblock,
                "{} is no longer part of array '{}': it was removed or replaced (its event counter is {}, the \
                 array's is {}). Leave it out, or add it back with 'uraid add'",
                m.name(),
                auth.name,
                sb.events,
                auth.events
            );
        };
        if let Some(other) = &devices[slot] {
            let what = slot_name(slot, auth.member_count as usize);
            bail!(
                Membership,
                "{} and {} both claim {what} of array '{}' (one is a copy of the other?); give each member once",
                other.name(),
                m.name(),
                auth.name
            );
        }
        take_behind(&m, sb, slot, &mut slots, auth, opts, warnings)?;
        let end = auth.data_end();
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
    Ok(Placed { slots, devices, specs: dev_specs, stale })
}

/// How messages name `slot` of an array of `n` roles.
fn slot_name(slot: usize, n: usize) -> String {
    if slot < n {
        format!("role {slot}")
    } else {
        format!("spare slot {slot}")
    }
}

/// md's rules for member `m` (superblock `sb`) in `slot` when it is
/// behind `auth`: one change behind, it is taken as the others say;
/// further behind in an active or rebuilding role, it is stale: refused
/// without `force`, else taken back (rebuilt in full when a volume is
/// redundant). Errors: `Superblock` for a stale member without `force`.
fn take_behind(
    m: &Member,
    sb: &Superblock,
    slot: usize,
    slots: &mut [Slot],
    auth: &Superblock,
    opts: &AssembleOptions,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let max_events = auth.events;
    if one_behind(sb, auth) && auth.reshape.is_none() {
        warnings.push(format!(
            "{} missed the last superblock change of array '{}' (event counter {}, the others {max_events}: a crash \
             between the superblock writes of one change); it is taken as the others say, as md does, and its \
             superblock is written again",
            m.name(),
            auth.name,
            sb.events
        ));
        return Ok(());
    }
    let n = auth.member_count as usize;
    if !(slot < n && sb.events < max_events && auth.reshape.is_none() && matches!(slots[slot].state, MemberState::Active | MemberState::Rebuilding)) {
        return Ok(());
    }
    let redundant = auth.volumes.iter().any(is_redundant);
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
            "{} was stale (event counter {} < {max_events}); --force takes it back in {}, to be rebuilt in full",
            m.name(),
            sb.events,
            slot_name(slot, n)
        ));
    } else {
        warnings.push(format!(
            "{} was stale (event counter {} < {max_events}); --force takes it back as it is: data written \
             since it fell behind may be inconsistent",
            m.name(),
            sb.events
        ));
    }
    Ok(())
}

/// Marks missing the roles of the first `n` of `slots` that were active or
/// rebuilding and have no device; returns them.
fn mark_missing(slots: &mut [Slot], devices: &[Option<Member>], n: usize) -> Vec<usize> {
    let mut missing = Vec::new();
    for r in 0..n {
        if devices[r].is_none() && matches!(slots[r].state, MemberState::Active | MemberState::Rebuilding) {
            missing.push(r);
            slots[r].state = MemberState::Missing;
            slots[r].recovery_offset = None;
        }
    }
    missing
}

/// What the refusal of an array that cannot run says: the volumes `lost`
/// (past their tolerance with the roles flagged in `down`), the roles
/// `missing`, and the others down.
fn lost_message(auth: &Superblock, slots: &[Slot], devices: &[Option<Member>], missing: &[usize], down: &[bool], lost: &[usize]) -> String {
    let n = auth.member_count as usize;
    let missing_txt: Vec<String> = missing.iter().map(|&r| format!("role {r} (member {})", fmt_uuid(&auth.slots[r].uuid))).collect();
    let other_txt: Vec<String> = (0..n)
        .filter(|r| down[*r] && !missing.contains(r))
        .map(|r| format!("role {r} is {}", slots[r].state.name()))
        .collect();
    let vols: Vec<String> = lost
        .iter()
        .map(|&i| format!("{} tolerates {}", describe_volume(&auth.volumes[i]), level_tolerance(&auth.volumes[i], n)))
        .collect();
    let given = slots.iter().take(n).zip(devices).filter(|(_, d)| d.is_some()).count();
    if missing_txt.is_empty() {
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
    }
}

/// What the write-hole check of an array that was not stopped cleanly
/// looks at.
struct WriteHole<'a> {
    auth: &'a Superblock,
    /// The array as assembled (the slot states it decided, its devices).
    meta: &'a Meta,
    /// Per role, whether it is down.
    down: &'a [bool],
    /// The roles without a device.
    missing: &'a [usize],
    journals: &'a [Arc<Journal>],
}

impl WriteHole<'_> {
    /// The write hole: an interrupted write on a parity volume may have
    /// left a stripe whose parity does not match its data; with a member
    /// gone, its chunk in that stripe would be rebuilt from the wrong
    /// parity. Unless the volume's journal is there: every member write of
    /// a journaled RAID 5/6 volume was recorded first (a line written in
    /// part as its rows or whole, zeroes and discards as a range with
    /// partial stripes through the cache), and the replay at activate
    /// rewrites each such stripe's rows whole before anything reads them.
    ///
    /// Errors: `Membership` for a degraded parity volume written at the
    /// time of the crash, without `force` (or `inspect`).
    fn check(&self, bitmap: Option<&Bitmap>, opts: &AssembleOptions, warnings: &mut Vec<String>) -> Result<()> {
        let auth = self.auth;
        let dirty = dirty_ranges(auth, bitmap);
        for v in auth.volumes.iter().filter(|v| has_parity(v)) {
            // A role holding only parity (parity-last, after a takeover
            // adds it) is recomputed from the data whole: no write hole
            // (md's `dirty_parity_disks`).
            let geometry = v.geometry(auth.member_count as usize).ok();
            let parity_only = |r: usize| geometry.as_ref().and_then(|g| g.layout()).is_some_and(|l| l.parity_only(r as u32));
            let degraded = self.down.iter().enumerate().any(|(r, &d)| d && !parity_only(r));
            let touched = dirty.iter().any(|r| r.start < v.member_end() && r.end > v.member_start);
            let id = journal_id(auth.array_uuid, v);
            let journaled = v.cache_mode == crate::cache::CacheMode::Journal.to_u8()
                && self.journals.iter().any(|j| j.id() == id && !j.is_lost());
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
                         not match their data (an interrupted write: the RAID 5/6 write hole); {}",
                        auth.name,
                        describe_volume(v),
                        self.advice()
                    );
                }
                warnings.push(format!(
                    "{} was not stopped cleanly and is degraded: stripes written at the time of the crash may read \
                     back wrong in their missing chunk (write hole, accepted with --force); run 'uraid check'",
                    describe_volume(v)
                ));
            }
        }
        Ok(())
    }

    /// What the refusal advises: which roles lack valid chunks; a missing
    /// one can be given; a present one being rebuilt (or faulty) cannot
    /// help, only --force goes on.
    fn advice(&self) -> String {
        let (meta, missing) = (self.meta, self.missing);
        let n = self.auth.member_count as usize;
        let present: Vec<String> = (0..n)
            .filter(|&r| self.down[r] && meta.devices[r].is_some())
            .map(|r| match (meta.sb.slots[r].state, meta.sb.slots[r].recovery_offset) {
                (MemberState::Rebuilding, Some(o)) => {
                    format!("role {r} ({}) is present but was being rebuilt (valid up to member byte {o})", meta.devices[r].as_ref().map_or("?", |m| m.name()))
                }
                (s, _) => format!("role {r} ({}) is present but {}", meta.devices[r].as_ref().map_or("?", |m| m.name()), s.name()),
            })
            .collect();
        if missing.is_empty() {
            format!(
                "{}: its chunks in those stripes would be reconstructed wrong. Nothing was written. No other \
                 member can help: run 'uraid assemble --force' to accept the risk (the rebuild then goes on; \
                 run 'uraid check' once it has finished)",
                present.join(", ")
            )
        } else {
            format!(
                "the missing member's chunks in those stripes would be reconstructed wrong{}. Nothing was \
                 written. Give the missing member ({}), or assemble with --force to accept the risk (then run \
                 'uraid check')",
                if present.is_empty() { String::new() } else { format!(" ({})", present.join(", ")) },
                missing.iter().map(|r| format!("role {r}")).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

/// The identity the journal of volume entry `v` of array `array` carries
/// in its header.
pub(super) fn journal_id(array: [u8; 16], v: &VolumeEntry) -> crate::cache::journal::JournalId {
    crate::cache::journal::JournalId { array, volume: v.uuid, journal: v.journal_uuid }
}

/// Opens `spec` to become a journal device of its own and checks it:
/// large enough (4 KiB + 64 MiB), holding nothing (no filesystem, array or
/// journal) unless `force`. Writes nothing; `create` checks the device
/// this way before it writes anything. Errors: `WouldDestroy`,
/// `TooSmall`, `Busy`, `Io`.
pub fn open_journal_device(spec: &MemberSpec, force: bool) -> Result<Member> {
    let m = open_member(spec, OpenMode { write: true, exclusive: true })?;
    let need = crate::cache::journal::HEADER_SIZE + crate::cache::journal::MIN_LOG;
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
/// of reach, and the volume runs without it ([`crate::cache::journal::Journal::absent`],
/// a warning says so). After an unclean stop that may lose acknowledged
/// writes, so it is refused unless `force` (or `inspect`). Returns the
/// volumes whose journal, lost while its role keeps the device, gets a new
/// UUID (with the UUID).
pub(super) fn open_member_journals(
    auth: &Superblock,
    slots: &[Slot],
    devices: &[Option<Member>],
    health: &Arc<Health>,
    opts: &AssembleOptions,
    journals: &mut Vec<Arc<crate::cache::journal::Journal>>,
    warnings: &mut Vec<String>,
) -> Result<Vec<(usize, [u8; 16])>> {
    let mut renamed = Vec::new();
    for (i, v) in auth.volumes.iter().enumerate() {
        let Some(r) = v.journal_region else { continue };
        let mut id = journal_id(auth.array_uuid, v);
        let host = crate::cache::journal::Host { health: health.clone(), role: r.role };
        let state = slots[r.role as usize].state;
        let dev = devices[r.role as usize].as_ref().filter(|_| matches!(state, MemberState::Active | MemberState::Rebuilding));
        let why = match dev {
            None => format!("role {} is {}", r.role, state.name()),
            Some(m) => match crate::cache::journal::Journal::open_region(m.try_clone()?, r.start, r.size, Some(host.clone())) {
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
        journals.push(Arc::new(crate::cache::journal::Journal::absent(id, r.start, r.size, name, Some(host))));
    }
    Ok(renamed)
}

/// The absolute member byte ranges a resync must cover after an unclean
/// stop: the bitmap's dirty regions, or every redundant volume's area when
/// there is no bitmap.
pub(super) fn dirty_ranges(sb: &Superblock, bitmap: Option<&Bitmap>) -> Vec<Range<u64>> {
    match bitmap {
        Some(b) => b.dirty(),
        None => sb.volumes.iter().filter(|v| is_redundant(v)).map(|v| v.member_start..v.member_end()).collect(),
    }
}

/// Whether the member whose superblock is `sb` missed only the last
/// superblock change of the array `auth` describes: one event behind, and
/// a role that `auth` records as active or rebuilding. The superblocks of
/// one change are written one member after the other; a crash between
/// them leaves such members, whose data the change did not touch (data is
/// written only once the change is on every member). md allows the same
/// one-event margin when it assembles (`super_1_validate`: `++ev1`;
/// mdadm's `event_margin`).
fn one_behind(sb: &Superblock, auth: &Superblock) -> bool {
    sb.events.checked_add(1) == Some(auth.events)
        && auth.roles().iter().any(|s| s.uuid == sb.member_uuid && matches!(s.state, MemberState::Active | MemberState::Rebuilding))
}
