//! uraid-core: the engine of uraid, a software RAID for NVMe drives in user
//! space.
//!
//! - [`geometry`]: where each logical byte lives (pure functions).
//! - [`member`]: the drives (files, block devices, emulated `mem:` drives).
//! - [`superblock`]: the on-member metadata that makes arrays persistent.
//! - [`array`]: create, examine and assemble (the control path).
//! - [`engine`]: the data path, one io_uring per thread; RAID 0 directly,
//!   the redundant levels as per-stripe state machines (`engine::raid`).
//! - [`layout`]: where data, copies and parity live for RAID 1, 10, 5, 6.
//! - [`parity`]: P and Q (RAID 5 and 6) kernels, picked at run time.
//! - [`health`], [`locks`], [`bitmap`]: member states, per-stripe locks and
//!   the write-intent bitmap shared by the data and control paths.
//! - [`maint`]: rebuild, scrub (check / repair) and resync.
//!
//! Sizes are bytes unless a name says otherwise; MB/s means 10^6 bytes/s.

pub mod cache;
pub mod control;
pub mod error;
pub mod io;
pub mod raid;
pub mod units;
pub mod volume;

pub use error::{Error, ErrorKind, Result};
pub use io::buf::IoBuf;
pub use io::member::{Member, MemberSpec};
pub use io::request::{BlockQueue, Completion, Op, Request};
pub use raid::geometry::{Geometry, Level};
pub use volume::{Queue, Volume};
