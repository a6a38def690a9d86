//! md's critical section: a window whose rows hold bytes it needs itself
//! is first written to a backup area (the tail of the first new member's
//! area, or, for a chunk change over the same members, spread over the
//! room past the bitmap on every member that is up), flushed and recorded
//! with its CRC-32C; read back to write the window again after a crash.
//! And the check, before a reshape starts, that the backup has room.

use super::plan::volume_geometries;
use super::window::{down_roles_of, note_failures, unit, windows};
use crate::control::superblock::{ReshapeBackup, Superblock};
use crate::io::member::Member;
use crate::raid::geometry::Geometry;
use crate::raid::health::Health;
use crate::units::fmt_size;
use crate::{bail, Error, IoBuf, Result};

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
pub(super) const SPREAD: u32 = u32::MAX;

/// For the reshape `sb` records, when it keeps the members it had (a
/// chunk change): the roles that hold a piece of a backup (those up, in
/// role order) and the logical bytes the backup holds at most (a piece of
/// [`spare_room`] on each); `None` when the reshape adds members (the
/// backup is then on the first new member).
pub(super) fn spread_backup(sb: &Superblock) -> Option<(Vec<u32>, u64)> {
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
pub(super) fn check_backup_rooms(sb: &Superblock, new_sb: &Superblock, old_g: &Geometry, new_g: &Geometry) -> Result<()> {
    check_backup_room(new_sb, old_g, new_g)?;
    for i in 1..sb.volumes.len() {
        let (o, g) = volume_geometries(sb, i, sb.member_count as usize, new_sb.member_count as usize)?;
        check_backup_room(new_sb, &o, &g)?;
    }
    Ok(())
}

/// Writes the window `data` to the backup area and flushes it: on role
/// `old_n` (the first new member) at `backup_at(len)`, or, for a chunk
/// change over the same members, spread over every role that is up (the
/// failures the data paths saw recorded in `sb` first), a piece of
/// [`spread_piece`] bytes on each at [`spare_room`]. Returns the record.
/// Errors: `Membership` when the first new member failed; `Io`.
pub(super) fn write_backup(
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
pub(super) fn read_backup(devs: &[Member], sb: &Superblock, k: &ReshapeBackup) -> Result<IoBuf> {
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
