//! The RAID levels, one descriptor each: what a level is, declared as data
//! (SPDK's `struct raid_bdev_module` in `module/bdev/raid`: a level, its
//! minimum member count and its constraint on lost members), and the one
//! rule that says whether a volume survives a set of lost members.
//!
//! Each level fills one [`Descriptor`] in a file of its own (`raid0.rs`,
//! `raid1.rs`, `raid10.rs`, `raid5.rs`, `raid6.rs`); [`REGISTRY`] lists
//! them, one line each, in the order of [`Level`]. Everything else asks the
//! descriptor ([`Level::desc`]) instead of matching on the level:
//! minimum members, names and numbers, parity chunks, copies, how many
//! members it may lose ([`Descriptor::survival`], the only place that
//! decides it). Where each byte lives is each level's [`Placement`] (a
//! unit struct in the level's file: [`Raid0`] .. [`Raid6`]), picked for a
//! [`Level`] by `per_level!`, the one match on the level;
//! [`geometry`](crate::raid::geometry) and [`layout`](crate::raid::layout)
//! call it (SPDK's module function table, here static dispatch).
//!
//! Maintenance asks the level too: [`Placement::redundancy`] says how a
//! stripe is kept (copies of one chunk, or data chunks with P and Q, as
//! places on members: [`Redundancy`]) and [`Placement::stripe_at`] which
//! stripe a member's chunk belongs to; rebuild, check, repair and resync
//! ([`crate::control::maint`]) derive every step from those two
//! ([`Redundancy::recover`]: copy from another copy, or recompute from
//! the stripe), and name no level.
//!
//! Adding a level: a new file here with its descriptor and its
//! [`Placement`] (every method without a default: where each byte lives,
//! what each member chunk holds, its stripes' redundancy), its variant in
//! [`Level`], its line in [`REGISTRY`] and its arm in `per_level!`. Not
//! here yet (ARCHITECTURE.md lists the files): its stripe operations and
//! its takeovers.

mod draid;
mod place;
mod redundancy;
mod raid0;
mod raid1;
mod raid10;
mod raid5;
mod raid6;

use std::ops::Range;

use crate::{bail, Result};

pub use draid::{default_data, default_spares, Declustered, Draid5, Draid6, DraidMap, DraidRole, LAYOUT_VERSION, SEED};
pub use place::{Place, Places, PlacesIter, Role, Shape, Variant};
pub(crate) use redundancy::row_redundancy;
pub use redundancy::{Recover, Redundancy, StripePlaces};
pub use raid0::Raid0;
pub use raid1::Raid1;
pub use raid10::Raid10;
pub use raid5::Raid5;
pub use raid6::Raid6;

/// RAID level of a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Level {
    /// Striping without redundancy.
    Raid0 = 0,
    /// Mirroring (see [`crate::raid::layout`]).
    Raid1 = 1,
    /// Striped mirrors, md's near-2 layout.
    Raid10 = 2,
    /// Striping with rotating parity P, left-symmetric.
    Raid5 = 3,
    /// Striping with rotating P and Q, left-symmetric.
    Raid6 = 4,
    /// Declustered parity: groups of D data chunks and P, with distributed
    /// spare chunks, permuted over every member (issue 33, ZFS's draid1).
    Draid5 = 5,
    /// Declustered parity with P and Q per group (ZFS's draid2).
    Draid6 = 6,
}

/// Where a level puts each byte of a volume of [`Shape`] `s`, and how it
/// keeps each stripe recoverable: one unit struct per level implements it
/// in the level's file, and `per_level!` picks it for a [`Level`]. Pure
/// functions, `#[inline]` where the data path calls them (per request), no
/// allocation.
///
/// A new level fills every method without a default:
/// [`role`](Self::role), [`data_member`](Self::data_member) (where the
/// bytes are), [`redundancy`](Self::redundancy) and
/// [`stripe_at`](Self::stripe_at) (what maintenance rebuilds and checks:
/// the unit test `every_level_recovers_every_lost_chunk` in `tests.rs`
/// checks them against `places` and `role`), and overrides the row
/// arithmetic below when a stripe is not one member row, and
/// [`places`](Self::places) unless it keeps each byte once in row stripes.
pub trait Placement: Sized {
    /// Every place that holds logical byte `offset` (below the volume's
    /// capacity, bytes). The default is the placement of a level that
    /// keeps each byte once, in stripes that are rows of data chunks
    /// (RAID 5 and 6, see `row_places`); a level that copies bytes, or
    /// whose stripes are not rows, overrides it.
    #[inline]
    fn places(s: &Shape, offset: u64) -> Places {
        row_places::<Self>(s, offset)
    }

    /// What byte `member_offset` (bytes in the data area, below
    /// `s.member_size`) of `member` (below `s.members`) holds.
    fn role(s: &Shape, member: u32, member_offset: u64) -> Role;

    /// How stripe `stripe` (below `s.stripes`) is kept: the places of its
    /// chunks (chunk-aligned member offsets, bytes) and whether they are
    /// copies or data with parity (see [`Redundancy`]). Rebuild, check,
    /// repair and resync do what this says.
    fn redundancy(s: &Shape, stripe: u64) -> Redundancy;

    /// The stripe that `member`'s chunk in member row `row` (a row is
    /// `s.chunk` bytes of every member) belongs to, or `None` when that
    /// chunk holds nothing (past the volume, RAID 10's unused last slot).
    /// The stripe's [`redundancy`](Self::redundancy) lists the place
    /// `(member, row * s.chunk)`.
    fn stripe_at(s: &Shape, member: u32, row: u64) -> Option<u64>;

    /// The steps that find `member`'s chunk in member row `row` again
    /// when `member` is lost (what a rebuild runs): zeros for a chunk that
    /// holds nothing, else what its stripe's
    /// [`redundancy`](Self::redundancy) says ([`Redundancy::recover`]).
    /// Derived from the two methods above; a level has no reason to
    /// override it.
    #[inline]
    fn recover(s: &Shape, member: u32, row: u64) -> Recover {
        match Self::stripe_at(s, member, row) {
            None => Recover::Zero,
            Some(stripe) => Self::redundancy(s, stripe).recover(Place { member, member_offset: row * s.chunk }),
        }
    }

    /// The member holding P of `stripe`; `None` for a level without
    /// parity.
    #[inline]
    fn parity_member(_s: &Shape, _stripe: u64) -> Option<u32> {
        None
    }

    /// The member holding Q of `stripe`; `None` but for RAID 6.
    #[inline]
    fn q_member(_s: &Shape, _stripe: u64) -> Option<u32> {
        None
    }

    /// Whether `member` holds parity (P or Q) in every stripe and no
    /// data: the last member of RAID 5/6's parity-last layout (md's
    /// `ALGORITHM_PARITY_N`, which md's `raid5.c` counts as
    /// `dirty_parity_disks`). Losing only such members costs no data
    /// even after an interrupted write (no write hole: nothing is
    /// reconstructed from parity, the parity is recomputed from the data).
    #[inline]
    fn parity_only(_s: &Shape, _member: u32) -> bool {
        false
    }

    /// The member holding data chunk `i` (below `s.data_chunks`) of
    /// `stripe` (for the mirrors: the first copy's member).
    fn data_member(s: &Shape, stripe: u64, i: u32) -> u32;

    /// The stripes with a chunk in member rows `[ra, rb)` (`ra < rb`;
    /// a row is a chunk-sized band of every member).
    #[inline]
    fn stripes_of_rows(_s: &Shape, ra: u64, rb: u64) -> Range<u64> {
        ra..rb
    }

    /// The member row that holds every chunk of parity stripe `stripe`
    /// (its member offset over the chunk): the stripe itself for RAID 5
    /// and 6, its group's row for the declustered levels.
    #[inline]
    fn stripe_row(_s: &Shape, stripe: u64) -> u64 {
        stripe
    }

    /// The member rows holding stripes `[s0, s1)` (`s0 < s1`).
    #[inline]
    fn rows_of_stripes(_s: &Shape, s0: u64, s1: u64) -> Range<u64> {
        s0..s1
    }

    /// Most stripes with a chunk in one member row.
    #[inline]
    fn stripes_per_row(_s: &Shape) -> u64 {
        1
    }

    /// Stripes held by `rows` member rows (rounded down).
    #[inline]
    fn stripes_in_rows(_s: &Shape, rows: u64) -> u64 {
        rows
    }

    /// Rows past either end of a run of rows that the run's stripes may
    /// reach (a copy pair straddling two rows): what a maintenance buffer
    /// needs beyond its batch.
    #[inline]
    fn straddle_rows(_s: &Shape) -> u64 {
        0
    }
}

/// Where logical byte `offset` lives on a level that keeps it once, in
/// stripes that are rows of data chunks (RAID 5 and 6): data index
/// `c % d` of stripe `c / d` for logical chunk `c`, on `L`'s data member
/// of that index, in the stripe's row.
#[inline]
pub(crate) fn row_places<L: Placement>(s: &Shape, offset: u64) -> Places {
    let chunk_no = offset / s.chunk;
    let d = s.data_chunks as u64;
    let (stripe, i) = (chunk_no / d, (chunk_no % d) as u32);
    Places::one(Place { member: L::data_member(s, stripe, i), member_offset: stripe * s.chunk + offset % s.chunk })
}

/// [`Placement::role`] for a level whose stripes are rows (RAID 5 and 6):
/// in row `r`, the `rotation` members `0 .. rotation` hold, from P's member
/// `p(s, r)` on and wrapping, P, then Q when `parity` is 2, then the data
/// chunks in order.
#[inline]
pub(crate) fn row_role(s: &Shape, member: u32, member_offset: u64, p: fn(&Shape, u64) -> u32, rotation: u32, parity: u32) -> Role {
    let (row, within) = (member_offset / s.chunk, member_offset % s.chunk);
    // Position after P, wrapping: 0 is P, then Q (RAID 6), then the data.
    match (member + rotation - p(s, row)) % rotation {
        0 => Role::P,
        1 if parity == 2 => Role::Q,
        after => Role::Data((row * s.data_chunks as u64 + (after - parity) as u64) * s.chunk + within),
    }
}

/// [`Placement::stripe_at`] for a level whose stripes are member rows
/// (RAID 0, 1, 5, 6): row `row` while it is inside the volume.
#[inline]
pub(crate) fn row_stripe(s: &Shape, row: u64) -> Option<u64> {
    (row < s.stripes).then_some(row)
}

/// `per_level!(level, L => expr)`: evaluates `expr` with the type `L` set
/// to `level`'s [`Placement`] ([`Raid0`] .. [`Raid6`]). The one match on
/// the level that the placement calls go through: each arm is static
/// dispatch, inlined.
macro_rules! per_level {
    ($level:expr, $L:ident => $body:expr) => {
        match $level {
            $crate::raid::level::Level::Raid0 => {
                type $L = $crate::raid::level::Raid0;
                $body
            }
            $crate::raid::level::Level::Raid1 => {
                type $L = $crate::raid::level::Raid1;
                $body
            }
            $crate::raid::level::Level::Raid10 => {
                type $L = $crate::raid::level::Raid10;
                $body
            }
            $crate::raid::level::Level::Raid5 => {
                type $L = $crate::raid::level::Raid5;
                $body
            }
            $crate::raid::level::Level::Raid6 => {
                type $L = $crate::raid::level::Raid6;
                $body
            }
            $crate::raid::level::Level::Draid5 => {
                type $L = $crate::raid::level::Draid5;
                $body
            }
            $crate::raid::level::Level::Draid6 => {
                type $L = $crate::raid::level::Draid6;
                $body
            }
        }
    };
}
pub(crate) use per_level;

/// Every level's descriptor, indexed by `Level as usize` (one line per
/// level; the order is the CLI's).
pub static REGISTRY: [&Descriptor; 7] = [
    &raid0::RAID0,
    &raid1::RAID1,
    &raid10::RAID10,
    &raid5::RAID5,
    &raid6::RAID6,
    &draid::DRAID5,
    &draid::DRAID6,
];

/// How many members a level may lose, as data (SPDK's
/// `base_bdevs_constraint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loses {
    /// Any `k` members, whichever they are (SPDK's
    /// `CONSTRAINT_MAX_BASE_BDEVS_REMOVED`): RAID 0 0, RAID 5 1, RAID 6 2.
    Any(usize),
    /// All but `k` members, whichever they are (SPDK's
    /// `CONSTRAINT_MIN_BASE_BDEVS_OPERATIONAL`): RAID 1 keeps 1.
    AllBut(usize),
    /// `k` near copies (md's RAID 10 `n2` for `k` 2): the members' chunks
    /// are numbered row by row (slot `p` on member `p % n`) and logical
    /// chunk `c` is stored in slots `k c .. k c + k - 1`. The volume lives
    /// while every logical chunk keeps one of its `k` members.
    NearCopies(usize),
}

/// How many places hold each logical byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// One: RAID 0, and RAID 5 and 6 (parity protects it without copying
    /// it).
    One,
    /// Every member: RAID 1.
    All,
    /// A fixed number: RAID 10's 2.
    Fixed(usize),
}

/// What a RAID level is, as data. One `static` per level, in
/// [`REGISTRY`].
#[derive(Debug)]
pub struct Descriptor {
    /// The level this describes.
    pub level: Level,
    /// The number md, the CLI and the superblock use (0, 1, 10, 5, 6).
    pub number: u32,
    /// Fewest members an array of this level may have (md's own
    /// minimums).
    pub min_members: usize,
    /// The members it may lose (see [`Descriptor::survival`]).
    pub loses: Loses,
    /// Parity chunks per stripe: 0, 1 (P) or 2 (P and Q).
    pub parity: usize,
    /// Places that hold each logical byte.
    pub copies: Copies,
}

/// Whether a volume keeps all its data with a set of members lost (see
/// [`Descriptor::survival`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Survival {
    /// True when every logical byte can still be read (from a copy, or
    /// rebuilt from parity).
    pub survives: bool,
    /// How many more members it may lose, whichever they are, and still
    /// survive (0 when it has not survived).
    pub more: usize,
}

/// A set of member roles as a bit mask: bit `m` is role `m`
/// ([`MAX_MEMBERS`](crate::raid::chunk::MAX_MEMBERS) is 32).
pub type MemberMask = u64;

/// The mask of the roles whose flag in `down` is set.
pub fn mask_of(down: &[bool]) -> MemberMask {
    down.iter().enumerate().filter(|(_, &d)| d).fold(0, |m, (i, _)| m | 1 << i)
}

impl Descriptor {
    /// The survival rule, for every level: whether a volume of this level
    /// over `members` members holding `chunks` logical chunks keeps all
    /// its data with the roles in `lost` unavailable, and how many more
    /// members it may lose then. `chunks` matters only to near copies (a
    /// volume of fewer chunks than members leaves some neighbours sharing
    /// nothing); pass `u64::MAX` for "any size". Roles past `members` in
    /// `lost` are ignored.
    #[inline]
    pub fn survival(&self, members: usize, chunks: u64, lost: MemberMask) -> Survival {
        let all = if members >= 64 { u64::MAX } else { (1u64 << members) - 1 };
        let lost = lost & all;
        let gone = lost.count_ones() as usize;
        let more = match self.loses {
            Loses::Any(k) => k.checked_sub(gone),
            // Losing every member loses the data, whatever `k` says.
            Loses::AllBut(k) => (members - gone).checked_sub(k.max(1)),
            Loses::NearCopies(k) => {
                let n = members as u64;
                // The placement repeats every `members` chunks.
                let least = (0..chunks.min(n))
                    .map(|c| (0..k as u64).filter(|j| lost & 1 << ((k as u64 * c + j) % n) == 0).count())
                    .min()
                    .unwrap_or(k);
                least.checked_sub(1)
            }
        };
        Survival { survives: more.is_some(), more: more.unwrap_or(0) }
    }

    /// How many members of an array of `members` members may fail,
    /// whichever they are, without losing data: RAID 0 0, RAID 1
    /// `members - 1`, RAID 10 1, RAID 5 1, RAID 6 2. (RAID 10 survives
    /// more when they hit different copy pairs, but two neighbouring
    /// members hold both copies of some chunk.)
    #[inline]
    pub fn fault_tolerance(&self, members: usize) -> usize {
        self.survival(members, u64::MAX, 0).more
    }

    /// How many places hold each logical byte in an array of `members`
    /// members.
    pub fn copies(&self, members: usize) -> usize {
        match self.copies {
            Copies::One => 1,
            Copies::All => members,
            Copies::Fixed(k) => k,
        }
    }

    /// Data chunks per stripe over `members` members: a row of data
    /// chunks and its P (and Q) for the levels that keep one copy (RAID 0
    /// `members`, RAID 5 `members - 1`, RAID 6 `members - 2`), one chunk
    /// for the mirrored ones (RAID 1 and 10, whose stripe is a logical
    /// chunk). `members` is at least [`min_members`](Self::min_members).
    #[inline]
    pub fn data_chunks(&self, members: usize) -> usize {
        if let Some((d, _)) = self.declustered(members) {
            return d as usize;
        }
        match self.copies {
            Copies::One => members - self.parity,
            Copies::All | Copies::Fixed(_) => 1,
        }
    }

    /// Logical chunks a volume of `rows` chunk-sized rows on each of
    /// `members` members holds: the rows' slots less P and Q, over the
    /// copies (RAID 10 over an odd count rounds down, md's
    /// `raid10_size`). `members` is at least
    /// [`min_members`](Self::min_members).
    pub fn chunks(&self, members: usize, rows: u64) -> u64 {
        if let Some((d, g)) = self.declustered(members) {
            return rows * g as u64 * d as u64;
        }
        rows * (members - self.parity) as u64 / self.copies(members) as u64
    }

    /// Rows on each of `members` members that hold `chunks` logical
    /// chunks (the inverse of [`chunks`](Self::chunks), rounded up);
    /// `None` when the count overflows or `members` is below the level's
    /// parity.
    pub fn rows_for(&self, members: usize, chunks: u64) -> Option<u64> {
        if let Some((d, g)) = self.declustered(members) {
            return Some(chunks.div_ceil(g as u64 * d as u64));
        }
        let data = members.checked_sub(self.parity).filter(|&d| d > 0)? as u64;
        Some(chunks.checked_mul(self.copies(members) as u64)?.div_ceil(data))
    }

    /// The fewest rows that hold whole logical chunks over `members`
    /// members: 1, or 2 for RAID 10 over an odd count (whose copy pairs
    /// straddle rows).
    pub fn unit_rows(&self, members: usize) -> u64 {
        if self.level.declustered() {
            return 1;
        }
        let (mut a, mut b) = ((members - self.parity) as u64, self.copies(members) as u64);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        self.copies(members) as u64 / a
    }

    /// A declustered level's default D and groups per row over `members`
    /// members ([`default_data`], [`default_spares`]): what the sizes
    /// above assume (a volume records its own D and S, which its
    /// [`Layout`](crate::raid::layout::Layout) uses); `None` at the other
    /// levels.
    fn declustered(&self, members: usize) -> Option<(u32, u32)> {
        if !self.level.declustered() {
            return None;
        }
        let (n, p) = (members as u32, self.parity as u32);
        let s = default_spares(n, p);
        let d = default_data(n, p, s);
        Some((d, (n.saturating_sub(s) / (d + p)).max(1)))
    }

    /// True when the level lays its data out in stripes a reshape can
    /// move (all but RAID 1, whose every member holds the whole volume:
    /// it grows by rebuilding the new members).
    pub fn has_stripes(&self) -> bool {
        self.copies != Copies::All
    }

    /// True when the level keeps redundancy (it may lose a member).
    pub fn redundant(&self) -> bool {
        self.loses != Loses::Any(0)
    }
}

impl Level {
    /// Every level, in the order the CLI lists them.
    pub const ALL: [Level; 7] = [Level::Raid0, Level::Raid1, Level::Raid10, Level::Raid5, Level::Raid6, Level::Draid5, Level::Draid6];

    /// True for the declustered levels (draid5, draid6), whose volumes
    /// record D and S and neither grow nor change level.
    #[inline]
    pub fn declustered(self) -> bool {
        matches!(self, Level::Draid5 | Level::Draid6)
    }

    /// Parses a level as the CLI takes it: a number (0, 1, 10, 5, 6, 105,
    /// 106), `raidN`, `draid5`/`draid6`, or ZFS's `draid1`/`draid2`.
    ///
    /// Errors: `InvalidInput` naming the levels uraid knows.
    pub fn parse(name: &str) -> Result<Level> {
        let n = name.trim().to_ascii_lowercase();
        match n.as_str() {
            "draid5" | "draid1" | "draid" => return Ok(Level::Draid5),
            "draid6" | "draid2" => return Ok(Level::Draid6),
            _ => {}
        }
        match n.strip_prefix("raid").unwrap_or(&n).parse::<u32>() {
            Ok(v) => Level::from_number(v),
            Err(_) => bail!(InvalidInput, "unknown RAID level '{name}'; uraid knows levels {} and draid5, draid6 (ZFS's draid1, draid2)", known_numbers()),
        }
    }

    /// This level's descriptor.
    #[inline]
    pub fn desc(self) -> &'static Descriptor {
        REGISTRY[self as usize]
    }

    /// The number md and the CLI use for this level (0, 1, 10, 5 or 6).
    pub fn number(self) -> u32 {
        self.desc().number
    }

    /// Parses the CLI / superblock number of a level.
    ///
    /// Errors: `InvalidInput` for a number that is not 0, 1, 10, 5 or 6.
    pub fn from_number(n: u32) -> Result<Level> {
        match REGISTRY.iter().find(|d| d.number == n) {
            Some(d) => Ok(d.level),
            None => bail!(InvalidInput, "unknown RAID level {n}; uraid knows levels {}, and draid5 (105) and draid6 (106)", known_numbers()),
        }
    }

    /// Fewest members: RAID 0 1, RAID 1 and 10 2, RAID 5 3, RAID 6 4.
    pub fn min_members(self) -> usize {
        self.desc().min_members
    }

    /// Members that may fail without data loss in an array of `members`
    /// (see [`Descriptor::fault_tolerance`]).
    pub fn fault_tolerance(self, members: usize) -> usize {
        self.desc().fault_tolerance(members)
    }
}

/// The md level numbers uraid knows, as a sentence: "0, 1, 10, 5 and 6"
/// (the declustered levels go by name).
pub fn known_numbers() -> String {
    let n: Vec<String> = REGISTRY.iter().filter(|d| !d.level.declustered()).map(|d| d.number.to_string()).collect();
    match n.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => n.join(""),
    }
}

impl Level {
    /// The level as messages to users name it: "RAID 5", "draid5".
    pub fn title(&self) -> String {
        if self.declustered() {
            self.to_string()
        } else {
            format!("RAID {}", self.number())
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Level::Draid5 => return write!(f, "draid5"),
            Level::Draid6 => return write!(f, "draid6"),
            _ => {}
        }
        write!(f, "raid{}", self.number())
    }
}

#[cfg(test)]
mod tests;
