//! The top of the data path: a volume as its users see it (the NBD export,
//! the load generator, the control path's blocking I/O), and the stack of
//! layers a per-thread [`Queue`] goes through:
//!
//! ```text
//!   user (export, load generator)        Request down, Completion up
//!     -> cache layer   cache::queue::CacheQueue   (only with a cache)
//!     -> reshape layer raid::reshape::ReshapeQueue (only while a served
//!                      volume is restriped: old or new layout by position)
//!     -> RAID layer    raid::engine::RaidQueue    (geometry, parity, locks)
//!     -> members       io::member (io_uring on files, block devices, mem:)
//! ```
//!
//! This module only stacks them: it owns no I/O logic of its own.

use std::os::fd::RawFd;
use std::sync::{Arc, OnceLock};

use crate::cache::queue::CacheQueue;
use crate::cache::{Cache, CacheConfig, CacheMode};
use crate::cache::journal::Journal;
use crate::io::member::Member;
use crate::io::request::{BlockDevice, BlockQueue, Caps, Completion, Rejected, Request};
use crate::raid::engine::{RaidQueue, RaidVolume, Shared};
use crate::raid::reshape::{ReshapeQueue, ReshapeState};
use crate::raid::geometry::Geometry;
use crate::{bail, Result};

/// A volume: its RAID layer and, once enabled, its cache. Shared (`Arc`)
/// by every queue that serves it; what its stack can do: [`Volume::caps`].
///
/// It does not reach through to the RAID layer (no `Deref`): the layers
/// and exports above ask [`Volume::caps`], the control path names the
/// layer it works on with [`Volume::raid`]:
///
/// ```compile_fail
/// fn members(v: &uraid_core::Volume) -> usize {
///     v.members().len()
/// }
/// ```
#[derive(Debug)]
pub struct Volume {
    raid: Arc<RaidVolume>,
    /// The volume cache, once enabled ([`Volume::enable_cache`]).
    cache: OnceLock<Arc<Cache>>,
    /// While the volume is restriped: the new layout and the reshape's
    /// position (`raid` is then the old layout, whose size the volume
    /// keeps until the reshape ends).
    reshape: Option<(Arc<RaidVolume>, Arc<ReshapeState>)>,
}

impl Volume {
    /// A volume over `members` (in role order) with `geometry`, whose data
    /// area starts `data_offset` bytes into each member; no cache.
    /// Errors: as [`RaidVolume::new`].
    pub fn new(members: Arc<Vec<Member>>, geometry: Geometry, data_offset: u64) -> Result<Arc<Volume>> {
        Ok(Volume::over(RaidVolume::new(members, geometry, data_offset)?))
    }

    /// Like [`new`](Self::new), with the member states and bitmap of an
    /// assembled array. Errors: as [`RaidVolume::with_state`].
    pub fn with_state(members: Arc<Vec<Member>>, geometry: Geometry, data_offset: u64, shared: Shared) -> Result<Arc<Volume>> {
        Ok(Volume::over(RaidVolume::with_state(members, geometry, data_offset, shared)?))
    }

    /// A volume over an existing RAID layer, with no cache yet.
    pub fn over(raid: Arc<RaidVolume>) -> Arc<Volume> {
        Arc::new(Volume { raid, cache: OnceLock::new(), reshape: None })
    }

    /// A volume being restriped from layout `old` to layout `new` (over
    /// the same devices and more), routed by `state` (see
    /// [`crate::raid::reshape`]); it has the old layout's size, and no
    /// cache can be put in front of it.
    pub fn reshaping(old: Arc<RaidVolume>, new: Arc<RaidVolume>, state: Arc<ReshapeState>) -> Arc<Volume> {
        Arc::new(Volume { raid: old, cache: OnceLock::new(), reshape: Some((new, state)) })
    }

    /// While the volume is restriped: the new layout's RAID layer.
    pub fn reshape_target(&self) -> Option<&Arc<RaidVolume>> {
        self.reshape.as_ref().map(|(n, _)| n)
    }

    /// The RAID layer, for the control path only (maintenance, status,
    /// membership, the cache's flusher and journal replay: they work on
    /// the RAID layer, below the cache, on purpose): its layout, members,
    /// states and bitmap. The data path's users (the exports, the load
    /// generator) decide by [`caps`](Self::caps) and the [`BlockQueue`] of
    /// the stack's top instead, never by what lies below it.
    pub fn raid(&self) -> &Arc<RaidVolume> {
        &self.raid
    }

    /// The volume's size in bytes (the old layout's while restriped).
    pub fn capacity(&self) -> u64 {
        self.raid.capacity()
    }

    /// The volume's logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.raid.block_size()
    }

    /// Whether a discard (TRIM) of this volume is worth passing down.
    /// RAID 0, 1 and 10 send discards to the members: false when a block
    /// device member does not discard (`discard_max_bytes` 0, or it refused
    /// one) or a file member refused hole punching. RAID 5 and 6 need the
    /// discarded stripes to read back as zeros (parity): false when a
    /// member cannot zero without writing zeros (a block device without
    /// WRITE_ZEROES, a file that refused hole punching), as an `fstrim`
    /// would then write all free space (md's RAID 5 does not discard
    /// either unless told the drives return zeros). Exports answer a
    /// discard at once, doing nothing, when this is false (a discard is a
    /// hint); a WRITE_ZEROES is always carried out.
    pub fn discards(&self) -> bool {
        self.caps().discard
    }

    /// What the volume's stack of layers can do (see [`Caps`]): the RAID
    /// layer's answer ([`RaidVolume::caps`]; the old layout's while
    /// restriped), passed up through the cache when there is one
    /// ([`Cache::caps`]). What the exports advertise and decide by.
    pub fn caps(&self) -> Caps {
        let below = self.raid.caps();
        match self.cache.get() {
            Some(c) => c.caps(below),
            None => below,
        }
    }

    /// Makes a queue for the calling thread with room for `depth` logical
    /// requests in flight, through the cache when there is one. Errors:
    /// `Unsupported` when io_uring is missing.
    pub fn queue(self: &Arc<Self>, depth: usize) -> Result<Queue> {
        let lower = self.raid.queue(depth)?;
        if let Some((new, state)) = &self.reshape {
            return Ok(Queue::Reshape(Box::new(ReshapeQueue::new(lower, new.queue(depth)?, state.clone(), depth))));
        }
        Ok(match self.cache.get() {
            Some(c) => Queue::Cached(CacheQueue::new(lower, c.clone())),
            None => Queue::Raid(lower),
        })
    }

    /// Puts a cache in front of the volume (see [`crate::cache`]); every
    /// queue made afterwards uses it. `Off` does nothing. Flush the volume
    /// ([`flush`](Self::flush)) before the last handle goes: write-back
    /// data not yet written is lost otherwise, as on a crash.
    ///
    /// Errors: `InvalidInput` when a cache is already there, the size
    /// and dirty limit cannot hold one line (one stripe's data), or the
    /// mode is `Journal` (see [`enable_journaled_cache`](Self::enable_journaled_cache)).
    pub fn enable_cache(&self, cfg: CacheConfig) -> Result<()> {
        self.start_cache(cfg, None)
    }

    /// Puts a cache in journal mode in front of the volume, recording into
    /// `journal`; records it holds from before must be replayed
    /// ([`Journal::replay`]) before the volume takes writes.
    /// Errors: as [`enable_cache`](Self::enable_cache), for a mode other
    /// than `Journal` too.
    pub fn enable_journaled_cache(&self, cfg: CacheConfig, journal: Arc<Journal>) -> Result<()> {
        self.start_cache(cfg, Some(journal))
    }

    fn start_cache(&self, cfg: CacheConfig, journal: Option<Arc<Journal>>) -> Result<()> {
        if cfg.mode == CacheMode::Off {
            return Ok(());
        }
        if self.reshape.is_some() {
            bail!(InvalidInput, "the volume is being reshaped; a cache can be set once the reshape has ended");
        }
        let c = Arc::new(Cache::new(&self.raid, cfg, journal)?);
        if self.cache.set(c.clone()).is_err() {
            bail!(InvalidInput, "the volume already has a cache");
        }
        if cfg.mode.writes_back() {
            c.start_flusher(Arc::downgrade(&self.raid));
        }
        Ok(())
    }

    /// Takes over the cache of another volume with the same geometry (the
    /// array rebuilt its volumes over new members): what it holds, dirty
    /// data included, is this volume's now, and its flusher writes here.
    /// Errors: `InvalidInput` when this volume has a cache already or the
    /// capacities differ.
    pub fn adopt_cache(&self, c: Arc<Cache>, from: &Volume) -> Result<()> {
        if from.capacity() != self.capacity() || from.raid.geometry().chunk() != self.raid.geometry().chunk() || self.reshape.is_some() {
            bail!(InvalidInput, "a cache cannot move between volumes of different shapes");
        }
        c.retarget(Arc::downgrade(&self.raid));
        if self.cache.set(c).is_err() {
            bail!(InvalidInput, "the volume already has a cache");
        }
        Ok(())
    }

    /// The volume's cache, if any.
    pub fn cache(&self) -> Option<&Arc<Cache>> {
        self.cache.get()
    }

    /// Reads `len` bytes at `offset` through the cache (blocking; control
    /// path and tests).
    pub fn read_at(self: &Arc<Self>, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.queue(1)?.read_at(offset, len)
    }

    /// Writes `data` at `offset` through the cache (blocking; control path
    /// and tests).
    pub fn write_at(self: &Arc<Self>, offset: u64, data: &[u8]) -> Result<()> {
        self.queue(1)?.write_at(offset, data)
    }

    /// Makes every completed write durable on every member (blocking;
    /// with a write-back cache, writes everything back first).
    pub fn flush(self: &Arc<Self>) -> Result<()> {
        if let Some(c) = self.cache.get() {
            // Journal mode: a FLUSH does not write back (the journal holds
            // every write); this does, so that the log can be emptied.
            c.drain()?;
        }
        BlockQueue::flush(&mut self.queue(1)?)
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

/// A per-thread queue over a [`Volume`]: the top of its stack of layers.
/// Not `Send`: it is used only by the thread that made it.
pub enum Queue {
    /// No cache: straight to the RAID layer.
    Raid(RaidQueue),
    /// Through the cache layer to the RAID layer.
    Cached(CacheQueue<RaidQueue>),
    /// To the old or the new layout of a volume being reshaped.
    Reshape(Box<ReshapeQueue>),
}

impl Queue {
    fn top(&mut self) -> &mut dyn BlockQueue {
        match self {
            Queue::Raid(q) => q,
            Queue::Cached(q) => q,
            Queue::Reshape(q) => q.as_mut(),
        }
    }
}

/// The stack's queue is a [`BlockQueue`] (bring the trait into scope to
/// use it: `use uraid_core::BlockQueue`).
impl BlockDevice for Arc<Volume> {
    type Queue = Queue;
    fn open_queue(&self, depth: usize) -> Result<Queue> {
        self.queue(depth)
    }
    fn capacity(&self) -> u64 {
        self.raid.capacity()
    }
    fn block_size(&self) -> u32 {
        self.raid.block_size()
    }
    fn caps(&self) -> Caps {
        Volume::caps(self)
    }
    fn flush(&self) -> Result<()> {
        Volume::flush(self)
    }
}

impl BlockQueue for Queue {
    #[inline]
    fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        match self {
            Queue::Raid(q) => q.push(req),
            Queue::Cached(q) => q.push(req),
            Queue::Reshape(q) => q.push(req),
        }
    }
    fn submit(&mut self) {
        self.top().submit()
    }
    fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        self.top().wait(min, out)
    }
    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        self.top().wait_event(out, fd, timeout)
    }
    fn in_flight(&self) -> usize {
        match self {
            Queue::Raid(q) => q.in_flight(),
            Queue::Cached(q) => q.in_flight(),
            Queue::Reshape(q) => q.in_flight(),
        }
    }
    fn has_room(&self) -> bool {
        match self {
            Queue::Raid(q) => q.has_room(),
            Queue::Cached(q) => q.has_room(),
            Queue::Reshape(q) => q.has_room(),
        }
    }
    fn depth(&self) -> usize {
        match self {
            Queue::Raid(q) => BlockQueue::depth(q),
            Queue::Cached(q) => q.depth(),
            Queue::Reshape(q) => q.depth(),
        }
    }
    fn validate(&self, req: &Request) -> Result<()> {
        match self {
            Queue::Raid(q) => BlockQueue::validate(q, req),
            Queue::Cached(q) => q.validate(req),
            Queue::Reshape(q) => q.validate(req),
        }
    }
    fn broken(&self) -> Option<&crate::Error> {
        match self {
            Queue::Raid(q) => BlockQueue::broken(q),
            Queue::Cached(q) => q.broken(),
            Queue::Reshape(q) => q.broken(),
        }
    }
    fn caps(&self) -> Caps {
        match self {
            Queue::Raid(q) => q.caps(),
            Queue::Cached(q) => q.caps(),
            Queue::Reshape(q) => q.caps(),
        }
    }
}
