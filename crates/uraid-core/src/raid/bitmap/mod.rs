//! The write-intent bitmap: which regions of the members may hold copies or
//! parity that disagree, so that after an unclean stop only those regions
//! are resynchronized, and which regions were ever written, so that a
//! rebuild can skip the rest.
//!
//! Modelled on Linux md's internal bitmap (`drivers/md/md-bitmap.c`): the
//! members' data area is cut into regions of `region_size` bytes (md's
//! "bitmap chunk"); before any member write to a region starts, the
//! region's bit is set on every writable member and made durable
//! ([`Bitmap::start_write`]); bits are cleared lazily, once a region has
//! had no write in flight and none started for a whole daemon interval and
//! the members have been flushed ([`Bitmap::clear_idle`]). One bitmap
//! serves every Matrix volume of an array: offsets are absolute member
//! bytes, the same on every member.
//!
//! # On-disk format (version 1, integers little-endian)
//!
//! The bitmap lives in `[BITMAP_OFFSET, DATA_OFFSET)` = `[64 KiB, 1 MiB)`
//! of every member (between the superblock and the data area), identical on
//! every writable member:
//!
//! | offset (from `BITMAP_OFFSET`) | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `URAIDBM\x01` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | header size in bytes (4096) |
//! | 16 | 8 | region size in bytes (a power of two, at least 4096) |
//! | 24 | 8 | region count |
//! | 32 | 8 | first byte covered: absolute member offset (`DATA_OFFSET`) |
//! | 40 | 8 | end of the bytes covered (absolute member offset, exclusive) |
//! | 48 | 8 | absolute offset of the bits (`BITMAP_OFFSET + 4096`) |
//! | 56 | 8 | length of the bits in bytes (a multiple of 4096) |
//! | 4092 | 4 | CRC-32C (Castagnoli) of header bytes 0..4092 |
//! | 4096 | ... | the bits: 2 per region, 4 regions per byte |
//!
//! Region `r` covers absolute member bytes `[DATA_OFFSET + r * region_size,
//! DATA_OFFSET + (r + 1) * region_size)` (the last one clipped at the end).
//! Its bits are in byte `r / 4` of the bits, bit `2 * (r % 4)` (least
//! significant first) = **dirty** (a write may be under way or not yet
//! flushed: copies/parity may disagree) and bit `2 * (r % 4) + 1` =
//! **written** (some write has touched the region since the array was
//! created; with the live-data map, `live.rs`, it reads "may hold data"
//! and is cleared again after a discard of the whole region). Bits past the last region are zero. The bits
//! have no checksum, on purpose: a 4 KiB block write torn between its old
//! and new contents leaves each region's bits either old or new, and both
//! are safe (bits are only set before a write starts, and only cleared for
//! regions that are already in sync), whereas a checksum would turn a torn
//! block into a lost bitmap.
//!
//! The area holds at most [`MAX_REGIONS`] regions (3,915,776): with the
//! default 64 MiB regions that is about 250 TB of data area per member.
//!
//! # Durability and ordering
//!
//! Setting a bit is one write of the 4 KiB block(s) holding it to every
//! writable member at once (one io_uring, `RWF_DSYNC`, i.e. FUA or a cache
//! flush), made under a mutex; [`start_write`](Bitmap::start_write) returns
//! only when at least one member holds it durably. A member whose bitmap
//! write fails is failed ([`Health::fail`]) and the others go on, as md's
//! `md_bitmap_unplug` does. Clearing fdatasyncs every writable member first
//! (so every write that ended is durable) and only then writes the cleared
//! bits. The argument that clearing never races a starting write is given
//! at [`Bitmap::clear_idle`].
//!
//! # Degraded arrays keep their bits
//!
//! While any role is not active (faulty, missing or rebuilding), no dirty
//! bit is cleared, lazily or at a stop (md does the same): the bits then
//! cover every region written since the array became degraded, which is
//! exactly what a member that comes back (`uraid add` of a removed member)
//! missed, so it is resynced from them alone instead of rebuilt in full.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use io_uring::IoUring;

use crate::raid::health::{Health, MemberState};
use crate::io::member::{now_ns, Member, DATA_OFFSET};
use crate::{bail, Error, ErrorKind, IoBuf, Result};

mod daemon;
mod live;
mod write;

pub(crate) use live::zero_range;

pub use daemon::BitmapDaemon;

/// Absolute member offset of the bitmap area, in bytes (64 KiB); the area
/// ends where the data area starts ([`DATA_OFFSET`], 1 MiB).
pub const BITMAP_OFFSET: u64 = 64 << 10;
/// Default region size in bytes (64 MiB, md's usual bitmap chunk for large
/// devices).
pub const DEFAULT_REGION: u64 = 64 << 20;
/// Magic bytes of the bitmap header.
pub const MAGIC: &[u8; 8] = b"URAIDBM\x01";
/// Current format version.
pub const VERSION: u32 = 1;
/// Bytes of the header block.
pub const HEADER_SIZE: usize = 4096;
/// Absolute member offset of the bits (right after the header).
pub const BITS_OFFSET: u64 = BITMAP_OFFSET + HEADER_SIZE as u64;
/// Most regions the area holds (2 bits each in `DATA_OFFSET - BITS_OFFSET`
/// bytes).
pub const MAX_REGIONS: u64 = (DATA_OFFSET - BITS_OFFSET) * 4;
/// Smallest region size in bytes.
pub const MIN_REGION: u64 = 4096;

/// Bytes of one bitmap block (the unit written when a bit is set).
const BLOCK: usize = 4096;
/// Regions per in-memory word (2 bits each in a `u64`).
const REGIONS_PER_WORD: u64 = 32;
/// Regions per on-disk block.
const REGIONS_PER_BLOCK: u64 = BLOCK as u64 * 4;
/// The dirty bits of a word (even bit positions).
const DIRTY_BITS: u64 = 0x5555_5555_5555_5555;
const CRC_AT: usize = HEADER_SIZE - 4;

/// Counters of a bitmap, for `uraid status` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BitmapStats {
    /// Region size in bytes.
    pub region_size: u64,
    /// Number of regions.
    pub regions: u64,
    /// Regions whose dirty bit is set (durably, in memory's view).
    pub dirty: u64,
    /// Regions ever written since the array was created.
    pub written: u64,
    /// Regions that may hold data (the written bits): with the live-data
    /// map, the rest read as zeros and are skipped by maintenance.
    pub live: u64,
    /// The written bits are a live-data map (see `live.rs`).
    pub live_map: bool,
    /// Member bytes zeroed (per member) before first writes into regions
    /// not live, since this bitmap was created or loaded.
    pub zeroed_bytes: u64,
    /// Regions made not live again by whole-region discards since then.
    pub forgotten: u64,
    /// Bitmap writes made to set bits (each one 4 KiB-block write to every
    /// writable member) since this bitmap was created or loaded.
    pub set_writes: u64,
    /// Regions cleared by [`Bitmap::clear_idle`] since then.
    pub cleared: u64,
    /// [`Bitmap::clear_idle`] calls of the daemon that failed.
    pub clear_errors: u64,
}

/// The write-intent bitmap of an array (shared by all its volumes and the
/// control path through an `Arc`).
pub struct Bitmap {
    members: Arc<Vec<Member>>,
    health: Arc<Health>,
    region_shift: u32,
    regions: u64,
    data_end: u64,
    /// What the members durably hold: 2 bits per region as on disk
    /// (`REGIONS_PER_WORD` regions per word). A bit is set here only after
    /// it is durable; a dirty bit is cleared here before the members.
    image: Box<[AtomicU64]>,
    /// 1 bit per region: a write started since the last `clear_idle`.
    touched: Box<[AtomicU64]>,
    /// 1 bit per region: `clear_idle` is deciding whether to clear it
    /// (writers then take the slow path).
    clearing: Box<[AtomicU64]>,
    /// Writes in flight per region.
    inflight: Box<[AtomicU32]>,
    /// The written bits are a live-data map (the superblock's feature).
    live_map: bool,
    /// Absolute member ranges a first write may zero (the redundant
    /// volumes'); empty: the whole covered area.
    live_areas: Vec<(u64, u64)>,
    /// 1 bit per region: a discard covering the region whole was started
    /// and no write came since (see `live.rs`).
    discarded: Box<[AtomicU64]>,
    zeroed: AtomicU64,
    forgotten: AtomicU64,
    /// Serializes every bitmap write (setters, clearing, copies).
    io: Mutex<Io>,
    set_writes: AtomicU64,
    cleared: AtomicU64,
    clear_errors: AtomicU64,
}

/// The ring and the on-disk image buffer (header then bits), under the
/// mutex.
struct Io {
    ring: IoUring,
    buf: IoBuf,
}

impl std::fmt::Debug for Bitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bitmap").field("stats", &self.stats()).finish()
    }
}

/// Absolute member offset just past the bitmap (header and bits) of an
/// array with bitmap regions of `region_size` bytes (0: no bitmap, then
/// [`BITMAP_OFFSET`]) over a data area ending at `data_end`: the rest of
/// the area, up to [`DATA_OFFSET`], holds nothing of the bitmap.
pub fn area_end(region_size: u64, data_end: u64) -> u64 {
    if region_size == 0 {
        return BITMAP_OFFSET;
    }
    let regions = data_end.saturating_sub(DATA_OFFSET).div_ceil(region_size);
    (BITS_OFFSET + bits_bytes(regions) as u64).min(DATA_OFFSET)
}

/// Bytes of bits for `regions` regions, padded to whole blocks.
fn bits_bytes(regions: u64) -> usize {
    (regions.div_ceil(4) as usize).next_multiple_of(BLOCK)
}

/// Checks the parameters and returns (region shift, region count).
fn geometry(members: &[Member], health: &Health, region_size: u64, data_end: u64) -> Result<(u32, u64)> {
    if health.members() != members.len() {
        bail!(InvalidInput, "member states for {} roles, {} members given", health.members(), members.len());
    }
    if members.is_empty() {
        bail!(InvalidInput, "a write-intent bitmap needs at least one member");
    }
    if !region_size.is_power_of_two() || region_size < MIN_REGION {
        bail!(
            InvalidInput,
            "bitmap region size {region_size} bytes is not valid: it must be a power of two of at least 4K \
             (e.g. 64M, the default)"
        );
    }
    if data_end <= DATA_OFFSET {
        bail!(InvalidInput, "bitmap: the data area ends at {data_end}, before it starts ({DATA_OFFSET}); nothing to cover");
    }
    let regions = (data_end - DATA_OFFSET).div_ceil(region_size);
    if regions > MAX_REGIONS {
        let fit = (data_end - DATA_OFFSET).div_ceil(MAX_REGIONS).next_power_of_two().max(MIN_REGION);
        bail!(
            InvalidInput,
            "bitmap region size {} gives {regions} regions over {} bytes of data area, but the bitmap \
             area holds at most {MAX_REGIONS}; use a region size of {} or more",
            crate::units::fmt_size(region_size),
            data_end - DATA_OFFSET,
            crate::units::fmt_size(fit)
        );
    }
    for m in members {
        if m.size() < data_end {
            bail!(TooSmall, "member {} has {} bytes, the bitmap covers up to {data_end}", m.name(), m.size());
        }
    }
    Ok((region_size.trailing_zeros(), regions))
}

fn new_ring() -> Result<IoUring> {
    IoUring::new(64).map_err(|e| {
        Error::new(ErrorKind::Unsupported, format!("cannot set up io_uring for the write-intent bitmap: {e}"))
    })
}

/// Sleeps until `deadline_ns` ([`now_ns`] clock), if it is in the future.
pub(crate) fn sleep_until(deadline_ns: u64) {
    let now = now_ns();
    if deadline_ns > now {
        crate::clock::sleep(Duration::from_nanos(deadline_ns - now));
    }
}

impl Bitmap {
    fn empty(members: Arc<Vec<Member>>, health: Arc<Health>, region_size: u64, data_end: u64) -> Result<Bitmap> {
        let (region_shift, regions) = geometry(&members, &health, region_size, data_end)?;
        // The bits fit between the header and the data area (geometry
        // refused more than MAX_REGIONS).
        debug_assert!(BITS_OFFSET + bits_bytes(regions) as u64 <= DATA_OFFSET, "{regions} regions overflow the bitmap area");
        let words = regions.div_ceil(REGIONS_PER_WORD) as usize;
        let mut buf = IoBuf::new(HEADER_SIZE + bits_bytes(regions));
        Self::encode_header(&mut buf[..HEADER_SIZE], region_size, regions, data_end);
        Ok(Bitmap {
            members,
            health,
            region_shift,
            regions,
            data_end,
            image: (0..words).map(|_| AtomicU64::new(0)).collect(),
            touched: (0..regions.div_ceil(64) as usize).map(|_| AtomicU64::new(0)).collect(),
            clearing: (0..regions.div_ceil(64) as usize).map(|_| AtomicU64::new(0)).collect(),
            inflight: (0..regions as usize).map(|_| AtomicU32::new(0)).collect(),
            live_map: false,
            live_areas: Vec::new(),
            discarded: (0..live::bit_words(regions)).map(|_| AtomicU64::new(0)).collect(),
            zeroed: AtomicU64::new(0),
            forgotten: AtomicU64::new(0),
            io: Mutex::new(Io { ring: new_ring()?, buf }),
            set_writes: AtomicU64::new(0),
            cleared: AtomicU64::new(0),
            clear_errors: AtomicU64::new(0),
        })
    }

    fn encode_header(h: &mut [u8], region_size: u64, regions: u64, data_end: u64) {
        h.fill(0);
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        h[16..24].copy_from_slice(&region_size.to_le_bytes());
        h[24..32].copy_from_slice(&regions.to_le_bytes());
        h[32..40].copy_from_slice(&DATA_OFFSET.to_le_bytes());
        h[40..48].copy_from_slice(&data_end.to_le_bytes());
        h[48..56].copy_from_slice(&BITS_OFFSET.to_le_bytes());
        h[56..64].copy_from_slice(&(bits_bytes(regions) as u64).to_le_bytes());
        let crc = crc32c::crc32c(&h[..CRC_AT]);
        h[CRC_AT..HEADER_SIZE].copy_from_slice(&crc.to_le_bytes());
    }

    /// Creates a bitmap with every bit clear and writes it (header and
    /// bits, durably) to every writable member.
    ///
    /// `region_size` is in bytes; the regions cover absolute member bytes
    /// `[DATA_OFFSET, data_end)` (`data_end`: the end of the last volume's
    /// data area on the members). Errors: `InvalidInput` for a region size
    /// that is not a power of two of at least 4 KiB, or that gives more
    /// regions than the area holds (the message names the smallest size
    /// that fits), or `data_end <= DATA_OFFSET`; `TooSmall` for a member
    /// shorter than `data_end`; `Unsupported` without io_uring; `Io` when
    /// no writable member took the write (nothing is written on a
    /// parameter error).
    pub fn create(members: Arc<Vec<Member>>, health: Arc<Health>, region_size: u64, data_end: u64) -> Result<Bitmap> {
        let b = Bitmap::empty(members, health, region_size, data_end)?;
        b.write_whole(None)?;
        Ok(b)
    }

    /// Loads the bitmap of an assembled array: the OR of the valid copies
    /// on the writable (active or rebuilding) members, so a bit set on any
    /// of them counts. Copies whose header is not a bitmap (wrong magic,
    /// version or CRC) are skipped and then rewritten with the merged
    /// bitmap; a member that cannot be read is failed ([`Health::fail`]).
    ///
    /// Errors: as [`create`](Self::create) for the parameters;
    /// `Superblock` when no writable member holds a valid bitmap, or when
    /// a valid one was made with another region size or data end than
    /// given (the message says which).
    pub fn load(members: Arc<Vec<Member>>, health: Arc<Health>, region_size: u64, data_end: u64) -> Result<Bitmap> {
        let b = Bitmap::empty(members, health, region_size, data_end)?;
        let len = HEADER_SIZE + bits_bytes(b.regions);
        let mut valid = 0usize;
        let mut bad: Vec<u32> = Vec::new();
        let mut regrown = false;
        let mut buf = IoBuf::new(len);
        for (m, member) in b.members.iter().enumerate() {
            let m = m as u32;
            if !b.health.device_in_service(m) {
                continue;
            }
            if member.read_exact_at(&mut buf, BITMAP_OFFSET).is_err() {
                let _ = b.health.fail(m);
                continue;
            }
            let h = &buf[..HEADER_SIZE];
            let crc = u32::from_le_bytes(h[CRC_AT..].try_into().expect("4 bytes"));
            if &h[0..8] != MAGIC
                || u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) != VERSION
                || crc != crc32c::crc32c(&h[..CRC_AT])
            {
                bad.push(m);
                continue;
            }
            let field = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
            if field(16) == region_size && field(40) < data_end && field(40) > DATA_OFFSET {
                // The bitmap from before the volume grew (`grow --size`: a
                // crash between the superblocks' new volume table and the
                // new bitmap): every region is counted as written and dirty
                // (a resync or rebuild skips nothing), and it is written
                // again at the new size.
                regrown = true;
                bad.push(m);
                continue;
            }
            if field(16) != region_size || field(24) != b.regions || field(40) != data_end {
                bail!(
                    Superblock,
                    "the write-intent bitmap on member {} has region size {} and covers up to {}, but \
                     the array's superblock says region size {region_size} up to {data_end}; the member \
                     belongs to another array or was not updated",
                    member.name(),
                    field(16),
                    field(40)
                );
            }
            valid += 1;
            for (w, word) in b.image.iter().enumerate() {
                let at = HEADER_SIZE + w * 8;
                let v = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
                word.fetch_or(v & b.word_mask(w), Ordering::Relaxed);
            }
        }
        if regrown {
            // Both bits of every region: dirty and written.
            for (w, word) in b.image.iter().enumerate() {
                word.fetch_or(b.word_mask(w), Ordering::Relaxed);
            }
            valid += 1;
        }
        if valid == 0 {
            bail!(
                Superblock,
                "no writable member holds a valid write-intent bitmap at offset {BITMAP_OFFSET}; \
                 assemble with the bitmap off and let a full resync run, or recreate the bitmap"
            );
        }
        for m in bad {
            b.write_whole(Some(m))?;
        }
        Ok(b)
    }

    /// Valid bits of image word `w` (0 for regions past the last).
    fn word_mask(&self, w: usize) -> u64 {
        let first = w as u64 * REGIONS_PER_WORD;
        let n = (self.regions - first).min(REGIONS_PER_WORD);
        if n == REGIONS_PER_WORD {
            u64::MAX
        } else {
            (1u64 << (2 * n)) - 1
        }
    }

    /// Region size in bytes.
    pub fn region_size(&self) -> u64 {
        1 << self.region_shift
    }

    /// Number of regions.
    pub fn regions(&self) -> u64 {
        self.regions
    }

    /// End of the bytes covered (absolute member offset, exclusive).
    pub fn data_end(&self) -> u64 {
        self.data_end
    }

    /// Regions `[r0, r1)` covering absolute member bytes `[offset,
    /// offset+len)`, `len > 0`.
    fn regions_of(&self, offset: u64, len: u64) -> Result<(usize, usize)> {
        let end = offset.checked_add(len).filter(|&e| offset >= DATA_OFFSET && e <= self.data_end);
        let Some(end) = end else {
            bail!(
                OutOfRange,
                "write-intent bitmap: member bytes [{offset}, +{len}) are outside the data area \
                 [{DATA_OFFSET}, {}) it covers",
                self.data_end
            );
        };
        let r0 = (offset - DATA_OFFSET) >> self.region_shift;
        let r1 = ((end - 1 - DATA_OFFSET) >> self.region_shift) + 1;
        debug_assert!(r0 < r1 && r1 <= self.regions, "regions [{r0}, {r1}) of {}", self.regions);
        Ok((r0 as usize, r1 as usize))
    }

    fn dirty_bit(r: usize) -> (usize, u64) {
        (r / REGIONS_PER_WORD as usize, 1u64 << (2 * (r % REGIONS_PER_WORD as usize)))
    }

    fn is_dirty(&self, r: usize) -> bool {
        let (w, bit) = Self::dirty_bit(r);
        self.image[w].load(Ordering::SeqCst) & bit != 0
    }

    /// Marks the regions covering absolute member bytes `[offset,
    /// offset+len)` dirty and written, durably, and counts one write in
    /// flight on each; call [`end_write`](Self::end_write) with the same
    /// range once the member writes have completed (successfully or not).
    ///
    /// When the bits are already durably set this is a few atomic
    /// operations per region (no lock, no system call). Otherwise one
    /// write of the block(s) holding the bits goes to every writable member
    /// with `RWF_DSYNC`, under the bitmap's mutex; a member that fails it
    /// is failed in [`Health`] and skipped. `len` 0 does nothing.
    ///
    /// Errors (and then nothing is counted in flight): `OutOfRange` when
    /// the range is outside `[DATA_OFFSET, data_end)`; `Io` when no member
    /// took the bitmap write.
    ///
    /// With the live-data map, the slow path first zeroes the regions not
    /// yet live on every writable member (see `live.rs`).
    #[inline]
    pub fn start_write(&self, offset: u64, len: u64) -> Result<()> {
        self.start(offset, len, false)
    }

    /// [`start_write`](Self::start_write) for a discard or zeroing
    /// (`discard` true): it does not take its regions back from a
    /// [`discarding`](Self::discarding) mark.
    pub fn start_mark(&self, offset: u64, len: u64, discard: bool) -> Result<()> {
        self.start(offset, len, discard)
    }

    fn start(&self, offset: u64, len: u64, discard: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (r0, r1) = self.regions_of(offset, len)?;
        let mut need = false;
        for r in r0..r1 {
            // Dekker with clear_idle: in flight and touched first, then
            // the clearing bit, then the dirty bit (all SeqCst; see
            // clear_idle).
            self.inflight[r].fetch_add(1, Ordering::SeqCst);
            let (tw, tbit) = (r / 64, 1u64 << (r % 64));
            if self.touched[tw].load(Ordering::SeqCst) & tbit == 0 {
                self.touched[tw].fetch_or(tbit, Ordering::SeqCst);
            }
            need |= self.clearing[tw].load(Ordering::SeqCst) & tbit != 0 || !self.is_dirty(r);
        }
        if !need {
            return Ok(());
        }
        let r = self.set_bits(r0, r1, discard);
        if r.is_err() {
            self.end_regions(r0, r1);
        }
        r
    }

    /// Slow path of `start_write`: sets the dirty and written bits of
    /// regions `[r0, r1)` on the members, then in memory.
    fn set_bits(&self, r0: usize, r1: usize, discard: bool) -> Result<()> {
        let mut io = self.lock_io();
        if self.live_map && !discard {
            self.undiscard(r0, r1);
        }
        if (r0..r1).all(|r| self.is_dirty(r)) {
            return Ok(()); // another setter did it while we waited
        }
        // Data and parity agree in a region before its bit says it holds
        // data: zeros everywhere, durably, then the bit.
        self.zero_dead(r0, r1)?;
        let b0 = r0 / REGIONS_PER_BLOCK as usize;
        let b1 = (r1 - 1) / REGIONS_PER_BLOCK as usize + 1;
        self.fill_blocks(&mut io, b0, b1);
        // Both bits of regions [r0, r1) in the buffer.
        for r in r0..r1 {
            let byte = HEADER_SIZE + r / 4;
            io.buf[byte] |= 0b11 << (2 * (r % 4));
        }
        self.write_members(&mut io, HEADER_SIZE + b0 * BLOCK, (b1 - b0) * BLOCK, None)?;
        for r in r0..r1 {
            let (w, bit) = Self::dirty_bit(r);
            self.image[w].fetch_or(bit | bit << 1, Ordering::SeqCst);
        }
        self.set_writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn end_regions(&self, r0: usize, r1: usize) {
        for r in r0..r1 {
            let prev = self.inflight[r].fetch_sub(1, Ordering::Release);
            debug_assert!(prev > 0, "end_write without start_write on region {r}");
        }
    }

    /// Ends a write started with [`start_write`](Self::start_write) over
    /// the same absolute member range (only after a successful
    /// `start_write`). The bits stay set until
    /// [`clear_idle`](Self::clear_idle) clears them. A range outside the
    /// bitmap is ignored (`start_write` refused it).
    pub fn end_write(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        if let Ok((r0, r1)) = self.regions_of(offset, len) {
            self.end_regions(r0, r1);
        }
    }

    /// The absolute member byte ranges of the dirty regions, merged and in
    /// order (the last clipped at the data end): what a resync after an
    /// unclean stop must cover.
    pub fn dirty(&self) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        for r in 0..self.regions as usize {
            if !self.is_dirty(r) {
                continue;
            }
            let start = DATA_OFFSET + ((r as u64) << self.region_shift);
            let end = (start + self.region_size()).min(self.data_end);
            match out.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => out.push(start..end),
            }
        }
        out
    }

    /// True when any region overlapping absolute member bytes `[start,
    /// end)` is dirty; true for a range not inside the covered bytes (as
    /// [`written_range`](Self::written_range)), false for an empty one.
    pub fn dirty_range(&self, start: u64, end: u64) -> bool {
        self.any_region(start, end, |r| self.is_dirty(r))
    }

    /// True when `f` holds for a region overlapping `[start, end)`; true
    /// outside the covered bytes, false for an empty range.
    fn any_region(&self, start: u64, end: u64, f: impl Fn(usize) -> bool) -> bool {
        if end <= start {
            return false;
        }
        match self.regions_of(start, end - start) {
            Ok((r0, r1)) => (r0..r1).any(f),
            Err(_) => true,
        }
    }

    /// True when every role is active: only then may dirty bits be
    /// cleared (see "Degraded arrays keep their bits" above).
    fn may_clear(&self) -> bool {
        (0..self.health.members() as u32).all(|m| self.health.state(m) == MemberState::Active)
    }

    fn is_written(&self, r: usize) -> bool {
        let (w, bit) = Self::dirty_bit(r);
        self.image[w].load(Ordering::SeqCst) & (bit << 1) != 0
    }

    /// True once any write touched the region holding absolute member byte
    /// `offset`. Without the live-data map (older arrays) a region never
    /// written holds zeros on every member (their creation zeroed the data
    /// area), so a rebuild may zero it instead of reconstructing it; with
    /// it, see [`live`](Self::live). Offsets
    /// outside the covered range answer true (nothing is known there).
    pub fn written(&self, offset: u64) -> bool {
        match self.regions_of(offset, 1) {
            Ok((r, _)) => self.is_written(r),
            Err(_) => true,
        }
    }

    /// True when any region overlapping absolute member bytes `[start,
    /// end)` was ever written (see [`written`](Self::written)); true for a
    /// range not inside the covered bytes, false for an empty one.
    pub fn written_range(&self, start: u64, end: u64) -> bool {
        self.any_region(start, end, |r| self.is_written(r))
    }

    /// Clears lazily: the dirty regions that have no write in flight and
    /// had none started since the previous call. fdatasyncs every writable
    /// member first (so every write that ended is durable), then clears the
    /// bits in memory and writes the changed blocks durably. Returns the
    /// number of regions cleared. Meant to run every few seconds
    /// ([`start_daemon`](Self::start_daemon)).
    ///
    /// Why it never clears a region a write is using (Dekker's pattern,
    /// every access below `SeqCst`): a writer increments the region's
    /// in-flight count (W1), sets its touched bit (W2), reads the region's
    /// clearing bit (W3), then its dirty bit (W4), and writes member data
    /// only if W3 saw clearing unset and W4 saw dirty set, or else after
    /// taking the mutex and setting the dirty bit itself, durably. This
    /// function, under the same mutex, takes the regions whose touched bit
    /// it swaps to 0 (C1) and whose count is 0, flushes, and for each sets
    /// the clearing bit (C2), re-reads the count and the touched bit (C3),
    /// and only if both are still clear clears the dirty bit (C4); it then
    /// unsets the clearing bit (C5), and writes the blocks of the cleared
    /// regions. In the single total order of `SeqCst` operations: if W3
    /// comes before C2, then W1 and W2 came before C3, which sees them, so
    /// the region is kept; if W3 falls between C2 and C5, the writer sees
    /// clearing and takes the slow path, which waits for this call to end;
    /// if W3 comes after C5, then W4 comes after C4 and sees the dirty bit
    /// as this call left it (cleared: the writer sets it again; kept: it is
    /// still durably set). A writer that ended before C1 had its data made
    /// durable by the flush. So the in-memory dirty bit of a region never
    /// changes while a write is in flight on it, and neither does the bit
    /// on the members.
    ///
    /// Errors: `Io` when no member took the write of the cleared bits (the
    /// members then still have them set, which is safe). A member that
    /// fails the flush or the write is failed in [`Health`].
    pub fn clear_idle(&self) -> Result<usize> {
        let mut io = self.lock_io();
        let mut cand: Vec<usize> = Vec::new();
        for (tw, t) in self.touched.iter().enumerate() {
            let touched = t.swap(0, Ordering::SeqCst);
            for r in tw * 64..((tw + 1) * 64).min(self.regions as usize) {
                if touched & (1 << (r % 64)) == 0 && self.is_dirty(r) && self.inflight[r].load(Ordering::SeqCst) == 0 {
                    cand.push(r);
                }
            }
        }
        // Read after the in-flight counts above: a write that failed a
        // member marked it faulty before its count dropped to 0, so a
        // region it left dirty is kept here.
        if cand.is_empty() || !self.may_clear() {
            return Ok(0);
        }
        self.sync_members()?;
        let mut cleared: Vec<usize> = Vec::with_capacity(cand.len());
        for r in cand {
            let (w, bit) = Self::dirty_bit(r);
            let (tw, tbit) = (r / 64, 1u64 << (r % 64));
            self.clearing[tw].fetch_or(tbit, Ordering::SeqCst);
            if self.inflight[r].load(Ordering::SeqCst) == 0 && self.touched[tw].load(Ordering::SeqCst) & tbit == 0 {
                self.image[w].fetch_and(!bit, Ordering::SeqCst);
                if self.live_map && self.is_discarded(r) {
                    self.forget(r);
                }
                cleared.push(r);
            }
            self.clearing[tw].fetch_and(!tbit, Ordering::SeqCst);
        }
        if cleared.is_empty() {
            return Ok(0);
        }
        let b0 = cleared[0] / REGIONS_PER_BLOCK as usize;
        let b1 = cleared[cleared.len() - 1] / REGIONS_PER_BLOCK as usize + 1;
        self.fill_blocks(&mut io, b0, b1);
        self.write_members(&mut io, HEADER_SIZE + b0 * BLOCK, (b1 - b0) * BLOCK, None)?;
        self.cleared.fetch_add(cleared.len() as u64, Ordering::Relaxed);
        Ok(cleared.len())
    }

    /// Clears every dirty bit, in memory and durably on every writable
    /// member (after an fdatasync of each). For the end of a resync or a
    /// clean stop: the caller guarantees that no write is in flight or
    /// starts meanwhile. While a role is not active the bits are kept
    /// (synced, not cleared). Errors: `Io` when no member took the write.
    pub fn clear_all(&self) -> Result<()> {
        let mut io = self.lock_io();
        self.sync_members()?;
        if !self.may_clear() {
            return Ok(());
        }
        for w in self.image.iter() {
            w.fetch_and(!DIRTY_BITS, Ordering::SeqCst);
        }
        let blocks = bits_bytes(self.regions) / BLOCK;
        self.fill_blocks(&mut io, 0, blocks);
        self.write_members(&mut io, 0, HEADER_SIZE + blocks * BLOCK, None)?;
        Ok(())
    }

    /// Counters of this bitmap.
    pub fn stats(&self) -> BitmapStats {
        let mut dirty = 0;
        let mut written = 0;
        for w in self.image.iter() {
            let v = w.load(Ordering::Relaxed);
            dirty += (v & DIRTY_BITS).count_ones() as u64;
            written += (v & (DIRTY_BITS << 1)).count_ones() as u64;
        }
        BitmapStats {
            region_size: self.region_size(),
            regions: self.regions,
            dirty,
            written,
            live: self.live_regions(),
            live_map: self.live_map,
            zeroed_bytes: self.zeroed.load(Ordering::Relaxed),
            forgotten: self.forgotten.load(Ordering::Relaxed),
            set_writes: self.set_writes.load(Ordering::Relaxed),
            cleared: self.cleared.load(Ordering::Relaxed),
            clear_errors: self.clear_errors.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod live_tests;
