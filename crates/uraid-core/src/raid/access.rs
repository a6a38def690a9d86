//! The RAID layer's interface for the control path's maintenance (rebuild,
//! scrub, resync in [`crate::control::maint`]): lock a range of stripes
//! against the data path, read member ranges in parallel, write or zero a
//! member range, flush a member, and fail the members whose I/O failed.
//! Every I/O here goes through the member's filters (fault injection) and
//! its emulated ceilings, as the engine's own I/O does; maintenance never
//! touches a queue.

use std::ops::Range;

use crate::io::buf::IoBuf;
use crate::io::member::{now_ns, Member, Verdict};
use crate::io::request::Op;
use crate::raid::bitmap::sleep_until;
use crate::raid::health::Health;
use crate::raid::locks::StripeGuard;
use crate::raid::engine::RaidVolume;
use crate::{Error, Result};

pub(crate) fn lock_stripes(vol: &RaidVolume, s: Range<u64>) -> Vec<StripeGuard<'_>> {
    vol.locks().lock_range(s)
}

/// Runs `f` (an I/O of `bytes` on `m`, a write when `write`) and, for an
/// emulated drive with ceilings, waits until the modelled drive would have
/// finished it.
pub(crate) fn throttled<T>(m: &Member, write: bool, bytes: u64, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let deadline = m.throttle().map(|t| t.admit(write, bytes, now_ns()));
    let r = f();
    if let Some(d) = deadline {
        sleep_until(d);
    }
    r
}

/// The member's filters' verdict (fault injection) on a maintenance I/O,
/// which is not durable until [`sync`]: `Err` for a failed one, else how
/// many bytes of it to do (all of `len`, or the first part of a torn
/// write, which then fails).
fn filtered(m: &Member, op: Op, offset: u64, len: u64) -> std::result::Result<u64, i32> {
    match m.filter_verdict(op, offset, len, false) {
        Verdict::Pass => Ok(len),
        Verdict::Fail(errno) => Err(errno),
        Verdict::Tear(n) => Ok(n as u64),
    }
}

/// Writes `buf` at absolute `offset` of `m` (not synced).
pub(crate) fn write_member(m: &Member, buf: &[u8], offset: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let what = || format!("cannot write {} bytes at offset {offset} of", buf.len());
    throttled(m, true, buf.len() as u64, || {
        let n = filtered(m, Op::Write, offset, buf.len() as u64)
            .map_err(|errno| Error::io(&what(), std::path::Path::new(m.name()), std::io::Error::from_raw_os_error(errno)))?;
        m.file().write_all_at(&buf[..n as usize], offset).map_err(|e| Error::io(&what(), std::path::Path::new(m.name()), e))?;
        if n < buf.len() as u64 {
            return Err(Error::io(&what(), std::path::Path::new(m.name()), std::io::Error::from_raw_os_error(libc::EIO)));
        }
        Ok(())
    })
}

/// Makes absolute bytes `[offset, offset+len)` of `m` read as zeros: a
/// zero-range (or hole punch) where the member supports it, else writes
/// of zeros.
pub(crate) fn zero_member(m: &Member, offset: u64, len: u64) -> Result<()> {
    use std::os::fd::AsRawFd;
    let fd = m.file().as_raw_fd();
    let refused = match filtered(m, Op::WriteZeroes { no_hole: false }, offset, len) {
        Ok(n) if n == len => false,
        // Not supported: zeros are written instead, as below.
        Err(libc::EOPNOTSUPP) => true,
        r => {
            let e = std::io::Error::from_raw_os_error(r.err().unwrap_or(libc::EIO));
            return Err(Error::io(&format!("cannot zero {len} bytes at offset {offset} of"), std::path::Path::new(m.name()), e));
        }
    };
    let modes = [libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE];
    for mode in if refused { &modes[..0] } else { &modes[..] } {
        // SAFETY: fallocate on a valid open descriptor with plain integers.
        let r = unsafe { libc::fallocate(fd, *mode, offset as libc::off_t, len as libc::off_t) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV)) {
            return Err(Error::io(&format!("cannot zero {len} bytes at offset {offset} of"), std::path::Path::new(m.name()), e));
        }
    }
    let zeros = IoBuf::new((1usize << 20).min(len as usize));
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(zeros.len() as u64) as usize;
        write_member(m, &zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// One member read of a batch: `len` bytes at absolute `offset` of
/// `member`, into buffer `into` from byte `at` on (a member's reads of one
/// batch share its buffer, each at its own place).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    pub(crate) member: u32,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) into: usize,
    pub(crate) at: usize,
}

/// Runs `reads` (at most one per buffer) in parallel, one thread per read;
/// returns the members whose read failed, with the error.
pub(crate) fn read_all(members: &[Member], health: &Health, reads: &[Read], bufs: &mut [IoBuf]) -> Vec<(u32, Error)> {
    let one = |r: &Read, buf: &mut IoBuf| {
        if health.spared() && health.held(r.member) {
            return read_spared(members, health, r, buf);
        }
        let m = &members[r.member as usize];
        throttled(m, false, r.len as u64, || m.read_exact_at(&mut buf[r.at..r.at + r.len], r.offset)).err().map(|e| (r.member, e))
    };
    // Each buffer's reads in order, on one thread per buffer.
    let all = |i: usize, buf: &mut IoBuf| reads.iter().filter(|r| r.into == i).find_map(|r| one(r, buf));
    if reads.len() == 1 {
        return all(reads[0].into, &mut bufs[reads[0].into]).into_iter().collect();
    }
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, buf) in bufs.iter_mut().enumerate() {
            if reads.iter().any(|r| r.into == i) {
                handles.push(s.spawn(move || all(i, buf)));
            }
        }
        handles.into_iter().filter_map(|h| h.join().expect("member read thread panicked")).collect()
    })
}

/// [`read_all`]'s read of a role a distributed spare holds: row by row
/// from where each row lives ([`Health::physical`]: the spare chunk's
/// member, or a rebalanced role's device below its recovery offset; a
/// failure is that member's).
fn read_spared(members: &[Member], health: &Health, r: &Read, buf: &mut IoBuf) -> Option<(u32, Error)> {
    let sm = health.spare_map()?;
    let (mut at, end) = (r.offset, r.offset + r.len as u64);
    while at < end {
        let stop = sm.row_end(at).min(end);
        let o = (at - r.offset) as usize;
        let len = (stop - at) as usize;
        if sm.holds_nothing(r.member, at) {
            // The role's place in this row is a spare chunk or unused: it
            // holds no data or parity there (a whole-row read, as check's,
            // gets zeros).
            buf[r.at + o..r.at + o + len].fill(0);
            at = stop;
            continue;
        }
        let x = health.physical(r.member, at);
        let m = &members[x as usize];
        if let Err(e) = throttled(m, false, len as u64, || m.read_exact_at(&mut buf[r.at + o..r.at + o + len], at)) {
            return Some((x, e));
        }
        at = stop;
    }
    None
}

/// Writes `buf` at absolute `offset` of role `role` of `vol`: to the
/// role's device, or row by row to where each row lives when a
/// distributed spare holds it ([`Health::physical`]). Errors: the first
/// write's, with the member that failed it.
pub(crate) fn write_role(members: &[Member], health: &Health, role: u32, buf: &[u8], offset: u64) -> std::result::Result<(), (u32, Error)> {
    let Some(sm) = health.spare_map().filter(|_| health.held(role)) else {
        return write_member(&members[role as usize], buf, offset).map_err(|e| (role, e));
    };
    let (mut at, end) = (offset, offset + buf.len() as u64);
    while at < end {
        let stop = sm.row_end(at).min(end);
        if sm.holds_nothing(role, at) {
            at = stop; // the role's place in this row is a spare chunk or unused: nothing to keep
            continue;
        }
        let x = health.physical(role, at);
        let o = (at - offset) as usize;
        write_member(&members[x as usize], &buf[o..o + (stop - at) as usize], at).map_err(|e| (x, e))?;
        at = stop;
    }
    Ok(())
}

/// Fails every member of `errors` in `health` (the data path's rule for an
/// I/O error); the hook's own error is returned first.
pub(crate) fn fail_all(health: &Health, errors: Vec<(u32, Error)>) -> Result<()> {
    for (m, _) in errors {
        health.fail(m)?;
    }
    Ok(())
}

/// fdatasyncs the rebuilt member; on failure fails it.
pub(crate) fn sync(target: &Member, health: &Health, member: u32) -> Result<()> {
    let r = match filtered(target, Op::Flush, 0, 0) {
        Ok(_) => target.file().sync_data(),
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
    };
    if let Err(e) = r {
        health.fail(member)?;
        return Err(Error::io("cannot flush", std::path::Path::new(target.name()), e));
    }
    Ok(())
}
