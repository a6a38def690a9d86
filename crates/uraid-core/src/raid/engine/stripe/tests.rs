//! Tests of the stripe path's planning: which partial-stripe writes are
//! plugged for a partner, and which are not.

use std::sync::Arc;

use crate::control::superblock::DATA_OFFSET;
use crate::io::buf::IoBuf;
use crate::io::member::{Member, MemberSpec, OpenMode};
use crate::io::request::Request;
use crate::raid::engine::{RaidQueue, RaidVolume};
use crate::raid::geometry::Geometry;
use crate::{Completion, Level};

/// RAID 5 over four `mem:` members whose every I/O takes `lat_us` (so
/// that requests stay in flight together), chunk 64K: 192K of data per
/// stripe.
fn raid5(lat_us: u64) -> (Arc<RaidVolume>, u64) {
    let spec: MemberSpec = format!("mem:{},lat={lat_us}", DATA_OFFSET + (16 << 20)).parse().unwrap();
    let members: Vec<Member> = (0..4).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
    let g = Geometry::new(Level::Raid5, 4, 64 << 10, 16 << 20).unwrap();
    let v = RaidVolume::new(Arc::new(members), g, DATA_OFFSET).unwrap();
    (v, 3 * (64 << 10))
}

/// Keeps `qd` writes of `len` bytes at the offsets `next` gives in flight
/// until `n` completed; each succeeds.
fn run(q: &mut RaidQueue, qd: usize, n: usize, len: usize, mut next: impl FnMut(usize) -> u64) {
    let (mut pushed, mut done) = (0, 0);
    let mut out: Vec<Completion> = Vec::new();
    while pushed < qd.min(n) {
        q.push(Request::write(next(pushed), len, IoBuf::new(len), pushed as u64)).map_err(|r| r.error).unwrap();
        pushed += 1;
    }
    while done < n {
        out.clear();
        q.wait(1, &mut out);
        for c in out.drain(..) {
            c.result.unwrap();
            done += 1;
            if pushed < n {
                q.push(Request::write(next(pushed), len, IoBuf::new(len), pushed as u64)).map_err(|r| r.error).unwrap();
                pushed += 1;
            }
        }
    }
}

/// Issue 31's RAID 5 Q32T1 write stall: a random 4K write that happens to
/// start at a stripe's start was plugged (held back for a partner that
/// never comes) until the plug deadline, 10 ms, whenever anything else was
/// in flight, which at QD32 is always. Random writes, a quarter of them at
/// stripe starts, are now never plugged and never wait for the deadline.
#[test]
fn random_writes_at_stripe_starts_are_not_plugged() {
    let (v, width) = raid5(200);
    let mut q = v.queue(32).unwrap();
    // Stripe starts and mid-stripe offsets, in a scattered order, none
    // where the write before it ended.
    run(&mut q, 32, 400, 4096, |i| {
        let s = (i as u64 * 37 + 11) % 80;
        if i % 4 == 0 { s * width } else { s * width + (64 << 10) }
    });
    assert_eq!(q.raid.plugs, 0, "random writes were plugged ({})", q.raid.debug_stats());
    assert_eq!(q.raid.plug_timeouts, 0, "a write waited for the plug deadline ({})", q.raid.debug_stats());
}

/// The coalescer still works for a sequential stream: its partial-stripe
/// tails are plugged and the next request completes them into full-stripe
/// writes, without waiting for the deadline.
#[test]
fn a_sequential_stream_is_still_merged_into_full_stripes() {
    let (v, _width) = raid5(200);
    let mut q = v.queue(8).unwrap();
    // 128K requests: every other one ends inside a stripe of 192K.
    run(&mut q, 8, 96, 128 << 10, |i| i as u64 * (128 << 10));
    assert!(q.raid.plugs > 0 && q.raid.merged > 0, "no stripe was merged ({})", q.raid.debug_stats());
}
