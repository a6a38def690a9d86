//! The write journal of a volume cache in `journal` mode: a circular log,
//! on a device of its own or in a region of one member past the volumes
//! (`superblock::JournalRegion`), where every write is recorded, durably,
//! before it is acknowledged, so that a crash or power cut loses no
//! acknowledged write and leaves no RAID 5/6 stripe whose parity disagrees
//! with its data (the write hole). The idea is md's raid5-cache (Linux
//! `drivers/md/raid5-cache.c`: a log device, records written before the
//! member writes, replay at assemble); the format is uraid's own.
//!
//! A journal is lost when a write to it fails (a member journal's role is
//! then failed, as for any member write error) or when the member holding
//! it fails, is removed or is replaced; from then on the cache writes
//! without it ([`Journal::is_lost`]). [`Journal::rehome`] puts a lost
//! member journal on the device that took its role.
//!
//! Format (all integers little-endian; offsets from the start of the
//! journal: byte 0 of its device, or the region's start). The header, 4 KiB
//! at byte 0:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `URAIDJN\x01` |
//! | 8 | 4 | format version (4; 1 to 3 are read too: 1 has no rows records, 1 and 2 no zeroes records, 1 to 3 have 512-byte record units) |
//! | 16 | 16 | array UUID |
//! | 32 | 16 | volume UUID |
//! | 48 | 16 | journal UUID (also in the volume table entry) |
//! | 64 | 8 | log size in bytes (the log starts at byte 4096) |
//! | 72 | 8 | tail: log position (bytes, counting from the first record ever, not wrapped) of the oldest record still needed |
//! | 80 | 8 | sequence number of the record at the tail |
//! | 88 | 8 | nonce: drawn anew at every replay; records carry it, so records of an earlier life of the log never count |
//! | 96 | 4 | record unit in bytes (version 4): the journal device's logical block size, at least 512, at most 4096; a power of two |
//! | 4092 | 4 | CRC-32C of bytes 0..4092 |
//!
//! A record is a header of one record unit (512 bytes in versions 1 to 3;
//! the fields below fill its first 512 bytes, the rest is zero) followed by
//! its data (whole 512-byte sectors), padded with zeros to a whole record
//! unit, at byte `4096 + position % log size`: so every record I/O is
//! aligned to the device's logical block size (a 4Kn drive refuses
//! 512-byte O_DIRECT I/O). A record that would pass the end of the log
//! starts at the next multiple of the log size instead (the rest is
//! skipped). Record header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `URAIDJR\x01` |
//! | 8 | 8 | sequence number (one more than the record before) |
//! | 16 | 8 | log position |
//! | 24 | 4 | kind: 1 data (a write, as acknowledged), 2 stripe (a whole cache line, written before its member writes), 3 rows (the same rows of every data chunk of a cache line, written before its member writes), 4 zeroes (a write-zeroes, as acknowledged: no data) |
//! | 32 | 8 | byte offset in the volume |
//! | 40 | 8 | data length in bytes (0 for a zeroes record, the only kind without data) |
//! | 48 | 4 | CRC-32C of the data |
//! | 56 | 8 | the header's nonce when the record was written |
//! | 64 | 8 | cache write sequence number: a data record's write; a stripe or rows record holds every write to its line up to this one |
//! | 72 | 8 | rows record: bytes from one piece's volume offset to the next's (the chunk size); 0 for the other kinds |
//! | 80 | 8 | rows record: bytes per piece; zeroes record: bytes zeroed; 0 for the other kinds (one piece: the data) |
//! | 508 | 4 | CRC-32C of bytes 0..508 |
//!
//! A rows record's data is pieces of equal length back to back; piece `k`
//! belongs at volume byte `offset + k * stride`. It holds rows `a..b` of
//! every data chunk of a RAID 5/6 stripe (the rows the line's dirty
//! sectors lie in): enough to write those rows whole at replay, so their
//! parity comes out right with a member gone, for a fraction of a stripe
//! record's bytes when the line is dirty in a few rows (random writes).
//!
//! A zeroes record makes replay zero its range (a whole-range zeroing, then
//! zeroes in their place among the records of every line that other
//! records touch).
//!
//! Replay lays the records touching a line over each other in the order
//! of their cache write sequence numbers (a stripe or rows record after
//! the data records it holds, before later ones), not in log order: a
//! write may take its place in the log before a stripe record of its line
//! that does not hold it.
//!
//! Records are written with `RWF_DSYNC` (FUA on a drive) and acknowledged
//! in log order; the records of concurrent writes that lie back to back
//! in the log go out together in one write (group commit, as databases
//! and md's raid5-cache do: [`Journal::submit`], [`Journal::commit`]), so every acknowledged record lies before the first record
//! that does not check out: replay ([`Journal::replay`]) reads from the
//! tail until then. The tail moves ([`Journal::checkpoint`]) once the data
//! of the records it passes is on the members and the members are flushed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use crate::{bail, Error, IoBuf, Member, Result};

mod record;
mod replay;

/// Magic of the journal header.
pub const MAGIC: &[u8; 8] = b"URAIDJN\x01";
const RECORD_MAGIC: &[u8; 8] = b"URAIDJR\x01";
/// Format version written; 2 added rows records (kind 3), which a reader
/// of version 1 would misread; 3 added zeroes records (kind 4), at which a
/// reader of version 2 would stop and miss the records after; 4 added the
/// record unit (records aligned to the device's logical block size), which
/// a reader of version 3 would misplace. Logs of versions 1 to 3 are read.
const VERSION: u32 = 4;
/// Bytes of the header; the log follows.
pub const HEADER_SIZE: u64 = 4096;
/// Bytes of a record header's fields (the header takes one record unit).
pub const RECORD_HEADER: u64 = 512;
/// The largest record unit (bytes): the log starts 4 KiB into the journal,
/// so a larger logical block size could not align it.
pub const MAX_UNIT: u64 = 4096;
/// Smallest log a journal device must hold (bytes).
pub const MIN_LOG: u64 = 64 << 20;
/// Most bytes one group-commit write carries ([`Journal::commit`]).
const GROUP_BYTES: usize = 1 << 20;
/// Most records one group-commit write carries (one iovec each; Linux's
/// `IOV_MAX` is 1024).
const GROUP_RECORDS: usize = 1024;
/// Longest a thread waiting for a record sleeps before it looks again
/// (a batch's end and a submission wake it sooner).
const COMMIT_WAIT: std::time::Duration = std::time::Duration::from_millis(1);
/// The largest log position a header may name (2^62 bytes).
const MAX_POS: u64 = 1 << 62;
/// The largest sequence number a header may name (one record per number:
/// no log comes near it, and every count from it stays in u64).
const MAX_SEQ: u64 = 1 << 62;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A write as it was acknowledged.
    Data = 1,
    /// A whole cache line (one stripe's data), written before the flusher
    /// writes the line to the members.
    Stripe = 2,
    /// The same rows of every data chunk of a cache line (pieces, see the
    /// format), written before the flusher writes the line's dirty sectors
    /// in those rows to the members.
    Rows = 3,
    /// A write-zeroes of a range (no data), as it was acknowledged.
    Zeroes = 4,
}

/// The identity a journal header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalId {
    /// The array's UUID.
    pub array: [u8; 16],
    /// The volume's UUID.
    pub volume: [u8; 16],
    /// The journal's own UUID.
    pub journal: [u8; 16],
}

struct Header {
    id: JournalId,
    log_size: u64,
    tail: u64,
    tail_seq: u64,
    nonce: u64,
    /// Record unit in bytes (see the format).
    unit: u64,
}

impl Header {
    fn encode(&self) -> IoBuf {
        let mut b = IoBuf::new(HEADER_SIZE as usize);
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..32].copy_from_slice(&self.id.array);
        b[32..48].copy_from_slice(&self.id.volume);
        b[48..64].copy_from_slice(&self.id.journal);
        b[64..72].copy_from_slice(&self.log_size.to_le_bytes());
        b[72..80].copy_from_slice(&self.tail.to_le_bytes());
        b[80..88].copy_from_slice(&self.tail_seq.to_le_bytes());
        b[88..96].copy_from_slice(&self.nonce.to_le_bytes());
        b[96..100].copy_from_slice(&(self.unit as u32).to_le_bytes());
        let crc = crc32c::crc32c(&b[..4092]);
        b[4092..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Header, String> {
        if &b[..8] != MAGIC {
            return Err("no journal header".into());
        }
        if u32_at(b, 4092) != crc32c::crc32c(&b[..4092]) {
            return Err("the journal header's checksum does not match".into());
        }
        if !(1..=VERSION).contains(&u32_at(b, 8)) {
            return Err(format!("journal format version {} is not known (this uraid knows 1 to {VERSION})", u32_at(b, 8)));
        }
        let arr = |o: usize| -> [u8; 16] { b[o..o + 16].try_into().expect("16 bytes") };
        let unit = if u32_at(b, 8) >= 4 { u64::from(u32_at(b, 96)) } else { RECORD_HEADER };
        if !unit.is_power_of_two() || !(RECORD_HEADER..=MAX_UNIT).contains(&unit) {
            return Err(format!("the journal header's record unit {unit} is not a power of two from 512 to 4096"));
        }
        Ok(Header {
            unit,
            id: JournalId { array: arr(16), volume: arr(32), journal: arr(48) },
            log_size: u64_at(b, 64),
            tail: u64_at(b, 72),
            tail_seq: u64_at(b, 80),
            nonce: u64_at(b, 88),
        })
    }
}

fn new_nonce() -> u64 {
    u64::from_le_bytes(crate::units::new_uuid()[..8].try_into().expect("8 bytes"))
}

/// Bytes of log a journal of `size` bytes (header included) holds: whole
/// 4 KiB past the header.
fn log_in(size: u64) -> u64 {
    size.saturating_sub(HEADER_SIZE) / 4096 * 4096
}

/// Writes header `h` of an empty journal at byte `base` of `m`, and clears
/// the place of its first record (at the tail), so that a stale record
/// there cannot look like the next one. Durable when it returns.
fn write_empty(m: &Member, base: u64, h: &Header) -> Result<()> {
    m.write_all_at(&h.encode(), base)?;
    m.write_all_at(&IoBuf::new(h.unit as usize), base + HEADER_SIZE + h.tail % h.log_size)
}

/// The record unit for a journal on `m`: its logical block size, at least
/// 512. Errors: `Unsupported` above [`MAX_UNIT`].
fn unit_for(m: &Member) -> Result<u64> {
    let unit = u64::from(m.block_size()).max(RECORD_HEADER);
    if unit > MAX_UNIT || !unit.is_power_of_two() {
        bail!(Unsupported, "{} has {unit}-byte logical blocks; a journal needs 512 to 4096", m.name());
    }
    Ok(unit)
}

/// True when `len` bytes of a rows record can be pieces of `piece` bytes
/// (whole sectors) at a stride of `stride` bytes (whole sectors, pieces
/// not overlapping).
fn rows_shape_ok(len: u64, stride: u64, piece: u64) -> bool {
    piece > 0 && piece.is_multiple_of(512) && len.is_multiple_of(piece) && stride >= piece && stride.is_multiple_of(512)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Reads the journal identity on `m`, if `m` holds a journal header.
/// Errors: `Io` from the read; `Superblock` for a damaged header.
pub fn probe(m: &Member) -> Result<Option<JournalId>> {
    if m.size() < HEADER_SIZE {
        return Ok(None);
    }
    let mut b = IoBuf::new(HEADER_SIZE as usize);
    m.read_exact_at(&mut b, 0)?;
    if &b[..8] != MAGIC {
        return Ok(None);
    }
    match Header::decode(&b) {
        Ok(h) => Ok(Some(h.id)),
        Err(e) => bail!(Superblock, "{} has a damaged journal header: {e}", m.name()),
    }
}

/// A record the scan found valid.
#[derive(Debug, Clone, Copy)]
struct Found {
    pos: u64,
    offset: u64,
    len: u64,
    kind: u32,
    cache_seq: u64,
    /// RaidVolume bytes from one piece to the next (rows records).
    stride: u64,
    /// Bytes per piece (`len` but for rows records).
    piece: u64,
}

impl Found {
    /// The record's pieces: (volume byte offset, bytes, offset in the
    /// record's data).
    fn pieces(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let n = if self.zeroes() { 1 } else { self.len / self.piece };
        (0..n).map(|k| (self.offset + k * self.stride, self.piece, k * self.piece))
    }

    /// A zeroes record: its one piece is the range zeroed, with no data.
    fn zeroes(&self) -> bool {
        self.kind == RecordKind::Zeroes as u32
    }
}

/// A record reserved and not yet retired by a checkpoint.
#[derive(Debug, Clone, Copy)]
struct Held {
    seq: u64,
    pos: u64,
    /// The cache write sequence number the record's data carries: the
    /// record may go once every write below the checkpoint's mark is on
    /// the members.
    cache_seq: u64,
    written: bool,
}

impl Held {
    /// True when a checkpoint at `mark` retires this record, every record
    /// below `written_below` being written: its cache write is below the
    /// mark and it is written itself.
    fn retires_at(&self, mark: u64, written_below: u64) -> bool {
        self.cache_seq < mark && self.written && self.seq < written_below
    }
}

struct State {
    /// Next record's position and sequence number.
    head: u64,
    next_seq: u64,
    tail: u64,
    tail_seq: u64,
    held: VecDeque<Held>,
    /// Every record below this sequence number is written.
    written_below: u64,
    /// Records written out of order (above `written_below`).
    early: std::collections::BTreeSet<u64>,
    nonce: u64,
    /// Bytes of log promised to stripe records the flusher will write
    /// (see [`Journal::promise`]).
    promised: u64,
    /// Bumped by [`Journal::rehome`]: a record reserved before belongs to
    /// the device the journal left and never counts as acknowledged.
    epoch: u64,
    /// Records submitted and not yet written, by sequence number: (log
    /// position, the encoded record, the epoch it was reserved in). One
    /// writer at a time ([`Journal::commit`]) writes them, each run of
    /// records back to back in the log with one write (group commit).
    pending: BTreeMap<u64, (u64, IoBuf, u64)>,
    /// A thread is writing pending records.
    writing: bool,
}

/// The member role a journal in a region lies on, and the array's health
/// that says whether that role still holds it.
#[derive(Clone)]
pub struct Host {
    /// The array's member states.
    pub health: Arc<crate::raid::health::Health>,
    /// The role whose device holds the journal.
    pub role: u32,
}

/// An open journal. Made by [`Journal::format`], [`Journal::open`], their
/// `_region` forms for a journal on a member, or [`Journal::absent`].
pub struct Journal {
    /// The device; `None` once lost (the handle is let go, so that the
    /// failed device can be taken out and added back).
    member: RwLock<Option<Member>>,
    /// The device's name (kept when the handle goes).
    name: RwLock<String>,
    /// Absolute byte offset of the journal on its device (0 on a device of
    /// its own).
    base: u64,
    id: JournalId,
    log_size: u64,
    /// Record unit in bytes (see the format); a rehome may change it.
    unit: AtomicU64,
    host: Option<Host>,
    lost: AtomicBool,
    /// Bumped each time the journal is lost (see [`losses`](Self::losses)).
    losses: AtomicU64,
    state: Mutex<State>,
    cv: Condvar,
    /// Run when this journal, a device of its own, is lost and its cache
    /// has written back what it held (see [`set_on_lost`](Self::set_on_lost)).
    on_lost: Mutex<Option<OnLost>>,
}

/// The hook [`Journal::set_on_lost`] installs.
type OnLost = Box<dyn Fn(&Journal) + Send + Sync>;

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Journal({} at {}, log {} bytes)", self.name(), self.base, self.log_size)
    }
}

/// A place in the log a writer holds (see [`Journal::reserve`]).
#[derive(Debug, Clone, Copy)]
pub struct Reservation {
    seq: u64,
    pos: u64,
    /// The journal's epoch when reserved (see [`Journal::rehome`]).
    epoch: u64,
    /// Data bytes of the record the place was taken for: the record
    /// submitted must have as many (the log's records lie back to back).
    len: u64,
}

impl Journal {
    /// Writes an empty journal onto `m` for volume `id.volume` of array
    /// `id.array`: the whole device past the header is the log. Errors:
    /// `TooSmall` below 4 KiB + [`MIN_LOG`]; `Io`.
    pub fn format(m: Member, id: JournalId) -> Result<Journal> {
        let size = m.size();
        Self::format_region(m, 0, size, id, None)
    }

    /// Writes an empty journal in bytes `[base, base + size)` of `m` (a
    /// member's region, `host` naming its role): the log is what follows
    /// the 4 KiB header, in whole 4 KiB. Errors: `TooSmall` below 4 KiB +
    /// [`MIN_LOG`] or past the device's end; `Io`.
    pub fn format_region(m: Member, base: u64, size: u64, id: JournalId, host: Option<Host>) -> Result<Journal> {
        let log_size = log_in(size);
        if log_size < MIN_LOG || base + size > m.size() {
            bail!(
                TooSmall,
                "{} cannot hold a journal of {size} bytes at byte {base}: a journal needs at least {} bytes, and the device has {}",
                m.name(),
                HEADER_SIZE + MIN_LOG,
                m.size()
            );
        }
        let h = Header { id, log_size, tail: 0, tail_seq: 1, nonce: new_nonce(), unit: unit_for(&m)? };
        write_empty(&m, base, &h)?;
        Ok(Self::with(m, base, h, host))
    }

    /// Opens the journal on `m`. Errors: `Superblock` when `m` holds no
    /// journal or a damaged one; `Io`.
    pub fn open(m: Member) -> Result<Journal> {
        let size = m.size();
        Self::open_region(m, 0, size, None)
    }

    /// Opens the journal in bytes `[base, base + size)` of `m`. Errors:
    /// `Superblock` when the region holds no journal, a damaged one, or
    /// one whose log does not fit it; `Io`.
    pub fn open_region(m: Member, base: u64, size: u64, host: Option<Host>) -> Result<Journal> {
        let mut b = IoBuf::new(HEADER_SIZE as usize);
        m.read_exact_at(&mut b, base)?;
        let where_ = if host.is_some() { format!("{} (journal region at byte {base})", m.name()) } else { m.name().to_string() };
        let h = Header::decode(&b).map_err(|e| Error::new(crate::ErrorKind::Superblock, format!("{where_}: {e}")))?;
        if h.log_size < MIN_LOG || HEADER_SIZE.checked_add(h.log_size).is_none_or(|n| n > size.min(m.size().saturating_sub(base))) {
            bail!(Superblock, "{where_}: the journal header names a log of {} bytes, which the device cannot hold", h.log_size);
        }
        // Log positions only grow; 2^62 bytes is centuries of writes at any
        // speed, and keeps every sum of a position and a length in u64.
        if h.tail > MAX_POS {
            bail!(Superblock, "{where_}: the journal header's tail {} is past any log position (at most {MAX_POS})", h.tail);
        }
        if !h.tail.is_multiple_of(h.unit) {
            bail!(Superblock, "{where_}: the journal header's tail {} is not on a record unit ({} bytes)", h.tail, h.unit);
        }
        if u64::from(m.block_size()) > h.unit {
            bail!(
                Superblock,
                "{where_}: the journal's records are {} bytes apart, but the device needs {}-byte I/O (was the journal copied \
                 from a device with smaller sectors?); replay it on a device like the one it was written on",
                h.unit,
                m.block_size()
            );
        }
        if h.tail_seq > MAX_SEQ {
            bail!(Superblock, "{where_}: the journal header's tail sequence number {} is past any record's (at most {MAX_SEQ})", h.tail_seq);
        }
        Ok(Self::with(m, base, h, host))
    }

    /// A journal that is lost from the start: its member is down, so its
    /// records are out of reach. It holds nothing ([`replay`](Self::replay)
    /// replays nothing) until [`rehome`](Self::rehome).
    pub fn absent(id: JournalId, base: u64, size: u64, name: String, host: Option<Host>) -> Journal {
        let h = Header { id, log_size: log_in(size), tail: 0, tail_seq: 1, nonce: 0, unit: RECORD_HEADER };
        let j = Self::build(None, name, base, h, host);
        j.lost.store(true, Ordering::Release);
        j.losses.store(1, Ordering::Release);
        j
    }

    fn with(member: Member, base: u64, h: Header, host: Option<Host>) -> Journal {
        let name = member.name().to_string();
        Self::build(Some(member), name, base, h, host)
    }

    fn build(member: Option<Member>, name: String, base: u64, h: Header, host: Option<Host>) -> Journal {
        let state = State {
            head: h.tail,
            next_seq: h.tail_seq,
            tail: h.tail,
            tail_seq: h.tail_seq,
            held: VecDeque::new(),
            written_below: h.tail_seq,
            early: Default::default(),
            nonce: h.nonce,
            promised: 0,
            epoch: 0,
            pending: BTreeMap::new(),
            writing: false,
        };
        Journal {
            member: RwLock::new(member),
            name: RwLock::new(name),
            base,
            id: h.id,
            log_size: h.log_size,
            unit: AtomicU64::new(h.unit),
            host,
            lost: AtomicBool::new(false),
            losses: AtomicU64::new(0),
            state: Mutex::new(state),
            cv: Condvar::new(),
            on_lost: Mutex::new(None),
        }
    }

    /// Installs `f`, run when this journal, a device of its own, is lost
    /// and its cache has written back and flushed everything it held
    /// ([`drained_after_loss`](Self::drained_after_loss)): the array
    /// records the loss, so that its records, stale from then on, are
    /// never replayed. (A journal on a member is lost with its member,
    /// whose failure the array records.)
    pub fn set_on_lost(&self, f: impl Fn(&Journal) + Send + Sync + 'static) {
        *self.on_lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    /// Called by the cache once every write taken before this journal was
    /// lost is on the members and flushed (before anything taken after
    /// the loss is acknowledged): runs the [`set_on_lost`](Self::set_on_lost)
    /// hook of a journal device of its own. Until then a crash leaves the
    /// journal to be replayed as usual: it holds acknowledged writes that
    /// may be nowhere else, and nothing newer than them.
    pub fn drained_after_loss(&self) {
        if !self.is_lost() || self.host.is_some() {
            return;
        }
        if let Some(f) = self.on_lost.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            f(self);
        }
    }

    /// True once the journal is lost: a write to it failed, or the member
    /// holding it is faulty, missing or was replaced. Records written
    /// before are out of reach; the cache writes without it.
    pub fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if let Some(h) = &self.host {
            if !h.health.writable(h.role) {
                self.mark_lost();
                return true;
            }
        }
        false
    }

    /// How many times the journal was lost (a cache notices a new loss by
    /// this count).
    pub fn losses(&self) -> u64 {
        self.is_lost();
        self.losses.load(Ordering::Acquire)
    }

    /// Marks the journal lost and lets its device go (the member that held
    /// it was failed, removed or replaced).
    pub fn mark_lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            self.losses.fetch_add(1, Ordering::AcqRel);
        }
        *self.member.write().unwrap_or_else(|e| e.into_inner()) = None;
        // Writers waiting for earlier records: those records end (failed).
        self.cv.notify_all();
    }

    /// The member role holding the journal, for a journal on a member.
    pub fn host_role(&self) -> Option<u32> {
        self.host.as_ref().map(|h| h.role)
    }

    /// Puts a lost member journal on `m`, the device that now holds its
    /// role: writes an empty journal in the same region and takes it in
    /// use. A record reserved before never counts (its reservation's epoch
    /// is an older one), and whatever the cache holds must already be on
    /// the members (the caller drains the cache first): nothing is carried
    /// over. Errors: `InvalidInput` when
    /// the journal is not lost or not on a member; `TooSmall`, `Io`.
    pub fn rehome(&self, m: Member) -> Result<()> {
        if !self.is_lost() || self.host.is_none() {
            bail!(InvalidInput, "only a lost journal on a member can be moved to the device that took its role");
        }
        let size = HEADER_SIZE + self.log_size;
        if self.base + size > m.size() {
            bail!(TooSmall, "{} cannot hold the journal region ({size} bytes at byte {}): it has {} bytes", m.name(), self.base, m.size());
        }
        let unit = unit_for(&m)?;
        let (tail, tail_seq, nonce) = {
            let mut s = self.lock();
            // The log starts anew on the new device, at a place of its unit.
            s.head = s.head.div_ceil(unit) * unit;
            self.unit.store(unit, Ordering::Release);
            s.held.clear();
            s.early.clear();
            s.tail = s.head;
            s.tail_seq = s.next_seq;
            s.written_below = s.next_seq;
            s.nonce = new_nonce();
            s.epoch += 1;
            (s.tail, s.tail_seq, s.nonce)
        };
        write_empty(&m, self.base, &Header { id: self.id, log_size: self.log_size, tail, tail_seq, nonce, unit })?;
        *self.name.write().unwrap_or_else(|e| e.into_inner()) = m.name().to_string();
        *self.member.write().unwrap_or_else(|e| e.into_inner()) = Some(m);
        self.lost.store(false, Ordering::Release);
        self.cv.notify_all();
        Ok(())
    }

    /// The identity in the header.
    pub fn id(&self) -> JournalId {
        self.id
    }

    /// The device's name.
    pub fn name(&self) -> String {
        self.name.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Absolute byte offset of the journal on its device.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of log.
    pub fn log_size(&self) -> u64 {
        self.log_size
    }

    /// Bytes of log in use (records not yet retired).
    pub fn used(&self) -> u64 {
        let s = self.lock();
        s.head - s.tail
    }

    /// Bytes of log in use or promised: how full the log is for writers.
    pub fn pressure(&self) -> u64 {
        let s = self.lock();
        s.head - s.tail + s.promised
    }

    /// Promises `bytes` of log to a stripe record the flusher will write
    /// (a RAID 5/6 line became dirty): writers leave them free (see
    /// [`reserve`](Self::reserve)), so the flusher can always record every
    /// dirty line and records can always retire.
    pub fn promise(&self, bytes: u64) {
        self.lock().promised += bytes;
    }

    /// Takes back a promise of `bytes` (the line is clean again).
    pub fn release(&self, bytes: u64) {
        let mut s = self.lock();
        s.promised = s.promised.saturating_sub(bytes);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record unit in bytes: every record starts on one and takes whole
    /// ones (see the format).
    pub fn unit(&self) -> u64 {
        self.unit.load(Ordering::Acquire)
    }

    /// Bytes of log a record of `len` data bytes takes: its header and its
    /// data, each in whole record units.
    pub fn record_span(&self, len: u64) -> u64 {
        let unit = self.unit();
        unit + len.div_ceil(unit) * unit
    }

    /// Where a record of `len` data bytes starting at `head` goes.
    fn place(&self, head: u64, len: u64) -> u64 {
        let size = self.record_span(len);
        if head % self.log_size + size > self.log_size {
            head.div_ceil(self.log_size) * self.log_size
        } else {
            head
        }
    }

    /// Bytes of log writers may fill: a quarter stays for the flusher's
    /// stripe records, which must be written before records can retire.
    fn writer_limit(&self) -> u64 {
        self.log_size - self.log_size / 4
    }

    /// True when a writer's record of `len` data bytes fits now, with
    /// `ahead` more bytes promised (the stripe records of the lines it may
    /// make dirty).
    pub fn fits(&self, len: u64, ahead: u64) -> bool {
        let s = self.lock();
        self.place(s.head, len) + self.record_span(len) - s.tail + s.promised + ahead <= self.writer_limit()
    }

    /// True when a writer's record of `len` data bytes can ever fit.
    pub fn can_hold(&self, len: u64) -> bool {
        2 * self.record_span(len) <= self.writer_limit()
    }

    /// Takes the next place in the log for a record of `len` data bytes
    /// carrying cache write `cache_seq`; `None` when the log is full (a
    /// checkpoint must retire records first). A `writer` (`Some(ahead)`)
    /// may fill only three quarters of it, counting what is promised and
    /// `ahead` bytes more it may promise; the flusher (`None`) all of it.
    /// Records are written with [`write`](Self::write) and then count as
    /// acknowledged in this order.
    pub fn reserve(&self, len: u64, cache_seq: u64, writer: Option<u64>) -> Option<Reservation> {
        if self.is_lost() {
            return None;
        }
        let mut s = self.lock();
        let pos = self.place(s.head, len);
        let (limit, extra) = match writer {
            Some(ahead) => (self.writer_limit(), s.promised + ahead),
            None => (self.log_size, 0),
        };
        if pos + self.record_span(len) - s.tail + extra > limit {
            return None;
        }
        let seq = s.next_seq;
        // The log's order: sequence numbers and places only increase, and
        // a record never starts before the previous one ended.
        debug_assert!(pos >= s.head && s.held.back().is_none_or(|h| h.seq < seq && h.pos < pos), "journal record {seq} at {pos} out of order");
        s.next_seq += 1;
        s.head = pos + self.record_span(len);
        s.held.push_back(Held { seq, pos, cache_seq, written: false });
        Some(Reservation { seq, pos, epoch: s.epoch, len })
    }

}
