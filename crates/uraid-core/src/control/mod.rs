//! The control path: creating, examining and assembling arrays and
//! changing their membership ([`array`](mod@array)), the on-member metadata
//! ([`superblock`], [`signature`] for other formats found on a member), and
//! maintenance (rebuild, scrub, resync: [`maint`]). It configures the data
//! path (members -> RAID -> cache) and drives it through its public
//! interface; no data-path module imports anything from here.

pub mod array;
pub mod maint;
pub mod signature;
pub mod superblock;
