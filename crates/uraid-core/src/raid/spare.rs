//! Distributed spare space in use (issue 33): which roles of a declustered
//! volume its distributed spares hold, and where each chunk of such a role
//! lives then. A role held by distributed spare `k` is
//! [`Spared`](crate::raid::health::MemberState::Spared): its chunk in member
//! row `r` is spare chunk `k` of that row, on member
//! [`DraidMap::spare`]`(r, k)`, at the same member offset. The data path
//! asks [`SpareMap::holder`] only when [`Health::spared`](crate::raid::health::Health::spared)
//! says some role is held (once per request); rebuild and rebalance
//! (`control::maint::draid_spare`) write and read through it too.
//!
//! One map per array: distributed spares are taken only when the array's
//! one volume is declustered (a Matrix array's other volumes would need
//! the role's own device).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::raid::chunk::MAX_MEMBERS;
use crate::raid::level::DraidMap;

/// Most distributed spares a volume's entry records an assignment for
/// (bytes 123..128 of a declustered volume's entry).
pub const MAX_HELD: usize = 5;

/// Where a declustered volume's distributed spares put the roles they
/// hold. Shared (behind an `Arc` in the health); assignments change with
/// [`set`](Self::set) (control path).
#[derive(Debug)]
pub struct SpareMap {
    map: DraidMap,
    /// Chunk, bytes.
    chunk: u64,
    /// Absolute member byte where the volume's data area starts.
    base: u64,
    /// Absolute member byte where it ends.
    end: u64,
    /// Per role: 0, or the spare holding it plus 1.
    held: [AtomicU8; MAX_MEMBERS],
}

impl SpareMap {
    /// The map of a declustered volume of `map`, chunk `chunk` bytes, whose
    /// data area is absolute member bytes `[base, base + member_size)`;
    /// no role held yet.
    pub fn new(map: DraidMap, chunk: u64, base: u64, member_size: u64) -> SpareMap {
        SpareMap { map, chunk, base, end: base + member_size, held: std::array::from_fn(|_| AtomicU8::new(0)) }
    }

    /// The declustered map.
    pub fn draid(&self) -> &DraidMap {
        &self.map
    }

    /// Chunk, bytes.
    pub fn chunk(&self) -> u64 {
        self.chunk
    }

    /// Absolute member bytes of the volume's data area.
    pub fn span(&self) -> std::ops::Range<u64> {
        self.base..self.end
    }

    /// The distributed spare holding role `role`, if one does.
    #[inline]
    pub fn spare_of(&self, role: u32) -> Option<u32> {
        match self.held.get(role as usize).map_or(0, |h| h.load(Ordering::Acquire)) {
            0 => None,
            k => Some(k as u32 - 1),
        }
    }

    /// The role distributed spare `which` holds, if any.
    pub fn role_of(&self, which: u32) -> Option<u32> {
        (0..MAX_MEMBERS as u32).find(|&r| self.spare_of(r) == Some(which))
    }

    /// Records that distributed spare `which` holds `role` (`None`: no
    /// spare does any more).
    pub fn set(&self, role: u32, which: Option<u32>) {
        if let Some(h) = self.held.get(role as usize) {
            h.store(which.map_or(0, |k| k as u8 + 1), Ordering::Release);
        }
    }

    /// The member that holds `role`'s byte at absolute member offset `abs`:
    /// the spare chunk's member of that row when a spare holds the role and
    /// `abs` is in the volume, else `None` (the role's own device).
    #[inline]
    pub fn holder(&self, role: u32, abs: u64) -> Option<u32> {
        let k = self.spare_of(role)?;
        if abs < self.base || abs >= self.end {
            return None;
        }
        Some(self.map.spare((abs - self.base) / self.chunk, k))
    }

    /// True when `role` holds no data or parity chunk in the chunk row of
    /// absolute member offset `abs` (its place there is a spare chunk or
    /// unused): a whole-row read of it there has nothing to find, a write
    /// nothing to keep. False outside the volume.
    pub fn holds_nothing(&self, role: u32, abs: u64) -> bool {
        if abs < self.base || abs >= self.end {
            return false;
        }
        let row = (abs - self.base) / self.chunk;
        self.map.position(row, role) >= self.map.per_row() * self.map.width()
    }

    /// The absolute member byte where the chunk row holding `abs` ends.
    #[inline]
    pub fn row_end(&self, abs: u64) -> u64 {
        if abs < self.base {
            return self.base;
        }
        self.base + ((abs - self.base) / self.chunk + 1) * self.chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_role_lives_in_its_rows_spare_chunks() {
        let m = DraidMap::new(8, 4, 1, 2, 5).unwrap();
        let s = SpareMap::new(m, 65536, 1 << 20, 100 * 65536);
        assert_eq!(s.holder(3, 1 << 20), None, "no spare holds it yet");
        s.set(3, Some(1));
        assert_eq!(s.spare_of(3), Some(1));
        assert_eq!(s.role_of(1), Some(3));
        assert_eq!(s.role_of(0), None);
        for row in 0..100u64 {
            let abs = (1 << 20) + row * 65536 + 4096;
            assert_eq!(s.holder(3, abs), Some(m.spare(row, 1)));
            assert_eq!(s.row_end(abs), (1 << 20) + (row + 1) * 65536);
        }
        assert_eq!(s.holder(3, 4096), None, "below the data area");
        assert_eq!(s.holder(3, (1 << 20) + 100 * 65536), None, "past it");
        s.set(3, None);
        assert_eq!(s.holder(3, 1 << 20), None);
    }
}
