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
use crate::{bail, Result};

/// A RAID level with redundancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum RedundantLevel {
    /// Mirroring: every member holds the whole volume.
    Raid1,
    /// Striped mirrors, md's "near" layout with 2 copies of every chunk.
    Raid10,
    /// Striping with one rotating parity chunk (P) per stripe.
    Raid5,
    /// Striping with two rotating parity chunks (P and Q) per stripe.
    Raid6,
}

impl RedundantLevel {
    /// Every redundant level: RAID 1, 10, 5 and 6.
    pub const ALL: [RedundantLevel; 4] =
        [RedundantLevel::Raid1, RedundantLevel::Raid10, RedundantLevel::Raid5, RedundantLevel::Raid6];

    /// The number md and the CLI use for this level (1, 10, 5 or 6).
    pub fn number(self) -> u32 {
        match self {
            RedundantLevel::Raid1 => 1,
            RedundantLevel::Raid10 => 10,
            RedundantLevel::Raid5 => 5,
            RedundantLevel::Raid6 => 6,
        }
    }

    /// Parses a level number.
    ///
    /// Errors: `InvalidInput` for 0 (no redundancy: use
    /// [`Geometry`](crate::raid::geometry::Geometry)) and for unknown numbers.
    pub fn from_number(n: u32) -> Result<RedundantLevel> {
        match n {
            1 => Ok(RedundantLevel::Raid1),
            10 => Ok(RedundantLevel::Raid10),
            5 => Ok(RedundantLevel::Raid5),
            6 => Ok(RedundantLevel::Raid6),
            0 => bail!(InvalidInput, "RAID 0 has no redundancy; its layout is geometry::Geometry, not layout::Layout"),
            _ => bail!(InvalidInput, "unknown RAID level {n}; uraid knows levels 0, 1, 10, 5 and 6"),
        }
    }

    /// Fewest members an array of this level may have: RAID 1 and RAID 10
    /// 2, RAID 5 3, RAID 6 4 (md's own minimums).
    pub fn min_members(self) -> usize {
        match self {
            RedundantLevel::Raid1 | RedundantLevel::Raid10 => 2,
            RedundantLevel::Raid5 => 3,
            RedundantLevel::Raid6 => 4,
        }
    }

    /// How many members of an array of `members` members may fail, whichever
    /// they are, without losing data: RAID 1 `members - 1`, RAID 10 1, RAID
    /// 5 1, RAID 6 2.
    ///
    /// RAID 10 near-2 survives more failures when they hit different copy
    /// pairs (up to `members / 2` with an even count), but two neighbouring
    /// members (`m` and `m + 1`, or the last and the first) hold both copies
    /// of some chunk, so only 1 is guaranteed.
    pub fn fault_tolerance(self, members: usize) -> usize {
        match self {
            RedundantLevel::Raid1 => members.saturating_sub(1),
            RedundantLevel::Raid10 | RedundantLevel::Raid5 => 1,
            RedundantLevel::Raid6 => 2,
        }
    }

    /// Parity chunks per stripe: 0 for RAID 1 and 10, 1 (P) for RAID 5, 2
    /// (P and Q) for RAID 6.
    pub fn parity_chunks(self) -> usize {
        match self {
            RedundantLevel::Raid1 | RedundantLevel::Raid10 => 0,
            RedundantLevel::Raid5 => 1,
            RedundantLevel::Raid6 => 2,
        }
    }

    /// True for the parity levels (RAID 5 and RAID 6).
    pub fn has_parity(self) -> bool {
        self.parity_chunks() > 0
    }

    /// How many places hold each logical byte in an array of `members`
    /// members: RAID 1 `members`, RAID 10 2, RAID 5 and RAID 6 1 (the data
    /// chunk; parity protects it without copying it).
    pub fn copies(self, members: usize) -> usize {
        match self {
            RedundantLevel::Raid1 => members,
            RedundantLevel::Raid10 => 2,
            RedundantLevel::Raid5 | RedundantLevel::Raid6 => 1,
        }
    }
}

impl std::fmt::Display for RedundantLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "raid{}", self.number())
    }
}

/// One place on one member: a member and a byte offset in its data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// Member index (0-based, the member's role in the array).
    pub member: u32,
    /// Byte offset in the member's data area.
    pub member_offset: u64,
}

/// Every place that holds one logical byte (or the first byte of a
/// [`Piece`]): all members for RAID 1, 2 for RAID 10, 1 for RAID 5 and 6.
///
/// A small `Copy` value, no allocation. Places are on distinct members and
/// listed in md's order: RAID 1 by member number, RAID 10 first copy (slot
/// `2c`) then second (slot `2c + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Places {
    repr: PlacesRepr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlacesRepr {
    /// RAID 1: members `0 .. members`, all at `member_offset`.
    Every { members: u32, member_offset: u64 },
    /// RAID 10 (2 places) or RAID 5/6 (1 place).
    Listed { len: u8, list: [Place; 2] },
}

impl Places {
    fn one(p: Place) -> Places {
        Places { repr: PlacesRepr::Listed { len: 1, list: [p, p] } }
    }

    /// Number of places (at least 1).
    pub fn len(&self) -> usize {
        match self.repr {
            PlacesRepr::Every { members, .. } => members as usize,
            PlacesRepr::Listed { len, .. } => len as usize,
        }
    }

    /// Always false: a logical byte is stored somewhere. (For clippy's
    /// `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th place, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Place> {
        if i >= self.len() {
            return None;
        }
        Some(match self.repr {
            PlacesRepr::Every { member_offset, .. } => Place { member: i as u32, member_offset },
            PlacesRepr::Listed { list, .. } => list[i],
        })
    }

    /// The first place (the primary copy, or the only place).
    pub fn first(&self) -> Place {
        self.get(0).expect("Places is never empty")
    }

    /// The places in order.
    pub fn iter(&self) -> PlacesIter {
        PlacesIter { places: *self, next: 0 }
    }
}

/// Iterator over [`Places`].
#[derive(Debug, Clone)]
pub struct PlacesIter {
    places: Places,
    next: usize,
}

impl Iterator for PlacesIter {
    type Item = Place;
    fn next(&mut self) -> Option<Place> {
        let p = self.places.get(self.next)?;
        self.next += 1;
        Some(p)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.places.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for PlacesIter {}

impl IntoIterator for Places {
    type Item = Place;
    type IntoIter = PlacesIter;
    fn into_iter(self) -> PlacesIter {
        self.iter()
    }
}

/// What a chunk of a member holds (see [`Layout::role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Logical data: the byte at this member offset is logical byte `.0`.
    Data(u64),
    /// Parity P of the stripe (RAID 5 and 6).
    P,
    /// Syndrome Q of the stripe (RAID 6).
    Q,
    /// Nothing: past the member size, or RAID 10's last slot when the
    /// number of slots is odd.
    Unused,
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

/// The layout of one redundant volume over its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    level: RedundantLevel,
    members: u32,
    chunk: u64,
    member_size: u64,
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
        Ok(Layout { level, members: members as u32, chunk, member_size })
    }

    /// RAID level.
    pub fn level(&self) -> RedundantLevel {
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
    /// Bytes of data area used on each member (whole chunks).
    pub fn member_size(&self) -> u64 {
        self.member_size
    }
    /// Chunks of data area on each member (rows).
    pub fn member_chunks(&self) -> u64 {
        self.member_size / self.chunk
    }

    /// Usable size of the volume in bytes: RAID 1 `member_size`; RAID 10
    /// `members * member_size / 2` rounded down to whole chunks (md's
    /// `raid10_size`); RAID 5 `(members - 1) * member_size`; RAID 6
    /// `(members - 2) * member_size`.
    pub fn capacity(&self) -> u64 {
        self.stripes() * self.stripe_data_width()
    }

    /// Data chunks per stripe: RAID 5 `members - 1`, RAID 6 `members - 2`,
    /// 1 for RAID 1 and RAID 10 (see the module docs).
    pub fn data_chunks(&self) -> u32 {
        match self.level {
            RedundantLevel::Raid1 | RedundantLevel::Raid10 => 1,
            RedundantLevel::Raid5 => self.members - 1,
            RedundantLevel::Raid6 => self.members - 2,
        }
    }

    /// Logical bytes per stripe: [`data_chunks`](Self::data_chunks) times
    /// the chunk.
    pub fn stripe_data_width(&self) -> u64 {
        self.data_chunks() as u64 * self.chunk
    }

    /// Number of stripes of the volume. For RAID 5 and 6 this is the rows
    /// per member; for RAID 1 and 10 the logical chunks.
    pub fn stripes(&self) -> u64 {
        let rows = self.member_chunks();
        match self.level {
            RedundantLevel::Raid1 | RedundantLevel::Raid5 | RedundantLevel::Raid6 => rows,
            RedundantLevel::Raid10 => rows * self.members as u64 / 2,
        }
    }

    /// The stripe that holds logical byte `offset`.
    pub fn stripe_of(&self, offset: u64) -> u64 {
        offset / self.stripe_data_width()
    }

    fn assert_parity(&self, what: &str) {
        assert!(self.level.has_parity(), "Layout::{what} is for RAID 5 and RAID 6, not {}", self.level);
    }

    /// Member offset where stripe `stripe` starts on every member (RAID 5
    /// and 6): `stripe * chunk`.
    ///
    /// Panics for RAID 1 and RAID 10, whose stripes (logical chunks) are not
    /// rows.
    pub fn stripe_offset(&self, stripe: u64) -> u64 {
        self.assert_parity("stripe_offset");
        stripe * self.chunk
    }

    /// The member holding P of stripe `stripe`: `n - 1 - stripe % n`
    /// (left-symmetric).
    ///
    /// Panics for RAID 1 and RAID 10, which have no parity.
    pub fn parity_member(&self, stripe: u64) -> u32 {
        self.assert_parity("parity_member");
        let n = self.members as u64;
        (n - 1 - stripe % n) as u32
    }

    /// The member holding Q of stripe `stripe` (RAID 6: the member after P,
    /// wrapping); `None` for the other levels.
    pub fn q_member(&self, stripe: u64) -> Option<u32> {
        match self.level {
            RedundantLevel::Raid6 => Some((self.parity_member(stripe) + 1) % self.members),
            _ => None,
        }
    }

    /// The member holding data chunk `i` (0 .. [`data_chunks`](Self::data_chunks))
    /// of stripe `stripe`: the `i`-th member after P (RAID 5) or after Q
    /// (RAID 6), wrapping.
    ///
    /// Panics for RAID 1 and RAID 10 (use
    /// [`data_locations`](Self::data_locations)); `i` must be below
    /// `data_chunks()`.
    pub fn data_member(&self, stripe: u64, i: u32) -> u32 {
        self.assert_parity("data_member");
        debug_assert!(i < self.data_chunks(), "data index {i} out of range");
        let skip = self.level.parity_chunks() as u32;
        (self.parity_member(stripe) + skip + i) % self.members
    }

    /// Every place that holds logical byte `offset`: all members for RAID 1,
    /// the 2 copies for RAID 10, the one data place for RAID 5 and 6.
    /// `offset` must be below [`capacity`](Self::capacity).
    pub fn data_locations(&self, offset: u64) -> Places {
        debug_assert!(offset < self.capacity(), "offset {offset} past the volume");
        let within = offset % self.chunk;
        match self.level {
            RedundantLevel::Raid1 => {
                Places { repr: PlacesRepr::Every { members: self.members, member_offset: offset } }
            }
            RedundantLevel::Raid10 => {
                let n = self.members as u64;
                let slot = offset / self.chunk * 2;
                let place = |p: u64| Place { member: (p % n) as u32, member_offset: p / n * self.chunk + within };
                Places { repr: PlacesRepr::Listed { len: 2, list: [place(slot), place(slot + 1)] } }
            }
            RedundantLevel::Raid5 | RedundantLevel::Raid6 => {
                let chunk_no = offset / self.chunk;
                let d = self.data_chunks() as u64;
                let (stripe, i) = (chunk_no / d, (chunk_no % d) as u32);
                Places::one(Place { member: self.data_member(stripe, i), member_offset: stripe * self.chunk + within })
            }
        }
    }

    /// What byte `member_offset` of `member` holds: logical data (with its
    /// logical offset), P, Q, or nothing.
    pub fn role(&self, member: u32, member_offset: u64) -> Role {
        if member >= self.members || member_offset >= self.member_size {
            return Role::Unused;
        }
        let row = member_offset / self.chunk;
        let within = member_offset % self.chunk;
        match self.level {
            RedundantLevel::Raid1 => Role::Data(member_offset),
            RedundantLevel::Raid10 => {
                let chunk_no = (row * self.members as u64 + member as u64) / 2;
                if chunk_no < self.stripes() {
                    Role::Data(chunk_no * self.chunk + within)
                } else {
                    Role::Unused
                }
            }
            RedundantLevel::Raid5 | RedundantLevel::Raid6 => {
                let n = self.members;
                let pd = self.parity_member(row);
                // Position after P, wrapping: 0 is P, 1 is Q (RAID 6) or data 0.
                let after_p = (member + n - pd) % n;
                let skip = self.level.parity_chunks() as u32;
                if after_p == 0 {
                    Role::P
                } else if after_p < skip {
                    Role::Q
                } else {
                    let i = (after_p - skip) as u64;
                    Role::Data((row * self.data_chunks() as u64 + i) * self.chunk + within)
                }
            }
        }
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
            let chunk_offset = pos % self.chunk;
            let n = (self.chunk - chunk_offset).min(end - pos);
            f(Piece {
                buf_offset: (pos - offset) as usize,
                len: n as usize,
                stripe: pos / width,
                data_index: ((pos % width) / self.chunk) as u32,
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
        let chunk = self.chunk;
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
mod tests {
    use super::*;
    use crate::ErrorKind;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    use RedundantLevel::*;

    const CHUNKS: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];

    /// Every (level, members) from the level's minimum to 8.
    fn configs() -> impl Iterator<Item = (RedundantLevel, usize)> {
        RedundantLevel::ALL.into_iter().flat_map(|l| (l.min_members()..=8).map(move |n| (l, n)))
    }

    /// Member size for exhaustive tests: enough rows for two full parity
    /// rotations, plus one so RAID 10 with an odd count has an unused slot.
    fn rows_for(n: usize) -> u64 {
        2 * n as u64 + 1
    }

    /// Checks every byte at offsets `within` of every logical chunk: the
    /// places are distinct members, map back through `logical`, and every
    /// (member, member chunk) of data is used the right number of times.
    fn check_mapping(l: &Layout, within: &[u64]) {
        let n = l.members();
        let chunk = l.chunk();
        let copies = l.level().copies(n);
        // Uses of (member, member chunk, k-th sampled offset inside it).
        let rows = l.member_chunks() as usize;
        let idx = |m: u32, row: u64, k: usize| (m as usize * rows + row as usize) * within.len() + k;
        let mut use_count = vec![0u32; n * rows * within.len()];
        let logical_chunks = l.capacity() / chunk;
        for c in 0..logical_chunks {
            for (k, &w) in within.iter().enumerate() {
                let off = c * chunk + w;
                let places = l.data_locations(off);
                assert_eq!(places.len(), copies, "{l:?} offset {off}");
                assert_eq!(places.iter().len(), copies);
                let members: BTreeSet<u32> = places.iter().map(|p| p.member).collect();
                assert_eq!(members.len(), copies, "{l:?} offset {off}: copies share a member");
                for p in places {
                    assert!((p.member as usize) < n);
                    assert!(p.member_offset < l.member_size(), "{l:?} offset {off} -> {p:?}");
                    assert_eq!(p.member_offset % chunk, w, "offset inside the chunk is kept");
                    assert_eq!(l.logical(p.member, p.member_offset), Some(off), "{l:?} {p:?}");
                    use_count[idx(p.member, p.member_offset / chunk, k)] += 1;
                }
            }
        }
        // Every member chunk: data is used exactly once per sampled byte,
        // P/Q/unused never.
        let mut data_chunks = 0;
        for m in 0..n as u32 {
            for row in 0..l.member_chunks() {
                let role = l.role(m, row * chunk);
                for (k, &w) in within.iter().enumerate() {
                    let used = use_count[idx(m, row, k)];
                    match role {
                        Role::Data(_) => assert_eq!(used, 1, "{l:?} member {m} row {row} +{w}"),
                        _ => assert_eq!(used, 0, "{l:?} member {m} row {row}: {role:?} holds data"),
                    }
                    // The role is the same over the whole chunk.
                    let r = l.role(m, row * chunk + w);
                    match (role, r) {
                        (Role::Data(a), Role::Data(b)) => assert_eq!(b, a + w),
                        _ => assert_eq!(r, role),
                    }
                }
                if matches!(role, Role::Data(_)) {
                    data_chunks += 1;
                }
            }
        }
        assert_eq!(data_chunks, logical_chunks * copies as u64, "{l:?}: data chunks on the members");
        // Past the member size and past the members: nothing.
        assert_eq!(l.logical(0, l.member_size()), None);
        assert_eq!(l.logical(n as u32, 0), None);
    }

    #[test]
    fn every_byte_maps_to_distinct_places_and_back_4k() {
        for (level, n) in configs() {
            let chunk = 4096;
            let l = Layout::new(level, n, chunk, rows_for(n) * chunk).unwrap();
            let every: Vec<u64> = (0..chunk).collect();
            check_mapping(&l, &every);
        }
    }

    #[test]
    fn every_chunk_maps_to_distinct_places_and_back_64k_1m() {
        // The map is chunk + offset inside the chunk, so sampled offsets of
        // every chunk stand for every byte.
        for chunk in [CHUNKS[1], CHUNKS[2]] {
            for (level, n) in configs() {
                let l = Layout::new(level, n, chunk, rows_for(n) * chunk).unwrap();
                check_mapping(&l, &[0, 1, 511, chunk / 2, chunk - 1]);
            }
        }
    }

    #[test]
    fn capacity_per_level() {
        for chunk in CHUNKS {
            for (level, n) in configs() {
                let rows = rows_for(n);
                let l = Layout::new(level, n, chunk, rows * chunk + chunk / 2).unwrap();
                assert_eq!(l.member_size(), rows * chunk, "rounded down to whole chunks");
                let ms = l.member_size();
                let n64 = n as u64;
                let want = match level {
                    Raid1 => ms,
                    Raid10 => n64 * rows / 2 * chunk,
                    Raid5 => (n64 - 1) * ms,
                    Raid6 => (n64 - 2) * ms,
                };
                assert_eq!(l.capacity(), want, "{l:?}");
                assert_eq!(l.capacity() % l.stripe_data_width(), 0);
            }
        }
    }

    #[test]
    fn parity_rotates_over_every_member() {
        for chunk in CHUNKS {
            for (level, n) in configs().filter(|(l, _)| l.has_parity()) {
                let l = Layout::new(level, n, chunk, rows_for(n) * chunk).unwrap();
                for start in [0u64, 1, n as u64 - 1, 5 * n as u64 + 3] {
                    let mut p_count = vec![0; n];
                    let mut q_count = vec![0; n];
                    for s in start..start + n as u64 {
                        let p = l.parity_member(s);
                        p_count[p as usize] += 1;
                        if let Some(q) = l.q_member(s) {
                            q_count[q as usize] += 1;
                        }
                        // P, Q and the data chunks are a permutation of the members.
                        let mut all: Vec<u32> = (0..l.data_chunks()).map(|i| l.data_member(s, i)).collect();
                        all.push(p);
                        all.extend(l.q_member(s));
                        all.sort_unstable();
                        assert_eq!(all, (0..n as u32).collect::<Vec<_>>(), "{l:?} stripe {s}");
                        // role agrees, inside the members.
                        if s < l.stripes() {
                            assert_eq!(l.role(p, l.stripe_offset(s)), Role::P);
                            if let Some(q) = l.q_member(s) {
                                assert_eq!(l.role(q, l.stripe_offset(s)), Role::Q);
                            }
                        }
                    }
                    assert!(p_count.iter().all(|&c| c == 1), "{l:?}: P per member over {n} stripes: {p_count:?}");
                    if level == Raid6 {
                        assert!(q_count.iter().all(|&c| c == 1), "{l:?}: Q per member: {q_count:?}");
                    } else {
                        assert!(q_count.iter().all(|&c| c == 0));
                    }
                }
            }
        }
    }

    /// (P, Q, data members in data order) per stripe.
    fn table(l: &Layout, stripes: u64) -> Vec<(u32, Option<u32>, Vec<u32>)> {
        (0..stripes)
            .map(|s| (l.parity_member(s), l.q_member(s), (0..l.data_chunks()).map(|i| l.data_member(s, i)).collect()))
            .collect()
    }

    #[test]
    fn raid5_known_answers() {
        let c = 4096;
        let l = Layout::new(Raid5, 3, c, 6 * c).unwrap();
        // Written out by hand from md's left-symmetric:
        //   stripe 0:  D0  D1  P
        //   stripe 1:  D3  P   D2
        //   stripe 2:  P   D4  D5
        assert_eq!(
            table(&l, 4),
            vec![(2, None, vec![0, 1]), (1, None, vec![2, 0]), (0, None, vec![1, 2]), (2, None, vec![0, 1])]
        );
        assert_eq!(l.data_locations(0).first(), Place { member: 0, member_offset: 0 });
        assert_eq!(l.data_locations(c).first(), Place { member: 1, member_offset: 0 });
        assert_eq!(l.data_locations(2 * c + 5).first(), Place { member: 2, member_offset: c + 5 });
        assert_eq!(l.data_locations(3 * c).first(), Place { member: 0, member_offset: c });
        assert_eq!(l.logical(2, 0), None, "P of stripe 0");
        assert_eq!(l.logical(1, c), None, "P of stripe 1");
        assert_eq!(l.logical(1, 2 * c + 7), Some(4 * c + 7));

        // md(4)'s 4-member left-symmetric picture:
        //   0  1  2  P
        //   4  5  P  3
        //   8  P  6  7
        //   P  9 10 11
        let l = Layout::new(Raid5, 4, c, 8 * c).unwrap();
        let grid = [
            [Some(0), Some(1), Some(2), None],
            [Some(4), Some(5), None, Some(3)],
            [Some(8), None, Some(6), Some(7)],
            [None, Some(9), Some(10), Some(11)],
        ];
        for (row, cells) in grid.iter().enumerate() {
            for (m, want) in cells.iter().enumerate() {
                let got = l.logical(m as u32, row as u64 * c);
                assert_eq!(got, want.map(|k: u64| k * c), "row {row} member {m}");
            }
        }
    }

    #[test]
    fn raid6_known_answers() {
        let c = 4096;
        let l = Layout::new(Raid6, 4, c, 8 * c).unwrap();
        //   stripe 0:  Q   D0  D1  P
        //   stripe 1:  D2  D3  P   Q
        //   stripe 2:  D5  P   Q   D4
        //   stripe 3:  P   Q   D6  D7
        assert_eq!(
            table(&l, 5),
            vec![
                (3, Some(0), vec![1, 2]),
                (2, Some(3), vec![0, 1]),
                (1, Some(2), vec![3, 0]),
                (0, Some(1), vec![2, 3]),
                (3, Some(0), vec![1, 2]),
            ]
        );
        assert_eq!(l.role(0, 0), Role::Q);
        assert_eq!(l.role(3, 0), Role::P);
        assert_eq!(l.role(3, 2 * c), Role::Data(4 * c));
        assert_eq!(l.role(0, 2 * c + 1), Role::Data(5 * c + 1));

        let l = Layout::new(Raid6, 5, c, 10 * c).unwrap();
        //   stripe 0:  Q   D0  D1  D2  P
        //   stripe 1:  D3  D4  D5  P   Q
        //   stripe 2:  D7  D8  P   Q   D6
        assert_eq!(
            table(&l, 3),
            vec![(4, Some(0), vec![1, 2, 3]), (3, Some(4), vec![0, 1, 2]), (2, Some(3), vec![4, 0, 1])]
        );
    }

    #[test]
    fn raid10_known_answers() {
        let c = 4096;
        let pl = |member, row: u64| Place { member, member_offset: row * c };
        // 3 members, 3 rows: 9 slots, 4 chunks, the last slot unused.
        //   row 0:  C0  C0  C1
        //   row 1:  C1  C2  C2
        //   row 2:  C3  C3  --
        let l = Layout::new(Raid10, 3, c, 3 * c).unwrap();
        assert_eq!(l.capacity(), 4 * c);
        let got: Vec<Vec<Place>> = (0..4).map(|k| l.data_locations(k * c).iter().collect()).collect();
        assert_eq!(
            got,
            vec![
                vec![pl(0, 0), pl(1, 0)],
                vec![pl(2, 0), pl(0, 1)],
                vec![pl(1, 1), pl(2, 1)],
                vec![pl(0, 2), pl(1, 2)],
            ]
        );
        assert_eq!(l.logical(2, 2 * c), None, "unused last slot");
        assert_eq!(l.role(2, 2 * c + 9), Role::Unused);
        assert_eq!(l.logical(0, c + 3), Some(c + 3), "second copy of chunk 1");

        // 4 members: two mirrored pairs.
        let l = Layout::new(Raid10, 4, c, 2 * c).unwrap();
        assert_eq!(l.capacity(), 4 * c);
        let got: Vec<Vec<Place>> = (0..4).map(|k| l.data_locations(k * c).iter().collect()).collect();
        assert_eq!(
            got,
            vec![
                vec![pl(0, 0), pl(1, 0)],
                vec![pl(2, 0), pl(3, 0)],
                vec![pl(0, 1), pl(1, 1)],
                vec![pl(2, 1), pl(3, 1)],
            ]
        );

        // 2 members: RAID 1.
        let l = Layout::new(Raid10, 2, c, 3 * c).unwrap();
        assert_eq!(l.capacity(), 3 * c);
        for off in [0, 5, c + 17, 3 * c - 1] {
            let got: Vec<Place> = l.data_locations(off).iter().collect();
            assert_eq!(got, vec![Place { member: 0, member_offset: off }, Place { member: 1, member_offset: off }]);
        }
    }

    #[test]
    fn raid1_known_answers() {
        let c = 65536;
        let l = Layout::new(Raid1, 3, c, 10 * c + 123).unwrap();
        assert_eq!(l.capacity(), 10 * c);
        let got: Vec<Place> = l.data_locations(c + 9).iter().collect();
        assert_eq!(got, (0..3).map(|m| Place { member: m, member_offset: c + 9 }).collect::<Vec<_>>());
        assert_eq!(l.logical(2, 77), Some(77));
        assert_eq!(l.stripe_of(3 * c + 1), 3);
        assert_eq!(l.q_member(0), None);
    }

    #[test]
    fn level_facts() {
        let want = [(Raid1, 1, 2, 0), (Raid10, 10, 2, 0), (Raid5, 5, 3, 1), (Raid6, 6, 4, 2)];
        for (level, number, min, parity) in want {
            assert_eq!(level.number(), number);
            assert_eq!(RedundantLevel::from_number(number).unwrap(), level);
            assert_eq!(level.min_members(), min);
            assert_eq!(level.parity_chunks(), parity);
            assert_eq!(level.to_string(), format!("raid{number}"));
        }
        assert_eq!(Raid1.fault_tolerance(2), 1);
        assert_eq!(Raid1.fault_tolerance(4), 3);
        assert_eq!(Raid10.fault_tolerance(6), 1);
        assert_eq!(Raid5.fault_tolerance(5), 1);
        assert_eq!(Raid6.fault_tolerance(5), 2);
        assert_eq!(RedundantLevel::from_number(0).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(RedundantLevel::from_number(4).unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    /// RAID 10's guaranteed tolerance, checked: every single failure leaves
    /// a copy of every chunk; with 3+ members some pair of failures does not.
    #[test]
    fn raid10_tolerance_is_one_guaranteed() {
        let c = 4096;
        for n in 2..=8usize {
            let l = Layout::new(Raid10, n, c, rows_for(n) * c).unwrap();
            let survives = |dead: &[u32]| {
                (0..l.capacity() / c).all(|k| l.data_locations(k * c).iter().any(|p| !dead.contains(&p.member)))
            };
            for a in 0..n as u32 {
                assert!(survives(&[a]), "n={n} member {a}");
            }
            let all_pairs = (0..n as u32).all(|a| (a + 1..n as u32).all(|b| survives(&[a, b])));
            assert!(!all_pairs, "n={n}: some pair of failures must lose data");
        }
    }

    #[test]
    fn constructor_errors() {
        for (level, n) in [(Raid1, 1), (Raid10, 1), (Raid5, 2), (Raid6, 3)] {
            let e = Layout::new(level, n, 65536, 1 << 20).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.to_string().contains(&format!("at least {}", level.min_members())), "{e}");
        }
        let e = Layout::new(Raid6, 33, 65536, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(Layout::new(Raid6, 32, 65536, 1 << 20).is_ok());
        for bad in [0, 2048, 3 << 12, 2 << 20] {
            let e = Layout::new(Raid5, 4, bad, 1 << 30).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.to_string().contains("power of two from 4K to 1M"), "{e}");
        }
        let e = Layout::new(Raid1, 2, 65536, 65535).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooSmall);
    }

    #[test]
    #[should_panic(expected = "for RAID 5 and RAID 6")]
    fn parity_member_of_a_mirror_panics() {
        Layout::new(Raid10, 4, 4096, 1 << 20).unwrap().parity_member(0);
    }

    // ---- segments ----

    fn layout() -> impl Strategy<Value = Layout> {
        (0usize..4, 0usize..7, 12u32..=20, 1u64..=20).prop_map(|(li, extra, shift, rows)| {
            let level = RedundantLevel::ALL[li];
            let n = level.min_members() + extra.min(8 - level.min_members());
            let chunk = 1u64 << shift;
            Layout::new(level, n, chunk, rows * chunk).unwrap()
        })
    }

    fn range(cap: u64, a: f64, b: f64) -> (u64, usize) {
        let start = (cap as f64 * a) as u64 % cap;
        let len = (((cap - start) as f64 * b) as u64).clamp(1, 64 << 20) as usize;
        (start, len)
    }

    proptest! {
        #[test]
        fn locations_and_logical_are_inverse(l in layout(), frac in 0.0f64..1.0) {
            let off = ((l.capacity() as f64 * frac) as u64).min(l.capacity() - 1);
            let places = l.data_locations(off);
            prop_assert_eq!(places.len(), l.level().copies(l.members()));
            for p in places {
                prop_assert_eq!(l.logical(p.member, p.member_offset), Some(off));
            }
            let s = l.stripe_of(off);
            prop_assert!(s < l.stripes());
            if l.level().has_parity() {
                let i = ((off % l.stripe_data_width()) / l.chunk()) as u32;
                prop_assert_eq!(places.first().member, l.data_member(s, i));
                prop_assert_eq!(places.first().member_offset / l.chunk(), s);
            }
        }

        #[test]
        fn segments_cover_range_exactly_once(l in layout(), a in 0.0f64..1.0, b in 0.0f64..1.0) {
            let (start, len) = range(l.capacity(), a, b);
            let mut next_buf = 0usize;
            let mut seen = std::collections::HashSet::new();
            l.for_each_segment(start, len, |p| {
                assert_eq!(p.buf_offset, next_buf, "pieces are in logical order without gaps");
                assert!(p.len > 0);
                let first = start + p.buf_offset as u64;
                let last = first + p.len as u64 - 1;
                assert_eq!(first / l.chunk(), last / l.chunk(), "a piece stays in one chunk");
                assert_eq!(p.chunk_offset, first % l.chunk());
                assert_eq!(p.places, l.data_locations(first));
                assert_eq!(p.stripe, l.stripe_of(first));
                assert_eq!(p.data_index as u64, (first % l.stripe_data_width()) / l.chunk());
                assert!(p.data_index < l.data_chunks());
                let segs: Vec<Segment> = p.segments().collect();
                assert_eq!(segs.len(), p.places.len());
                for s in segs {
                    assert_eq!((s.buf_offset, s.len), (p.buf_offset, p.len));
                    assert!(s.member_offset + s.len as u64 <= l.member_size());
                    assert_eq!(l.logical(s.member, s.member_offset + s.len as u64 - 1), Some(last));
                    assert!(seen.insert((s.member, s.member_offset)), "place visited twice");
                }
                next_buf += p.len;
            });
            prop_assert_eq!(next_buf, len);
        }
    }

    // ---- write planning ----

    /// Brute force: for every row (byte inside the chunk) of every touched
    /// stripe, which data chunks the write covers; maximal runs of rows with
    /// the same non-empty set are the bands; reads counted member by member
    /// from the layout's roles.
    /// (start row, end row, data indices written, rmw reads, rcw reads).
    type Band = (u64, u64, BTreeSet<u32>, u32, u32);

    fn brute_force(l: &Layout, offset: u64, len: usize) -> Vec<(u64, bool, Vec<Band>)> {
        let end = offset + len as u64;
        let width = l.stripe_data_width();
        let chunk = l.chunk();
        let d = l.data_chunks();
        let mut out = Vec::new();
        for stripe in offset / width..=(end - 1) / width {
            let base = stripe * width;
            let covered = |i: u32, row: u64| {
                let x = base + i as u64 * chunk + row;
                offset <= x && x < end
            };
            let full = (0..d).all(|i| (0..chunk).all(|r| covered(i, r)));
            let mut bands: Vec<Band> = Vec::new();
            for row in 0..chunk {
                let set: BTreeSet<u32> = (0..d).filter(|&i| covered(i, row)).collect();
                match bands.last_mut() {
                    Some(last) if last.1 == row && last.2 == set => last.1 = row + 1,
                    _ if !set.is_empty() => {
                        // Count reads member by member.
                        let (mut rmw, mut rcw) = (0, 0);
                        if l.level().has_parity() {
                            for m in 0..l.members() as u32 {
                                let role = l.role(m, stripe * chunk + row);
                                match role {
                                    Role::P | Role::Q => rmw += 1,
                                    Role::Data(lg) => {
                                        let i = ((lg - base) / chunk) as u32;
                                        if set.contains(&i) {
                                            rmw += 1
                                        } else {
                                            rcw += 1
                                        }
                                    }
                                    Role::Unused => unreachable!(),
                                }
                            }
                        } else {
                            rmw = set.len() as u32;
                        }
                        bands.push((row, row + 1, set, rmw, rcw));
                    }
                    _ => {}
                }
            }
            out.push((stripe, full, bands));
        }
        out
    }

    fn small_chunk_layout() -> impl Strategy<Value = Layout> {
        (0usize..4, 0usize..7, 12u32..=13, 1u64..=12).prop_map(|(li, extra, shift, rows)| {
            let level = RedundantLevel::ALL[li];
            let n = level.min_members() + extra.min(8 - level.min_members());
            let chunk = 1u64 << shift;
            Layout::new(level, n, chunk, rows * chunk).unwrap()
        })
    }

    fn check_writes(l: &Layout, start: u64, len: usize) {
        let want = brute_force(l, start, len);
        let mut got = Vec::new();
        l.for_each_stripe_write(start, len, |sw| got.push(sw));
        assert_eq!(got.len(), want.len(), "{l:?} write {start}+{len}: stripes");
        for (sw, (stripe, full, bands)) in got.iter().zip(&want) {
            assert_eq!(sw.stripe, *stripe);
            assert_eq!(sw.full, *full, "{l:?} write {start}+{len} stripe {stripe}");
            assert_eq!(sw.bands().len(), bands.len(), "{l:?} write {start}+{len} stripe {stripe}: {sw:?} vs {bands:?}");
            for (b, (s, e, set, rmw, rcw)) in sw.bands().iter().zip(bands) {
                assert_eq!((b.start, b.end), (*s, *e), "{l:?} write {start}+{len}: {sw:?}");
                let got_set: BTreeSet<u32> = (0..l.data_chunks()).filter(|&i| b.writes(i)).collect();
                assert_eq!(&got_set, set);
                assert_eq!(b.written as usize, set.len());
                if l.level().has_parity() {
                    assert_eq!((b.rmw_reads, b.rcw_reads), (*rmw, *rcw));
                }
                let method = if *rcw == 0 {
                    WriteMethod::Full
                } else if rmw < rcw {
                    WriteMethod::ReadModifyWrite
                } else {
                    WriteMethod::ReconstructWrite
                };
                assert_eq!(b.method, method);
                assert_eq!(b.reads(), if method == WriteMethod::Full { 0 } else { (*rmw).min(*rcw) });
            }
            if sw.full {
                assert_eq!(sw.reads(), 0);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn stripe_writes_match_brute_force(l in small_chunk_layout(), a in 0.0f64..1.0, b in 0.0f64..1.0, align in 0u32..3) {
            let (mut start, mut len) = range(l.capacity(), a, b);
            // Bias towards sector- and chunk-aligned writes, which are the usual ones.
            if align > 0 {
                let unit = if align == 1 { 512 } else { l.chunk() };
                start -= start % unit;
                len = (len as u64).div_ceil(unit).saturating_mul(unit).min(l.capacity() - start) as usize;
            }
            check_writes(&l, start, len);
        }
    }

    #[test]
    fn stripe_write_examples() {
        let c = 4096u64;
        // RAID 5, 3 members (2 data): a 4 KiB write to one chunk reads the
        // other data chunk (rcw 1) rather than old data + P (rmw 2).
        let l = Layout::new(Raid5, 3, c, 8 * c).unwrap();
        let mut v = Vec::new();
        l.for_each_stripe_write(0, c as usize, |s| v.push(s));
        assert_eq!(v.len(), 1);
        assert!(!v[0].full);
        let b = v[0].bands()[0];
        assert_eq!((b.start, b.end, b.rmw_reads, b.rcw_reads, b.method), (0, c, 2, 1, WriteMethod::ReconstructWrite));

        // RAID 5 with 4 members: 2 against 2, a tie: reconstruct-write.
        let l = Layout::new(Raid5, 4, c, 8 * c).unwrap();
        l.for_each_stripe_write(512, 1024, |s| {
            let b = s.bands()[0];
            assert_eq!((b.start, b.end, b.rmw_reads, b.rcw_reads), (512, 1536, 2, 2));
            assert_eq!(b.method, WriteMethod::ReconstructWrite);
        });
        // RAID 5 with 6 members: 2 against 4, read-modify-write.
        let l = Layout::new(Raid5, 6, c, 8 * c).unwrap();
        l.for_each_stripe_write(c, 4096, |s| {
            assert_eq!(s.bands()[0].method, WriteMethod::ReadModifyWrite);
            assert_eq!(s.reads(), 2);
        });
        // RAID 6 with 6 members (4 data): one chunk, rmw 3 against rcw 3: rcw.
        let l = Layout::new(Raid6, 6, c, 8 * c).unwrap();
        l.for_each_stripe_write(0, 4096, |s| {
            let b = s.bands()[0];
            assert_eq!((b.rmw_reads, b.rcw_reads, b.method), (3, 3, WriteMethod::ReconstructWrite));
        });
        // Two full stripes and a bit: 2 full, then 1 partial.
        let l = Layout::new(Raid6, 5, c, 8 * c).unwrap();
        let mut v = Vec::new();
        l.for_each_stripe_write(0, (6 * c + 100) as usize, |s| v.push(s));
        assert_eq!(v.iter().map(|s| s.full).collect::<Vec<_>>(), vec![true, true, false]);
        assert_eq!(v[0].bands().len(), 1);
        assert_eq!(v[0].bands()[0].method, WriteMethod::Full);
        // A write straddling data chunks 0 and 1 of a 4-data stripe, 2 KiB
        // in each: two bands, each with one chunk written.
        let l = Layout::new(Raid5, 5, c, 8 * c).unwrap();
        let mut v = Vec::new();
        l.for_each_stripe_write(c - 2048, 4096, |s| v.push(s));
        let bands: Vec<_> = v[0].bands().iter().map(|b| (b.start, b.end, b.first_written, b.written)).collect();
        assert_eq!(bands, vec![(0, 2048, 1, 1), (2048, c, 0, 1)]);
    }

    #[test]
    fn stripe_writes_exhaustive_small() {
        // Every aligned (512-byte) write in the first three stripes of small
        // arrays of each level, against the brute force.
        let c = 4096u64;
        for (level, n) in configs().filter(|(_, n)| *n <= 5) {
            let l = Layout::new(level, n, c, 4 * c).unwrap();
            let span = (3 * l.stripe_data_width()).min(l.capacity());
            let step = 512u64;
            for start in (0..span).step_by(step as usize * 3) {
                for len in (step..=span - start).step_by(step as usize * 5) {
                    check_writes(&l, start, len as usize);
                }
            }
        }
    }
}
