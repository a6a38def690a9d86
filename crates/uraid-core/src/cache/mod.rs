//! The volume cache: write-through (reads cached) or write-back (writes
//! acknowledged from memory and written to the members in the background,
//! merged into whole lines), shared by every queue of a volume.
//!
//! The cache is cut into *lines* of one stripe's data (RAID 5/6: every data
//! chunk of a stripe, so a line written whole is a full-stripe write that
//! reads nothing; RAID 0/10: one chunk per data member; RAID 1: one chunk),
//! each with a valid and a dirty bit per 512-byte sector. Lines live in
//! shards (a mutex each, hashed by line number), so queues on different
//! lines do not wait for each other.
//!
//! Write-back (like Intel Matrix RAID's volume write-back cache and md's
//! raid5-cache in write-back mode, without the journal): a write is copied
//! into its lines and completes at once; a flusher thread writes dirty lines
//! to the members, oldest first: a line dirty as a whole at the next look
//! (every [`FLUSH_INTERVAL`]), as one write of the whole line (the
//! coalescer: small sequential writes become full-stripe writes); a line
//! dirty in part after [`DIRTY_EXPIRE_NS`], so that a stream has time to
//! fill it; everything when the dirty bytes pass half the dirty limit or a
//! flush asks. A writer that would pass
//! the dirty limit waits (its request is held by its queue) until the
//! flusher has made room. A FLUSH completes once every write acknowledged
//! before it is on the members and the members have been flushed; a FUA
//! write completes once it is. Data not yet flushed is lost when the
//! process dies or the power fails: that is what the mode trades for speed,
//! and `uraid status` says so.
//!
//! Journal mode (md's raid5-cache with its log device, in write-back):
//! the same cache, and every write is also recorded on a journal device
//! ([`crate::cache::journal`]) and acknowledged only once its record is durable;
//! a FLUSH then needs only the members' flush (for discards and zeroes),
//! and nothing acknowledged is lost when the process dies or the power
//! fails: assemble replays the records not yet retired. On RAID 5/6 a line
//! dirty in part is recorded before it goes out, so that replay can write
//! every interrupted stripe's rows whole and their parity comes out right
//! even with a member gone (the write hole closed): when its dirty sectors
//! lie in a few rows of its chunks (random writes), those rows of every
//! chunk (a rows record; the rest of the rows is read from the members) and
//! then its dirty sectors go out (read-modify-write); otherwise the whole
//! line (a stripe record, completed by reading the rest from the members),
//! which then goes out as a full-stripe write. Each pass ends with a
//! members' flush and a checkpoint that retires the records whose data is
//! on the members. Writes never go around the cache in this mode; a full
//! log holds writers like the dirty limit does. A write-zeroes is recorded
//! too (a zeroes record, no data), so replay zeroes its range in its place
//! among the writes. A discard goes as a write-zeroes does in this mode
//! (the members still discard its whole stripes): its partial RAID 5/6
//! stripes are written as zeroes, and a crash must not tear them.
//!
//! Write-zeroes, in write-back and journal mode: the range's sectors in
//! the lines the cache holds become zeroes (dirty, so the flusher writes
//! them after any older bytes of those lines it may have in flight), and
//! the zeroing goes to the members at once; until it completes, the
//! flusher records and writes no line it overlaps (what it would read from
//! the members there may be the bytes from before it). A FUA one under
//! plain write-back, or one with the journal lost, waits for the
//! write-back and goes to the members unrecorded, as a discard does in
//! write-back (what a discarded range reads is unspecified until it is
//! written again, as NBD's TRIM says).
//!
//! Reads: a read whose every sector is valid in the cache is served from it
//! (a hit); otherwise it goes to the members, and the cached sectors it
//! overlaps (newer than the members while dirty) are laid over the result
//! when it completes; the lines it overlaps cannot be evicted meanwhile.
//! Write-through also keeps what reads brought in, unless a write touched
//! the cache since the read started.

mod config;
mod flusher;
pub mod journal;
mod lines;
pub mod queue;
mod recorder;
mod take;
mod writer;

pub use config::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use lines::{is_set, runs_of, set_bits, LineTable};

use crate::raid::engine::RaidVolume;
use crate::{bail, IoBuf, Result};

/// Member requests the flusher keeps in flight (and its reads for the
/// journal's records). 16 left the flusher waiting for room with random
/// write-backs (each a read-modify-write on RAID 5/6): 64 wrote 15% more
/// lines a second in journal mode (bench/journal.py); 128 no more.
const FLUSH_DEPTH: usize = 64;

/// Most lines whose journal records the flusher submits before it waits
/// for them (one group-commit write) and writes the lines; also the
/// window of lines whose rows it reads ahead.
const RECORD_BATCH: usize = 64;

/// Journal mode: at most this many rows records for one line (see
/// `rows_of`); a line dirty in more ranges of rows is recorded whole.
const MAX_ROWS_RECORDS: usize = 8;

/// Journal mode: ranges of a line's dirty rows closer than this many rows
/// go in one rows record (the rows between them read and logged, a record
/// header saved).
const ROWS_GAP: usize = 8;

/// A volume's cache. Made by [`Volume::enable_cache`](crate::volume::Volume::enable_cache); the queues of the
/// volume use it on their own.
pub struct Cache {
    cfg: CacheConfig,
    /// Bytes per line.
    line: u64,
    sectors: usize,
    /// The lines, their bits and byte counts, eviction.
    lines: LineTable,
    /// Write sequence: every write into the cache takes the next number.
    seq: AtomicU64,
    /// Held shared by a writer from taking its number until its data is in
    /// the lines; the flusher takes it alone to read a number below which
    /// every write is in the lines.
    gate: std::sync::RwLock<()>,
    /// Every write with a sequence number below this is durable.
    durable: Mutex<u64>,
    /// Highest sequence number a flush is waiting for.
    wanted: AtomicU64,
    /// Zeroings (write-zeroes requests) this cache sent on to the members
    /// and not yet completed: byte ranges `[start, end)` of the volume and
    /// the write sequence number each took (the journal's zeroes record
    /// must not retire before its zeroing is on the members). The
    /// flusher does not record or write a line over one of them
    /// ([`record_line`](Self::record_line)): what it would read there from
    /// the members may be the bytes from before the zeroes.
    zeroing: Mutex<Vec<(u64, u64, u64)>>,
    /// Bumped each time a zeroing starts (a line's read-fill that saw it
    /// move may have read the bytes from before it).
    zero_epoch: AtomicU64,
    /// A writer waits for room (the dirty limit, or a cache full of dirty
    /// lines): the next pass writes every dirty line, not only the whole
    /// and expired ones.
    starved: AtomicBool,
    kick: Mutex<bool>,
    kick_cv: Condvar,
    /// Bumped by every write through a write-through cache (reads keep
    /// what they brought in only when it did not move).
    wt_epoch: AtomicU64,
    closed: AtomicBool,
    /// The flusher's last error (writes were lost), reported to flushes.
    failed: Mutex<Option<crate::Error>>,
    /// The flusher thread panicked, or the volume below failed: nothing is
    /// written back any more, so every request but a read fails with
    /// `failed`'s error.
    dead: AtomicBool,
    /// The volume the flusher writes through (a volume rebuilt over new
    /// members takes the cache over: [`Volume::adopt_cache`]).
    target: Mutex<Weak<RaidVolume>>,
    /// Held by the flusher through each pass (from the moment it takes
    /// `target`): [`retarget`](Self::retarget) waits on it.
    passing: Mutex<()>,
    stats: Mutex<CacheStats>,
    /// The flusher's smaller buffers (member reads for records, rows
    /// writes), kept by size class for reuse (see [`SmallBufs`]).
    small: SmallBufs,
    /// Journal mode: the journal, and the order writers take a record's
    /// place and copy into the lines in (so that the log's order is the
    /// lines' order).
    journal: Option<Arc<crate::cache::journal::Journal>>,
    jorder: Mutex<()>,
    /// The journal's loss count last seen (a new loss drains the cache).
    seen_losses: AtomicU64,
    /// Since a loss of the journal: the write sequence number below which
    /// every write must be on the members before the loss is recorded
    /// ([`crate::cache::journal::Journal::drained_after_loss`]): until then the
    /// journal still holds acknowledged writes.
    lost_drain: Mutex<Option<u64>>,
    /// The volume has parity (RAID 5/6): the journal records a line dirty
    /// in part (its rows, or whole) before the flusher writes it.
    parity: bool,
    /// Sectors per chunk of a line (RAID 5/6; `sectors` otherwise): a
    /// line's rows are the same sectors of each of its chunks.
    chunk_sectors: usize,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cache({:?}, line {} bytes)", self.cfg, self.line)
    }
}

/// Buffers of the flusher smaller than a line, by size class (a power of
/// two from 4 KiB), kept for reuse: a journal pass reads and writes a few
/// KiB per dirty range of a line, and a fresh zeroed, page-aligned
/// allocation for each cost it a fifth of its time. A buffer taken holds
/// whatever it held before; at most [`SMALL_KEEP_BYTES`] bytes are kept.
#[derive(Default)]
struct SmallBufs {
    /// The buffers kept, by class (index: log2 of the length), and their
    /// bytes.
    classes: Mutex<(Vec<Vec<IoBuf>>, usize)>,
}

/// Most bytes [`SmallBufs`] keeps for reuse (all classes together).
const SMALL_KEEP_BYTES: usize = 32 << 20;

impl SmallBufs {
    /// A buffer of at least `len` bytes (its length is its class's).
    fn take(&self, len: usize) -> IoBuf {
        let class = len.max(4096).next_power_of_two();
        let k = class.trailing_zeros() as usize;
        let mut c = lock(&self.classes);
        match c.0.get_mut(k).and_then(Vec::pop) {
            Some(b) => {
                c.1 -= b.len();
                b
            }
            None => IoBuf::new(class),
        }
    }

    /// Keeps `b` for reuse, if its length is a class's and the bytes kept
    /// stay within [`SMALL_KEEP_BYTES`].
    fn give(&self, b: IoBuf) {
        if !b.len().is_power_of_two() || b.len() < 4096 {
            return;
        }
        let k = b.len().trailing_zeros() as usize;
        let mut c = lock(&self.classes);
        if c.1 + b.len() > SMALL_KEEP_BYTES {
            return;
        }
        if c.0.len() <= k {
            c.0.resize_with(k + 1, Vec::new);
        }
        c.1 += b.len();
        c.0[k].push(b);
    }
}

/// What a queue does with a request when the volume has a cache.
pub(crate) enum Taken {
    /// Done: the completion result (bytes).
    Done(usize),
    /// Handed back: run it on the members (a read miss: lay the pinned
    /// lines over its result when it completes with [`Cache::finish_read`]).
    Members { pins: Vec<u64>, epoch: u64 },
    /// Send only bytes `[offset, offset + len)` of it on to the members (a
    /// zeroing whose partial lines went into the cache); its completion
    /// still reports the whole request's length.
    MembersPart { offset: u64, len: usize },
    /// Wait: complete it once every write below this sequence number is
    /// durable (a flush, a FUA write).
    Durable(u64),
    /// Wait until every write below this sequence number is durable, then
    /// drop the range from the cache ([`Cache::invalidate`]) and run it on
    /// the members (a discard or zeroing under write-back: written-back
    /// data must not land after it).
    DurableThenMembers(u64),
    /// Wait for room (dirty limit), then offer it again.
    Full,
    /// Wait until the journal record reserved as this is written
    /// (committed with others: [`Cache::commit_journal`]); the write has
    /// this cache write sequence number (if the record fails, it waits
    /// for the members instead: [`Cache::record_failed`]).
    Recorded(crate::cache::journal::Reservation, u64),
    /// Failed (the journal could not record it): complete with this error.
    Failed(crate::Error),
}

impl Cache {
    /// Bytes per line of a cache on `vol`: one stripe's data.
    pub fn line_for(vol: &RaidVolume) -> u64 {
        let g = vol.geometry();
        match g.layout() {
            Some(l) => l.stripe_data_width(),
            None => g.chunk() * g.members() as u64,
        }
        .min(g.capacity().max(CACHE_SECTOR))
    }

    /// Checks `cfg` for a cache on `vol`, as a user sets it (create,
    /// config). Errors: `InvalidInput` when the size or the dirty limit
    /// cannot hold one line, the limit passes the size, or the size passes
    /// this machine's memory ([`check_cache_memory`]).
    pub fn check_config(vol: &RaidVolume, cfg: &CacheConfig) -> Result<()> {
        Self::check_lines(vol, cfg)?;
        check_cache_memory(cfg.size)
    }

    /// The part of [`check_config`](Self::check_config) that does not
    /// depend on the machine (an array whose cache was sized on a larger
    /// machine still assembles: the cache fills only as far as it is
    /// used).
    fn check_lines(vol: &RaidVolume, cfg: &CacheConfig) -> Result<()> {
        let line = Self::line_for(vol);
        if cfg.size < line || cfg.dirty_limit < line || cfg.dirty_limit > cfg.size {
            bail!(
                InvalidInput,
                "cache size {} and dirty limit {} do not fit: both must hold at least one line ({} bytes: one stripe's \
                 data) and the dirty limit cannot pass the size",
                cfg.size,
                cfg.dirty_limit,
                line
            );
        }
        Ok(())
    }

    /// A cache for `vol`; `journal` is required by, and only taken in,
    /// [`CacheMode::Journal`]. Errors: `InvalidInput` as
    /// [`check_config`](Self::check_config), or a journal missing or not
    /// wanted.
    pub(crate) fn new(vol: &RaidVolume, cfg: CacheConfig, journal: Option<Arc<crate::cache::journal::Journal>>) -> Result<Cache> {
        Self::check_lines(vol, &cfg)?;
        if (cfg.mode == CacheMode::Journal) != journal.is_some() {
            bail!(InvalidInput, "the journal cache mode needs a journal device, and only it takes one");
        }
        let line = Self::line_for(vol);
        let sectors = (line / CACHE_SECTOR) as usize;
        Ok(Cache {
            cfg,
            line,
            sectors,
            lines: LineTable::new(line, sectors, cfg.size),
            seq: AtomicU64::new(1),
            gate: std::sync::RwLock::new(()),
            durable: Mutex::new(1),
            wanted: AtomicU64::new(0),
            starved: AtomicBool::new(false),
            zeroing: Mutex::new(Vec::new()),
            zero_epoch: AtomicU64::new(0),
            kick: Mutex::new(false),
            kick_cv: Condvar::new(),
            wt_epoch: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            failed: Mutex::new(None),
            dead: AtomicBool::new(false),
            target: Mutex::new(Weak::new()),
            passing: Mutex::new(()),
            stats: Mutex::new(CacheStats { mode: cfg.mode, ..Default::default() }),
            small: SmallBufs::default(),
            journal,
            jorder: Mutex::new(()),
            seen_losses: AtomicU64::new(0),
            lost_drain: Mutex::new(None),
            parity: vol.geometry().layout().is_some_and(|l| l.level().has_parity()),
            chunk_sectors: match vol.geometry().chunk() {
                c if line.is_multiple_of(c) => (c / CACHE_SECTOR) as usize,
                _ => sectors,
            },
        })
    }

    /// Why acknowledged writes held in this cache were lost, if they were:
    /// the flusher could not write dirty lines to the members (the error
    /// every FLUSH gets from then on). `uraid serve` reports it as the
    /// CacheLost event.
    pub fn lost_writes(&self) -> Option<String> {
        lock(&self.failed).as_ref().map(|e| e.to_string())
    }

    /// The journal of a cache in journal mode.
    pub fn journal(&self) -> Option<&Arc<crate::cache::journal::Journal>> {
        self.journal.as_ref()
    }

    /// The journal while it is not lost. Once it is lost (see
    /// [`crate::cache::journal::Journal::is_lost`]) the cache works without it:
    /// every write is acknowledged only once it is on the members and they
    /// are flushed (as a FUA write), flushes wait for every dirty line, and
    /// the first call that sees a new loss asks the flusher to write
    /// everything back (the writes whose records went with the journal
    /// are then only in memory).
    fn live_journal(&self) -> Option<&Arc<crate::cache::journal::Journal>> {
        let j = self.journal.as_ref()?;
        let losses = j.losses();
        if self.seen_losses.swap(losses, Ordering::AcqRel) != losses && j.is_lost() {
            let target = self.want_all();
            lock(&self.lost_drain).get_or_insert(target);
        }
        (!j.is_lost()).then_some(j)
    }

    /// True when the cache is in journal mode and its journal is lost.
    fn journal_lost(&self) -> bool {
        self.journal.is_some() && self.live_journal().is_none()
    }

    /// The configuration.
    pub fn config(&self) -> CacheConfig {
        self.cfg
    }

    /// What the stack from the cache down can do, given what the layer
    /// below can (`below`): the same. The cache passes discards and
    /// write-zeroes down (after the write-back of what they cover), makes a
    /// FUA write durable before it completes, and its write-back needs a
    /// flush for durability, which the RAID layer below needs already.
    pub fn caps(&self, below: crate::io::request::Caps) -> crate::io::request::Caps {
        crate::io::request::Caps { flush: true, fua: true, ..below }
    }

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        let mut s = *lock(&self.stats);
        s.dirty_bytes = self.lines.dirty_bytes();
        s.cached_bytes = self.lines.cached_bytes();
        let reads = s.read_hits + s.read_misses;
        s.hit_ratio = if reads == 0 { 0.0 } else { s.read_hits as f64 / reads as f64 };
        s.journal_lost = self.journal_lost();
        s
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::request::Request;
    use crate::raid::geometry::{Geometry, Level};
    use crate::io::member::{MemSpec, Member, MemberSpec, OpenMode};
    use crate::control::superblock::DATA_OFFSET;

    /// A write-back cache (no flusher: the test plays it) over a RAID 5 of
    /// three `mem:` members with 64 KiB chunks (lines of 128 KiB).
    fn cache() -> Cache {
        let spec = MemberSpec::Mem(MemSpec { size: DATA_OFFSET + (4 << 20), limits: Default::default() });
        let members = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
        let v = RaidVolume::new(Arc::new(members), Geometry::new(Level::Raid5, 3, 64 << 10, 4 << 20).unwrap(), DATA_OFFSET).unwrap();
        Cache::new(&v, CacheConfig { mode: CacheMode::WriteBack, size: 2 << 20, dirty_limit: 1 << 20 }, None).unwrap()
    }

    fn write(c: &Cache, offset: u64, len: usize) {
        let mut r = Request::write(offset, len, IoBuf::new(len), 0);
        assert!(matches!(c.take(&mut r), Taken::Done(_)));
    }

    /// (dirty sectors as runs, oldest write) of line `idx`.
    fn state(c: &Cache, idx: u64) -> (Vec<(usize, usize)>, u64) {
        let slot = c.lines.slot(idx);
        let l = slot.get().expect("the line is held");
        (runs_of(l.dirty(), c.sectors), l.oldest())
    }

    /// A line written back while a write came into it keeps only that
    /// write's sectors dirty, and its oldest write moves past the
    /// snapshot only once every sector of the snapshot is written: a dirty
    /// sector never carries a write older than the line's oldest (whose
    /// journal record may retire). Before, the line stayed dirty whole
    /// with its oldest moved on: written whole later with no record, as if
    /// its writes' records covered it.
    #[test]
    fn a_write_back_cleans_what_it_wrote_and_keeps_what_came_since() {
        let c = cache();
        let sectors = c.sectors;
        // Write 1: the whole line 0.
        write(&c, 0, c.line as usize);
        let snap = c.dirty_lines(true).pop().unwrap();
        assert_eq!((snap.idx, snap.last_seq), (0, 1));
        // Write 2 comes into sectors 8..16 while the snapshot is written
        // in two runs.
        write(&c, 8 * CACHE_SECTOR, 8 * CACHE_SECTOR as usize);
        let half = sectors / 2;
        let (mut first, mut second) = (vec![0u64; snap.dirty.len()], vec![0u64; snap.dirty.len()]);
        set_bits(&mut first, 0, half);
        set_bits(&mut second, half, sectors);
        c.written_back(0, snap.generation, &first, snap.last_seq);
        // The second half still holds write 1 only on the members' way.
        assert_eq!(state(&c, 0), (vec![(8, 16), (half, sectors)], 1));
        c.written_back(0, snap.generation, &second, snap.last_seq);
        assert_eq!(state(&c, 0), (vec![(8, 16)], 2));
        assert_eq!(c.lines.dirty_bytes(), 8 * CACHE_SECTOR);
        // The next snapshot, written with no write since: clean.
        let snap = c.dirty_lines(true).pop().unwrap();
        c.written_back(0, snap.generation, &snap.dirty, snap.last_seq);
        assert_eq!(state(&c, 0), (vec![], 0));
        assert_eq!(c.lines.dirty_bytes(), 0);
    }

    /// Random writes leave a sector or two of a line dirty in rows far
    /// apart: each range of rows gets a rows record of its own. Before,
    /// one range over all of them (half a chunk or more here) made the
    /// line a stripe record: the whole stripe read, logged and written
    /// for two sectors (`rows_of` gave None for the first case).
    #[test]
    fn dirty_rows_far_apart_get_rows_records_of_their_own() {
        let c = cache();
        let (cs, words) = (c.chunk_sectors, c.sectors.div_ceil(64));
        assert!(cs >= 16, "the test needs 16 rows a chunk");
        let mut d = vec![0u64; words];
        set_bits(&mut d, 1, 2);
        // A row dirty in another chunk counts for every chunk.
        set_bits(&mut d, cs + cs - 2, cs + cs - 1);
        assert_eq!(c.rows_of(&d), Some(vec![(1, 2), (cs - 2, cs - 1)]));
        assert_eq!(runs_of(&c.rows_mask(&[(1, 2), (cs - 2, cs - 1)]), c.sectors), vec![(1, 2), (cs - 2, cs - 1), (cs + 1, cs + 2), (2 * cs - 2, 2 * cs - 1)]);
        // Rows closer than ROWS_GAP are one range.
        set_bits(&mut d, 3, 4);
        assert_eq!(c.rows_of(&d), Some(vec![(1, 4), (cs - 2, cs - 1)]));
        // Half the rows or more, or a run across a chunk's end: whole.
        let mut h = vec![0u64; words];
        set_bits(&mut h, 0, cs / 2);
        assert_eq!(c.rows_of(&h), None);
        let mut x = vec![0u64; words];
        set_bits(&mut x, cs - 1, cs + 1);
        assert_eq!(c.rows_of(&x), None);
    }

    /// A cache full of dirty lines has nothing to evict, and says so
    /// without scanning again until a line may have become evictable;
    /// then the scan finds the line made clean and evicts it.
    #[test]
    fn an_eviction_that_found_nothing_looks_again_once_a_line_is_clean() {
        let c = cache();
        let lines = c.cfg.size / c.line;
        for i in 0..lines {
            write(&c, i * c.line, 4096);
        }
        assert_eq!(c.lines.cached_bytes(), c.cfg.size);
        assert!(!c.lines.evict(c.line), "a dirty line was evicted");
        assert!(c.lines.eviction_is_fruitless());
        assert!(!c.lines.evict(c.line));
        let snap = c.dirty_lines(true).into_iter().find(|s| s.idx == 3).unwrap();
        c.written_back(3, snap.generation, &snap.dirty, snap.last_seq);
        assert!(c.lines.evict(c.line), "the line made clean was not evicted");
        assert!(c.lines.slot(3).get().is_none());
    }

    /// A write-back in flight for a line that was dropped meanwhile (a
    /// discard made it clean, then eviction took it) cleans nothing of the
    /// line made again at the same index: generations are never reused.
    /// Before, a new line started at generation 0, and after as many writes
    /// as the old one had it matched, and its dirty data was marked clean
    /// without ever reaching the members.
    #[test]
    fn a_write_back_of_a_dropped_line_cleans_nothing_of_its_successor() {
        let c = cache();
        write(&c, 0, 4096);
        let snap = c.dirty_lines(true).pop().unwrap();
        c.invalidate(0, c.line as usize);
        c.lines.slot(0).remove();
        write(&c, 0, 4096);
        c.written_back(0, snap.generation, &snap.dirty, snap.last_seq);
        assert_eq!(state(&c, 0), (vec![(0, 8)], 2), "the new line's write was marked written back");
    }

    /// Waits (up to a bound far above what a fix takes) for one completion.
    fn wait_one(q: &mut crate::volume::Queue) -> crate::Completion {
        use crate::io::request::BlockQueue;
        let mut out = Vec::new();
        let t0 = crate::clock::now();
        while out.is_empty() && crate::clock::since(t0) < std::time::Duration::from_secs(30) {
            q.wait_event(&mut out, None, std::time::Duration::from_millis(100));
        }
        out.pop().expect("no completion within 30 s: a writer held for room waits for ever")
    }

    /// A first write that fills the dirty limit of one line (acknowledged:
    /// write-back), then a second into the same line, held for room: its
    /// completion.
    fn fill_then_write(q: &mut crate::volume::Queue, line: u64) -> crate::Completion {
        use crate::io::request::BlockQueue;
        q.push(Request::write(0, line as usize, IoBuf::new(line as usize), 1)).unwrap();
        let c = wait_one(q);
        assert_eq!((c.tag, c.result.as_ref().ok()), (1, Some(&(line as usize))), "{:?}", c.result);
        q.push(Request::write(0, 4096, IoBuf::new(4096), 2)).unwrap();
        wait_one(q)
    }

    /// A write-back cache over a volume that has failed (a RAID 5 x3 that
    /// lost two members): the writer held for room (the dirty limit is one
    /// line, which a first write filled) and every write and flush after it
    /// fail with EIO, promptly, as on the volume without a cache; the dirty
    /// line stays counted and is reported. Before, the flusher retried its
    /// pass every 200 ms for ever and the held writer waited for room that
    /// never came (the simulation's seed 12103002141582754994).
    #[test]
    fn writers_held_for_room_fail_once_the_volume_below_has_failed() {
        use crate::io::request::BlockQueue;
        use crate::raid::engine::Shared;
        use crate::raid::health::Health;
        let spec = MemberSpec::Mem(MemSpec { size: DATA_OFFSET + (4 << 20), limits: Default::default() });
        let members = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
        let health = Arc::new(Health::new(3));
        let g = Geometry::new(Level::Raid5, 3, 64 << 10, 4 << 20).unwrap();
        let v = crate::Volume::with_state(Arc::new(members), g, DATA_OFFSET, Shared { health: health.clone(), bitmap: None }).unwrap();
        let line = Cache::line_for(v.raid());
        v.enable_cache(CacheConfig { mode: CacheMode::WriteBack, size: 4 * line, dirty_limit: line }).unwrap();
        health.fail(1).unwrap();
        health.fail(2).unwrap();
        let mut q = v.queue(4).unwrap();
        // The first write fills the dirty limit; the second, into the same
        // line, is held for room (or, once the flusher has seen the
        // failure, refused at once).
        let c = fill_then_write(&mut q, line);
        let e = c.result.expect_err("a write into a failed volume succeeded");
        assert_eq!((c.tag, e.kind()), (2, crate::ErrorKind::Io), "{e}");
        for (tag, req) in [(3, Request::write(1 << 20, 4096, IoBuf::new(4096), 3)), (4, Request::flush(4))] {
            q.push(req).unwrap();
            let c = wait_one(&mut q);
            let e = c.result.expect_err("a request on a failed volume succeeded");
            assert_eq!((c.tag, e.kind()), (tag, crate::ErrorKind::Io), "{e}");
        }
        let cache = v.cache().expect("a cache");
        assert_eq!(cache.stats().dirty_bytes, line, "the dirty line is not counted any more");
        let lost = cache.lost_writes().expect("the lost writes are reported");
        assert!(lost.contains("has failed") && lost.contains(&format!("{line} dirty bytes")), "{lost}");
    }

    /// A write-back cache over a RAID 0 whose member has lost power: its
    /// writes fail (EIO), but no member is failed (RAID 0 fails the I/O,
    /// not the member), so the volume below has not "failed" and the
    /// flusher retries its pass. The writer held for room fails with the
    /// flusher's error instead of waiting for ever (the simulation's seed
    /// 10870781738340873392: a power cut under RAID 0 x3 with a journal).
    #[test]
    fn writers_held_for_room_fail_once_the_write_back_lost_writes() {
        use crate::io::sim::{SimConfig, SimDrive};
        use crate::raid::engine::Shared;
        use crate::raid::health::Health;
        let size = DATA_OFFSET + (4 << 20);
        let (drives, members): (Vec<_>, Vec<_>) = (0..2).map(|i| SimDrive::open(SimConfig::new(size, i)).unwrap()).unzip();
        let health = Arc::new(Health::new(2));
        let g = Geometry::new(Level::Raid0, 2, 64 << 10, 4 << 20).unwrap();
        let v = crate::Volume::with_state(Arc::new(members), g, DATA_OFFSET, Shared { health: health.clone(), bitmap: None }).unwrap();
        let line = Cache::line_for(v.raid());
        v.enable_cache(CacheConfig { mode: CacheMode::WriteBack, size: 4 * line, dirty_limit: line }).unwrap();
        drives[0].power_off();
        drives[1].power_off();
        let mut q = v.queue(4).unwrap();
        // The first write fills the dirty limit (acknowledged: write-back);
        // the second is held for room the flusher cannot make.
        let c = fill_then_write(&mut q, line);
        let e = c.result.expect_err("a write held for room succeeded with every member off");
        assert_eq!((c.tag, e.kind()), (2, crate::ErrorKind::Io), "{e}");
        assert!(health.writable(0) && health.writable(1), "RAID 0 fails I/Os, not members");
        assert!(v.cache().unwrap().lost_writes().is_some(), "the lost write-back is reported");
    }
}
