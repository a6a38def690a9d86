//! The survival rule against a brute-force reference: every level, every
//! member count from its minimum to 7, 1 to 3 rows per member, every set
//! of lost members; and the registry's consistency.

use super::*;
use crate::raid::geometry::Geometry;
use crate::raid::layout::{RedundantLevel, Role};

const CHUNK: u64 = 4096;

/// True when every logical chunk of `g` can still be read with the
/// members in `lost` gone: from a copy on a member left, or rebuilt from
/// its stripe's row when no more of the row's chunks are lost than the row
/// holds P and Q chunks. Looks at the layout only, not at the descriptors.
fn recoverable(g: &Geometry, lost: MemberMask) -> bool {
    let gone = |m: u32| lost & 1 << m != 0;
    let Some(l) = g.layout() else {
        return (0..g.capacity() / CHUNK).all(|c| !gone(g.locate(c * CHUNK).0));
    };
    (0..l.capacity() / CHUNK).all(|c| {
        let places = l.data_locations(c * CHUNK);
        if places.iter().any(|p| !gone(p.member)) {
            return true;
        }
        let row = places.first().member_offset / CHUNK * CHUNK;
        let roles: Vec<Role> = (0..l.members() as u32).map(|m| l.role(m, row)).collect();
        let parity = roles.iter().filter(|r| matches!(r, Role::P | Role::Q)).count();
        let erased = (0..l.members() as u32).filter(|&m| gone(m) && roles[m as usize] != Role::Unused).count();
        erased <= parity
    })
}

#[test]
fn survival_matches_brute_force_for_every_level_count_and_lost_set() {
    let mut cases = 0;
    // A declustered volume of a few rows may leave a member holding only
    // spare chunks, so it survives more than its rule (any P members)
    // says; the rule is what holds once the rows cover the permutations.
    for level in Level::ALL.into_iter().filter(|l| !l.declustered()) {
        for n in level.min_members()..=7 {
            for rows in 1..=3u64 {
                let g = Geometry::new(level, n, CHUNK, rows * CHUNK).unwrap();
                let ok: Vec<bool> = (0..1u64 << n).map(|lost| recoverable(&g, lost)).collect();
                for lost in 0..1u64 << n {
                    // The fewest more members whose loss loses data.
                    let fewest = (0..1u64 << n)
                        .filter(|s| s & lost == 0 && !ok[(s | lost) as usize])
                        .map(|s| s.count_ones() as usize)
                        .min()
                        .expect("losing every member loses the data");
                    let want = Survival { survives: ok[lost as usize], more: fewest.saturating_sub(1) };
                    let got = g.survival(lost);
                    assert_eq!(got, want, "{level} over {n} members, {rows} rows, lost {lost:#b}");
                    if let Some(l) = g.layout() {
                        assert_eq!(l.survival(lost), want, "{level} layout over {n} members, {rows} rows, lost {lost:#b}");
                    }
                    cases += 1;
                }
                // Any size: the tolerance, whichever members.
                let tol = level.fault_tolerance(n);
                if rows >= 2 {
                    assert_eq!(g.survival(0).more, tol, "{level} over {n} members");
                }
                for lost in (0..1u64 << n).filter(|l| l.count_ones() as usize <= tol) {
                    assert!(ok[lost as usize], "{level} over {n} members: tolerance {tol} but {lost:#b} loses data");
                }
            }
        }
    }
    eprintln!("{cases} cases");
}

/// The two RAID 10 rules the code had (the engine's and the array's)
/// disagree when a member holds a single row and the member count is odd:
/// the last slot is unused, so two members can be neighbours that share no
/// chunk. The engine's rule ("some chunk `c` below `n` has both members
/// `2c mod n` and `2c+1 mod n` lost") said such a volume had failed; the
/// data says otherwise (chunk 0, on members 0 and 1, is the only chunk).
#[test]
fn raid10_neighbours_that_share_no_chunk_do_not_fail_the_volume() {
    let engine_rule = |n: u64, lost: MemberMask| (0..n).any(|c| lost & 1 << (2 * c % n) != 0 && lost & 1 << ((2 * c + 1) % n) != 0);
    let g = Geometry::new(Level::Raid10, 3, CHUNK, CHUNK).unwrap();
    let lost = 0b101;
    assert!(recoverable(&g, lost));
    assert!(engine_rule(3, lost), "the old engine rule called it failed");
    assert!(g.survival(lost).survives);
    // Two rows: members 2 and 0 hold chunk 1, both rules fail it.
    let g2 = Geometry::new(Level::Raid10, 3, CHUNK, 2 * CHUNK).unwrap();
    assert!(!recoverable(&g2, lost) && engine_rule(3, lost) && !g2.survival(lost).survives);
}

/// The same, through the engine: a write and a read of the one chunk of a
/// 3-member RAID 10 of one row with members 0 and 2 faulty succeed (the
/// engine refused the write with EIO before the rule was shared).
#[test]
fn raid10_engine_writes_with_lost_neighbours_that_share_no_chunk() {
    use crate::io::member::{Member, MemberSpec, OpenMode};
    use crate::raid::engine::RaidVolume;
    use crate::raid::health::MemberState;
    use crate::raid::DATA_OFFSET;
    // The drive is larger than the one row the geometry uses.
    let spec: MemberSpec = "mem:2M".parse().unwrap();
    let members: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
    let g = Geometry::new(Level::Raid10, 3, CHUNK, CHUNK).unwrap();
    assert_eq!(g.capacity(), CHUNK);
    let v = RaidVolume::new(std::sync::Arc::new(members), g, DATA_OFFSET).unwrap();
    v.health().set_state(0, MemberState::Faulty);
    v.health().set_state(2, MemberState::Faulty);
    let data: Vec<u8> = (0..CHUNK).map(|i| (i * 7 % 251) as u8).collect();
    v.write_at(0, &data).expect("the chunk's copy on member 1 is left");
    assert_eq!(v.read_at(0, CHUNK as usize).unwrap(), data);
    assert!(!v.health().writes_stopped());
}

#[test]
fn registry_is_indexed_by_level_and_numbers_round_trip() {
    assert_eq!(REGISTRY.len(), Level::ALL.len());
    for (i, d) in REGISTRY.iter().enumerate() {
        assert_eq!(d.level as usize, i, "REGISTRY[{i}] is {:?}", d.level);
        assert_eq!(Level::ALL[i], d.level);
        assert_eq!(Level::from_number(d.number).unwrap(), d.level);
        assert!(d.min_members >= 1 && d.parity < d.min_members);
        assert_eq!(d.level.redundant().map(RedundantLevel::level), d.redundant().then_some(d.level));
    }
    for r in RedundantLevel::ALL {
        assert_eq!(r.level().redundant(), Some(r));
        assert_eq!(RedundantLevel::from_number(r.number()).unwrap(), r);
    }
    assert_eq!(known_numbers(), "0, 1, 10, 5 and 6");
    assert!(RedundantLevel::from_number(0).unwrap_err().to_string().contains("RAID 0 has no redundancy"));
    assert!(Level::from_number(4).unwrap_err().to_string().contains("uraid knows levels 0, 1, 10, 5 and 6"));
}

/// The descriptors' sizes against the layouts: the logical chunks a
/// number of rows holds, its inverse (the rows `create` gives a volume of
/// a size), and the fewest rows that hold whole chunks (a reshape's unit).
#[test]
fn sizes_agree_with_the_layouts() {
    for level in Level::ALL {
        let d = level.desc();
        for n in d.min_members..=9 {
            for rows in 1..=7u64 {
                let g = Geometry::new(level, n, CHUNK, rows * CHUNK).unwrap();
                let chunks = d.chunks(n, rows);
                assert_eq!(chunks * CHUNK, g.capacity(), "{level} over {n} members, {rows} rows");
                let need = d.rows_for(n, chunks).unwrap();
                assert!(need <= rows && d.chunks(n, need) >= chunks, "{level} over {n}: {chunks} chunks in {need} rows");
                assert!(need == 0 || d.chunks(n, need - 1) < chunks, "{level} over {n}: {need} rows is not the fewest");
                if let Some(l) = g.layout().filter(|_| !level.declustered()) {
                    assert_eq!(l.data_chunks() as usize, d.data_chunks(n));
                    let used = (0..n as u32).map(|m| (0..rows).filter(|&r| l.role(m, r * CHUNK) != Role::Unused).count()).sum::<usize>();
                    assert_eq!(used as u64 == rows * n as u64, rows % d.unit_rows(n) == 0, "{level} over {n}, {rows} rows: {used} slots used");
                }
            }
            assert!(d.unit_rows(n) >= 1);
        }
    }
}

/// Member images of `l` (one `Vec` per member, `rows` rows) holding
/// seeded logical data where [`Layout::role`] puts it, and P and Q of
/// each row computed from the row's data chunks in data-index order:
/// built from the roles alone, not from the redundancy under test.
fn images(l: &crate::raid::layout::Layout, rows: u64, seed: u64) -> Vec<Vec<u8>> {
    let c = CHUNK as usize;
    let byte = |lo: u64| ((lo.wrapping_mul(0x9e37_79b9) >> 7) ^ seed) as u8;
    let n = l.members();
    let mut img = vec![vec![0u8; rows as usize * c]; n];
    for r in 0..rows {
        let mut data: Vec<(u64, Vec<u8>)> = Vec::new();
        for m in 0..n {
            if let Role::Data(lo) = l.role(m as u32, r * CHUNK) {
                let chunk: Vec<u8> = (0..CHUNK).map(|i| byte(lo + i)).collect();
                img[m][r as usize * c..][..c].copy_from_slice(&chunk);
                data.push((lo, chunk));
            }
        }
        if !l.level().has_parity() {
            continue;
        }
        data.sort_by_key(|d| d.0);
        let refs: Vec<&[u8]> = data.iter().map(|d| &d.1[..]).collect();
        let (mut p, mut q) = (vec![0u8; c], vec![0u8; c]);
        crate::raid::parity::gen_pq(&refs, &mut p, &mut q);
        for m in 0..n {
            match l.role(m as u32, r * CHUNK) {
                Role::P => img[m][r as usize * c..][..c].copy_from_slice(&p),
                Role::Q => img[m][r as usize * c..][..c].copy_from_slice(&q),
                _ => {}
            }
        }
    }
    img
}

/// Every level's recovery steps ([`Placement::recover`], from its
/// [`Placement::redundancy`] and [`Placement::stripe_at`]) give back every
/// chunk of every lost member on a few rows, for every member count from
/// the minimum to 7 and both parity variants: a copy names the lost place
/// and other places holding the same bytes; a parity stripe names the lost
/// chunk among its places, and the parity arithmetic over the others
/// (also with a second one lost, for two parity chunks) gives it back; a
/// chunk that holds nothing is to be zeroed; RAID 0 loses it.
#[test]
fn every_level_recovers_every_lost_chunk() {
    use crate::raid::parity;
    let c = CHUNK as usize;
    let mut cases = 0;
    for level in Level::ALL {
        for n in level.min_members()..=7 {
            for rows in 1..=3u64 {
                for variant in [Variant::Standard, Variant::ParityLast] {
                    let Ok(g) = Geometry::new(level, n, CHUNK, rows * CHUNK).unwrap().with_variant(variant) else { continue };
                    let Some(l) = g.layout() else {
                        let s = Shape { members: n as u32, chunk: CHUNK, member_size: rows * CHUNK, variant, data_chunks: n as u32, stripes: rows, draid: None };
                        assert!((0..n as u32).all(|m| Raid0::recover(&s, m, 0) == Recover::Lost), "RAID 0 over {n}");
                        continue;
                    };
                    let img = images(l, rows, n as u64 * 31 + rows);
                    let chunk_of = |p: Place| &img[p.member as usize][p.member_offset as usize..][..c];
                    for t in 0..n as u32 {
                        for r in 0..rows {
                            let what = format!("{level} ({variant:?}) over {n} members, {rows} rows: member {t} row {r}");
                            let here = Place { member: t, member_offset: r * CHUNK };
                            let want = chunk_of(here);
                            match l.recover(t, r) {
                                Recover::Zero => {
                                    assert_eq!(l.role(t, r * CHUNK), Role::Unused, "{what}");
                                }
                                Recover::Copy { from, lost } => {
                                    assert_eq!(lost, here, "{what}");
                                    let others: Vec<Place> = from.iter().filter(|&p| p != lost).collect();
                                    assert!(!others.is_empty(), "{what}: no other copy");
                                    for p in others {
                                        assert_ne!(p.member, t, "{what}: a copy on the lost member");
                                        assert!(chunk_of(p) == want, "{what}: copy {p:?} holds other bytes");
                                    }
                                }
                                Recover::Parity { places, parity, index } => {
                                    assert_eq!(places.as_slice()[index], here, "{what}");
                                    assert_eq!(parity, l.level().parity_chunks(), "{what}");
                                    let width = l.draid().map_or(n, |m| m.width() as usize);
                                    assert_eq!(places.len(), width, "{what}: a stripe is a row (a group for the declustered levels)");
                                    // The lost chunk alone, then with each other one.
                                    let seconds = (parity == 2).then_some(0..places.len()).into_iter().flatten().filter(|&j| j != index);
                                    for second in std::iter::once(None).chain(seconds.map(Some)) {
                                        let mut bufs: Vec<Vec<u8>> = places.iter().map(|p| chunk_of(p).to_vec()).collect();
                                        let lost: Vec<usize> = std::iter::once(index).chain(second).collect();
                                        for &i in &lost {
                                            bufs[i].fill(0xa5);
                                        }
                                        let mut stripe: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                                        match parity {
                                            1 => parity::recover_raid5(&mut stripe, index),
                                            _ => parity::recover_raid6(&mut stripe, &lost),
                                        }
                                        assert!(bufs[index][..] == *want, "{what}: recomputed wrong with {lost:?} lost");
                                        if let Some(j) = second {
                                            assert!(bufs[j][..] == *chunk_of(places.as_slice()[j]), "{what}: second lost {j} recomputed wrong");
                                        }
                                    }
                                }
                                Recover::Lost => panic!("{what}: a redundant level loses a chunk"),
                            }
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{cases} lost chunks recovered");
}
