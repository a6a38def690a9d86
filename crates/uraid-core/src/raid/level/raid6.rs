//! RAID 6: Striping with P and Q per stripe: it loses any two members.
//! Its placement ([`Raid6`]): md's left-symmetric at level 6: P on
//! `n - 1 - s % n`, Q right after it, data chunk `i` on `(P + 2 + i) % n`
//! (`i` is also the chunk's index in Q's syndrome). Parity-last (md's
//! `ALGORITHM_LEFT_SYMMETRIC_6`) keeps Q on the last member and P and the
//! data as RAID 5 left-symmetric over the others.

use super::{row_redundancy, row_role, row_stripe, Copies, Descriptor, Level, Loses, Placement, Redundancy, Role, Shape, Variant};

/// RAID 6's descriptor.
pub(super) static RAID6: Descriptor = Descriptor {
    level: Level::Raid6,
    number: 6,
    min_members: 4,
    loses: Loses::Any(2),
    parity: 2,
    copies: Copies::One,
};

/// RAID 6's placement.
pub struct Raid6;

impl Raid6 {
    /// Members P rotates over: all, or all but the last (parity-last).
    #[inline]
    fn rotation(s: &Shape) -> u32 {
        match s.variant {
            Variant::ParityLast => s.members - 1,
            Variant::Standard => s.members,
        }
    }

    /// The member holding P of `stripe`.
    #[inline]
    fn p(s: &Shape, stripe: u64) -> u32 {
        let n = Self::rotation(s) as u64;
        (n - 1 - stripe % n) as u32
    }
}

impl Placement for Raid6 {
    #[inline]
    fn role(s: &Shape, member: u32, member_offset: u64) -> Role {
        match s.variant {
            // Q on the last member, P and the data rotating over the others.
            Variant::ParityLast if member == Self::rotation(s) => Role::Q,
            Variant::ParityLast => row_role(s, member, member_offset, Self::p, Self::rotation(s), 1),
            Variant::Standard => row_role(s, member, member_offset, Self::p, s.members, 2),
        }
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
    fn q_member(s: &Shape, stripe: u64) -> Option<u32> {
        Some(match s.variant {
            Variant::ParityLast => s.members - 1,
            Variant::Standard => (Self::p(s, stripe) + 1) % s.members,
        })
    }

    #[inline]
    fn parity_only(s: &Shape, member: u32) -> bool {
        s.variant == Variant::ParityLast && member == s.members - 1
    }

    #[inline]
    fn data_member(s: &Shape, stripe: u64, i: u32) -> u32 {
        match s.variant {
            Variant::ParityLast => (Self::p(s, stripe) + 1 + i) % Self::rotation(s),
            Variant::Standard => (Self::p(s, stripe) + 2 + i) % s.members,
        }
    }
}
