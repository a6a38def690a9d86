//! Write-intent bitmap (being written: see the module's final docs).
//!
//! Interface used by the engine: `start_write` before a member range is
//! written (returns once the covering regions are durably dirty),
//! `end_write` after. Offsets are absolute member byte offsets.

use crate::Result;

/// The write-intent bitmap of an array.
#[derive(Debug, Default)]
pub struct Bitmap {}

impl Bitmap {
    /// Marks the regions covering `[offset, offset+len)` (absolute member
    /// bytes) dirty, durably, and counts a write in flight on them.
    pub fn start_write(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }

    /// Ends a write started with [`start_write`](Self::start_write).
    pub fn end_write(&self, _offset: u64, _len: u64) {}
}
