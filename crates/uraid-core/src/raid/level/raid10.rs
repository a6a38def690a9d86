//! RAID 10: Striped mirrors, md's near-2 layout: each chunk on two neighbouring slots; it lives while every chunk keeps one of its two members.

use super::{Copies, Descriptor, Level, Loses};

/// RAID 10's descriptor.
pub(super) static RAID10: Descriptor = Descriptor {
    level: Level::Raid10,
    number: 10,
    min_members: 2,
    loses: Loses::NearCopies(2),
    parity: 0,
    copies: Copies::Fixed(2),
};
