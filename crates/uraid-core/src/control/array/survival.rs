//! The array's rules about its volumes: which roles are down, whether a
//! volume survives them (the level's rule, through [`Geometry::survival`]),
//! and the level facts the control path names in its messages.

use crate::control::superblock::{Slot, Superblock, VolumeEntry};
use crate::raid::geometry::{Geometry, Level};
use crate::raid::health::{Health, MemberState};

/// Roles that do not hold valid data everywhere (faulty, missing,
/// rebuilding, spare), as a flag per role.
pub(super) fn down_roles(health: &Health) -> Vec<bool> {
    // A role a distributed spare holds in sync is not down, nor one being
    // rebalanced onto a device (the spare holds what the device lacks).
    (0..health.members() as u32)
        .map(|r| match health.state(r) {
            MemberState::Active => false,
            MemberState::Spared => health.recovery(r) != u64::MAX,
            MemberState::Rebuilding => !health.rebalancing(r),
            _ => true,
        })
        .collect()
}

/// [`down_roles`] as superblock `sb` records them (its slots `slots`,
/// one per role): a role rebuilding while its volume's entry records a
/// distributed spare holding it is being rebalanced, and not down.
pub(super) fn down_slots(sb: &Superblock, slots: &[Slot]) -> Vec<bool> {
    let draid = sb.volumes.first().and_then(|v| v.draid);
    slots
        .iter()
        .enumerate()
        .map(|(r, s)| match s.state {
            MemberState::Active => false,
            MemberState::Spared => s.recovery_offset.is_some(),
            MemberState::Rebuilding => draid.is_none_or(|d| d.spare_of(r as u32).is_none()),
            _ => true,
        })
        .collect()
}

/// True when volume `v` over `n` members still has every logical byte with
/// the roles flagged in `down` unavailable: the level's rule
/// ([`Geometry::survival`]) on the volume's layout, so RAID 10's
/// neighbouring pairs count. False for an entry this build cannot lay out.
pub(super) fn volume_survives(v: &VolumeEntry, n: usize, down: &[bool]) -> bool {
    let Ok(level) = Level::from_number(v.level) else { return false };
    let Ok(g) = Geometry::new(level, n, v.chunk, v.member_size) else { return false };
    g.survival(crate::raid::level::mask_of(down)).survives
}

/// Indexes of the volumes of `sb` that lose data with the roles in `down`
/// unavailable.
pub(super) fn lost_volumes(sb: &Superblock, down: &[bool]) -> Vec<usize> {
    (0..sb.volumes.len()).filter(|&i| !volume_survives(&sb.volumes[i], sb.member_count as usize, down)).collect()
}

/// The descriptor of `v`'s level; `None` for a number this build does not
/// know.
pub(super) fn level_of(v: &VolumeEntry) -> Option<&'static crate::raid::level::Descriptor> {
    Level::from_number(v.level).ok().map(Level::desc)
}

/// Whether volume `v` keeps copies or parity.
pub(super) fn is_redundant(v: &VolumeEntry) -> bool {
    v.redundant()
}

/// Whether volume `v`'s level keeps parity (RAID 5, 6).
pub(super) fn has_parity(v: &VolumeEntry) -> bool {
    level_of(v).is_some_and(|d| d.parity > 0)
}

/// Members volume `v` over `n` members may lose in any case (0 for a
/// level number this build does not know).
pub(super) fn level_tolerance(v: &VolumeEntry, n: usize) -> usize {
    level_of(v).map_or(0, |d| d.fault_tolerance(n))
}

/// How messages name volume `v`: "volume 'NAME' (RAID L)".
pub(super) fn describe_volume(v: &VolumeEntry) -> String {
    format!("volume '{}' (RAID {})", v.name, v.level)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::superblock::DATA_OFFSET;

    fn entry(level: u32, chunk: u64, member_size: u64) -> VolumeEntry {
        VolumeEntry { name: "v".into(), uuid: [0; 16], level, chunk, member_start: DATA_OFFSET, member_size, cache_mode: 0, cache_size_mib: 0, dirty_limit_mib: 0, journal_uuid: [0; 16], journal_lost: false, journal_region: None, layout: 0, draid: None }
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
}
