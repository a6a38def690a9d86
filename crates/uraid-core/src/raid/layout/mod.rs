//! Address mapping for the redundant levels: RAID 1, RAID 10, RAID 5, RAID 6.
//!
//! Pure functions, no I/O, in the style of [`geometry`](crate::raid::geometry)
//! (which keeps RAID 0). Offsets and lengths are bytes; a chunk (stripe
//! unit) is `chunk` bytes; a member's offsets are in its data area (add the
//! data offset for the absolute position on the device). Member numbers are
//! roles in the array, 0-based. The layouts are Linux md's, so an array can
//! be checked against (or, data offset aside, read by) md:
//!
//! - **RAID 1**: every member holds the whole volume at the same offsets
//!   (`drivers/md/raid1.c`). md's RAID 1 has no chunk; here the chunk only
//!   cuts requests into pieces (so reads can be spread over the mirrors)
//!   and rounds the member size.
//! - **RAID 10**, md's "near" layout with 2 copies (`--layout=n2`, md's
//!   default; `__raid10_find_phys` and `raid10_size` in
//!   `drivers/md/raid10.c`): the members' chunks are numbered row by row,
//!   slot `p` being member `p % n`, row `p / n`; logical chunk `c` is stored
//!   in slots `2c` and `2c + 1`. With an odd member count a copy pair may
//!   straddle two rows, and the last slot may stay unused.
//! - **RAID 5**, left-symmetric (md's default, `ALGORITHM_LEFT_SYMMETRIC` =
//!   2; `raid5_compute_sector` in `drivers/md/raid5.c`): stripe `s` (one
//!   chunk-sized row on every member) has P on member `pd = n - 1 - s % n`
//!   and data chunk `i` (`0 .. n-2`) on member `(pd + 1 + i) % n`.
//! - **RAID 6**, left-symmetric for RAID 6 (`ALGORITHM_LEFT_SYMMETRIC` at
//!   level 6, same function): P on `pd = n - 1 - s % n`, Q right after it on
//!   `(pd + 1) % n`, data chunk `i` (`0 .. n-3`) on `(pd + 2 + i) % n`. The
//!   data index `i` is also the block's index in Q's syndrome (md starts its
//!   syndrome at the member after Q), which is what
//!   [`parity`](crate::raid::parity) expects.
//!
//! [`Variant::ParityLast`] is the layout md's level takeovers make, so that
//! a level changes without moving data (`uraid grow --level`): RAID 5 with
//! P on the last member (md's `ALGORITHM_PARITY_N`: data chunk `i` on
//! member `i`, as RAID 0 over the others keeps it), and RAID 6 with Q on
//! the last member and P and the data as RAID 5 left-symmetric over the
//! others (md's `ALGORITHM_LEFT_SYMMETRIC_6`).
//!
//! # Stripes
//!
//! A *stripe* is the unit over which redundancy is kept. For RAID 5 and 6 it
//! is md's: one chunk-sized row on every member, holding
//! [`data_chunks`](Layout::data_chunks) chunks of logical data plus P (and
//! Q), the same member offsets on every member. For RAID 1 and RAID 10 each
//! logical chunk is its own stripe (one data chunk, mirrored), so the same
//! planning code works for every level. Logical offset `o` is in stripe
//! `o / stripe_data_width()`, at data index `(o % stripe_data_width()) /
//! chunk`.
//!
//! # Writes to parity stripes
//!
//! [`Layout::for_each_stripe_write`] tells, for each stripe a write touches,
//! whether it is a full-stripe write (parity from the new data alone) and,
//! where not, how many member reads a read-modify-write needs against a
//! reconstruct-write, choosing the smaller as md's `handle_stripe_dirtying`
//! does (see [`WriteBand`]).

use crate::raid::chunk::{check_chunk, Segment, MAX_MEMBERS};
use crate::raid::level::{per_level, Descriptor, Level, MemberMask, Placement, Recover, Redundancy, Shape, Survival, REGISTRY};
use crate::{bail, Result};

pub use crate::raid::level::{Place, Places, PlacesIter, Role, Variant};

/// A RAID level with redundancy. Its discriminant is its
/// [`Level`]'s, and its facts are the [`Level::desc`] descriptor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum RedundantLevel {
    /// Mirroring: every member holds the whole volume.
    Raid1 = Level::Raid1 as isize,
    /// Striped mirrors, md's "near" layout with 2 copies of every chunk.
    Raid10 = Level::Raid10 as isize,
    /// Striping with one rotating parity chunk (P) per stripe.
    Raid5 = Level::Raid5 as isize,
    /// Striping with two rotating parity chunks (P and Q) per stripe.
    Raid6 = Level::Raid6 as isize,
    /// Declustered parity, one parity chunk per group.
    Draid5 = Level::Draid5 as isize,
    /// Declustered parity, P and Q per group.
    Draid6 = Level::Draid6 as isize,
}

impl RedundantLevel {
    /// Every redundant level: RAID 1, 10, 5 and 6, draid5 and draid6.
    pub const ALL: [RedundantLevel; 6] = [
        RedundantLevel::Raid1,
        RedundantLevel::Raid10,
        RedundantLevel::Raid5,
        RedundantLevel::Raid6,
        RedundantLevel::Draid5,
        RedundantLevel::Draid6,
    ];

    /// The level.
    #[inline]
    pub fn level(self) -> Level {
        Level::ALL[self as usize]
    }

    /// The level's descriptor.
    #[inline]
    pub fn desc(self) -> &'static Descriptor {
        REGISTRY[self as usize]
    }

    /// The number md and the CLI use for this level (1, 10, 5 or 6).
    pub fn number(self) -> u32 {
        self.desc().number
    }

    /// Parses a level number.
    ///
    /// Errors: `InvalidInput` for 0 (no redundancy: use
    /// [`Geometry`](crate::raid::geometry::Geometry)) and for unknown numbers.
    pub fn from_number(n: u32) -> Result<RedundantLevel> {
        let level = Level::from_number(n)?;
        match level.desc().redundant() {
            true => Ok(RedundantLevel::ALL[level as usize - 1]),
            false => bail!(
                InvalidInput,
                "RAID {n} has no redundancy; its layout is geometry::Geometry, not layout::Layout"
            ),
        }
    }

    /// Fewest members an array of this level may have: RAID 1 and RAID 10
    /// 2, RAID 5 3, RAID 6 4 (md's own minimums).
    pub fn min_members(self) -> usize {
        self.desc().min_members
    }

    /// How many members of an array of `members` members may fail, whichever
    /// they are, without losing data (see [`Descriptor::fault_tolerance`]).
    #[inline]
    pub fn fault_tolerance(self, members: usize) -> usize {
        self.desc().fault_tolerance(members)
    }

    /// Parity chunks per stripe: 0 for RAID 1 and 10, 1 (P) for RAID 5, 2
    /// (P and Q) for RAID 6.
    #[inline]
    pub fn parity_chunks(self) -> usize {
        self.desc().parity
    }

    /// True for the parity levels (RAID 5 and RAID 6).
    #[inline]
    pub fn has_parity(self) -> bool {
        self.parity_chunks() > 0
    }

    /// How many places hold each logical byte in an array of `members`
    /// members: RAID 1 `members`, RAID 10 2, RAID 5 and RAID 6 1 (the data
    /// chunk; parity protects it without copying it).
    pub fn copies(self, members: usize) -> usize {
        self.desc().copies(members)
    }
}

impl std::fmt::Display for RedundantLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.level())
    }
}

/// One piece of a logical range: the part inside one chunk, with every
/// place that holds it (see [`Layout::for_each_segment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Byte offset of this piece inside the caller's buffer.
    pub buf_offset: usize,
    /// Length in bytes; never crosses a chunk boundary.
    pub len: usize,
    /// The stripe the piece belongs to (see the module docs: for RAID 1 and
    /// RAID 10, the logical chunk number).
    pub stripe: u64,
    /// Index of the piece's chunk among the stripe's data chunks (0 ..
    /// [`data_chunks`](Layout::data_chunks)); always 0 for RAID 1 and 10.
    /// For RAID 6 this is also the chunk's index in Q.
    pub data_index: u32,
    /// Byte offset of the piece inside its chunk (the same on every place).
    pub chunk_offset: u64,
    /// Where the piece's first byte lives; the piece continues for `len`
    /// bytes at each place.
    pub places: Places,
}

impl Piece {
    /// The piece as one [`Segment`] per place (to write every copy; a read
    /// needs one of them).
    pub fn segments(&self) -> impl Iterator<Item = Segment> + '_ {
        self.places.iter().map(move |p| Segment {
            member: p.member,
            member_offset: p.member_offset,
            buf_offset: self.buf_offset,
            len: self.len,
        })
    }
}

/// How the parity of a [`WriteBand`] is brought up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMethod {
    /// Every data chunk of the stripe is overwritten over the band: the new
    /// parity comes from the new data alone, nothing is read. (Always the
    /// case for RAID 1 and RAID 10, which have nothing to compute.)
    Full,
    /// Read the old contents of the written data chunks and the old P (and
    /// Q) over the band, then update P (and Q) by the difference.
    ReadModifyWrite,
    /// Read the data chunks that are not written over the band, then compute
    /// P (and Q) from the whole new stripe data.
    ReconstructWrite,
}

/// A run of rows of one stripe (byte offsets inside the chunk, the same on
/// every member) over which a write overwrites the same set of data chunks.
///
/// md decides between read-modify-write and reconstruct-write for each 4 KiB
/// row of a stripe on its own (`handle_stripe_dirtying` in
/// `drivers/md/raid5.c`, one `stripe_head` per page row): with every member
/// in sync and nothing cached, it counts `rmw` = data chunks being written
/// plus P (plus Q), `rcw` = data chunks not fully overwritten, and does
/// read-modify-write only when `rmw < rcw` (ties go to reconstruct-write
/// under the default `rmw_level`). Rows where the write covers the same
/// chunks give the same decision, so a write of a stripe splits into at most
/// 3 bands: where only the first touched chunk is written, where all touched
/// chunks are, where only the last is. Inside a band a data chunk is either
/// written over every row or over none, so "not fully overwritten" is
/// "untouched". The counts are member reads for the band; an engine may merge
/// the reads of one member over adjacent bands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBand {
    /// First row: byte offset inside the chunk (add
    /// [`Layout::stripe_offset`] for the member offset).
    pub start: u64,
    /// End of the rows (exclusive), byte offset inside the chunk.
    pub end: u64,
    /// First data index the write covers over the band.
    pub first_written: u32,
    /// Number of data chunks the write covers over the band: data indices
    /// `first_written .. first_written + written` (always contiguous, at
    /// least 1).
    pub written: u32,
    /// Member reads a read-modify-write needs: the written data chunks plus
    /// P (plus Q).
    pub rmw_reads: u32,
    /// Member reads a reconstruct-write needs: the data chunks not written.
    pub rcw_reads: u32,
    /// The method chosen: [`Full`](WriteMethod::Full) when `rcw_reads` is 0,
    /// else the one with fewer reads, reconstruct-write on a tie (as md).
    pub method: WriteMethod,
}

impl WriteBand {
    /// Member reads of the chosen method (0 for a full write).
    pub fn reads(&self) -> u32 {
        match self.method {
            WriteMethod::Full => 0,
            WriteMethod::ReadModifyWrite => self.rmw_reads,
            WriteMethod::ReconstructWrite => self.rcw_reads,
        }
    }

    /// Length of the band in bytes (rows).
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Always false: empty bands are never produced. (For clippy.)
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// True when the write covers data chunk `data_index` over the band.
    pub fn writes(&self, data_index: u32) -> bool {
        (self.first_written..self.first_written + self.written).contains(&data_index)
    }
}

/// What a write does to one stripe (see [`Layout::for_each_stripe_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeWrite {
    /// Stripe number.
    pub stripe: u64,
    /// True when the write covers all the stripe's data: a full-stripe
    /// write, one band over the whole chunk with method
    /// [`Full`](WriteMethod::Full).
    pub full: bool,
    bands: [WriteBand; 3],
    nbands: u8,
}

impl StripeWrite {
    /// The bands in increasing row order (1 to 3 of them, disjoint; rows no
    /// write touches are in none).
    pub fn bands(&self) -> &[WriteBand] {
        &self.bands[..self.nbands as usize]
    }

    /// Member reads of the chosen methods, summed over the bands.
    pub fn reads(&self) -> u32 {
        self.bands().iter().map(WriteBand::reads).sum()
    }
}

/// The layout of one redundant volume over its members: its level and
/// [`Shape`]; where each byte lives is the level's
/// [`Placement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    level: RedundantLevel,
    /// Members, chunk, member size, variant, and the level's data chunks
    /// per stripe and stripes ([`Descriptor::data_chunks`],
    /// [`Descriptor::chunks`]), taken once: the data path asks per
    /// request.
    shape: Shape,
}

impl Layout {
    /// `level` over `members` members with `chunk` bytes per chunk and
    /// `member_size` bytes of data area on each member.
    ///
    /// `member_size` is rounded down to whole chunks (md does the same for
    /// RAID 5, 6 and 10; for RAID 1 it keeps pieces chunk-aligned). Errors:
    /// `InvalidInput` for a chunk that is not a power of two from 4 KiB to 1
    /// MiB ([`check_chunk`]) or a member count below the level's
    /// [`min_members`](RedundantLevel::min_members) or above
    /// [`MAX_MEMBERS`]; `TooSmall` when a member holds less than one chunk.
    pub fn new(level: RedundantLevel, members: usize, chunk: u64, member_size: u64) -> Result<Layout> {
        check_chunk(chunk)?;
        let min = level.min_members();
        if members < min {
            bail!(
                InvalidInput,
                "RAID {} needs at least {min} members, {members} given; add members or choose another level",
                level.number()
            );
        }
        if members > MAX_MEMBERS {
            bail!(InvalidInput, "RAID {} takes at most {MAX_MEMBERS} members, {members} given", level.number());
        }
        let member_size = member_size / chunk * chunk;
        if member_size < chunk {
            bail!(
                TooSmall,
                "each member needs at least one chunk ({chunk} bytes) of data area, \
                 but only {member_size} bytes are available; use larger members or a smaller --chunk"
            );
        }
        let d = level.desc();
        let data_chunks = d.data_chunks(members);
        let stripes = d.chunks(members, member_size / chunk) / data_chunks as u64;
        let shape = Shape {
            members: members as u32,
            chunk,
            member_size,
            variant: Variant::Standard,
            data_chunks: data_chunks as u32,
            stripes,
            draid: None,
        };
        let l = Layout { level, shape };
        if level.level().declustered() {
            let p = level.parity_chunks() as u32;
            let spares = crate::raid::level::default_spares(members as u32, p);
            return l.with_draid(crate::raid::level::default_data(members as u32, p, spares), spares);
        }
        Ok(l)
    }

    /// This declustered layout with groups of `data` data chunks (D) and
    /// `spares` distributed spares (S), layout version
    /// [`LAYOUT_VERSION`](crate::raid::level::LAYOUT_VERSION).
    ///
    /// Errors: `InvalidInput` at a level that is not declustered, for
    /// D = 0, or when D + P + S exceeds the member count (the message
    /// says what fits).
    pub fn with_draid(mut self, data: u32, spares: u32) -> Result<Layout> {
        if !self.level.level().declustered() {
            bail!(InvalidInput, "--data and --spares are for the declustered levels (draid5, draid6), not {}", self.level);
        }
        let p = self.level.parity_chunks() as u32;
        let seed = crate::raid::level::SEED;
        let map = crate::raid::level::DraidMap::new(self.shape.members, data, p, spares, seed)?;
        self.shape.data_chunks = data;
        self.shape.stripes = map.groups(self.shape.member_size / self.shape.chunk);
        self.shape.draid = Some(map);
        Ok(self)
    }

    /// The declustered map (D, P, S); `None` at the other levels.
    pub fn draid(&self) -> Option<&crate::raid::level::DraidMap> {
        self.shape.draid.as_ref()
    }

    /// This layout with parity placed as `variant` says. Errors:
    /// `InvalidInput` for a variant other than the standard one on RAID 1
    /// or 10.
    pub fn with_variant(mut self, variant: Variant) -> Result<Layout> {
        if variant != Variant::Standard && !self.level.has_parity() {
            bail!(InvalidInput, "RAID {} keeps no parity: its layout has no variants", self.level.number());
        }
        self.shape.variant = variant;
        Ok(self)
    }

    /// Where the parity is (see [`Variant`]).
    pub fn variant(&self) -> Variant {
        self.shape.variant
    }

    /// The dimensions the level's placement works on.
    #[inline]
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// RAID level.
    #[inline]
    pub fn level(&self) -> RedundantLevel {
        self.level
    }
    /// Number of members.
    #[inline]
    pub fn members(&self) -> usize {
        self.shape.members as usize
    }
    /// Chunk (stripe unit) in bytes.
    #[inline]
    pub fn chunk(&self) -> u64 {
        self.shape.chunk
    }
    /// Bytes of data area used on each member (whole chunks).
    #[inline]
    pub fn member_size(&self) -> u64 {
        self.shape.member_size
    }
    /// Whether this volume keeps all its data with the roles in `lost`
    /// unavailable, and how many more members it may lose then: the
    /// level's rule ([`Descriptor::survival`]) on this layout.
    #[inline]
    pub fn survival(&self, lost: MemberMask) -> Survival {
        self.level.desc().survival(self.members(), self.shape.stripes * self.shape.data_chunks as u64, lost)
    }

    /// Chunks of data area on each member (rows).
    pub fn member_chunks(&self) -> u64 {
        self.shape.member_size / self.shape.chunk
    }

    /// Usable size of the volume in bytes: RAID 1 `member_size`; RAID 10
    /// `members * member_size / 2` rounded down to whole chunks (md's
    /// `raid10_size`); RAID 5 `(members - 1) * member_size`; RAID 6
    /// `(members - 2) * member_size`.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.stripes() * self.stripe_data_width()
    }

    /// Data chunks per stripe: RAID 5 `members - 1`, RAID 6 `members - 2`,
    /// 1 for RAID 1 and RAID 10 (see the module docs).
    #[inline]
    pub fn data_chunks(&self) -> u32 {
        self.shape.data_chunks
    }

    /// Logical bytes per stripe: [`data_chunks`](Self::data_chunks) times
    /// the chunk.
    #[inline]
    pub fn stripe_data_width(&self) -> u64 {
        self.data_chunks() as u64 * self.shape.chunk
    }

    /// Number of stripes of the volume. For RAID 5 and 6 this is the rows
    /// per member; for RAID 1 and 10 the logical chunks.
    #[inline]
    pub fn stripes(&self) -> u64 {
        self.shape.stripes
    }

    /// The stripe that holds logical byte `offset`.
    pub fn stripe_of(&self, offset: u64) -> u64 {
        offset / self.stripe_data_width()
    }

    #[inline]
    fn assert_parity(&self, what: &str) {
        assert!(self.level.has_parity(), "Layout::{what} is for RAID 5 and RAID 6, not {}", self.level);
    }

    /// Member offset where stripe `stripe` starts on every member (RAID 5
    /// and 6): `stripe * chunk`.
    ///
    /// Panics for RAID 1 and RAID 10, whose stripes (logical chunks) are not
    /// rows.
    #[inline]
    pub fn stripe_offset(&self, stripe: u64) -> u64 {
        self.assert_parity("stripe_offset");
        per_level!(self.level.level(), L => L::stripe_row(&self.shape, stripe)) * self.shape.chunk
    }

    /// The member holding P of stripe `stripe`: `n - 1 - stripe % n`
    /// (left-symmetric).
    ///
    /// Panics for RAID 1 and RAID 10, which have no parity.
    #[inline]
    pub fn parity_member(&self, stripe: u64) -> u32 {
        let p = per_level!(self.level.level(), L => L::parity_member(&self.shape, stripe));
        p.unwrap_or_else(|| panic!("Layout::parity_member is for RAID 5 and RAID 6, not {}", self.level))
    }

    /// The member holding Q of stripe `stripe` (RAID 6: the member after P,
    /// wrapping); `None` for the other levels.
    #[inline]
    pub fn q_member(&self, stripe: u64) -> Option<u32> {
        per_level!(self.level.level(), L => L::q_member(&self.shape, stripe))
    }

    /// Whether `member` holds only parity, in every stripe (see
    /// [`Placement::parity_only`]).
    pub fn parity_only(&self, member: u32) -> bool {
        member < self.shape.members && per_level!(self.level.level(), L => L::parity_only(&self.shape, member))
    }

    /// The member holding data chunk `i` (0 .. [`data_chunks`](Self::data_chunks))
    /// of stripe `stripe`: the `i`-th member after P (RAID 5) or after Q
    /// (RAID 6), wrapping.
    ///
    /// Panics for RAID 1 and RAID 10 (use
    /// [`data_locations`](Self::data_locations)); `i` must be below
    /// `data_chunks()`.
    #[inline]
    pub fn data_member(&self, stripe: u64, i: u32) -> u32 {
        self.assert_parity("data_member");
        debug_assert!(i < self.data_chunks(), "data index {i} out of range");
        per_level!(self.level.level(), L => L::data_member(&self.shape, stripe, i))
    }

    /// Every place that holds logical byte `offset`: all members for RAID 1,
    /// the 2 copies for RAID 10, the one data place for RAID 5 and 6.
    /// `offset` must be below [`capacity`](Self::capacity).
    #[inline]
    pub fn data_locations(&self, offset: u64) -> Places {
        debug_assert!(offset < self.capacity(), "offset {offset} past the volume");
        let places = per_level!(self.level.level(), L => L::places(&self.shape, offset));
        debug_assert!(places.iter().all(|p| p.member < self.shape.members && p.member_offset < self.shape.member_size), "{places:?} outside the members");
        places
    }

    /// What byte `member_offset` of `member` holds: logical data (with its
    /// logical offset), P, Q, or nothing.
    pub fn role(&self, member: u32, member_offset: u64) -> Role {
        if member >= self.shape.members || member_offset >= self.shape.member_size {
            return Role::Unused;
        }
        per_level!(self.level.level(), L => L::role(&self.shape, member, member_offset))
    }

    /// Inverse of [`data_locations`](Self::data_locations): the logical byte
    /// stored at `member_offset` of `member`, or `None` for P and Q chunks,
    /// RAID 10's unused last slot, and places past the member size.
    pub fn logical(&self, member: u32, member_offset: u64) -> Option<u64> {
        match self.role(member, member_offset) {
            Role::Data(l) => Some(l),
            _ => None,
        }
    }

    /// The stripes with a chunk in member rows `[ra, rb)` (`ra < rb`): RAID
    /// 5 and 6 and RAID 1 the rows themselves, RAID 10 the logical chunks
    /// whose copies lie there.
    pub fn stripes_of_rows(&self, ra: u64, rb: u64) -> std::ops::Range<u64> {
        per_level!(self.level.level(), L => L::stripes_of_rows(&self.shape, ra, rb))
    }

    /// The member rows holding stripes `[s0, s1)` (`s0 < s1`).
    pub fn rows_of_stripes(&self, s0: u64, s1: u64) -> std::ops::Range<u64> {
        per_level!(self.level.level(), L => L::rows_of_stripes(&self.shape, s0, s1))
    }

    /// The member rows every chunk of which belongs to one of stripes
    /// `[s0, s1)` (`s0 < s1`; empty when there is none): the rows of
    /// [`rows_of_stripes`](Self::rows_of_stripes) less those at either end
    /// that may hold chunks of stripes outside (RAID 10 with an odd member
    /// count: [`straddle_rows`](Self::straddle_rows); declustered levels:
    /// a row holds whole groups, so a row shared with a stripe outside).
    pub fn rows_only_of_stripes(&self, s0: u64, s1: u64) -> std::ops::Range<u64> {
        if let Some(m) = self.draid() {
            let g = m.per_row() as u64;
            let (ra, rb) = (s0.div_ceil(g), s1 / g);
            return ra..rb.max(ra);
        }
        let rows = self.rows_of_stripes(s0, s1);
        let k = self.straddle_rows();
        let (ra, rb) = (rows.start + k, rows.end.saturating_sub(k));
        ra..rb.max(ra)
    }

    /// Most stripes with a chunk in one member row (RAID 10: about half
    /// the members, plus the pairs straddling rows; 1 elsewhere).
    pub fn stripes_per_row(&self) -> u64 {
        per_level!(self.level.level(), L => L::stripes_per_row(&self.shape))
    }

    /// Stripes held by `rows` member rows, rounded down.
    pub fn stripes_in_rows(&self, rows: u64) -> u64 {
        per_level!(self.level.level(), L => L::stripes_in_rows(&self.shape, rows))
    }

    /// Rows past either end of a run of rows that its stripes may reach
    /// (RAID 10's copy pairs straddle rows with an odd member count).
    pub fn straddle_rows(&self) -> u64 {
        per_level!(self.level.level(), L => L::straddle_rows(&self.shape))
    }

    /// How stripe `stripe` (below [`stripes`](Self::stripes)) is kept: its
    /// chunks' places and whether they are copies or data with parity
    /// (the level's [`Placement::redundancy`]).
    pub fn redundancy(&self, stripe: u64) -> Redundancy {
        debug_assert!(stripe < self.shape.stripes, "stripe {stripe} past the volume");
        per_level!(self.level.level(), L => L::redundancy(&self.shape, stripe))
    }

    /// The steps that find `member`'s chunk in member row `row` (below
    /// [`member_chunks`](Self::member_chunks)) again when it is lost (the
    /// level's [`Placement::recover`]).
    pub fn recover(&self, member: u32, row: u64) -> Recover {
        debug_assert!(member < self.shape.members && row < self.member_chunks(), "member {member} row {row} outside the layout");
        per_level!(self.level.level(), L => L::recover(&self.shape, member, row))
    }

    /// Calls `f` for each piece of the logical range `[offset, offset+len)`,
    /// in logical order; each piece lies inside one chunk and comes with its
    /// stripe, its data index and every place that holds it. The caller has
    /// checked that the range is inside the volume.
    ///
    /// Unlike RAID 0's single-member identity map, RAID 1 pieces are cut at
    /// chunk boundaries too, so that an engine can send the pieces of a large
    /// read to different mirrors (and merge them back for writes if it
    /// likes: RAID 1 places are contiguous across pieces).
    pub fn for_each_segment(&self, offset: u64, len: usize, mut f: impl FnMut(Piece)) {
        let mut pos = offset;
        let end = offset + len as u64;
        let width = self.stripe_data_width();
        while pos < end {
            let chunk_offset = pos % self.shape.chunk;
            let n = (self.shape.chunk - chunk_offset).min(end - pos);
            f(Piece {
                buf_offset: (pos - offset) as usize,
                len: n as usize,
                stripe: pos / width,
                data_index: ((pos % width) / self.shape.chunk) as u32,
                chunk_offset,
                places: self.data_locations(pos),
            });
            pos += n;
        }
    }

    /// Calls `f` for each stripe the write `[offset, offset+len)` touches, in
    /// order, with its bands and, for each band, the member reads of
    /// read-modify-write and of reconstruct-write and the method md would
    /// choose (see [`WriteBand`]). The caller has checked that the range is
    /// inside the volume; `len` 0 calls nothing.
    ///
    /// For RAID 1 and RAID 10 every band is [`Full`](WriteMethod::Full)
    /// (nothing to read), and `full` says whether the whole chunk is
    /// overwritten.
    pub fn for_each_stripe_write(&self, offset: u64, len: usize, mut f: impl FnMut(StripeWrite)) {
        if len == 0 {
            return;
        }
        let end = offset + len as u64;
        let width = self.stripe_data_width();
        let d = self.data_chunks();
        let parity = self.level.parity_chunks() as u32;
        let chunk = self.shape.chunk;
        for stripe in offset / width..=(end - 1) / width {
            let base = stripe * width;
            let lo = offset.max(base) - base;
            let hi = end.min(base + width) - base;
            let (i0, i1) = ((lo / chunk) as u32, ((hi - 1) / chunk) as u32);
            // The write covers rows [a, chunk) of chunk i0 and [0, b) of chunk
            // i1 (rows [a, b) when i0 == i1), and the chunks between whole.
            let (a, b) = (lo % chunk, (hi - 1) % chunk + 1);
            let mut cuts = [0, a, b, chunk];
            cuts.sort_unstable();
            let mut sw = StripeWrite {
                stripe,
                full: lo == 0 && hi == width,
                bands: [WriteBand {
                    start: 0,
                    end: 0,
                    first_written: 0,
                    written: 0,
                    rmw_reads: 0,
                    rcw_reads: 0,
                    method: WriteMethod::Full,
                }; 3],
                nbands: 0,
            };
            for w in cuts.windows(2) {
                let (x, y) = (w[0], w[1]);
                if x == y {
                    continue;
                }
                let (first, last) = if i0 == i1 {
                    if a <= x && y <= b {
                        (i0, i0 + 1)
                    } else {
                        continue;
                    }
                } else {
                    let first = if a <= x { i0 } else { i0 + 1 };
                    let last = if y <= b { i1 + 1 } else { i1 };
                    (first, last)
                };
                if first >= last {
                    continue;
                }
                let written = last - first;
                let nb = sw.nbands as usize;
                if nb > 0 {
                    let prev = &mut sw.bands[nb - 1];
                    if prev.end == x && prev.first_written == first && prev.written == written {
                        prev.end = y;
                        continue;
                    }
                }
                let rmw_reads = written + parity;
                let rcw_reads = d - written;
                let method = if rcw_reads == 0 {
                    WriteMethod::Full
                } else if rmw_reads < rcw_reads {
                    WriteMethod::ReadModifyWrite
                } else {
                    WriteMethod::ReconstructWrite
                };
                sw.bands[nb] =
                    WriteBand { start: x, end: y, first_written: first, written, rmw_reads, rcw_reads, method };
                sw.nbands += 1;
            }
            f(sw);
        }
    }
}

#[cfg(test)]
mod tests;
