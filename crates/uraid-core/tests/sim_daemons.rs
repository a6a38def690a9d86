//! The long-lived threads of uraid-core on a virtual clock
//! ([`uraid_core::clock::Virtual`]): the volume cache's flusher and the
//! write-intent bitmap's daemon are started through `clock::spawn` and
//! wait through `clock::wait_timeout_while`, so a simulation that moves
//! its clock moves their periods: dirty lines are written back and idle
//! regions cleared after virtual seconds or hours that take milliseconds
//! of real time, and nothing happens while the virtual clock stands still.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uraid_core::cache::{CacheConfig, CacheMode, DIRTY_EXPIRE_NS, FLUSH_INTERVAL};
use uraid_core::clock::{self, Virtual};
use uraid_core::io::member::{MemSpec, Member, MemberSpec, OpenMode};
use uraid_core::raid::bitmap::Bitmap;
use uraid_core::raid::health::Health;
use uraid_core::raid::DATA_OFFSET;
use uraid_core::{BlockQueue, Geometry, IoBuf, Level, Request, Volume};

/// Real time a test gives a daemon to act once virtual time passed its
/// period (it acts within a few ms of real time when it keeps the
/// virtual clock; one on the machine's clock waits hours or a day here).
const PATIENCE: Duration = Duration::from_secs(30);

/// Real time the tests wait with the virtual clock standing still, to see
/// that a daemon does nothing meanwhile.
const STILL: Duration = Duration::from_millis(300);

fn members(n: usize, size: u64) -> Arc<Vec<Member>> {
    let spec = MemberSpec::Mem(MemSpec { size, limits: Default::default() });
    Arc::new((0..n).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect())
}

/// Moves this thread's (virtual) clock on by `step` at a time, letting
/// the daemons run between steps, until `done`; false after [`PATIENCE`]
/// of real time.
fn drive(step: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !done() {
        if t0.elapsed() > PATIENCE {
            return false;
        }
        clock::sleep(step);
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// The bitmap's daemon, every virtual hour, clears a region a write left
/// dirty at its second look (the first sees the write), without waiting
/// an hour of real time; with the clock standing still it clears nothing.
#[test]
fn the_bitmap_daemon_clears_idle_regions_on_virtual_time() {
    const HOUR: Duration = Duration::from_secs(3600);
    let region = 64 << 10;
    let end = DATA_OFFSET + (4 << 20);
    let ms = members(2, end);
    let b = Arc::new(Bitmap::create(ms, Arc::new(Health::new(2)), region, end).unwrap());
    let clock = Virtual::new();
    let _on = clock.install();
    let daemon = b.start_daemon(HOUR);
    b.start_write(DATA_OFFSET + 4 * region, 4096).unwrap();
    b.end_write(DATA_OFFSET + 4 * region, 4096);
    let dirty = b.dirty();
    assert_eq!(dirty.len(), 1, "the write left no dirty region");
    std::thread::sleep(STILL);
    assert_eq!(b.dirty(), dirty, "the daemon cleared a region with the virtual clock standing still");
    let (v0, t0) = (clock.ns(), Instant::now());
    let cleared = drive(HOUR / 8, || b.dirty().is_empty());
    let (virt, real) = (Duration::from_nanos(clock.ns() - v0), t0.elapsed());
    println!("bitmap daemon: region cleared after {virt:?} of virtual time, {real:?} of real time");
    assert!(cleared, "the daemon did not clear the idle region in {PATIENCE:?} of real time ({virt:?} of virtual time)");
    assert!(virt >= 2 * HOUR, "cleared after {virt:?} of virtual time: before its second look");
    // (Counted once the cleared bits are on the members: after the join.)
    drop(daemon);
    assert_eq!(b.stats().cleared, 1);
    assert_eq!(Arc::strong_count(&b), 1, "the daemon thread still holds the bitmap");
}

/// The write-back cache's flusher keeps the virtual clock: a line dirty
/// as a whole goes at its next look (every [`FLUSH_INTERVAL`] of virtual
/// time), a line dirty in part once it is [`DIRTY_EXPIRE_NS`] old in
/// virtual time; both reach the members, and neither moves while the
/// clock stands still. The partial line is written a virtual day ahead
/// of the machine's clock: a flusher on the machine's clock would not
/// find it expired for a day.
#[test]
fn the_cache_flusher_writes_back_on_virtual_time() {
    let (chunk, rows) = (64 << 10, 64);
    let ms = members(3, DATA_OFFSET + rows * chunk);
    let raw = Arc::new(ms.iter().map(|m| m.try_clone().unwrap()).collect::<Vec<_>>());
    let g = Geometry::new(Level::Raid5, 3, chunk, rows * chunk).unwrap();
    let clock = Virtual::new();
    let _on = clock.install();
    let v = Volume::new(ms, g, DATA_OFFSET).unwrap();
    v.enable_cache(CacheConfig { mode: CacheMode::WriteBack, size: 4 << 20, dirty_limit: 2 << 20 }).unwrap();
    let cache = v.cache().unwrap().clone();
    let line = 2 * chunk; // RAID 5 of 3: a stripe's data
    let mut q = v.queue(4).unwrap();
    let write = |q: &mut uraid_core::Queue, offset: u64, len: usize, byte: u8| {
        let mut buf = IoBuf::new(len);
        buf.fill(byte);
        q.run(Request::write(offset, len, buf, 0)).result.unwrap();
    };
    let on_members = |offset: u64, len: usize, byte: u8| {
        let plain = Volume::new(raw.clone(), g, DATA_OFFSET).unwrap();
        let c = plain.queue(1).unwrap().run(Request::read(offset, len, IoBuf::new(len), 0));
        c.result.unwrap();
        c.buf.unwrap()[..len].iter().all(|&b| b == byte)
    };

    // A whole line: written back at the flusher's next look.
    write(&mut q, 0, line as usize, 0xa1);
    assert_eq!(cache.stats().dirty_bytes, line);
    std::thread::sleep(STILL);
    assert_eq!(cache.stats().dirty_bytes, line, "the flusher looked with the virtual clock standing still");
    let (v0, t0) = (clock.ns(), Instant::now());
    let clean = drive(FLUSH_INTERVAL / 4, || cache.stats().dirty_bytes == 0);
    let (virt, real) = (Duration::from_nanos(clock.ns() - v0), t0.elapsed());
    println!("cache flusher: a whole line written back after {virt:?} of virtual time, {real:?} of real time");
    assert!(clean, "a whole dirty line was not written back in {PATIENCE:?} of real time ({virt:?} virtual)");
    assert!(on_members(0, line as usize, 0xa1), "the whole line is not on the members");

    // A line dirty in part, a virtual day ahead of the machine's clock.
    clock.advance(Duration::from_secs(24 * 3600));
    write(&mut q, 3 * line, 4096, 0xb2);
    assert_eq!(cache.stats().dirty_bytes, 4096);
    let (v0, t0) = (clock.ns(), Instant::now());
    let clean = drive(FLUSH_INTERVAL, || cache.stats().dirty_bytes == 0);
    let (virt, real) = (Duration::from_nanos(clock.ns() - v0), t0.elapsed());
    println!("cache flusher: a partial line written back after {virt:?} of virtual time, {real:?} of real time");
    assert!(clean, "a partial dirty line was not written back in {PATIENCE:?} of real time ({virt:?} virtual)");
    assert!(virt >= Duration::from_nanos(DIRTY_EXPIRE_NS), "written back after {virt:?}: before it expired");
    assert!(on_members(3 * line, 4096, 0xb2), "the partial line is not on the members");
    assert!(cache.stats().writebacks >= 2);
}
