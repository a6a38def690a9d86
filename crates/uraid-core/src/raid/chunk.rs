//! Chunks and segments: the units that both the RAID 0 geometry and the
//! redundant layouts cut a volume into (md's chunk, or stripe unit), and
//! the limits on them. Pure definitions, no I/O.

use crate::{bail, Result};

/// Smallest chunk (stripe unit) accepted, in bytes.
pub const MIN_CHUNK: u64 = 4 << 10;
/// Largest chunk accepted, in bytes.
pub const MAX_CHUNK: u64 = 1 << 20;
/// Default chunk, in bytes (128 KiB).
///
/// Why 128 KiB: it is Intel Matrix RAID 0's default, and it is small enough
/// that one 1 MiB request (CrystalDiskMark's SEQ1M, a typical large transfer)
/// spans 8 chunks and so keeps up to 8 members busy even at queue depth 1,
/// while a 4 KiB random I/O still touches one member only. md's 512 KiB
/// leaves half of a 4-member array idle for a 1 MiB request at QD1; 16 KiB
/// (Intel RST) splits every 1 MiB request into 64 pieces for nothing.
pub const DEFAULT_CHUNK: u64 = 128 << 10;
/// Most members an array may have.
pub const MAX_MEMBERS: usize = 32;

/// Checks that `chunk` (bytes) is a power of two from 4 KiB to 1 MiB.
///
/// Errors: `InvalidInput` with the accepted range in the message.
pub fn check_chunk(chunk: u64) -> Result<()> {
    if !chunk.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) {
        bail!(
            InvalidInput,
            "chunk size {chunk} bytes is not valid: it must be a power of two from 4K to 1M \
             (4K, 8K, 16K, 32K, 64K, 128K, 256K, 512K or 1M)"
        );
    }
    Ok(())
}

/// One contiguous piece of a logical range on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Member index (0-based, the member's role in the array).
    pub member: u32,
    /// Byte offset in the member's data area (add the data offset for the
    /// absolute position on the device).
    pub member_offset: u64,
    /// Byte offset of this piece inside the caller's buffer.
    pub buf_offset: usize,
    /// Length in bytes; never crosses a chunk boundary.
    pub len: usize,
}

