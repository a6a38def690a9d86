//! Member pieces: one member I/O of a request, and how it becomes an
//! io_uring submission entry (read, write, fsync, fallocate for discard and
//! zeroing, zeros written where a member refuses fallocate), what the
//! filters stacked over the member say of it first (fault injection), and
//! what a completion means for it (done, short, retry, failed).
//!
//! A discard on a block device is a discard, not a zeroing (fallocate's
//! PUNCH_HOLE on a block device is a WRITE_ZEROES, which a drive with
//! discard but no write-zeroes refuses): io_uring's block discard command
//! (`BLOCK_URING_CMD_DISCARD`, Linux 6.12+), or on older kernels the
//! `BLKDISCARD` ioctl on a helper thread, whose end the ring learns
//! through an eventfd poll (so the engine thread never blocks on it). A
//! block device whose `discard_max_bytes` is 0 gets none: a discard is a
//! hint. Where the RAID needs zeros (RAID 5/6 parity, WRITE_ZEROES) the
//! stripe code sends a zeroing instead.

use std::sync::Arc;

use io_uring::{opcode, squeue, types};

use crate::io::buf::IoBuf;
use crate::io::member::{Member, MemberKind};
use crate::io::request::Op;
use crate::{Error, ErrorKind};

pub(super) struct Piece {
    pub(super) op: Op,
    pub(super) fua: bool,
    pub(super) member: u32,
    /// Absolute byte offset on the member.
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) done: usize,
    pub(super) iov: Vec<libc::iovec>,
    pub(super) iov_first: usize,
    /// When the emulated drive finishes it (ns), 0 when not throttled.
    pub(super) deadline: u64,
    /// A discard or zeroing done by writing zeros (`done` bytes of `len`
    /// written): the member refused the fallocate(2).
    pub(super) zero_fill: bool,
    /// A block-device discard running as `BLKDISCARD` on a helper thread
    /// (kernels without io_uring's discard command); taken at its
    /// completion, so `None` on every other piece.
    pub(super) offload: Option<Arc<Offload>>,
    /// When the piece was first submitted (ns, [`crate::clock::now_ns`]);
    /// 0 when it was not (yet) or is not timed, for its latency (see
    /// `counters`: one member I/O in [`TIME_EVERY`](super::counters::TIME_EVERY) is;
    /// [`time_first_push`] sets it).
    pub(super) started: u64,
}

/// `BLOCK_URING_CMD_DISCARD` (<linux/blkdev.h>: `_IO(0x12, 0)`): io_uring's
/// discard of a byte range of a block device (Linux 6.12+), start in
/// `sqe->addr`, length in `sqe->addr3`.
const BLOCK_URING_CMD_DISCARD: u32 = 0x1200;
/// `BLKDISCARD` (<linux/fs.h>: `_IO(0x12, 119)`): the same as an ioctl,
/// `{start, length}` in bytes.
const BLKDISCARD: libc::c_ulong = 0x1277;
/// `piece.done` of a block-device discard sent as io_uring's command (so a
/// refusal from a kernel without it is told from the drive's).
const VIA_URING: usize = 1;

/// Whether block-device discards go as io_uring's discard command: on
/// Linux 6.12 and newer, until a kernel refuses it (EOPNOTSUPP: no
/// `uring_cmd` for block devices); otherwise `BLKDISCARD` on a thread.
static URING_DISCARD: std::sync::LazyLock<std::sync::atomic::AtomicBool> =
    std::sync::LazyLock::new(|| std::sync::atomic::AtomicBool::new(kernel_at_least(6, 12)));

/// True when the running kernel's release (uname) is `major.minor` or newer.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes only into `u`, which outlives the call.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    // SAFETY: uname NUL-terminates the release field.
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy();
    let mut it = rel.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
    let v = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    v >= (major, minor)
}

/// A `BLKDISCARD` done on a helper thread for one piece: the thread stores
/// its result and signals the eventfd that the piece's poll waits on.
pub(super) struct Offload {
    efd: std::os::fd::OwnedFd,
    /// 0 or -errno, valid once the eventfd is signalled.
    result: std::sync::atomic::AtomicI32,
}

impl Offload {
    /// Starts discarding `len` bytes at byte `offset` of block device `m`;
    /// Err(-errno) when no eventfd could be made. Without a thread (the
    /// process is at its limit) the discard is done here, blocking.
    fn start(m: &Member, offset: u64, len: u64) -> std::result::Result<Arc<Offload>, i32> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd with plain flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(-std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM));
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let efd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let o = Arc::new(Offload { efd, result: std::sync::atomic::AtomicI32::new(0) });
        #[cfg(test)]
        tests::OFFLOADED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The thread has its own descriptor of the member, so that the
        // member may close while the ioctl runs.
        let spawned = match m.file().try_clone() {
            Ok(file) => {
                let t = o.clone();
                std::thread::Builder::new().name("uraid-discard".into()).spawn(move || t.run(&file, offset, len)).is_ok()
            }
            Err(_) => false,
        };
        if !spawned {
            o.run(m.file(), offset, len);
        }
        Ok(o)
    }

    /// Does the discard and signals its end.
    fn run(&self, file: &std::fs::File, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let range: [u64; 2] = [offset, len];
        // SAFETY: BLKDISCARD reads two u64 through the pointer, which
        // outlives the call.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
        let res = if r < 0 { -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) } else { 0 };
        self.result.store(res, std::sync::atomic::Ordering::Release);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from `one` to the eventfd this Offload owns.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// Bytes of zeros a zero-filling piece writes at a time.
pub(super) const ZERO_FILL: usize = 1 << 20;

/// A process-wide buffer of [`ZERO_FILL`] zero bytes, aligned for
/// O_DIRECT, that zero-filling pieces write from (never written to).
pub(super) fn zero_fill_buf() -> *const u8 {
    struct Zeros(IoBuf);
    // SAFETY: the buffer is never written after it is made (zeroed); every
    // thread only reads it, so sharing it is sound.
    unsafe impl Sync for Zeros {}
    // SAFETY: as above; it is made once and never mutated.
    unsafe impl Send for Zeros {}
    static ZEROS: std::sync::OnceLock<Zeros> = std::sync::OnceLock::new();
    ZEROS.get_or_init(|| Zeros(IoBuf::new(ZERO_FILL))).0.as_ptr()
}

/// A discard or zeroing piece for a member known to refuse fallocate(2)
/// becomes a zero-filling one before it is sent.
pub(super) fn zero_fill_if_refused(p: &mut Piece, m: &Member) {
    let fallocate = match p.op {
        Op::Discard => m.kind() != MemberKind::BlockDevice,
        Op::WriteZeroes { .. } => true,
        _ => false,
    };
    if fallocate && !p.zero_fill && m.no_fallocate() {
        p.zero_fill = true;
        p.done = 0;
    }
}


/// Stamps piece `p` with the clock when it is pushed for the first time
/// and its queue's `counters` time this one (see `counters`).
#[inline(always)]
pub(super) fn time_first_push(p: &mut Piece, counters: &super::counters::QueueCounters) {
    if p.started == 0 && counters.time_this(p.member) {
        p.started = crate::clock::now_ns().max(1);
    }
}

/// True when piece `p` is a discard of block device `m`, which
/// [`block_discard_sqe`] builds (not [`build_sqe`]).
#[inline(always)]
pub(super) fn is_block_discard(p: &Piece, m: &Member) -> bool {
    matches!(p.op, Op::Discard) && !p.zero_fill && m.kind() == MemberKind::BlockDevice
}

/// The io_uring entry that does what piece `p` still has to do on member
/// `m` (user data not set); a block device's discard is
/// [`block_discard_sqe`]'s.
#[inline]
pub(super) fn build_sqe(p: &mut Piece, m: &Member) -> squeue::Entry {
    if m.is_null() {
        return null_sqe(p);
    }
    let fd = types::Fixed(p.member);
    if p.zero_fill {
        let n = (p.len - p.done).min(ZERO_FILL) as u32;
        return opcode::Write::new(fd, zero_fill_buf(), n).offset(p.offset + p.done as u64).build();
    }
    let iov = &p.iov[p.iov_first..];
    let off = p.offset + p.done as u64;
    let rw_flags = if p.fua { libc::RWF_DSYNC } else { 0 };
    match p.op {
        Op::Flush => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
        Op::Discard | Op::WriteZeroes { .. } => {
            let mode = fallocate_mode(p.op, m, p.done > 0);
            opcode::Fallocate::new(fd, p.len as u64).offset(p.offset).mode(mode).build()
        }
        Op::Read if iov.len() == 1 => opcode::Read::new(fd, iov[0].iov_base.cast(), iov[0].iov_len as u32).offset(off).build(),
        Op::Write if iov.len() == 1 => {
            opcode::Write::new(fd, iov[0].iov_base.cast(), iov[0].iov_len as u32).offset(off).rw_flags(rw_flags).build()
        }
        Op::Read => opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32).offset(off).build(),
        Op::Write => opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32).offset(off).rw_flags(rw_flags).build(),
    }
}

/// The entry of piece `p` on a `null:` member: a NOP through the same
/// ring (completed by the kernel at once, with result 0, which
/// [`progress`] takes as the whole piece done). A read's bytes are zeroed
/// here, as the drive would have returned them.
#[inline]
fn null_sqe(p: &Piece) -> squeue::Entry {
    if p.op == Op::Read {
        for v in &p.iov[p.iov_first..] {
            // SAFETY: the iovec names `iov_len` bytes of the request's or
            // the stripe operation's buffer, which the piece may write
            // (a read fills it) and which outlives the piece.
            unsafe { std::ptr::write_bytes(v.iov_base as *mut u8, 0, v.iov_len) };
        }
    }
    opcode::Nop::new().build()
}

/// The entry that discards piece `p` on block device `m`: io_uring's
/// discard command where the kernel has it, else a poll on the eventfd of
/// a `BLKDISCARD` started on a helper thread ([`Offload`]); `Err(0)` (done,
/// nothing sent) when the device does not discard.
#[cold]
#[inline(never)]
pub(super) fn block_discard_sqe(p: &mut Piece, m: &Member) -> std::result::Result<squeue::Entry, i32> {
    use std::os::fd::AsRawFd;
    if !m.discards() {
        return Err(0);
    }
    if URING_DISCARD.load(std::sync::atomic::Ordering::Relaxed) {
        p.done = VIA_URING;
        let mut cmd = [0u8; 16];
        // The first 8 bytes of the command area are sqe->addr3: the length.
        cmd[..8].copy_from_slice(&(p.len as u64).to_ne_bytes());
        return Ok(opcode::UringCmd16::new(types::Fixed(p.member), BLOCK_URING_CMD_DISCARD).addr(Some(p.offset)).cmd(cmd).build());
    }
    p.done = 0;
    let o = Offload::start(m, p.offset, p.len as u64)?;
    let sqe = opcode::PollAdd::new(types::Fd(o.efd.as_raw_fd()), libc::POLLIN as u32).build();
    p.offload = Some(o);
    Ok(sqe)
}

/// What completion result `res` of block-device discard piece `p` means:
/// a kernel without io_uring's discard command (EOPNOTSUPP to it) turns
/// the command off for the process and the piece goes again as
/// `BLKDISCARD`; a device that refuses the discard is marked
/// ([`Member::set_no_discard`]) and the piece is done (a discard is a
/// hint); other errors fail it.
#[cold]
#[inline(never)]
fn block_discard_progress(p: &mut Piece, res: i32, m: &Member) -> Outcome {
    let via_uring = std::mem::take(&mut p.done) == VIA_URING;
    let res = match p.offload.take() {
        Some(o) if res >= 0 => o.result.load(std::sync::atomic::Ordering::Acquire),
        _ => res,
    };
    if res == -libc::EOPNOTSUPP && via_uring {
        URING_DISCARD.store(false, std::sync::atomic::Ordering::Relaxed);
        return Outcome::Again;
    }
    if res == -libc::EOPNOTSUPP {
        m.set_no_discard();
        return Outcome::Done(None);
    }
    if res < 0 {
        return Outcome::Done(Some(Error::from_errno(
            format!("discard of {} bytes at offset {} of member {} failed", p.len, p.offset, m.name()),
            -res,
        )));
    }
    Outcome::Done(None)
}

/// The fallocate(2) mode that does `op` on member `m`; `second` is the
/// allocation step of a NO_HOLE zeroing on a file.
pub(super) fn fallocate_mode(op: Op, m: &Member, second: bool) -> i32 {
    use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
    match (op, m.kind()) {
        // On a block device, PUNCH_HOLE|KEEP_SIZE is a zero-out that may
        // unmap (blkdev_fallocate), ZERO_RANGE|KEEP_SIZE one that must not.
        (Op::WriteZeroes { no_hole: true }, MemberKind::BlockDevice) => ZERO | KEEP,
        // PUNCH_HOLE needs the device's WRITE_ZEROES; without it only
        // ZERO_RANGE zeroes (the kernel writes pages of zeros).
        (_, MemberKind::BlockDevice) if !m.zeroes_cheaply() => ZERO | KEEP,
        (Op::WriteZeroes { no_hole: true }, _) if second => KEEP,
        _ => PUNCH | KEEP,
    }
}

#[cold]
#[inline(never)]
pub(super) fn new_piece() -> Piece {
    Piece { op: Op::Read, fua: false, member: 0, offset: 0, len: 0, done: 0, iov: Vec::new(), iov_first: 0, deadline: 0, zero_fill: false, offload: None, started: 0 }
}

/// Asks the filters stacked over member `m` (fault injection) about piece `p`: `Some(-errno)` when
/// the piece must fail without reaching the kernel. A torn write is done in
/// part here (synchronously) before it fails.
pub(super) fn injected_fault(p: &Piece, m: &Member) -> Option<i32> {
    use crate::io::member::Verdict;
    if m.filters().is_empty() {
        return None;
    }
    let off = p.offset + p.done as u64;
    let len = p.len - p.done.min(p.len);
    // A zero-filling discard or zeroing is a write of zeros to the drive.
    let op = if p.zero_fill { Op::Write } else { p.op };
    // fallocate(2) has no FUA: a zeroing or discard is durable only after
    // a flush (for a FUA one, the flush its request ends with); zeros
    // written in its place go without FUA too.
    let durable = match op {
        Op::Write => p.fua && !p.zero_fill,
        _ => false,
    };
    match m.filter_verdict(op, off, len as u64, durable) {
        Verdict::Pass => None,
        Verdict::Fail(errno) => Some(-errno),
        Verdict::Tear(n) => {
            let iov = &p.iov[p.iov_first..];
            let mut left = n;
            let mut at = off;
            for v in iov {
                if left == 0 {
                    break;
                }
                let k = v.iov_len.min(left);
                // SAFETY: the iovec addresses k <= iov_len valid bytes of
                // the request's or the operation's buffer.
                let part = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, k) };
                if std::os::unix::fs::FileExt::write_all_at(m.file(), part, at).is_err() {
                    break;
                }
                left -= k;
                at += k as u64;
            }
            Some(-libc::EIO)
        }
    }
}

/// What became of a piece after a completion.
pub(super) enum Outcome {
    /// Part of it is left: submit it again.
    Again,
    /// Finished, with the error if it failed.
    Done(Option<Error>),
}

/// Accounts completion result `res` (bytes or -errno) of piece `p` on
/// member `m`: short transfers continue, a NO_HOLE zeroing on a file takes
/// its second step, a discard or zeroing the member refuses (EOPNOTSUPP)
/// starts again as zeros written (and the member is marked, so the next
/// ones go that way at once), errors name the member and the offset. A
/// finished piece is counted in the member's I/O counters (`counters`, the
/// queue's).
#[inline]
pub(super) fn progress(p: &mut Piece, res: i32, m: &Member, counters: &mut super::counters::QueueCounters) -> Outcome {
    let o = step(p, res, m);
    if let Outcome::Done(e) = &o {
        let errno = match e {
            None => 0,
            Some(_) if res < 0 => -res,
            Some(_) => -1,
        };
        counters.piece_done(p.member, p.op, p.done.min(p.len), std::mem::take(&mut p.started), errno);
    }
    o
}

/// [`progress`] without the counting.
#[inline]
fn step(p: &mut Piece, res: i32, m: &Member) -> Outcome {
    if m.is_null() && res >= 0 {
        // A NOP ([`null_sqe`]): the whole piece is done.
        p.done = p.len;
        return Outcome::Done(None);
    }
    if matches!(p.op, Op::Discard) && m.kind() == MemberKind::BlockDevice {
        return block_discard_progress(p, res, m);
    }
    if res == -libc::EOPNOTSUPP && matches!(p.op, Op::Discard | Op::WriteZeroes { .. }) && !p.zero_fill {
        // The promise of both (zeros read back, copies and parity agree)
        // holds when zeros are written instead.
        m.set_no_fallocate();
        p.zero_fill = true;
        p.done = 0;
        return Outcome::Again;
    }
    if p.zero_fill && res > 0 {
        p.done += res as usize;
        return if p.done >= p.len { Outcome::Done(None) } else { Outcome::Again };
    }
    if p.zero_fill && res == 0 {
        return Outcome::Done(Some(Error::new(
            ErrorKind::Io,
            format!("member {} ended at offset {} while zeros were written", m.name(), p.offset + p.done as u64),
        )));
    }
    if res < 0 {
        return Outcome::Done(Some(Error::from_errno(
            format!("{:?} of {} bytes at offset {} of member {} failed", p.op, p.len, p.offset, m.name()),
            -res,
        )));
    }
    match p.op {
        // On files the zeroing is a punched hole, then an allocation (two
        // steps: tmpfs and others have no ZERO_RANGE).
        Op::WriteZeroes { no_hole: true } if m.kind() != MemberKind::BlockDevice && p.done == 0 => {
            p.done = 1;
            Outcome::Again
        }
        Op::Read | Op::Write => {
            let n = res as usize;
            p.done += n;
            if p.done >= p.len {
                Outcome::Done(None)
            } else if n == 0 {
                Outcome::Done(Some(Error::new(
                    ErrorKind::Io,
                    format!(
                        "member {} ended at offset {} (is it smaller than its superblock says?)",
                        m.name(),
                        p.offset + p.done as u64
                    ),
                )))
            } else {
                advance_iov(p, n);
                Outcome::Again
            }
        }
        _ => Outcome::Done(None),
    }
}

/// Drops `n` transferred bytes from the front of a piece's iovecs.
pub(super) fn advance_iov(p: &mut Piece, mut n: usize) {
    while n > 0 {
        let v = &mut p.iov[p.iov_first];
        if n >= v.iov_len {
            n -= v.iov_len;
            p.iov_first += 1;
        } else {
            // SAFETY: stays inside the same buffer region.
            v.iov_base = unsafe { (v.iov_base as *mut u8).add(n) }.cast();
            v.iov_len -= n;
            n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::request::Request;
    use crate::raid::engine::RaidVolume;
    use crate::control::superblock::DATA_OFFSET;
    use crate::io::member::{MemberSpec, OpenMode};
    use std::sync::atomic::Ordering;

    /// Discards sent as `BLKDISCARD` on a helper thread.
    pub(super) static OFFLOADED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// A loop device over a file, detached when dropped.
    struct Loop(String, std::path::PathBuf);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup").arg("-d").arg(&self.0).status();
            let _ = std::fs::remove_file(&self.1);
        }
    }

    /// Discard requests and sectors of block device `dev` (/sys/block/NAME/stat).
    fn discard_stat(dev: &str) -> (u64, u64) {
        let name = dev.trim_start_matches("/dev/");
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let f: Vec<u64> = stat.split_whitespace().map(|x| x.parse().unwrap()).collect();
        (f[11], f[13])
    }

    /// Both ways of discarding a block device's range: io_uring's discard
    /// command (Linux 6.12+; this test runs where the kernel has it) and
    /// `BLKDISCARD` on a helper thread (what older kernels get): the loop
    /// device counts a discard of the piece's bytes, the range reads back
    /// as zeros (a loop device punches its file), the rest is intact, and
    /// only the second went through a thread.
    #[test]
    fn block_discard_by_uring_command_and_by_ioctl_on_a_thread() {
        let img = std::env::temp_dir().join(format!("uraid-piece-discard-{}.img", std::process::id()));
        std::fs::File::create(&img).unwrap().set_len(DATA_OFFSET + (16 << 20)).unwrap();
        let out = std::process::Command::new("losetup").args(["-f", "--show"]).arg(&img).output().expect("losetup (util-linux) is needed");
        assert!(out.status.success(), "losetup: {} (the test needs root)", String::from_utf8_lossy(&out.stderr));
        let lo = Loop(String::from_utf8_lossy(&out.stdout).trim().to_string(), img.clone());
        let spec: MemberSpec = lo.0.parse().unwrap();
        let m = Member::open(&spec, OpenMode { write: true, exclusive: false }).unwrap();
        assert!(m.discards(), "{}: {:?}", lo.0, m.queue_limits());
        let g = crate::raid::geometry::Geometry::raid0(1, 64 << 10, 16 << 20).unwrap();
        let v = RaidVolume::new(Arc::new(vec![m]), g, DATA_OFFSET).unwrap();
        let mut q = v.queue(4).unwrap();
        let mut run = |req: Request| {
            q.push(req).map_err(|r| r.error).unwrap();
            let mut out = Vec::new();
            q.wait(1, &mut out);
            out.pop().unwrap()
        };
        let mut data = IoBuf::new(8 << 20);
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i % 251) as u8 + 1;
        }
        run(Request::write(0, 8 << 20, data, 1)).result.unwrap();
        let kernel_has_it = kernel_at_least(6, 12);
        for (k, uring) in [(0u64, true), (1, false)] {
            if uring && !kernel_has_it {
                continue;
            }
            URING_DISCARD.store(uring, Ordering::Relaxed);
            let (before, threads) = (discard_stat(&lo.0), OFFLOADED.load(Ordering::Relaxed));
            let (off, len) = ((1 + 3 * k) << 20, 2usize << 20);
            let c = run(Request { op: Op::Discard, offset: off, len, buf: None, tag: 2, fua: false });
            c.result.unwrap();
            let after = discard_stat(&lo.0);
            assert!(after.0 > before.0 && after.1 - before.1 == len as u64 / 512, "uring {uring}: {before:?} -> {after:?}");
            let offloaded = OFFLOADED.load(Ordering::Relaxed) - threads;
            assert!(if uring { offloaded == 0 } else { offloaded >= 1 }, "uring {uring}: {offloaded} discards went through a thread");
            let back = run(Request::read(0, 8 << 20, IoBuf::new(8 << 20), 3)).buf.unwrap();
            for (i, &b) in back[..8 << 20].iter().enumerate() {
                let discarded = (off as usize..off as usize + len).contains(&i) || (k == 1 && kernel_has_it && (1 << 20..3 << 20).contains(&i));
                assert_eq!(b, if discarded { 0 } else { (i % 251) as u8 + 1 }, "uring {uring}: byte {i}");
            }
        }
        URING_DISCARD.store(kernel_has_it, Ordering::Relaxed);
        drop(q);
        drop(v);
    }
}
