//! Writing the bitmap to the members: the blocks that changed, to every
//! writable member, with RWF_DSYNC through a small io_uring of its own, and
//! a member whose bitmap write fails failed (as md does).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use io_uring::{opcode, types};

use super::{bits_bytes, new_ring, sleep_until, Bitmap, Io, BITMAP_OFFSET, BLOCK, HEADER_SIZE};
use crate::io::member::now_ns;
#[cfg(doc)]
use crate::raid::health::Health;
use crate::{bail, Error, ErrorKind, Result};

impl Bitmap {
    /// Writes the whole bitmap (header and bits, durably) to role `member`,
    /// e.g. a spare that joins the array. Errors: `InvalidInput` for a role
    /// out of range; `Io` (and the member is failed) when the write fails.
    pub fn write_to(&self, member: u32) -> Result<()> {
        if member as usize >= self.members.len() {
            bail!(InvalidInput, "member role {member} is out of range: the array has {} roles", self.members.len());
        }
        self.write_whole(Some(member))
    }

    /// Writes header and bits to `only`, or to every writable member.
    pub(super) fn write_whole(&self, only: Option<u32>) -> Result<()> {
        let mut io = self.lock_io();
        let blocks = bits_bytes(self.regions) / BLOCK;
        self.fill_blocks(&mut io, 0, blocks);
        self.write_members(&mut io, 0, HEADER_SIZE + blocks * BLOCK, only)
    }

    pub(super) fn lock_io(&self) -> MutexGuard<'_, Io> {
        self.io.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies bits blocks `[b0, b1)` of the image into the buffer.
    pub(super) fn fill_blocks(&self, io: &mut Io, b0: usize, b1: usize) {
        let words_per_block = BLOCK / 8;
        for w in b0 * words_per_block..b1 * words_per_block {
            let v = self.image.get(w).map_or(0, |x| x.load(Ordering::SeqCst));
            let at = HEADER_SIZE + w * 8;
            io.buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// fdatasyncs every writable member; one that fails is failed. Errors:
    /// `Io` when none succeeded.
    pub(super) fn sync_members(&self) -> Result<()> {
        let mut ok = 0;
        let mut last: Option<Error> = None;
        for (m, member) in self.members.iter().enumerate() {
            if !self.health.device_in_service(m as u32) {
                continue;
            }
            match member.file().sync_data() {
                Ok(()) => ok += 1,
                Err(e) => {
                    let _ = self.health.fail(m as u32);
                    last = Some(Error::io("cannot flush", std::path::Path::new(member.name()), e));
                }
            }
        }
        match last {
            Some(e) if ok == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Writes `io.buf[at..at+len]` to byte `BITMAP_OFFSET + at` of `only`
    /// or of every writable member, all at once, each with `RWF_DSYNC`.
    /// A member whose write fails is failed in [`Health`] (the hook's own
    /// error is ignored here: the member is out either way). Errors: `Io`
    /// when no member took it.
    pub(super) fn write_members(&self, io: &mut Io, at: usize, len: usize, only: Option<u32>) -> Result<()> {
        let targets: Vec<u32> = match only {
            Some(m) => vec![m],
            None => (0..self.members.len() as u32).filter(|&m| self.health.device_in_service(m)).collect(),
        };
        if targets.is_empty() {
            bail!(Io, "no writable member is left to hold the write-intent bitmap");
        }
        let offset = BITMAP_OFFSET + at as u64;
        let mut deadline = 0;
        let ptr = io.buf[at..].as_ptr();
        let mut results: Vec<i32> = vec![i32::MIN; self.members.len()];
        for chunk in targets.chunks(32) {
            {
                let mut sq = io.ring.submission();
                for &m in chunk {
                    let member = &self.members[m as usize];
                    if let Some(t) = member.throttle() {
                        deadline = deadline.max(t.admit(true, len as u64, now_ns()));
                    }
                    let e = opcode::Write::new(types::Fd(member.file().as_raw_fd()), ptr, len as u32)
                        .offset(offset)
                        .rw_flags(libc::RWF_DSYNC)
                        .build()
                        .user_data(m as u64);
                    // SAFETY: the buffer (io.buf, borrowed mutably through
                    // `io` for this whole call) and the descriptors (owned
                    // by self.members) stay valid until every completion is
                    // reaped below; the ring has 64 entries and at most 32
                    // are pushed between reaps.
                    unsafe { sq.push(&e).expect("ring has room for 32 entries") };
                }
            }
            let mut reaped = 0;
            while reaped < chunk.len() {
                if let Err(e) = io.ring.submit_and_wait(chunk.len() - reaped) {
                    if e.raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    // Entries may still be in flight: retire this ring (its
                    // late completions must not be taken for the next
                    // call's) and give up on this write.
                    if let Ok(r) = new_ring() {
                        io.ring = r;
                    }
                    return Err(Error::new(ErrorKind::Io, format!("io_uring failed for the write-intent bitmap: {e}")));
                }
                for cqe in io.ring.completion() {
                    results[cqe.user_data() as usize] = cqe.result();
                    reaped += 1;
                }
            }
        }
        sleep_until(deadline);
        let mut ok = 0;
        let mut last = String::new();
        for &m in &targets {
            let r = results[m as usize];
            if r == len as i32 {
                ok += 1;
                continue;
            }
            last = if r < 0 {
                format!("{}: {}", self.members[m as usize].name(), std::io::Error::from_raw_os_error(-r))
            } else {
                format!("{}: short write of {r} bytes out of {len}", self.members[m as usize].name())
            };
            let _ = self.health.fail(m);
        }
        if ok == 0 {
            bail!(Io, "cannot write the write-intent bitmap at offset {offset} to any member (last: {last})");
        }
        Ok(())
    }
}
