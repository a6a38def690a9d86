//! Tests of the live-data map: first writes zero dead regions on every
//! member before their bits, reads of the map, whole-region discards
//! forgotten only when no write came since, hostile bitmap bytes.

use super::*;
use crate::io::member::{MemSpec, MemberSpec, OpenMode};
use std::os::unix::fs::FileExt;

const RW: OpenMode = OpenMode { write: true, exclusive: false };
const R64K: u64 = 64 << 10;

fn mems(n: usize, size: u64) -> (Arc<Vec<Member>>, Arc<Health>) {
    let m = |_| Member::open(&MemberSpec::Mem(MemSpec { size, limits: Default::default() }), RW).unwrap();
    (Arc::new((0..n).map(m).collect()), Arc::new(Health::new(n)))
}

fn reg(r: u64) -> u64 {
    DATA_OFFSET + r * R64K
}

/// Fills member bytes `[at, at+len)` of every member with `byte`.
fn fill(ms: &[Member], at: u64, len: usize, byte: u8) {
    for m in ms {
        m.file().write_all_at(&vec![byte; len], at).unwrap();
    }
}

fn read(m: &Member, at: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    m.file().read_exact_at(&mut v, at).unwrap();
    v
}

#[test]
fn first_write_zeroes_the_dead_region_on_every_member_then_marks_it() {
    let (ms, h) = mems(3, 8 << 20);
    let end = DATA_OFFSET + (4 << 20);
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap().with_live_map(true);
    // Garbage where no data is (a rebuild left it, or create did not zero).
    fill(&ms, reg(2), 3 * R64K as usize, 0xAB);
    assert!(!b.live(reg(2)) && !b.live(reg(3)) && b.live(DATA_OFFSET - 1) && b.live(end));
    assert_eq!(b.live_bytes(reg(0), end), 0);
    b.start_write(reg(3) + 4096, 4096).unwrap();
    b.end_write(reg(3) + 4096, 4096);
    assert!(b.live(reg(3)) && b.live(reg(4) - 1) && !b.live(reg(2)) && !b.live(reg(4)));
    for m in ms.iter() {
        assert!(read(m, reg(3), R64K as usize).iter().all(|&x| x == 0), "region 3 zeroed on {}", m.name());
        assert!(read(m, reg(2), R64K as usize).iter().all(|&x| x == 0xAB), "region 2 untouched on {}", m.name());
    }
    assert_eq!(b.stats().zeroed_bytes, R64K, "one region zeroed (bytes per member)");
    assert_eq!(b.live_bytes(reg(0), end), R64K);
    assert_eq!(b.live_bytes(reg(3) + 100, reg(3) + 200), 100);
    // A live region is never zeroed again.
    fill(&ms, reg(3), 4096, 0xCD);
    b.start_write(reg(3), 4096).unwrap();
    b.end_write(reg(3), 4096);
    assert_eq!(read(&ms[0], reg(3), 4096), vec![0xCD; 4096]);
    // The map survives a reload.
    let l = Bitmap::load(ms.clone(), h.clone(), R64K, end).unwrap().with_live_map(true);
    assert!(l.live(reg(3)) && !l.live(reg(2)));
    // Without the map nothing is zeroed and every region is live.
    let old = Bitmap::create(ms.clone(), h, R64K, end).unwrap();
    fill(&ms, reg(5), 4096, 0xEE);
    assert!(old.live(reg(5)));
    old.start_write(reg(5), 4096).unwrap();
    assert_eq!(read(&ms[1], reg(5), 4096), vec![0xEE; 4096]);
}

#[test]
fn a_failed_member_is_not_zeroed_and_a_cleared_dirty_bit_keeps_the_region_live() {
    let (ms, h) = mems(3, 8 << 20);
    let end = DATA_OFFSET + (4 << 20);
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap().with_live_map(true);
    h.set_state(2, crate::raid::health::MemberState::Faulty);
    fill(&ms, reg(1), 4096, 0x11);
    b.start_write(reg(1), 4096).unwrap();
    b.end_write(reg(1), 4096);
    assert_eq!(read(&ms[0], reg(1), 4096), vec![0; 4096]);
    assert_eq!(read(&ms[2], reg(1), 4096), vec![0x11; 4096]);
    h.set_state(2, crate::raid::health::MemberState::Active);
    b.clear_idle().unwrap();
    assert_eq!(b.clear_idle().unwrap(), 1);
    assert!(b.dirty().is_empty() && b.live(reg(1)), "clearing the dirty bit keeps the data live");
}

#[test]
fn a_whole_region_discard_is_forgotten_unless_a_write_came_since() {
    let (ms, h) = mems(2, 8 << 20);
    let end = DATA_OFFSET + (4 << 20);
    let b = Bitmap::create(ms.clone(), h, R64K, end).unwrap().with_live_map(true);
    for r in [1, 2, 3] {
        b.start_write(reg(r), 4096).unwrap();
        b.end_write(reg(r), 4096);
    }
    // A discard of regions 1..3 whole (and half of region 3: not whole).
    b.discarding(reg(1), reg(3) + R64K / 2);
    // Its own zeroing pieces do not take the regions back.
    b.start_mark(reg(1), R64K, true).unwrap();
    b.end_write(reg(1), R64K);
    // A write to region 2 after the discard started does.
    b.start_write(reg(2) + 8192, 4096).unwrap();
    b.end_write(reg(2) + 8192, 4096);
    // Idle twice (the first pass sees the writes as recent).
    b.clear_idle().unwrap();
    b.clear_idle().unwrap();
    assert!(!b.live(reg(1)), "discarded whole, no write since: forgotten");
    assert!(b.live(reg(2)), "written after the discard: live");
    assert!(b.live(reg(3)), "not covered whole: live");
    assert_eq!(b.stats().forgotten, 1);
    // Persisted (lazily) with the cleared dirty bits.
    let (ms2, h2) = (ms.clone(), Arc::new(Health::new(2)));
    let l = Bitmap::load(ms2, h2, R64K, end).unwrap().with_live_map(true);
    assert!(!l.live(reg(1)) && l.live(reg(2)));
    // A write into the forgotten region zeroes it again first.
    fill(&ms, reg(1), 4096, 0x77);
    b.start_write(reg(1) + 4096, 4096).unwrap();
    assert_eq!(read(&ms[1], reg(1), 4096), vec![0; 4096]);
    // A region a write took back from a discard is on the fast path again
    // once dirty: no bitmap write for the second write.
    b.discarding(reg(2), reg(3));
    b.start_write(reg(2), 4096).unwrap();
    b.end_write(reg(2), 4096);
    let before = b.stats().set_writes;
    b.start_write(reg(2), 4096).unwrap();
    b.end_write(reg(2), 4096);
    assert_eq!(b.stats().set_writes, before);
}

#[test]
fn hostile_bits_decode_without_panic() {
    // Any bits at all: every pattern loads and answers.
    let (ms, h) = mems(1, 8 << 20);
    let end = DATA_OFFSET + (4 << 20) + 12345;
    Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap();
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    ms[0].file().write_all_at(&junk, BITS_OFFSET).unwrap();
    let b = Bitmap::load(ms, h, R64K, end).unwrap().with_live_map(true);
    let s = b.stats();
    assert!(s.written <= s.regions && s.live == s.written);
    assert!(b.live_bytes(0, u64::MAX) >= u64::MAX - end + DATA_OFFSET);
    for at in [0, DATA_OFFSET, end - 1, end, u64::MAX] {
        let _ = b.live(at);
    }
    b.discarding(0, u64::MAX);
    b.discarding(u64::MAX - 1, 3);
}
