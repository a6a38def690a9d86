//! The RAID layer's volume: the shared, read-only description of one
//! volume (members, geometry, data offset, member states, bitmap, stripe
//! locks) from which each thread makes its own [`RaidQueue`](super::RaidQueue).

use std::sync::Arc;

use super::RaidQueue;
use crate::io::member::{now_ns, Member};
use crate::io::request::{BlockQueue, SECTOR};
use crate::raid::bitmap::Bitmap;
use crate::raid::geometry::Geometry;
use crate::raid::health::Health;
use crate::raid::locks::StripeLocks;
use crate::{bail, Result};

/// A set of members laid out by one geometry: what the engine reads and
/// writes. Shared (`Arc`) between all the queues that serve it.
#[derive(Debug)]
pub struct RaidVolume {
    pub(super) members: Arc<Vec<Member>>,
    pub(super) geometry: Geometry,
    pub(super) data_offset: u64,
    pub(super) block_size: u32,
    pub(super) health: Arc<Health>,
    pub(super) bitmap: Option<Arc<Bitmap>>,
    pub(super) locks: StripeLocks,
    /// Some member is an emulated drive with ceilings.
    pub(super) throttled: bool,
    /// Member reads issued by stripe operations (read-modify-write,
    /// reconstruct-write, degraded reads).
    pub(super) stripe_reads: std::sync::atomic::AtomicU64,
    /// Per-member I/O counters of the queues (see [`RaidVolume::member_io`]).
    pub(super) counters: super::counters::Registry,
}

/// The array-wide state a volume shares with the other volumes on the same
/// members and with the control path (see [`RaidVolume::with_state`]).
#[derive(Debug, Clone)]
pub struct Shared {
    /// Member states (one per role).
    pub health: Arc<Health>,
    /// The write-intent bitmap, when the array has one.
    pub bitmap: Option<Arc<Bitmap>>,
}

impl RaidVolume {
    /// A volume over `members` (in role order) with `geometry`, whose data
    /// area starts `data_offset` bytes into each member.
    ///
    /// Errors: `InvalidInput` when the member count differs from the
    /// geometry's, `TooSmall` when a member cannot hold its data area.
    pub fn new(members: Arc<Vec<Member>>, geometry: Geometry, data_offset: u64) -> Result<Arc<RaidVolume>> {
        let shared = Shared { health: Arc::new(Health::new(members.len())), bitmap: None };
        RaidVolume::with_state(members, geometry, data_offset, shared)
    }

    /// Like [`new`](Self::new), with the member states and bitmap of an
    /// assembled array. Errors: as `new`, and `InvalidInput` when `shared`
    /// has another number of roles than `members`.
    pub fn with_state(members: Arc<Vec<Member>>, geometry: Geometry, data_offset: u64, shared: Shared) -> Result<Arc<RaidVolume>> {
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
        let n = members.len();
        let block_size = members.iter().map(|m| m.block_size()).max().unwrap_or(512).max(SECTOR as u32);
        let throttled = members.iter().any(|m| m.throttle().is_some());
        Ok(Arc::new(RaidVolume {
            members,
            geometry,
            data_offset,
            block_size,
            health: shared.health,
            bitmap: shared.bitmap,
            locks: StripeLocks::default(),
            throttled,
            stripe_reads: std::sync::atomic::AtomicU64::new(0),
            counters: super::counters::Registry::new(n),
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
    pub(super) fn throttle_clock(&self) -> u64 {
        if self.throttled { now_ns() } else { 0 }
    }

    /// When member `m`'s emulated drive would finish an I/O `op` of `len`
    /// bytes admitted at `now` (ns); 0 for a member without ceilings.
    #[inline]
    pub(super) fn deadline(&self, m: u32, op: crate::io::request::Op, len: usize, now: u64) -> u64 {
        match self.members[m as usize].throttle() {
            Some(t) => t.admit(op != crate::io::request::Op::Read, len as u64, now),
            None => 0,
        }
    }

    /// Smallest I/O unit and alignment in bytes (the largest logical block
    /// size among the members, at least 512).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// What the RAID layer can do (the bottom of every stack: see
    /// [`crate::io::request::Caps`]). A discard is worth passing down on
    /// RAID 0, 1 and 10 when every member discards (a block device with
    /// `discard_max_bytes` 0, or one that refused a discard, or a file that
    /// refused hole punching does not); on RAID 5 and 6 the discarded
    /// stripes must read back as zeros (parity), so every member must zero
    /// without writing zeros (a block device with WRITE_ZEROES, a file that
    /// punches holes), as an `fstrim` would otherwise write all free space
    /// (md's RAID 5 does not discard either unless told the drives return
    /// zeros). Write-zeroes and FUA are always carried out.
    pub fn caps(&self) -> crate::io::request::Caps {
        let g = &self.geometry;
        let parity = g.layout().is_some_and(|l| l.level().has_parity());
        let stripe_width = match (g.level(), g.layout()) {
            (crate::Level::Raid1, _) => 0,
            (_, Some(l)) => l.stripe_data_width(),
            (_, None) => g.chunk() * g.members() as u64,
        };
        crate::io::request::Caps {
            capacity: self.capacity(),
            block_size: self.block_size,
            discard: self.members.iter().all(|m| if parity { m.zeroes_cheaply() } else { m.discards() }),
            write_zeroes: true,
            fua: true,
            flush: true,
            max_request: crate::io::request::MAX_REQUEST,
            chunk: g.chunk(),
            stripe_width,
        }
    }

    /// Makes a queue for the calling thread with room for `depth` logical
    /// requests in flight, straight to the members. Errors: `Unsupported`
    /// when io_uring is missing.
    pub fn queue(self: &Arc<Self>, depth: usize) -> Result<RaidQueue> {
        RaidQueue::new(self.clone(), depth)
    }

    /// Member reads issued so far by stripe operations: the reads of
    /// read-modify-write and reconstruct-write, and of degraded reads (a
    /// write stream the coalescer turns into full stripes issues none).
    pub fn stripe_reads(&self) -> u64 {
        self.stripe_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Each member's I/O counters (in role order), summed over every queue
    /// that ever served this volume: member reads and writes, bytes,
    /// errors by kind, latency histograms (see
    /// [`MemberIo`](super::counters::MemberIo)). Takes a lock shared only
    /// with queues being made; never blocks the data path.
    pub fn member_io(&self) -> Vec<super::counters::MemberIo> {
        self.counters.snapshot()
    }

    /// Reads `len` bytes at `offset` (blocking; control path and tests).
    pub fn read_at(self: &Arc<Self>, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.queue(1)?.read_at(offset, len)
    }

    /// Writes `data` at `offset` (blocking; control path and tests).
    pub fn write_at(self: &Arc<Self>, offset: u64, data: &[u8]) -> Result<()> {
        self.queue(1)?.write_at(offset, data)
    }

    /// Makes every completed write durable on every member (blocking).
    pub fn flush(self: &Arc<Self>) -> Result<()> {
        self.queue(1)?.flush()
    }
}
