//! Address mapping: where each logical byte of a volume lives on the members.
//!
//! Pure functions, no I/O. RAID 0's placement is its level's
//! ([`Raid0`]: md's raid0 with equal members, logical chunk `c` on member
//! `c % n` at member chunk `c / n`); the redundant levels go through a
//! [`Layout`]. One member is the identity map, which is how a raw drive is
//! benchmarked through the same engine as an array.

use crate::raid::layout::{Layout, RedundantLevel};
use crate::raid::level::Raid0;
use crate::{bail, Result};

pub use crate::raid::chunk::{check_chunk, Segment, DEFAULT_CHUNK, MAX_CHUNK, MAX_MEMBERS, MIN_CHUNK};

pub use crate::raid::level::Level;

impl Level {
    /// The redundant level, `None` for RAID 0.
    pub fn redundant(self) -> Option<RedundantLevel> {
        // RedundantLevel's discriminants are Level's (checked by a test of
        // raid::level).
        self.desc().redundant().then(|| RedundantLevel::ALL[self as usize - 1])
    }
}

/// The layout of one volume over its members: RAID 0 here, the redundant
/// levels through a [`Layout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    level: Level,
    members: u32,
    chunk: u64,
    member_size: u64,
    layout: Option<Layout>,
}

impl Geometry {
    /// `level` over `members` members with `chunk` bytes per chunk and
    /// `member_size` bytes of data area on each member (rounded down to
    /// whole chunks). Errors: as [`Geometry::raid0`] and [`Layout::new`]
    /// (too few members for the level, bad chunk, members too small).
    pub fn new(level: Level, members: usize, chunk: u64, member_size: u64) -> Result<Geometry> {
        match level.redundant() {
            None => Geometry::raid0(members, chunk, member_size),
            Some(r) => {
                let l = Layout::new(r, members, chunk, member_size)?;
                Ok(Geometry { level, members: members as u32, chunk, member_size: l.member_size(), layout: Some(l) })
            }
        }
    }

    /// This geometry with RAID 5 or 6 parity placed as `variant` says (see
    /// [`crate::raid::layout::Variant`]). Errors: `InvalidInput` for a
    /// variant other than the standard one at another level.
    pub fn with_variant(mut self, variant: crate::raid::layout::Variant) -> Result<Geometry> {
        match self.layout {
            Some(l) => self.layout = Some(l.with_variant(variant)?),
            None if variant == crate::raid::layout::Variant::Standard => {}
            None => bail!(InvalidInput, "RAID 0 keeps no parity: its layout has no variants"),
        }
        Ok(self)
    }

    /// This declustered geometry with groups of `data` data chunks and
    /// `spares` distributed spares (see [`Layout::with_draid`]). Errors:
    /// `InvalidInput` at another level or for a shape that does not fit.
    pub fn with_draid(mut self, data: u32, spares: u32) -> Result<Geometry> {
        match self.layout {
            Some(l) => self.layout = Some(l.with_draid(data, spares)?),
            None => bail!(InvalidInput, "--data and --spares are for the declustered levels (draid5, draid6), not RAID 0"),
        }
        Ok(self)
    }

    /// The redundant layout; `None` for RAID 0.
    pub fn layout(&self) -> Option<&Layout> {
        self.layout.as_ref()
    }

    /// RAID 0 over `members` members with `chunk` bytes per chunk and
    /// `member_size` bytes of data area on each member.
    ///
    /// With more than one member, `member_size` is rounded down to whole
    /// chunks (md does the same). Errors: `InvalidInput` for a bad chunk or
    /// member count, `TooSmall` when a member holds less than one chunk.
    pub fn raid0(members: usize, chunk: u64, member_size: u64) -> Result<Geometry> {
        check_chunk(chunk)?;
        if members == 0 || members > MAX_MEMBERS {
            bail!(InvalidInput, "RAID 0 needs 1 to {MAX_MEMBERS} members, {members} given");
        }
        let member_size = if members > 1 { member_size / chunk * chunk } else { member_size };
        if member_size < chunk {
            bail!(
                TooSmall,
                "each member needs at least one chunk ({chunk} bytes) of data area, \
                 but only {member_size} bytes are available; use larger members or a smaller --chunk"
            );
        }
        Ok(Geometry { level: Raid0::LEVEL, members: members as u32, chunk, member_size, layout: None })
    }

    /// The identity layout of one raw device of `size` bytes.
    pub fn single(size: u64) -> Geometry {
        Geometry { level: Raid0::LEVEL, members: 1, chunk: MAX_CHUNK, member_size: size, layout: None }
    }

    /// RAID level.
    pub fn level(&self) -> Level {
        self.level
    }
    /// Number of members.
    pub fn members(&self) -> usize {
        self.members as usize
    }
    /// Chunk (stripe unit) in bytes.
    pub fn chunk(&self) -> u64 {
        self.chunk
    }
    /// Bytes of data area used on each member.
    pub fn member_size(&self) -> u64 {
        self.member_size
    }
    /// Whether this volume keeps all its data with the roles in `lost`
    /// unavailable, and how many more members it may lose then: the
    /// level's rule ([`Descriptor::survival`](crate::raid::level::Descriptor::survival))
    /// on this layout.
    pub fn survival(&self, lost: crate::raid::level::MemberMask) -> crate::raid::level::Survival {
        self.level.desc().survival(self.members(), self.capacity() / self.chunk, lost)
    }

    /// Usable size of the volume in bytes.
    pub fn capacity(&self) -> u64 {
        match &self.layout {
            Some(l) => l.capacity(),
            None => self.member_size * self.members as u64,
        }
    }

    /// Where logical byte `offset` of a RAID 0 volume lives: (member, byte
    /// offset in that member's data area). `offset` must be below
    /// [`capacity`](Self::capacity). For the redundant levels see
    /// [`Layout::data_locations`].
    #[inline]
    pub fn locate(&self, offset: u64) -> (u32, u64) {
        Raid0::locate(self.members as u64, self.chunk, offset)
    }

    /// Inverse of [`locate`](Self::locate): the logical byte stored at
    /// `member_offset` of `member`.
    pub fn logical(&self, member: u32, member_offset: u64) -> u64 {
        Raid0::logical(self.members as u64, self.chunk, member, member_offset)
    }

    /// Calls `f` for each piece of the logical range `[offset, offset+len)`
    /// of a RAID 0 volume, in logical order; each piece lies inside one
    /// chunk of one member. The caller has checked that the range is inside
    /// the volume. (Redundant levels: [`Layout::for_each_segment`].)
    /// Inlined: the RAID 0 path's split, left out of line by some builds'
    /// partition into codegen units (+2% instructions per I/O).
    #[inline]
    pub fn for_each_segment(&self, offset: u64, len: usize, mut f: impl FnMut(Segment)) {
        let mut pos = offset;
        let end = offset + len as u64;
        while pos < end {
            let (member, member_offset) = self.locate(pos);
            let room = if self.members == 1 { end - pos } else { self.chunk - pos % self.chunk };
            let n = room.min(end - pos);
            debug_assert!(member < self.members && member_offset + n <= self.member_size, "segment outside member {member}");
            f(Segment { member, member_offset, buf_offset: (pos - offset) as usize, len: n as usize });
            pos += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geom() -> impl Strategy<Value = Geometry> {
        (1usize..=8, 12u32..=20, 1u64..=16).prop_map(|(n, shift, chunks)| {
            let chunk = 1u64 << shift;
            Geometry::raid0(n, chunk, chunks * chunk).unwrap()
        })
    }

    proptest! {
        #[test]
        fn locate_and_logical_are_inverse(g in geom(), frac in 0.0f64..1.0) {
            let off = ((g.capacity() as f64 * frac) as u64).min(g.capacity() - 1);
            let (m, mo) = g.locate(off);
            prop_assert!((m as usize) < g.members());
            prop_assert!(mo < g.member_size());
            prop_assert_eq!(g.logical(m, mo), off);
        }

        #[test]
        fn segments_cover_range_exactly_once(g in geom(), a in 0.0f64..1.0, b in 0.0f64..1.0) {
            let cap = g.capacity();
            let start = (cap as f64 * a) as u64 % cap;
            let len = (((cap - start) as f64 * b) as u64).max(1) as usize;
            let mut next_buf = 0usize;
            let mut seen = std::collections::HashSet::new();
            g.for_each_segment(start, len, |s| {
                assert_eq!(s.buf_offset, next_buf, "segments are in logical order without gaps");
                assert!(s.len > 0);
                // Inside one chunk of one member (one member is the identity map, never split).
                if g.members() > 1 { assert_eq!(s.member_offset / g.chunk(), (s.member_offset + s.len as u64 - 1) / g.chunk()); }
                assert!(s.member_offset + s.len as u64 <= g.member_size());
                // First and last byte agree with the pointwise map.
                let l = start + s.buf_offset as u64;
                assert_eq!(g.locate(l), (s.member, s.member_offset));
                assert_eq!(g.logical(s.member, s.member_offset + s.len as u64 - 1), l + s.len as u64 - 1);
                assert!(seen.insert((s.member, s.member_offset)), "place visited twice");
                next_buf += s.len;
            });
            prop_assert_eq!(next_buf, len);
        }
    }

    #[test]
    fn every_byte_maps_to_one_place_small_arrays() {
        for n in 1..=5 {
            for shift in [12u32, 13] {
                let chunk = 1u64 << shift;
                let g = Geometry::raid0(n, chunk, 3 * chunk).unwrap();
                let mut hit = vec![vec![false; g.member_size() as usize]; n];
                for off in 0..g.capacity() {
                    let (m, mo) = g.locate(off);
                    assert!(!hit[m as usize][mo as usize], "two logical bytes map to one place");
                    hit[m as usize][mo as usize] = true;
                }
                assert!(hit.iter().all(|v| v.iter().all(|&b| b)), "a member byte is unused");
            }
        }
    }

    #[test]
    fn chunk_checks() {
        assert!(check_chunk(4096).is_ok());
        assert!(check_chunk(1 << 20).is_ok());
        for bad in [0, 2048, 3 << 12, 2 << 20, 65535] {
            let e = check_chunk(bad).unwrap_err();
            assert!(e.to_string().contains("power of two from 4K to 1M"), "{e}");
        }
    }

    #[test]
    fn member_size_rounds_to_chunks() {
        let g = Geometry::raid0(3, 65536, 65536 * 10 + 100).unwrap();
        assert_eq!(g.member_size(), 65536 * 10);
        assert_eq!(g.capacity(), 65536 * 30);
        assert!(Geometry::raid0(2, 65536, 1000).is_err());
    }
}
