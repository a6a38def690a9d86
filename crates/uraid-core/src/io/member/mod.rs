//! Members: the drives an array is made of.
//!
//! Four kinds share one type: a regular file, a block device (both opened
//! with O_DIRECT, falling back to buffered I/O where the filesystem refuses
//! it), `mem:` — an emulated drive in RAM (a memfd) with optional
//! bandwidth, IOPS and latency ceilings, in the spirit of Linux null_blk —
//! and `null:` — a drive that reads zeros and drops writes (SPDK's null
//! bdev), to measure the engine's own cost without a data copy.
//! Every kind is a real file descriptor, so the engine drives all of them
//! through the same io_uring path (a `null:` member's I/O is a NOP there);
//! a ceiling is a [`Throttle`] that holds a completion back until the
//! emulated drive would have finished it.
//!
//! This file holds the [`Member`] type, its accessors and the [`Filter`]
//! stack; each concern has a file of its own: naming a member (`spec.rs`),
//! the kinds (`path.rs`: files and block devices; `mem.rs`: the emulated
//! drive and its service model; `null.rs`: the null drive), the member's lock (`lock.rs`), discard and
//! zeroing support (`discard.rs`) and the blocking helpers of the control
//! path (`blocking.rs`).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use crate::io::request::Op;
use crate::{Error, Result};

mod blocking;
mod discard;
mod lock;
mod mem;
mod null;
mod path;
mod spec;

/// Where each member's data area starts, in bytes from the member's start
/// (1 MiB): before it lie the superblock (`control::superblock`, at 0) and
/// the write-intent bitmap (`raid::bitmap`, at 64 KiB). Part of the on-disk
/// format. It lives here, below every layer that uses it (the RAID layer,
/// the cache's and the control path's tests, the control path).
pub const DATA_OFFSET: u64 = 1 << 20;

pub use discard::QueueLimits;
use lock::HeldLock;
pub use mem::{Latency, Throttle};
pub use spec::{check_distinct, Identity, Limits, MemSpec, MemberSpec};

/// What kind of thing a member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum MemberKind {
    /// A regular file.
    File,
    /// A block device.
    BlockDevice,
    /// An emulated drive in RAM.
    Mem,
    /// A null drive (`null:SIZE`): reads return zeros, writes are dropped.
    Null,
}

/// How to open a member.
#[derive(Debug, Clone, Copy)]
pub struct OpenMode {
    /// Open for writing too.
    pub write: bool,
    /// Take the member for this process alone: an exclusive `flock` on
    /// every kind, and O_EXCL on block devices (which the kernel also
    /// refuses while the device is mounted).
    pub exclusive: bool,
}

/// A filter stacked over a member, as nbdkit's filters stack over a
/// plugin (its `error` and `delay` filters) or SPDK's error-injection bdev
/// over a base bdev: every I/O to the member, from the engine's io_uring or
/// from the blocking helpers, is shown to it first, and it may let it
/// through, fail it, or let only part of a write land. Fault injection
/// ([`crate::io::fault::Faults`]) is one. A filter knows nothing of the
/// layers above the member.
pub trait Filter: Send + Sync + std::fmt::Debug {
    /// The verdict on `op` of `len` bytes at absolute member byte `offset`
    /// of `member`, before it is done. `durable`: a write (or zeroing)
    /// that is durable once done (FUA, or synced by its caller).
    fn before(&self, member: &Member, op: Op, offset: u64, len: u64, durable: bool) -> Verdict;
    /// The filter as `Any`, to find a filter of a given type on a member
    /// (see [`crate::io::fault::Faults::of`]).
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// What a [`Filter`] does with an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through.
    Pass,
    /// Fail it with this errno without doing it.
    Fail(i32),
    /// Do only the first `bytes` bytes of the write, then fail it with EIO.
    Tear(usize),
}

/// An open member.
#[derive(Debug)]
pub struct Member {
    name: String,
    file: File,
    kind: MemberKind,
    size: u64,
    direct: bool,
    block_size: u32,
    throttle: Option<Arc<Throttle>>,
    /// Filters stacked over the member ([`Filter`]), outermost last.
    filters: Vec<Arc<dyn Filter>>,
    /// Set once the member refused a discard or zeroing fallocate(2)
    /// (EOPNOTSUPP): from then on the engine writes zeros there instead
    /// (see [`Member::no_fallocate`]). Shared by every handle.
    no_fallocate: Arc<std::sync::atomic::AtomicBool>,
    /// A block device's discard and zeroing limits, read from sysfs when
    /// it was opened (`None` for files and `mem:` drives, or when sysfs
    /// does not say).
    limits: Option<QueueLimits>,
    /// Set once the block device refused a discard (EOPNOTSUPP) although
    /// its limits promised one (see [`Member::discards`]). Shared by
    /// every handle.
    no_discard: Arc<std::sync::atomic::AtomicBool>,
    /// The member's lock, when this handle (or the one it was cloned from)
    /// took it: shared by the clones, released from `LIVE_LOCKS` (`lock.rs`)
    /// with the last of them.
    held: Option<Arc<HeldLock>>,
}

impl Member {
    /// Opens the member named by `spec`.
    ///
    /// Errors: `Io` when it cannot be opened, `Busy` when another process
    /// holds it (`exclusive`), `InvalidInput` for something that is neither
    /// a regular file nor a block device.
    pub fn open(spec: &MemberSpec, mode: OpenMode) -> Result<Member> {
        let m = match spec {
            MemberSpec::Mem(m) => Self::open_mem(m),
            MemberSpec::Null(size) => Self::open_null(*size),
            MemberSpec::Path(p) => Self::open_path(p, mode),
        }?;
        Ok(m)
    }

    /// A second handle on the same member (same drive, same lock, same
    /// emulated ceilings), so that several volumes can be built over it in
    /// one process, one after the other.
    pub fn try_clone(&self) -> Result<Member> {
        Ok(Member {
            name: self.name.clone(),
            file: self.file.try_clone().map_err(|e| Error::io("cannot duplicate handle of", Path::new(&self.name), e))?,
            kind: self.kind,
            size: self.size,
            direct: self.direct,
            block_size: self.block_size,
            throttle: self.throttle.clone(),
            filters: self.filters.clone(),
            no_fallocate: self.no_fallocate.clone(),
            limits: self.limits,
            no_discard: self.no_discard.clone(),
            held: self.held.clone(),
        })
    }

    /// Stacks `filter` over the member (see [`Filter`]): from now on the
    /// engine and the blocking helpers ask it before every I/O. Clones made
    /// afterwards share it.
    pub fn push_filter(&mut self, filter: Arc<dyn Filter>) {
        self.filters.push(filter);
    }

    /// The filters stacked over the member, innermost first.
    pub fn filters(&self) -> &[Arc<dyn Filter>] {
        &self.filters
    }

    /// What the filters say of `op` of `len` bytes at absolute member byte
    /// `offset` (`durable`: a write that is durable once done, FUA), the
    /// outermost first; the first that does not pass decides.
    #[inline]
    pub fn filter_verdict(&self, op: Op, offset: u64, len: u64, durable: bool) -> Verdict {
        for f in self.filters.iter().rev() {
            match f.before(self, op, offset, len, durable) {
                Verdict::Pass => {}
                v => {
                    debug_assert!(!matches!(v, Verdict::Tear(n) if n as u64 > len), "{v:?} of a {len}-byte I/O");
                    return v;
                }
            }
        }
        Verdict::Pass
    }

    /// Name as given (path or `mem:` spec).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Kind of member.
    pub fn kind(&self) -> MemberKind {
        self.kind
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// True when opened with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.direct
    }
    /// Logical block size in bytes (smallest aligned I/O).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
    /// The emulated ceilings, if any.
    pub fn throttle(&self) -> Option<&Arc<Throttle>> {
        self.throttle.as_ref()
    }
}

/// Nanoseconds on the monotonic clock since the first read in this process
/// (the injected clock's: see [`crate::clock`]).
pub use crate::clock::now_ns;
