//! The superblock: a 4 KiB record at the start of every member that makes
//! an array persistent and self-describing.
//!
//! Format (version 1, all integers little-endian), in the spirit of md's
//! v1.x superblock but simpler:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `URAIDSB\x01` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | superblock size in bytes (4096) |
//! | 16 | 16 | array UUID |
//! | 32 | 16 | this member's UUID |
//! | 48 | 32 | array name, UTF-8, zero padded |
//! | 80 | 4 | level (0) |
//! | 84 | 4 | chunk size in bytes |
//! | 88 | 4 | member count |
//! | 92 | 4 | this member's index (role) |
//! | 96 | 8 | data offset in bytes (multiple of 1 MiB) |
//! | 104 | 8 | data size per member in bytes |
//! | 112 | 8 | creation time, seconds since the Unix epoch |
//! | 120 | 8 | update time, seconds since the Unix epoch |
//! | 128 | 8 | event counter (bumped on every assemble and state change) |
//! | 136 | 4 | state (0 clean, 1 active) |
//! | 512 | 16 x 32 | member UUID of each role, in role order |
//! | 4092 | 4 | CRC-32C (Castagnoli) of bytes 0..4092 |
//!
//! Bytes not named are zero and reserved for later versions.

use crate::{bail, Result};

/// Magic bytes at offset 0.
pub const MAGIC: &[u8; 8] = b"URAIDSB\x01";
/// Current format version.
pub const VERSION: u32 = 1;
/// Bytes the superblock occupies on each member.
pub const SB_SIZE: usize = 4096;
/// Data offset of new arrays, in bytes: the data area starts 1 MiB in.
pub const DATA_OFFSET: u64 = 1 << 20;
/// Longest array name, in bytes.
pub const NAME_MAX: usize = 32;
const MEMBERS_AT: usize = 512;
const CRC_AT: usize = SB_SIZE - 4;

/// Whether the array was stopped cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum State {
    /// Stopped cleanly.
    Clean,
    /// In use, or stopped without marking it clean.
    Active,
}

/// The decoded superblock of one member.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Superblock {
    /// Array UUID (same on every member).
    pub array_uuid: [u8; 16],
    /// This member's UUID.
    pub member_uuid: [u8; 16],
    /// Array name.
    pub name: String,
    /// RAID level number (0, 1, 5, 6, 10).
    pub level: u32,
    /// Chunk size in bytes.
    pub chunk: u64,
    /// Members in the array.
    pub member_count: u32,
    /// This member's role.
    pub member_index: u32,
    /// Byte offset where data starts on each member.
    pub data_offset: u64,
    /// Bytes of data per member.
    pub data_size: u64,
    /// Creation time, Unix seconds.
    pub ctime: u64,
    /// Last update, Unix seconds.
    pub utime: u64,
    /// Event counter.
    pub events: u64,
    /// Clean or active.
    pub state: State,
    /// UUID of the member in each role.
    pub members: Vec<[u8; 16]>,
}

/// Why a block is not a valid superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// No uraid magic: not a uraid member.
    NoMagic,
    /// Magic present but the checksum does not match: corrupted.
    BadCrc { stored: u32, computed: u32 },
    /// A format version this build does not know.
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
            DecodeError::Version(v) => write!(f, "superblock format version {v} is newer than this uraid knows ({VERSION})"),
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

/// Formats a UUID the usual 8-4-4-4-12 way.
pub fn fmt_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A random version-4 UUID.
pub fn new_uuid() -> [u8; 16] {
    let mut u: [u8; 16] = rand::random();
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Checks an array name: 1 to 32 bytes of letters, digits, `-`, `_`, `.`.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > NAME_MAX
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!(
            InvalidInput,
            "array name '{name}' is not valid: use 1 to {NAME_MAX} letters, digits, '-', '_' or '.'"
        );
    }
    Ok(())
}

impl Superblock {
    /// Encodes into a 4 KiB block with the checksum filled in.
    pub fn encode(&self) -> [u8; SB_SIZE] {
        let mut b = [0u8; SB_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SB_SIZE as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.array_uuid);
        b[32..48].copy_from_slice(&self.member_uuid);
        let n = self.name.as_bytes();
        b[48..48 + n.len().min(NAME_MAX)].copy_from_slice(&n[..n.len().min(NAME_MAX)]);
        b[80..84].copy_from_slice(&self.level.to_le_bytes());
        b[84..88].copy_from_slice(&(self.chunk as u32).to_le_bytes());
        b[88..92].copy_from_slice(&self.member_count.to_le_bytes());
        b[92..96].copy_from_slice(&self.member_index.to_le_bytes());
        b[96..104].copy_from_slice(&self.data_offset.to_le_bytes());
        b[104..112].copy_from_slice(&self.data_size.to_le_bytes());
        b[112..120].copy_from_slice(&self.ctime.to_le_bytes());
        b[120..128].copy_from_slice(&self.utime.to_le_bytes());
        b[128..136].copy_from_slice(&self.events.to_le_bytes());
        let st: u32 = match self.state {
            State::Clean => 0,
            State::Active => 1,
        };
        b[136..140].copy_from_slice(&st.to_le_bytes());
        for (i, u) in self.members.iter().enumerate().take(crate::geometry::MAX_MEMBERS) {
            b[MEMBERS_AT + 16 * i..MEMBERS_AT + 16 * (i + 1)].copy_from_slice(u);
        }
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a block read from offset 0 of a member.
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
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let inv = |s: String| Err(DecodeError::Invalid(s));
        let member_count = u32_at(b, 88);
        let member_index = u32_at(b, 92);
        if member_count == 0 || member_count as usize > crate::geometry::MAX_MEMBERS {
            return inv(format!("member count {member_count}"));
        }
        if member_index >= member_count {
            return inv(format!("member index {member_index} of {member_count}"));
        }
        let chunk = u32_at(b, 84) as u64;
        if crate::geometry::check_chunk(chunk).is_err() {
            return inv(format!("chunk size {chunk}"));
        }
        let data_offset = u64_at(b, 96);
        if data_offset < SB_SIZE as u64 || data_offset % (1 << 20) != 0 {
            return inv(format!("data offset {data_offset}"));
        }
        let name_raw = &b[48..80];
        let end = name_raw.iter().position(|&c| c == 0).unwrap_or(NAME_MAX);
        let name = String::from_utf8_lossy(&name_raw[..end]).into_owned();
        let state = match u32_at(b, 136) {
            0 => State::Clean,
            1 => State::Active,
            s => return inv(format!("state {s}")),
        };
        let members = (0..member_count as usize)
            .map(|i| b[MEMBERS_AT + 16 * i..MEMBERS_AT + 16 * (i + 1)].try_into().expect("16 bytes"))
            .collect();
        Ok(Superblock {
            array_uuid: b[16..32].try_into().expect("16 bytes"),
            member_uuid: b[32..48].try_into().expect("16 bytes"),
            name,
            level: u32_at(b, 80),
            chunk,
            member_count,
            member_index,
            data_offset,
            data_size: u64_at(b, 104),
            ctime: u64_at(b, 112),
            utime: u64_at(b, 120),
            events: u64_at(b, 128),
            state,
            members,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            array_uuid: new_uuid(),
            member_uuid: [7; 16],
            name: "fast".into(),
            level: 0,
            chunk: 128 << 10,
            member_count: 3,
            member_index: 1,
            data_offset: DATA_OFFSET,
            data_size: 1 << 30,
            ctime: 1,
            utime: 2,
            events: 3,
            state: State::Clean,
            members: vec![[1; 16], [7; 16], [9; 16]],
        }
    }

    #[test]
    fn roundtrip() {
        let s = sample();
        assert_eq!(Superblock::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let b = sample().encode();
        for i in (0..SB_SIZE).step_by(7) {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(Superblock::decode(&c).is_err(), "flip at byte {i} not detected");
        }
    }

    #[test]
    fn names_and_uuids() {
        assert!(check_name("fast-0.a_b").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name(&"x".repeat(33)).is_err());
        let u = new_uuid();
        assert_eq!(fmt_uuid(&u).len(), 36);
        assert_eq!(u[6] >> 4, 4);
    }
}
