//! The open stack: a pass-through layer ([`Tap`]) put between the cache
//! layer and the RAID layer by the test alone (neither layer edited), and
//! what it saw; what each layer says it can do ([`Caps`]), answered from
//! the layer below.

use std::sync::Arc;

use uraid_core::cache::queue::CacheQueue;
use uraid_core::cache::{CacheConfig, CacheMode};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::io::member::{Member, MemberSpec, OpenMode};
use uraid_core::io::request::Caps;
use uraid_core::io::tap::{Tap, TapCounts};
use uraid_core::raid::engine::RaidQueue;
use uraid_core::raid::geometry::Geometry;
use uraid_core::{BlockDevice, BlockQueue, Level, Op, Request, Volume};

const CHUNK: u64 = 64 << 10;

/// A cached volume over three fresh `mem:` members, and a second, uncached
/// one over the same members (what reached them).
fn volumes(level: Level, mode: CacheMode) -> (Arc<Volume>, Arc<Volume>) {
    let spec: MemberSpec = format!("mem:{}", DATA_OFFSET + 64 * CHUNK).parse().unwrap();
    let ms: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
    let g = Geometry::new(level, 3, CHUNK, 64 * CHUNK).unwrap();
    let raw = Arc::new(ms.iter().map(|m| m.try_clone().unwrap()).collect::<Vec<_>>());
    let v = Volume::new(Arc::new(ms), g, DATA_OFFSET).unwrap();
    // High limits: the flusher writes back only when asked.
    v.enable_cache(CacheConfig { mode, size: 64 << 20, dirty_limit: 32 << 20 }).unwrap();
    (v, Volume::new(raw, g, DATA_OFFSET).unwrap())
}

/// The volume's cache over a tap over its RAID layer's queue.
fn tapped(v: &Arc<Volume>) -> (CacheQueue<Tap<RaidQueue>>, Arc<TapCounts>) {
    let counts = Arc::new(TapCounts::default());
    let raid = v.raid().queue(8).unwrap();
    (CacheQueue::new(Tap::new(raid, counts.clone()), v.cache().unwrap().clone()), counts)
}

fn down(c: &TapCounts) -> [u64; 5] {
    [Op::Read, Op::Write, Op::Flush, Op::Discard, Op::WriteZeroes { no_hole: false }].map(|op| c.of(op))
}

#[test]
fn a_tap_under_a_write_back_cache_sees_only_what_the_cache_sends_down() {
    let (v, raw) = volumes(Level::Raid5, CacheMode::WriteBack);
    let (mut q, counts) = tapped(&v);
    let data = vec![0x5au8; 128 << 10];
    q.write_at(0, &data).unwrap();
    assert_eq!(down(&counts), [0; 5], "a write-back write went down through the tap");
    assert!(q.read_at(0, data.len()).unwrap() == data);
    assert_eq!(down(&counts), [0; 5], "a read hit went down through the tap");
    // A miss goes down, once, for its whole range.
    assert!(q.read_at(1 << 20, 64 << 10).unwrap().iter().all(|&b| b == 0));
    assert_eq!(down(&counts), [1, 0, 0, 0, 0]);
    assert_eq!(counts.read_bytes.load(std::sync::atomic::Ordering::Relaxed), 64 << 10);
    // A flush waits for the flusher (its own RAID queue, not this one).
    BlockQueue::flush(&mut q).unwrap();
    assert!(raw.read_at(0, data.len()).unwrap() == data, "the flush left the write in the cache");
    assert_eq!(down(&counts), [1, 0, 0, 0, 0], "the write-back went through the tap");
    // A discard goes down once what it covers is written back.
    let c = q.run(Request { op: Op::Discard, offset: 0, len: data.len(), buf: None, tag: 7, fua: false });
    c.result.unwrap();
    assert_eq!(down(&counts), [1, 0, 0, 1, 0]);
    let seen = counts.completions.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(seen, 2, "every request sent down came back up through the tap");
    assert_eq!(counts.errors.load(std::sync::atomic::Ordering::Relaxed), 0);
    println!("write-back through a tap: requests down (read, write, flush, discard, zeroes) {:?}", down(&counts));
}

#[test]
fn a_tap_under_a_write_through_cache_sees_every_write_and_misses_only() {
    let (v, raw) = volumes(Level::Raid1, CacheMode::WriteThrough);
    let (mut q, counts) = tapped(&v);
    let data = vec![0xc3u8; 64 << 10];
    for i in 0..4u64 {
        q.write_at(i << 20, &data).unwrap();
    }
    assert_eq!(down(&counts)[1], 4, "every write-through write goes down");
    assert_eq!(counts.write_bytes.load(std::sync::atomic::Ordering::Relaxed), 4 * data.len() as u64);
    assert!(raw.read_at(3 << 20, data.len()).unwrap() == data);
    // Read twice: the first misses (and fills the cache), the second hits.
    let far = 3 << 20 | 256 << 10;
    q.read_at(far, 4096).unwrap();
    q.read_at(far, 4096).unwrap();
    assert_eq!(down(&counts)[0], 1, "a read of cached data went down");
    let mut fua = Request::write(0, data.len(), uraid_core::IoBuf::new(data.len()), 9);
    fua.fua = true;
    q.run(fua).result.unwrap();
    assert_eq!(counts.fua.load(std::sync::atomic::Ordering::Relaxed), 1, "the FUA bit did not reach the layer below");
}

#[test]
fn each_layer_answers_what_it_can_do_from_the_one_below() {
    for (level, width) in [(Level::Raid5, 2 * CHUNK), (Level::Raid0, 3 * CHUNK), (Level::Raid1, 0)] {
        let (v, _) = volumes(level, CacheMode::WriteBack);
        let raid: Caps = v.raid().caps();
        assert_eq!(raid.capacity, v.raid().capacity(), "{level}");
        assert_eq!((raid.chunk, raid.stripe_width), (CHUNK, width), "{level}");
        assert!(raid.discard && raid.write_zeroes && raid.fua && raid.flush, "{level}: mem: members punch holes: {raid:?}");
        // Through the cache, through a tap, through the volume's own stack
        // and as a device: the same answer.
        let (q, _) = tapped(&v);
        assert_eq!(q.caps(), raid, "{level}");
        assert_eq!(q.lower().caps(), raid, "{level}");
        assert_eq!(v.queue(2).unwrap().caps(), raid, "{level}");
        assert_eq!(BlockDevice::caps(&v), raid, "{level}");
        assert_eq!(v.discards(), raid.discard);
        assert_eq!(q.depth(), 8);
    }
}
