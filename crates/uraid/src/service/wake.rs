//! The pipe `uraid serve`'s stop watcher sleeps on, and the wake-up
//! that signal handlers, the control socket's and the console's `stop`
//! and a takeover's hand-over write to it (so the idle server needs no
//! polling loop; see crate::serve). Below both the service and serve,
//! which both wake it.

use std::sync::atomic::{AtomicI32, Ordering};

/// The pipe the stop watcher of `serve` sleeps on (read end, write end;
/// -1 before [`make_pipe`] made it).
static WAKE_PIPE: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];

/// Wakes the stop watcher of `serve` at once (a signal, a `stop` command)
/// rather than at its next check (seconds later). Async-signal-safe.
pub(crate) fn wake() {
    let fd = WAKE_PIPE[1].load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) of one byte from a valid buffer to our pipe; it
        // is async-signal-safe, and errno is restored for the thread the
        // signal interrupted. A full pipe (EAGAIN) means a wake is pending.
        unsafe {
            let errno = *libc::__errno_location();
            let _ = libc::write(fd, [1u8].as_ptr().cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// Waits until [`wake`] is called or `timeout` passes; drains the pipe.
pub(crate) fn wait_wake(timeout: std::time::Duration) {
    let fd = WAKE_PIPE[0].load(Ordering::Relaxed);
    let ms = if fd >= 0 { timeout.as_millis().min(i32::MAX as u128) as i32 } else { 50 };
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd (a negative fd is ignored by poll), count 1.
    unsafe { libc::poll(&mut pfd, 1, ms) };
    let mut buf = [0u8; 64];
    // SAFETY: read into a valid 64-byte buffer from our non-blocking pipe.
    while fd >= 0 && unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Makes the pipe (once; before the signal handlers are installed). A
/// failure leaves [`wait_wake`] polling every 50 ms instead.
pub(crate) fn make_pipe() {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into a valid 2-element array.
    if WAKE_PIPE[0].load(Ordering::Relaxed) < 0 && unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0 {
        WAKE_PIPE[1].store(fds[1], Ordering::Relaxed);
        WAKE_PIPE[0].store(fds[0], Ordering::Relaxed);
    }
}
