//! The block device's parameters, from the volume it serves: block sizes,
//! the I/O hints mkfs aligns to (`io_min` = chunk, `io_opt` = full
//! stripe), the largest request, discard and write-zeroes limits, and
//! the read-only and cache attributes.
//!
//! ublk carries `io_min` and `io_opt` as powers of two (`io_min_shift`,
//! `io_opt_shift`), where md gives any multiple: a stripe whose data
//! width is not a power of two (RAID 5 over 4 members: 3 chunks) cannot
//! be told as it is. The device then says `io_opt` = chunk (mkfs aligns
//! to chunks, never across a wrong width) and [`Params::note`] says what
//! to give mkfs instead.

use libublk::sys;
use uraid_core::Volume;

/// Largest discard or write-zeroes request the device takes, 512-byte
/// sectors (4 GiB; the engine takes any length, this bounds how long one
/// request holds its stripes).
pub const MAX_RANGE_SECTORS: u32 = 1 << 23;

/// The parameters of a device over a volume, and what the user should
/// know about them.
#[derive(Debug, Clone)]
pub struct Params {
    /// What the kernel is given (SET_PARAMS).
    pub params: sys::ublk_params,
    /// The stripe's data width in bytes (chunk x data members; 0 when
    /// the level has no stripe, RAID 1).
    pub stripe_width: u64,
    /// Said once at the start: the stripe width the device cannot carry
    /// and the mkfs options that give it.
    pub note: Option<String>,
}

/// Bytes of data in one full stripe of `vol`: chunk x data members
/// (RAID 0: every member; RAID 5: all but one; RAID 6: all but two;
/// RAID 10: as its layout says), 0 for RAID 1.
pub fn stripe_width(vol: &Volume) -> u64 {
    vol.caps().stripe_width
}

/// log2 of `n` when it is a power of two.
fn shift_of(n: u64) -> Option<u8> {
    n.is_power_of_two().then(|| n.trailing_zeros() as u8)
}

/// The parameters of a device serving `vol`, whose requests are at most
/// `max_io_bytes` (the per-tag buffer), read-only or not.
pub fn for_volume(vol: &Volume, read_only: bool, max_io_bytes: u32) -> Params {
    // What the volume's stack can do, as its top layer says.
    let caps = vol.caps();
    let bs = caps.block_size as u64;
    let bs_shift = shift_of(bs).unwrap_or(9);
    let physical = bs.max(4096);
    let chunk = caps.chunk;
    let width = caps.stripe_width;
    let mut note = None;
    // io_min: the chunk (a write of less rewrites parity); io_opt: the
    // full stripe. Neither below the physical block.
    let (io_min, io_opt) = if width == 0 {
        (physical, physical)
    } else {
        let min = chunk.max(physical);
        match shift_of(width) {
            Some(_) => (min, width.max(min)),
            None => {
                let data = width / chunk.max(1);
                note = Some(format!(
                    "the stripe holds {data} data chunks of {} ({} bytes), not a power of two, which ublk cannot \
                     advertise: the device says optimal I/O = one chunk. Give mkfs the stripe: \
                     mkfs.xfs -d su={}k,sw={data}   or   mkfs.ext4 -E stride={},stripe_width={}",
                    uraid_core::units::fmt_size(chunk),
                    width,
                    chunk >> 10,
                    chunk / 4096,
                    width / 4096,
                ));
                (min, min)
            }
        }
    };
    let mut attrs = sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA;
    if read_only {
        attrs |= sys::UBLK_ATTR_READ_ONLY;
    }
    let mut params = sys::ublk_params {
        len: std::mem::size_of::<sys::ublk_params>() as u32,
        types: sys::UBLK_PARAM_TYPE_BASIC,
        basic: sys::ublk_param_basic {
            attrs,
            logical_bs_shift: bs_shift,
            physical_bs_shift: shift_of(physical).unwrap_or(12),
            io_min_shift: shift_of(io_min).unwrap_or(12),
            io_opt_shift: shift_of(io_opt).unwrap_or(12),
            max_sectors: max_io_bytes >> 9,
            chunk_sectors: 0,
            dev_sectors: caps.capacity >> 9,
            virt_boundary_mask: 0,
        },
        ..Default::default()
    };
    if !read_only {
        // Discard only where the members take it (see Volume::discards);
        // write-zeroes always (the engine zeroes what cannot be punched).
        let bs_sectors = (bs >> 9).max(1) as u32;
        let max_range = MAX_RANGE_SECTORS / bs_sectors * bs_sectors;
        params.types |= sys::UBLK_PARAM_TYPE_DISCARD;
        params.discard = sys::ublk_param_discard {
            discard_alignment: 0,
            discard_granularity: bs as u32,
            max_discard_sectors: if caps.discard { max_range } else { 0 },
            max_write_zeroes_sectors: max_range,
            max_discard_segments: 1,
            reserved0: 0,
        };
    }
    Params { params, stripe_width: width, note }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use uraid_core::io::member::OpenMode;
    use uraid_core::{Geometry, Level, Member, MemberSpec};

    fn volume(level: Level, members: usize, chunk: u64) -> Arc<Volume> {
        let spec: MemberSpec = format!("mem:{}", 64u64 << 20).parse().unwrap();
        let m: Vec<Member> = (0..members).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
        let g = Geometry::new(level, members, chunk, 32 << 20).unwrap();
        Volume::new(Arc::new(m), g, 0).unwrap()
    }

    #[test]
    fn io_min_is_the_chunk_and_io_opt_the_full_stripe() {
        // RAID 5 over 5: 4 data chunks of 64K = 256K.
        let v = volume(Level::Raid5, 5, 64 << 10);
        let p = for_volume(&v, false, 512 << 10);
        let b = p.params.basic;
        assert_eq!(1u64 << b.io_min_shift, 64 << 10);
        assert_eq!(1u64 << b.io_opt_shift, 256 << 10);
        assert_eq!(1u64 << b.logical_bs_shift, v.block_size() as u64);
        assert_eq!(1u64 << b.physical_bs_shift, (v.block_size() as u64).max(4096));
        assert_eq!(b.dev_sectors << 9, v.capacity());
        assert_eq!(b.max_sectors, 1024);
        assert!(p.note.is_none());
        assert_eq!(b.attrs & sys::UBLK_ATTR_READ_ONLY, 0);
        // RAID 0 over 4, RAID 6 over 6: 4 data chunks each.
        for (level, n) in [(Level::Raid0, 4), (Level::Raid6, 6)] {
            let b = for_volume(&volume(level, n, 128 << 10), false, 512 << 10).params.basic;
            assert_eq!((1u64 << b.io_min_shift, 1u64 << b.io_opt_shift), (128 << 10, 512 << 10), "{level}");
        }
    }

    #[test]
    fn a_stripe_that_is_no_power_of_two_is_told_to_the_user() {
        // RAID 5 over 4: 3 x 64K; ublk carries only powers of two.
        let p = for_volume(&volume(Level::Raid5, 4, 64 << 10), false, 512 << 10);
        assert_eq!(p.stripe_width, 192 << 10);
        assert_eq!(1u64 << p.params.basic.io_opt_shift, 64 << 10);
        let note = p.note.expect("a note");
        assert!(note.contains("su=64k,sw=3") && note.contains("stride=16,stripe_width=48"), "{note}");
    }

    #[test]
    fn read_only_devices_say_so_and_take_no_discard() {
        let p = for_volume(&volume(Level::Raid1, 2, 64 << 10), true, 512 << 10);
        assert_ne!(p.params.basic.attrs & sys::UBLK_ATTR_READ_ONLY, 0);
        assert_eq!(p.params.types & sys::UBLK_PARAM_TYPE_DISCARD, 0);
        // RAID 1 has no stripe: the hints are the physical block.
        assert_eq!(1u64 << p.params.basic.io_opt_shift, 4096);
    }

    #[test]
    fn discard_limits_follow_the_volume() {
        let v = volume(Level::Raid5, 3, 64 << 10);
        let p = for_volume(&v, false, 512 << 10);
        assert_ne!(p.params.types & sys::UBLK_PARAM_TYPE_DISCARD, 0);
        let d = p.params.discard;
        assert_eq!(d.discard_granularity, v.block_size());
        assert_eq!(d.max_discard_segments, 1);
        assert!(v.discards());
        assert_eq!(d.max_discard_sectors, MAX_RANGE_SECTORS);
        assert_eq!(d.max_write_zeroes_sectors, MAX_RANGE_SECTORS);
    }
}
