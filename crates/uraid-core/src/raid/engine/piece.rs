//! Member pieces: one member I/O of a request, and how it becomes an
//! io_uring submission entry (read, write, fsync, fallocate for discard and
//! zeroing, zeros written where a member refuses fallocate), what the
//! filters stacked over the member say of it first (fault injection), and
//! what a completion means for it (done, short, retry, failed).

use io_uring::{opcode, squeue, types};

use super::*;

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
    if matches!(p.op, Op::Discard | Op::WriteZeroes { .. }) && !p.zero_fill && m.no_fallocate() {
        p.zero_fill = true;
        p.done = 0;
    }
}


/// The io_uring entry that does what piece `p` still has to do on a member
/// of `kind` (user data not set).
pub(super) fn build_sqe(p: &Piece, kind: MemberKind) -> squeue::Entry {
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
            let mode = fallocate_mode(p.op, kind, p.done > 0);
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

/// The fallocate(2) mode that does `op` on a member of `kind`; `second` is
/// the allocation step of a NO_HOLE zeroing on a file.
pub(super) fn fallocate_mode(op: Op, kind: MemberKind, second: bool) -> i32 {
    use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
    match (op, kind) {
        // On a block device, PUNCH_HOLE|KEEP_SIZE is a zero-out that may
        // unmap (blkdev_fallocate), ZERO_RANGE|KEEP_SIZE one that must not.
        (Op::WriteZeroes { no_hole: true }, MemberKind::BlockDevice) => ZERO | KEEP,
        (Op::WriteZeroes { no_hole: true }, _) if second => KEEP,
        _ => PUNCH | KEEP,
    }
}

/// Adds `len` bytes at absolute offset `abs` of `member` to the slot's
/// pieces: the member's last piece (`last[member]`, `usize::MAX` for none)
/// grows when it ends at `abs` (and, with a buffer `ptr`, has room for
/// another iovec; memory contiguous with its last iovec extends that one),
/// otherwise a new piece starts. So a request is one (vectored) I/O per
/// run of contiguous member bytes, whatever the chunk size.
pub(super) fn add_segment(slot: &mut Slot, last: &mut [usize; crate::raid::geometry::MAX_MEMBERS], member: u32, abs: u64, ptr: Option<*mut u8>, len: usize) {
    let li = last[member as usize];
    if li != usize::MAX {
        let p = &mut slot.pieces[li];
        if p.offset + p.len as u64 == abs && (ptr.is_none() || p.iov.len() < IOV_MAX) {
            if let Some(ptr) = ptr {
                let tail = p.iov.last_mut().expect("piece has an iovec");
                // SAFETY: pointer arithmetic inside the same buffer.
                if unsafe { (tail.iov_base as *mut u8).add(tail.iov_len) } == ptr {
                    tail.iov_len += len;
                } else {
                    p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
                }
            }
            p.len += len;
            return;
        }
    }
    last[member as usize] = slot.npieces;
    let p = next_piece(slot);
    p.member = member;
    p.offset = abs;
    p.len = len;
    if let Some(ptr) = ptr {
        p.iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len });
    }
}

pub(super) fn new_piece() -> Piece {
    Piece { op: Op::Read, fua: false, member: 0, offset: 0, len: 0, done: 0, iov: Vec::new(), iov_first: 0, deadline: 0, zero_fill: false }
}

pub(super) fn next_piece(slot: &mut Slot) -> &mut Piece {
    if slot.npieces == slot.pieces.len() {
        slot.pieces.push(new_piece());
    }
    let (op, fua) = (slot.op, slot.fua);
    let p = &mut slot.pieces[slot.npieces];
    slot.npieces += 1;
    p.op = op;
    p.fua = fua;
    p.done = 0;
    p.iov.clear();
    p.iov_first = 0;
    p.deadline = 0;
    p.zero_fill = false;
    p
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
/// ones go that way at once), errors name the member and the offset.
pub(super) fn progress(p: &mut Piece, res: i32, m: &Member) -> Outcome {
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
