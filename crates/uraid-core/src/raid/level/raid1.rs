//! RAID 1: Mirroring: every member holds the whole volume; it lives while one member is left.
//! Its placement ([`Raid1`], md's `raid1.c`): every member at the same
//! offsets; a stripe is a logical chunk, one member row.

use super::{row_stripe, Copies, Descriptor, Level, Loses, Placement, Places, Redundancy, Role, Shape};

/// RAID 1's descriptor.
pub(super) static RAID1: Descriptor = Descriptor {
    level: Level::Raid1,
    number: 1,
    min_members: 2,
    loses: Loses::AllBut(1),
    parity: 0,
    copies: Copies::All,
};

/// RAID 1's placement: logical byte `o` at offset `o` of every member.
pub struct Raid1;

impl Placement for Raid1 {
    #[inline]
    fn places(s: &Shape, offset: u64) -> Places {
        Places::every(s.members, offset)
    }

    #[inline]
    fn role(_s: &Shape, _member: u32, member_offset: u64) -> Role {
        Role::Data(member_offset)
    }

    #[inline]
    fn data_member(_s: &Shape, _stripe: u64, _i: u32) -> u32 {
        0
    }

    /// A copy of the stripe's chunk on every member, in the same row.
    fn redundancy(s: &Shape, stripe: u64) -> Redundancy {
        Redundancy::Copies(Places::every(s.members, stripe * s.chunk))
    }

    fn stripe_at(s: &Shape, _member: u32, row: u64) -> Option<u64> {
        row_stripe(s, row)
    }
}
