//! uraid-core: the engine of uraid, a software RAID for NVMe drives in user
//! space.
//!
//! The data path is a stack of layers that speak one request interface
//! ([`io::request`]); the control path configures it from above. See
//! ARCHITECTURE.md at the top of the repository.
//!
//! - [`io`]: members (files, block devices, `mem:` drives), their filters
//!   (fault injection), I/O buffers, and the request interface.
//! - [`raid`]: geometry and layouts, parity, member states, stripe locks,
//!   the write-intent bitmap, and the engine (one io_uring per thread; RAID
//!   0 directly, RAID 1/10/5/6 as per-stripe state machines).
//! - [`cache`]: the volume cache (write-through, write-back, journal) and
//!   its queue, a layer on top of the RAID layer.
//! - [`export`]: the interface every export (NBD, ublk) implements, and
//!   their I/O statistics.
//! - [`volume`]: a volume as its users see it: the stack of the layers.
//! - [`clock`]: every clock read and sleep, the machine's or a virtual
//!   clock a simulation installs.
//! - [`control`]: create, examine, assemble, membership changes, the
//!   superblock, and maintenance (rebuild, scrub, resync).
//!
//! Sizes are bytes unless a name says otherwise; MB/s means 10^6 bytes/s.

pub mod cache;
pub mod clock;
pub mod control;
pub mod error;
pub mod export;
pub mod io;
pub mod raid;
pub mod units;
pub mod volume;

pub use error::{Error, ErrorKind, Result};
pub use io::buf::IoBuf;
pub use io::member::{Member, MemberSpec};
pub use io::request::{BlockDevice, BlockQueue, Completion, Op, Request};
pub use raid::geometry::{Geometry, Level};
pub use volume::{Queue, Volume};
