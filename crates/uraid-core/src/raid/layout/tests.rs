use super::*;
use crate::ErrorKind;
use proptest::prelude::*;
use std::collections::BTreeSet;

use RedundantLevel::*;

const CHUNKS: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];

/// Every (level, members) from the level's minimum to 8.
fn configs() -> impl Iterator<Item = (RedundantLevel, usize)> {
    RedundantLevel::ALL.into_iter().filter(|l| !l.level().declustered()).flat_map(|l| (l.min_members()..=8).map(move |n| (l, n)))
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
                Draid5 | Draid6 => unreachable!("configs() has no declustered level"),
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

/// The parity-last variant (md's takeover layouts): every byte maps to
/// distinct places and back, P, Q and the data chunks of a stripe are on
/// distinct members; RAID 5 keeps data chunk `i` on member `i` and P on
/// the last (RAID 0 over the others, plus P); RAID 6 keeps Q on the last
/// and everything else where RAID 5 left-symmetric over the others does.
#[test]
fn the_parity_last_variant_keeps_the_data_where_the_level_below_had_it() {
    for level in [Raid5, Raid6] {
        for n in level.min_members()..=8 {
            let chunk = 4096;
            let l = Layout::new(level, n, chunk, rows_for(n) * chunk).unwrap().with_variant(Variant::ParityLast).unwrap();
            assert_eq!(l.variant(), Variant::ParityLast);
            check_mapping(&l, &[0, 1, 511, chunk - 1]);
            for s in 0..rows_for(n) {
                let mut used: BTreeSet<u32> = (0..l.data_chunks()).map(|i| l.data_member(s, i)).collect();
                used.insert(l.parity_member(s));
                used.extend(l.q_member(s));
                assert_eq!(used.len(), n, "{l:?} stripe {s}: P, Q and data share a member");
                assert_eq!(l.role(l.parity_member(s), s * chunk), Role::P);
                match level {
                    Raid5 => {
                        assert_eq!(l.parity_member(s), n as u32 - 1);
                        assert!((0..l.data_chunks()).all(|i| l.data_member(s, i) == i));
                    }
                    _ => {
                        assert_eq!(l.q_member(s), Some(n as u32 - 1));
                        assert_eq!(l.role(n as u32 - 1, s * chunk), Role::Q);
                        let below = Layout::new(Raid5, n - 1, chunk, rows_for(n) * chunk).unwrap();
                        assert_eq!(l.parity_member(s), below.parity_member(s), "stripe {s}");
                        assert!((0..l.data_chunks()).all(|i| l.data_member(s, i) == below.data_member(s, i)), "stripe {s}");
                    }
                }
            }
        }
    }
    assert!(Layout::new(Raid10, 4, 4096, 1 << 20).unwrap().with_variant(Variant::ParityLast).is_err());
}

/// Issue 33: the declustered layouts map every byte to one place and
/// back (groups sharing a row, or leaving part of it unused); each
/// stripe's chunks lie in its one row (`stripe_offset`) on distinct
/// members, data in order then P (and Q); the row and stripe ranges
/// agree.
#[test]
fn declustered_layouts_map_every_byte_and_keep_groups_in_one_row() {
    let shapes = [(Draid5, 3, 2, 0), (Draid5, 8, 4, 1), (Draid5, 12, 4, 2), (Draid6, 8, 3, 1), (Draid6, 14, 4, 2), (Draid6, 32, 8, 2)];
    for (level, n, d, s) in shapes {
        let chunk = 4096;
        let rows = 41;
        let l = Layout::new(level, n, chunk, rows * chunk).unwrap().with_draid(d, s).unwrap();
        let m = *l.draid().unwrap();
        let g = ((n as u32 - s) / (d + m.parity())) as u64;
        assert_eq!(l.stripes(), rows * g, "{level} {n} {d}+{s}");
        assert_eq!(l.capacity(), rows * g * d as u64 * chunk);
        check_mapping(&l, &[0, 1, chunk - 1]);
        for stripe in 0..l.stripes() {
            let off = l.stripe_offset(stripe);
            assert_eq!(off / chunk, stripe / g);
            assert!(l.stripes_of_rows(off / chunk, off / chunk + 1).contains(&stripe));
            assert_eq!(l.rows_of_stripes(stripe, stripe + 1), off / chunk..off / chunk + 1);
            let mut all: BTreeSet<u32> = BTreeSet::new();
            for i in 0..d {
                let dm = l.data_member(stripe, i);
                assert_eq!(l.role(dm, off), Role::Data(stripe * l.stripe_data_width() + i as u64 * chunk), "{level} {n}: stripe {stripe} data {i}");
                all.insert(dm);
            }
            assert_eq!(l.role(l.parity_member(stripe), off), Role::P);
            all.insert(l.parity_member(stripe));
            if let Some(q) = l.q_member(stripe) {
                assert_eq!(l.role(q, off), Role::Q);
                all.insert(q);
            }
            assert_eq!(all.len() as u32, d + m.parity(), "{level} {n}: stripe {stripe} has two chunks on one member");
        }
    }
    let e = Layout::new(Draid5, 6, 4096, 1 << 20).unwrap().with_draid(5, 1).unwrap_err();
    assert!(e.to_string().contains("need at least 7 members, not 6"), "{e}");
    assert!(Layout::new(Raid5, 6, 4096, 1 << 20).unwrap().with_draid(4, 1).is_err());
}

/// A discard of stripes `[s0, s1)` may have the live-data map forget the
/// rows `rows_only_of_stripes` gives: no stripe outside has a chunk there
/// (RAID 10 with an odd member count: its straddling rows are left out;
/// declustered rows of two groups: a row half outside is left out), and
/// on the declustered levels every row whose groups are all inside is in.
#[test]
fn rows_only_of_stripes_hold_no_stripe_outside() {
    let layouts = [
        Layout::new(Raid1, 2, 4096, 64 * 4096).unwrap(),
        Layout::new(Raid10, 3, 4096, 64 * 4096).unwrap(),
        Layout::new(Raid10, 4, 4096, 64 * 4096).unwrap(),
        Layout::new(Raid5, 4, 4096, 64 * 4096).unwrap(),
        Layout::new(Raid6, 5, 4096, 64 * 4096).unwrap(),
        Layout::new(Draid5, 8, 4096, 64 * 4096).unwrap().with_draid(4, 1).unwrap(),
        Layout::new(Draid5, 8, 4096, 64 * 4096).unwrap().with_draid(2, 1).unwrap(),
        Layout::new(Draid6, 13, 4096, 64 * 4096).unwrap().with_draid(2, 1).unwrap(),
    ];
    for l in layouts {
        let stripes = l.stripes().min(40);
        for s0 in 0..stripes {
            for s1 in s0 + 1..=stripes {
                let rows = l.rows_only_of_stripes(s0, s1);
                for r in rows.clone() {
                    let held = l.stripes_of_rows(r, r + 1);
                    assert!(s0 <= held.start && held.end <= s1, "{} x{}: stripes {s0}..{s1}: row {r} holds {held:?}", l.level(), l.members());
                }
                if l.draid().is_some() {
                    let whole = (0..l.member_chunks()).filter(|&r| {
                        let held = l.stripes_of_rows(r, r + 1);
                        s0 <= held.start && held.end <= s1
                    });
                    assert_eq!(whole.collect::<Vec<_>>(), rows.collect::<Vec<_>>(), "{} x{}: stripes {s0}..{s1}", l.level(), l.members());
                }
            }
        }
    }
}
