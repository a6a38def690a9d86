//! An interrupted reshape finished: the record the superblocks keep is
//! checked (it comes from the members' bytes), the members found by slot,
//! and the reshape goes on from its position, degraded where both layouts
//! survive the members that are missing.

use super::backup::{spread_backup, SPREAD};
use super::window::{down_roles_of, layouts_survive, unit, windows};
use super::{record_geometries, run_all, stopped, GrowReport};
use crate::control::array::{open_members, placeholder, read_superblock};
use crate::control::superblock::{fmt_uuid, ReshapeBackup, Slot, Superblock};
use crate::io::member::{Member, MemberSpec};
use crate::raid::geometry::Level;
use crate::raid::health::MemberState;
use crate::{bail, Result};

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
