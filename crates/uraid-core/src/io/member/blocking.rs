//! The blocking helpers of the control path: reads and durable writes of
//! superblocks, signatures, the bitmap and journal records, outside the
//! engine's io_uring, with the member's filters applied as on the data path.

use std::path::Path;

use super::{Member, Verdict};
use crate::io::request::Op;
use crate::{Error, Result};

impl Member {
    /// The filters' verdict on a blocking I/O, as a `Result`; a torn
    /// write is done in part here and then reported failed.
    pub(super) fn injected(&self, op: Op, offset: u64, buf: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        // The blocking helpers' writes are synced (superblocks) or
        // RWF_DSYNC (the bitmap): durable.
        let errno = match self.filter_verdict(op, offset, buf.len() as u64, true) {
            Verdict::Pass => return Ok(()),
            Verdict::Fail(errno) => errno,
            Verdict::Tear(n) => {
                let _ = self.file.write_all_at(&buf[..n], offset);
                libc::EIO
            }
        };
        Err(Error::io(
            &format!("cannot {} {} bytes at offset {offset} of", if op == Op::Read { "read" } else { "write" }, buf.len()),
            Path::new(&self.name),
            std::io::Error::from_raw_os_error(errno),
        ))
    }

    /// Reads exactly `buf.len()` bytes at byte `offset` (control path:
    /// superblocks and signatures). `buf` must be an aligned [`crate::IoBuf`]
    /// region when the member is O_DIRECT.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.injected(Op::Read, offset, buf)?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| Error::io(&format!("cannot read {} bytes at offset {offset} of", buf.len()), Path::new(&self.name), e))
    }

    /// Writes all of `buf` at byte `offset` and makes it durable (control
    /// path). Same alignment rule as [`read_exact_at`](Self::read_exact_at).
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.injected(Op::Write, offset, buf)?;
        self.file
            .write_all_at(buf, offset)
            // A null drive (/dev/zero) keeps nothing and has no fsync.
            .and_then(|_| if self.is_null() { Ok(()) } else { self.file.sync_data() })
            .map_err(|e| Error::io(&format!("cannot write {} bytes at offset {offset} of", buf.len()), Path::new(&self.name), e))
    }

    /// Writes all of `buf` at byte `offset` in one `pwritev2` with
    /// `RWF_DSYNC`: durable when it returns (FUA on a drive), without a
    /// flush of the rest of the device (the journal's record writes). Same
    /// alignment rule as [`read_exact_at`](Self::read_exact_at); fault
    /// plans apply. Errors: `Io` (a short write counts as one).
    pub fn write_dsync_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.write_dsync_vectored_at(&[buf], offset)
    }

    /// As [`write_dsync_at`](Self::write_dsync_at), for the buffers `bufs`
    /// back to back from `offset`, in one `pwritev2(RWF_DSYNC)` (at most
    /// `IOV_MAX` buffers): the journal's group commit writes a run of
    /// records without copying them together. An injected fault sees it
    /// as one write of their total length. Errors: as `write_dsync_at`.
    pub fn write_dsync_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let what = || format!("cannot write {total} bytes at offset {offset} of");
        let errno = match self.filter_verdict(Op::Write, offset, total as u64, true) {
            Verdict::Pass => None,
            Verdict::Fail(errno) => Some(errno),
            Verdict::Tear(n) => {
                // As one write of the buffers copied together, torn.
                use std::os::unix::fs::FileExt;
                let mut one = Vec::with_capacity(total);
                bufs.iter().for_each(|b| one.extend_from_slice(b));
                let _ = self.file.write_all_at(&one[..n.min(total)], offset);
                Some(libc::EIO)
            }
        };
        if let Some(errno) = errno {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::from_raw_os_error(errno)));
        }
        let Ok(off) = libc::off_t::try_from(offset) else {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::from_raw_os_error(libc::EINVAL)));
        };
        let iov: Vec<libc::iovec> = bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }).collect();
        let Ok(count) = libc::c_int::try_from(iov.len()) else {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::from_raw_os_error(libc::EINVAL)));
        };
        // SAFETY: `iov` names the buffers of `bufs`, which outlive the
        // call, on the descriptor this member owns.
        let n = unsafe { libc::pwritev2(self.file.as_raw_fd(), iov.as_ptr(), count, off, libc::RWF_DSYNC) };
        if n < 0 {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::last_os_error()));
        }
        if n as usize != total {
            return Err(Error::io(&what(), Path::new(&self.name), std::io::Error::other("short write")));
        }
        Ok(())
    }
}
