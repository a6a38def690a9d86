//! What a cache is asked to be: its mode (off, write-through, write-back,
//! journal), sizes and limits as the superblock's volume table stores them,
//! and the counters it keeps.

use std::time::Duration;

use crate::{bail, Result};

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

/// This machine's memory in bytes (`MemTotal` of /proc/meminfo), `None`
/// when it cannot be read.
pub fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// Checks that a cache of `size` bytes fits in this machine's memory
/// ([`machine_memory`]; not checked when it cannot be read). The cache
/// lives in RAM and fills up to its size, so a larger one would end in
/// the kernel's OOM killer. `MemTotal` is the bound rather than the memory
/// free now, so that the answer does not change with the load of the
/// moment. Errors: `InvalidInput` naming the size and the memory.
pub fn check_cache_memory(size: u64) -> Result<()> {
    match machine_memory() {
        Some(mem) => check_cache_fits(size, mem),
        None => Ok(()),
    }
}

/// [`check_cache_memory`] against `mem` bytes of memory.
fn check_cache_fits(size: u64, mem: u64) -> Result<()> {
    if size > mem {
        bail!(
            InvalidInput,
            "cache size {} ({size} bytes) is more than this machine's memory, {} ({mem} bytes, MemTotal in /proc/meminfo): \
             the cache is held in RAM; give a smaller --cache-size (default {})",
            crate::units::fmt_size(size),
            crate::units::fmt_size(mem),
            crate::units::fmt_size(DEFAULT_CACHE_SIZE)
        );
    }
    Ok(())
}

/// How a volume's cache is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_larger_than_the_memory_is_refused() {
        let e = check_cache_fits(1 << 50, 24 << 30).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        let m = e.to_string();
        assert!(m.contains("1125899906842624 bytes") && m.contains("25769803776 bytes") && m.contains("MemTotal"), "{m}");
        check_cache_fits(24 << 30, 24 << 30).unwrap();
        let mem = machine_memory().expect("/proc/meminfo has MemTotal");
        assert!(mem > 64 << 20, "{mem}");
        assert!(check_cache_memory(mem + 1).is_err());
        check_cache_memory(DEFAULT_CACHE_SIZE).unwrap();
    }
}
