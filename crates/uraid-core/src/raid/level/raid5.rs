//! RAID 5: Striping with one rotating parity chunk (P) per stripe: it loses any one member.

use super::{Copies, Descriptor, Level, Loses};

/// RAID 5's descriptor.
pub(super) static RAID5: Descriptor = Descriptor {
    level: Level::Raid5,
    number: 5,
    min_members: 3,
    loses: Loses::Any(1),
    parity: 1,
    copies: Copies::One,
};
