//! Whether this machine can make ublk devices, and if not, what is
//! missing and what to do, in words a user can act on: no driver
//! (module not loaded, or not built), a driver too old for user
//! recovery, no permission. Never a silent fallback to another export.

use libublk::ctrl::UblkCtrl;
use libublk::sys;

use crate::Error;

/// The ublk control device.
pub const CTRL_PATH: &str = "/dev/ublk-control";

/// What the driver offers that uraid uses.
#[derive(Debug, Clone, Copy)]
pub struct Features {
    /// The driver's feature bits (`UBLK_F_*`).
    pub bits: u64,
}

impl Features {
    /// Whether the driver takes UPDATE_SIZE (Linux 6.16+): a grown volume
    /// resizes the device live.
    pub fn update_size(&self) -> bool {
        self.bits & sys::UBLK_F_UPDATE_SIZE as u64 != 0
    }
    /// Whether commands may be ioctl-encoded.
    pub fn ioctl_encode(&self) -> bool {
        self.bits & sys::UBLK_F_CMD_IOCTL_ENCODE as u64 != 0
    }
    /// Whether the driver lets the server copy a request's data itself
    /// (UBLK_F_USER_COPY, Linux 6.5+): reads and writes of `/dev/ublkcN`
    /// at the tag's offset, which uraid has done by io_uring's workers,
    /// off the queue thread (see `queue.rs`).
    pub fn user_copy(&self) -> bool {
        self.bits & sys::UBLK_F_USER_COPY as u64 != 0
    }
}

/// The running kernel's release (`uname -r`), or "?".
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// Whether the kernel has a ublk_drv module file to load (or has it built in).
fn module_available(release: &str) -> bool {
    let base = std::path::Path::new("/lib/modules").join(release);
    if std::fs::read_to_string(base.join("modules.builtin")).is_ok_and(|s| s.lines().any(|l| l.ends_with("/ublk_drv.ko"))) {
        return true;
    }
    std::fs::read_to_string(base.join("modules.dep")).is_ok_and(|s| s.lines().any(|l| l.split(':').next().is_some_and(|m| m.contains("/ublk_drv.ko"))))
}

/// The user recovery features every device is made with.
pub const RECOVERY: u64 = (sys::UBLK_F_USER_RECOVERY | sys::UBLK_F_USER_RECOVERY_REISSUE) as u64;

/// Checks that a ublk device can be made here, and returns the driver's
/// features. Errors (each names what is missing and what to do): no
/// `/dev/ublk-control` (the module is not loaded, or the kernel has
/// none), no permission to open it, a driver that does not answer
/// GET_FEATURES (before Linux 6.5) or lacks user recovery.
pub fn check() -> Result<Features, Error> {
    let release = kernel_release();
    if !std::path::Path::new(CTRL_PATH).exists() {
        return Err(Error(if module_available(&release) {
            format!(
                "ublk: {CTRL_PATH} is missing: the ublk driver of this kernel (Linux {release}) is not loaded. \
                 Load it with `modprobe ublk_drv` (as root; add ublk_drv to /etc/modules-load.d/ to load it at boot) \
                 and serve again, or serve over NBD instead (--socket or --tcp, without --ublk)"
            )
        } else {
            format!(
                "ublk: {CTRL_PATH} is missing and this kernel (Linux {release}) has no ublk_drv module: ublk needs \
                 Linux 6.5 or later built with CONFIG_BLK_DEV_UBLK. Serve over NBD instead (--socket or --tcp, \
                 without --ublk; see the README for nbd-client or nbdfuse)"
            )
        }));
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(CTRL_PATH) {
        return Err(Error(match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => format!(
                "ublk: no permission to open {CTRL_PATH} ({e}): making a ublk device needs root \
                 (CAP_SYS_ADMIN); run `uraid serve` as root, or serve over NBD instead (--socket)"
            ),
            _ => format!("ublk: cannot open {CTRL_PATH}: {e}"),
        }));
    }
    let Some(bits) = UblkCtrl::get_features() else {
        return Err(Error(format!(
            "ublk: the ublk driver of this kernel (Linux {release}) is too old: it does not answer GET_FEATURES \
             (Linux 6.5 or later does). Upgrade the kernel, or serve over NBD instead (--socket or --tcp, without --ublk)"
        )));
    };
    if bits & RECOVERY != RECOVERY {
        return Err(Error(format!(
            "ublk: the ublk driver of this kernel (Linux {release}) has no user recovery \
             (UBLK_F_USER_RECOVERY and _REISSUE, features {bits:#x}), which keeps the device and its mounts \
             across a restart of uraid. Upgrade the kernel, or serve over NBD instead (--socket)"
        )));
    }
    Ok(Features { bits })
}
