//! The data path: one io_uring per engine thread.
//!
//! A [`Volume`] is the shared, read-only description of an array (members,
//! geometry, data offset). Each thread that does I/O makes its own [`Queue`]
//! from it: its own ring, with the member descriptors registered once. A
//! logical request is split by the geometry into member pieces; pieces that
//! are contiguous on one member are merged into one vectored I/O (so a
//! 1 MiB request on 4 members is 4 member I/Os whatever the chunk size);
//! the request completes when all its pieces have. There is no lock on this
//! path and, once the slots have grown to the largest request seen, no
//! allocation either.
//!
//! Emulated ceilings (see [`crate::member::Throttle`]) hold a piece's
//! completion back until the modelled drive would have finished it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use io_uring::{opcode, squeue, types, IoUring};

use crate::bitmap::Bitmap;
use crate::geometry::Geometry;
use crate::health::Health;
use crate::locks::StripeLocks;
use crate::member::{now_ns, Member, MemberKind};
use crate::{bail, Error, ErrorKind, IoBuf, Result};

/// Largest logical request, in bytes (64 MiB, ATTO's largest transfer).
pub const MAX_REQUEST: usize = 64 << 20;
/// Sector size in bytes: offsets and lengths must be multiples of the
/// volume's block size, itself a multiple of this.
pub const SECTOR: u64 = 512;
const IOV_MAX: usize = 1024;

/// A set of members laid out by one geometry: what the engine reads and
/// writes. Shared (`Arc`) between all the queues that serve it.
#[derive(Debug)]
pub struct Volume {
    members: Arc<Vec<Member>>,
    geometry: Geometry,
    data_offset: u64,
    block_size: u32,
    health: Arc<Health>,
    bitmap: Option<Arc<Bitmap>>,
    locks: StripeLocks,
    /// Some member is an emulated drive with ceilings.
    throttled: bool,
    /// The volume cache, once enabled ([`Volume::enable_cache`]).
    cache: std::sync::OnceLock<Arc<crate::cache::Cache>>,
    /// Member reads issued by stripe operations (read-modify-write,
    /// reconstruct-write, degraded reads).
    stripe_reads: std::sync::atomic::AtomicU64,
}

/// The array-wide state a volume shares with the other volumes on the same
/// members and with the control path (see [`Volume::with_state`]).
#[derive(Debug, Clone)]
pub struct Shared {
    /// Member states (one per role).
    pub health: Arc<Health>,
    /// The write-intent bitmap, when the array has one.
    pub bitmap: Option<Arc<Bitmap>>,
}

impl Volume {
    /// A volume over `members` (in role order) with `geometry`, whose data
    /// area starts `data_offset` bytes into each member.
    ///
    /// Errors: `InvalidInput` when the member count differs from the
    /// geometry's, `TooSmall` when a member cannot hold its data area.
    pub fn new(members: Arc<Vec<Member>>, geometry: Geometry, data_offset: u64) -> Result<Arc<Volume>> {
        let shared = Shared { health: Arc::new(Health::new(members.len())), bitmap: None };
        Volume::with_state(members, geometry, data_offset, shared)
    }

    /// Like [`new`](Self::new), with the member states and bitmap of an
    /// assembled array. Errors: as `new`, and `InvalidInput` when `shared`
    /// has another number of roles than `members`.
    pub fn with_state(members: Arc<Vec<Member>>, geometry: Geometry, data_offset: u64, shared: Shared) -> Result<Arc<Volume>> {
        if shared.health.members() != members.len() {
            bail!(InvalidInput, "member states for {} roles, {} members given", shared.health.members(), members.len());
        }
        if members.len() != geometry.members() {
            bail!(InvalidInput, "geometry wants {} members, {} given", geometry.members(), members.len());
        }
        for m in members.iter() {
            if m.size() < data_offset + geometry.member_size() {
                bail!(
                    TooSmall,
                    "member {} has {} bytes, the layout needs {}",
                    m.name(),
                    m.size(),
                    data_offset + geometry.member_size()
                );
            }
        }
        let block_size = members.iter().map(|m| m.block_size()).max().unwrap_or(512).max(SECTOR as u32);
        let throttled = members.iter().any(|m| m.throttle().is_some());
        Ok(Arc::new(Volume {
            members,
            geometry,
            data_offset,
            block_size,
            health: shared.health,
            bitmap: shared.bitmap,
            locks: StripeLocks::default(),
            throttled,
            cache: std::sync::OnceLock::new(),
            stripe_reads: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// Usable bytes.
    pub fn capacity(&self) -> u64 {
        self.geometry.capacity()
    }
    /// The layout.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    /// Members in role order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }
    /// Byte offset of the data area on each member.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }
    /// Member states, shared with the array's other volumes.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }
    /// The write-intent bitmap, if any.
    pub fn bitmap(&self) -> Option<&Arc<Bitmap>> {
        self.bitmap.as_ref()
    }
    /// The volume's stripe locks (rebuild and scrub take them too).
    pub fn locks(&self) -> &StripeLocks {
        &self.locks
    }

    /// The clock (ns, [`now_ns`]) that emulated ceilings are admitted at, or
    /// 0 when no member has one (no clock read on the hot path then).
    fn throttle_clock(&self) -> u64 {
        if self.throttled { now_ns() } else { 0 }
    }

    /// When member `m`'s emulated drive would finish an I/O of `len` bytes
    /// admitted at `now` (ns); 0 for a member without ceilings.
    fn deadline(&self, m: u32, len: usize, now: u64) -> u64 {
        match self.members[m as usize].throttle() {
            Some(t) => t.admit(len as u64, now),
            None => 0,
        }
    }

    /// Smallest I/O unit and alignment in bytes (the largest logical block
    /// size among the members, at least 512).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Makes a queue for the calling thread with room for `depth` logical
    /// requests in flight (through the cache when there is one). Errors:
    /// `Unsupported` when io_uring is missing.
    pub fn queue(self: &Arc<Self>, depth: usize) -> Result<Queue> {
        Queue::new(self.clone(), depth, self.cache.get().cloned())
    }

    /// A queue that goes straight to the members even when the volume has
    /// a cache (the cache's own flusher).
    pub(crate) fn queue_uncached(self: &Arc<Self>, depth: usize) -> Result<Queue> {
        Queue::new(self.clone(), depth, None)
    }

    /// Puts a cache in front of the volume (see [`crate::cache`]); every
    /// queue made afterwards uses it. `Off` does nothing. Flush the volume
    /// ([`flush`](Self::flush)) before the last handle goes: write-back
    /// data not yet written is lost otherwise, as on a crash.
    ///
    /// Errors: `InvalidInput` when a cache is already there, the size
    /// and dirty limit cannot hold one line (one stripe's data), or the
    /// mode is `Journal` (see [`enable_journaled_cache`](Self::enable_journaled_cache)).
    pub fn enable_cache(self: &Arc<Self>, cfg: crate::cache::CacheConfig) -> Result<()> {
        self.start_cache(cfg, None)
    }

    /// Puts a cache in journal mode in front of the volume, recording into
    /// `journal`; records it holds from before must be replayed
    /// ([`crate::journal::Journal::replay`]) before the volume takes writes.
    /// Errors: as [`enable_cache`](Self::enable_cache), for a mode other
    /// than `Journal` too.
    pub fn enable_journaled_cache(self: &Arc<Self>, cfg: crate::cache::CacheConfig, journal: Arc<crate::journal::Journal>) -> Result<()> {
        self.start_cache(cfg, Some(journal))
    }

    fn start_cache(self: &Arc<Self>, cfg: crate::cache::CacheConfig, journal: Option<Arc<crate::journal::Journal>>) -> Result<()> {
        if cfg.mode == crate::cache::CacheMode::Off {
            return Ok(());
        }
        let c = Arc::new(crate::cache::Cache::new(self, cfg, journal)?);
        if self.cache.set(c.clone()).is_err() {
            bail!(InvalidInput, "the volume already has a cache");
        }
        if cfg.mode.writes_back() {
            c.start_flusher(Arc::downgrade(self));
        }
        Ok(())
    }

    /// Member reads issued so far by stripe operations: the reads of
    /// read-modify-write and reconstruct-write, and of degraded reads (a
    /// write stream the coalescer turns into full stripes issues none).
    pub fn stripe_reads(&self) -> u64 {
        self.stripe_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes over the cache of another volume with the same geometry (the
    /// array rebuilt its volumes over new members): what it holds, dirty
    /// data included, is this volume's now, and its flusher writes here.
    /// Errors: `InvalidInput` when this volume has a cache already or the
    /// capacities differ.
    pub fn adopt_cache(self: &Arc<Self>, c: Arc<crate::cache::Cache>, from: &Volume) -> Result<()> {
        if from.capacity() != self.capacity() || from.geometry().chunk() != self.geometry().chunk() {
            bail!(InvalidInput, "a cache cannot move between volumes of different shapes");
        }
        c.retarget(Arc::downgrade(self));
        if self.cache.set(c).is_err() {
            bail!(InvalidInput, "the volume already has a cache");
        }
        Ok(())
    }

    /// The volume's cache, if any.
    pub fn cache(&self) -> Option<&Arc<crate::cache::Cache>> {
        self.cache.get()
    }

    /// Reads `len` bytes at `offset` (blocking; control path and tests).
    pub fn read_at(self: &Arc<Self>, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut q = self.queue(1)?;
        let c = q.run(Request { op: Op::Read, offset, len, buf: Some(IoBuf::new(len)), tag: 0, fua: false });
        c.result?;
        Ok(c.buf.map(|b| b.to_vec()).unwrap_or_default())
    }

    /// Writes `data` at `offset` (blocking; control path and tests).
    pub fn write_at(self: &Arc<Self>, offset: u64, data: &[u8]) -> Result<()> {
        let mut q = self.queue(1)?;
        let mut buf = IoBuf::new(data.len());
        buf.copy_from_slice(data);
        q.run(Request { op: Op::Write, offset, len: data.len(), buf: Some(buf), tag: 0, fua: false }).result.map(|_| ())
    }

    /// Makes every completed write durable on every member (blocking;
    /// with a write-back cache, writes everything back first).
    pub fn flush(self: &Arc<Self>) -> Result<()> {
        if let Some(c) = self.cache.get() {
            // Journal mode: a FLUSH does not write back (the journal holds
            // every write); this does, so that the log can be emptied.
            c.drain()?;
        }
        let mut q = self.queue(1)?;
        q.run(Request { op: Op::Flush, offset: 0, len: 0, buf: None, tag: 0, fua: false }).result.map(|_| ())
    }

    /// Flushes and stops the cache's flusher (the end of a clean stop).
    pub fn close_cache(self: &Arc<Self>) -> Result<()> {
        if let Some(c) = self.cache.get() {
            self.flush()?;
            c.close();
        }
        Ok(())
    }
}

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

struct Piece {
    op: Op,
    fua: bool,
    member: u32,
    /// Absolute byte offset on the member.
    offset: u64,
    len: usize,
    done: usize,
    iov: Vec<libc::iovec>,
    iov_first: usize,
    /// When the emulated drive finishes it (ns), 0 when not throttled.
    deadline: u64,
    /// A discard or zeroing done by writing zeros (`done` bytes of `len`
    /// written): the member refused the fallocate(2).
    zero_fill: bool,
}

struct Slot {
    tag: u64,
    op: Op,
    fua: bool,
    len: usize,
    buf: Option<IoBuf>,
    pieces: Vec<Piece>,
    npieces: usize,
    pending: usize,
    error: Option<Error>,
    /// Byte offset of the request in the volume.
    offset: u64,
    /// A member failed a piece: plan the request again once the rest is in.
    replan: bool,
    /// Plans so far (bounded by the member count).
    plans: u8,
    /// A read that missed the cache: the lines to lay over its result and
    /// the cache's write-through epoch at its start.
    cache_read: Option<(Vec<u64>, u64)>,
    /// The bytes the completion reports when the cache sent on only part
    /// of the request ([`crate::cache::Taken::MembersPart`]).
    report_len: Option<usize>,
    /// A write, discard or zeroing the cache sent on to the members: it
    /// tells the cache when it completes ([`crate::cache::Cache::sent_on_done`]),
    /// so that a later flush covers it.
    cache_sent_on: bool,
    /// A FUA zeroing or discard: once done, a flush of the members
    /// (fallocate(2) has no FUA; see [`Queue::sync_members`]).
    sync_after: bool,
    /// That flush is in flight.
    syncing: bool,
}

/// A per-thread submission and completion queue over a [`Volume`].
///
/// Not `Send`: it is used only by the thread that made it.
pub struct Queue {
    /// Closed in `Drop`, or leaked when the kernel may still be doing I/O
    /// into memory of this queue's (a ring given up, a panic).
    ring: std::mem::ManuallyDrop<IoUring>,
    vol: Arc<Volume>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Pieces done by the kernel but held until their emulated deadline.
    held: BinaryHeap<Reverse<(u64, u64)>>,
    /// Pieces handed to the ring and not yet completed by the kernel.
    in_kernel: usize,
    /// SQEs pushed since the last submit.
    unsubmitted: usize,
    /// A poll on the caller's descriptor is in the ring.
    poll_armed: bool,
    /// That poll fired and was not reported yet.
    poll_ready: bool,
    /// Stripe operations of the redundant levels.
    raid: raid::State,
    /// Completions of member I/Os a fault plan failed (user data, -errno).
    synthetic: Vec<(u64, i32)>,
    /// The volume's cache, unless this queue bypasses it.
    cache: Option<Arc<crate::cache::Cache>>,
    /// Requests the cache completed, handed out at the next wait.
    cache_ready: Vec<Completion>,
    /// Requests waiting on the cache: for durability (flush, FUA) or room.
    cache_parked: Vec<(Request, Parked)>,
    /// Set when the ring failed for good: every request fails with it.
    broken: Option<Error>,
}

/// Why a request waits on the cache.
#[derive(Debug, Clone, Copy)]
enum Parked {
    /// Until writes below this sequence number are durable.
    Durable(u64),
    /// The same, then to the members.
    DurableThenMembers(u64),
    /// Until the dirty bytes fall below the limit.
    Room,
}

/// How often a queue looks at requests waiting on the cache (ns).
const CACHE_POLL_NS: u64 = 100_000;

/// user_data of the poll armed by [`Queue::wait_event`].
const POLL_TAG: u64 = u64::MAX;
/// user_data of the removal of that poll.
const CANCEL_TAG: u64 = u64::MAX - 1;
/// Set in the user_data of a piece of a stripe operation (`raid`), whose
/// index is in bits 16..62 and the piece's in bits 0..16.
const SOP_BIT: u64 = 1 << 62;

mod raid;

impl Queue {
    fn new(vol: Arc<Volume>, depth: usize, cache: Option<Arc<crate::cache::Cache>>) -> Result<Queue> {
        let depth = depth.clamp(1, 4096);
        let entries = (depth * vol.members().len().min(8)).next_power_of_two().clamp(64, 4096) as u32;
        // A queue belongs to the thread that made it (it is not Send), so
        // the ring can be single-issuer with task work deferred to our own
        // waits: completions then cost no interrupt of this thread (Linux
        // 6.1+; older kernels get a plain ring).
        let ring = IoUring::builder()
            .setup_cqsize(entries * 4)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::builder().setup_cqsize(entries * 4).build(entries))
            .map_err(|e| Error::new(ErrorKind::Unsupported, format!("cannot set up io_uring (needs Linux 5.11 or newer, and io_uring not disabled by sysctl): {e}")))?;
        let fds: Vec<i32> = vol.members().iter().map(|m| m.file().as_raw_fd()).collect();
        ring.submitter()
            .register_files(&fds)
            .map_err(|e| Error::new(ErrorKind::Unsupported, format!("cannot register member files with io_uring: {e}")))?;
        // Emulated latencies of tens of µs need timers without the default
        // 50 µs slack.
        // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
        let vol_for_state = vol.clone();
        let slots = (0..depth)
            .map(|_| Slot {
                tag: 0,
                op: Op::Read,
                fua: false,
                len: 0,
                buf: None,
                pieces: Vec::new(),
                npieces: 0,
                pending: 0,
                error: None,
                offset: 0,
                replan: false,
                plans: 0,
                cache_read: None,
                report_len: None,
                cache_sent_on: false,
                sync_after: false,
                syncing: false,
            })
            .collect();
        Ok(Queue {
            ring: std::mem::ManuallyDrop::new(ring),
            vol,
            slots,
            free: (0..depth as u32).rev().collect(),
            held: BinaryHeap::with_capacity(depth * 4),
            in_kernel: 0,
            unsubmitted: 0,
            poll_armed: false,
            poll_ready: false,
            raid: raid::State::new(&vol_for_state),
            synthetic: Vec::new(),
            cache,
            cache_ready: Vec::new(),
            cache_parked: Vec::new(),
            broken: None,
        })
    }

    /// The ring failed with an error that is not transient (`what`: the
    /// call): the queue is given up. Requests in flight complete with EIO
    /// at the next wait (their buffers are leaked, not returned: the kernel
    /// may still be using them), new ones are refused, and the volume takes
    /// no more writes (some member writes may be half done; the bitmap
    /// keeps their regions dirty for the resync at the next assemble).
    fn ring_failed(&mut self, what: &str, e: std::io::Error) {
        if self.broken.is_some() {
            return;
        }
        let err = Error::new(
            ErrorKind::Io,
            format!(
                "the engine's io_uring failed ({what}: {e}): requests in flight fail and the volume takes no more writes; \
                 stop the array and assemble it again"
            ),
        );
        eprintln!("uraid: {err}");
        self.vol.health().stop_writes();
        self.broken = Some(err);
    }

    /// Completes every request in flight with the queue's error (see
    /// [`ring_failed`](Self::ring_failed)).
    fn fail_everything(&mut self, out: &mut Vec<Completion>) {
        let Some(e) = self.broken.clone() else { return };
        if self.in_flight() > 0 {
            self.vol.health().set_unclean();
        }
        out.append(&mut self.cache_ready);
        for (req, _) in self.cache_parked.drain(..) {
            out.push(Completion { tag: req.tag, result: Err(e.clone()), buf: req.buf });
        }
        let free: std::collections::HashSet<u32> = self.free.iter().copied().collect();
        for si in 0..self.slots.len() as u32 {
            if free.contains(&si) {
                continue;
            }
            let slot = &mut self.slots[si as usize];
            if let Some(b) = slot.buf.take() {
                std::mem::forget(b);
            }
            out.push(Completion { tag: slot.tag, result: Err(e.clone()), buf: None });
            self.free.push(si);
        }
        self.raid.abandon(self.vol.locks(), true);
        self.held.clear();
        self.synthetic.clear();
        // Abandoned: whatever the kernel still does names only leaked memory.
        self.in_kernel = 0;
        self.unsubmitted = 0;
    }

    /// The volume this queue serves.
    pub fn volume(&self) -> &Arc<Volume> {
        &self.vol
    }

    /// Logical requests in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len() + self.cache_ready.len() + self.cache_parked.len()
    }

    /// Room for more requests.
    pub fn has_room(&self) -> bool {
        self.in_flight() < self.slots.len()
    }

    fn check(&self, req: &Request) -> Result<()> {
        if !self.has_room() {
            bail!(Busy, "queue is full ({} requests in flight); wait for completions first", self.slots.len());
        }
        if req.op == Op::Flush {
            return Ok(());
        }
        let range_only = req.op.is_range_only();
        let bs = self.vol.block_size as u64;
        let end = req.offset.checked_add(req.len as u64);
        if end.is_none_or(|e| e > self.vol.capacity()) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "I/O of {} bytes at offset {} goes past the end of the volume ({} bytes)",
                    req.len,
                    req.offset,
                    self.vol.capacity()
                ),
            ));
        }
        let max = if range_only { usize::MAX } else { MAX_REQUEST };
        if !req.offset.is_multiple_of(bs) || !(req.len as u64).is_multiple_of(bs) || req.len == 0 || req.len > max {
            bail!(
                InvalidInput,
                "I/O of {} bytes at offset {} is not aligned: offset and length must be multiples of \
                 {bs} bytes, and the length from {bs} to {MAX_REQUEST}",
                req.len,
                req.offset
            );
        }
        match &req.buf {
            _ if range_only => Ok(()),
            Some(b) if b.len() >= req.len => Ok(()),
            _ => bail!(InvalidInput, "I/O of {} bytes needs a buffer of at least that size", req.len),
        }
    }

    /// Queues `req`. Its member I/Os reach the kernel at the next
    /// [`wait`](Self::wait) or [`submit`](Self::submit).
    ///
    /// Errors (the request is handed back): `Busy` when `depth` requests are
    /// in flight, `OutOfRange` past the end, `InvalidInput` when misaligned.
    pub fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        if let Some(error) = self.broken.clone() {
            return Err(Rejected { error, request: req });
        }
        if let Err(error) = self.check(&req) {
            return Err(Rejected { error, request: req });
        }
        match self.cache.clone() {
            Some(c) => self.offer_to_cache(&c, req),
            None => self.push_members(req, None, None),
        }
        Ok(())
    }

    /// Offers `req` to the cache: completed there (handed out at the next
    /// wait), parked on it, or sent on to the members (a read that missed
    /// with the lines to lay over its result).
    fn offer_to_cache(&mut self, c: &crate::cache::Cache, mut req: Request) {
        use crate::cache::Taken;
        let why = match c.take(&mut req) {
            Taken::Done(n) => {
                self.cache_ready.push(Completion { tag: req.tag, result: Ok(n), buf: req.buf });
                return;
            }
            Taken::Members { pins, epoch } => {
                let cache_read = (req.op == Op::Read).then_some((pins, epoch));
                self.push_members(req, cache_read, None);
                return;
            }
            Taken::MembersPart { offset, len } => {
                let whole = req.len;
                (req.offset, req.len) = (offset, len);
                self.push_members(req, None, Some(whole));
                return;
            }
            Taken::Durable(t) => Parked::Durable(t),
            Taken::DurableThenMembers(t) => Parked::DurableThenMembers(t),
            Taken::Full => Parked::Room,
            Taken::Failed(e) => {
                self.cache_ready.push(Completion { tag: req.tag, result: Err(e), buf: req.buf });
                return;
            }
        };
        self.cache_parked.push((req, why));
    }

    /// Requests parked on the cache that may go on: completes them, or
    /// sends them on to the members; hands out what the cache completed.
    /// True when some are still parked.
    fn cache_poll(&mut self, out: &mut Vec<Completion>) -> bool {
        if self.cache_parked.is_empty() && self.cache_ready.is_empty() {
            return false;
        }
        let Some(c) = self.cache.clone() else { return false };
        // Each parked request is looked at once per call: one offered again
        // may be parked again (the cache is still full), and must wait for
        // the next call, after this queue has reaped and driven its own
        // member I/O (a stripe lock it holds may be what the flusher needs).
        let mut parked = std::mem::take(&mut self.cache_parked);
        for (req, why) in parked.drain(..) {
            let go = match why {
                Parked::Durable(t) | Parked::DurableThenMembers(t) => c.durable(t),
                Parked::Room => c.has_room().then_some(Ok(())),
            };
            let Some(res) = go else {
                self.cache_parked.push((req, why));
                continue;
            };
            match (why, res) {
                (_, Err(e)) => {
                    // Never sent on: it ends here.
                    c.sent_on_done(req.op, req.offset, req.len);
                    out.push(Completion { tag: req.tag, result: Err(e), buf: req.buf })
                }
                (Parked::Durable(_), Ok(())) => out.push(Completion { tag: req.tag, result: Ok(req.len), buf: req.buf }),
                (Parked::DurableThenMembers(_), Ok(())) => {
                    c.invalidate(req.offset, req.len);
                    self.push_members(req, None, None);
                }
                (Parked::Room, Ok(())) => self.offer_to_cache(&c, req),
            }
        }
        // Those parked again go back into the list's own allocation.
        parked.append(&mut self.cache_parked);
        self.cache_parked = parked;
        out.append(&mut self.cache_ready);
        !self.cache_parked.is_empty()
    }

    /// Queues `req` (checked) on the members; its completion reports
    /// `report_len` bytes when given (else `req.len`).
    fn push_members(&mut self, req: Request, cache_read: Option<(Vec<u64>, u64)>, report_len: Option<usize>) {
        let si = self.free.pop().expect("checked") as usize;
        self.slots[si].report_len = report_len;
        self.slots[si].cache_sent_on = self.cache.is_some() && matches!(req.op, Op::Write | Op::Discard | Op::WriteZeroes { .. });
        self.slots[si].cache_read = cache_read;
        let data_offset = self.vol.data_offset;
        let vol = self.vol.clone();
        let slot = &mut self.slots[si];
        slot.tag = req.tag;
        slot.op = req.op;
        // A FUA zeroing or discard goes without FUA, then the members are
        // flushed (`sync_members`).
        slot.sync_after = req.fua && matches!(req.op, Op::Discard | Op::WriteZeroes { .. });
        slot.syncing = false;
        slot.fua = req.fua && !slot.sync_after;
        slot.len = req.len;
        slot.buf = req.buf;
        slot.error = None;
        slot.npieces = 0;
        slot.offset = req.offset;
        slot.replan = false;
        slot.plans = 0;
        if vol.geometry().layout().is_some() {
            self.plan(si);
            return;
        }
        match req.op {
            Op::Flush => self.plan_flush(si),
            Op::Discard | Op::WriteZeroes { .. } => {
                let mut last = [usize::MAX; crate::geometry::MAX_MEMBERS];
                vol.geometry().for_each_segment(req.offset, req.len, |seg| {
                    add_segment(slot, &mut last, seg.member, data_offset + seg.member_offset, None, seg.len);
                });
            }
            Op::Read | Op::Write => {
                let base = slot.buf.as_mut().expect("checked").as_mut_ptr();
                let mut last = [usize::MAX; crate::geometry::MAX_MEMBERS];
                vol.geometry().for_each_segment(req.offset, req.len, |seg| {
                    // SAFETY: buf_offset + len <= req.len <= buffer length (checked).
                    let ptr = unsafe { base.add(seg.buf_offset) };
                    add_segment(slot, &mut last, seg.member, data_offset + seg.member_offset, Some(ptr), seg.len);
                });
            }
        }
        self.slots[si].pending = self.slots[si].npieces;
        self.push_pieces(si);
    }

    /// Sends the pieces of slot `si` (each with its emulated drive's
    /// deadline).
    fn push_pieces(&mut self, si: usize) {
        let now = self.vol.throttle_clock();
        for pi in 0..self.slots[si].npieces {
            let p = &mut self.slots[si].pieces[pi];
            p.deadline = self.vol.deadline(p.member, p.len, now);
            self.push_piece(si, pi);
        }
    }

    /// Adds to slot `si` a flush piece for each member a flush goes to:
    /// every member of a RAID 0 volume, every writable one of a redundant
    /// volume. A redundant volume that has failed (also when a member
    /// failing this flush took it past its tolerance) gets no flush: the
    /// slot fails with EIO, since what the flush was to make durable is not
    /// all written.
    fn plan_flush(&mut self, si: usize) {
        let n = self.vol.members().len() as u32;
        let members: Vec<u32> = match self.vol.geometry().layout() {
            None => (0..n).collect(),
            Some(l) => match self.volume_failed(l) {
                Some(msg) => {
                    self.slots[si].error = Some(Error::new(ErrorKind::Io, msg));
                    return;
                }
                None => (0..n).filter(|&m| self.vol.health().writable(m)).collect(),
            },
        };
        let slot = &mut self.slots[si];
        for m in members {
            let p = next_piece(slot);
            p.op = Op::Flush;
            p.fua = false;
            p.member = m;
            p.offset = 0;
            p.len = 0;
        }
    }

    fn push_piece(&mut self, si: usize, pi: usize) {
        let p = &mut self.slots[si].pieces[pi];
        let ud = ((si as u64) << 16) | pi as u64;
        let m = &self.vol.members()[p.member as usize];
        zero_fill_if_refused(p, m);
        if let Some(res) = injected_fault(p, m) {
            self.synthetic.push((ud, res));
            return;
        }
        let sqe = build_sqe(p, m.kind());
        // SAFETY: the buffers and iovecs named by the entry live in the
        // slot, which is neither reused nor moved until this piece's
        // completion has been reaped.
        unsafe { self.push_sqe(sqe.user_data(ud)) };
    }

    /// Pushes one entry, submitting first when the submission queue is full.
    ///
    /// # Safety
    /// Every pointer in `sqe` must stay valid until its completion is reaped.
    unsafe fn push_sqe(&mut self, sqe: squeue::Entry) {
        if self.broken.is_some() {
            // Nothing goes to a ring given up; the request fails at the
            // next wait.
            return;
        }
        loop {
            // SAFETY: guaranteed by the caller.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                break;
            }
            // Submission queue full: hand what we have to the kernel.
            self.submit_now();
            if self.broken.is_some() {
                return;
            }
        }
        self.unsubmitted += 1;
        self.in_kernel += 1;
    }

    /// Like [`wait`](Self::wait) for one completion, but also returns when
    /// `fd` becomes readable (the result is then true) or after `timeout`.
    /// Lets one thread serve a socket and the drives with a single wait;
    /// the poll stays armed across calls until it fires.
    pub fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        if let (Some(fd), false) = (fd, self.poll_armed) {
            let sqe = opcode::PollAdd::new(types::Fd(fd), (libc::POLLIN | libc::POLLRDHUP) as u32).build().user_data(POLL_TAG);
            // SAFETY: a poll names no memory.
            unsafe { self.push_sqe(sqe) };
            self.poll_armed = true;
        }
        self.wait_until(1, out, Some(now_ns() + timeout.as_nanos() as u64))
    }

    /// Submits what is queued and waits until at least `min` requests have
    /// completed (or none is left in flight), appending them to `out`.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        self.wait_until(min, out, None);
    }

    /// The one waiting loop: returns once `min` requests completed, the
    /// armed poll fired (true), nothing is left in flight (without a
    /// deadline), or the deadline (ns, [`now_ns`]) passed. Emulated drives'
    /// held completions are released at their deadlines meanwhile.
    fn wait_until(&mut self, min: usize, out: &mut Vec<Completion>, deadline: Option<u64>) -> bool {
        let start = out.len();
        loop {
            if self.broken.is_some() {
                self.fail_everything(out);
                return std::mem::take(&mut self.poll_ready);
            }
            let parked = self.cache_poll(out);
            self.reap(out);
            if !self.held.is_empty() {
                self.release_held(now_ns(), out);
            }
            self.raid_poll(out);
            if self.raid.has_plugged() {
                // Plugged partial-stripe writes wait for a partner only
                // while something else is in progress, and not too long.
                let busy = self.in_kernel > self.poll_armed as usize || !self.held.is_empty() || self.raid.has_waiting();
                if !busy || self.raid.plug_deadline().is_some_and(|d| now_ns() >= d) {
                    self.unplug(out);
                    continue;
                }
            }
            if out.len() - start >= min || self.poll_ready || (deadline.is_none() && self.in_flight() == 0) {
                self.submit();
                return std::mem::take(&mut self.poll_ready);
            }
            let now = now_ns();
            if deadline.is_some_and(|d| now >= d) {
                self.submit();
                return false;
            }
            if !self.synthetic.is_empty() {
                // Completions made here (a fault injected on an I/O that
                // released held ones started): nothing in the kernel to
                // wait for them.
                continue;
            }
            let held = self.held.peek().map(|r| r.0 .0);
            let mut until = match (held, deadline) {
                (Some(h), Some(d)) => Some(h.min(d)),
                (h, d) => h.or(d),
            };
            if let Some(d) = self.raid.plug_deadline() {
                until = Some(until.map_or(d, |u| u.min(d)));
            }
            if parked {
                // Requests wait on the cache's flusher: look again soon.
                let t = now + CACHE_POLL_NS;
                until = Some(until.map_or(t, |u| u.min(t)));
            }
            if self.raid.waits_on_others(self.vol.locks()) {
                // A stripe operation waits for a lock another thread
                // holds: look again soon.
                let t = now + raid::LOCK_RETRY_NS;
                until = Some(until.map_or(t, |u| u.min(t)));
            }
            let res = match until {
                None => self.ring.submit_and_wait(1),
                Some(u) => {
                    let wait_ns = u.saturating_sub(now);
                    if wait_ns == 0 {
                        continue;
                    }
                    let ts = types::Timespec::new().sec(wait_ns / 1_000_000_000).nsec((wait_ns % 1_000_000_000) as u32);
                    if self.in_kernel > 0 {
                        let args = types::SubmitArgs::new().timespec(&ts);
                        self.ring.submitter().submit_with_args(1, &args)
                    } else {
                        self.submit();
                        std::thread::sleep(std::time::Duration::from_nanos(wait_ns));
                        Ok(0)
                    }
                }
            };
            self.unsubmitted = 0;
            match res {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                // Short of memory for a moment: look again.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOMEM)) => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => self.ring_failed("waiting for completions", e),
            }
        }
    }

    fn submit_now(&mut self) {
        if self.broken.is_some() {
            return;
        }
        let mut tries = 0;
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EBUSY: the completion queue is full; reap happens in wait().
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => break,
                // Short of memory for a moment: try again, for a while.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOMEM)) && tries < 1000 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => {
                    self.ring_failed("submitting", e);
                    return;
                }
            }
        }
        self.unsubmitted = 0;
    }

    /// Hands every queued member I/O to the kernel without waiting.
    pub fn submit(&mut self) {
        if self.unsubmitted > 0 {
            self.submit_now();
        }
    }

    /// Pushes `req` and waits for it alone (blocking convenience; the queue
    /// must be otherwise idle).
    pub fn run(&mut self, req: Request) -> Completion {
        let tag = req.tag;
        if let Err(r) = self.push(req) {
            return Completion { tag, result: Err(r.error), buf: r.request.buf };
        }
        let mut out = Vec::with_capacity(1);
        self.wait(1, &mut out);
        out.pop().expect("one request was in flight")
    }

    fn reap(&mut self, out: &mut Vec<Completion>) {
        loop {
            let cqe = self.ring.completion().next().map(|c| (c.user_data(), c.result()));
            if let Some((ud, res)) = cqe {
                self.in_kernel -= 1;
                self.on_cqe(ud, res, out);
            } else if let Some((ud, res)) = self.synthetic.pop() {
                self.on_cqe(ud, res, out);
            } else {
                break;
            }
        }
    }

    fn on_cqe(&mut self, ud: u64, res: i32, out: &mut Vec<Completion>) {
        if ud == POLL_TAG {
            self.poll_armed = false;
            self.poll_ready = res >= 0 || res == -libc::ECANCELED;
            return;
        }
        if ud == CANCEL_TAG {
            return;
        }
        if ud & SOP_BIT != 0 {
            self.sop_cqe(ud, res, out);
            return;
        }
        let si = (ud >> 16) as usize;
        let pi = (ud & 0xffff) as usize;
        let member = self.slots[si].pieces[pi].member;
        match progress(&mut self.slots[si].pieces[pi], res, &self.vol.members()[member as usize]) {
            Outcome::Again => {
                self.push_piece(si, pi);
                return;
            }
            Outcome::Done(r) => {
                let p = &self.slots[si].pieces[pi];
                if p.op == Op::Read && self.vol.geometry().layout().is_some() {
                    let l = &mut self.raid.load_mut()[member as usize];
                    *l = l.saturating_sub(p.len as u64);
                }
                if let Some(e) = r {
                    self.slot_error(si, member, e);
                }
            }
        }
        let deadline = self.slots[si].pieces[pi].deadline;
        if deadline != 0 && deadline > now_ns() {
            self.held.push(Reverse((deadline, ud)));
            return;
        }
        self.piece_done(si, out);
    }

    fn release_held(&mut self, now: u64, out: &mut Vec<Completion>) {
        while let Some(&Reverse((d, ud))) = self.held.peek() {
            if d > now {
                break;
            }
            self.held.pop();
            if ud & SOP_BIT != 0 {
                self.sop_piece_done(((ud & !SOP_BIT) >> 16) as usize, out);
            } else {
                self.piece_done((ud >> 16) as usize, out);
            }
        }
    }

    /// Records the error of a piece of slot `si` on `member`. On a
    /// redundant volume a member that fails a read or a flush with a
    /// device failure ([`Error::is_device_failure`]) is marked faulty and
    /// the request is planned again around it (see `raid`); any other
    /// error fails the request and leaves the member in.
    fn slot_error(&mut self, si: usize, member: u32, e: Error) {
        if self.vol.geometry().layout().is_some() && e.is_device_failure() {
            self.member_failed(member);
            self.slots[si].replan = true;
            return;
        }
        let slot = &mut self.slots[si];
        if slot.error.is_none() {
            slot.error = Some(e);
        }
    }

    /// Flushes every writable member for slot `si`, a FUA zeroing or
    /// discard whose member I/O is done: fallocate(2) has no FUA, so the
    /// request completes once this flush does (as the block layer turns a
    /// FUA it cannot pass on into a flush after the write). One flush per
    /// member, however many stripes the request covered.
    fn sync_members(&mut self, si: usize, out: &mut Vec<Completion>) {
        let n = self.vol.members().len() as u32;
        let slot = &mut self.slots[si];
        slot.syncing = true;
        slot.npieces = 0;
        // Each try after the first follows a member's failure.
        slot.plans += 1;
        self.plan_flush(si);
        let slot = &mut self.slots[si];
        if slot.error.is_none() && slot.plans as u32 > 2 * n + 2 {
            slot.error = Some(Error::new(ErrorKind::Io, format!("gave up flushing after {} attempts: members keep failing", slot.plans - 1)));
            slot.npieces = 0;
        }
        // One count for this call, dropped below.
        slot.pending = slot.npieces + 1;
        self.push_pieces(si);
        self.piece_done(si, out);
    }

    fn piece_done(&mut self, si: usize, out: &mut Vec<Completion>) {
        let slot = &mut self.slots[si];
        slot.pending -= 1;
        if slot.pending > 0 {
            return;
        }
        if std::mem::take(&mut slot.replan) && slot.error.is_none() {
            if std::mem::take(&mut slot.syncing) {
                // A member failed its flush (it is faulty now): flush the
                // others again.
                self.sync_members(si, out);
            } else {
                self.replan(si, out);
            }
            return;
        }
        if slot.error.is_none() && std::mem::take(&mut slot.sync_after) {
            self.sync_members(si, out);
            return;
        }
        let report = slot.report_len.take();
        let result = match slot.error.take() {
            Some(e) => Err(e),
            None => Ok(report.unwrap_or(slot.len)),
        };
        if let (Some((pins, epoch)), Some(c), Some(b)) = (slot.cache_read.take(), &self.cache, slot.buf.as_mut()) {
            c.finish_read(slot.offset, &mut b[..slot.len], &pins, epoch, result.is_ok());
        }
        if let (true, Some(c)) = (std::mem::take(&mut slot.cache_sent_on), &self.cache) {
            c.sent_on_done(slot.op, slot.offset, slot.len);
        }
        out.push(Completion { tag: slot.tag, result, buf: slot.buf.take() });
        self.free.push(si as u32);
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let leak_ring = if std::thread::panicking() {
            // A panic in this queue's thread (perhaps inside this queue):
            // its state may be half updated, so run none of it. Let the
            // stripe locks go, so that other queues do not wait on them for
            // ever, reap what the kernel still does, and leak the buffers it
            // may still use if that takes too long.
            self.abandon_after_panic()
        } else if self.broken.is_some() {
            let mut sink = Vec::new();
            self.fail_everything(&mut sink);
            // Abandoned I/O may still name its (leaked) memory.
            true
        } else {
            self.drain_for_drop()
        };
        if !leak_ring {
            // SAFETY: the ring is dropped once, here, and not used after.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.ring) };
        }
    }
}

impl Queue {
    /// The normal end of a queue: every request finishes, every piece is
    /// reaped. True when the ring failed meanwhile and must be leaked.
    fn drain_for_drop(&mut self) -> bool {
        // The kernel may still write into buffers we own: wait for every
        // piece before the slots are freed.
        let mut sink = Vec::new();
        // Requests still in progress finish first (plugged writes and
        // stripe operations waiting for a lock have no I/O in the kernel).
        while self.in_flight() > 0 && (self.raid.has_plugged() || self.raid.has_waiting()) {
            self.wait(1, &mut sink);
        }
        if std::env::var_os("URAID_DEBUG_QUEUE").is_some() {
            eprintln!("queue: {}", self.raid.debug_stats());
        }
        // The poll and its removal name no memory of ours: once only they
        // are left, waiting for them is a courtesy, bounded in time.
        let mut polls = 0;
        if self.poll_armed {
            let sqe = opcode::PollRemove::new(POLL_TAG).build().user_data(CANCEL_TAG);
            // SAFETY: names no memory.
            unsafe { self.push_sqe(sqe) };
            polls = 2;
        }
        let mut grace = 10;
        while self.in_kernel > 0 {
            if self.in_kernel <= polls {
                if grace == 0 {
                    break;
                }
                grace -= 1;
                let ts = types::Timespec::new().nsec(10_000_000);
                let args = types::SubmitArgs::new().timespec(&ts);
                let _ = self.ring.submitter().submit_with_args(1, &args);
            } else if let Err(e) = self.ring.submit_and_wait(1) {
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::ETIME | libc::EAGAIN | libc::ENOMEM)) {
                    self.ring_failed("waiting for the last completions", e);
                    self.fail_everything(&mut sink);
                    return true;
                }
            }
            self.reap(&mut sink);
        }
        // Release the members now rather than when the kernel gets round to
        // tearing the ring down, so the next opener does not find them busy.
        let _ = self.ring.submitter().unregister_files();
        self.broken.is_some()
    }
}

/// The `URAID_FAILPOINT_QUEUE_PANIC=OFFSET` failpoint (tests of a panic in
/// an engine thread): a write at volume byte OFFSET panics in the queue as
/// a member write of it completes (a RAID 1/10/5/6 stripe operation,
/// its stripe lock held). Only with the `failpoints` feature.
#[cfg(feature = "failpoints")]
pub(super) fn queue_panic_failpoint() -> Option<u64> {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| std::env::var("URAID_FAILPOINT_QUEUE_PANIC").ok()?.parse().ok())
}

/// Bytes of zeros a zero-filling piece writes at a time.
const ZERO_FILL: usize = 1 << 20;

/// A process-wide buffer of [`ZERO_FILL`] zero bytes, aligned for
/// O_DIRECT, that zero-filling pieces write from (never written to).
fn zero_fill_buf() -> *const u8 {
    struct Zeros(IoBuf);
    // SAFETY: the buffer is never written after it is made (zeroed); every
    // thread only reads it, so sharing it is sound.
    unsafe impl Sync for Zeros {}
    // SAFETY: as above; it is made once and never mutated.
    unsafe impl Send for Zeros {}
    static ZEROS: std::sync::OnceLock<Zeros> = std::sync::OnceLock::new();
    ZEROS.get_or_init(|| Zeros(IoBuf::new(ZERO_FILL))).0.as_ptr()
}

/// A discard or zeroing piece for a member known to refuse fallocate(2)
/// becomes a zero-filling one before it is sent.
fn zero_fill_if_refused(p: &mut Piece, m: &Member) {
    if matches!(p.op, Op::Discard | Op::WriteZeroes { .. }) && !p.zero_fill && m.no_fallocate() {
        p.zero_fill = true;
        p.done = 0;
    }
}

impl Queue {
    /// See the panic case of `Drop`. Reaps completions (only counting
    /// them) for up to 2 s; whatever is still in the kernel then keeps its
    /// buffers for ever (leaked).
    /// True when the ring must be leaked (not closed).
    fn abandon_after_panic(&mut self) -> bool {
        let vol = self.vol.clone();
        if self.in_flight() > 0 {
            vol.health().set_unclean();
        }
        self.raid.abandon(vol.locks(), false);
        let t0 = now_ns();
        while self.in_kernel > self.poll_armed as usize && now_ns() - t0 < 2_000_000_000 {
            let ts = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            while self.ring.completion().next().is_some() {
                self.in_kernel = self.in_kernel.saturating_sub(1);
            }
        }
        let _ = self.ring.submitter().unregister_files();
        if self.in_kernel > self.poll_armed as usize {
            for s in self.slots.iter_mut() {
                if let Some(b) = s.buf.take() {
                    std::mem::forget(b);
                }
            }
            self.raid.abandon(vol.locks(), true);
            // The ring stays open too: closing it would not stop the I/O.
            return true;
        }
        false
    }
}

/// The io_uring entry that does what piece `p` still has to do on a member
/// of `kind` (user data not set).
fn build_sqe(p: &Piece, kind: MemberKind) -> squeue::Entry {
    let fd = types::Fixed(p.member);
    if p.zero_fill {
        let n = (p.len - p.done).min(ZERO_FILL) as u32;
        return opcode::Write::new(fd, zero_fill_buf(), n).offset(p.offset + p.done as u64).build();
    }
    let iov = &p.iov[p.iov_first..];
    let off = p.offset + p.done as u64;
    let rw_flags = if p.fua { libc::RWF_DSYNC } else { 0 };
    match p.op {
        Op::Flush => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
        Op::Discard | Op::WriteZeroes { .. } => {
            let mode = fallocate_mode(p.op, kind, p.done > 0);
            opcode::Fallocate::new(fd, p.len as u64).offset(p.offset).mode(mode).build()
        }
        Op::Read if iov.len() == 1 => opcode::Read::new(fd, iov[0].iov_base.cast(), iov[0].iov_len as u32).offset(off).build(),
        Op::Write if iov.len() == 1 => {
            opcode::Write::new(fd, iov[0].iov_base.cast(), iov[0].iov_len as u32).offset(off).rw_flags(rw_flags).build()
        }
        Op::Read => opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32).offset(off).build(),
        Op::Write => opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32).offset(off).rw_flags(rw_flags).build(),
    }
}

/// The fallocate(2) mode that does `op` on a member of `kind`; `second` is
/// the allocation step of a NO_HOLE zeroing on a file.
fn fallocate_mode(op: Op, kind: MemberKind, second: bool) -> i32 {
    use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
    match (op, kind) {
        // On a block device, PUNCH_HOLE|KEEP_SIZE is a zero-out that may
        // unmap (blkdev_fallocate), ZERO_RANGE|KEEP_SIZE one that must not.
        (Op::WriteZeroes { no_hole: true }, MemberKind::BlockDevice) => ZERO | KEEP,
        (Op::WriteZeroes { no_hole: true }, _) if second => KEEP,
        _ => PUNCH | KEEP,
    }
}

/// Adds `len` bytes at absolute offset `abs` of `member` to the slot's
/// pieces: the member's last piece (`last[member]`, `usize::MAX` for none)
/// grows when it ends at `abs` (and, with a buffer `ptr`, has room for
/// another iovec; memory contiguous with its last iovec extends that one),
/// otherwise a new piece starts. So a request is one (vectored) I/O per
/// run of contiguous member bytes, whatever the chunk size.
fn add_segment(slot: &mut Slot, last: &mut [usize; crate::geometry::MAX_MEMBERS], member: u32, abs: u64, ptr: Option<*mut u8>, len: usize) {
    let li = last[member as usize];
    if li != usize::MAX {
        let p = &mut slot.pieces[li];
        if p.offset + p.len as u64 == abs && (ptr.is_none() || p.iov.len() < IOV_MAX) {
            if let Some(ptr) = ptr {
                let tail = p.iov.last_mut().expect("piece has an iovec");
                // SAFETY: pointer arithmetic inside the same buffer.
                if unsafe { (tail.iov_base as *mut u8).add(tail.iov_len) } == ptr {
                    tail.iov_len += len;
                } else {
                    p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
                }
            }
            p.len += len;
            return;
        }
    }
    last[member as usize] = slot.npieces;
    let p = next_piece(slot);
    p.member = member;
    p.offset = abs;
    p.len = len;
    if let Some(ptr) = ptr {
        p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
    }
}

fn new_piece() -> Piece {
    Piece { op: Op::Read, fua: false, member: 0, offset: 0, len: 0, done: 0, iov: Vec::new(), iov_first: 0, deadline: 0, zero_fill: false }
}

fn next_piece(slot: &mut Slot) -> &mut Piece {
    if slot.npieces == slot.pieces.len() {
        slot.pieces.push(new_piece());
    }
    let (op, fua) = (slot.op, slot.fua);
    let p = &mut slot.pieces[slot.npieces];
    slot.npieces += 1;
    p.op = op;
    p.fua = fua;
    p.done = 0;
    p.iov.clear();
    p.iov_first = 0;
    p.deadline = 0;
    p.zero_fill = false;
    p
}

/// Asks member `m`'s fault plan (tests) about piece `p`: `Some(-errno)` when
/// the piece must fail without reaching the kernel. A torn write is done in
/// part here (synchronously) before it fails.
fn injected_fault(p: &Piece, m: &Member) -> Option<i32> {
    use crate::fault::Verdict;
    let f = m.faults()?;
    let off = p.offset + p.done as u64;
    let len = p.len - p.done.min(p.len);
    // A zero-filling discard or zeroing is a write of zeros to the drive.
    let op = if p.zero_fill { Op::Write } else { p.op };
    // fallocate(2) has no FUA: a zeroing or discard is durable only after
    // a flush (for a FUA one, the flush its request ends with); zeros
    // written in its place go without FUA too.
    let volatile = match op {
        Op::Write => !p.fua || p.zero_fill,
        Op::Discard | Op::WriteZeroes { .. } => true,
        _ => false,
    };
    if volatile && f.is_volatile() && len > 0 {
        // The volatile drive cache model: remember what the write (or the
        // zeroing or discard: a drive's cache may lose those too) covers.
        let mut old = vec![0u8; len];
        if std::os::unix::fs::FileExt::read_exact_at(m.file(), &mut old, off).is_ok() {
            f.log_write(off, old);
        }
    }
    match f.intercept(op, off, len as u64) {
        Verdict::Pass => None,
        Verdict::Fail(errno) => Some(-errno),
        Verdict::Tear(n) => {
            let iov = &p.iov[p.iov_first..];
            let mut left = n;
            let mut at = off;
            for v in iov {
                if left == 0 {
                    break;
                }
                let k = v.iov_len.min(left);
                // SAFETY: the iovec addresses k <= iov_len valid bytes of
                // the request's or the operation's buffer.
                let part = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, k) };
                if std::os::unix::fs::FileExt::write_all_at(m.file(), part, at).is_err() {
                    break;
                }
                left -= k;
                at += k as u64;
            }
            Some(-libc::EIO)
        }
    }
}

/// What became of a piece after a completion.
enum Outcome {
    /// Part of it is left: submit it again.
    Again,
    /// Finished, with the error if it failed.
    Done(Option<Error>),
}

/// Accounts completion result `res` (bytes or -errno) of piece `p` on
/// member `m`: short transfers continue, a NO_HOLE zeroing on a file takes
/// its second step, a discard or zeroing the member refuses (EOPNOTSUPP)
/// starts again as zeros written (and the member is marked, so the next
/// ones go that way at once), errors name the member and the offset.
fn progress(p: &mut Piece, res: i32, m: &Member) -> Outcome {
    if res == -libc::EOPNOTSUPP && matches!(p.op, Op::Discard | Op::WriteZeroes { .. }) && !p.zero_fill {
        // The promise of both (zeros read back, copies and parity agree)
        // holds when zeros are written instead.
        m.set_no_fallocate();
        p.zero_fill = true;
        p.done = 0;
        return Outcome::Again;
    }
    if p.zero_fill && res > 0 {
        p.done += res as usize;
        return if p.done >= p.len { Outcome::Done(None) } else { Outcome::Again };
    }
    if p.zero_fill && res == 0 {
        return Outcome::Done(Some(Error::new(
            ErrorKind::Io,
            format!("member {} ended at offset {} while zeros were written", m.name(), p.offset + p.done as u64),
        )));
    }
    if res < 0 {
        return Outcome::Done(Some(Error::from_errno(
            format!("{:?} of {} bytes at offset {} of member {} failed", p.op, p.len, p.offset, m.name()),
            -res,
        )));
    }
    match p.op {
        // On files the zeroing is a punched hole, then an allocation (two
        // steps: tmpfs and others have no ZERO_RANGE).
        Op::WriteZeroes { no_hole: true } if m.kind() != MemberKind::BlockDevice && p.done == 0 => {
            p.done = 1;
            Outcome::Again
        }
        Op::Read | Op::Write => {
            let n = res as usize;
            p.done += n;
            if p.done >= p.len {
                Outcome::Done(None)
            } else if n == 0 {
                Outcome::Done(Some(Error::new(
                    ErrorKind::Io,
                    format!(
                        "member {} ended at offset {} (is it smaller than its superblock says?)",
                        m.name(),
                        p.offset + p.done as u64
                    ),
                )))
            } else {
                advance_iov(p, n);
                Outcome::Again
            }
        }
        _ => Outcome::Done(None),
    }
}

/// Drops `n` transferred bytes from the front of a piece's iovecs.
fn advance_iov(p: &mut Piece, mut n: usize) {
    while n > 0 {
        let v = &mut p.iov[p.iov_first];
        if n >= v.iov_len {
            n -= v.iov_len;
            p.iov_first += 1;
        } else {
            // SAFETY: stays inside the same buffer region.
            v.iov_base = unsafe { (v.iov_base as *mut u8).add(n) }.cast();
            v.iov_len -= n;
            n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::{MemberSpec, OpenMode};
    use crate::superblock::DATA_OFFSET;
    use crate::Level;

    /// A ring that fails for good (the error is simulated; what is tested
    /// is what the queue does then) fails every request in flight with
    /// EIO, refuses new ones, stops the volume's writes and marks the
    /// array unclean, and its drop returns at once.
    #[test]
    fn a_failed_ring_fails_its_requests_and_never_hangs() {
        for level in [Level::Raid0, Level::Raid5] {
            // A 20 ms latency holds every piece's completion back, so all
            // eight are still in flight when the ring fails.
            let spec: MemberSpec = format!("mem:{},lat=20000", DATA_OFFSET + (8 << 20)).parse().unwrap();
            let members: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
            let g = Geometry::new(level, 3, 64 << 10, 8 << 20).unwrap();
            let v = Volume::new(Arc::new(members), g, DATA_OFFSET).unwrap();
            let mut q = v.queue(8).unwrap();
            for i in 0..8u64 {
                q.push(Request::write(i * (128 << 10), 128 << 10, IoBuf::new(128 << 10), i)).map_err(|r| r.error).unwrap();
            }
            q.submit();
            q.ring_failed("a test", std::io::Error::from_raw_os_error(libc::EBADF));
            let t0 = std::time::Instant::now();
            let mut out = Vec::new();
            q.wait(8, &mut out);
            assert_eq!(out.len(), 8, "{level}: not every request in flight completed");
            for c in &out {
                let e = c.result.as_ref().expect_err("a request in flight succeeded on a failed ring");
                assert_eq!(e.errno(), libc::EIO, "{level}: {e}");
                assert!(e.to_string().contains("io_uring failed"), "{level}: {e}");
                assert!(c.buf.is_none(), "{level}: a buffer the kernel may still use was handed back");
            }
            let r = q.push(Request::read(0, 4096, IoBuf::new(4096), 99));
            assert!(r.is_err(), "{level}: a failed ring took a new request");
            assert!(v.health().writes_stopped() && v.health().unclean(), "{level}: the volume still takes writes or is clean");
            drop(q);
            assert!(t0.elapsed() < std::time::Duration::from_secs(2), "{level}: took {:?}", t0.elapsed());
        }
    }
}
