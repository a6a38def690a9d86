//! RAID 6: Striping with P and Q per stripe: it loses any two members.

use super::{Copies, Descriptor, Level, Loses};

/// RAID 6's descriptor.
pub(super) static RAID6: Descriptor = Descriptor {
    level: Level::Raid6,
    number: 6,
    min_members: 4,
    loses: Loses::Any(2),
    parity: 2,
    copies: Copies::One,
};
