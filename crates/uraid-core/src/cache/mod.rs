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

pub mod journal;
pub mod queue;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::io::request::{Op, Request};
use crate::raid::engine::RaidVolume;
use crate::{bail, IoBuf, Result};

/// Sector size the cache tracks validity and dirtiness in (bytes).
pub const CACHE_SECTOR: u64 = 512;
/// How often the flusher looks for dirty lines when nobody asks.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// A line dirty in part is written back once it has been dirty this long
/// (ns), unless it fills up first (then it goes as a whole line at the next
/// look), a flush asks, or the dirty bytes pass half the limit.
pub const DIRTY_EXPIRE_NS: u64 = 500_000_000;
/// Default cache size in bytes.
pub const DEFAULT_CACHE_SIZE: u64 = 256 << 20;
/// Default dirty limit in bytes.
pub const DEFAULT_DIRTY_LIMIT: u64 = 64 << 20;
const SHARDS: usize = 64;
/// Member requests the flusher keeps in flight.
const FLUSH_DEPTH: usize = 16;

/// What a volume's cache does, as stored in the volume table (one byte).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// No cache (0, the default).
    #[default]
    Off,
    /// Reads cached; writes go straight to the members (1).
    WriteThrough,
    /// Writes acknowledged from memory and written back in the background;
    /// un-flushed writes are lost on a crash or power loss (2).
    WriteBack,
    /// Write-back with a journal (3): every write is recorded durably on a
    /// journal device before it is acknowledged ([`crate::cache::journal`]), so
    /// none is lost, and RAID 5/6 lines are recorded whole before their
    /// member writes, which closes the write hole.
    Journal,
}

impl CacheMode {
    /// The byte stored in the volume table.
    pub fn to_u8(self) -> u8 {
        match self {
            CacheMode::Off => 0,
            CacheMode::WriteThrough => 1,
            CacheMode::WriteBack => 2,
            CacheMode::Journal => 3,
        }
    }
    /// The mode stored as `b`. Errors: `Superblock` for an unknown value.
    pub fn from_u8(b: u8) -> Result<CacheMode> {
        match b {
            0 => Ok(CacheMode::Off),
            1 => Ok(CacheMode::WriteThrough),
            2 => Ok(CacheMode::WriteBack),
            3 => Ok(CacheMode::Journal),
            _ => bail!(
                Superblock,
                "unknown cache mode {b} in the volume table (this uraid knows 0 off, 1 writethrough, 2 writeback, 3 journal)"
            ),
        }
    }
    /// The name users type: off, writethrough, writeback, journal.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Off => "off",
            CacheMode::WriteThrough => "writethrough",
            CacheMode::WriteBack => "writeback",
            CacheMode::Journal => "journal",
        }
    }

    /// True for the modes that acknowledge writes from memory.
    pub fn writes_back(self) -> bool {
        matches!(self, CacheMode::WriteBack | CacheMode::Journal)
    }
}

impl std::str::FromStr for CacheMode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<CacheMode> {
        match s {
            "off" | "none" => Ok(CacheMode::Off),
            "writethrough" | "wt" => Ok(CacheMode::WriteThrough),
            "writeback" | "wb" => Ok(CacheMode::WriteBack),
            "journal" | "writeback-journal" => Ok(CacheMode::Journal),
            _ => bail!(InvalidInput, "unknown cache mode '{s}'; use off, writethrough, writeback or journal"),
        }
    }
}

/// How a volume's cache is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CacheConfig {
    /// The mode.
    pub mode: CacheMode,
    /// Most bytes of lines held (clean and dirty).
    pub size: u64,
    /// Most dirty bytes; writers wait beyond it.
    pub dirty_limit: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { mode: CacheMode::Off, size: DEFAULT_CACHE_SIZE, dirty_limit: DEFAULT_DIRTY_LIMIT }
    }
}

/// Counters of a cache, as `uraid status` and the benchmark report show.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CacheStats {
    /// The mode (serialized by its name: off, writethrough, writeback,
    /// journal).
    pub mode: CacheMode,
    /// Bytes written to the cache and not yet to the members.
    pub dirty_bytes: u64,
    /// Bytes of lines held.
    pub cached_bytes: u64,
    /// Reads served from the cache.
    pub read_hits: u64,
    /// Reads that went to the members.
    pub read_misses: u64,
    /// Hits per read, 0 to 1.
    pub hit_ratio: f64,
    /// Writes taken into the cache.
    pub writes: u64,
    /// Member writes the flusher issued for them (fewer than `writes`
    /// when writes were merged).
    pub writebacks: u64,
    /// Of those, whole lines (full stripes on RAID 5/6).
    pub full_lines: u64,
    /// Writes merged into a line that was already dirty (each write once).
    pub merged: u64,
    /// Times a writer waited for the flusher (dirty limit or size).
    pub throttled: u64,
    /// Writes sent straight to the members because the cache was full and
    /// held nothing of their range.
    pub written_around: u64,
    /// Journal mode: records of writes written to the journal.
    pub journal_records: u64,
    /// Journal mode: RAID 5/6 lines dirty in part recorded whole before
    /// their member writes (stripe records), completed by member reads
    /// first.
    pub stripe_records: u64,
    /// Journal mode: RAID 5/6 lines dirty in a few rows whose rows (of
    /// every chunk) were recorded before their member writes (rows
    /// records), completed by member reads first.
    pub rows_records: u64,
    /// Journal mode: the journal is lost (its member failed or was
    /// replaced, or a write to it failed); writes are acknowledged only
    /// once on the members and flushed, until it is back.
    pub journal_lost: bool,
}

/// A member write of the flusher in flight: line `idx` as of
/// `generation` (holding every write up to `last_seq`), the sectors
/// `bits` it cleans.
struct InFlight {
    idx: u64,
    generation: u64,
    bits: Vec<u64>,
    last_seq: u64,
}

/// What [`Cache::record_line`] did with a line.
enum Recorded {
    /// Recorded as the line was then, whole (`whole`) or the rows of its
    /// dirty sectors (a rows record): its `generation`, `dirty` sectors
    /// (all in the rows recorded) and newest write `last_seq`.
    Line { generation: u64, dirty: Vec<u64>, last_seq: u64, whole: bool },
    /// Nothing of it is dirty any more.
    Clean,
    /// The log has no room for it now.
    Full,
    /// A zeroing sent on to the members overlaps it, or started while its
    /// missing sectors were read: try again at the next pass.
    Later,
}

/// A dirty line as the flusher took it.
struct Snap {
    idx: u64,
    generation: u64,
    data: IoBuf,
    dirty: Vec<u64>,
    valid: Vec<u64>,
    last_seq: u64,
}

struct Line {
    data: IoBuf,
    /// One bit per sector.
    valid: Vec<u64>,
    dirty: Vec<u64>,
    /// Set anew by every write into the line (and at its making): a
    /// generation no line had before ([`Cache::next_generation`]).
    generation: u64,
    /// Reads in flight that will lay this line over their result.
    readers: u32,
    /// Sequence number of the oldest write the dirty sectors carry (for
    /// the flusher's order), 0 when clean.
    oldest: u64,
    /// When it became dirty ([`now_ns`](crate::io::member::now_ns)).
    dirty_since: u64,
    /// Sequence number of the newest write copied in.
    last_seq: u64,
    last_use: u64,
    /// The generation the flusher last took the line at (its snapshot).
    snapped: u64,
    /// Sectors written since that snapshot: on a write-back of the
    /// snapshot they stay dirty, the others are on the members
    /// ([`Cache::written_back`]).
    fresh: Vec<u64>,
}

impl Line {
    fn count(bits: &[u64]) -> u64 {
        bits.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// The flusher takes the line as it is now: writes from now on are
    /// `fresh`.
    fn snapped(&mut self) {
        self.snapped = self.generation;
        self.fresh.iter_mut().for_each(|w| *w = 0);
    }
}

#[derive(Default)]
struct Shard {
    lines: HashMap<u64, Line>,
}

/// A volume's cache. Made by [`Volume::enable_cache`]; the queues of the
/// volume use it on their own.
pub struct Cache {
    cfg: CacheConfig,
    /// Bytes per line.
    line: u64,
    sectors: usize,
    shards: Box<[Mutex<Shard>]>,
    dirty: AtomicU64,
    cached: AtomicU64,
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
    /// The flusher thread panicked: nothing is written back any more, so
    /// every request but a read fails with `failed`'s error.
    dead: AtomicBool,
    clock: AtomicU64,
    /// The last line generation handed out: generations are unique across
    /// lines and their lives, so a write-back in flight for a line dropped
    /// and made again never matches the new line's.
    generations: AtomicU64,
    /// The volume the flusher writes through (a volume rebuilt over new
    /// members takes the cache over: [`Volume::adopt_cache`]).
    target: Mutex<Weak<RaidVolume>>,
    stats: Mutex<CacheStats>,
    pool: Mutex<Vec<IoBuf>>,
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

/// The runs `[a, b)` of set bits among the first `n`.
fn runs_of(bits: &[u64], n: usize) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < n {
        if is_set(bits, i) {
            let s = i;
            while i < n && is_set(bits, i) {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    runs
}

fn set_bits(bits: &mut [u64], a: usize, b: usize) {
    for i in a..b {
        bits[i / 64] |= 1 << (i % 64);
    }
}

fn all_set(bits: &[u64], a: usize, b: usize) -> bool {
    (a..b).all(|i| bits[i / 64] & (1 << (i % 64)) != 0)
}

fn is_set(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
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

    /// Checks `cfg` for a cache on `vol`. Errors: `InvalidInput` when the
    /// size or the dirty limit cannot hold one line, or the limit passes
    /// the size.
    pub fn check_config(vol: &RaidVolume, cfg: &CacheConfig) -> Result<()> {
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
        Self::check_config(vol, &cfg)?;
        if (cfg.mode == CacheMode::Journal) != journal.is_some() {
            bail!(InvalidInput, "the journal cache mode needs a journal device, and only it takes one");
        }
        let line = Self::line_for(vol);
        let sectors = (line / CACHE_SECTOR) as usize;
        Ok(Cache {
            cfg,
            line,
            sectors,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            dirty: AtomicU64::new(0),
            cached: AtomicU64::new(0),
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
            clock: AtomicU64::new(0),
            generations: AtomicU64::new(0),
            target: Mutex::new(Weak::new()),
            stats: Mutex::new(CacheStats { mode: cfg.mode, ..Default::default() }),
            pool: Mutex::new(Vec::new()),
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

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        let mut s = *lock(&self.stats);
        s.dirty_bytes = self.dirty.load(Ordering::Relaxed);
        s.cached_bytes = self.cached.load(Ordering::Relaxed);
        let reads = s.read_hits + s.read_misses;
        s.hit_ratio = if reads == 0 { 0.0 } else { s.read_hits as f64 / reads as f64 };
        s.journal_lost = self.journal_lost();
        s
    }

    fn shard(&self, idx: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[(idx.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS])
    }

    /// Lines `[first, last]` of `[offset, offset + len)`, and for each the
    /// sector range inside it and the byte offset in the request.
    fn spans(&self, offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> + '_ {
        let end = offset + len as u64;
        let first = offset / self.line;
        let last = (end - 1) / self.line;
        (first..=last).map(move |idx| {
            let base = idx * self.line;
            let a = offset.max(base);
            let b = end.min(base + self.line);
            (idx, ((a - base) / CACHE_SECTOR) as usize, ((b - base) / CACHE_SECTOR) as usize, (a - offset) as usize)
        })
    }

    /// How many lines of `[offset, offset + len)` the cache does not hold.
    fn uncached_lines(&self, offset: u64, len: usize) -> u64 {
        self.spans(offset, len).filter(|&(idx, ..)| !self.shard(idx).lines.contains_key(&idx)).count() as u64
    }

    /// A new line generation (see `generations`).
    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn new_line(&self) -> Line {
        let data = lock(&self.pool).pop().unwrap_or_else(|| IoBuf::new(self.line as usize));
        let words = self.sectors.div_ceil(64);
        self.cached.fetch_add(self.line, Ordering::Relaxed);
        Line { data, valid: vec![0; words], dirty: vec![0; words], generation: self.next_generation(), readers: 0, oldest: 0, dirty_since: 0, last_seq: 0, last_use: 0, snapped: 0, fresh: vec![0; words] }
    }

    /// Offers request `req` (with its data) to the cache; see [`Taken`].
    pub(crate) fn take(&self, req: &mut Request) -> Taken {
        if self.dead.load(Ordering::Acquire) && req.op != Op::Read {
            if let Some(e) = lock(&self.failed).clone() {
                return Taken::Failed(e);
            }
        }
        match (req.op, self.cfg.mode) {
            (Op::Flush, CacheMode::WriteBack) => Taken::Durable(self.want_all()),
            // A lost journal: what it held is only in the cache.
            (Op::Flush, CacheMode::Journal) if self.journal_lost() => Taken::Durable(self.want_all()),
            // Journal: every acknowledged write is durable in the journal
            // already; the members' flush covers discards and zeroes.
            (Op::Write, CacheMode::WriteBack | CacheMode::Journal) => self.write_back(req),
            // (A FUA one under plain write-back waits for the write-back
            // below: its zeroes must be durable when it completes.)
            (Op::WriteZeroes { .. }, CacheMode::WriteBack | CacheMode::Journal)
                if !(self.journal_lost() || req.fua && self.cfg.mode == CacheMode::WriteBack) =>
            {
                self.zero(req)
            }
            // A discard's partial RAID 5/6 stripes are written as zeroes,
            // which a crash can tear: with the journal it goes as a zeroing
            // (the write hole stays closed; the whole stripes are still
            // discarded on the members).
            (Op::Discard, CacheMode::Journal) if !self.journal_lost() => self.zero(req),
            (Op::Discard | Op::WriteZeroes { .. }, CacheMode::WriteBack | CacheMode::Journal) => {
                Taken::DurableThenMembers(self.want_all())
            }
            (Op::Write | Op::Discard | Op::WriteZeroes { .. }, _) => {
                // Goes to the members; what the cache holds of the range
                // is dropped (write-back: written back first).
                self.invalidate(req.offset, req.len);
                Taken::Members { pins: Vec::new(), epoch: 0 }
            }
            (Op::Read, _) => self.read(req),
            (Op::Flush, _) => Taken::Members { pins: Vec::new(), epoch: 0 },
        }
    }

    fn write_back(&self, req: &mut Request) -> Taken {
        let lines = self.spans(req.offset, req.len).count() as u64;
        let new_lines = self.uncached_lines(req.offset, req.len);
        let dirty = self.dirty.load(Ordering::Relaxed);
        let journal = self.live_journal();
        // Without its journal, journal mode still acknowledges only what
        // survives a crash: each write waits for the members' flush.
        let fua = req.fua || (self.journal.is_some() && journal.is_none());
        if let Some(j) = journal {
            if !j.can_hold(req.len as u64) {
                return Taken::Failed(crate::Error::new(
                    crate::ErrorKind::InvalidInput,
                    format!("a write of {} bytes does not fit the journal's log ({} bytes); use a larger journal device", req.len, j.log_size()),
                ));
            }
        }
        if dirty + req.len as u64 > self.cfg.dirty_limit && dirty > 0
            || self.cached.load(Ordering::Relaxed) + new_lines * self.line > self.cfg.size && !self.evict(new_lines * self.line)
            || journal.is_some_and(|j| !j.fits(req.len as u64, self.promise_for(lines)))
        {
            if new_lines == lines && !fua && journal.is_none() {
                // Full, and nothing of the range is cached (so no older
                // dirty data can be written back over it): the write goes
                // around the cache, straight to the members.
                lock(&self.stats).written_around += 1;
                self.wt_epoch.fetch_add(1, Ordering::AcqRel);
                self.kick();
                return Taken::Members { pins: Vec::new(), epoch: 0 };
            }
            return self.held_for_room();
        }
        let order = journal.map(|_| lock(&self.jorder));
        let gate = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::AcqRel);
        let place = match journal {
            Some(j) => match j.reserve(req.len as u64, seq, Some(self.promise_for(lines))) {
                Some(r) => Some((j, r)),
                None => {
                    // The log filled since the look above (its sequence
                    // number stays unused: a gap is harmless).
                    drop((gate, order));
                    return self.held_for_room();
                }
            },
            None => None,
        };
        let data = req.buf.as_ref().expect("a write has a buffer");
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut merged = 0;
        for (idx, a, b, off) in self.spans(req.offset, req.len) {
            let mut sh = self.shard(idx);
            let line = sh.lines.entry(idx).or_insert_with(|| self.new_line());
            let bytes = (b - a) * CACHE_SECTOR as usize;
            line.data[a * CACHE_SECTOR as usize..][..bytes].copy_from_slice(&data[off..off + bytes]);
            if self.made_dirty(line, a, b, seq, now) {
                merged += 1;
            }
        }
        drop((gate, order));
        {
            let mut s = lock(&self.stats);
            s.writes += 1;
            // One write counts once, however many dirty lines it joined.
            s.merged += (merged > 0) as u64;
        }
        if self.dirty.load(Ordering::Relaxed) * 2 > self.cfg.dirty_limit {
            self.kick();
        }
        if let Some((j, r)) = place {
            // Acknowledged once the record is durable (FUA included).
            if j.write(r, crate::cache::journal::RecordKind::Data, req.offset, seq, &data[..req.len]).is_err() {
                // The journal is lost (it said why): the write is in the
                // cache, and is acknowledged once it is on the members.
                self.live_journal();
                self.want(seq + 1);
                return Taken::Durable(seq + 1);
            }
            lock(&self.stats).journal_records += 1;
            return Taken::Done(req.len);
        }
        if fua {
            self.want(seq + 1);
            return Taken::Durable(seq + 1);
        }
        Taken::Done(req.len)
    }

    /// A write-zeroes under write-back (not FUA) or the journal (not
    /// lost), or a discard under the journal (it reads back as zeroes).
    /// Takes the next write sequence number and records the zeroing
    /// on the journal (a zeroes record of the whole range: replay zeroes
    /// it in its place among the writes). The lines it covers in part (at
    /// most its first and last) get zeroes as a write of zeroes would
    /// (dirty, in the cache: the flusher records and writes them as it does
    /// any line, so no stripe is ever zeroed in part on the members and
    /// replay never has to rebuild a member's chunk from parity torn by a
    /// zeroing: the RAID 5/6 write hole stays closed). The whole lines go
    /// to the members at once (full stripes), as a zeroing in flight until
    /// it completes ([`sent_on_done`](Self::sent_on_done)); those the cache
    /// holds get zeroes too (dirty, so the flusher writes them after any
    /// older bytes of theirs it may have in flight). Lines the cache does
    /// not hold have no write of the flusher in flight (a line is dropped
    /// only once clean). Waits for room as a write does.
    fn zero(&self, req: &mut Request) -> Taken {
        let journal = self.live_journal();
        let end = req.offset + req.len as u64;
        // The whole lines [mid_a, mid_b); the parts before and after.
        let mid_a = req.offset.next_multiple_of(self.line).min(end);
        let mid_b = (end / self.line * self.line).max(mid_a);
        let parts: Vec<(u64, usize)> =
            [(req.offset, mid_a), (mid_b, end)].into_iter().filter(|(a, b)| a < b).map(|(a, b)| (a, (b - a) as usize)).collect();
        let part_bytes: u64 = parts.iter().map(|&(_, n)| n as u64).sum();
        let part_lines: u64 = parts.iter().map(|&(a, n)| self.spans(a, n).count() as u64).sum();
        let new_lines: u64 = parts.iter().map(|&(a, n)| self.uncached_lines(a, n)).sum();
        // The log room the stripe records of the lines this makes dirty
        // may take: the partial lines only (at most two; the whole lines
        // it zeroes in the cache are dirty already, see below).
        let ahead = self.promise_for(part_lines);
        if new_lines * self.line > self.cfg.size {
            // The partial lines can never fit (a cache of one line).
            if journal.is_some() {
                return Taken::Failed(crate::Error::new(
                    crate::ErrorKind::InvalidInput,
                    format!(
                        "a zeroing or discard that covers two lines in part needs a cache of two lines ({} bytes); \
                         this one holds {} bytes: set a larger one with 'uraid config --cache-size'",
                        2 * self.line,
                        self.cfg.size
                    ),
                ));
            }
            return Taken::DurableThenMembers(self.want_all());
        }
        let dirty = self.dirty.load(Ordering::Relaxed);
        if dirty + part_bytes > self.cfg.dirty_limit && dirty > 0
            || self.cached.load(Ordering::Relaxed) + new_lines * self.line > self.cfg.size && !self.evict(new_lines * self.line)
            || journal.is_some_and(|j| !j.fits(0, ahead))
        {
            return self.held_for_room();
        }
        let order = journal.map(|_| lock(&self.jorder));
        let gate = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::AcqRel);
        let place = match journal {
            Some(j) => match j.reserve(0, seq, Some(ahead)) {
                Some(r) => Some((j, r)),
                None => {
                    drop((gate, order));
                    return self.held_for_room();
                }
            },
            None => None,
        };
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        for &(a, n) in &parts {
            for (idx, sa, sb, _) in self.spans(a, n) {
                let mut sh = self.shard(idx);
                let line = sh.lines.entry(idx).or_insert_with(|| self.new_line());
                line.data[sa * CACHE_SECTOR as usize..sb * CACHE_SECTOR as usize].fill(0);
                self.made_dirty(line, sa, sb, seq, now);
            }
        }
        // Listed with the gate held and the sequence number taken (under
        // `jorder` in journal mode, no write is half copied in): a write
        // before this one is in these lines, one after it is not yet.
        let held = if mid_b > mid_a { self.held_lines(mid_a, (mid_b - mid_a) as usize) } else { Vec::new() };
        for idx in held {
            let base = idx * self.line;
            let a = ((mid_a.max(base) - base) / CACHE_SECTOR) as usize;
            let b = ((mid_b.min(base + self.line) - base) / CACHE_SECTOR) as usize;
            let mut sh = self.shard(idx);
            // Dropped since it was listed: nothing of it to zero.
            let Some(line) = sh.lines.get_mut(&idx) else { continue };
            if line.oldest == 0 {
                // Clean: nothing of it is in flight; what it held of the
                // range is no longer valid (reads go to the members).
                for i in a..b {
                    line.valid[i / 64] &= !(1 << (i % 64));
                }
                line.generation = self.next_generation();
                continue;
            }
            // Dirty: zeroes, written by the flusher after any older bytes
            // of the line it may have in flight.
            line.data[a * CACHE_SECTOR as usize..b * CACHE_SECTOR as usize].fill(0);
            self.made_dirty(line, a, b, seq, now);
        }
        if mid_b > mid_a {
            lock(&self.zeroing).push((mid_a, mid_b, seq));
            self.zero_epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.wt_epoch.fetch_add(1, Ordering::AcqRel);
        drop((gate, order));
        lock(&self.stats).writes += 1;
        if let Some((j, r)) = place {
            if j.write_zeroes(r, req.offset, req.len as u64, seq).is_ok() {
                lock(&self.stats).journal_records += 1;
            } else {
                // The journal is lost (it said why): the zeroing is
                // acknowledged once it is on the members and flushed, as
                // every write is then.
                self.live_journal();
                if mid_b > mid_a {
                    self.sent_on_done(req.op, mid_a, (mid_b - mid_a) as usize);
                }
                return Taken::DurableThenMembers(self.want_all());
            }
        }
        if mid_b == mid_a {
            return Taken::Done(req.len);
        }
        Taken::MembersPart { offset: mid_a, len: (mid_b - mid_a) as usize }
    }

    /// A writer waits for room: counted, and the flusher pressed to write
    /// every dirty line at its next pass ([`Taken::Full`]).
    fn held_for_room(&self) -> Taken {
        lock(&self.stats).throttled += 1;
        self.starved.store(true, Ordering::Release);
        self.kick();
        Taken::Full
    }

    /// True while a zeroing this cache sent on overlaps line `idx`.
    fn zeroing_over(&self, idx: u64) -> bool {
        let (a, b) = (idx * self.line, (idx + 1) * self.line);
        lock(&self.zeroing).iter().any(|&(s, e, _)| s < b && a < e)
    }

    /// The lines of `[offset, offset + len)` the cache holds now: looked up
    /// one by one, or, for a range of more lines than the cache holds, by
    /// a walk over what it holds (a zeroing of a whole device costs the
    /// cache's size, not the device's).
    fn held_lines(&self, offset: u64, len: usize) -> Vec<u64> {
        if len == 0 {
            return Vec::new();
        }
        let (first, last) = (offset / self.line, (offset + len as u64 - 1) / self.line);
        if last - first < self.cached.load(Ordering::Relaxed) / self.line {
            return (first..=last).filter(|idx| self.shard(*idx).lines.contains_key(idx)).collect();
        }
        let mut v: Vec<u64> = Vec::new();
        for sh in self.shards.iter() {
            v.extend(lock(sh).lines.keys().filter(|&&idx| (first..=last).contains(&idx)));
        }
        v
    }

    /// Sectors `a..b` of `line` were just written by write `seq` (at
    /// clock `now`): marks them valid and dirty. True when the line was
    /// dirty already (the write merged into it).
    fn made_dirty(&self, line: &mut Line, a: usize, b: usize, seq: u64, now: u64) -> bool {
        let before = Line::count(&line.dirty);
        set_bits(&mut line.valid, a, b);
        set_bits(&mut line.dirty, a, b);
        set_bits(&mut line.fresh, a, b);
        self.dirty.fetch_add((Line::count(&line.dirty) - before) * CACHE_SECTOR, Ordering::Relaxed);
        line.generation = self.next_generation();
        line.last_seq = seq;
        if line.oldest == 0 {
            line.oldest = seq;
            line.dirty_since = crate::io::member::now_ns();
            // Promised whether or not the journal is lost now (it is
            // released the same way when the line is clean again).
            if let Some(j) = &self.journal {
                j.promise(self.promise_for(1));
            }
        }
        line.last_use = now;
        before > 0
    }

    /// Drops clean lines nobody reads, least recently used first, until
    /// `need` more bytes fit. True when they do.
    fn evict(&self, need: u64) -> bool {
        let mut cands: Vec<(u64, u64)> = Vec::new();
        for sh in self.shards.iter() {
            let sh = lock(sh);
            cands.extend(sh.lines.iter().filter(|(_, l)| l.oldest == 0 && l.readers == 0).map(|(&i, l)| (l.last_use, i)));
        }
        cands.sort_unstable();
        for (_, idx) in cands {
            if self.cached.load(Ordering::Relaxed) + need <= self.cfg.size {
                break;
            }
            let mut sh = self.shard(idx);
            if sh.lines.get(&idx).is_some_and(|l| l.oldest == 0 && l.readers == 0) {
                let l = sh.lines.remove(&idx).expect("present");
                self.cached.fetch_sub(self.line, Ordering::Relaxed);
                lock(&self.pool).push(l.data);
            }
        }
        self.cached.load(Ordering::Relaxed) + need <= self.cfg.size
    }

    /// A write or discard that bypasses the cache: write-through drops the
    /// range's valid bits; write-back cannot have dirty data there that
    /// would later overwrite it, so the dirty sectors of the range are
    /// dropped too (the new data supersedes them).
    pub(crate) fn invalidate(&self, offset: u64, len: usize) {
        self.wt_epoch.fetch_add(1, Ordering::AcqRel);
        if len == 0 {
            return;
        }
        for (idx, a, b, _) in self.spans(offset, len) {
            let mut sh = self.shard(idx);
            if let Some(line) = sh.lines.get_mut(&idx) {
                let mut dropped = 0;
                for i in a..b {
                    let (w, bit) = (i / 64, 1u64 << (i % 64));
                    line.valid[w] &= !bit;
                    if line.dirty[w] & bit != 0 {
                        line.dirty[w] &= !bit;
                        dropped += 1;
                    }
                }
                line.generation = self.next_generation();
                self.dirty.fetch_sub(dropped * CACHE_SECTOR, Ordering::Relaxed);
                if Line::count(&line.dirty) == 0 && line.oldest != 0 {
                    line.oldest = 0;
                    self.release_promise();
                }
            }
        }
    }

    fn read(&self, req: &mut Request) -> Taken {
        let epoch = self.wt_epoch.load(Ordering::Acquire);
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let spans: Vec<_> = self.spans(req.offset, req.len).collect();
        let hit = spans.iter().all(|&(idx, a, b, _)| self.shard(idx).lines.get(&idx).is_some_and(|l| all_set(&l.valid, a, b)));
        if hit {
            let buf = req.buf.as_mut().expect("a read has a buffer");
            let mut complete = true;
            for &(idx, a, b, off) in &spans {
                let mut sh = self.shard(idx);
                match sh.lines.get_mut(&idx) {
                    Some(l) if all_set(&l.valid, a, b) => {
                        let bytes = (b - a) * CACHE_SECTOR as usize;
                        buf[off..off + bytes].copy_from_slice(&l.data[a * CACHE_SECTOR as usize..][..bytes]);
                        l.last_use = now;
                    }
                    _ => complete = false, // evicted meanwhile
                }
            }
            if complete {
                lock(&self.stats).read_hits += 1;
                return Taken::Done(req.len);
            }
        }
        lock(&self.stats).read_misses += 1;
        let mut pins = Vec::new();
        for &(idx, ..) in &spans {
            if let Some(l) = self.shard(idx).lines.get_mut(&idx) {
                l.readers += 1;
                pins.push(idx);
            }
        }
        Taken::Members { pins, epoch }
    }

    /// A read that went to the members completed (`ok`) into `buf`: lays
    /// the valid sectors of its pinned lines over it and unpins them; a
    /// write-through cache keeps what was read when no write moved since.
    pub(crate) fn finish_read(&self, offset: u64, buf: &mut [u8], pins: &[u64], epoch: u64, ok: bool) {
        let len = buf.len();
        if ok && self.cfg.mode == CacheMode::WriteThrough && self.wt_epoch.load(Ordering::Acquire) == epoch {
            // Room for the lines this read brings in (least used go first).
            self.evict(self.uncached_lines(offset, len) * self.line);
        }
        for (idx, a, b, off) in self.spans(offset, len) {
            let pinned = pins.contains(&idx);
            let mut sh = self.shard(idx);
            if ok {
                if let Some(l) = sh.lines.get_mut(&idx) {
                    if pinned {
                        for i in a..b {
                            if is_set(&l.valid, i) {
                                let (s, o) = (i * CACHE_SECTOR as usize, off + (i - a) * CACHE_SECTOR as usize);
                                buf[o..o + CACHE_SECTOR as usize].copy_from_slice(&l.data[s..s + CACHE_SECTOR as usize]);
                            }
                        }
                    }
                }
                let keep = self.cfg.mode == CacheMode::WriteThrough
                    && self.wt_epoch.load(Ordering::Acquire) == epoch
                    && (sh.lines.contains_key(&idx) || self.cached.load(Ordering::Relaxed) + self.line <= self.cfg.size);
                if keep {
                    let l = sh.lines.entry(idx).or_insert_with(|| self.new_line());
                    let bytes = (b - a) * CACHE_SECTOR as usize;
                    l.data[a * CACHE_SECTOR as usize..][..bytes].copy_from_slice(&buf[off..off + bytes]);
                    set_bits(&mut l.valid, a, b);
                }
            }
            if pinned {
                if let Some(l) = sh.lines.get_mut(&idx) {
                    l.readers -= 1;
                }
            }
        }
    }

    /// True once every write below sequence `target` is durable; the
    /// flusher's error, if it lost writes.
    pub(crate) fn durable(&self, target: u64) -> Option<std::result::Result<(), crate::Error>> {
        if let Some(e) = lock(&self.failed).clone() {
            return Some(Err(e));
        }
        if lock(&self.lost_drain).is_some() {
            // A loss of the journal is not recorded yet: nothing is
            // acknowledged as durable until it is (a flusher pass that
            // started before the loss was seen may have made `target`
            // durable, but the write it covers was taken after the loss).
            return None;
        }
        (*lock(&self.durable) >= target).then_some(Ok(()))
    }

    /// A write, discard or zeroing that this cache sent on to the members
    /// (around a full cache, or after the write-back) completed: it takes a
    /// sequence number, so that a flush from now on waits for a pass that
    /// starts after it, and that pass flushes the members. (Without it, a
    /// flush after writes that only went around found its target already
    /// durable and flushed nothing: the writes stayed in the drives'
    /// volatile caches.)
    ///
    /// `op`, `offset`, `len`: the request's; a zeroing in flight
    /// ([`zero`](Self::zero)) ends here.
    pub(crate) fn sent_on_done(&self, op: Op, offset: u64, len: usize) {
        if matches!(op, Op::WriteZeroes { .. } | Op::Discard) {
            let mut z = lock(&self.zeroing);
            if let Some(i) = z.iter().position(|&(a, b, _)| (a, b) == (offset, offset + len as u64)) {
                z.swap_remove(i);
            }
        }
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// True when a writer held for room may try again.
    pub(crate) fn has_room(&self) -> bool {
        // A dead flusher makes no room: held writers go on to fail.
        self.dead.load(Ordering::Acquire) || self.dirty.load(Ordering::Relaxed) < self.cfg.dirty_limit && self.live_journal().is_none_or(|j| j.pressure() * 2 < j.log_size())
    }

    /// A sequence number below which every write is on the members (or
    /// was superseded there): the oldest write a dirty line carries or a
    /// zeroing in flight has, or the next number when there is none.
    fn clean_mark(&self) -> u64 {
        let _g = self.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut mark = self.seq.load(Ordering::Acquire);
        // A zeroing still on its way to the members is not there yet (one
        // that completed before this look is covered by the members' flush
        // that follows it).
        for &(_, _, seq) in lock(&self.zeroing).iter() {
            mark = mark.min(seq);
        }
        for sh in self.shards.iter() {
            for l in lock(sh).lines.values() {
                if l.oldest != 0 {
                    mark = mark.min(l.oldest);
                }
            }
        }
        mark
    }

    /// Asks the flusher for every write taken so far; returns the
    /// sequence number to wait for.
    fn want_all(&self) -> u64 {
        let target = self.seq.load(Ordering::Acquire);
        self.want(target);
        target
    }

    /// Journal mode: writes every write taken so far back to the members
    /// and retires its records (blocking). Other modes: nothing.
    pub(crate) fn drain(&self) -> Result<()> {
        if self.cfg.mode != CacheMode::Journal {
            return Ok(());
        }
        let target = self.want_all();
        loop {
            if let Some(r) = self.durable(target) {
                return r;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn want(&self, target: u64) {
        self.wanted.fetch_max(target, Ordering::AcqRel);
        self.kick();
    }

    fn kick(&self) {
        *lock(&self.kick) = true;
        self.kick_cv.notify_one();
    }

    /// The dirty lines to write back now, oldest first: every one when
    /// `all`, else those dirty as a whole or for [`DIRTY_EXPIRE_NS`].
    fn dirty_lines(&self, all: bool) -> Vec<Snap> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        let expired = crate::io::member::now_ns().saturating_sub(DIRTY_EXPIRE_NS);
        for sh in self.shards.iter() {
            v.extend(
                lock(sh)
                    .lines
                    .iter()
                    .filter(|(_, l)| l.oldest != 0 && (all || l.dirty_since <= expired || all_set(&l.dirty, 0, self.sectors)))
                    .map(|(&i, l)| (l.oldest, i)),
            );
        }
        v.sort_unstable();
        v.into_iter()
            .filter_map(|(_, idx)| {
                let mut sh = self.shard(idx);
                let l = sh.lines.get_mut(&idx)?;
                let mut copy = lock(&self.pool).pop().unwrap_or_else(|| IoBuf::new(self.line as usize));
                copy.copy_from_slice(&l.data);
                l.snapped();
                Some(Snap { idx, generation: l.generation, data: copy, dirty: l.dirty.clone(), valid: l.valid.clone(), last_seq: l.last_seq })
            })
            .collect()
    }

    /// The flusher wrote the sectors `bits` of line `idx` as of
    /// generation `generation` (its snapshot, holding every write up to
    /// `last_seq`): marks them clean, but for those a write came into
    /// since (`fresh`: they keep that write's bytes, dirty). Once no sector
    /// of the snapshot is dirty any more, the line's oldest write is after
    /// `last_seq`, so that the journal's records up to there can retire.
    ///
    /// Only then: a dirty sector must keep the record of its write in the
    /// journal. A line that stayed dirty whole after such a write-back was
    /// later written whole with no record of its own (it looked covered
    /// by its writes' records, but the older ones had retired); torn by a
    /// power cut, its degraded replay rebuilt the lost member's rows from
    /// torn parity.
    fn written_back(&self, idx: u64, generation: u64, bits: &[u64], last_seq: u64) {
        let mut sh = self.shard(idx);
        let Some(l) = sh.lines.get_mut(&idx) else { return };
        let same = l.generation == generation;
        if !same && l.snapped != generation {
            // Not the line's last snapshot (record_line took a newer one,
            // then the journal was lost and the pass wrote the older):
            // which sectors came since is not known, so none is cleaned;
            // the next pass writes the line again.
            return;
        }
        let n = Line::count(&l.dirty);
        for ((d, b), f) in l.dirty.iter_mut().zip(bits).zip(&l.fresh) {
            *d &= if same { !b } else { !(b & !f) };
        }
        let left = Line::count(&l.dirty);
        self.dirty.fetch_sub((n - left) * CACHE_SECTOR, Ordering::Relaxed);
        if left == 0 && l.oldest != 0 {
            l.oldest = 0;
            drop(sh);
            self.release_promise();
        } else if l.oldest != 0 && l.dirty.iter().zip(&l.fresh).all(|(d, f)| d & !f == 0) {
            l.oldest = l.oldest.max(last_seq + 1);
        }
    }

    /// Journal mode on RAID 5/6: the log bytes a line's stripe record
    /// takes, times `lines` (0 otherwise: no stripe records).
    fn promise_for(&self, lines: u64) -> u64 {
        match &self.journal {
            Some(j) if self.parity => lines * j.record_span(self.line),
            _ => 0,
        }
    }

    /// A dirty line became clean: its stripe record's promise goes back.
    fn release_promise(&self) {
        if let Some(j) = &self.journal {
            j.release(self.promise_for(1));
        }
    }

    /// One pass of the flusher over `vol` (a queue that bypasses the
    /// cache): writes back every line dirty when it starts, then, when a
    /// flush waits, flushes the members and moves the durable mark.
    ///
    /// Journal mode: a RAID 5/6 line dirty in part is first recorded
    /// ([`record_line`](Self::record_line)): a rows record, then its dirty
    /// sectors are written, or a stripe record, then it is written whole; every
    /// pass ends with a members' flush and a checkpoint that retires the
    /// records whose data is now on the members.
    fn pass(&self, vol: &Arc<RaidVolume>) -> Result<()> {
        let start_seq = {
            let _g = self.gate.write().unwrap_or_else(|e| e.into_inner());
            self.seq.load(Ordering::Acquire)
        };
        let journal = self.live_journal();
        let flush = self.wanted.load(Ordering::Acquire) > *lock(&self.durable);
        let pressed = self.dirty.load(Ordering::Relaxed) * 2 > self.cfg.dirty_limit
            || self.starved.swap(false, Ordering::AcqRel)
            || journal.is_some_and(|j| j.pressure() * 2 > j.log_size());
        let lines = self.dirty_lines(flush || pressed || self.closed.load(Ordering::Acquire));
        // Journal: records no dirty line carries (zeroes records over lines
        // the cache does not hold) retire at a checkpoint of their own.
        if lines.is_empty() && !flush && !journal.is_some_and(|j| j.used() > 0 && j.retirable(self.clean_mark())) {
            return Ok(());
        }
        if let Some(j) = journal {
            // Data in the snapshot had its record's place before it was
            // copied in: no member gets data whose record is not written.
            j.wait_written();
        }
        let mut q = vol.queue(FLUSH_DEPTH)?;
        let mut fill_q = if journal.is_some() && self.parity { Some(vol.queue(1)?) } else { None };
        let mut out = Vec::new();
        // Member writes in flight, by tag.
        let mut inflight: HashMap<u64, InFlight> = HashMap::new();
        let mut tag = 0u64;
        let mut first_err: Option<crate::Error> = None;
        // A line left for the next pass: the writes it holds are not on the
        // members, so this pass does not move the durable mark.
        let mut skipped = false;
        let sector = CACHE_SECTOR as usize;
        for Snap { idx, mut generation, mut data, dirty: mut bits, valid, mut last_seq } in lines {
            if first_err.is_some() {
                lock(&self.pool).push(data);
                continue;
            }
            if self.zeroing_over(idx) {
                // A zeroing on its way to the members: this line's writes
                // go after it (whichever came first, the outcome is then
                // what the cache holds, and what a replay makes).
                lock(&self.pool).push(data);
                skipped = true;
                continue;
            }
            let mut runs = runs_of(&bits, self.sectors);
            if let (Some(j), Some(fq)) = (journal, fill_q.as_mut()) {
                if runs != [(0, self.sectors)] {
                    match self.record_line(j, fq, idx, &mut data, &valid, &bits) {
                        // The line as recorded (it may hold writes that came
                        // after the snapshot) is what goes to the members:
                        // whole, or its dirty sectors, every one in the
                        // rows recorded.
                        Ok(Recorded::Line { generation: g, dirty, last_seq: l, whole }) => {
                            runs = if whole { vec![(0, self.sectors)] } else { runs_of(&dirty, self.sectors) };
                            (generation, bits, last_seq) = (g, dirty, l);
                        }
                        Ok(Recorded::Clean) => {
                            lock(&self.pool).push(data);
                            continue;
                        }
                        // The log is full (retire records first), or a
                        // zeroing is on its way: the next pass.
                        Ok(Recorded::Full | Recorded::Later) => {
                            lock(&self.pool).push(data);
                            skipped = true;
                            self.kick();
                            continue;
                        }
                        // The journal was lost: the line goes as it is
                        // (its write hole is open again).
                        Err(_) if j.is_lost() => {}
                        Err(e) => {
                            first_err = Some(e);
                            lock(&self.pool).push(data);
                            continue;
                        }
                    }
                }
            }
            let full = runs == [(0, self.sectors)];
            let mut data = Some(data);
            {
                let mut s = lock(&self.stats);
                s.writebacks += runs.len() as u64;
                s.full_lines += full as u64;
            }
            for (a, b) in runs {
                while !q.has_room() {
                    q.wait(1, &mut out);
                    self.reap(&mut out, &mut inflight, &mut first_err);
                }
                let len = (b - a) * sector;
                let buf = if full {
                    // The snapshot itself goes out: no second copy.
                    data.take().expect("one run")
                } else {
                    let src = data.as_ref().expect("kept for the runs");
                    let mut buf = lock(&self.pool).pop().filter(|p| p.len() >= len).unwrap_or_else(|| IoBuf::new(self.line as usize));
                    buf[..len].copy_from_slice(&src[a * sector..b * sector]);
                    buf
                };
                // A whole line written after a stripe record cleans only
                // what was dirty in the snapshot.
                let mut mine = vec![0u64; bits.len()];
                set_bits(&mut mine, a, b);
                mine.iter_mut().zip(&bits).for_each(|(m, d)| *m &= d);
                tag += 1;
                inflight.insert(tag, InFlight { idx, generation, bits: mine, last_seq });
                let r = Request { op: Op::Write, offset: idx * self.line + (a * sector) as u64, len, buf: Some(buf), tag, fua: false };
                if let Err(r) = q.push(r) {
                    inflight.remove(&tag);
                    first_err.get_or_insert(r.error);
                }
            }
            if let Some(d) = data {
                lock(&self.pool).push(d);
            }
        }
        while q.in_flight() > 0 {
            q.wait(1, &mut out);
            self.reap(&mut out, &mut inflight, &mut first_err);
        }
        if journal.is_some() && self.closed.load(Ordering::Acquire) && first_err.is_none() && !flush {
            // Closed meanwhile: a crash (a stop drains first, so nothing
            // is left to retire): the members' flush does not happen.
            return Ok(());
        }
        // Journal: records carrying writes below the mark may go once the
        // members are flushed.
        let mark = journal.map(|_| self.clean_mark());
        let res = match first_err {
            Some(e) => Err(e),
            None if flush || journal.is_some() => q.run(Request::flush(0)).result.map(|_| ()),
            None => Ok(()),
        };
        let res = match (res, journal, mark) {
            (Ok(()), Some(j), Some(m)) => j.checkpoint(m),
            (r, ..) => r,
        };
        if let Err(e) = &res {
            // Writes were lost: every flush waiting or to come says so.
            *lock(&self.failed) = Some(e.clone());
        } else if flush && !skipped {
            // A lost journal held acknowledged writes until now: they are
            // on the members, so its loss may be recorded (before anything
            // acknowledged after the loss is: see `lost_drain`).
            let drained = {
                let mut l = lock(&self.lost_drain);
                let done = l.is_some_and(|t| start_seq >= t);
                if done {
                    *l = None;
                }
                done
            };
            if let (true, Some(j)) = (drained, &self.journal) {
                j.drained_after_loss();
            }
            let mut d = lock(&self.durable);
            *d = (*d).max(start_seq);
        }
        res
    }

    /// The rows (sectors `a..b` of each chunk) a rows record of a line
    /// dirty in `dirty` holds, or `None` when a stripe record of the whole
    /// line is the better choice: the dirty sectors span half a chunk's
    /// rows or more, or cross a chunk's end.
    fn rows_of(&self, dirty: &[u64]) -> Option<(usize, usize)> {
        let cs = self.chunk_sectors;
        if cs == self.sectors {
            return None;
        }
        let (mut lo, mut hi) = (cs, 0);
        for (a, b) in runs_of(dirty, self.sectors) {
            if a / cs != (b - 1) / cs {
                return None;
            }
            lo = lo.min(a % cs);
            hi = hi.max((b - 1) % cs + 1);
        }
        (lo < hi && (hi - lo) * 2 < cs).then_some((lo, hi))
    }

    /// The sectors of `rows` (of each chunk) as bits of a line.
    fn rows_mask(&self, (lo, hi): (usize, usize)) -> Vec<u64> {
        let mut m = vec![0u64; self.sectors.div_ceil(64)];
        for k in (0..self.sectors).step_by(self.chunk_sectors) {
            set_bits(&mut m, k + lo, k + hi);
        }
        m
    }

    /// Journal mode, RAID 5/6: records line `idx` (snapshot `data`, `valid`
    /// and `dirty` sectors) before the flusher writes it. When its dirty
    /// sectors lie in a few rows ([`rows_of`](Self::rows_of)), a rows
    /// record of those rows of every chunk (random writes: a few sectors a
    /// chunk, not the stripe); otherwise a stripe record of the whole line.
    /// Completes what is recorded with the members' bytes where the cache
    /// held none, then, with the writers held (`jorder`), lays the line's
    /// valid sectors as they are now over it and takes the record's place
    /// in the log: the record holds every write whose record lies before
    /// it in the log, so a record never carries older data than one it
    /// follows (replay applies the records after the tail, and the records
    /// before it, retired, may hold newer writes already on the members).
    /// If writes that came meanwhile dirtied sectors outside the rows, the
    /// line is recorded whole instead (what the flusher writes must hold
    /// every write up to the line's newest). The record may retire once the
    /// line's oldest dirty write is on the members.
    fn record_line(&self, j: &crate::cache::journal::Journal, fq: &mut crate::raid::engine::RaidQueue, idx: u64, data: &mut IoBuf, valid: &[u64], dirty: &[u64]) -> Result<Recorded> {
        let sector = CACHE_SECTOR as usize;
        let mut rows = self.rows_of(dirty);
        let mut read = vec![0u64; valid.len()];
        loop {
            // What the members hold under a zeroing in flight may be the
            // bytes from before it: not to be recorded, nor written back.
            let zeroes = self.zero_epoch.load(Ordering::Acquire);
            if self.zeroing_over(idx) {
                return Ok(Recorded::Later);
            }
            // The sectors to record: the rows of every chunk, or all.
            let want = rows.map_or_else(|| vec![u64::MAX; valid.len()], |r| self.rows_mask(r));
            let holes: Vec<u64> = want.iter().zip(valid).zip(&read).map(|((w, v), r)| w & !v & !r).collect();
            for (a, b) in runs_of(&holes, self.sectors) {
                let len = (b - a) * sector;
                let c = fq.run(Request::read(idx * self.line + (a * sector) as u64, len, IoBuf::new(len), 0));
                c.result?;
                data[a * sector..b * sector].copy_from_slice(&c.buf.expect("a read returns its buffer")[..len]);
                set_bits(&mut read, a, b);
            }
            let order = lock(&self.jorder);
            if self.zero_epoch.load(Ordering::Acquire) != zeroes {
                // A zeroing started during the reads (zeroings hold
                // `jorder` to start): read again, or wait for it.
                drop(order);
                read.iter_mut().for_each(|w| *w = 0);
                continue;
            }
            let (generation, dirty, oldest, last_seq) = {
                let mut sh = self.shard(idx);
                let Some(l) = sh.lines.get_mut(&idx).filter(|l| l.oldest != 0) else { return Ok(Recorded::Clean) };
                if rows.is_some() && l.dirty.iter().zip(&want).any(|(d, w)| d & !w != 0) {
                    // Dirtied outside the rows meanwhile: record it whole.
                    rows = None;
                    continue;
                }
                for (a, b) in runs_of(&l.valid, self.sectors) {
                    data[a * sector..b * sector].copy_from_slice(&l.data[a * sector..b * sector]);
                }
                l.snapped();
                (l.generation, l.dirty.clone(), l.oldest, l.last_seq)
            };
            let whole = rows.is_none();
            let record = match rows {
                None => None,
                Some((lo, hi)) => {
                    let piece = (hi - lo) * sector;
                    let mut b = IoBuf::new(piece * self.sectors / self.chunk_sectors);
                    for (k, c) in (0..self.sectors).step_by(self.chunk_sectors).enumerate() {
                        b[k * piece..(k + 1) * piece].copy_from_slice(&data[(c + lo) * sector..(c + hi) * sector]);
                    }
                    Some((lo, piece as u64, b))
                }
            };
            let len = record.as_ref().map_or(self.line, |(_, _, b)| b.len() as u64);
            let Some(r) = j.reserve(len, oldest, None) else { return Ok(Recorded::Full) };
            drop(order);
            match record {
                None => j.write(r, crate::cache::journal::RecordKind::Stripe, idx * self.line, last_seq, &data[..self.line as usize])?,
                Some((lo, piece, b)) => {
                    let stride = self.chunk_sectors as u64 * CACHE_SECTOR;
                    j.write_rows(r, idx * self.line + (lo * sector) as u64, stride, piece, last_seq, &b)?
                }
            }
            {
                let mut st = lock(&self.stats);
                if whole {
                    st.stripe_records += 1;
                } else {
                    st.rows_records += 1;
                }
            }
            return Ok(Recorded::Line { generation, dirty, last_seq, whole });
        }
    }

    fn reap(&self, out: &mut Vec<crate::Completion>, inflight: &mut HashMap<u64, InFlight>, err: &mut Option<crate::Error>) {
        for c in out.drain(..) {
            if let Some(b) = c.buf {
                lock(&self.pool).push(b);
            }
            let Some(InFlight { idx, generation, bits, last_seq }) = inflight.remove(&c.tag) else { continue };
            match c.result {
                Ok(_) => self.written_back(idx, generation, &bits, last_seq),
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
    }

    /// Makes the flusher write through `vol` from now on.
    pub(crate) fn retarget(&self, vol: Weak<RaidVolume>) {
        *lock(&self.target) = vol;
    }

    /// Starts the flusher thread of `vol`'s cache. It holds the volume only
    /// during a pass, and ends when the volume is gone or the cache closed.
    pub(crate) fn start_flusher(self: &Arc<Self>, vol: Weak<RaidVolume>) {
        self.retarget(vol);
        let cache = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("uraid-flusher".into())
            .spawn(move || loop {
                let Some(c) = cache.upgrade() else { return };
                {
                    let k = lock(&c.kick);
                    let (mut k, _) = c.kick_cv.wait_timeout_while(k, FLUSH_INTERVAL, |k| !*k).unwrap_or_else(|e| e.into_inner());
                    *k = false;
                }
                if c.closed.load(Ordering::Acquire) {
                    return;
                }
                let Some(v) = lock(&c.target).upgrade() else { return };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    #[cfg(feature = "failpoints")]
                    if std::env::var_os("URAID_FAILPOINT_FLUSHER_PANIC").is_some() && c.dirty.load(Ordering::Relaxed) > 0 {
                        panic!("URAID_FAILPOINT_FLUSHER_PANIC");
                    }
                    c.pass(&v)
                })) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        eprintln!("uraid: the write-back cache could not write to the members: {e}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(panic) => return c.flusher_died(&crate::error::panic_message(&*panic)),
                }
            })
            .expect("cannot start the cache flusher thread");
    }

    /// The flusher thread panicked with `why`: from now on every flush,
    /// write and held writer fails with EIO (what the cache held is not
    /// on the members), reads are still served.
    fn flusher_died(&self, why: &str) {
        let e = crate::Error::new(
            crate::ErrorKind::Io,
            format!(
                "the volume cache's flusher thread panicked ({why}): writes the cache holds may not be on the members; \
                 stop the array and assemble it again (a journal replays what it recorded)"
            ),
        );
        eprintln!("uraid: {e}");
        *lock(&self.failed) = Some(e);
        self.dead.store(true, Ordering::Release);
    }

    /// Stops the flusher (after [`Volume::flush`] has written everything).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.kick();
    }

    /// A crash (tests): the flusher stops without writing what is dirty,
    /// and this returns once it has (no member write of the cache is in
    /// progress after it). `c` must be the last handle besides the
    /// flusher's.
    pub fn crash(c: &Arc<Cache>) {
        c.close();
        while Arc::strong_count(c) > 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let sh = c.shard(idx);
        let l = &sh.lines[&idx];
        (runs_of(&l.dirty, c.sectors), l.oldest)
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
        assert_eq!(c.dirty.load(Ordering::Relaxed), 8 * CACHE_SECTOR);
        // The next snapshot, written with no write since: clean.
        let snap = c.dirty_lines(true).pop().unwrap();
        c.written_back(0, snap.generation, &snap.dirty, snap.last_seq);
        assert_eq!(state(&c, 0), (vec![], 0));
        assert_eq!(c.dirty.load(Ordering::Relaxed), 0);
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
        c.shard(0).lines.remove(&0);
        write(&c, 0, 4096);
        c.written_back(0, snap.generation, &snap.dirty, snap.last_seq);
        assert_eq!(state(&c, 0), (vec![(0, 8)], 2), "the new line's write was marked written back");
    }
}
