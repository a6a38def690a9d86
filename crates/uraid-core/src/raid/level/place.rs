//! Where a level puts a byte, in the terms every level shares: a place on
//! a member ([`Place`], [`Places`]), what a member's chunk holds
//! ([`Role`]), where parity goes ([`Variant`]), and the dimensions a
//! level's placement works on ([`Shape`]). Pure values, no I/O; each
//! level's file computes them ([`Placement`](super::Placement)).

/// One place on one member: a member and a byte offset in its data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// Member index (0-based, the member's role in the array).
    pub member: u32,
    /// Byte offset in the member's data area.
    pub member_offset: u64,
}

/// Every place that holds one logical byte (or the first byte of a
/// [`Piece`](crate::raid::layout::Piece)): all members for RAID 1, 2 for RAID 10, 1 for RAID 5 and 6.
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
    /// The one place of a byte kept once (RAID 0, 5, 6).
    #[inline]
    pub(crate) fn one(p: Place) -> Places {
        Places { repr: PlacesRepr::Listed { len: 1, list: [p, p] } }
    }

    /// Two copies on distinct members (RAID 10), first copy first.
    #[inline]
    pub(crate) fn two(a: Place, b: Place) -> Places {
        debug_assert_ne!(a.member, b.member, "two copies of a byte on one member");
        Places { repr: PlacesRepr::Listed { len: 2, list: [a, b] } }
    }

    /// Every member `0 .. members` at `member_offset` (RAID 1).
    #[inline]
    pub(crate) fn every(members: u32, member_offset: u64) -> Places {
        Places { repr: PlacesRepr::Every { members, member_offset } }
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

/// What a chunk of a member holds (see
/// [`Layout::role`](crate::raid::layout::Layout::role)).
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

/// Where a RAID 5 or 6 stripe keeps its parity (see
/// [`layout`](crate::raid::layout)'s documentation). Part of the on-disk format (a volume entry's byte 74).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Variant {
    /// md's left-symmetric: P (and Q) rotate over every member.
    #[default]
    Standard,
    /// RAID 5: P on the last member; RAID 6: Q on the last member, P
    /// left-symmetric over the others.
    ParityLast,
}

impl Variant {
    /// The on-disk number (0 standard, 1 parity-last).
    pub fn to_u8(self) -> u8 {
        match self {
            Variant::Standard => 0,
            Variant::ParityLast => 1,
        }
    }
    /// From the on-disk number; `None` for an unknown one.
    pub fn from_u8(v: u8) -> Option<Variant> {
        match v {
            0 => Some(Variant::Standard),
            1 => Some(Variant::ParityLast),
            _ => None,
        }
    }
}


/// The dimensions of one volume that a level's placement works on: the
/// member count, the chunk, the data area per member, the parity variant,
/// and what the level makes of them (data chunks per stripe, stripes).
/// A small `Copy` value that a [`Layout`](crate::raid::layout::Layout)
/// (or a RAID 0 [`Geometry`](crate::raid::geometry::Geometry)) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Number of members (1 to [`MAX_MEMBERS`](crate::raid::chunk::MAX_MEMBERS)).
    pub members: u32,
    /// Chunk (stripe unit), bytes.
    pub chunk: u64,
    /// Bytes of data area used on each member (whole chunks when striped).
    pub member_size: u64,
    /// Where RAID 5 and 6 keep parity ([`Variant::Standard`] elsewhere).
    pub variant: Variant,
    /// Data chunks per stripe ([`Descriptor::data_chunks`](super::Descriptor::data_chunks)).
    pub data_chunks: u32,
    /// Stripes of the volume (see [`layout`](crate::raid::layout): RAID 5
    /// and 6 rows, RAID 1 and 10 logical chunks, RAID 0 rows, the
    /// declustered levels' groups).
    pub stripes: u64,
    /// The declustered levels' map (D, P, S and the permutations); `None`
    /// at every other level.
    pub draid: Option<super::DraidMap>,
}
