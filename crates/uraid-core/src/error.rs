//! The one error type of the engine.
//!
//! Every error has a stable [`ErrorKind`] (what callers match on, and what the
//! NBD export turns into an errno with [`Error::errno`]) and a message written
//! for the person at the keyboard: what was wrong and what to do about it.
//! Errors a user can cause are raised before anything is written.

use std::io;
use std::path::Path;

/// Stable classification of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Arguments or a request are malformed (bad chunk size, misaligned I/O).
    InvalidInput,
    /// A member or the array is in use by another uraid process (lock held).
    Busy,
    /// A member holds data we would destroy (superblock, filesystem) and no
    /// `--force` was given.
    WouldDestroy,
    /// A member's superblock is missing, corrupt or belongs to another array.
    Superblock,
    /// The set of members given does not form a complete array.
    Membership,
    /// A member is too small for the requested layout.
    TooSmall,
    /// An I/O to a member failed (the OS errno is kept).
    Io,
    /// An I/O past the end of the device.
    OutOfRange,
    /// The platform lacks something the engine needs (io_uring, O_DIRECT).
    Unsupported,
    /// A long operation (a rebuild) was asked to stop; its progress is kept.
    Interrupted,
}

/// The engine's error: a kind, a message for humans, and the OS errno when
/// one caused it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{msg}")]
pub struct Error {
    kind: ErrorKind,
    msg: String,
    errno: Option<i32>,
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Builds an error of `kind` with a human message.
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Self {
        Error { kind, msg: msg.into(), errno: None }
    }

    /// Wraps an OS error met while doing `what` on `path`.
    pub fn io(what: &str, path: &Path, e: io::Error) -> Self {
        let errno = e.raw_os_error();
        let kind = match errno {
            Some(libc::EBUSY) | Some(libc::EWOULDBLOCK) => ErrorKind::Busy,
            Some(libc::EINVAL) => ErrorKind::InvalidInput,
            _ => ErrorKind::Io,
        };
        Error { kind, msg: format!("{what} {}: {e}", path.display()), errno }
    }

    /// Wraps a negative errno returned by an io_uring completion.
    pub fn from_errno(what: impl Into<String>, errno: i32) -> Self {
        let e = io::Error::from_raw_os_error(errno);
        Error { kind: ErrorKind::Io, msg: format!("{}: {e}", what.into()), errno: Some(errno) }
    }

    /// True when this member I/O error means the device is failing, so the
    /// member must be failed (md fails a member on any write error; uraid
    /// tells apart the errors that say nothing about the device). Not a
    /// device failure: EOPNOTSUPP/ENOTSUP (the device lacks the operation:
    /// discard and write-zeroes fall back, see the engine), EINVAL,
    /// EOVERFLOW, EFAULT, EBADF (the request was wrong for the device, a
    /// bug to report, not a drive to replace), ENOMEM, EAGAIN, EINTR,
    /// ECANCELED (the system was short of something or gave up for its own
    /// reasons). Everything else of kind `Io` is: EIO, ENODEV, ENXIO,
    /// ETIMEDOUT, EREMOTEIO, ENOLINK, ENODATA (a medium error), EILSEQ
    /// (a protection information error), ENOSPC (a file member whose
    /// filesystem is full cannot hold its copy: failing it keeps the
    /// others consistent, as md does for any write error), EROFS, EPERM,
    /// and errors with no errno (a member shorter than its superblock).
    pub fn is_device_failure(&self) -> bool {
        if self.kind != ErrorKind::Io {
            return false;
        }
        !matches!(
            self.errno,
            Some(
                libc::EOPNOTSUPP
                    | libc::EINVAL
                    | libc::EOVERFLOW
                    | libc::EFAULT
                    | libc::EBADF
                    | libc::ENOMEM
                    | libc::EAGAIN
                    | libc::EINTR
                    | libc::ECANCELED
            )
        )
    }

    /// The stable kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The errno an I/O failing with this error completes with (for the NBD
    /// export and for callers that speak POSIX): the OS errno when there was
    /// one, otherwise a fixed mapping of the kind.
    pub fn errno(&self) -> i32 {
        if let Some(e) = self.errno {
            return e;
        }
        match self.kind {
            ErrorKind::InvalidInput => libc::EINVAL,
            ErrorKind::Busy => libc::EBUSY,
            ErrorKind::OutOfRange => libc::ENOSPC,
            ErrorKind::Unsupported => libc::EOPNOTSUPP,
            ErrorKind::Interrupted => libc::EINTR,
            ErrorKind::WouldDestroy
            | ErrorKind::Superblock
            | ErrorKind::Membership
            | ErrorKind::TooSmall
            | ErrorKind::Io => libc::EIO,
        }
    }
}

/// The message of a caught panic's payload (a `&str` or a `String`, as
/// `panic!` makes them).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Builds an `Err(Error::new(kind, format!(...)))`.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::Error::new($crate::ErrorKind::$kind, format!($($arg)*)))
    };
}
