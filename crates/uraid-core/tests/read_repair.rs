//! Read errors repaired from redundancy (issue 32 item 4, md's
//! `fix_read_error`): a read that fails on a few sectors of one member of
//! a RAID 1, 10, 5 or 6 volume is served from the other copy or the
//! parity, the range is rewritten on that member and the member stays in;
//! past `max_read_errors` it is failed; a rewrite that does not read back
//! fails it; RAID 0 returns the error.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::io::fault::Faults;
use uraid_core::io::member::{Limits, Member, MemberSpec, OpenMode};
use uraid_core::{IoBuf, Request};
use uraid_core::raid::geometry::Geometry;
use uraid_core::raid::health::MemberState;
use uraid_core::{Level, Volume};

const CHUNK: u64 = 64 << 10;
const ROWS: u64 = 32;

/// A volume of `level` over `n` `mem:` members, each with a fault plan,
/// filled with random data (returned).
fn volume(level: Level, n: usize) -> (Arc<Volume>, Vec<Arc<Faults>>, Vec<u8>) {
    let spec: MemberSpec = format!("mem:{}", DATA_OFFSET + ROWS * CHUNK)
        .parse()
        .unwrap();
    let mut plans = Vec::new();
    let ms: Vec<Member> = (0..n)
        .map(|_| {
            let mut m = Member::open(
                &spec,
                OpenMode {
                    write: true,
                    exclusive: false,
                },
            )
            .unwrap();
            let f = Arc::new(Faults::new());
            f.attach(&mut m);
            plans.push(f);
            m
        })
        .collect();
    let g = Geometry::new(level, n, CHUNK, ROWS * CHUNK).unwrap();
    let v = Volume::new(Arc::new(ms), g, DATA_OFFSET).unwrap();
    let mut model = vec![0u8; v.capacity() as usize];
    StdRng::seed_from_u64(level as u64 * 7 + n as u64).fill_bytes(&mut model);
    v.write_at(0, &model).unwrap();
    (v, plans, model)
}

/// Where the first read of logical byte `off` goes: (member, absolute
/// member byte).
fn place(v: &Volume, off: u64) -> (usize, u64) {
    let l = v.raid().geometry().layout().copied().unwrap();
    let p = l.data_locations(off).iter().next().unwrap();
    (p.member as usize, DATA_OFFSET + p.member_offset)
}

/// Makes 4 KiB at logical `off` unreadable on the member the read goes
/// to, after zeroing it there underneath the filters (so that right data
/// read back proves the reconstruction); returns (member, range).
fn bad_sectors(
    v: &Volume,
    plans: &[Arc<Faults>],
    off: u64,
    remap: bool,
) -> (usize, std::ops::Range<u64>) {
    let (m, abs) = place(v, off);
    v.raid().members()[m]
        .file()
        .write_all_at(&[0u8; 4096], abs)
        .unwrap();
    plans[m].fail_reads(abs..abs + 4096);
    if remap {
        plans[m].remap_on_write();
    }
    (m, abs..abs + 4096)
}

fn on_member(v: &Volume, m: usize, r: &std::ops::Range<u64>) -> Vec<u8> {
    let mut b = vec![0u8; (r.end - r.start) as usize];
    v.raid().members()[m]
        .file()
        .read_exact_at(&mut b, r.start)
        .unwrap();
    b
}

#[test]
fn a_read_error_is_repaired_from_redundancy_and_the_member_stays() {
    for level in [Level::Raid1, Level::Raid10, Level::Raid5, Level::Raid6] {
        let (v, plans, model) = volume(level, 4);
        let errors = v.raid().health().read_errors();
        // A 4 KiB bad range 8 KiB into the chunk of logical byte 3 chunks in.
        let off = 3 * CHUNK + 8192;
        let (m, bad) = bad_sectors(&v, &plans, off, true);
        // A 64 KiB read over it, and a small one inside it.
        let got = v
            .read_at(3 * CHUNK, CHUNK as usize)
            .unwrap_or_else(|e| panic!("{level}: read failed: {e}"));
        assert!(
            got == model[(3 * CHUNK) as usize..(4 * CHUNK) as usize],
            "{level}: wrong data read back"
        );
        assert!(
            plans[m].injected() >= 1,
            "{level}: the read never met the bad sectors"
        );
        assert_eq!(
            v.raid().health().state(m as u32),
            MemberState::Active,
            "{level}: member {m} was failed"
        );
        assert_eq!(
            errors.corrected(m as u32),
            1,
            "{level}: corrected read errors of member {m}"
        );
        assert_eq!(errors.corrected_total(), 1, "{level}");
        assert_eq!(
            on_member(&v, m, &bad),
            model[off as usize..off as usize + 4096],
            "{level}: the bad range was not rewritten"
        );
        // The fault cleared when rewritten: the next read passes straight.
        let injected = plans[m].injected();
        assert!(v.read_at(off, 4096).unwrap() == model[off as usize..off as usize + 4096]);
        assert_eq!(plans[m].injected(), injected, "{level}");
        assert_eq!(errors.corrected(m as u32), 1, "{level}");
    }
}

#[test]
fn past_max_read_errors_the_member_is_failed() {
    for level in [Level::Raid1, Level::Raid10, Level::Raid5, Level::Raid6] {
        let (v, plans, model) = volume(level, 4);
        let errors = v.raid().health().read_errors();
        errors.set_max(2);
        let (m, _) = place(&v, 0);
        // Three read errors on member m, at three places.
        let offs: Vec<u64> = (0..ROWS * 4)
            .map(|c| c * CHUNK + 4096)
            .filter(|&o| o < v.capacity() && place(&v, o).0 == m)
            .take(3)
            .collect();
        assert_eq!(offs.len(), 3, "{level}");
        for (i, &off) in offs.iter().enumerate() {
            bad_sectors(&v, &plans, off, true);
            let got = v
                .read_at(off, 4096)
                .unwrap_or_else(|e| panic!("{level}: read {i} failed: {e}"));
            assert!(
                got == model[off as usize..off as usize + 4096],
                "{level}: read {i}: wrong data"
            );
            let want = if i < 2 {
                MemberState::Active
            } else {
                MemberState::Faulty
            };
            assert_eq!(
                v.raid().health().state(m as u32),
                want,
                "{level}: member {m} after read error {}",
                i + 1
            );
        }
        assert_eq!(errors.corrected(m as u32), 2, "{level}");
        assert!(
            errors
                .failed_reason(m as u32)
                .unwrap()
                .contains("max-read-errors 2"),
            "{level}"
        );
        // The array still reads right without it.
        assert!(
            v.read_at(0, model.len()).unwrap() == model,
            "{level}: data after the member failed"
        );
    }
}

#[test]
fn a_rewrite_that_does_not_read_back_fails_the_member() {
    for level in [Level::Raid1, Level::Raid5] {
        let (v, plans, model) = volume(level, 3);
        let off = 2 * CHUNK;
        // No remap: the sectors stay unreadable whatever is written.
        let (m, _) = bad_sectors(&v, &plans, off, false);
        let got = v.read_at(off, 8192).unwrap();
        assert!(
            got == model[off as usize..off as usize + 8192],
            "{level}: wrong data"
        );
        assert_eq!(
            v.raid().health().state(m as u32),
            MemberState::Faulty,
            "{level}"
        );
        assert_eq!(
            v.raid().health().read_errors().corrected(m as u32),
            0,
            "{level}"
        );
        assert!(
            v.raid()
                .health()
                .read_errors()
                .failed_reason(m as u32)
                .unwrap()
                .contains("could not be repaired"),
            "{level}"
        );
    }
}

#[test]
fn raid0_read_errors_fail_the_read_and_count() {
    let (v, plans, _) = volume(Level::Raid0, 2);
    let (m, abs) = (0usize, DATA_OFFSET + 4096);
    plans[m].fail_reads(abs..abs + 4096);
    let e = v.read_at(0, 16384).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(v.raid().health().read_errors().uncorrected(m as u32), 1);
    assert_eq!(v.raid().health().read_errors().corrected(m as u32), 0);
}

/// Issue 32 item 4: the repair's rewrite and re-read are member I/Os on
/// the queue's ring. The members take writes at 512 B/s (a 4 KiB rewrite
/// takes 8 s of emulated drive time; reads are not held): while the
/// repair of request A is in flight, a request B pushed after it to the
/// same queue completes first, and A completes after its repair, with the
/// member in and the error corrected. (A synchronous rewrite on the
/// engine thread completed A before B was even pushed.)
#[test]
fn a_slow_rewrite_does_not_hold_back_the_queue() {
    let spec: MemberSpec = format!("mem:{}", DATA_OFFSET + ROWS * CHUNK).parse().unwrap();
    let mut plans = Vec::new();
    let ms: Vec<Member> = (0..2)
        .map(|_| {
            let mut m = Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap();
            let f = Arc::new(Faults::new());
            f.attach(&mut m);
            plans.push(f);
            m.set_limits(Limits { wbw: 512, ..Limits::default() });
            m
        })
        .collect();
    let g = Geometry::new(Level::Raid1, 2, CHUNK, ROWS * CHUNK).unwrap();
    let v = Volume::new(Arc::new(ms), g, DATA_OFFSET).unwrap();
    let mut model = vec![0u8; v.capacity() as usize];
    StdRng::seed_from_u64(99).fill_bytes(&mut model);
    // Filled underneath (the throttled engine would take an hour).
    for m in v.raid().members().iter() {
        m.file().write_all_at(&model, DATA_OFFSET).unwrap();
    }
    let off = 5 * CHUNK + 8192;
    let (m, _) = bad_sectors(&v, &plans, off, true);
    let errors = v.raid().health().read_errors();
    let mut q = v.raid().queue(8).unwrap();
    let mut out = Vec::new();
    q.push(Request::read(off, 4096, IoBuf::new(4096), 1)).map_err(|r| r.error).unwrap();
    let soon = uraid_core::clock::now_ns() + 200_000_000;
    q.wait_until(1, &mut out, Some(soon));
    assert!(out.is_empty(), "A completed before its 8 s rewrite could have: the repair was not on the ring");
    assert!(plans[m].injected() >= 1, "A never met the bad sectors");
    let off_b = 11 * CHUNK;
    q.push(Request::read(off_b, 4096, IoBuf::new(4096), 2)).map_err(|r| r.error).unwrap();
    q.wait(1, &mut out);
    assert_eq!(out[0].tag, 2, "B did not complete first");
    assert_eq!(errors.corrected(m as u32), 0, "the repair was done before B completed");
    let b = out.remove(0);
    assert!(b.buf.unwrap()[..4096] == model[off_b as usize..off_b as usize + 4096]);
    while out.is_empty() {
        q.wait(1, &mut out);
    }
    let a = out.remove(0);
    assert_eq!(a.tag, 1);
    assert_eq!(a.result.unwrap(), 4096);
    assert!(a.buf.unwrap()[..4096] == model[off as usize..off as usize + 4096], "A: wrong data");
    assert_eq!(v.raid().health().state(m as u32), MemberState::Active);
    assert_eq!(errors.corrected(m as u32), 1);
    let mut back = vec![0u8; 4096];
    let abs = place(&v, off).1;
    v.raid().members()[m].file().read_exact_at(&mut back, abs).unwrap();
    assert!(back == model[off as usize..off as usize + 4096], "the bad range was not rewritten");
}

/// A RAID 5 write whose read-modify-write (5 members) or
/// reconstruct-write (4 members) pre-read fails on a member: the old rows
/// are reconstructed from the rest of the stripe, the write lands, the
/// bad range is rewritten (with the new data when the write covers it,
/// with the reconstructed old data otherwise) and the member stays in.
#[test]
fn a_failed_pre_read_of_a_raid5_write_is_repaired() {
    // (members, data index of the bad pre-read: the written one for RMW,
    // an unwritten one for RCW)
    for (n, bad_index) in [(5usize, 0u64), (4, 1)] {
        let (v, plans, mut model) = volume(Level::Raid5, n);
        let errors = v.raid().health().read_errors();
        let reads0 = v.raid().stripe_reads();
        // 4 KiB into data index 0 of stripe 2.
        let width = (n as u64 - 1) * CHUNK;
        let off = 2 * width + 8192;
        let bad_off = off + bad_index * CHUNK;
        let (m, bad) = bad_sectors(&v, &plans, bad_off, true);
        let new = vec![0xa5u8; 4096];
        v.write_at(off, &new).unwrap_or_else(|e| panic!("{n} members: write failed: {e}"));
        model[off as usize..off as usize + 4096].copy_from_slice(&new);
        assert!(plans[m].injected() >= 1, "{n} members: the pre-read never met the bad sectors");
        assert!(v.raid().stripe_reads() > reads0, "{n} members: no pre-read");
        assert_eq!(v.raid().health().state(m as u32), MemberState::Active, "{n} members: member {m} was failed");
        assert_eq!(errors.corrected(m as u32), 1, "{n} members");
        assert_eq!(
            on_member(&v, m, &bad),
            model[bad_off as usize..bad_off as usize + 4096],
            "{n} members: the bad range was not rewritten"
        );
        let injected = plans[m].injected();
        assert!(v.read_at(0, model.len()).unwrap() == model, "{n} members: wrong data after the write");
        assert_eq!(plans[m].injected(), injected, "{n} members: the range still fails");
    }
}

/// A degraded RAID 6 read (one member failed) whose stripe read fails on
/// a second member: served from the second parity, the range rewritten on
/// that member with what belongs there, the member kept.
#[test]
fn a_failed_read_of_a_degraded_raid6_read_is_repaired() {
    let (v, plans, model) = volume(Level::Raid6, 5);
    let errors = v.raid().health().read_errors();
    let off = 3 * (3 * CHUNK) + 8192;
    let (x, abs) = place(&v, off);
    v.raid().health().fail(x as u32).unwrap();
    let y = (x + 1) % 5;
    let bad = abs..abs + 4096;
    let want = on_member(&v, y, &bad);
    v.raid().members()[y].file().write_all_at(&[0u8; 4096], abs).unwrap();
    plans[y].fail_reads(bad.clone());
    plans[y].remap_on_write();
    let got = v.read_at(off, 4096).unwrap();
    assert!(got == model[off as usize..off as usize + 4096], "wrong data");
    assert!(plans[y].injected() >= 1, "the degraded read never met the bad sectors");
    assert_eq!(v.raid().health().state(y as u32), MemberState::Active, "member {y} was failed");
    assert_eq!(errors.corrected(y as u32), 1);
    assert_eq!(on_member(&v, y, &bad), want, "the bad range was not rewritten with its data");
    assert!(v.read_at(0, model.len()).unwrap() == model, "wrong data after the repair");
}

/// A failed pre-read of a RAID 5 reconstruct-write still fails the member
/// past `--max-read-errors` (0 here), and when the rewrite of the
/// reconstructed rows fails; the write lands either way.
#[test]
fn a_failed_pre_read_past_the_limit_or_not_rewritten_fails_the_member() {
    for case in ["limit", "rewrite"] {
        let (v, plans, mut model) = volume(Level::Raid5, 4);
        let errors = v.raid().health().read_errors();
        let off = 2 * (3 * CHUNK) + 8192;
        // An unwritten data index: only the repair writes there.
        let (m, bad) = bad_sectors(&v, &plans, off + CHUNK, true);
        if case == "limit" {
            errors.set_max(0);
        } else {
            plans[m].fail_writes(bad.clone());
        }
        let new = vec![0x5au8; 4096];
        v.write_at(off, &new).unwrap_or_else(|e| panic!("{case}: write failed: {e}"));
        model[off as usize..off as usize + 4096].copy_from_slice(&new);
        assert_eq!(v.raid().health().state(m as u32), MemberState::Faulty, "{case}");
        assert_eq!(errors.corrected(m as u32), 0, "{case}");
        if case == "limit" {
            assert!(errors.failed_reason(m as u32).unwrap().contains("max-read-errors 0"), "{case}");
        }
        assert!(v.read_at(0, model.len()).unwrap() == model, "{case}: wrong data");
    }
}
