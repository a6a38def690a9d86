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
