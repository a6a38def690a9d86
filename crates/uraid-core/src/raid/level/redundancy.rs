//! How a level keeps a stripe's data recoverable, in the terms that
//! maintenance (rebuild, check, repair, resync in
//! [`crate::control::maint`]) works on without knowing the level: a
//! stripe's chunks as places on members, and whether they are copies of
//! one another or data chunks with their parity. Each level's
//! [`Placement`](super::Placement) says it
//! ([`redundancy`](super::Placement::redundancy), and which stripe a
//! member's chunk belongs to: [`stripe_at`](super::Placement::stripe_at));
//! [`Placement::recover`](super::Placement::recover) turns that into the
//! steps that find a lost chunk again ([`Recover`]). Pure values, no I/O,
//! no allocation.

use super::{Place, Placement, Places, Shape};
use crate::raid::chunk::MAX_MEMBERS;

/// The places of one stripe's chunks, in the order its parity is computed
/// over: data chunks `0 .. data`, then P, then Q (the data index is the
/// chunk's index in Q's syndrome). Each place is the start of a
/// chunk-sized range; the members are distinct. A `Copy` value of at most
/// [`MAX_MEMBERS`] places, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripePlaces {
    len: u8,
    list: [Place; MAX_MEMBERS],
}

impl StripePlaces {
    /// No place yet.
    #[inline]
    pub(crate) fn new() -> StripePlaces {
        StripePlaces { len: 0, list: [Place { member: 0, member_offset: 0 }; MAX_MEMBERS] }
    }

    /// Appends `p`. Panics past [`MAX_MEMBERS`] places (a level's bug).
    #[inline]
    pub(crate) fn push(&mut self, p: Place) {
        assert!((self.len as usize) < MAX_MEMBERS, "a stripe of more than {MAX_MEMBERS} chunks");
        debug_assert!(self.iter().all(|q| q.member != p.member), "member {} twice in a stripe", p.member);
        self.list[self.len as usize] = p;
        self.len += 1;
    }

    /// The places, in stripe order.
    #[inline]
    pub fn as_slice(&self) -> &[Place] {
        &self.list[..self.len as usize]
    }

    /// The places, in stripe order.
    pub fn iter(&self) -> impl Iterator<Item = Place> + '_ {
        self.as_slice().iter().copied()
    }

    /// Number of chunks in the stripe.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the stripe has no chunk (never, for a level's stripe).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// How a level keeps one stripe: what [`Placement::redundancy`] answers
/// for a stripe, and what every maintenance step is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redundancy {
    /// Nothing protects the stripe's data: a lost chunk is lost (RAID 0).
    None,
    /// Every place holds the same chunk of logical data (RAID 1: every
    /// member; RAID 10: the two near copies). A lost copy is copied from
    /// any other readable one; a check compares them with the first
    /// readable one; a repair copies that one over the others.
    Copies(Places),
    /// Data chunks and their parity: `places` lists the data chunks, then
    /// `parity` parity chunks (1: P, the XOR of the data, RAID 5; 2: P and
    /// the Reed-Solomon syndrome Q, RAID 6). Up to `parity` lost chunks are
    /// recomputed from the others; a check recomputes P (and Q) from the
    /// data and compares; a repair rewrites P (and Q).
    Parity {
        /// The stripe's chunks: data `0 ..`, then P, then Q.
        places: StripePlaces,
        /// Parity chunks at the end of `places`: 1 or 2.
        parity: usize,
    },
}

/// The steps that find a member's lost chunk again (see
/// [`Redundancy::recover`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recover {
    /// The chunk holds nothing (RAID 10's unused last slot): write zeros.
    Zero,
    /// Copy it from any readable place of `from` (the other copies, the
    /// lost one left out).
    Copy {
        /// The other copies, first choice first.
        from: Places,
        /// The lost place, to skip in `from` (which may list it).
        lost: Place,
    },
    /// Recompute it from the rest of its stripe: chunk `index` of
    /// `places` (data, P, Q order), with `parity` parity chunks.
    Parity {
        /// The stripe's chunks: data `0 ..`, then P, then Q.
        places: StripePlaces,
        /// Parity chunks at the end of `places`.
        parity: usize,
        /// Which of `places` is the lost chunk.
        index: usize,
    },
    /// The level keeps no redundancy: the chunk cannot be found again.
    Lost,
}

impl Redundancy {
    /// How chunk `lost` (a place of this stripe, as
    /// [`Placement::stripe_at`] found it) is found again. A place that is
    /// not one of the stripe's chunks is a level's bug: `Lost` in release
    /// builds, a panic in debug builds.
    pub fn recover(&self, lost: Place) -> Recover {
        match *self {
            Redundancy::None => Recover::Lost,
            Redundancy::Copies(from) => {
                debug_assert!(from.iter().any(|p| p == lost), "{lost:?} is not a copy of its stripe {from:?}");
                Recover::Copy { from, lost }
            }
            Redundancy::Parity { places, parity } => match places.iter().position(|p| p == lost) {
                Some(index) => Recover::Parity { places, parity, index },
                None => {
                    debug_assert!(false, "{lost:?} is not a chunk of its stripe {places:?}");
                    Recover::Lost
                }
            },
        }
    }
}

/// [`Placement::redundancy`] for a level whose stripes are rows of data
/// chunks with their P (and Q) (RAID 5 and 6): stripe `stripe` is member
/// row `stripe`, the data chunks on `L`'s data members, then P and Q.
#[inline]
pub(crate) fn row_redundancy<L: Placement>(s: &Shape, stripe: u64) -> Redundancy {
    let at = |member| Place { member, member_offset: stripe * s.chunk };
    let mut places = StripePlaces::new();
    for i in 0..s.data_chunks {
        places.push(at(L::data_member(s, stripe, i)));
    }
    let mut parity = 0;
    for m in [L::parity_member(s, stripe), L::q_member(s, stripe)].into_iter().flatten() {
        places.push(at(m));
        parity += 1;
    }
    Redundancy::Parity { places, parity }
}
