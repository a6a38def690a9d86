//! RAID 1: Mirroring: every member holds the whole volume; it lives while one member is left.

use super::{Copies, Descriptor, Level, Loses};

/// RAID 1's descriptor.
pub(super) static RAID1: Descriptor = Descriptor {
    level: Level::Raid1,
    number: 1,
    min_members: 2,
    loses: Loses::AllBut(1),
    parity: 0,
    copies: Copies::All,
};
