//! The end of a RAID queue: `Drop` for `RaidQueue`. A normal drop lets
//! every request finish and reaps every piece the kernel still has (its
//! buffers are ours); after a panic in the queue's thread it only lets the
//! stripe locks go and reaps for a bounded time, leaking what the kernel
//! may still use; a failed ring is leaked with its buffers.

use io_uring::{opcode, types};

use super::{RaidQueue, CANCEL_TAG, POLL_TAG};
use crate::clock::now_ns;

impl Drop for RaidQueue {
    fn drop(&mut self) {
        let leak_ring = if std::thread::panicking() {
            // A panic in this queue's thread (perhaps inside this queue):
            // its state may be half updated, so run none of it. Let the
            // stripe locks go, so that other queues do not wait on them for
            // ever, reap what the kernel still does, and leak the buffers it
            // may still use if that takes too long.
            self.abandon_after_panic()
        } else if self.broken.is_some() {
            let mut sink = Vec::new();
            self.fail_everything(&mut sink);
            // Abandoned I/O may still name its (leaked) memory.
            true
        } else {
            self.drain_for_drop()
        };
        if !leak_ring {
            // SAFETY: the ring is closed once, here, and not used after;
            // nothing is left in the kernel (drained above).
            unsafe { self.ring.close() };
        }
    }
}

impl RaidQueue {
    /// The normal end of a queue: every request finishes, every piece is
    /// reaped. True when the ring failed meanwhile and must be leaked.
    fn drain_for_drop(&mut self) -> bool {
        // The kernel may still write into buffers we own: wait for every
        // piece before the slots are freed.
        let mut sink = Vec::new();
        // Every request in progress finishes first: plugged writes and
        // stripe operations waiting for a lock have no I/O in the kernel,
        // and completions an emulated drive holds back for its latency are
        // in no ring either; a stripe operation left half done would keep
        // its stripe lock for ever (the volume outlives this queue).
        while self.in_flight() > 0 && self.broken.is_none() {
            self.wait(1, &mut sink);
        }
        if std::env::var_os("URAID_DEBUG_QUEUE").is_some() {
            eprintln!("queue: {}", self.raid.debug_stats());
        }
        // The poll and its removal name no memory of ours: once only they
        // are left, waiting for them is a courtesy, bounded in time.
        let mut polls = 0;
        if self.poll_armed {
            let sqe = opcode::PollRemove::new(POLL_TAG).build().user_data(CANCEL_TAG);
            // SAFETY: names no memory.
            unsafe { self.push_sqe(sqe) };
            polls = 2;
        }
        let mut grace = 10;
        while self.ring.in_kernel() > 0 {
            if self.ring.in_kernel() <= polls {
                if grace == 0 {
                    break;
                }
                grace -= 1;
                let ts = types::Timespec::new().nsec(10_000_000);
                let _ = self.ring.submit_and_wait(Some(&ts));
            } else if let Err(e) = self.ring.submit_and_wait(None) {
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::ETIME | libc::EAGAIN | libc::ENOMEM)) {
                    self.ring_failed("waiting for the last completions", e);
                    self.fail_everything(&mut sink);
                    return true;
                }
            }
            self.reap(&mut sink);
        }
        // Release the members now rather than when the kernel gets round to
        // tearing the ring down, so the next opener does not find them busy.
        self.ring.unregister_files();
        self.broken.is_some()
    }
}

/// The `URAID_FAILPOINT_QUEUE_PANIC=OFFSET` failpoint (tests of a panic in
/// an engine thread): a write at volume byte OFFSET panics in the queue as
/// a member write of it completes (a RAID 1/10/5/6 stripe operation,
/// its stripe lock held). Only with the `failpoints` feature.
#[cfg(feature = "failpoints")]
pub(in crate::raid::engine) fn queue_panic_failpoint() -> Option<u64> {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| std::env::var("URAID_FAILPOINT_QUEUE_PANIC").ok()?.parse().ok())
}

impl RaidQueue {
    /// See the panic case of `Drop`. Reaps completions (only counting
    /// them) for up to 2 s; whatever is still in the kernel then keeps its
    /// buffers for ever (leaked).
    /// True when the ring must be leaked (not closed).
    fn abandon_after_panic(&mut self) -> bool {
        let vol = self.vol.clone();
        if self.in_flight() > 0 {
            vol.health().set_unclean();
        }
        self.raid.abandon(vol.locks(), false);
        let t0 = now_ns();
        let mut batch = [(0u64, 0i32); super::REAP_BATCH];
        while self.ring.in_kernel() > self.poll_armed as usize && now_ns() - t0 < 2_000_000_000 {
            let ts = types::Timespec::new().nsec(10_000_000);
            let _ = self.ring.submit_and_wait(Some(&ts));
            while self.ring.reap(&mut batch) > 0 {}
        }
        self.ring.unregister_files();
        if self.ring.in_kernel() > self.poll_armed as usize {
            for s in self.slots.iter_mut() {
                if let Some(b) = s.buf.take() {
                    std::mem::forget(b);
                }
            }
            self.raid.abandon(vol.locks(), true);
            // The ring stays open too: closing it would not stop the I/O.
            return true;
        }
        false
    }
}

