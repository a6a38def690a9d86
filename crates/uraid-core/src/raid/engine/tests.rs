//! The engine's own tests: a ring that fails for good; `null:` members.

use super::*;
use crate::io::buf::IoBuf;
use crate::io::member::Member;
use crate::raid::geometry::Geometry;
use crate::io::member::{MemberSpec, OpenMode};
use crate::control::superblock::DATA_OFFSET;
use crate::Level;

/// A ring that fails for good (the error is simulated; what is tested
/// is what the queue does then) fails every request in flight with
/// EIO, refuses new ones, stops the volume's writes and marks the
/// array unclean, and its drop returns at once.
#[test]
fn a_failed_ring_fails_its_requests_and_never_hangs() {
    for level in [Level::Raid0, Level::Raid5] {
        // A 20 ms latency holds every piece's completion back, so all
        // eight are still in flight when the ring fails.
        let spec: MemberSpec = format!("mem:{},lat=20000", DATA_OFFSET + (8 << 20)).parse().unwrap();
        let members: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
        let g = Geometry::new(level, 3, 64 << 10, 8 << 20).unwrap();
        let v = RaidVolume::new(Arc::new(members), g, DATA_OFFSET).unwrap();
        let mut q = v.queue(8).unwrap();
        for i in 0..8u64 {
            q.push(Request::write(i * (128 << 10), 128 << 10, IoBuf::new(128 << 10), i)).map_err(|r| r.error).unwrap();
        }
        q.submit();
        q.ring_failed("a test", std::io::Error::from_raw_os_error(libc::EBADF));
        let t0 = std::time::Instant::now();
        let mut out = Vec::new();
        q.wait(8, &mut out);
        assert_eq!(out.len(), 8, "{level}: not every request in flight completed");
        for c in &out {
            let e = c.result.as_ref().expect_err("a request in flight succeeded on a failed ring");
            assert_eq!(e.errno(), libc::EIO, "{level}: {e}");
            assert!(e.to_string().contains("io_uring failed"), "{level}: {e}");
            assert!(c.buf.is_none(), "{level}: a buffer the kernel may still use was handed back");
        }
        let r = q.push(Request::read(0, 4096, IoBuf::new(4096), 99));
        assert!(r.is_err(), "{level}: a failed ring took a new request");
        assert!(v.health().writes_stopped() && v.health().unclean(), "{level}: the volume still takes writes or is clean");
        drop(q);
        assert!(t0.elapsed() < std::time::Duration::from_secs(2), "{level}: took {:?}", t0.elapsed());
    }
}

/// Over `null:` members, at every level, the engine completes every
/// request: a write is dropped, a read (of a block written with data, in
/// a buffer full of 0xff) returns zeros, a flush and a discard succeed.
#[test]
fn null_members_read_zeros_and_drop_writes() {
    for (level, n) in [(Level::Raid0, 4), (Level::Raid1, 2), (Level::Raid10, 4), (Level::Raid5, 4), (Level::Raid6, 4)] {
        let spec: MemberSpec = format!("null:{}", DATA_OFFSET + (8 << 20)).parse().unwrap();
        let members: Vec<Member> = (0..n).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
        let g = Geometry::new(level, n, 64 << 10, 8 << 20).unwrap();
        let v = RaidVolume::new(Arc::new(members), g, DATA_OFFSET).unwrap();
        let mut q = v.queue(8).unwrap();
        let mut run = |req: Request| {
            q.push(req).map_err(|r| r.error).unwrap();
            let mut out = Vec::new();
            q.wait(1, &mut out);
            out.pop().unwrap()
        };
        for (off, len) in [(0u64, 4096usize), (60 << 10, 8 << 10), (0, 512 << 10)] {
            let mut data = IoBuf::new(len);
            data.iter_mut().for_each(|b| *b = 0x5a);
            assert_eq!(run(Request::write(off, len, data, 1)).result.unwrap(), len, "{level}");
            let mut buf = IoBuf::new(len);
            buf.iter_mut().for_each(|b| *b = 0xff);
            let c = run(Request::read(off, len, buf, 2));
            assert_eq!(c.result.unwrap(), len, "{level}");
            assert!(c.buf.unwrap()[..len].iter().all(|&b| b == 0), "{level}: a read of {len} at {off} did not return zeros");
        }
        run(Request { op: Op::Flush, offset: 0, len: 0, buf: None, tag: 3, fua: false }).result.unwrap();
        run(Request { op: Op::Discard, offset: 0, len: 1 << 20, buf: None, tag: 4, fua: false }).result.unwrap();
    }
}

/// The per-member counters count what the members did: on a RAID 1 and a
/// RAID 5 over `mem:` members, full-stripe writes and reads of known
/// sizes show as that many member writes, reads and bytes (and timed
/// latencies), across two queues (two slabs, summed); a read error
/// injected on member 0 counts as one error of kind `read` there, while
/// the data still reads back (from the other copy or parity).
#[test]
fn member_counters_count_ios_bytes_and_errors() {
    use crate::io::fault::Faults;
    for (level, n) in [(Level::Raid1, 2usize), (Level::Raid5, 3)] {
        let chunk = 64usize << 10;
        let spec: MemberSpec = format!("mem:{}", DATA_OFFSET + (8 << 20)).parse().unwrap();
        let faults = Arc::new(Faults::new());
        let members: Vec<Member> = (0..n)
            .map(|i| {
                let mut m = Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap();
                if i == 0 {
                    faults.attach(&mut m);
                }
                m
            })
            .collect();
        let g = Geometry::new(level, n, chunk as u64, 8 << 20).unwrap();
        let v = RaidVolume::new(Arc::new(members), g, DATA_OFFSET).unwrap();
        // One full stripe per request: no member read before a write.
        let stripe = chunk * (n - 1).max(1);
        // 32 member writes each: at least one of them timed (the first).
        let stripes = 32usize;
        for (k, depth) in [(0usize, 4usize), (1, 2)] {
            let mut q = v.queue(depth).unwrap();
            for s in 0..stripes / 2 {
                let i = k * stripes / 2 + s;
                q.write_at(i as u64 * stripe as u64, &vec![i as u8 + 1; stripe]).unwrap();
            }
        }
        let io = v.member_io();
        assert_eq!(io.len(), n);
        for (m, c) in io.iter().enumerate() {
            assert_eq!((c.writes, c.written_bytes), (stripes as u64, (stripes * chunk) as u64), "{level} member {m}: {c:?}");
            assert_eq!((c.reads, c.read_bytes), (0, 0), "{level} member {m}: {c:?}");
            // The first of each member's I/Os on a queue's counters is timed, then one in 32.
            assert!((1..=c.writes).contains(&c.write_latency.count), "{level} member {m}: {c:?}");
            assert!(c.write_await_us > 0.0 && c.p99_us >= c.write_await_us / 2.0, "{level} member {m}: {c:?}");
            assert_eq!(c.errors.total(), 0, "{level} member {m}");
        }
        // Reads of the whole area: every data chunk once.
        let back: Vec<u8> = (0..stripes).flat_map(|i| v.read_at((i * stripe) as u64, stripe).unwrap()).collect();
        let read: u64 = v.member_io().iter().map(|c| c.read_bytes).sum();
        assert_eq!(read, (stripes * stripe) as u64, "{level}: bytes read from the members");
        assert!(back.chunks(stripe).enumerate().all(|(i, s)| s.iter().all(|&b| b == i as u8 + 1)), "{level}");
        // A read error on member 0 under the first chunk it holds.
        let before = v.member_io();
        // The first read error fails the member (no repair: its rewrite
        // and re-read are member I/Os the counters would count too).
        v.health().read_errors().set_max(0);
        faults.fail_reads(DATA_OFFSET..DATA_OFFSET + chunk as u64);
        let mut q = v.queue(4).unwrap();
        // RAID 1 reads whichever copy is less busy: ask until member 0 is
        // asked (it fails, the other copy answers, member 0 is failed).
        for _ in 0..8 {
            let got = q.read_at(0, chunk).unwrap();
            assert!(got.iter().all(|&b| b == 1), "{level}: a read around the error returned wrong data");
            if v.member_io()[0].errors.read > 0 {
                break;
            }
        }
        let d: Vec<_> = v.member_io().iter().zip(&before).map(|(a, b)| a.delta(b)).collect();
        assert_eq!(d[0].errors.read, 1, "{level}: {:?}", d[0]);
        assert_eq!(d[0].errors.total(), 1, "{level}: {:?}", d[0]);
        assert_eq!(d[0].reads, 1, "{level}: the failed read is a read of member 0: {:?}", d[0]);
        assert!(d[1..].iter().all(|c| c.errors.total() == 0 && c.reads >= 1), "{level}: {d:?}");
    }
}
