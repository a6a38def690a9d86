//! RAID 0: Striping without redundancy: logical chunk `c` on member `c % n`; it loses nothing.

use super::{Copies, Descriptor, Level, Loses};

/// RAID 0's descriptor.
pub(super) static RAID0: Descriptor = Descriptor {
    level: Level::Raid0,
    number: 0,
    min_members: 1,
    loses: Loses::Any(0),
    parity: 0,
    copies: Copies::One,
};
