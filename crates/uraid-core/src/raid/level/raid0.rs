//! RAID 0: Striping without redundancy: logical chunk `c` on member `c % n`; it loses nothing.
//! Its placement ([`Raid0`]) is md's raid0 over equal members; one member
//! is the identity map (a raw drive benchmarked through the engine).

use super::{row_stripe, Copies, Descriptor, Level, Loses, Place, Placement, Places, Redundancy, Role, Shape};

/// RAID 0's descriptor.
pub(super) static RAID0: Descriptor = Descriptor {
    level: Level::Raid0,
    number: 0,
    min_members: 1,
    loses: Loses::Any(0),
    parity: 0,
    copies: Copies::One,
};

/// RAID 0's placement: logical chunk `c` on member `c % n` at member chunk
/// `c / n` (md's raid0 with equal members).
pub struct Raid0;

impl Raid0 {
    /// The level this places.
    pub const LEVEL: Level = Level::Raid0;

    /// Where logical byte `offset` lives over `members` members of `chunk`
    /// bytes per chunk: (member, byte offset in its data area).
    #[inline]
    pub fn locate(members: u64, chunk: u64, offset: u64) -> (u32, u64) {
        let chunk_no = offset / chunk;
        ((chunk_no % members) as u32, (chunk_no / members) * chunk + offset % chunk)
    }

    /// Inverse of [`locate`](Self::locate): the logical byte at
    /// `member_offset` of `member`.
    #[inline]
    pub fn logical(members: u64, chunk: u64, member: u32, member_offset: u64) -> u64 {
        ((member_offset / chunk) * members + member as u64) * chunk + member_offset % chunk
    }
}

impl Placement for Raid0 {
    #[inline]
    fn places(s: &Shape, offset: u64) -> Places {
        let (member, member_offset) = Raid0::locate(s.members as u64, s.chunk, offset);
        Places::one(Place { member, member_offset })
    }

    #[inline]
    fn role(s: &Shape, member: u32, member_offset: u64) -> Role {
        Role::Data(Raid0::logical(s.members as u64, s.chunk, member, member_offset))
    }

    #[inline]
    fn data_member(s: &Shape, stripe: u64, i: u32) -> u32 {
        ((stripe * s.members as u64 + i as u64) % s.members as u64) as u32
    }

    /// Nothing keeps a RAID 0 stripe.
    fn redundancy(_s: &Shape, _stripe: u64) -> Redundancy {
        Redundancy::None
    }

    fn stripe_at(s: &Shape, _member: u32, row: u64) -> Option<u64> {
        row_stripe(s, row)
    }
}
