//! Tests of the write-intent bitmap: setting bits durably, clearing idle
//! regions (also against concurrent writers), failing members, loading
//! and healing copies, the daemon.

use super::*;
use crate::raid::health::MemberState;
use crate::io::member::{MemSpec, MemberSpec, OpenMode};
use std::sync::atomic::AtomicBool;

const RW: OpenMode = OpenMode { write: true, exclusive: false };
const R64K: u64 = 64 << 10;

fn mem(size: u64) -> Member {
    Member::open(&MemberSpec::Mem(MemSpec { size, limits: Default::default() }), RW).unwrap()
}

fn mems(n: usize, size: u64) -> (Arc<Vec<Member>>, Arc<Health>) {
    (Arc::new((0..n).map(|_| mem(size)).collect()), Arc::new(Health::new(n)))
}

/// The two bits of region `r` as stored on member `m`.
fn disk_bits(members: &[Member], m: usize, r: u64) -> u8 {
    let mut buf = IoBuf::new(BLOCK);
    let block = r / REGIONS_PER_BLOCK;
    members[m].read_exact_at(&mut buf, BITS_OFFSET + block * BLOCK as u64).unwrap();
    let r = r % REGIONS_PER_BLOCK;
    (buf[(r / 4) as usize] >> (2 * (r % 4))) & 0b11
}

fn reg(r: u64) -> u64 {
    DATA_OFFSET + r * R64K
}

#[test]
fn start_write_sets_bits_durably_and_fast_path_writes_nothing() {
    let (ms, h) = mems(3, 8 << 20);
    let end = DATA_OFFSET + (4 << 20); // 64 regions of 64 KiB
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap();
    assert_eq!(b.stats().regions, 64);
    assert!(b.dirty().is_empty());
    // Crosses regions 1 and 2.
    b.start_write(reg(2) - 4096, 8192).unwrap();
    assert_eq!(b.stats().set_writes, 1);
    for m in 0..3 {
        assert_eq!(disk_bits(&ms, m, 1), 0b11, "member {m}");
        assert_eq!(disk_bits(&ms, m, 2), 0b11, "member {m}");
        assert_eq!(disk_bits(&ms, m, 0), 0, "member {m}");
    }
    // Already dirty: no bitmap write.
    b.start_write(reg(1), 4096).unwrap();
    assert_eq!(b.stats().set_writes, 1);
    b.end_write(reg(1), 4096);
    b.end_write(reg(2) - 4096, 8192);
    assert_eq!(b.dirty(), vec![reg(1)..reg(3)]);
    assert!(b.written(reg(1)) && b.written(reg(2) + 5) && !b.written(reg(0)) && !b.written(reg(3)));
    assert!(b.written_range(reg(0), reg(1) + 1) && !b.written_range(reg(3), reg(64)));
    // Reloading from the members sees the same bits.
    let l = Bitmap::load(ms.clone(), h.clone(), R64K, end).unwrap();
    assert_eq!(l.dirty(), vec![reg(1)..reg(3)]);
    assert!(l.written(reg(1)) && !l.written(reg(0)));
    // Last region: dirty range is clipped at the data end.
    b.start_write(end - 4096, 4096).unwrap();
    assert_eq!(b.dirty().last().unwrap().end, end);
    // Out of range.
    assert_eq!(b.start_write(DATA_OFFSET - 4096, 4096).unwrap_err().kind(), ErrorKind::OutOfRange);
    assert_eq!(b.start_write(end, 4096).unwrap_err().kind(), ErrorKind::OutOfRange);
    assert_eq!(b.start_write(u64::MAX - 10, 4096).unwrap_err().kind(), ErrorKind::OutOfRange);
}

#[test]
fn clear_idle_clears_only_idle_regions_and_reload_agrees() {
    let (ms, h) = mems(2, 8 << 20);
    let end = DATA_OFFSET + (4 << 20);
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap();
    b.start_write(reg(3), 4096).unwrap(); // A: ends at once
    b.end_write(reg(3), 4096);
    b.start_write(reg(7), 4096).unwrap(); // B: stays in flight
    // A write started since the previous call: not yet.
    assert_eq!(b.clear_idle().unwrap(), 0);
    assert_eq!(b.clear_idle().unwrap(), 1);
    assert_eq!(b.dirty(), vec![reg(7)..reg(8)]);
    for m in 0..2 {
        assert_eq!(disk_bits(&ms, m, 3), 0b10, "written stays, dirty cleared");
        assert_eq!(disk_bits(&ms, m, 7), 0b11);
    }
    let l = Bitmap::load(ms.clone(), h.clone(), R64K, end).unwrap();
    assert_eq!(l.dirty(), vec![reg(7)..reg(8)]);
    assert!(l.written(reg(3)));
    b.end_write(reg(7), 4096);
    assert_eq!(b.clear_idle().unwrap(), 1);
    assert!(b.dirty().is_empty());
    assert_eq!(b.stats().cleared, 2);
    // A cleared region is set again (durably) by the next write.
    b.start_write(reg(3), 4096).unwrap();
    assert_eq!(disk_bits(&ms, 1, 3), 0b11);
    b.end_write(reg(3), 4096);
    b.clear_all().unwrap();
    assert!(b.dirty().is_empty());
    assert_eq!(disk_bits(&ms, 0, 3), 0b10);
    assert!(Bitmap::load(ms, h, R64K, end).unwrap().dirty().is_empty());
}

#[test]
fn concurrent_start_write_and_clear_idle_never_clear_a_busy_region() {
    let (ms, h) = mems(2, 4 << 20);
    let end = DATA_OFFSET + (1 << 20); // 16 regions: heavy contention
    let b = Arc::new(Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let clearer = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut cleared = 0;
            while !stop.load(Ordering::Relaxed) {
                cleared += b.clear_idle().unwrap();
            }
            cleared
        })
    };
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let (b, ms) = (b.clone(), ms.clone());
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for i in 0..3000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let r = x % 16;
                    let len = if x & 0x100 != 0 { 2 * R64K } else { 4096 };
                    let off = reg(r).min(end - len);
                    b.start_write(off, len).unwrap();
                    let (r0, r1) = b.regions_of(off, len).unwrap();
                    for r in r0..r1 {
                        assert!(b.is_dirty(r), "region {r} clear in memory with a write in flight");
                        if i % 8 == 0 {
                            assert_eq!(disk_bits(&ms, (i % 2) as usize, r as u64) & 1, 1, "region {r} clear on disk");
                        }
                    }
                    if x & 0x200 != 0 {
                        std::thread::yield_now();
                    }
                    b.end_write(off, len);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let cleared = clearer.join().unwrap();
    assert!(cleared > 0, "the clearer never cleared anything: the test did not exercise the race");
    assert!(b.stats().set_writes > 1);
    // Idle now: two calls clear everything, and the members agree.
    b.clear_idle().unwrap();
    b.clear_idle().unwrap();
    assert!(b.dirty().is_empty());
    assert!(Bitmap::load(ms, h, R64K, end).unwrap().dirty().is_empty());
}

#[test]
fn a_failing_member_is_failed_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ro");
    std::fs::write(&p, vec![0u8; 4 << 20]).unwrap();
    let ro = || Member::open(&MemberSpec::Path(p.clone()), OpenMode { write: false, exclusive: false }).unwrap();
    let end = DATA_OFFSET + (1 << 20);
    // Member 1 refuses writes (opened read-only): create fails it and
    // goes on with member 0.
    let ms = Arc::new(vec![mem(4 << 20), ro(), mem(4 << 20)]);
    let h = Arc::new(Health::new(3));
    h.set_state(2, MemberState::Spare);
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap();
    assert_eq!(h.state(1), MemberState::Faulty);
    b.start_write(reg(2), 4096).unwrap();
    assert_eq!(disk_bits(&ms, 0, 2), 0b11);
    assert_eq!(disk_bits(&ms, 1, 2), 0, "read-only member untouched");
    assert_eq!(disk_bits(&ms, 2, 2), 0, "spare is not written");
    // The spare joins: it gets a copy.
    h.set_state(2, MemberState::Active);
    b.write_to(2).unwrap();
    assert_eq!(disk_bits(&ms, 2, 2), 0b11);
    assert!(b.write_to(3).is_err());
    // Only a failing member: nothing took the write.
    let ms = Arc::new(vec![ro()]);
    let h = Arc::new(Health::new(1));
    let e = Bitmap::create(ms, h.clone(), R64K, end).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    // A member marked faulty first is simply not written.
    let (ms, h) = mems(2, 4 << 20);
    h.fail(0).unwrap();
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap();
    b.start_write(reg(0), 4096).unwrap();
    assert_eq!(disk_bits(&ms, 0, 0), 0);
    assert_eq!(disk_bits(&ms, 1, 0), 0b11);
}

#[test]
fn start_write_fails_and_counts_nothing_when_no_member_takes_it() {
    let (ms, h) = mems(2, 4 << 20);
    let end = DATA_OFFSET + (1 << 20);
    let b = Bitmap::create(ms, h.clone(), R64K, end).unwrap();
    h.fail(0).unwrap();
    h.fail(1).unwrap();
    assert_eq!(b.start_write(reg(1), 4096).unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(b.inflight[1].load(Ordering::SeqCst), 0);
    assert!(b.dirty().is_empty());
}

#[test]
fn bad_parameters_are_refused_before_writing() {
    let (ms, h) = mems(1, 4 << 20);
    let e = Bitmap::create(ms.clone(), h.clone(), 3 << 20, DATA_OFFSET + (1 << 20)).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    // 1 TiB of data area in 64 KiB regions is too many; 512K fits.
    let e = Bitmap::empty(ms.clone(), h.clone(), R64K, DATA_OFFSET + (1 << 40)).unwrap_err();
    assert!(e.to_string().contains("use a region size of 512K or more"), "{e}");
    assert!(Bitmap::create(ms.clone(), h.clone(), R64K, DATA_OFFSET).is_err());
    assert_eq!(Bitmap::create(ms.clone(), h.clone(), R64K, 8 << 20).unwrap_err().kind(), ErrorKind::TooSmall);
    let mut buf = IoBuf::new(HEADER_SIZE);
    ms[0].read_exact_at(&mut buf, BITMAP_OFFSET).unwrap();
    assert!(buf.iter().all(|&x| x == 0), "a refused create wrote something");
    // No bitmap on the members yet.
    assert_eq!(Bitmap::load(ms, h, R64K, DATA_OFFSET + (1 << 20)).unwrap_err().kind(), ErrorKind::Superblock);
}

#[test]
fn load_checks_parameters_ors_copies_and_heals_a_bad_copy() {
    let (ms, h) = mems(3, 4 << 20);
    let end = DATA_OFFSET + (2 << 20);
    let b = Bitmap::create(ms.clone(), h.clone(), R64K, end).unwrap();
    let e = Bitmap::load(ms.clone(), h.clone(), 2 * R64K, end).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Superblock);
    assert!(e.to_string().contains("region size 65536"), "{e}");
    // Region 5 dirty on member 2 only (member 0 and 1 were out).
    h.set_state(0, MemberState::Spare);
    h.set_state(1, MemberState::Spare);
    b.start_write(reg(5), 4096).unwrap();
    h.set_state(0, MemberState::Active);
    h.set_state(1, MemberState::Active);
    // Member 1's header is garbage.
    let junk = IoBuf::new(HEADER_SIZE);
    ms[1].write_all_at(&junk, BITMAP_OFFSET).unwrap();
    let l = Bitmap::load(ms.clone(), h.clone(), R64K, end).unwrap();
    assert_eq!(l.dirty(), vec![reg(5)..reg(6)]);
    // Member 1 was healed with the merged bitmap.
    assert_eq!(disk_bits(&ms, 1, 5), 0b11);
    h.fail(2).unwrap();
    assert_eq!(Bitmap::load(ms, h, R64K, end).unwrap().dirty(), vec![reg(5)..reg(6)]);
}

#[test]
fn daemon_clears_idle_regions_and_stops_on_drop() {
    let (ms, h) = mems(2, 4 << 20);
    let end = DATA_OFFSET + (1 << 20);
    let b = Arc::new(Bitmap::create(ms, h, R64K, end).unwrap());
    let d = b.start_daemon(Duration::from_millis(10));
    b.start_write(reg(4), 4096).unwrap();
    b.end_write(reg(4), 4096);
    let t = std::time::Instant::now();
    while !b.dirty().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(5), "the daemon did not clear the region");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(d);
    b.start_write(reg(4), 4096).unwrap();
    b.end_write(reg(4), 4096);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.dirty(), vec![reg(4)..reg(5)], "the daemon still runs after drop");
    assert_eq!(Arc::strong_count(&b), 1, "the daemon thread still holds the bitmap");
}
