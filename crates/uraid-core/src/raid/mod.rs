//! The RAID layer: what each level is and which losses it survives
//! ([`level`]), where each logical byte lives ([`geometry`], and for
//! the redundant levels [`layout`]), P and Q parity ([`parity`]), member
//! states ([`health`]), per-stripe locks ([`locks`]), the write-intent
//! bitmap ([`bitmap`]), and the engine that turns a volume request into
//! member I/O over io_uring ([`engine`]: RAID 0 directly, RAID 1/10/5/6 as
//! per-stripe state machines with read-modify-write, reconstruct-write and
//! degraded reads). It takes requests from the layer above (the cache, or
//! the export when the cache is off) and never calls it.

pub mod access;
pub mod bitmap;
pub mod chunk;
pub mod engine;
pub mod geometry;
pub mod health;
pub mod layout;
pub mod level;
pub mod locks;
pub mod parity;
pub mod read_errors;
pub mod reshape;
pub mod spare;

/// Where each member's data area starts (1 MiB): the member layout's,
/// below every layer that uses it ([`crate::io::member::DATA_OFFSET`]);
/// named here too for the RAID and control code that says `raid::DATA_OFFSET`.
pub use crate::io::member::DATA_OFFSET;
