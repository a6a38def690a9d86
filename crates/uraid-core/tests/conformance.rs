//! One conformance suite for every layer and member kind: the same checks
//! of data, flush, FUA, discard, write-zeroes, refusals and member faults,
//! run on
//!
//! - the member layer alone (a one-member RAID 0 is the identity map) on
//!   each member kind: `mem:`, a regular file, a loop device;
//! - the RAID layer at every level (0, 1, 10, 5, 6), on `mem:` members and
//!   RAID 5 on files and loop devices too;
//! - the cache layer over RAID in each mode (write-through, write-back,
//!   journal), and write-back over RAID 0 and RAID 1.
//!
//! Every case goes through the top of its stack ([`Volume::queue`]) and
//! checks the members' view through the RAID layer below any cache
//! ([`Volume::raid`]). In the manner of cloud-hypervisor's block-backend
//! tests: what one layer promises, every layer keeps.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use rand::{Rng, RngCore, SeedableRng};
use uraid_core::cache::journal::{Journal, JournalId};
use uraid_core::cache::{Cache, CacheConfig, CacheMode};
use uraid_core::control::superblock::DATA_OFFSET;
use uraid_core::io::fault::Faults;
use uraid_core::io::member::{MemberSpec, OpenMode};
use uraid_core::raid::health::MemberState;
use uraid_core::{BlockQueue, Completion, ErrorKind, Geometry, IoBuf, Level, Member, Op, Request, Volume};

const CHUNK: u64 = 64 << 10;
const ROWS: u64 = 48;
const RW: OpenMode = OpenMode { write: true, exclusive: true };

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Mem,
    File,
    Loop,
}

/// Backing files and loop devices of a case, removed at the end.
struct Backing {
    dir: PathBuf,
    loops: Vec<String>,
}

impl Drop for Backing {
    fn drop(&mut self) {
        for l in &self.loops {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn seed() -> u64 {
    std::env::var("URAID_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::rng().random())
}

/// `n` members of `kind`, each holding the data area of ROWS chunks.
fn members(kind: Kind, n: usize, name: &str) -> (Vec<Member>, Backing) {
    let size = DATA_OFFSET + ROWS * CHUNK;
    let dir = std::env::temp_dir().join(format!("uraid-conformance-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut b = Backing { dir: dir.clone(), loops: Vec::new() };
    let mut ms = Vec::new();
    for i in 0..n {
        let spec: MemberSpec = match kind {
            Kind::Mem => format!("mem:{size}").parse().unwrap(),
            Kind::File | Kind::Loop => {
                let f = dir.join(format!("m{i}"));
                std::fs::File::create(&f).unwrap().set_len(size).unwrap();
                if kind == Kind::File {
                    MemberSpec::Path(f)
                } else {
                    // One attach at a time: parallel `losetup -f` may pick the
                    // same free device.
                    static ATTACH: std::sync::Mutex<()> = std::sync::Mutex::new(());
                    let _one = ATTACH.lock().unwrap_or_else(|e| e.into_inner());
                    let out = Command::new("losetup").args(["-f", "--show", "--direct-io=on"]).arg(&f).output().expect("losetup (util-linux)");
                    assert!(out.status.success(), "losetup: {} (the loop-device cases need root)", String::from_utf8_lossy(&out.stderr));
                    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
                    b.loops.push(dev.clone());
                    MemberSpec::Path(dev.into())
                }
            }
        };
        let mut m = Member::open(&spec, RW).unwrap();
        // Every member gets an (empty) fault plan: the fault checks arm it.
        Arc::new(Faults::new()).attach(&mut m);
        ms.push(m);
    }
    (ms, b)
}

struct Case {
    name: &'static str,
    kind: Kind,
    level: Level,
    n: usize,
    cache: CacheMode,
}

struct Stack {
    vol: Arc<Volume>,
    /// A second handle on the journal's device (journal mode).
    journal: Option<Member>,
    faults: Vec<Arc<Faults>>,
    bs: usize,
    _backing: Backing,
}

fn build(c: &Case) -> Stack {
    let (ms, backing) = members(c.kind, c.n, c.name);
    let faults = ms.iter().map(|m| Faults::of(m).unwrap()).collect();
    let g = Geometry::new(c.level, c.n, CHUNK, ROWS * CHUNK).unwrap();
    let vol = Volume::new(Arc::new(ms), g, DATA_OFFSET).unwrap();
    let cfg = CacheConfig { mode: c.cache, ..CacheConfig::default() };
    let mut journal = None;
    match c.cache {
        CacheMode::Off => {}
        CacheMode::Journal => {
            let jm = Member::open(&"mem:65M".parse().unwrap(), RW).unwrap();
            journal = Some(jm.try_clone().unwrap());
            let id = JournalId { array: [1; 16], volume: [2; 16], journal: [3; 16] };
            vol.enable_journaled_cache(cfg, Arc::new(Journal::format(jm, id).unwrap())).unwrap();
        }
        _ => vol.enable_cache(cfg).unwrap(),
    }
    let bs = vol.block_size() as usize;
    Stack { vol, journal, faults, bs, _backing: backing }
}

fn buf_of(data: &[u8]) -> IoBuf {
    let mut b = IoBuf::new(data.len());
    b.copy_from_slice(data);
    b
}

/// Runs one request on a fresh queue of the top of the stack.
fn run(v: &Arc<Volume>, req: Request) -> Completion {
    v.queue(4).unwrap().run(req)
}

fn read_top(v: &Arc<Volume>, off: u64, len: usize) -> Vec<u8> {
    v.read_at(off, len).unwrap_or_else(|e| panic!("read of {len} at {off}: {e}"))
}

/// What the members hold, read through the RAID layer (below any cache).
fn read_members(v: &Arc<Volume>, off: u64, len: usize) -> Vec<u8> {
    v.raid().read_at(off, len).unwrap_or_else(|e| panic!("member read of {len} at {off}: {e}"))
}

/// A `mem:` copy of every byte of `m` as it is now.
fn copy_of(m: &Member) -> Member {
    let c = Member::open(&format!("mem:{}", m.size()).parse().unwrap(), RW).unwrap();
    let mut buf = IoBuf::new(1 << 20);
    let mut off = 0;
    while off < m.size() {
        let n = (m.size() - off).min(1 << 20) as usize;
        m.read_exact_at(&mut buf[..n], off).unwrap();
        c.write_all_at(&buf[..n], off).unwrap();
        off += n as u64;
    }
    c
}

/// What a crash at this moment leaves: a volume over copies of the
/// members, with the copy of the journal (journal mode) replayed onto it
/// as the next assemble would. Only what was durable is there.
fn after_crash(st: &Stack) -> Arc<Volume> {
    let v = &st.vol;
    let ms: Vec<Member> = v.raid().members().iter().map(copy_of).collect();
    let view = Volume::new(Arc::new(ms), *v.raid().geometry(), DATA_OFFSET).unwrap();
    if let Some(jm) = &st.journal {
        let j = Journal::open(copy_of(jm)).unwrap();
        j.replay(view.raid(), Cache::line_for(view.raid())).unwrap();
    }
    view
}

fn assert_same(what: &str, c: &Case, got: &[u8], want: &[u8], base: u64) {
    if got != want {
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        panic!("{}: {what}: first difference at volume byte {} ({} != {})", c.name, base + i as u64, got[i], want[i]);
    }
}

fn conform(c: &Case) {
    let s = seed();
    println!("{}: seed {s} (URAID_SEED={s} replays it)", c.name);
    let mut rng = rand::rngs::StdRng::seed_from_u64(s);
    let st = build(c);
    let v = &st.vol;
    let cap = v.capacity();
    let bs = st.bs;
    let mut model = vec![0u8; cap as usize];

    // Refusals: nothing is written.
    let bad = [
        (Request::write(bs as u64 / 2, bs, buf_of(&vec![1; bs]), 1), ErrorKind::InvalidInput),
        (Request::write(0, bs / 2, buf_of(&vec![1; bs]), 2), ErrorKind::InvalidInput),
        (Request::write(cap, bs, buf_of(&vec![1; bs]), 3), ErrorKind::OutOfRange),
        (Request::write(cap - bs as u64, 2 * bs, buf_of(&vec![1; 2 * bs]), 4), ErrorKind::OutOfRange),
        (Request::write(0, 2 * bs, buf_of(&vec![1; bs]), 5), ErrorKind::InvalidInput),
        (Request::read(0, 0, IoBuf::new(bs), 6), ErrorKind::InvalidInput),
    ];
    for (req, kind) in bad {
        let what = format!("{:?} of {} at {}", req.op, req.len, req.offset);
        let e = run(v, req).result.expect_err(&what);
        assert_eq!(e.kind(), kind, "{}: {what}: {e}", c.name);
    }
    assert_same("after refusals", c, &read_top(v, 0, cap as usize), &model, 0);

    // A queue holds `depth` requests and refuses one more with Busy.
    {
        let mut q = v.queue(2).unwrap();
        for t in 0..2 {
            q.push(Request::read(0, bs, IoBuf::new(bs), t)).unwrap();
        }
        let r = q.push(Request::read(0, bs, IoBuf::new(bs), 9)).expect_err("a third request on a queue of 2");
        assert_eq!(r.error.kind(), ErrorKind::Busy, "{}", c.name);
        let mut out = Vec::new();
        while out.len() < 2 {
            q.wait(2 - out.len(), &mut out);
        }
        assert!(out.iter().all(|c| c.result.is_ok()));
    }

    // Data: concurrent non-overlapping writes of 1 block to 3 chunks, read
    // back as they were written, through one queue of depth 8.
    let mut q = v.queue(8).unwrap();
    for round in 0..6 {
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut tag = 0;
        while taken.len() < 8 {
            let len = (rng.random_range(1..=(3 * CHUNK as usize) / bs)) * bs;
            let off = rng.random_range(0..(cap - len as u64) / bs as u64) * bs as u64;
            if taken.iter().any(|&(a, b)| off < b && a < off + len as u64) {
                continue;
            }
            taken.push((off, off + len as u64));
            let mut data = vec![0u8; len];
            rng.fill_bytes(&mut data);
            model[off as usize..off as usize + len].copy_from_slice(&data);
            let mut req = Request::write(off, len, buf_of(&data), tag);
            req.fua = round % 3 == 2 && tag % 2 == 0;
            q.push(req).unwrap();
            tag += 1;
        }
        let mut out = Vec::new();
        while out.len() < 8 {
            q.wait(8 - out.len(), &mut out);
        }
        for done in &out {
            assert!(done.result.is_ok(), "{}: write {}: {:?}", c.name, done.tag, done.result);
            let (a, b) = taken[done.tag as usize];
            assert_eq!(*done.result.as_ref().unwrap(), (b - a) as usize, "{}: bytes reported", c.name);
        }
    }
    drop(q);
    assert_same("read back", c, &read_top(v, 0, cap as usize), &model, 0);

    // FUA: durable when it completes, whatever the cache: a crash right
    // after keeps it.
    let off = 5 * CHUNK + bs as u64;
    let data: Vec<u8> = (0..2 * bs).map(|i| (i % 251) as u8 ^ 0x5a).collect();
    let mut req = Request::write(off, data.len(), buf_of(&data), 0);
    req.fua = true;
    run(v, req).result.unwrap();
    model[off as usize..off as usize + data.len()].copy_from_slice(&data);
    assert_same("a FUA write after a crash", c, &read_top(&after_crash(&st), off, data.len()), &data, off);

    // Flush: every completed write is durable.
    run(v, Request::flush(0)).result.unwrap();
    assert_same("everything after a flush and a crash", c, &read_top(&after_crash(&st), 0, cap as usize), &model, 0);

    // Write-zeroes (with and without NO_HOLE) and discard read back as zeros.
    let cases = [(Op::WriteZeroes { no_hole: false }, 2 * CHUNK + 3 * bs as u64, CHUNK as usize), (Op::WriteZeroes { no_hole: true }, 9 * CHUNK, 3 * CHUNK as usize), (Op::Discard, 20 * CHUNK, 4 * CHUNK as usize)];
    for (op, off, len) in cases {
        let r = run(v, Request { op, offset: off, len, buf: None, tag: 0, fua: false });
        assert_eq!(r.result.as_ref().ok(), Some(&len), "{}: {op:?}: {:?}", c.name, r.result);
        model[off as usize..off as usize + len].fill(0);
        assert_same(&format!("{op:?} reads back as zeros"), c, &read_top(v, off, len), &model[off as usize..off as usize + len], off);
    }
    run(v, Request::flush(0)).result.unwrap();
    assert_same("zeroed, flushed and crashed", c, &read_top(&after_crash(&st), 0, cap as usize), &model, 0);

    // Volume::flush writes everything back, also from a journal: the
    // members alone hold the model.
    v.flush().unwrap();
    assert_same("the members after Volume::flush", c, &read_members(v, 0, cap as usize), &model, 0);

    // Member faults: reads of member 0 fail with EIO. RAID 0 fails the
    // read (and leaves the member in: md does not fail a RAID 0 member);
    // the redundant levels answer from the others and fail the member.
    let f = &st.faults[0];
    f.fail_reads(0..u64::MAX);
    // Below any cache: the read must reach the members.
    let got = v.raid().read_at(0, cap as usize);
    match c.level {
        Level::Raid0 => {
            let e = got.expect_err("a RAID 0 read over a failing member");
            assert_eq!(e.kind(), ErrorKind::Io, "{}: {e}", c.name);
            assert!(e.to_string().contains("Input/output error") || e.to_string().contains("EIO"), "{}: {e}", c.name);
        }
        _ => {
            let got = got.unwrap_or_else(|e| panic!("{}: a redundant read over one failing member: {e}", c.name));
            assert_same("a degraded read", c, &got, &model, 0);
            assert_eq!(v.raid().health().state(0), MemberState::Faulty, "{}: member 0 after its read error", c.name);
            // Writes go on, degraded, and read back.
            let data = vec![0xc3u8; 2 * CHUNK as usize];
            v.write_at(CHUNK, &data).unwrap();
            model[CHUNK as usize..3 * CHUNK as usize].copy_from_slice(&data);
            v.flush().unwrap();
            assert_same("written degraded", c, &read_members(v, 0, cap as usize), &model, 0);
        }
    }
    assert!(f.injected() > 0, "{}: the fault plan was never asked", c.name);
    if v.cache().is_some() {
        v.close_cache().unwrap();
    }
}

macro_rules! cases {
    ($($test:ident: $kind:ident, $level:ident x $n:literal, $cache:ident;)*) => {$(
        #[test]
        fn $test() {
            conform(&Case { name: stringify!($test), kind: Kind::$kind, level: Level::$level, n: $n, cache: CacheMode::$cache });
        }
    )*};
}

cases! {
    member_mem: Mem, Raid0 x 1, Off;
    member_file: File, Raid0 x 1, Off;
    member_loop: Loop, Raid0 x 1, Off;
    raid0_mem: Mem, Raid0 x 4, Off;
    raid1_mem: Mem, Raid1 x 2, Off;
    raid10_mem: Mem, Raid10 x 4, Off;
    raid5_mem: Mem, Raid5 x 4, Off;
    raid6_mem: Mem, Raid6 x 5, Off;
    raid5_file: File, Raid5 x 3, Off;
    raid5_loop: Loop, Raid5 x 3, Off;
    raid6_loop: Loop, Raid6 x 4, Off;
    writethrough_raid5: Mem, Raid5 x 4, WriteThrough;
    writeback_raid5: Mem, Raid5 x 4, WriteBack;
    writeback_raid0: Mem, Raid0 x 2, WriteBack;
    writeback_raid1_file: File, Raid1 x 2, WriteBack;
    journal_raid5: Mem, Raid5 x 4, Journal;
    journal_raid6_loop: Loop, Raid6 x 4, Journal;
}
