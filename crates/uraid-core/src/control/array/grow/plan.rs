//! What a `grow` does, decided before anything is written: a restripe
//! from one layout to another, or a takeover (no data moves); and the
//! superblock that records a restripe at its start.

use super::{with_new_roles, GrowOptions};
use crate::control::superblock::{Reshape, State, Superblock, VolumeEntry};
use crate::raid::geometry::{check_chunk, Geometry, Level, MAX_MEMBERS};
use crate::raid::health::MemberState;
use crate::units::fmt_size;
use crate::{bail, Result};

/// What a `grow` of a one-volume array does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
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
pub(super) enum Takeover {
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
pub(super) fn plan(sb: &Superblock, opts: &GrowOptions) -> Result<Change> {
    let name = &sb.name;
    if let Some(v) = sb.volumes.iter().find(|v| Level::from_number(v.level).is_ok_and(|l| l.declustered())) {
        bail!(
            InvalidInput,
            "volume '{}' is declustered ({}): its groups and spare chunks are permuted over a fixed member count, so it \
             neither grows nor changes level or chunk; create a new array and copy the data. Nothing was written",
            v.name,
            Level::from_number(v.level)?
        );
    }
    if sb.volumes.len() > 1 {
        return plan_matrix(sb, opts);
    }
    let v = &sb.volumes[0];
    let level = Level::from_number(v.level)?;
    let n = sb.member_count as usize;
    let add = opts.add.len();
    if n + add > MAX_MEMBERS {
        bail!(InvalidInput, "array '{name}' has {n} members; {add} more would pass the most, {MAX_MEMBERS}. Nothing was written");
    }
    let chunk = opts.chunk.filter(|&c| c != v.chunk);
    match opts.level.filter(|&to| to != v.level) {
        None => plan_same_level(v, level, n, add, chunk),
        Some(_) if chunk.is_some() => {
            bail!(InvalidInput, "--chunk goes with --add alone: change the level first, then the chunk. Nothing was written")
        }
        Some(to) => plan_level_change(v, level, n, add, to),
    }
}

/// [`plan`] at the volume's own level (`level`, over `n` members): `add`
/// new members and/or another `chunk` (bytes): a restripe, or a RAID 1's
/// new copies. Errors: as [`plan`].
fn plan_same_level(v: &VolumeEntry, level: Level, n: usize, add: usize, chunk: Option<u64>) -> Result<Change> {
    let from = v.level;
    let geometry = |l: Level, count: usize| Geometry::new(l, count, v.chunk, v.member_size);
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
    Ok(Change::Restripe(geometry(level, n)?.with_variant(variant)?, new_g))
}

/// [`plan`] to another level `to` (the volume is at `level`, over `n`
/// members, `add` new ones given): md's takeovers, or RAID 1 over 2
/// restriped as RAID 5 or 10. Errors: as [`plan`].
fn plan_level_change(v: &VolumeEntry, level: Level, n: usize, add: usize, to: u32) -> Result<Change> {
    let from = v.level;
    let geometry = |l: Level, count: usize| Geometry::new(l, count, v.chunk, v.member_size);
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
pub(super) fn volume_geometries(sb: &Superblock, i: usize, old_n: usize, n: usize) -> Result<(Geometry, Geometry)> {
    let v = &sb.volumes[i];
    let level = Level::from_number(v.level)?;
    Ok((Geometry::new(level, old_n, v.chunk, v.member_size)?, Geometry::new(level, n, v.chunk, v.member_size)?))
}

/// The superblock of a reshape of `sb`'s volume from layout `old_g` onto
/// `k` more members in layout `new_g` (the new roles active), recorded at
/// position 0 with the old level and chunk where they change (`live`: the
/// array is served), the array active.
pub(super) fn reshape_superblock(sb: &Superblock, k: usize, old_g: &Geometry, new_g: &Geometry, live: bool) -> Superblock {
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
