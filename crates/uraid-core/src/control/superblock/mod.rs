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
//! | 124 | 4 | feature flags: bit 0 = the write-intent bitmap's written bits are a live-data map (see `raid::bitmap`: a region whose bit is clear holds no data, reads as zeros, and may hold anything on the members; written as version 4, which an older uraid refuses); other bits must be zero |
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
//! | 120 | 3 | declustered levels (draid5 105, draid6 106): layout version (1), data chunks per group D, distributed spares S; zero at other levels (a superblock with a declustered volume is written as version 3) |
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
/// The version of a superblock whose array has a live-data map (feature
/// bit 0 at byte 124): a uraid that does not know the map would read the
/// regions it marks dead as data, so it must refuse the array.
pub const VERSION_LIVE_MAP: u32 = 4;
/// Feature bit (byte 124): the bitmap's written bits are a live-data map.
pub const FEATURE_LIVE_MAP: u32 = 1;
/// Bytes the superblock occupies on each member.
pub const SB_SIZE: usize = 4096;
/// Data offset of new arrays, in bytes: the first volume starts 1 MiB in.
pub use crate::io::member::DATA_OFFSET;
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
    /// The declustered levels (draid5, draid6): D, S and the layout
    /// version; `None` at every other level.
    pub draid: Option<DraidEntry>,
}

/// What a declustered volume's entry records (bytes 120..128 of its
/// entry): how its groups and spares are laid out (120..123), and which
/// role each of its first [`MAX_HELD`](crate::raid::spare::MAX_HELD)
/// distributed spares holds (123..128; zero in older superblocks: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DraidEntry {
    /// Layout version ([`crate::raid::level::LAYOUT_VERSION`]).
    pub version: u8,
    /// Data chunks per group (D).
    pub data: u32,
    /// Distributed spares (S).
    pub spares: u32,
    /// Per distributed spare `k` (below S and
    /// [`MAX_HELD`](crate::raid::spare::MAX_HELD)): 0 when free, else the
    /// role it holds plus 1 (that role is
    /// [`Spared`](crate::raid::health::MemberState::Spared)).
    pub held: [u8; crate::raid::spare::MAX_HELD],
}

impl DraidEntry {
    /// The role distributed spare `k` holds, if any.
    pub fn role_of(&self, k: u32) -> Option<u32> {
        self.held.get(k as usize).and_then(|&h| h.checked_sub(1)).map(u32::from)
    }

    /// The distributed spare holding `role`, if any.
    pub fn spare_of(&self, role: u32) -> Option<u32> {
        self.held.iter().position(|&h| h as u32 == role + 1).map(|k| k as u32)
    }

    /// The lowest free distributed spare with room in the entry, if any.
    pub fn free_spare(&self) -> Option<u32> {
        (0..self.spares.min(crate::raid::spare::MAX_HELD as u32)).find(|&k| self.held[k as usize] == 0)
    }
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
        self.geometry(members).map_or(0, |g| g.capacity())
    }

    /// The volume's layout over `members` members: its level, chunk and
    /// member size, RAID 5/6 parity variant, declustered D and S.
    ///
    /// Errors: `InvalidInput` for a level, variant or declustered shape
    /// this build cannot lay out.
    pub fn geometry(&self, members: usize) -> Result<crate::raid::geometry::Geometry> {
        let level = crate::raid::geometry::Level::from_number(self.level)?;
        let variant = crate::raid::layout::Variant::from_u8(self.layout).unwrap_or_default();
        let g = crate::raid::geometry::Geometry::new(level, members, self.chunk, self.member_size)?.with_variant(variant)?;
        match self.draid {
            Some(d) => g.with_draid(d.data, d.spares),
            None => Ok(g),
        }
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
    /// The bitmap's written bits are a live-data map (feature bit 0):
    /// regions never written (or discarded whole) hold no data, read as
    /// zeros and are skipped by rebuild, resync and check. False for
    /// arrays without a bitmap and arrays made before the map (their
    /// volume areas were zeroed at create, every region counts as live
    /// for reads and writes).
    #[serde(default)]
    pub live_map: bool,
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

    /// The absolute member byte ranges `[start, end)` of the redundant
    /// volumes: what the live-data map's first writes may zero (see
    /// `Bitmap::with_live_map_areas`).
    pub fn redundant_areas(&self) -> Vec<(u64, u64)> {
        self.volumes.iter().filter(|v| v.redundant()).map(|v| (v.member_start, v.member_end())).collect()
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
            && self.live_map == other.live_map
    }
}

/// Why a block is not a valid superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// No uraid magic: not a uraid member.
    NoMagic,
    /// Magic present but the checksum does not match: corrupted.
    BadCrc {
        /// The CRC32C the block carries.
        stored: u32,
        /// The CRC32C of its bytes.
        computed: u32,
    },
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
                write!(f, "superblock format version {v} is newer than this uraid knows ({VERSION}, {VERSION_RESHAPE} during a reshape or with a parity-last volume, {VERSION_LIVE_MAP} with a live-data map); use a newer uraid")
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
}

mod codec;

#[cfg(test)]
mod tests;
