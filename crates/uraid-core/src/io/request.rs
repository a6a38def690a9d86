//! The request and completion every layer of the data path speaks: the
//! one block-layer interface (in the manner of SPDK's bdev_io and Linux's
//! bio). A layer takes [`Request`]s through [`BlockQueue::push`] and hands
//! back a [`Completion`] for each, from [`BlockQueue::wait`]; requests go
//! down the stack (export -> cache -> RAID -> members) and completions come
//! back up, and no layer calls the one above it.
//!
//! Offsets and lengths are bytes, multiples of the volume's block size.

use std::os::fd::RawFd;

use crate::io::buf::IoBuf;
use crate::{Error, Result};

/// Largest logical request, in bytes (64 MiB, ATTO's largest transfer).
pub const MAX_REQUEST: usize = 64 << 20;
/// Sector size in bytes: offsets and lengths must be multiples of the
/// volume's block size, itself a multiple of this.
pub const SECTOR: u64 = 512;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read `len` bytes into the buffer.
    Read,
    /// Write the first `len` bytes of the buffer.
    Write,
    /// Make every write completed before it durable on all members.
    Flush,
    /// Discard (TRIM) the range: the members may drop it; on files and
    /// `mem:` drives it reads back as zeros afterwards (a punched hole),
    /// on block devices it becomes a discard. No buffer.
    Discard,
    /// Make the range read back as zeros without sending zero bytes: a
    /// punched hole on files, a zero-out on block devices; with `no_hole`
    /// the range stays allocated (NBD's NO_HOLE). No buffer.
    WriteZeroes {
        /// Keep the range provisioned.
        no_hole: bool,
    },
}

impl Op {
    /// True for the operations that carry no data buffer but a range.
    pub fn is_range_only(self) -> bool {
        matches!(self, Op::Discard | Op::WriteZeroes { .. })
    }
}

/// One logical I/O on a volume.
#[derive(Debug)]
pub struct Request {
    /// Operation.
    pub op: Op,
    /// Byte offset in the volume (multiple of the block size).
    pub offset: u64,
    /// Length in bytes (multiple of the block size, at most [`MAX_REQUEST`]).
    pub len: usize,
    /// Data buffer, at least `len` bytes; `None` for a flush.
    pub buf: Option<IoBuf>,
    /// Caller's tag, returned in the completion.
    pub tag: u64,
    /// Force unit access: a write is durable on the members when it
    /// completes (RWF_DSYNC on each member write, like REQ_FUA).
    pub fua: bool,
}

impl Request {
    /// A read of `len` bytes at `offset` into `buf`.
    pub fn read(offset: u64, len: usize, buf: IoBuf, tag: u64) -> Request {
        Request { op: Op::Read, offset, len, buf: Some(buf), tag, fua: false }
    }
    /// A write of the first `len` bytes of `buf` at `offset`.
    pub fn write(offset: u64, len: usize, buf: IoBuf, tag: u64) -> Request {
        Request { op: Op::Write, offset, len, buf: Some(buf), tag, fua: false }
    }
    /// A flush.
    pub fn flush(tag: u64) -> Request {
        Request { op: Op::Flush, offset: 0, len: 0, buf: None, tag, fua: false }
    }
}

/// The end of a [`Request`].
#[derive(Debug)]
pub struct Completion {
    /// The request's tag.
    pub tag: u64,
    /// Bytes transferred, or the first member error.
    pub result: Result<usize>,
    /// The request's buffer, handed back.
    pub buf: Option<IoBuf>,
}

/// A request the queue would not take, with the reason.
#[derive(Debug)]
pub struct Rejected {
    /// Why.
    pub error: Error,
    /// The request, handed back untouched.
    pub request: Request,
}


/// What a layer (and so the stack down from it) can do, as the exports
/// need to know it: each layer answers from the answer of the one below
/// ([`BlockQueue::caps`], [`BlockDevice::caps`]), so that an export never
/// looks past the top of the stack (at the members) to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Size in bytes.
    pub capacity: u64,
    /// Smallest I/O unit in bytes: offsets and lengths are multiples.
    pub block_size: u32,
    /// Whether a discard (TRIM) is worth passing down: when false, an
    /// export answers a discard at once, doing nothing (a discard is a
    /// hint). See [`crate::volume::Volume::discards`].
    pub discard: bool,
    /// Whether [`Op::WriteZeroes`] is carried out (without sending zero
    /// bytes from the caller).
    pub write_zeroes: bool,
    /// Whether a FUA write is durable when it completes.
    pub fua: bool,
    /// Whether a flush is needed for durability (a volatile cache below).
    pub flush: bool,
    /// Largest read or write in bytes.
    pub max_request: usize,
    /// The unit below which a write costs more (a chunk: parity is
    /// rewritten), in bytes; 0 when there is none.
    pub chunk: u64,
    /// Bytes of data in one full stripe (the optimal write), 0 when there
    /// is none (RAID 1, a remote export that did not say).
    pub stripe_width: u64,
}

/// A per-thread queue of one layer of the data path: requests in, their
/// completions out, each in its own time. Implemented by the RAID layer's
/// queue ([`crate::raid::engine::RaidQueue`]), the cache layer's
/// ([`crate::cache::queue::CacheQueue`], generic over the queue below it),
/// the stack of both ([`crate::volume::Queue`]) and pass-through layers
/// such as [`crate::io::tap::Tap`]; used by the NBD export, the load
/// generator and the control path's blocking helpers. A layer above uses
/// only this trait of the one below.
pub trait BlockQueue {
    /// Queues `req`; its completion comes from a later wait. Errors (the
    /// request is handed back): `Busy` when the queue is full, `OutOfRange`
    /// past the end, `InvalidInput` when misaligned or too long.
    fn push(&mut self, req: Request) -> std::result::Result<(), Rejected>;
    /// Hands whatever is queued to the layer below without waiting.
    fn submit(&mut self);
    /// Submits and waits until at least `min` requests have completed (or
    /// none is left in flight), appending their completions to `out`.
    fn wait(&mut self, min: usize, out: &mut Vec<Completion>);
    /// Like [`wait`](Self::wait) for one completion, but also returns when
    /// `fd` becomes readable (then true) or after `timeout`.
    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool;
    /// Requests pushed and not yet handed out as completions.
    fn in_flight(&self) -> usize;
    /// Whether [`push`](Self::push) would take one more request now.
    fn has_room(&self) -> bool;
    /// Requests this queue can hold at once.
    fn depth(&self) -> usize;
    /// Checks `req` as [`push`](Self::push) would, without queueing it:
    /// inside the device, aligned, not too long, with a large enough
    /// buffer. Errors: `OutOfRange` past the end, `InvalidInput` otherwise.
    fn validate(&self, req: &Request) -> Result<()>;
    /// The error every request fails with once the queue failed for good
    /// (its ring or connection is gone), if it has.
    fn broken(&self) -> Option<&Error> {
        None
    }
    /// What the stack from this layer down can do (see [`Caps`]).
    fn caps(&self) -> Caps;
    /// Pushes `req` and waits for it alone (the queue must be otherwise
    /// idle): the control path's blocking I/O.
    fn run(&mut self, req: Request) -> Completion {
        let tag = req.tag;
        if let Err(r) = self.push(req) {
            return Completion { tag, result: Err(r.error), buf: r.request.buf };
        }
        let mut out = Vec::with_capacity(1);
        while out.is_empty() {
            self.wait(1, &mut out);
        }
        out.pop().expect("one completion")
    }
    /// Reads `len` bytes at `offset` (blocking).
    fn read_at(&mut self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let c = self.run(Request::read(offset, len, IoBuf::new(len), 0));
        c.result?;
        Ok(c.buf.map(|b| b.to_vec()).unwrap_or_default())
    }
    /// Writes `data` at `offset` (blocking).
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let mut buf = IoBuf::new(data.len());
        buf.copy_from_slice(data);
        self.run(Request::write(offset, data.len(), buf, 0)).result.map(|_| ())
    }
    /// Makes every completed write durable (blocking).
    fn flush(&mut self) -> Result<()> {
        self.run(Request::flush(0)).result.map(|_| ())
    }
}

/// Something queues can be opened on: a volume (the in-process engine), or
/// the client side of an NBD export (`uraid_nbd::client`). The load
/// generator runs on any of them, so the same test measures the engine
/// in process and through the export (as SPDK's bdevperf runs on any
/// bdev). Shared by the threads that each open their own queue.
pub trait BlockDevice: Sync {
    /// The queue one thread drives.
    type Queue: BlockQueue;
    /// A queue for the calling thread with room for `depth` requests in
    /// flight. Errors: whatever stops it being made (no io_uring, a
    /// connection refused).
    fn open_queue(&self, depth: usize) -> Result<Self::Queue>;
    /// Size in bytes.
    fn capacity(&self) -> u64;
    /// Smallest I/O unit in bytes: offsets and lengths are multiples.
    fn block_size(&self) -> u32;
    /// What the device's stack of layers can do (see [`Caps`]).
    fn caps(&self) -> Caps;
    /// Makes every completed write durable (blocking).
    fn flush(&self) -> Result<()>;
}
