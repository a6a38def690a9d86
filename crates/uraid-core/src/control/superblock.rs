//! The superblock: a 4 KiB record at the start of every member (and every
//! spare) that makes an array persistent and self-describing: who the
//! members are, what state each is in, and the table of Matrix volumes.
//!
//! Format (version 2, all integers little-endian), in the spirit of md's
//! v1.x superblock (`struct mdp_superblock_1` in Linux
//! `include/uapi/linux/raid/md_p.h`: event counter, per-device role table,
//! `recovery_offset`, internal bitmap) plus an Intel Matrix-style volume
//! table (several volumes of different levels over the same members):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `URAIDSB\x01` (the same in every version) |
//! | 8 | 4 | format version (2) |
//! | 12 | 4 | superblock size in bytes (4096) |
//! | 16 | 16 | array UUID |
//! | 32 | 16 | this member's UUID |
//! | 48 | 32 | array name, UTF-8, zero padded |
//! | 80 | 4 | member count: the roles of the array (spares not counted) |
//! | 84 | 4 | slot count: member count + spares (at most member count + [`MAX_SPARES`]) |
//! | 88 | 4 | this member's slot (below the member count: its role; above: a spare) |
//! | 92 | 4 | volume count (1 to [`MAX_VOLUMES`]) |
//! | 96 | 8 | creation time, seconds since the Unix epoch |
//! | 104 | 8 | update time, seconds since the Unix epoch |
//! | 112 | 8 | event counter (bumped on every assemble, stop and state change) |
//! | 120 | 4 | state (0 clean, 1 active) |
//! | 128 | 8 | write-intent bitmap region size in bytes (0: no bitmap) |
//! | 136 | 48 | the reshape record (version 3 only, see below) |
//! | 256 | 40 x 32 | slot table, one entry per slot, roles first, then spares |
//! | 1536 | 8 x 128 | volume table, one entry per volume, in member-offset order |
//! | 4092 | 4 | CRC-32C (Castagnoli) of bytes 0..4092 |
//!
//! A slot entry (32 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 16 | UUID of the device in the slot (all zero: no device) |
//! | 16 | 1 | state: [`MemberState`] as `u8` (0 active, 1 faulty, 2 rebuilding, 3 spare, 4 missing) |
//! | 17 | 1 | flags: bit 0 = a re-added member being resynced from the write-intent bitmap (only its dirty regions differ) |
//! | 24 | 8 | recovery offset: absolute member byte offset below which a rebuilding member holds valid data (`u64::MAX`: in sync) |
//!
//! A volume entry (128 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 32 | volume name, UTF-8, zero padded |
//! | 32 | 16 | volume UUID |
//! | 48 | 4 | RAID level (0, 1, 5, 6, 10) |
//! | 52 | 4 | chunk size in bytes |
//! | 56 | 8 | member start: absolute byte offset of the volume's area on every member (the first volume at [`DATA_OFFSET`]) |
//! | 64 | 8 | member size: bytes of every member the volume uses (whole chunks) |
//! | 72 | 1 | cache mode: 0 off, 1 write-through, 2 write-back, 3 write-back with a journal |
//! | 73 | 1 | flags: bit 0 = mode 3 with a journal device of its own that was lost while running (a write to it failed): its records are stale and never replayed, and the volume runs without it until a journal is set again |
//! | 74 | 1 | RAID 5 and 6 parity placement: 0 md's left-symmetric, 1 parity-last (`raid::layout::Variant`; a superblock with a volume of layout 1 is written as version 3, which an older uraid refuses) |
//! | 76 | 4 | cache size in MiB (0: the default, 256) |
//! | 80 | 4 | cache dirty limit in MiB (0: the default, 64) |
//! | 84 | 16 | journal UUID (mode 3: the journal's, see `journal`; else zero) |
//! | 100 | 4 | mode 3 with the journal on a member: its role + 1 (0: the journal is a device of its own) |
//! | 104 | 8 | journal on a member: absolute member byte offset of its region (header and log) |
//! | 112 | 8 | journal on a member: bytes of the region |
//!
//! A journal on a member lies past every volume's area on that member's
//! device (no volume, and no other journal region, overlaps it); members,
//! spares and replacements must hold it ([`Superblock::used_end`]).
//!
//! Bytes not named are zero and reserved for later versions.
//!
//! A reshape in progress (`uraid grow`, [`Reshape`]) is recorded at bytes
//! 136..184, and a superblock that holds one is written as version 3, so
//! that a uraid that does not know reshapes refuses the array instead of
//! reading it with the wrong layout (md sets a feature bit for the same
//! reason); the superblock goes back to version 2 when the reshape ends:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 136 | 4 | flags: bit 0 = a reshape is in progress, bit 1 = its backup holds a window, bit 2 = the array is served during it (writes of users may have been cut by a crash: the array is resynced once it ends), bits 8..16 = the level number before the reshape plus one when it changes (RAID 1 over 2 members restriped as RAID 5 or 10), else 0; bits 16..24 = log2 of the chunk size before the reshape minus 11 when it changes (1 = 4 KiB .. 9 = 1 MiB), else 0; bit 24 = the volume was parity-last before the reshape (byte 74 of its entry is the layout after) |
//! | 140 | 4 | the member count before the reshape (the member count field holds the one after; equal to it only for a chunk change over the same members) |
//! | 144 | 8 | position: logical bytes of the volume, from 0, already in the new layout (durable) |
//! | 152 | 8 | backup: the logical byte where the backed-up window starts (equal to the position) |
//! | 160 | 8 | backup: its length in bytes |
//! | 168 | 4 | backup: CRC-32C of its bytes |
//! | 172 | 4 | backup: the role whose device holds it; `0xFFFF_FFFF` for a chunk change over the same members (the member count before equals the one after): spread over every role that is up, in role order, `ceil(len / roles up)` bytes rounded up to 4 KiB on each (the last holds the rest) |
//! | 176 | 8 | backup: absolute byte offset on that device (spread: on each, past the write-intent bitmap, below the data area) |
//! | 184 | 4 | the volume being restriped (a Matrix array that gains members: the volumes before it are in the new layout, those after it in the old one; 0 for one volume) |
//!
//! Spares: a spare is a device with its own superblock whose slot is at or
//! above the member count; its slot entry has the state `Spare`. Every
//! member and spare holds the same slot and volume tables. A role whose
//! device was removed keeps its entry, with the removed device's UUID (so
//! that it can be re-added) and the state `Missing`; a removed spare's entry is dropped (the spares after it move
//! down one slot). The member area below [`DATA_OFFSET`] holds the
//! superblock (first 4 KiB) and the write-intent bitmap (from
//! `bitmap::BITMAP_OFFSET` = 64 KiB up to [`DATA_OFFSET`]).
//!
//! Version 1 superblocks (RAID 0 only, no volume table, written before
//! redundant arrays existed) are recognised and refused with a clear error;
//! no conversion is offered.

use crate::raid::health::MemberState;
use crate::{bail, Result};

/// Magic bytes at offset 0.
pub const MAGIC: &[u8; 8] = b"URAIDSB\x01";
/// Current format version.
pub const VERSION: u32 = 2;
/// The version of a superblock that records a reshape in progress.
pub const VERSION_RESHAPE: u32 = 3;
/// Bytes the superblock occupies on each member.
pub const SB_SIZE: usize = 4096;
/// Data offset of new arrays, in bytes: the first volume starts 1 MiB in.
pub use crate::raid::DATA_OFFSET;
/// Longest array or volume name, in bytes.
pub const NAME_MAX: usize = 32;
/// Most spares an array may hold.
pub const MAX_SPARES: usize = 8;
/// Most volumes (Matrix volumes) an array may hold.
pub const MAX_VOLUMES: usize = 8;
/// Most slots (roles plus spares).
pub const MAX_SLOTS: usize = crate::raid::geometry::MAX_MEMBERS + MAX_SPARES;
/// Value of a slot's recovery offset when the device is in sync.
pub const IN_SYNC: u64 = u64::MAX;

const SLOTS_AT: usize = 256;
const SLOT_SIZE: usize = 32;
const VOLUMES_AT: usize = 1536;
const VOLUME_SIZE: usize = 128;
const CRC_AT: usize = SB_SIZE - 4;

/// Whether the array was stopped cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum State {
    /// Stopped cleanly: copies and parity agree, the bitmap is clear.
    Clean,
    /// In use, or stopped without marking it clean (crash): redundant
    /// volumes need a resync of the regions the bitmap marks dirty.
    Active,
}

/// One entry of the slot table: a role of the array or a spare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Slot {
    /// UUID of the device in this slot; for a missing role, the UUID of
    /// the device that held it last (all zero: none).
    pub uuid: [u8; 16],
    /// State of the slot.
    pub state: MemberState,
    /// A rebuilding member that was re-added: it holds everything but the
    /// regions the write-intent bitmap marks dirty, and only those are
    /// resynced (md's re-add with a bitmap).
    pub resync_from_bitmap: bool,
    /// For a rebuilding member: absolute byte offset on the member below
    /// which it holds valid data (the rebuild checkpoint). `None` when in
    /// sync.
    pub recovery_offset: Option<u64>,
}

impl Slot {
    /// True when no device was ever recorded in the slot (zero UUID).
    pub fn is_empty(&self) -> bool {
        self.uuid == [0; 16]
    }
}

/// One entry of the volume table: a Matrix volume over every member.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VolumeEntry {
    /// Volume name (same rules as an array name).
    pub name: String,
    /// Volume UUID.
    pub uuid: [u8; 16],
    /// RAID level number (0, 1, 5, 6, 10).
    pub level: u32,
    /// Chunk size in bytes.
    pub chunk: u64,
    /// Absolute byte offset on every member where the volume's area starts.
    pub member_start: u64,
    /// Bytes of every member the volume uses (whole chunks).
    pub member_size: u64,
    /// Cache mode ([`crate::cache::CacheMode`] as its byte; 0 = off).
    pub cache_mode: u8,
    /// Cache size in MiB (0: the default).
    pub cache_size_mib: u32,
    /// Cache dirty limit in MiB (0: the default).
    pub dirty_limit_mib: u32,
    /// The journal's UUID in journal mode (else zero).
    pub journal_uuid: [u8; 16],
    /// Journal mode, a journal device of its own: it was lost while running
    /// (a write to it failed), so its records are stale (writes went to the
    /// members without it since): assemble never replays them and runs the
    /// volume without a journal until one is set again.
    pub journal_lost: bool,
    /// Journal mode with the journal on a member: where it lies (`None`:
    /// the journal is a device of its own, or there is none).
    pub journal_region: Option<JournalRegion>,
    /// RAID 5 and 6: where the parity is ([`crate::raid::layout::Variant`]
    /// as its byte; 0 = md's left-symmetric).
    pub layout: u8,
}

/// Where a volume's journal lies on a member (see [`crate::cache::journal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JournalRegion {
    /// The role whose device holds it.
    pub role: u32,
    /// Absolute byte offset of the region on that device (4 KiB aligned).
    pub start: u64,
    /// Bytes of the region: the journal header (4 KiB) and the log.
    pub size: u64,
}

impl JournalRegion {
    /// Absolute byte offset just past the region.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

impl VolumeEntry {
    /// The cache this volume is set up with. Errors: `Superblock` for an
    /// unknown mode byte.
    pub fn cache_config(&self) -> crate::Result<crate::cache::CacheConfig> {
        let d = crate::cache::CacheConfig::default();
        let mib = |v: u32, def: u64| if v == 0 { def } else { v as u64 * (1 << 20) };
        Ok(crate::cache::CacheConfig {
            mode: crate::cache::CacheMode::from_u8(self.cache_mode)?,
            size: mib(self.cache_size_mib, d.size),
            dirty_limit: mib(self.dirty_limit_mib, d.dirty_limit),
        })
    }

    /// Records `cfg` (sizes rounded up to whole MiB).
    pub fn set_cache_config(&mut self, cfg: &crate::cache::CacheConfig) {
        self.cache_mode = cfg.mode.to_u8();
        self.cache_size_mib = cfg.size.div_ceil(1 << 20).min(u32::MAX as u64) as u32;
        self.dirty_limit_mib = cfg.dirty_limit.div_ceil(1 << 20).min(u32::MAX as u64) as u32;
        if cfg.mode != crate::cache::CacheMode::Journal {
            self.journal_uuid = [0; 16];
            self.journal_region = None;
            self.journal_lost = false;
        }
    }

    /// True when the volume's level keeps copies or parity (it may lose a
    /// member); false for RAID 0 and a level this build does not know.
    pub fn redundant(&self) -> bool {
        crate::raid::geometry::Level::from_number(self.level).is_ok_and(|l| l.desc().redundant())
    }

    /// Usable bytes of the volume over `members` members (0 when this
    /// build cannot lay the entry out).
    pub fn capacity(&self, members: usize) -> u64 {
        crate::raid::geometry::Level::from_number(self.level)
            .and_then(|l| crate::raid::geometry::Geometry::new(l, members, self.chunk, self.member_size))
            .map_or(0, |g| g.capacity())
    }

    /// Absolute byte offset on every member just past the volume's area.
    pub fn member_end(&self) -> u64 {
        self.member_start + self.member_size
    }
}

/// The decoded superblock of one member or spare.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Superblock {
    /// Array UUID (same on every member).
    pub array_uuid: [u8; 16],
    /// This device's UUID (equal to `slots[slot].uuid`).
    pub member_uuid: [u8; 16],
    /// Array name.
    pub name: String,
    /// Roles of the array (members, not counting spares).
    pub member_count: u32,
    /// This device's slot: its role when below `member_count`, otherwise
    /// a spare slot.
    pub slot: u32,
    /// Creation time, Unix seconds.
    pub ctime: u64,
    /// Last update, Unix seconds.
    pub utime: u64,
    /// Event counter.
    pub events: u64,
    /// Clean or active.
    pub state: State,
    /// Write-intent bitmap region size in bytes; 0 when the array has no
    /// bitmap.
    pub bitmap_region: u64,
    /// The slot table: `member_count` roles, then the spares.
    pub slots: Vec<Slot>,
    /// The volume table, in member-offset order.
    pub volumes: Vec<VolumeEntry>,
    /// A reshape in progress (`uraid grow`), if any.
    pub reshape: Option<Reshape>,
}

/// A reshape in progress: the array's members grow from `old_members` to
/// the superblock's member count, and the logical bytes of the volume
/// below `position` are already in the new layout (durable on the
/// members); the rest are still where the old layout puts them. See
/// [`crate::control::array::grow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Reshape {
    /// The member count before the reshape.
    pub old_members: u32,
    /// Logical bytes of the volume, from 0, in the new layout.
    pub position: u64,
    /// The window being written when its old place may be overwritten
    /// before it is read (md's critical section), kept elsewhere first.
    pub backup: Option<ReshapeBackup>,
    /// The array is served during the reshape: a crash may have cut users'
    /// writes, so the array is resynced (over its write-intent bitmap, or
    /// whole) once the reshape has ended.
    pub live: bool,
    /// The level before the reshape when it changes (the volume table
    /// holds the one after), else `None`.
    pub old_level: Option<u32>,
    /// The chunk size in bytes before the reshape when it changes (the
    /// volume table holds the one after), else `None`.
    pub old_chunk: Option<u64>,
    /// The volume kept its parity on its last member before the reshape
    /// (`raid::layout::Variant::ParityLast`, after a takeover); the volume
    /// table holds the layout after (md's rotating one).
    #[serde(default)]
    pub old_parity_last: bool,
    /// The volume being restriped (Matrix arrays, members added: those
    /// before it are in the new layout, those after it in the old one).
    #[serde(default)]
    pub volume: u32,
}

/// A window of a reshape kept in a backup area: the logical bytes
/// `[position, position + len)` of the volume, as the new layout will
/// hold them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReshapeBackup {
    /// Length of the window in bytes.
    pub len: u64,
    /// CRC-32C of the window's bytes.
    pub crc: u32,
    /// The role whose device holds the backup.
    pub role: u32,
    /// Absolute byte offset of the backup on that device.
    pub offset: u64,
}

impl Superblock {
    /// True when this device is a spare.
    pub fn is_spare(&self) -> bool {
        self.slot >= self.member_count
    }

    /// Absolute byte offset on every member just past the last volume: the
    /// least size a member (or a new spare) must have.
    pub fn data_end(&self) -> u64 {
        self.volumes.iter().map(VolumeEntry::member_end).max().unwrap_or(DATA_OFFSET)
    }

    /// Absolute byte offset on every member just past what the array
    /// stores there: the volumes and the journal regions on members. The
    /// least size a member, spare or replacement must have.
    pub fn used_end(&self) -> u64 {
        self.volumes.iter().filter_map(|v| v.journal_region.map(|r| r.end())).fold(self.data_end(), u64::max)
    }

    /// The roles' entries (no spares).
    pub fn roles(&self) -> &[Slot] {
        &self.slots[..self.member_count as usize]
    }

    /// The spares' entries.
    pub fn spares(&self) -> &[Slot] {
        &self.slots[self.member_count as usize..]
    }

    /// True when every volume's layout, the member count and the bitmap
    /// region agree (what no event changes after create).
    pub fn same_layout(&self, other: &Superblock) -> bool {
        self.array_uuid == other.array_uuid
            && self.member_count == other.member_count
            && self.volumes == other.volumes
            && self.bitmap_region == other.bitmap_region
    }
}

/// Why a block is not a valid superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// No uraid magic: not a uraid member.
    NoMagic,
    /// Magic present but the checksum does not match: corrupted.
    BadCrc { stored: u32, computed: u32 },
    /// A format version this build does not read.
    Version(u32),
    /// Fields that cannot be right (named).
    Invalid(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NoMagic => write!(f, "no uraid superblock"),
            DecodeError::BadCrc { stored, computed } => {
                write!(f, "superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")
            }
            DecodeError::Version(v) if *v < VERSION => write!(
                f,
                "superblock format version {v} was written by an older uraid (before redundant arrays and \
                 volumes); this uraid reads version {VERSION} only and cannot convert it. Use the older uraid \
                 to copy the data off, then create the array again"
            ),
            DecodeError::Version(v) => {
                write!(f, "superblock format version {v} is newer than this uraid knows ({VERSION}, and {VERSION_RESHAPE} during a reshape or with a parity-last volume); use a newer uraid")
            }
            DecodeError::Invalid(s) => write!(f, "superblock field out of range: {s}"),
        }
    }
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
fn uuid_at(b: &[u8], o: usize) -> [u8; 16] {
    b[o..o + 16].try_into().expect("16 bytes")
}
fn put_name(b: &mut [u8], o: usize, name: &str) {
    let n = name.as_bytes();
    let len = n.len().min(NAME_MAX);
    b[o..o + len].copy_from_slice(&n[..len]);
}
fn name_at(b: &[u8], o: usize) -> String {
    let raw = &b[o..o + NAME_MAX];
    let end = raw.iter().position(|&c| c == 0).unwrap_or(NAME_MAX);
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// Formats a UUID the usual 8-4-4-4-12 way.
pub fn fmt_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub use crate::units::new_uuid;

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    crate::clock::wall_secs()
}

/// Checks an array name: 1 to 32 bytes of letters, digits, `-`, `_`, `.`.
pub fn check_name(name: &str) -> Result<()> {
    check_name_of("array", name)
}

/// Checks a name of `what` (array, volume): 1 to 32 bytes of letters,
/// digits, `-`, `_`, `.`. Errors: `InvalidInput` naming the rule.
pub fn check_name_of(what: &str, name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > NAME_MAX
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!(
            InvalidInput,
            "{what} name '{name}' is not valid: use 1 to {NAME_MAX} letters, digits, '-', '_' or '.'"
        );
    }
    Ok(())
}

impl Superblock {
    /// Counts one more change of the superblock (event counter + 1) and
    /// sets its update time. Errors: `OutOfRange` when the counter is at
    /// its largest value (2^64 - 1): it never wraps to 0, which would make
    /// the newest superblock look the oldest; such an array's members
    /// can still be read, but not changed.
    pub fn next_event(&mut self) -> Result<()> {
        let Some(next) = self.events.checked_add(1) else {
            bail!(
                OutOfRange,
                "the event counter of array '{}' is at its largest value ({}): one more change would wrap it to 0 and \
                 make this superblock look the oldest; nothing was written. Copy the data to a new array",
                self.name,
                self.events
            );
        };
        self.events = next;
        self.utime = unix_now();
        Ok(())
    }

    /// Encodes into a 4 KiB block with the checksum filled in. Entries past
    /// [`MAX_SLOTS`] slots or [`MAX_VOLUMES`] volumes are not written (the
    /// control path never makes them).
    pub fn encode(&self) -> [u8; SB_SIZE] {
        let mut b = [0u8; SB_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SB_SIZE as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.array_uuid);
        b[32..48].copy_from_slice(&self.member_uuid);
        put_name(&mut b, 48, &self.name);
        let slots = &self.slots[..self.slots.len().min(MAX_SLOTS)];
        let volumes = &self.volumes[..self.volumes.len().min(MAX_VOLUMES)];
        b[80..84].copy_from_slice(&self.member_count.to_le_bytes());
        b[84..88].copy_from_slice(&(slots.len() as u32).to_le_bytes());
        b[88..92].copy_from_slice(&self.slot.to_le_bytes());
        b[92..96].copy_from_slice(&(volumes.len() as u32).to_le_bytes());
        b[96..104].copy_from_slice(&self.ctime.to_le_bytes());
        b[104..112].copy_from_slice(&self.utime.to_le_bytes());
        b[112..120].copy_from_slice(&self.events.to_le_bytes());
        let st: u32 = match self.state {
            State::Clean => 0,
            State::Active => 1,
        };
        b[120..124].copy_from_slice(&st.to_le_bytes());
        b[128..136].copy_from_slice(&self.bitmap_region.to_le_bytes());
        if self.volumes.iter().any(|v| v.layout != 0) {
            b[8..12].copy_from_slice(&VERSION_RESHAPE.to_le_bytes());
        }
        if let Some(r) = &self.reshape {
            b[8..12].copy_from_slice(&VERSION_RESHAPE.to_le_bytes());
            b[136..140].copy_from_slice(&(1u32 | if r.backup.is_some() { 2 } else { 0 } | if r.live { 4 } else { 0 } | r.old_level.map_or(0, |l| (l + 1) << 8)
                | r.old_chunk.map_or(0, |c| (c.trailing_zeros() - 11) << 16)
                | if r.old_parity_last { 1 << 24 } else { 0 })
                .to_le_bytes());
            b[140..144].copy_from_slice(&r.old_members.to_le_bytes());
            b[144..152].copy_from_slice(&r.position.to_le_bytes());
            b[184..188].copy_from_slice(&r.volume.to_le_bytes());
            if let Some(k) = &r.backup {
                b[152..160].copy_from_slice(&r.position.to_le_bytes());
                b[160..168].copy_from_slice(&k.len.to_le_bytes());
                b[168..172].copy_from_slice(&k.crc.to_le_bytes());
                b[172..176].copy_from_slice(&k.role.to_le_bytes());
                b[176..184].copy_from_slice(&k.offset.to_le_bytes());
            }
        }
        for (i, s) in slots.iter().enumerate() {
            let o = SLOTS_AT + SLOT_SIZE * i;
            b[o..o + 16].copy_from_slice(&s.uuid);
            b[o + 16] = s.state as u8;
            b[o + 17] = s.resync_from_bitmap as u8;
            b[o + 24..o + 32].copy_from_slice(&s.recovery_offset.unwrap_or(IN_SYNC).to_le_bytes());
        }
        for (i, v) in volumes.iter().enumerate() {
            let o = VOLUMES_AT + VOLUME_SIZE * i;
            put_name(&mut b, o, &v.name);
            b[o + 32..o + 48].copy_from_slice(&v.uuid);
            b[o + 48..o + 52].copy_from_slice(&v.level.to_le_bytes());
            b[o + 52..o + 56].copy_from_slice(&(v.chunk as u32).to_le_bytes());
            b[o + 56..o + 64].copy_from_slice(&v.member_start.to_le_bytes());
            b[o + 64..o + 72].copy_from_slice(&v.member_size.to_le_bytes());
            b[o + 72] = v.cache_mode;
            b[o + 73] = v.journal_lost as u8;
            b[o + 74] = v.layout;
            b[o + 76..o + 80].copy_from_slice(&v.cache_size_mib.to_le_bytes());
            b[o + 80..o + 84].copy_from_slice(&v.dirty_limit_mib.to_le_bytes());
            b[o + 84..o + 100].copy_from_slice(&v.journal_uuid);
            if let Some(r) = v.journal_region {
                b[o + 100..o + 104].copy_from_slice(&(r.role + 1).to_le_bytes());
                b[o + 104..o + 112].copy_from_slice(&r.start.to_le_bytes());
                b[o + 112..o + 120].copy_from_slice(&r.size.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a block read from offset 0 of a member.
    ///
    /// Errors: [`DecodeError::NoMagic`] (not a uraid device),
    /// [`DecodeError::BadCrc`], [`DecodeError::Version`] (version 1 or a
    /// newer one), [`DecodeError::Invalid`] naming a field that cannot be
    /// right (counts, slot, states, levels, chunks, overlapping volumes).
    pub fn decode(b: &[u8]) -> std::result::Result<Superblock, DecodeError> {
        if b.len() < SB_SIZE || &b[0..8] != MAGIC {
            return Err(DecodeError::NoMagic);
        }
        let stored = u32_at(b, CRC_AT);
        let computed = crc32c::crc32c(&b[..CRC_AT]);
        if stored != computed {
            return Err(DecodeError::BadCrc { stored, computed });
        }
        let version = u32_at(b, 8);
        if version != VERSION && version != VERSION_RESHAPE {
            return Err(DecodeError::Version(version));
        }
        let inv = |s: String| Err(DecodeError::Invalid(s));
        if u32_at(b, 12) as usize != SB_SIZE {
            return inv(format!("superblock size {}", u32_at(b, 12)));
        }
        let member_count = u32_at(b, 80);
        let slot_count = u32_at(b, 84);
        let slot = u32_at(b, 88);
        let volume_count = u32_at(b, 92);
        if member_count == 0 || member_count as usize > crate::raid::geometry::MAX_MEMBERS {
            return inv(format!("member count {member_count}"));
        }
        if slot_count < member_count || slot_count as usize > member_count as usize + MAX_SPARES {
            return inv(format!("slot count {slot_count} with {member_count} members"));
        }
        if slot >= slot_count {
            return inv(format!("slot {slot} of {slot_count}"));
        }
        if volume_count == 0 || volume_count as usize > MAX_VOLUMES {
            return inv(format!("volume count {volume_count}"));
        }
        let state = match u32_at(b, 120) {
            0 => State::Clean,
            1 => State::Active,
            s => return inv(format!("state {s}")),
        };
        let bitmap_region = u64_at(b, 128);
        if bitmap_region != 0 && (!bitmap_region.is_power_of_two() || bitmap_region < 4096) {
            return inv(format!("bitmap region size {bitmap_region}"));
        }
        let mut slots = Vec::with_capacity(slot_count as usize);
        for i in 0..slot_count as usize {
            let o = SLOTS_AT + SLOT_SIZE * i;
            let raw = b[o + 16];
            if raw > MemberState::Missing as u8 {
                return inv(format!("state {raw} of slot {i}"));
            }
            let state = MemberState::from_u8(raw);
            let spare = i >= member_count as usize;
            if spare != (state == MemberState::Spare) {
                return inv(format!("slot {i} is {} but {}", state.name(), if spare { "a spare slot" } else { "a role" }));
            }
            let rec = u64_at(b, o + 24);
            slots.push(Slot {
                uuid: uuid_at(b, o),
                state,
                resync_from_bitmap: b[o + 17] & 1 != 0,
                recovery_offset: (rec != IN_SYNC).then_some(rec),
            });
        }
        let member_uuid = uuid_at(b, 32);
        if slots[slot as usize].uuid != member_uuid {
            return inv(format!("slot {slot} records another member UUID than this member's"));
        }
        let mut volumes: Vec<VolumeEntry> = Vec::with_capacity(volume_count as usize);
        for i in 0..volume_count as usize {
            let o = VOLUMES_AT + VOLUME_SIZE * i;
            let v = VolumeEntry {
                name: name_at(b, o),
                uuid: uuid_at(b, o + 32),
                level: u32_at(b, o + 48),
                chunk: u32_at(b, o + 52) as u64,
                member_start: u64_at(b, o + 56),
                member_size: u64_at(b, o + 64),
                cache_mode: b[o + 72],
                cache_size_mib: u32_at(b, o + 76),
                dirty_limit_mib: u32_at(b, o + 80),
                journal_uuid: b[o + 84..o + 100].try_into().expect("16 bytes"),
                journal_lost: b[o + 73] & 1 != 0,
                journal_region: match u32_at(b, o + 100) {
                    0 => None,
                    r => Some(JournalRegion { role: r - 1, start: u64_at(b, o + 104), size: u64_at(b, o + 112) }),
                },
                layout: b[o + 74],
            };
            if v.layout != 0 && (version != VERSION_RESHAPE || !matches!(v.level, 5 | 6) || crate::raid::layout::Variant::from_u8(v.layout).is_none()) {
                return inv(format!("layout {} of volume {i} (RAID {})", v.layout, v.level));
            }
            if check_name_of("volume", &v.name).is_err() {
                return inv(format!("name of volume {i} ({:?}: not 1 to {NAME_MAX} letters, digits, '-', '_' or '.')", v.name));
            }
            let Ok(level) = crate::raid::geometry::Level::from_number(v.level) else {
                return inv(format!("level {} of volume {i}", v.level));
            };
            if level.min_members() > member_count as usize {
                return inv(format!("volume {i} is RAID {} over {member_count} members", v.level));
            }
            if crate::cache::CacheMode::from_u8(v.cache_mode).is_err() {
                return inv(format!("cache mode {} of volume {i}", v.cache_mode));
            }
            if crate::raid::geometry::check_chunk(v.chunk).is_err() {
                return inv(format!("chunk size {} of volume {i}", v.chunk));
            }
            let prev_end = volumes.last().map_or(DATA_OFFSET, VolumeEntry::member_end);
            if v.member_start < prev_end || !v.member_start.is_multiple_of(4096) {
                return inv(format!("member start {} of volume {i}", v.member_start));
            }
            if v.member_size < v.chunk || !v.member_size.is_multiple_of(v.chunk) || v.member_start.checked_add(v.member_size).is_none() {
                return inv(format!("member size {} of volume {i}", v.member_size));
            }
            // The volume's capacity (at most member count x member size, at
            // every level) must be a byte count too.
            if v.member_size.checked_mul(member_count as u64).is_none() {
                return inv(format!("member size {} of volume {i} (over {member_count} members: past 2^64 bytes)", v.member_size));
            }
            volumes.push(v);
        }
        // Journal regions on members: past the volumes' areas, apart.
        for (i, v) in volumes.iter().enumerate() {
            let Some(r) = v.journal_region else { continue };
            let bad = r.role >= member_count
                || v.cache_mode != crate::cache::CacheMode::Journal.to_u8()
                || r.start < DATA_OFFSET
                || r.start % 4096 != 0
                || r.size < crate::cache::journal::HEADER_SIZE + crate::cache::journal::MIN_LOG
                || r.start.checked_add(r.size).is_none()
                || volumes.iter().any(|o| o.member_start < r.start + r.size && r.start < o.member_end())
                || volumes[..i].iter().filter_map(|o| o.journal_region).any(|o| o.start < r.end() && r.start < o.end());
            if bad {
                return inv(format!("journal region of volume {i} (role {}, bytes {}+{})", r.role, r.start, r.size));
            }
        }
        // Names reach socket paths and the shell lines `serve` prints: the
        // rule of `create` holds on read too.
        let name = name_at(b, 48);
        if check_name(&name).is_err() {
            return inv(format!("array name ({name:?}: not 1 to {NAME_MAX} letters, digits, '-', '_' or '.')"));
        }
        let reshape = if version == VERSION_RESHAPE && u32_at(b, 136) != 0 {
            let flags = u32_at(b, 136);
            let old_members = u32_at(b, 140);
            if flags & 1 == 0 || flags & !0x01ff_ff07 != 0 || (flags >> 8) & 0xff > 11 || (flags >> 16) & 0xff > 9 || old_members == 0 || old_members > member_count || (old_members == member_count && (flags >> 16) & 0xff == 0) {
                return inv(format!("reshape record (flags {flags}, from {old_members} to {member_count} members)"));
            }
            let position = u64_at(b, 144);
            let volume = u32_at(b, 184);
            if volume >= volume_count {
                return inv(format!("reshape record (volume {volume} of {volume_count})"));
            }
            let backup = if flags & 2 != 0 {
                let k = ReshapeBackup { len: u64_at(b, 160), crc: u32_at(b, 168), role: u32_at(b, 172), offset: u64_at(b, 176) };
                // A spread backup (a chunk change over the same members)
                // lies past the bitmap on every member that is up.
                let placed = if k.role == u32::MAX {
                    old_members == member_count && k.offset >= 64 << 10 && k.offset < DATA_OFFSET
                } else {
                    k.role < member_count && k.offset >= DATA_OFFSET
                };
                if u64_at(b, 152) != position || !placed || k.len == 0 || k.offset.checked_add(k.len).is_none() {
                    return inv(format!("reshape backup (role {}, bytes {}+{})", k.role, k.offset, k.len));
                }
                Some(k)
            } else {
                None
            };
            Some(Reshape { old_members, position, backup, live: flags & 4 != 0, old_level: ((flags >> 8) & 0xff).checked_sub(1), old_chunk: match (flags >> 16) & 0xff { 0 => None, c => Some(1u64 << (c + 11)) }, old_parity_last: flags & (1 << 24) != 0, volume })
        } else {
            None
        };
        Ok(Superblock {
            array_uuid: uuid_at(b, 16),
            member_uuid,
            name,
            member_count,
            slot,
            ctime: u64_at(b, 96),
            utime: u64_at(b, 104),
            events: u64_at(b, 112),
            state,
            bitmap_region,
            slots,
            volumes,
            reshape,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(name: &str, level: u32, chunk: u64, start: u64, size: u64) -> VolumeEntry {
        VolumeEntry { name: name.into(), uuid: new_uuid(), level, chunk, member_start: start, member_size: size, cache_mode: 0, cache_size_mib: 0, dirty_limit_mib: 0, journal_uuid: [0; 16], journal_lost: false, journal_region: None, layout: 0 }
    }

    fn sample() -> Superblock {
        Superblock {
            array_uuid: new_uuid(),
            member_uuid: [7; 16],
            name: "fast".into(),
            member_count: 3,
            slot: 1,
            ctime: 1,
            utime: 2,
            events: 3,
            state: State::Active,
            bitmap_region: 64 << 20,
            slots: vec![
                Slot { uuid: [1; 16], state: MemberState::Active, resync_from_bitmap: false, recovery_offset: None },
                Slot { uuid: [7; 16], state: MemberState::Rebuilding, resync_from_bitmap: true, recovery_offset: Some(5 << 20) },
                Slot { uuid: [0; 16], state: MemberState::Missing, resync_from_bitmap: false, recovery_offset: None },
                Slot { uuid: [9; 16], state: MemberState::Spare, resync_from_bitmap: false, recovery_offset: None },
            ],
            volumes: vec![
                volume("speed", 0, 128 << 10, DATA_OFFSET, 256 << 20),
                volume("safe", 5, 64 << 10, DATA_OFFSET + (256 << 20), 512 << 20),
            ],
            reshape: None,
        }
    }

    #[test]
    fn a_reshape_record_roundtrips_as_version_3() {
        let mut s = sample();
        s.reshape = Some(Reshape { old_members: 2, position: 3 << 20, backup: None, live: true, old_level: Some(1), old_chunk: Some(64 << 10), old_parity_last: true, volume: 0 });
        let b = s.encode();
        assert_eq!(u32_at(&b, 8), VERSION_RESHAPE);
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        s.reshape = Some(Reshape { old_members: 2, position: 3 << 20, live: false, old_level: None, old_chunk: None, old_parity_last: false, volume: 0, backup: Some(ReshapeBackup { len: 1 << 20, crc: 7, role: 2, offset: 900 << 20 }) });
        assert_eq!(Superblock::decode(&s.encode()).unwrap(), s);
        // Back to version 2 when it ends.
        s.reshape = None;
        assert_eq!(u32_at(&s.encode(), 8), VERSION);
        // A record that cannot be right: from as many members as after.
        s.reshape = Some(Reshape { old_members: 3, position: 0, backup: None, live: false, old_level: None, old_chunk: None, old_parity_last: false, volume: 0 });
        assert!(matches!(Superblock::decode(&s.encode()), Err(DecodeError::Invalid(_))));
    }

    #[test]
    fn roundtrip_with_volume_table_spares_and_checkpoint() {
        let s = sample();
        let d = Superblock::decode(&s.encode()).unwrap();
        assert_eq!(d, s);
        assert_eq!(d.roles().len(), 3);
        assert_eq!(d.spares().len(), 1);
        assert!(!d.is_spare());
        assert_eq!(d.data_end(), DATA_OFFSET + (768 << 20));
        // Field positions as the format table gives them.
        let b = s.encode();
        assert_eq!(u32_at(&b, 8), 2);
        assert_eq!(u32_at(&b, 84), 4);
        assert_eq!(b[SLOTS_AT + SLOT_SIZE + 16], MemberState::Rebuilding as u8);
        assert_eq!(u64_at(&b, SLOTS_AT + SLOT_SIZE + 24), 5 << 20);
        assert_eq!(u64_at(&b, SLOTS_AT + 24), u64::MAX);
        assert_eq!(u32_at(&b, VOLUMES_AT + VOLUME_SIZE + 48), 5);
        assert_eq!(u64_at(&b, VOLUMES_AT + VOLUME_SIZE + 56), DATA_OFFSET + (256 << 20));
        // A spare's own superblock.
        let mut sp = s.clone();
        sp.slot = 3;
        sp.member_uuid = [9; 16];
        let d = Superblock::decode(&sp.encode()).unwrap();
        assert!(d.is_spare());
        assert!(d.same_layout(&s));
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let b = sample().encode();
        for i in (0..SB_SIZE).step_by(7).chain([80, 88, 256 + 16, 1536 + 48, 4092]) {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(Superblock::decode(&c).is_err(), "flip at byte {i} not detected");
        }
    }

    fn reseal(b: &mut [u8; SB_SIZE]) {
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn version_1_is_refused_clearly() {
        let mut b = sample().encode();
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        reseal(&mut b);
        let e = Superblock::decode(&b).unwrap_err();
        assert_eq!(e, DecodeError::Version(1));
        let msg = e.to_string();
        assert!(msg.contains("version 1") && msg.contains("older uraid") && msg.contains("create the array again"), "{msg}");
        b[8..12].copy_from_slice(&4u32.to_le_bytes());
        reseal(&mut b);
        assert!(Superblock::decode(&b).unwrap_err().to_string().contains("newer"));
    }

    type Damage = Box<dyn Fn(&mut [u8; SB_SIZE])>;

    #[test]
    fn impossible_fields_are_named() {
        let cases: Vec<(Damage, &str)> = vec![
            (Box::new(|b| b[80..84].copy_from_slice(&0u32.to_le_bytes())), "member count"),
            (Box::new(|b| b[84..88].copy_from_slice(&20u32.to_le_bytes())), "slot count"),
            (Box::new(|b| b[88..92].copy_from_slice(&4u32.to_le_bytes())), "slot 4"),
            (Box::new(|b| b[92..96].copy_from_slice(&9u32.to_le_bytes())), "volume count"),
            (Box::new(|b| b[SLOTS_AT + 16] = 9), "state 9 of slot 0"),
            (Box::new(|b| b[SLOTS_AT + 16] = MemberState::Spare as u8), "slot 0 is spare"),
            (Box::new(|b| b[VOLUMES_AT + 48] = 7), "level 7"),
            (Box::new(|b| b[VOLUMES_AT + VOLUME_SIZE + 48] = 6), "RAID 6 over 3"),
            (Box::new(|b| b[VOLUMES_AT + 52..VOLUMES_AT + 56].copy_from_slice(&3000u32.to_le_bytes())), "chunk size 3000"),
            (
                Box::new(|b| b[VOLUMES_AT + VOLUME_SIZE + 56..VOLUMES_AT + VOLUME_SIZE + 64].copy_from_slice(&(DATA_OFFSET + 4096).to_le_bytes())),
                "member start",
            ),
            (Box::new(|b| b[128..136].copy_from_slice(&5000u64.to_le_bytes())), "bitmap region"),
            (Box::new(|b| b[32] ^= 1), "another member UUID"),
        ];
        for (f, needle) in cases {
            let mut b = sample().encode();
            f(&mut b);
            reseal(&mut b);
            let e = Superblock::decode(&b).unwrap_err();
            assert!(matches!(e, DecodeError::Invalid(_)) && e.to_string().contains(needle), "{needle}: {e}");
        }
    }

    /// `sample()` with volume "safe" in journal mode, its journal on role 2
    /// at the given region.
    fn with_member_journal(start: u64, size: u64) -> Superblock {
        let mut s = sample();
        let v = &mut s.volumes[1];
        v.cache_mode = crate::cache::CacheMode::Journal.to_u8();
        v.journal_uuid = [5; 16];
        v.journal_region = Some(JournalRegion { role: 2, start, size });
        s
    }

    #[test]
    fn a_journal_on_a_member_roundtrips_and_must_lie_past_the_volumes() {
        let end = DATA_OFFSET + (768 << 20);
        let s = with_member_journal(end, 80 << 20);
        let b = s.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        let o = VOLUMES_AT + VOLUME_SIZE;
        assert_eq!((u32_at(&b, o + 100), u64_at(&b, o + 104), u64_at(&b, o + 112)), (3, end, 80 << 20));
        assert_eq!(s.used_end(), end + (80 << 20));
        assert_eq!(s.data_end(), end);
        // A journal device of its own lost while running: byte 73, bit 0.
        let mut lost = s.clone();
        lost.volumes[0].cache_mode = crate::cache::CacheMode::Journal.to_u8();
        lost.volumes[0].journal_lost = true;
        let bl = lost.encode();
        assert_eq!(bl[VOLUMES_AT + 73], 1);
        assert_eq!(Superblock::decode(&bl).unwrap(), lost);
        // Leaving the journal mode drops the region and the lost mark.
        let mut v = s.volumes[1].clone();
        v.journal_lost = true;
        v.set_cache_config(&crate::cache::CacheConfig::default());
        assert_eq!((v.journal_region, v.journal_uuid, v.journal_lost), (None, [0; 16], false));
        for (bad, why) in [
            (with_member_journal(end - (1 << 20), 80 << 20), "overlaps a volume"),
            (with_member_journal(end, 1 << 20), "smaller than a journal"),
            (with_member_journal(end + 512, 80 << 20), "not 4 KiB aligned"),
            ({
                let mut s = with_member_journal(end, 80 << 20);
                s.volumes[1].journal_region.as_mut().unwrap().role = 3;
                s
            }, "a spare slot, not a role"),
            ({
                let mut s = with_member_journal(end, 80 << 20);
                s.volumes[1].cache_mode = 2;
                s
            }, "not in journal mode"),
            ({
                let mut s = with_member_journal(end, 80 << 20);
                s.volumes[0].cache_mode = crate::cache::CacheMode::Journal.to_u8();
                s.volumes[0].journal_region = Some(JournalRegion { role: 0, start: end + (40 << 20), size: 80 << 20 });
                s
            }, "overlaps the other journal"),
        ] {
            let e = Superblock::decode(&bad.encode()).unwrap_err();
            assert!(e.to_string().contains("journal region of volume"), "{why}: {e}");
        }
    }

    #[test]
    fn names_are_checked_on_read_as_on_create() {
        for bad in ["../../etc/x", "a b", "a;rm -rf /", ""] {
            let mut sb = sample();
            sb.name = bad.into();
            let mut b = sb.encode();
            // encode truncates to 32 bytes but writes what it is given.
            let crc = crc32c::crc32c(&b[..CRC_AT]);
            b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            let e = Superblock::decode(&b).expect_err(bad);
            assert!(e.to_string().contains("array name"), "{bad}: {e}");
            let mut sb = sample();
            sb.volumes[0].name = if bad.is_empty() { "x/y".into() } else { bad.into() };
            let e = Superblock::decode(&sb.encode()).expect_err(bad);
            assert!(e.to_string().contains("name of volume 0"), "{bad}: {e}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Arbitrary bytes, and valid superblocks with bytes changed and the
        /// checksum made right again, decode or give an error: never a
        /// panic.
        #[test]
        fn decode_never_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..SB_SIZE + 64),
                               flips in proptest::collection::vec((0..SB_SIZE, proptest::prelude::any::<u8>()), 1..24)) {
            let _ = Superblock::decode(&raw);
            let mut b = sample().encode();
            for (at, v) in flips {
                if !(CRC_AT..CRC_AT + 4).contains(&at) {
                    b[at] = v;
                }
            }
            let crc = crc32c::crc32c(&b[..CRC_AT]);
            b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            let _ = Superblock::decode(&b);
        }
    }

    #[test]
    fn the_event_counter_never_wraps() {
        let mut sb = sample();
        sb.events = u64::MAX - 1;
        sb.next_event().unwrap();
        assert_eq!(sb.events, u64::MAX);
        let e = sb.next_event().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::OutOfRange);
        assert!(e.to_string().contains("event counter") && e.to_string().contains("18446744073709551615"), "{e}");
        assert_eq!(sb.events, u64::MAX, "unchanged");
    }

    #[test]
    fn names_and_uuids() {
        assert!(check_name("fast-0.a_b").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name(&"x".repeat(33)).is_err());
        assert!(check_name_of("volume", "a/b").unwrap_err().to_string().contains("volume name 'a/b'"));
        let u = new_uuid();
        assert_eq!(fmt_uuid(&u).len(), 36);
        assert_eq!(u[6] >> 4, 4);
    }
}
