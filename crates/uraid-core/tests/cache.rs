//! The volume cache on `mem:` members: write-back and write-through against
//! a reference model (several queues, flushes, throttling at the dirty
//! limit, eviction), what is on the members after a flush (read through a
//! second, uncached volume over the same members, and scrubbed) on RAID
//! 0, 1, 5, 6, 10 and the declustered draid5 and draid6, FUA, and
//! the coalescer: small sequential writes on RAID 5 issue no member reads.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use uraid_core::cache::{CacheConfig, CacheMode};
use uraid_core::raid::geometry::Geometry;
use uraid_core::cache::journal::{Journal, JournalId};
use uraid_core::io::member::{Member, MemberSpec, OpenMode};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::{BlockQueue, IoBuf, Level, Request, Volume};

fn seed() -> u64 {
    std::env::var("URAID_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::rng().random())
}

/// A volume over fresh `mem:` members, and a second, uncached one over the
/// same members (what a crash would leave: only what reached them).
fn volumes(level: Level, n: usize, chunk: u64, rows: u64, cfg: CacheConfig) -> (Arc<Volume>, Arc<Volume>) {
    volumes_with(level, n, chunk, rows, cfg, "")
}

/// [`volumes`] over members with `limits` (`,lat=US` and the like, as a
/// `mem:` spec takes them).
fn volumes_with(level: Level, n: usize, chunk: u64, rows: u64, cfg: CacheConfig, limits: &str) -> (Arc<Volume>, Arc<Volume>) {
    let spec: MemberSpec = format!("mem:{}{limits}", DATA_OFFSET + rows * chunk).parse().unwrap();
    let ms: Vec<Member> = (0..n).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
    let mut g = Geometry::new(level, n, chunk, rows * chunk).unwrap();
    if level.declustered() {
        // Groups of 2 data chunks and a distributed spare: two groups
        // (cache lines) in a row from 8 members (draid5) or 9 (draid6).
        g = g.with_draid(2, 1).unwrap();
    }
    let raw = Arc::new(ms.iter().map(|m| m.try_clone().unwrap()).collect::<Vec<_>>());
    let v = Volume::new(Arc::new(ms), g, DATA_OFFSET).unwrap();
    if cfg.mode == CacheMode::Journal {
        // A small log (64 MiB), so that it wraps and records retire.
        let jm = Member::open(&"mem:65M".parse().unwrap(), OpenMode { write: true, exclusive: false }).unwrap();
        let id = JournalId { array: [1; 16], volume: [2; 16], journal: [3; 16] };
        v.enable_journaled_cache(cfg, Arc::new(Journal::format(jm, id).unwrap())).unwrap();
    } else {
        v.enable_cache(cfg).unwrap();
    }
    (v, Volume::new(raw, g, DATA_OFFSET).unwrap())
}

/// `threads` queues, each on its own slice of the volume, doing random
/// writes, reads (checked against the model as they complete), flushes
/// and FUA writes, up to `qd` in flight with no two overlapping.
fn workload(v: &Arc<Volume>, model: &mut [u8], seed: u64, threads: usize, ops: usize, qd: usize) {
    let slice = model.len() / threads / 4096 * 4096;
    std::thread::scope(|s| {
        for (t, part) in model.chunks_mut(slice).take(threads).enumerate() {
            let v = v.clone();
            s.spawn(move || {
                let base = (t * slice) as u64;
                let mut rng = StdRng::seed_from_u64(seed + t as u64);
                let mut q = v.queue(qd).unwrap();
                let mut busy: Vec<(u64, u64, bool)> = Vec::new();
                let mut out = Vec::new();
                let check = |out: &mut Vec<uraid_core::Completion>, busy: &mut Vec<(u64, u64, bool)>, part: &[u8]| {
                    for c in out.drain(..) {
                        c.result.as_ref().unwrap_or_else(|e| panic!("request {} failed: {e}", c.tag));
                        let i = busy.iter().position(|b| b.0 == c.tag).expect("known tag");
                        let (off, len, read) = busy.swap_remove(i);
                        if read {
                            let o = (off - base) as usize;
                            assert!(c.buf.unwrap()[..len as usize] == part[o..o + len as usize], "read of {len} at {off} differs from the model");
                        }
                    }
                };
                for op in 0..ops {
                    let len = rng.random_range(1..=64u64) * 4096;
                    let off = base + rng.random_range(0..=(slice as u64 - len) / 4096) * 4096;
                    while busy.iter().any(|&(o, l, _)| o < off + len && off < o + l) || !q.has_room() {
                        q.wait(1, &mut out);
                        check(&mut out, &mut busy, part);
                    }
                    let o = (off - base) as usize;
                    if op % 29 == 28 {
                        // A flush (run wants an idle queue).
                        while q.in_flight() > 0 {
                            q.wait(1, &mut out);
                            check(&mut out, &mut busy, part);
                        }
                        q.run(Request::flush(u64::MAX)).result.unwrap();
                        continue;
                    }
                    if rng.random_bool(0.5) {
                        q.push(Request::read(off, len as usize, IoBuf::new(len as usize), off)).map_err(|r| r.error).unwrap();
                        busy.push((off, len, true));
                    } else {
                        let mut b = IoBuf::new(len as usize);
                        rng.fill_bytes(&mut b);
                        part[o..o + len as usize].copy_from_slice(&b);
                        let mut r = Request::write(off, len as usize, b, off);
                        r.fua = op % 7 == 0;
                        q.push(r).map_err(|r| r.error).unwrap();
                        busy.push((off, len, false));
                    }
                }
                while q.in_flight() > 0 {
                    q.wait(1, &mut out);
                    check(&mut out, &mut busy, part);
                }
            });
        }
    });
}

fn run_mode(mode: CacheMode, level: Level, n: usize, chunk: u64) {
    let s = seed();
    eprintln!("{mode:?} {level} x{n}: seed {s} (URAID_SEED={s} replays it)");
    // A small cache so that writers wait at the dirty limit and lines get
    // evicted.
    let cfg = CacheConfig { mode, size: 6 << 20, dirty_limit: 3 << 20 };
    let (v, raw) = volumes(level, n, chunk, (16 << 20) / chunk, cfg);
    let mut model = vec![0u8; v.capacity() as usize];
    workload(&v, &mut model, s, 3, 300, 8);
    // Everything reads back through the cache...
    assert!(v.read_at(0, model.len()).unwrap() == model, "{mode:?}: volume differs from the model");
    // ... and, once flushed, from the members alone.
    v.flush().unwrap();
    assert!(raw.read_at(0, model.len()).unwrap() == model, "{mode:?}: members differ from the model after a flush");
    if level != Level::Raid0 {
        let r = uraid_core::control::maint::check(&raw, false, &mut |_, _| {}).unwrap();
        assert_eq!(r.mismatches, 0, "{mode:?}: parity or copies disagree after a flush");
    }
    let st = v.cache().unwrap().stats();
    assert_eq!(st.dirty_bytes, 0, "{st:?}");
    if mode.writes_back() {
        assert!(st.writes > 0 && st.writebacks > 0, "{st:?}");
    }
    if mode == CacheMode::Journal {
        assert_eq!(st.journal_records, st.writes, "{st:?}");
        if matches!(level, Level::Raid5 | Level::Raid6 | Level::Draid5 | Level::Draid6) {
            assert!(st.stripe_records > 0, "lines dirty in many rows on RAID 5/6 go through stripe records: {st:?}");
            assert!(st.rows_records > 0, "lines dirty in a few rows on RAID 5/6 go through rows records: {st:?}");
        }
        let j = v.cache().unwrap().journal().unwrap();
        assert_eq!(j.used(), 0, "a flush of the volume retires every record");
    }
    // A read of what was just written (write-back) or read (write-through)
    // is served from the cache.
    let x = vec![0x6bu8; 64 << 10];
    match mode {
        CacheMode::WriteBack | CacheMode::Journal => v.write_at(0, &x).unwrap(),
        _ => drop(v.read_at(0, x.len()).unwrap()),
    }
    let hits = v.cache().unwrap().stats().read_hits;
    v.read_at(0, x.len()).unwrap();
    assert_eq!(v.cache().unwrap().stats().read_hits, hits + 1, "{mode:?}: the read was not served from the cache");
    v.close_cache().unwrap();
}

#[test]
fn writeback_raid5_matches_the_model_and_the_members_after_a_flush() {
    run_mode(CacheMode::WriteBack, Level::Raid5, 4, 64 << 10);
}

#[test]
fn journal_matches_the_model_at_every_level_and_retires_its_records() {
    run_mode(CacheMode::Journal, Level::Raid5, 4, 64 << 10);
    run_mode(CacheMode::Journal, Level::Raid6, 5, 32 << 10);
    run_mode(CacheMode::Journal, Level::Raid10, 3, 64 << 10);
    run_mode(CacheMode::Journal, Level::Raid0, 3, 128 << 10);
}

/// The declustered levels (issue 33): write-back, write-through and the
/// journal (stripe and rows records) as on RAID 5/6, over rows that hold
/// two groups each. (The journal's replay after a power cut, degraded too,
/// is in `powercut.rs`.)
#[test]
fn draid5_and_draid6_match_the_model_in_every_cache_mode() {
    for mode in [CacheMode::WriteBack, CacheMode::WriteThrough, CacheMode::Journal] {
        run_mode(mode, Level::Draid5, 8, 64 << 10);
    }
    run_mode(CacheMode::WriteBack, Level::Draid6, 9, 32 << 10);
    run_mode(CacheMode::Journal, Level::Draid6, 9, 32 << 10);
}

#[test]
fn journal_random_writes_over_more_stripes_than_the_log_holds_never_stall() {
    // RAID 5 x4, chunk 64K: 1024 lines of 192 KiB, whose stripe records
    // (a line dirty in part is recorded before it is written: as a whole
    // line at the worst, which the writers must leave room for) need three
    // times the 64 MiB log. Random 4 KiB writes dirty every
    // line; writers must leave the log room for the stripe records of the
    // lines they dirtied, or the flusher can record none, no record can
    // retire, and everything stops (it did, at 100% CPU).
    let cfg = CacheConfig { mode: CacheMode::Journal, size: 256 << 20, dirty_limit: 192 << 20 };
    let (v, raw) = volumes(Level::Raid5, 4, 64 << 10, 1024, cfg);
    let cap = v.capacity() as usize;
    let s = seed();
    eprintln!("seed {s} (URAID_SEED={s} replays it)");
    let w = v.clone();
    let model = within(240, &format!("seed {s}: 30000 random writes"), move || {
        let mut rng = StdRng::seed_from_u64(s);
        let mut model = vec![0u8; cap];
        let mut q = w.queue(8).unwrap();
        let mut out = Vec::new();
        let mut busy: Vec<(u64, usize)> = Vec::new();
        for tag in 0..30_000u64 {
            let off = rng.random_range(0..cap / 4096) * 4096;
            while busy.iter().any(|&(_, o)| o == off) || !q.has_room() {
                q.wait(1, &mut out);
                for c in out.drain(..) {
                    c.result.unwrap();
                    busy.retain(|b| b.0 != c.tag);
                }
            }
            let mut b = IoBuf::new(4096);
            rng.fill_bytes(&mut b);
            model[off..off + 4096].copy_from_slice(&b);
            q.push(Request::write(off as u64, 4096, b, tag)).map_err(|r| r.error).unwrap();
            busy.push((tag, off));
        }
        while q.in_flight() > 0 {
            q.wait(1, &mut out);
            for c in out.drain(..) {
                c.result.unwrap();
            }
        }
        model
    });
    v.flush().unwrap();
    let c = v.cache().unwrap();
    let j = c.journal().unwrap();
    assert_eq!((j.used(), j.pressure()), (0, 0), "after a flush every record retires and no promise is left");
    assert!(c.stats().rows_records > 0, "random 4 KiB writes are recorded by their rows: {:?}", c.stats());
    for (i, part) in model.chunks(32 << 20).enumerate() {
        assert!(raw.read_at((i * (32 << 20)) as u64, part.len()).unwrap() == part, "seed {s}: the members differ from the model");
    }
    assert_eq!(uraid_core::control::maint::check(&raw, false, &mut |_, _| {}).unwrap().mismatches, 0);
}

#[test]
fn writeback_raid0_raid1_raid6_match_the_model() {
    run_mode(CacheMode::WriteBack, Level::Raid0, 3, 128 << 10);
    run_mode(CacheMode::WriteBack, Level::Raid1, 2, 64 << 10);
    run_mode(CacheMode::WriteBack, Level::Raid6, 5, 32 << 10);
}

#[test]
fn writethrough_matches_the_model_and_never_holds_dirty_data() {
    run_mode(CacheMode::WriteThrough, Level::Raid5, 4, 64 << 10);
    // Write-through: every completed write is on the members already.
    let cfg = CacheConfig { mode: CacheMode::WriteThrough, size: 4 << 20, dirty_limit: 1 << 20 };
    let (v, raw) = volumes(Level::Raid1, 2, 64 << 10, 64, cfg);
    let data = vec![0x5au8; 256 << 10];
    v.read_at(0, 256 << 10).unwrap(); // cached
    v.write_at(0, &data).unwrap();
    assert!(raw.read_at(0, data.len()).unwrap() == data, "a write-through write did not reach the members");
    assert!(v.read_at(0, data.len()).unwrap() == data, "a stale cached read after a write");
}

#[test]
fn small_sequential_writes_become_full_stripes_without_member_reads() {
    // 16 KiB writes one at a time on RAID 5 x4, chunk 64 KiB (a stripe
    // holds 192 KiB of data): without the cache each is a read-modify-
    // write; with write-back they merge into whole lines.
    for (mode, expect_reads) in [(CacheMode::Off, true), (CacheMode::WriteBack, false)] {
        let cfg = CacheConfig { mode, ..CacheConfig::default() };
        let (v, raw) = volumes(Level::Raid5, 4, 64 << 10, 64, cfg);
        let mut q = v.queue(1).unwrap();
        let mut model = vec![0u8; 3 << 20];
        StdRng::seed_from_u64(seed()).fill_bytes(&mut model);
        for (i, piece) in model.chunks(16 << 10).enumerate() {
            let mut b = IoBuf::new(piece.len());
            b.copy_from_slice(piece);
            q.run(Request::write((i * piece.len()) as u64, piece.len(), b, 0)).result.unwrap();
        }
        q.run(Request::flush(0)).result.unwrap();
        let reads = v.raid().stripe_reads();
        assert_eq!(reads > 0, expect_reads, "{mode:?}: {reads} member reads by stripe operations");
        assert!(raw.read_at(0, model.len()).unwrap() == model, "{mode:?}: members differ");
        assert_eq!(uraid_core::control::maint::check(&raw, false, &mut |_, _| {}).unwrap().mismatches, 0);
        if mode == CacheMode::WriteBack {
            let st = v.cache().unwrap().stats();
            assert_eq!(st.full_lines, (3 << 20) / (192 << 10), "every stripe written whole: {st:?}");
            assert!(st.merged > 0, "{st:?}");
        }
    }
}

#[test]
fn writeback_acknowledges_before_the_members_and_flush_and_fua_make_it_durable() {
    // A cache whose flusher rarely runs on its own (high limits) shows the
    // write-back: a completed write is not on the members until a flush
    // or FUA says so.
    let cfg = CacheConfig { mode: CacheMode::WriteBack, size: 64 << 20, dirty_limit: 32 << 20 };
    let (v, raw) = volumes(Level::Raid5, 3, 64 << 10, 64, cfg);
    let mut q = v.queue(4).unwrap();
    let a = vec![0x11u8; 128 << 10];
    let mut b = IoBuf::new(a.len());
    b.copy_from_slice(&a);
    q.run(Request::write(0, a.len(), b, 0)).result.unwrap();
    assert_eq!(v.cache().unwrap().stats().dirty_bytes, a.len() as u64, "the write is held in memory");
    q.run(Request::flush(1)).result.unwrap();
    assert!(raw.read_at(0, a.len()).unwrap() == a, "a flush left the write in the cache");
    assert_eq!(v.cache().unwrap().stats().dirty_bytes, 0);
    let c = vec![0x22u8; 8 << 10];
    let mut b = IoBuf::new(c.len());
    b.copy_from_slice(&c);
    let mut r = Request::write(1 << 20, c.len(), b, 2);
    r.fua = true;
    q.run(r).result.unwrap();
    assert!(raw.read_at(1 << 20, c.len()).unwrap() == c, "a FUA write completed before it was on the members");
    // Discard under write-back: older cached data must not come back.
    let d = vec![0x33u8; 64 << 10];
    v.write_at(2 << 20, &d).unwrap();
    let c = q.run(uraid_core::Request { op: uraid_core::Op::Discard, offset: 2 << 20, len: d.len(), buf: None, tag: 3, fua: false });
    c.result.unwrap();
    v.flush().unwrap();
    assert!(v.read_at(2 << 20, d.len()).unwrap().iter().all(|&x| x == 0), "discarded data came back from the cache");
    assert!(raw.read_at(2 << 20, d.len()).unwrap().iter().all(|&x| x == 0), "discarded data came back on the members");
}

#[test]
fn bad_cache_settings_are_refused() {
    let spec: MemberSpec = format!("mem:{}", DATA_OFFSET + (8 << 20)).parse().unwrap();
    let ms: Vec<Member> = (0..3).map(|_| Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap()).collect();
    let v = Volume::new(Arc::new(ms), Geometry::new(Level::Raid5, 3, 1 << 20, 8 << 20).unwrap(), DATA_OFFSET).unwrap();
    let e = v.enable_cache(CacheConfig { mode: CacheMode::WriteBack, size: 1 << 20, dirty_limit: 1 << 20 }).unwrap_err();
    assert!(e.to_string().contains("one line"), "{e}");
    v.enable_cache(CacheConfig { mode: CacheMode::WriteBack, ..CacheConfig::default() }).unwrap();
    assert!(v.enable_cache(CacheConfig { mode: CacheMode::WriteThrough, ..CacheConfig::default() }).is_err());
    assert!("fast".parse::<CacheMode>().is_err());
    assert_eq!("journal".parse::<CacheMode>().unwrap(), CacheMode::Journal);
    // The journal mode takes a journal device; enable_cache has none.
    let e = v.enable_cache(CacheConfig { mode: CacheMode::Journal, ..CacheConfig::default() }).unwrap_err();
    assert!(e.to_string().contains("journal"), "{e}");
    assert_eq!("writeback".parse::<CacheMode>().unwrap(), CacheMode::WriteBack);
}

#[test]
fn the_dirty_limit_holds_and_nothing_is_lost() {
    // Dirty limit of two lines (RAID 5 x3, 64 KiB chunks: 128 KiB lines);
    // sixteen one-line writes pushed back to back: the third finds the
    // limit reached (the flusher needs far longer than the pushes to write
    // anything) and either waits in its queue (a line the cache holds) or
    // goes around the cache to the members (nothing of its range cached).
    // Members that take 5 ms per I/O make sure the flusher is that slow
    // (unthrottled, a debug build's pushes could lag a flusher that keeps
    // up, and nothing would reach the limit).
    let cfg = CacheConfig { mode: CacheMode::WriteBack, size: 1 << 20, dirty_limit: 256 << 10 };
    let (v, raw) = volumes_with(Level::Raid5, 3, 64 << 10, 64, cfg, ",lat=5000");
    let mut q = v.queue(16).unwrap();
    let mut model = vec![0u8; 16 * (128 << 10)];
    StdRng::seed_from_u64(seed()).fill_bytes(&mut model);
    for (i, line) in model.chunks(128 << 10).enumerate() {
        let mut b = IoBuf::new(line.len());
        b.copy_from_slice(line);
        q.push(Request::write((i * line.len()) as u64, line.len(), b, i as u64)).map_err(|r| r.error).unwrap();
    }
    let mut out = Vec::new();
    while q.in_flight() > 0 {
        q.wait(1, &mut out);
    }
    assert_eq!(out.len(), 16);
    assert!(out.iter().all(|c| c.result.is_ok()));
    let st = v.cache().unwrap().stats();
    assert!(st.throttled + st.written_around > 0, "nothing held back or wrote around at the dirty limit: {st:?}");
    assert!(st.dirty_bytes <= (256 << 10) + (128 << 10), "{st:?}");
    q.run(Request::flush(99)).result.unwrap();
    assert!(raw.read_at(0, model.len()).unwrap() == model, "members differ after the flush");
}

/// Runs `f` on a thread of its own and returns what it returns; panics
/// with `what` when it takes over `secs` seconds (a stall).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} did not complete in {secs} s: stalled"))
}

#[test]
fn journal_zeroings_and_discards_never_stall() {
    use uraid_core::io::request::Op;
    // RAID 5 x4, chunk 64K: lines of 192 KiB, a 64 MiB log.
    let cfg = CacheConfig { mode: CacheMode::Journal, ..CacheConfig::default() };
    // 1. One zeroing over 80 MiB the cache holds (clean, after a write-back):
    //    it used to promise log room for every line held, more than the
    //    log could ever give, and waited for room for ever.
    let (v, raw) = volumes(Level::Raid5, 4, 64 << 10, 1024, cfg);
    let line = 192usize << 10;
    let held = 80usize << 20;
    let w = v.clone();
    within(120, "a zeroing over 80 MiB of cached lines", move || {
        let mut q = w.queue(4).unwrap();
        for i in 0..held / line {
            let mut b = IoBuf::new(line);
            b.fill(0x5a);
            q.run(Request::write((i * line) as u64, line, b, i as u64)).result.unwrap();
        }
        w.flush().unwrap();
        q.run(Request { op: Op::WriteZeroes { no_hole: false }, offset: 0, len: held, buf: None, tag: 0, fua: false }).result.unwrap();
        w.flush().unwrap();
    });
    for at in (0..held).step_by(16 << 20) {
        assert!(v.read_at(at as u64, 16 << 20).unwrap().iter().all(|&x| x == 0), "the zeroed range does not read back as zeroes");
        assert!(raw.read_at(at as u64, 16 << 20).unwrap().iter().all(|&x| x == 0), "the members do not hold the zeroes");
    }
    // 2. Whole-line zeroings and discards over lines the cache does not
    //    hold dirty no line: their records (512 bytes each) used to retire
    //    only when a line did, so 110000 of them filled the log and the
    //    writers waited for room for ever.
    let (v, _) = volumes(Level::Raid5, 4, 64 << 10, 1024, cfg);
    let w = v.clone();
    let lines = (v.capacity() as usize) / line;
    within(240, "110000 zeroings and discards", move || {
        let mut q = w.queue(8).unwrap();
        let mut out = Vec::new();
        for i in 0..110_000usize {
            while !q.has_room() {
                q.wait(1, &mut out);
                for c in out.drain(..) {
                    c.result.unwrap();
                }
            }
            let op = if i % 2 == 0 { Op::Discard } else { Op::WriteZeroes { no_hole: false } };
            let r = Request { op, offset: ((i % lines) * line) as u64, len: line, buf: None, tag: i as u64, fua: false };
            q.push(r).map_err(|r| r.error).unwrap();
        }
        while q.in_flight() > 0 {
            q.wait(1, &mut out);
            for c in out.drain(..) {
                c.result.unwrap();
            }
        }
    });
    v.flush().unwrap();
    let j = v.cache().unwrap().journal().unwrap().clone();
    assert_eq!(j.used(), 0, "after a flush every zeroes record retires");
}

/// A journal device of its own that fails a write: its loss is recorded
/// (the hook the array persists with) only once what the journal held is
/// durable on the members. Recorded at once, a crash in between found the
/// journal marked stale, not replayed, and acknowledged writes that were
/// only in it and in the cache were lost.
#[test]
fn a_lost_journal_is_recorded_only_once_what_it_held_is_on_the_members() {
    use std::sync::atomic::{AtomicU8, Ordering};
    let spec: MemberSpec = format!("mem:{}", DATA_OFFSET + 64 * (64 << 10)).parse().unwrap();
    let plans: Vec<Arc<uraid_core::io::fault::Faults>> = (0..2).map(|_| Arc::new(uraid_core::io::fault::Faults::new())).collect();
    let ms: Vec<Member> = plans
        .iter()
        .map(|f| {
            let mut m = Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap();
            f.attach(&mut m);
            f.volatile_cache();
            m
        })
        .collect();
    let g = Geometry::new(Level::Raid1, 2, 64 << 10, 64 * (64 << 10)).unwrap();
    let raw = Volume::new(Arc::new(ms.iter().map(|m| m.try_clone().unwrap()).collect()), g, DATA_OFFSET).unwrap();
    let v = Volume::new(Arc::new(ms), g, DATA_OFFSET).unwrap();
    let jfaults = Arc::new(uraid_core::io::fault::Faults::new());
    let mut jm = Member::open(&"mem:65M".parse().unwrap(), OpenMode { write: true, exclusive: false }).unwrap();
    jfaults.attach(&mut jm);
    let id = JournalId { array: [1; 16], volume: [2; 16], journal: [3; 16] };
    let j = Arc::new(Journal::format(jm, id).unwrap());
    // 0: not recorded; 1: recorded with A durable on the members; 2:
    // recorded while a crash could still lose A.
    let recorded = Arc::new(AtomicU8::new(0));
    let (r, rv, rp) = (recorded.clone(), raw.clone(), plans.clone());
    j.set_on_lost(move |_| {
        let durable = rv.read_at(0, 4096).unwrap().iter().all(|&x| x == 0xA1) && rp.iter().all(|f| f.unflushed() == 0);
        // The first call is the one that counts (the array persists then).
        let _ = r.compare_exchange(0, if durable { 1 } else { 2 }, Ordering::AcqRel, Ordering::Acquire);
    });
    v.enable_journaled_cache(CacheConfig { mode: CacheMode::Journal, ..CacheConfig::default() }, j.clone()).unwrap();
    let mut q = v.queue(4).unwrap();
    // A: acknowledged once its record is on the journal; its line, dirty
    // in part, waits for the flusher.
    let mut a = IoBuf::new(4096);
    a.fill(0xA1);
    q.run(Request::write(0, 4096, a, 1)).result.unwrap();
    // The journal fails from now on; B's record fails: the journal is lost.
    jfaults.fail_writes(4096..(65 << 20));
    let mut b = IoBuf::new(4096);
    b.fill(0xB2);
    q.run(Request::write(1 << 20, 4096, b, 2)).result.unwrap();
    assert!(j.is_lost(), "the journal's failed write did not lose it");
    assert_eq!(
        recorded.load(Ordering::Acquire),
        1,
        "the loss must be recorded (B is acknowledged, after it) and only once A was durable on the members (2: before)"
    );
    assert!(raw.read_at(1 << 20, 4096).unwrap().iter().all(|&x| x == 0xB2), "B is not on the members");
}
