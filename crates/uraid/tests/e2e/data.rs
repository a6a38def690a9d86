//! Data integrity through the engine: random writes of random sizes at random
//! sector-aligned offsets, checked against an in-memory model of the whole
//! volume, with the blocking calls and with a `Queue` holding many requests
//! in flight; on `mem:` members, regular files and loop devices. For files
//! and loop devices the array is persisted, stopped, reassembled from the
//! members given in a random order and checked again, and the bytes on the
//! members are checked against the RAID 0 layout computed here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use uraid_core::control::array::{self, CreateOptions};
use uraid_core::io::request::MAX_REQUEST;
use uraid_core::{BlockQueue, Completion, ErrorKind, IoBuf, MemberSpec, Op, Request, Volume};

use crate::util::*;

/// Largest request of the random workload.
const MAX_IO: u64 = 4 << 20;
const SECTOR: u64 = 512;

/// How much work one configuration gets.
#[derive(Clone, Copy)]
struct Work {
    /// Blocking `write_at` / `read_at` calls.
    blocking: usize,
    /// Requests per queue phase.
    queued: usize,
    /// Queue depths, one phase each.
    depths: &'static [usize],
}

/// The layout the tests expect (md raid0), computed here without the
/// library's geometry: logical chunk `c` lives on member `c % n` at byte
/// `DATA_OFFSET + (c / n) * chunk`; one member is the identity map.
#[derive(Clone, Copy, Debug)]
struct Layout {
    n: u64,
    chunk: u64,
}

impl Layout {
    fn place(&self, logical: u64) -> (u64, u64) {
        if self.n == 1 {
            return (0, DATA_OFFSET + logical);
        }
        let c = logical / self.chunk;
        (c % self.n, DATA_OFFSET + (c / self.n) * self.chunk + logical % self.chunk)
    }

    /// Capacity of RAID 0 over members of `sizes` bytes: whole chunks of
    /// the smallest member's data area on every member (also with one
    /// member, as `create` makes it).
    fn capacity(&self, sizes: &[u64]) -> u64 {
        let min = *sizes.iter().min().unwrap();
        (min - DATA_OFFSET) / self.chunk * self.chunk * self.n
    }
}

/// Panics with where the first differing byte lives, when `got` (read at
/// volume offset `off`) differs from the model.
fn check_read(label: &str, how: &str, layout: Layout, off: u64, got: &[u8], want: &[u8]) {
    if let Some((i, count)) = first_difference(got, want) {
        let at = off + i as u64;
        let (m, mo) = layout.place(at);
        panic!(
            "{label}: {how} of {} bytes at volume offset {off} returned wrong data: {count} byte(s) differ, the \
             first at volume offset {at} (chunk {}, member {m} byte {mo}): got {:#04x}, want {:#04x}",
            got.len(),
            at / layout.chunk,
            got.get(i).copied().unwrap_or(0),
            want.get(i).copied().unwrap_or(0),
        );
    }
}

/// A random sector-aligned range inside a volume of `cap` bytes: mostly
/// small, some of a few MiB, some spanning many chunks while starting and
/// ending inside a chunk, some chunk-aligned, some at the very end.
fn random_range(rng: &mut SmallRng, cap: u64, chunk: u64) -> (u64, usize) {
    let sectors_in_chunk = chunk / SECTOR;
    let mid = |rng: &mut SmallRng| SECTOR * rng.random_range(1..sectors_in_chunk.max(2));
    let (off, len) = match rng.random_range(0..12) {
        0..=4 => (SECTOR * rng.random_range(0..cap / SECTOR), SECTOR * rng.random_range(1..=16)),
        5..=6 => (SECTOR * rng.random_range(0..cap / SECTOR), SECTOR * rng.random_range(1..=512)),
        7..=8 => {
            let most = (MAX_IO / chunk).saturating_sub(1).max(1);
            let kmax = [2, 8, 64, 1024][rng.random_range(0..4)].min(most);
            let c = rng.random_range(0..(cap / chunk).max(1));
            (c * chunk + mid(rng), rng.random_range(1..=kmax) * chunk + mid(rng))
        }
        9 => (SECTOR * rng.random_range(0..cap / SECTOR), SECTOR * rng.random_range(1..=MAX_IO / SECTOR)),
        10 => {
            let c = rng.random_range(0..(cap / chunk).max(1));
            (c * chunk, chunk * rng.random_range(1..=(MAX_IO / chunk).min(4)))
        }
        _ => {
            let len = SECTOR * rng.random_range(1..=(2 * chunk / SECTOR).min(MAX_IO / SECTOR));
            (cap.saturating_sub(len), len)
        }
    };
    let len = len.min(cap / SECTOR * SECTOR).max(SECTOR);
    let off = off.min(cap - len);
    (off, len as usize)
}

fn overlaps(a: u64, alen: usize, b: u64, blen: usize) -> bool {
    a < b + blen as u64 && b < a + alen as u64
}

/// Blocking calls: `Volume::write_at` / `read_at`.
fn blocking_phase(label: &str, vol: &Arc<Volume>, model: &mut [u8], layout: Layout, rng: &mut SmallRng, ops: usize) {
    let cap = model.len() as u64;
    for _ in 0..ops {
        let (off, len) = random_range(rng, cap, layout.chunk);
        let range = off as usize..off as usize + len;
        if rng.random_bool(0.6) {
            let mut data = vec![0u8; len];
            rng.fill_bytes(&mut data);
            vol.write_at(off, &data).unwrap_or_else(|e| panic!("{label}: write_at({off}, {len} bytes) failed: {e}"));
            model[range].copy_from_slice(&data);
        } else {
            let got = vol.read_at(off, len).unwrap_or_else(|e| panic!("{label}: read_at({off}, {len}) failed: {e}"));
            check_read(label, "read_at", layout, off, &got, &model[range]);
        }
    }
}

struct InFlight {
    op: Op,
    offset: u64,
    len: usize,
    buf_len: usize,
}

/// Drives a `Queue` of `depth` directly: keeps it full of reads, writes and
/// flushes (no two in-flight requests overlap when one of them writes, so
/// the model is exact), waits sometimes for one completion and sometimes for
/// all of them.
fn queue_phase(
    label: &str,
    vol: &Arc<Volume>,
    model: &mut [u8],
    layout: Layout,
    rng: &mut SmallRng,
    depth: usize,
    ops: usize,
) {
    let cap = model.len() as u64;
    let mut q = vol.queue(depth).unwrap_or_else(|e| panic!("{label}: cannot make a queue of depth {depth}: {e}"));
    let mut pending: HashMap<u64, InFlight> = HashMap::new();
    let mut out: Vec<Completion> = Vec::new();
    let (mut issued, mut tag, mut peak) = (0usize, 0u64, 0usize);
    while issued < ops || q.in_flight() > 0 {
        while issued < ops && q.has_room() {
            let roll = rng.random_range(0..100);
            let req = if roll < 2 {
                request(Op::Flush, 0, 0, None, tag)
            } else {
                let write = roll < 62;
                let free = (0..16).map(|_| random_range(rng, cap, layout.chunk)).find(|&(o, l)| {
                    !pending.values().any(|p| p.op != Op::Flush && (write || p.op == Op::Write) && overlaps(o, l, p.offset, p.len))
                });
                let Some((offset, len)) = free else { break };
                // Now and then a buffer longer than the request: only `len`
                // bytes may move.
                let extra = if rng.random_bool(0.1) { SECTOR as usize * rng.random_range(1..8) } else { 0 };
                let mut buf = IoBuf::new(len + extra);
                if write {
                    rng.fill_bytes(&mut buf);
                    model[offset as usize..offset as usize + len].copy_from_slice(&buf[..len]);
                }
                request(if write { Op::Write } else { Op::Read }, offset, len, Some(buf), tag)
            };
            let info = InFlight {
                op: req.op,
                offset: req.offset,
                len: req.len,
                buf_len: req.buf.as_ref().map_or(0, |b| b.len()),
            };
            if let Err(r) = q.push(req) {
                panic!("{label}: depth {depth}: {:?} of {} bytes at {} rejected: {}", info.op, info.len, info.offset, r.error);
            }
            pending.insert(tag, info);
            tag += 1;
            issued += 1;
            peak = peak.max(q.in_flight());
        }
        let min = if rng.random_bool(0.3) { q.in_flight() } else { 1 };
        out.clear();
        q.wait(min, &mut out);
        assert!(out.len() >= min, "{label}: wait({min}) returned {} completions", out.len());
        for c in out.drain(..) {
            let p = pending.remove(&c.tag).unwrap_or_else(|| panic!("{label}: completion with unknown tag {}", c.tag));
            let n = c.result.unwrap_or_else(|e| panic!("{label}: {:?} of {} bytes at {} failed: {e}", p.op, p.len, p.offset));
            assert_eq!(n, p.len, "{label}: {:?} at {} completed with a wrong byte count", p.op, p.offset);
            if p.op == Op::Flush {
                assert!(c.buf.is_none(), "{label}: a flush came back with a buffer");
                continue;
            }
            let buf = c.buf.unwrap_or_else(|| panic!("{label}: the buffer of tag {} was not handed back", c.tag));
            assert_eq!(buf.len(), p.buf_len, "{label}: a different buffer came back for tag {}", c.tag);
            if p.op == Op::Read {
                let want = &model[p.offset as usize..p.offset as usize + p.len];
                check_read(label, &format!("queued read (depth {depth})"), layout, p.offset, &buf[..p.len], want);
                assert!(
                    buf[p.len..].iter().all(|&b| b == 0),
                    "{label}: a read of {} bytes wrote past its length into the caller's buffer",
                    p.len
                );
            }
        }
    }
    assert!(pending.is_empty(), "{label}: {} requests never completed", pending.len());
    if depth > 1 {
        assert!(
            peak * 2 >= depth.min(ops),
            "{label}: the queue of depth {depth} never had more than {peak} requests in flight"
        );
    }
}

/// Reads the whole volume back (queued, various sizes) and compares it to
/// the model.
fn verify_volume(label: &str, vol: &Arc<Volume>, model: &[u8], layout: Layout) {
    assert_eq!(vol.capacity(), model.len() as u64, "{label}: capacity changed");
    let cap = model.len() as u64;
    let sizes = [1u64 << 20, 64 * 1024 + 3 * SECTOR, (4 << 20) - SECTOR, 7 * SECTOR];
    let mut q = vol.queue(16).unwrap();
    let mut pending: HashMap<u64, (u64, usize)> = HashMap::new();
    let (mut pos, mut tag) = (0u64, 0u64);
    let mut out = Vec::new();
    loop {
        while pos < cap && q.has_room() {
            let len = sizes[tag as usize % sizes.len()].min(cap - pos) as usize;
            if let Err(r) = q.push(request(Op::Read, pos, len, Some(IoBuf::new(len)), tag)) {
                panic!("{label}: verify read at {pos} rejected: {}", r.error);
            }
            pending.insert(tag, (pos, len));
            pos += len as u64;
            tag += 1;
        }
        if q.in_flight() == 0 {
            break;
        }
        out.clear();
        q.wait(1, &mut out);
        for c in out.drain(..) {
            let (off, len) = pending.remove(&c.tag).unwrap();
            c.result.unwrap_or_else(|e| panic!("{label}: verify read of {len} at {off} failed: {e}"));
            let buf = c.buf.unwrap();
            check_read(label, "verify read", layout, off, &buf[..len], &model[off as usize..off as usize + len]);
        }
    }
    assert_eq!(pos, cap);
}

fn run_workload(label: &str, vol: &Arc<Volume>, model: &mut [u8], layout: Layout, rng: &mut SmallRng, w: Work) {
    blocking_phase(label, vol, model, layout, rng, w.blocking);
    for &d in w.depths {
        queue_phase(label, vol, model, layout, rng, d, w.queued);
    }
    vol.flush().unwrap_or_else(|e| panic!("{label}: flush failed: {e}"));
    verify_volume(label, vol, model, layout);
}

/// Checks the real bytes on the member files (in role order) after the
/// array was stopped: the superblock magic, nothing in the reserved area
/// between the superblock and the data, every chunk where RAID 0 puts it,
/// nothing after the data area.
fn check_member_bytes(label: &str, files: &[PathBuf], layout: Layout, model: &[u8]) {
    let n = files.len() as u64;
    assert_eq!(n, layout.n);
    let per_member = model.len() as u64 / n;
    for (m, f) in files.iter().enumerate() {
        let b = std::fs::read(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        assert_eq!(&b[..8], MAGIC, "{label}: {} has no superblock at offset 0", f.display());
        if let Some(i) = b[SB_SIZE..DATA_OFFSET as usize].iter().position(|&x| x != 0) {
            panic!("{label}: {} was written at byte {} between the superblock and the data area", f.display(), SB_SIZE + i);
        }
        let data_end = (DATA_OFFSET + per_member) as usize;
        assert!(b.len() >= data_end, "{label}: {} is shorter than its data area", f.display());
        let data = &b[DATA_OFFSET as usize..data_end];
        let step = if n == 1 { per_member } else { layout.chunk };
        for s in 0..per_member / step {
            let logical = if n == 1 { 0 } else { (s * n + m as u64) * layout.chunk };
            let want = &model[logical as usize..(logical + step) as usize];
            let got = &data[(s * step) as usize..((s + 1) * step) as usize];
            if let Some((i, count)) = first_difference(got, want) {
                panic!(
                    "{label}: member {m} ({}) byte {} should hold logical byte {} of the volume (RAID 0, chunk {}), \
                     but {count} byte(s) of that chunk differ",
                    f.display(),
                    DATA_OFFSET + s * step + i as u64,
                    logical + i as u64,
                    layout.chunk
                );
            }
        }
        if let Some(i) = b[data_end..].iter().position(|&x| x != 0) {
            panic!("{label}: {} was written at byte {} past its data area", f.display(), data_end + i);
        }
    }
}

const CHUNKS: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];

#[test]
fn data_mem_members() {
    let _g = shared();
    let mut rng = rng("data_mem_members");
    let work = Work { blocking: 40, queued: 150, depths: &[1, 8, 64] };
    let mut configs: Vec<(u64, usize, &str)> = Vec::new();
    for chunk in CHUNKS {
        for n in 1..=5 {
            configs.push((chunk, n, ""));
        }
    }
    // Emulated ceilings hold completions back: the same checks must hold.
    configs.push((64 << 10, 3, ",iops=40000,lat=30"));
    configs.push((4 << 10, 2, ",bw=2G,lat=10"));
    for (chunk, n, limits) in configs {
        let sizes: Vec<u64> = (0..n).map(|_| (8 << 20) + 4096 * rng.random_range(0..256u64)).collect();
        let specs: Vec<MemberSpec> =
            sizes.iter().map(|s| format!("mem:{}K{limits}", s / 1024).parse().expect("valid mem: spec")).collect();
        let label = format!("mem x{n} chunk {}K{limits}", chunk >> 10);
        let members = array::open_members(&specs, true, true).unwrap_or_else(|e| panic!("{label}: {e}"));
        let (vol, warning) = array::temporary(members, chunk).unwrap_or_else(|e| panic!("{label}: {e}"));
        let layout = Layout { n: n as u64, chunk };
        assert_eq!(vol.capacity(), layout.capacity(&sizes), "{label}: capacity");
        assert_eq!(warning.is_some(), sizes.iter().any(|&s| s != sizes[0]), "{label}: unequal-size warning {warning:?}");
        assert_eq!(vol.raid().members().len(), n);
        let mut model = vec![0u8; vol.capacity() as usize];
        run_workload(&label, &vol, &mut model, layout, &mut rng, work);
        // The layout on the memfds themselves.
        for (m, member) in vol.raid().members().iter().enumerate() {
            let mut b = vec![0u8; 4096];
            for _ in 0..64 {
                let logical = rng.random_range(0..model.len() as u64 / 4096) * 4096;
                let (pm, po) = layout.place(logical);
                if pm as usize != m {
                    continue;
                }
                member.read_exact_at(&mut b, po).unwrap();
                check_read(&label, "member read (layout)", layout, logical, &b, &model[logical as usize..logical as usize + 4096]);
            }
        }
    }
}

/// Create on `members` (role order), workload, stop, check the bytes on
/// `backing` (the files under the members), reassemble from a shuffled
/// member list, check everything again, more work, stop, check again.
fn persistent_case(label: &str, members: &[PathBuf], backing: &[PathBuf], sizes: &[u64], chunk: u64, rng: &mut SmallRng, work: Work) {
    let n = members.len();
    let layout = Layout { n: n as u64, chunk };
    let name = format!("e2e-{n}x{}k", chunk >> 10);
    let arr = array::create(&specs(members), &CreateOptions { level: 0, chunk, name: name.clone(), force: false, ..Default::default() })
        .unwrap_or_else(|e| panic!("{label}: create failed: {e}"));
    assert_eq!(!arr.warnings().is_empty(), sizes.iter().any(|&s| s != sizes[0]), "{label}: warnings {:?}", arr.warnings());
    assert_eq!(arr.name(), name);
    let vol = arr.volume().clone();
    assert_eq!(vol.capacity(), layout.capacity(sizes), "{label}: capacity");
    let mut model = vec![0u8; vol.capacity() as usize];
    run_workload(label, &vol, &mut model, layout, rng, work);
    drop(vol);
    arr.stop().unwrap_or_else(|e| panic!("{label}: stop failed: {e}"));
    check_member_bytes(label, backing, layout, &model);
    let uuid = raw_superblock(&backing[0]).array_uuid;
    for (i, f) in backing.iter().enumerate() {
        let sb = raw_superblock(f);
        assert_eq!((sb.slot, sb.member_count, sb.state), (i as u32, n as u32, 0), "{label}: superblock of {}", f.display());
        assert_eq!(sb.array_uuid, uuid, "{label}: array UUID of {}", f.display());
    }

    for round in 0..2 {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(rng);
        let given: Vec<PathBuf> = order.iter().map(|&i| members[i].clone()).collect();
        let arr = array::assemble(&specs(&given))
            .unwrap_or_else(|e| panic!("{label}: assemble in order {order:?} failed: {e}"));
        let vol = arr.volume().clone();
        for (role, m) in vol.raid().members().iter().enumerate() {
            assert_eq!(m.name(), s(&members[role]), "{label}: assembled in order {order:?}, role {role} is the wrong member");
        }
        let label = format!("{label}, reassembled in order {order:?}");
        verify_volume(&label, &vol, &model, layout);
        if round == 0 {
            let more = Work { blocking: 10, queued: 60, depths: &[32] };
            run_workload(&label, &vol, &mut model, layout, rng, more);
        }
        drop(vol);
        arr.stop().unwrap_or_else(|e| panic!("{label}: stop failed: {e}"));
        check_member_bytes(&label, backing, layout, &model);
    }
}

#[test]
fn data_file_members() {
    let _g = shared();
    let mut rng = rng("data_file_members");
    let dir = tmpdir();
    let work = Work { blocking: 30, queued: 100, depths: &[1, 16, 64] };
    // (chunk, members, unequal sizes)
    let configs = [
        (4 << 10, 3, false),
        (64 << 10, 5, false),
        (1 << 20, 2, false),
        (64 << 10, 1, false),
        (4 << 10, 5, true),
        (1 << 20, 4, true),
        (64 << 10, 2, true),
    ];
    for (k, (chunk, n, unequal)) in configs.into_iter().enumerate() {
        let sizes: Vec<u64> = (0..n)
            .map(|i| (10 << 20) + if unequal { 4096 * rng.random_range(0..512u64) + 4096 * i as u64 } else { 0 })
            .collect();
        let files: Vec<PathBuf> = sizes.iter().enumerate().map(|(i, &sz)| sparse_file(dir.path(), &format!("c{k}m{i}"), sz)).collect();
        let label = format!("files x{n} chunk {}K{}", chunk >> 10, if unequal { " unequal" } else { "" });
        persistent_case(&label, &files, &files, &sizes, chunk, &mut rng, work);
    }
}

#[test]
fn data_loop_devices() {
    let _g = shared();
    require_tool("losetup", "mount (util-linux)");
    let mut rng = rng("data_loop_devices");
    let dir = tmpdir();
    let work = Work { blocking: 30, queued: 100, depths: &[1, 16, 64] };
    let configs = [(4 << 10, 2), (64 << 10, 3), (1 << 20, 5), (64 << 10, 1)];
    for (k, (chunk, n)) in configs.into_iter().enumerate() {
        let sizes: Vec<u64> = (0..n).map(|_| 10 << 20).collect();
        let files: Vec<PathBuf> = (0..n).map(|i| sparse_file(dir.path(), &format!("c{k}m{i}.img"), sizes[i])).collect();
        // Declared before any array, so detached after every array is gone
        // (and also when an assertion fails).
        let loops: Vec<LoopDev> = files.iter().map(|f| LoopDev::attach(f)).collect();
        let devs: Vec<PathBuf> = loops.iter().map(|l| l.dev.clone()).collect();
        let label = format!("loop x{n} chunk {}K ({})", chunk >> 10, devs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" "));
        persistent_case(&label, &devs, &files, &sizes, chunk, &mut rng, work);
        drop(loops);
    }
}

/// The largest request the engine takes (64 MiB, on a 4K chunk: thousands
/// of iovecs per member), and every request the queue must refuse, handed
/// back untouched, without disturbing the data or the queue.
#[test]
fn queue_limits_and_rejections() {
    let _g = shared();
    let mut rng = rng("queue_limits_and_rejections");
    let specs: Vec<MemberSpec> = (0..2).map(|_| "mem:40M".parse().unwrap()).collect();
    let (vol, _) = array::temporary(array::open_members(&specs, true, true).unwrap(), 4096).unwrap();
    let layout = Layout { n: 2, chunk: 4096 };
    let cap = vol.capacity();
    assert_eq!(cap, 2 * (39 << 20));
    let mut model = vec![0u8; cap as usize];

    let off = 5 * 4096 + 3 * SECTOR;
    let mut big = vec![0u8; MAX_REQUEST];
    rng.fill_bytes(&mut big);
    vol.write_at(off, &big).expect("a write of MAX_REQUEST bytes");
    model[off as usize..off as usize + MAX_REQUEST].copy_from_slice(&big);
    let back = vol.read_at(off, MAX_REQUEST).expect("a read of MAX_REQUEST bytes");
    check_read("max request", "read_at", layout, off, &back, &big);

    let mut q = vol.queue(2).unwrap();
    let cases: Vec<(Request, ErrorKind, &str)> = vec![
        (request(Op::Read, 0, MAX_REQUEST + 512, Some(IoBuf::new(MAX_REQUEST + 512)), 1), ErrorKind::InvalidInput, "not aligned"),
        (request(Op::Write, cap - 512, 1024, Some(IoBuf::new(1024)), 2), ErrorKind::OutOfRange, "past the end"),
        (request(Op::Write, cap, 512, Some(IoBuf::new(512)), 3), ErrorKind::OutOfRange, "past the end"),
        (request(Op::Write, u64::MAX - 511, 1024, Some(IoBuf::new(1024)), 4), ErrorKind::OutOfRange, "past the end"),
        (request(Op::Write, 100, 512, Some(IoBuf::new(512)), 5), ErrorKind::InvalidInput, "not aligned"),
        (request(Op::Write, 512, 1000, Some(IoBuf::new(1000)), 6), ErrorKind::InvalidInput, "not aligned"),
        (request(Op::Read, 512, 0, Some(IoBuf::new(512)), 7), ErrorKind::InvalidInput, "not aligned"),
        (request(Op::Write, 4096, 8192, Some(IoBuf::new(4096)), 8), ErrorKind::InvalidInput, "buffer"),
        (request(Op::Read, 4096, 4096, None, 9), ErrorKind::InvalidInput, "buffer"),
    ];
    for (req, kind, needle) in cases {
        let (tag, len, buf_len) = (req.tag, req.len, req.buf.as_ref().map(|b| b.len()));
        let desc = format!("{:?} of {} bytes at {}", req.op, req.len, req.offset);
        let r = q.push(req).expect_err(&format!("{desc} must be refused"));
        assert_eq!(r.error.kind(), kind, "{desc}: {}", r.error);
        assert_contains(&r.error.to_string(), &[needle], &desc);
        assert_eq!((r.request.tag, r.request.len, r.request.buf.as_ref().map(|b| b.len())), (tag, len, buf_len), "{desc}: request not handed back as given");
        assert_eq!(q.in_flight(), 0, "{desc}: a refused request took a slot");
    }
    // A full queue refuses, then works again once drained.
    for t in 0..2 {
        q.push(request(Op::Read, t * 4096, 4096, Some(IoBuf::new(4096)), t)).unwrap();
    }
    let r = q.push(request(Op::Read, 0, 4096, Some(IoBuf::new(4096)), 9)).expect_err("queue of depth 2 with 2 in flight");
    assert_eq!(r.error.kind(), ErrorKind::Busy);
    assert_contains(&r.error.to_string(), &["queue is full"], "full queue");
    let mut out = Vec::new();
    q.wait(2, &mut out);
    assert_eq!(out.len(), 2);
    drop(q);
    // The blocking calls refuse the same way.
    assert_error(vol.read_at(cap - 512, 1024), ErrorKind::OutOfRange, &["past the end"], "read_at past the end");
    assert_error(vol.write_at(cap, &[0u8; 512]), ErrorKind::OutOfRange, &["past the end"], "write_at past the end");
    assert_error(vol.write_at(3, &[0u8; 512]), ErrorKind::InvalidInput, &["aligned"], "misaligned write_at");
    // Nothing above changed the data.
    verify_volume("after rejections", &vol, &model, layout);
}
