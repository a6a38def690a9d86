//! RAID 10: Striped mirrors, md's near-2 layout: each chunk on two neighbouring slots; it lives while every chunk keeps one of its two members.
//! Its placement ([`Raid10`], md's `__raid10_find_phys` for `n2`): slot
//! `p` is member `p % n`, row `p / n`; logical chunk `c` in slots `2c`
//! and `2c + 1`. A stripe is a logical chunk; with an odd member count a
//! copy pair straddles two rows and the last slot may stay unused.

use std::ops::Range;

use super::{Copies, Descriptor, Level, Loses, Place, Placement, Places, Redundancy, Role, Shape};

/// RAID 10's descriptor.
pub(super) static RAID10: Descriptor = Descriptor {
    level: Level::Raid10,
    number: 10,
    min_members: 2,
    loses: Loses::NearCopies(2),
    parity: 0,
    copies: Copies::Fixed(2),
};

/// RAID 10's placement (near copies, 2).
pub struct Raid10;

impl Raid10 {
    /// Copies of each chunk.
    const K: u64 = 2;

    /// The place of slot `p` (`within`: the byte offset in the chunk).
    #[inline]
    fn slot(s: &Shape, p: u64, within: u64) -> Place {
        let n = s.members as u64;
        Place { member: (p % n) as u32, member_offset: p / n * s.chunk + within }
    }
}

impl Placement for Raid10 {
    #[inline]
    fn places(s: &Shape, offset: u64) -> Places {
        let (slot, within) = (offset / s.chunk * Self::K, offset % s.chunk);
        Places::two(Self::slot(s, slot, within), Self::slot(s, slot + 1, within))
    }

    #[inline]
    fn role(s: &Shape, member: u32, member_offset: u64) -> Role {
        let (row, within) = (member_offset / s.chunk, member_offset % s.chunk);
        let chunk_no = (row * s.members as u64 + member as u64) / Self::K;
        if chunk_no < s.stripes {
            Role::Data(chunk_no * s.chunk + within)
        } else {
            Role::Unused
        }
    }

    #[inline]
    fn data_member(s: &Shape, stripe: u64, _i: u32) -> u32 {
        ((stripe * Self::K) % s.members as u64) as u32
    }

    /// The two copies of logical chunk `stripe`, in slots `2 stripe` and
    /// `2 stripe + 1`.
    fn redundancy(s: &Shape, stripe: u64) -> Redundancy {
        Redundancy::Copies(Self::places(s, stripe * s.chunk))
    }

    fn stripe_at(s: &Shape, member: u32, row: u64) -> Option<u64> {
        let chunk_no = (row * s.members as u64 + member as u64) / Self::K;
        (chunk_no < s.stripes).then_some(chunk_no)
    }

    fn stripes_of_rows(s: &Shape, ra: u64, rb: u64) -> Range<u64> {
        let n = s.members as u64;
        (ra * n / Self::K).min(s.stripes)..((rb * n - 1) / Self::K + 1).min(s.stripes)
    }

    fn rows_of_stripes(s: &Shape, s0: u64, s1: u64) -> Range<u64> {
        let n = s.members as u64;
        Self::K * s0 / n..(Self::K * s1 - 1) / n + 1
    }

    fn stripes_per_row(s: &Shape) -> u64 {
        (s.members as u64).div_ceil(Self::K) + 1
    }

    fn stripes_in_rows(s: &Shape, rows: u64) -> u64 {
        rows * s.members as u64 / Self::K
    }

    fn straddle_rows(_s: &Shape) -> u64 {
        2
    }
}
