//! uraid-core: the engine of uraid, a software RAID for NVMe drives in user
//! space.
//!
//! - [`geometry`]: where each logical byte lives (pure functions).
//! - [`member`]: the drives (files, block devices, emulated `mem:` drives).
//! - [`superblock`]: the on-member metadata that makes arrays persistent.
//! - [`array`]: create, examine and assemble (the control path).
//! - [`engine`]: the data path, one io_uring per thread.
//!
//! Sizes are bytes unless a name says otherwise; MB/s means 10^6 bytes/s.

pub mod array;
pub mod buf;
pub mod engine;
pub mod error;
pub mod geometry;
pub mod layout;
pub mod member;
pub mod parity;
pub mod signature;
pub mod superblock;
pub mod units;

pub use buf::IoBuf;
pub use engine::{Completion, Op, Queue, Request, Volume};
pub use error::{Error, ErrorKind, Result};
pub use geometry::{Geometry, Level};
pub use member::{Member, MemberSpec};
