//! Discard and zeroing support: a block device's queue limits from sysfs,
//! and what a member that refused a discard or a zeroing (EOPNOTSUPP) gets
//! instead (zeros written, discards dropped), said once on stderr.

use std::path::{Path, PathBuf};

use super::{Member, MemberKind};

impl Member {
    /// True once the member refused a discard or zeroing (fallocate(2)
    /// failed with EOPNOTSUPP: a loop device or file on a filesystem
    /// without hole punching, a drive without deallocate). Such a member
    /// is not failed: the engine writes zeros where it would have punched,
    /// and the NBD export turns clients' TRIMs into no-ops (as md turns
    /// discard off for an array whose member lacks it).
    pub fn no_fallocate(&self) -> bool {
        self.no_fallocate.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records that the member refused a discard or zeroing; says so once
    /// on stderr (the first time for this member).
    pub fn set_no_fallocate(&self) {
        if !self.no_fallocate.swap(true, std::sync::atomic::Ordering::Relaxed) {
            if self.kind == MemberKind::BlockDevice {
                // Its discards are real discards (see `discards`); what it
                // refused is a zeroing.
                eprintln!(
                    "uraid: warning: member {} refused a zeroing (fallocate: EOPNOTSUPP); it is not failed: \
                     zeroings write zeros on it from now on",
                    self.name
                );
                return;
            }
            eprintln!(
                "uraid: warning: member {} does not support discard (EOPNOTSUPP); it is not failed: \
                 discards and zeroings write zeros on it from now on, and TRIM from clients is ignored",
                self.name
            );
        }
    }

    /// A block device's discard and zeroing limits as sysfs gave them when
    /// it was opened; `None` for files and `mem:` drives (and for a block
    /// device whose sysfs directory could not be read).
    pub fn queue_limits(&self) -> Option<QueueLimits> {
        self.limits
    }

    /// Whether a discard sent to this member reaches the drive: a block
    /// device whose `discard_max_bytes` is not 0 and that has not refused
    /// one ([`set_no_discard`](Self::set_no_discard)); a file or `mem:`
    /// drive that has not refused hole punching ([`no_fallocate`](Self::no_fallocate)).
    pub fn discards(&self) -> bool {
        match self.kind {
            MemberKind::BlockDevice => {
                self.limits.is_none_or(|l| l.discard_max > 0) && !self.no_discard.load(std::sync::atomic::Ordering::Relaxed)
            }
            _ => !self.no_fallocate(),
        }
    }

    /// Whether a range of this member can be made to read back as zeros
    /// without writing zero bytes from memory: a block device with
    /// WRITE_ZEROES (`write_zeroes_max_bytes` not 0; without it the kernel
    /// writes pages of zeros), a file or `mem:` drive with hole punching;
    /// false once the member refused one ([`no_fallocate`](Self::no_fallocate)).
    pub fn zeroes_cheaply(&self) -> bool {
        let hw = self.kind != MemberKind::BlockDevice || self.limits.is_none_or(|l| l.write_zeroes_max > 0);
        hw && !self.no_fallocate()
    }

    /// Records that the block device refused a discard (EOPNOTSUPP) its
    /// limits promised; says so once on stderr. The member is not failed:
    /// discards to it are dropped from now on (a discard is a hint).
    pub fn set_no_discard(&self) {
        if !self.no_discard.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "uraid: warning: member {} refused a discard (EOPNOTSUPP) although its queue limits allow one; \
                 it is not failed: discards to it are dropped from now on, and TRIM from clients is ignored",
                self.name
            );
        }
    }
}

/// A block device's discard and zeroing limits (its request queue's, in
/// sysfs), which decide how the engine sends a discard or a zeroing to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// Largest discard the device takes at once, in bytes
    /// (`discard_max_bytes`); 0 when it does not discard.
    pub discard_max: u64,
    /// The unit the device discards in, in bytes (`discard_granularity`).
    pub discard_granularity: u64,
    /// Largest WRITE_ZEROES the device takes at once, in bytes
    /// (`write_zeroes_max_bytes`); 0 when it has none (many SATA SSDs,
    /// null_blk): a zeroing is then written as pages of zeros.
    pub write_zeroes_max: u64,
}

impl QueueLimits {
    /// The limits of the block device numbered `rdev` (major and minor),
    /// from `/sys/dev/block/MAJ:MIN/queue/` (a partition's are its
    /// disk's, one directory up). `None` when sysfs does not have them.
    pub fn of_device(rdev: u64) -> Option<QueueLimits> {
        let dev = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)));
        Self::read(&dev.join("queue")).or_else(|| Self::read(&dev.join("../queue")))
    }

    /// The limits in queue directory `dir` (`discard_max_bytes`,
    /// `discard_granularity`, `write_zeroes_max_bytes`, each a decimal
    /// number of bytes); `None` when the first two cannot be read. A
    /// missing `write_zeroes_max_bytes` (kernels before 4.10) reads as 0.
    pub fn read(dir: &Path) -> Option<QueueLimits> {
        let num = |f: &str| std::fs::read_to_string(dir.join(f)).ok()?.trim().parse::<u64>().ok();
        Some(QueueLimits {
            discard_max: num("discard_max_bytes")?,
            discard_granularity: num("discard_granularity")?,
            write_zeroes_max: num("write_zeroes_max_bytes").unwrap_or(0),
        })
    }
}
