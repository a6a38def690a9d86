//! RAID 5: Striping with one rotating parity chunk (P) per stripe: it loses any one member.
//! Its placement ([`Raid5`]): md's left-symmetric (`raid5_compute_sector`,
//! `ALGORITHM_LEFT_SYMMETRIC`): stripe `s` has P on member `n - 1 - s % n`
//! and data chunk `i` on `(P + 1 + i) % n`; parity-last (md's
//! `ALGORITHM_PARITY_N`) keeps P on the last member.

use super::{row_redundancy, row_role, row_stripe, Copies, Descriptor, Level, Loses, Placement, Redundancy, Role, Shape, Variant};

/// RAID 5's descriptor.
pub(super) static RAID5: Descriptor = Descriptor {
    level: Level::Raid5,
    number: 5,
    min_members: 3,
    loses: Loses::Any(1),
    parity: 1,
    copies: Copies::One,
};

/// RAID 5's placement.
pub struct Raid5;

impl Placement for Raid5 {
    #[inline]
    fn role(s: &Shape, member: u32, member_offset: u64) -> Role {
        row_role(s, member, member_offset, Self::p, s.members, 1)
    }

    fn redundancy(s: &Shape, stripe: u64) -> Redundancy {
        row_redundancy::<Self>(s, stripe)
    }

    fn stripe_at(s: &Shape, _member: u32, row: u64) -> Option<u64> {
        row_stripe(s, row)
    }

    #[inline]
    fn parity_member(s: &Shape, stripe: u64) -> Option<u32> {
        Some(Self::p(s, stripe))
    }

    #[inline]
    fn parity_only(s: &Shape, member: u32) -> bool {
        s.variant == Variant::ParityLast && member == s.members - 1
    }

    #[inline]
    fn data_member(s: &Shape, stripe: u64, i: u32) -> u32 {
        (Self::p(s, stripe) + 1 + i) % s.members
    }
}

impl Raid5 {
    /// The member holding P of `stripe`.
    #[inline]
    fn p(s: &Shape, stripe: u64) -> u32 {
        match s.variant {
            Variant::ParityLast => s.members - 1,
            Variant::Standard => {
                let n = s.members as u64;
                (n - 1 - stripe % n) as u32
            }
        }
    }
}
