//! Declustered parity's map (issue 33's `draid5`/`draid6`; ZFS dRAID's
//! layout, `module/zfs/vdev_draid.c`): where each chunk of a volume of
//! redundancy groups (D data + P parity chunks) and distributed spare
//! chunks lives on N members. Pure arithmetic, no table, no allocation.
//! The levels built on it ([`Draid5`], [`Draid6`]) are at the end.
//!
//! The layout (version [`LAYOUT_VERSION`]): each member row (`chunk` bytes
//! of every member) is a permuted order of the N members; its first
//! `G (D + P)` positions hold `G = (N - S) / (D + P)` whole groups (parity
//! first, then data; unlike dRAID a group never continues on the next
//! row, so every chunk of a stripe sits at the same member offset and the
//! stripe engine works on it as on a RAID 5/6 row), the positions up to
//! `N - S` are unused (none when D + P divides N - S), and the last S
//! positions are the row's spare chunks. A failed member's chunks are
//! rebuilt into the spare chunks of their rows, which every survivor holds
//! in turn, so a rebuild reads and writes on every survivor.
//!
//! The permutations: dRAID stores 256 seeded base permutations per member
//! count and rotates them (`(base + iteration) % N`); here a base
//! permutation is a keyed pseudo-random permutation of `0..N` computed on
//! demand (a 4-round Feistel network over the smallest even bit width that
//! holds N, walked in cycles until it lands below N; Black and Rogaway,
//! "Ciphers with arbitrary finite domains", 2002), keyed by the seed
//! of layout version 1 ([`SEED`]) and the permutation's number. Rows are
//! taken in a fixed order of (rotation, base permutation), so that over
//! one [`DraidMap::period`] of rows every member holds every position the
//! same number of times: exactly the same number of data, parity and
//! spare chunks.

use super::{Copies, Descriptor, Level, Loses, Place, Placement, Places, Redundancy, Role, Shape, StripePlaces};
use crate::{bail, Result};

/// The layout version a superblock records for a declustered volume: 1 is
/// the one described above, permuted by [`SEED`].
pub const LAYOUT_VERSION: u8 = 1;

/// The permutations' seed of layout version 1.
pub const SEED: u64 = 0x7572_6169_6433_3301;

/// Base permutations before the rotation repeats them (dRAID's `nperms`
/// for its larger maps).
pub const PERMUTATIONS: u64 = 256;

/// The most members a declustered volume may have (member numbers fit the
/// superblock's 8-bit role tables).
pub const MAX_CHILDREN: u32 = 255;

/// What one member's chunk in one row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DraidRole {
    /// A parity chunk.
    Parity {
        /// The group's number.
        group: u64,
        /// 0 = P, 1 = Q.
        which: u32,
    },
    /// A data chunk.
    Data {
        /// The group's number.
        group: u64,
        /// Data chunk number in the group (below D).
        index: u32,
    },
    /// A spare chunk of the row.
    Spare {
        /// Spare number (below S).
        which: u32,
    },
    /// Past the last whole group: holds nothing.
    Unused,
}

/// The map of one declustered volume: N members (`children`, as ZFS calls
/// them), groups of D data and P parity chunks, S members' worth of
/// distributed spare, and the seed of its permutations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraidMap {
    children: u32,
    data: u32,
    parity: u32,
    spares: u32,
    seed: u64,
    /// Rows in one cycle of the group pattern: 1 (groups never cross a
    /// row).
    cycle: u64,
    /// Feistel half width, bits.
    half: u32,
}

impl DraidMap {
    /// The map of `children` members with groups of `data` + `parity`
    /// chunks and `spares` distributed spares, permuted by `seed`.
    ///
    /// Errors: parity not 1 or 2, no data chunk, fewer members than
    /// data + parity + spares, or more than `MAX_CHILDREN`.
    pub fn new(children: u32, data: u32, parity: u32, spares: u32, seed: u64) -> Result<DraidMap> {
        if !(1..=2).contains(&parity) {
            bail!(InvalidInput, "a declustered level keeps 1 (draid5) or 2 (draid6) parity chunks per group, not {parity}");
        }
        if data == 0 {
            bail!(InvalidInput, "a declustered group needs at least one data chunk");
        }
        if children > MAX_CHILDREN {
            bail!(InvalidInput, "a declustered volume has at most {MAX_CHILDREN} members, not {children}");
        }
        let need = data as u64 + parity as u64 + spares as u64;
        if (children as u64) < need {
            bail!(
                InvalidInput,
                "{data} data + {parity} parity chunks per group and {spares} spares need at least {need} members, not {children}: \
                 give fewer --data or --spares, or more members"
            );
        }
        let cycle = 1;
        let bits = (32 - (children.max(2) - 1).leading_zeros()).max(2);
        Ok(DraidMap { children, data, parity, spares, seed, cycle, half: bits.div_ceil(2) })
    }

    /// Members (N).
    pub fn children(&self) -> u32 {
        self.children
    }

    /// Chunks per group: data + parity.
    pub fn width(&self) -> u32 {
        self.data + self.parity
    }

    /// Positions of a row that hold group chunks: N - S.
    pub fn active(&self) -> u32 {
        self.children - self.spares
    }

    /// Data chunks per group (D).
    pub fn data(&self) -> u32 {
        self.data
    }

    /// Parity chunks per group (P: 1 or 2).
    pub fn parity(&self) -> u32 {
        self.parity
    }

    /// Distributed spares (S: spare chunks per row).
    pub fn spares(&self) -> u32 {
        self.spares
    }

    /// Whole groups in one row: G = (N - S) / (D + P), at least 1.
    #[inline]
    pub fn per_row(&self) -> u32 {
        self.active() / self.width()
    }

    /// Rows after which every member has held every position equally
    /// often: `PERMUTATIONS` x N.
    pub fn period(&self) -> u64 {
        self.cycle * PERMUTATIONS * self.children as u64
    }

    /// Groups in the first `rows` rows.
    pub fn groups(&self, rows: u64) -> u64 {
        rows * self.per_row() as u64
    }

    /// (Feistel key, rotation) of `row`'s permutation.
    #[inline]
    fn key(&self, row: u64) -> (u64, u32) {
        let base = (row / self.cycle) % PERMUTATIONS;
        let rotation = (row / (self.cycle * PERMUTATIONS)) % self.children as u64;
        (mix(self.seed ^ base.wrapping_mul(0x9E37_79B9_7F4A_7C15)), rotation as u32)
    }

    /// The member at position `pos` (below N) of `row`.
    #[inline]
    pub fn child(&self, row: u64, pos: u32) -> u32 {
        debug_assert!(pos < self.children, "position {pos} of {} members", self.children);
        let (key, rotation) = self.key(row);
        let mut x = pos;
        loop {
            x = self.feistel(key, x, false);
            if x < self.children {
                break;
            }
        }
        (x + rotation) % self.children
    }

    /// The position of member `child` (below N) in `row`: the inverse of
    /// [`Self::child`].
    #[inline]
    pub fn position(&self, row: u64, child: u32) -> u32 {
        debug_assert!(child < self.children, "member {child} of {}", self.children);
        let (key, rotation) = self.key(row);
        let mut x = (child + self.children - rotation) % self.children;
        loop {
            x = self.feistel(key, x, true);
            if x < self.children {
                break;
            }
        }
        x
    }

    /// One pass of the 4-round Feistel permutation of `0 .. 2^(2 half)`
    /// (or its inverse).
    #[inline]
    fn feistel(&self, key: u64, x: u32, inverse: bool) -> u32 {
        let mask = (1u32 << self.half) - 1;
        let (mut l, mut r) = (x >> self.half, x & mask);
        let f = |round: u64, v: u32| (mix(key ^ (round << 40) ^ v as u64) as u32) & mask;
        if inverse {
            for round in (0..4).rev() {
                let prev_r = l;
                l = r ^ f(round, prev_r);
                r = prev_r;
            }
        } else {
            for round in 0..4 {
                let next = l ^ f(round, r);
                l = r;
                r = next;
            }
        }
        (l << self.half) | r
    }

    /// Where chunk `col` (below D + P: parity first, then data) of group
    /// `group` lives: (row, member).
    #[inline]
    pub fn place(&self, group: u64, col: u32) -> (u64, u32) {
        debug_assert!(col < self.width());
        let g = self.per_row() as u64;
        let row = group / g;
        (row, self.child(row, (group % g) as u32 * self.width() + col))
    }

    /// Where data chunk `chunk` of the volume (its logical chunk number)
    /// lives: (row, member).
    #[inline]
    pub fn data_place(&self, chunk: u64) -> (u64, u32) {
        let d = self.data as u64;
        self.place(chunk / d, self.parity + (chunk % d) as u32)
    }

    /// The member holding spare chunk `which` (below S) of `row`.
    #[inline]
    pub fn spare(&self, row: u64, which: u32) -> u32 {
        debug_assert!(which < self.spares);
        self.child(row, self.active() + which)
    }

    /// What `child`'s chunk in `row` holds, for a volume of `rows` rows
    /// per member.
    pub fn role(&self, rows: u64, row: u64, child: u32) -> DraidRole {
        let pos = self.position(row, child);
        if pos >= self.active() {
            return DraidRole::Spare { which: pos - self.active() };
        }
        if pos >= self.per_row() * self.width() {
            return DraidRole::Unused;
        }
        let (group, col) = (row * self.per_row() as u64 + (pos / self.width()) as u64, pos % self.width());
        if group >= self.groups(rows) {
            DraidRole::Unused
        } else if col < self.parity {
            DraidRole::Parity { group, which: col }
        } else {
            DraidRole::Data { group, index: col - self.parity }
        }
    }
}

/// draid5's descriptor: groups of D data chunks and P; it loses any one
/// member (more once a lost member is rebuilt into the spare space).
pub(super) static DRAID5: Descriptor = Descriptor {
    level: Level::Draid5,
    number: 105,
    min_members: 3,
    loses: Loses::Any(1),
    parity: 1,
    copies: Copies::One,
};

/// draid6's descriptor: groups of D data chunks, P and Q; it loses any two
/// members.
pub(super) static DRAID6: Descriptor = Descriptor {
    level: Level::Draid6,
    number: 106,
    min_members: 4,
    loses: Loses::Any(2),
    parity: 2,
    copies: Copies::One,
};

/// The default data chunks per group over `members` members with `spares`
/// distributed spares and `parity` parity chunks: the largest D from 2 to
/// 8 whose group fills the rows exactly (D + P divides N - S), else
/// `min(8, N - S - P)` (some positions of each row then stay unused).
pub fn default_data(members: u32, parity: u32, spares: u32) -> u32 {
    let active = members.saturating_sub(spares);
    let most = active.saturating_sub(parity).clamp(1, 8);
    (2..=most).rev().find(|d| active % (d + parity) == 0).unwrap_or(most)
}

/// The default distributed spares over `members` members: 1 when a group
/// of 2 data chunks and its parity still fit beside it, else 0.
pub fn default_spares(members: u32, parity: u32) -> u32 {
    u32::from(members > parity + 2)
}

/// The map of a declustered shape (set by the layout for every draid
/// volume).
#[inline]
fn map(s: &Shape) -> &DraidMap {
    s.draid.as_ref().expect("a declustered volume's shape carries its map")
}

/// Declustered placement for P parity chunks per group (`Draid5` 1,
/// `Draid6` 2): a stripe is a group, in one row (see the module docs).
pub struct Declustered<const P: u32>;

/// draid5's placement.
pub type Draid5 = Declustered<1>;
/// draid6's placement.
pub type Draid6 = Declustered<2>;

impl<const P: u32> Placement for Declustered<P> {
    #[inline]
    fn places(s: &Shape, offset: u64) -> Places {
        let (row, member) = map(s).data_place(offset / s.chunk);
        Places::one(Place { member, member_offset: row * s.chunk + offset % s.chunk })
    }

    #[inline]
    fn role(s: &Shape, member: u32, member_offset: u64) -> Role {
        let (row, within) = (member_offset / s.chunk, member_offset % s.chunk);
        match map(s).role(s.member_size / s.chunk, row, member) {
            DraidRole::Data { group, index } if group < s.stripes => {
                Role::Data((group * s.data_chunks as u64 + index as u64) * s.chunk + within)
            }
            DraidRole::Parity { group, which: 0 } if group < s.stripes => Role::P,
            DraidRole::Parity { group, .. } if group < s.stripes => Role::Q,
            _ => Role::Unused,
        }
    }

    fn redundancy(s: &Shape, stripe: u64) -> Redundancy {
        let m = map(s);
        let mut places = StripePlaces::new();
        for col in (P..m.width()).chain(0..P) {
            let (row, member) = m.place(stripe, col);
            places.push(Place { member, member_offset: row * s.chunk });
        }
        Redundancy::Parity { places, parity: P as usize }
    }

    fn stripe_at(s: &Shape, member: u32, row: u64) -> Option<u64> {
        match map(s).role(s.member_size / s.chunk, row, member) {
            DraidRole::Data { group, .. } | DraidRole::Parity { group, .. } => (group < s.stripes).then_some(group),
            DraidRole::Spare { .. } | DraidRole::Unused => None,
        }
    }

    #[inline]
    fn parity_member(s: &Shape, stripe: u64) -> Option<u32> {
        Some(map(s).place(stripe, 0).1)
    }

    #[inline]
    fn q_member(s: &Shape, stripe: u64) -> Option<u32> {
        (P == 2).then(|| map(s).place(stripe, 1).1)
    }

    #[inline]
    fn data_member(s: &Shape, stripe: u64, i: u32) -> u32 {
        map(s).place(stripe, P + i).1
    }

    #[inline]
    fn stripe_row(s: &Shape, stripe: u64) -> u64 {
        stripe / map(s).per_row() as u64
    }

    #[inline]
    fn stripes_of_rows(s: &Shape, ra: u64, rb: u64) -> std::ops::Range<u64> {
        let g = map(s).per_row() as u64;
        (ra * g).min(s.stripes)..(rb * g).min(s.stripes)
    }

    #[inline]
    fn rows_of_stripes(s: &Shape, s0: u64, s1: u64) -> std::ops::Range<u64> {
        let g = map(s).per_row() as u64;
        s0 / g..(s1 - 1) / g + 1
    }

    #[inline]
    fn stripes_per_row(s: &Shape) -> u64 {
        map(s).per_row() as u64
    }

    #[inline]
    fn stripes_in_rows(s: &Shape, rows: u64) -> u64 {
        rows * map(s).per_row() as u64
    }
}

/// SplitMix64's finalizer (Steele, Lea and Flood, "Fast splittable
/// pseudorandom number generators", 2014): a bijective 64-bit mixer.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (N, D, P, S) shapes: small and odd ones, groups that wrap rows and
    /// groups that fill them, one spare and several.
    const SHAPES: &[(u32, u32, u32, u32)] = &[
        (3, 1, 1, 1),
        (4, 2, 1, 1),
        (5, 2, 2, 1),
        (7, 4, 1, 2),
        (8, 4, 2, 2),
        (11, 8, 2, 1),
        (12, 4, 1, 2),
        (16, 8, 2, 2),
        (24, 4, 2, 4),
        (37, 8, 1, 3),
    ];

    #[test]
    fn rows_are_permutations_and_position_inverts_child() {
        for &(n, d, p, s) in SHAPES {
            let m = DraidMap::new(n, d, p, s, 0x5eed).unwrap();
            for row in (0..m.period()).step_by(97).take(500) {
                let mut seen = vec![false; n as usize];
                for pos in 0..n {
                    let c = m.child(row, pos);
                    assert!(!seen[c as usize], "N={n}: row {row} has member {c} twice");
                    seen[c as usize] = true;
                    assert_eq!(m.position(row, c), pos, "N={n} row {row}");
                }
            }
        }
    }

    /// Issue 33: every member holds the same share of data, parity and
    /// spare chunks over a permutation period (exactly), and the rows are
    /// not a mere rotation (the permutations differ).
    #[test]
    fn a_period_balances_data_parity_and_spare_on_every_member() {
        for &(n, d, p, s) in SHAPES {
            let m = DraidMap::new(n, d, p, s, 7).unwrap();
            let rows = m.period();
            let mut count = vec![[0u64; 4]; n as usize];
            for row in 0..rows {
                for c in 0..n {
                    let k = match m.role(u64::MAX / 64, row, c) {
                        DraidRole::Data { .. } => 0,
                        DraidRole::Parity { .. } => 1,
                        DraidRole::Spare { .. } => 2,
                        DraidRole::Unused => 3,
                    };
                    count[c as usize][k] += 1;
                }
            }
            assert!(count.iter().all(|x| *x == count[0]), "N={n} D={d} P={p} S={s}: {count:?}");
            assert_eq!(count[0][2] * n as u64, rows * s as u64, "N={n}: S spare chunks in every row");
            let distinct: std::collections::HashSet<Vec<u32>> =
                (0..PERMUTATIONS).map(|b| (0..n).map(|pos| m.child(b * m.cycle, pos)).collect()).collect();
            assert!(n < 7 || distinct.len() > PERMUTATIONS as usize / 2, "N={n}: {} distinct base permutations", distinct.len());
        }
    }

    /// Chunks of one group sit on distinct members, and each place's role
    /// names that group and column back.
    #[test]
    fn group_chunks_are_on_distinct_members_and_roles_agree() {
        for &(n, d, p, s) in SHAPES {
            let m = DraidMap::new(n, d, p, s, 99).unwrap();
            let rows = 4 * m.period().min(4096);
            for g in 0..m.groups(rows).min(5000) {
                let mut members = Vec::new();
                for col in 0..m.width() {
                    let (row, c) = m.place(g, col);
                    assert!(!members.contains(&c), "N={n} D={d} P={p} S={s}: group {g} has two chunks on member {c}");
                    members.push(c);
                    let want = if col < p { DraidRole::Parity { group: g, which: col } } else { DraidRole::Data { group: g, index: col - p } };
                    assert_eq!(m.role(rows, row, c), want);
                }
            }
        }
    }

    /// A failed member is rebuilt from every survivor into spare chunks on
    /// every survivor: over a period, each survivor's share of the reads
    /// and of the spare writes is within 25% of the mean.
    #[test]
    fn a_rebuild_reads_and_writes_on_every_survivor() {
        for &(n, d, p, s) in SHAPES.iter().filter(|x| x.0 >= 7) {
            let m = DraidMap::new(n, d, p, s, 3).unwrap();
            let failed = n / 2;
            let (mut reads, mut writes) = (vec![0u64; n as usize], vec![0u64; n as usize]);
            let rows = m.period();
            for g in 0..m.groups(rows) {
                let cols: Vec<(u64, u32)> = (0..m.width()).map(|c| m.place(g, c)).collect();
                let Some(&(row, _)) = cols.iter().find(|x| x.1 == failed) else { continue };
                for &(_, c) in cols.iter().filter(|x| x.1 != failed).take(d as usize) {
                    reads[c as usize] += 1;
                }
                writes[m.spare(row, 0) as usize] += 1;
            }
            for (name, v) in [("reads", &reads), ("writes", &writes)] {
                let survivors: Vec<u64> = v.iter().enumerate().filter(|x| x.0 != failed as usize).map(|x| *x.1).collect();
                let mean = survivors.iter().sum::<u64>() as f64 / survivors.len() as f64;
                let (lo, hi) = (*survivors.iter().min().unwrap() as f64, *survivors.iter().max().unwrap() as f64);
                assert!(lo >= 0.75 * mean && hi <= 1.25 * mean, "N={n} D={d} P={p} S={s}: {name} per survivor {survivors:?}");
            }
            assert_eq!(writes[failed as usize], 0);
        }
    }

    #[test]
    fn bad_shapes_are_refused_with_the_reason() {
        let e = DraidMap::new(6, 4, 2, 1, 0).unwrap_err().to_string();
        assert!(e.contains("need at least 7 members, not 6"), "{e}");
        assert!(DraidMap::new(8, 4, 3, 1, 0).unwrap_err().to_string().contains("1 (draid5) or 2 (draid6)"));
        assert!(DraidMap::new(8, 0, 1, 1, 0).is_err());
        assert!(DraidMap::new(256, 8, 2, 1, 0).is_err());
        assert!(DraidMap::new(255, 8, 2, 1, 0).is_ok());
    }
}
