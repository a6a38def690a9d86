//! The file and block device kinds: opening a path with O_DIRECT (buffered
//! I/O where the filesystem refuses it), retrying a device that is busy for
//! a moment, and the size and alignment each kind has.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Once;

use super::lock::BUSY_RETRIES;
use super::{Member, MemberKind, OpenMode, QueueLimits};
use crate::{bail, Error, Result};

static BUFFERED_WARNING: Once = Once::new();

impl Member {
    pub(super) fn open_path(p: &Path, mode: OpenMode) -> Result<Member> {
        let md = std::fs::metadata(p).map_err(|e| Error::io("cannot open member", p, e))?;
        let ft = md.file_type();
        let kind = if ft.is_block_device() {
            MemberKind::BlockDevice
        } else if ft.is_file() {
            MemberKind::File
        } else {
            bail!(InvalidInput, "member {} is neither a regular file nor a block device", p.display());
        };
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(mode.write);
            let mut flags = libc::O_CLOEXEC;
            if direct {
                flags |= libc::O_DIRECT;
            }
            if mode.exclusive && kind == MemberKind::BlockDevice {
                flags |= libc::O_EXCL;
            }
            o.custom_flags(flags).open(p)
        };
        // A process that just exited may still hold the device for a few
        // milliseconds while the kernel tears its io_uring down: retry a
        // busy device briefly before calling it in use.
        let open = |direct: bool| {
            let mut tries = 0;
            loop {
                match open(direct) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < BUSY_RETRIES => {
                        tries += 1;
                        crate::clock::sleep(std::time::Duration::from_millis(20));
                    }
                    r => return r,
                }
            }
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                BUFFERED_WARNING.call_once(|| {
                    eprintln!(
                        "uraid: warning: the filesystem of {} refuses O_DIRECT; using buffered I/O \
                         with fdatasync on flush (figures include the page cache)",
                        p.display()
                    )
                });
                (open(false).map_err(|e| Error::io("cannot open member", p, e))?, false)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => bail!(
                Busy,
                "member {} is in use (mounted, or held by another uraid process or an md/dm \
                 device); unmount it or stop that process first",
                p.display()
            ),
            Err(e) => return Err(Error::io("cannot open member", p, e)),
        };
        let (size, block_size) = if kind == MemberKind::BlockDevice {
            block_device_geometry(&file, p)?
        } else {
            (md.len(), if direct { file_dio_align(&file) } else { 512 })
        };
        let limits = (kind == MemberKind::BlockDevice).then(|| QueueLimits::of_device(md.rdev())).flatten();
        let mut m = Member {
            name: p.display().to_string(),
            file,
            kind,
            size,
            direct,
            block_size,
            throttle: None,
            filters: Vec::new(),
            no_fallocate: Default::default(),
            limits,
            no_discard: Default::default(),
            held: None,
        };
        if mode.exclusive {
            m.lock()?;
        }
        Ok(m)
    }
}

fn block_device_geometry(file: &File, p: &Path) -> Result<(u64, u32)> {
    // From <linux/fs.h>: BLKGETSIZE64 = _IOR(0x12, 114, size_t), BLKSSZGET = _IO(0x12, 104).
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    const BLKSSZGET: libc::c_ulong = 0x1268;
    let mut size: u64 = 0;
    let mut ssz: libc::c_int = 0;
    // SAFETY: both ioctls write one integer of the given type through the pointer.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if r != 0 {
        return Err(Error::io("cannot get the size of", p, std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut ssz as *mut libc::c_int) };
    if r != 0 || ssz <= 0 {
        ssz = 512;
    }
    Ok((size, ssz as u32))
}

/// The offset and length alignment O_DIRECT I/O on `file` needs (statx
/// `STATX_DIOALIGN`, Linux 6.1; 512 when the kernel or filesystem does not
/// say), at least 512 and at most 64 KiB: a file on a filesystem over 4Kn
/// storage needs 4096.
fn file_dio_align(file: &File) -> u32 {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx on a valid descriptor with an empty path and
    // AT_EMPTY_PATH writes only into `stx`, which outlives the call.
    let r = unsafe { libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return 512;
    }
    let a = stx.stx_dio_offset_align;
    if a.is_power_of_two() {
        a.clamp(512, 64 << 10)
    } else {
        512
    }
}
