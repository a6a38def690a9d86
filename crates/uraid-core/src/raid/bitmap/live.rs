//! The live-data map: the bitmap's written bits read as "this region may
//! hold data" (md's lockless bitmap "unwritten" state; ZFS resilvers only
//! allocated blocks). On an array whose superblock has the live-map
//! feature, a region whose bit is clear holds no data: it reads as zeros
//! without member I/O, its member bytes may hold anything (create does not
//! zero them, a rebuild writes nothing there), and the first write into
//! it zeroes the whole region on every writable member (so data and
//! parity agree) before its bit is made durable and the write goes on
//! ([`Bitmap::start_write`]'s slow path). A discard that covers a whole
//! region clears its bit lazily ([`Bitmap::discarded`]). Arrays without
//! the feature (older ones) keep every region live for reads and writes.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::{Bitmap, REGIONS_PER_WORD};
use crate::io::member::{Member, DATA_OFFSET};
use crate::{bail, Error, ErrorKind, IoBuf, Result};

impl Bitmap {
    /// Turns the live-data map on or off (the superblock's feature bit);
    /// off by default. Meant right after [`create`](Self::create) or
    /// [`load`](Self::load), before the bitmap is shared.
    pub fn with_live_map(mut self, on: bool) -> Bitmap {
        self.live_map = on;
        self
    }

    /// The live-data map on or off (`on`: the superblock's feature bit),
    /// zeroing only `areas`, the absolute member ranges `[start, end)` of
    /// the redundant volumes (bytes; the control path passes
    /// `Superblock::redundant_areas`): a RAID 0 volume of a Matrix array
    /// may share a region with them, and its data is not in the map.
    pub fn with_live_map_areas(mut self, on: bool, areas: Vec<(u64, u64)>) -> Bitmap {
        self.live_map = on;
        self.live_areas = areas;
        self
    }

    /// True when the written bits are a live-data map (see the module).
    pub fn live_map(&self) -> bool {
        self.live_map
    }

    /// True when the region holding absolute member byte `offset` may hold
    /// data: always without the live map or outside the covered bytes.
    /// One load and a bit test (the data path's per-request check).
    #[inline]
    pub fn live(&self, offset: u64) -> bool {
        if !self.live_map {
            return true;
        }
        let r = offset.wrapping_sub(DATA_OFFSET) >> self.region_shift;
        if r >= self.regions {
            return true;
        }
        let (w, bit) = Self::dirty_bit(r as usize);
        self.image[w].load(Ordering::Acquire) & (bit << 1) != 0
    }

    /// Live bytes of absolute member bytes `[start, end)`: the parts of
    /// live regions inside it, and the parts outside the covered bytes
    /// (all of it without the live map). One step per region.
    pub fn live_bytes(&self, start: u64, end: u64) -> u64 {
        if end <= start {
            return 0;
        }
        if !self.live_map {
            return end - start;
        }
        let (a, e) = (start.clamp(DATA_OFFSET, self.data_end), end.clamp(DATA_OFFSET, self.data_end));
        // Outside the covered bytes nothing is known: live.
        let mut n = (end - start) - (e - a);
        let size = self.region_size();
        let mut at = a;
        while at < e {
            let next = (DATA_OFFSET + ((at - DATA_OFFSET) / size + 1) * size).min(e);
            if self.live(at) {
                n += next - at;
            }
            at = next;
        }
        n
    }

    /// With the live map: zeroes, on every writable member at once, the
    /// regions of `[r0, r1)` whose written bit is clear, durably (called
    /// under the bitmap's mutex before their bits are set, so that no
    /// write lands in a region whose bytes disagree). A member whose
    /// zeroing fails is failed. Errors: `Io` when no member took it.
    pub(super) fn zero_dead(&self, r0: usize, r1: usize) -> Result<()> {
        if !self.live_map {
            return Ok(());
        }
        let size = self.region_size();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let whole = [(DATA_OFFSET, self.data_end)];
        let areas: &[(u64, u64)] = if self.live_areas.is_empty() { &whole } else { &self.live_areas };
        for r in (r0..r1).filter(|&r| !self.is_written(r)) {
            let start = DATA_OFFSET + r as u64 * size;
            let end = (start + size).min(self.data_end);
            // Only the redundant volumes' parts of the region.
            for &(a, e) in areas {
                let (s, t) = (start.max(a), end.min(e));
                if s >= t {
                    continue;
                }
                match ranges.last_mut() {
                    Some(last) if last.1 == s => last.1 = t,
                    _ => ranges.push((s, t)),
                }
            }
        }
        if ranges.is_empty() {
            return Ok(());
        }
        let targets: Vec<u32> = (0..self.members.len() as u32).filter(|&m| self.health.writable(m)).collect();
        let results: Vec<(u32, Result<()>)> = std::thread::scope(|s| {
            let hs: Vec<_> = targets
                .iter()
                .map(|&m| {
                    let member = &self.members[m as usize];
                    let ranges = &ranges;
                    s.spawn(move || (m, ranges.iter().try_for_each(|&(a, e)| zero_range(member, a, e - a))))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| (u32::MAX, Err(Error::new(ErrorKind::Io, "a zeroing thread panicked"))))).collect()
        });
        let mut ok = 0;
        let mut last = None;
        for (m, r) in results {
            match r {
                Ok(()) => ok += 1,
                Err(e) => {
                    if m != u32::MAX {
                        self.health.fail(m)?;
                    }
                    last = Some(e);
                }
            }
        }
        if ok == 0 {
            bail!(
                Io,
                "no member could zero a region before its first write (live-data map): {}",
                last.map_or_else(|| "no writable member".to_string(), |e| e.to_string())
            );
        }
        self.zeroed.fetch_add(ranges.iter().map(|r| r.1 - r.0).sum(), Ordering::Relaxed);
        Ok(())
    }

    /// Regions wholly inside absolute member bytes `[start, end)`.
    fn whole_regions(&self, start: u64, end: u64) -> std::ops::Range<usize> {
        if end <= start || end <= DATA_OFFSET || start >= self.data_end {
            return 0..0;
        }
        let size = self.region_size();
        let a = start.max(DATA_OFFSET) - DATA_OFFSET;
        let e = end.min(self.data_end) - DATA_OFFSET;
        let r0 = a.div_ceil(size);
        // The last region counts whole when the range reaches the data end.
        let r1 = if end >= self.data_end { self.regions } else { e / size };
        if r1 <= r0 {
            return 0..0;
        }
        r0 as usize..r1 as usize
    }

    /// Notes that absolute member bytes `[start, end)` are about to be
    /// discarded (zeroed on every member) by a request that has not started
    /// yet: the regions it covers whole are marked *discarded*, and writes
    /// to them take the slow path from now on (which unmarks them), so
    /// that [`clear_idle`](Self::clear_idle) may clear their written bits
    /// too once the discard has ended and no write came in between. Does
    /// nothing without the live map. A stale set bit is always safe: this
    /// is an optimisation, lazily persisted.
    pub fn discarding(&self, start: u64, end: u64) {
        let regions = self.whole_regions(start, end);
        if !self.live_map || regions.is_empty() {
            return;
        }
        // Under the mutex: clear_idle sets and unsets clearing bits under
        // it, and must not unset these.
        let _io = self.lock_io();
        for r in regions {
            let (tw, tbit) = (r / 64, 1u64 << (r % 64));
            self.discarded[tw].fetch_or(tbit, Ordering::SeqCst);
            self.clearing[tw].fetch_or(tbit, Ordering::SeqCst);
        }
    }

    /// True when region `r` was marked by [`discarding`](Self::discarding)
    /// and no write came since.
    pub(super) fn is_discarded(&self, r: usize) -> bool {
        self.discarded[r / 64].load(Ordering::SeqCst) & (1u64 << (r % 64)) != 0
    }

    /// A write (not a discard) takes regions `[r0, r1)` back from a
    /// discard, and lets later writes there take the fast path again
    /// (under the mutex, which `clear_idle` holds while it uses clearing
    /// bits).
    pub(super) fn undiscard(&self, r0: usize, r1: usize) {
        for r in r0..r1 {
            let (tw, tbit) = (r / 64, 1u64 << (r % 64));
            if self.discarded[tw].fetch_and(!tbit, Ordering::SeqCst) & tbit != 0 {
                self.clearing[tw].fetch_and(!tbit, Ordering::SeqCst);
            }
        }
    }

    /// Clears the written bit of region `r` in memory (with its dirty bit,
    /// by `clear_idle`, under the mutex) and its discarded mark.
    pub(super) fn forget(&self, r: usize) {
        let (w, bit) = Self::dirty_bit(r);
        self.image[w].fetch_and(!(bit << 1), Ordering::SeqCst);
        self.discarded[r / 64].fetch_and(!(1u64 << (r % 64)), Ordering::SeqCst);
        self.forgotten.fetch_add(1, Ordering::Relaxed);
    }

    /// Live (written) regions, for the stats.
    pub(super) fn live_regions(&self) -> u64 {
        self.image.iter().map(|w| (w.load(Ordering::Relaxed) & (super::DIRTY_BITS << 1)).count_ones() as u64).sum()
    }
}

/// Words of a 1-bit-per-region set.
pub(super) fn bit_words(regions: u64) -> usize {
    regions.div_ceil(64) as usize
}

const _: () = assert!(REGIONS_PER_WORD == 32);

/// Zeroes `[start, start+len)` of `m` (absolute bytes), durably: tries
/// `fallocate(PUNCH_HOLE | KEEP_SIZE)` (files, memfds, block devices that
/// discard with zeroing), then `fallocate(ZERO_RANGE)` (block devices:
/// BLKZEROOUT), then writes zeros; then fdatasyncs. Errors: `InvalidInput`
/// for a range past `off_t`; `Io` from the writes or the flush.
pub(crate) fn zero_range(m: &Member, start: u64, len: u64) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let fd = m.file().as_raw_fd();
    let path = std::path::Path::new(m.name());
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) else {
        bail!(InvalidInput, "range {start}+{len} of {} does not fit an off_t", m.name());
    };
    for mode in [libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_ZERO_RANGE] {
        // SAFETY: fallocate on a valid open descriptor with plain integer
        // arguments; no memory is passed.
        if unsafe { libc::fallocate(fd, mode, off, l) } == 0 {
            return m.file().sync_data().map_err(|e| Error::io("cannot flush", path, e));
        }
    }
    const STEP: u64 = 1 << 20;
    let zeros = IoBuf::new(STEP as usize);
    let mut pos = start;
    while pos < start + len {
        let n = STEP.min(start + len - pos) as usize;
        m.file()
            .write_all_at(&zeros[..n], pos)
            .map_err(|e| Error::io(&format!("cannot zero {n} bytes at offset {pos} of"), path, e))?;
        pos += n as u64;
    }
    m.file().sync_data().map_err(|e| Error::io("cannot flush", path, e))
}
