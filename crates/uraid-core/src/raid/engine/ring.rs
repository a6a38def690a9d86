//! The engine's io_uring as a type of its own ([`Ring`]): set up once per
//! [`RaidQueue`](super::RaidQueue) with the member descriptors registered
//! (fixed files), it takes submission entries, hands them to the kernel in
//! one `io_uring_enter` per batch, waits (with or without a deadline) and
//! gives the completions back in batches, updating the completion queue's
//! head once per batch. It counts what the kernel still holds, so the queue
//! knows when it may free its buffers. It knows nothing of requests,
//! pieces or members beyond their descriptors.

use std::mem::ManuallyDrop;
use std::os::fd::RawFd;

use io_uring::{squeue, types, IoUring};

use crate::{Error, ErrorKind, Result};

/// Completions taken from the ring per pass of [`Ring::reap`] (the head of
/// the completion queue is written back once per pass).
pub(super) const REAP_BATCH: usize = 32;

/// One engine thread's io_uring.
pub(super) struct Ring {
    /// Closed by [`close`](Self::close), or leaked when the kernel may
    /// still be doing I/O into memory of the queue's.
    uring: ManuallyDrop<IoUring>,
    /// Entries handed to the ring whose completion was not reaped yet.
    in_kernel: usize,
    /// Entries pushed since the last submit.
    unsubmitted: usize,
}

impl Ring {
    /// A ring for `depth` requests over `members` members whose descriptors
    /// `fds` are registered as fixed files 0..n (entries name a member by
    /// its index: `types::Fixed(member)`).
    ///
    /// Errors: `Unsupported` when the kernel has no io_uring (or it is
    /// disabled), or refuses to register the descriptors.
    pub(super) fn new(depth: usize, fds: &[RawFd]) -> Result<Ring> {
        let entries = (depth * fds.len().min(8)).next_power_of_two().clamp(64, 4096) as u32;
        // A queue belongs to the thread that made it (it is not Send), so
        // the ring can be single-issuer with task work deferred to our own
        // waits: completions then cost no interrupt of this thread (Linux
        // 6.1+; older kernels get a plain ring).
        let uring = IoUring::builder()
            .setup_cqsize(entries * 4)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::builder().setup_cqsize(entries * 4).build(entries))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unsupported,
                    format!("cannot set up io_uring (needs Linux 5.11 or newer, and io_uring not disabled by sysctl): {e}"),
                )
            })?;
        uring
            .submitter()
            .register_files(fds)
            .map_err(|e| Error::new(ErrorKind::Unsupported, format!("cannot register member files with io_uring: {e}")))?;
        Ok(Ring { uring: ManuallyDrop::new(uring), in_kernel: 0, unsubmitted: 0 })
    }

    /// Entries handed to the ring whose completion was not reaped yet.
    #[inline]
    pub(super) fn in_kernel(&self) -> usize {
        self.in_kernel
    }

    /// True when entries were pushed since the last submit.
    #[inline]
    pub(super) fn has_unsubmitted(&self) -> bool {
        self.unsubmitted > 0
    }

    /// Puts `sqe` in the submission queue; false when it is full (submit,
    /// then push again).
    ///
    /// # Safety
    /// Every pointer in `sqe` must stay valid until its completion is reaped.
    #[inline]
    pub(super) unsafe fn push(&mut self, sqe: &squeue::Entry) -> bool {
        // SAFETY: guaranteed by the caller.
        if unsafe { self.uring.submission().push(sqe) }.is_err() {
            return false;
        }
        self.unsubmitted += 1;
        self.in_kernel += 1;
        true
    }

    /// Hands what was pushed to the kernel (one `io_uring_enter`).
    /// Errors: the system call's (EINTR, EBUSY: the completion queue is
    /// full; EAGAIN, ENOMEM: short of memory for a moment; others: for good).
    #[inline]
    pub(super) fn submit(&mut self) -> std::io::Result<()> {
        self.uring.submit()?;
        self.unsubmitted = 0;
        Ok(())
    }

    /// Submits what was pushed and waits for at least one completion, up
    /// to `timeout` (none: for ever), in one `io_uring_enter`. Errors: the
    /// system call's (ETIME when the timeout passed).
    pub(super) fn submit_and_wait(&mut self, timeout: Option<&types::Timespec>) -> std::io::Result<()> {
        let r = match timeout {
            None => self.uring.submit_and_wait(1),
            Some(ts) => {
                let args = types::SubmitArgs::new().timespec(ts);
                self.uring.submitter().submit_with_args(1, &args)
            }
        };
        self.unsubmitted = 0;
        r.map(drop)
    }

    /// Takes up to [`REAP_BATCH`] completions (user data, result) into
    /// `batch`, in one pass over the completion queue; returns how many.
    #[inline]
    pub(super) fn reap(&mut self, batch: &mut [(u64, i32); REAP_BATCH]) -> usize {
        let mut cq = self.uring.completion();
        let mut n = 0;
        while n < REAP_BATCH {
            let Some(c) = cq.next() else { break };
            batch[n] = (c.user_data(), c.result());
            n += 1;
        }
        drop(cq);
        self.in_kernel -= n;
        n
    }

    /// Forgets every entry in the kernel (a ring given up: whatever the
    /// kernel still does names only leaked memory).
    pub(super) fn abandon(&mut self) {
        self.in_kernel = 0;
        self.unsubmitted = 0;
    }

    /// Releases the member descriptors now rather than when the kernel
    /// gets round to tearing the ring down, so the next opener does not
    /// find them busy.
    pub(super) fn unregister_files(&self) {
        let _ = self.uring.submitter().unregister_files();
    }

    /// Closes the ring.
    ///
    /// # Safety
    /// Called once, and the ring is not used after; nothing the kernel
    /// still does may name memory that is freed after.
    pub(super) unsafe fn close(&mut self) {
        // SAFETY: guaranteed by the caller.
        unsafe { ManuallyDrop::drop(&mut self.uring) };
    }
}
